"""Patches for software-only gates: the smallest edit that makes a gate admit the target, in the
code's own style, checked by evaluating the patched code again before it is offered.

- an architecture list (`supported_major_versions=[9, 10]`, or the constant it names) gets the
  target's major;
- a predicate or flag test (`is_sm90 or is_sm100`) is extended with the same predicate spelled for
  the target (`is_sm120`, `is_sm12x`, ...) when that name exists in scope, else with an explicit
  capability test when the module imports torch;
- a capability comparison gets the target's value in the same spelling: `major == 10` ->
  `major in (10, 12)`, `capability == (10, 0)` -> `capability in ((10, 0), (12, 0))`, a literal
  or module constant of `in`/`not in` gets the target's item (a major, a capability tuple, a
  `major*10+minor` number or an arch string such as "sm_100a"), in the gate's expression or in a
  function its resolution went through;
- a table keyed by capability (`{(10, 0): "sm100a", (10, 3): "sm103a"}.get(cap)`) gets an entry
  for the target with the value of the nearest capability below it: the target then takes a path
  the verdict judged for it (a new value would name a path nobody judged);
- hard-coded nvcc flags (`extra_cuda_cflags=sm90a_flags + [...]`, `_FLAGS[target]`) get the
  target's `-gencode` (the one the JIT builds for it) at the build call: appended to the list
  literal there, else `[*X, "-gencode=..."]`. At the build call rather than in an arch-keyed
  table: every variant the table selects then gives code for the target, whichever key the
  gates let the target through to, and no name for the target has to exist;
- a C++ runtime check (`TVM_FFI_ICHECK(major == 10 && ...)`, `TORCH_CHECK`, `if (sm < 90) throw`)
  gets `|| major == 12` (or `sm == 120`, or a constant such as `kSM_120` the file defines) in the
  check's own operands; a refusal gets `&& major != 12`.

Every candidate is applied in memory and the gate is evaluated again (a Python gate's function by
the interpreter; a C++ check by the runtime-check scan of the edited file, whose preprocessor
directives must be unchanged; build flags by the JIT model on the edited build call): a patch is
offered only if the gate then admits the target, keeps what it admitted and adds nothing beyond
the target's major. The parse uses Python's `ast` on the text; nothing scanned is ever executed.
"""
from __future__ import annotations

import ast
import dataclasses
import difflib
import re
from dataclasses import dataclass

from ..callgraph import Analysis
from ..callgraph.jit import build_admits
from ..cuda import runtime_checks as rc
from ..cuda.runtime_checks import scan_runtime_checks
from ..model import (ARCH_LIST, BUILD_FLAGS, CAPABILITY_COMPARE, CPP_RUNTIME_CHECK, FLAG, NVCC_FLAGS, PREDICATE_CALL,
                     Gate)
from ..parsing import cpp
from ..python.gates import to_gates
from ..python.index import Index
from ..python.interp import Interp
from ..python.values import FuncRef
from ..ruledata import load_rule
from ..sources import Source
from ..targets import Gpu, Registry, admits_of_nvcc_flags
from .patch_warnings import excluding_comments


@dataclass
class Patch:
    path: str
    diff: str | None  # unified diff, paths relative to the scan root (apply with patch -p0)
    description: str  # what the edit does, or why there is none
    new_text: str | None = None  # the whole patched file
    covered: bool = False  # no edit needed: the edits made before it (a combined patch) let the target through
    # comments at the edit that say the target is left out there (patch_warnings): shown, not obeyed
    warnings: list[str] = dataclasses.field(default_factory=list)


class OverlaySource(Source):
    """A Source with some files replaced in memory (for re-evaluating a patched module)."""

    def __init__(self, base: Source, replaced: dict[str, bytes]):
        super().__init__()
        self.base = base
        self.replaced = replaced
        self.label = base.label

    def files(self):
        return self.base.files()

    def read(self, rel):
        if rel in self.replaced:
            return self.replaced[rel]
        return self.base.read(rel)

    def exists(self, rel):
        return rel in self.replaced or self.base.exists(rel)

    def is_dir(self, rel):
        return self.base.is_dir(rel)


def unified_diff(path: str, old: str, new: str) -> str:
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True),
                                 fromfile=path, tofile=path, n=3)
    return "".join(x if x.endswith("\n") else x + "\n\\ No newline at end of file\n" for x in lines)


_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@")


def hunks_unchanged(patch: str, path: str, old: str, new: str) -> bool:
    """Whether `patch` would come out the same for `path` with `new` in place of `old` when the
    edit positions are the same: every hunk of that file quotes lines that are unchanged, at the
    same line numbers, and ends before the old file's end (a hunk that reaches the end has its
    context cut short there, and lines appended after it would join it)."""
    old_lines, new_lines = old.splitlines(), new.splitlines()
    in_file, start, quoted = False, 0, []

    def hunk_ok() -> bool:
        end = start - 1 + len(quoted)
        return end < len(old_lines) and new_lines[start - 1:end] == quoted

    for line in patch.splitlines():
        if line.startswith("--- "):
            if in_file and start and not hunk_ok():
                return False
            in_file, start, quoted = line[4:] == path, 0, []
        elif in_file and line.startswith("@@"):
            if start and not hunk_ok():
                return False
            m = _HUNK.match(line)
            if m is None:
                return False
            start, quoted = int(m.group(1)), []
        elif in_file and start and line[:1] in (" ", "-"):
            quoted.append(line[1:])
    return not (in_file and start) or hunk_ok()


_STARTS: dict[int, tuple[str, list[int]]] = {}


def _offset(text: str, line: int, col: int) -> int:
    """Character offset of a 1-based line and 1-based column (line starts kept for the last few
    texts: one large file is asked for many nodes)."""
    got = _STARTS.get(id(text))
    if got is None or got[0] is not text:
        if len(_STARTS) > 8:
            _STARTS.clear()
        got = _STARTS[id(text)] = (text, [0] + [m.end() for m in re.finditer("\n", text)])
    return got[1][line - 1] + col - 1


def _expr_span(text: str, gate: Gate) -> tuple[int, int, ast.expr] | None:
    """The gate's expression in the file: (start, end, ast) by growing a span from the gate's
    position until it parses as the expression the gate records."""
    start = _offset(text, gate.line, gate.col)
    want = " ".join(gate.expr.split())
    if want.endswith("...") and len(want) >= 240:  # the report shortens long expressions
        return _long_expr_span(text, gate, want[:-3])
    # the recorded text is the expression with whitespace collapsed: match it token by token
    pattern = r"\s*".join(re.escape(tok) for tok in re.findall(r"\w+|[^\w\s]", want))
    m = re.compile(pattern).match(text, start)
    if not m:
        return None
    src = text[m.start():m.end()]
    try:
        node = ast.parse("(" + src + "\n)", mode="eval").body
    except SyntaxError:
        return None
    return m.start(), m.end(), node


def _parse_or_none(text: str) -> ast.Module | None:
    try:
        return ast.parse(text)
    except SyntaxError:
        return None


def _long_expr_span(text: str, gate: Gate, prefix: str) -> tuple[int, int, ast.expr] | None:
    """The outermost expression that starts at the gate's position and whose text begins with
    the recorded (shortened) text."""
    tree = _parse_or_none(text)
    if tree is None:
        return None
    best = None
    for n in ast.walk(tree):
        if isinstance(n, ast.expr) and n.lineno == gate.line and n.col_offset == gate.col - 1:
            a = _offset(text, n.lineno, n.col_offset + 1)
            b = _offset(text, n.end_lineno, n.end_col_offset + 1)
            if " ".join(text[a:b].split()).startswith(prefix) and (best is None or b > best[1]):
                best = (a, b)
    if best is None:
        return None
    try:
        node = ast.parse("(" + text[best[0]:best[1]] + "\n)", mode="eval").body
    except SyntaxError:
        return None
    return best[0], best[1], node


_PRED_ATOM = re.compile(r"is_sm(\d+)([a-z]?)(_supported)?$")
_NAMES_ARCH = re.compile(r"sm_?\d{2,3}|sm\d+x", re.I)


