"""Hostile inputs from an untrusted pull request: small wheels that would inflate, list or hash
into gigabytes, gate-dense modules, killed scans, the cache's whole-scan key, and the CI action
run from a workspace that holds importable files. Every archaudit run here is a subprocess under
an address-space cap and a timeout, and must finish within TIME_S seconds of CPU and MAX_RSS_MB of
resident memory, with its exit code, its diagnostic, and the gate beside the bad input."""
from __future__ import annotations

import bz2
import io
import json
import lzma
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
import zipfile
import zlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ARCHAUDIT = Path(sys.executable).parent / "archaudit"  # the console script: nothing from the cwd is imported
TIME_S = 10
MAX_RSS_MB = 500
# only a guard against a runaway: the shared machine's load (15-20 on 2 cores) stretches wall time
WALL_S = 180
# a runaway (the unfixed reader) fails fast instead of taking the shared machine's memory; the
# analysis thread's 512 MiB stack is address space, not resident memory
AS_LIMIT = 2 << 30

GATE = b"import torch\n\n\ndef pick():\n    if torch.cuda.get_device_capability()[0] == 9:\n        return 'hopper'\n    return 'generic'\n"
GATE_AT = ("gate.py", 5)

_RUNNER = r"""
import json, resource, subprocess, sys, time
limit = int(sys.argv[1])
def cap():
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
t = time.monotonic()
p = subprocess.run(sys.argv[2:], preexec_fn=cap, capture_output=True)
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": p.returncode, "out": p.stdout.decode("utf-8", "replace"),
                  "err": p.stderr.decode("utf-8", "replace"), "seconds": time.monotonic() - t,
                  "cpu": ru.ru_utime + ru.ru_stime, "rss_mb": ru.ru_maxrss / 1024}))
"""


