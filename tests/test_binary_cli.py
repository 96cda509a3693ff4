"""`archaudit binary FILE... [--target T]` on generated binaries."""
import json
import sys

import pytest
from click.testing import CliRunner

from archaudit.cli import main

from conftest import FIXTURES

sys.path.insert(0, str(FIXTURES / "binary"))
import make_fixtures as mk  # noqa: E402


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bins")
    mk.write(d)
    return d


def run(*args):
    return CliRunner().invoke(main, ["binary", *map(str, args)])


def test_text_with_targets(files):
    r = run(files / "multi.fatbin", "-t", "sm_120", "-t", "H100", "-t", "sm_103")
    assert r.exit_code == 0, r.output  # every target runs it (sm_103 through compute_80)
    lines = r.output.splitlines()
    assert lines[0] == f"{files / 'multi.fatbin'}: fatbin, 1 fatbin container(s)"
    assert lines[1] == "  SASS: sm_80 sm_90a sm_120a (lz4)"
    assert lines[2] == "  PTX:  compute_80 compute_100f (zstd)"
    assert "  sm_120: runs (SASS sm_120a)" in lines
    assert "  sm_90: runs (SASS sm_90a)" in lines
    assert "  sm_103: runs through the driver's PTX JIT (compute_80)" in lines


def test_does_not_run_exit_1(files):
    r = run(files / "sm100a.cubin", "-t", "sm_103")
    assert r.exit_code == 1
    assert r.output.splitlines()[-1] == "  sm_103: does not run (no SASS or PTX usable on it)"
    assert run(files / "sm100a.cubin", "-t", "B200").exit_code == 0


def test_json(files):
    r = run(files / "two_containers.so", "--target", "DGX Spark", "--format", "json")
    assert r.exit_code == 0
    d = json.loads(r.output)[0]
    assert (d["format"], d["containers"], d["sass"], d["ptx"]) == ("host-elf", 2, ["sm_75", "sm_100a"], ["compute_120f"])
    assert d["runs_on"] == {"sm_121": {"how": "ptx-jit", "via": "compute_120f"}}


def test_directory_and_host_only(files):
    r = run(files, "-t", "sm_120")
    assert f"{files / 'nodevice.so'}: host-elf, 0 fatbin container(s)" in r.output
    assert "  sm_120: no device code, nothing GPU-specific" in r.output
    assert "  sm_120: does not run (no SASS or PTX usable on it)" in r.output  # sm100a.cubin
    assert r.exit_code == 2  # the directory also holds the malformed samples


def test_bad_input_exit_2(files):
    r = run(files / "text.txt")
    assert r.exit_code == 2
    assert "note: not an ELF file or fatbin container (unknown magic)" in r.output
    assert run(files / "truncated.fatbin").exit_code == 2
    r = run(files / "nope.so")
    assert r.exit_code == 2 and "no such file" in r.output
    r = run(files / "sm80.cubin", "-t", "sm_99")
    assert r.exit_code == 2 and "unknown target" in r.output
    assert "Traceback" not in r.output
