"""The first screen of `archaudit scan` and its filters (issue 24): the summary per target, the
filters (--verdict, --package, --include/--exclude, test files) applied alike to text, JSON and
SARIF, the commands it suggests, and the first screen on the pinned real pair."""
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

from archaudit.cli import main
from archaudit.filters import Filters, is_test_path
from archaudit.summary import first_clause, module_label, reason_category

from conftest import FIXTURES, REPO

# fixtures/verdicts (servelib + kernlib) beside fixtures/filters (fpkg), judged for sm_120
ALL = {
    ("kernlib/data/csrc/fused_binding.cu", 10, "hardware-bound"),
    ("kernlib/data/csrc/norm_binding.cu", 11, "software-only"),
    ("kernlib/data/csrc/orphan_binding.cu", 10, "unresolved"),
    ("kernlib/gemm.py", 6, "hardware-bound"),
    ("kernlib/jit/modules.py", 6, "partial"),
    ("kernlib/jit/modules.py", 18, "hardware-bound"),
    ("kernlib/jit/modules.py", 23, "software-only"),
    ("kernlib/jit/modules.py", 28, "hardware-bound"),
    ("kernlib/jit/modules.py", 33, "hardware-bound"),
    ("servelib/attn_patch.py", 23, "unresolved"),
    ("servelib/attn_patch.py", 45, "software-only"),
    ("servelib/auto_enable.py", 14, "software-only"),
    ("servelib/communicator.py", 15, "software-only"),
    ("servelib/fusion.py", 9, "software-only"),
    ("servelib/moe.py", 11, "software-only"),
    ("servelib/moe.py", 18, "software-only"),
    ("servelib/moe.py", 33, "hardware-bound"),
    ("servelib/reach.py", 17, "software-only"),
    ("servelib/reach.py", 19, "software-only"),
    ("servelib/reach.py", 25, "software-only"),
    ("servelib/reach.py", 28, "unresolved"),
    ("servelib/reach.py", 43, "unresolved"),
    ("servelib/reach.py", 65, "hardware-bound"),
    ("servelib/selectors.py", 11, "unresolved"),
    ("servelib/selectors.py", 19, "hardware-bound"),
    ("servelib/selectors.py", 27, "software-only"),
    ("servelib/selectors.py", 35, "unresolved"),
    ("servelib/selectors.py", 41, "software-only"),
    ("servelib/selectors.py", 49, "software-only"),
    ("fpkg/ops.py", 5, "unresolved"),
    ("fpkg/attest.py", 5, "unresolved"),
    ("fpkg/testsuite/cases.py", 5, "unresolved"),
}
TESTS = {(p, 5, "unresolved") for p in ("fpkg/conftest.py", "fpkg/ops_test.py", "fpkg/test_ops.py",
                                         "fpkg/tests/test_kernels.py", "fpkg/tests/util.py", "fpkg/testing/helpers.py")}


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("screen")
    for d in ("servelib", "kernlib"):
        shutil.copytree(FIXTURES / "verdicts" / d, root / d)
    shutil.copytree(FIXTURES / "filters" / "fpkg", root / "fpkg")
    return root


@pytest.fixture(scope="module")
def scanned(tree):
    from archaudit.pipeline import scan
    from archaudit.targets import registry

    reg = registry()
    return scan(tree, [reg.parse("sm_120")], reg, cache=False)


@pytest.fixture
def run(tree, scanned, monkeypatch):
    """`archaudit scan TREE -t sm_120 ARGS` on the scan above (the command's own filtering and
    formatting, without scanning again)."""
    import archaudit.cli.common as cc

    monkeypatch.setattr(cc, "scan_with_progress", lambda *a, **k: scanned)

    def go(*args):
        r = _runner().invoke(main, ["scan", str(tree), "-t", "sm_120", "-q", *args])
        assert r.exit_code in (0, 1), (r.exit_code, r.output, r.stderr)
        return r
    return go


def _runner():
    try:
        return CliRunner(mix_stderr=False)
    except TypeError:  # click >= 8.2 always separates stderr
        return CliRunner()


def _json(r):
    return {(f["gate"]["path"], f["gate"]["line"], f["verdict"]) for f in json.loads(r.stdout)["findings"]}


def _sarif(r):
    out = set()
    for res in json.loads(r.stdout)["runs"][0]["results"]:
        loc = res["locations"][0]["physicalLocation"]
        out.add((loc["artifactLocation"]["uri"].split("SCANROOT/")[-1], loc["region"]["startLine"],
                 res["properties"]["verdict"]))
    return out


