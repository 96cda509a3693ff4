"""Patches for software-only gates: the smallest edit that makes a gate admit the target, in the
code's own style, checked by evaluating the patched function again before it is offered.

- an architecture list (`supported_major_versions=[9, 10]`, or the constant it names) gets the
  target's major;
- a predicate or flag test (`is_sm90 or is_sm100`) is extended with the same predicate spelled for
  the target (`is_sm120`, `is_sm12x`, ...) when that name exists in scope, else with an explicit
  capability test when the module imports torch.

Every candidate is applied in memory and the gate's function is evaluated again: a patch is
offered only if the gate then admits the target. The parse uses Python's `ast` on the text of
one expression; nothing scanned is ever executed.
"""
from __future__ import annotations

import ast
import dataclasses
import difflib
import re
from dataclasses import dataclass

from .model import ARCH_LIST, CAPABILITY_COMPARE, CPP_RUNTIME_CHECK, FLAG, PREDICATE_CALL, Gate
from .sources import Source
from .targets import Gpu, Registry


@dataclass
class Patch:
    path: str
    diff: str | None  # unified diff, paths relative to the scan root (apply with patch -p0)
    description: str  # what the edit does, or why there is none
    new_text: str | None = None  # the whole patched file


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


def _offset(text: str, line: int, col: int) -> int:
    """Character offset of a 1-based line and 1-based column."""
    starts = [0]
    for m in re.finditer("\n", text):
        starts.append(m.end())
    return starts[line - 1] + col - 1


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
        edits = self._arch_list_edits(text, gate, gpu) if gate.kind == ARCH_LIST else (
            self._predicate_edits(text, gate, gpu) if gate.kind in (FLAG, PREDICATE_CALL, CAPABILITY_COMPARE) else [])
        if not edits:
            if gate.kind == CPP_RUNTIME_CHECK:
                return Patch(gate.path, None, "a C++ runtime check: archaudit edits Python gates only; widen this check by hand")
            if gate.kind == ARCH_LIST:
                return Patch(gate.path, None, "the architecture list is neither a literal nor a module constant in this file")
            return Patch(gate.path, None, f"no predicate for {gpu.name} (or for its major) is in scope at the gate or in "
                         "the predicates it calls, and no torch to write a capability test with")
        tried = []
        for path, new_text, what in edits:
            old_text = text if path == gate.path else (self.source.read(path) or b"").decode("utf-8", "surrogateescape")
            overlay = OverlaySource(self.source, {path: new_text.encode("utf-8", "surrogateescape")})
            # the only edit that adds lines is an import above the gate: the gate moves down
            shift = new_text.count("\n") - old_text.count("\n") if path == gate.path else 0
            after = self.evaluate(overlay, dataclasses.replace(gate, line=gate.line + shift) if shift else gate)
            tried.append(what)
            if after is not None and self._verified(gate, after, gpu):
                return Patch(path, unified_diff(path, old_text, new_text), what, new_text)
        return Patch(gate.path, None, "no candidate edit made the gate admit " + gpu.name + " when re-evaluated: "
                     + "; ".join(tried))

    def _verified(self, before: Gate, after: Gate, gpu: Gpu) -> bool:
        # The edit must admit the target, keep what was admitted and add nothing beyond the
        # target's major (an undefined name is "unknown" and would admit everything). A name
        # known only by a name rule is not proof that it exists in scope.
        added = set(after.admits) - set(before.admits)
        same_major = {g.name for g in self.reg.gpus if g.major == gpu.major}
        new_rules = {v for v in after.via if v.startswith("name-rule")} - set(before.via)
        return (after.resolved and not new_rules and gpu.name in after.admits
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
        if name is None:
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
        return self._expr_edits(gate.path, text, start, end, expr, gpu) + self._definition_edits(gate, expr, gpu)

    def _definition_edits(self, gate: Gate, expr: ast.expr, gpu: Gpu) -> list[tuple[str, str, str]]:
        """A test like `if apply_fusion(n):` whose architecture part lives in the predicate's own
        `return (...)`: edit that return expression (verified through the gate, as always)."""
        if self.binding is None:
            return []
        from .python.values import FuncRef

        modname = self.index.module_of_path.get(gate.path)
        out = []
        for n in ast.walk(expr):
            if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Name)) or _PRED_ATOM.search(n.func.id):
                continue
            v = self.binding(modname, n.func.id) if modname else None
            f = v.single() if v is not None and hasattr(v, "single") else None
            if not isinstance(f, FuncRef):
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
        atoms = [n for n in ast.walk(expr)
                 if id(n) not in callees and _atom_name(n) and _PRED_ATOM.search(_atom_name(n)[0] or "")]
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
        # `major in (9, 10)`: the target's major joins the literal
        for n in ast.walk(expr):
            if (isinstance(n, ast.Compare) and len(n.ops) == 1 and isinstance(n.ops[0], ast.In)
                    and isinstance(n.comparators[0], (ast.Tuple, ast.List, ast.Set))):
                lo, hi = _node_span(src, n.comparators[0])
                new_list = _insert_major(src[lo:hi], gpu.major)
                if new_list is not None:
                    a, b = start + lo - 1, start + hi - 1
                    out.append((path, text[:a] + new_list + text[b:], f"add {gpu.major} to {src[lo:hi]}"))
        # an explicit capability test, when the module has torch at hand
        if with_fallback and re.search(r"^\s*import torch\b", text, re.M) and atoms:
            test = f"torch.cuda.get_device_capability()[0] == {gpu.major}"
            out.append(self._or_edit(path, text, start, src, expr, atoms[-1], test))
        return [e for e in out if e is not None]

    def _or_edit(self, path, text, start, src, expr, atom, new_atom):
        """`... atom ...` -> `... atom or new_atom ...`, parenthesised unless atom is already an
        operand of an `or`."""
        parent = _parent_of(expr, atom)
        lo, hi = _node_span(src, atom)
        if isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.Or):
            repl = f"{src[lo:hi]} or {new_atom}"
        else:
            repl = f"({src[lo:hi]} or {new_atom})"
        a, b = start + lo - 1, start + hi - 1  # src starts with "("
        return (path, text[:a] + repl + text[b:], f"extend `{src[lo:hi]}` with `{new_atom}`")


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
    trailing = "," if inner.rstrip().endswith(",") and len(items) == 1 else ""
    return list_src[0] + sep.join(new_items) + trailing + list_src[-1]


