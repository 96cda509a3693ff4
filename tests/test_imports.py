"""scripts/imports.py: archaudit's import graph has no cycle and no import of another module's
private name; every function-level import says why it is lazy (issue 25)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "imports.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120)


def test_repo_import_graph_is_clean():
    p = _run("--json", "--strict")
    r = json.loads(p.stdout)
    assert r["cycles"] == [] and r["private_imports"] == [], p.stdout[-2000:]
    unreasoned = [f for f in r["function_imports"] if not f["reasoned"]]
    assert unreasoned == []
    assert p.returncode == 0
    assert r["modules"] > 60 and r["edges"] > 200  # it did read the package


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(text)
    return root / "pkg"


def test_finds_cycles_private_names_and_lazy_imports(tmp_path):
    pkg = _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from .b import _hidden, shown\nfrom . import c\n\ndef f():\n    return c._state\n",
        "pkg/b.py": "def g():\n    from .a import f\n    return f\n\n_hidden = shown = 1\n",
        "pkg/c.py": "_state = 0\n\ndef h():\n    # lazy: only this command needs it\n    import json\n    import os\n    x = 1\n    import re\n",
        "pkg/sub/__init__.py": "",
        "pkg/sub/d.py": "from ..c import __doc__\nfrom .. import b\n",
    })
    p = _run(str(pkg), "--json")
    assert p.returncode == 1
    r = json.loads(p.stdout)
    assert r["cycles"] == [{"modules": ["pkg.a", "pkg.b"], "cycle": ["pkg.a", "pkg.b", "pkg.a"]}]
    assert sorted((x["module"], x["name"]) for x in r["private_imports"]) == [
        ("pkg.a", "pkg.b._hidden"), ("pkg.a", "pkg.c._state")]
    assert [(x["module"], x["line"], x["reasoned"]) for x in r["function_imports"]] == [
        ("pkg.b", 2, False), ("pkg.c", 5, True), ("pkg.c", 6, True), ("pkg.c", 8, False)]
    assert r["graph"]["pkg.sub.d"] == ["pkg.b", "pkg.c"]


def test_exit_status(tmp_path):
    clean = _write(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "def f():\n    import os\n"})
    assert _run(str(clean)).returncode == 0
    assert _run(str(clean), "--strict").returncode == 1