def _listed(r):
    return {(m.group(1), int(m.group(2)), m.group(3))
            for m in re.finditer(r"^(\S+):(\d+):\d+: sm_120: ([a-z-]+): ", r.stdout, re.M)}


def test_the_scan_judges_the_fixture(scanned):
    assert {(f.gate.path, f.gate.line, f.verdict) for f in scanned.findings} == ALL | TESTS


def test_test_files_are_left_out_and_counted(run):
    r = run("--format", "json")
    doc = json.loads(r.stdout)
    assert _json(r) == ALL
    assert doc["filters"]["include_tests"] is False
    assert doc["filters"]["left_out"]["findings_in_test_files"] == 6
    assert doc["filters"]["left_out"]["gates_in_test_files"] == 6
    assert not [g for g in doc["gates"] if is_test_path(g["path"])]
    text = run("--format", "text").stdout
    assert "  6 findings in test files left out; --include-tests to show\n" in text
    assert "(6 more in test files)" in text.splitlines()[1]
    r = run("--format", "json", "--include-tests")
    assert _json(r) == ALL | TESTS
    assert json.loads(r.stdout)["filters"]["left_out"]["findings_in_test_files"] == 0


@pytest.mark.parametrize("args, expected", [
    (["--verdict", "hardware-bound", "--package", "kernlib"],
     {f for f in ALL if f[2] == "hardware-bound" and f[0].startswith("kernlib/")}),
    (["--verdict", "software-only,partial", "--include", "servelib/*", "--exclude", "servelib/reach.py"],
     {("servelib/attn_patch.py", 45, "software-only"), ("servelib/auto_enable.py", 14, "software-only"),
      ("servelib/communicator.py", 15, "software-only"), ("servelib/fusion.py", 9, "software-only"),
      ("servelib/moe.py", 11, "software-only"), ("servelib/moe.py", 18, "software-only"),
      ("servelib/selectors.py", 27, "software-only"), ("servelib/selectors.py", 41, "software-only"),
      ("servelib/selectors.py", 49, "software-only")}),
    (["--verdict", "partial", "--verdict", "unresolved", "--include", "kernlib"],  # a directory: what is under it
     {("kernlib/jit/modules.py", 6, "partial"), ("kernlib/data/csrc/orphan_binding.cu", 10, "unresolved")}),
    (["--package", "fpkg", "--include-tests", "--exclude", "fpkg/tests/*"],
     {("fpkg/ops.py", 5, "unresolved"), ("fpkg/attest.py", 5, "unresolved"), ("fpkg/testsuite/cases.py", 5, "unresolved"),
      ("fpkg/conftest.py", 5, "unresolved"), ("fpkg/ops_test.py", 5, "unresolved"), ("fpkg/test_ops.py", 5, "unresolved"),
      ("fpkg/testing/helpers.py", 5, "unresolved")}),
])
def test_filters_give_the_same_findings_in_every_format(run, args, expected):
    j = run("--format", "json", *args)
    assert _json(j) == expected
    doc = json.loads(j.stdout)
    given = sorted({v for i, a in enumerate(args) if a == "--verdict" for v in args[i + 1].split(",")})
    assert doc["filters"]["verdict"] == (given or None)
    # the gate inventory follows the package and path filters, not the verdict
    assert {(g["path"]) for g in doc["gates"]} >= {p for p, _, _ in expected}
    assert _sarif(run("--format", "sarif", *args)) == expected
    assert _listed(run("--format", "text", *args)) == expected


def test_fail_on_counts_only_what_the_filters_keep(run):
    assert run("--fail-on", "hardware-bound", "--package", "servelib", "--verdict", "software-only").exit_code == 0
    r = run("--fail-on", "hardware-bound", "--package", "servelib")
    assert r.exit_code == 1
    assert sorted(x for x in r.stderr.splitlines() if x.startswith("  ")) == [
        "  servelib/moe.py:33: hardware-bound on sm_120: is_sm90_supported() (servelib.moe.pick_gemm)",
        "  servelib/reach.py:65: hardware-bound on sm_120: is_sm90_supported() (servelib.reach.pick_mixed)",
        "  servelib/selectors.py:19: hardware-bound on sm_120: is_sm90_supported() (servelib.selectors.pick_backend)",
    ]


