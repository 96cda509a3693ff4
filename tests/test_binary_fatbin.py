"""Fatbin/cubin reader on small hand-built binaries (fixtures/binary/make_fixtures.py)."""
import struct
import sys

import pytest

from archaudit.binary.fatbin import BinArch, parse_arch_name, read_binary, read_file, runs_on

from conftest import FIXTURES

sys.path.insert(0, str(FIXTURES / "binary"))
import make_fixtures as mk  # noqa: E402


@pytest.fixture(scope="module")
def samples():
    return mk.samples()


def summary(info):
    return info.format, info.containers, info.names("sass"), info.names("ptx")


@pytest.mark.parametrize("name, sass", [
    ("sm80.cubin", ["sm_80"]),
    ("sm90a.cubin", ["sm_90a"]),          # ABI 8: "a" from .nv.compat
    ("sm90a_abi7.cubin", ["sm_90a"]),     # ABI 7: "a" from e_flags 0x800
    ("sm86_abi7.cubin", ["sm_86"]),
    ("sm100a.cubin", ["sm_100a"]),
    ("sm100f.cubin", ["sm_100f"]),        # "f" only in ptxas's -arch in .note.nv.tkinfo
    ("sm120.cubin", ["sm_120"]),
    ("sm121a.cubin", ["sm_121a"]),
])
def test_bare_cubins(samples, name, sass):
    info = read_binary(samples[name])
    assert summary(info) == ("cubin", 0, sass, [])
    assert info.diagnostics == []
    assert info.archs[0].container == -1


def test_cubin_how(samples):
    assert read_binary(samples["sm90a.cubin"]).archs[0].how == "elf-e_flags+nv.compat"
    assert read_binary(samples["sm90a_abi7.cubin"]).archs[0].how == "elf-e_flags"
    assert read_binary(samples["sm100f.cubin"]).archs[0].how == "elf-e_flags+tkinfo"


def test_multi_fatbin(samples):
    info = read_binary(samples["multi.fatbin"])
    assert summary(info) == ("fatbin", 1, ["sm_80", "sm_90a", "sm_120a"], ["compute_80", "compute_100f"])
    assert [(a.name, a.compressed) for a in info.archs] == [
        ("sm_80", ""), ("compute_80", ""), ("sm_90a", ""), ("compute_100f", "zstd"), ("sm_120a", "lz4")]
    assert [a.ptx_version for a in info.archs if a.kind == "ptx"] == ["9.0", "9.0"]
    assert info.diagnostics == []


def test_host_object_with_two_containers(samples):
    info = read_binary(samples["two_containers.so"])
    assert summary(info) == ("host-elf", 2, ["sm_75", "sm_100a"], ["compute_120f"])
    assert [a.container for a in info.archs] == [0, 1, 1]
    assert info.diagnostics == []


def test_relocatable_section(samples):
    info = read_binary(samples["rdc.o"])
    assert summary(info) == ("host-elf", 1, ["sm_90"], [])
    assert info.archs[0].relocatable is True


def test_host_without_device_code(samples):
    info = read_binary(samples["nodevice.so"])
    assert summary(info) == ("host-elf", 0, [], [])
    assert not info.has_device_code and info.diagnostics == []


@pytest.mark.parametrize("name, fmt, sass, diag", [
    ("truncated.fatbin", "fatbin", [], "claims 696 bytes beyond its section or file"),
    ("huge_size.fatbin", "fatbin", ["sm_80"], "claims 4611686018427387904 bytes beyond"),
    ("bad_entry.fatbin", "fatbin", [], "bad header size 4294967280"),
    ("mismatch.fatbin", "fatbin", ["sm_90"], "header says sm_90 but its cubin says sm_86"),
    ("bad_sections.so", "host-elf", ["sm_75", "sm_100a"], "unreadable section table"),
    ("short.elf", "unknown", [], "truncated ELF header"),
    ("text.txt", "unknown", [], "unknown magic"),
])
def test_hostile_inputs_give_diagnostics(samples, name, fmt, sass, diag):
    info = read_binary(samples[name])
    assert info.format == fmt
    assert info.names("sass") == sass
    assert any(diag in d for d in info.diagnostics), info.diagnostics


