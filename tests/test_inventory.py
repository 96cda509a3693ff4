"""The JIT-module inventory (archaudit.inventory): one record per generator variant, the GPUs its
build flags admit, a verdict per target, and build-flag gates at the generators' defs."""
import json

import pytest

from archaudit.pipeline import scan
from archaudit.report.jsonout import to_json

from conftest import FIXTURES

ROOT = FIXTURES / "jitvariants"


@pytest.fixture(scope="module")
def result(reg):
    return scan(ROOT, [reg.parse("sm_120")])


def test_one_record_per_variant_bound_through_its_callers(result):
    got = sorted((m.generator[1], m.generator[2].rsplit(".", 1)[-1], m.name, sorted(m.build_admits),
                  m.verdicts["sm_120"]["verdict"]) for m in result.modules)
    assert got == [
        (12, "gen_portable_module", "var_portable", ["sm_100"], "software-only"),
        (16, "gen_tcgen05_module", "var_tcgen05", ["sm_100"], "hardware-bound"),
        (24, "gen_hopper_module", "var_hopper", ["sm_100", "sm_90"], "hardware-bound"),
        (29, "gen_direct_module", "direct", ["sm_90"], "software-only"),
    ]


def test_build_flag_gates_at_the_generators(result):
    got = sorted((f.gate.line, f.gate.kind, f.verdict, sorted({(e.path, e.line) for e in f.evidence}))
                 for f in result.findings)
    assert got == [
        (12, "build-flags", "software-only", []),
        (16, "build-flags", "hardware-bound", [("varlib/data/csrc/tcgen05.cu", 2)]),
        (24, "build-flags", "hardware-bound", [("varlib/data/csrc/hopper.cu", 2)]),
        # the flags written at the build call are the Python gate scan's nvcc-flags gate, judged
        # through the build it is an argument of
        (31, "nvcc-flags", "software-only", []),
    ]
    g12 = next(f.gate for f in result.findings if f.gate.line == 12)
    assert g12.expr == "-gencode=arch=compute_100a,code=sm_100a" and g12.admits == frozenset({"sm_100"})


def test_modules_in_json(result, reg):
    d = json.loads(to_json(result, reg))
    assert d["schema_version"] == 2
    m = next(m for m in d["modules"] if m["name"] == "var_tcgen05")
    assert m["generator"] == {"path": "varlib/jit/modules.py", "line": 16,
                              "function": "varlib.jit.modules.gen_tcgen05_module"}
    assert m["sources"] == ["varlib/data/csrc/tcgen05.cu"] and m["build_admits"] == ["sm_100"]
    v = m["verdicts"]["sm_120"]
    assert (v["verdict"], v["compile_target"]) == ("hardware-bound", "sm_120f")
    assert [(e["path"], e["line"], e["feature"]) for e in v["evidence"]][:1] == [
        ("varlib/data/csrc/tcgen05.cu", 2, "ptx.tcgen05")]
