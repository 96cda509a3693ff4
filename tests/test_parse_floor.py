"""bench/parse_floor.py: the modules a cold scan loads, and the work it times, on fixtures/pyrounds
(its README says which modules the gate rounds evaluate)."""
import json
import subprocess
import sys
from pathlib import Path

import parse_floor

REPO = Path(__file__).resolve().parent.parent
ROUNDS = REPO / "fixtures" / "pyrounds"


def test_records_the_modules_a_cold_scan_loads():
    loaded, _wall = parse_floor.loaded_modules(str(ROUNDS), "sm_120")
    evaluated = {"aliased", "arch", "flags", "others", "rebound", "starred", "users"}
    assert {p for p, shallow in loaded.items() if not shallow} == {f"roundpkg/{m}.py" for m in evaluated}
    # the package, for the imports that go through it; outside.py and quiet.py are never read
    assert {p for p, shallow in loaded.items() if shallow} == {"roundpkg/__init__.py"}


def test_times_what_it_says(tmp_path):
    out = tmp_path / "floor.json"
    subprocess.run([sys.executable, str(REPO / "bench" / "parse_floor.py"), str(ROUNDS), "--out", str(out)],
                   check=True, capture_output=True)
    r = json.loads(out.read_text())
    files = sorted(ROUNDS.rglob("*.py"))
    assert r["prefilter"]["files"] == len(files) == 10
    assert r["prefilter"]["bytes"] == sum(len(p.read_bytes()) for p in files)
    assert (r["full"]["modules"], r["shallow"]["modules"]) == (7, 1)
    assert r["shallow"]["bytes"] == len((ROUNDS / "roundpkg" / "__init__.py").read_bytes())
    work = r["prefilter"]["cpu_s"] + r["full"]["tree_sitter_cpu_s"] + r["shallow"]["tree_sitter_cpu_s"]
    assert r["floor_wall_s"] == round(work / r["cores"], 1)


def test_a_missing_tree_is_an_error_not_a_traceback(tmp_path):
    p = subprocess.run([sys.executable, str(REPO / "bench" / "parse_floor.py"), str(tmp_path / "nope")],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "not a directory" in p.stderr and "Traceback" not in p.stderr
