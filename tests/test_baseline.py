"""Fingerprints, inline suppressions, baseline files, --fail-on and exit codes, pin lines."""
import json
import os
import shutil

import pytest
from click.testing import CliRunner

from archaudit.verdict.baseline import (NOT_JUDGED, expr_skeleton, fingerprint, gate_keys, line_reader, parse_fail_on,
                                parse_suppression, reportable)
from archaudit.cli import main
from archaudit.model import HARDWARE_BOUND, UNRESOLVED, VERDICTS, Finding, Gate
from archaudit.pipeline import ScanResult
from archaudit.repo import Pin, find_repo_root, repo_context
from archaudit.sources import open_source

from conftest import FIXTURES


def _g(line, function="pkg.mod.f", kind="predicate-call", expr="is_sm90_supported()", admits=("sm_90",), package="pkg"):
    return Gate("pkg/mod.py", line, 8, function, kind, expr, frozenset(admits), "inferred", True, package, "branch", [])


def test_expr_skeleton_drops_layout_and_arch_numbers_not_names():
    assert expr_skeleton("get_nvcc_flags_list(\n    supported_major_versions=[9, 10]\n)") == \
        expr_skeleton("get_nvcc_flags_list(supported_major_versions=[9, 10, 12,])") == \
        "get_nvcc_flags_list(supported_major_versions=[#])"
    assert expr_skeleton("major >= 9") == expr_skeleton("major >= 10") == "major>=#"
    assert expr_skeleton('"-gencode=arch=compute_100a,code=sm_100a"') == '"-gencode=arch=compute_#,code=sm_#"'
    # predicate names are identities, not numbers
    assert expr_skeleton("is_sm90_supported()") != expr_skeleton("is_sm100_supported()")


def test_gate_keys_are_line_independent_and_ordinal_among_lookalikes():
    a, b, c = _g(10), _g(20), _g(30, function="pkg.mod.h")
    assert gate_keys([b, c, a]) == ["pkg|pkg.mod.f|predicate-call|is_sm90_supported()|1",
                                    "pkg|pkg.mod.h|predicate-call|is_sm90_supported()|0",
                                    "pkg|pkg.mod.f|predicate-call|is_sm90_supported()|0"]
    moved = [_g(110), _g(120), _g(130, function="pkg.mod.h")]
    assert gate_keys(moved) == gate_keys([a, b, c])
    k = gate_keys([a])[0]
    fps = {fingerprint(r, k, t) for r in (UNRESOLVED, HARDWARE_BOUND) for t in ("sm_120", "sm_121")}
    assert len(fps) == 4 and all(len(f) == 32 for f in fps)


def test_reportable_uses_findings_and_marks_the_rest_unresolved(reg):
    judged, unjudged, admitting = _g(10), _g(20, function="pkg.mod.g"), _g(30, function="pkg.mod.h", admits=("sm_90", "sm_120"))
    unres = Gate("pkg/mod.py", 40, 4, "pkg.mod.u", "capability-compare", "cap >= threshold", frozenset({"sm_120"}),
                 "unresolved: threshold comes from the environment", False, "pkg", "branch", [])
    res = ScanResult("root", [], [judged, unjudged, admitting, unres], [], [reg.parse("sm_120")],
                     [Finding(judged, "sm_120", HARDWARE_BOUND, reason="wgmma")])
    got = [(r.finding.gate.line, r.rule, r.finding.reason) for r in reportable(res)]
    assert got == [(10, HARDWARE_BOUND, "wgmma"), (20, UNRESOLVED, NOT_JUDGED),
                   (40, UNRESOLVED, "the gate could not be resolved (unresolved: threshold comes from the environment)")]


def test_suppression_comments():
    assert parse_suppression("    if is_sm90_supported():  # archaudit: ignore[software-only, unresolved]") == \
        frozenset({"software-only", "unresolved"})
    assert parse_suppression("x = 1  # archaudit: ignore") == frozenset()
    assert parse_suppression("  TORCH_CHECK(sm >= 90);  // archaudit: ignore[hardware-bound]") == frozenset({"hardware-bound"})
    assert parse_suppression("if x:  # noqa") is None


