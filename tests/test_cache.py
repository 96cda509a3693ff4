"""The disk cache: round trips, and every kind of bad entry is a miss that still gives the right scan."""
import os
import shutil
import subprocess
import sys

import pytest

from archaudit import cache as cache_mod
from archaudit.cache import Cache, default_root
from archaudit.pipeline import scan

from conftest import FIXTURES, REPO


def _tree(tmp_path):
    dst = tmp_path / "tree"
    shutil.copytree(FIXTURES / "pygates", dst)
    return dst


def _nfiles(tree):
    return sum(1 for p in tree.rglob("*") if p.is_file())


def _same(a, b):
    assert a.gates == b.gates
    assert a.diagnostics == b.diagnostics
    assert a.findings == b.findings
    assert {k: v for k, v in a.stats.items() if k != "seconds"} == {k: v for k, v in b.stats.items() if k != "seconds"}


def _entries(c: Cache, ns: str):
    return sorted(p for p in (c.dir / ns).rglob("*") if p.is_file() and not p.name.startswith(".tmp"))


def test_round_trip_and_miss(tmp_path):
    c = Cache(tmp_path / "c")
    assert c.get("x", "00ab") is None
    assert c.put("x", "00ab", {"a": [1, 2]})
    assert Cache(tmp_path / "c").get("x", "00ab") == {"a": [1, 2]}
    assert c.path("x", "00ab").parent.name == "00"


