"""archaudit diff: gates added, removed and changed between two environments."""
import json
import shutil
import sys

import jsonschema
import pytest
from click.testing import CliRunner

from archaudit.cli import main
from archaudit.report.diff import render_json, render_text, summary_lines, to_sarif
from archaudit.verdict.diff import ADMITTED, diff_scans, match_gates, norm_expr
from archaudit.model import HARDWARE_BOUND, SOFTWARE_ONLY, UNRESOLVED, Finding, Gate
from archaudit.pipeline import ScanResult
from archaudit.sources import Distribution

from conftest import FIXTURES, REPO

SCHEMA = REPO / "tests" / "data" / "sarif-schema-2.1.0.json"  # OASIS SARIF 2.1.0 errata01, kept in the repo
M9_10 = ("sm_90", "sm_100", "sm_103", "sm_107")


def _g(line, function, expr, admits, kind="arch-list", path="fi/jit/comm.py"):
    return Gate(path, line, 18, function, kind, expr, frozenset(admits), "evaluated", True, "fi", "argument", [])


def _pair(reg):
    old = ScanResult("old", [Distribution("fi", "1.0")], [
        _g(40, "fi.jit.comm.gen_mnnvl", "get_nvcc_flags_list(supported_major_versions=[9, 10])", M9_10),
        _g(191, "fi.jit.comm.gen_trtllm", "get_nvcc_flags_list(supported_major_versions=[9, 10])", M9_10),
        _g(12, "fi.mla.run", "is_sm90a_supported(device)", ("sm_90",), kind="predicate-call", path="fi/mla.py"),
    ], [], [reg.parse("sm_120")])
    new = ScanResult("new", [Distribution("fi", "1.1")], [
        _g(46, "fi.jit.comm.gen_mnnvl", "get_nvcc_flags_list(supported_major_versions=[9, 10])", M9_10),  # moved only
        _g(197, "fi.jit.comm.gen_trtllm", "get_nvcc_flags_list(\n supported_major_versions=[9, 10, 12]\n)",
           M9_10 + ("sm_120", "sm_121")),
        _g(300, "fi.jit.comm.gen_ulysses", "get_nvcc_flags_list(supported_major_versions=[10])", ("sm_100", "sm_103", "sm_107")),
    ], [], [reg.parse("sm_120")])
    return old, new


def test_synthetic_diff(reg):
    old, new = _pair(reg)
    d = diff_scans(old, new, ["sm_120"])
    got = [(c.change, c.gate.function, sorted(c.admits_gained), sorted(c.admits_lost), c.expr_changed, c.verdicts, c.regressions())
           for c in d.changes]
    assert got == [
        ("changed", "fi.jit.comm.gen_trtllm", ["sm_120", "sm_121"], [], True, {"sm_120": (UNRESOLVED, ADMITTED)}, []),
        ("added", "fi.jit.comm.gen_ulysses", ["sm_100", "sm_103", "sm_107"], [], False, {"sm_120": (None, UNRESOLVED)}, ["sm_120"]),
        ("removed", "fi.mla.run", [], ["sm_90"], False, {"sm_120": (UNRESOLVED, None)}, []),
    ]
    assert d.moved == 1
    text = render_text(d, reg)
    assert "changed  fi/jit/comm.py:191 -> fi/jit/comm.py:197: arch-list in fi.jit.comm.gen_trtllm" in text
    assert "         admits: +sm_120 +sm_121  (now: sm_90 sm_100 sm_103 sm_107 sm_120 sm_121)" in text
    assert "         sm_120: unresolved -> admitted" in text
    # the summary comes first: gates, then per target what happened to its findings
    assert text.splitlines()[2:4] == [
        "gates: 1 added, 1 removed, 1 changed; 1 moved only (not changes)",
        "sm_120: 1 new finding (1 unresolved); 2 findings gone (were 2 unresolved)",
    ]
    obj = json.loads(render_json(d, reg))
    assert obj["summary"] == {"added": 1, "removed": 1, "changed": 1, "moved": 1, "targets": {
        "sm_120": {"new": {"unresolved": 1}, "gone": {"unresolved": 2}, "changed": []}}}
    assert obj["changes"][0]["verdicts"] == {"sm_120": {"old": "unresolved", "new": "admitted"}}
    assert obj["changes"][0]["old"]["line"] == 191 and obj["changes"][0]["new"]["line"] == 197