def _atom_name(n: ast.expr) -> tuple[str, ast.expr] | None:
    """The predicate name an atom uses: `x.is_sm100`, `is_sm100_supported(d)`, `_is_sm90`."""
    core = n.func if isinstance(n, ast.Call) else n
    if isinstance(core, ast.Attribute):
        return core.attr, core
    if isinstance(core, ast.Name):
        return core.id, core
    return None


def _candidates(name: str, gpu: Gpu) -> list[str]:
    m = re.search(r"is_sm(\d+)([a-z]?)", name)
    if not m:
        return []
    out = []
    digits = f"{gpu.major}{gpu.minor}"
    # the target itself, then its family / major spelled the ways predicates are named
    for spelled in (digits, f"{gpu.major}x", f"{digits}a", f"{digits}f", f"{gpu.major}0", f"{gpu.major}"):
        cand = name[:m.start(1)] + spelled + name[m.end(2):]
        if cand != name and cand not in out:
            out.append(cand)
    return out


class Patcher:
    def __init__(self, source: Source, index, reg: Registry, evaluate, binding=None):
        """evaluate(source, gate) -> the gate at the same place after re-evaluating its function
        over `source`, or None when it is gone."""
        self.source = source
        self.index = index
        self.reg = reg
        self.evaluate = evaluate
        self.binding = binding  # (module, name) -> the value bound there, None when unbound
        # qualified names of functions another gate holds or goes through, each with that gate
        # (judge.protected_functions, per target): not edited outside the gate, nor the module
        # constants they read
        self.protected: dict[str, str] = {}
        # (path, line) of build calls that also build a module the target may not have, with those
        # modules (inventory.protected_sinks, per target): a -gencode added there reaches them too,
        # except the modules of the gates being patched (own_modules: a partial gate's plan, taken
        # with --include-partial, enables its own modules that cannot run, as its reason says)
        self.protected_sinks: dict[tuple[str, int], list[tuple[str, str]]] = {}
        self.own_modules: set[str] = set()
        self.held: list[str] = []

    def patch(self, gate: Gate, gpu: Gpu, source: Source | None = None) -> Patch:
        """source: where to read and evaluate (an overlay carrying earlier edits), default the scan."""
        base = self.source
        if source is not None:
            self.source = source
        try:
            return self._patch(gate, gpu)
        finally:
            self.source = base

    def _patch(self, gate: Gate, gpu: Gpu) -> Patch:
        data = self.source.read(gate.path)
        if data is None:
            return Patch(gate.path, None, "cannot read the file")
        text = data.decode("utf-8", "surrogateescape")
        self.held = []  # protected functions the gate's value is decided in (set by _scope_edits)
        if gate.kind == BUILD_FLAGS and not self._call_at(text, gate):
            # the inventory's gate at a generator's def: its flags are edited at the build call(s)
            # the patch plan names (judge.patch_plan)
            return Patch(gate.path, None, "hard-coded nvcc flags: the patch edits them at the build call")
        if gate.kind == ARCH_LIST:
            edits = self._arch_list_edits(text, gate, gpu)
        elif gate.kind in (FLAG, PREDICATE_CALL, CAPABILITY_COMPARE):
            edits = self._predicate_edits(text, gate, gpu)
        elif gate.kind in (NVCC_FLAGS, BUILD_FLAGS):
            shared = next((what for name, what in self.protected_sinks.get((gate.path, gate.line), ())
                           if name not in self.own_modules), None)
            if shared is not None:
                return Patch(gate.path, None, f"not edited: this build call also builds {shared}; the target's "
                             f"-gencode added here would let {gpu.name} build that module too: give this module its "
                             "own flags by hand")
            edits = self._flags_edits(text, gate, gpu)
        elif gate.kind == CPP_RUNTIME_CHECK:
            edits = self._cpp_edits(text, gate, gpu)
        else:
            edits = []
        if self._covered(gate, gpu):
            return Patch(gate.path, None, f"admits {gpu.name} with the edits before it", covered=True)
        named = ", ".join(f"{fn} ({self.protected[fn]})" if self.protected.get(fn) else fn for fn in self.held)
        held = ("; not edited, since another gate, which is not to be patched for " + gpu.name + ", also holds or "
                f"goes through it: {named}: an edit there would let {gpu.name} through that gate too"
                ) if self.held else ""
        if not edits:
            return Patch(gate.path, None, self._why_none(text, gate, gpu) + held)
        tried = []
        for path, new_text, what in edits[:MAX_CANDIDATES]:
            old_text = text if path == gate.path else (self.source.read(path) or b"").decode("utf-8", "surrogateescape")
            overlay = OverlaySource(self.source, {path: new_text.encode("utf-8", "surrogateescape")})
            # edits that add lines (an import, a table entry, a list item on its own line) sit
            # above the gate or inside it: a gate below them in the same file moves down
            shift = _lines_added_above(old_text, new_text, gate.line) if path == gate.path else 0
            moved = dataclasses.replace(gate, line=gate.line + shift) if shift else gate
            after = self._reevaluate(overlay, moved, old_text, new_text)
            tried.append(what)
            if after is not None and self._verified(gate, after, gpu):
                # the maintainers' words at the edit travel with its description (the command's
                # messages and the finding's plan)
                warnings = excluding_comments(path, old_text, new_text, gpu)
                return Patch(path, unified_diff(path, old_text, new_text),
                             what + "".join(f" (warning: {w})" for w in warnings), new_text, warnings=warnings)
        more = f"; and {len(tried) - 4} more" if len(tried) > 4 else ""
        return Patch(gate.path, None, "no candidate edit made the gate admit " + gpu.name + " when re-evaluated: "
                     + "; ".join(tried[:4]) + more + held)

    def _covered(self, gate: Gate, gpu: Gpu) -> bool:
        """Whether edits made before this gate's (the overlay's files: an earlier gate of a combined
        patch edited the gate's file, or a function its resolution went through) already make it
        admit the target."""
        replaced = getattr(self.source, "replaced", None)
        if not replaced:
            return False
        mods = {self.index.module_of_path.get(p) for p in replaced} - {None}
        if gate.path not in replaced and not any(v.startswith(f"inferred {m}.") for v in gate.via for m in mods):
            return False
        text = (self.source.read(gate.path) or b"").decode("utf-8", "surrogateescape")
        after = self._reevaluate(self.source, gate, text, text)
        return after is not None and self._verified(gate, after, gpu)

    def _why_none(self, text: str, gate: Gate, gpu: Gpu) -> str:
        """Why no edit was built: what the gate tests and where an edit would have to go."""
        if gate.kind == CPP_RUNTIME_CHECK:
            return ("no architecture operand (a compute-capability major, getSMVersion() or a variable bound to "
                    "them) compared in this check could be spelled for " + gpu.name)
        if gate.kind == ARCH_LIST:
            return "the architecture list is neither a literal nor a module constant in this file"
        if gate.kind in (NVCC_FLAGS, BUILD_FLAGS):
            return "the build call passes its nvcc flags in no keyword argument a list or an item can be added to"
        # `fused is None` after a fused path that may or may not be taken: on the target the
        # outcome hangs on run-time values (shapes, dtypes, a build that may fail), so the target
        # is not refused for certain, and no architecture test decides it
        mixed = next((v for v in gate.via if v.startswith("environment-dependent on ")
                      and gpu.name in v[len("environment-dependent on "):].split(", ")), None)
        if mixed:
            return (f"on {gpu.name} the test's outcome depends on run-time values too ({mixed}): {gpu.name} may "
                    "already take this path, and no edit of an architecture test decides it")
        torch = re.search(r"^\s*import torch\b", text, re.M) is not None
        return (f"no predicate for {gpu.name} (or for its major) is in scope at the gate or in the predicates it "
                f"calls, and no capability comparison or capability-keyed table in the gate or in the functions "
                f"its resolution went through could be spelled for it"
                + ("" if not torch else
                   "; an explicit torch capability test is only added beside a predicate: a test on a value "
                   "(`x is None`) guards code that uses that value, so the value itself must change"))

    def _reevaluate(self, overlay: Source, gate: Gate, old_text: str, new_text: str) -> Gate | None:
        if gate.kind == CPP_RUNTIME_CHECK:
            return _reevaluate_cpp(overlay, gate, old_text, new_text)
        if gate.kind == BUILD_FLAGS:
            return self._reevaluate_build(overlay, gate)
        return self.evaluate(overlay, gate)

    def _verified(self, before: Gate, after: Gate, gpu: Gpu) -> bool:
        # The edit must admit the target, keep what was admitted and add nothing beyond the
        # target's major (an undefined name is "unknown" and would admit everything). A name
        # known only by a name rule is not proof that it exists in scope. A C++ check that was
        # unresolved for other GPUs (an operand unknown on sm_107) may stay so, for those same
        # GPUs only: the target's outcome is then decided.
        added = set(after.admits) - set(before.admits)
        same_major = {g.name for g in self.reg.gpus if g.major == gpu.major}
        new_rules = {v for v in after.via if v.startswith("name-rule")} - set(before.via)
        resolved = after.resolved or (before.kind == CPP_RUNTIME_CHECK and after.resolution == before.resolution)
        return (resolved and not new_rules and gpu.name in after.admits
                and set(before.admits) <= set(after.admits) and added <= same_major)

    def _same_shape(self, modname: str | None, name: str, cand: str) -> bool:
        """A bare-name candidate must be bound in module `modname` and, when both are plain
        functions, take the same required arguments as the name it stands beside."""
        if self.binding is None:
            return True
        new = self.binding(modname, cand) if modname else None
        if new is None:
            return False
        old = self.binding(modname, name)
        if old is None:
            return True
        return _required_params(self.index, old) == _required_params(self.index, new)

    def _import_beside(self, path: str, text: str, tree: ast.Module | None, name: str, cand: str,
                       before: int) -> tuple[int, str] | None:
        """(offset, text to insert) that adds `cand` to the `from X import ... name ...` statement
        of this file (parsed: `tree`), when X binds `cand` with the same required arguments as
        `name` and the statement comes before offset `before`."""
        if self.binding is None or tree is None:
            return None
        here = self.index.module_of_path.get(path) or ""
        for st in tree.body:
            if not isinstance(st, ast.ImportFrom):
                continue
            alias = next((a for a in st.names if a.name == name and a.asname is None), None)
            if alias is None or any(a.name == cand for a in st.names):
                continue
            pkg = here.split(".")[: len(here.split(".")) - st.level] if st.level else []
            if not self._same_shape(".".join(pkg + ([st.module] if st.module else [])), name, cand):
                return None
            end = _offset(text, alias.end_lineno, alias.end_col_offset + 1)
            if end >= before:
                return None
            line_start = text.rfind("\n", 0, end) + 1
            line_end = text.find("\n", end)
            line = text[line_start:line_end if line_end >= 0 else len(text)]
            if line.strip().rstrip(",") == name and line_end >= 0:  # one name per line
                indent = line[: len(line) - len(line.lstrip())]
                return line_end + 1, f"{indent}{cand},\n"
            return end, f", {cand}"
        return None

    # -- architecture lists
    def _arch_list_edits(self, text: str, gate: Gate, gpu: Gpu) -> list[tuple[str, str, str]]:
        span = _expr_span(text, gate)
        if span is None:
            return []
        start, end, call = span
        if not isinstance(call, ast.Call):
            return []
        for kw in call.keywords:
            if kw.arg == "supported_major_versions":
                val = kw.value
                break
        else:
            return []
        src = text[start:end]
        if isinstance(val, (ast.List, ast.Tuple)):
            lo, hi = _node_span("(" + src + "\n)", val)
            lo, hi = start + lo - 1, start + hi - 1
            new_list = _insert_major(text[lo:hi], gpu.major)
            if new_list is None:
                return []
            return [(gate.path, text[:lo] + new_list + text[hi:], f"add {gpu.major} to {text[lo:hi]}")]
        # a constant: list(NAME) or NAME, defined at module level in this file
        name = val.args[0].id if (isinstance(val, ast.Call) and val.args and isinstance(val.args[0], ast.Name)) else (
            val.id if isinstance(val, ast.Name) else None)
        if name is None or self._shared_constants(gate.path, _parse_or_none(text))(name):
            return []
        m = re.search(rf"^{re.escape(name)}\s*(?::[^=\n]*)?=\s*([\[\(][^\]\)]*[\]\)])", text, re.M)
        if not m:
            return []
        new_list = _insert_major(m.group(1), gpu.major)
        if new_list is None:
            return []
        return [(gate.path, text[:m.start(1)] + new_list + text[m.end(1):],
                 f"add {gpu.major} to the constant {name} = {m.group(1)} (every user of {name} changes with it)")]

    # -- predicates and flags
    def _predicate_edits(self, text: str, gate: Gate, gpu: Gpu) -> list[tuple[str, str, str]]:
        span = _expr_span(text, gate)
        if span is None:
            return []
        start, end, expr = span
        return (self._expr_edits(gate.path, text, start, end, expr, gpu) + self._definition_edits(gate, expr, gpu)
                + self._scope_edits(gate, text, (start, end), gpu))

    def _scope_edits(self, gate: Gate, text: str, gate_span: tuple[int, int], gpu: Gpu) -> list[tuple[str, str, str]]:
        """Capability comparisons and capability-keyed tables in the gate's own function (outside
        the gate's expression) and in the functions its resolution went through (`inferred f` in
        its via): where the value the gate tests is decided."""
        out = []
        places = [(gate.path, text, gate.line, None)] if gate.function not in self.protected else []
        held = [gate.function] if gate.function in self.protected else []
        for v in gate.via:
            # not a function named for an architecture (`is_sm100_supported`, `_sm103`): making it
            # true on the target would change what its name says for every caller
            if v.startswith("inferred ") and v[len("inferred "):] in self.protected:
                held.append(v[len("inferred "):])
            elif v.startswith("inferred ") and "<" not in v and not _NAMES_ARCH.search(v.rsplit(".", 1)[-1]):
                where = self._function_place(v[len("inferred "):])
                if where is not None:
                    places.append(where)
        seen = set()
        for path, ftext, line, qual in places:
            tree = _parse_or_none(ftext)
            fn = (_def_at_line(tree, line) if qual is None else _def_named(tree, qual)) if tree is not None else None
            if fn is None or (path, fn.lineno) in seen:
                continue
            seen.add((path, fn.lineno))
            skip = gate_span if path == gate.path else None
            where = f" in {qual} (for every caller of it)" if qual else ""
            for new_text, what in _scope_value_edits(ftext, tree, fn, self.reg, gpu, skip,
                                                     self._shared_constants(path, tree)):
                out.append((path, new_text, what + where))
        self.held = held
        return out

    def _shared_constants(self, path: str, tree: ast.Module | None):
        """name -> whether a protected function of this module reads the module constant `name`."""
        mod = self.index.module_of_path.get(path)
        quals = [q[len(mod) + 1:] for q in self.protected if mod and q.startswith(mod + ".")]
        if mod in self.protected:  # a gate at module level: every constant of the module is read there
            return lambda name: True
        used: set[str] = set()
        for q in quals:
            fn = _def_named(tree, q) if tree is not None else None
            used |= {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)} if fn is not None else set()
        return lambda name: name in used

    def _function_place(self, qualname: str) -> tuple[str, str, int, str] | None:
        """(path, text, 0, qualified name inside the module) of a function named by its dotted name."""
        parts = qualname.split(".")
        for i in range(len(parts) - 1, 0, -1):
            mod = ".".join(parts[:i])
            path = self.index.path_of.get(mod)
            if path is not None:
                data = self.source.read(path)
                if data is None:
                    return None
                return path, data.decode("utf-8", "surrogateescape"), 0, ".".join(parts[i:])
        return None

    # -- hard-coded nvcc flags
    def _call_at(self, text: str, gate: Gate) -> ast.Call | None:
        """The build call the gate stands at (the call itself, for an nvcc-flags gate or a build
        call on a patch plan), with a keyword argument holding nvcc flags."""
        if gate.kind == BUILD_FLAGS and gate.region != "build-call":
            return None
        tree = _parse_or_none(text)
        if tree is None:
            return None
        kws = _flag_keywords()
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and n.lineno == gate.line
                 and any(k.arg in kws for k in n.keywords)]
        return next((c for c in calls if c.col_offset == gate.col - 1), calls[0] if calls else None)

    def _flags_edits(self, text: str, gate: Gate, gpu: Gpu) -> list[tuple[str, str, str]]:
        call = self._call_at(text, gate)
        if call is None:
            return []
        kws = _flag_keywords()
        kw = next(k for k in call.keywords if k.arg in kws)
        flag = gencode_for(self.reg, gpu)
        got = _add_flag(text, kw.value, flag)
        if got is None:
            return []
        new_text, how = got
        return [(gate.path, new_text, f"add {flag} to {kw.arg} ({how})")]

    def _reevaluate_build(self, source: Source, gate: Gate) -> Gate | None:
        """The build call's flags after the edit, evaluated by the JIT model over `source`: the
        GPUs they give code for. When other items come from a parameter or depend on a condition
        (`_FLAGS[target]`), the admitted set is what the call gave before plus what the added flag
        gives, which holds only if the JIT model reads that flag as an unconditional constant
        item of the call."""
        index = Index(source, [])
        index.path_of, index.module_of_path = dict(self.index.path_of), dict(self.index.module_of_path)
        analysis = Analysis(source, index)
        analysis.graph.expand(gate.function)
        jm = analysis.jit.module(f"{gate.path}:{gate.line}:{gate.col}")
        if jm is None:
            return None
        # flags that differ per variant (`_TARGET_FLAGS[target]`: items "one of the values of ...")
        # are read here for every variant at once, while the gate holds one variant's: the edit's
        # own constant flag is added to what the gate admitted
        if not any(f.kind == "unknown" or f.condition for f in jm.flag_items) and not any(
                k.startswith("flags-") for k, _ in jm.unresolved):
            adm = build_admits(jm, self.reg)[0]
        else:
            consts = [f.text for f in jm.flag_items if f.kind == "flag" and not f.condition
                      and f.text.startswith(("-gencode", "--generate-code"))]
            extra = admits_of_nvcc_flags(self.reg, consts) if consts else None
            adm = gate.admits | extra if extra is not None else None
        return dataclasses.replace(gate, admits=frozenset(adm), resolved=True) if adm is not None else None

    # -- C++ runtime checks
    def _cpp_edits(self, text: str, gate: Gate, gpu: Gpu) -> list[tuple[str, str, str]]:
        return [(gate.path, t, what) for t, what in _cpp_check_edits(text, gate, self.reg, gpu)]

    def _definition_edits(self, gate: Gate, expr: ast.expr, gpu: Gpu) -> list[tuple[str, str, str]]:
        """A test like `if apply_fusion(n):` whose architecture part lives in the predicate's own
        `return (...)`: edit that return expression (verified through the gate, as always)."""
        if self.binding is None:
            return []
        modname = self.index.module_of_path.get(gate.path)
        out = []
        for n in ast.walk(expr):
            # not a predicate named for an architecture (`_sm103(d)`): making it true on the target
            # would change what its name says for every caller
            if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Name)) or _NAMES_ARCH.search(n.func.id):
                continue
            v = self.binding(modname, n.func.id) if modname else None
            f = v.single() if v is not None and hasattr(v, "single") else None
            if not isinstance(f, FuncRef) or f.fullname in self.protected:
                continue
            mod = self.index.module(f.module, full=True)
            node = mod.function_node(f.qual, f.key) if mod is not None else None
            if node is None:
                continue
            text = (self.source.read(mod.path) or b"").decode("utf-8", "surrogateescape")
            tree = _parse_or_none(text)
            if tree is None:
                continue
            fn = next((d for d in ast.walk(tree) if isinstance(d, (ast.FunctionDef, ast.AsyncFunctionDef))
                       and d.name == f.qual.rsplit(".", 1)[-1] and d.lineno <= node.line <= d.end_lineno), None)
            for ret in (r for r in ast.walk(fn) if isinstance(r, ast.Return) and r.value is not None) if fn else ():
                start = _offset(text, ret.value.lineno, ret.value.col_offset + 1)
                end = _offset(text, ret.value.end_lineno, ret.value.end_col_offset + 1)
                try:
                    sub = ast.parse("(" + text[start:end] + "\n)", mode="eval").body
                except SyntaxError:
                    continue
                out += [(p, t, f"in {f.fullname}: {what}") for p, t, what in
                        self._expr_edits(mod.path, text, start, end, sub, gpu, with_fallback=False)]
        return out

    def _expr_edits(self, path: str, text: str, start: int, end: int, expr: ast.expr, gpu: Gpu,
                    with_fallback: bool = True) -> list[tuple[str, str, str]]:
        src = "(" + text[start:end] + "\n)"
        out = []
        callees = {id(n.func) for n in ast.walk(expr) if isinstance(n, ast.Call)}
        # predicates and flags named for an architecture: `is_sm100_supported()`, `x.is_sm90`, `_sm103(d)`
        atoms = [n for n in ast.walk(expr) if id(n) not in callees and _atom_name(n)
                 and (_PRED_ATOM.search(_atom_name(n)[0] or "") or _NAMES_ARCH.search(_atom_name(n)[0] or ""))]
        atoms.sort(key=lambda n: (n.lineno, n.col_offset))
        # extend the last predicate atom with the same predicate spelled for the target
        seen = set()
        modname = self.index.module_of_path.get(path)
        tree = ...  # the file's tree: parsed once, when an import is first looked for
        for atom in reversed(atoms):
            name, core = _atom_name(atom)
            lo, hi = _node_span(src, atom)
            atom_src = src[lo:hi]
            c_lo, c_hi = _node_span(src, core)
            for cand in _candidates(name, gpu):
                imported = None
                if isinstance(core, ast.Name) and not self._same_shape(modname, name, cand):
                    # the module `name` is imported from may define the target's predicate too:
                    # import it beside `name` (same statement, same layout)
                    if tree is ...:
                        tree = _parse_or_none(text)
                    imported = self._import_beside(path, text, tree, name, cand, before=start)
                    if imported is None:
                        continue
                core_src = src[c_lo:c_hi]
                new_atom = atom_src[:c_lo - lo] + core_src[: len(core_src) - len(name)] + cand + atom_src[c_hi - lo:]
                if (lo, new_atom) in seen:  # the same predicate may appear in several places
                    continue
                seen.add((lo, new_atom))
                edit = self._or_edit(path, text, start, src, expr, atom, new_atom)
                if imported is not None:
                    at, insert = imported  # before the gate: the gate's offsets are edited first
                    edit = (path, edit[1][:at] + insert + edit[1][at:], f"{edit[2]}, imported from where `{name}` is")
                out.append(edit)
        # `major in (9, 10)`, `major == 10`, `capability == (10, 0)`: the target's value joins
        def span_of(n):
            lo, hi = _node_span(src, n)
            return start + lo - 1, start + hi - 1

        tree = _parse_or_none(text) if any(isinstance(n, ast.Compare) for n in ast.walk(expr)) else None
        for n in ast.walk(expr):
            if isinstance(n, ast.Compare):
                out += [(path, t, what) for t, what, _effect in
                        _compare_edits(text, n, span_of, self.reg, gpu, tree, _parent_of(expr, n),
                                       self._shared_constants(path, tree))]
        # an explicit capability test, when the module has torch at hand: beside a predicate, or
        # beside a comparison with a capability literal (`minor >= 7`: true or false on the target,
        # as the re-evaluation shows); never beside a test on a value (`x is None`), which guards
        # code that uses the value
        if with_fallback and re.search(r"^\s*import torch\b", text, re.M):
            test = f"torch.cuda.get_device_capability()[0] == {gpu.major}"
            if atoms:
                out.append(self._or_edit(path, text, start, src, expr, atoms[-1], test))
            for n in ast.walk(expr):
                if (isinstance(n, ast.Compare) and len(n.ops) == 1
                        and _capability_of(n.comparators[0], self.reg) is not None):
                    out.append(self._or_edit(path, text, start, src, expr, n, test))
                    out.append(self._or_edit(path, text, start, src, expr, n, test.replace("==", "!="), ast.And))
        return [e for e in out if e is not None]

    def _or_edit(self, path, text, start, src, expr, atom, new_atom, op=ast.Or):
        """`... atom ...` -> `... atom or new_atom ...` (`and` with op=ast.And), parenthesised unless
        atom is already an operand of that operator."""
        parent = _parent_of(expr, atom)
        lo, hi = _node_span(src, atom)
        word = "or" if op is ast.Or else "and"
        a, b = start + lo - 1, start + hi - 1  # src starts with "("
        if (isinstance(parent, ast.BoolOp) and isinstance(parent.op, op)) or (atom is expr and _whole_test(text, a, b)):
            repl = f"{src[lo:hi]} {word} {new_atom}"
        else:
            repl = f"({src[lo:hi]} {word} {new_atom})"
        what = "extend" if op is ast.Or else "narrow"
        return (path, text[:a] + repl + text[b:], f"{what} `{src[lo:hi]}` with `{new_atom}`")