def reevaluate_gate(source: Source, gate: Gate, reg: Registry, py_files: list[str], path_based: bool):
    """The gate at gate's place after evaluating its function again over source, or None when
    no gate is there any more."""
    from .python.gates import _to_gates
    from .python.index import Index
    from .python.interp import Interp

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
    for g in _to_gates(interp.gates, lambda p: None):
        if (g.path, g.line) == (gate.path, gate.line):
            return g
    return None


def _required_params(index, value) -> int | None:
    """Required positional parameters of a plain function value, None for anything else."""
    from .python.values import FuncRef

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
    from .python.interp import Interp

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
        done.append((g, p))
        if p.new_text is not None:
            if p.path not in original:
                data = patcher.source.read(p.path) or b""
                original[p.path] = data.decode("utf-8", "surrogateescape")
            before = (current.get(p.path) or patcher.source.read(p.path) or b"").decode("utf-8", "surrogateescape")
            inserted.setdefault(p.path, []).extend(_inserted_lines(before, p.new_text))
            current = {**current, p.path: p.new_text.encode("utf-8", "surrogateescape")}
    # files by name, or in the order the gates name them (a plan reads from the gate down its chain)
    order = list(dict.fromkeys(g.path for g in gates)) if in_gate_order else sorted(current)
    diff = "".join(unified_diff(path, original[path], current[path].decode("utf-8", "surrogateescape"))
                   for path in sorted(current, key=order.index))
    return diff, sorted(done, key=lambda gp: (gp[0].path, gp[0].line))


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
