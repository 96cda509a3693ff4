"""The JIT-module inventory (archaudit.verdict.inventory): one record per generator variant, the GPUs its
build flags admit, a verdict per target, and build-flag gates at the generators' defs."""
import json

import pytest

from archaudit.derived import patch_output
from archaudit.pipeline import scan
from archaudit.report.jsonout import to_json

from conftest import FIXTURES

ROOT = FIXTURES / "jitvariants"
ALL_GPUS = ["sm_75", "sm_80", "sm_86", "sm_87", "sm_88", "sm_89", "sm_90", "sm_100", "sm_103", "sm_107", "sm_110",
            "sm_120", "sm_121"]


@pytest.fixture(scope="module")
def result(reg):
    return scan(ROOT, [reg.parse("sm_120")])


def test_one_record_per_variant_bound_through_its_callers(result):
    got = sorted((m.generator[1], m.generator[2].rsplit(".", 1)[-1], m.name, sorted(m.build_admits),
                  m.verdicts["sm_120"]["verdict"]) for m in result.modules)
    assert got == [
        # flagparams.py: the flags are a parameter the callers fill: one record per caller, with
        # its architectures (an arch list += onto the caller's own list)
        (10, "gen_fused_sm120_module", "fused_120", ["sm_120", "sm_121"], "admitted"),
        # legacyflags.py: one variant passes no architecture flag (the JIT's default), the other
        # a table's -gencode; each variant's flags are its own
        (12, "gen_alltoall_module", "{alltoall|alltoall_legacy}", sorted(ALL_GPUS), "admitted"),
        (12, "gen_alltoall_module", "{alltoall|alltoall_sm100a}", ["sm_100"], "software-only"),
        (12, "gen_portable_module", "var_portable", ["sm_100"], "software-only"),
        # choices.py: the sources are one of a table's lists, picked by a run-time argument: judged
        # list by list, not as their union
        (15, "gen_program_module", "program_{program}", ["sm_100"], "partial"),
        (16, "gen_fused_sm100_module", "fused_100", ["sm_100", "sm_103", "sm_107"], "software-only"),
        (16, "gen_tcgen05_module", "var_tcgen05", ["sm_100"], "hardware-bound"),
        # backends.py: a caller fixing `backend` reaches one build call of the generator, never
        # the one under `elif backend == "hopper":`
        (19, "gen_portable_scale_module", "backend_portable_portable", sorted(ALL_GPUS), "admitted"),
        (24, "gen_datacenter_module", "datacenter_{program}", ["sm_100"], "hardware-bound"),
        (24, "gen_hopper_module", "var_hopper", ["sm_100", "sm_90"], "hardware-bound"),
        (25, "gen_hopper_fence_module", "backend_hopper_hopper", ["sm_90"], "hardware-bound"),
        # routes.py: the sources are picked from a table by Literal-annotated parameters: one
        # record per value, each with its own sources and verdict
        (28, "gen_stage_module", "stage_sm100a_gemm", ["sm_100"], "hardware-bound"),
        (28, "gen_stage_module", "stage_sm100a_quantize", ["sm_100"], "software-only"),
        (29, "gen_direct_module", "direct", ["sm_90"], "software-only"),
        # kdalike.py: a generic generator over (variant, target) Literals whose target flags and
        # define are keyword parameters of a shared builder; a wrapper fixing the variant is split
        # per target with that target's flags only
        (38, "gen_kind_variant_module", "kindvar_commit_sm100a", ["sm_100"], "hardware-bound"),
        (38, "gen_kind_variant_module", "kindvar_commit_sm103a", ["sm_103"], "hardware-bound"),
        (38, "gen_kind_variant_module", "kindvar_scale_sm100a", ["sm_100"], "software-only"),
        (38, "gen_kind_variant_module", "kindvar_scale_sm103a", ["sm_103"], "software-only"),
        # specs.py: sources read from a dataclass instance a helper builds in a loop and a lookup
        # loop returns (one per role), and from a NamedTuple constant
        (41, "gen_role_module", "role_commit", ["sm_100"], "hardware-bound"),
        (41, "gen_role_module", "role_scale", ["sm_100"], "software-only"),
        (48, "gen_kind_scale_module", "kindvar_scale_sm100a", ["sm_100"], "software-only"),
        (48, "gen_kind_scale_module", "kindvar_scale_sm103a", ["sm_103"], "software-only"),
        # a caller passing its own parameter on keeps gen_variant_module a generator of both; a
        # caller fixing the variant generates one
        (52, "gen_variant_module", "variant_large", ["sm_100"], "hardware-bound"),
        (52, "gen_variant_module", "variant_small", ["sm_100"], "software-only"),
        (55, "gen_pair_module", "pair_portable", ["sm_100"], "software-only"),
        (57, "gen_small_module", "variant_small", ["sm_100"], "software-only"),
        # one define per target: each variant is judged with its own, never with both at once
        # (onekind.cu's #error would fire on every target)
        (68, "gen_kind_module", "kind_sm100a", ["sm_100"], "software-only"),
        (68, "gen_kind_module", "kind_sm103a", ["sm_103"], "software-only"),
        # the same through a helper taking the target and its define as parameters
        (90, "gen_wrapped_kind_module", "wrapped_sm100a", ["sm_100"], "software-only"),
        (90, "gen_wrapped_kind_module", "wrapped_sm103a", ["sm_103"], "software-only"),
    ]


