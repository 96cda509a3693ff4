"""The parse worker (issue 7): modules the gate rounds will load are parsed in another process
and sent back pickled (dumps_parsed / loads_parsed), with lazy bodies still lazy. What the index
gets from it must be exactly the in-process parse."""
from __future__ import annotations

from pathlib import Path

from archaudit.parsing.python_ir import LazyFields, N, dumps_parsed, loads_parsed, parse_python
from archaudit.workers import ParsePool
from archaudit.python.index import Index
from archaudit.sources import DirSource

from conftest import FIXTURES
from test_lazy_ir import _force_all, _plain, fixture_python_files


def _lazy_defs(body) -> list[N]:
    """Every def whose body is not converted yet."""
    out, stack = [], [body]
    while stack:
        v = stack.pop()
        if isinstance(v, N):
            if isinstance(v.f, LazyFields) and v.f.is_pending:
                out.append(v)
            stack.extend(dict.values(v.f))
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
    return out


def _pending(body) -> list[tuple[int, tuple]]:
    """(start byte, where the def is) of every def whose body is not converted yet."""
    return sorted((n.sb, n.f.pending[1:]) for n in _lazy_defs(body))


def test_a_parse_sent_to_another_process_is_the_parse():
    pending = 0
    for p in fixture_python_files():
        data = p.read_bytes()
        for shallow in (False, True):
            made = parse_python(data, shallow=shallow, lazy=True)
            got = loads_parsed(dumps_parsed(made), data, shallow)
            assert got.src is data and got.shallow == shallow and got.errors == made.errors, p
            # the same IR, and the same bodies still to convert, from the same source bytes
            assert _plain(got.body) == _plain(made.body), p
            assert _pending(got.body) == _pending(made.body), p
            pending += len(_pending(got.body))
            assert all(n.f.pending[0] is data for n in _lazy_defs(got.body))
            # and converting them gives the same bodies
            _force_all(made.body)
            _force_all(got.body)
            assert _plain(got.body) == _plain(made.body), p
    assert pending > 300


def _index(tree: Path) -> Index:
    source = DirSource(tree)
    return Index(source, [f for f in source.files() if f.endswith(".py")])


def test_the_index_takes_the_workers_parses_and_they_are_its_own():
    tree = FIXTURES / "verdicts"
    here, pooled = _index(tree), _index(tree)
    pool = pooled.parse_pool = ParsePool.start(pooled.source)
    assert pool is not None
    try:
        names = sorted(pooled.path_of)
        assert len(names) > 10
        pooled.prefetch(names)
        assert pool.receive(timeout=120) == 0
        for name in names:
            a, b = here.module(name), pooled.module(name)
            assert _plain(b.parsed.body) == _plain(a.parsed.body), name
            assert b.parsed.errors == a.parsed.errors and b.parsed.shallow == a.parsed.shallow is False
            assert sorted(b.functions) == sorted(a.functions), name
        # an empty file is not sent
        assert (pool.taken, pool.parsed_here) == (sum(1 for n in names if pooled.source_bytes(n)), 0) > (10, 0)
        assert here.diagnostics == pooled.diagnostics
    finally:
        pool.close()


def test_a_module_parsed_here_first_is_skipped_by_the_worker():
    idx = _index(FIXTURES / "verdicts")
    pool = idx.parse_pool = ParsePool.start(idx.source)
    try:
        first, second = sorted(idx.path_of)[:2]
        path, data = idx.path_of[first], idx.source_bytes(first)
        pool.want(path, data, shallow=False)
        assert pool.take(path, data, shallow=False) is None  # not sent yet: claimed, parsed here
        assert pool.parsed_here == 1
        idx.prefetch([second])  # sent after the claimed one: the worker goes in order
        assert pool.receive(timeout=120) == 0
        assert len(pool.done) == 1 and idx.module(second) is not None
        assert (pool.taken, pool.parsed_here, pool.done) == (1, 1, {})
    finally:
        pool.close()


def test_a_lost_worker_leaves_the_parsing_to_this_process():
    """A worker killed (out of memory, a crash) even halfway through sending a result: reading
    ends with EOF, not a wait, and every module is parsed here, to the same IR."""
    tree = FIXTURES / "verdicts"
    here, pooled = _index(tree), _index(tree)
    pool = pooled.parse_pool = ParsePool.start(pooled.source)
    try:
        names = sorted(pooled.path_of)
        pooled.prefetch(names)
        pool.proc.kill()
        pool.proc.join()
        pool.receive(timeout=60)  # reads what was sent, then EOF
        assert pool.results is None
        for name in names:
            assert _plain(pooled.module(name).parsed.body) == _plain(here.module(name).parsed.body), name
        assert pool.taken + pool.parsed_here == sum(1 for n in names if pooled.source_bytes(n))
    finally:
        pool.close()
