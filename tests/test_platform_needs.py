"""Platform facilities in a gate's condition (fixtures/gateplatform): a refusal that tests NVLink
multicast beside the architecture makes the code after it need NVLS, which sm_120 systems lack,
so widening the architecture test cannot admit sm_120 (hardware-bound, with the test as evidence);
a gate whose admitted set was inferred through that refusal's function needs it too."""
import pytest
from click.testing import CliRunner

from archaudit.cli import main
from archaudit.pipeline import scan
from archaudit.python.platform_needs import platform_needs

from conftest import FIXTURES

ROOT = FIXTURES / "gateplatform"
NVLS = "platform.nvlink_multicast"

# (gate path, line) -> (verdict, [(evidence path, line, feature)])
EXPECTED_SM120 = {
    # the refusal itself: `device_sm not in (100, 103) or ... or not has_multicast`
    ("mcast/collective.py", 22): ("hardware-bound", [("mcast/collective.py", 22, NVLS)]),
    # `state is None` after `state = _init_state(comm)`: the same decision, so the same need
    ("mcast/collective.py", 30): ("hardware-bound", [("mcast/collective.py", 22, NVLS)]),
    ("mcast/collective.py", 36): ("hardware-bound", [("mcast/collective.py", 36, NVLS)]),
    # an assert: its `and` terms are needs
    ("mcast/collective.py", 42): ("hardware-bound", [("mcast/collective.py", 42, NVLS)]),
    # the same shapes with no multicast test, or one that refuses multicast: only the gate is in the way
    ("mcast/plain.py", 11): ("software-only", []),
    ("mcast/plain.py", 19): ("software-only", []),
    ("mcast/plain.py", 26): ("software-only", []),
}


@pytest.mark.parametrize("text,region,want", [
    ("device_sm not in (100, 103) or not has_multicast", "after-early-exit", [("nvlink_multicast", "not has_multicast")]),
    ("x // 10 != 10 or not comm.has_multicast", "after-early-exit", [("nvlink_multicast", "not comm.has_multicast")]),
    ("x // 10 != 10 or not comm.has_nvls()", "after-early-exit", [("nvlink_multicast", "not comm.has_nvls()")]),
    ("x == 10 and comm.is_multicast_supported()", "assert", [("nvlink_multicast", "comm.is_multicast_supported()")]),
    # refusing the facility, or testing it in a branch whose arm is not known: no need
    ("x // 10 != 10 or comm.has_multicast", "after-early-exit", []),
    ("x == 10 and comm.has_multicast", "branch", []),
    # `not (A or flag)`: one term, not a bare negated flag
    ("not (x == 10 or has_multicast)", "after-early-exit", []),
    # an `or` inside an assert does not make the flag necessary
    ("x == 10 or comm.has_multicast", "assert", []),
    # a name that only looks alike, and text that is not a whole expression (a truncated gate)
    ("x != 10 or not use_multicast", "after-early-exit", []),
    ("x != 10 or not has_multicast and (", "after-early-exit", []),
])
def test_needs_read_off_the_condition(text, region, want):
    assert list(platform_needs(text, region)) == want


@pytest.fixture(scope="module")
def result(reg):
    return scan(ROOT, [reg.parse("sm_120"), reg.parse("sm_90")])


def test_exact_findings_sm120(result):
    got = {(f.gate.path, f.gate.line): (f.verdict, [(e.path, e.line, e.feature) for e in f.evidence])
           for f in result.findings if f.target == "sm_120"}
    assert got == EXPECTED_SM120


def test_reason_says_platform_and_no_patch(result):
    f = next(f for f in result.findings if f.target == "sm_120" and (f.gate.path, f.gate.line) == ("mcast/collective.py", 30))
    assert f.reason.startswith("the path needs NVLink SHARP multicast")
    assert "(`not has_multicast` at mcast/collective.py:22), which sm_120 systems lack: a platform fact" in f.reason
    assert "was software-only: sp_collective: every source builds for sm_120f" in f.reason
    assert f.patch is None


def test_h100_has_nvls(result):
    """sm_90 systems have NVLink multicast: the same gates stay software-only there, with patches."""
    got = {(f.gate.path, f.gate.line): f.verdict for f in result.findings if f.target == "sm_90"}
    assert got == {k: "software-only" for k in EXPECTED_SM120}
    assert all(f.patch for f in result.findings if f.target == "sm_90")


def test_patch_edits_only_the_plain_gates():
    r = CliRunner().invoke(main, ["patch", str(ROOT), "-t", "sm_120", "--no-cache"])
    assert r.exit_code == 0, r.output
    changed = [ln for ln in r.stdout.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    assert changed == [
        "-    if device_sm not in (100, 103) or comm.world_size not in (4, 8):",
        "+    if device_sm not in (100, 103, 120) or comm.world_size not in (4, 8):",
        "-    if get_device_sm() // 10 != 10 or comm.has_multicast:",
        "+    if get_device_sm() // 10 not in (10, 12) or comm.has_multicast:",
    ]
    assert [ln for ln in r.stdout.splitlines() if ln.startswith("+++")] == ["+++ mcast/plain.py"]