def test_verdict_change_uses_the_judges_findings(reg):
    old, new = _pair(reg)
    old.findings = [Finding(old.gates[1], "sm_120", SOFTWARE_ONLY)]
    new.findings = [Finding(new.gates[2], "sm_120", HARDWARE_BOUND)]
    d = diff_scans(old, new, ["sm_120"])
    assert [(c.change, c.verdicts) for c in d.changes][:2] == [
        ("changed", {"sm_120": (SOFTWARE_ONLY, ADMITTED)}), ("added", {"sm_120": (None, HARDWARE_BOUND)})]
    # a gate that stays, with another verdict: counted as a verdict change, not a new finding
    old.findings.append(Finding(old.gates[0], "sm_120", HARDWARE_BOUND))
    new.findings.append(Finding(new.gates[0], "sm_120", SOFTWARE_ONLY))
    d = diff_scans(old, new, ["sm_120"])
    assert summary_lines(d) == [
        "gates: 1 added, 1 removed, 2 changed",
        "sm_120: 1 new finding (1 hardware-bound); 2 findings gone (were 1 software-only, 1 unresolved); "
        "1 verdict changed (1 hardware-bound -> software-only)",
    ]
    assert summary_lines(diff_scans(old, old, ["sm_120"])) == [
        "gates: 0 added, 0 removed, 0 changed", "sm_120: no finding appeared, disappeared or changed verdict"]


def test_diff_sarif_validates(reg):
    old, new = _pair(reg)
    log = to_sarif(diff_scans(old, new, ["sm_120"]), reg)
    jsonschema.validate(log, json.loads(SCHEMA.read_text()))
    res = log["runs"][0]["results"]
    assert [(r["ruleId"], r["level"]) for r in res] == [("gate-changed", "note"), ("gate-added", "warning"), ("gate-removed", "note")]
    assert "now admits sm_120, sm_121; sm_120: unresolved -> admitted" in res[0]["message"]["text"]
    assert log["runs"][0]["automationDetails"]["id"] == "archaudit-diff/sm_120/"


def _run(args):
    try:
        runner = CliRunner(mix_stderr=False)
    except TypeError:  # click >= 8.2 always separates stderr
        runner = CliRunner()
    return runner.invoke(main, args)


def test_cli_diff_on_fixture_trees(tmp_path):
    src = FIXTURES / "ci" / "repo" / "venv-sp" / "site-packages"
    old, new = tmp_path / "old", tmp_path / "new"
    shutil.copytree(src, old)
    shutil.copytree(src, new)
    comm = new / "fakefi" / "jit" / "comm.py"
    comm.write_text("# bumped\n" + comm.read_text().replace("[9, 10]", "[9, 10, 12]"))
    r = _run(["diff", str(old), str(new), "-t", "sm_120", "-q"])
    assert r.exit_code == 1
    assert r.stdout.splitlines()[2:] == [
        "gates: 0 added, 0 removed, 1 changed",
        "sm_120: 1 finding gone (were 1 unresolved)",
        "",
        "changed  fakefi/jit/comm.py:5 -> fakefi/jit/comm.py:6: arch-list in fakefi.jit.comm.gen_trtllm_comm_module",
        "         expr: current_compilation_context.get_nvcc_flags_list( supported_major_versions=[9, 10] )  ->  "
        "current_compilation_context.get_nvcc_flags_list( supported_major_versions=[9, 10, 12] )",
        "         admits: +sm_120 +sm_121  (now: sm_90 sm_100 sm_103 sm_107 sm_120 sm_121)",
        "         sm_120: unresolved -> admitted",
    ]
    assert _run(["diff", str(old), str(new), "-t", "sm_120", "-q", "--fail-on", "regression"]).exit_code == 0
    assert _run(["diff", str(old), str(old), "-t", "sm_120", "-q"]).exit_code == 0
    r = _run(["diff", str(old), str(tmp_path / "nope"), "-q"])
    assert r.exit_code == 2 and "no such file or directory" in r.stderr


