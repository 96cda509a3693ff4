"""Issue 8: a scan never imports or runs what it scans, starts no process, opens no socket and
writes nothing (outside a cache directory). fixtures/noexec is a package whose every file would
leave a marker, connect a socket and spawn a process if it ran."""
from __future__ import annotations

import builtins
import io
import os
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from archaudit.pipeline import scan

REPO = Path(__file__).resolve().parent.parent
NOEXEC = REPO / "fixtures" / "noexec"

# the gates the scan must find: proof that every file was read and analysed
EXPECTED = [
    ("noexecpkg/__main__.py", 4, "capability-compare", ("sm_120",)),
    ("noexecpkg/gate.py", 17, "predicate-call", ("sm_100", "sm_103", "sm_107", "sm_110", "sm_120", "sm_121", "sm_90")),
    ("noexecpkg/gate.py", 27, "flag", ("sm_100", "sm_103", "sm_107")),
    ("sitecustomize.py", 5, "capability-compare", ("sm_100", "sm_103", "sm_107", "sm_110", "sm_120", "sm_121", "sm_90")),
]


class Forbidden(AssertionError):
    pass


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    """Make every way of running code or touching the world fail loudly during the scan."""
    marker = tmp_path / "marker"
    cache = tmp_path / "cache"
    monkeypatch.setenv("ARCHAUDIT_NOEXEC_MARKER", str(marker))
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.setenv("ARCHAUDIT_CACHE_DIR", str(cache))
    attempts: list[str] = []

    def deny(what):
        def f(*a, **k):
            attempts.append(f"{what}{a[:2]!r}")
            raise Forbidden(f"scan attempted {what}")
        return f

    for name in ("system", "popen", "fork", "forkpty", "execv", "execve", "execvp", "execvpe", "execl", "execle",
                 "execlp", "execlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe", "posix_spawn", "posix_spawnp"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, deny(f"os.{name}"))
    monkeypatch.setattr(subprocess, "Popen", deny("subprocess.Popen"))
    monkeypatch.setattr(socket.socket, "connect", deny("socket.connect"))
    monkeypatch.setattr(socket, "create_connection", deny("socket.create_connection"))
    real_open, real_os_open = builtins.open, os.open
    allowed = (str(cache), str(tmp_path / "wheels"))

    def guarded_open(file, mode="r", *a, **k):
        if isinstance(file, (str, os.PathLike)) and any(c in mode for c in "wax+") and not str(file).startswith(allowed):
            attempts.append(f"open({file!r}, {mode!r})")
            raise Forbidden(f"scan attempted to write {file}")
        return real_open(file, mode, *a, **k)

    def guarded_os_open(path, flags, *a, **k):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND) and not str(path).startswith(allowed):
            attempts.append(f"os.open({path!r})")
            raise Forbidden(f"scan attempted to write {path}")
        return real_os_open(path, flags, *a, **k)

    monkeypatch.setattr(builtins, "open", guarded_open)
    monkeypatch.setattr(io, "open", guarded_open)
    monkeypatch.setattr(os, "open", guarded_os_open)
    real_import = builtins.__import__

    def guarded_import(name, *a, **k):
        if name.split(".")[0] in ("noexecpkg", "_boom", "sitecustomize", "setup"):
            attempts.append(f"import {name}")
            raise Forbidden(f"scan imported {name}")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", guarded_import)
    before = set(sys.modules)
    yield {"marker": marker, "attempts": attempts, "tmp": tmp_path}
    monkeypatch.undo()
    assert not marker.exists(), "scanned code ran"
    assert attempts == []
    assert not {m for m in set(sys.modules) - before if m.split(".")[0] in ("noexecpkg", "_boom", "setup")}


def _rows(res):
    return [(g.path, g.line, g.kind, tuple(sorted(g.admits))) for g in res.gates]


def test_scan_of_directory_never_executes(sandbox):
    res = scan(NOEXEC)
    assert _rows(res) == EXPECTED
    assert res.diagnostics == []


def test_scan_of_wheel_never_executes_nor_extracts(sandbox):
    wdir = sandbox["tmp"] / "wheels"
    wdir.mkdir()
    whl = wdir / "noexecpkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        for p in sorted(NOEXEC.rglob("*")):
            if p.is_file():
                z.write(p, p.relative_to(NOEXEC).as_posix())
        z.writestr("noexecpkg-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: noexecpkg\nVersion: 1.0\n\n")
    before = sorted(os.listdir(wdir))
    res = scan(whl)
    assert _rows(res) == EXPECTED
    assert sorted(os.listdir(wdir)) == before  # nothing extracted next to it


def test_cli_scan_never_executes(sandbox):
    from click.testing import CliRunner

    from archaudit.cli import main

    r = CliRunner().invoke(main, ["scan", str(NOEXEC), "--format", "json", "-t", "sm_120"])
    assert r.exit_code == 0, r.output
    assert '"path": "noexecpkg/gate.py"' in r.output
