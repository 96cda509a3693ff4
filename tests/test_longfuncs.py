"""scripts/longfuncs.py: the functions longer than a limit, with their file, line and qualified
name (issue 25)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "longfuncs.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_lists_long_functions_methods_and_nested_ones(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    def lines(indent: str) -> str:  # nine statement lines: with its def, a 10-line function
        return "".join(f"{indent}x{i} = {i}\n" for i in range(9))

    (pkg / "a.py").write_text("def short():\n    return 1\n\n\n"                   # lines 1-2
                              f"def long():\n{lines('    ')}"                         # lines 5-14
                              f"class C:\n    def meth(self):\n{lines('        ')}")   # lines 16-25
    (pkg / "b.py").write_text(f"def outer():\n    def inner():\n{lines('        ')}    return inner\n")
    p = _run(str(pkg), "--max", "9")
    assert p.returncode == 1
    rows = [line.split() for line in p.stdout.splitlines()[:-1]]
    assert sorted((r[1], r[2]) for r in rows) == [("pkg/a.py:16", "C.meth"), ("pkg/a.py:5", "long"),
                                                  ("pkg/b.py:1", "outer"), ("pkg/b.py:2", "outer.inner")]
    assert p.stdout.splitlines()[-1] == "4 function(s) over 9 lines"
    assert _run(str(pkg), "--max", "20").returncode == 0