def run_bounded(args: list[str], cwd: Path, env: dict | None = None, time_s: float = TIME_S,
                rss_mb: float = MAX_RSS_MB) -> dict:
    """archaudit ARGS in a fresh process under AS_LIMIT; its exit code, output, times and peak
    resident memory (of it and its workers). Fails past time_s of CPU (all its processes: wall
    time on a shared 2-core machine says more about the neighbours), past WALL_S of wall time
    (killed), or past MAX_RSS_MB."""
    full_env = dict(os.environ, ARCHAUDIT_CACHE_DIR=str(cwd / ".cache"), **(env or {}))
    p = subprocess.Popen([sys.executable, "-c", _RUNNER, str(AS_LIMIT), str(ARCHAUDIT), *args], cwd=cwd,
                         env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        out, _err = p.communicate(timeout=WALL_S)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # the runner, archaudit and its workers
        p.communicate()
        pytest.fail(f"archaudit {' '.join(args)} ran past {WALL_S} s of wall time")
    r = json.loads(out)
    assert r["cpu"] < time_s, (r["cpu"], r["seconds"], r["err"][-2000:])
    assert r["rss_mb"] < rss_mb, (r["rss_mb"], r["err"][-2000:])
    return r


def scan_json(target: Path, cwd: Path, *extra: str, time_s: float = TIME_S, rss_mb: float = MAX_RSS_MB) -> tuple[dict, dict]:
    out = cwd / "out.json"
    r = run_bounded(["scan", str(target), "--format", "json", "-o", str(out), "-q", *extra], cwd, time_s=time_s,
                    rss_mb=rss_mb)
    assert r["rc"] == 0, r["err"][-2000:]
    return r, json.loads(out.read_text())


def gate_places(report: dict) -> set[tuple[str, int]]:
    return {(g["path"], g["line"]) for g in report["gates"]}


def diags(report: dict) -> set[tuple[str, str]]:
    return {(d["path"], d["kind"]) for d in report["diagnostics"]}


def diag_message(report: dict, path: str, kind: str) -> str:
    return next(d["message"] for d in report["diagnostics"] if (d["path"], d["kind"]) == (path, kind))


# --- wheels ---------------------------------------------------------------------------------

def bz2_bomb(blocks: int, unit: int = 32 << 20) -> tuple[bytes, int]:
    """A bzip2 stream of `blocks` copies of the block that holds `unit` zero bytes: the block's
    bits repeated between the stream header and the end marker, with the combined CRC the
    format asks for. Returns (stream, inflated size); a few KB inflate to gigabytes."""
    one = bz2.compress(b"\0" * unit, 9)
    bits, total = int.from_bytes(one, "big"), len(one) * 8
    magic = 0x177245385090  # end of stream, followed by the combined CRC and padding to a byte
    end = next(total - pad - 80 for pad in range(8)
               if (bits >> (pad + 32)) & ((1 << 48) - 1) == magic)
    blen = end - 32
    block = (bits >> (total - end)) & ((1 << blen) - 1)
    crc = (block >> (blen - 80)) & 0xFFFFFFFF  # after the 48-bit block magic
    out, comb = int.from_bytes(one[:4], "big"), 0
    for _ in range(blocks):
        out = (out << blen) | block
        comb = (((comb << 1) | (comb >> 31)) & 0xFFFFFFFF) ^ crc
    out = (((out << 48) | magic) << 32) | comb
    n = 32 + blocks * blen + 80
    return (out << (-n % 8)).to_bytes((n + (-n % 8)) // 8, "big"), blocks * unit


def raw_member(z: zipfile.ZipFile, buf: io.BytesIO, name: str, method: int, payload: bytes,
               file_size: int, crc: int) -> None:
    """Append a member whose compressed bytes are `payload` as given, with the sizes and CRC
    given (zipfile would compress, and check, what it is handed)."""
    zi = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
    zi.compress_type = method
    with z.open(zi, "w") as f:  # an empty member of that method, then its data swapped in
        pass
    raw = buf.getvalue()
    head = zi.header_offset
    local = bytearray(raw[head:head + 30 + len(name.encode())])
    struct.pack_into("<3L", local, 14, crc, len(payload), file_size)
    buf.seek(head)
    buf.truncate()
    buf.write(bytes(local) + payload)
    zi.CRC, zi.compress_size, zi.file_size = crc, len(payload), file_size
    zi.flag_bits &= ~0x08  # sizes in the local header, no data descriptor
    z.start_dir = buf.tell()


def bomb_wheel(path: Path, name: str, method: int, payload: bytes, file_size: int, crc: int = 0) -> Path:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("bombpkg/__init__.py", "")
        z.writestr("bombpkg/gate.py", GATE)
        z.writestr("bombpkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: bombpkg\nVersion: 1.0\n\n")
        z.writestr("bombpkg-1.0.dist-info/RECORD", "")
        raw_member(z, buf, name, method, payload, file_size, crc)
    path.write_bytes(buf.getvalue())
    return path


def test_bzip2_bomb_that_claims_100_bytes(tmp_path):
    """A 4 KB wheel, one bzip2 entry declaring 100 bytes that inflates to 4 GiB: read in pieces,
    it stops at byte 101."""
    stream, size = bz2_bomb(128)
    assert size == 4 << 30
    whl = bomb_wheel(tmp_path / "bombpkg-1.0-py3-none-any.whl", "bombpkg/bomb.py", zipfile.ZIP_BZIP2, stream, 100)
    assert whl.stat().st_size < 8192
    for cache in ([], ["--no-cache"]):
        _r, rep = scan_json(whl, tmp_path, *cache)
        assert ("bombpkg/" + GATE_AT[0], GATE_AT[1]) in gate_places(rep)
        assert ("bombpkg/bomb.py", "corrupt-member") in diags(rep)
        assert diag_message(rep, "bombpkg/bomb.py", "corrupt-member") == "inflates beyond its declared size of 100 bytes; not read"


def test_bzip2_bomb_within_the_declared_limit_is_charged_as_it_inflates(tmp_path):
    """The same bomb declaring 16 MiB (the file limit) inflates to exactly that and is refused
    at byte 16 MiB + 1, without the 4 GiB behind it."""
    stream, _size = bz2_bomb(128)
    whl = bomb_wheel(tmp_path / "bombpkg-1.0-py3-none-any.whl", "bombpkg/bomb.cu", zipfile.ZIP_BZIP2, stream, 16 << 20)
    _r, rep = scan_json(whl, tmp_path, "--no-cache")
    assert ("bombpkg/gate.py", 5) in gate_places(rep)
    assert diag_message(rep, "bombpkg/bomb.cu", "corrupt-member") == f"inflates beyond its declared size of {16 << 20} bytes; not read"


def test_lzma_bomb_and_a_4gib_dictionary(tmp_path):
    """An LZMA entry (zip's header: version, properties size, properties) declaring 100 bytes that
    inflates to 16 MiB, and one whose properties ask for a 4 GiB dictionary (what liblzma would
    allocate): the dictionary is cut to the entry's declared size, and the entry reads."""
    c = lzma.LZMACompressor(lzma.FORMAT_RAW, filters=[{"id": lzma.FILTER_LZMA1, "preset": 1}])
    body = c.compress(b"\0" * (16 << 20)) + c.flush()
    props = lzma._encode_filter_properties({"id": lzma.FILTER_LZMA1, "preset": 1})  # noqa: SLF001
    head = struct.pack("<BBH", 9, 4, len(props))
    whl = bomb_wheel(tmp_path / "bombpkg-1.0-py3-none-any.whl", "bombpkg/bomb.py", zipfile.ZIP_LZMA,
                     head + props + body, 100)
    _r, rep = scan_json(whl, tmp_path, "--no-cache")
    assert ("bombpkg/gate.py", 5) in gate_places(rep)
    assert diag_message(rep, "bombpkg/bomb.py", "corrupt-member") == "inflates beyond its declared size of 100 bytes; not read"
    # a real module whose header claims a 4 GiB dictionary
    c = lzma.LZMACompressor(lzma.FORMAT_RAW, filters=[{"id": lzma.FILTER_LZMA1, "preset": 1}])
    body = c.compress(GATE) + c.flush()
    huge = props[:1] + struct.pack("<L", 0xFFFFFFFF)
    whl = bomb_wheel(tmp_path / "bombpkg-1.0-py3-none-any.whl", "bombpkg/gate2.py", zipfile.ZIP_LZMA,
                     head + huge + body, len(GATE), zlib.crc32(GATE))
    _r, rep = scan_json(whl, tmp_path, "--no-cache")
    assert {("bombpkg/gate.py", 5), ("bombpkg/gate2.py", 5)} <= gate_places(rep)
    assert not {k for _p, k in diags(rep)} & {"corrupt-member", "too-large"}


def stored_zip(path: Path, members: list[tuple[str, bytes | int]]) -> Path:
    """A zip of stored members; a member given as an int is that many zero bytes left as a hole
    in the file (sparse, not written), with a CRC of 0 (nothing reads it)."""
    cd = b""
    with open(path, "wb") as f:
        for name, data in members:
            nb, off = name.encode(), f.tell()
            size = data if isinstance(data, int) else len(data)
            crc = 0 if isinstance(data, int) else zlib.crc32(data)
            f.write(struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 0, 0, 0, crc, size, size, len(nb), 0) + nb)
            if isinstance(data, int):
                f.seek(size, os.SEEK_CUR)
            else:
                f.write(data)
            cd += struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, 0, 0, 0, crc, size, size, len(nb),
                              0, 0, 0, 0, 0, off) + nb
        start = f.tell()
        f.write(cd + struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, len(members), len(members), len(cd), start, 0))
    return path


