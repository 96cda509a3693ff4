"""Rule data (rules/instructions.toml, rules/macros.toml) and its loader."""
from __future__ import annotations

import re
import shutil

import pytest

from archaudit.cuda.ruleset import (
    all_compile_targets,
    expand_supported,
    feature_rule,
    feature_rules,
    predefined_macros,
)
from archaudit.targets import CompileTarget


def T(name: str) -> CompileTarget:
    for t in all_compile_targets():
        if t.name == name:
            return t
    raise KeyError(name)


def test_all_compile_targets():
    names = [t.name for t in all_compile_targets()]
    assert names[0] == "sm_75"
    assert "sm_90a" in names and "sm_90f" not in names and "sm_101" not in names
    assert {"sm_120", "sm_120a", "sm_120f", "sm_121f", "sm_103f", "sm_110a"} <= set(names)


def test_wgmma_exact():
    assert feature_rule("ptx.wgmma").supported_on == {"sm_90a"}


def test_tcgen05_exact():
    r = feature_rule("ptx.tcgen05")
    assert r.supported_on == {"sm_100a", "sm_100f", "sm_103a", "sm_103f", "sm_110a", "sm_110f"}
    assert not r.supports(T("sm_120f")) and not r.supports(T("sm_100"))


def test_block_scaled_mma():
    r = feature_rule("ptx.mma_block_scale")
    assert r.supported_on == {"sm_120a", "sm_120f", "sm_121a", "sm_121f"}
    assert r.supports(T("sm_120f"))


def _names(lo: tuple[int, int]) -> set[str]:
    return {t.name for t in all_compile_targets() if (t.major, t.minor) >= lo}


def test_mma_fp8_and_cp_async():
    assert feature_rule("ptx.mma_fp8").supported_on == _names((8, 9))
    assert feature_rule("ptx.cp_async").supported_on == _names((8, 0))


def test_setmaxnreg_needs_a_or_f():
    s = feature_rule("ptx.setmaxnreg").supported_on
    assert s == {t.name for t in all_compile_targets() if t.major >= 9 and t.variant in ("a", "f")}
    assert "sm_120f" in s and "sm_90" not in s and "sm_100" not in s


def test_tma_everywhere_from_sm90_but_cute_atom_not_on_plain_blackwell():
    assert feature_rule("ptx.cp_async_bulk_tensor").supported_on == _names((9, 0))
    atom = feature_rule("atom.sm90_tma").supported_on
    assert "sm_90" in atom and "sm_120f" in atom and "sm_120" not in atom and "sm_100" not in atom


def test_atoms():
    assert feature_rule("atom.sm90_gmma").supported_on == {"sm_90a"}
    assert feature_rule("atom.sm120_block_scaled").supported_on == {"sm_120a", "sm_120f", "sm_121a", "sm_121f"}
    assert feature_rule("atom.sm100_umma_s8").supported_on == {"sm_100a", "sm_110a"}


@pytest.mark.parametrize(
    "rule_id, text",
    [
        ("ptx.wgmma", "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1}, %2, %3, p, 1, 1, 0, 1;"),
        ("ptx.tcgen05", "tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;"),
        ("ptx.mma_fp8", "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"),
        ("ptx.mma_block_scale", "mma.sync.aligned.kind::mxf4nvf4.block_scale.scale_vec::4X.m16n8k64.row.col.f32.e2m1.e2m1.f32.ue4m3 "),
        ("ptx.mbarrier_try_wait", "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;"),
        ("ptx.cp_async_bulk_tensor", "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"),
        ("ptx.multimem", "multimem.ld_reduce.relaxed.sys.global.add.v4.f32 {%0,%1,%2,%3}, [%4];"),
        ("ptx.griddepcontrol", "griddepcontrol.wait;"),
        ("ptx.cvt_fp4_fp6", "cvt.rn.satfinite.e2m1x2.f32 byte0, %2, %1;"),
        ("atom.sm90_gmma", "using Mma = SM90::GMMA::MMA_64x64x16_F32BF16BF16_SS<GMMA::Major::K, GMMA::Major::K>;"),
        ("atom.sm90_gmma", "SM90_64x64x16_F32BF16BF16_SS"),
        ("atom.sm100_umma_f16", "SM100_MMA_F16BF16_SS<T, T, float, 128, 256, UMMA::Major::K, UMMA::Major::K>"),
        ("atom.sm120_f8f6f4", "SM120_16x8x32_TN<float_e4m3_t, float_e4m3_t, float>"),
        ("atom.arch_tag_sm90", "using ArchTag = cutlass::arch::Sm90;"),
        ("intrinsic.cluster_dims", "__global__ void __cluster_dims__(2, 1, 1) k()"),
    ],
)
def test_patterns_match(rule_id, text):
    assert feature_rule(rule_id).pattern.search(text)