def test_first_screen_of_the_fixture(run, tree):
    text = run("--format", "text").stdout
    lines = text.splitlines()
    assert lines[0] == f"archaudit: {tree}"
    assert lines[1] == "42 gates that test the GPU architecture (6 more in test files)"
    assert lines[3] == "sm_120 (RTX PRO 6000, RTX 5090, RTX 5080): 32 gates stop it"
    assert lines[4] == "  15 can be patched (14 software-only, 1 partial; 13 with an automatic patch, 2 with a step by hand):"
    assert lines[5] == f"    archaudit patch {tree} -t sm_120 > enable-sm_120.patch"
    assert lines[6].split() == ["norm", "8", "gates", "kernlib/jit/modules.py:23"]
    assert lines[7].split() == ["comm", "6", "gates", "kernlib/jit/modules.py:6"]
    assert lines[8].split() == ["norm_binding", "1", "gate", "kernlib/data/csrc/norm_binding.cu:11"]
    assert "  8 hardware-bound: sm_120 lacks what they need (4 modules)" in lines
    assert [x.split("  ")[-2:] for x in lines if "hopper_gemm" in x] == [["needs ptx.wgmma (only sm_90a)", "kernlib/gemm.py:6"]]
    i = lines.index("  9 unresolved: not followed to the end, by the first obstacle met "
                    f"(list: archaudit scan {tree} -t sm_120 --verdict unresolved)")
    assert lines[i + 1].split(None, 1) == ["3", "an API predicate: its callers are outside the scan"]
    # 32 findings: more than are listed unasked, so none is listed
    assert "findings:" not in lines and not _listed(run("--format", "text"))
    assert len(_listed(run("--format", "text", "--all"))) == 32
    assert "gates:" in run("--format", "text", "--all").stdout.splitlines()


def test_table_on_a_terminal_is_the_same_screen(run, tree, scanned):
    import io

    from rich.console import Console

    from archaudit.filters import scope_result
    from archaudit.report.text import View, render_table, render_text
    from archaudit.targets import registry

    reg = registry()
    res, _ = scope_result(scanned, Filters())
    con = Console(file=io.StringIO(), width=300, force_terminal=True, color_system=None)
    render_table(res, reg, con, View(path_arg=str(tree)))
    plain = render_text(res, reg, View(path_arg=str(tree)))
    assert [x.rstrip() for x in con.file.getvalue().splitlines()] == plain.splitlines()


def test_module_labels():
    assert module_label("cake_fmha_context_bf16_{target}_m{num_m_blocks}") == "cake_fmha_context_bf16_*"
    assert module_label("{mnnvl_moe_alltoall|mnnvl_moe_alltoall_legacy|mnnvl_moe_alltoall_sm100a}") == "mnnvl_moe_*"
    assert module_label("{minimax_h3_fc1_swiglu_sm100a_v1|minimax_h3_fc1_swiglu_sm103a_v1}") == "minimax_h3_fc1_swiglu_*"
    assert module_label("cake_fmha_compat_v1_sm100a_34d36b82be62_48d627ad25ca") == "cake_fmha_compat_v1_sm100a"
    assert module_label("{name}_{arch}", ["x/cake_deepgemm_fp4_gemm_40f53c88e86797021dc8_binding.cu"]) == "cake_deepgemm_fp4_gemm_*"
    assert module_label("2d6a5a029eefcc388ec0ceb87efb55d8bcce5c3c/fmha/trtllm-gen/") == "prebuilt fmha/trtllm-gen"
    assert module_label("gemm_sm100") == "gemm_sm100"


def test_reason_categories():
    lead = "no JIT module is reached from the region this gate guards; not shown free of GPU code: "
    assert reason_category(lead + "a/b.py:3: the code the gate changes writes self.x, read elsewhere") == \
        "its outcome is stored (an attribute, item or global) and read elsewhere"
    assert reason_category(lead + "p.m.f: its callers were not searched (its name is in too many modules)") == \
        "callers not searched (the name is in too many modules)"
    assert reason_category("m: source x.cu: missing (no such file in the scan); the guarded path also calls code "
                           "outside the scan whose GPU support is not analysed: cutlass.x") == \
        "a JIT module's sources cannot be followed (missing, inline, built at run time)"
    assert first_clause(lead + "a/b.py:9: something new: detail") == "something new"
    assert reason_category(lead + "a/b.py:9: something new: detail") == "something new"


@pytest.mark.parametrize("path, is_test", [
    ("pkg/tests/x.py", True), ("pkg/test/x.cu", True), ("pkg/testing/h.py", True), ("pkg/test_x.py", True),
    ("pkg/x_test.py", True), ("conftest.py", True), ("pkg/testsuite/x.py", False), ("pkg/attest.py", False),
    ("pkg/test_x.cu", False), ("tests.py", False), ("pkg/latest.py", False),
])
def test_test_paths(path, is_test):
    assert is_test_path(path) is is_test