def test_large_wheel_is_hashed_in_pieces(tmp_path):
    """With the cache on, the wheel's content hash is read in pieces: a 520 MiB wheel (a sparse
    stored member no analysis reads) stays far below its size in memory, cold and warm."""
    whl = stored_zip(tmp_path / "bigpkg-1.0-py3-none-any.whl", [
        ("bigpkg/__init__.py", b""), ("bigpkg/gate.py", GATE),
        ("bigpkg-1.0.dist-info/METADATA", b"Metadata-Version: 2.1\nName: bigpkg\nVersion: 1.0\n\n"),
        ("bigpkg-1.0.dist-info/RECORD", b""), ("bigpkg/blob.dat", 520 << 20)])
    assert whl.stat().st_size > 520 << 20
    for mode in ("miss", "hit"):  # cold, then warm (the hash taken from the stat snapshot)
        _r, rep = scan_json(whl, tmp_path)
        assert ("bigpkg/gate.py", 5) in gate_places(rep)


def central_directory_bomb(path: Path, entries: int) -> Path:
    """One stored empty member, then `entries` central-directory records of it, under an end record
    that announces 1 entry."""
    name = b"cdpkg/x.py"
    local = struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 0, 0, 0, 0, 0, 0, len(name), 0) + name
    rec = struct.pack("<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, 0, 0, 0, 0, 0, 0, len(name), 0, 0, 0, 0, 0, 0) + name
    cd = rec * entries
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 1, 1, len(cd), len(local), 0)
    path.write_bytes(local + cd + end)
    return path


def test_central_directory_longer_than_its_end_record_says(tmp_path):
    """600,000 entries under an end record announcing 1: counted as the directory is walked,
    before zipfile makes an object of each; the wheel is refused (exit 2) with the count."""
    whl = central_directory_bomb(tmp_path / "cdpkg-1.0-py3-none-any.whl", 600_000)
    r = run_bounded(["scan", str(whl), "-q", "--format", "json"], tmp_path)
    assert r["rc"] == 2
    assert f"{whl}: 500001 entries exceeds the limit of 500000; not read" in r["err"]
    # the same directory within the limit is read (every entry a duplicate of the one member)
    whl = central_directory_bomb(tmp_path / "cdpkg-1.0-py3-none-any.whl", 1000)
    _r, rep = scan_json(whl, tmp_path, "--no-cache")
    assert ("cdpkg/x.py", "duplicate-member") in diags(rep)


# --- the CI action, run from a pull request's workspace -------------------------------------

def action_step(name: str) -> tuple[dict[str, str], str]:
    """A step of action.yml: its literal env values (not `${{ }}` expressions) and its bash script."""
    lines = (REPO / "action.yml").read_text().splitlines()
    i = lines.index(f"    - name: {name}")
    env: dict[str, str] = {}
    script: list[str] = []
    j = i + 1
    while j < len(lines) and not lines[j].startswith("    - "):
        line = lines[j]
        if line.startswith("      env:"):
            j += 1
            while lines[j].startswith("        "):
                k, v = lines[j].strip().split(":", 1)
                v = v.strip().strip('"')
                if not v.startswith("${{"):
                    env[k] = v
                j += 1
            continue
        if line.startswith("      run: |"):
            j += 1
            while j < len(lines) and (lines[j].startswith("        ") or not lines[j].strip()):
                script.append(lines[j][8:])
                j += 1
            continue
        j += 1
    return env, "\n".join(script) + "\n"


MARKER = "pwned"
HOSTILE = {  # what a pull request can add to the workspace: each leaves a marker if imported
    "click.py": "open(__import__('os').path.join({ws!r}, 'pwned'), 'a').write('click\\n')\n",
    "json.py": "open(__import__('os').path.join({ws!r}, 'pwned'), 'a').write('json\\n')\n",
    "sitecustomize.py": "open(__import__('os').path.join({ws!r}, 'pwned'), 'a').write('site\\n')\n",
    "archaudit/__init__.py": "open(__import__('os').path.join({ws!r}, 'pwned'), 'a').write('archaudit\\n')\n",
    "archaudit/__main__.py": "import sys; sys.exit(0)\n",
    "pip/__init__.py": "",
    "pip/__main__.py": "open(__import__('os').path.join({ws!r}, 'pwned'), 'a').write('pip\\n')\n",
}


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    shutil.copytree(REPO / "fixtures" / "ci" / "repo", ws)
    return ws


