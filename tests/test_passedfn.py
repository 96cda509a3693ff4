"""A function handed in as an argument and called by its parameter's name (fixtures/passedfn):
the call graph follows `factory(*args)` to what the callers on the searched path pass, through a
static method that hands its own parameter on, so the tcgen05 module behind it is seen."""
from archaudit.pipeline import scan

from conftest import FIXTURES

ROOT = FIXTURES / "passedfn"
SPLIT = "passkit/split.py"


def test_the_module_built_by_the_passed_function_decides(reg):
    r = scan(ROOT, [reg.parse("sm_120")])
    assert [(f.gate.path, f.gate.line, f.verdict) for f in r.findings] == [(SPLIT, 28, "hardware-bound")]
    f = r.findings[0]
    assert f.reason == ("mma_{name}: ptx.tcgen05 ('tcgen05.') at passkit/data/csrc/mma.cu:4 is not supported on "
                        "sm_120f (supported on: sm_100a, sm_100f, sm_103a, sm_103f, sm_110a, sm_110f); "
                        "prep: every source builds for sm_120f")
    assert f.patch is None
    assert [(e.path, e.line, e.feature) for e in f.evidence] == [("passkit/data/csrc/mma.cu", 4, "ptx.tcgen05")]
    assert [(ln.kind, ln.line, ln.text, ln.how) for ln in f.chain] == [
        ("region", 28, "torch.cuda.get_device_capability()[0] == 10", "then"),
        ("call", 29, "passkit.split.Launch.__init__", "constructor"),
        ("call", 24, "passkit.split.Launch._build", "self-method"),
        ("call", 20, "passkit.split.build", "direct"),
        ("call", 14, "passkit.split._load", "argument:factory"),
        ("jit-module", 9, "mma_{name}", "return-value+build"),
        ("region", 28, "torch.cuda.get_device_capability()[0] == 10", "then"),
        ("call", 29, "passkit.split.Launch.__init__", "constructor"),
        ("jit-module", 23, "prep", "return-value+build"),
    ]
