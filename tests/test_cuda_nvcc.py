"""Check the fixture predictions against what nvcc does (device pass only: -cubin)."""
from __future__ import annotations

import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from archaudit.cuda import ruleset
from archaudit.cuda.tu import CudaProject, FsReader

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "cuda"
NVCC = shutil.which("nvcc")

# Two targets per fixture: one it is written for and one it is not.
CASES = [
    ("wgmma_guarded.cu", ("sm_90a", "sm_120f")),
    ("wgmma_unguarded.cu", ("sm_90a", "sm_120f")),
    ("family_trap.cu", ("sm_100f", "sm_120f")),
    ("macro_chain.cu", ("sm_90a", "sm_120f")),
    ("asm_macro.cu", ("sm_90a", "sm_120f")),
    ("unused_code.cu", ("sm_80", "sm_120f")),
    ("template_kernel.cu", ("sm_90a", "sm_120f")),
    ("arch_error.cu", ("sm_80", "sm_90a")),
    ("smem.cu", ("sm_90a", "sm_120f")),
    ("atom_use.cu", ("sm_90a", "sm_120f")),
    ("intrinsic.cu", ("sm_80", "sm_90a")),
    ("elif_chain.cu", ("sm_80", "sm_100f")),
    ("nv_target.cu", ("sm_80", "sm_90a")),
    ("lamport_guard.cu", ("sm_90a", "sm_120f")),
]


def _compile(tu: str, target: str, out_dir: Path) -> tuple[int, str]:
    code = target[3:]
    cmd = [NVCC, "-cubin", f"-gencode=arch=compute_{code},code=sm_{code}", "-o", str(out_dir / f"{tu.replace('/', '_')}.{target}.cubin"),
           str(FIX / tu)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    return p.returncode, (p.stderr or p.stdout).strip().splitlines()[0] if (p.stderr or p.stdout).strip() else ""


@pytest.mark.nvcc
@pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")
def test_fixture_predictions_match_nvcc(tmp_path):
    proj = CudaProject(FsReader(str(FIX)), [""], {})
    jobs = [(tu, t) for tu, ts in CASES for t in ts]
    with ThreadPoolExecutor(max_workers=2) as ex:
        outcomes = dict(zip(jobs, ex.map(lambda j: _compile(j[0], j[1], tmp_path), jobs)))
    bad = []
    for (tu, t), (rc, first) in outcomes.items():
        pred = proj.analyse_tu(tu, ruleset.target_by_name(t)).prediction
        assert pred != "unknown", (tu, t)
        expect_ok = pred in ("builds", "stub")
        if expect_ok != (rc == 0):
            bad.append(f"{tu} {t}: predicted {pred}, nvcc rc={rc} {first}")
    assert not bad, "\n".join(bad)
    # each fixture is meant to discriminate: at least one target builds and one does not, or a
    # stub/fails appears for one of the two
    preds = {(tu, t): proj.analyse_tu(tu, ruleset.target_by_name(t)).prediction for tu, t in jobs}
    for tu, ts in CASES:
        if tu not in ("unused_code.cu", "template_kernel.cu"):  # both build on purpose
            assert len({preds[(tu, t)] for t in ts}) == 2, tu


CENSUS = [("lamport_guard.cu", "sm_120f"), ("lamport_guard.cu", "sm_90a"), ("wgmma_guarded.cu", "sm_120f"),
          ("family_trap.cu", "sm_120f"), ("macro_chain.cu", "sm_120f")]


@pytest.mark.nvcc
@pytest.mark.skipif(NVCC is None, reason="nvcc not on PATH")
def test_kernel_census_matches_per_kernel_status(tmp_path):
    """bench/kernel_census.py's reading of nvcc's PTX (.entry body: only ret -> empty, only trap ->
    trap) agrees with archaudit's kernel statuses on the fixtures."""
    import kernel_census as K

    proj = CudaProject(FsReader(str(FIX)), [""], {})
    for tu, t in CENSUS:
        out = tmp_path / f"{tu}.{t}.ptx"
        code = t[3:]
        subprocess.run([NVCC, "--ptx", f"-gencode=arch=compute_{code},code=sm_{code}", "-o", str(out), str(FIX / tu)],
                       check=True, capture_output=True, timeout=120)
        entries = K.parse_ptx(out.read_text())
        dm = K.demangle([e.mangled for e in entries])
        ptx = {}
        for e in entries:
            ptx.setdefault(K.family(dm[e.mangled]), set()).add(e.status)
        got = {k.name: {k.status} for k in proj.analyse_tu(tu, ruleset.target_by_name(t)).kernels}
        assert got == ptx, (tu, t)
