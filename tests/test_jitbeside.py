"""A JIT builder in the scan (fixtures/jitbeside: a tvm_ffi stand-in beside kernpkg) is read as
outside it from other packages: kernpkg's JIT sink is recognised by its external name
(rules/jit.toml) whether or not tvm_ffi sits beside it, so the finding is the same both ways."""
import shutil

from archaudit.pipeline import scan
from archaudit.ruledata import load_rule

from conftest import FIXTURES

TREE = FIXTURES / "jitbeside"
GATE = ("kernpkg/ssd.py", 21, 8, "capability-compare", ("sm_100", "sm_103"))
FINDING = ("kernpkg/ssd.py", 21, "unresolved", "ssd_{arch}: source _CUDA_SOURCE: inline (source text passed inline)")


def _view(root, reg):
    res = scan(root, [reg.parse("sm_120")])
    gates = {(g.path, g.line, g.col, g.kind, tuple(sorted(g.admits))) for g in res.gates}
    findings = {(f.gate.path, f.gate.line, f.verdict, f.reason) for f in res.findings}
    return gates, findings


def test_kernpkg_alone_and_beside_tvm_ffi(reg, tmp_path):
    shutil.copytree(TREE / "kernpkg", tmp_path / "kernpkg")
    assert _view(tmp_path, reg) == ({GATE}, {FINDING})
    # beside the stand-in, the call was followed into tvm_ffi/cpp/extension.py and the module lost
    # ("no JIT module is reached from the region this gate guards")
    assert _view(TREE, reg) == ({GATE}, {FINDING})


def test_every_jit_sink_package_is_read_as_outside():
    """A package whose calls rules/jit.toml recognises by external name must not be followed into
    when it is scanned too: its top-level package is one of rules/externals.toml's runtimes."""
    runtimes = set(load_rule("externals")["runtimes"])
    tops = {name.split(".", 1)[0] for s in load_rule("jit")["sink"] for name in s.get("externals", ())}
    assert tops and tops <= runtimes