PAIR = FIXTURES / "diffpair"


def test_fixture_pair_exact_output():
    """fixtures/diffpair: diffpkg 1.0 -> 1.1. Every gate moves down (a docstring and a new function
    above them); pick_backend's three tests trade places (== 9, == 10, == 12: the same three gates,
    but in 1.1 sm_120 returns at `== 12` before the other two, which no longer stop it: their
    sm_120 findings go, a change for that target); gen_attention_module's list gains 12 (changed);
    use_nvfp4 is new; legacy_path is gone."""
    r = _run(["diff", str(PAIR / "old"), str(PAIR / "new"), "-t", "sm_120", "-q", "--no-cache"])
    assert r.exit_code == 1, r.stderr
    assert r.stdout.splitlines() == [
        f"old: {PAIR / 'old'} (diffpkg 1.0)",
        f"new: {PAIR / 'new'} (diffpkg 1.1)",
        "gates: 1 added, 1 removed, 3 changed; 2 moved only (not changes)",
        "sm_120: 1 new finding (1 unresolved); 4 findings gone (were 4 unresolved)",
        "",
        "changed  diffpkg/ops.py:14 -> diffpkg/ops.py:22: capability-compare in diffpkg.ops.pick_backend",
        "         sm_120: unresolved -> admitted",
        "changed  diffpkg/ops.py:12 -> diffpkg/ops.py:24: capability-compare in diffpkg.ops.pick_backend",
        "         sm_120: unresolved -> admitted",
        "changed  diffpkg/ops.py:22 -> diffpkg/ops.py:30: arch-list in diffpkg.ops.gen_attention_module",
        "         expr: current_compilation_context.get_nvcc_flags_list(supported_major_versions=[9, 10])  ->  "
        "current_compilation_context.get_nvcc_flags_list( supported_major_versions=[9, 10, 12], )",
        "         admits: +sm_120 +sm_121  (now: sm_90 sm_100 sm_103 sm_107 sm_120 sm_121)",
        "         sm_120: unresolved -> admitted",
        "added    diffpkg/ops.py:13: capability-compare in diffpkg.ops.use_nvfp4",
        "         _major() == 10  admits: sm_100 sm_103 sm_107",
        "         sm_120: (no gate) -> unresolved",
        "removed  diffpkg/ops.py:33: capability-compare in diffpkg.ops.legacy_path",
        "         _major() == 8  admits: sm_80 sm_86 sm_87 sm_88 sm_89",
        "         sm_120: unresolved -> (no gate)",
    ]
    # the reversed bump: the same gates, the other way round
    r = _run(["diff", str(PAIR / "new"), str(PAIR / "old"), "-t", "sm_120", "-q", "--no-cache"])
    assert r.stdout.splitlines()[2:4] == [
        "gates: 1 added, 1 removed, 3 changed; 2 moved only (not changes)",
        "sm_120: 4 new findings (4 unresolved); 1 finding gone (were 1 unresolved)",
    ]
    # a tree against itself: nothing, exit 0
    r = _run(["diff", str(PAIR / "old"), str(PAIR / "old"), "-t", "sm_120", "-q", "--no-cache"])
    assert r.exit_code == 0 and r.stdout.splitlines()[2:] == [
        "gates: 0 added, 0 removed, 0 changed", "sm_120: no finding appeared, disappeared or changed verdict"]


