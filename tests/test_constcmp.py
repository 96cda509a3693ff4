"""A capability compared with a module constant (fixtures/constcmp): `X != NAME` with
`NAME = (9, 0)` gets `X not in (NAME, (12, 0))`, the constant left alone; the refusal that reads
the returned `name=value` reason takes the same edit; applied, both gates admit sm_120."""
import shutil
import subprocess

from click.testing import CliRunner

from archaudit.cli import main
from archaudit.pipeline import scan

from conftest import FIXTURES

ROOT = FIXTURES / "constcmp"
VERIFY = "ckpkg/verify.py"
EDIT = "`tuple(capability) != _HOPPER_CC` -> `tuple(capability) not in (_HOPPER_CC, (12, 0))`"
DIFF = """--- ckpkg/verify.py
+++ ckpkg/verify.py
@@ -7,7 +7,7 @@
 
 def _eligibility(device):
     capability = torch.cuda.get_device_capability(device)
-    if tuple(capability) != _HOPPER_CC:
+    if tuple(capability) not in (_HOPPER_CC, (12, 0)):
         return f"compute_capability={capability}"
     return None
 
"""


def test_findings_and_plans(reg):
    r = scan(ROOT, [reg.parse("sm_120")])
    assert {g.line: (g.region, sorted(g.admits)) for g in r.gates} == {
        10: ("after-early-exit", ["sm_90"]), 17: ("after-early-exit", ["sm_90"])}
    got = {f.gate.line: (f.verdict, f.reason) for f in r.findings}
    base = "prep: every source builds for sm_120f; entry point(s) prep reaches only real kernels; patch plan: "
    assert got == {
        10: ("software-only", base + f"{VERIFY}:10: {EDIT}"),
        17: ("software-only", base + f"{VERIFY}:17: {EDIT} in _eligibility (for every caller of it)"),
    }


def test_the_exact_diff_and_the_round_trip(tmp_path, reg):
    out = tmp_path / "p.diff"
    r = CliRunner().invoke(main, ["patch", str(ROOT), "-t", "sm_120", "-o", str(out), "--no-cache"])
    assert r.exit_code == 0, r.output
    assert out.read_text() == DIFF
    assert [ln for ln in r.output.splitlines() if ln.startswith(("patched", "covered", "NOT"))] == [
        f"patched: {VERIFY}:10: {EDIT}", f"covered: {VERIFY}:17: admits sm_120 with the edits before it"]
    copy = tmp_path / "copy"
    shutil.copytree(ROOT, copy)
    subprocess.run(["patch", "-p0", "--batch", "-d", str(copy), "-i", str(out)], check=True, capture_output=True)
    again = scan(copy, [reg.parse("sm_120")])
    assert {g.line: sorted(g.admits) for g in again.gates} == {10: ["sm_120", "sm_90"], 17: ["sm_120", "sm_90"]}
    assert again.findings == []
