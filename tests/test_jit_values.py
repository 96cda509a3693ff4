"""JIT module sources and flags through tuple unpacking, JSON manifests read as data, Literal
parameters, filters that are not known, and dicts changed in place (fixtures/jitvalues)."""
import pytest

from archaudit.callgraph import Analysis
from archaudit.callgraph.consteval import Alt, PathV, Some, Unknown, alt
from archaudit.cuda.preproc import UNKNOWN_VALUE
from conftest import FIXTURES

ROOT = FIXTURES / "jitvalues"
C = "valpkg/data/csrc/"


@pytest.fixture(scope="module")
def fx():
    a = Analysis.open(ROOT)
    a.jit.find_all_sinks(a.graph)
    return {a.jit.module(k).name: a.jit.module(k) for k in a.graph.r.sinks}


def srcs(m):
    return [(s.status, s.path or s.text) for s in m.sources]


def flags(m):
    return [(f.kind, f.text) for f in m.flag_items if f.text != "-std=c++17"]


def test_tuple_unpacking(fx):
    m = fx["unpack_alpha"]  # name, sources = _spec("alpha")
    assert (m.path, m.line, m.name_resolved) == ("valpkg/jit/unpack.py", 17, True)
    assert srcs(m) == [("resolved", C + "alpha.cu"), ("resolved", C + "common.cu")] and m.unresolved == []
    assert srcs(fx["unpack_parts"]) == [("resolved", C + "beta.cu"), ("resolved", C + "binding.cu")]
    # three names for two values raises at run time: no value, said so
    m = fx["unpack_mismatch"]
    assert not m.all_sources_resolved
    assert set(m.unresolved) == {("sources-unresolved", "value-error: 3 names for 2 values: value-error: 3 names for 2 values")}


def test_manifest_records(fx):
    m = fx["record_{name}"]
    assert (m.path, m.line) == ("valpkg/jit/manifest.py", 39)
    # every record of the manifest (name is a parameter); the checkout candidate has no manifest
    assert srcs(m) == [("resolved", C + "alpha.cu"), ("resolved", C + "common.cu"), ("resolved", C + "beta.cu")]
    assert [a.path for a in m.alternatives] == ["csrc/alpha.cu", "csrc/common.cu", "csrc/beta.cu"]
    assert flags(m) == [("flag", "-DREC_ALPHA"), ("flag", "--use_fast_math"), ("flag", "-DREC_BETA"),
                        ("unknown", "-DTILE={128|64}"), ("flag", "-DWARPS=4")]
    # TILE is 128 for one record and 64 for the other: defined, its value not known
    assert m.defines == {"TILE": UNKNOWN_VALUE, "REC_ALPHA": "1", "REC_BETA": "1", "WARPS": "4"}
    assert m.unresolved == [
        ("name", "not constant: parameter: name"),
        ("flags-define-value", '-DTILE={128|64}: one of several values: -DTILE=128, -DTILE=64 (if one of the values of '
                               '[f"-D{k}={v}" for k, v in sorted(record["defines"].items())])')]


def test_manifest_family_by_literal_target_and_unknown_selector(fx):
    m = fx["{family_sm100a|family_sm90a}"]
    assert srcs(m) == [("resolved", C + "fam/sm_90a/causal0.cu"), ("resolved", C + "fam/sm_100a/causal0.cu"),
                       ("resolved", C + "fam/sm_90a/causal1.cu"), ("resolved", C + "fam/sm_100a/causal1.cu")]
    assert flags(m) == [("flag", "-gencode=arch=compute_90a,code=sm_90a"), ("flag", "-gencode=arch=compute_100a,code=sm_100a"),
                        ("flag", "-DFAM_CAUSAL")]
    assert m.conditional_flags["-DFAM_CAUSAL"] == 'one of the values of member.get("flags", [])'
    assert m.unresolved == [("name", "one of several values")]
    # a filter that is known picks its member only
    assert srcs(fx["{causal_sm100a|causal_sm90a}"]) == [("resolved", C + "fam/sm_90a/causal1.cu"),
                                                        ("resolved", C + "fam/sm_100a/causal1.cu")]


