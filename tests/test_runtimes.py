"""A GPU runtime in the scan (fixtures/runtimes: a torch stand-in beside servepkg) is read as
outside it from other packages (rules/externals.toml runtimes): servepkg's gates and verdicts are
the same alone and beside torch, and torch's own gate is still found."""
import shutil

from archaudit.pipeline import scan

from conftest import FIXTURES

TREE = FIXTURES / "runtimes"
NO_GPU = ("every path the gate changes was followed (1 function(s)) and none builds, loads or calls GPU code: "
          "patching it changes only Python (or Triton, which compiles for the running GPU)")


def _view(root, reg):
    res = scan(root, [reg.parse("sm_120")])
    gates = {(g.path, g.line, g.col, g.kind, tuple(sorted(g.admits)), g.resolution) for g in res.gates}
    findings = {(f.gate.path, f.gate.line, f.verdict, f.reason) for f in res.findings}
    return gates, findings, res.diagnostics


def test_servepkg_alone_and_beside_torch(reg, tmp_path):
    shutil.copytree(TREE / "servepkg", tmp_path / "servepkg")
    at80 = ("sm_100", "sm_103", "sm_107", "sm_110", "sm_120", "sm_121", "sm_80", "sm_86", "sm_87", "sm_88", "sm_89", "sm_90")
    serve_gates = {
        ("servepkg/layers.py", 8, 9, "capability-compare", at80,
         "evaluated: capability-source torch.cuda.get_device_capability"),
        ("servepkg/layers.py", 19, 8, "predicate-call", ("sm_90",), "inferred: servepkg.layers.is_hopper"),
    }
    serve_findings = {("servepkg/layers.py", 19, "no-gpu-code", NO_GPU)}
    assert _view(tmp_path, reg) == (serve_gates, serve_findings, [])
    gates, findings, diags = _view(TREE, reg)
    # beside torch: before, torch.cuda.get_device_capability was read through torch's own code
    # (the gate at line 8 became environment-dependent) and synchronize() into torch._C and
    # amdsmi (line 19: unresolved)
    assert {g for g in gates if g[0].startswith("servepkg/")} == serve_gates
    assert {f for f in findings if f[0].startswith("servepkg/")} == serve_findings
    assert diags == []
    # the runtime's own gate: a refusal returned as a message, admitting 9.x and 10.x
    assert {g[:5] for g in gates if g[0].startswith("torch/")} == {
        ("torch/nn/attention/_fa4.py", 7, 8, "capability-compare", ("sm_100", "sm_103", "sm_107", "sm_90"))}
