"""An unexpected shape of code, or a failure inside one analysis phase, costs a diagnostic for that
file or gate, never the whole report."""
import os
import subprocess
import sys

import pytest

from archaudit.callgraph.resolve import Resolver
from archaudit.model import UNRESOLVED
from archaudit.pipeline import scan
from archaudit.python.interp import Interp

from conftest import FIXTURES, REPO


def _sm120(reg):
    return [reg.parse("sm_120")]


def test_class_rebound_to_a_function(reg):
    r = scan(FIXTURES / "pyshapes", _sm120(reg))
    assert [(g.path, g.line, sorted(g.admits)) for g in r.gates] == [("shapes/rebound.py", 19, ["sm_90"])]
    assert [(f.gate.path, f.gate.line, f.verdict) for f in r.findings] == [("shapes/rebound.py", 19, UNRESOLVED)]
    assert not [d for d in r.diagnostics if d.kind == "internal-error"]


def test_failure_in_the_call_graph_is_contained(reg, monkeypatch):
    def broken(self, cls):
        raise KeyError("bases")

    monkeypatch.setattr(Resolver, "mro", broken)
    r = scan(FIXTURES / "pyshapes", _sm120(reg))
    [f] = r.findings
    assert (f.gate.line, f.verdict) == (19, UNRESOLVED)
    assert "call-graph search failed on this gate (KeyError)" in f.reason
    [d] = [d for d in r.diagnostics if d.kind == "internal-error"]
    assert (d.path, d.line, d.severity) == ("shapes/rebound.py", 19, "error")
    assert d.message.startswith("call-graph search stopped on this file (KeyError: 'bases')")


def test_failure_in_gate_evaluation_is_contained(reg, monkeypatch):
    """One function's evaluation fails: the other gates of the tree are still found."""
    real = Interp.report_function

    def flaky(self, mod, qual, nodes):
        if qual == "pick_backend":
            raise AttributeError("boom")
        return real(self, mod, qual, nodes)

    monkeypatch.setattr(Interp, "report_function", flaky)
    r = scan(FIXTURES / "pygates")
    monkeypatch.undo()
    plain = scan(FIXTURES / "pygates")
    lost = {(g.path, g.line) for g in plain.gates} - {(g.path, g.line) for g in r.gates}
    diags = [d for d in r.diagnostics if d.kind == "internal-error"]
    assert diags and all("gate evaluation of pick_backend stopped on this file (AttributeError: boom)" in d.message
                         for d in diags)
    # only the gates of pick_backend are lost; every other gate is still found
    assert lost == {("gatepkg/features.py", 19), ("gatepkg/features.py", 21)}
    assert len(r.gates) + 2 == len(plain.gates)


@pytest.mark.real
def test_own_checkout_with_its_venv(tmp_path):
    """archaudit scanned over its own checkout, .venv included: a report, no internal error."""
    venv = REPO / ".venv"
    if not venv.is_dir():
        pytest.skip("no .venv beside the checkout (the README's set-up makes it)")
    out = tmp_path / "self.json"
    env = dict(os.environ, ARCHAUDIT_CACHE_DIR=str(tmp_path / "c"))
    p = subprocess.run([sys.executable, "-m", "archaudit", "scan", str(REPO), "-t", "sm_120", "-q",
                        "--format", "json", "-o", str(out)], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=900)
    assert p.returncode in (0, 1), p.stderr[-2000:]
    import json

    d = json.loads(out.read_text())
    assert not [x for x in d["diagnostics"] if x["kind"] == "internal-error"]
    assert any(g["path"].endswith("shapes/rebound.py") for g in d["gates"])