def test_build_flag_gates_at_the_generators(result):
    got = sorted(((f.gate.path, f.gate.line), f.gate.kind, f.verdict, sorted({(e.path, e.line) for e in f.evidence}))
                 for f in result.findings)
    assert got == [
        # the hopper build call of backends.py, judged in its own function (its source a
        # parameter) and through the one caller that reaches it; none at gen_portable_scale_module
        (("varlib/jit/backends.py", 11), "nvcc-flags", "unresolved", []),
        (("varlib/jit/backends.py", 25), "build-flags", "hardware-bound", [("varlib/data/csrc/hopper.cu", 2)]),
        # one of two source lists builds for sm_120, the other needs tcgen05: partial; every list
        # needs what sm_120 lacks: hardware-bound
        (("varlib/jit/choices.py", 17), "nvcc-flags", "partial", [("varlib/data/csrc/tcgen05.cu", 2)]),
        (("varlib/jit/choices.py", 26), "nvcc-flags", "hardware-bound", [("varlib/data/csrc/hopper.cu", 2),
                                                                         ("varlib/data/csrc/tcgen05.cu", 2)]),
        # `flags += get_nvcc_flags_list(supported_major_versions=[10])`, passed to a helper's build
        (("varlib/jit/flagparams.py", 18), "arch-list", "software-only", []),
        (("varlib/jit/kdalike.py", 38), "build-flags", "partial", [("varlib/data/csrc/tcgen05.cu", 2)]),
        (("varlib/jit/kdalike.py", 48), "build-flags", "software-only", []),
        (("varlib/jit/legacyflags.py", 12), "build-flags", "software-only", []),
        (("varlib/jit/modules.py", 12), "build-flags", "software-only", []),
        (("varlib/jit/modules.py", 16), "build-flags", "hardware-bound", [("varlib/data/csrc/tcgen05.cu", 2)]),
        (("varlib/jit/modules.py", 24), "build-flags", "hardware-bound", [("varlib/data/csrc/hopper.cu", 2)]),
        # the flags written at the build call are the Python gate scan's nvcc-flags gate, judged
        # through the build it is an argument of
        (("varlib/jit/modules.py", 31), "nvcc-flags", "software-only", []),
        # variants that differ: partial, with the evidence of the one that cannot build for sm_120
        (("varlib/jit/routes.py", 28), "build-flags", "partial", [("varlib/data/csrc/tcgen05.cu", 2)]),
        (("varlib/jit/routes.py", 52), "build-flags", "partial", [("varlib/data/csrc/tcgen05.cu", 2)]),
        (("varlib/jit/routes.py", 57), "build-flags", "software-only", []),
        (("varlib/jit/specs.py", 41), "build-flags", "partial", [("varlib/data/csrc/tcgen05.cu", 2)]),
        (("varlib/jit/specs.py", 57), "nvcc-flags", "software-only", []),
        (("varlib/jit/specs.py", 68), "build-flags", "software-only", []),
        (("varlib/jit/specs.py", 90), "build-flags", "software-only", []),
    ]
    p17 = next(f for f in result.findings if f.gate.path.endswith("choices.py") and f.gate.line == 17)
    assert p17.reason.startswith("program_{program}: the build compiles one of 2 source lists, chosen by its "
                                 "arguments; on sm_120f every source of 1 of them builds and 1 hold one that cannot: "
                                 "ptx.tcgen05 ('tcgen05.') at varlib/data/csrc/tcgen05.cu:2")
    g12 = next(f.gate for f in result.findings if f.gate.line == 12)
    p28 = next(f for f in result.findings if f.gate.path.endswith("routes.py") and f.gate.line == 28)
    assert "real kernels for sm_120f from stage_sm100a_quantize; not from the others: stage_sm100a_gemm:" in p28.reason
    assert p28.patch and "compute_120f" in p28.patch
    # a build whose flags differ per variant (`_KIND_FLAGS[target]`): the edit is verified against
    # what the gate admitted plus what the added flag gives, not against every variant's flags
    k68 = next(f for f in result.findings if f.gate.path.endswith("specs.py") and f.gate.line == 68)
    assert k68.patch and "compute_120f,code=sm_120f" in k68.patch
    # kdalike.py:48 is software-only, but its build call (in the shared gen_kind_spec) also builds
    # the hardware-bound commit variant: no -gencode is added there, the patch is manual
    k48 = next(f for f in result.findings if f.gate.path.endswith("kdalike.py") and f.gate.line == 48)
    assert k48.patch is None
    assert ("patch plan, manual for varlib/jit/kdalike.py:28: varlib/jit/kdalike.py:28: no patch, edit by hand "
            "(not edited: this build call also builds the module kindvar_commit_sm100a (generator "
            "varlib.jit.kdalike.gen_kind_variant_module), hardware-bound for sm_120") in k48.reason
    # legacyflags.py:12: the build call is shared with the legacy variant, which builds for the
    # GPU it runs on (admitted): the -gencode is added there
    a12 = next(f for f in result.findings if f.gate.path.endswith("legacyflags.py"))
    assert a12.patch and '"-DENABLE_BF16", "-gencode=arch=compute_120f,code=sm_120f"]' in a12.patch
    # the partial generator over both variants: its plan may enable its own hardware-bound variant
    k38 = next(f for f in result.findings if f.gate.path.endswith("kdalike.py") and f.gate.line == 38)
    assert k38.verdict == "partial" and k38.patch and "compute_120f,code=sm_120f" in k38.patch
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


