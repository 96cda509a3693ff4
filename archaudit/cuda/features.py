"""Architecture-specific features of CUDA/C++ code, extracted per file (target-independent).

`extract(path, data)` reads one file once and returns `FileFacts`: plain, picklable data that
every later question about the file (any target, any TU) is answered from:

* the preprocessor program (`preproc.Program`: regions, defines, includes, guard);
* owners (functions, classes, aliases at namespace scope) with the identifiers each uses, split
  by region, for name-based reachability (what a TU instantiates and what its kernels call);
* inline-PTX `asm` statements (adjacent literals concatenated, macro pieces kept for later
  expansion) and the PTX rules they match; identifiers matching intrinsic/atom rules;
* trap sites (`__trap()`, `asm("trap;")`, `CUTLASS_NOT_IMPLEMENTED()`,
  `CUTE_INVALID_CONTROL_PATH(...)`, `__builtin_trap()`);
* `__global__` kernels with their body split into region segments, which is how a kernel whose
  whole body sits under an `#if` that excludes a target is recognised as empty for it;
* constant shared-memory requests (static `__shared__` arrays, dynamic-size attributes).

Matches against rules are computed at extraction; `FileFacts.rules_key` names the rule set used
so that a cache keyed by content hash can also key on the rules.
"""
from __future__ import annotations

import hashlib
import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from functools import lru_cache

from ..parsing import cpp
from . import ruleset
from .preproc import Program, build_program

# --- data ----------------------------------------------------------------------------------------


@dataclass
class OwnerFacts:
    name: str
    kind: str  # "func" | "class" | "alias"
    template: bool
    line: int
    end_line: int
    region: int  # region of the head
    kernel: bool
    device_only: bool
    head_words: tuple[str, ...]
    top: int  # index of the top-level owner containing it (itself when top-level)
    qual: str = ""
    ns: str = ""  # enclosing namespaces as written (cpp.Owner.ns)
    # a function whose parameter list is written empty: a call of it has no arguments, so
    # argument-dependent lookup never finds it from another namespace
    nullary: bool = False


@dataclass
class AsmFacts:
    line: int
    region: int
    top: int  # top-level owner index, -1 outside any
    pieces: tuple[tuple[str, str, int], ...]  # ("s", text, line) literal | ("m", NAME, line) macro
    hits: tuple[tuple[str, int, str], ...]  # (rule id, line, matched text) from literal-only text


@dataclass
class IdentHit:
    line: int
    region: int
    top: int
    rule: str
    text: str
    macro: str = ""  # an atom in the body of this #define: it counts where reached code expands it


@dataclass
class TrapSite:
    line: int
    region: int
    top: int
    kind: str  # "__trap" | "asm-trap" | "CUTLASS_NOT_IMPLEMENTED" | "CUTE_INVALID_CONTROL_PATH" | "__builtin_trap"
    text: str


@dataclass
class KernelFacts:
    name: str
    line: int
    owner: int  # owner index
    top: int
    template: bool
    head_words: tuple[str, ...]
    # body split by region: (region, has real code, has trap, has print)
    segments: tuple[tuple[int, bool, bool, bool], ...]
    end_line: int = 0


@dataclass
class SmemSite:
    line: int
    region: int
    top: int
    kind: str  # "static" | "dynamic"
    elem_bytes: int  # element size for static arrays (1 for dynamic: the expression is bytes)
    expr: str  # dimension product / byte expression, preprocessor-evaluable text
    text: str


