"""The scan's helper processes, forked beside the analysis thread: the parse worker (ParsePool)
that parses the Python modules the gate rounds are about to load, the C++ host-code checks
(RuntimeChecksJob) and the CUDA side of the verdicts (CudaWorker). Each gives the same result
as the work done in-process, and a helper that fails leaves its work to the scan's own process.
Each counts what it delivered (ParsePool.taken, RuntimeChecksJob.ran, CudaWorker.installed), so
a test can tell a helper that worked from one that fell back in silence.
"""
from __future__ import annotations

import mmap
import multiprocessing
import os
import pickle
import re
import threading
import time
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from typing import Callable

from .children import die_with_parent
from .model import Gate
from .parsing.screen import binary_problem
from .runtime import run_with_big_stack
from .sources import DirSource, Source, SourceReader


def _background(parent: int) -> None:
    """A forked helper that works ahead (C++ host checks, CUDA warm-up) ends with the scan
    (die_with_parent) and runs only on a core nothing else wants: the analysis thread is the
    scan's critical path, and the parse worker (ParsePool) takes work off it. A nice value
    alone still lets them take CPU time from the analysis thread."""
    die_with_parent(parent)
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (OSError, AttributeError):
        try:
            os.nice(5)
        except OSError:
            pass


def _can_fork(source: Source) -> bool:
    """Fork only: a helper needs the Source as it is (spawn would re-import a user's __main__);
    a directory only: a wheel's open zip file would be shared with the fork (one file offset for
    two readers)."""
    return isinstance(source, DirSource) and "fork" in multiprocessing.get_all_start_methods()


def _fork_pool(source: Source):
    """A one-process pool forked from this one (see _can_fork), or None."""
    if not _can_fork(source):
        return None
    try:
        return ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("fork"),
                                   initializer=_background, initargs=(os.getpid(),))
    except (OSError, RuntimeError):
        return None


def _with_reads(source: Source, fn):
    """In a worker: fn()'s value, with what reading told the Source meanwhile (Source.reads_since),
    for the parent to record as its own."""
    mark = source.read_mark()
    value = fn()
    return (value, *source.reads_since(mark))


def _runtime_checks_worker(source: Source, cpp_files: list[str]):
    """In a forked process: the checks, and what reading the files told the Source."""
    # lazy: a cache hit imports no analysis
    from .cuda.runtime_checks import scan_runtime_checks

    return _with_reads(source, lambda: scan_runtime_checks(SourceReader(source), cpp_files))


