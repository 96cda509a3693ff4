"""Per-target predictions on the fixtures in fixtures/cuda (exact files, lines and statuses)."""
from __future__ import annotations

from pathlib import Path

import pytest

from archaudit.cuda import ruleset
from archaudit.cuda.tu import CudaProject, FsReader

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "cuda"


@pytest.fixture(scope="module")
def project():
    return CudaProject(FsReader(str(FIX)), [""], {})


def analyse(project, tu, target):
    return project.analyse_tu(tu, ruleset.target_by_name(target))


# (file, target) -> (prediction, (kind-or-feature, path, line) of the first evidence or None)
EXPECTED = {
    ("wgmma_guarded.cu", "sm_90a"): ("builds", None),
    ("wgmma_guarded.cu", "sm_120f"): ("stub", ("empty-kernel", "wgmma_guarded.cu", 2)),
    ("wgmma_unguarded.cu", "sm_90a"): ("builds", None),
    ("wgmma_unguarded.cu", "sm_120f"): ("fails", ("ptx.wgmma", "wgmma_unguarded.cu", 4)),
    ("wgmma_unguarded.cu", "sm_100f"): ("fails", ("ptx.wgmma", "wgmma_unguarded.cu", 4)),
    ("family_trap.cu", "sm_100f"): ("builds", None),
    ("family_trap.cu", "sm_120f"): ("stub", ("__trap", "family_trap.cu", 7)),
    ("macro_chain.cu", "sm_90a"): ("builds", None),
    ("macro_chain.cu", "sm_90"): ("stub", ("CUTLASS_NOT_IMPLEMENTED", "macro_chain.cu", 14)),
    ("macro_chain.cu", "sm_120f"): ("stub", ("CUTLASS_NOT_IMPLEMENTED", "macro_chain.cu", 14)),
    ("asm_macro.cu", "sm_90a"): ("builds", None),
    ("asm_macro.cu", "sm_120f"): ("fails", ("ptx.wgmma", "asm_macro.cu", 6)),
    ("unused_code.cu", "sm_120f"): ("builds", None),
    ("unused_code.cu", "sm_80"): ("builds", None),
    ("template_kernel.cu", "sm_120f"): ("builds", None),
    ("template_kernel.cu", "sm_90a"): ("builds", None),
    ("arch_error.cu", "sm_80"): ("fails", ("#error", "arch_error.cu", 2)),
    ("arch_error.cu", "sm_90a"): ("builds", None),
    ("smem.cu", "sm_90a"): ("builds", None),
    ("smem.cu", "sm_120f"): ("stub", ("smem", "smem.cu", 11)),
    ("atom_use.cu", "sm_90a"): ("builds", None),
    ("atom_use.cu", "sm_120f"): ("stub", ("atom", "atom_use.cu", 10)),
    ("intrinsic.cu", "sm_80"): ("fails", ("intrinsic.cluster_dims", "intrinsic.cu", 2)),
    ("intrinsic.cu", "sm_90a"): ("builds", None),
    ("elif_chain.cu", "sm_80"): ("stub", ("__trap", "elif_chain.cu", 10)),
    ("elif_chain.cu", "sm_100f"): ("builds", None),
    ("elif_chain.cu", "sm_120f"): ("builds", None),
    ("cycle/main.cu", "sm_120f"): ("unknown", None),
    # <nv/target> branches are preprocessor regions: sm_100 asm in an NV_PROVIDES_SM_100 branch
    # is not compiled on sm_80; the NV_PROVIDES_SM_90 branch of NV_DISPATCH_TARGET is on sm_90a
    ("nv_target.cu", "sm_80"): ("builds", None),
    ("nv_target.cu", "sm_90a"): ("fails", ("ptx.f32x2_arith", "nv_target.cu", 16)),
    ("nv_target.cu", "sm_100f"): ("builds", None),
}


@pytest.mark.parametrize("key", sorted(EXPECTED), ids=lambda k: f"{k[0]}-{k[1]}")
def test_prediction(project, key):
    tu, target = key
    pred, ev = EXPECTED[key]
    res = analyse(project, tu, target)
    assert res.prediction == pred, res.reason
    if ev is None:
        return
    what, path, line = ev
    if pred == "fails":
        b = res.blocking[0]
        assert (b.feature, b.path, b.line) == (what, path, line)
        assert target not in b.supported_on
    else:
        s = res.stubs[0]
        assert (s.kind, s.path, s.line) == (what, path, line)


