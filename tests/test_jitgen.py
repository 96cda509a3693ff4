"""JIT sources written at build time (fixtures/jitgen): traced to the template rendered or the file
copied, the template read through its rendered view, and the verdicts on sm_120."""
import pytest

from archaudit.callgraph import Analysis
from archaudit.cuda.template_view import render_view
from archaudit.pipeline import scan
from conftest import FIXTURES

ROOT = FIXTURES / "jitgen"
CSRC = "genlib/data/csrc/"
WS = "{GENLIB_WORKSPACE}/generated/"


@pytest.fixture(scope="module")
def mods():
    a = Analysis.open(ROOT)
    a.jit.find_all_sinks(a.graph)
    return {a.jit.module(k).name: a.jit.module(k) for k in a.graph.r.sinks}


def files(m):
    return sorted({(s.status, s.path) for s in m.sources})


def test_rendered_templates_and_copies_are_their_files(mods):
    # write_if_different(dest, templ.render(..)) per dtype, write_if_different(dest, f.read()) of a csrc file
    assert files(mods["umma_gemm"]) == [("generated", CSRC + "umma_gemm.jinja"), ("resolved", CSRC + "gemm_binding.cu")]
    half = next(s for s in mods["umma_gemm"].sources if s.text == WS + "umma_gemm/umma_gemm_half.cu")
    assert (half.status, half.path, half.templates, half.suffix, half.reason) == (
        "generated", CSRC + "umma_gemm.jinja", (CSRC + "umma_gemm.jinja",), ".cu",
        "rendered there at build time (genlib/jit/gemm.py:25)")
    # shutil.copy2(src, dest): the copy is the csrc file
    assert files(mods["portable_gemm"]) == [("generated", CSRC + "portable_gemm.jinja"),
                                            ("resolved", CSRC + "portable_binding.cu")]
    binding = next(s for s in mods["portable_gemm"].sources if s.status == "resolved")
    assert (binding.text, binding.reason) == (WS + "portable_gemm/portable_binding.cu",
                                              "copied there at build time (genlib/jit/gemm.py:47)")
    assert all(mods[n].all_sources_resolved and not mods[n].unresolved
               for n in ("umma_gemm", "portable_gemm", "backend_sm100", "backend_portable", "custom", "select", "instantiate"))


def test_files_written_beside_the_sources_are_their_includes(mods):
    m = mods["config_user"]
    assert files(m) == [("resolved", CSRC + "config_user.cu")]
    assert m.include_aliases == [("gen_config.inc", CSRC + "gen_config.jinja")]


def test_only_writes_that_reach_the_sink(mods):
    # the sm_100 arm returns: its write (and its template binding) never precede the later sink
    assert files(mods["backend_sm100"]) == [("generated", CSRC + "umma_gemm.jinja")]
    assert files(mods["backend_portable"]) == [("generated", CSRC + "portable_gemm.jinja")]


def test_template_held_in_python_is_not_a_file(mods):
    m = mods["inline_scale"]
    assert [(s.status, s.path, s.text) for s in m.sources] == [("generated", None, WS + "inline/scale.cu")]
    why = ("written at genlib/jit/gemm.py:96: rendered from a template that is not a file of the scan: "
           "`INLINE_TEMPLATE` is a string held in Python code, not a file of the scan")
    assert m.sources[0].reason == why
    assert m.unresolved == [("sources-generated", f"{WS}inline/scale.cu: {why}")]
    assert not m.all_sources_resolved


