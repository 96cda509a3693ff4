"""torch.ops calls judged through the prebuilt extension that registers their namespace
(archaudit/binary/extension.py, torchops.py) on fixtures/torchext: a 36 KB .so built by nvcc 13.0
(fixtures/torchext/make_fixture.sh) whose scale.cu has sm_80 + sm_120 code and gemm90.cu sm_90a
only, and ops.py gating calls of its ops on `major == 9`."""
import json
import os
import random
import subprocess
import sys

import pytest

from archaudit.binary.extension import (ABSENT, MIXED, NO, SASS, UNKNOWN, function_name, registered_namespace, judge_op,
                                        op_reach, read_extension)
from archaudit.binary.torchops import torch_op

from conftest import FIXTURES, REPO

ROOT = FIXTURES / "torchext"
SO = "tinyext/_tinyext_C.abi3.so"


@pytest.fixture(scope="module")
def ext():
    return read_extension(SO, (ROOT / SO).read_bytes())


def test_units_namespaces_and_kernels(ext):
    assert ext.namespaces == {"tinyext": "TORCH_LIBRARY_init_tinyext"}
    assert ext.has_symbols and not ext.diagnostics
    # nvlink's link.stub (a container without kernels) and host-only objects are no units
    assert [(u.name, sorted(a.name for a in u.archs), u.kernels) for u in ext.units] == [
        ("scale.cu", ["sm_120", "sm_80"], ("_Z12scale_kernelPfi",)),
        ("gemm90.cu", ["sm_90a"], ("_Z13gemm90_kernelPfi",)),
    ]
    assert ext.defines_op("scale_twice") and ext.defines_op("scale") and ext.defines_op("host_only") and ext.defines_op("nothere") is False


def test_op_reach_follows_calls_through_the_plt(ext):
    # scale() and gemm() are exported, so dispatch() calls them through PLT entries
    assert op_reach(ext, "scale").kernels == {"_Z12scale_kernelPfi": 0}
    assert op_reach(ext, "gemm").kernels == {"_Z13gemm90_kernelPfi": 1}
    assert op_reach(ext, "dispatch").kernels == {"_Z12scale_kernelPfi": 0, "_Z13gemm90_kernelPfi": 1}
    # registered under another name: m.impl("scale_twice", &twice), the function's address from the GOT
    r = op_reach(ext, "scale_twice")
    assert r.entries == ["_Z5twicePfi"] and r.kernels == {"_Z12scale_kernelPfi": 0}
    r = op_reach(ext, "host_only")
    assert r.entries == ["_Z9host_onlyi"] and r.kernels == {} and r.complete


@pytest.mark.parametrize("gpu, want", [
    ("sm_120", {"scale": SASS, "gemm": NO, "dispatch": MIXED, "host_only": UNKNOWN, "nothere": ABSENT}),
    # sm_80 machine code runs on sm_86, not on sm_90; sm_90a only on sm_90
    ("sm_90", {"scale": NO, "gemm": SASS, "dispatch": MIXED, "host_only": UNKNOWN, "nothere": ABSENT}),
    ("sm_86", {"scale": SASS, "gemm": NO, "dispatch": MIXED, "host_only": UNKNOWN, "nothere": ABSENT}),
    # plain sm_120 machine code runs on sm_121 (same major, higher minor)
    ("sm_121", {"scale": SASS, "gemm": NO, "dispatch": MIXED, "host_only": UNKNOWN, "nothere": ABSENT}),
])
def test_judge_op_per_gpu(ext, gpu, want):
    assert {op: judge_op(ext, "tinyext", op, gpu).runs for op in want} == want


def test_reasons_name_the_units(ext):
    v = judge_op(ext, "tinyext", "dispatch", "sm_120")
    assert "scale.cu (sm_120 sm_80)" in v.reason and "gemm90.cu (sm_90a)" in v.reason
    assert v.units == ["gemm90.cu", "scale.cu"]
    assert "no kernel launch was found from its function(s) host_only" in judge_op(ext, "tinyext", "host_only", "sm_120").reason


