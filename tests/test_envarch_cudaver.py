"""Unknowns from the environment beside the architecture: an override read before the device
query (fixtures/envarch, flash_attn.cute's `_get_device_arch`) and a CUDA-version test `and`ed
with the capability (fixtures/cudaver, sgl_kernel's `is_fa3_supported`), and an env flag `and`ed
with a platform attribute that reads an override dict first (fixtures/envplatform, sglang's
`_can_use_mega_mhc`). No such unknown decides a gate, and none hides the device's own path."""
from archaudit.pipeline import scan

from conftest import FIXTURES

ALL_FROM_80 = ["sm_80", "sm_86", "sm_87", "sm_88", "sm_89", "sm_90", "sm_100", "sm_103", "sm_107", "sm_110",
               "sm_120", "sm_121"]
SM8X_90 = ["sm_80", "sm_86", "sm_87", "sm_88", "sm_89", "sm_90"]
SM10X = ["sm_100", "sm_103", "sm_107"]
FROM_100 = ["sm_100", "sm_103", "sm_107", "sm_110", "sm_120", "sm_121"]


def _gates(res, reg):
    return [(g.path, g.line, g.kind, g.region, reg.sort_names(g.admits), g.resolution) for g in res.gates]


def test_env_override_does_not_hide_the_device_path(reg):
    res = scan(FIXTURES / "envarch", [reg.parse("sm_120")])
    via = "inferred: envarch.arch._get_device_arch"
    f = "envarch/interface.py"
    assert _gates(res, reg) == [
        (f, 6, "capability-compare", "assert", ALL_FROM_80, via),
        (f, 8, "capability-compare", "assert", SM10X, via),
        (f, 9, "capability-compare", "branch", ["sm_80", "sm_86", "sm_87", "sm_88", "sm_89", "sm_120", "sm_121"], via),
        (f, 16, "capability-compare", "assert", ["sm_90", "sm_100", "sm_103", "sm_107", "sm_110"], via),
        # only sm_90 ... sm_110 get past the assert before it
        (f, 17, "capability-compare", "branch", SM10X, via),
        (f, 24, "capability-compare", "branch", FROM_100, "inferred: envarch.arch.get_arch_or_env"),
    ]
    # the override is set aside, not read as the test's run-time dependence
    assert not any(v.startswith("environment-dependent") for g in res.gates for v in g.via)
    assert [(x.gate.line, x.verdict) for x in res.findings] == [
        (8, "no-gpu-code"), (16, "no-gpu-code"), (17, "unresolved")]


def test_cuda_version_and_capability(reg):
    res = scan(FIXTURES / "cudaver", [reg.parse("sm_120")])
    f = "fa3kit/flash_attn.py"
    assert _gates(res, reg) == [
        (f, 12, "predicate-call", "after-early-exit", SM8X_90, "inferred: fa3kit.flash_attn.is_fa3_supported"),
        (f, 18, "predicate-call", "branch", SM8X_90, "inferred: fa3kit.flash_attn.is_fa3_supported"),
        (f, 25, "capability-compare", "after-early-exit", FROM_100,
         "evaluated: capability-source torch.cuda.get_device_capability"),
        (f, 31, "predicate-call", "after-early-exit", SM10X, "inferred: fa3kit.flash_attn.fp8_supported"),
    ]
    g31 = next(g for g in res.gates if g.line == 31)
    # the CUDA version matters only where the capability admits; on sm_120 the refusal is certain
    assert "environment-dependent on sm_100, sm_103, sm_107" in g31.via
    assert g31.decided == frozenset(["sm_75", "sm_80", "sm_86", "sm_87", "sm_88", "sm_89", "sm_90", "sm_110",
                                     "sm_120", "sm_121"])
    assert [(x.gate.line, x.verdict) for x in res.findings] == [
        (12, "no-gpu-code"), (18, "unresolved"), (31, "no-gpu-code")]


def test_env_flag_and_platform_override(reg):
    res = scan(FIXTURES / "envplatform", [reg.parse("sm_120")])
    via = ("inferred: mhckit.common._check_cuda_device_version -> mhckit.common.get_device_sm -> "
           "mhckit.model._can_use_mega_mhc -> mhckit.platform.PlatformContext.__getattr__")
    via29 = via.replace("_can_use_mega_mhc", "uses_native_stack")
    assert _gates(res, reg) == [
        ("mhckit/model.py", 15, "predicate-call", "branch", SM10X, via),
        # an unknown condition on every GPU (a string comparison) in front of the platform
        # attribute does not make the override's unknown look like the device's condition
        ("mhckit/model.py", 29, "predicate-call", "branch", SM10X, via29),
    ]
    assert "environment-dependent on sm_100, sm_103, sm_107" in res.gates[0].via
    assert [(x.gate.line, x.verdict) for x in res.findings] == [(15, "unresolved"), (29, "unresolved")]