def test_render_view_keeps_lines_and_neutralises_jinja():
    src = (b"// {{ dtype }} in a comment\n"
           b"#include \"{{ header }}\"\n"
           b"{# a comment\n   over two lines #}\n"
           b"{% for x in [1, 2] %}\n"
           b"template void f<{{ dtype }}>();\n"
           b"{% endfor %}\n"
           b"{% if a %}\n"
           b"int y = 1;\n"
           b"{% else %}\n"
           b"int y = 2;\n"
           b"{% endif %}\n"
           b"{{ decl }}\n"
           b"asm(\"{{ op }}\");\n"
           b"int z = {% if b %}1{% else %}2{% endif %};\n"
           b"{% include 'x.jinja' %}\n"
           b"template void {{ kernel }}<{{ dtype }}>(int* p);\n")
    view, notes = render_view(src)
    assert view.count(b"\n") == src.count(b"\n")
    lines = view.decode().split("\n")
    assert lines[5] == "template void f<__archaudit_unknown_value__>();"
    assert [lines[i] for i in (2, 3, 4, 6, 7, 9, 11)] == ["", "", "", "", "#if __archaudit_unknown_value__", "#else", "#endif"]
    assert notes == [
        (2, 'the #include names a file given at render time ({{ header }})'),
        (13, '{{ decl }} stands where a declaration or statement begins: the code it inserts is given at render time'),
        (14, '{{ op }} is inside a string literal: its text is given at render time'),
        (15, 'jinja tag {% else %} shares its line with other text: what it selects is not known'),
        (15, 'jinja tag {% endif %} shares its line with other text: what it selects is not known'),
        (15, 'jinja tag {% if %} shares its line with other text: what it selects is not known'),
        (16, 'jinja tag {% include %} is not modelled: the text it renders is not known'),
        (17, '{{ kernel }} names what is instantiated or called: which code is compiled is given at render time'),
    ]


# gate (path, line) -> (verdict, [(evidence path, line, feature)], a part of the reason)
EXPECTED_SM120 = {
    ("genlib/jit/gemm.py", 33): ("hardware-bound", [(CSRC + "umma_gemm.jinja", 6, "ptx.tcgen05")],
                                 "umma_gemm: ptx.tcgen05 ('tcgen05.') at genlib/data/csrc/umma_gemm.jinja:6"),
    ("genlib/jit/gemm.py", 49): ("software-only", [], "portable_gemm: every source builds for sm_120f"),
    ("genlib/jit/gemm.py", 60): ("hardware-bound", [(CSRC + "umma_gemm.jinja", 6, "ptx.tcgen05")], "backend_sm100: "),
    ("genlib/jit/gemm.py", 66): ("software-only", [], "backend_portable: every source builds for sm_120f"),
    ("genlib/jit/gemm.py", 74): ("unresolved", [], "custom: genlib/data/csrc/custom.jinja: genlib/data/csrc/custom.jinja:3: "
                                 "{{ variant_decl }} stands where a declaration or statement begins"),
    ("genlib/jit/gemm.py", 82): ("unresolved", [], "select: genlib/data/csrc/select.jinja: ptx.tcgen05 at "
                                 "genlib/data/csrc/select.jinja:5 is under a condition that could not be decided"),
    ("genlib/jit/gemm.py", 90): ("hardware-bound", [("genlib/data/include/genlib/launcher.cuh", 15, "trap-stub")],
                                 "instantiate: every kernel the module reaches is a stub on sm_120f"),
    # the config rendered beside the copied source is read from its template for the #include
    ("genlib/jit/gemm.py", 110): ("software-only", [], "config_user: every source builds for sm_120f"),
    # the same with the flags passed in by the gate's function, whose returned spec a caller
    # builds (genlib/ops.py): bound by the gate's own call of the builder, config include kept
    ("genlib/jit/configflags.py", 24): ("software-only", [], "{uri}: every source builds for sm_120f"),
    ("genlib/jit/gemm.py", 97): ("unresolved", [], "inline_scale: source {GENLIB_WORKSPACE}/generated/inline/scale.cu is "
                                 "generated at build time: written at genlib/jit/gemm.py:96"),
    # binding.py: the text built in Python is one of two (the variant is a parameter here): not
    # read as either; the per-variant module records are (test_text_built_in_python_is_read)
    ("genlib/jit/binding.py", 32): ("unresolved", [], "{decode_portable|decode_umma}: source {GENLIB_WORKSPACE}/generated/"
                                    "decode_{portable|umma}/decode_binding.cu is generated at build time: written at "
                                    "genlib/jit/binding.py:31: the text `f\"\"\"// generated binding"),
    ("genlib/jit/binding.py", 49): ("unresolved", [], "decode_any: source {GENLIB_WORKSPACE}/generated/decode_any/"
                                    "decode_binding.cu is generated at build time: written at genlib/jit/binding.py:48: "
                                    "`text` is parameter: text, not a file of the scan"),
    # the shared builder's own flags gate: its sources are its parameter
    ("genlib/jit/binding.py", 55): ("unresolved", [], "{name}: sources-parameter: sources: parameter: sources"),
    # the caller writes the binding and passes it to the builder: read per variant, the variants differ
    ("genlib/jit/binding.py", 59): ("partial", [(CSRC + "decode_umma.cuh", 2, "ptx.tcgen05")],
                                    "built only with hard-coded nvcc flags (-gencode=arch=compute_100a,code=sm_100a), "
                                    "which give no code for sm_120; compiled for sm_120f instead: the generator builds "
                                    "one of 2 modules, chosen by its arguments; real kernels for sm_120f from "
                                    "shared_decode_portable; not from the others: shared_decode_umma"),
}


