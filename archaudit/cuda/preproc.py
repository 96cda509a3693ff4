"""Preprocessor evaluation of a translation unit for one compile target (or the host pass).

Two halves:

* `build_program(scan)` turns one file's directives into a target-independent program (plain
  tuples, picklable): conditional groups with numbered regions, defines, undefs, includes,
  `#pragma once`, `#error`, and the include guard when the file has one.
* `Preprocessor` walks a TU's program in order, following includes through an
  `IncludeResolver`, with the macros nvcc predefines for the target (`ruleset.predefined_macros`),
  the JIT's `-D` flags, and every `#define`/`#undef` met on the way.  The result is a state per
  region of every file reached: YES (compiled), NO (not), or MAYBE (the walk could not decide).

Three-valued throughout: an undecidable condition is MAYBE, never guessed; a macro defined in
a MAYBE region is itself uncertain; an include in a MAYBE region is followed, its contents MAYBE.

Conditions are "arch-tainted" when their value depends on the architecture: they read
`__CUDA_ARCH__`-family macros, directly or through macros defined under such conditions
(CUTLASS's `CUTLASS_ARCH_MMA_SM90A_ENABLED`). Tainted regions are what make a trap a stub.
"""
from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections import deque
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

from ..model import Diagnostic
from ..parsing import cpp
from ..parsing.cpp import Directive, Scan
from ..ruledata import load_rule
from . import ruleset
from .includes import IncludeResolver, Resolution

YES, NO, MAYBE = True, False, None  # region states (tri-valued)


def _kleene(a, b, absorbing: bool):
    """Three-valued AND (absorbing False) or OR (absorbing True): the absorbing value wins over
    MAYBE, and MAYBE wins over the other value."""
    if a is absorbing or b is absorbing:
        return absorbing
    if a is None or b is None:
        return None
    return not absorbing


def t_and(a, b):
    return _kleene(a, b, False)


def t_or(a, b):
    return _kleene(a, b, True)


def t_not(a):
    return None if a is None else not a


def t_merge(a, b):
    """State of a region reached by two inclusions: compiled if either compiles it."""
    return t_or(a, b)


# --- per-file program --------------------------------------------------------------------------

OP_IF, OP_ELIF, OP_ELSE, OP_ENDIF, OP_DEFINE, OP_UNDEF, OP_INCLUDE, OP_ONCE, OP_ERROR = range(9)

_IDENT_RE = re.compile(r"[A-Za-z_]\w*")
_DEFINE = re.compile(r"([A-Za-z_]\w*)(\([^)]*\))?(.*)$", re.S)
_INCLUDE = re.compile(r'\s*(?:"([^"]*)"|<([^>]*)>|(.+))')


@dataclass
class Program:
    """Target-independent preprocessor structure of one file."""

    ops: list[tuple]  # see OP_*; each op carries its line
    region_parent: list[int]  # region 0 is the file's top level
    region_line: list[int]  # line of the directive opening the region (0 for region 0)
    region_cond: list[str]  # that directive's condition text ("" for #else / region 0)
    region_starts: list[int]  # offsets where the current region changes (sorted)
    region_at: list[int]  # region id from that offset on
    guard: str | None = None
    once: bool = False
    defines: frozenset = frozenset()  # every name this file #defines (any region)
    # identifiers in each macro's replacement text (for reachability through macros such as
    # DISPATCH_PATTERN(...) that expand to calls)
    define_idents: dict = field(default_factory=dict)
    # (line, message) for conditionals nvcc would reject: #endif/#else without #if, #if without #endif
    problems: list = field(default_factory=list)

    def region_of(self, offset: int) -> int:
        i = bisect_right(self.region_starts, offset) - 1
        return self.region_at[i] if i >= 0 else 0


_NV_DISPATCH = re.compile(r"\b(NV_IF_TARGET|NV_IF_ELSE_TARGET|NV_DISPATCH_TARGET)\s*\(")


@lru_cache(maxsize=1)
def _nv_queries() -> tuple[tuple[re.Pattern, str], ...]:
    """rules/macros.toml [nv_target]: query-name pattern -> #if condition template."""
    out = []
    for name, cond in load_rule("macros").get("nv_target", {}).items():
        if name == "_comment" or not isinstance(cond, str):
            continue
        pat = re.escape(name).replace(re.escape("{N}"), r"(?P<N>\d+)")
        out.append((re.compile(pat + r"$"), cond))
    return tuple(out)


def nv_query_condition(query: str) -> str:
    """The #if condition an <nv/target> query (NV_PROVIDES_SM_90, NV_IS_HOST ...) amounts to
    under nvcc; an unknown query gives a condition the walk cannot decide."""
    q = query.strip()
    for pat, cond in _nv_queries():
        m = pat.match(q)
        if m:
            return cond.replace("{N}", m.groupdict().get("N") or "")
    return UNKNOWN_VALUE


def _close_paren(body: str, open_: int) -> int:
    """Offset of the ')' matching body[open_] == '(' (literals are blanked in body), or -1."""
    depth = 0
    for m in re.finditer(r"[()]", body[open_:]):
        depth += 1 if m.group() == "(" else -1
        if depth == 0:
            return open_ + m.start()
    return -1


def _nv_dispatch_directives(sc: Scan) -> list:
    """Pseudo-directives for <nv/target>'s NV_IF_TARGET / NV_IF_ELSE_TARGET / NV_DISPATCH_TARGET.

    Under nvcc these macros select their branches in the preprocessor (nv/detail/__target_macros:
    `_NV_TARGET_IF` pastes the query into `_NV_TARGET_BOOL_...`, 1 or 0 for the pass), so the code
    of a branch not taken is never compiled, exactly as under `#if`. Each branch becomes a region
    whose condition is the query's (rules/macros.toml [nv_target]). Invocations that straddle a
    real conditional directive are left alone."""
    body = sc.body
    if "NV_" not in body:
        return []
    dir_starts = [d.start for d in sc.directives]
    out = []
    # nested invocations are found in turn: their regions nest inside the enclosing branch
    for m in _NV_DISPATCH.finditer(body):
        open_ = m.end() - 1
        close = _close_paren(body, open_)
        if close < 0:
            continue
        i, j = bisect_left(dir_starts, open_), bisect_left(dir_starts, close)
        depth = 0
        ok = True
        for d in sc.directives[i:j]:
            if d.name in ("if", "ifdef", "ifndef"):
                depth += 1
            elif d.name == "endif":
                depth -= 1
                ok = ok and depth >= 0
            elif d.name in ("elif", "else", "elifdef", "elifndef") and depth == 0:
                ok = False
        if not ok or depth != 0:
            continue
        # arguments: query, (code), [query, (code)] ... ; NV_IF_TARGET(q, (t)[, (f)])
        args = []
        k = open_ + 1
        while k < close:
            while k < close and body[k] in " \t\r\n,":
                k += 1
            if k >= close:
                break
            if body[k] == "(":
                e = _close_paren(body, k)
                if e < 0 or e > close:
                    args = None
                    break
                args.append(("code", k, e))
                k = e + 1
            else:
                e = k
                while e < close and body[e] not in ",(":
                    e += 1
                args.append(("query", k, e))
                k = e
        if not args:
            continue
        kinds = [a[0] for a in args]
        if m.group(1) == "NV_DISPATCH_TARGET":
            ok = len(args) % 2 == 0 and all(kinds[x] == "query" and kinds[x + 1] == "code" for x in range(0, len(args), 2))
            branches = [(body[args[x][1]:args[x][2]], args[x + 1]) for x in range(0, len(args), 2)] if ok else []
        else:
            ok = kinds in (["query", "code"], ["query", "code", "code"])
            branches = [(body[args[0][1]:args[0][2]], args[1])] if ok else []
            if ok and len(args) == 3:
                branches.append((None, args[2]))
        if not branches:
            continue
        for n, (query, (_, b0, b1)) in enumerate(branches):
            line = sc.line_of(b0)
            if query is None:
                out.append(Directive(line, b0, b0 + 1, "else", ""))
            else:
                out.append(Directive(line, b0, b0 + 1, "if" if n == 0 else "elif", nv_query_condition(query)))
        last_end = branches[-1][1][2]
        out.append(Directive(sc.line_of(last_end), last_end, last_end, "endif", ""))
    return out


