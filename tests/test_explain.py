"""explain: the whole evidence for one gate, without a full scan."""
from archaudit.verdict.explain import explain, render_text
from archaudit.pipeline import run_with_big_stack
from archaudit.python.index import Index
from archaudit.sources import open_source

from conftest import FIXTURES, REDEFINED_MODULE, one_module_package


def _explain(reg, site, targets):
    src = open_source(FIXTURES / "verdicts")
    files = src.files()
    idx = Index(src, [f for f in files if f.endswith(".py")], False)
    path, line = site.rsplit(":", 1)
    return run_with_big_stack(lambda: explain(src, files, idx, reg, path, int(line),
                                              [reg.parse(t) for t in targets], False))


def test_explain_chained_gate(reg):
    (e,) = _explain(reg, "servelib/fusion.py:9", ["sm_120", "sm_90"])
    assert e.admitted == ["sm_90"]
    (f,) = e.findings
    assert (f.target, f.verdict) == ("sm_120", "software-only")
    assert [(link.kind, link.path, link.line) for link in f.chain] == [
        ("region", "servelib/fusion.py", 9), ("call", "servelib/fusion.py", 11), ("jit-module", "kernlib/comm.py", 12)]
    # the patch plan reaches the arch list down the chain, found without a full scan
    assert "supported_major_versions=[9, 10, 12]" in f.patch
    text = render_text([e], reg)
    assert "entry point custom_all_reduce: partial" in text
    assert "empty-stub: lamport_norm_kernel at kernlib/data/include/kernlib/comm.cuh:6, guard line 7" in text


def test_explain_hardware_bound(reg):
    (e,) = _explain(reg, "kernlib/gemm.py:6", ["sm_120"])
    (f,) = e.findings
    assert f.verdict == "hardware-bound"
    assert [(ev.path, ev.line, ev.feature, ev.supported_on) for ev in f.evidence] == [
        ("kernlib/data/csrc/hopper_gemm.cu", 4, "ptx.wgmma", ("sm_90a",))]
    assert f.patch is None


def test_explain_line_without_gate(reg):
    assert _explain(reg, "kernlib/gemm.py:2", ["sm_120"]) == []


def test_explain_says_which_arm_serves_a_target_that_never_evaluates_the_gate(reg):
    """reach.py:11 is an `elif is_sm90` after `if is_sm120`: sm_120 takes the first arm; on sm_90,
    the gate admits, and on sm_100 it is judged."""
    (e,) = _explain(reg, "servelib/reach.py:11", ["sm_120", "sm_90", "sm_100"])
    assert [(t, eg.line) for t, eg in e.not_evaluated] == [("sm_120", 9)]
    assert e.admitted == ["sm_90"]
    assert [(f.target, f.verdict) for f in e.findings] == [("sm_100", "hardware-bound")]
    text = render_text([e], reg)
    assert "sm_120: not evaluated: the earlier arm at line 9 (`is_sm120_supported()`) admits it, nothing to judge" in text


def test_explain_cli_takes_a_cpp_runtime_check():
    from click.testing import CliRunner

    from archaudit.cli import main

    site = "kernlib/data/csrc/fused_binding.cu:10"
    r = CliRunner().invoke(main, ["explain", str(FIXTURES / "verdicts"), site, "--target", "sm_120", "--format", "json"])
    assert r.exit_code == 0, r.output
    import json

    (e,) = json.loads(r.output)
    assert e["gate"]["kind"] == "cpp-runtime-check"
    assert [(f["target"], f["verdict"]) for f in e["findings"]] == [("sm_120", "hardware-bound")]
    r = CliRunner().invoke(main, ["explain", str(FIXTURES / "verdicts"), site])
    assert r.exit_code == 2 and "is explained with --target" in r.output


def test_explain_a_gate_in_an_overload_implementation(reg, tmp_path):
    """The line lies in the last def of a qualname (after its @overload stub): explain
    evaluates that def, not the stub."""
    one_module_package(tmp_path, REDEFINED_MODULE)
    src = open_source(tmp_path)
    files = src.files()
    idx = Index(src, [f for f in files if f.endswith(".py")], False)
    (e,) = run_with_big_stack(lambda: explain(src, files, idx, reg, "pkg/m.py", 11, [reg.parse("sm_120")], False))
    assert (e.gate.function, e.gate.line, e.admitted) == ("pkg.m.W.run", 11, ["sm_120"])