def test_verdicts_sm120(reg):
    result = scan(ROOT, [reg.parse("sm_120")])
    got = {(f.gate.path, f.gate.line): (f.verdict, [(e.path, e.line, e.feature) for e in f.evidence], f.reason)
           for f in result.findings}
    assert sorted(got) == sorted(EXPECTED_SM120)
    for key, (verdict, evidence, why) in EXPECTED_SM120.items():
        assert got[key][:2] == (verdict, evidence), key
        assert got[key][2].startswith(why), (key, got[key][2])


def test_atoms_in_macro_bodies_count_where_the_macro_is_expanded(tmp_path, reg):
    from archaudit.cuda.tu import CudaProject, FsReader

    (tmp_path / "inst.h").write_text(
        "namespace cutlass { namespace arch { struct Sm90 {}; struct Sm100 {}; } }\n"
        "template <class T, class Arch> void launch(T* d);\n"
        "#define INSTANTIATE_SM100(T) template void launch<T, cutlass::arch::Sm100>(T * d);\n"
        "#define INSTANTIATE_SM90(T) template void launch<T, cutlass::arch::Sm90>(T * d);\n"
        "#define INSTANTIATE(T) INSTANTIATE_SM100(T)\n")
    (tmp_path / "a.cu").write_text('#include "inst.h"\nINSTANTIATE(float)\n')
    (tmp_path / "b.cu").write_text('#include "inst.h"\nint unused;\n')
    reader = FsReader(str(tmp_path))
    proj = CudaProject(reader, [], files=reader.files())
    ct = reg.compile_target(reg.parse("sm_120"))
    a = proj.analyse_tu("a.cu", ct)
    # expanded through INSTANTIATE: the Sm100 tag of its body is a stub; INSTANTIATE_SM90 is not expanded
    assert (a.prediction, [(s.path, s.line, s.kind, s.text) for s in a.stubs]) == (
        "stub", [("inst.h", 3, "arch-tag", "cutlass::arch::Sm100")])
    assert [(f.path, f.line, f.feature) for f in a.features] == [("inst.h", 3, "atom.arch_tag_sm100")]
    b = proj.analyse_tu("b.cu", ct)
    assert (b.prediction, b.stubs, b.features) == ("builds", [], [])


def test_written_file_kind_from_the_generators_code():
    # the written name's suffix is read from the literal the destination ends with
    # (`gen_directory / f"umma_gemm_{dtype}.cu"`), not only from the evaluated path; a copy is
    # compiled as the file it copies
    a = Analysis.open(ROOT)
    a.jit.find_all_sinks(a.graph)
    site = next(s for k, s in a.graph.r.sinks.items() if s.call.line == 34)
    got = a.jit.gen.writes_before(site.ctx, site.call, {})
    assert sorted({(o.how, o.path, o.where, o.suffix) for os_ in got.values() for o in os_}) == [
        ("copied", CSRC + "gemm_binding.cu", "genlib/jit/gemm.py:32", ""),  # `gen_directory / filename`
        ("rendered", CSRC + "umma_gemm.jinja", "genlib/jit/gemm.py:25", ".cu")]


