"""JIT sinks, constant evaluation of sources, and what stands behind a gate (fixtures + pinned real packages)."""
import json

import pytest
from click.testing import CliRunner

from archaudit.callgraph import Analysis, GateSite
from archaudit.cli import main
from archaudit.model import Gate
from conftest import FIXTURES

ROOT = FIXTURES / "callgraph"


@pytest.fixture(scope="module")
def fx():
    a = Analysis.open(ROOT)
    a.jit.find_all_sinks(a.graph)
    return a


def mods(a):
    return {a.jit.module(k).name: a.jit.module(k) for k in a.graph.r.sinks}


def srcs(m):
    return [(s.status, s.path or s.text, s.templates) for s in m.sources]


def test_sinks_sources_resolved_by_constant_evaluation(fx):
    # (jit/flagged.py: compile flags, tests/test_jit_flags.py)
    m = {k: v for k, v in mods(fx).items() if v.path != "jitpkg/jit/flagged.py"}
    assert sorted(m) == ["ext_mod", "fused", "generated_{dtype}", "listcomp", "loop_alpha", "missing"]
    csrc = "jitpkg/data/csrc/"
    # Path(__file__).resolve().parents[1] / "data" / "csrc" / "x.cu"
    assert srcs(m["fused"]) == [("resolved", csrc + "fused.cu", ()), ("resolved", csrc + "fused_ops.cu", ())]
    # list comprehension over a module constant, f-string file names
    assert srcs(m["listcomp"]) == [("resolved", csrc + "alpha.cu", ()), ("resolved", csrc + "beta.cu", ())]
    # loop + append + os.path.join; f-string module name over a constant list
    assert srcs(m["loop_alpha"]) == [("resolved", csrc + "alpha_loop.cu", ()), ("resolved", csrc + "beta_loop.cu", ())]
    # rendered from a jinja template into a run-time directory: `dest.write_text(tmpl.render(...))`
    # with `tmpl = jinja2.Template(f.read())` of `open(CSRC_DIR / "tmpl.cu.jinja")`
    assert srcs(m["generated_{dtype}"]) == [
        ("resolved", csrc + "base.cu", ()),
        ("generated", csrc + "tmpl.cu.jinja", (csrc + "tmpl.cu.jinja",))]
    gen = m["generated_{dtype}"].sources[1]
    assert (gen.text, gen.reason) == ("{JITPKG_WORKSPACE}/generated/gen/inst_{dtype}.cu",
                                      "rendered there at build time (jitpkg/jit/ops.py:36)")
    assert m["generated_{dtype}"].name_resolved is False
    assert m["generated_{dtype}"].unresolved == [("name", "not constant: parameter: dtype")]
    assert srcs(m["missing"]) == [("missing", csrc + "does_not_exist.cu", ())]
    assert m["missing"].unresolved == [("sources-missing", csrc + "does_not_exist.cu: no such file in the scan")]
    # torch.utils.cpp_extension.load(name=..., sources=[os.path.join(os.path.dirname(__file__), "..", ...)])
    assert m["ext_mod"].kind == "built" and m["ext_mod"].rule == "torch-cpp-extension-load"
    assert srcs(m["ext_mod"]) == [("resolved", csrc + "ext.cu", ())]
    assert [m[n].all_sources_resolved for n in sorted(m)] == [True, True, True, True, True, False]


def test_flag_sources(fx):
    m = mods(fx)
    f = m["fused"].flags
    assert [(x.kind, x.path, x.line, x.majors) for x in f] == [("arch-list", "jitpkg/jit/ops.py", 12, (9, 10))]
    # a module constant imported from core.py
    assert [(x.kind, x.path, x.line, x.text) for x in m["listcomp"].flags] == [
        ("hard-coded", "jitpkg/jit/core.py", 21, "-gencode=arch=compute_90a,code=sm_90a")]
    assert [x.kind for x in m["loop_alpha"].flags] == ["no-arch"]
    assert [x.kind for x in m["missing"].flags] == ["default"]
    assert [(x.kind, x.text) for x in m["ext_mod"].flags] == [("hard-coded", "-gencode=arch=compute_80,code=sm_80")]


def behind(a, path, line, col=5, func=None):
    out = []
    for b in a.modules_behind(GateSite(path, line, col, func)):
        out.append((b.module.name, b.arm, b.entry_points, [(x.kind, x.line, x.text, x.how) for x in b.chain]))
    return out


def test_arch_list_gate_controls_the_spec_receiving_it(fx):
    got = fx.modules_behind(GateSite("jitpkg/jit/ops.py", 12, 18, "jitpkg.jit.ops.gen_fused_module"))
    assert len(got) == 1
    b = got[0]
    assert (b.module.name, b.arm, b.entry_points) == ("fused", "flags", None)
    assert [(x.kind, x.line, x.how) for x in b.chain] == [("region", 12, "flags"), ("flags", 13, "dataflow"), ("jit-module", 13, "jit-sink")]
    assert [(x.path, x.line, x.text, x.how) for x in b.built_by] == [("jitpkg/api.py", 9, "jitpkg.api.get_fused_module", "build")]