def test_names():
    assert registered_namespace("_ZL39STABLE_TORCH_LIBRARY_FRAGMENT_init__C_0RN5torch6stable6detail13StableLibraryE") == "_C"
    assert registered_namespace("_ZL49STABLE_TORCH_LIBRARY_FRAGMENT_init__C_custom_ar_7RN5torch6stable6detail13StableLibraryE") == "_C_custom_ar"
    assert registered_namespace("_ZL38STABLE_TORCH_LIBRARY_init_deep_select2RN5torch6stable6detail13StableLibraryE") == "deep_select2"
    assert registered_namespace("_ZL21TORCH_LIBRARY_init__CRN5torch7LibraryE") == "_C"
    assert registered_namespace("_ZL49STABLE_TORCH_LIBRARY_IMPL_init__C_custom_ar_CPU_9RN5torch6stable6detail13StableLibraryE") is None
    assert function_name("_ZN4vllm8rms_normERN5torch6stable6TensorE") == "rms_norm"
    assert function_name("_Z8rms_normRN5torch6stable6TensorES2_d") == "rms_norm"
    assert function_name("_Z17cutlass_scaled_mmRN5torch6stable6TensorE.cold") == "cutlass_scaled_mm"
    assert torch_op("torch.ops._C.rms_norm") == ("_C", "rms_norm")
    assert torch_op("torch.ops._C.rms_norm.default") == ("_C", "rms_norm")
    assert torch_op("torch.ops._C") is None and torch_op("torch.cuda.synchronize") is None


def test_damaged_files_give_diagnostics_not_exceptions():
    data = (ROOT / SO).read_bytes()
    rng = random.Random(23)
    cases = [b"", b"\x7fELF\x02\x01" + b"\0" * 58, data[:4096], data[: len(data) // 2], b"not an elf"]
    for _ in range(20):
        b = bytearray(data)
        for _ in range(64):
            b[rng.randrange(len(b))] = rng.randrange(256)
        cases.append(bytes(b))
    for c in cases:
        e = read_extension("x.so", c)
        for op in ("scale", "gemm", "dispatch"):
            assert judge_op(e, "tinyext", op, "sm_120").runs in (SASS, NO, MIXED, UNKNOWN, ABSENT)


@pytest.fixture(scope="module")
def scan(tmp_path_factory):
    out = tmp_path_factory.mktemp("torchext") / "scan.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-m", "archaudit", "scan", str(ROOT), "-t", "sm_120", "--format", "json",
                    "--no-cache", "-o", str(out)], cwd=out.parent, env=env, check=False)
    return json.loads(out.read_text())


def test_scan_findings(scan):
    got = [(f["gate"]["path"], f["gate"]["line"], f["verdict"], [m["name"] for m in f["modules"]])
           for f in scan["findings"]]
    assert got == [
        ("tinyext/ops.py", 11, "software-only", ["torch.ops.tinyext.scale"]),
        ("tinyext/ops.py", 16, "binary-only", ["torch.ops.tinyext.gemm"]),
        ("tinyext/ops.py", 21, "unresolved", ["torch.ops.tinyext.dispatch"]),
        ("tinyext/ops.py", 26, "unresolved", ["torch.ops.tinyext.host_only"]),
        ("tinyext/ops.py", 31, "unresolved", ["torch.ops.tinyext.scale"]),
        ("tinyext/ops.py", 37, "software-only", ["torch.ops.tinyext.scale_twice"]),
        ("tinyext/ops.py", 42, "unresolved", ["torch.ops.tinyjit.compile_and_run"]),
    ]
    by_line = {f["gate"]["line"]: f for f in scan["findings"]}
    assert "scale.cu (sm_120 sm_80)" in by_line[11]["reason"] and by_line[11]["patch"]
    assert by_line[16]["evidence"][0]["path"] == SO and by_line[16]["evidence"][0]["feature"] == "prebuilt-code"
    assert "some have code for sm_120 (scale.cu" in by_line[21]["reason"]
    # an op of a namespace no file of the scan registers stays code outside the scan
    assert "not analysed: torch.ops.otherext.thing" in by_line[31]["reason"]
    # a file without device code of its own (kernels built at run time) is not taken as portable
    assert "no device code of its own" in by_line[42]["reason"]
    # the chain ends at the shared object
    assert by_line[11]["chain"][-1]["path"] == SO and by_line[11]["chain"][-1]["how"] == "torch-op-namespace"
