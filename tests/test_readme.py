"""The README is for users: short, every command in it, the set-up CI runs, and the quick start
runs as written (on a fixture instead of the pinned pair, whose first scan takes minutes; the
README's example output itself comes from the pinned pair, written by scripts/readme_examples.py)."""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from archaudit.cli import main

from conftest import FIXTURES, REPO

README = (REPO / "README.md").read_text(encoding="utf-8")


def _section(title: str) -> str:
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", README, re.S | re.M)
    assert m, title
    return m.group(1)


def test_readme_is_short_and_names_every_command():
    assert len(README.splitlines()) <= 300
    out = CliRunner().invoke(main, ["--help"]).output
    commands = re.findall(r"^  (\w+)\s", out.split("Commands:", 1)[1], re.M)
    assert len(commands) >= 11
    for c in commands:
        assert f"`archaudit {c}" in README, c
    assert "`archaudit rules verify`" in README


def test_the_two_set_up_commands_are_what_ci_runs():
    setup = _section("Install")
    assert "bash scripts/demo.sh" in setup and ".venv/bin/python -m pytest -q" in setup
    ci = (REPO / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1] == ".venv/bin/python -m pytest -q"
    assert "bash scripts/setup.sh" in ci
    demo = (REPO / "scripts" / "demo.sh").read_text()
    assert "bash scripts/setup.sh" in demo and "archaudit scan" in demo


def test_example_output_blocks_are_filled():
    blocks = dict(re.findall(r"<!-- example:(\w+) -->\n(.*?)<!-- /example -->", README, re.S))
    assert set(blocks) == {"screen", "finding", "patch"}
    screen = blocks["screen"].splitlines()
    assert screen[1] == "$ archaudit scan site-packages --target sm_120"
    assert screen[2] == "archaudit: site-packages"
    assert len(screen) <= 60 + 3
    assert any(re.match(r"^sm_120 \(.*\): \d+ gates stop it$", x) for x in screen)
    assert "    archaudit patch site-packages -t sm_120 > enable-sm_120.patch" in screen
    finding = json.loads(blocks["finding"].split("\n", 1)[1].rsplit("```", 1)[0])
    assert finding["verdict"] == "software-only" and finding["target"] == "sm_120"
    assert blocks["patch"].startswith("```diff\n--- ") and "\n+" in blocks["patch"]


def test_quick_start_runs_as_written(tmp_path):
    block = re.search(r"```bash\n(.*?)```", _section("Quick start"), re.S).group(1)
    lines = [x for x in block.splitlines() if x.strip()]
    assert lines[0].startswith("SP=$(.venv/bin/python bench/corpus.py fi072)")
    sp = tmp_path / "sp"
    for d in ("servelib", "kernlib"):
        shutil.copytree(FIXTURES / "verdicts" / d, sp / d)
    script = "set -euo pipefail\n" + f"SP={sp}\n" + "\n".join(lines[1:]) + "\n"
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               ARCHAUDIT_CACHE_DIR=str(tmp_path / "cache"))
    p = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"archaudit: {sp}\n")
    assert f"    archaudit patch {sp} -t sm_120 > enable-sm_120.patch\n" in p.stdout
    listed = re.findall(r"^(\S+):(\d+):\d+: sm_120: software-only: ", p.stdout, re.M)
    assert ("servelib/fusion.py", "9") in listed and len(set(listed)) == 14
    doc = json.loads((tmp_path / "findings.json").read_text())
    assert len(doc["findings"]) == 29
    patch = (tmp_path / "enable-sm_120.patch").read_text()
    assert "+++ kernlib/jit/modules.py" in patch or "+++ b/kernlib/jit/modules.py" in patch
    dry = subprocess.run(["patch", "-p0", "--dry-run", "-d", str(sp)], input=patch, capture_output=True, text=True)
    assert dry.returncode == 0, dry.stdout + dry.stderr
