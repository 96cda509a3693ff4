#!/usr/bin/env python3
"""List archaudit's import graph and what is wrong with it (issue 25).

    .venv/bin/python scripts/imports.py            # summary, cycles, private imports, lazy imports
    .venv/bin/python scripts/imports.py --edges    # also every module's internal imports
    .venv/bin/python scripts/imports.py --json     # the same as one JSON object

The package is read with the `ast` module; nothing is imported. It reports:

- import cycles: strongly connected groups of modules in the graph of archaudit-internal imports
  (top-level and function-level imports alike: a cycle broken only by importing late is still a
  cycle; importing a.b.c from outside package a.b also imports a.b), each with one shortest
  cycle through it;
- private imports: `from x import _y` and `x._y` reads where `x` is another archaudit module
  (a module's own names and dunder names are not private imports);
- function-level imports: imports inside a function body. One whose line, or the comment line
  just above it, holds `# lazy:` (followed by the reason) is listed as a kept lazy import;
  the others are listed as to move. The reason also covers the imports right below it (a
  block of imports, blank lines allowed, with one comment above it).

Exit status: 1 when there is a cycle or a private import (also, with --strict, an unreasoned
function-level import), else 0.
"""
from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LAZY_MARK = "# lazy:"


@dataclass
class Module:
    name: str
    path: Path
    is_package: bool
    edges: dict[str, list[int]] = field(default_factory=dict)      # internal module -> lines
    private: list[tuple[int, str]] = field(default_factory=list)   # (line, "x._y")
    lazy: list[tuple[int, str, bool]] = field(default_factory=list)  # (line, text, reasoned)
    imports: int = 0


def module_name(root: Path, path: Path) -> tuple[str, bool]:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), True
    return ".".join(parts), False


def collect(root: Path) -> dict[str, Module]:
    mods = {}
    for path in sorted(root.rglob("*.py")):
        name, is_pkg = module_name(root, path)
        mods[name] = Module(name, path, is_pkg)
    return mods


