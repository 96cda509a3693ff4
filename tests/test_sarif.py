"""SARIF 2.1.0 output: schema, GitHub's rules, locations in the repository, determinism."""
import gzip
import json
import random
import shutil
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from archaudit.verdict.baseline import fingerprint, gate_keys, reportable
from archaudit.cli import main
from archaudit.model import (HARDWARE_BOUND, PARTIAL, SOFTWARE_ONLY, Evidence, Finding, Gate, Kernel, Link,
                             ModuleVerdict)
from archaudit.pipeline import ScanResult
from archaudit.repo import Pin, RepoContext
from archaudit.report.sarif import dumps, parse_unified_diff, to_sarif
from archaudit.sources import Distribution

from conftest import FIXTURES, REPO

# the CI has ../shared beside the clone
SCHEMA = REPO / "tests" / "data" / "sarif-schema-2.1.0.json"  # OASIS SARIF 2.1.0 errata01, kept in the repo

PATCH = """--- a/flashinfer/jit/comm.py
+++ b/flashinfer/jit/comm.py
@@ -189,5 +189,5 @@
 def gen_trtllm_comm_module() -> JitSpec:
     nvcc_flags = current_compilation_context.get_nvcc_flags_list(
-        supported_major_versions=[9, 10]
+        supported_major_versions=[9, 10, 12]
     )
     return gen_jit_spec(
"""


@pytest.fixture(scope="module")
def schema():
    return json.loads(SCHEMA.read_text())


def _gate(path="flashinfer/jit/comm.py", line=191, function="flashinfer.jit.comm.gen_trtllm_comm_module",
          kind="arch-list", expr="current_compilation_context.get_nvcc_flags_list( supported_major_versions=[9, 10] )",
          admits=("sm_90", "sm_100", "sm_103", "sm_107"), package="flashinfer-python"):
    return Gate(path, line, 18, function, kind, expr, frozenset(admits), "evaluated: supported_major_versions=[9, 10]",
                True, package, "argument", [])


def _synthetic(reg, line=191, version="0.7.2.post1"):
    """Three gates: software-only (with patch and chain), hardware-bound (with evidence), partial."""
    comm = _gate(line=line)
    mla = _gate(path="flashinfer/mla.py", line=40, function="flashinfer.mla.run", kind="predicate-call",
                expr="is_sm90a_supported(device)", admits=("sm_90",))
    moe = _gate(path="flashinfer/fused_moe/core.py", line=77, function="flashinfer.fused_moe.core.select",
                kind="capability-compare", expr="major == 10", admits=("sm_100", "sm_103", "sm_107"))
    ok = _gate(path="flashinfer/utils.py", line=5, function="flashinfer.utils.f", kind="capability-compare",
               expr="major >= 9", admits=("sm_90", "sm_100", "sm_120", "sm_121"))
    findings = [
        Finding(comm, "sm_120", SOFTWARE_ONLY,
                modules=[ModuleVerdict("trtllm_comm", ["flashinfer/data/csrc/trtllm_allreduce.cu"], "sm_120f", "builds")],
                chain=[Link("jit-module", "flashinfer/jit/comm.py", 197, "trtllm_comm", "gen_jit_spec"),
                       Link("source", "flashinfer/data/csrc/trtllm_allreduce.cu", 1, "trtllm_allreduce.cu", "FLASHINFER_CSRC_DIR")],
                reason="trtllm_comm builds for sm_120f and needs nothing sm_120 lacks", patch=PATCH, feature="allreduce-fusion"),
        Finding(mla, "sm_120", HARDWARE_BOUND,
                chain=[Link("jit-module", "flashinfer/jit/mla.py", 12, "mla_sm90", "gen_jit_spec")],
                evidence=[Evidence("flashinfer/data/include/flashinfer/mla_hopper.cuh", 210, "wgmma",
                                   ("sm_90a",), "wgmma.mma_async needs sm_90a")],
                reason="wgmma.mma_async is sm_90a only"),
        Finding(moe, "sm_120", PARTIAL,
                modules=[ModuleVerdict("fused_moe_100", ["flashinfer/data/csrc/moe.cu"], "sm_120f", "stub",
                                       kernels=[Kernel("moe_fp4", "flashinfer/data/csrc/moe.cu", 30, "trap-stub"),
                                                Kernel("moe_bf16", "flashinfer/data/csrc/moe.cu", 90, "real")])],
                reason="moe_fp4 traps on sm_120; moe_bf16 is real"),
    ]
    return ScanResult(root="/tmp/site-packages", packages=[Distribution("flashinfer-python", version, ["flashinfer"])],
                      gates=[comm, mla, moe, ok], diagnostics=[], targets=[reg.parse("sm_120")], findings=findings)


