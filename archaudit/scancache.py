"""Whole-scan reuse: content fingerprints of the inputs, the result cache and early cutoff.

A scan's result is a pure function of (archaudit version/code/rules -- the cache tag), the file
listing with what listing it reported, the bytes of the files, and the targets. So:

- warm: every input's content hash is known from the previous run's stat snapshot (size,
  mtime, ctime, inode unchanged, and modified well before that snapshot was taken, the way git
  guards against "racy" files) -> the result key -> the stored result. Nothing is read or parsed.
- one file changed: only that file is read and hashed. If the change cannot affect the analysis
  (early cutoff: pipeline's `_cutoff`), the previous result is the answer; otherwise the scan runs.
- cold: every input is read and hashed (in worker processes when there is enough to do).

A change is proven irrelevant only when the old bytes can be rebuilt exactly (the previous run
kept each file's code prefix length and its trailing comment/blank lines) and old and new give the
same IR (positions included), the same parse errors and decoding verdict, and the same answers to
every prefilter question the scan asked (module and function level, for all names it used).
Anything else, and any doubt, means a full scan.
"""
from __future__ import annotations

import multiprocessing
import os
import pickle
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field

from .cache import Cache, digest, digest_file, key_of
from .children import die_with_parent
from .progress import adapt_progress
from .python.pybytes import split_trailer
from .runtime import default_workers
from .sources import DirSource, Source, WheelSource, open_source, size_limit

# a stat entry is trusted only for files last modified this long before the snapshot
RACY_NS = 2_000_000_000
# hand hashing to worker processes only when there is this much to read
PARALLEL_MIN_BYTES = 24 * 1024 * 1024
# early cutoff is tried for at most this many changed files
CUTOFF_MAX_FILES = 16


@dataclass
class FileState:
    size: int
    mtime_ns: int
    ctime_ns: int
    ino: int
    hash: str
    code_end: int  # split_trailer(data)
    trailer: bytes  # data[code_end:], bounded

    def same_stat(self, st: os.stat_result) -> bool:
        return (self.size, self.mtime_ns, self.ctime_ns, self.ino) == (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


def _state_of(data: bytes, st) -> FileState:
    end = split_trailer(data)
    trailer = data[end:]
    if len(trailer) > 4096:  # a huge trailer is kept out of the snapshot: no cutoff for it
        end, trailer = -1, b""
    if st is None:
        return FileState(len(data), 0, 0, 0, digest(data), end, trailer)
    return FileState(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, digest(data), end, trailer)


def _read_files(root: str, paths: list[str], want_state: bool, want_facts: bool) -> list[tuple]:
    """Worker: (path, FileState | None, prefilter facts | None) for files below root. The stat
    is taken before the read, so a file changed meanwhile looks changed next time."""
    if want_facts:
        # lazy: a cache hit imports no analysis
        from .python.gates import byte_facts
    out = []
    for p in paths:
        full = os.path.join(root, p)
        try:
            st = os.stat(full)
            limit = size_limit(p)  # what the scan itself reads (a prebuilt extension: its whole file)
            if st.st_size > limit:
                out.append((p, None, None))
                continue
            with open(full, "rb") as f:
                data = f.read(limit + 1)
        except OSError:
            out.append((p, None, None))
            continue
        facts = byte_facts(data) if want_facts and p.endswith(".py") else None
        out.append((p, _state_of(data, st) if want_state else None, facts))
    return out


def read_in_workers(root: str, todo: list[str], workers: int, want_state: bool, progress,
                    what: str = "reading and hashing files") -> tuple[list[tuple], bool]:
    """_read_files over todo, in `workers` processes when there is enough to read. Returns the
    rows and whether processes were used (in-process runs skip the prefilter facts)."""
    total = len(todo)
    size = 0
    if workers > 1:
        for p in todo:
            try:
                size += os.stat(os.path.join(root, p)).st_size
            except OSError:
                pass
    if workers > 1 and size >= PARALLEL_MIN_BYTES:
        chunks = [todo[i : i + 250] for i in range(0, total, 250)]
        out: list[tuple] = []
        try:
            # fork: the workers run one pure function and need nothing re-imported; spawn would
            # re-run an unguarded __main__ script of a library user in every worker
            methods = multiprocessing.get_all_start_methods()
            ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
            with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=die_with_parent,
                                     initargs=(os.getpid(),)) as ex:
                n = len(chunks)
                for part in ex.map(_read_files, [root] * n, chunks, [want_state] * n, [True] * n):
                    out.extend(part)
                    if progress:
                        progress(what, len(out), total)
            return out, True
        except (OSError, RuntimeError, pickle.PicklingError):
            pass  # no processes here (sandbox, limits): read in-process
    if not want_state:
        return [], False
    out = []
    for i in range(0, total, 500):
        if progress:
            progress(what, i, total)
        out.extend(_read_files(root, todo[i : i + 500], True, False))
    return out, False


def prefilter_in_workers(root: str, py_files: list[str], workers: int, progress) -> dict | None:
    rows, used = read_in_workers(root, py_files, workers, False, progress, "prefiltering files")
    return {p: f for p, _s, f in rows if f is not None} if used else None


