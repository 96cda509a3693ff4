"""Platform needs beyond the instruction set (rules/platform.toml, archaudit/platform.py): NVLink
multicast that a module's Python setup requires, shared memory above what the target offers.
fixtures/platform/mcpkg: one generator per case, each gated to [9, 10]; the pinned real packages
for flashinfer's MNNVL all-reduce."""
import pytest

from archaudit.verdict.explain import explain
from archaudit.pipeline import run_with_big_stack, scan
from archaudit.python.index import Index
from archaudit.sources import open_source

from conftest import FIXTURES

MODS = "mcpkg/jit/modules.py"
MEM = "mcpkg/driver_mem.py"


@pytest.fixture(scope="module")
def found(reg):
    res = scan(FIXTURES / "platform", [reg.parse("sm_120"), reg.parse("sm_89")])
    return {(f.gate.path, f.gate.line, f.target): f for f in res.findings}


def test_platform_facts(reg):
    assert [g.name for g in reg.gpus if g.lacks("nvlink_multicast")] == [
        "sm_75", "sm_80", "sm_86", "sm_87", "sm_88", "sm_89", "sm_110", "sm_120", "sm_121"]
    assert [g.name for g in reg.gpus if g.nvlink_multicast == "may"] == ["sm_90", "sm_100", "sm_103"]
    assert not reg.by_name["sm_107"].lacks("nvlink_fabric")  # no product known: nothing concluded
    assert reg.by_name["sm_120"].lacks("nvlink_fabric") and reg.by_name["sm_121"].lacks("nvlink_fabric")


def test_fixture_verdicts(found):
    got = {(p, line, t): f.verdict for (p, line, t), f in found.items()}
    assert got == {
        (MODS, 7, "sm_120"): "hardware-bound",  # mc_ar: its workspace makes a multicast object
        (MODS, 12, "sm_120"): "software-only",  # uc_ar: SymmMem(enable_multicast=False)
        (MODS, 17, "sm_120"): "software-only",  # probed_ar: falls back to unicast on a probe
        (MODS, 22, "sm_120"): "software-only",  # flagged_ar: the caller's choice, not shown needed
        (MODS, 27, "sm_120"): "hardware-bound",  # big_smem: 128 KiB dynamic > 99 KiB
        (MODS, 32, "sm_120"): "hardware-bound",  # static_smem: 64 KiB static > 48 KiB on sm_120f
        (MODS, 37, "sm_120"): "software-only",  # fits_smem: 96 KiB dynamic, 32 KiB static
        (MODS, 42, "sm_120"): "hardware-bound",  # constexpr_smem: constexpr 112 KiB dynamic
        ("mcpkg/fusion.py", 9, "sm_120"): "partial",  # uc or mc backend behind one gate
        (MODS, 7, "sm_89"): "hardware-bound",
        (MODS, 12, "sm_89"): "software-only",
        (MODS, 17, "sm_89"): "software-only",
        (MODS, 22, "sm_89"): "software-only",
        (MODS, 27, "sm_89"): "hardware-bound",
        (MODS, 32, "sm_89"): "hardware-bound",
        (MODS, 37, "sm_89"): "software-only",
        (MODS, 42, "sm_89"): "hardware-bound",
        ("mcpkg/fusion.py", 9, "sm_89"): "partial",
    }


def test_multicast_evidence(found):
    f = found[(MODS, 7, "sm_120")]
    assert [(e.path, e.line, e.feature, e.supported_on) for e in f.evidence] == [
        (MEM, 27, "platform.nvlink_multicast", ("sm_90", "sm_100", "sm_103")),  # cuMulticastCreate
        (MEM, 14, "platform.nvlink_multicast", ("sm_90", "sm_100", "sm_103")),  # the raise on the probe
        (MODS, 7, "maintainer-comment", ()),  # the comment above the gate
    ]
    assert '"RTX/consumer (SM12x) parts are intentionally excluded' in f.evidence[2].message
    assert "mcpkg.mc_ar.McWorkspace reaches it on every path (SymmMem.__init__ -> SymmMem._map -> " \
           "SymmMem._setup_multicast -> cuMulticastCreate)" in f.evidence[0].message
    assert f.patch is None
    # partial: the plan (for --include-partial) patches the usable module's gate, not mc_ar's
    p = found[("mcpkg/fusion.py", 9, "sm_120")]
    assert "mcpkg/jit/modules.py:12: add 12 to [9, 10]" in p.reason
    assert "mcpkg/jit/modules.py:7:" not in p.reason


