"""Preprocessor evaluation (archaudit.cuda.preproc)."""
from __future__ import annotations

import pytest

from archaudit.cuda import ruleset
from archaudit.cuda.preproc import Macro, Preprocessor, build_program, tokenize, pass_macros
from archaudit.parsing import cpp


def pp_for(target_name, defines=None):
    t = ruleset.target_by_name(target_name) if target_name else None
    pre, fn, arch = pass_macros(t)
    return Preprocessor(None, lambda p: None, pre, fn, defines or {}, target_name or "host", arch)


def define(pp, name, params, body):
    pp.macros[name] = Macro(params, tokenize(body), True, False, body)


@pytest.mark.parametrize(
    "expr,target,value,tainted",
    [
        ("defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900", "sm_120f", True, True),
        ("defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900", None, False, False),
        ("defined(__CUDA_ARCH_FEAT_SM90_ALL)", "sm_90a", True, True),
        ("defined(__CUDA_ARCH_FEAT_SM90_ALL)", "sm_90", False, True),
        ("__CUDA_ARCH_FAMILY_SPECIFIC__ == 1000", "sm_103f", False, True),
        ("__CUDA_ARCH_FAMILY_SPECIFIC__ == 1030", "sm_103f", True, True),
        ("__CUDA_ARCH_SPECIFIC__ == 1200", "sm_120f", False, True),
        ("__CUDA_ARCH_SPECIFIC__ == 1200", "sm_120a", True, True),
        ("defined __CUDA_ARCH__", "sm_80", True, False),  # same for every device target
        ("(__CUDA_ARCH__ / 100) == 12 && __CUDA_ARCH__ % 100 == 10", "sm_121a", True, True),
        ("__CUDA_ARCH__ >= 0x384UL", "sm_90a", True, True),
        ("__CUDA_ARCH__ >= 01604", "sm_90", True, True),  # octal 900
        ("!defined(__CUDACC_RTC__) && __CUDACC_VER_MAJOR__ >= 12", "sm_90a", True, False),
        ("__CUDA_ARCH__ >= 1000 ? 1 : 0", "sm_90a", False, True),
        ("UNDEFINED_PLAIN_NAME", "sm_90a", False, False),
        ("__CUDA_HAS_ARCH_FAMILY_SPECIFIC(100)", "sm_103f", True, True),
        ("__CUDA_HAS_ARCH_FAMILY_SPECIFIC(100)", "sm_120f", False, True),
    ],
)
def test_evaluate(expr, target, value, tainted):
    pp = pp_for(target)
    assert pp.evaluate(expr) == (value, tainted)


def test_function_like_macros_and_pasting():
    pp = pp_for("sm_100f")
    define(pp, "FAMILY", ("X",), "(__CUDA_ARCH_FAMILY_SPECIFIC__ == X)")
    define(pp, "CAT", ("a", "b"), "a ## b")
    define(pp, "SELECT", ("...",), "PICK(__VA_ARGS__, 2, 1)")
    define(pp, "PICK", ("a", "b", "c", "..."), "c")
    define(pp, "APPLY", ("F", "x"), "F(x)")
    assert pp.evaluate("FAMILY(1000)") == (True, True)
    assert pp.evaluate("CAT(__CUDA_, ARCH__) == 1000") == (True, True)
    assert pp.evaluate("SELECT(x) == 1") == (True, False)
    assert pp.evaluate("APPLY(FAMILY, 1200)") == (False, True)


def test_unknown_is_never_guessed():
    pp = pp_for("sm_120f")
    define(pp, "F", ("x",), "x #x")  # stringizing: not evaluable
    assert pp.evaluate("F(1)")[0] is None
    assert pp.evaluate("__has_builtin(__builtin_expect)")[0] is None
    assert pp.evaluate("1 +")[0] is None
    pp.macros["MAYBE"] = Macro(None, ("1",), False, False, "1")
    assert pp.evaluate("MAYBE")[0] is None
    assert pp.evaluate("defined(MAYBE) || 1")[0] is True  # || short-circuits the unknown
    assert pp.evaluate("defined(MAYBE) && 0")[0] is False


def test_external_macros_are_unknown_after_an_external_include():
    pp = pp_for("sm_90a")
    assert pp.evaluate("TORCH_VERSION_MAJOR >= 2")[0] is False  # nothing external seen yet
    pp.res.external_seen = True
    assert pp.evaluate("TORCH_VERSION_MAJOR >= 2")[0] is None
    assert pp.evaluate("__clang__")[0] is False  # host environment facts
    assert pp.evaluate("__cplusplus >= 201703L")[0] is True


def test_program_regions_and_include_guard():
    sc = cpp.scan("#ifndef G_H\n#define G_H\n#if A\nint a;\n#elif B\nint b;\n#else\nint c;\n#endif\n#endif\n")
    prog = build_program(sc)
    assert prog.guard == "G_H"
    assert prog.region_parent == [0, 0, 1, 1, 1]
    assert prog.region_line == [0, 1, 3, 5, 7]
    assert prog.region_of(sc.text.index("int b")) == 3


def test_walk_defines_undefs_and_taint(tmp_path):
    from archaudit.cuda.tu import CudaProject, FsReader

    (tmp_path / "t.cu").write_text(
        "#if __CUDA_ARCH__ >= 1000\n#define NEW_ARCH 1\n#endif\n"
        "#define X 5\n#undef X\n"
        "#if defined(NEW_ARCH)\nint a;\n#else\nint b;\n#endif\n"
        "#ifdef X\nint c;\n#endif\n"
    )
    proj = CudaProject(FsReader(str(tmp_path)), [""])
    pr, _ = proj.preprocess("t.cu", ruleset.target_by_name("sm_90a"))
    st, ta = pr.states["t.cu"], pr.taints["t.cu"]
    # regions: 1 (#if arch), 2 (#if NEW_ARCH), 3 (#else), 4 (#ifdef X)
    assert st[1:] == [False, False, True, False]
    assert ta[2] and ta[3]  # NEW_ARCH's definedness depends on the architecture
    assert not ta[4]
    pr2, _ = proj.preprocess("t.cu", ruleset.target_by_name("sm_100a"))
    assert pr2.states["t.cu"][1:] == [True, True, False, False]