@dataclass
class Fingerprint:
    """Content hashes of a scan's inputs, and what it took to get them."""

    files: dict[str, FileState] = field(default_factory=dict)
    unreadable: list[str] = field(default_factory=list)  # hashed as absent
    listing: str = ""  # digest of the whole file listing and of the diagnostics taken so far (the walk's)
    whole: str | None = None  # a wheel: digest of the wheel file
    hashed: int = 0  # files read and hashed in this run
    reused: int = 0  # hashes taken from the stat snapshot
    snapshot_ns: int = 0
    facts: dict = field(default_factory=dict)  # prefilter facts of the files read in workers

    def key(self, targets: list[str]) -> str:
        parts = ["result-v1", self.listing, *targets, "|"]
        if self.whole is not None:
            parts.append(self.whole)
        for p in sorted(self.files):
            parts += [p, self.files[p].hash]
        for p in sorted(self.unreadable):
            parts += [p, "-"]
        return key_of(*parts)


def run_key(source: Source) -> str:
    """Where the previous run on this root keeps its snapshot."""
    if isinstance(source, WheelSource):
        return key_of("run", "wheel", os.path.abspath(str(source.path)))
    if isinstance(source, DirSource):
        return key_of("run", "dir", str(source.root))
    return key_of("run", type(source).__name__, source.label)


def fingerprint(source: Source, files: list[str], previous: dict | None, workers: int,
                progress=None) -> Fingerprint:
    fp = Fingerprint(snapshot_ns=time.time_ns())
    # what listing the files reported (a link out of the root, a FIFO, an unreadable directory,
    # a bad name) is part of the result but names no listed file: two trees with the same files
    # differ there, and so does one tree before and after such an entry is added
    walk = [f"{d.path}\0{d.kind}\0{d.line}\0{d.severity}\0{d.message}" for d in sorted(set(source.diagnostics))]
    # and which listed paths were symlinks to which file (listed once: DirSource.aliases)
    aliases = [f"{a}\0{c}" for a, c in sorted(getattr(source, "aliases", {}).items())]
    fp.listing = key_of("listing", *files, "|", *walk, "|", *aliases)
    prev_files: dict[str, FileState] = (previous or {}).get("files", {})
    prev_snap = (previous or {}).get("snapshot_ns", 0)
    if isinstance(source, WheelSource):
        st = os.stat(source.path)
        old = prev_files.get("")
        if old is not None and old.same_stat(st) and st.st_mtime_ns < prev_snap - RACY_NS:
            fp.files[""] = old
            fp.reused += 1
        else:  # hashed in pieces; a wheel has no code prefix to keep (no early cutoff)
            fp.files[""] = FileState(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino,
                                     digest_file(source.path), -1, b"")
            fp.hashed += 1
        fp.whole = fp.files[""].hash
        return fp
    # every file is an input: Python and metadata for the gates, C/C++/CUDA sources for runtime
    # checks and verdicts, prebuilt binaries for binary-only verdicts
    inputs = files
    if not isinstance(source, DirSource):  # any other Source: read through it
        for p in inputs:
            data = source.read(p)
            if data is None:
                fp.unreadable.append(p)
            else:
                fp.files[p] = _state_of(data, None)
                fp.hashed += 1
        return fp
    root = str(source.root)
    todo: list[str] = []
    for p in inputs:
        old = prev_files.get(p)
        if old is not None:
            try:
                st = os.stat(os.path.join(root, p))
            except OSError:
                todo.append(p)
                continue
            if old.same_stat(st) and st.st_mtime_ns < prev_snap - RACY_NS:
                fp.files[p] = old
                fp.reused += 1
                continue
        todo.append(p)
    if todo:
        rows, _used = read_in_workers(root, todo, workers, True, progress)
        for p, state, facts in rows:
            if state is None:
                fp.unreadable.append(p)
            else:
                fp.files[p] = state
            if facts is not None:
                fp.facts[p] = facts
        fp.hashed = len(todo)
    return fp


def rebuild_old(new: bytes, old: FileState) -> bytes | None:
    """The previous bytes of a file whose code prefix is unchanged, or None."""
    if old.code_end < 0 or old.code_end > len(new):
        return None
    data = new[: old.code_end] + old.trailer
    return data if digest(data) == old.hash else None


def input_fingerprint(path, store: Cache, workers: int | None = None, progress=None):
    """(source, fingerprint) of a scan root's inputs, taken the way scan takes them (trusting the
    previous scan's stat snapshot; nothing is written): what a command whose output depends on the
    inputs alone, not on a scan's result (the whole call graph), keys its stored output by.
    fingerprint.key([]) is the key a scan without targets stores its result under."""
    say = adapt_progress(progress)
    workers = default_workers() if workers is None else max(1, int(workers))
    source = open_source(path)
    files = source.files()
    prev = store.get("run", run_key(source))
    fp = fingerprint(source, files, prev if isinstance(prev, dict) else None, workers, say)
    return source, fp


def inputs_unchanged(source: Source, fp) -> bool:
    """Are the inputs still those fingerprinted (nothing changed while a scan or command ran)?
    When one changed, the result must not be stored under the fingerprint taken before."""
    if not isinstance(source, DirSource):
        return True
    for p, st in fp.files.items():
        if st.mtime_ns == 0:
            continue
        try:
            cur = os.stat(os.path.join(str(source.root), p))
        except OSError:
            return False
        if not st.same_stat(cur):
            return False
    return True