# In the forked CUDA worker: its CudaProject (set by _cuda_warm, used by _cuda_analyse).
_CUDA: dict = {}
# JIT sources named in Python code ("norm.cu", csrc / "x.cpp"): the TUs the warm-up reads first
_NAMED_SOURCE = re.compile(rb"[\w.+-]+\.(?:cu|cpp|cc|cxx)\b")
_SOURCE_SUFFIX = re.compile(rb"\.(?:cu|cpp|cc|cxx)\b")
_NAME_BYTE = frozenset(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_.+-")


def named_sources(data: bytes) -> set[bytes]:
    """set(_NAMED_SOURCE.findall(data)), searched from the suffixes: a match is a prefix of a
    maximal run of name bytes (_NAME_BYTE), so each run holding a suffix is searched alone (the
    pattern run over the whole file tries every offset of every name)."""
    out: set[bytes] = set()
    run_end = -1
    for m in _SOURCE_SUFFIX.finditer(data):
        if m.start() < run_end:
            continue  # in the run searched last
        start = m.start()
        while start > 0 and data[start - 1] in _NAME_BYTE:
            start -= 1
        run_end = m.end()
        while run_end < len(data) and data[run_end] in _NAME_BYTE:
            run_end += 1
        out.update(_NAMED_SOURCE.findall(data[start:run_end]))
    return out


def _cuda_warm(files: list[str], py_files: list[str]) -> int:
    """In the CUDA worker, while the parent evaluates the Python gates: build the same
    CudaProject judge_scan builds, and extract the facts of the C/C++ files the JIT modules
    are likely to compile (sources named in Python code, then their includes), until the
    parent sets the stop event (inherited: an Event cannot be pickled).
    Only files that read without a diagnostic are kept (Source.read_quietly): the others are
    read, and reported, by the TU analysis that needs them, as in-process."""
    # lazy: a cache hit imports no analysis
    from .cuda import features as F
    from .cuda.preproc import OP_INCLUDE
    from .cuda.tu import CudaProject

    source, stop = _CUDA["source"], _CUDA["stop"]
    reader = SourceReader(source)
    project = CudaProject(reader, CudaProject.discover_include_roots(files, reader), files=files)
    _CUDA["project"] = project
    named: set[bytes] = set()
    for p in py_files:
        if stop.is_set():
            return 0
        data = source.read_quietly(p)
        if data is not None:
            named.update(named_sources(data))
    todo = deque(f for f in files if f.endswith((".cu", ".cpp", ".cc", ".cxx"))
                 and f.rsplit("/", 1)[-1].encode() in named)
    resolver = project.resolver.for_tu()  # the roots resolving adds stay its own
    seen = set(todo)
    done = 0
    while todo and not stop.is_set():
        path = todo.popleft()
        data = source.read_quietly(path)
        if data is None or binary_problem(data) is not None:
            continue
        ff = F.extract(path, data)
        project.set_facts(ff)
        done += 1
        included = []
        for op in ff.program.ops:
            if op[0] == OP_INCLUDE and not op[5]:  # not a computed #include
                r = resolver.resolve(op[2], op[3], path)
                if r.kind == "file" and r.path not in seen:
                    seen.add(r.path)
                    included.append(r.path)
        # depth first: the headers most TUs share (CCCL, CUTLASS) come with the first TUs,
        # not after every named source
        todo.extendleft(reversed(included))
    return done


def _cuda_analyse(todo: list[tuple]):
    """In the CUDA worker: analyse_tu for each (key, arguments), with the new diagnostics and
    screened files of the Source the project reads through (as _runtime_checks_worker)."""
    source, project = _CUDA["source"], _CUDA["project"]
    return _with_reads(source, lambda: run_with_big_stack(
        lambda: [(key, project.analyse_tu(*args)) for key, args in todo]))


class CudaWorker:
    """One forked process for the CUDA side of the verdicts. Started before the Python gates
    are evaluated (which keep one core busy), it reads and extracts the C/C++ files the JIT
    modules likely compile; when the verdicts begin, it analyses the TUs they need, sent as
    the call graph finds them, while this process goes on following calls. Its results are
    installed in the TU cache as if analysed here: a TU's analysis depends only on its
    arguments and the files (the worker's caches only save work). A failure leaves the rest
    to be analysed in-process."""

    def __init__(self, source: Source, ex, stop):
        self.source, self.ex, self.stop = source, ex, stop
        self.futs: list = []
        self.sent: set = set()
        self.installed = 0  # TU analyses the worker made and the TU cache took

    @classmethod
    def start(cls, source: Source, files: list[str], py_files: list[str]) -> "CudaWorker | None":
        ex = _fork_pool(source)
        if ex is None:
            return None
        try:
            # inherited, not sent: set before the worker is forked (at the first submit); the
            # worker's Source is the one its project reads through, task after task
            _CUDA["source"] = source
            stop = _CUDA["stop"] = multiprocessing.get_context("fork").Event()
            w = cls(source, ex, stop)
            w.futs.append(ex.submit(_cuda_warm, files, py_files))
            return w
        except (OSError, RuntimeError, pickle.PicklingError):
            ex.shutdown(wait=False, cancel_futures=True)
            _CUDA.clear()
            return None

    def send(self, wanted: dict) -> None:
        """Analyse these TUs ({key: analyse_tu arguments}; those sent before are skipped)."""
        self.stop.set()  # the warm-up ends: what it has not read, the analyses read on demand
        todo = [(k, a) for k, a in wanted.items() if k not in self.sent]
        if not todo or self.ex is None:
            return
        self.sent.update(k for k, _a in todo)
        try:
            self.futs.append(self.ex.submit(_cuda_analyse, todo))
        except RuntimeError:  # the worker is gone
            self.close()

    def collect(self, tus, say: Callable[..., None]) -> None:
        """Wait for every analysis sent and install the results in `tus`."""
        total, done = len(self.sent), 0
        try:
            for fut in self.futs[1:]:
                results, diags, screened = fut.result()
                for key, r in results:
                    tus.install(key, r)
                self.source.adopt_reads(diags, screened)
                done += len(results)
                self.installed = done
                say("analysing CUDA translation units", done, total)
        except Exception:  # noqa: BLE001 - a lost worker (killed, no memory): the rest is analysed in-process
            pass
        finally:
            self.close()

    def close(self) -> None:
        if self.ex is not None:
            self.stop.set()
            self.ex.shutdown(wait=True, cancel_futures=True)
            self.ex = None
            _CUDA.clear()  # the worker has its own copy; this process keeps no Source alive


def _parse_one(data: bytes, shallow: bool) -> bytes | None:
    """Index._load's parse of these bytes, for loads_parsed; None when it failed (the parent
    parses them again, and reports what goes wrong, as without a worker)."""
    # lazy: a cache hit imports no analysis
    from .parsing.python_ir import dumps_parsed, parse_python

    try:
        return dumps_parsed(parse_python(data, shallow=shallow, lazy=True))
    except Exception:  # noqa: BLE001 - the parent's parse decides
        return None


def _parse_serve(requests, results, claimed, nice: int, parent: int) -> None:
    """The parse worker's loop: parse what is asked for, in order, skipping what the parent
    has claimed (parsed itself meanwhile), until asked for None. A thread of its own sends the
    results, so parsing goes on while the parent is not reading. Ends with its parent."""
    die_with_parent(parent)

    if nice:
        try:
            os.nice(nice)
        except OSError:
            pass
    out: deque = deque()
    ready = threading.Condition()

    def send() -> None:
        while True:
            with ready:
                while not out:
                    ready.wait()
                item = out.popleft()
            try:
                results.send(item)
            except (OSError, ValueError):  # the parent is gone
                return

    def parse() -> None:
        todo: deque = deque()
        while True:
            if not todo or requests.poll():
                msg = requests.recv()
                if msg is None:
                    return  # what is left unsent is not wanted (the sender is a daemon)
                todo.extend(msg)
                continue
            rid, data, shallow = todo.popleft()
            if not claimed[rid]:
                blob = _parse_one(data, shallow)
                with ready:
                    out.append((rid, blob))
                    ready.notify()

    threading.Thread(target=send, daemon=True).start()
    run_with_big_stack(parse)  # the parses need the stack the analysis thread has


class ParsePool:
    """One forked process that parses the Python modules the analysis thread is about to load
    (Index.prefetch), from the bytes it is sent, in that order. The analysis thread takes a
    parse the worker has finished (loading a parse costs a small part of making it) and parses
    itself one it has not, claiming it (the worker then skips it): it never waits. A parse
    depends only on the bytes, so the IR is the same whichever process made it.
    No thread of this process serves the worker (a ProcessPoolExecutor's threads would take the
    interpreter lock from the analysis thread at every task): requests go out in messages of a
    few MB, and results are read from a pipe when a module is loaded. The worker runs below the analysis thread (nice 5) and above
    the other helpers (SCHED_IDLE, see _background), which only work ahead."""

    CAPACITY = 1 << 16  # requests per scan (ids of the claimed array)
    MESSAGE_BYTES = 1 << 21
    NICE = 5

    def __init__(self, proc, requests, results, claimed):
        self.proc, self.requests, self.results, self.claimed = proc, requests, results, claimed
        self.ids: dict[tuple[str, bool], int] = {}  # asked for, not yet taken
        self.done: dict[int, bytes | None] = {}  # results not yet taken
        self.batch: list[tuple] = []
        self.next_id = 0
        self.taken = self.parsed_here = 0

    @classmethod
    def start(cls, source: Source) -> "ParsePool | None":
        if not _can_fork(source):
            return None
        ctx = multiprocessing.get_context("fork")
        try:
            recv_end, send_end = ctx.Pipe(duplex=False)
            results, results_in = ctx.Pipe(duplex=False)
            # shared with the fork, and no file behind it (RawArray would write one in /dev/shm)
            claimed = mmap.mmap(-1, cls.CAPACITY)
            proc = ctx.Process(target=_parse_serve, args=(recv_end, results_in, claimed, cls.NICE, os.getpid()),
                               daemon=True)
            proc.start()
        except Exception:  # noqa: BLE001 - no helper process here (limits, sandbox): parse in-process
            return None
        # only the worker holds these ends: if it dies, even halfway through a message, reading
        # gives EOFError instead of waiting for ever
        recv_end.close()
        results_in.close()
        return cls(proc, send_end, results, claimed)

    def want(self, path: str, data: bytes, shallow: bool) -> None:
        key = (path, shallow)
        if self.proc is None or self.results is None or key in self.ids or self.next_id >= self.CAPACITY:
            return
        rid = self.ids[key] = self.next_id
        self.next_id += 1
        self.batch.append((rid, data, shallow))

    def flush(self) -> None:
        """Send what was asked for since the last flush, in messages of a few MB (one message
        of a round's bytes would be as large again in this process's heap)."""
        batch, self.batch = self.batch, []
        chunk, size = [], 0
        for item in batch:
            chunk.append(item)
            size += len(item[1])
            if size >= self.MESSAGE_BYTES or item is batch[-1]:
                if self.proc is None:
                    return
                try:
                    self.requests.send(chunk)
                except (OSError, ValueError):  # the worker is gone
                    self.close()
                chunk, size = [], 0

    def receive(self, timeout: float = 0.0) -> int:
        """Read the parses the worker has sent; with a timeout, wait for every one asked for
        (for at most that long). Returns how many asked for are not here yet."""
        deadline = time.monotonic() + timeout
        # without a timeout, read all there is: take() has already removed what it looks for
        while self.proc is not None and self.results is not None and (not timeout or len(self.done) < len(self.ids)):
            try:
                if not self.results.poll(max(0.0, deadline - time.monotonic())):
                    break
                got, blob = self.results.recv()
            except (OSError, EOFError, ValueError):  # the worker is gone: parse the rest here
                self.results.close()
                self.results = None
                break
            if not self.claimed[got]:  # else parsed here meanwhile
                self.done[got] = blob
        return len(self.ids) - len(self.done)

    def take(self, path: str, data: bytes, shallow: bool):
        """The ParsedModule of these bytes if the worker has made it, else None (and the worker
        will not make it)."""
        # lazy: a cache hit imports no analysis
        from .parsing.python_ir import loads_parsed

        rid = self.ids.pop((path, shallow), None)
        if rid is None:
            return None
        if rid not in self.done:
            self.receive()
        if rid not in self.done:
            self.claimed[rid] = 1
            self.parsed_here += 1
            return None
        blob = self.done.pop(rid)
        if blob is None:  # it failed there: the parse here decides, and reports
            self.parsed_here += 1
            return None
        self.taken += 1
        return loads_parsed(blob, data, shallow)

    def close(self) -> None:
        if self.proc is not None:
            if self.results is not None:  # first: a worker blocked sending a result stops
                self.results.close()
                self.results = None
            try:
                self.requests.send(None)
            except (OSError, ValueError):
                pass
            self.proc.join(timeout=5)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join()
            self.requests.close()
            self.proc = None
        self.ids.clear()
        self.done.clear()


class RuntimeChecksJob:
    """scan_runtime_checks in one forked worker process while the Python gates are evaluated.
    The result is the same as in-process: the worker reads through a copy of the same Source,
    and its diagnostics are recorded in the parent's (deduplicated as a second read would be)."""

    def __init__(self, source: Source, ex, fut):
        self.source, self.ex, self.fut = source, ex, fut
        self.ran = False  # the worker's gates were used

    @classmethod
    def start(cls, source: Source, cpp_files: list[str]) -> "RuntimeChecksJob | None":
        ex = _fork_pool(source) if cpp_files else None
        if ex is None:
            return None
        try:
            return cls(source, ex, ex.submit(_runtime_checks_worker, source, cpp_files))
        except (OSError, RuntimeError, pickle.PicklingError):
            ex.shutdown(wait=False, cancel_futures=True)
            return None

    def abandon(self) -> None:
        """Ends the worker unheard (the scan failed)."""
        self.ex.shutdown(wait=False, cancel_futures=True)

    def result(self) -> list[Gate] | None:
        """The gates, or None when the worker failed (the caller then runs the checks itself)."""
        try:
            gates, diags, screened = self.fut.result()
        except Exception:  # noqa: BLE001 - a lost worker (killed, no memory): redo in-process
            return None
        finally:
            self.ex.shutdown(wait=True)
        self.source.adopt_reads(diags, screened)
        self.ran = True
        return gates

