"""archaudit verify: the PTX census, the rules that compare compiles with static verdicts, the
module selection, and the command on the fixtures with nvcc (fixtures/verify/README.md)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

from archaudit import verify as V
from archaudit.cli import main
from archaudit.pipeline import scan

from conftest import FIXTURES, REPO

NVCC = shutil.which("nvcc")
# the fixture kernlib calls TVM-FFI's export macro without its header (flashinfer gets it from tvm_ffi)
TVM_EXPORT = "--nvcc-flag=-DTVM_FFI_DLL_EXPORT_TYPED_FUNC(...)="

# every class of kernel body, in the forms nvcc 13 writes them
PTX = r"""
.version 9.0
.target sm_120f
.address_size 64

.extern .func  (.param .b32 func_retval0) vprintf
(
	.param .b64 vprintf_param_0,
	.param .b64 vprintf_param_1
)
;
@STR@ $str ERROR : MMA used without targeting sm90a
@STR@ $str$1 value %d\n
@STR@ $str$2 use X without CUDA

.func _Z10abort_funcv()
{
	mov.u64 	%rd1, $str$3;
	brkpt;
	ret;
}
@STR@ $str$3 Attempting to use X without CUTE_ARCH_X

.visible .entry _Z5emptyv(
)
{
	ret;
}
.visible .entry _Z4trapPi(
	.param .u64 .ptr .align 1 _Z4trapPi_param_0
)
{
	// begin inline asm
	trap;
	// end inline asm
	ret;
}
.visible .entry _Z9trapfirstPf(
	.param .u64 .ptr .align 1 _Z9trapfirstPf_param_0
)
.maxntid 128, 1, 1
{
	.reg .b64 	%rd<5>;
	ld.param.u64 	%rd1, [_Z9trapfirstPf_param_0];
	cvta.to.global.u64 	%rd2, %rd1;
	// begin inline asm
	trap;
	// end inline asm
	st.global.u32 	[%rd2], 0;
	ret;
}
.visible .entry _Z8predtrapPf(
	.param .u64 .ptr .align 1 _Z8predtrapPf_param_0
)
{
	ld.param.u64 	%rd1, [_Z8predtrapPf_param_0];
	@%p1 trap;
	st.global.u32 	[%rd1], 0;
	ret;
}
.visible .entry _Z8latetrapPf(
	.param .u64 .ptr .align 1 _Z8latetrapPf_param_0
)
{
	ld.param.u64 	%rd1, [_Z8latetrapPf_param_0];
	@%p1 bra 	$L__BB4_2;
	st.global.u32 	[%rd1], 0;
$L__BB4_2:
	trap;
	ret;
}
.visible .entry _Z5abortPf(
	.param .u64 .ptr .align 1 _Z5abortPf_param_0
)
{
	ld.param.u64 	%rd1, [_Z5abortPf_param_0];
	ld.global.f32 	%f1, [%rd1];
	mov.u64 	%rd7, $str;
	cvta.global.u64 	%rd8, %rd7;
	{ // callseq 0, 0
	.param .b64 param0;
	st.param.b64 	[param0], %rd8;
	.param .b32 retval0;
	call.uni (retval0), 
	vprintf, 
	(
	param0, 
	param1
	);
	} // callseq 0
	// begin inline asm
	brkpt;
	// end inline asm
	st.global.f32 	[%rd1], %f1;
	ret;
}
.visible .entry _Z6helperPf(
	.param .u64 .ptr .align 1 _Z6helperPf_param_0
)
{
	ld.param.u64 	%rd1, [_Z6helperPf_param_0];
	call.uni 
	_Z10abort_funcv, 
	(
	);
	st.global.u32 	[%rd1], 0;
	ret;
}
.visible .entry _Z5debugPf(
	.param .u64 .ptr .align 1 _Z5debugPf_param_0
)
{
	ld.param.u64 	%rd1, [_Z5debugPf_param_0];
	mov.u64 	%rd7, $str$1;
	mov.u64 	%rd8, $str$2;
	call.uni (retval0), vprintf, (param0, param1);
	st.global.u32 	[%rd1], 0;
	ret;
}
"""


def _with_strings(ptx: str) -> str:
    """`@STR@ NAME TEXT` lines -> the byte arrays nvcc writes for printf formats."""
    def b8(m):
        data = m.group(2).encode().replace(b"\\n", b"\n") + b"\0"
        return f".global .align 1 .b8 {m.group(1)}[{len(data)}] = {{{', '.join(map(str, data))}}};"
    return re.sub(r"^@STR@ (\S+) (.*)$", b8, ptx, flags=re.M)


def test_ptx_census_classes():
    got = [(e.mangled, e.status, e.message) for e in V.parse_ptx(_with_strings(PTX))]
    assert got == [
        ("_Z5emptyv", "empty", ""),
        ("_Z4trapPi", "trap", ""),
        ("_Z9trapfirstPf", "trap", ""),  # a trap every run reaches before any branch
        ("_Z8predtrapPf", "real", ""),  # predicated: not every run
        ("_Z8latetrapPf", "real", ""),  # behind a branch
        ("_Z5abortPf", "arch-abort", "ERROR : MMA used without targeting sm90a"),
        ("_Z6helperPf", "arch-abort", "Attempting to use X without CUTE_ARCH_X"),  # through a .func it calls
        ("_Z5debugPf", "real", ""),  # printfs of other messages
    ]
    assert V.parse_ptx("") == [] and V.parse_ptx(".visible .entry _Z1kv(\n") == []


def test_kernel_labels():
    d = ("void cutlass::device_kernel<cutlass::fmha::kernel::Sm100FmhaMlaReductionKernel<cutlass::half_t, float, 128ul> >"
         "(cutlass::fmha::kernel::Sm100FmhaMlaReductionKernel<cutlass::half_t, float, 128ul>::Params)")
    assert V.family(d) == "device_kernel"
    assert V.label(d) == "device_kernel<Sm100FmhaMlaReductionKernel>"
    assert V.label("void flashinfer::k<float, 2, true>(P<float>)") == "k<float>"
    assert V.label("void rms_norm_kernel(float*, int)") == "rms_norm_kernel"


def test_compiler_log_reading():
    assert V.missing_header("x.cu:1:10: fatal error: tvm/ffi/function.h: No such file or directory\n") == "tvm/ffi/function.h"
    assert V.missing_header('x.cu(3): catastrophic error: cannot open source file "cute/tensor.hpp"\n') == "cute/tensor.hpp"
    assert V.missing_header("x.cu(3): error: identifier \"y\" is undefined\n") is None
    log = "In file included from a.cu:1:\nptxas a.ptx, line 25; error   : Instruction 'wgmma.fence' not supported\n"
    assert V.first_error(log) == "ptxas a.ptx, line 25; error   : Instruction 'wgmma.fence' not supported"


def test_module_flags_keep_what_shapes_device_code():
    flags = ["-gencode=arch=compute_90a,code=sm_90a", "-gencode", "arch=compute_100a,code=sm_100a", "-DX=1", "",
             "--expt-relaxed-constexpr", "-arch=sm_90a", "-I/abs", "-isystem", "/x", "-lcuda", "-O3", "-c", "-o", "a.o",
             "--use_fast_math", "-lineinfo"]
    assert V.module_flags(flags) == ["--expt-relaxed-constexpr", "-O3", "--use_fast_math", "-lineinfo"]
    assert V.define_flags({"A": "1", "B": ""}) == ["-DA=1", "-DB"]


def _compile(outcome="ok", kinds=(), stage="", detail="", target="sm_120f"):
    entries = [V.Entry(f"_Z1k{i}v", k, 3) for i, k in enumerate(kinds)]
    return V.Compile(target, outcome, stage, detail, 1.0, entries)


def _judged(claim, *tus):
    c = V.ModuleCheck("m", [f"m{i}.cu" for i in range(len(tus))], ("m.py", 1, "gen"), claim, "", "sm_120f", "default")
    c.tus = [V.TuCheck(f"m{i}.cu", r, ctrl) for i, (r, ctrl) in enumerate(tus)]
    V.judge(c)
    return c.result, c.observed


OK_REAL = (_compile(kinds=("real",)), None)
OK_STUB = (_compile(kinds=("trap",)), None)
OK_MIXED = (_compile(kinds=("real", "arch-abort")), None)
OK_NONE = (_compile(kinds=()), None)
PTXAS = (_compile("error", stage="ptxas", detail="not supported on .target 'sm_120f'"), _compile(target="sm_90a"))


@pytest.mark.parametrize("claim,tus,expected", [
    ("software-only", [OK_REAL, OK_NONE], ("confirmed", "no stubs")),
    ("software-only", [OK_REAL, OK_STUB], ("refuted", "some kernels stubs")),
    ("software-only", [OK_REAL, PTXAS], ("refuted", "rejected")),
    ("partial", [OK_MIXED], ("confirmed", "some kernels stubs")),
    ("partial", [OK_STUB], ("confirmed", "all kernels stubs")),
    ("partial", [OK_REAL], ("refuted", "no stubs")),
    ("partial", [PTXAS], ("refuted", "rejected")),
    ("hardware-bound", [PTXAS, OK_REAL], ("confirmed", "rejected")),
    ("hardware-bound", [OK_STUB], ("confirmed", "all kernels stubs")),
    ("hardware-bound", [OK_MIXED], ("confirmed", "some kernels stubs")),
    ("hardware-bound", [OK_REAL, OK_NONE], ("refuted", "no stubs")),
    # a ptxas error with no target of the module's own to compare is still the target's
    ("hardware-bound", [(_compile("error", stage="ptxas", detail="x"), None)], ("confirmed", "rejected")),
])
def test_static_verdict_against_compiles(claim, tus, expected):
    assert _judged(claim, *tus) == expected


@pytest.mark.parametrize("lists,tus,expected", [
    # one of two lists compiles, the other is rejected: what a partial module of source lists claims
    ([("m0.cu",), ("m1.cu",)], [OK_REAL, PTXAS], ("confirmed", "some source lists rejected")),
    # every list holds a rejected TU: the partial claim is refuted
    ([("m0.cu", "m1.cu"), ("m1.cu",)], [OK_REAL, PTXAS], ("refuted", "rejected")),
])
def test_source_lists_against_compiles(lists, tus, expected):
    c = V.ModuleCheck("m", [f"m{i}.cu" for i in range(len(tus))], ("m.py", 1, "gen"), "partial", "", "sm_120f",
                      "default", source_lists=lists)
    c.tus = [V.TuCheck(f"m{i}.cu", r, ctrl) for i, (r, ctrl) in enumerate(tus)]
    V.judge(c)
    assert (c.result, c.observed) == expected


@pytest.mark.parametrize("tus,why", [
    ([OK_REAL, (_compile("missing-header", stage="nvcc", detail="tvm/ffi/function.h"), None)],
     "missing header tvm/ffi/function.h (pass -I): m1.cu"),
    ([(_compile("timeout", detail="ran past 600 s"), None)], "timeout: m0.cu: ran past 600 s"),
    ([(_compile("error", stage="nvcc", detail="e1"), _compile("error", stage="nvcc", detail="e2", target="sm_90a"))],
     "does not compile for its own target sm_90a either: m0.cu: e2"),
    ([(_compile("error", stage="nvcc", detail="e1"), None)],
     "nvcc error for sm_120f and no other target of the module to compare: m0.cu: e1"),
])
def test_what_is_not_verified(tus, why):
    c = V.ModuleCheck("m", [], ("m.py", 1, "gen"), "software-only", "", "sm_120f", "default")
    c.tus = [V.TuCheck(f"m{i}.cu", r, ctrl) for i, (r, ctrl) in enumerate(tus)]
    V.judge(c)
    assert (c.result, c.observed, c.why) == ("not verified", None, why)


def test_no_claim_is_never_confirmed():
    c = V.ModuleCheck("m", [], ("m.py", 1, "gen"), None, "admitted", "sm_120f", "--module m")
    c.tus = [V.TuCheck("m.cu", *OK_REAL)]
    V.judge(c)
    assert c.result == "not verified" and c.why.startswith("no static verdict to check (admitted); nvcc: every TU")


@pytest.fixture(scope="module")
def verdicts(reg):
    return scan(FIXTURES / "verdicts", [reg.parse("sm_120")])


def _names(cands):
    return sorted((c.record.name, c.claim, c.via) for c in cands)


def test_selection(verdicts):
    cands, unmatched = V.select(verdicts, "sm_120")
    assert _names(cands) == [("blackwell", "hardware-bound", "default"), ("comm", "partial", "default"),
                             ("cute_gemm", "hardware-bound", "default"), ("hopper_gemm", "hardware-bound", "default"),
                             ("norm", "software-only", "default")]
    assert unmatched == []
    cands, unmatched = V.select(verdicts, "sm_120", ("c*", "none*"),
                                ("kernlib/data/csrc/fused_binding.cu:10", "kernlib/data/csrc/orphan_binding.cu:10",
                                 "servelib/fusion.py:9", "servelib/fusion.py:1"))
    # fused_binding is admitted on sm_120: its claim is the one of the gate's module verdict (a C++
    # runtime check in front of an empty kernel, beside a real one)
    assert _names(cands) == [("comm", "partial", "--module c*"), ("cute_gemm", "hardware-bound", "--module c*"),
                             ("fused_binding", "partial", "--gate kernlib/data/csrc/fused_binding.cu:10")]
    assert unmatched == ["--module none*: no JIT module of the scan has a matching name",
                         "--gate kernlib/data/csrc/orphan_binding.cu:10: no JIT module of the scan builds what it guards "
                         "(orphan_binding.cu)",
                         "--gate servelib/fusion.py:1: no finding for sm_120 at that line"]


def _fake_compile(kinds_by_file):
    def compile_tu(tools, build, target, timeout):
        return _compile(kinds=kinds_by_file[build.source.rsplit("/", 1)[-1]], target=target)
    return compile_tu


def test_command_exit_codes_without_compiling(monkeypatch, tmp_path):
    """The command's flow with nvcc replaced: a stub in a software-only module refutes it (exit 1)."""
    monkeypatch.setattr(V, "find_tools", lambda: V.Tools("nvcc", "release 13.0, V13.0.88"))
    monkeypatch.setattr(V, "compile_tu", _fake_compile({"umma.cu": ("arch-abort", "real"), "scale.cu": ("real",),
                                                        "ext.cu": ("empty",)}))
    out = tmp_path / "v.json"
    r = CliRunner().invoke(main, ["verify", str(FIXTURES / "verify"), "-t", "sm_120", "-q", "--format", "json", "-o", str(out)])
    assert r.exit_code == 1, r.output
    d = json.loads(out.read_text())
    assert [(m["name"], m["result"], m["observed"]) for m in d["modules"]] == [
        ("scale", "confirmed", "no stubs"), ("ext", "refuted", "all kernels stubs"), ("umma", "confirmed", "some kernels stubs")]
    assert d["summary"] | {"wall_s": 0} == {"modules": 3, "confirmed": 2, "refuted": 1, "not verified": 0,
                                            "tus_compiled": 3, "compile_s": 3.0, "wall_s": 0}
    monkeypatch.setattr(V, "compile_tu", _fake_compile({"umma.cu": ("trap",), "scale.cu": ("real",), "ext.cu": ("real",)}))
    r = CliRunner().invoke(main, ["verify", str(FIXTURES / "verify"), "-t", "sm_120", "-q"])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[-1].startswith("3 module(s) for sm_120 (sm_120f): 3 confirmed, 0 refuted, 0 not verified;")


