import pytest

from archaudit.targets import UnknownTarget, admits_of_arch_list, admits_of_nvcc_flags


@pytest.mark.parametrize(
    "text,gpu,variant,compile",
    [
        ("sm_120", "sm_120", None, "sm_120f"),
        ("sm120", "sm_120", None, "sm_120f"),
        ("12.0", "sm_120", None, "sm_120f"),
        ("120f", "sm_120", "f", "sm_120f"),
        ("sm_120a", "sm_120", "a", "sm_120a"),
        ("RTX PRO 6000", "sm_120", None, "sm_120f"),
        ("RTX 5090", "sm_120", None, "sm_120f"),
        ("H100", "sm_90", None, "sm_90a"),
        ("H200", "sm_90", None, "sm_90a"),
        ("B200", "sm_100", None, "sm_100a"),
        ("B300", "sm_103", None, "sm_103a"),
        ("GB10", "sm_121", None, "sm_121a"),
        ("DGX Spark", "sm_121", None, "sm_121a"),
        ("Thor", "sm_110", None, "sm_110a"),
        ("A100", "sm_80", None, "sm_80"),
        ("L40S", "sm_89", None, "sm_89"),
        ("compute_90a", "sm_90", "a", "sm_90a"),
    ],
)
def test_parse_target(reg, text, gpu, variant, compile):
    req = reg.parse(text)
    assert req.gpu.name == gpu
    assert req.variant == variant
    assert reg.compile_target(req).name == compile


@pytest.mark.parametrize("text", ["sm_130", "RTX 5900", "sm_90f", "banana", ""])
def test_unknown_target(reg, text):
    with pytest.raises(UnknownTarget):
        reg.parse(text)


def test_unknown_target_suggests(reg):
    with pytest.raises(UnknownTarget) as e:
        reg.parse("RTX 5900")
    assert "RTX 5090" in e.value.suggestions


def test_runs_on(reg):
    from archaudit.targets import CompileTarget

    assert reg.runs_on(CompileTarget(8, 0)) == {"sm_80", "sm_86", "sm_87", "sm_88", "sm_89"}
    assert reg.runs_on(CompileTarget(9, 0, "a")) == {"sm_90"}
    assert reg.runs_on(CompileTarget(12, 0, "f")) == {"sm_120", "sm_121"}
    assert reg.runs_on(CompileTarget(10, 3, "f")) == {"sm_103", "sm_107"}
    assert "sm_120" in reg.runs_on(CompileTarget(8, 0), ptx=True)


def test_flags(reg):
    assert admits_of_nvcc_flags(reg, ["-gencode=arch=compute_90a,code=sm_90a", "-O3"]) == {"sm_90"}
    assert admits_of_nvcc_flags(reg, ["-O3"]) is None
    assert admits_of_arch_list(reg, "9.0a;10.0a") == {"sm_90", "sm_100"}
    assert admits_of_arch_list(reg, "not a list") is None