def test_fuzzed_inputs_never_raise(samples):
    import random

    rnd = random.Random(1234)
    for name in ("multi.fatbin", "two_containers.so", "sm100a.cubin", "sm90a_abi7.cubin"):
        data = samples[name]
        for _ in range(300):
            b = bytearray(data)
            for _ in range(rnd.randint(1, 8)):
                i = rnd.randrange(len(b))
                b[i] = rnd.randrange(256)
            cut = rnd.randrange(len(b) + 1) if rnd.random() < 0.3 else len(b)
            info = read_binary(bytes(b[:cut]))
            assert info.format in ("cubin", "fatbin", "host-elf", "unknown")


def test_many_tiny_containers_are_bounded():
    one = mk.container([])
    info = read_binary(one * 5000)
    assert info.containers == 5000 and info.archs == []


def test_read_file_errors(tmp_path):
    info = read_file(tmp_path / "missing.so")
    assert info.format == "unknown" and "cannot read" in info.diagnostics[0]
    p = tmp_path / "x.fatbin"
    p.write_bytes(mk.samples()["multi.fatbin"])
    assert read_file(p, max_bytes=10).diagnostics[0].startswith("file too large")
    assert read_file(p).names("sass") == ["sm_80", "sm_90a", "sm_120a"]


def test_generator_script_writes_files(tmp_path):
    paths = mk.write(tmp_path)
    assert {p.name for p in paths} == set(mk.samples())
    assert read_file(tmp_path / "sm121a.cubin").names() == ["sm_121a"]


# --------------------------------------------------------------------------------- runs_on
@pytest.mark.parametrize("archs, gpu, expect", [
    (["sm_80"], "sm_86", "sass"),          # same major, higher minor
    (["sm_80"], "sm_90", "no"),
    (["sm_80", "compute_80"], "sm_90", "ptx-jit"),
    (["sm_80", "compute_80"], "sm_120", "ptx-jit"),
    (["sm_86"], "sm_80", "no"),            # lower minor
    (["sm_90a"], "sm_90", "sass"),
    (["sm_90a", "compute_90a"], "sm_100", "no"),  # arch-specific PTX does not JIT forward
    (["sm_100a"], "sm_103", "no"),         # "a" only exactly that GPU
    (["sm_100f"], "sm_103", "sass"),       # family 100f
    (["sm_100f"], "sm_110", "no"),
    (["sm_100f"], "sm_120", "no"),
    (["sm_120f"], "sm_121", "sass"),
    (["sm_120a"], "sm_121", "no"),
    (["sm_121a"], "sm_120", "no"),
    (["compute_120f"], "sm_121", "ptx-jit"),
    (["compute_100f"], "sm_120", "no"),
    (["compute_90"], "sm_121", "ptx-jit"),
    ([], "sm_120", "no"),
])
def test_runs_on(archs, gpu, expect):
    assert runs_on(archs, gpu) == expect


def test_runs_on_accepts_entries_and_requests(samples, reg):
    info = read_binary(samples["multi.fatbin"])
    assert runs_on(info.archs, reg.parse("RTX PRO 6000")) == "sass"  # sm_120a SASS
    assert runs_on(info.archs, reg.parse("DGX Spark")) == "ptx-jit"  # 120a is not 121; compute_80 JITs
    assert runs_on(info.archs, reg.by_name["sm_89"]) == "sass"  # sm_80 SASS
    two = read_binary(samples["two_containers.so"]).archs  # sm_75, sm_100a, compute_120f
    assert runs_on(two, "sm_103") == "no"
    assert runs_on(two, "sm_121") == "ptx-jit"
    assert runs_on(two, "sm_100") == "sass"


def test_parse_arch_name():
    assert parse_arch_name("sm_100f") == BinArch("sass", 100, "f")
    assert parse_arch_name("compute_90a") == BinArch("ptx", 90, "a")
    assert parse_arch_name("sm100") is None
    assert parse_arch_name("bogus") is None


def test_ptx_target_cross_check():
    bad = mk.container([mk.entry(mk.PTX, 90, mk.ptx(80))])
    info = read_binary(bad)
    assert info.names("ptx") == ["compute_90"]
    assert "header says compute_90 but .target is sm_80" in info.diagnostics[0]


def test_elf32_and_big_endian_do_not_crash():
    be = bytearray(mk.samples()["two_containers.so"])
    be[5] = 2
    info = read_binary(bytes(be))
    assert info.format == "host-elf" and "big-endian" in info.diagnostics[0]
    e32 = bytearray(b"\x7fELF\x01\x01\x01" + b"\0" * 60)
    struct.pack_into("<H", e32, 0x12, 3)
    assert read_binary(bytes(e32)).format == "host-elf"