def test_line_reader_for_suppressions_skips_only_files_that_cannot_hold_one(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\nif f():  # ARCHAUDIT: Ignore[unresolved]\n")
    (tmp_path / "b.py").write_text("x = 1\nif f():  # archaud\u0131t: ignore\n")  # re.I: dotless i
    (tmp_path / "c.py").write_text("x = 1\nif f():  # noqa\n")
    full, quick = line_reader(open_source(tmp_path)), line_reader(open_source(tmp_path), only_suppressions=True)
    for name in ("a.py", "b.py"):
        assert quick(name, 2) == full(name, 2) and parse_suppression(quick(name, 2)) is not None
    assert full("c.py", 2) == "if f():  # noqa" and quick("c.py", 2) is None


def test_fail_on_parsing():
    assert parse_fail_on(None) is None
    assert parse_fail_on("none") == frozenset()
    assert parse_fail_on("any") == frozenset(VERDICTS)
    assert parse_fail_on("software-only, partial") == frozenset({"software-only", "partial"})
    with pytest.raises(ValueError, match="unknown verdict"):
        parse_fail_on("soft")


# --- repository, pins -----------------------------------------------------------------------
def test_repo_root_is_found_by_reading_dot_git(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / ".git").write_text("gitdir: /elsewhere/worktrees/a\n")  # a worktree's .git file
    assert find_repo_root(tmp_path / "a" / "b") == (tmp_path / "a").resolve()
    assert find_repo_root(tmp_path) is None or find_repo_root(tmp_path) != (tmp_path / "a").resolve()


def test_pin_lines_in_every_kind_of_file(tmp_path):
    (tmp_path / "requirements-gpu.txt").write_text("# gpu\n--extra-index-url x\nFlashInfer_Python[jit]==0.7.2 ; python_version>'3.9'\n")
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "app"\ndependencies = [\n  "torch>=2.8",\n  "sglang[all]==0.5.23",\n]\n'
        '[tool.poetry.dependencies]\npython = "^3.11"\nnumpy = "^2"\n')
    (tmp_path / "uv.lock").write_text('version = 1\n\n[[package]]\nname = "nvidia-cutlass"\nversion = "4.2"\n')
    sub = tmp_path / "deploy"
    sub.mkdir()
    (sub / "poetry.lock").write_text('[[package]]\nname = "triton"\nversion = "3.4"\n\n[metadata]\nname = "x"\n')
    (sub / "constraints.txt").write_text("torch==2.9.0\n")
    venv = tmp_path / ".venv"
    venv.mkdir()
    (venv / "requirements.txt").write_text("evil==1\n")  # never searched
    ctx = repo_context(tmp_path, None)
    assert ctx.pin("flashinfer-python") == Pin("requirements-gpu.txt", 3, "FlashInfer_Python[jit]==0.7.2 ; python_version>'3.9'")
    assert ctx.pin("torch") == Pin("deploy/constraints.txt", 1, "torch==2.9.0")  # constraints before pyproject
    assert ctx.pin("sglang") == Pin("pyproject.toml", 5, '"sglang[all]==0.5.23",')
    assert ctx.pin("numpy") == Pin("pyproject.toml", 9, 'numpy = "^2"')
    assert ctx.pin("nvidia_cutlass") == Pin("uv.lock", 4, 'name = "nvidia-cutlass"')
    assert ctx.pin("triton") == Pin("deploy/poetry.lock", 2, 'name = "triton"')
    assert ctx.pin("app") is None and ctx.pin("evil") is None and ctx.pin("x") is None


# --- the baseline round trip on the fixture repository ---------------------------------------
@pytest.fixture()
def repo(tmp_path):
    dst = tmp_path / "repo"
    shutil.copytree(FIXTURES / "ci" / "repo", dst)
    (dst / ".git").mkdir()
    return dst


def _run(args, cwd):
    old = os.getcwd()
    os.chdir(cwd)
    try:
        try:
            runner = CliRunner(mix_stderr=False)
        except TypeError:  # click >= 8.2 always separates stderr
            runner = CliRunner()
        return runner.invoke(main, args)
    finally:
        os.chdir(old)