def test_unknown_verdict_and_empty_directory(tmp_path):
    r = _runner().invoke(main, ["scan", str(tmp_path), "--verdict", "bogus"])
    assert r.exit_code == 2 and "unknown verdict 'bogus'" in r.stderr
    (tmp_path / "notes.txt").write_text("no sources here\n")
    r = _runner().invoke(main, ["scan", str(tmp_path), "-t", "sm_120", "-q", "--no-cache"])
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr == f"archaudit: {tmp_path}: no Python or CUDA/C++ source files found; nothing to audit\n"


@pytest.mark.parametrize("text, closest", [
    ("sm_999", ["sm_121", "sm_120", "sm_110", "sm_107"]),
    ("sm_95", ["sm_100", "sm_90", "sm_89", "sm_88"]),
    ("12.5", ["sm_121", "sm_120", "sm_110", "sm_107"]),
    ("RTX 5900", ["RTX 5090", "RTX 5080", "RTX 5070", "RTX 4090"]),
])
def test_unknown_targets_suggest_the_nearest(reg, text, closest):
    from archaudit.targets import UnknownTarget

    with pytest.raises(UnknownTarget) as e:
        reg.parse(text)
    assert e.value.suggestions == closest


# --- the pinned pair ------------------------------------------------------------------------------
@pytest.mark.real
def test_first_screen_on_the_pinned_pair(sp072):
    """`archaudit scan SP --target sm_120`, piped, as scripts/demo.sh runs it (through the cache
    it fills): at most 60 lines; the first ones hold the counts, the patch command and the
    patchable gates, and they agree with the JSON."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "archaudit", "scan", str(sp072), "--target", "sm_120"]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1200)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) <= 60, p.stdout
    doc = json.loads(subprocess.run(cmd + ["--format", "json", "-q"], capture_output=True, text=True, env=env,
                                    timeout=1200).stdout)
    fs = doc["findings"]
    n = {v: sum(1 for f in fs if f["verdict"] == v) for v in
         ("software-only", "partial", "hardware-bound", "no-gpu-code", "unresolved")}
    assert lines[0] == f"archaudit: {sp072}"
    assert lines[1].startswith("flashinfer-python 0.7.2.post1, sglang 0.5.23: ")
    assert lines[3] == f"sm_120 (RTX PRO 6000, RTX 5090, RTX 5080): {len(fs)} gates stop it"
    patchable = n["software-only"] + n["partial"]
    assert lines[4].startswith(f"  {patchable} can be patched ({n['software-only']} software-only, {n['partial']} partial; ")
    assert lines[5] == f"    archaudit patch {sp072} -t sm_120 > enable-sm_120.patch"
    # the patchable features, each with a gate of it, then how many more: they add up
    rows = []
    for x in lines[6:]:
        m = re.match(r"^    (\S.*?)\s+(\d+) gates?(?:\s|$)", x)
        if not m:
            break
        rows.append((m.group(1), int(m.group(2))))
    assert rows and sum(c for _, c in rows) == patchable
    assert ("fp4_quantization_*", 12) in rows
    hw = next(i for i, x in enumerate(lines) if re.match(r"^  \d+ hardware-bound: sm_120 lacks what they need", x))
    assert lines[hw].startswith(f"  {n['hardware-bound']} hardware-bound")
    hw_rows = [int(m.group(1)) for x in lines[hw + 1:] if (m := re.match(r"^    \S.*?\s+(\d+) gates?(?:\s|$)", x))]
    assert sum(hw_rows) == n["hardware-bound"]
    assert any(re.match(r"^    cake_fmha_\*\s+\d+ gates\s+needs ptx\.tcgen05 ", x) for x in lines)
    assert f"  {n['no-gpu-code']} no-gpu-code: patching them changes only Python, no GPU code (list: --verdict no-gpu-code)" in lines
    ur = next(i for i, x in enumerate(lines) if x.startswith(f"  {n['unresolved']} unresolved: "))
    assert lines[ur].endswith(f"(list: archaudit scan {sp072} -t sm_120 --verdict unresolved)")
    counts = [int(x.split()[0]) for x in lines[ur + 1:] if re.match(r"^ +\d+  \S", x)]
    assert sum(counts) == n["unresolved"]
    left = doc["filters"]["left_out"]["findings_in_test_files"]
    assert left > 0 and f"  {left} findings in test files left out; --include-tests to show" in lines