@pytest.mark.parametrize(
    "rule_id, text",
    [
        ("ptx.mma_bf16_m16n8k16", "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16"),
        ("ptx.cp_async_bulk", "cp.async.bulk.tensor.2d.shared::cluster.global"),
        ("ptx.cp_async", "cp.async.bulk.shared::cluster.global"),
        ("ptx.mbarrier", "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"),
        ("atom.sm120_f8f6f4", "SM120_16x8x64_TN_VS<float_e2m1_t, float_e2m1_t, float, float_ue4m3_t, 16>"),
    ],
)
def test_patterns_do_not_overmatch(rule_id, text):
    assert not feature_rule(rule_id).pattern.search(text)


def test_rules_well_formed():
    assert len(feature_rules()) >= 60
    ids = [r.id for r in feature_rules()]
    assert len(ids) == len(set(ids))
    for r in feature_rules():
        assert r.kind in ("ptx", "intrinsic", "atom")
        assert r.supported_on, r.id


def test_expand_supported_grammar():
    assert expand_supported(["sm_100..sm_103:a"]) == {"sm_100a", "sm_103a"}
    assert expand_supported(["sm_120+:p"]) == {"sm_120", "sm_121"}
    assert expand_supported(["sm_90+", "-sm_90+:p"]) >= {"sm_90a", "sm_100f"}
    with pytest.raises(ValueError):
        expand_supported(["sm_90f"])


def test_macros_sm90a():
    m = predefined_macros(T("sm_90a"))
    assert m["__CUDA_ARCH__"] == 900
    assert m["__CUDA_ARCH_FEAT_SM90_ALL"] == 1
    assert m["__CUDA_ARCH_SPECIFIC__"] == 900 and m["__CUDA_ARCH_FAMILY_SPECIFIC__"] == 900


def test_macros_f_variants_have_no_feat():
    for name, arch in (("sm_100f", 1000), ("sm_120f", 1200)):
        m = predefined_macros(T(name))
        assert m["__CUDA_ARCH__"] == arch and m["__CUDA_ARCH_FAMILY_SPECIFIC__"] == arch
        assert "__CUDA_ARCH_SPECIFIC__" not in m
        assert not any(k.startswith("__CUDA_ARCH_FEAT_") for k in m)


def test_macros_sm120a_and_plain():
    m = predefined_macros(T("sm_120a"))
    assert m["__CUDA_ARCH_FEAT_SM120_ALL"] == 1 and m["__CUDA_ARCH_SPECIFIC__"] == 1200
    p = predefined_macros(T("sm_120"))
    assert p["__CUDA_ARCH__"] == 1200
    assert "__CUDA_ARCH_FAMILY_SPECIFIC__" not in p and "__CUDA_ARCH_SPECIFIC__" not in p


def test_macros_host():
    h = predefined_macros(None)
    assert "__CUDA_ARCH__" not in h
    assert h["__CUDACC__"] == 1 and h["__NVCC__"] == 1
    assert not any(k.startswith("__CUDA_ARCH") for k in h)


def test_function_macros():
    from archaudit.cuda.ruleset import function_macros

    assert function_macros(T("sm_120"))["__CUDA_HAS_ARCH_FAMILY_SPECIFIC"] == (("N",), "0")
    params, body = function_macros(T("sm_120f"))["__CUDA_HAS_ARCH_FAMILY_SPECIFIC"]
    assert params == ("N",) and "__CUDA_ARCH_FAMILY_SPECIFIC__" in body
    assert function_macros(T("sm_120f"))["__CUDA_HAS_ARCH_SPECIFIC"][1] == "0"
    assert "__CUDA_ARCH_SPECIFIC__" in function_macros(T("sm_90a"))["__CUDA_HAS_ARCH_SPECIFIC"][1]
    assert function_macros(None)["__CUDA_HAS_ARCH_SPECIFIC"][1] == "0"


