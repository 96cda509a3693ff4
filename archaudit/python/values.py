"""The value domain of the gate evaluator.

Every expression is evaluated *pointwise over the GPU targets*: an abstract value (AV) holds, for
each GPU of rules/targets.toml, the set of concrete values the expression may take on that GPU.
`get_device_capability()` is (9, 0) on sm_90 and (12, 0) on sm_120, so `major in (9, 10)` simply
evaluates to True on some GPUs and False on others; the set of GPUs where a condition may be
true is the set it admits. Values that come from the environment (CUDA version, env vars,
unknown library calls) are OPAQUE; values that may depend on the GPU but could not be followed
are Unres(reason).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


class _Opaque:
    """Unknown, but not dependent on the GPU (environment, configuration, unknown library)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "OPAQUE"

    def __reduce__(self):
        return (_opaque, ())


def _opaque():
    return OPAQUE


OPAQUE = _Opaque.__new__(_Opaque)


class _Env:
    """An unknown condition from the environment (CUDA version, env var): may be true or false."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ENV"

    def __reduce__(self):
        return (_env, ())


def _env():
    return ENV


ENV = _Env.__new__(_Env)


class _Falsy:
    """Unknown, not dependent on the GPU, and falsy: what `x and y` is when an unknown x stops it.
    Anything computed from it is OPAQUE."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "FALSY"

    def __reduce__(self):
        return (_falsy, ())


def _falsy():
    return FALSY


FALSY = _Falsy.__new__(_Falsy)


@dataclass(frozen=True)
class Unres:
    """Unknown, and possibly dependent on the GPU: the analysis could not follow it."""

    reason: str


@dataclass(frozen=True)
class FuncRef:
    module: str
    qual: str  # qualified name inside the module, e.g. "PlatformContext.__getattr__"
    key: int  # identity of the definition (start byte), distinguishes redefinitions

    @property
    def fullname(self) -> str:
        return f"{self.module}.{self.qual}"


@dataclass(frozen=True)
class ClassRef:
    module: str
    qual: str

    @property
    def fullname(self) -> str:
        return f"{self.module}.{self.qual}"


@dataclass(frozen=True)
class ModuleRef:
    name: str


@dataclass(frozen=True)
class ExtRef:
    """A name from outside the scanned code, e.g. torch.cuda.get_device_capability."""

    dotted: str


@dataclass(frozen=True)
class Instance:
    cls: ClassRef


@dataclass(frozen=True)
class BoundMethod:
    func: FuncRef
    self_value: Any


@dataclass(frozen=True)
class Partial:
    func: Any
    args: tuple  # of AV
    kwargs: tuple  # of (name, AV)


@dataclass(frozen=True)
class ArchFlags:
    """nvcc flags whose target list depends on the GPU: get_nvcc_flags_list(supported_major_versions=...)."""

    admits: frozenset


@dataclass(frozen=True)
class TvmTarget:
    """A TVM Target (rules/gates.toml [tvm_target]): its kind ("cuda", "llvm", ...) and, for a
    CUDA target, its arch string ("sm_90a"; None when not known)."""

    kind: str
    arch: str | None