def test_early_raise_region(fx):
    assert behind(fx, "jitpkg/api.py", 30, 12) == [
        ("fused", "after-exit", ["fused_run"], [
            ("region", 30, "if not is_sm90():", "after-exit"),
            ("call", 32, "jitpkg.api.fused_op", "direct"),
            ("jit-module", 14, "fused", "return-value+entry-point")])]


def test_predicate_gate_reaches_callers_that_branch_on_it(fx):
    got = behind(fx, "jitpkg/api.py", 20, 12, "jitpkg.api.is_sm90")
    assert [(n, arm, ep) for n, arm, ep, _ in got] == [
        ("fused", "caller:after-exit", ["fused_run"]),
        ("fused", "caller:then", ["fused_run"]),
        ("listcomp", "caller:after-exit", ["other_run"]),
    ]
    # is_sm90 -> backend (returns a value from the branch) -> dispatch's `if backend() == "fused"`
    assert got[1][3] == [
        ("region", 20, "return torch.cuda.get_device_capability()[0] == 9", ""),
        ("call", 24, "jitpkg.api.backend", "caller-branch"),
        ("call", 36, "jitpkg.api.dispatch", "then"),
        ("call", 37, "jitpkg.api.fused_op", "direct"),
        ("jit-module", 14, "fused", "return-value+entry-point")]


def test_gate_object_and_cli_explain(fx):
    g = Gate(path="jitpkg/api.py", line=30, col=12, function="jitpkg.api.run", kind="predicate-call",
             expr="is_sm90()", admits=frozenset({"sm_90"}), resolution="inferred: jitpkg.api.is_sm90")
    assert [b.module.name for b in fx.modules_behind(g)] == ["fused"]
    r = CliRunner().invoke(main, ["explain", str(ROOT), "jitpkg/jit/ops.py:12"])
    assert r.exit_code == 0, r.output
    assert "JIT module fused  [flags]" in r.output
    assert "resolved   jitpkg/data/csrc/fused_ops.cu" in r.output
    assert "jitpkg/api.py:9  jitpkg.api.get_fused_module" in r.output
    r = CliRunner().invoke(main, ["explain", str(ROOT), "jitpkg/api.py:30", "--format", "json"])
    d = json.loads(r.output)
    assert [(m["module"]["name"], m["arm"], m["entry_points"]) for m in d["modules"]] == [("fused", "after-exit", ["fused_run"])]


def test_consteval_unit():
    from archaudit.callgraph.consteval import PathV, Unknown

    a = Analysis.open(ROOT)
    ce = a.jit.ce
    env = "jitpkg.jit.env"
    assert ce.global_(env, "CSRC_DIR", 0) == PathV("jitpkg/data/csrc")
    assert ce.global_(env, "INCLUDE_DIR", 0) == PathV("jitpkg/data/include")
    v = ce.global_(env, "GEN_DIR", 0)
    assert isinstance(v, Unknown) and v.reason == "environment" and v.pattern == "{JITPKG_WORKSPACE}/generated"


# ---------------------------------------------------------------- real packages
@pytest.fixture(scope="module")
def real(sp072):
    return Analysis.open(sp072)


@pytest.mark.real
def test_real_trtllm_comm_gate_explained(real):
    site = real.site_at("flashinfer/jit/comm.py", 197)
    assert site.function == "flashinfer.jit.comm.gen_trtllm_comm_module"
    e = real.explain(site)
    assert [(b.module.name, b.arm) for b in e.modules] == [("trtllm_comm", "flags")]
    m = e.modules[0].module
    assert [(s.status, s.path) for s in m.sources] == [
        ("resolved", "flashinfer/data/csrc/trtllm_allreduce.cu"),
        ("resolved", "flashinfer/data/csrc/trtllm_allreduce_fusion.cu"),
        ("resolved", "flashinfer/data/csrc/trtllm_moe_allreduce_fusion.cu")]
    assert [(f.kind, f.line, f.majors) for f in m.flags] == [("arch-list", 197, (9, 10, 12))]
    assert [(x.path, x.line, x.text) for x in e.modules[0].built_by] == [
        ("flashinfer/comm/trtllm_ar.py", 122, "flashinfer.comm.trtllm_ar.get_trtllm_comm_module")]


@pytest.mark.real
def test_real_sglang_allreduce_fusion_reaches_flashinfer(real):
    calls = real.graph.expand("sglang.srt.layers.flashinfer_comm_fusion.flashinfer_allreduce")
    c = [x for x in calls if x.line == 1043]
    assert [(x.callee, x.how) for x in c] == [
        ("flashinfer.comm.allreduce.allreduce_fusion", "import+alias+module-global-alias+reexport+decorator")]
    sub = real.graph.reachable("flashinfer.comm.allreduce.allreduce_fusion", max_depth=8)
    names = sorted({real.jit.module(n[5:-1]).name for n in sub if n.startswith("<jit:")})
    assert "trtllm_comm" in names and "trtllm_mnnvl_comm" in names
    # the trtllm path: allreduce_fusion -> trtllm_allreduce_fusion -> get_trtllm_comm_module().trtllm_allreduce_fusion(...)
    ar = real.graph.expand("flashinfer.comm.trtllm_ar.trtllm_allreduce_fusion")
    ep = [(x.line, x.entry, x.how) for x in ar if x.callee.startswith("<jit:") and x.entry]
    assert ep == [(874, "trtllm_allreduce_fusion", "module-getter+entry-point")]