def build_program(sc: Scan) -> Program:
    ops: list[tuple] = []
    parent = [0]
    rline = [0]
    rcond = [""]
    starts = [0]
    at = [0]
    stack: list[int] = []  # region id of the enclosing region of each open group
    opened: list[tuple[int, bool]] = []  # (line of the #if, #else seen) per open group
    problems: list[tuple[int, str]] = []
    cur = 0
    directives = sc.directives
    nv = _nv_dispatch_directives(sc)
    if nv:
        directives = sorted(list(directives) + nv, key=lambda d: d.start)
    for d in directives:
        name, text, line = d.name, d.text, d.line
        if name in ("if", "ifdef", "ifndef"):
            cond = text if name == "if" else (f"defined({_first_word(text)})" if name == "ifdef" else f"!defined({_first_word(text)})")
            stack.append(cur)
            rid = len(parent)
            parent.append(cur)
            rline.append(line)
            rcond.append(cond)
            ops.append((OP_IF, line, rid, cond))
            opened.append((line, False))
            cur = rid
        elif name in ("elif", "else", "elifdef", "elifndef"):
            if not stack:
                problems.append((line, f"#{name} without #if"))
                continue
            if opened[-1][1]:
                problems.append((line, f"#{name} after #else (the #if is at line {opened[-1][0]})"))
            if name == "else":
                opened[-1] = (opened[-1][0], True)
            rid = len(parent)
            parent.append(stack[-1])
            rline.append(line)
            if name == "else":
                rcond.append("")
                ops.append((OP_ELSE, line, rid))
            else:
                cond = text if name == "elif" else (f"defined({_first_word(text)})" if name == "elifdef" else f"!defined({_first_word(text)})")
                rcond.append(cond)
                ops.append((OP_ELIF, line, rid, cond))
            cur = rid
        elif name == "endif":
            if not stack:
                problems.append((line, "#endif without #if"))
                continue
            ops.append((OP_ENDIF, line))
            cur = stack.pop()
            opened.pop()
        else:
            op = _plain_op(name, text, line)
            if op is not None:
                ops.append(op)
            continue
        starts.append(d.end)
        at.append(cur)
    for line, _ in opened:
        problems.append((line, "#if without #endif (unterminated at the end of the file)"))
    prog = Program(ops, parent, rline, rcond, starts, at)
    prog.problems = problems
    prog.once = any(op[0] == OP_ONCE for op in ops)
    prog.defines = frozenset(op[2] for op in ops if op[0] == OP_DEFINE)
    prog.define_idents = _define_idents(ops)
    prog.guard = _include_guard(sc, ops)
    return prog


def _plain_op(name: str, text: str, line: int) -> tuple | None:
    """The op of a directive that opens no region (#define, #undef, #include, #pragma once,
    #error), or None for one the program does not keep."""
    if name == "define":
        m = _DEFINE.match(text)
        if m:
            params = None
            if m.group(2) is not None:
                params = tuple(p.strip() for p in m.group(2)[1:-1].split(",") if p.strip())
            return (OP_DEFINE, line, m.group(1), params, m.group(3).strip())
    elif name == "undef":
        return (OP_UNDEF, line, _first_word(text))
    elif name in ("include", "include_next", "import"):
        m = _INCLUDE.match(text)
        if m:
            if m.group(1) is not None:
                return (OP_INCLUDE, line, m.group(1), False, name == "include_next", False)
            if m.group(2) is not None:
                return (OP_INCLUDE, line, m.group(2), True, name == "include_next", False)
            # computed include: #include MACRO
            return (OP_INCLUDE, line, m.group(3).strip(), False, name == "include_next", True)
    elif name == "pragma":
        if re.match(r"once\b", text):
            return (OP_ONCE, line)
    elif name == "error":
        return (OP_ERROR, line, text)
    return None


def _define_idents(ops: list[tuple]) -> dict[str, frozenset]:
    """Macro name -> the identifiers its bodies name (its parameters and itself left out)."""
    di: dict[str, set] = {}
    for op in ops:
        if op[0] == OP_DEFINE and op[4]:
            words = set(_IDENT_RE.findall(op[4])) - set(op[3] or ())
            words.discard(op[2])
            if words:
                di.setdefault(op[2], set()).update(words)
    return {k: frozenset(v) for k, v in di.items()}


def unbalanced_conditionals(data: bytes) -> list[tuple[int, str]]:
    """(line, message) for every #if/#else/#endif out of place in one file, without includes.

    A scan reads every C/C++ file but preprocesses only the translation units a JIT module
    reaches, so this is the check every other file gets. Counting directive spellings runs at
    memchr speed and only files whose counts differ are lexed (comments and strings skipped);
    a file whose counts balance by accident (an #if inside a comment) is not reported here,
    but is reported as soon as a TU that includes it is preprocessed."""
    opens = data.count(b"#if") + data.count(b"# if") + data.count(b"%:if")
    closes = data.count(b"#endif") + data.count(b"# endif") + data.count(b"%:endif")
    if opens == closes:
        return []
    return list(build_program(cpp.scan(data)).problems)


def unbalanced_message(msg: str) -> str:
    return f"{msg}; nvcc rejects this file"


def _first_word(text: str) -> str:
    m = re.match(r"\s*([A-Za-z_]\w*)", text)
    return m.group(1) if m else ""


def _include_guard(sc: Scan, ops: list[tuple]) -> str | None:
    """`#ifndef G / #define G ... #endif` wrapping the whole file: G, else None."""
    if len(ops) < 3 or ops[0][0] != OP_IF or ops[1][0] != OP_DEFINE:
        return None
    m = re.fullmatch(r"\s*!\s*defined\s*\(?\s*([A-Za-z_]\w*)\s*\)?\s*", ops[0][3])
    if not m or ops[1][2] != m.group(1):
        return None
    depth = 0
    for i, op in enumerate(ops):
        if op[0] == OP_IF:
            depth += 1
        elif op[0] == OP_ENDIF:
            depth -= 1
            if depth == 0:
                if i != len(ops) - 1:
                    return None
                break
        elif op[0] in (OP_ELIF, OP_ELSE) and depth == 1:
            return None
    first = sc.directives[0] if sc.directives else None
    last = next((d for d in reversed(sc.directives) if d.name == "endif"), None)
    if first is None or last is None:
        return None
    if sc.body[: first.start].strip() or sc.body[last.end :].strip():
        return None
    return m.group(1)


# --- expressions -------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"\s*(?:(?P<num>\.?\d(?:[\w.]|[eEpP][+-])*)|(?P<id>[A-Za-z_]\w*)|(?P<chr>[uUL]?'(?:[^'\\]|\\.)*')"
    r"|(?P<str>[uUL8]*\"(?:[^\"\\]|\\.)*\")"
    r"|(?P<op>\|\||&&|==|!=|<=|>=|<<|>>|##|[-+*/%<>!~&|^?:(),#\[\]{};.=]))"
)


# Tokens of one logical line (an #if condition, a #define body) that are read at all: the rest of
# a longer line is never tokenized, so a 15 MiB one-line #if costs no more than this (real lines
# have < 500 tokens). A line that long is truncated at MAX_LINE_TOKENS + 1 tokens; callers test
# `len(toks) > MAX_LINE_TOKENS` (too_long) and treat the line as undecidable.
MAX_LINE_TOKENS = 20000


def too_long(toks: tuple) -> bool:
    return len(toks) > MAX_LINE_TOKENS


