"""Find every Python gate: decision points whose outcome depends on the GPU architecture.

Which files are evaluated is decided from their bytes: files that mention a capability query, a
predicate, an arch list or nvcc target flags are evaluated first; then every file that uses the
name of a function or constant found to depend on the GPU is added, until nothing changes.
Everything else is never parsed (unless the interpreter follows a call or import into it).

A name defined in module M reaches another module only through an import of it (or the alias it
is imported as), a star import, an attribute (`x.name`, `M.name`, `self.name`) or a string
(`getattr(x, "name")`): elsewhere a bare `name` is some other binding, and a comment is
nothing. Nor is an attribute whose receiver is a package outside the scan (`unittest.main`,
`pipeline.PipelineUmmaAsync.create` after `from cutlass import pipeline`), when nothing else
binds the receiver's name (see receiver_roots). Without these rules, generic method names
(`forward`, `plan`, `resolve`, `create`, `main`) that carry a dependence in one class or script
brought in every module that has a local or an attribute of that name, and the rounds grew
with the corpus rather than with its gates.
"""
from __future__ import annotations

import pickle
import re
from bisect import bisect_left
from dataclasses import dataclass, field
from functools import lru_cache

from ..model import Diagnostic, Gate, internal_error
from ..parsing.python_ir import parse_python
from ..parsing.words import WORD_BYTE, words_of
from ..ruledata import load_rule
from ..sources import Source
from ..targets import Registry
from .index import Index, ModuleInfo, collect_defs, decode_check
from .interp import GateRecord, Interp
from .platform_needs import platform_needs
from .pybytes import (IDENT, SPACE, ExternalRoots, ident_at, module_imports, name_occurrences,
                      qualified, receiver_chain, receiver_roots, split_trailer)

# Bytes that can start an architecture test in Python source. Deliberately not `sm90` alone:
# flashinfer names hundreds of kernels *_sm90_*, and a name is not a test.
# Functions whose gates one module may have evaluated (every round together): the most in
# flashinfer 0.7.2 + sglang 0.5.23 is 76 (flashinfer/fused_moe/runners.py). A module past it has
# its other functions not evaluated, with one analysis-budget diagnostic.
MAX_MODULE_FUNCTIONS = 1_000
# The same for the whole scan (that pair: 5,268), so that many modules each under their own
# bound still end; the modules after it is spent are not evaluated (and not parsed for it).
MAX_SCAN_FUNCTIONS = 25_000
# Gate rounds at most: each round follows the names the previous one found to carry an
# architecture dependence to their users; a chain of names longer than this is not followed.
MAX_GATE_ROUNDS = 8

TRIGGER_ALTERNATIVES = (
    rb"is_sm\d", rb"has_sm\d", b"device_capability", b"compute_capability", b"cuda_capability", b"get_device_sm",
    b"sm_version", b"supported_major_versions", b"gencode", b"arch=compute", b"CUDA_ARCH_LIST",
    b"get_device_properties", rb"device_sm\b",
)
# an alternative made of word bytes, `\d` and `\b` only matches inside one run of word bytes
_IN_A_WORD = re.compile(rb"(?:[A-Za-z0-9_]|\\d|\\b)+")


# an identifier (IDENT) is a word (index.WORD) without its leading digits, so one pass over
# the bytes in the prefilter workers serves the gate finder and the call graph's word index
_DIGITS = b"0123456789"


def _trigger_alternatives() -> list[bytes]:
    """TRIGGER_ALTERNATIVES plus the JIT flag keywords and the TVM target predicates of
    rules/gates.toml (as Interp's Rules reads them), the TVM calls that give the device's
    target (`Target.current()`, a device handle's `compute_version`) and parameters annotated
    as a TVM target."""
    data = load_rule("gates")
    kws = set(data.get("jit_builders", {}).get("flag_keywords", []))
    tt = data.get("tvm_target", {})
    kws |= {n for r in tt.get("predicate", []) for n in r["names"]}
    classes = sorted({c.rsplit(".", 1)[-1] for c in tt.get("classes", [])})
    if tt:
        kws |= {"compute_version"} | {f"{c}.{m}" for c in classes for m in tt.get("current", [])}
    # a CUDA target spelled without its arch, which TVM completes from the device
    built = [re.escape(c.encode()) + rb"""\(\s*["']cuda\b""" for c in classes]
    # a parameter annotated as a target (`target: Target`, `Target | None`, "Optional[Target]"),
    # which the interpreter reads as the GPU's own target
    # (the class's name or a dotted tail of it: not torch.fx.node.Target)
    spelled = sorted({".".join(c.split(".")[i:]) for c in tt.get("classes", []) for i in range(len(c.split(".")))})
    annotated = [rb"""[(,]\s*\w+\s*:\s*["']?(?:Optional\[)?(?:""" + b"|".join(re.escape(x.encode()) for x in spelled)
                 + rb")\b(?!\.)"] if spelled else []
    return [*TRIGGER_ALTERNATIVES, *(re.escape(k.encode()) for k in sorted(kws)), *built, *annotated]