def test_manifest_opened_and_missing(fx):
    assert srcs(fx["open_beta"]) == [("resolved", C + "beta.cu")] and fx["open_beta"].unresolved == []
    m = fx["missing_manifest"]
    assert m.sources == [] and m.unresolved == [
        ("sources-comprehension-over-unknown", '[CSRC / s for s in record["sources"]]: comprehension-over-unknown: '
                                               'record["sources"] (missing-file: valpkg/data/csrc/no_such_manifest.json: not in the scan)')]


def test_dicts_and_lists_changed_in_place(fx):
    m = fx["selector"]  # selector["SINK"] = int(has_sink) under an if
    assert flags(m) == [("flag", "-DSEL_CAUSAL=1"), ("unknown", "-DSEL_SINK={v}")]
    assert m.defines == {"SEL_SINK": UNKNOWN_VALUE, "SEL_CAUSAL": "1"}
    # flags appended in a loop: each iteration's key with its own value
    assert flags(fx["loop_flags"]) == [("flag", "-DLOOP_TILE=64"), ("flag", "-DLOOP_STAGES=3")]
    # a change not modelled (pop) makes the value unknown, never the dict as first built
    m = fx["popped"]
    assert m.sources == [] and m.unresolved == [
        ("sources-changed-in-place", "list(sources.values()): changed-in-place: sources: pop at line 34")]
    # `opts = {**opts, ..}` under an if: the value before and after
    assert srcs(fx["override"]) == [("resolved", C + "alpha.cu"), ("resolved", C + "beta.cu")]


def test_literal_parameters_and_starred_calls(fx):
    m = fx["{target_sm100a|target_sm90a}"]
    assert flags(m) == [("flag", "-gencode=arch=compute_90a,code=sm_90a"), ("flag", "-gencode=arch=compute_100a,code=sm_100a")]
    assert m.hard_coded_archs == ["sm_90a", "sm_100a"]
    m = fx["{kind_alpha|kind_beta}"]
    assert srcs(m) == [("resolved", C + "alpha.cu"), ("resolved", C + "beta.cu"), ("unresolved", C + "{other}.cu")]
    assert m.unresolved == [("name", "one of several values"), ("sources-unresolved", C + "{other}.cu: parameter: other")]
    # the splatted arguments are not in the IR: not folded
    assert fx["starred"].unresolved == [
        ("sources-unresolved", "runtime-call: CSRC.joinpath(*...): runtime-call: CSRC.joinpath(*...)")]


def test_consteval_alternatives_unit():
    a = Analysis.open(ROOT)
    ce = a.jit.ce
    mod = "valpkg.jit.manifest"
    assert ce.global_(mod, "_MANIFEST_ARCH", 0) == {"sm90a": "sm_90a", "sm100a": "sm_100a"}
    # the candidate directories of a loop: the checkout one is dropped where its file is read
    ctx = a.graph.r.ctx(f"{mod}._csrc_dir")
    (ret,) = [st for st in ctx.node.f["body"] if st.k == "return"]
    assert ce.eval(ctx, ret.f["value"]) is None
    v = ce._call_func(ce.global_(mod, "_csrc_dir", 0), None, [], {}, 0)
    assert v == Alt((PathV("csrc"), PathV("valpkg/data/csrc"), None))
    assert alt([1, Alt((2, 1)), 3]) == Alt((1, 2, 3)) and alt(["x", "x"]) == "x"
    assert alt(range(300)) == Unknown("too-many-alternatives", "300")
    # Some: a member of it is any from that place on
    s = Some(("a", "b", "c"))
    assert ce._subscript(s, 1, ctx, ret) == Alt(("b", "c")) and ce._subscript(s, -1, ctx, ret) == Alt(("a", "b", "c"))
    # a missing key on one option drops that option; on every option it is the error
    assert ce._spread(lambda d: ce._subscript(d, "k", ctx, ret), Alt(({"k": 1}, {}))) == 1
    assert ce._spread(lambda d: ce._subscript(d, "k", ctx, ret), Alt(({}, None))).reason == "missing-key"