@lru_cache(maxsize=65536)
def tokenize(text: str) -> tuple[str, ...]:
    out = []
    pos = 0
    n = len(text)
    while pos < n:
        if len(out) > MAX_LINE_TOKENS:
            break  # truncated: too_long() says so
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            if text[pos:].strip() == "":
                break
            out.append(text[pos])  # stray character: keep it so the evaluator fails to UNKNOWN
            pos += 1
            continue
        out.append(m.group(m.lastgroup))
        pos = m.end()
    return tuple(out)


_SIMPLE_DEFINED = re.compile(r"\s*(!)?\s*defined\s*\(?\s*([A-Za-z_]\w*)\s*\)?\s*$")


@lru_cache(maxsize=65536)
def _simple_defined(text: str):
    """(negated, name) for `defined X` / `!defined(X)`, else None."""
    m = _SIMPLE_DEFINED.match(text)
    return (bool(m.group(1)), m.group(2)) if m else None


class Operand:
    """An already evaluated operand inside a token list (from defined(), or an unknown macro)."""

    __slots__ = ("v",)

    def __init__(self, v):
        self.v = v

    def __repr__(self):
        return f"<{self.v}>"


_UNKNOWN = Operand(None)


def parse_int(tok: str) -> int | None:
    t = tok.rstrip("uUlLzZ")
    try:
        if t.lower().startswith("0x"):
            return int(t[2:], 16)
        if t.lower().startswith("0b"):
            return int(t[2:], 2)
        if len(t) > 1 and t.startswith("0") and t.isdigit():
            return int(t, 8)
        return int(t, 10)
    except ValueError:
        return None


_BINARY_PREC = {
    "||": 1, "&&": 2, "|": 3, "^": 4, "&": 5, "==": 6, "!=": 6, "<": 7, ">": 7, "<=": 7, ">=": 7,
    "<<": 8, ">>": 8, "+": 9, "-": 9, "*": 10, "/": 10, "%": 10,
}


# Nesting of one #if expression (parentheses, unary operators, ternaries) the recursive evaluator
# follows; deeper is left undecided with an "expression-depth" diagnostic (real code: < 20).
MAX_EXPR_DEPTH = 256
# #if arithmetic is intmax_t/uintmax_t: results outside 64 bits are unknown, not Python bigints
_INT_MIN, _INT_END = -(1 << 63), 1 << 64


class ExprParser:
    """Pratt evaluator over expanded tokens; values are int or None (unknown)."""

    def __init__(self, toks: list):
        self.toks = toks
        self.n = len(toks)
        self.i = 0
        self.ok = True
        self.depth = 0
        self.too_deep = False

    def parse(self):
        v = self.expr(0)
        if self.i != self.n:
            self.ok = False
        return v

    def expr(self, min_prec: int):
        return self._nested(self._expr, min_prec)

    def _nested(self, parse, *args):
        """parse(*args) one level deeper; past MAX_EXPR_DEPTH the expression is not evaluated."""
        self.depth += 1
        try:
            if self.depth > MAX_EXPR_DEPTH:
                self.ok = False
                self.too_deep = True
                self.i = self.n
                return None
            return parse(*args)
        finally:
            self.depth -= 1

    def _expr(self, min_prec: int):
        left = self.unary()
        toks = self.toks
        while self.i < self.n:
            op = toks[self.i]
            if op == "?":
                if min_prec > 0:
                    break
                self.i += 1
                a = self.expr(0)
                if self.i >= self.n or toks[self.i] != ":":
                    self.ok = False
                    return None
                self.i += 1
                b = self.expr(0)
                if left is None:
                    left = a if a == b else None
                else:
                    left = a if left else b
                continue
            prec = _BINARY_PREC.get(op) if isinstance(op, str) else None
            if prec is None or prec < min_prec or prec == 0:
                break
            if prec <= min_prec - 1:
                break
            self.i += 1
            right = self.expr(prec + 1)
            left = _apply(op, left, right)
        return left

    def unary(self):
        return self._nested(self._unary)

    def _unary(self):
        if self.i >= self.n:
            self.ok = False
            return None
        t = self.toks[self.i]
        self.i += 1
        if isinstance(t, Operand):
            return t.v
        if t == "(":
            v = self.expr(0)
            if self.i >= self.n or self.toks[self.i] != ")":
                self.ok = False
                return None
            self.i += 1
            return v
        if t == "!":
            v = self.unary()
            return None if v is None else int(not v)
        if t == "~":
            v = self.unary()
            return None if v is None else ~v
        if t == "-":
            v = self.unary()
            return None if v is None else -v
        if t == "+":
            return self.unary()
        self.ok = False
        return None


def _apply(op, a, b):
    if op == "&&":
        if a == 0 or b == 0:
            return 0 if (a is not None or b is not None) and (a == 0 or b == 0) else None
        return None if a is None or b is None else 1
    if op == "||":
        if (a is not None and a != 0) or (b is not None and b != 0):
            return 1
        return None if a is None or b is None else 0
    if a is None or b is None:
        return None
    try:
        if op == "|":
            return a | b
        if op == "^":
            return a ^ b
        if op == "&":
            return a & b
        if op == "==":
            return int(a == b)
        if op == "!=":
            return int(a != b)
        if op == "<":
            return int(a < b)
        if op == ">":
            return int(a > b)
        if op == "<=":
            return int(a <= b)
        if op == ">=":
            return int(a >= b)
        if op == "<<":
            return a << b if 0 <= b < 64 else None
        if op == ">>":
            return a >> b if 0 <= b < 64 else None
        if op == "+":
            return _fit(a + b)
        if op == "-":
            return _fit(a - b)
        if op == "*":
            return _fit(a * b)
        if op in ("/", "%"):
            if b == 0:
                return None
            q = abs(a) // abs(b)  # C truncates toward zero; exact, unlike a float division
            q = q if (a >= 0) == (b >= 0) else -q
            return _fit(q) if op == "/" else _fit(a - b * q)
    except (OverflowError, ValueError):
        return None
    return None


def _fit(v: int) -> int | None:
    return v if _INT_MIN <= v < _INT_END else None


# --- macro table -------------------------------------------------------------------------------


@dataclass
class Macro:
    params: tuple[str, ...] | None  # None: object-like
    body: tuple[str, ...]  # tokens
    certain: bool = True  # False: may or may not be defined (or defined differently) here
    tainted: bool = False  # defined under an arch-dependent condition
    text: str = ""  # replacement text as written
    where: tuple[str, int] | None = None  # (path, line) of the #define


_ARCH_FAMILY = re.compile(r"__CUDA_ARCH_(?:FEAT_SM\d+_ALL|SPECIFIC__|FAMILY_SPECIFIC__)$")


# Names that only nvcc defines: the ruleset records every such macro nvcc predefines, so one
# absent from it is really undefined.
_COMPILER_OWNED = re.compile(r"^(?:__CUDA_ARCH|__CUDACC|__NVCC)")

