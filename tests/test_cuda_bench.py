"""The pieces of bench/validate_cuda.py and bench/kernel_census.py that decide a result."""
from __future__ import annotations

from pathlib import Path

import pytest

import kernel_census as K
import nvcc_flags as NF
import validate_cuda as V


def test_nvcc_outcome_classification():
    assert V.classify(0, "") == ("OK", "")
    assert V.classify(None, "") == ("timeout", "")
    log = ("In file included from x.cu:3:\n"
           "/p/mma_sm120.cuh(67): error: ... \n"
           "ptxas /tmp/a.ptx, line 35; error   : Feature 'add.f32x2' requires .target sm_100 or higher\n")
    assert V.classify(1, log) == ("error", "/p/mma_sm120.cuh(67): error: ...")
    # a header the environment lacks is not an answer about the architecture
    assert V.classify(1, "x.cu:20:10: fatal error: torch/extension.h: No such file or directory\n") == (
        "skipped", "environment lacks header torch/extension.h")
    # ... but a missing package header is a real error
    assert V.classify(1, "x.cu:2:10: fatal error: my_config.inc: No such file or directory\n")[0] == "error"


def test_agreement_rules():
    assert V.agrees("builds", "OK") and V.agrees("stub", "OK") and V.agrees("fails", "error")
    assert not V.agrees("fails", "OK") and not V.agrees("builds", "error") and not V.agrees("stub", "error")
    assert V.agrees("unknown", "OK") is False and V.agrees("unknown", "error") is False
    assert V.agrees("builds", "timeout") is None and V.agrees("builds", "skipped") is None


def test_summary_counts_only_finished_rows():
    rows = [
        {"tu": "a", "target": "sm_120f", "outcome": "OK", "prediction": "builds", "agree": True, "detail": ""},
        {"tu": "a", "target": "sm_90a", "outcome": "error", "prediction": "builds", "agree": False, "detail": "e"},
        {"tu": "b", "target": "sm_120f", "outcome": "timeout", "prediction": "stub", "agree": None, "detail": ""},
    ]
    s = V.summarise(rows)
    assert (s["finished"], s["agree"], s["agreement_pct"], s["timeouts"]) == (2, 1, 50.0, 1)
    assert [(d["tu"], d["target"]) for d in s["disagreements"]] == [("a", "sm_90a")]


def test_jit_command_shape(tmp_path, monkeypatch):
    monkeypatch.setattr(NF, "tvm_ffi_includes", lambda: [tmp_path / "tvm"])
    monkeypatch.setattr(NF, "curand_include", lambda: tmp_path / "curand")
    cmd = NF.jit_command(tmp_path, tmp_path / "a.cu", "sm_120f", ["-DENABLE_BF16", "-gencode=arch=compute_90a,code=sm_90a"],
                         ["data/csrc/nv_internal"], out="a.o")
    assert cmd[-5:] == ["-gencode=arch=compute_120f,code=sm_120f", "-c", str(tmp_path / "a.cu"), "-o", "a.o"]
    assert "-gencode=arch=compute_90a,code=sm_90a" not in cmd  # the module's own target is replaced
    assert cmd.index(f"-I{tmp_path / 'data/csrc/nv_internal'}") < cmd.index(f"-I{tmp_path / 'data/cccl/cub'}")
    assert {"-std=c++17", "--expt-relaxed-constexpr", "-DENABLE_BF16", "-DFLASHINFER_ENABLE_FP8_E8M0"} <= set(cmd)
    assert NF.defines_of(cmd)["ENABLE_BF16"] == "1" and NF.defines_of(cmd)["Py_LIMITED_API"] == "0x03090000"
    with pytest.raises(ValueError):
        NF.gencode("120f")


def test_ptx_entry_classes():
    ptx = """
.visible .entry _Z5emptyv(
)
{
\tret;
}
.visible .entry _Z4trapPi(
\t.param .u64 .ptr .align 1 _Z4trapPi_param_0
)
{
\t// begin inline asm
\ttrap;
\t// end inline asm
\tret;
}
.visible .entry _Z4realPi(
\t.param .u64 _Z4realPi_param_0
)
{
\t.reg .b64 \t%rd<3>;
\tld.param.u64 \t%rd1, [_Z4realPi_param_0];
\tcvta.to.global.u64 \t%rd2, %rd1;
\tst.global.u32 \t[%rd2], 1;
\tret;
}
"""
    assert [(e.mangled, e.status) for e in K.parse_ptx(ptx)] == [
        ("_Z5emptyv", "empty"), ("_Z4trapPi", "trap"), ("_Z4realPi", "real")]
    assert K.family("void flashinfer::reduce_fusion::k<float, 2, true>(AllReduceParams<float>)") == "k"
    assert K.family("void oneShotAllReduceKernel<__half, 8, false, true>(AllReduceParams<__half>)") == "oneShotAllReduceKernel"


@pytest.mark.real
def test_module_sources_and_flags_follow_the_package(sp0615, sp072):
    fi = Path(sp0615) / "flashinfer"
    assert K.module_sources(fi, "jit/comm.py", "gen_trtllm_comm_module") == [
        "data/csrc/trtllm_allreduce.cu", "data/csrc/trtllm_allreduce_fusion.cu", "data/csrc/trtllm_moe_allreduce_fusion.cu"]
    # every flag validate_cuda.py transcribed is still written in flashinfer 0.7.2's JIT code
    mod: dict[str, list[str]] = {}
    for t in V._tus():
        mod.setdefault(t.module.split(":")[0], []).extend(f for f in t.flags if f not in V.SM90A_EXTRA)
    mod.setdefault("jit/core.py", []).extend(V.SM90A_EXTRA)
    assert NF.check_against_source(Path(sp072) / "flashinfer", mod) == []