_TEST_HEAD = re.compile(r"(?:^|[\s(])(?:if|elif|while|return|assert)\s*$|[=(,]\s*$")
_TEST_TAIL = re.compile(r"\s*(?:[:),]|$)", re.M)


def _whole_test(text: str, a: int, b: int) -> bool:
    """Whether text[a:b] is a whole `if`/`while`/`return`/`assert` test, assigned value or
    argument: then `X or Y` needs no parentheses there."""
    line_start = text.rfind("\n", 0, a) + 1
    return bool(_TEST_HEAD.search(text[line_start:a])) and bool(_TEST_TAIL.match(text, b))


def _parent_of(root: ast.AST, child: ast.AST) -> ast.AST | None:
    for n in ast.walk(root):
        for c in ast.iter_child_nodes(n):
            if c is child:
                return n
    return None


def _node_span(src: str, node: ast.AST) -> tuple[int, int]:
    return (_offset(src, node.lineno, node.col_offset + 1), _offset(src, node.end_lineno, node.end_col_offset + 1))


def _insert_major(list_src: str, major: int) -> str | None:
    """'[9, 10]' -> '[9, 10, 12]', in sorted position, keeping the list's separator style."""
    inner = list_src[1:-1]
    items = [x.strip() for x in inner.split(",") if x.strip()]
    if not all(x.isdigit() for x in items):
        return None
    nums = [int(x) for x in items]
    if major in nums:
        return None
    pos = sum(1 for x in nums if x < major)
    sep = ", " if ", " in inner or len(items) < 2 else ","
    new_items = items[:pos] + [str(major)] + items[pos:]
    trailing = "," if inner.rstrip().endswith(",") and len(items) > 1 else ""  # `(10,)` needed its comma
    return list_src[0] + sep.join(new_items) + trailing + list_src[-1]