def statuses(res):
    return {(k.name, k.path, k.line): (k.status, k.guard_line) for k in res.kernels}


def test_whole_body_guard_is_an_empty_kernel(project):
    assert statuses(analyse(project, "wgmma_guarded.cu", "sm_120f")) == {
        ("wgmma_only_kernel", "wgmma_guarded.cu", 2): ("empty", 3)
    }
    assert statuses(analyse(project, "wgmma_guarded.cu", "sm_90a")) == {
        ("wgmma_only_kernel", "wgmma_guarded.cu", 2): ("real", None)
    }


def test_template_kernel_whose_body_excludes_sm120_is_empty_there(project):
    # flashinfer 0.6.15 lamport_style_one_shot_all_reduce_norm_kernel: launched on every GPU,
    # empty on sm_120 (body under __CUDA_ARCH__ >= 900 && < 1200); a guarded call alone is not
    assert statuses(analyse(project, "lamport_guard.cu", "sm_120f")) == {
        ("lamport_norm_kernel", "lamport_guard.cu", 10): ("empty", 12),
        ("plain_norm_kernel", "lamport_guard.cu", 18): ("real", None),
    }
    res = analyse(project, "lamport_guard.cu", "sm_120f")
    assert (res.prediction, res.stubs[0].kind, res.stubs[0].guard_line) == ("stub", "empty-kernel", 12)
    for t in ("sm_90a", "sm_100f"):
        assert {k.status for k in analyse(project, "lamport_guard.cu", t).kernels} == {"real"}


def test_partial_module_names_trap_and_real_kernels(project):
    res = analyse(project, "family_trap.cu", "sm_120f")
    assert statuses(res) == {
        ("tc_kernel", "family_trap.cu", 2): ("trap", 3),
        ("plain_kernel", "family_trap.cu", 11): ("real", None),
    }
    assert statuses(analyse(project, "family_trap.cu", "sm_100f"))[("tc_kernel", "family_trap.cu", 2)] == ("real", None)


def test_template_kernel_is_listed_only_when_instantiated(project):
    res = analyse(project, "template_kernel.cu", "sm_120f")
    assert statuses(res) == {("copy_kernel", "template_kernel.cu", 16): ("real", None)}
    feats = {(f.feature, f.line) for f in res.features}
    assert ("ptx.ld_global_nc_no_allocate", 5) in feats
    assert not any(f.feature == "ptx.wgmma" for f in res.features)  # guarded away on sm_120f
    feats90 = {(f.feature, f.line) for f in analyse(project, "template_kernel.cu", "sm_90a").features}
    assert ("ptx.wgmma", 12) in feats90


def test_nv_target_branches_are_regions(project):
    from archaudit.cuda.preproc import nv_query_condition

    ff = project.facts("nv_target.cu")
    conds = {ff.program.region_line[r]: c for r, c in enumerate(ff.program.region_cond) if r}
    assert conds == {
        7: "(defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000)",
        10: "",  # the else branch of NV_IF_ELSE_TARGET
        15: "(defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 800)",
        16: "(defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900)",
        21: "defined(__CUDA_ARCH__)",
    }
    feats = {t: [(f.feature, f.line) for f in analyse(project, "nv_target.cu", t).features] for t in ("sm_80", "sm_100f")}
    assert feats == {"sm_80": [], "sm_100f": [("ptx.f32x2_arith", 8), ("ptx.f32x2_arith", 16)]}
    assert nv_query_condition("NV_HAS_FEATURE_SM_100f") == (
        "(defined(__CUDA_ARCH_FAMILY_SPECIFIC__) && __CUDA_ARCH_FAMILY_SPECIFIC__ >= 1000 && __CUDA_ARCH_FAMILY_SPECIFIC__ < (1000 / 100 + 1) * 100)")
    assert nv_query_condition("MY_OWN_QUERY") == "__archaudit_unknown_value__"  # undecided, never guessed


