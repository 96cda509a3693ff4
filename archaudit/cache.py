"""A content-addressed disk cache for parse results, per-file facts and whole-scan results.

Layout: <root>/scan-<tag>/<namespace>/<key[:2]>/<key>, where root is $ARCHAUDIT_CACHE_DIR, else
$XDG_CACHE_HOME/archaudit, else ~/.cache/archaudit, and tag names everything a cached value
depends on besides its key: the archaudit version and source code, the rule files, the
tree-sitter grammar versions and the Python version (pickle format). A different tag is a
different directory, so entries of another version are never read; old tags are pruned.

Each entry is a header (magic, tag, payload length, blake2b digest) followed by a pickle.
Writes go to a temporary file in the same directory and are published with os.replace, so a
reader sees either the whole old entry, the whole new one, or none; two scans writing the same
key write the same value. Anything unexpected on read -- short file, wrong magic, other tag,
digest mismatch, unpickling error -- is a miss, never an error. A failing write (full disk,
read-only cache dir) turns the cache off for the rest of the run.

The cache only holds what archaudit computed itself; unpickling trusts the user's own cache
directory the way pip and pytest trust theirs.
"""
from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import struct
import sys
import tempfile
import time
from functools import lru_cache
from pathlib import Path

MAGIC = b"ARCHAUDIT-CACHE\x01"
_HEADER = struct.Struct("<16s32sQ32s")  # magic, tag, payload length, digest
# keep this many version directories (the current one included); older ones are removed
KEEP_TAGS = 3


def default_root() -> Path:
    env = os.environ.get("ARCHAUDIT_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "archaudit"


def digest(data: bytes) -> str:
    """The content hash used for file keys (hex, 32 chars)."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


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
    import tree_sitter

    from . import __version__
    from .ruledata import rules_dir

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
        from importlib.metadata import version

        return version(mod.replace("_", "-"))
    except Exception:  # noqa: BLE001 - a missing grammar only changes the tag
        return "?"


class Cache:
    """get/put of picklable values by (namespace, key). Never raises on a bad entry."""

    def __init__(self, root: str | os.PathLike | None = None, tag: str | None = None):
        self.root = Path(root) if root is not None else default_root()
        self.tag = tag or version_tag()
        self.dir = self.root / f"scan-{self.tag}"
        self.enabled = True
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
        try:
            with open(self.path(ns, key), "rb") as f:
                raw = f.read()
        except OSError:
            self.misses += 1
            return None
        value = self._decode(raw)
        if value is None:
            self.misses += 1
            self.bad += 1
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
        if hashlib.blake2b(payload, digest_size=32).digest() != dig:
            return None
        try:
            return (pickle.loads(payload),)
        except Exception:  # noqa: BLE001 - any unpickling problem is a miss
            return None

    def put(self, ns: str, key: str, value) -> bool:
        if not self.enabled:
            return False
        try:
            payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - an unpicklable value is simply not cached
            return False
        head = _HEADER.pack(MAGIC, self._tag_bytes, len(payload), hashlib.blake2b(payload, digest_size=32).digest())
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