def _repo(tmp_path, pins=None):
    return RepoContext(root=tmp_path, scan_root=tmp_path / "site-packages", scan_is_dir=True,
                       installed_tops=frozenset({"flashinfer"}), pins=pins or {})


def test_synthetic_sarif_validates_and_carries_everything(reg, schema, tmp_path):
    res = _synthetic(reg)
    items = reportable(res)
    log = to_sarif(res, reg, items, _repo(tmp_path, {"flashinfer-python": Pin("requirements.txt", 3, "flashinfer-python==0.7.2.post1")}))
    jsonschema.validate(log, schema)
    run = log["runs"][0]
    drv = run["tool"]["driver"]
    assert (drv["name"], drv["semanticVersion"], drv["informationUri"]) == ("archaudit", "0.1.0", "https://github.com/archaudit/archaudit")
    assert [r["id"] for r in drv["rules"]] == ["software-only", "partial", "hardware-bound", "binary-only", "unresolved", "no-gpu-code",
                                                 "gate-inventory"]
    for r in drv["rules"]:
        assert r["shortDescription"]["text"] and r["fullDescription"]["text"]
        assert r["help"]["text"] and r["help"]["markdown"]
        assert r["properties"]["tags"] and len(r["properties"]["tags"]) <= 20
        assert r["properties"]["precision"] in ("very-high", "high", "medium", "low")
    assert run["automationDetails"]["id"] == "archaudit/sm_120/"
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == tmp_path.as_uri() + "/"
    assert run["invocations"][0]["executionSuccessful"] is True
    by_rule = {r["ruleId"]: r for r in run["results"]}
    assert sorted(by_rule) == ["hardware-bound", "partial", "software-only"]  # the gate that admits sm_120 is not a result

    sw = by_rule["software-only"]
    assert sw["level"] == "warning"
    # out-of-repo gate: primary location is the pinning line, the gate is a related location
    assert sw["locations"][0]["physicalLocation"] == {"artifactLocation": {"uri": "requirements.txt", "uriBaseId": "%SRCROOT%"},
                                                      "region": {"startLine": 3}}
    rel = sw["relatedLocations"]
    assert rel[0]["physicalLocation"]["artifactLocation"] == {"uri": "flashinfer/jit/comm.py", "uriBaseId": "SCANROOT"}
    assert rel[0]["physicalLocation"]["region"] == {"startLine": 191, "startColumn": 18}
    assert [r["id"] for r in rel] == list(range(len(rel)))
    msg = sw["message"]["text"]
    assert "excludes sm_120 (RTX PRO 6000) from the JIT module trtllm_comm" in msg
    assert "flashinfer-python 0.7.2.post1" in msg and "widen the gate" in msg
    assert "+        supported_major_versions=[9, 10, 12]" in msg  # GitHub ignores fixes: the patch is in the message
    assert "```diff" in sw["message"]["markdown"]
    flow = sw["codeFlows"][0]["threadFlows"][0]["locations"]
    assert [(x["location"]["physicalLocation"]["artifactLocation"]["uri"], x["location"]["physicalLocation"]["region"]["startLine"])
            for x in flow] == [("flashinfer/jit/comm.py", 191), ("flashinfer/jit/comm.py", 197),
                               ("flashinfer/data/csrc/trtllm_allreduce.cu", 1)]
    fix = sw["fixes"][0]["artifactChanges"][0]
    assert fix["artifactLocation"] == {"uri": "flashinfer/jit/comm.py", "uriBaseId": "SCANROOT"}
    assert fix["replacements"] == [{"deletedRegion": {"startLine": 191, "startColumn": 1, "endLine": 192, "endColumn": 1},
                                    "insertedContent": {"text": "        supported_major_versions=[9, 10, 12]\n"}}]
    assert sw["properties"]["target"] == "sm_120" and sw["properties"]["verdict"] == SOFTWARE_ONLY
    assert sw["properties"]["admits"] == ["sm_90", "sm_100", "sm_103", "sm_107"]
    key = gate_keys(res.gates)[0]
    assert sw["partialFingerprints"]["primaryLocationLineHash"] == fingerprint(SOFTWARE_ONLY, key, "sm_120")

    hw = by_rule["hardware-bound"]
    assert hw["level"] == "note"
    ev = [r for r in hw["relatedLocations"] if r["message"]["text"].startswith("evidence")]
    assert ev[0]["physicalLocation"]["artifactLocation"]["uri"] == "flashinfer/data/include/flashinfer/mla_hopper.cuh"
    assert ev[0]["physicalLocation"]["region"]["startLine"] == 210
    assert "wgmma (supported on sm_90a)" in ev[0]["message"]["text"]
    assert "Evidence: wgmma at flashinfer/data/include/flashinfer/mla_hopper.cuh:210" in hw["message"]["text"]
    assert "fixes" not in hw
    pa = by_rule["partial"]
    assert any("kernel moe_fp4 of fused_moe_100 is trap-stub" in r["message"]["text"] for r in pa["relatedLocations"])