def test_nv_target_family_and_arch_specific_queries(tmp_path):
    (tmp_path / "q.cu").write_text(
        "#include <nv/target>\n__global__ void k(int* o) {\n"
        "  NV_IF_TARGET(NV_HAS_FEATURE_SM_100f, (asm volatile(\"tcgen05.fence::before_thread_sync;\");))\n"
        "  NV_IF_TARGET(NV_HAS_FEATURE_SM_90a, (asm volatile(\"wgmma.fence.sync.aligned;\");))\n  o[0] = 1;\n}\n")
    proj = CudaProject(FsReader(str(tmp_path)), [""], {})
    lines = {t: sorted(f.line for f in proj.analyse_tu("q.cu", ruleset.target_by_name(t)).features)
             for t in ("sm_90a", "sm_100f", "sm_103f", "sm_120f", "sm_90")}
    assert lines == {"sm_90a": [4], "sm_100f": [3], "sm_103f": [3], "sm_120f": [], "sm_90": []}


def test_unused_code_is_not_needed(project):
    res = analyse(project, "unused_code.cu", "sm_120f")
    assert res.blocking == [] and res.stubs == []


def test_guards_are_reported_with_their_state(project):
    res = analyse(project, "macro_chain.cu", "sm_120f")
    g = {(x.path, x.line): x.state for x in res.active_guards}
    assert g[("macro_chain.cu", 3)] is False  # defined(MY_MMA_SM90A_ENABLED): derived from arch macros
    assert g[("macro_chain.cu", 10)] is False
    assert g[("macro_chain.cu", 13)] is True


def test_include_cycle_terminates_and_reports_missing_include(project):
    res = analyse(project, "cycle/main.cu", "sm_100f")
    assert res.prediction == "unknown"
    assert "missing/generated_config.inc" in res.reason
    assert set(res.closure) == {"cycle/main.cu", "cycle/a.cuh", "cycle/b.cuh"}
    assert any(d.kind == "unresolved-include" and d.line == 2 for d in res.diagnostics)
    assert ("ptx.fence_proxy_async", "cycle/b.cuh", 5) in {(f.feature, f.path, f.line) for f in res.features}


def test_jit_defines_are_injectable(tmp_path):
    (tmp_path / "k.cu").write_text(
        "__global__ void k(int* o) {\n#ifdef ENABLE_SM90_PATH\n  asm volatile(\"wgmma.fence.sync.aligned;\");\n#endif\n  o[0] = 1;\n}\n"
    )
    t = ruleset.target_by_name("sm_120f")
    assert CudaProject(FsReader(str(tmp_path)), [""], {}).analyse_tu("k.cu", t).prediction == "builds"
    res = CudaProject(FsReader(str(tmp_path)), [""], {"ENABLE_SM90_PATH": "1"}).analyse_tu("k.cu", t)
    assert (res.prediction, res.blocking[0].line) == ("fails", 3)


def test_unreadable_tu_is_unknown(project):
    res = analyse(project, "does_not_exist.cu", "sm_90a")
    assert res.prediction == "unknown" and res.diagnostics[0].kind == "unreadable"


def test_results_are_plain_data(project):
    import pickle

    ff = project.facts("family_trap.cu")
    assert pickle.loads(pickle.dumps(ff)).kernels == ff.kernels


def test_exports_map_entry_points_to_kernels(project):
    r = analyse(project, "exports_partial.cu", "sm_120f")
    assert {k: (e.function, e.line, e.kernels) for k, e in r.exports.items()} == {
        "fused_norm": ("fused_norm", 24, ["norm_kernel"]),
        "plain_reduce": ("plain_reduce", 25, ["reduce_kernel"]),
    }
    assert [(k.name, k.status, k.guard_line) for k in r.kernels] == [
        ("norm_kernel", "empty", 7), ("reduce_kernel", "real", None)]
    r90 = analyse(project, "exports_partial.cu", "sm_90a")
    assert [(k.name, k.status) for k in r90.kernels] == [("norm_kernel", "real"), ("reduce_kernel", "real")]


def test_error_not_tied_to_the_architecture_is_unknown_not_fails(project):
    r = analyse(project, "env_error.cu", "sm_120f")
    assert r.prediction == "unknown"
    assert r.blocking == []
    assert "env_error.cu:4 fires on every target" in r.reason
