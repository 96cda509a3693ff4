"""Whole-scan reuse: content fingerprints of the inputs, the result cache and early cutoff.

A scan's result is a pure function of (archaudit version/code/rules -- the cache tag), the file
listing with what listing it reported, the bytes of the files, and the targets. So:

- warm: every input's content hash is known from the previous run's stat snapshot (size,
  mtime, ctime, inode unchanged, and modified well before that snapshot was taken, the way git
  guards against "racy" files) -> the result key -> the stored result. Nothing is read or parsed.
- one file changed: only that file is read and hashed. If the change cannot affect the analysis
  (early cutoff: `_cutoff` below), the previous result is the answer; otherwise the scan runs.
- cold: every input is read and hashed (in worker processes when there is enough to do).

A change is proven irrelevant only when the old bytes can be rebuilt exactly (the previous run
kept each file's code prefix length and its trailing comment/blank lines) and old and new give the
same IR (positions included), the same parse errors and decoding verdict, and the same answers to
every prefilter question the scan asked (module and function level, for all names it used).
Anything else, and any doubt, means a full scan.

ScanCache is the cache's part in one scan: the pipeline asks it for a stored result before
anything is analysed (look_up) and hands it the computed one after (store_result).
"""
from __future__ import annotations

import multiprocessing
import os
import pickle
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from .cache import Cache, digest, digest_file, key_of
from .children import die_with_parent
from .parsing.words import words_of
from .progress import adapt_progress
from .python.pybytes import split_trailer
from .runtime import default_workers
from .sources import MAX_FILE_BYTES, DirSource, Source, WheelSource, open_source, size_limit

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


_PAYLOAD_KEYS = ("gates", "diagnostics", "findings", "modules", "stats", "names")


def _payload(v) -> dict | None:
    if isinstance(v, dict) and all(k in v for k in _PAYLOAD_KEYS):
        return v
    return None


def _save_run(store: Cache, rkey: str, fp, key: str, tnames: list[str], payload: dict) -> None:
    store.put("run", rkey, {"snapshot_ns": fp.snapshot_ns, "files": fp.files, "unreadable": sorted(fp.unreadable),
                            "listing": fp.listing, "whole": fp.whole, "targets": tnames, "result_key": key})


def _same_run(prev: dict | None, fp, key: str, tnames: list[str]) -> bool:
    """Would the run snapshot written now say what the stored one says? When every file's state
    was taken from the stored snapshot (none read again; unreadable files are retried on every
    run anyway) and the listing, targets and result are the same, it would differ only in its
    time, and keeping the older time trusts exactly the same files next run (a file is trusted
    when modified well before the snapshot; a later change moves its mtime past both times).
    Not writing it saves pickling and writing 16,000 file states."""
    if prev is None or prev.get("listing") != fp.listing or prev.get("result_key") != key:
        return False
    old = prev.get("files") or {}
    return (prev.get("targets") == tnames and prev.get("whole") == fp.whole and len(old) == len(fp.files)
            and prev.get("unreadable") == sorted(fp.unreadable)
            and all(st is old.get(p) for p, st in fp.files.items()))


def _cutoff(source: Source, fp, prev: dict | None, store: Cache, tnames: list[str]) -> dict | None:
    """The previous result, if every changed file provably cannot change it (early cutoff: see
    the module's docstring)."""
    # lazy: a cache hit imports no analysis
    from .python.gates import cutoff_view

    if prev is None or fp.whole is not None or prev.get("whole") is not None:
        return None
    if prev.get("listing") != fp.listing or prev.get("targets") != tnames:
        return None
    old_files = prev.get("files") or {}
    if set(old_files) != set(fp.files) or sorted(fp.unreadable) != prev.get("unreadable"):
        return None
    changed = [p for p, st in fp.files.items() if old_files[p].hash != st.hash]
    if not changed or len(changed) > CUTOFF_MAX_FILES or not all(p.endswith(".py") for p in changed):
        return None
    payload = _payload(store.get("result", prev.get("result_key", "")))
    if payload is None:
        return None
    names = payload["names"]
    for p in changed:
        new = source.read(p)
        if new is None or len(new) > MAX_FILE_BYTES:
            return None
        old = rebuild_old(new, old_files[p])
        if old is None:
            return None
        a, b = cutoff_view(old, names), cutoff_view(new, names)
        if a is None or b is None or a[0] != b[0] or a[1] > old_files[p].code_end:
            return None
        # which modules name a word (comments included) bounds the call graph's caller search
        # and is quoted in its notes: a comment that brings a new word may change the result
        if words_of(old) != words_of(new):
            return None
        # a patch quotes context lines, which may reach into a file's trailing comments
        patches = [f.patch for f in payload["findings"] if f.patch and f"--- {p}\n" in f.patch]
        if patches:
            # lazy: a cache hit imports no analysis
            from .verdict.patch import hunks_unchanged

            o, n = (x.decode("utf-8", "surrogateescape") for x in (old, new))
            if not all(hunks_unchanged(t, p, o, n) for t in patches):
                return None
    return payload