def test_without_nvcc_exit_2(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}
    p = subprocess.run([sys.executable, "-m", "archaudit", "verify", str(FIXTURES / "verify"), "-t", "sm_120"],
                       capture_output=True, text=True, env=env, cwd=REPO, timeout=120)
    assert p.returncode == 2
    assert p.stderr.strip() == "archaudit verify: nvcc not found on PATH: archaudit verify needs the CUDA toolkit"
    assert "Traceback" not in p.stderr


def _verify(*args) -> tuple[int, dict]:
    r = CliRunner().invoke(main, ["verify", *map(str, args), "-t", "sm_120", "-q", "--format", "json"])
    assert r.exit_code in (0, 1), r.output
    return r.exit_code, json.loads(r.output)


def _rows(d):
    return {m["name"]: (m["result"], m["static_verdict"], m["observed"]) for m in d["modules"]}


def _tus(d, name):
    [m] = [m for m in d["modules"] if m["name"] == name]
    return m["tus"]


@pytest.mark.nvcc
@pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")
def test_verdicts_fixture_with_nvcc():
    rc, d = _verify(FIXTURES / "verdicts", TVM_EXPORT)
    assert rc == 0
    assert _rows(d) == {
        "hopper_gemm": ("confirmed", "hardware-bound", "rejected"),
        "norm": ("confirmed", "software-only", "no stubs"),
        "blackwell": ("confirmed", "hardware-bound", "all kernels stubs"),
        "cute_gemm": ("confirmed", "hardware-bound", "all kernels stubs"),
        "comm": ("confirmed", "partial", "some kernels stubs"),
    }
    [hop] = _tus(d, "hopper_gemm")
    assert hop["source"] == "kernlib/data/csrc/hopper_gemm.cu"
    assert (hop["compile"]["outcome"], hop["compile"]["stage"]) == ("error", "ptxas")
    assert "Instruction 'wgmma.fence' not supported on .target 'sm_120f'" in hop["compile"]["detail"]
    assert (hop["control"]["target"], hop["control"]["outcome"]) == ("sm_90a", "ok")
    kernels = {t["source"]: sorted(k["status"] for k in t["compile"]["kernels"]) for t in _tus(d, "comm")}
    assert kernels == {"kernlib/data/csrc/comm.cu": ["empty", "real"], "kernlib/data/csrc/comm_fusion.cu": ["real"]}
    [cute] = _tus(d, "cute_gemm")
    assert [(k["status"]) for k in cute["compile"]["kernels"]] == ["trap"]  # the atom's trap comes first

    # without the export macro every source fails for its own target as well: nothing is refuted
    rc, d = _verify(FIXTURES / "verdicts")
    assert rc == 0
    assert {m["name"]: (m["result"], m["why"].split(":")[0]) for m in d["modules"]} == {
        "hopper_gemm": ("not verified", "does not compile for its own target sm_90a either"),
        "norm": ("not verified", "does not compile for its own target sm_90a either"),
        "blackwell": ("not verified", "does not compile for its own target sm_100a either"),
        "cute_gemm": ("not verified", "does not compile for its own target sm_100a either"),
        "comm": ("not verified", "does not compile for its own target sm_90a either"),
    }

    rc, d = _verify(FIXTURES / "verdicts", TVM_EXPORT, "--gate", "kernlib/data/csrc/fused_binding.cu:10")
    assert _rows(d) == {"fused_binding": ("confirmed", "partial", "some kernels stubs")}


