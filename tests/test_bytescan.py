"""Packages with no architecture-dependent code cost a byte scan (fixtures/bytescan): a name looked
up through star imports parses only the modules whose bytes can bind it, and a gate whose path
goes through a module without a gate is judged as before."""
from archaudit.pipeline import scan
from archaudit.python.index import Index
from archaudit.python.pybytes import star_imports
from archaudit.sources import open_source

from conftest import FIXTURES

ROOT = FIXTURES / "bytescan"


def test_only_read_package_and_gate_through_module_without_gate(reg):
    res = scan(ROOT, [reg.parse("sm_120")])
    assert [(g.path, g.line, g.kind, sorted(g.admits)) for g in res.gates] == [
        ("servepkg/layers.py", 8, "capability-compare", ["sm_100", "sm_103", "sm_107"])]
    (f,) = res.findings
    assert (f.gate.path, f.gate.line, f.verdict) == ("servepkg/layers.py", 8, "software-only")
    assert f.reason.startswith("scale_{arch}: every source builds for sm_120f")
    # zoo is star-imported by hub but never spells Settings: read, never parsed; hub.relay
    # (no gate) is parsed because the gate's path goes through it
    assert res.stats["packages_read"] == ["zoo"]
    assert res.stats["packages_analysed"] == {"hub": 3, "servepkg": 4}
    assert res.diagnostics == []


def test_may_bind_follows_star_imports_by_bytes():
    src = open_source(ROOT)
    index = Index(src, [p for p in src.files() if p.endswith(".py")], path_based=False)
    assert index.may_bind("hub", "Settings")  # through `from .settings import *`
    assert index.may_bind("zoo", "LlamaModel")  # through `from .llama import *`
    assert not index.may_bind("zoo", "Settings")
    assert index.may_bind("hub", "relay")  # a submodule
    assert index.loaded_modules() == []  # bytes only


def test_star_imports_from_bytes():
    assert star_imports(b"from .models import *\nfrom x.y import *  # c\nimport os\n") == [(1, b"models"), (0, b"x.y")]
    assert star_imports(b"from . import *\n") == [(1, b"")]
    assert star_imports(b"import os, sys\nfrom m import a as b\n") == []
    # not understood: any name may be bound
    assert star_imports(b"if X: from m import *\n") is None
    assert star_imports(b"# from m import *\n") is None