# The host environment a JIT build runs in: nvcc with gcc on Linux and -std=c++17, as flashinfer's
# JIT passes. nvcc preprocesses both passes with the host compiler, so these hold in both.
HOST_ENV_DEFINED: dict[str, int | None] = {
    "__cplusplus": 201703,
    "__linux__": 1,
    "__unix__": 1,
    "__ELF__": 1,
    "__LP64__": 1,
    "__CHAR_BIT__": 8,
    "__SIZEOF_INT128__": 16,
    "__ORDER_LITTLE_ENDIAN__": 1234,
    "__ORDER_BIG_ENDIAN__": 4321,
    "__BYTE_ORDER__": 1234,
    "__EXCEPTIONS": 1,
    "__GXX_RTTI": 1,
    # Assumed host compiler: gcc 11 on x86-64 (any gcc nvcc 13 accepts decides the same arch
    # questions; what depends on the exact host compiler is not an architecture question).
    "__GNUC__": 11,
    "__GNUC_MINOR__": 4,
    "__GNUC_PATCHLEVEL__": 0,
    "__x86_64__": 1,
    "__x86_64": 1,
    "__amd64__": 1,
    "__GXX_ABI_VERSION": None,
    "__COUNTER__": None,
    # defined by every C preprocessor, with a value that depends on where it is read (`#line`
    # changes __LINE__): unknown here, never the 0 of an undefined name
    "__LINE__": None,
    "__FILE__": None,
    "__BASE_FILE__": None,
    "__FILE_NAME__": None,
    "__INCLUDE_LEVEL__": None,
    "__DATE__": None,
    "__TIME__": None,
    "__TIMESTAMP__": None,
    "__GLIBCXX__": None,  # libstdc++ is gcc's library; its date stamp is unknown
    "_GLIBCXX_RELEASE": 11,
    # C++17 core feature-test macros (g++ -std=c++17); later ones are undefined (CPP_FEATURES)
    "__cpp_if_constexpr": 201606,
    "__cpp_inline_variables": 201606,
    "__cpp_fold_expressions": 201603,
    "__cpp_nontype_template_args": 201411,
    "__cpp_deduction_guides": 201703,
    "__cpp_structured_bindings": 201606,
    "__cpp_noexcept_function_type": 201510,
    "__cpp_constexpr": 201603,
    "__cpp_variable_templates": 201304,
    "__cpp_aligned_new": 201606,
    "__cpp_capture_star_this": 201603,
    "__cpp_template_auto": 201606,
    "__cpp_nontype_template_parameter_auto": 201606,
    "__cpp_lib_string_view": 201803,
    "__cpp_lib_optional": 201606,
    "__cpp_lib_variant": 202102,
    "__cpp_lib_any": 201606,
    "__cpp_lib_void_t": 201411,
    "__cpp_lib_type_trait_variable_templates": 201510,
    "__cpp_lib_is_invocable": 201703,
    "__cpp_lib_invoke": 201411,
    "__cpp_lib_apply": 201603,
    "__cpp_lib_logical_traits": 201510,
    "__cpp_lib_bool_constant": 201505,
    "__cpp_lib_integer_sequence": 201304,
    "__cpp_lib_byte": 201603,
    "__cpp_rtti": 199711,
    "__cpp_exceptions": 199711,
    "__has_builtin": None,  # gcc >= 10: defined; calls evaluate to unknown
    "__has_attribute": None,
    "__has_cpp_attribute": None,
}
# What the CUDA toolkit headers (outside the package) define once included, checked against the
# CUDA 13.0 headers here; values naming another macro copy it (CUDA_VERSION == CUDART_VERSION).
TOOLKIT_HEADER_DEFINES: dict[str, dict[str, str]] = {
    "cuda.h": {"CUDA_VERSION": "CUDART_VERSION"},
    "cuda_fp16.h": {"__CUDA_FP16_TYPES_EXIST__": "1"},
    "cuda_bf16.h": {"__CUDA_BF16_TYPES_EXIST__": "1", "__CUDA_FP16_TYPES_EXIST__": "1"},
    "cuda_fp8.h": {"__CUDA_FP8_TYPES_EXIST__": "1", "__CUDA_BF16_TYPES_EXIST__": "1", "__CUDA_FP16_TYPES_EXIST__": "1"},
    "cuda_fp6.h": {"__CUDA_FP6_TYPES_EXIST__": "1", "__CUDA_FP8_TYPES_EXIST__": "1", "__CUDA_BF16_TYPES_EXIST__": "1",
                   "__CUDA_FP16_TYPES_EXIST__": "1"},
    "cuda_fp4.h": {"__CUDA_FP4_TYPES_EXIST__": "1", "__CUDA_FP6_TYPES_EXIST__": "1", "__CUDA_FP8_TYPES_EXIST__": "1",
                   "__CUDA_BF16_TYPES_EXIST__": "1", "__CUDA_FP16_TYPES_EXIST__": "1"},
}
HOST_ENV_UNDEFINED = frozenset(
    "__clang__ __CUDA__ _MSC_VER _WIN32 _WIN64 WIN32 __WIN32 __CYGWIN__ __HIP__ __HIPCC__ "
    "__HIP_PLATFORM_AMD__ __HIP_PLATFORM_HCC__ __HIP_DEVICE_COMPILE__ __INTELLISENSE__ __APPLE__ "
    "__QNX__ __ANDROID__ __CUDACC_RTC__ __NVCOMPILER __ICC __INTEL_COMPILER __PGI __aarch64__ _M_X64 "
    "_M_ARM64 _M_ARM64EC __powerpc64__ __ppc64__ __LITTLE_ENDIAN__ __BIG_ENDIAN__ __LCC__ __EDG_VERSION__ "
    "__ibmxl__ __IBMCPP__ __xlC__ __SYCL_DEVICE_ONLY__ __has_feature __has_extension __is_identifier "
    "__has_declspec_attribute _NVHPC_CUDA __NVCOMPILER_CUDA__".split()
)
UNKNOWN_VALUE = "__archaudit_unknown_value__"

# Macros owned by headers outside the package (toolkit, torch, tvm-ffi ...): UNKNOWN when not
# defined by what the walk saw and an external header was included before the test.
_EXTERNAL_OWNED = re.compile(
    r"^(?:CUDA_|CUDART_|__CUDA|__CUDART|__NV_|__NVRTC|CUBLAS|CUDNN|CUSPARSE|CUFFT|CURAND|NCCL|NVSHMEM|NVTX|NV_|"
    r"TORCH_|C10_|AT_|PYBIND11_|DLPACK_|TVM_FFI_|Py_|PY_|_GLIBCXX|_LIBCPP|__GLIBC|__cpp_|_POSIX|_GNU_SOURCE|"
    r"__STDC|MPI_|OMPI_|OPEN_MPI)"
)


# What a macro name's spelling alone says about it (the walk asks for the same names millions
# of times): bits of _name_kind, cached per name.
_K_UNDEFINED, _K_UNKNOWN, _K_EXTERNAL, _K_ARCH_FAMILY = 1, 2, 4, 8
_NAME_KINDS: dict[str, int] = {}


def _name_kind(name: str) -> int:
    k = _NAME_KINDS.get(name)
    if k is None:
        k = 0
        if _COMPILER_OWNED.match(name) or name in HOST_ENV_UNDEFINED or name.startswith(("__cpp_", "_LIBCPP")):
            k |= _K_UNDEFINED
        if name == UNKNOWN_VALUE:
            k |= _K_UNKNOWN
        if _EXTERNAL_OWNED.match(name):
            k |= _K_EXTERNAL
        if _ARCH_FAMILY.match(name):
            k |= _K_ARCH_FAMILY
        _NAME_KINDS[name] = k
    return k


def _mkey(m: "Macro | None"):
    return None if m is None else (m.params, m.body, m.certain, m.tainted)


@dataclass
class CondRecord:
    path: str
    line: int
    directive: str  # "if", "elif", "else"
    text: str
    value: bool | None  # the branch's own condition (None: undecided)
    state: bool | None  # resulting region state (parent and earlier branches included)
    tainted: bool


@dataclass
class IncludeRecord:
    path: str  # includer
    line: int
    resolution: Resolution
    state: bool | None  # state of the region holding the #include


@dataclass
class PreprocResult:
    target: str  # compile-target name, or "host"
    files: list[str] = field(default_factory=list)  # closure in first-inclusion order
    states: dict[str, list] = field(default_factory=dict)  # path -> state per region
    taints: dict[str, list] = field(default_factory=dict)  # path -> arch-tainted per region
    conds: list[CondRecord] = field(default_factory=list)
    includes: list[IncludeRecord] = field(default_factory=list)
    errors: list[tuple[str, int, str, object]] = field(default_factory=list)  # #error reached
    diagnostics: list[Diagnostic] = field(default_factory=list)
    macros: dict[str, Macro] = field(default_factory=dict)  # table at the end of the TU
    unknown_names: dict[str, int] = field(default_factory=dict)  # names that made a condition UNKNOWN
    external_seen: bool = False
    unresolved_seen: list[str] = field(default_factory=list)

    def region_tainted(self, path: str, rid: int) -> bool:
        t = self.taints.get(path)
        return bool(t and t[rid])