def test_default_root_env(monkeypatch, tmp_path):
    monkeypatch.setenv("ARCHAUDIT_CACHE_DIR", str(tmp_path / "a"))
    assert default_root() == tmp_path / "a"
    monkeypatch.delenv("ARCHAUDIT_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert default_root() == tmp_path / "x" / "archaudit"


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "garbage", "old-version", "bad-pickle"])
def test_bad_entry_is_a_miss(tmp_path, damage):
    c = Cache(tmp_path / "c")
    c.put("x", "abcd", list(range(1000)))
    p = c.path("x", "abcd")
    raw = p.read_bytes()
    if damage == "truncate":
        p.write_bytes(raw[: len(raw) // 2])
    elif damage == "flip":
        p.write_bytes(raw[:-10] + bytes([raw[-10] ^ 0xFF]) + raw[-9:])
    elif damage == "empty":
        p.write_bytes(b"")
    elif damage == "garbage":
        p.write_bytes(os.urandom(len(raw)))
    elif damage == "old-version":
        Cache(tmp_path / "c", tag="0" * 32).put("x", "abcd", "old")  # another tag's entry ...
        shutil.copy(Cache(tmp_path / "c", tag="0" * 32).path("x", "abcd"), p)  # ... where ours lives
    elif damage == "bad-pickle":
        # a well-formed header over a payload that does not unpickle
        import hashlib

        payload = b"\x80\x05not a pickle"
        head = cache_mod._HEADER.pack(cache_mod.MAGIC, c._tag_bytes, len(payload),
                                      hashlib.blake2b(payload, digest_size=32).digest())
        p.write_bytes(head + payload)
    c2 = Cache(tmp_path / "c")
    assert c2.get("x", "abcd") is None
    assert c2.bad == 1


def test_unwritable_cache_dir_turns_cache_off(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    c = Cache(blocker / "sub")
    tree = _tree(tmp_path)
    r = scan(tree, cache=c)
    assert c.enabled is False
    _same(r, scan(tree))


def test_prune_keeps_other_tools_and_recent_tags(tmp_path):
    root = tmp_path / "c"
    (root / "probes").mkdir(parents=True)
    for i in range(5):
        d = root / f"scan-{i:032d}"
        d.mkdir()
        os.utime(d, (1000 + i, 1000 + i))
    c = Cache(root)
    c.put("x", "abcd", 1)
    left = sorted(d.name for d in root.iterdir())
    assert "probes" in left and c.dir.name in left
    assert [d for d in left if d.startswith("scan-") and d != c.dir.name] == [f"scan-{i:032d}" for i in (3, 4)]


def test_version_tag_covers_code_and_rules():
    tag = cache_mod.version_tag()
    assert len(tag) == 32 and tag == cache_mod.version_tag()


def test_scan_cached_results_identical(tmp_path):
    tree = _tree(tmp_path)
    plain = scan(tree)
    c = tmp_path / "c"
    first = scan(tree, cache=Cache(c))
    second = scan(tree, cache=Cache(c))
    assert first.cache["mode"] == "miss" and second.cache["mode"] == "hit"
    _same(plain, first)
    _same(plain, second)
    assert len(plain.gates) > 0


@pytest.mark.parametrize("ns", ["result", "run"])
@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_scan_with_damaged_entries(tmp_path, ns, damage):
    tree = _tree(tmp_path)
    plain = scan(tree)
    c = Cache(tmp_path / "c")
    scan(tree, cache=c)
    for p in _entries(c, ns):
        raw = p.read_bytes()
        p.write_bytes(raw[: len(raw) // 3] if damage == "truncate" else os.urandom(len(raw)))
    r = scan(tree, cache=Cache(tmp_path / "c"))
    # a damaged result is recomputed; a damaged snapshot only costs rehashing every file
    assert r.cache["mode"] == ("miss" if ns == "result" else "hit")
    assert r.cache["bad"] == 1 and (r.cache["hashed"] == _nfiles(tree) or ns == "result")
    _same(plain, r)
    # and the damaged entries were rewritten: the next run is a hit again
    assert scan(tree, cache=Cache(tmp_path / "c")).cache["mode"] == "hit"


def test_result_from_an_older_archaudit_is_not_used(tmp_path, monkeypatch):
    tree = _tree(tmp_path)
    scan(tree, cache=Cache(tmp_path / "c", tag="1" * 32))
    # a different version: a different directory, so a miss, and the right answer
    r = scan(tree, cache=Cache(tmp_path / "c", tag="2" * 32))
    assert r.cache["mode"] == "miss"
    _same(scan(tree), r)


def test_two_scans_at_once(tmp_path):
    tree = _tree(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(REPO), ARCHAUDIT_CACHE_DIR=str(tmp_path / "c"))
    cmd = [sys.executable, "-m", "archaudit", "scan", str(tree), "--format", "json", "-q"]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [o[1][-500:] for o in outs]
    ref = subprocess.run(cmd + ["--no-cache"], env=env, capture_output=True, timeout=300).stdout
    import json

    want = json.loads(ref)["gates"]
    assert all(json.loads(o[0])["gates"] == want for o in outs)
    # nothing half-written is left behind
    assert not [p for p in (tmp_path / "c").rglob(".tmp-*")]
    again = subprocess.run(cmd, env=env, capture_output=True, timeout=300).stdout
    assert json.loads(again)["gates"] == want


# --- entries someone else wrote ----------------------------------------------------------------
class _Payload:
    """Unpickling this runs a command: what a forged entry would carry."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _forge(c: Cache, ns: str, key: str, payload: bytes) -> None:
    """An entry with the right magic, tag and length, and the digest an attacker can compute
    without our secret (the unkeyed blake2b of the payload)."""
    import hashlib

    head = cache_mod._HEADER.pack(cache_mod.MAGIC, c._tag_bytes, len(payload),
                                  hashlib.blake2b(payload, digest_size=32).digest())
    p = c.path(ns, key)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(head + payload)


def test_forged_entry_runs_no_code(tmp_path):
    import pickle

    marker = tmp_path / "pwned"
    c = Cache(tmp_path / "c")
    _forge(c, "x", "abcd", pickle.dumps(_Payload(marker)))
    assert Cache(tmp_path / "c").get("x", "abcd") is None
    assert not marker.exists()
    assert not c.path("x", "abcd").exists()  # the bad entry is deleted


def test_forged_scan_entries_run_no_code(tmp_path):
    """Every entry of a real scan replaced by a forged one: the scan ignores them all, runs nothing,
    and gives the same report."""
    import pickle

    tree = _tree(tmp_path)
    plain = scan(tree)
    c = Cache(tmp_path / "c")
    scan(tree, cache=c)
    marker = tmp_path / "pwned"
    entries = [p for ns in ("result", "run") for p in _entries(c, ns)]
    assert entries
    for p in entries:
        ns, key = p.parent.parent.name, p.name
        _forge(c, ns, key, pickle.dumps(_Payload(marker)))
    r = scan(tree, cache=Cache(tmp_path / "c"))
    assert not marker.exists()
    assert r.cache["bad"] >= 1
    _same(plain, r)


def test_secret_is_private_and_per_user(tmp_path, monkeypatch):
    monkeypatch.delenv("ARCHAUDIT_CACHE_KEY", raising=False)
    secret = tmp_path / "cfg" / "cache-secret"
    monkeypatch.setenv("ARCHAUDIT_CACHE_SECRET_FILE", str(secret))
    c = Cache(tmp_path / "c")
    assert c.enabled and secret.stat().st_mode & 0o777 == 0o600 and secret.stat().st_size == 32
    c.put("x", "abcd", 1)
    assert Cache(tmp_path / "c").get("x", "abcd") == 1
    # a secret others can read is replaced: entries made under the old one are misses
    secret.chmod(0o644)
    c2 = Cache(tmp_path / "c")
    assert secret.stat().st_mode & 0o777 == 0o600
    assert c2.get("x", "abcd") is None and c2.bad == 1
    # a secret given by the environment (a CI's secret store) is used instead of the file
    monkeypatch.setenv("ARCHAUDIT_CACHE_KEY", "ci-secret")
    Cache(tmp_path / "c").put("x", "abcd", 2)
    assert Cache(tmp_path / "c").get("x", "abcd") == 2
    monkeypatch.setenv("ARCHAUDIT_CACHE_KEY", "other")
    assert Cache(tmp_path / "c").get("x", "abcd") is None


def test_secret_that_is_a_link_is_replaced(tmp_path, monkeypatch):
    monkeypatch.delenv("ARCHAUDIT_CACHE_KEY", raising=False)
    secret = tmp_path / "cache-secret"
    secret.symlink_to("/dev/zero")
    monkeypatch.setenv("ARCHAUDIT_CACHE_SECRET_FILE", str(secret))
    c = Cache(tmp_path / "c")
    assert c.enabled and not secret.is_symlink() and secret.stat().st_size == 32


@pytest.mark.parametrize("kind", ["dev-zero-link", "fifo", "directory"])
def test_special_file_entries_are_misses_at_once(tmp_path, kind):
    import time

    c = Cache(tmp_path / "c")
    c.put("x", "abcd", 1)
    p = c.path("x", "abcd")
    p.unlink()
    if kind == "dev-zero-link":
        p.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(p)
    else:
        p.mkdir()
    t0 = time.monotonic()
    c2 = Cache(tmp_path / "c")
    assert c2.get("x", "abcd") is None
    assert time.monotonic() - t0 < 1
    if kind != "directory":
        assert not os.path.lexists(p)  # deleted, so the next put rebuilds it
        assert c2.put("x", "abcd", 3) and Cache(tmp_path / "c").get("x", "abcd") == 3
