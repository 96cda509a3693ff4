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


def _ge(reg, major, minor):
    return {g.name for g in reg.gpus if (g.major, g.minor) >= (major, minor)}


def test_nvcc_flags_shorthand_embeds_generic_ptx(reg):
    # -arch=sm_90a = PTX compute_90 + SASS sm_90a + PTX compute_90a (nvcc --dryrun, cuobjdump):
    # the generic PTX lets the driver JIT it for any later GPU
    assert admits_of_nvcc_flags(reg, ["-arch=sm_90a"]) == _ge(reg, 9, 0)
    assert admits_of_nvcc_flags(reg, ["-arch", "sm_120f"]) == _ge(reg, 12, 0)
    assert admits_of_nvcc_flags(reg, ["--gpu-architecture=sm_100a"]) == _ge(reg, 10, 0)
    assert admits_of_nvcc_flags(reg, ["-arch=sm_80"]) == _ge(reg, 8, 0)
    assert admits_of_nvcc_flags(reg, ["-arch=compute_90a"]) == _ge(reg, 9, 0)


def test_nvcc_flags_gencode_is_exactly_its_code_list(reg):
    assert admits_of_nvcc_flags(reg, ["-gencode=arch=compute_90a,code=sm_90a"]) == {"sm_90"}
    assert admits_of_nvcc_flags(reg, ["-gencode=arch=compute_90a,code=[sm_90a,compute_90a]"]) == {"sm_90"}
    assert admits_of_nvcc_flags(reg, ["-gencode", "arch=compute_120f,code=sm_120f"]) == {"sm_120", "sm_121"}
    assert admits_of_nvcc_flags(reg, ["--generate-code=arch=compute_80,code=sm_80"]) == {"sm_80", "sm_86", "sm_87", "sm_88", "sm_89"}
    assert admits_of_nvcc_flags(reg, ["-gencode=arch=compute_80,code=compute_80"]) == _ge(reg, 8, 0)
    # flashinfer's get_nvcc_flags_list for an H100 + RTX PRO 6000 box
    assert admits_of_nvcc_flags(reg, ["-gencode=arch=compute_90a,code=sm_90a", "-gencode=arch=compute_120f,code=sm_120f",
                                      "-DFLASHINFER_ENABLE_FP8_E8M0"]) == {"sm_90", "sm_120", "sm_121"}
    # -arch names only the virtual architecture when -code is given
    assert admits_of_nvcc_flags(reg, ["-arch=compute_100f", "-code=sm_100f,sm_103f"]) == {"sm_100", "sm_103", "sm_107"}


def test_nvcc_flags_that_cannot_be_read(reg):
    assert admits_of_nvcc_flags(reg, ["-arch=native"]) is None
    assert admits_of_nvcc_flags(reg, ["-gencode=arch=compute_90a,code=sm_90a", "-arch=all-major"]) is None
    assert admits_of_nvcc_flags(reg, ["-DARCH=sm_90", "-O3"]) is None


_DRYRUN_CASES = [
    ["-arch=sm_90a"], ["-arch=sm_120f"], ["-arch=sm_80"], ["-arch=compute_100a"],
    ["-gencode=arch=compute_90a,code=[sm_90a,compute_90a]"], ["-arch=compute_100f", "-code=sm_100f,sm_103f"],
    ["-gencode=arch=compute_90a,code=sm_90a", "-gencode=arch=compute_120f,code=sm_120f"],
]


@pytest.mark.nvcc
@pytest.mark.skipif(__import__("shutil").which("nvcc") is None, reason="nvcc not on PATH")
@pytest.mark.parametrize("flags", _DRYRUN_CASES, ids=lambda f: " ".join(f))
def test_nvcc_images_match_nvcc_dryrun(tmp_path, flags):
    """What the function models is what nvcc puts in the fatbinary (--image3 of its dry run)."""
    import re
    import subprocess

    from archaudit.targets import nvcc_images

    src = tmp_path / "t.cu"
    src.write_text("__global__ void k(int* o) { o[0] = 1; }\n")
    p = subprocess.run(["nvcc", "--dryrun", "-c", *flags, str(src), "-o", str(tmp_path / "t.o")],
                       capture_output=True, text=True, timeout=120)
    got = sorted(re.findall(r"--image3=kind=(elf|ptx),sm=(\d+[af]?)", p.stdout + p.stderr))
    want = sorted(("elf" if k == "sass" else "ptx", t.name[3:]) for k, t in nvcc_images(flags))
    assert got and got == want