@lru_cache(maxsize=1)
def trigger_pattern() -> re.Pattern:
    return re.compile(b"|".join(_trigger_alternatives()))


@lru_cache(maxsize=1)
def _split_triggers() -> tuple[re.Pattern, re.Pattern | None]:
    """trigger_pattern() as the alternatives that match inside one word, and the others."""
    alts = _trigger_alternatives()
    rest = [a for a in alts if not _IN_A_WORD.fullmatch(a)]
    return re.compile(b"|".join(a for a in alts if a not in rest)), (re.compile(b"|".join(rest)) if rest else None)


@lru_cache(maxsize=1)
def _dynamic_triggers() -> tuple[tuple[frozenset, bytes], ...]:
    """A name looked up by string on an object that holds the capability queries (rules/gates.toml
    [dynamic_lookup]: getattr(torch.cuda, name), vars(pynvml), torch.cuda.__dict__) tests the GPU
    with no trigger in sight: each form's bytes, with the words they hold (a file without them is
    passed over without a search)."""
    forms = []
    for r in load_rule("gates").get("dynamic_lookup", {}).get("receivers", []):
        b = r.encode()
        words = frozenset(b.split(b"."))
        forms += [(words | {b"getattr"}, b"getattr(" + b + b","), (words | {b"vars"}, b"vars(" + b + b")"),
                  (words | {b"__dict__"}, b + b".__dict__")]
    return tuple(forms)


def _dynamic_hit(data: bytes, start: int = 0, end: int | None = None, words=None) -> bool:
    """Does data[start:end] hold a _dynamic_triggers form? words: the file's words (or
    identifiers), when known."""
    end = len(data) if end is None else end
    return any((words is None or need <= words) and data.find(f, start, end) >= 0 for need, f in _dynamic_triggers())


def holds_trigger(data: bytes, start: int = 0, end: int | None = None, dynamic: bool = True) -> bool:
    """Can data[start:end] test the architecture by its bytes alone (trigger_pattern, or, unless
    `dynamic` is False (the whole file has none), a dynamic lookup on a capability object)?"""
    end = len(data) if end is None else end
    return trigger_pattern().search(data, start, end) is not None or (dynamic and _dynamic_hit(data, start, end))


def byte_facts(data: bytes) -> tuple[bool, bytes, bool]:
    """What the prefilter asks of a whole file: does it hold a trigger (or a dynamic lookup on a
    capability object), its words (`WORD`; sorted, newline-joined: one compact object to hand
    between processes), and does it hold such a dynamic lookup (_dynamic_triggers). Its identifiers
    are `fact_idents` of those words; the call graph's word index takes the words as they are.
    A trigger that lies inside a word (all but `arch=compute`) is looked for in the words, a
    fifth of the bytes: each word is a maximal run of word bytes, so the newline after it ends
    it for `\\b` as what followed it in the file did. The others are looked for in the bytes."""
    ws = words_of(data)
    words = b"\n".join(sorted(ws))
    in_word, rest = _split_triggers()
    dyn = _dynamic_hit(data, words=ws)
    return dyn or in_word.search(words) is not None or (rest is not None and rest.search(data) is not None), words, dyn


def fact_idents(words: bytes) -> frozenset:
    """The identifiers (IDENT.findall) of a file, from its byte_facts words: in bytes patterns
    \\w is [A-Za-z0-9_], and IDENT finds in each maximal run of those the part after its
    leading digits."""
    return frozenset(w.lstrip(_DIGITS) for w in words.split(b"\n")) - {b""}


