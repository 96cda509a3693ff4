"""Rule data (rules/instructions.toml, rules/macros.toml) and its loader."""
from __future__ import annotations

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


def test_mma_fp8_and_cp_async():
    fp8 = feature_rule("ptx.mma_fp8_e4m3").supported_on
    assert "sm_89" in fp8 and "sm_86" not in fp8 and "sm_120" in fp8
    cp = feature_rule("ptx.cp_async").supported_on
    assert "sm_80" in cp and "sm_75" not in cp and "sm_121f" in cp


def test_rules_well_formed():
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