@pytest.mark.nvcc
@pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")
def test_verify_fixture_with_nvcc(tmp_path):
    rc, d = _verify(FIXTURES / "verify")
    assert rc == 0
    assert _rows(d) == {
        "umma": ("confirmed", "hardware-bound", "some kernels stubs"),
        "scale": ("confirmed", "software-only", "no stubs"),
        "ext": ("not verified", "software-only", None),
    }
    [umma] = _tus(d, "umma")
    assert sorted((k["status"], k.get("message", "")) for k in umma["compile"]["kernels"]) == [
        ("arch-abort", "Attempting to use SM100_MMA_F16BF16_SS without CUTE_ARCH_MMA_SM100A_ENABLED"), ("real", "")]
    [ext] = [m for m in d["modules"] if m["name"] == "ext"]
    assert ext["why"] == "missing header extlib/api.h (pass -I): abortlib/data/csrc/ext.cu"
    (tmp_path / "extlib").mkdir()
    (tmp_path / "extlib" / "api.h").write_text("#define EXTLIB_VALUE 3.0f\n")
    rc, d = _verify(FIXTURES / "verify", "--module", "ext", "-I", tmp_path)
    assert rc == 0 and _rows(d) == {"ext": ("confirmed", "software-only", "no stubs")}


def test_define_of_unknown_value_is_not_compiled(monkeypatch, reg):
    """A -D whose value the scan could not fix (flags of alternative branches) makes no compile."""
    from types import SimpleNamespace

    from archaudit.cuda.preproc import UNKNOWN_VALUE

    monkeypatch.setattr(V, "compile_tu", lambda *a: pytest.fail("compiled"))
    rec = SimpleNamespace(name="kda", generator=("k.py", 3, "gen"), sources=["pkg/k.cu"], build_admits=frozenset({"sm_100"}),
                          include_paths=[], defines={"TARGET_MINOR": UNKNOWN_VALUE}, cuda_flags=[],
                          verdicts={"sm_120": {"verdict": "hardware-bound", "reason": "r"}})
    [c] = V.verify(str(FIXTURES), [V.Candidate(rec, "hardware-bound", "r")], reg, "sm_120", "sm_120f",
                   V.Tools("nvcc", "v"), lambda top: [])
    assert (c.result, c.why) == ("not verified", "the value of the module's -DTARGET_MINOR is unknown to archaudit: "
                                                 "nothing to compile it with")