# at most this many candidate edits are evaluated per gate (each is a re-evaluation)
MAX_CANDIDATES = 24


def _lines_added_above(old: str, new: str, line: int) -> int:
    """Lines the edit added above `line` (an edit is one contiguous change: it is above when the
    first line that differs is)."""
    k = new.count("\n") - old.count("\n")
    if k == 0:
        return 0
    a, b = old.splitlines(), new.splitlines()
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return k if at + 1 < line else 0


def _flag_keywords() -> set[str]:
    """Keyword arguments that carry nvcc flags: the JIT sinks' (rules/jit.toml) and the gate
    scan's (rules/gates.toml)."""
    kws = set(load_rule("gates").get("jit_builders", {}).get("flag_keywords", []))
    for r in load_rule("jit").get("sink", []):
        spec = r.get("cuda_flags")
        for one in spec if isinstance(spec, list) else [spec] if spec else []:
            if one.get("kw"):
                kws.add(one["kw"])
    return kws


def gencode_for(reg: Registry, gpu: Gpu) -> str:
    """The -gencode a JIT passes to build for gpu (Registry.jit_target: sm_120 -> sm_120f)."""
    ct = reg.jit_target(gpu)
    v = f"{ct.major}{ct.minor}{ct.variant}"
    return f"-gencode=arch=compute_{v},code=sm_{v}"


