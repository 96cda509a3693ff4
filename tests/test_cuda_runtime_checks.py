"""C++ runtime architecture checks (archaudit.cuda.runtime_checks)."""
from __future__ import annotations

import re
from pathlib import Path

from archaudit.cuda import runtime_checks as rc
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


_REGEX_SOURCE = re.compile(rb"getSMVersion|getSmVersion|get_sm_version|ComputeCapability|[.>]major\b")
_REGEX_CHECK = re.compile(rb"CHECK|throw|THROW|_ERROR")


def _plain_rewrite(expr: str, props: set[str]) -> str:
    """_rewrite_sources without its substring tests."""
    expr = rc._SM_CALL.sub(rc.CC, expr)

    def field(m):
        if m.group(1) in props or re.search(r"prop", m.group(1), re.I):
            return rc.MAJOR if m.group(2) == "major" else rc.MINOR
        return m.group(0)

    return rc._PROP_FIELD.sub(field, expr)


def test_substring_tests_answer_as_the_patterns():
    """The file prefilter (_may_check_arch) and _rewrite_sources test substrings before, or
    instead of, running patterns: the same answers as the patterns, on every C/C++ fixture and
    on the edges (`major` at either end, after `.`/`->`/other bytes, followed by a word byte)."""
    texts = [p.read_bytes() for p in sorted((FIX.parent).rglob("*")) if p.suffix in (".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc")]
    edges = [b"major", b".major", b"x.major", b"p->major", b"p->majorx", b"p.major_", b"p.major9", b"p.major;",
             b"p:major", b"majormajor.major", b"getSmVersion", b"get_sm_version()", b"ComputeCapability",
             b"cudaDevAttrComputeCapabilityMajor", b"p . major", b"\x00.major\xff"]
    for check in (b"", b" TORCH_CHECK(", b" throw x;", b" TVM_FFI_THROW", b"FLASHINFER_ERROR"):
        texts += [e + check for e in edges] + [check + e for e in edges]
    assert len(texts) > 200
    for t in texts:
        want = _REGEX_SOURCE.search(t) is not None and _REGEX_CHECK.search(t) is not None
        assert rc._may_check_arch(t) == want, t[:60]
    exprs = [t.decode("latin-1") for t in texts] + [
        "getSMVersion() >= 90", "tensorrt_llm::common::getSMVersion() == 100", "a::b:: getSmVersion ( )",
        "props.major * 10 + props.minor", "dev->minor", "p->minor", "props.minor", "x.major", "p.minorx",
        "getSMVersionFromDevice(0)"]
    for e in exprs:
        for props in (set(), {"x", "p"}):
            assert rc._rewrite_sources(e, props) == _plain_rewrite(e, props)
    assert rc._rewrite_sources("tensorrt_llm::common::getSMVersion() == 100", set()) == f"{rc.CC} == 100"


def test_scan_reads_every_cpp_suffix_the_pipeline_hands_it():
    """A .cxx file (sources.CPP_SUFFIXES, what the pipeline passes as C++ files) is searched as a
    .cu file is; a .txt file is not."""
    data = (FIX / "runtime_check.cu").read_bytes()

    class Reader:
        def read(self, rel):
            return data

    got = rc.scan_runtime_checks(Reader(), ["a/runtime_check.cxx", "a/runtime_check.cu", "a/notes.txt"])
    assert sorted({(g.path, g.line) for g in got}) == [
        (p, line) for p in ("a/runtime_check.cu", "a/runtime_check.cxx") for line in (13, 20, 28, 35)]