def macros_from_defines(defines: dict[str, str | int] | None) -> dict[str, Macro]:
    out = {}
    for k, v in (defines or {}).items():
        m = re.match(r"([A-Za-z_]\w*)(\([^)]*\))?$", k)
        if not m:
            continue
        params = tuple(p.strip() for p in m.group(2)[1:-1].split(",") if p.strip()) if m.group(2) else None
        text = "1" if v is None or v == "" else str(v)
        out[m.group(1)] = Macro(params, tokenize(text), True, False, text, ("<command line>", 0))
    return out


def parse_define_flags(flags) -> dict[str, str]:
    """`-DNAME`, `-DNAME=VAL`, `-D NAME=VAL` flags as a defines dict (`-UNAME` removes)."""
    out: dict[str, str] = {}
    it = iter(flags)
    for f in it:
        if f in ("-D", "-U"):
            f = f + next(it, "")
        if f.startswith("-D") and len(f) > 2:
            name, _, val = f[2:].partition("=")
            out[name] = val if _ else "1"
        elif f.startswith("-U") and len(f) > 2:
            out.pop(f[2:], None)
    return out


# Work one #if condition's macro expansion may take (tokens scanned, substituted and rescanned,
# argument tokens pre-expanded) before the condition is given up as undecided with an
# "expansion-limit" diagnostic. The work, not only the result, is bounded: `B(x) = A(A(x))`
# nested 30 deep doubles the work of each level without ever producing a long result.
MAX_EXPANSION_WORK = 200_000
# Work one translation unit's walk may take in total (the work of every condition expanded, a
# unit per directive of every file walked and WALK_COST per walk of a file): when spent, the walk
# follows no further #include and decides no further condition ("expansion-limit"). Bounds
# macro bombs spread over many conditions and include bombs (unguarded headers including each
# other, 10^8 inclusions). The most a real TU takes (flashinfer 0.7.2's, CUTLASS included) is
# 534,000; the most one of its conditions takes, 1,790.
MAX_TU_WORK = 3_000_000
# A file walk (resolving the #include, the file's program, its region tables) costs about as
# much as this many directives.
WALK_COST = 16
# Tokens of one #if line before expansion (real conditions have < 200).
MAX_IF_TOKENS = 2000
# Macro calls nested in macro arguments, F(G(H(...))): argument pre-expansion recurses per level
# (real code: < 10).
MAX_ARG_NESTING = 32
_EXPANSION_MSG = (f"#if longer than {MAX_IF_TOKENS} tokens, or its macro expansion exceeded {MAX_EXPANSION_WORK} "
                  f"steps or {MAX_ARG_NESTING} nested macro arguments; condition left undecided")
_TU_MSG = (f"preprocessing this translation unit exceeded {MAX_TU_WORK} steps (macro expansion and "
           "directives of every file included); no further #include followed, no further condition decided")


class _OutOfWork(Exception):
    """The expansion of one condition spent its work budget."""