def test_fingerprints_survive_line_moves_and_version_bumps(reg, tmp_path):
    a = to_sarif(_synthetic(reg), reg, reportable(_synthetic(reg)), _repo(tmp_path))
    moved = _synthetic(reg, line=250, version="0.8.0")
    b = to_sarif(moved, reg, reportable(moved), _repo(tmp_path))
    fa = [r["partialFingerprints"] for r in a["runs"][0]["results"]]
    fb = [r["partialFingerprints"] for r in b["runs"][0]["results"]]
    assert fa == fb and len(set(x["primaryLocationLineHash"] for x in fa)) == 3


def test_output_is_byte_identical_and_order_independent(reg, tmp_path):
    res = _synthetic(reg)
    one = dumps(to_sarif(res, reg, reportable(res), _repo(tmp_path)))
    res2 = _synthetic(reg)
    random.Random(7).shuffle(res2.gates)
    random.Random(8).shuffle(res2.findings)
    two = dumps(to_sarif(res2, reg, reportable(res2), _repo(tmp_path)))
    assert one == two


def test_inventory_lists_the_admitting_gate_as_a_note(reg, schema, tmp_path):
    res = _synthetic(reg)
    log = to_sarif(res, reg, reportable(res), _repo(tmp_path), inventory=True)
    jsonschema.validate(log, schema)
    inv = [r for r in log["runs"][0]["results"] if r["ruleId"] == "gate-inventory"]
    assert [(r["level"], r["properties"]["function"], r["properties"]["verdict"]) for r in inv] == [
        ("note", "flashinfer.utils.f", "admitted")]


def test_unified_diff_to_replacements():
    diff = "--- a/x.py\n+++ b/x.py\n@@ -3,4 +3,5 @@\n a\n-b\n+B\n c\n+d\n e\n"
    assert parse_unified_diff(diff) == [("x.py", [
        {"deletedRegion": {"startLine": 4, "startColumn": 1, "endLine": 5, "endColumn": 1}, "insertedContent": {"text": "B\n"}},
        {"deletedRegion": {"startLine": 6, "startColumn": 1, "endLine": 6, "endColumn": 1}, "insertedContent": {"text": "d\n"}},
    ])]