def _span(text: str, n: ast.AST) -> tuple[int, int]:
    """Character offsets of a node parsed from the whole of `text` (ast columns count UTF-8 bytes)."""
    def at(line, col):
        start = _offset(text, line, 1)
        end = text.find("\n", start)
        head = text[start:end if end >= 0 else len(text)].encode("utf-8", "surrogateescape")[:col]
        return start + len(head.decode("utf-8", "surrogateescape"))

    return at(n.lineno, n.col_offset), at(n.end_lineno, n.end_col_offset)


def _add_flag(text: str, value: ast.expr, flag: str) -> tuple[str, str] | None:
    """`value` (a flags expression parsed from text) with `flag` added unconditionally: appended to
    the last list literal among the operands of its top-level `+` chain, else `[*value, flag]`."""
    operands, todo = [], [value]
    while todo:
        n = todo.pop()
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add):
            todo += [n.right, n.left]
        else:
            operands.append(n)
    lists = [o for o in operands if isinstance(o, ast.List) and o.elts]
    if any(isinstance(o, ast.Constant) and o.value == flag for lst in lists for o in lst.elts):
        return None
    if lists:
        lst = lists[-1]
        quote = next((text[_span(text, e)[0]] for e in lst.elts if isinstance(e, ast.Constant)
                      and isinstance(e.value, str) and text[_span(text, e)[0]] in "'\""), '"')
        new = _append_item(text, lst, f"{quote}{flag}{quote}")
        return (new, "appended to the list literal") if new is not None else None
    a, b = _span(text, value)
    src = text[a:b]
    inner = src if isinstance(value, (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.BinOp)) else f"({src})"
    return text[:a] + f'[*{inner}, "{flag}"]' + text[b:], "the flags unpacked into a list with it"


def _append_item(text: str, seq: ast.AST, item: str, elts: list | None = None) -> str | None:
    """`item` added after the last element of a list/tuple/set/dict literal, in its layout: on a
    line of its own with a trailing comma when the literal has one element per line, else after a
    comma. For a dict, `elts` are the values (the entry ends with its value)."""
    elts = seq.elts if elts is None else elts
    if not elts:
        return None
    a, b = _span(text, seq)
    last_end = _span(text, elts[-1])[1]
    rest = text[last_end:b - 1]  # between the last element and the closing bracket
    comma = rest.lstrip().startswith(",")
    if "\n" in rest:
        # one element per line: same indentation as the last element's line, trailing comma kept
        line_start = text.rfind("\n", 0, last_end) + 1
        indent = re.match(r"[ \t]*", text[line_start:]).group(0)
        at = last_end + (rest.index(",") + 1 if comma else 0)
        return text[:at] + ("" if comma else ",") + f"\n{indent}{item}" + ("," if comma else "") + text[at:]
    if comma:  # `(10,)` -> `(10, 12)`
        at = last_end + rest.index(",") + 1
        return text[:last_end] + f", {item}" + text[at:]
    return text[:last_end] + f", {item}" + text[last_end:]


def _pairs(reg: Registry) -> set[tuple[int, int]]:
    return {(g.major, g.minor) for g in reg.gpus}


def _int_kind(k: int, reg: Registry) -> str | None:
    """How an integer spells a GPU: its major ("major"), major*10+minor ("cc") or __CUDA_ARCH__."""
    if any(k == g.major for g in reg.gpus):
        return "major"
    if any(k == g.cc for g in reg.gpus):
        return "cc"
    if any(k == g.cuda_arch for g in reg.gpus):
        return "cuda_arch"
    return None