def test_patch_names_each_finding_whose_edit_is_elsewhere(result, reg):
    # a build-flag gate at a generator's def is edited at its build call: `archaudit patch` reports
    # the finding itself too, with the edit's place, or why that edit was refused
    out = patch_output(result, ROOT, reg.parse("sm_120").gpu, False, reg)
    by_place = {(path, line): (mark, text) for mark, path, line, text in out.done}
    assert by_place[("varlib/jit/kdalike.py", 48)] == (
        "NOT patched", "by the edit at varlib/jit/kdalike.py:28: not edited: this build call also builds the module "
        "kindvar_commit_sm100a (generator varlib.jit.kdalike.gen_kind_variant_module), hardware-bound for sm_120; "
        "the target's -gencode added here would let sm_120 build that module too: give this module its own flags "
        "by hand")
    assert by_place[("varlib/jit/legacyflags.py", 12)] == (
        "patched", "by the edit at varlib/jit/legacyflags.py:23: add -gencode=arch=compute_120f,code=sm_120f to "
        "extra_cuda_cflags (appended to the list literal)")
    # the build call's own line is still listed once
    assert by_place[("varlib/jit/kdalike.py", 28)][0] == "NOT patched"
    assert [p for _m, p, _l, _t in out.done].count("varlib/jit/kdalike.py") == 2
