"""Host-side C++ runtime checks that refuse an architecture: gates of kind `cpp-runtime-check`.

Forms recognised (learned from flashinfer 0.7.2's csrc/include):

* check macros whose first argument is the condition that must hold:
  `FLASHINFER_CHECK(mSM == kSM_100 || mSM == kSM_103, "...")`, `TORCH_CHECK(...)`,
  `TVM_FFI_ICHECK(major == 10 && minor == 0) << ...`, `TVM_FFI_CHECK(props.major == 12, RuntimeError)`,
  `TLLM_CHECK(...)`, `TLLM_CHECK_WITH_INFO(...)`, and the two-operand forms
  `TVM_FFI_ICHECK_EQ(major, 10)` (`_NE/_LT/_LE/_GT/_GE`);
* `if (cond) { ... throw / TLLM_THROW / FLASHINFER_ERROR / TVM_FFI_THROW ... }`: the condition refuses.

Architecture operands are found where they are bound: `getSMVersion()` (any namespace; also
`getSmVersion`, `get_sm_version`) is major*10+minor; `cudaDeviceGetAttribute(&v,
cudaDevAttrComputeCapabilityMajor|Minor, ...)` binds v; `p.major`/`p.minor` of a device-properties
object; variables initialised from those (`int sm = getSMVersion();`, `mSM(getSMVersion())`,
`static int SM = utils::getSMVersion()`, `smMajor = getSMVersion() / 10`); constants such as
`constexpr int32_t kSM_100 = 100;` and integer `#define`s from the file and the headers it
includes. The condition is then evaluated for every GPU of the registry (`Gpu.cc`,
`.major`, `.minor`); an operand that stays unknown makes the gate unresolved, with the reason.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..model import CPP_RUNTIME_CHECK, Gate
from ..parsing import cpp
from ..parsing.brackets import split_top_level_commas
from ..parsing.words import WORD_BYTE
from ..sources import CPP_SUFFIXES
from ..targets import registry
from .preproc import ExprParser, Operand, parse_int, tokenize

CHECK_MACROS = ("FLASHINFER_CHECK", "TORCH_CHECK", "TVM_FFI_ICHECK", "TVM_FFI_CHECK", "TLLM_CHECK",
                "TLLM_CHECK_WITH_INFO", "CHECK", "FI_CHECK", "TORCH_INTERNAL_ASSERT")
CMP_SUFFIX = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}
CHECK_RE = re.compile(
    r"\b(" + "|".join(CHECK_MACROS) + r")(?:_(EQ|NE|LT|LE|GT|GE))?\s*\("
)
IF_RE = re.compile(r"\bif\s*\(")
_THROWS = re.compile(r"\bthrow\b|\b\w*_THROW\w*\s*\(|\bFLASHINFER_ERROR\s*\(|\bTORCH_CHECK\s*\(\s*false\b|\bLOG\s*\(\s*FATAL")

# Architecture sources, rewritten to placeholders before evaluation.
_SM_CALL = re.compile(r"(?:\b[\w:]+::)?\b(?:getSMVersion|getSmVersion|get_sm_version|GetSMVersion|getSMVersionFromDevice)\s*\(\s*\)")
_PROP_FIELD = re.compile(r"\b([A-Za-z_]\w*)\s*(?:\.|->)\s*(major|minor)\b")
_ATTR_BIND = re.compile(
    r"cudaDeviceGetAttribute\s*\(\s*&\s*([A-Za-z_]\w*)\s*,\s*cudaDevAttrComputeCapability(Major|Minor)\b"
)
_PROPS_DECL = re.compile(r"\bcudaDeviceProp\s*[&*]?\s*(?:const\s*[&*]?\s*)?([A-Za-z_]\w*)")
_PROPS_GET = re.compile(r"cudaGetDeviceProperties\s*\(\s*&\s*([A-Za-z_]\w*)")
_CONST_DEF = re.compile(
    r"\b(?:static\s+)?(?:inline\s+)?constexpr\s+(?:static\s+)?(?:unsigned\s+)?(?:int|int32_t|uint32_t|int64_t|long|auto|size_t)\s+"
    r"([A-Za-z_]\w*)\s*=\s*(-?\d+)[uUlL]*\s*;"
)
_ENUM_BODY = re.compile(r"\benum\b(?:\s+class|\s+struct)?\s*\w*\s*(?::\s*[\w:]+)?\s*\{([^{}]*)\}")
# `name = init;` / `name(init),` (lookahead: matches may overlap, e.g. a constructor head and its
# member initialisers)
_VAR_INIT = re.compile(r"(?=\b([A-Za-z_]\w*)\s*(?:=(?!=)|\()\s*((?:[^;{}()]|\([^;{}()]*\))*?)\s*\)?\s*[;,{])")

# what a file must hold to be searched: rb"getSMVersion|getSmVersion|get_sm_version|
# ComputeCapability|[.>]major\b" and rb"CHECK|throw|THROW|_ERROR" (see _may_check_arch)
_SOURCE_WORDS = (b"getSMVersion", b"getSmVersion", b"get_sm_version", b"ComputeCapability")
_CHECK_WORDS = (b"CHECK", b"throw", b"THROW", b"_ERROR")
# the spellings _SM_CALL names (getSMVersionFromDevice starts with getSMVersion)
_SM_NAMES = ("getSMVersion", "getSmVersion", "get_sm_version", "GetSMVersion")
CC, MAJOR, MINOR = "__arch_cc__", "__arch_major__", "__arch_minor__"
_ARCH_WORDS = (CC, MAJOR, MINOR)


@dataclass
class _Check:
    offset: int
    line: int
    col: int
    macro: str
    expr: str  # the condition that must hold for the code to proceed
    refuses_when: bool  # False: check macro (expr must hold); True: `if (expr) throw`


_PARENS = re.compile(r"[()]")


def matching_paren(text: str, open_at: int) -> int:
    """Index of the ')' matching text[open_at] == '(' (or -1)."""
    depth = 0
    for m in _PARENS.finditer(text, open_at):
        if m.group() == "(":
            depth += 1
        else:
            depth -= 1
            if depth == 0:
                return m.start()
    return -1


def _split_args(s: str) -> list[str]:
    return [a.strip() for a in split_top_level_commas(s)]


def _find_checks(sc: cpp.Scan) -> list[_Check]:
    body = sc.body
    out: list[_Check] = []
    for m in CHECK_RE.finditer(body):
        close = matching_paren(body, m.end() - 1)
        if close < 0:
            continue
        args = _split_args(sc.code[m.end() : close])
        if not args or not args[0]:
            continue
        if m.group(2):
            if len(args) < 2:
                continue
            expr = f"({args[0]}) {CMP_SUFFIX[m.group(2)]} ({args[1]})"
        else:
            expr = args[0]
        line = sc.line_of(m.start())
        col = m.start() - sc.line_starts[line - 1] + 1
        out.append(_Check(m.start(), line, col, m.group(0)[:-1].strip(), expr, False))
    for m in IF_RE.finditer(body):
        close = matching_paren(body, m.end() - 1)
        if close < 0:
            continue
        rest = body[close + 1 : close + 1 + 800].lstrip()
        if rest.startswith("{"):
            end = rest.find("}")
            block = rest[: end if end >= 0 else 400]
        else:
            block = rest[: rest.find(";") + 1] if ";" in rest else rest[:200]
        if not _THROWS.search(block):
            continue
        line = sc.line_of(m.start())
        col = m.start() - sc.line_starts[line - 1] + 1
        out.append(_Check(m.start(), line, col, "if", sc.code[m.end() : close].strip(), True))
    return out


def _rewrite_sources(expr: str, props: set[str]) -> str:
    # the patterns only run on text holding their names: _SM_CALL's optional qualifier is tried,
    # and backtracked, at every offset of every identifier of a whole file's code
    if any(n in expr for n in _SM_NAMES):
        expr = _SM_CALL.sub(CC, expr)
    if "major" not in expr and "minor" not in expr:
        return expr

    def field(m):
        if m.group(1) in props or re.search(r"prop", m.group(1), re.I):
            return MAJOR if m.group(2) == "major" else MINOR
        return m.group(0)

    return _PROP_FIELD.sub(field, expr)


class _Env:
    """Names bound to architecture sources or constants, for one file (and its headers)."""

    def __init__(self):
        self.consts: dict[str, int] = {}
        self.bind: dict[str, str] = {}  # variable -> rewritten expression
        self.props: set[str] = set()

    def learn_constants(self, sc: cpp.Scan) -> None:
        for m in _CONST_DEF.finditer(sc.body):
            self.consts.setdefault(m.group(1), int(m.group(2)))
        for m in _ENUM_BODY.finditer(sc.body):
            val = -1
            for item in m.group(1).split(","):
                im = re.match(r"\s*([A-Za-z_]\w*)\s*(?:=\s*(-?\w+))?\s*$", item)
                if not im:
                    continue
                if im.group(2) is not None:
                    v = parse_int(im.group(2)) if im.group(2).lstrip("-").isdigit() else self.consts.get(im.group(2))
                    if v is None:
                        break
                    val = v if not im.group(2).startswith("-") else -parse_int(im.group(2)[1:])
                else:
                    val += 1
                if re.search(r"(?i)sm|arch", im.group(1)):
                    self.consts.setdefault(im.group(1), val)
        for d in sc.directives:
            if d.name == "define":
                dm = re.match(r"([A-Za-z_]\w*)\s+\(?\s*(-?\d+)[uUlL]*\s*\)?\s*$", d.text)
                if dm:
                    self.consts.setdefault(dm.group(1), int(dm.group(2)))

    def learn_bindings(self, text: str, scope_text: str) -> None:
        """Variables bound to an architecture source in scope_text (a function or the file)."""
        for m in _ATTR_BIND.finditer(scope_text):
            self.bind[m.group(1)] = MAJOR if m.group(2) == "Major" else MINOR
        for m in _PROPS_DECL.finditer(scope_text):
            self.props.add(m.group(1))
        for m in _PROPS_GET.finditer(scope_text):
            self.props.add(m.group(1))
        rewritten = _rewrite_sources(scope_text, self.props)
        # only statements that mention an architecture source can bind one
        pieces = [p + ";" for p in re.split(r"[;{}]", rewritten) if any(w in p for w in _ARCH_WORDS)]
        for m in _VAR_INIT.finditer("\n".join(pieces)):
            name, init = m.group(1), m.group(2)
            if name in self.bind or name in _ARCH_WORDS or name in ("if", "while", "for", "return", "switch"):
                continue
            if any(w in init for w in _ARCH_WORDS) and not re.search(r"[;{}]", init):
                # `mSM(getSMVersion())`: keep only the initialiser expression
                self.bind[name] = f"({init})"


def _evaluate(expr: str, env: _Env, gpu) -> int | None:
    toks = []
    for t in tokenize(expr):
        if t == CC:
            toks.append(Operand(gpu.cc))
        elif t == MAJOR:
            toks.append(Operand(gpu.major))
        elif t == MINOR:
            toks.append(Operand(gpu.minor))
        elif t[0].isdigit():
            toks.append(Operand(parse_int(t)))
        elif t[0].isalpha() or t[0] == "_":
            if t in env.consts:
                toks.append(Operand(env.consts[t]))
            elif t in ("true", "false"):
                toks.append(Operand(1 if t == "true" else 0))
            else:
                toks.append(Operand(None))
        elif t in ("::", ".", "->"):
            return None
        else:
            toks.append(t)
    # `a.b` and `x::y` left as separate tokens are not operators we know: unknown
    p = ExprParser(toks)
    v = p.parse()
    return v if p.ok else None


def _substitute(expr: str, env: _Env, depth: int = 0) -> str:
    if depth > 6:
        return expr

    def rep(m):
        w = m.group(0)
        return env.bind[w] if w in env.bind else w

    new = re.sub(r"\b[A-Za-z_]\w*\b", rep, expr)
    return new if new == expr else _substitute(new, env, depth + 1)


def _strip_qualifiers(expr: str) -> str:
    # `common::kSM_100` -> `kSM_100`; `static_cast<int>(x)` -> `(x)`; `this->mSM` -> `mSM`
    expr = re.sub(r"\b(?:static_cast|int|int32_t|uint32_t|unsigned)\s*(?:<[^<>]*>)?\s*\(", "(", expr)
    expr = re.sub(r"\bthis\s*->\s*", "", expr)
    expr = re.sub(r"\b(?:[A-Za-z_]\w*\s*::\s*)+(?=[A-Za-z_])", "", expr)
    return expr


def find_runtime_checks(path: str, data: bytes | str, header_texts: list[bytes | str] = (), package: str | None = None,
                        constants=None) -> list[Gate]:
    """Runtime architecture checks in one C++/CUDA file. header_texts: files it includes, read
    for constants such as kSM_100; constants: a callable giving more name -> int constants."""
    sc = cpp.scan(data)
    if not re.search(r"getSMVersion|getSmVersion|get_sm_version|ComputeCapability|\.major\b|->major\b|GetSMVersion", sc.body):
        return []
    checks = _find_checks(sc)
    if not checks:
        return []
    env = _Env()
    env.learn_constants(sc)
    for h in header_texts:
        env.learn_constants(cpp.scan(h))
    st = cpp.structure(sc)
    pulled = constants is None
    env_file = _Env()
    env_file.consts = env.consts
    env_file.learn_bindings(sc.body, sc.code)
    tree = None
    reg = registry()
    out: list[Gate] = []
    bound_anywhere = set(env_file.bind)
    for ch in checks:
        if not (_SM_CALL.search(ch.expr) or _PROP_FIELD.search(ch.expr)
                or bound_anywhere & set(re.findall(r"\b[A-Za-z_]\w*\b", ch.expr))):
            continue  # cannot involve the architecture: skip the per-function work
        scope, fname = _function_of(sc, st, ch.offset)
        env_fn = _Env()
        env_fn.consts = env.consts
        env_fn.props = set(env_file.props)
        env_fn.bind = dict(env_file.bind)
        env_fn.learn_bindings(sc.body, scope)
        raw = ch.expr
        if re.search(r"cudaDeviceGetAttribute|cudaGetDeviceProperties", raw):
            continue  # checks the API call's status, not the architecture
        expr = _rewrite_sources(_strip_qualifiers(raw), env_fn.props)
        expr = _substitute(expr, env_fn)
        if not any(w in expr for w in _ARCH_WORDS):
            continue  # not about the architecture
        if not pulled and set(re.findall(r"\b[A-Za-z_]\w*\b", expr)) - set(_ARCH_WORDS) - set(env.consts):
            pulled = True  # constants from included headers, read only when needed
            for k, v in constants().items():
                env.consts.setdefault(k, v)
        if not fname:
            if tree is None:
                tree = cpp.parse(sc.text)
            fname = cpp.enclosing_function_name(tree, ch.offset, sc.text.encode("latin-1")) or "<file>"
        admits, unknown_for = _admits(reg, expr, env_fn, ch.refuses_when)
        resolved = not unknown_for
        resolution = _resolution(expr, env_fn, unknown_for)
        kind_region = "refusal" if ch.refuses_when else "check"
        out.append(
            Gate(path, ch.line, ch.col, fname, CPP_RUNTIME_CHECK,
                 (f"if ({raw}) throw" if ch.refuses_when else f"{ch.macro}({raw})")[:300],
                 frozenset(admits), resolution, resolved, package, kind_region,
                 [f"{k} = {v}" for k, v in sorted(env_fn.bind.items()) if k in raw][:6])
        )
    return out


def _function_of(sc, st, offset: int) -> tuple[str, str]:
    """(the code of the function holding offset up to it, its qualified name), or (the whole
    file's code, "") outside every function."""
    fidx = st.function_at(offset)
    if fidx < 0:
        return sc.code, ""
    o = st.owners[fidx]
    fname = (o.qual + "::" if o.qual else "") + o.name
    if o.parent >= 0 and not o.qual:
        fname = st.owners[o.parent].name + "::" + o.name
    return sc.code[o.start : offset], fname


def _admits(reg, expr: str, env_fn: _Env, refuses_when: bool) -> tuple[set[str], list[str]]:
    """The GPUs the check lets through, and those it could not be evaluated for (admitted too:
    never claim a refusal we cannot show)."""
    admits = set()
    unknown_for = []
    for g in reg.gpus:
        v = _evaluate(expr, env_fn, g)
        if v is None:
            unknown_for.append(g.name)
            admits.add(g.name)
            continue
        ok = (not v) if refuses_when else bool(v)
        if ok:
            admits.add(g.name)
    return admits, unknown_for


def _resolution(expr: str, env_fn: _Env, unknown_for: list[str]) -> str:
    if not unknown_for:
        how = []
        if CC in expr:
            how.append("getSMVersion() -> major*10+minor")
        if MAJOR in expr or MINOR in expr:
            how.append("compute capability major/minor")
        return "evaluated: " + ", ".join(how)
    leftovers = sorted(set(re.findall(r"\b[A-Za-z_]\w*\b", expr)) - set(_ARCH_WORDS) - set(env_fn.consts) - {"true", "false"})
    return (f"unresolved: operand(s) {', '.join(leftovers) or '?'} unknown for {', '.join(unknown_for[:4])}"
            + ("..." if len(unknown_for) > 4 else ""))


_INCLUDE_BYTES = re.compile(rb'^[ \t]*#[ \t]*include[ \t]*([<"])([^>"\n]+)[>"]', re.M)


class _ConstIndex:
    """Integer constants (`constexpr int kSM_100 = 100;`, enums, #defines) of a file and the package
    headers it includes, transitively; cached per file."""

    def __init__(self, reader, resolver, max_files: int = 400):
        self.reader = reader
        self.resolver = resolver
        self.max_files = max_files
        self._own: dict[str, dict[str, int]] = {}

    def _vendored(self, path: str) -> bool:
        roots = getattr(self.resolver, "roots", [])
        best = None
        for r in roots:
            if r.path and path.startswith(r.path + "/") and (best is None or len(r.path) > len(best.path)):
                best = r
        return bool(best and best.vendored)

    def own(self, path: str, data: bytes | None = None) -> dict[str, int]:
        got = self._own.get(path)
        if got is None:
            data = data if data is not None else self.reader.read(path)
            env = _Env()
            if data and re.search(rb"constexpr|enum|#\s*define", data):
                env.learn_constants(cpp.scan(data))
            got = self._own[path] = env.consts
        return got

    def closure(self, path: str, data: bytes) -> dict[str, int]:
        out: dict[str, int] = {}
        seen = {path}
        todo = [(path, data)]
        while todo and len(seen) < self.max_files:
            p, d = todo.pop(0)
            for k, v in self.own(p, d).items():
                out.setdefault(k, v)
            if d is None or self.resolver is None:
                continue
            for m in _INCLUDE_BYTES.finditer(d):
                r = self.resolver.resolve(m.group(2).decode("latin-1"), m.group(1) == b"<", p)
                if r.kind == "file" and r.path not in seen and not self._vendored(r.path):
                    seen.add(r.path)
                    todo.append((r.path, self.reader.read(r.path)))
        return out


def _may_check_arch(data: bytes) -> bool:
    """Can the file hold a runtime architecture check: an architecture source (one of
    _SOURCE_WORDS, or `.major`/`->major` ending a word) and a check or throw word? What the two
    patterns in _SOURCE_WORDS' comment find, by substring search at memchr speed (`[.>]major\\b`
    has no literal prefix: re tried it at every offset of each file naming `major`)."""
    if not any(w in data for w in _CHECK_WORDS):
        return False
    if any(w in data for w in _SOURCE_WORDS):
        return True
    i = data.find(b"major", 1)
    while i >= 0:
        if data[i - 1] in b".>" and (i + 5 == len(data) or not WORD_BYTE[data[i + 5]]):
            return True
        i = data.find(b"major", i + 1)
    return False


def scan_runtime_checks(reader, files, resolver=None, package: str | None = None) -> list[Gate]:
    """Runtime checks in many files; constants also come from the package headers each includes."""
    gates: list[Gate] = []
    consts = _ConstIndex(reader, resolver)
    for f in files:
        if not f.endswith(CPP_SUFFIXES):
            continue
        data = reader.read(f)
        if not data or not _may_check_arch(data):
            continue
        gates.extend(find_runtime_checks(f, data, package=package, constants=lambda f=f, d=data: consts.closure(f, d)))
    return sorted(gates, key=Gate.sort_key)