@dataclass
class FileFacts:
    path: str
    program: Program
    owners: list[OwnerFacts]
    # identifiers per (top-level owner, region); owner -1: code outside every owner
    tokens: dict[tuple[int, int], frozenset]
    asm: list[AsmFacts]
    idents: list[IdentHit]
    traps: list[TrapSite]
    kernels: list[KernelFacts]
    smem: list[SmemSite]
    nlines: int
    rules_key: str = ""
    digest: str = ""
    # last names of the namespaces this file names in a using-directive, a using-declaration or a
    # namespace alias (anywhere: their members may be found from any namespace)
    opened: frozenset = frozenset()
    # lines of the #include directives inside a named namespace or a class or function body: the
    # included file's namespaces are not the ones written in it
    scoped_includes: frozenset = frozenset()
    # qualified names each top-level owner writes, as "q::name" for the last qualifier only
    # (`a::b::f` gives "a::b" and "b::f"); owner -1: code outside every owner
    quals: dict = field(default_factory=dict)

    def owner_names(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for i, o in enumerate(self.owners):
            if o.top == i and o.name:
                out.setdefault(o.name, []).append(i)
        return out


# --- rules ---------------------------------------------------------------------------------------


@lru_cache(maxsize=1)
def _rules():
    return tuple(ruleset.feature_rules())


@lru_cache(maxsize=1)
def rules_key() -> str:
    h = hashlib.sha1()
    for r in _rules():
        h.update(f"{r.id}\0{r.kind}\0{r.pattern.pattern}\0{sorted(r.supported_on)}\n".encode())
    return h.hexdigest()[:16]


def rules_by_id() -> dict:
    return {r.id: r for r in _rules()}


def _matches(pattern: re.Pattern, prefixes, body: str):
    """pattern.finditer(body), but started only where one of the literal prefixes occurs."""
    if prefixes is None:
        yield from pattern.finditer(body)
        return
    starts = set()
    for pf in prefixes:
        i = body.find(pf)
        while i >= 0:
            starts.add(i)
            i = body.find(pf, i + 1)
    last_end = -1
    for i in sorted(starts):
        if i < last_end:
            continue
        m = pattern.match(body, i)
        if m:
            last_end = m.end()
            yield m


def _split_top(pattern: str) -> list[str]:
    out, depth, cur, i = [], 0, [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            cur.append(pattern[i : i + 2])
            i += 2
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "[":
            j = pattern.find("]", i + 1)
            cur.append(pattern[i : j + 1])
            i = j + 1
            continue
        if c == "|" and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    out.append("".join(cur))
    return out


@lru_cache(maxsize=None)
def _literal_prefixes(pattern: str) -> tuple[str, ...] | None:
    """Literal text each top-level alternative must start with (after `\\b`), or None when an
    alternative has no literal start of 3+ characters."""
    out = []
    for alt in _split_top(pattern):
        alt = alt[2:] if alt.startswith("\\b") else alt
        m = re.match(r"((?:[A-Za-z0-9_]|\\[.:]|::)+)", alt)
        if not m:
            return None
        lit = m.group(1).replace("\\", "")
        # a quantifier right after the literal applies to its last character only
        if len(alt) > m.end() and alt[m.end()] in "?*{":
            lit = lit[:-1]
        if len(lit) < 3:
            return None
        out.append(lit)
    return tuple(out)


@lru_cache(maxsize=None)
def _anchor(pattern: str) -> str | None:
    """A literal every match must contain (for a quick `in` test), or None."""
    if "|" in pattern.replace("\\|", ""):
        return None
    best = ""
    for lit in re.findall(r"(?<!\\)((?:[A-Za-z0-9_]|\\[.:])+)", re.sub(r"\\[bBdDsSwW]|\[[^\]]*\]|\{[^}]*\}|\(\?[:!=<]*", " ", pattern)):
        lit = lit.replace("\\", "")
        if len(lit) > len(best):
            best = lit
    return best if len(best) >= 4 else None


def ptx_hits(text: str) -> list[tuple[str, int, str]]:
    """(rule id, offset, matched text) of every PTX rule matching an asm string."""
    return list(_ptx_hits(text))


def _rules_that_may_match(kind: str, text: str):
    """The feature rules of `kind` whose pattern may match `text`: a rule whose every alternative
    starts with a literal is left out when none of those literals is in the text."""
    for r in _rules():
        if r.kind != kind:
            continue
        prefixes = _literal_prefixes(r.pattern.pattern)
        if prefixes is not None and not any(pf in text for pf in prefixes):
            continue
        yield r


@lru_cache(maxsize=8192)
def _ptx_hits(text: str) -> tuple[tuple[str, int, str], ...]:
    # the same asm templates recur across CUTLASS's headers (and a TU's expansions)
    out = []
    for r in _rules_that_may_match("ptx", text):
        m = r.pattern.search(text)
        if m:
            out.append((r.id, m.start(), m.group()))
    return tuple(out)


# --- extraction ----------------------------------------------------------------------------------

STOP_WORDS = frozenset(
    """if else for while do switch case default break continue return goto sizeof alignof decltype
    typedef typename template using namespace class struct union enum public private protected
    virtual override final static const constexpr volatile inline extern mutable auto void bool
    char short int long float double signed unsigned true false nullptr this new delete operator
    friend explicit noexcept static_assert static_cast reinterpret_cast const_cast dynamic_cast
    __device__ __host__ __global__ __forceinline__ __inline__ __noinline__ __shared__ __constant__
    __restrict__ uint32_t int32_t uint64_t int64_t uint16_t int16_t uint8_t int8_t size_t std
    cute cutlass flashinfer detail int2 int4 float2 float4 uint2 uint4 threadIdx blockIdx blockDim
    gridDim value type T N""".split()
)
# Each pattern below either starts with its literal (so `re` searches for that literal rather
# than trying every offset: `\bX` is written `X(?<!\wX)`, and a lookbehind before X is moved
# after it) or is only run on a body holding one of its literals (_TRAP_WORDS, "asm").
_ASM = re.compile(r"\b(?:asm|__asm__|__asm)\b(?:\s*(?:volatile|__volatile__|goto|inline)\b)*\s*\(")
# `using namespace a::b;` / `namespace x = a::b;` (group 1: b) and `using a::b::name;` (group 2: b)
_OPENS = re.compile(
    r"\b(?:using\s+namespace|namespace\s+\w+\s*=)\s*(?:::\s*)?(?:\w+\s*::\s*)*(\w+)\s*;"
    r"|\busing\s+(?:typename\s+)?(?:::\s*)?(?:\w+\s*::\s*)*(\w+)\s*::\s*~?\w+\s*;")
_TRAP_WORDS = ("__trap", "__builtin_trap", "CUTLASS_NOT_IMPLEMENTED", "CUTE_INVALID_CONTROL_PATH")
_TRAP = re.compile(r"\b(" + "|".join(_TRAP_WORDS) + r")\s*\(")
_STUBBY = re.compile(r"\b(?:assert|__brkpt|asm|__asm__|return|void|thread0)\b")
_PRINTF = re.compile(r"\b(?:printf|CUTE_INVALID_CONTROL_PATH|CUTLASS_NOT_IMPLEMENTED)\s*\(")
_SHARED = re.compile(
    r"__shared__(?<!\w__shared__)(?<!extern__shared__)(?<!extern __shared__)\s+((?:(?:__align__|alignas)\s*\(\s*\d+\s*\)\s*)?[\w:<>, ]*?)\s*\b([A-Za-z_]\w*)\s*((?:\[[^\]\[;]+\]\s*)+)(?:=[^;]*)?;"
)
_DYN_SMEM = re.compile(
    r"cudaFuncSetAttribute(?<!\wcudaFuncSetAttribute)\s*\(([^;]*?),\s*cudaFuncAttributeMaxDynamicSharedMemorySize\s*,\s*([^;]+?)\)\s*\)?\s*;"
)
_TYPE_BYTES = {
    "char": 1, "int8_t": 1, "uint8_t": 1, "bool": 1, "__nv_fp8_e4m3": 1, "__nv_fp8_e5m2": 1,
    "short": 2, "int16_t": 2, "uint16_t": 2, "half": 2, "__half": 2, "nv_bfloat16": 2, "__nv_bfloat16": 2,
    "int": 4, "unsigned": 4, "uint32_t": 4, "int32_t": 4, "float": 4, "half2": 4, "__half2": 4,
    "nv_bfloat162": 4, "__nv_bfloat162": 4,
    "double": 8, "int64_t": 8, "uint64_t": 8, "float2": 8, "int2": 8, "uint2": 8, "long": 8,
    "float4": 16, "int4": 16, "uint4": 16, "double2": 16,
}


@lru_cache(maxsize=None)
def _lead_ident(literal: str) -> str | None:
    """The identifier a literal starts with, or None when it starts with no letter or `_`
    (an identifier of cpp.IDENT is the rest of a run of word characters from its first letter
    or `_` on: a literal starting with a letter or `_` lies inside one, its leading word part
    too)."""
    m = cpp.IDENT.match(literal)
    return m.group() if m else None


def _lead_in(literal: str, words: str) -> bool:
    """False only when `literal` cannot occur in the body whose identifiers `words` joins."""
    lead = _lead_ident(literal)
    return lead is None or lead in words


def _segments(prog: Program, start: int, end: int):
    """(seg_start, seg_end, region) covering [start, end) split at region changes."""
    i = bisect_right(prog.region_starts, start) - 1
    out = []
    pos = start
    while pos < end:
        rid = prog.region_at[i] if i >= 0 else 0
        nxt = prog.region_starts[i + 1] if i + 1 < len(prog.region_starts) else end
        seg_end = min(end, nxt)
        if seg_end > pos:
            out.append((pos, seg_end, rid))
        pos = seg_end
        i += 1
    return out


def _asm_pieces(sc: cpp.Scan, open_paren: int) -> tuple[list[tuple[str, str, int]], int]:
    """Pieces of the asm template: string literals and macro names up to the first ':' or ')'."""
    body = sc.body
    pieces: list[tuple[str, str, int]] = []
    depth = 0
    pos = open_paren
    tok = re.compile(r'"|[A-Za-z_]\w*|[():]')
    n = len(body)
    while pos < n:
        m = tok.search(body, pos)
        if not m:
            break
        t = m.group()
        if t == "(":
            depth += 1
        elif t == ")":
            depth -= 1
            if depth == 0:
                return pieces, m.end()
        elif t == ":" and depth == 1:
            if body[m.start() : m.start() + 2] == "::":
                pos = m.start() + 2
                continue
            return pieces, m.end()
        elif t == '"':
            span = sc.string_at(m.start())
            if span is None:
                pos = m.end()
                continue
            lit = sc.text[span[0] : span[1]]
            pieces.append(("s", cpp.string_value(lit), sc.line_of(span[0])))
            pos = span[1]
            continue
        elif depth == 1:
            if m.end() < n and body[m.end()] == '"' and t in ("R", "L", "u", "U", "u8", "LR", "uR", "UR", "u8R"):
                pos = m.end()  # encoding prefix / raw-string marker of the literal that follows
                span = sc.string_at(m.start()) if t.endswith("R") else None
                if span is not None:
                    pieces.append(("s", cpp.string_value(sc.text[span[0] : span[1]]), sc.line_of(span[0])))
                    pos = span[1]
                continue
            if t not in ("volatile", "__volatile__"):
                pieces.append(("m", t, sc.line_of(m.start())))
        pos = m.end()
    return pieces, n


def literal_asm_text(pieces) -> tuple[str, list[tuple[int, int]]] | None:
    """Concatenated text of an all-literal asm template, with (offset, line) marks; None if a
    piece is a macro name."""
    parts = []
    marks = []
    off = 0
    for kind, val, line in pieces:
        if kind != "s":
            return None
        marks.append((off, line))
        parts.append(val)
        off += len(val)
    return "".join(parts), marks


def line_at(marks: list[tuple[int, int]], offset: int, default: int) -> int:
    line = default
    for off, ln in marks:
        if off <= offset:
            line = ln
        else:
            break
    return line


def _strip_stub_code(seg: str) -> str:
    """What is left of a code segment once error-reporting statements are removed."""
    s = re.sub(r"\b(?:printf|CUTE_INVALID_CONTROL_PATH|CUTLASS_NOT_IMPLEMENTED|__trap|__builtin_trap|__brkpt|assert)\s*\((?:[^;()]|\([^;()]*\))*\)\s*;", " ", seg)
    s = re.sub(r"\b(?:asm|__asm__)\b(?:\s*(?:volatile|__volatile__))?\s*\(\s*\"\s*\w*;?\s*\"\s*\)\s*;", " ", s)
    s = re.sub(r"\(\s*void\s*\)\s*[\w.]+\s*;", " ", s)
    s = re.sub(r"\breturn\s*;", " ", s)
    s = re.sub(r"\bif\s*\(\s*(?:cute::)?thread0\s*\(\s*\)\s*\)", " ", s)
    s = re.sub(r"[{};\s]+", "", s)
    return s


def _nullary(head: str, name: str) -> bool:
    """Does this function head declare `name()` or `name(void)`?"""
    return name in head and re.search(r"(?<![\w:~])" + re.escape(name) + r"\s*\(\s*(?:void\s*)?\)", head) is not None


_AFTER_QUALIFIER = re.compile(r"\s*(?:template\s+)?([A-Za-z_]\w*)")


def _qualified(body: str):
    """(offset, "q::name") for each `q :: name` of the code (found from each `::`, a literal)."""
    i = body.find("::")
    while i >= 0:
        j = i
        while j > 0 and body[j - 1] in " \t\r\n":
            j -= 1
        k = j
        while k > 0 and (body[k - 1].isalnum() or body[k - 1] == "_"):
            k -= 1
        m = _AFTER_QUALIFIER.match(body, i + 2)
        if k < j and m:
            yield k, f"{body[k:j]}::{m.group(1)}"
        i = body.find("::", i + 2)


_DEFINE_NAME = re.compile(r"\s*([A-Za-z_]\w*)")


def _macro_atoms(sc: cpp.Scan, prog) -> list[IdentHit]:
    """Atoms named in #define bodies, with the macro's name. An instantiation macro
    (`INSTANTIATE_..._LAUNCHER(T, ...)`, what a rendered kernel-instance template is made of)
    may name the only CUTLASS arch tag of the code it expands to."""
    defines = [d for d in sc.directives if d.name == "define"]
    if not defines:
        return []
    text = "\n".join(sc.code[d.start:d.end] for d in defines)
    out = []
    for r in _rules_that_may_match("atom", text):
        for d in defines:
            name = _DEFINE_NAME.match(d.text)
            if name is None:
                continue
            for m in r.pattern.finditer(sc.code, d.start, d.end):
                out.append(IdentHit(sc.line_of(m.start()), prog.region_of(d.start), -1, r.id, m.group().strip()[:120],
                                    name.group(1)))
    return out


def extract(path: str, data: bytes | str) -> FileFacts:
    sc = cpp.scan(data)
    prog = build_program(sc)
    st = cpp.structure(sc)
    body = sc.body
    tokens = _tokens(sc, prog, st)
    frozen = {k: frozenset(v - STOP_WORDS) for k, v in tokens.items()}
    quals: dict[int, set] = {}
    for at, q in _qualified(body):
        quals.setdefault(st.top_owner_at(at), set()).add(q)
    # every identifier of the body, a small fraction of its size: a rule's literal prefix can
    # only be in the body if its leading identifier part is in one of them (_lead_ident)
    words = "\n".join(set().union(*tokens.values()))
    asm, traps, trap_offs = _asm_facts(sc, prog, st)
    _trap_sites(sc, prog, st, traps, trap_offs)
    idents = _ident_hits(sc, prog, st, words)
    idents.extend(_macro_atoms(sc, prog))
    kernels = _kernel_facts(sc, prog, st, sorted(trap_offs))
    smem = _smem_sites(sc, prog, st)
    # namespaces named by using-directives, using-declarations and aliases; #includes in a scope
    opened = frozenset(m.group(1) or m.group(2) for m in _OPENS.finditer(body)) if "using" in body or "namespace" in body else frozenset()
    scoped = frozenset(d.line for d in sc.directives if d.name == "include" and (
        st.top_owner_at(d.start) >= 0 or any(s <= d.start < e for s, e in st.namespaces)))
    return FileFacts(path, prog, _owner_facts(sc, prog, st), frozen, asm, idents, traps, kernels, smem,
                     len(sc.line_starts), rules_key(), hashlib.sha1(sc.text.encode("latin-1")).hexdigest(),
                     opened, scoped, {k: frozenset(v) for k, v in quals.items()})


def _owner_facts(sc, prog: Program, st) -> list[OwnerFacts]:
    """Owners (functions, classes, ...) with their top-level owner."""
    owners: list[OwnerFacts] = []
    body = sc.body
    for i, o in enumerate(st.owners):
        top = st.top_owner_at(o.start)
        if top < 0:
            top = i
        owners.append(
            OwnerFacts(o.name, o.kind, o.template, o.line, sc.line_of(max(o.start, o.end - 1)), prog.region_of(o.start),
                       o.kernel, o.device_only, o.head_words, top, o.qual, o.ns,
                       o.kind == "func" and _nullary(body[o.start : o.body_start], o.name))
        )
    return owners


def _tokens(sc, prog: Program, st) -> dict[tuple[int, int], set]:
    """Identifiers per (top-level owner or -1 between them, region)."""
    body = sc.body
    tokens: dict[tuple[int, int], set] = {}
    bounds = []  # (start, end, owner) of top-level owners and the gaps between them
    pos = 0
    for s, e, idx in st.top:
        if s > pos:
            bounds.append((pos, s, -1))
        bounds.append((s, e, idx))
        pos = e
    if pos < len(body):
        bounds.append((pos, len(body), -1))
    findall = cpp.IDENT.findall
    for s, e, idx in bounds:
        for ss, se, rid in _segments(prog, s, e):
            words = findall(body, ss, se)
            if words:
                tokens.setdefault((idx, rid), set()).update(words)
    return tokens


def _asm_facts(sc, prog: Program, st) -> tuple[list[AsmFacts], list[TrapSite], list[int]]:
    """asm statements, with the traps written in their literal text (and those traps' offsets)."""
    body = sc.body
    asm: list[AsmFacts] = []
    traps: list[TrapSite] = []
    trap_offs: list[int] = []
    for m in _ASM.finditer(body) if "asm" in body else ():
        pieces, _end = _asm_pieces(sc, m.end() - 1)
        line = sc.line_of(m.start())
        rid = prog.region_of(m.start())
        hits: list[tuple[str, int, str]] = []
        lit = literal_asm_text(pieces)
        if lit is not None:
            text, marks = lit
            for rule_id, off, matched in ptx_hits(text):
                hits.append((rule_id, line_at(marks, off, line), matched))
            if re.search(r"(?:^|[\s;{}])trap\s*;", text):
                traps.append(TrapSite(line, rid, st.top_owner_at(m.start()), "asm-trap", 'asm("trap;")'))
                trap_offs.append(m.start())
        asm.append(AsmFacts(line, rid, st.top_owner_at(m.start()), tuple(pieces), tuple(hits)))
    return asm, traps, trap_offs


def _trap_sites(sc, prog: Program, st, traps: list[TrapSite], trap_offs: list[int]) -> None:
    """Trap calls (__trap(), __builtin_trap(), ...) added to traps and their offsets to trap_offs."""
    body = sc.body
    for m in _TRAP.finditer(body) if any(w in body for w in _TRAP_WORDS) else ():
        kind = m.group(1)
        if kind == "__trap" or kind == "__builtin_trap":
            # a declaration (`void __trap()`) is not a call
            before = body[max(0, m.start() - 40) : m.start()]
            if re.search(r"\b(?:void|define)\s*$", before):
                continue
        line = sc.line_of(m.start())
        text = sc.text[m.start() : sc.text.find(";", m.start(), m.start() + 300) + 1 or m.end()].strip()
        traps.append(TrapSite(line, prog.region_of(m.start()), st.top_owner_at(m.start()), kind, text[:160]))
        trap_offs.append(m.start())


def _ident_hits(sc, prog: Program, st, words: str) -> list[IdentHit]:
    """Intrinsic/atom rules, matched against the code (comments and literals blanked)."""
    body = sc.body
    idents: list[IdentHit] = []
    for r in _rules():
        if r.kind == "ptx":
            continue
        prefixes = _literal_prefixes(r.pattern.pattern)
        if prefixes is not None and not any(_lead_in(pf, words) and pf in body for pf in prefixes):
            continue  # a substring test is far cheaper than scanning the file with the regex
        anchor = _anchor(r.pattern.pattern)
        if anchor and anchor not in body:
            continue
        for m in _matches(r.pattern, prefixes, body):
            text = m.group().strip()
            top = st.top_owner_at(m.start())
            last = re.findall(r"[A-Za-z_]\w*", text)
            if top >= 0 and last and st.owners[top].name in last:
                continue  # the atom's own definition and members
            idents.append(IdentHit(sc.line_of(m.start()), prog.region_of(m.start()), top, r.id, text[:120]))
    return idents


def _kernel_facts(sc, prog: Program, st, trap_offsets: list[int]) -> list[KernelFacts]:
    """Kernels (and functions whose head has a kernel-ish macro such as CUTLASS_GLOBAL, which the
    TU's macro table decides), with their body's segments: real code, trap, printf."""
    body = sc.body
    kernels: list[KernelFacts] = []
    for i, o in enumerate(st.owners):
        if o.kind != "func":
            continue
        macro_words = tuple(w for w in o.head_words if "GLOBAL" in w or "KERNEL" in w)
        if not (o.kernel or macro_words):
            continue
        segs = []
        for ss, se, rid in _segments(prog, o.body_start + 1, max(o.body_start + 1, o.end - 1)):
            seg = body[ss:se]
            lo = bisect_left(trap_offsets, ss)
            has_trap = lo < len(trap_offsets) and trap_offsets[lo] < se
            has_print = bool(_PRINTF.search(seg))
            stripped = seg.strip(" \t\r\n{};")
            if len(stripped) > 600:
                real = True  # fallback stubs are a statement or two; this is real code
            elif has_print or has_trap or _STUBBY.search(seg):
                real = bool(_strip_stub_code(seg))
            else:
                real = bool(stripped)
            if real or has_trap or has_print:
                segs.append((rid, real, has_trap, has_print))
        top = st.top_owner_at(o.start)
        kernels.append(KernelFacts(o.name, o.line, i, top if top >= 0 else i, o.template, macro_words,
                                   tuple(segs), sc.line_of(max(o.start, o.end - 1))))
    return kernels


def _smem_sites(sc, prog: Program, st) -> list[SmemSite]:
    """Static __shared__ arrays of a known element type, and dynamic shared memory sizes."""
    body = sc.body
    smem: list[SmemSite] = []
    for m in _SHARED.finditer(body):
        before = body[max(0, m.start() - 12) : m.start()]
        if "extern" in before:
            continue
        tname = re.sub(r"(?:__align__|alignas)\s*\(\s*\d+\s*\)", "", m.group(1)).strip().split("::")[-1].strip()
        eb = _TYPE_BYTES.get(tname)
        if eb is None:
            continue
        dims = re.findall(r"\[([^\]]+)\]", m.group(3))
        expr = "*".join(f"({d})" for d in dims)
        smem.append(SmemSite(sc.line_of(m.start()), prog.region_of(m.start()), st.top_owner_at(m.start()), "static", eb,
                             expr, sc.text[m.start() : m.end()][:160]))
    for m in _DYN_SMEM.finditer(body):
        smem.append(SmemSite(sc.line_of(m.start()), prog.region_of(m.start()), st.top_owner_at(m.start()), "dynamic", 1,
                             m.group(2).strip(), sc.text[m.start() : m.end()][:160]))
    return smem