class Preprocessor:
    """Walk of one TU for one pass. `programs(path)` gives a file's Program (cached by the caller)."""

    MAX_DEPTH = 200

    def __init__(
        self,
        resolver: IncludeResolver,
        programs: Callable[[str], Program | None],
        predefined: dict[str, int],
        functions: dict[str, tuple[tuple[str, ...], str]] | None = None,
        defines: dict[str, str | int] | None = None,
        target_name: str = "host",
        arch_names: "ArchNames | frozenset[str]" = frozenset(),
        eval_cache: dict | None = None,
    ):
        self.resolver = resolver
        self.programs = programs
        if not isinstance(arch_names, ArchNames):
            arch_names = ArchNames(frozenset(arch_names), frozenset(arch_names))
        self.arch_value = arch_names.value
        self.arch_defined = arch_names.defined
        self.macros: dict[str, Macro] = {}
        for k, v in predefined.items():
            self.macros[k] = Macro(None, (str(v),), True, k in self.arch_value, str(v), ("<nvcc>", 0))
        for name, (params, body) in (functions or {}).items():
            self.macros[name] = Macro(tuple(params), tokenize(body), True, True, body, ("<nvcc>", 0))
        for k, v in HOST_ENV_DEFINED.items():
            self.macros.setdefault(k, Macro(None, (str(v) if v is not None else UNKNOWN_VALUE,), True, False, str(v), ("<host>", 0)))
        self.macros.update(macros_from_defines(defines))
        self.shadow: set[str] = set()  # names #defined/#undef'd in skipped arch-dependent regions
        self.pkg_names: set[str] = set()  # names #defined by the package files walked so far
        self._reads: dict[str, Macro | None] = {}
        self._eval_cache: dict[str, list] = eval_cache if eval_cache is not None else {}
        self.res = PreprocResult(target_name)
        self._once: dict[str, bool | None] = {}  # path -> best state it was included with
        self._stack: list[str] = []
        self._taint = False
        self._budget_hit = False
        self._arg_depth = 0
        self._left = MAX_EXPANSION_WORK  # work left to the expansion running now
        self._tu_left = MAX_TU_WORK  # work left to the whole walk
        self._stopped = False  # _tu_left ran out: no further include, no further condition

    # -- policy for names no #define reached
    def undefined_policy(self, name: str):
        """0/False when the name is surely undefined here, None when it may be defined."""
        kind = _NAME_KINDS.get(name)
        if kind is None:
            kind = _name_kind(name)
        if kind & _K_UNDEFINED:
            return False  # C++20-and-later feature macros are undefined under -std=c++17
        if kind & _K_UNKNOWN:
            return None
        if name in self.pkg_names:
            return False  # the package defines it somewhere we read, and not before this point
        if self.res.unresolved_seen:
            return None  # a header we could not read may define anything
        if self.res.external_seen and kind & _K_EXTERNAL:
            return None
        return False

    # -- expansion and evaluation
    def _expand(self, toks, hide: frozenset = frozenset()) -> list:
        """Macro-expand a token list for #if: proper rescanning (a replacement is spliced back in
        front of the remaining input, so `F(x)(y)` and names produced by `##` work), hide sets per
        token against recursion, `defined` and `__has_include` handled before expansion.
        Returns strings (operators, leftover identifiers) and Operand operands."""
        work = deque((t, hide) if isinstance(t, str) else (t, hide) for t in toks)
        out: list = []
        macros = self.macros
        reads = self._reads
        while work:
            self._left -= 1
            if self._left < 0:
                raise _OutOfWork  # runaway expansion: the caller gives up on this expression
            t, hs = work.popleft()
            if not isinstance(t, str):
                out.append(t)
                continue
            if t == "defined":
                name = _defined_operand(work)
                out.append(Operand(self._defined(name)) if isinstance(name, str) else _UNKNOWN)
                continue
            c = t[0]
            if c.isdigit() or (c == "." and len(t) > 1):
                v = parse_int(t)
                out.append(Operand(v) if v is not None else _UNKNOWN)
                continue
            if c == "'" or (len(t) > 1 and t[1] == "'"):
                out.append(Operand(_char_value(t)))
                continue
            if not (c.isalpha() or c == "_"):
                out.append(t)
                continue
            m = macros.get(t)
            reads[t] = m
            if m is None or t in hs:
                out.append(self._not_expanded(t, m, hs, work))
                continue
            if m.tainted:
                self._taint = True
            nh = hs | {t}
            if m.params is None:
                if not m.certain:
                    out.append(_UNKNOWN)
                    continue
                work.extendleft((bt, nh) for bt in reversed(m.body))
                continue
            if not work or work[0][0] != "(":
                out.append(Operand(0))  # a function-like macro's bare name is a plain identifier: 0
                continue
            args = _take_args(work)
            if args is None:
                return [_UNKNOWN]
            if not m.certain:
                out.append(_UNKNOWN)
                continue
            if not self._push_expansion(m, args, nh, work):
                out.append(_UNKNOWN)
        return out

    def _not_expanded(self, t: str, m: Macro | None, hs: frozenset, work: deque):
        """The operand of an identifier #if does not expand: true/false, __has_include(...), an
        undefined name (by undefined_policy, or unknown) or a macro inside its own expansion (0).
        `FOO(x)` with FOO undefined (__has_builtin and friends) is unknown."""
        if t == "true":
            return Operand(1)
        if t == "false":
            return Operand(0)
        if t in ("__has_include", "__has_include_next"):
            arg = _take_call(work)
            return Operand(self._has_include([x for x, _ in arg])) if arg is not None else _UNKNOWN
        if t in self.arch_defined or t in self.shadow or _name_kind(t) & _K_ARCH_FAMILY:
            self._taint = True
        # a macro name met inside its own expansion is an ordinary identifier: 0
        pol = (0 if t in hs else None) if m is not None else self.undefined_policy(t)
        if m is None and pol is None:
            self.res.unknown_names[t] = self.res.unknown_names.get(t, 0) + 1
        if work and work[0][0] == "(":
            _take_call(work)
            return _UNKNOWN
        return _UNKNOWN if pol is None else Operand(0)

    def _push_expansion(self, m: Macro, args: list[list], nh: frozenset, work: deque) -> bool:
        """Put the expansion of the function-like macro `m` called with `args` back in front of
        `work` to be rescanned (hidden set `nh`); False when the arguments cannot be substituted."""
        repl = self._substitute(m, args, nh)
        if repl is None:
            return False
        work.extendleft(reversed(repl))
        return True

    def _substitute(self, m: Macro, args: list[list], nh: frozenset):
        params = m.params
        if params and params[-1] == "...":
            fixed = len(params) - 1
            if len(args) > fixed:
                va: list = []
                for k, a in enumerate(args[fixed:]):
                    if k:
                        va.append((",", nh))
                    va.extend(a)
                args = args[:fixed] + [va]
            elif len(args) == fixed:
                args = args + [[]]
            pnames = params[:-1] + ("__VA_ARGS__",)
        else:
            pnames = params
            if len(args) == 1 and not args[0] and not params:
                args = []
        if len(args) != len(pnames):
            return None
        amap = dict(zip(pnames, args))
        body = m.body
        res: list = []
        k = 0
        nb = len(body)
        while k < nb:
            bt = body[k]
            if bt == "#" and k + 1 < nb and body[k + 1] in amap:
                res.append((_UNKNOWN, nh))  # stringizing: not meaningful in #if
                k += 2
                continue
            if bt in amap:
                pasted = (k + 1 < nb and body[k + 1] == "##") or (k > 0 and body[k - 1] == "##")
                if pasted:
                    res.extend(amap[bt])
                else:
                    res.extend((x, nh) for x in self._expand_arg(amap[bt]))
            else:
                res.append((bt, nh))
            k += 1
        if any(t == "##" for t, _ in res):
            out: list = []
            k = 0
            while k < len(res):
                t, h = res[k]
                if t == "##":
                    nxt = res[k + 1][0] if k + 1 < len(res) else ""
                    prev = out.pop()[0] if out else ""
                    if not isinstance(prev, str) or not isinstance(nxt, str):
                        return None
                    out.append((prev + nxt, nh))
                    k += 2
                    continue
                out.append((t, h))
                k += 1
            res = out
        self._left -= len(res)  # each token is built here and scanned again by the caller
        if self._left < 0:
            raise _OutOfWork
        return [(t, h | nh) if isinstance(t, str) else (t, h) for t, h in res]

    def _expand_arg(self, arg: list) -> list:
        """Fully expand one macro argument (pre-expansion), keeping tokens re-scannable."""
        out = []
        for x in self._expand_tokens_keep(arg):
            out.append(x)
        return out

    def _expand_tokens_keep(self, arg: list) -> list:
        # Expanded argument tokens: strings stay strings (leftover identifiers must remain
        # identifiers, e.g. a function-like macro name awaiting its '(' from the body).
        if self._arg_depth >= MAX_ARG_NESTING:  # F(F(F(...))): each level recurses here
            self._budget_hit = _EXPANSION_MSG
            return [_UNKNOWN]
        self._left -= len(arg)
        if self._left < 0:
            raise _OutOfWork
        saved = self._taint
        toks = [t for t, _ in arg]
        hide = frozenset().union(*[h for _, h in arg]) if arg else frozenset()
        self._arg_depth += 1
        try:
            res = list(self._expand_keep_names(toks, hide))
        finally:
            self._arg_depth -= 1
        self._taint = self._taint or saved
        return res

    def _expand_keep_names(self, toks, hide) -> list:
        """Like _expand but leaves unknown identifiers as names (they are resolved on rescan)."""
        work = deque((t, hide) for t in toks)
        out: list = []
        macros = self.macros
        while work:
            self._left -= 1
            if self._left < 0:
                raise _OutOfWork
            t, hs = work.popleft()
            if not isinstance(t, str) or not (t[0].isalpha() or t[0] == "_") or t == "defined":
                if t == "defined":
                    out.append(t)
                    # keep `defined X` / `defined(X)` unexpanded for the rescan
                    if work and work[0][0] == "(" and len(work) >= 3:
                        for _ in range(3):
                            out.append(work.popleft()[0])
                    elif work:
                        out.append(work.popleft()[0])
                    continue
                out.append(t)
                continue
            m = macros.get(t)
            self._reads[t] = m
            if m is None or t in hs or not m.certain:
                out.append(t)
                continue
            if m.tainted:
                self._taint = True
            nh = hs | {t}
            if m.params is None:
                work.extendleft((bt, nh) for bt in reversed(m.body))
                continue
            if not work or work[0][0] != "(":
                out.append(t)
                continue
            args = _take_args(work)
            if args is None:
                return out + [t]
            if not self._push_expansion(m, args, nh, work):
                out.append(_UNKNOWN)
        return out

    def _defined(self, name: str):
        if name in self.arch_defined or name in self.shadow or _name_kind(name) & _K_ARCH_FAMILY:
            self._taint = True  # defined for some targets and not for others
        m = self.macros.get(name)
        self._reads[name] = m
        if m is not None:
            # a predefined macro's taint is about its value; its definedness is arch_defined's
            if m.tainted and m.where != ("<nvcc>", 0):
                self._taint = True
            return 1 if m.certain else None
        if name in ("__has_include", "__has_include_next"):
            return 1
        pol = self.undefined_policy(name)
        if pol is None:
            self.res.unknown_names[name] = self.res.unknown_names.get(name, 0) + 1
            return None
        return 0

    def _has_include(self, toks) -> int | None:
        text = "".join(t for t in toks if isinstance(t, str))
        m = re.fullmatch(r'"([^"]*)"|<(.*)>', text)
        if not m or not self._stack:
            return None
        spelled, angled = (m.group(1), False) if m.group(1) is not None else (m.group(2), True)
        r = self.resolver.resolve(spelled, angled, self._stack[-1])
        if r.kind == "file":
            return 1
        if r.kind == "external" and spelled in TOOLKIT_HEADER_DEFINES:
            return 1  # toolkit headers every supported nvcc ships
        return None

    def expand(self, toks, keep_names: bool = False) -> list | None:
        """`_expand` (or `_expand_keep_names`) of one expression under its work budget: the
        expression's own (MAX_EXPANSION_WORK) or what is left of the walk's, whichever is less.
        None when it ran out: `_budget_hit` says which, and a spent walk is stopped."""
        if self._stopped:
            return None
        self._left = start = min(MAX_EXPANSION_WORK, self._tu_left)
        try:
            return self._expand_keep_names(toks, frozenset()) if keep_names else self._expand(toks)
        except _OutOfWork:
            if start < MAX_EXPANSION_WORK:
                self._stopped = True
                self._budget_hit = _TU_MSG
            else:
                self._budget_hit = _EXPANSION_MSG
            return None
        finally:
            self._tu_left -= start - max(self._left, 0)

    def expand_untracked(self, toks) -> list | None:
        """`expand` of an expression read outside the walk's conditions (a constant's value):
        whether it reads arch-dependent macros is cleared first and not reported."""
        self._taint = False
        return self.expand(toks)

    def evaluate(self, text: str) -> tuple[bool | None, bool]:
        """(value, tainted) of an #if expression under the current macro table.

        Results are cached by text together with every macro the evaluation looked up (and the
        policy answer for names that were undefined): a later evaluation with the same lookups
        gives the same answer, which makes the thousands of repeated library conditions cheap."""
        self._budget_hit = False
        if self._stopped:
            return None, False
        simple = _simple_defined(text)
        if simple is not None:
            self._taint = False
            v = self._defined(simple[1])
            if v is None:
                return None, self._taint
            return (not v) if simple[0] else bool(v), self._taint
        entries = self._eval_cache.get(text)
        if entries is not None:
            for reads, result in entries:
                if self._reads_valid(reads):
                    self._taint = result[1]
                    self._budget_hit = result[3]  # reported again for this walk
                    if result[2]:
                        for n, c in result[2].items():
                            self.res.unknown_names[n] = self.res.unknown_names.get(n, 0) + c
                    return result[0], result[1]
        self._reads = {}
        before = dict(self.res.unknown_names) if self.res.unknown_names else {}
        self._budget_hit = False
        val, taint = self._evaluate(text)
        unk = {n: c - before.get(n, 0) for n, c in self.res.unknown_names.items() if c != before.get(n, 0)}
        if self._budget_hit is _TU_MSG:
            return val, taint  # undecided for want of this walk's budget, not for its own reasons
        reads = tuple((n, _mkey(m), (n in self.shadow), (self.undefined_policy(n) if m is None else 0)) for n, m in self._reads.items())
        self._eval_cache.setdefault(text, []).append((reads, (val, taint, unk, self._budget_hit)))
        return val, taint

    def _reads_valid(self, reads) -> bool:
        macros = self.macros
        shadow = self.shadow
        for n, key, sh, pol in reads:
            m = macros.get(n)
            if _mkey(m) != key or (n in shadow) != sh:
                return False
            if m is None and self.undefined_policy(n) != pol:
                return False
        return True

    def _evaluate(self, text: str) -> tuple[bool | None, bool]:
        self._taint = False
        m = _SIMPLE_DEFINED.match(text)
        if m:
            v = self._defined(m.group(2))
            if v is None:
                return None, self._taint
            return (not v) if m.group(1) else bool(v), self._taint
        raw = tokenize(text)
        if len(raw) > MAX_IF_TOKENS:
            self._budget_hit = _EXPANSION_MSG
            return None, self._taint
        toks = self.expand(raw)
        if toks is None:
            return None, self._taint
        p = ExprParser(toks)
        v = p.parse()
        if p.too_deep:
            self._budget_hit = f"#if expression nested deeper than {MAX_EXPR_DEPTH} levels; condition left undecided"
        if not p.ok:
            return None, self._taint
        return (None if v is None else bool(v)), self._taint

    # -- the walk
    def run(self, path: str) -> PreprocResult:
        self._walk(path, True, False)
        self.res.macros = self.macros
        return self.res

    def _walk(self, path: str, ctx, ctx_taint: bool) -> None:
        prog = self.programs(path)
        if prog is None:
            self.res.diagnostics.append(Diagnostic(path, "unreadable", f"cannot read {path}"))
            return
        res = self.res
        if path not in res.states:
            self._first_visit(path, prog)
        states = res.states[path]
        taints = res.taints[path]
        self._tu_left -= len(prog.ops) + WALK_COST
        cur_states = [False] * len(prog.region_parent)
        cur_taints = [False] * len(prog.region_parent)
        cur_states[0] = ctx
        cur_taints[0] = ctx_taint
        self._stack.append(path)
        # group stack: [parent region, taken-so-far (tri), group taint]
        groups: list[list] = []
        cur = 0
        for op in prog.ops:
            kind = op[0]
            if kind == OP_IF:
                rid = op[2]
                pstate = cur_states[cur]
                ptaint = cur_taints[cur]
                if pstate is False:
                    val, taint = False, False
                    st = False
                else:
                    val, taint = self.evaluate(op[3])
                    self._check_budget(path, op[1])
                    st = t_and(pstate, val)
                    if taint or val is None:
                        res.conds.append(CondRecord(path, op[1], "if", op[3], val, st, taint or ptaint))
                groups.append([cur, val if pstate is not False else False, taint])
                cur_states[rid] = st
                cur_taints[rid] = ptaint or taint
                cur = rid
                continue
            if kind == OP_ELIF or kind == OP_ELSE:
                if groups:
                    cur = self._branch(path, op, groups[-1], cur_states, cur_taints)
                continue
            if kind == OP_ENDIF:
                if groups:
                    cur = groups.pop()[0]
                continue
            state = cur_states[cur]
            if state is False:
                if cur_taints[cur] and (kind == OP_DEFINE or kind == OP_UNDEF):
                    self.shadow.add(op[2])  # would be (un)defined for another architecture
                continue
            if kind == OP_DEFINE:
                self._define(path, op, state, cur_taints[cur])
            elif kind == OP_UNDEF:
                self._undef(op[2], state, cur_taints[cur])
            elif kind == OP_INCLUDE:
                self._include(path, op, state, cur_taints[cur])
            elif kind == OP_ERROR:
                res.errors.append((path, op[1], op[2], state, cur_taints[cur]))
        # merge this inclusion's states into the TU-wide view
        for i, s in enumerate(cur_states):
            states[i] = t_merge(states[i], s)
            taints[i] = taints[i] or cur_taints[i]
        self._stack.pop()

    def _first_visit(self, path: str, prog: Program) -> None:
        """A file the TU includes for the first time: its states, its macro names, its problems."""
        res = self.res
        self.pkg_names |= prog.defines
        for line, msg in prog.problems:
            res.diagnostics.append(Diagnostic(path, "unbalanced-conditional", unbalanced_message(msg), line))
        res.files.append(path)
        res.states[path] = [False] * len(prog.region_parent)
        res.taints[path] = [False] * len(prog.region_parent)

    def _branch(self, path: str, op: tuple, g: list, cur_states: list, cur_taints: list) -> int:
        """An #elif or #else of the open group g ([parent region, taken so far, group taint]):
        its region's state and taint; returns the region."""
        kind = op[0]
        parent = g[0]
        rid = op[2]
        pstate = cur_states[parent]
        taken = g[1]
        if pstate is False or taken is True:
            st = False
            val = False
            taint = False
        elif kind == OP_ELSE:
            val, taint = True, False
            st = t_and(pstate, t_not(taken))
            g[1] = True
        else:
            val, taint = self.evaluate(op[3])
            self._check_budget(path, op[1])
            st = t_and(pstate, t_and(t_not(taken), val))
            g[1] = t_or(taken, val)
        g[2] = g[2] or taint
        # An #else/#elif inherits the taint of the whole group: its being taken depends on it.
        cur_taints[rid] = cur_taints[parent] or g[2]
        cur_states[rid] = st
        if pstate is not False and (cur_taints[rid] or val is None):
            self.res.conds.append(CondRecord(path, op[1], "else" if kind == OP_ELSE else "elif",
                                             "" if kind == OP_ELSE else op[3], val, st, cur_taints[rid]))
        return rid

    def _define(self, path: str, op: tuple, state, taint: bool) -> None:
        _, line, name, params, body = op
        macros = self.macros
        old = macros.get(name)
        toks = tokenize(body)
        if too_long(toks):
            toks = (UNKNOWN_VALUE,)  # a body too long to read: its value is unknown
        new = Macro(params, toks, state is True, taint, body, (path, line))
        if state is None and old is not None and old.certain and old.params == params and old.body == new.body:
            new.certain = True
        macros[name] = new

    def _undef(self, name: str, state, taint: bool) -> None:
        macros = self.macros
        if state is True:
            macros.pop(name, None)
        else:
            old = macros.get(name)
            if old is not None:
                old = Macro(old.params, old.body, False, old.tainted or taint, old.text, old.where)
                macros[name] = old

    def _check_budget(self, path: str, line: int) -> None:
        if self._budget_hit:
            msg, self._budget_hit = self._budget_hit, False
            kind = "expansion-limit" if msg in (_EXPANSION_MSG, _TU_MSG) else "expression-depth"
            self.res.diagnostics.append(Diagnostic(path, kind, msg, line))

    def _computed_include(self, path: str, line: int, spelled: str) -> tuple[str, bool] | None:
        """`#include MACRO`: (the header it names, angled), or None (said) when it cannot be evaluated."""
        res = self.res
        toks = self.expand(tokenize(spelled), keep_names=True)
        self._check_budget(path, line)
        text = "".join(t for t in toks if isinstance(t, str)) if toks is not None else ""
        m = re.fullmatch(r'"([^"]*)"|<(.*)>', text.replace(" ", ""))
        if not m:
            res.diagnostics.append(Diagnostic(path, "computed-include", f"cannot evaluate #include {spelled}", line))
            res.unresolved_seen.append(spelled)
            return None
        return (m.group(1), False) if m.group(1) is not None else (m.group(2), True)

    def _not_read(self, path: str, line: int, spelled: str, angled: bool, kind: str, state) -> None:
        """An include that is not walked: a toolkit header (with the macros it is known to define),
        an absolute path, or one not found (a system header when angled)."""
        res = self.res
        if kind == "external":
            res.external_seen = True
            effects = TOOLKIT_HEADER_DEFINES.get(spelled)
            if effects and state is not False:
                for name, val in effects.items():
                    src = self.macros.get(val) if not val.isdigit() else None
                    if src is not None:
                        self.macros[name] = Macro(None, src.body, src.certain and state is True, False, src.text, (spelled, 0))
                    elif val.isdigit():
                        self.macros[name] = Macro(None, (val,), state is True, False, val, (spelled, 0))
            return
        if kind == "absolute":
            # never read (outside the scan root) and it may define anything: unresolved
            if state is True:
                res.unresolved_seen.append(spelled)
            res.diagnostics.append(Diagnostic(path, "absolute-include", f"#include of the absolute path {spelled}: "
                                              "outside the scan root, not read", line))
            return
        if angled:
            # <x> not in the package: a system header we do not know by name
            res.external_seen = True
            res.diagnostics.append(Diagnostic(path, "system-include", f"assumed system header <{spelled}>", line, "note"))
            return
        if state is True:
            res.unresolved_seen.append(spelled)
        res.diagnostics.append(
            Diagnostic(path, "unresolved-include", f"cannot resolve #include {'<' if angled else chr(34)}{spelled}{'>' if angled else chr(34)}", line)
        )

    def _include(self, path: str, op: tuple, state, taint: bool) -> None:
        _, line, spelled, angled, is_next, computed = op
        res = self.res
        if computed:
            got = self._computed_include(path, line, spelled)
            if got is None:
                return
            spelled, angled = got
        after = None
        if is_next:
            # continue the search after the root the including file came from
            for i, r in enumerate(self.resolver.roots):
                if r.path and path.startswith(r.path + "/"):
                    after = i
        r = self.resolver.resolve(spelled, angled, path, after)
        res.includes.append(IncludeRecord(path, line, r, state))
        if r.kind in ("external", "absolute", "unresolved"):
            self._not_read(path, line, spelled, angled, r.kind, state)
            return
        target = r.path
        prog = self.programs(target)
        if prog is None:
            res.diagnostics.append(Diagnostic(target, "unreadable", f"cannot read {target}", line))
            res.unresolved_seen.append(spelled)
            return
        if target in self._stack:
            if not (prog.once or prog.guard):
                # without a guard the real preprocessor recurses to its depth limit and fails
                res.diagnostics.append(Diagnostic(path, "include-cycle", f"include cycle through {target} without an include guard", line))
            return
        seen = self._once.get(target, "never")
        if prog.once or prog.guard:
            if seen is True or (seen is None and state is None):
                return  # already compiled in (at least as surely as now)
            if prog.guard and seen == "never":
                g = self.macros.get(prog.guard)
                if g is not None and g.certain and g.where and g.where[0] != target:
                    return  # guard macro defined elsewhere: the header is skipped
            if seen is None and state is True:
                # included before only under a MAYBE condition: compile it for sure now, forgetting
                # the uncertain definitions that first walk left (the re-walk makes them certain)
                for name in prog.defines | ({prog.guard} if prog.guard else set()):
                    g = self.macros.get(name)
                    if g is not None and not g.certain and g.where and g.where[0] == target:
                        del self.macros[name]
        if self._tu_left <= 0:
            if not self._stopped:
                self._stopped = True
                res.diagnostics.append(Diagnostic(path, "expansion-limit", _TU_MSG, line))
            return
        if len(self._stack) >= self.MAX_DEPTH:
            res.diagnostics.append(Diagnostic(path, "include-depth", f"include depth limit at {target}", line))
            return
        self._once[target] = state if seen == "never" else t_merge(seen, state)
        self._walk(target, state, taint)