def test_gates_are_matched_by_identity_not_position():
    def g(line, expr, function="p.m.f", kind="capability-compare"):
        return Gate("p/m.py", line, 8, function, kind, expr, frozenset(), "evaluated", True, "p", "branch", [])

    old = [g(10, "major == 9"), g(12, "major == 10"), g(14, "major == 12"), g(20, "x >= (9, 0)", "p.m.h"),
           g(30, "is_sm90()", "p.m.k", "predicate-call"), g(31, "is_sm90()", "p.m.k", "predicate-call")]
    new = [g(40, "major == 12"), g(42, "major == 9"), g(44, "major   ==   10"), g(50, "x >= (10, 0)", "p.m.h"),
           g(60, "is_sm90()", "p.m.k", "predicate-call")]
    got = sorted(((o.line if o else None), (n.line if n else None)) for _k, o, n in match_gates(old, new))
    # reordered tests keep their identity; a rewritten expression, alone in its function, is the same
    # gate; of two equal calls, the first (in file order) is kept and the second is gone
    assert got == [(10, 42), (12, 44), (14, 40), (20, 50), (30, 60), (31, None)]
    assert norm_expr("f(\n  x=[9, 10],\n)") == norm_expr("f(x=[9,10])") == "f(x=[9,10])"
    assert norm_expr("a  is not\tb") == "a is not b"


@pytest.fixture(scope="module")
def comm_pair():
    sys.path.insert(0, str(REPO / "bench"))
    import corpus

    try:
        return corpus.wheel_pair("comm-sm120")
    except Exception as e:  # network or pip failure
        pytest.fail(f"could not fetch the wheel pair comm-sm120: {e}")


@pytest.mark.real
def test_real_flashinfer_release_pair(comm_pair, reg):
    """flashinfer-python 0.6.16.post4 -> 0.6.17: gen_trtllm_comm_module gains 12 in supported_major_versions."""
    old, new = comm_pair
    r = _run(["diff", str(old), str(new), "-t", "sm_120", "--format", "json", "-q"])
    assert r.exit_code == 1, r.stderr
    obj = json.loads(r.stdout)
    assert [(p["name"], p["version"]) for p in obj["old"]["packages"]] == [("flashinfer-python", "0.6.16.post4")]
    assert [(p["name"], p["version"]) for p in obj["new"]["packages"]] == [("flashinfer-python", "0.6.17")]
    got = [(c["change"], (c["new"] or c["old"])["path"], (c["new"] or c["old"])["line"], c["function"],
            c["admits_gained"], c["admits_lost"]) for c in obj["changes"]]
    assert got == [
        ("changed", "flashinfer/jit/comm.py", 191, "flashinfer.jit.comm.gen_trtllm_comm_module", ["sm_120", "sm_121"], []),
        # `can_use_clusters_topk(...) and row_to_batch is None and row_starts is None` (major 10: the
        # predicate ands `not deterministic` with `cap[0] == 10`) gains `and page_table_row_starts is None`
        ("changed", "flashinfer/topk.py", 768, "flashinfer.topk.top_k_page_table_transform", [], []),
        ("added", "flashinfer/fused_moe/runners.py", 363, "flashinfer.fused_moe.runners.TrtllmFp4RoutedRunner.check_support",
         ["sm_100", "sm_103"], []),
        ("added", "flashinfer/gdn_kernels/gdn_decode_bf16_wy_output_only.py", 1949,
         "flashinfer.gdn_kernels.gdn_decode_bf16_wy_output_only._compile_options", ["sm_120", "sm_121"], []),
        ("added", "flashinfer/gdn_kernels/gdn_decode_bf16_wy_output_only.py", 2319,
         "flashinfer.gdn_kernels.gdn_decode_bf16_wy_output_only.gated_delta_rule_mtp", ["sm_120", "sm_121"], []),
    ]
    comm = obj["changes"][0]
    assert comm["old"]["expr"].endswith("supported_major_versions=[9, 10] )")
    assert comm["new"]["expr"].endswith("supported_major_versions=[9, 10, 12] )")
    # the verdict change on sm_120: excluded before (whatever the judge says), admitted now
    assert comm["verdicts"]["sm_120"]["old"] not in (None, "admitted")
    assert comm["verdicts"]["sm_120"]["new"] == "admitted"
    assert obj["summary"]["removed"] == 0 and obj["summary"]["moved"] > 0