def _is_use(data: bytes, p: int, n: int) -> bool:
    """Can the identifier at data[p:p+n] read what the name is bound to? Not when it is the
    name of a `def`/`class` being defined, nor a target or keyword being bound (`name = ...`,
    `f(name=...)`, `def f(name=...)`; but f"{name=}" reads it): a function whose only occurrences of an
    architecture-dependent name are those does not use it. (Annotations, annotated, augmented
    and walrus bindings, `for name in`, imports, comments and strings all count as uses:
    conservative.)"""
    j = p
    while j > 0 and data[j - 1] in SPACE:
        j -= 1
    if j > 0 and data[j - 1] == 58:  # after ":", an annotation (`x: name = None`) reads the name
        return True
    q = p + n
    while q < len(data) and data[q] in SPACE:
        q += 1
    if q < len(data) and data[q] == 61 and data[q + 1:q + 2] != b"=":  # "=" but not "=="
        r = q + 1
        while r < len(data) and data[r] in SPACE:
            r += 1
        # f"{name=}", f"{name=!r}", f"{name=:>8}" read the name
        return r < len(data) and data[r] in b"}!:"
    if j == p:
        return True
    for kw in (b"def", b"class"):
        k = j - len(kw)
        if k >= 0 and data[k:j] == kw and (k == 0 or not WORD_BYTE[data[k - 1]]):
            return False
    return True


def reaching_occurrences(data: bytes, present, bare, external=None, meaningful=None) -> list[tuple[int, int]]:
    """Sorted name_occurrences of `present` in data that can refer to its definition elsewhere:
    all of those in `bare` (names defined in this module, or named in an import), only the
    attributes and strings of the others, and of those not the attributes of a chain whose root
    is `external` (a receiver_roots name bound to packages outside the scan), unless an
    identifier of the chain or the name itself means something to the interpreter whatever its
    receiver (`meaningful`: `torch.cuda.get_device_capability`)."""
    occ = name_occurrences(data, [n for n in present if n in bare])
    for o in name_occurrences(data, [n for n in present if n not in bare]):
        if not qualified(data, o[0]):
            continue
        if external is not None:
            chain = receiver_chain(data, o[0])
            if chain is not None and not any(meaningful(w) for w in (*chain, data[o[0]:o[0] + o[1]])) \
                    and external(chain[0]):
                continue
        occ.append(o)
    occ.sort()
    return occ


def any_use(data: bytes, occ: list[tuple[int, int]], start: int, end: int) -> bool:
    """Does data[start:end] hold a use (`_is_use`) of a name as an identifier? occ: the sorted
    name_occurrences of those names in data."""
    i = bisect_left(occ, (start, 0))
    while i < len(occ) and occ[i][0] < end:
        p, n = occ[i]
        if ident_at(data, p, n, start, end) and _is_use(data, p, n):
            return True
        i += 1
    return False


@dataclass
class GateScan:
    gates: list[Gate] = field(default_factory=list)
    evaluated_modules: int = 0
    # bytes of the evaluated modules up to their last line of code (a trailing comment, which
    # the cache's early cutoff may accept, does not change it)
    evaluated_bytes: int = 0
    evaluated_functions: int = 0
    parsed_modules: int = 0
    rounds: int = 0
    predicates: list[str] = field(default_factory=list)
    names: frozenset = frozenset()  # every name the prefilter searched for (early cutoff needs it)
    over_budget: list[tuple[str, str | None]] = field(default_factory=list)


def find_python_gates(source: Source, index: Index, reg: Registry, package_of, progress=None,
                      facts: dict | None = None) -> GateScan:
    """facts: path -> byte_facts(bytes of that file), when already computed (worker processes)."""
    rounds = _GateRounds(index, reg, progress, facts or {})
    while True:
        rounds.scan.rounds += 1
        rounds.run_round()
        if not rounds.learn_names():
            break
    return rounds.finish(package_of)