def _char_value(t: str) -> int | None:
    body = t[t.index("'") + 1 : -1]
    if len(body) == 1:
        return ord(body)
    return {"\\n": 10, "\\t": 9, "\\r": 13, "\\0": 0, "\\\\": 92, "\\'": 39}.get(body)


def _defined_operand(work: deque):
    """The name after `defined` (`defined X` or `defined(X)`), taken off the work queue; None
    when there is none."""
    if work and work[0][0] == "(":
        if len(work) >= 3 and work[2][0] == ")":
            name = work[1][0]
            for _ in range(3):
                work.popleft()
            return name
        return None
    if work:
        return work.popleft()[0]
    return None


def _take_call(work):
    """Remove a parenthesised group at the front of the work deque; its tokens, or None."""
    if not work or work[0][0] != "(":
        return None
    depth = 0
    got = []
    while work:
        t = work.popleft()
        got.append(t)
        if t[0] == "(":
            depth += 1
        elif t[0] == ")":
            depth -= 1
            if depth == 0:
                return got[1:-1]
    return None


def _take_args(work):
    """Remove `( a, b, ... )` from the front of the work deque: list of argument token lists."""
    depth = 0
    args: list[list] = [[]]
    work.popleft()  # '('
    depth = 1
    while work:
        t = work.popleft()
        x = t[0]
        if x == "(":
            depth += 1
        elif x == ")":
            depth -= 1
            if depth == 0:
                return args
        elif x == "," and depth == 1:
            args.append([])
            continue
        args[-1].append(t)
    return None


