"""`archaudit explain PATH FILE:LINE --target T`: per-target verdicts from the CLI (fixtures/verdicts)."""
import json

from click.testing import CliRunner

from archaudit.cli import main
from conftest import FIXTURES

ROOT = str(FIXTURES / "verdicts")


def run(*args):
    r = CliRunner().invoke(main, ["explain", ROOT, *args])
    return r.exit_code, r.output


def test_software_only_with_patch_text():
    code, out = run("servelib/fusion.py:9", "--target", "sm_120", "--target", "sm_90")
    assert code == 0, out
    assert "gate servelib/fusion.py:9:8 in servelib.fusion.fused_allreduce" in out
    assert "  sm_90: admitted, nothing to judge" in out
    assert "  sm_120: SOFTWARE-ONLY" in out
    assert "      jit-module kernlib/comm.py:12  comm [return-value+entry-point]" in out
    assert "+    if not (get_platform().is_sm90 or get_platform().is_sm100 or get_platform().is_sm120):" in out
    assert "+    nvcc_flags = current_compilation_context.get_nvcc_flags_list(supported_major_versions=[9, 10, 12])" in out


def test_hardware_bound_json():
    code, out = run("kernlib/gemm.py:6", "--target", "RTX PRO 6000", "--format", "json")
    assert code == 0, out
    (e,) = json.loads(out)
    assert (e["gate"]["path"], e["gate"]["line"]) == ("kernlib/gemm.py", 6)
    assert e["gate"]["admits_target"] == {"sm_120": False}
    assert e["admitted"] == []
    (f,) = e["findings"]
    assert (f["target"], f["verdict"], f["patch"]) == ("sm_120", "hardware-bound", None)
    assert [(v["path"], v["line"], v["feature"]) for v in f["evidence"]] == [
        ("kernlib/data/csrc/hopper_gemm.cu", 4, "ptx.wgmma")]


def test_without_target_keeps_the_chain_view():
    code, out = run("servelib/fusion.py:9")
    assert code == 0, out
    assert "SOFTWARE-ONLY" not in out and "comm" in out


def test_bad_input_is_a_usage_error():
    code, out = run("kernlib/gemm.py:2", "--target", "sm_120")
    assert code == 2 and "no architecture gate on this line" in out and "Traceback" not in out
    code, out = run("kernlib/gemm.py:6", "--target", "sm_999")
    assert code == 2 and "--target" in out and "Traceback" not in out