def _plant(ws: Path) -> None:
    for rel, text in HOSTILE.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text.format(ws=str(ws)))


def _run_scan_step(ws: Path, safepath: bool) -> tuple[int, str, bytes]:
    """The action's Scan step as GitHub runs it: bash, in the workspace, inputs in env."""
    env_lit, script = action_step("Scan")
    out = ws.parent / "gh-output"
    out.write_text("")
    env = dict(os.environ, GITHUB_WORKSPACE=str(ws), GITHUB_OUTPUT=str(out), PY=sys.executable,
               SCAN_PATH="venv-sp/site-packages", TARGETS="sm_120", BASELINE="", FAIL_ON="any",
               SARIF_DIR="archaudit-sarif", ARCHAUDIT_CACHE_DIR=str(ws.parent / "cache"), **env_lit)
    if not safepath:
        env.pop("PYTHONSAFEPATH", None)
    p = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=ws, env=env,
                       capture_output=True, text=True, timeout=120)
    sarif = (ws / "archaudit-sarif").iterdir()
    data = b"".join(f.read_bytes() for f in sorted(sarif))
    return p.returncode, out.read_text(), data


@pytest.mark.parametrize("safepath", [True, False], ids=["PYTHONSAFEPATH", "python3.10-no-safepath"])
def test_action_scan_step_imports_nothing_from_the_workspace(tmp_path, safepath):
    """A pull request that adds click.py, json.py, sitecustomize.py and an archaudit/ package to
    the workspace: the Scan step runs none of them and reports what it reports without them.
    Without PYTHONSAFEPATH (Python 3.10 ignores it) the empty working directory alone suffices."""
    assert all(action_step(s)[0].get("PYTHONSAFEPATH") == "1" for s in ("Install archaudit", "Scan"))
    ws = _workspace(tmp_path)
    rc, out, clean = _run_scan_step(ws, safepath)
    assert (rc, out) == (0, "exit-code=1\n")  # fail-on defaults to any: the fixture's findings fail the job later
    assert b'"ruleId"' in clean
    _plant(ws)
    shutil.rmtree(ws / "archaudit-sarif")
    rc, out, hostile = _run_scan_step(ws, safepath)
    assert not (ws / MARKER).exists(), (ws / MARKER).read_text()
    assert (rc, out) == (0, "exit-code=1\n")
    assert hostile == clean


@pytest.mark.parametrize("link", ["directory", "file"])
def test_action_sarif_output_committed_as_a_link_writes_nothing_outside(tmp_path, link):
    """Fresh case (output): the pull request commits the SARIF directory as a link to a directory
    outside the workspace, or the SARIF file the scan writes as a link to a file outside it (a
    shell profile): the report is written inside the workspace and the outside is unchanged."""
    ws = _workspace(tmp_path)
    rc, out, clean = _run_scan_step(ws, True)
    shutil.rmtree(ws / "archaudit-sarif")
    outside = tmp_path / "outside"
    outside.mkdir()
    profile = outside / "bashrc"
    profile.write_text("export PATH=/usr/bin\n")
    if link == "directory":
        (ws / "archaudit-sarif").symlink_to(outside)
    else:
        (ws / "archaudit-sarif").mkdir()
        (ws / "archaudit-sarif" / "archaudit-sm_120.sarif").symlink_to(profile)
    rc, out, data = _run_scan_step(ws, True)
    assert (rc, out) == (0, "exit-code=1\n")
    assert data == clean
    assert not (ws / "archaudit-sarif").is_symlink()
    assert not (ws / "archaudit-sarif" / "archaudit-sm_120.sarif").is_symlink()
    assert sorted(x.name for x in outside.iterdir()) == ["bashrc"]
    assert profile.read_text() == "export PATH=/usr/bin\n"


def test_report_file_that_is_a_link_is_replaced_not_written_through(tmp_path):
    # every -o: scan's JSON, baseline, patch, diff, explain go through cli/common.write_file
    from click.testing import CliRunner

    from archaudit.cli import main

    target = tmp_path / "victim"
    target.write_text("keep\n")
    out = tmp_path / "report.json"
    out.symlink_to(target)
    tree = _gate_tree(tmp_path / "t")
    for args in (["scan", str(tree), "--format", "json"], ["baseline", str(tree), "-t", "sm_120"]):
        r = CliRunner().invoke(main, [*args, "-q", "--no-cache", "-o", str(out)])
        assert r.exit_code == 0, r.output
        assert target.read_text() == "keep\n" and not out.is_symlink()
        assert json.loads(out.read_text())
        out.unlink()
        out.symlink_to(target)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["report.json", "t", "victim"]  # no temporary left


def test_action_install_step_runs_the_real_pip(tmp_path):
    """Fresh case: `python -m pip` from the workspace ran a `pip/` package of the pull request.
    The install step (given an action path that does not exist, so pip stops at once) runs pip's
    own code: its error, and no marker."""
    env_lit, script = action_step("Install archaudit")
    ws = _workspace(tmp_path)
    _plant(ws)
    env = dict(os.environ, GITHUB_WORKSPACE=str(ws), PY=sys.executable, ACTION_PATH=str(tmp_path / "no-such-dir"),
               PIP_NO_INDEX="1", **env_lit)
    p = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script], cwd=ws, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and "no-such-dir" in p.stderr + p.stdout
    assert not (ws / MARKER).exists(), (ws / MARKER).read_text()


