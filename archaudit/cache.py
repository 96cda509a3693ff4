"""A content-addressed disk cache for parse results, per-file facts and whole-scan results.

Layout: <root>/scan-<tag>/<namespace>/<key[:2]>/<key>, where root is $ARCHAUDIT_CACHE_DIR, else
$XDG_CACHE_HOME/archaudit, else ~/.cache/archaudit, and tag names everything a cached value
depends on besides its key: the archaudit version and source code, the rule files, the
tree-sitter grammar versions and the Python version (pickle format). A different tag is a
different directory, so entries of another version are never read; old tags are pruned.

Each entry is a header (magic, tag, payload length, MAC) followed by a pickle. The MAC is a keyed
blake2b under a per-user secret that lives outside the cache directory (see `secret_path`), so an
entry that anyone else wrote -- a cache restored from CI storage, a directory others can write --
fails the check and is never unpickled. Entries are opened without following links and without
blocking, and accepted only as regular files owned by the user below MAX_ENTRY_BYTES; anything else
is deleted and rebuilt. Writes go to a temporary file in the same directory and are published with os.replace, so a
reader sees either the whole old entry, the whole new one, or none; two scans writing the same
key write the same value. Anything unexpected on read -- short file, wrong magic, other tag,
digest mismatch, unpickling error -- is a miss, never an error. A failing write (full disk,
read-only cache dir) turns the cache off for the rest of the run.

Only bytes that carry our own MAC are unpickled: the secret is what the cache trusts, not the
directory. A CI job that restores its cache on another machine passes the same secret in
$ARCHAUDIT_CACHE_KEY (from the CI's secret store); without it, a restored cache is a miss.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import pickle
import shutil
import struct
import sys
import tempfile
import time
from functools import lru_cache
from importlib.metadata import version
from pathlib import Path

import tree_sitter

from . import __version__
from .ruledata import rules_dir
from .safeio import read_regular_file

MAGIC = b"ARCHAUDIT-CACHE\x01"
_HEADER = struct.Struct("<16s32sQ32s")  # magic, tag, payload length, MAC
# an entry larger than this is not read (the largest real one, a whole-scan result, is a few MB)
MAX_ENTRY_BYTES = 1 << 30
SECRET_BYTES = 32
# keep this many version directories (the current one included); older ones are removed
KEEP_TAGS = 3


def default_root() -> Path:
    env = os.environ.get("ARCHAUDIT_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "archaudit"


def secret_path() -> Path:
    """Where the per-user cache secret lives: $ARCHAUDIT_CACHE_SECRET_FILE, else
    $XDG_CONFIG_HOME/archaudit/cache-secret, else ~/.config/archaudit/cache-secret."""
    env = os.environ.get("ARCHAUDIT_CACHE_SECRET_FILE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "archaudit" / "cache-secret"


def cache_secret() -> bytes | None:
    """The per-user MAC key: from $ARCHAUDIT_CACHE_KEY, else the secret file (created 0600 with
    random bytes when absent; replaced when it is not a private regular file of ours). None when no
    secret can be had: the cache is then off."""
    env = os.environ.get("ARCHAUDIT_CACHE_KEY")
    if env:
        return hashlib.blake2b(env.encode("utf-8", "surrogatepass"), digest_size=SECRET_BYTES).digest()
    path = secret_path()
    for _ in range(3):
        try:
            data = read_regular_file(path, SECRET_BYTES, follow_links=False, owned=True, private=True)
            if len(data) == SECRET_BYTES:
                return data
        except (OSError, ValueError):
            pass  # absent or unusable: made anew below
        if os.path.lexists(path):
            try:
                os.unlink(path)  # a wrong secret file (link, FIFO, short, shared): make a new one
            except OSError:
                return None
        if not _create_secret(path):
            return None
    return None


def _create_secret(path: Path) -> bool:
    """Publish a new random secret at path with 0600, atomically (link fails if another process won
    the race; its secret is then read on the next try)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".cache-secret-")
    except OSError:
        return False
    try:
        with os.fdopen(fd, "wb") as f:  # mkstemp creates the file 0600
            f.write(os.urandom(SECRET_BYTES))
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        return True
    except OSError:
        return False
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def digest(data: bytes) -> str:
    """The content hash used for file keys (hex, 32 chars)."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def digest_file(path, chunk: int = 1 << 20) -> str:
    """digest() of a file's bytes, read in pieces: a wheel may be larger than memory."""
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                return h.hexdigest()
            h.update(b)


def key_of(*parts) -> str:
    """A cache key for a tuple of str/bytes/int parts (order matters)."""
    h = hashlib.blake2b(digest_size=16)
    for p in parts:
        b = p if isinstance(p, bytes) else str(p).encode("utf-8", "surrogatepass")
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


