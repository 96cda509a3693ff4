"""The fast forms of the CUDA fact patterns find what the plain forms find (`\\bX` written
`X(?<!\\wX)`, lookbehinds moved after the literal, guards by words), on the cases that tell them
apart; and the warm-up's named-source search equals its pattern's findall."""
import re

from archaudit.cuda import features as F
from archaudit.workers import _NAMED_SOURCE, named_sources

# the patterns as they were written before they were made to start with their literal
PLAIN_SHARED = re.compile(F._SHARED.pattern.replace(
    "__shared__(?<!\\w__shared__)(?<!extern__shared__)(?<!extern __shared__)",
    "(?<!extern)(?<!extern )\\b__shared__"))
PLAIN_DYN_SMEM = re.compile(F._DYN_SMEM.pattern.replace(
    "cudaFuncSetAttribute(?<!\\wcudaFuncSetAttribute)", "\\bcudaFuncSetAttribute"))

CODE = """
__shared__ float a[32];
extern __shared__ char dyn[];
extern__shared__ int b[4];
x__shared__ int c[4];
static __shared__ __align__(16) half d[8][4];
cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 1024);
mycudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 2048);
"""


def test_shared_memory_patterns_match_as_their_plain_forms():
    for fast, plain in ((F._SHARED, PLAIN_SHARED), (F._DYN_SMEM, PLAIN_DYN_SMEM)):
        assert [m.span() for m in fast.finditer(CODE)] == [m.span() for m in plain.finditer(CODE)]
    ff = F.extract("k.cu", CODE.encode())
    assert [(s.line, s.kind, s.expr) for s in ff.smem] == [
        (2, "static", "(32)"), (6, "static", "(8)*(4)"), (7, "dynamic", "1024")]


def test_traps_and_asm_are_found_behind_their_guards():
    code = b"""
__device__ void f() { __trap(); }
void __trap();
__device__ void g() { asm volatile("wgmma.fence.sync.aligned;"); }
__device__ void h() { CUTE_INVALID_CONTROL_PATH("no"); }
"""
    ff = F.extract("t.cu", code)
    assert [(t.line, t.kind) for t in ff.traps] == [(2, "__trap"), (5, "CUTE_INVALID_CONTROL_PATH")]
    assert [(a.line, [h[0] for h in a.hits]) for a in ff.asm] == [(4, ["ptx.wgmma"])]
    assert F.extract("n.cu", b"int main() { return 0; }\n").traps == []


def test_a_rule_prefix_is_skipped_only_when_its_leading_identifier_is_absent():
    assert F._lead_in("cuda::ptx::", "cuda\nx")
    assert not F._lead_in("SM100_MMA_", "SM90_x\ncute")
    assert F._lead_in("SM100_MMA_", "xSM100_MMA_F16")  # inside a longer identifier
    assert F._lead_in("2x::", "")  # no leading letter: the body itself is searched
    ff = F.extract("r.cu", b"using Op = cute::SM100_MMA_F16BF16_SS<half>;\n")
    assert {h.rule for h in ff.idents} >= {"atom.sm100_umma_f16"}


def test_named_sources_equal_the_pattern_findall():
    cases = [b"a.cu.b.cpp x", b".cu", b"..cu", b"foo.cu.o", b"+x.cc-y.cxx", b"a.cuh b.cu", b"x/y/z.cu",
             b"\xe9a.cu", b"a.cu" * 3, b'jit("norm.cu", csrc / "x.cpp")', b"no sources here", b""]
    for c in cases:
        assert named_sources(c) == set(_NAMED_SOURCE.findall(c)), c
    assert named_sources(b'jit("norm.cu", csrc / "x.cpp")') == {b"norm.cu", b"x.cpp"}