def test_baseline_round_trip(repo):
    r = _run(["baseline", "ciapp", "-t", "sm_120", "-q"], repo)
    assert r.exit_code == 0, r.output
    assert "wrote 1 finding(s) for sm_120 to .archaudit-baseline.json" in r.stderr
    base = json.loads((repo / ".archaudit-baseline.json").read_text())
    assert base["format"] == "archaudit-baseline" and base["targets"] == ["sm_120"]
    # layers.py:7 is recorded; layers.py:20 is suppressed inline and not recorded
    assert [(e["path"], e["line"], e["rule"]) for e in base["findings"]] == [("layers.py", 7, "unresolved")]

    # rescan: nothing new (targets come from the baseline)
    r = _run(["scan", "ciapp", "--baseline", ".archaudit-baseline.json", "-q", "--format", "text"], repo)
    assert r.exit_code == 0, r.stderr
    assert "1 known, 0 new finding(s) (not in .archaudit-baseline.json)" in r.stderr
    head = "sm_120 (RTX PRO 6000, RTX 5090, RTX 5080): "
    assert head + "no new gate stops it (1 known, in the baseline)\n" in r.stdout
    r = _run(["scan", "ciapp", "--baseline", ".archaudit-baseline.json", "-q", "--format", "table"], repo)
    assert r.exit_code == 0 and head + "no new gate stops it (1 known, in the baseline)" in r.stdout

    # add a gate: exit 1, naming only the new one
    layers = repo / "ciapp" / "layers.py"
    layers.write_text(layers.read_text() + "\n\ndef hopper_only():\n    if is_sm90_supported():\n        return 1\n    return 0\n")
    r = _run(["scan", "ciapp", "--baseline", ".archaudit-baseline.json", "-q", "--format", "text"], repo)
    assert r.exit_code == 1
    lines = [x for x in r.stderr.splitlines() if x.startswith("  ")]
    assert lines == ["  layers.py:26: unresolved on sm_120: is_sm90_supported() (layers.hopper_only)"]
    assert "1 known, 1 new finding(s) (not in .archaudit-baseline.json)" in r.stderr
    assert head + "1 new gate stops it (1 known, in the baseline)\n  1 unresolved: " in r.stdout
    assert "\nlayers.py:26:8: sm_120: unresolved: " in r.stdout  # the new one, listed

    # the SARIF of that run holds only the new result, marked new
    r = _run(["scan", "ciapp", "--baseline", ".archaudit-baseline.json", "-q", "--format", "sarif"], repo)
    assert r.exit_code == 1
    res = json.loads(r.stdout)["runs"][0]["results"]
    assert [(x["locations"][0]["physicalLocation"]["region"]["startLine"], x.get("baselineState"), "suppressions" in x)
            for x in res] == [(20, "new", True), (26, "new", False)]  # suppressed results stay visible as such

    # remove it again and move unrelated lines: still nothing new
    text = layers.read_text().split("\n\ndef hopper_only")[0] + "\n"
    layers.write_text('"""Layers."""\n# a comment\n\n\n' + text.replace("def use_fp4_gemm", "def unrelated():\n    return 2\n\n\ndef use_fp4_gemm"))
    r = _run(["scan", "ciapp", "--baseline", ".archaudit-baseline.json", "-q", "--format", "json"], repo)
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["gates"][0]["line"] == 11  # the recorded gate really moved


def test_exit_codes_and_fail_on(repo):
    r = _run(["scan", "ciapp", "-t", "sm_120", "-q", "--format", "text"], repo)
    assert r.exit_code == 0  # --fail-on defaults to none for scan
    r = _run(["scan", "ciapp", "-t", "sm_120", "-q", "--format", "text", "--fail-on", "unresolved"], repo)
    assert r.exit_code == 1 and "1 finding(s) with a verdict in --fail-on" in r.stderr
    r = _run(["scan", "ciapp", "-t", "sm_120", "-q", "--format", "text", "--fail-on", "hardware-bound,software-only"], repo)
    assert r.exit_code == 0
    r = _run(["scan", "ciapp", "-t", "sm_120", "--fail-on", "bogus"], repo)
    assert r.exit_code == 2 and "unknown verdict(s) bogus" in r.stderr
    r = _run(["scan", "ciapp", "--fail-on", "any"], repo)
    assert r.exit_code == 2 and "need at least one --target" in r.stderr