class _GateRounds:
    """The state of the gate rounds: which modules are relevant, which functions were evaluated,
    and the names found to carry an architecture dependence so far."""

    def __init__(self, index: Index, reg: Registry, progress, facts: dict):
        self.index = index
        self.progress = progress
        self.facts = facts
        # a package with nothing architecture-dependent (Index.outside, set by the pipeline's scope
        # phase) is only read: none of its modules can use another package's architecture-dependent
        # names, it names none of them
        self.modules = sorted(m for m in index.path_of if m.split(".", 1)[0] not in index.outside)
        self.names: set[str] = set()
        self.scan = GateScan()
        self.interp = Interp(index, reg)
        index.on_evict.append(self.interp.forget_module)
        self.relevant: set[str] = set()
        self.reported: set[tuple[str, str | None]] = set()
        # identifier -> the modules that hold it, made when the first names are searched for; each
        # round, module -> the names of `names` it holds (see reaching)
        self.by_ident: dict[bytes, list[str]] = {}
        self.present_in: dict[str, set[bytes]] = {}
        # Whether a module's bytes hold a trigger never changes: test each file once, not once a
        # round. A function's span can only match if its module does, and can only name one of
        # `names` if its module does (a def starts and ends on token boundaries), so those spans
        # are not searched at all.
        self.trig: dict[str, bool] = {}
        # and whether a function's span holds one: asked again each round until the function is reported
        self.span_trig: dict[tuple[str, int], bool] = {}
        self.dyn_trig: dict[str, bool] = {}  # does the module hold a _dynamic_triggers form at all
        self.imports: dict[str, tuple | None] = {}
        self.externals = ExternalRoots(self.modules, index.runtimes)
        self.round_occ: dict[str, list | None] = {}  # reaching() this round (names change between rounds)
        self.meaningful = self.interp.rules.meaningful
        self.evaluated_in: dict[str, int] = {}  # module -> functions evaluated (MAX_MODULE_FUNCTIONS)
        self.evaluated_total = 0  # MAX_SCAN_FUNCTIONS
        self.cut_in_module: dict[str, set] = {}  # module -> functions not evaluated: its own bound
        self.cut_by_scan: dict[str, set] = {}  # module -> functions not evaluated: the scan's bound
        self.names_b: set[bytes] = set()
        # name -> the modules that define a function or global of that name found to depend on the GPU
        self.homes: dict[bytes, set[str]] = {}

    def module_trig(self, m: str) -> bool:
        """Whether module m's bytes hold a trigger (from the prefilter's facts when it has them)."""
        v = self.trig.get(m)
        if v is None:
            f = self.facts.get(self.index.path_of[m])
            v = self.trig[m] = f[0] if f is not None else holds_trigger(self.index.source_bytes(m))
        return v

    def module_dyn(self, m: str) -> bool:
        """Whether module m's bytes hold a _dynamic_triggers form at all."""
        v = self.dyn_trig.get(m)
        if v is None:
            f = self.facts.get(self.index.path_of[m])
            v = self.dyn_trig[m] = (f[2] if f is not None
                                    else _dynamic_hit(self.index.source_bytes(m)))
        return v

    def matches(self, modname: str, data: bytes, start: int, end: int, mod_trig: bool,
                occ: list[tuple[int, int]] | None) -> bool:
        """Whether the span start..end holds a trigger or a use of a found name; occ: reaching() of the module."""
        if mod_trig:
            t = self.span_trig.get((modname, start))
            if t is None:
                t = self.span_trig[(modname, start)] = holds_trigger(data, start, end, self.module_dyn(modname))
            if t:
                return True
        return bool(occ) and any_use(data, occ, start, end)

    def reaching(self, m: str) -> list[tuple[int, int]] | None:
        """reaching_occurrences in module m of the names it holds, and of the aliases they are
        imported as; None when it names none of `names`."""
        if m in self.round_occ:
            return self.round_occ[m]
        present = self.present_in.get(m, set()) if self.names_b else None
        occ = None
        if present:
            src = self.index.source_bytes(m)
            if m not in self.imports:
                self.imports[m] = module_imports(src)
            imp = self.imports[m]
            if imp is None:
                occ = reaching_occurrences(src, present, present)
            else:
                imported, aliases = imp
                bare = {n for n in present if n in imported or m in self.homes[n]}
                alias = {a for n in present if n in aliases for a in aliases[n]}
                occ = reaching_occurrences(src, present | alias, bare | alias,
                                           lambda r: self.externals.external(m, src, r), self.meaningful)
        self.round_occ[m] = occ
        return occ

    def uses_names(self, m: str) -> bool:
        """Whether module m uses one of the found names anywhere."""
        occ = self.reaching(m)
        if not occ:
            return False
        src = self.index.source_bytes(m)
        return any_use(src, occ, 0, len(src))

    def needs_parse(self, m: str) -> bool:
        """Must module m be loaded to list its functions? Not when it was parsed in full before
        and then evicted: its spans are known."""
        return not self.index.spans_without_parse(m)

    def run_round(self) -> None:
        """One round: find the newly relevant modules, then evaluate the round's work list."""
        index = self.index
        self.round_occ.clear()
        if self.names_b:
            if not self.by_ident:
                self.by_ident.update(_ident_index(self.modules, self.facts, index))
            self.present_in.clear()
            for n in self.names_b:
                for m in self.by_ident.get(n, ()):
                    self.present_in.setdefault(m, set()).add(n)
        new_rel = {
            m for m in self.modules
            if m not in self.relevant and (self.module_trig(m) or (self.names_b and self.uses_names(m)))
        }
        redo = set(self.interp.invalidate(new_rel)) if new_rel and self.scan.rounds > 1 else set()
        self.relevant |= new_rel
        index.full_filter = self.relevant.__contains__
        # The round's work list: the functions invalidated, then each relevant module's
        # functions that may test the GPU, in module order. It is made as it is evaluated, so
        # that the parse worker (Index.prefetch) parses the next modules meanwhile; the list and
        # its order are the same as when made first (evaluating adds to `reported` only the
        # items already listed).
        order = sorted(self.relevant)
        index.prefetch([m for m in order if self.needs_parse(m)])
        for modname, qual in self.round_todo(redo, order, new_rel):
            self.evaluate(modname, qual)

    def round_todo(self, redo: set, order: list[str], new_rel: set[str]):
        """The round's work list, (module, None) for a module body, (module, qualname) for a function."""
        yield from sorted(redo, key=_owner_key)
        queued: set[tuple[str, str]] = set()  # a redefined qualname has a span per def
        index = self.index
        for k, modname in enumerate(order):
            if self.progress and k % 50 == 0:
                self.progress(f"gate round {self.scan.rounds}: modules searched ({index.parsed_count} parsed)",
                              k, len(order))
            if self.evaluated_total >= MAX_SCAN_FUNCTIONS and not index.was_parsed(modname):
                # the scan's bound is spent: a module never parsed is not parsed now to list
                # what would not be evaluated
                self.cut_by_scan.setdefault(modname, set())
                continue
            mod = index.module(modname) if self.needs_parse(modname) else True
            if mod is None:
                continue
            if modname in new_rel:
                yield modname, None
            yield from self._module_todo(modname, queued)

    def _module_todo(self, modname: str, queued: set[tuple[str, str]]):
        """The functions of one relevant module that may test the GPU and are not reported yet."""
        mt = self.module_trig(modname)
        # a module where a name carries the dependence holds its `def`: occ is not empty
        occ = self.reaching(modname)
        if not (mt or occ):
            return
        src = self.index.source_bytes(modname)
        for qual, sb, eb in self.index.function_spans(modname):
            # a function whose own name now carries an architecture dependence here is
            # evaluated for the tests inside it (its `def` line is not a use, see _is_use)
            own = qual.rsplit(".", 1)[-1]
            if (modname, qual) not in self.reported and (modname, qual) not in queued and (
                    (own in self.names and modname in self.homes[own.encode()])
                    or self.matches(modname, src, sb, eb, mt, occ)):
                queued.add((modname, qual))
                yield modname, qual

    def evaluate(self, modname: str, qual: str | None) -> None:
        """Evaluate one work item within the module's and the scan's function budgets."""
        index = self.index
        if qual is not None and (self.evaluated_in.get(modname, 0) >= MAX_MODULE_FUNCTIONS
                                 or self.evaluated_total >= MAX_SCAN_FUNCTIONS):
            self.reported.add((modname, qual))  # not asked again in a later round
            (self.cut_in_module if self.evaluated_in.get(modname, 0) >= MAX_MODULE_FUNCTIONS
             else self.cut_by_scan).setdefault(modname, set()).add(qual)
            return
        mod = index.module(modname)
        if mod is None:
            return
        self.reported.add((modname, qual))
        if qual is not None:
            self.evaluated_in[modname] = self.evaluated_in.get(modname, 0) + 1
            self.evaluated_total += 1
        try:
            if qual is None:
                self.interp.report_module(modname)
            else:
                nodes = mod.defs_of(qual)
                if nodes:
                    self.interp.report_function(mod, qual, nodes)
        except Exception as e:  # noqa: BLE001 - one function's failure is its diagnostic, not the scan's end
            index.diagnostics.append(internal_error(mod.path, f"gate evaluation of {qual or 'the module body'}", e))

    def learn_names(self) -> bool:
        """Add the names that now carry an architecture dependence; False when the rounds are done."""
        # names that now carry an architecture dependence: their users may be gates too
        found = _arch_definitions(self.interp)
        # a module constant that spells a capability query or a name found above (NAME =
        # "get_device_capability", PRED = "is_hopper"): a getattr or globals() lookup by it is one
        found |= {(n, m) for m, strings in self.interp.string_globals.items() for n, v in strings.items()
                  if v in self.names or holds_trigger(v.encode("utf-8", "surrogatepass"))}
        new = {n for n, _m in found
               if n not in self.names and len(n) > 3 and n.isidentifier() and not n.startswith("__")}
        if not new or self.scan.rounds >= MAX_GATE_ROUNDS:
            return False
        self.names |= new
        self.names_b = {n.encode() for n in self.names}
        for n, m in found:
            self.homes.setdefault(n.encode(), set()).add(m)
        return True

    def finish(self, package_of) -> GateScan:
        """Fill in the scan's counts, gates and budget diagnostics."""
        index, scan = self.index, self.scan
        scan.evaluated_modules = len(self.relevant)
        scan.evaluated_bytes = sum(split_trailer(index.source_bytes(m)) for m in self.relevant)
        scan.evaluated_functions = sum(1 for _m, q in self.reported if q is not None)
        scan.parsed_modules = index.parsed_count
        scan.predicates = sorted(self.interp.arch_functions)
        scan.names = frozenset(self.names)
        scan.over_budget = sorted(set(self.interp.budget_exceeded), key=_owner_key)
        self._budget_diagnostics()
        scan.gates = to_gates(self.interp.gates, package_of)
        index.on_evict.remove(self.interp.forget_module)  # nothing else keeps the interpreter's values
        return scan

    def _budget_diagnostics(self) -> None:
        """One diagnostic per module whose functions a budget left unevaluated."""
        for m, quals in sorted(self.cut_in_module.items()):
            self.index.diagnostics.append(Diagnostic(
                self.index.path_of.get(m, m), "analysis-budget",
                f"gate evaluation stopped at this module's budget of {MAX_MODULE_FUNCTIONS:,} functions; "
                f"{len(quals)} more functions that may hold gates not evaluated (their gates are missing)"))
        for m, quals in sorted(self.cut_by_scan.items()):
            more = f"{len(quals)} functions that may hold gates" if quals else "its functions"
            self.index.diagnostics.append(Diagnostic(
                self.index.path_of.get(m, m), "analysis-budget",
                f"gate evaluation of this scan stopped at its budget of {MAX_SCAN_FUNCTIONS:,} functions; "
                f"{more} not evaluated (their gates are missing)"))