def test_macro_targets_cover_compile_targets():
    for t in all_compile_targets():
        m = predefined_macros(t)
        assert m["__CUDA_ARCH__"] == t.cuda_arch
        assert ("__CUDA_ARCH_SPECIFIC__" in m) == (t.variant == "a")
        assert ("__CUDA_ARCH_FAMILY_SPECIFIC__" in m) == (t.variant in ("a", "f"))
        assert (f"__CUDA_ARCH_FEAT_SM{t.major}{t.minor}_ALL" in m) == (t.variant == "a")


# --- the verifier ---------------------------------------------------------------------------


def test_cache_roundtrip_and_corruption(tmp_path):
    from archaudit.rules_verify import ProbeCache

    c = ProbeCache(tmp_path)
    k = c.key("ptx", "13.0.88", "text", "sm_90a")
    assert c.get(k) is None
    c.put(k, {"ok": True, "detail": ""})
    assert c.get(k)["ok"] is True
    path = next(tmp_path.rglob("*.json"))
    path.write_text("{not json")
    assert c.get(k) is None
    assert not [p for p in tmp_path.rglob(".tmp-*")]


def test_compact_supported():
    from archaudit.rules_verify import compact_supported

    assert compact_supported(_names((9, 0))) == ["sm_90+"]
    s = feature_rule("ptx.setmaxnreg").supported_on
    assert compact_supported(s) == ["sm_90+:af"]
    assert compact_supported({"sm_90a"}) == ["sm_90a"]


def test_verify_without_nvcc(monkeypatch):
    from click.testing import CliRunner

    from archaudit.cli import main

    monkeypatch.setenv("PATH", "/nonexistent")
    r = CliRunner().invoke(main, ["rules", "verify", "--no-cache"])
    assert r.exit_code == 2
    assert "nvcc not found" in r.output and "Traceback" not in r.output


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_verify_subset_agrees_with_toolchain(tmp_path, monkeypatch):
    import json

    from click.testing import CliRunner

    from archaudit.cli import main

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    args = ["rules", "verify", "--format", "json", "--no-macros"]
    for r in ("ptx.wgmma", "ptx.tcgen05", "ptx.mma_block_scale", "ptx.setmaxnreg", "intrinsic.reduce_sync"):
        args += ["--rule", r]
    for t in ("sm_80", "sm_90", "sm_90a", "sm_100a", "sm_100f", "sm_120", "sm_120f", "sm_121a"):
        args += ["--target", t]
    res = CliRunner().invoke(main, args)
    out = json.loads(res.stdout)
    assert res.exit_code == 0, out["disagreements"]
    assert out["observed"]["ptx.wgmma"] == ["sm_90a"]
    assert out["observed"]["ptx.tcgen05"] == ["sm_100a", "sm_100f"]
    assert out["observed"]["ptx.mma_block_scale"] == ["sm_120f", "sm_121a"]
    assert list((tmp_path / "archaudit" / "probes").rglob("*.json"))
    # said before the first compile: how many probes, and about how long (issue 24)
    n = out["probes"]
    assert re.match(rf"archaudit: rules verify: {n} probes, 0 cached; {n} to compile, about \d+ (s|min \d+ s) ",
                    res.stderr)
    assert f"archaudit: probed {n}/{n} (" in res.stderr  # progress lines when not on a terminal
    # Second run: all from the cache.
    res2 = CliRunner().invoke(main, args)
    assert json.loads(res2.stdout)["cache_hits"] == json.loads(res2.stdout)["probes"]
    assert res2.stderr.startswith(f"archaudit: rules verify: {n} probes, {n} cached; all answered by the probe cache\n")


@pytest.mark.nvcc
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not on PATH")
def test_verify_reports_a_wrong_rule(tmp_path, monkeypatch):
    import dataclasses

    from archaudit import rules_verify

    wrong = dataclasses.replace(feature_rule("ptx.wgmma"), supported_on=frozenset({"sm_90", "sm_90a"}))
    monkeypatch.setattr(rules_verify, "feature_rules", lambda: (wrong,))
    rep = rules_verify.verify(
        target_names=["sm_90", "sm_90a"], check_macros=False, check_targets=False, cache_dir=tmp_path, jobs=2
    )
    assert not rep.ok
    (f,) = rep.findings
    assert f.subject == "ptx.wgmma" and f.data_only == ["sm_90"] and f.toolchain_only == []
    assert "not supported on .target 'sm_90'" in f.details["errors"]["sm_90"]