class FrozenDict:
    __slots__ = ("items", "_h")

    def __init__(self, items: tuple):
        self.items = items
        self._h = None

    def get(self, k, default=None):
        for kk, v in self.items:
            if kk == k:
                return v
        return default

    def __contains__(self, k) -> bool:
        return any(kk == k for kk, _ in self.items)

    def __eq__(self, o) -> bool:
        return isinstance(o, FrozenDict) and self.items == o.items

    def __hash__(self) -> int:
        if self._h is None:
            self._h = hash(self.items)
        return self._h

    def __bool__(self) -> bool:
        return bool(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def __repr__(self) -> str:
        return f"FrozenDict({dict(self.items)!r})"


MAX_POSSIBILITIES = 12
UNKNOWN_SET = frozenset((OPAQUE,))
ENV_SET = frozenset((ENV,))
_ENV_UNKNOWNS = frozenset((OPAQUE, FALSY))


def cap(s: frozenset) -> frozenset:
    if len(s) > MAX_POSSIBILITIES:
        unres = [v for v in s if isinstance(v, Unres)]
        return frozenset(unres[:1]) | UNKNOWN_SET
    return s


class AV:
    """Per-GPU sets of possible values. `sets[i]` belongs to the i-th GPU of the registry."""

    __slots__ = ("sets", "_h")

    def __init__(self, sets: tuple):
        self.sets = sets
        self._h = None

    def __eq__(self, o) -> bool:
        return isinstance(o, AV) and self.sets == o.sets

    def __hash__(self) -> int:
        if self._h is None:
            self._h = hash(self.sets)
        return self._h

    def __repr__(self) -> str:
        return f"AV({self.sets!r})"

    @property
    def uniform(self) -> bool:
        return _uniform(self.sets)

    def values(self) -> frozenset:
        out: frozenset = frozenset()
        for s in self.sets:
            out |= s
        return out

    def single(self):
        """The one concrete value this AV has on every GPU, or None."""
        if self.uniform and len(self.sets[0]) == 1:
            (v,) = self.sets[0]
            return v
        return None


class Domain:
    """Factory for AVs over a fixed number of GPUs."""

    def __init__(self, n: int):
        self.n = n
        self.OPAQUE = AV((UNKNOWN_SET,) * n)
        self.NONE = self.const(None)

    def const(self, v) -> AV:
        s = frozenset((v,))
        return AV((s,) * self.n)

    def unres(self, reason: str) -> AV:
        s = frozenset((Unres(reason),))
        return AV((s,) * self.n)

    def per(self, values: list) -> AV:
        return AV(tuple(frozenset((v,)) for v in values))

    def map1(self, av: AV, f: Callable[[Any], Any]) -> AV:
        """Apply f to each possibility; OPAQUE/Unres pass through unchanged."""
        cache: dict = {}
        out = []
        sets, reps = av.sets, 1
        if _uniform(sets):  # the same on every GPU (most values): one set to map
            sets, reps = sets[:1], len(sets)
        for s in sets:
            r = cache.get(s)
            if r is None:
                acc = set()
                for v in s:
                    if v is OPAQUE or v is ENV or isinstance(v, Unres):
                        acc.add(v)
                    elif v is FALSY:
                        acc.add(OPAQUE)
                    else:
                        acc.add(_safe(f, v))
                r = cache[s] = cap(frozenset(acc))
            out.append(r)
        return AV(tuple(out) * reps)

    def map2(self, a: AV, b: AV, f: Callable[[Any, Any], Any]) -> AV:
        cache: dict = {}
        out = []
        pairs, reps = zip(a.sets, b.sets), 1
        if _uniform(a.sets) and _uniform(b.sets) and a.sets:
            pairs, reps = ((a.sets[0], b.sets[0]),), len(a.sets)
        for sa, sb in pairs:
            key = (sa, sb)
            r = cache.get(key)
            if r is None:
                acc = set()
                for x in sa:
                    for y in sb:
                        if isinstance(x, Unres):
                            acc.add(x)
                        elif isinstance(y, Unres):
                            acc.add(y)
                        elif x is OPAQUE or y is OPAQUE or x is ENV or y is ENV or x is FALSY or y is FALSY:
                            acc.add(OPAQUE)
                        else:
                            acc.add(_safe2(f, x, y))
                r = cache[key] = cap(frozenset(acc))
            out.append(r)
        return AV(tuple(out) * reps)

    def union(self, a: AV, b: AV) -> AV:
        if a is b:
            return a
        return AV(tuple(cap(x | y) for x, y in zip(a.sets, b.sets)))

    def flat_map(self, av: AV, f: Callable[..., AV], *extra) -> AV:
        """Pointwise over the GPUs: the union of the AVs f(v, *extra) for each value v a GPU's set
        may hold, read at that GPU (OPAQUE for an empty set). f runs once per value of each
        distinct set; where every GPU has the same set, the union itself is returned. The
        arguments go to f directly rather than through a closure: f may recurse into the
        interpreter, and each frame here counts toward the recursion limit."""
        cache: dict = {}
        out = []
        for s in av.sets:
            r = cache.get(s)
            if r is None:
                acc = None
                for v in s:
                    rv = f(v, *extra)
                    acc = rv if acc is None else self.union(acc, rv)
                r = cache[s] = acc if acc is not None else self.OPAQUE
            out.append(r)
        if len(cache) == 1:
            return next(iter(cache.values()))
        return AV(tuple(r.sets[i] for i, r in enumerate(out)))


def _uniform(sets: tuple) -> bool:
    """Are all the per-GPU sets equal? (tuple.count tests identity first: AVs made for every
    GPU at once repeat one set object.)"""
    return not sets or sets.count(sets[0]) == len(sets)


def _safe(f, v):
    try:
        return f(v)
    except Exception:  # noqa: BLE001 - evaluating untrusted constants must never raise
        return OPAQUE


def _safe2(f, x, y):
    try:
        return f(x, y)
    except Exception:  # noqa: BLE001
        return OPAQUE


# constants whose truthiness bool() gives and that are none of the markers below
_PLAIN_TYPES = frozenset((bool, int, float, str, type(None)))


def truth(v) -> bool | None:
    """Truthiness of one possibility: True, False, or None when unknown."""
    if type(v) in _PLAIN_TYPES:
        return bool(v)
    if v is OPAQUE or v is ENV or isinstance(v, Unres):
        return None
    if v is FALSY:
        return False
    if isinstance(v, (FuncRef, ClassRef, ModuleRef, ExtRef, Instance, BoundMethod, Partial, ArchFlags, TvmTarget)):
        return True
    try:
        return bool(v)
    except Exception:  # noqa: BLE001
        return None


def may_true(s: frozenset) -> bool:
    """May a value with these possibilities be truthy? Unknowns may."""
    for v in s:  # a loop, not any(<generator>): most sets hold one value
        if truth(v) is not False:
            return True
    return False


def may_false(s: frozenset) -> bool:
    for v in s:
        if truth(v) is not True:
            return True
    return False


def truth_pairs(sets) -> list[tuple[bool, bool]]:
    """[(may_true(s), may_false(s)) for s in sets], each distinct set tested once."""
    memo: dict = {}
    out = []
    for s in sets:
        r = memo.get(s)
        if r is None:
            r = memo[s] = (may_true(s), may_false(s))
        out.append(r)
    return out


def informative_sets(av: "AV", reach: list[int]) -> list[frozenset]:
    """The per-GPU sets with GPU-independent unknowns removed.

    An unknown from the environment (OPAQUE, or FALSY, the same unknown where it stops an `and`)
    present on every GPU (an override dict, a config flag merged into the result) says nothing
    about the architecture; dropping it lets the architecture test that is merged with it decide.
    ENV (an unknown *condition*, like a CUDA-version check) is kept: it may be true on the GPUs
    where it appears, unless it is beside known values on every GPU: `arch = int(env) if env else
    major * 10 + minor` makes `arch // 10 == 10` {ENV, True} on sm_100 and {ENV, False} on sm_90,
    and the override must not hide the device's own path, which decides."""
    sets = [av.sets[i] for i in reach]
    if sets and all(OPAQUE in x or FALSY in x for x in sets):
        sets = [x - _ENV_UNKNOWNS or ENV_SET for x in sets]
    if sets and all(ENV in x and len(x) > 1 for x in sets):
        sets = [x - ENV_SET for x in sets]
    return sets


def has_unres(av: AV) -> list[str]:
    out = []
    for s in dict.fromkeys(av.sets):  # each distinct set once, in order: the same reasons, in the same order
        for v in s:
            if isinstance(v, Unres) and v.reason not in out:
                out.append(v.reason)
    return out