def _int_for(kind: str, gpu: Gpu) -> int:
    return {"major": gpu.major, "cc": gpu.cc, "cuda_arch": gpu.cuda_arch}[kind]


_CC_IN_STR = re.compile(r"(?<!\d)(\d{2,3})(?!\d)")


def _capability_of(n: ast.expr, reg: Registry) -> tuple[int, int] | None:
    """The (major, minor) a capability literal names: (10, 0), ("cake", 10, 0), 100, "sm_100a";
    a bare major names (major, 0)."""
    if isinstance(n, ast.Constant) and type(n.value) is int:
        kind = _int_kind(n.value, reg)
        g = next((g for g in reg.gpus if kind and _int_for(kind, g) == n.value), None)
        return (g.major, 0 if kind == "major" else g.minor) if g else None
    if isinstance(n, ast.Constant) and isinstance(n.value, str):
        m = _CC_IN_STR.search(n.value)
        g = next((g for g in reg.gpus if m and g.cc == int(m.group(1))), None)
        return (g.major, g.minor) if g else None
    if isinstance(n, ast.Tuple):
        ints = [e.value if isinstance(e, ast.Constant) and type(e.value) is int else None for e in n.elts]
        for i in range(len(ints) - 1):
            if ints[i] is not None and ints[i + 1] is not None and (ints[i], ints[i + 1]) in _pairs(reg):
                return ints[i], ints[i + 1]
    return None


def _literal_kind(n: ast.expr, reg: Registry) -> str:
    """How a capability literal spells its GPU: "major", "cc", "cuda_arch", "str" or "tuple"."""
    if isinstance(n, ast.Constant) and type(n.value) is int:
        return _int_kind(n.value, reg) or ""
    return "str" if isinstance(n, ast.Constant) else "tuple"


def _spell(text: str, n: ast.expr, reg: Registry, gpu: Gpu) -> str | None:
    """The target's value written like the capability literal `n`, or None when n is not one."""
    if _capability_of(n, reg) is None:
        return None
    a, b = _span(text, n)
    src = text[a:b]
    if isinstance(n, ast.Constant) and type(n.value) is int:
        return str(_int_for(_int_kind(n.value, reg), gpu))
    if isinstance(n, ast.Constant):
        m = _CC_IN_STR.search(src)
        return src[:m.start(1)] + str(gpu.cc) + src[m.end(1):] if m else None
    ints = [e.value if isinstance(e, ast.Constant) and type(e.value) is int else None for e in n.elts]
    i = next(i for i in range(len(ints) - 1) if ints[i] is not None and ints[i + 1] is not None
             and (ints[i], ints[i + 1]) in _pairs(reg))
    parts = [text[slice(*_span(text, e))] for e in n.elts]
    parts[i], parts[i + 1] = str(gpu.major), str(gpu.minor)
    return "(" + ", ".join(parts) + ")"


def _members(n: ast.expr) -> list[ast.expr] | None:
    return list(n.elts) if isinstance(n, (ast.Tuple, ast.List, ast.Set)) else None


def _seq_edit(text: str, seq: ast.expr, reg: Registry, gpu: Gpu) -> tuple[str, str] | None:
    """A literal of capability values with the target's value added (an int list in sorted place)."""
    elts = _members(seq)
    if not elts or not all(_capability_of(e, reg) is not None for e in elts):
        return None  # `(4, 8, 16)` world sizes, `(0, 3)` minors: not a list of GPUs
    if len({_literal_kind(e, reg) for e in elts}) != 1:
        return None
    item = _spell(text, elts[0], reg, gpu)
    a, b = _span(text, seq)
    if item is None or any(text[slice(*_span(text, e))] == item for e in elts):
        return None
    if all(isinstance(e, ast.Constant) and type(e.value) is int for e in elts) and "\n" not in text[a:b]:
        new_list = _insert_major(text[a:b], int(item))
        return (text[:a] + new_list + text[b:], f"add {item} to {text[a:b]}") if new_list else None
    new = _append_item(text, seq, item)
    return (new, f"add {item} to {' '.join(text[a:b].split())}") if new else None


def _module_literal(tree: ast.Module | None, name: str) -> ast.expr | None:
    """The literal a module-level `NAME = <literal>` binds (the only assignment of NAME there)."""
    if tree is None:
        return None
    found = []
    for st in tree.body:
        targets = st.targets if isinstance(st, ast.Assign) else [st.target] if isinstance(st, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            found.append(st.value)
    return found[0] if len(found) == 1 and isinstance(found[0], (ast.Tuple, ast.List, ast.Set, ast.Dict)) else None


def _compare_edits(text: str, n: ast.Compare, span_of, reg: Registry, gpu: Gpu, tree: ast.Module | None,
                   parent: ast.AST | None, shared=lambda name: False) -> list[tuple[str, str, int]]:
    """Edits of one comparison that let the target's value through it (which one the gate needs,
    true or false, is for the re-evaluation to show), each with what it makes the comparison on
    the target (1 true, -1 false):
    `X == K` -> `X in (K, T)`, `X != K` -> `X not in (K, T)` (K a capability literal or a module
    constant bound to one), `X in/not in <literal or module constant>` -> T added there, `X >= K` -> `(X >= K or X == T)` / `(X >= K and X != T)`."""
    if len(n.ops) != 1:
        return []
    op, right = n.ops[0], n.comparators[0]
    sign = 1 if isinstance(op, (ast.In, ast.Eq)) else -1
    out = []
    if isinstance(op, (ast.In, ast.NotIn)):
        seq = right
        if isinstance(right, ast.Name):
            seq = _module_literal(tree, right.id) if not shared(right.id) else None
            if isinstance(seq, ast.Dict):
                got = _table_edit(text, seq, reg, gpu)
                return [(*got, sign)] if got else []
            if seq is None:
                return []
            got = _seq_edit(text, seq, reg, gpu)
            return [(got[0], got[1] + f" (the constant {right.id}: every user of it changes)", sign)] if got else []
        if isinstance(right, ast.Dict):
            got = _table_edit(text, right, reg, gpu)
            return [(*got, sign)] if got else []
        # the literal is inside the gate: offsets from span_of
        a, b = span_of(right)
        sub = _parse_or_none(text[a:b])
        if sub is None or not sub.body or not isinstance(sub.body[0], ast.Expr):
            return []
        got = _seq_edit(text[a:b], sub.body[0].value, reg, gpu)
        return [(text[:a] + got[0] + text[b:], got[1], sign)] if got else []
    if isinstance(op, (ast.Eq, ast.NotEq)):
        lo, hi = span_of(n.left)
        ka, kb = span_of(right)
        k_src = text[ka:kb]
        sub = _parse_or_none(k_src)
        k = sub.body[0].value if sub and sub.body and isinstance(sub.body[0], ast.Expr) else None
        item = _spell(k_src, k, reg, gpu) if k is not None else None
        if item is None and isinstance(k, ast.Name):
            # `cap != HOPPER_CC` with `HOPPER_CC = (9, 0)` at module level: the target's value is
            # written like the constant's literal beside it; the constant, which other code may
            # read, is left as it is
            lit = _module_literal(tree, k.id)
            item = _spell(text, lit, reg, gpu) if lit is not None else None
        if item is None or item == k_src:
            return []
        kw = "in" if isinstance(op, ast.Eq) else "not in"
        repl = f"{text[lo:hi]} {kw} ({k_src}, {item})"
        a, b = span_of(n)
        return [(text[:a] + repl + text[b:], f"`{text[a:b]}` -> `{repl}`", sign)]
    if isinstance(op, (ast.Gt, ast.GtE, ast.Lt, ast.LtE)):
        ka, kb = span_of(right)
        k_src = text[ka:kb]
        sub = _parse_or_none(k_src)
        k = sub.body[0].value if sub and sub.body and isinstance(sub.body[0], ast.Expr) else None
        item = _spell(k_src, k, reg, gpu) if k is not None else None
        if item is None:
            return []
        lo, hi = span_of(n.left)
        a, b = span_of(n)
        cmp_src = text[a:b]
        for joiner, test, effect in (("or", "==", 1), ("and", "!=", -1)):
            same = isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.Or if joiner == "or" else ast.And)
            repl = f"{cmp_src} {joiner} {text[lo:hi]} {test} {item}"
            repl = repl if same else f"({repl})"
            out.append((text[:a] + repl + text[b:], f"`{cmp_src}` -> `{repl}`", effect))
    return out