def resolve_from(mod: Module, level: int, target: str | None) -> str:
    """The absolute name of `from <level dots><target> import ...` written in `mod`."""
    if level == 0:
        return target or ""
    base = mod.name.split(".")
    if not mod.is_package:
        base = base[:-1]
    if level > 1:
        base = base[:len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


class Visitor(ast.NodeVisitor):
    def __init__(self, mod: Module, mods: dict[str, Module], lines: list[str]):
        self.mod, self.mods, self.lines = mod, mods, lines
        self.depth = 0                      # function nesting
        self.aliases: dict[str, str] = {}   # local name -> internal module it is bound to
        self.reasoned_end: dict[int, bool] = {}  # last line of a function-level import -> has a reason

    def _edge(self, target: str, line: int) -> None:
        if target not in self.mods or target == self.mod.name:
            return
        lines = self.mod.edges.setdefault(target, [])
        if line not in lines:
            lines.append(line)
        # importing a.b.c from outside package a.b runs a/b/__init__.py first
        parts = target.split(".")
        for i in range(len(parts) - 1, 1, -1):
            pkg = ".".join(parts[:i])
            if self.mod.name.startswith(pkg + ".") or pkg == self.mod.name:
                break
            if pkg in self.mods:
                pl = self.mod.edges.setdefault(pkg, [])
                if line not in pl:
                    pl.append(line)

    def _import_seen(self, node: ast.stmt) -> None:
        self.mod.imports += 1
        if self.depth:
            line = node.lineno
            text = self.lines[line - 1].strip()
            k = line - 1  # the nearest non-blank line above
            while k >= 1 and not self.lines[k - 1].strip():
                k -= 1
            above = self.lines[k - 1].strip() if k >= 1 else ""
            # a reason covers the imports right below it (blank lines between them allowed)
            reasoned = LAZY_MARK in text or above.startswith(LAZY_MARK) or self.reasoned_end.get(k, False)
            self.reasoned_end[node.end_lineno] = reasoned
            self.mod.lazy.append((line, text, reasoned))

    def visit_Import(self, node: ast.Import) -> None:
        self._import_seen(node)
        for a in node.names:
            if a.name in self.mods:
                self._edge(a.name, node.lineno)
                if a.asname:
                    self.aliases[a.asname] = a.name
            # `import a.b.c` binds `a`; reads of a.b.c._x are rare enough to leave out

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        self._import_seen(node)
        src = resolve_from(self.mod, node.level, node.module)
        for a in node.names:
            sub = f"{src}.{a.name}"
            if sub in self.mods:            # `from pkg import submodule`
                self._edge(sub, node.lineno)
                self.aliases[a.asname or a.name] = sub
                continue
            self._edge(src, node.lineno)
            if (src in self.mods and src != self.mod.name and a.name.startswith("_")
                    and not a.name.startswith("__")):
                self.mod.private.append((node.lineno, f"{src}.{a.name}"))

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if (isinstance(node.value, ast.Name) and node.value.id in self.aliases
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            target = self.aliases[node.value.id]
            if target != self.mod.name and f"{target}.{node.attr}" not in self.mods:
                self.mod.private.append((node.lineno, f"{target}.{node.attr}"))
        self.generic_visit(node)

    def _function(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function


def analyse(root: Path) -> dict[str, Module]:
    mods = collect(root)
    for mod in mods.values():
        text = mod.path.read_text(encoding="utf-8")
        Visitor(mod, mods, text.splitlines()).visit(ast.parse(text, str(mod.path)))
    return mods


def strongly_connected(graph: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; groups of two or more modules (or one importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    groups = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    group = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        group.append(w)
                        if w == v:
                            break
                    if len(group) > 1 or v in graph[v]:
                        groups.append(sorted(group))
    return sorted(groups)


def shortest_cycle(graph: dict[str, list[str]], group: list[str]) -> list[str]:
    """A shortest cycle through the group's first module, staying inside the group."""
    members = set(group)
    start = group[0]
    prev: dict[str, str] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in sorted(graph[v]):
            if w not in members:
                continue
            if w == start:
                path = [v]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                return list(reversed(path)) + [start]
            if w not in prev:
                prev[w] = v
                queue.append(w)
    return group


def report(root: Path) -> dict:
    mods = analyse(root)
    graph = {m.name: sorted(m.edges) for m in mods.values()}
    cycles = [{"modules": g, "cycle": shortest_cycle(graph, g)} for g in strongly_connected(graph)]
    private = [{"module": m.name, "line": line, "name": name}
               for m in mods.values() for line, name in m.private]
    lazy = [{"module": m.name, "line": line, "text": text, "reasoned": reasoned}
            for m in mods.values() for line, text, reasoned in m.lazy]
    return {
        "modules": len(mods),
        "imports": sum(m.imports for m in mods.values()),
        "edges": sum(len(v) for v in graph.values()),
        "graph": graph,
        "cycles": cycles,
        "private_imports": private,
        "function_imports": lazy,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", nargs="?", default=str(REPO / "archaudit"), help="the package directory")
    ap.add_argument("--edges", action="store_true", help="list every module's internal imports")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--strict", action="store_true",
                    help="also exit 1 for a function-level import without a '# lazy:' reason")
    args = ap.parse_args(argv)
    r = report(Path(args.root).resolve())
    unreasoned = [f for f in r["function_imports"] if not f["reasoned"]]
    bad = bool(r["cycles"] or r["private_imports"] or (args.strict and unreasoned))
    if args.json:
        print(json.dumps(r, indent=1))
        return 1 if bad else 0
    if args.edges:
        for name, targets in r["graph"].items():
            print(f"{name}: {', '.join(targets) or '-'}")
        print()
    print(f"{r['modules']} modules, {r['imports']} import statements, {r['edges']} internal edges")
    print(f"import cycles: {len(r['cycles'])}")
    for c in r["cycles"]:
        print(f"  {len(c['modules'])} modules: {' -> '.join(c['cycle'])}")
        if len(c["modules"]) > len(c["cycle"]) - 1:
            print(f"    group: {', '.join(c['modules'])}")
    print(f"private imports: {len(r['private_imports'])}")
    for p in r["private_imports"]:
        print(f"  {p['module']}:{p['line']}: {p['name']}")
    kept = len(r["function_imports"]) - len(unreasoned)
    print(f"function-level imports: {len(r['function_imports'])} ({kept} kept lazy with a reason, "
          f"{len(unreasoned)} to move)")
    for f in r["function_imports"]:
        print(f"  {f['module']}:{f['line']}: {'(lazy) ' if f['reasoned'] else ''}{f['text']}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
