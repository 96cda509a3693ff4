"""The value domain's per-GPU operations (archaudit.python.values): the shortcuts that compute
a value shared by every GPU once must give what the computation GPU by GPU gives."""
from __future__ import annotations

import itertools
import operator

from archaudit.python.values import (
    AV,
    ENV,
    OPAQUE,
    Domain,
    Unres,
    has_unres,
    may_false,
    may_true,
    truth_pairs,
)


def _gpu_by_gpu(av_sets: list[tuple], op) -> AV:
    """op applied to each GPU alone (a one-GPU domain, where no set is shared with another GPU),
    the results put side by side: what the n-GPU operation must give."""
    one = Domain(1)
    return AV(tuple(op(one, *(AV((s,)) for s in sets)).sets[0] for sets in zip(*av_sets)))


def _avs(n: int) -> list[AV]:
    one, nine, twelve = frozenset({1}), frozenset({9}), frozenset({12})
    return [
        AV((one,) * n),  # one set object for every GPU, as Domain.const makes it
        AV(tuple(frozenset({1}) for _ in range(n))),  # equal sets, distinct objects
        AV(tuple(nine if i % 2 else twelve for i in range(n))),
        AV(tuple(frozenset({Unres("r1")}) if i == 0 else frozenset({OPAQUE, 3}) for i in range(n))),
        AV((frozenset({ENV, 0}),) * n),
        AV(tuple(frozenset({Unres(f"r{i % 3}"), i}) for i in range(n))),
    ]


def test_map1_and_map2_equal_the_computation_gpu_by_gpu():
    for n in (1, 2, 12):
        dom = Domain(n)
        avs = _avs(n)
        for a, b in itertools.product(avs, avs):
            for f in (operator.add, operator.floordiv, operator.eq):
                assert dom.map2(a, b, f) == _gpu_by_gpu([a.sets, b.sets], lambda d, x, y: d.map2(x, y, f)), (n, a, b, f)
        for a in avs:
            for g in (lambda v: v * 2, lambda v: 1 // v):
                assert dom.map1(a, g) == _gpu_by_gpu([a.sets], lambda d, x: d.map1(x, g)), (n, a)


def test_truth_pairs_and_has_unres_equal_the_computation_gpu_by_gpu():
    for a in _avs(12):
        assert truth_pairs(a.sets) == [(may_true(s), may_false(s)) for s in a.sets]
        reasons = []
        for s in a.sets:
            for v in s:
                if isinstance(v, Unres) and v.reason not in reasons:
                    reasons.append(v.reason)
        assert has_unres(a) == reasons
    assert has_unres(_avs(12)[5]) == ["r0", "r1", "r2"]


def test_uniform_is_equal_sets_on_every_gpu():
    got = [a.uniform for a in _avs(12)]
    assert got == [all(s == a.sets[0] for s in a.sets) for a in _avs(12)]
    assert got == [True, True, False, False, True, False]
