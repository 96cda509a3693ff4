"""C++ runtime architecture checks (archaudit.cuda.runtime_checks)."""
from __future__ import annotations

from pathlib import Path

from archaudit.cuda.runtime_checks import find_runtime_checks
from archaudit.model import CPP_RUNTIME_CHECK

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "cuda"


def test_fixture_checks():
    gates = find_runtime_checks("runtime_check.cu", (FIX / "runtime_check.cu").read_bytes())
    by_line = {g.line: g for g in gates}
    assert sorted(by_line) == [13, 20, 28, 35]  # not_arch() at line 32 is not about the arch
    g = by_line[13]
    assert g.kind == CPP_RUNTIME_CHECK and g.function == "Runner::Runner"
    assert g.admits == frozenset({"sm_100", "sm_103"}) and g.resolved
    assert g.resolution == "evaluated: getSMVersion() -> major*10+minor"
    g = by_line[20]
    assert g.function == "hopper_only" and g.region == "refusal"
    assert g.admits == frozenset({"sm_90", "sm_100", "sm_103", "sm_107", "sm_110", "sm_120", "sm_121"})
    g = by_line[28]
    assert g.admits == frozenset({"sm_100", "sm_103", "sm_107", "sm_120", "sm_121"})
    assert g.resolution == "evaluated: compute capability major/minor"
    g = by_line[35]
    assert not g.resolved and "threshold" in g.resolution


def test_constants_from_included_headers():
    src = b"""
struct R { R() : mSM(getSMVersion()) { FLASHINFER_CHECK(mSM == kSM_120, "no"); } int mSM; };
"""
    hdr = b"constexpr int32_t kSM_120 = 120;\n"
    (g,) = find_runtime_checks("r.h", src, [hdr])
    assert g.admits == frozenset({"sm_120"}) and g.resolved
    (g,) = find_runtime_checks("r.h", src)
    assert not g.resolved and "kSM_120" in g.resolution


def test_two_operand_and_props_forms():
    src = b"""
void f(const cudaDeviceProp& props, int device) {
  int major = 0;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
  TVM_FFI_ICHECK_EQ(major, 10) << "SM10x only";
  TVM_FFI_ICHECK(props.major == 12 && (props.minor == 0 || props.minor == 1)) << "sm120/121";
  TVM_FFI_ICHECK_EQ(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), cudaSuccess);
}
"""
    gates = find_runtime_checks("f.cu", src)
    assert [(g.line, sorted(g.admits)) for g in gates] == [
        (5, ["sm_100", "sm_103", "sm_107"]),
        (6, ["sm_120", "sm_121"]),
    ]