def _verify_with_sleeping_nvcc(tmp_path):
    """archaudit verify on fixtures/verify with a stand-in nvcc that sleeps: the process, and a
    function listing the stand-in's processes still alive (by a marker in their command line)."""
    import time

    marker = f"{os.getpid() % 1000}.{time.time_ns() % 1000}"
    fake = tmp_path / "nvcc"
    fake.write_text(f'#!/bin/sh\n[ "$1" = --version ] && {{ echo "release 13.0, V13.0.88"; exit 0; }}\nexec sleep {marker}\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    p = subprocess.Popen([sys.executable, "-m", "archaudit", "verify", str(FIXTURES / "verify"), "-t", "sm_120", "-j", "2"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)

    def sleepers():
        out = []
        for pid in os.listdir("/proc"):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    if marker.encode() in fh.read():
                        out.append(pid)
            except OSError:
                pass
        return out

    deadline = time.monotonic() + 240
    while not sleepers() and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.2)
    assert sleepers(), "the compiles never started"
    return p, sleepers


def test_killed_verify_leaves_no_compile(tmp_path):
    """Fresh case (processes): SIGKILL of verify while compiles run. Each compile runs in a session
    of its own (so that a timeout ends nvcc's children with it), which no signal to verify's group
    reaches: they ran on after verify was gone. The kernel now ends each when verify ends."""
    import signal
    import time

    p, sleepers = _verify_with_sleeping_nvcc(tmp_path)
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=60)
    deadline = time.monotonic() + 5
    while sleepers() and time.monotonic() < deadline:
        time.sleep(0.05)
    left = sleepers()
    for pid in left:
        os.kill(int(pid), signal.SIGKILL)
    assert left == []


def test_terminated_verify_ends_its_compiles(tmp_path):
    """SIGTERM (as `timeout` sends) while compiles run: exit 130 and no compile process left (each
    runs in a session of its own, so the signal does not reach it by itself)."""
    import signal
    import time

    p, sleepers = _verify_with_sleeping_nvcc(tmp_path)
    p.send_signal(signal.SIGTERM)
    _out, err = p.communicate(timeout=60)
    assert p.returncode == 130
    assert err.splitlines()[-1] == "archaudit verify: interrupted; the compiles in flight were ended"
    time.sleep(0.5)
    assert sleepers() == []


@pytest.mark.nvcc
@pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")
def test_source_lists_fixture_with_nvcc():
    """fixtures/jitvariants choices.py: a module compiling one of two source lists is partial on
    sm_120 when nvcc compiles one list and rejects the other; hardware-bound when it rejects both."""
    rc, d = _verify(FIXTURES / "jitvariants", "--module", "program_*", "--module", "datacenter_*")
    assert rc == 0
    assert _rows(d) == {
        "program_{program}": ("confirmed", "partial", "some source lists rejected"),
        "datacenter_{program}": ("confirmed", "hardware-bound", "rejected"),
    }