@lru_cache(maxsize=1)
def version_tag() -> str:
    """What every cached value depends on besides its own key."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"archaudit {__version__}\npython {sys.version_info[:2]}\n".encode())
    for mod in ("tree_sitter", "tree_sitter_python", "tree_sitter_cuda", "tree_sitter_cpp"):
        h.update(f"{mod} {_dist_version(mod)}\n".encode())
    h.update(f"ts-abi {getattr(tree_sitter, 'LANGUAGE_VERSION', '')}\n".encode())
    # the code itself: a development checkout changes behaviour without changing __version__
    pkg = Path(__file__).resolve().parent
    for base, pattern in ((pkg, "**/*.py"), (rules_dir(), "**/*")):
        for p in sorted(base.glob(pattern)):
            if p.is_file() and "__pycache__" not in p.parts:
                h.update(str(p.relative_to(base)).encode())
                h.update(p.read_bytes())
    return h.hexdigest()


def _dist_version(mod: str) -> str:
    try:
        return version(mod.replace("_", "-"))
    except Exception:  # noqa: BLE001 - a missing grammar only changes the tag
        return "?"


class Cache:
    """get/put of picklable values by (namespace, key). Never raises on a bad entry."""

    def __init__(self, root: str | os.PathLike | None = None, tag: str | None = None,
                 secret: bytes | None = None):
        self.root = Path(root) if root is not None else default_root()
        self.tag = tag or version_tag()
        self.dir = self.root / f"scan-{self.tag}"
        self._secret = secret if secret is not None else cache_secret()
        self.enabled = self._secret is not None
        self.hits = 0
        self.misses = 0
        self.writes = 0
        self.bad = 0  # entries that were present but unreadable (treated as misses)
        self._tag_bytes = self.tag.encode()[:32].ljust(32, b"\0")
        self._pruned = False

    def path(self, ns: str, key: str) -> Path:
        return self.dir / ns / key[:2] / key

    def get(self, ns: str, key: str):
        """The stored value, or None on a miss (absent, truncated, corrupt or foreign entry)."""
        if not self.enabled:
            return None
        path = self.path(ns, key)
        try:
            raw = read_regular_file(path, MAX_ENTRY_BYTES, follow_links=False, owned=True)
        except FileNotFoundError:
            self.misses += 1
            return None
        except (OSError, ValueError):
            raw = None  # a link, FIFO, device, another user's or oversized entry
        value = None if raw is None else self._decode(raw)
        if value is None:
            self.misses += 1
            self.bad += 1
            try:
                os.unlink(path)  # rebuilt by the put that follows the miss
            except OSError:
                pass
            return None
        self.hits += 1
        return value[0]

    def _decode(self, raw: bytes):
        if len(raw) < _HEADER.size:
            return None
        magic, tag, length, dig = _HEADER.unpack_from(raw)
        payload = memoryview(raw)[_HEADER.size:]
        if magic != MAGIC or tag != self._tag_bytes or length != len(payload):
            return None
        if not hmac.compare_digest(self._mac(payload), dig):
            return None
        try:
            return (pickle.loads(payload),)
        except Exception:  # noqa: BLE001 - any unpickling problem is a miss
            return None

    def _mac(self, payload) -> bytes:
        return hashlib.blake2b(payload, digest_size=32, key=self._secret).digest()

    def put(self, ns: str, key: str, value) -> bool:
        if not self.enabled:
            return False
        try:
            payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - an unpicklable value is simply not cached
            return False
        head = _HEADER.pack(MAGIC, self._tag_bytes, len(payload), self._mac(payload))
        target = self.path(ns, key)
        tmp = None
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as f:
                f.write(head)
                f.write(payload)
            os.replace(tmp, target)
            tmp = None
            self.writes += 1
        except OSError:
            self.enabled = False  # read-only or full: run on without the cache
            return False
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
        if not self._pruned:
            self._pruned = True
            self.prune()
        return True

    def prune(self, keep: int = KEEP_TAGS) -> None:
        """Remove the least recently used version directories beyond `keep` (ours is kept)."""
        try:
            now = time.time()
            os.utime(self.dir, (now, now))
            # only our own version directories: other tools keep their caches beside them
            tags = [d for d in self.root.iterdir() if d.is_dir() and d.name.startswith("scan-") and d != self.dir]
        except OSError:
            return
        tags.sort(key=lambda d: _mtime(d), reverse=True)
        for d in tags[max(0, keep - 1):]:
            shutil.rmtree(d, ignore_errors=True)

    def stats(self) -> dict:
        return {"hits": self.hits, "misses": self.misses, "writes": self.writes, "bad": self.bad}


def _mtime(p: Path) -> float:
    try:
        return p.stat().st_mtime
    except OSError:
        return 0.0