# --- the CLI on the fixture repository ------------------------------------------------------
@pytest.fixture()
def repo(tmp_path):
    dst = tmp_path / "repo"
    shutil.copytree(FIXTURES / "ci" / "repo", dst)
    (dst / ".git").mkdir()  # a work tree as far as archaudit is concerned
    return dst


def _run(args, cwd):
    import os

    old = os.getcwd()
    os.chdir(cwd)
    try:
        return CliRunner(mix_stderr=False).invoke(main, args)
    except TypeError:  # click >= 8.2 always separates stderr
        return CliRunner().invoke(main, args)
    finally:
        os.chdir(old)


def test_cli_sarif_in_repo_with_suppression(repo, schema):
    r = _run(["scan", ".", "-t", "sm_120", "--format", "sarif", "-q"], repo)
    assert r.exit_code == 0, r.output
    log = json.loads(r.stdout)
    jsonschema.validate(log, schema)
    res = log["runs"][0]["results"]
    got = [(x["ruleId"], x["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
            x["locations"][0]["physicalLocation"]["region"]["startLine"], "suppressions" in x) for x in res]
    assert got == [("unresolved", "ciapp/layers.py", 7, False), ("unresolved", "ciapp/layers.py", 20, True),
                   ("unresolved", "venv-sp/site-packages/fakefi/jit/comm.py", 5, False)]
    # the judge's reason is in the message
    assert "Verdict for sm_120: unresolved: no JIT module is reached from the region this gate guards; not shown " \
           "free of GPU code: ciapp.layers.fused_allreduce_backend returns what the gate decides" in res[0]["message"]["text"]
    assert res[1]["suppressions"] == [{"kind": "inSource", "justification": "if is_sm90_supported():  # archaudit: ignore[unresolved]"}]


def test_cli_site_packages_gate_points_at_the_pin(repo, schema):
    r = _run(["scan", "venv-sp/site-packages", "-t", "sm_120", "--format", "sarif", "-q"], repo)
    assert r.exit_code == 0, r.output
    log = json.loads(r.stdout)
    jsonschema.validate(log, schema)
    (res,) = log["runs"][0]["results"]
    assert res["locations"][0]["physicalLocation"] == {"artifactLocation": {"uri": "requirements.txt", "uriBaseId": "%SRCROOT%"},
                                                       "region": {"startLine": 3}}
    assert res["relatedLocations"][0]["physicalLocation"]["artifactLocation"] == {"uri": "fakefi/jit/comm.py", "uriBaseId": "SCANROOT"}
    assert res["properties"]["package"] == "fakefi-python" and res["properties"]["packageVersion"] == "1.2"
    bases = log["runs"][0]["originalUriBaseIds"]
    assert bases["%SRCROOT%"]["uri"] == repo.resolve().as_uri() + "/"
    assert bases["SCANROOT"]["uri"] == (repo / "venv-sp" / "site-packages").resolve().as_uri() + "/"
    # --repo-root elsewhere: no pin there, the result points into the scanned files and a notification says so
    other = repo.parent / "other"
    other.mkdir()
    r = _run(["scan", "venv-sp/site-packages", "-t", "sm_120", "--format", "sarif", "-q", "--repo-root", str(other)], repo)
    log = json.loads(r.stdout)
    (res,) = log["runs"][0]["results"]
    assert res["locations"][0]["physicalLocation"]["artifactLocation"] == {"uri": "fakefi/jit/comm.py", "uriBaseId": "SCANROOT"}
    notes = log["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    assert [n["descriptor"]["id"] for n in notes] == ["no-pin"]


def test_cli_sarif_directory_output_splits_by_target(repo, schema):
    out = repo / "sarif-out"
    r = _run(["scan", ".", "-t", "sm_120", "-t", "H100", "--format", "sarif", "-q", "-o", str(out) + "/"], repo)
    assert r.exit_code == 0, r.output
    files = sorted(p.name for p in out.iterdir())
    assert files == ["archaudit-sm_120.sarif", "archaudit-sm_90.sarif"]
    one = json.loads((out / "archaudit-sm_90.sarif").read_text())
    jsonschema.validate(one, schema)
    assert [x["automationDetails"]["id"] for x in one["runs"]] == ["archaudit/sm_90/"]
    # sm_90 is admitted by every gate but `major < 10` (early exit before the fp4 path)
    assert [(x["locations"][0]["physicalLocation"]["region"]["startLine"]) for x in one["runs"][0]["results"]] == [14]


def test_cli_sarif_needs_a_target(repo):
    r = _run(["scan", ".", "--format", "sarif"], repo)
    assert r.exit_code == 2 and "--format sarif needs at least one --target" in r.stderr


@pytest.mark.real
def test_real_sarif_validates_and_fits_github_limits(scan072, reg, schema, tmp_path):
    from dataclasses import replace

    from archaudit.verdict.baseline import line_reader
    from archaudit.repo import repo_context
    from archaudit.sources import open_source

    res = replace(scan072, targets=[reg.parse("sm_120"), reg.parse("sm_90")])
    items = reportable(res, line_reader(open_source(res.root)))
    log = to_sarif(res, reg, items, repo_context(tmp_path, res.root, [t for d in res.packages for t in d.top_level]))
    jsonschema.validate(log, schema)
    text = dumps(log)
    assert len(gzip.compress(text.encode())) < 10 * 1024 * 1024
    assert len(log["runs"]) <= 20
    for run in log["runs"]:
        assert 0 < len(run["results"]) <= 25_000
        for r in run["results"]:
            for loc in r["locations"] + r.get("relatedLocations", []):
                uri = loc["physicalLocation"]["artifactLocation"]["uri"]
                assert not uri.startswith("/") and "://" not in uri
            assert r["partialFingerprints"]["primaryLocationLineHash"]
            assert len(r.get("relatedLocations", [])) <= 1000
    fps = [r["partialFingerprints"]["primaryLocationLineHash"] for run in log["runs"] for r in run["results"]]
    assert len(fps) == len(set(fps))  # one alert per gate x target
    # flashinfer 0.7.2.post1: trtllm_comm admits sm_120 ([9, 10, 12]); trtllm_mnnvl_comm does not ([9, 10])
    sm120 = {r["properties"]["function"]: r for r in log["runs"][0]["results"]}
    assert "flashinfer.jit.comm.gen_trtllm_comm_module" not in sm120
    mnnvl = sm120["flashinfer.jit.comm.gen_trtllm_mnnvl_comm_module"]
    assert (mnnvl["properties"]["gatePath"], mnnvl["properties"]["admits"]) == ("flashinfer/jit/comm.py", ["sm_90", "sm_100", "sm_103", "sm_107"])
    assert mnnvl["properties"]["packageVersion"] == "0.7.2.post1"
    assert dumps(to_sarif(res, reg, items, repo_context(tmp_path, res.root, [t for d in res.packages for t in d.top_level]))) == text


def test_action_and_hook_use_existing_options():
    action = (REPO / "action.yml").read_text()
    assert "using: composite" in action and "github/codeql-action/upload-sarif@v3" in action
    assert '--format sarif -o "$SARIF_DIR/" --repo-root "$GITHUB_WORKSPACE"' in action
    hook = (REPO / ".pre-commit-hooks.yaml").read_text()
    assert "entry: archaudit scan --quiet --format text" in hook
    r = CliRunner().invoke(main, ["scan", "--help"])
    for opt in ("--baseline", "--fail-on", "--repo-root", "--format", "sarif", "--quiet"):
        assert opt in r.output


def test_sarif_of_judged_fixture_findings(tmp_path, schema):
    """The verdict fixture (kernlib/servelib): real findings of the judge, as SARIF."""
    repo = tmp_path / "v"
    shutil.copytree(FIXTURES / "verdicts", repo)
    (repo / ".git").mkdir()
    r = _run(["scan", ".", "-t", "sm_120", "--format", "sarif", "-q"], repo)
    assert r.exit_code == 0, r.output
    log = json.loads(r.stdout)
    jsonschema.validate(log, schema)
    res = log["runs"][0]["results"]
    loc = lambda x: (x["physicalLocation"]["artifactLocation"]["uri"], x["physicalLocation"]["region"]["startLine"])  # noqa: E731
    # the lead's fixture grows: pin the results this test is about, by location
    by_loc = {loc(x["locations"][0]): x for x in res}
    assert len(by_loc) == len(res)
    levels = {"software-only": "warning", "partial": "warning", "binary-only": "warning",
              "hardware-bound": "note", "unresolved": "note"}
    assert all(x["level"] == levels[x["ruleId"]] for x in res)
    assert all(("fixes" in x) == (x["ruleId"] in ("software-only", "partial") and bool(x.get("fixes"))) for x in res)
    assert [(by_loc[k]["ruleId"], "fixes" in by_loc[k]) for k in
            [("kernlib/gemm.py", 6), ("kernlib/jit/modules.py", 6), ("kernlib/jit/modules.py", 18),
             ("kernlib/jit/modules.py", 23), ("kernlib/jit/modules.py", 28), ("servelib/fusion.py", 9)]] == [
        ("hardware-bound", False), ("partial", True), ("hardware-bound", False), ("software-only", True),
        ("hardware-bound", False), ("software-only", True)]
    hw = by_loc[("kernlib/jit/modules.py", 18)]
    assert loc(hw["relatedLocations"][0]) == ("kernlib/data/csrc/hopper_gemm.cu", 4)
    assert hw["relatedLocations"][0]["message"]["text"] == "evidence: ptx.wgmma (supported on sm_90a): wgmma."
    assert loc(hw["codeFlows"][0]["threadFlows"][0]["locations"][-1]["location"]) == ("kernlib/data/csrc/hopper_gemm.cu", 4)
    sw = by_loc[("kernlib/jit/modules.py", 23)]
    assert sw["fixes"][0]["artifactChanges"] == [{
        "artifactLocation": {"uri": "kernlib/jit/modules.py", "uriBaseId": "%SRCROOT%"},
        "replacements": [{"deletedRegion": {"startLine": 23, "startColumn": 1, "endLine": 24, "endColumn": 1},
                          "insertedContent": {"text": "    nvcc_flags = current_compilation_context.get_nvcc_flags_list("
                                                      "supported_major_versions=[9, 10, 12])\n"}}]}]
    assert "+    nvcc_flags = current_compilation_context.get_nvcc_flags_list(supported_major_versions=[9, 10, 12])" \
        in sw["message"]["text"]
    # the chained plan edits two files: both appear in the fix
    assert [c["artifactLocation"]["uri"] for c in by_loc[("servelib/fusion.py", 9)]["fixes"][0]["artifactChanges"]] == \
        ["servelib/fusion.py", "kernlib/jit/modules.py"]


def test_sarif_and_json_report_the_same_findings(tmp_path):
    """A gate that an earlier if/elif arm serves for the target has no finding in the JSON, and
    none in the SARIF or the baseline either (they used to add it as 'no verdict was computed')."""
    pkg = tmp_path / "chainpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "tiles.py").write_text(
        "import torch\n\n\ndef tile():\n    cap = torch.cuda.get_device_capability()\n"
        "    if cap >= (10, 0):\n        return 128\n    elif cap == (9, 0):\n        return 64\n    return 32\n")
    runner = CliRunner()
    out = runner.invoke(main, ["scan", str(tmp_path), "-t", "sm_120", "--format", "json", "--no-cache", "-q"])
    doc = json.loads(out.output)
    assert [(f["gate"]["path"], f["gate"]["line"]) for f in doc["findings"]] == []
    assert doc["stats"]["not_evaluated_pairs"] == [["sm_120", "chainpkg/tiles.py", 8, 10, "capability-compare"]]
    out = runner.invoke(main, ["scan", str(tmp_path), "-t", "sm_120", "--format", "sarif", "--no-cache", "-q"])
    sarif = json.loads(out.output)
    assert [r for run in sarif["runs"] for r in run["results"]] == []