def _ident_index(modules: list[str], facts: dict, index: Index) -> dict[bytes, list[str]]:
    """identifier -> the modules (in `modules` order) whose bytes hold it (IDENT), from the
    prefilter's words where it computed them: one posting per module and identifier, a third of
    the memory of a set of identifiers per module."""
    out: dict[bytes, list[str]] = {}
    for m in modules:
        f = facts.get(index.path_of[m])
        for w in (fact_idents(f[1]) if f is not None else frozenset(IDENT.findall(index.peek_bytes(m)))):
            got = out.get(w)
            if got is None:
                out[w] = [m]
            else:
                got.append(m)
    return out


def cutoff_view(data: bytes, names: frozenset) -> tuple | None:
    """Everything find_python_gates can learn from one file's bytes when it searches for
    `names`: decoding verdict, IR with positions, parse errors, and the module- and function-
    level prefilter answers (which names, and aliases of them, have a use, which have one as an
    attribute or string and behind which receiver, which are imported, which names are bound
    only by imports and to which packages). Two byte strings with equal views give the same
    scan. Also returns the end of the last top-level statement (gate texts are sliced before
    it). None: unknown."""
    why = decode_check(data)
    if why is not None:
        return ("undecodable", why), 0
    try:
        parsed = parse_python(data, lazy=True)  # as the index parses it; pickling converts every body
        ir = pickle.dumps((parsed.body, parsed.errors), protocol=pickle.HIGHEST_PROTOCOL)
    except (RecursionError, MemoryError, ValueError):
        return None
    info = ModuleInfo(name="", path="", is_pkg=False, parsed=parsed)
    collect_defs(parsed.body, "", info)
    nb = {n.encode() for n in names}
    imp = module_imports(data)
    aliases = () if imp is None else tuple(sorted((n, tuple(sorted(a))) for n, a in imp[1].items() if n in nb))
    occ = {n: name_occurrences(data, [n]) for n in sorted(nb.union(*(a for _n, a in aliases))) if n in data}
    roots = receiver_roots(data) if imp is not None else {}
    # attributes and strings, by the receiver chain that decides whether they reach the scan
    # (None: they do whatever the scan holds)
    qual: dict[tuple, list] = {}
    for n, v in occ.items():
        for o in v:
            if qualified(data, o[0]):
                chain = receiver_chain(data, o[0]) if roots else None
                qual.setdefault((n, chain if chain and chain[0] in roots else None), []).append(o)

    def uses(start: int, end: int) -> tuple:
        """The names with a use in data[start:end], and those with one as an attribute or string
        (which of them reach the scan depends on imports, on where a name is defined and on the
        packages in the scan)."""
        return (tuple(n for n, v in occ.items() if any_use(data, v, start, end)),
                tuple(k for k, v in sorted(qual.items(), key=_chain_key) if any_use(data, v, start, end)))

    dyn = _dynamic_hit(data)
    funcs = tuple((q, holds_trigger(data, n.sb, n.eb, dyn), uses(n.sb, n.eb)) for q, n in info.all_functions())
    view = (ir, holds_trigger(data, dynamic=dyn), tuple(sorted(nb.intersection(IDENT.findall(data)))), uses(0, len(data)),
            None if imp is None else (tuple(sorted(nb & imp[0])), aliases),
            tuple(sorted((r, tuple(sorted(t))) for r, t in roots.items())), funcs)
    end = max((st.eb for st in parsed.body), default=0)
    return view, end


