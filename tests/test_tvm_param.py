"""TVM targets that reach a gate as a parameter annotated `target: Target`, read through
tilelang's arch reader (fixtures/tvmparam): the string handling (`rstrip`, slices, unpacking
a string), a try whose handler re-raises, and `conditions.append(...)` are followed; an
unannotated or spelled target makes no gate."""
from archaudit.pipeline import scan

from conftest import FIXTURES

FROM_90 = ["sm_90", "sm_100", "sm_103", "sm_107", "sm_110", "sm_120", "sm_121"]
PARAM = "tvm-target parameter target: tvm.target.Target: the target the device gives"


def _scan(reg):
    return scan(FIXTURES / "tvmparam", [reg.parse("sm_120")])


def test_param_gates(reg):
    res = _scan(reg)
    got = [(g.path, g.line, g.kind, g.region, reg.sort_names(g.admits)) for g in res.gates]
    assert got == [
        ("tlpass/layout.py", 8, "capability-compare", "branch", FROM_90),
        ("tlpass/layout.py", 10, "capability-compare", "branch", ["sm_80", "sm_86", "sm_87", "sm_88", "sm_89"]),
        # the arch reader's own branch (two-digit arch strings): a test of the arch, if not a feature
        ("tlpass/nvcc.py", 9, "capability-compare", "branch",
         ["sm_75", "sm_80", "sm_86", "sm_87", "sm_88", "sm_89", "sm_90"]),
        ("tlpass/pipeline.py", 17, "predicate-call", "branch", FROM_90),
        ("tlpass/pipeline.py", 23, "predicate-call", "after-early-exit", FROM_90),
    ]
    by_line = {(g.path, g.line): g for g in res.gates}
    # the annotated parameter is the GPU's own target, said in the evidence
    assert PARAM in by_line[("tlpass/pipeline.py", 17)].via
    assert PARAM in by_line[("tlpass/pipeline.py", 23)].via
    assert by_line[("tlpass/pipeline.py", 17)].resolution == (
        "inferred: tlpass.nvcc.get_target_compute_version -> tlpass.nvcc.have_tma"
        " -> tlpass.nvcc.parse_compute_version -> tlpass.pipeline.allow_warp_specialized")
    # no parameter there: the target in scope, Target.current(), is the device's
    assert "tvm-target tvm.target.Target.current(): the target the device gives" in by_line[("tlpass/layout.py", 8)].via
    # an unannotated target (:28) and one the code spells (:35) are no gates
    assert not {g.line for g in res.gates if g.path == "tlpass/pipeline.py"} & {28, 35}


def test_param_findings(reg):
    res = _scan(reg)
    # layout.py:10 is an elif that sm_120 never reaches (:8 takes it): no finding
    assert [(f.gate.path, f.gate.line, f.verdict) for f in res.findings] == [("tlpass/nvcc.py", 9, "unresolved")]
    assert res.findings[0].reason.endswith(
        "code outside the scan whose GPU support is not analysed: tvm.cuda, tvm.target.Target.current")