def test_shared_memory_evidence(found):
    dyn = found[(MODS, 27, "sm_120")]
    assert [(e.path, e.line, e.feature) for e in dyn.evidence] == [("mcpkg/data/csrc/big_smem.cu", 14, "trap-stub")]
    (m,) = dyn.modules
    assert m.entry_points == {"big_tile": "stub"}
    st = found[(MODS, 32, "sm_120")]
    assert [(e.path, e.line, e.feature) for e in st.evidence] == [("mcpkg/data/csrc/static_smem.cu", 6, "smem.static")]
    assert st.modules[0].prediction == "fails"
    assert "sm_120a" in st.evidence[0].supported_on and "sm_120f" not in st.evidence[0].supported_on
    cx = found[(MODS, 42, "sm_120")]
    assert [(e.path, e.line, e.feature) for e in cx.evidence] == [("mcpkg/data/csrc/constexpr_smem.cu", 16, "trap-stub")]
    assert "smem (114688 bytes requested, 101376 the most per block: cudaFuncSetAttribute(" in cx.evidence[0].message


def _explain(root, reg, site, target="sm_120"):
    src = open_source(root)
    files = src.files()
    idx = Index(src, [f for f in files if f.endswith(".py")], True)
    path, line = site.rsplit(":", 1)
    (e,) = run_with_big_stack(lambda: explain(src, files, idx, reg, path, int(line), [reg.parse(target)], True))
    (f,) = e.findings
    return f


@pytest.mark.real
@pytest.mark.parametrize("corpus, site, mcast, refusal", [
    ("sp0615", "flashinfer/jit/comm.py:40", 1383, None),
    # 0.7.2's SymmDeviceMemory raises when the device has no multicast
    ("sp072", "flashinfer/jit/comm.py:46", 1145, ("flashinfer/comm/mnnvl.py", 795)),
])
def test_mnnvl_allreduce_is_hardware_bound(request, reg, corpus, site, mcast, refusal):
    """flashinfer's MNNVL all-reduce compiles for sm_120f, but its workspace
    (MNNVLAllReduceFusionWorkspace -> McastGPUBuffer -> SymmDeviceMemory, enable_multicast left at
    its default True) binds an NVLink multicast object and raises when the device has none; the
    kernels store through that multicast address. No sm_120 system has one: hardware-bound, and no
    patch (the maintainers' comment above the list says SM12x is excluded on purpose)."""
    f = _explain(request.getfixturevalue(corpus), reg, site)
    assert f.verdict == "hardware-bound"
    assert [m.name for m in f.modules] == ["trtllm_mnnvl_comm"]
    ev = [(e.path, e.line, e.feature) for e in f.evidence]
    assert ev[0] == ("flashinfer/comm/mnnvl.py", mcast, "platform.nvlink_multicast")
    assert ev[1:-1] == ([(*refusal, "platform.nvlink_multicast")] if refusal else [])
    # "Thor (SM11x) and RTX/consumer (SM12x) are intentionally excluded here."
    assert ev[-1] == (*site.split(":")[:1], int(site.split(":")[1]), "maintainer-comment")
    assert "RTX/consumer (SM12x) are intentionally excluded" in f.evidence[-1].message
    assert "MNNVLAllReduceFusionWorkspace" in f.reason
    assert f.patch is None


@pytest.mark.real
def test_trtllm_allreduce_has_no_platform_need(sp0615, reg):
    """trtllm_comm's workspace is SymmDeviceMemory(enable_multicast=False): no need is found, and
    the gate stays partial for its one stub kernel."""
    f = _explain(sp0615, reg, "flashinfer/jit/comm.py:191")
    assert f.verdict == "partial"
    assert not any(e.feature.startswith("platform.") for e in f.evidence)