@pytest.mark.parametrize("content, message", [
    (None, "no such baseline file"),
    ("{not json", "not a JSON baseline file"),
    ('{"findings": []}', "not an archaudit baseline"),
    ('{"format": "archaudit-baseline", "version": 99, "findings": []}', "baseline version 99 is not supported"),
    ('{"format": "archaudit-baseline", "version": 1, "findings": [{"x": 1}]}', "must be a list of objects"),
])
def test_bad_baseline_files_are_usage_errors(repo, content, message):
    if content is not None:
        (repo / "b.json").write_text(content)
    r = _run(["scan", "ciapp", "-t", "sm_120", "--baseline", "b.json"], repo)
    assert r.exit_code == 2 and message in r.stderr and "Traceback" not in r.output


@pytest.mark.parametrize("kind, message", [
    ("dev-zero-link", "requirements.txt: cannot read pin file: not a regular file"),
    ("fifo", "requirements.txt: cannot read pin file: not a regular file"),
    ("dangling", "requirements.txt: cannot read pin file: No such file or directory"),
    ("deep-toml", "pyproject.toml: TOML nested too deeply to read"),
    ("bad-toml", "pyproject.toml: not a TOML file (Expected '=' after a key in a key/value pair (at line 1, column 5))"),
])
def test_hostile_pin_files_are_input_errors(repo, kind, message):
    # files a pull request can commit, read for SARIF's pin lines: an input error naming the file,
    # at once (not a hang on the FIFO, not /dev/zero read into memory, not silently no pins)
    import time

    req = repo / "requirements.txt"
    req.unlink()
    if kind == "dev-zero-link":
        req.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(req)
    elif kind == "dangling":
        req.symlink_to("gone.txt")
    elif kind == "deep-toml":
        (repo / "pyproject.toml").write_text("a = " + "[" * 100000 + "]" * 100000 + "\n")
    else:
        (repo / "pyproject.toml").write_text("not toml\n")
    t0 = time.monotonic()
    r = _run(["scan", "ciapp", "-t", "sm_120", "--format", "sarif", "-q"], repo)
    assert time.monotonic() - t0 < 30
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert f"Error: {message}" in r.stderr
    assert r.stdout == ""  # no report that leaves the pin out


def test_pyproject_of_unexpected_types_pins_what_it_can(tmp_path):
    (tmp_path / "pyproject.toml").write_text(
        'project = 1\n[build-system]\nrequires = "setuptools"\n[dependency-groups]\ndev = ["pytest>=8", {include-group = "x"}]\n'
        '[tool]\npoetry = [1]\n')
    ctx = repo_context(tmp_path, None)
    assert ctx.pins == {"pytest": Pin("pyproject.toml", 5, 'dev = ["pytest>=8", {include-group = "x"}]')}


def test_baseline_needs_a_target(repo):
    r = _run(["baseline", "ciapp"], repo)
    assert r.exit_code == 2 and "--target" in r.stderr


@pytest.mark.parametrize("kind, message", [
    ("dev-zero-link", "not a regular file"),
    ("fifo", "not a regular file"),
    ("deep", "nested deeper than 64 levels"),
])
def test_hostile_baseline_files_are_input_errors(repo, kind, message):
    import time

    b = repo / "b.json"
    if kind == "dev-zero-link":
        b.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(b)
    else:
        b.write_text('{"format": "archaudit-baseline", "x": ' + "[" * 100000 + "]" * 100000 + "}")
    t0 = time.monotonic()
    r = _run(["scan", "ciapp", "-t", "sm_120", "--baseline", "b.json"], repo)
    assert time.monotonic() - t0 < 30  # the scan of the fixture itself; the baseline read is at once
    assert r.exit_code == 2 and message in r.stderr and "Traceback" not in r.output