def test_python_m_archaudit_from_a_checkout(tmp_path):
    """`python -m archaudit` from a checkout holding click.py and json.py: archaudit drops the
    working directory from sys.path before importing anything else. With an archaudit/ folder
    there too, only -P (or the console script) helps: Python finds the folder first."""
    ws = _workspace(tmp_path)
    _plant(ws)
    shutil.rmtree(ws / "archaudit")
    env = dict(os.environ, ARCHAUDIT_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("PYTHONSAFEPATH", None)
    args = ["scan", "venv-sp/site-packages", "-t", "sm_120", "--format", "json", "-q"]
    p = subprocess.run([sys.executable, "-m", "archaudit", *args], cwd=ws, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert not (ws / MARKER).exists(), (ws / MARKER).read_text()
    gates = {(g["path"], g["line"]) for g in json.loads(p.stdout)["gates"]}
    _plant(ws)
    for cmd in ([sys.executable, "-P", "-m", "archaudit"], [str(ARCHAUDIT)]):
        q = subprocess.run([*cmd, *args], cwd=ws, env=env, capture_output=True, text=True, timeout=120)
        assert q.returncode == 0, q.stderr
        assert not (ws / MARKER).exists(), (ws / MARKER).read_text()
        assert {(g["path"], g["line"]) for g in json.loads(q.stdout)["gates"]} == gates
    assert gates


def test_documented_invocations_import_nothing_from_the_cwd():
    """README, the pre-commit hook and scripts/ run the console script (its own directory is
    sys.path[0]) or `python -P`; never a plain `python -m archaudit`/`python -m pip` in a checkout."""
    texts = {p: p.read_text() for p in [REPO / "README.md", REPO / ".pre-commit-hooks.yaml", *sorted((REPO / "scripts").iterdir())]}
    for p, t in texts.items():
        code = "\n".join(x for x in t.splitlines() if not x.lstrip().startswith("# "))  # not comments
        for m in re.finditer(r"python[\d.]*\s+((?:-\w+\s+)*)-m\s+(archaudit|pip)\b", code):
            assert "-P" in m.group(1).split() or p.parent.name == "scripts", (p.name, m.group(0))
    assert "entry: archaudit scan" in texts[REPO / ".pre-commit-hooks.yaml"]


# --- a killed scan leaves no worker behind --------------------------------------------------

def _proc_table() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, process group, state) of every process, from /proc."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                stat = f.read().decode("ascii", "replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
        out[int(d)] = (int(fields[1]), int(fields[2]), fields[0])
    return out


def _descendants(root: int) -> set[int]:
    table = _proc_table()
    found, todo = set(), [root]
    while todo:
        p = todo.pop()
        for c, (ppid, _pg, state) in table.items():
            if ppid == p and c not in found and state != "Z":
                found.add(c)
                todo.append(c)
    return found


def _alive(pids: set[int], group: int) -> set[int]:
    """Those of pids, or of the process group, that still run (a zombie holds no memory)."""
    return {p for p, (_pp, pg, state) in _proc_table().items() if (p in pids or pg == group) and state != "Z"}


def big_tree(root: Path) -> Path:
    """28 MB of Python (above scancache.PARALLEL_MIN_BYTES: the prefilter and the parse worker
    run in processes), a gate in each package, C++ and CUDA files (the host-code checks' and the
    CUDA worker's processes)."""
    filler = "".join(f"# line {i} of text that no prefilter question is about\n" for i in range(1800))
    for p in range(12):
        pkg = root / f"pkg{p}"
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_bytes(b"")
        (pkg / "gate.py").write_bytes(GATE)
        (pkg / "kern.cu").write_text("#include <cuda.h>\n__global__ void k() {}\n" * 200)
        (pkg / "host.cpp").write_text("int major = prop.major;\nif (major == 9) { run(); }\n" * 200)
        for i in range(25):
            (pkg / f"m{i}.py").write_text(filler)
    return root


@pytest.mark.parametrize("when", [1, 3], ids=["readers", "parse-cuda-hostcheck-workers"])
def test_killed_scan_leaves_no_worker(tmp_path, when):
    """SIGKILL of the scan once `when` workers run (the prefilter's readers come first; then the
    parse worker, the host-code checks and the CUDA worker): within 5 s none is left."""
    tree = big_tree(tmp_path / "tree")
    env = dict(os.environ, ARCHAUDIT_CACHE_DIR=str(tmp_path / "cache"))
    p = subprocess.Popen([str(ARCHAUDIT), "scan", str(tree), "-t", "sm_120", "--workers", "2", "-q", "--format", "json"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        kids: set[int] = set()
        deadline = time.monotonic() + 60
        while len(kids) < when and p.poll() is None and time.monotonic() < deadline:
            kids = _descendants(p.pid)
            time.sleep(0.01)
        assert len(kids) >= when, "the scan ended before its workers were seen"
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        kids |= _descendants(p.pid)
        left = _alive(kids, p.pid)
        deadline = time.monotonic() + 5
        while left and time.monotonic() < deadline:
            time.sleep(0.05)
            left = _alive(kids, p.pid)
        assert not left, {q: _proc_table().get(q) for q in left}
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        for q in _alive(set(), p.pid):  # what the assertion found: not left for the next test
            os.kill(q, signal.SIGKILL)


def test_worker_without_pdeathsig_polls_for_its_parent(tmp_path):
    """Fresh case: where PR_SET_PDEATHSIG is not available (not Linux), die_with_parent's thread
    notices the parent is gone (getppid changes) and ends the worker within a poll or two."""
    script = (
        "import os, sys, time\n"
        "sys.platform = 'darwin'  # no prctl: the polling fallback\n"
        "from archaudit.children import die_with_parent\n"
        "if os.fork() == 0:  # the scan\n"
        "    parent = os.getpid()\n"
        "    w = os.fork()\n"
        "    if w == 0:  # its worker\n"
        "        die_with_parent(parent)\n"
        "        time.sleep(60)\n"
        "        os._exit(0)\n"
        "    print(os.getpid(), w, flush=True)\n"
        "    time.sleep(60)\n"
        "    os._exit(0)\n"
    )
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=tmp_path,
                         start_new_session=True)
    scan, worker = map(int, p.stdout.readline().split())
    p.wait()
    try:
        assert _alive({worker}, -1) == {worker}
        os.kill(scan, signal.SIGKILL)
        deadline = time.monotonic() + 3
        while _alive({worker}, -1) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive({worker}, -1)
    finally:
        for q in _alive({scan, worker}, -1):
            os.kill(q, signal.SIGKILL)


# --- the cache's whole-scan key -------------------------------------------------------------

def _gate_tree(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_bytes(b"")
    (root / "pkg" / "gate.py").write_bytes(GATE)
    return root


def test_cached_result_is_not_another_trees_walk_diagnostics(tmp_path):
    """Two trees with the same files, one with a link out of the root and a FIFO: each scan (one
    cache) reports its own tree's walk diagnostics, whichever ran first."""
    dirty = _gate_tree(tmp_path / "dirty")
    (dirty / "pkg" / "out.py").symlink_to("/etc/hostname")
    os.mkfifo(dirty / "pkg" / "pipe.py")
    clean = _gate_tree(tmp_path / "clean")
    walk = {("pkg/out.py", "symlink-outside"), ("pkg/pipe.py", "not-a-file")}
    for order in ((dirty, clean), (clean, dirty)):
        shutil.rmtree(tmp_path / ".cache", ignore_errors=True)
        for tree in order:
            _r, rep = scan_json(tree, tmp_path)
            assert ("pkg/gate.py", 5) in gate_places(rep)
            assert diags(rep) & walk == (walk if tree is dirty else set()), (tree.name, order[0].name)


def test_link_added_after_a_clean_scan_is_reported_warm(tmp_path):
    """A clean scan, then a link to a file outside the root (no listed file changes): the next
    scan reports it; one more scan of the unchanged tree is a cache hit with the same report."""
    from archaudit.cache import Cache
    from archaudit.pipeline import scan

    tree = _gate_tree(tmp_path / "t")
    _r, rep = scan_json(tree, tmp_path)
    assert not diags(rep)
    (tree / "pkg" / "shadow.py").symlink_to("/etc/shadow")
    _r, rep = scan_json(tree, tmp_path)
    assert diags(rep) == {("pkg/shadow.py", "symlink-outside")}
    assert ("pkg/gate.py", 5) in gate_places(rep)
    cache = Cache(tmp_path / ".cache")
    res = scan(tree, cache=cache, workers=1)
    again = scan(tree, cache=cache, workers=1)
    assert again.cache["mode"] == "hit" and again.diagnostics == res.diagnostics
    assert [(d.path, d.kind) for d in again.diagnostics] == [("pkg/shadow.py", "symlink-outside")]


# --- gate-dense modules ---------------------------------------------------------------------

def dense_wheel(path: Path, modules: int, functions: int) -> Path:
    """densepkg 1.0: gate.py (GATE) and `modules` copies of a module defining `functions` gates
    `def f<i>(): if major() == 9: return <i>` (56 bytes each), major() reading the capability."""
    lines = ["import torch", "def major():", "    return torch.cuda.get_device_capability()[0]"]
    for i in range(functions):
        lines += [f"def f{i}():", "    if major() == 9:", f"        return {i}"]
    src = ("\n".join(lines) + "\n").encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        z.writestr("densepkg/__init__.py", "")
        z.writestr("densepkg/gate.py", GATE)
        for m in range(modules):
            z.writestr(f"densepkg/dense{m:02d}.py", src)
        z.writestr("densepkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: densepkg\nVersion: 1.0\n\n")
        z.writestr("densepkg-1.0.dist-info/RECORD", "")
    return path


def beside_is_judged(rep: dict) -> None:
    """The gate of gate.py is judged as in a scan of its own: unresolved, for its own reason."""
    beside = [f for f in rep["findings"] if f["gate"]["path"] == "densepkg/gate.py"]
    assert [(f["gate"]["line"], f["verdict"]) for f in beside] == [(5, "unresolved")]
    assert beside[0]["reason"].startswith("no JIT module is reached from the region this gate guards; "
                                          "not shown free of GPU code: densepkg.gate.pick returns what the gate decides")


def test_gate_dense_module_is_judged_under_a_budget(tmp_path):
    """A module of 4,000 functions, each a gate calling a helper. Gate evaluation stops at
    MAX_MODULE_FUNCTIONS; every gate found has its call-graph search scan the module's
    definitions for callers, charged to the file: past judge.JUDGE_WORK_BUDGET its remaining
    gates are unresolved, with one analysis-budget diagnostic each; the gate beside it is judged
    as usual."""
    from archaudit.verdict.judge import JUDGE_WORK_BUDGET
    from archaudit.python.gates import MAX_MODULE_FUNCTIONS

    whl = dense_wheel(tmp_path / "densepkg-1.0-py3-none-any.whl", 1, 4000)
    _r, rep = scan_json(whl, tmp_path, "--no-cache", "-t", "sm_120")
    gates = [g["line"] for g in rep["gates"] if g["path"] == "densepkg/dense00.py"]
    # the first functions in file order, up to the bound (major() is one of them)
    assert gates == [5 + 3 * i for i in range(MAX_MODULE_FUNCTIONS - 1)]
    dense = [f for f in rep["findings"] if f["gate"]["path"] == "densepkg/dense00.py"]
    cut = [f for f in dense if f["reason"].startswith("not followed: the call-graph search from this file's gates stopped")]
    # f0 returns 0 when its test is true, read as a refusal that admits sm_120: no finding
    excluding = [g["line"] for g in rep["gates"] if g["path"] == "densepkg/dense00.py" and "sm_120" not in g["admits"]]
    assert [f["gate"]["line"] for f in dense] == excluding == gates[1:] and all(f["verdict"] == "unresolved" for f in dense)
    # the gates judged in order, up to the budget: every one cut comes after every one followed
    followed = [f["gate"]["line"] for f in dense if not f["reason"].startswith("not followed")]
    assert 0 < len(cut) < len(dense) and max(followed) < min(f["gate"]["line"] for f in cut)
    assert sorted((d["kind"], d["message"]) for d in rep["diagnostics"] if d["path"] == "densepkg/dense00.py") == [
        ("analysis-budget", f"gate evaluation stopped at this module's budget of {MAX_MODULE_FUNCTIONS:,} functions; "
                            f"{4001 - MAX_MODULE_FUNCTIONS} more functions that may hold gates not evaluated (their gates "
                            f"are missing)"),
        ("analysis-budget", f"the call-graph search from this file's gates stopped at its budget of "
                            f"{JUDGE_WORK_BUDGET:,} steps; {len(cut)} gates not followed (unresolved)")]
    beside_is_judged(rep)


def test_wheel_of_40_modules_of_64683_gate_functions(tmp_path):
    """Issue 29's gate-dense wheel: 40 modules of 3.6 MB, each defining 64,683 gate functions
    (past 280 s of CPU with -t sm_120 before). Each is more than MAX_PYTHON_DEFS: too-large,
    skipped before it is parsed; the gate beside them is judged."""
    from archaudit.sources import MAX_PYTHON_DEFS

    whl = dense_wheel(tmp_path / "densepkg-1.0-py3-none-any.whl", 40, 64683)
    _r, rep = scan_json(whl, tmp_path, "--no-cache", "-t", "sm_120")
    assert sorted((d["path"], d["kind"], d["message"]) for d in rep["diagnostics"]) == [
        (f"densepkg/dense{m:02d}.py", "too-large", f"more than {MAX_PYTHON_DEFS} function definitions; skipped")
        for m in range(40)]
    assert [(g["path"], g["line"]) for g in rep["gates"]] == [("densepkg/gate.py", 5)]
    beside_is_judged(rep)


def test_many_gate_dense_modules_share_the_scans_budgets(tmp_path, monkeypatch):
    """Modules of gate functions, each under MAX_PYTHON_DEFS and many of them: gate evaluation
    takes MAX_MODULE_FUNCTIONS from each module until the scan's MAX_SCAN_FUNCTIONS is spent (the
    functions after it are not evaluated, each module saying how many); the call-graph search
    takes the files' gates in turn until JUDGE_TOTAL_BUDGET is spent, so the gate beside them,
    whose file sorts last, is still judged. Nothing cut is dropped: each gate found is a finding,
    those not followed unresolved with the reason, each file or module cut has its diagnostic.
    The bounds are made small here (in process) so that each is reached by a small wheel."""
    from click.testing import CliRunner

    import archaudit.verdict.judge as judge
    import archaudit.python.gates as pgates
    from archaudit.cli import main

    per_module, per_scan, search = 60, 500, 20_000
    monkeypatch.setattr(pgates, "MAX_MODULE_FUNCTIONS", per_module)
    monkeypatch.setattr(pgates, "MAX_SCAN_FUNCTIONS", per_scan)
    monkeypatch.setattr(judge, "JUDGE_TOTAL_BUDGET", search)
    whl = dense_wheel(tmp_path / "densepkg-1.0-py3-none-any.whl", 12, 100)
    r = CliRunner().invoke(main, ["scan", str(whl), "--no-cache", "-t", "sm_120", "--format", "json", "-q"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    count = {m: sum(1 for g in rep["gates"] if g["path"] == f"densepkg/dense{m:02d}.py") for m in range(12)}
    # round 1 evaluates gate.py's pick and each module's major (13), round 2 the modules in order
    first = per_scan - 13
    full, part = first // (per_module - 1), first % (per_module - 1)
    assert [count[m] for m in range(12)] == [per_module - 1] * full + [part] + [0] * (11 - full)
    msgs: dict[str, list] = {}
    for d in rep["diagnostics"]:
        msgs.setdefault(d["path"], []).append((d["kind"], d["message"]))
    total = f"the call-graph search of this scan stopped at its total budget of {search:,} steps"
    cut = [f for f in rep["findings"] if f["reason"] == f"not followed: {total}"]
    for m in range(12):
        path = f"densepkg/dense{m:02d}.py"
        want = []
        if m < full:
            want.append(("analysis-budget", f"gate evaluation stopped at this module's budget of {per_module:,} "
                                            f"functions; {101 - per_module} more functions that may hold gates not "
                                            f"evaluated (their gates are missing)"))
        else:
            want.append(("analysis-budget", f"gate evaluation of this scan stopped at its budget of {per_scan:,} "
                                            f"functions; {100 - count[m]} functions that may hold gates not "
                                            f"evaluated (their gates are missing)"))
        n = sum(1 for f in cut if f["gate"]["path"] == path)
        if n:
            want.append(("analysis-budget", f"{total}; {n} gates of this file not followed (unresolved)"))
        assert msgs.get(path) == want, path
    # the files' gates were followed in turn: each file with gates had some followed
    followed = {f["gate"]["path"] for f in rep["findings"] if not f["reason"].startswith("not followed")}
    assert followed == {f"densepkg/dense{m:02d}.py" for m in range(full + 1)} | {"densepkg/gate.py"}
    assert cut and all(f["verdict"] == "unresolved" for f in cut)
    # every gate found that excludes the target has its finding: none dropped
    assert len(rep["findings"]) == sum(1 for g in rep["gates"] if "sm_120" not in g["admits"])
    beside_is_judged(rep)
    assert "densepkg/gate.py" not in msgs


def test_gate_dense_modules_under_every_bound(tmp_path):
    """The costliest shape under the default bounds: 40 modules of 4,000 gate functions (each
    just under MAX_PYTHON_DEFS). Gate evaluation spends MAX_SCAN_FUNCTIONS and the search
    JUDGE_TOTAL_BUDGET; the scan ends within the cost of a real one (the pinned pair: 97 s, 1.8
    GB), with the gate beside them judged."""
    whl = dense_wheel(tmp_path / "densepkg-1.0-py3-none-any.whl", 40, 4000)
    _r, rep = scan_json(whl, tmp_path, "--no-cache", "-t", "sm_120", time_s=30, rss_mb=1500)
    assert {d["kind"] for d in rep["diagnostics"]} == {"analysis-budget"}
    beside_is_judged(rep)


# --- fresh case (wheel): entries whose headers lie about how to read them --------------------------

def _patch_entry(data: bytearray, name: bytes, how: str) -> None:
    """Rewrite `name`'s local header and central directory record: compression method 9
    (Deflate64, which zipfile cannot read), the encryption flag, or (local header only) another name."""
    for sig, name_len_at, head in ((b"PK\x03\x04", 26, 30), (b"PK\x01\x02", 28, 46)):
        pos = data.find(sig)
        while pos >= 0:
            n = struct.unpack_from("<H", data, pos + name_len_at)[0]
            if bytes(data[pos + head:pos + head + n]) == name:
                local = sig == b"PK\x03\x04"
                if how == "deflate64":
                    struct.pack_into("<H", data, pos + (8 if local else 10), 9)
                elif how == "encrypted":
                    flags = pos + (6 if local else 8)
                    struct.pack_into("<H", data, flags, struct.unpack_from("<H", data, flags)[0] | 1)
                elif local:
                    data[pos + head:pos + head + n] = name.replace(b"odd", b"evl")
            pos = data.find(sig, pos + 4)


@pytest.mark.parametrize("how, why", [
    ("deflate64", "compression method 9 is not supported"),
    ("encrypted", "encrypted or patch data"),
    ("renamed", "its local header names another file"),
])
def test_wheel_entry_whose_headers_lie(tmp_path, how, why):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("wpkg/__init__.py", "")
        z.writestr("wpkg/gate.py", GATE)
        z.writestr("wpkg/odd.py", GATE)
        z.writestr("wpkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: wpkg\nVersion: 1.0\n\n")
        z.writestr("wpkg-1.0.dist-info/RECORD", "")
    data = bytearray(buf.getvalue())
    _patch_entry(data, b"wpkg/odd.py", how)
    whl = tmp_path / "wpkg-1.0-py3-none-any.whl"
    whl.write_bytes(bytes(data))
    _r, rep = scan_json(whl, tmp_path, "--no-cache", "-t", "sm_120")
    assert [(d["path"], d["kind"], d["message"]) for d in rep["diagnostics"]] == [
        ("wpkg/odd.py", "corrupt-member", f"cannot read wheel entry: {why}")]
    assert gate_places(rep) == {("wpkg/gate.py", 5)}
    assert [(f["gate"]["path"], f["verdict"]) for f in rep["findings"]] == [("wpkg/gate.py", "unresolved")]