# --- ruleset glue ------------------------------------------------------------------------------


def pass_macros(target) -> tuple[dict[str, int], dict[str, tuple[tuple[str, ...], str]], frozenset[str]]:
    """(predefined, function-like, arch-dependent names) for a compile target (None: host pass)."""
    pre = ruleset.predefined_macros(target)
    fn = ruleset.function_macros(target) if hasattr(ruleset, "function_macros") else {}
    return pre, fn, _arch_names()


@dataclass(frozen=True)
class ArchNames:
    """Predefined names that tell device targets apart: by value (__CUDA_ARCH__) and by being
    defined at all (__CUDA_ARCH_FEAT_SM90_ALL). `defined(__CUDA_ARCH__)` is the same for every
    device target, so it does not make a condition architecture-dependent."""

    value: frozenset
    defined: frozenset


@lru_cache(maxsize=1)
def _arch_names() -> ArchNames:
    tables = [ruleset.predefined_macros(t) for t in ruleset.all_compile_targets()]
    names = set().union(*tables)
    value, defined = set(), set()
    for n in names:
        present = {n in tb for tb in tables}
        if len(present) > 1:
            defined.add(n)
        if len({tb.get(n) for tb in tables}) > 1:
            value.add(n)
    # names of the same family that no target defines (future architectures) are arch too
    return ArchNames(frozenset(value), frozenset(defined))
