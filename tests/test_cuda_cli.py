"""`archaudit cuda` command."""
from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from archaudit.cli import main

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "cuda"


def run(*args):
    return CliRunner().invoke(main, ["cuda", *args])


def test_bare_target_maps_to_jit_variant():
    r = run(str(FIX / "wgmma_unguarded.cu"), "--target", "sm_120")
    assert r.exit_code == 1
    assert "sm_120 -> sm_120f" in r.output
    assert r.output.strip().splitlines()[-1].startswith("fails for sm_120f: ptx.wgmma")
    assert "wgmma_unguarded.cu:4" in r.output


def test_json_output():
    r = run(str(FIX / "family_trap.cu"), "--target", "sm_120a", "--format", "json")
    d = json.loads(r.output)
    assert d["target"] == "sm_120a" and d["prediction"] == "stub" and d["target_mapped"] is False
    assert {k["name"]: k["status"] for k in d["kernels"]} == {"tc_kernel": "trap", "plain_kernel": "real"}
    r = run(str(FIX / "wgmma_unguarded.cu"), "--target", "sm_100a", "--format", "json")
    d = json.loads(r.output)
    assert d["blocking"][0]["path"] == "wgmma_unguarded.cu" and d["blocking"][0]["line"] == 4
    assert d["blocking"][0]["supported_on"] == ["sm_90a"]
    assert run(str(FIX / "wgmma_unguarded.cu"), "--target", "sm_90a").exit_code == 0


def test_defines_and_includes(tmp_path):
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "feat.h").write_text('#ifdef USE_HOPPER\n#define PTX "wgmma.fence.sync.aligned;"\n#else\n#define PTX "membar.gl;"\n#endif\n')
    src = tmp_path / "src"
    src.mkdir()
    (src / "k.cu").write_text('#include <feat.h>\n__global__ void k() { asm volatile(PTX); }\n')
    assert run(str(src / "k.cu"), "-t", "sm_120f", "-I", str(inc)).exit_code == 0
    r = run(str(src / "k.cu"), "-t", "sm_120f", "-I", str(inc), "-D", "USE_HOPPER")
    assert r.exit_code == 1 and "ptx.wgmma" in r.output


def test_usage_errors():
    r = run(str(FIX / "family_trap.cu"), "--target", "sm_12")
    assert r.exit_code == 2 and "closest" in r.output and "Traceback" not in r.output
    r = run("/no/such/file.cu", "--target", "sm_90a")
    assert r.exit_code == 2 and "no such file" in r.output
