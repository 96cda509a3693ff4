"""Values the call graph follows (fixtures/callgraph_values): items of displays, loops over
instances, parameter defaults, arguments from call sites (whole graph), lambdas as scopes,
functions called by built-ins, and PyCG's node names. Exact edges in expected_pycg.json
(callers with no edge left out)."""
import json

from archaudit.callgraph import Analysis
from conftest import FIXTURES

ROOT = FIXTURES / "callgraph_values"


def test_whole_graph_edges_are_exact():
    a = Analysis.open(ROOT)
    a.graph.build_all(arg_flow=True)
    got = {k: v for k, v in a.graph.to_pycg().items() if v}
    assert got == json.loads((ROOT / "expected_pycg.json").read_text())


def test_without_argument_flow_a_parameter_has_its_default_only():
    """The scan's demand-driven graph: no call sites are searched for a parameter's value; a
    default is followed, and the parameter stays unresolved beside it."""
    a = Analysis.open(ROOT)
    callees = lambda q: sorted({c.callee for c in a.graph.calls_from(q)})
    assert callees("vals.flow.with_default") == ["<unresolved:unknown-receiver>", "vals.flow.g1"]
    assert callees("vals.flow.run") == ["<unresolved:unknown-receiver>"]
    # a lambda's body is still an edge of the scope that holds it (the scan follows it there)
    assert "vals.flow.g3" not in callees("vals.flow.main")
    assert "vals.flow.main.<locals>.<lambda1>" in callees("vals.flow.main")


def test_calls_in_a_lambda_body_belong_to_the_enclosing_scope_in_the_graph_not_in_pycg():
    a = Analysis.open(ROOT)
    a.graph.expand("vals.flow.main")
    a.graph.expand("vals.flow.main.<locals>.<lambda1>")
    g = a.graph.g
    assert g.has_edge("vals.flow.main.<locals>.<lambda1>", "<unresolved:unknown-receiver>")
    # `twice = lambda h: h()`: the call h() is main's too (resolved in main's scope, where h
    # is no name), marked as inside the lambda
    assert [(c.callee, c.in_lambda) for c in a.graph.calls_from("vals.flow.main") if c.line == 36] == [
        ("<unresolved:undefined-name>", True)]
    assert not g.edges["vals.flow.main", "<unresolved:undefined-name>"]["direct"]