@pytest.mark.real
def test_real_gemm_generators_sources(sp072):
    """flashinfer 0.7.2.post1's CUTLASS GEMM generators: templates rendered per tile, csrc files copied."""
    a = Analysis.open(sp072)
    a.jit.find_all_sinks(a.graph)
    by_fn = {}
    for k in a.graph.r.sinks:
        m = a.jit.module(k)
        if m.path == "flashinfer/jit/gemm/core.py":
            by_fn[m.function.rsplit(".", 1)[-1]] = m
    csrc = "flashinfer/data/csrc/"
    fp4 = by_fn["gen_gemm_sm100_module_cutlass_fp4"]
    assert files(fp4) == [("generated", csrc + "fp4_gemm_cutlass.jinja"), ("resolved", csrc + "fp4_gemm_cutlass.cu")]
    assert fp4.all_sources_resolved and len(fp4.sources) == 9  # the binding and 8 rendered instances
    # gemm_sm100: three templates rendered, five csrc files copied into the generated directory
    assert files(by_fn["gen_gemm_sm100_module"]) == sorted(
        [("generated", csrc + f"{p}_sm100_kernel_inst.jinja")
         for p in ("gemm_groupwise", "group_gemm_fp8_groupwise", "group_gemm_mxfp4_groupwise")]
        + [("resolved", csrc + f) for f in ("gemm_groupwise_sm100.cu", "group_gemm_fp8_groupwise_sm100.cu",
                                             "group_gemm_mxfp4_groupwise_sm100.cu", "gemm_sm100_binding.cu",
                                             "group_gemm_sm100_binding.cu")])


@pytest.mark.real
def test_real_fp4_gemm_template_is_a_stub_on_sm120(sp072, reg):
    """The rendered fp4 instance expands INSTANTIATE_FP4_GEMM_KERNEL_LAUNCHER, whose body names
    cutlass::arch::Sm100 (nvcc: every kernel of the module is a trap/empty stub on sm_120f)."""
    from archaudit.cuda.tu import CudaProject, FsReader

    reader = FsReader(str(sp072))
    files_ = reader.files("flashinfer")
    proj = CudaProject(reader, CudaProject.discover_include_roots(files_, reader), files=files_)
    ct = reg.compile_target(reg.parse("sm_120"))
    res = proj.analyse_tu("flashinfer/data/csrc/fp4_gemm_cutlass.jinja", ct, None,
                          {"ENABLE_BF16": "1", "ENABLE_FP4": "1", "CUTLASS_ENABLE_GDC_FOR_SM100": "1"})
    assert (res.prediction, res.reason) == (
        "stub", "arch-tag at flashinfer/data/include/flashinfer/gemm/fp4_gemm_template_sm100.h:130: cutlass::arch::Sm100")


def test_text_built_in_python_is_read(reg):
    # binding.py: the binding TU is an f-string of `"".join(...)` define lines and an #include,
    # written per variant; its text is read as the source, and the #include it names through a
    # define (`#include DECODE_BODY_FILE`) picks each variant's body
    result = scan(ROOT, [reg.parse("sm_120")])
    got = {m.name: (m.sources, m.verdicts["sm_120"]["verdict"],
                    [(e["path"], e["line"], e["feature"]) for e in m.verdicts["sm_120"]["evidence"]])
           for m in result.modules if "decode_" in m.name}
    portable, umma = got["decode_portable"], got["decode_umma"]
    assert portable[1:] == ("software-only", [])
    assert umma[1:] == ("hardware-bound", [(CSRC + "decode_umma.cuh", 2, "ptx.tcgen05")])
    assert [s.split("/")[-1] for s in portable[0] + umma[0]] == ["decode_binding.cu", "decode_binding.cu"]
    assert portable[0][0].startswith("<generated:") and portable[0] != umma[0]
    assert got["decode_any"][1] == "unresolved"
    # written by the caller of the builder holding the build call: the same texts
    assert got["shared_decode_portable"] == portable and got["shared_decode_umma"][:2] == umma[:2]