def _chain_key(item: tuple) -> tuple:
    (name, chain), _occ = item
    return (name, chain is not None, chain or ())


def _owner_key(o: tuple[str, str | None]) -> tuple[str, str]:
    return (o[0], o[1] or "")


def _arch_definitions(interp: Interp) -> set[tuple[str, str]]:
    """(name, module) of every function and module global found to depend on the GPU."""
    out = {(full.rsplit(".", 1)[-1], mod) for full, mod in interp.arch_functions.items()}
    for modname, name, v in interp.global_values():
        if interp.arch_dependent(v):
            out.add((name, modname))
    out.update((name, modname) for modname, names in interp.arch_module_globals.items() for name in names)
    out.update(interp.arch_callables())
    return out


def to_gates(records: list[GateRecord], package_of) -> list[Gate]:
    out: dict[tuple, Gate] = {}
    for r in records:
        node = r.expr_node or r.node
        text = " ".join(r.module.parsed.text(node).split())
        needs = platform_needs(text, r.region)
        if len(text) > 240:
            text = text[:237] + "..."
        if not r.resolved:
            resolution = "unresolved: " + "; ".join(r.reasons)
        elif any(v.startswith("name-rule") for v in r.via):
            resolution = "name-rule: " + "; ".join(v for v in r.via if v.startswith("name-rule"))
        elif any(v.startswith("inferred ") for v in r.via):
            resolution = "inferred: " + " -> ".join(_chain(r.via))
        else:
            resolution = "evaluated: " + "; ".join(r.via) if r.via else "evaluated"
        g = Gate(
            path=r.module.path,
            line=node.line,
            col=node.col,
            function=r.function,
            kind=r.kind,
            expr=text,
            admits=r.admits,
            resolution=resolution,
            resolved=r.resolved,
            package=package_of(r.module.path),
            region=r.region,
            via=sorted(r.via),
            decided=frozenset(r.extra.get("decided", ())),
            mixed=frozenset(r.extra.get("mixed", ())),
            platform_needs=needs,
        )
        key = (g.path, g.line, g.col, g.kind)
        if key not in out:
            out[key] = g
    return sorted(out.values(), key=Gate.sort_key)


def _chain(via: list[str]) -> list[str]:
    inferred = [v[len("inferred "):] for v in via if v.startswith("inferred ")]
    return inferred
