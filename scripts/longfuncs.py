#!/usr/bin/env python3
"""List archaudit's functions longer than a limit (issue 25: none over 80 lines).

    .venv/bin/python scripts/longfuncs.py              # functions over 80 lines, longest first
    .venv/bin/python scripts/longfuncs.py --max 60     # another limit
    .venv/bin/python scripts/longfuncs.py DIR          # another package

A function's length is its lines from `def` to its last line (docstring, comments and nested
functions included; decorators not). Files are read with `ast`; nothing is imported.
Exit status: 1 when some function is over the limit, else 0.
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MAX_LINES = 80


def long_functions(root: Path, limit: int) -> list[tuple[int, str, int, str]]:
    """(lines, file relative to root's parent, line of the def, qualified name), longest first."""
    out = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        rel = str(path.relative_to(root.parent))
        for qual, node in _functions(tree, ""):
            n = node.end_lineno - node.lineno + 1
            if n > limit:
                out.append((n, rel, node.lineno, qual))
    return sorted(out, key=lambda x: (-x[0], x[1], x[2]))


def _functions(node: ast.AST, prefix: str):
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            qual = f"{prefix}{child.name}"
            if not isinstance(child, ast.ClassDef):
                yield qual, child
            yield from _functions(child, qual + ".")
        else:
            yield from _functions(child, prefix)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", nargs="?", default=str(REPO / "archaudit"))
    ap.add_argument("--max", type=int, default=MAX_LINES, help="longest allowed function, in lines")
    args = ap.parse_args()
    rows = long_functions(Path(args.root).resolve(), args.max)
    for n, rel, line, qual in rows:
        print(f"{n:5d}  {rel}:{line}  {qual}")
    print(f"{len(rows)} function(s) over {args.max} lines")
    return 1 if rows else 0


if __name__ == "__main__":
    sys.exit(main())