def _open_store(cache) -> Cache | None:
    if cache is None or cache is False:
        return None
    if cache is True:
        return Cache()
    return cache


def result_payload(result, names) -> dict:
    """What is stored of a computed scan result (a pipeline.ScanResult): its gates, diagnostics,
    findings, JIT modules and counters (all but the time taken), with the gate scan's names
    (what an early cutoff compares)."""
    return {"gates": result.gates, "diagnostics": result.diagnostics, "findings": result.findings,
            "modules": result.modules,
            "stats": {k: v for k, v in result.stats.items() if k != "seconds"}, "names": names}


@dataclass
class ScanCache:
    """The cache's part in one scan: the store (None without a cache), the inputs' fingerprint
    and the previous run's record with its key (set by look_up), and `info`, how the result was
    obtained (pipeline.ScanResult.cache)."""
    store: Cache | None
    fp: Fingerprint | None = None
    prev: dict | None = None
    rkey: str | None = None
    info: dict = field(default_factory=lambda: {"mode": "off"})

    @classmethod
    def open(cls, cache) -> "ScanCache":
        """cache: a Cache, True for the default cache directory, None/False for none."""
        return cls(_open_store(cache))

    def look_up(self, source: Source, files: list[str], tnames: list[str], workers: int, say) -> dict | None:
        """Fingerprints the inputs and gives the stored payload (result_payload) when it still
        holds: stored for the same inputs (a hit), or for inputs whose changes cannot affect it
        (an early cutoff, stored now under the new key); None without a cache or when the scan
        must run."""
        store = self.store
        if store is None:
            return None
        self.rkey = run_key(source)
        prev = store.get("run", self.rkey)
        self.prev = prev if isinstance(prev, dict) else None
        fp = self.fp = fingerprint(source, files, self.prev, workers, say)
        self.info = {"mode": "miss", "hashed": fp.hashed, "reused": fp.reused}
        key = fp.key(tnames)
        payload = _payload(store.get("result", key))
        mode = "hit"
        if payload is None:
            payload = _cutoff(source, fp, self.prev, store, tnames)
            mode = "cutoff"
        if payload is None:
            return None
        self.info["mode"] = mode
        self.info["key"] = key  # what commands deriving their output from this result key it by (derived.py)
        if mode == "cutoff":
            store.put("result", key, payload)
        if mode == "cutoff" or not _same_run(self.prev, fp, key, tnames):
            _save_run(store, self.rkey, fp, key, tnames, payload)
        self.info.update(store.stats())
        return payload

    def store_result(self, source: Source, tnames: list[str], payload: dict,
                     when_stored: Callable[[Cache], None]) -> None:
        """Stores a computed result's payload under the inputs' fingerprint, and calls
        when_stored(store) when it is new there (the scan stores what is derived from it),
        unless there is no cache or an input changed while the scan read it."""
        store, fp = self.store, self.fp
        if store is None or fp is None or not inputs_unchanged(source, fp):
            return
        key = fp.key(tnames)
        if store.put("result", key, payload):
            self.info["key"] = key
            when_stored(store)
        _save_run(store, self.rkey, fp, key, tnames, payload)
        self.info.update(store.stats())