def _table_edit(text: str, d: ast.Dict, reg: Registry, gpu: Gpu) -> tuple[str, str] | None:
    """A capability-keyed dict literal with an entry for the target, valued as the entry of the
    nearest capability below it (else the highest): the target then takes a path judged for it."""
    entries = [(k, v, _capability_of(k, reg)) for k, v in zip(d.keys, d.values) if k is not None]
    entries = [e for e in entries if e[2] is not None]
    want = (gpu.major, gpu.minor)
    if not entries or any(c == want or (isinstance(k, ast.Constant) and _int_kind(k.value, reg) == "major"
                                         and c[0] == gpu.major) for k, _v, c in entries):
        return None
    below = [e for e in entries if e[2] < want]
    k, v, _c = max(below or entries, key=lambda e: e[2])
    key = _spell(text, k, reg, gpu)
    if key is None:
        return None
    val = text[slice(*_span(text, v))]
    new = _append_item(text, d, f"{key}: {val}", elts=[x for x in d.values])
    if new is None:
        return None
    ksrc = text[slice(*_span(text, k))]
    return new, (f"add `{key}: {val}` to the table at line {d.lineno} (the value of {ksrc}: {gpu.name} takes a "
                 f"path judged for it)")


def _exit_polarity(fn: ast.AST, n: ast.expr) -> int | None:
    """For a comparison in the test of an `if` whose body leaves the function (ends in return or
    raise): 1 when the comparison being true takes that exit, -1 when being false does (under an
    odd number of `not`); None elsewhere."""
    for st in ast.walk(fn):
        if not (isinstance(st, ast.If) and st.body and isinstance(st.body[-1], (ast.Return, ast.Raise))):
            continue
        polarity, node = 1, st.test
        path = _path_to(node, n)
        if path is None:
            continue
        for step in path:
            if isinstance(step, ast.UnaryOp) and isinstance(step.op, ast.Not):
                polarity = -polarity
        return polarity
    return None


def _path_to(root: ast.AST, target: ast.AST) -> list[ast.AST] | None:
    """The nodes from root down to target (target excluded), or None when target is not under root."""
    if root is target:
        return []
    for child in ast.iter_child_nodes(root):
        got = _path_to(child, target)
        if got is not None:
            return [root] + got
    return None


def _def_at_line(tree: ast.Module, line: int) -> ast.AST | None:
    """The innermost def holding `line`."""
    best = None
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.lineno <= line <= n.end_lineno:
            if best is None or n.lineno >= best.lineno:
                best = n
    return best


def _def_named(tree: ast.Module, qual: str) -> ast.AST | None:
    """The def `A.b` (classes and functions by name, the last def of a name in its block)."""
    scope = tree
    for part in qual.split("."):
        found = None
        for n in ast.walk(scope):
            named = isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.name == part
            if named and n is not scope and (found is None or n.lineno > found.lineno):
                found = n
        if found is None:
            return None
        scope = found
    return scope if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)) else None


def _scope_value_edits(text: str, tree: ast.Module, fn: ast.AST, reg: Registry, gpu: Gpu,
                       skip: tuple[int, int] | None, shared=lambda name: False) -> list[tuple[str, str]]:
    """Comparison and table edits inside one function (outside `skip`, the gate's own span), and
    in the module-level tables and literals it names (not those `shared` says another gate reads)."""
    out = []

    def span_of(n):
        return _span(text, n)

    for n in ast.walk(fn):
        if skip is not None and isinstance(n, (ast.Compare, ast.Dict)):
            a, b = span_of(n)
            if a < skip[1] and skip[0] < b:
                continue
        if isinstance(n, ast.Compare):
            # a test whose branch leaves the function (`if cap < 9: return False`) is not made to
            # take the target there: the edit would turn the target away from the code after it
            exits = _exit_polarity(fn, n)
            out += [(t, what) for t, what, effect in
                    _compare_edits(text, n, span_of, reg, gpu, tree, _parent_of(fn, n), shared)
                    if exits is None or effect * exits < 0]
        elif isinstance(n, ast.Dict):
            got = _table_edit(text, n, reg, gpu)
            if got:
                out.append(got)
    names = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    for name in sorted(names - {x for x in names if shared(x)}):
        lit = _module_literal(tree, name)
        if isinstance(lit, ast.Dict):
            got = _table_edit(text, lit, reg, gpu)
            if got:
                out.append((got[0], got[1] + f" (the constant {name}: every user of it changes)"))
    return list({t: (t, w) for t, w in out}.values())


# -- C++ runtime checks

# `major == 10`, `props.major >= 9`, `getSMVersion() < 100`, `kSM_100 == sm`
_CPP_OPERAND = r"[A-Za-z_]\w*(?:\s*(?:\.|->|::)\s*[A-Za-z_]\w*)*(?:\s*\(\s*\))?"
_CPP_CMP = re.compile(rf"({_CPP_OPERAND}|\d+)\s*(==|!=|>=|<=|>|<)\s*({_CPP_OPERAND}|\d+)")


def _top_level(code: str, ops: tuple[str, ...]) -> bool:
    """Whether any of `ops` occurs outside parentheses in a piece of (comment-blanked) C++."""
    depth = 0
    for i, c in enumerate(code):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and any(code.startswith(o, i) for o in ops):
            return True
    return False


def _cpp_values(operand_of: str, other: str, text: str, reg: Registry, gpu: Gpu) -> list[str]:
    """How the target is written against `operand_of` when the check compares it with `other`:
    a constant of the same name spelled for the target (`kSM_100` -> `kSM_120`) when the file
    has one, the number in the same unit (major or major*10+minor), then the other unit."""
    out = []
    if other.isdigit():
        kind = _int_kind(int(other), reg)
        if kind:
            out.append(str(_int_for(kind, gpu)))
    else:
        m = re.search(r"\d{2,4}", other)
        if m:
            for v in (gpu.cc, gpu.major, gpu.cuda_arch):
                name = other[:m.start()] + str(v) + other[m.end():]
                if re.search(rf"\b{re.escape(name)}\b", text):
                    out.append(name)
    for v in (gpu.major, gpu.cc):
        if str(v) not in out:
            out.append(str(v))
    return out


def _cpp_check_edits(text: str, gate: Gate, reg: Registry, gpu: Gpu) -> list[tuple[str, str]]:
    """Widenings of the check at the gate, in its own macro and operands."""
    sc = cpp.scan(text)
    if gate.line > len(sc.line_starts):
        return []
    body = sc.body
    line_start = sc.line_starts[gate.line - 1]
    line_end = body.find("\n", line_start)
    at = line_start + gate.col - 1
    m = rc.CHECK_RE.match(body, at) or rc.IF_RE.match(body, at)
    if m is None:  # the column counts bytes, the text characters: look along the line
        m = rc.CHECK_RE.search(body, line_start, line_end) or rc.IF_RE.search(body, line_start, line_end)
    if m is None:
        return []
    close = rc.matching_paren(body, m.end() - 1)
    if close < 0:
        return []
    inner = body[m.end():close]
    # top-level commas: the condition, then the message arguments
    cuts, depth = [], 0
    for i, c in enumerate(inner):
        depth += c in "([{"
        depth -= c in ")]}"
        if c == "," and depth == 0:
            cuts.append(i)
    refusal = m.re is rc.IF_RE
    suffix = None if refusal else m.group(2)
    first = inner[:cuts[0]] if cuts else inner
    c0 = m.end() + len(first) - len(first.lstrip())
    c1 = m.end() + len(first.rstrip())
    if suffix:  # `ICHECK_EQ(a, b)` becomes `ICHECK(a == b || ...)`
        if len(cuts) != 1:
            return []
        a_src, b_src = text[c0:c1], text[m.end() + cuts[0] + 1:close].strip()
        cond_code = cond_src = f"{a_src} {rc.CMP_SUFFIX[suffix]} {b_src}"
    else:
        cond_code, cond_src = body[c0:c1], text[c0:c1]
    # the architecture operands the condition compares, each with what it is compared to
    candidates = []
    for cm in _CPP_CMP.finditer(cond_code):
        left, right = cm.group(1), cm.group(3)
        for operand, other in ((left, right), (right, left)):
            if operand.isdigit() or operand in ("true", "false"):
                continue
            src_operand = " ".join(operand.split())
            for v in _cpp_values(src_operand, other, text, reg, gpu):
                if (src_operand, v) not in candidates:
                    candidates.append((src_operand, v))
    out = []
    for operand, v in candidates[:6]:
        if refusal:
            clause = f"{operand} != {v}"
            new_cond = f"({cond_src}) && {clause}" if _top_level(cond_code, ("||", "?")) else f"{cond_src} && {clause}"
            new_text = text[:c0] + new_cond + text[c1:]
        elif suffix:
            clause = f"{operand} == {v}"
            base = m.group(1)
            new_text = text[:m.start()] + f"{base}({cond_src} || {clause})" + text[close + 1:]
        else:
            clause = f"{operand} == {v}"
            new_cond = f"({cond_src}) || {clause}" if _top_level(cond_code, ("&&", "?")) else f"{cond_src} || {clause}"
            new_text = text[:c0] + new_cond + text[c1:]
        out.append((new_text, f"{'narrow the refusal' if refusal else 'widen the check'} with `{clause}`"))
    return out


def _reevaluate_cpp(source: Source, gate: Gate, old_text: str, new_text: str) -> Gate | None:
    """The check at the gate's line after the edit, by the runtime-check scan of the edited file.
    The edit must leave every preprocessor directive as it was: then the check sits under the same
    `#if`s for every target, and what the scan evaluated is what each target compiles."""
    def directives(t):
        return [(d.line, d.name, d.text) for d in cpp.scan(t).directives]

    if directives(old_text) != directives(new_text):
        return None
    got = [g for g in scan_runtime_checks(source, [gate.path]) if g.line == gate.line]
    return got[0] if len(got) == 1 else None


def reevaluate_gate(source: Source, gate: Gate, reg: Registry, py_files: list[str], path_based: bool):
    """The gate at gate's place after evaluating its function again over source, or None when
    no gate is there any more."""
    index = Index(source, py_files, path_based=path_based)
    modname = index.module_of_path.get(gate.path)
    if modname is None:
        return None
    mod = index.module(modname, full=True)
    if mod is None:
        return None
    interp = Interp(index, reg)
    qual = gate.function[len(modname) + 1:] if gate.function.startswith(modname + ".") else None
    nodes = mod.defs_of(qual) if qual else []
    if nodes:
        interp.report_function(mod, qual, nodes)
    else:
        interp.report_module(modname)
    for g in to_gates(interp.gates, lambda p: None):
        if (g.path, g.line) == (gate.path, gate.line):
            return g
    return None


def _required_params(index, value) -> int | None:
    """Required positional parameters of a plain function value, None for anything else."""
    v = value.single() if hasattr(value, "single") else None
    if not isinstance(v, FuncRef):
        return None
    mod = index.module(v.module, full=True)
    node = mod.function_node(v.qual, v.key) if mod is not None else None
    if node is None:
        return None
    return sum(1 for _n, default, kind in node.f["params"] if default is None and kind not in ("*", "**", "kwonly"))


def module_binding(index, reg: Registry):
    """(module, name) -> value of a module-level name, for the patcher's scope checks."""
    interp = Interp(index, reg)
    return lambda modname, name: interp.global_value(modname, name)


def combined_patch(patcher: Patcher, gates: list[Gate], gpu: Gpu,
                   in_gate_order: bool = False) -> tuple[str, list[tuple[Gate, Patch]]]:
    """One diff for many gates: edits are applied one after another in memory, top down (a gate
    that an earlier refusal guards is verified with that refusal already patched; lines added by an
    import move the gates below; on one line, right to left so columns stay valid), and each is
    verified on the text that carries the others."""
    original: dict[str, str] = {}
    current: dict[str, bytes] = {}
    done: list[tuple[Gate, Patch]] = []
    unique = {(g.path, g.line, g.col): g for g in gates}
    inserted: dict[str, list[tuple[int, int]]] = {}  # path -> (after line, lines added) by earlier edits
    for g in sorted(unique.values(), key=lambda g: (g.path, g.line, -g.col)):
        overlay = OverlaySource(patcher.source, current)
        moved = g.line + sum(k for at, k in inserted.get(g.path, ()) if g.line > at)
        p = patcher.patch(dataclasses.replace(g, line=moved) if moved != g.line else g, gpu, overlay)
        if p.new_text is None and not p.covered and g.path in current:
            # an earlier arm of the same function, patched above, now takes the target away first
            text = current[g.path].decode("utf-8", "surrogateescape")
            earlier = next((g0 for g0, p0 in done if g0.path == g.path and p0.new_text is not None
                            and g0.region == "branch" and g0.line < g.line
                            and _served_earlier(text, g0.line + sum(k for at, k in inserted.get(g.path, ())
                                                                    if g0.line > at), moved)), None)
            if earlier is not None:
                p = Patch(g.path, None, f"{gpu.name} takes the arm at line {earlier.line}, patched above, and no longer "
                          "reaches this gate", covered=True)
        done.append((g, p))
        if p.new_text is not None:
            if p.path not in original:
                data = patcher.source.read(p.path) or b""
                original[p.path] = data.decode("utf-8", "surrogateescape")
            before = (current.get(p.path) or patcher.source.read(p.path) or b"").decode("utf-8", "surrogateescape")
            inserted.setdefault(p.path, []).extend(_inserted_lines(before, p.new_text))
            current = {**current, p.path: p.new_text.encode("utf-8", "surrogateescape")}
    # files by name, or in the order the gates name them (a plan reads from the gate down its chain)
    # (a file edited for a gate elsewhere, a predicate's definition, comes after the gates' files)
    order = list(dict.fromkeys([g.path for g in gates] if in_gate_order else [])) + sorted(current)
    diff = "".join(unified_diff(path, original[path], current[path].decode("utf-8", "surrogateescape"))
                   for path in sorted(current, key=order.index))
    return diff, sorted(done, key=lambda gp: (gp[0].path, gp[0].line))


def _served_earlier(text: str, first: int, line: int) -> bool:
    """Whether the `if` tested on line `first`, when its test is true, keeps control from the `if`
    tested on `line`: the later one is an `elif`/`else` of it, or comes after it (or inside a
    statement after it) in the same block while its body ends in return or raise."""
    tree = _parse_or_none(text)
    if tree is None:
        return False
    ifs = {n.test.lineno: n for n in ast.walk(tree) if isinstance(n, ast.If)}
    s0, s1 = ifs.get(first), ifs.get(line)
    if s0 is None or s1 is None:
        return False
    if any(n is s1 for st in s0.orelse for n in ast.walk(st)):
        return True
    if not (s0.body and isinstance(s0.body[-1], (ast.Return, ast.Raise))):
        return False
    for block in (getattr(n, f, None) for n in ast.walk(tree) for f in ("body", "orelse", "finalbody")):
        if isinstance(block, list) and any(st is s0 for st in block):
            after = block[[id(st) for st in block].index(id(s0)) + 1:]
            return any(n is s1 for st in after for n in ast.walk(st))
    return False


def _inserted_lines(old: str, new: str) -> list[tuple[int, int]]:
    """(line in old after which lines were inserted, how many): where gates below an added import
    moved to. Edits add lines only by an import above the gate, so the first line that differs is
    where they went."""
    a, b = old.splitlines(), new.splitlines()
    k = len(b) - len(a)
    if k == 0:
        return []
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return [(at, k)]
