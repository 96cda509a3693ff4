"""Where a cold scan's memory goes (issue 27): peak RSS of the scan process and of each forked
worker, RSS along the scan's phases, and optionally what holds the heap at one phase.

    python bench/memory.py SP -o OUT.json                     # the timeline and the per-process peaks
    python bench/memory.py SP --walk "judging JIT modules" --walk end   # + heap by holder at the first
                                                              # progress message holding that text
    python bench/memory.py SP -- --format json -o r.json      # extra archaudit scan arguments

The scan runs in this process exactly as `archaudit scan SP -t sm_120 --no-cache` (the CLI's
own command, with the arguments after --), so the workers are this process's children. A
thread samples /proc every 0.05 s: this process's VmRSS with the last progress message (the phase),
and each child's VmHWM (its peak) with the phase it was first seen in. At the end, the scan
process's own peak (getrusage RUSAGE_SELF) and the largest reaped child's (RUSAGE_CHILDREN).
The walk (--walk) stops the analysis thread while it sums sys.getsizeof over what each holder
reaches (the first holder listed claims what several share), with the largest types of each;
its time is left out of the timeline's clock, and its own id sets raise the RSS it prints.
Also counted: the phases inside the verdicts (Inventory.judge, build_flag_findings) and the TU
analyses run in the scan process itself rather than in the CUDA worker. Nothing scanned is imported.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import sys
import threading
import time
import weakref
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _status(pid: int | str) -> dict[str, int]:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(("VmRSS", "VmHWM")):
                    k, v = line.split(":")
                    out[k] = int(v.split()[0]) // 1024  # MB
    except OSError:
        pass
    return out


def _children() -> list[int]:
    pids = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                pids += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return pids


class Recorder:
    def __init__(self):
        self.t0 = time.perf_counter()
        self.phase = "start"
        self.phases: dict[str, dict] = {}  # phase -> {first_s, max_rss_mb}
        self.kids: dict[int, dict] = {}
        self.timeline: list[tuple] = []
        self.stop = threading.Event()
        self.paused_s = 0.0  # time spent walking the heap (left out of the timeline's clock)

    def now(self) -> float:
        return round(time.perf_counter() - self.t0 - self.paused_s, 2)

    def set_phase(self, msg: str) -> None:
        if msg != self.phase:
            self.phase = msg
            self.phases.setdefault(msg, {"first_s": self.now(), "max_rss_mb": 0})
            self.sample()

    def sample(self) -> None:
        rss = _status("self").get("VmRSS", 0)
        ph = self.phases.setdefault(self.phase, {"first_s": self.now(), "max_rss_mb": 0})
        ph["max_rss_mb"] = max(ph["max_rss_mb"], rss)
        if not self.timeline or self.timeline[-1][2] != self.phase or abs(self.timeline[-1][1] - rss) >= 20:
            self.timeline.append((self.now(), rss, self.phase))
        for pid in _children():
            st = _status(pid)
            if not st:
                continue
            k = self.kids.setdefault(pid, {"first_s": self.now(), "first_phase": self.phase, "hwm_mb": 0, "last_s": 0})
            k["hwm_mb"] = max(k["hwm_mb"], st.get("VmHWM", 0))
            k["last_s"] = self.now()

    def run(self) -> None:
        while not self.stop.wait(0.05):
            self.sample()


def deep_sizes(roots: list[tuple[str, object]], seen: set[int]) -> list[tuple[str, int, int, Counter]]:
    """(name, bytes, objects, bytes by type) that each root reaches and no earlier root did."""
    out = []
    for name, root in roots:
        size = count = 0
        types: Counter = Counter()
        stack = [root]
        while stack:
            o = stack.pop()
            i = id(o)
            if i in seen:
                continue
            seen.add(i)
            if isinstance(o, type) or type(o).__name__ in ("module", "function", "builtin_function_or_method"):
                continue  # code and classes are the program's, not the scan's
            n = sys.getsizeof(o)
            size += n
            count += 1
            types[type(o).__name__] += n
            stack.extend(gc.get_referents(o))
        out.append((name, size, count, types))
    return out


def parts_of(name: str, obj) -> list[tuple[str, object]]:
    """A holder's attributes as separate roots (instance dict or slots)."""
    if isinstance(obj, dict):
        return [(f"{name}[{k!r}]", v) for k, v in obj.items()]
    fields = dict(getattr(obj, "__dict__", {}) or {})
    for cls in type(obj).__mro__:
        for s in getattr(cls, "__slots__", ()):
            if hasattr(obj, s):
                fields[s] = getattr(obj, s)
    return [(f"{name}.{k}", v) for k, v in fields.items()]


# holders whose attributes are listed one by one (a level further down)
EXPAND = ("analysis.graph", "analysis.graph.r", "analysis.jit", "analysis.behind", "tus")


def walk_heap(holders: dict[str, object]) -> dict:
    t = time.perf_counter()
    seen: set[int] = set()
    seen.update(id(x) for x in (holders, seen))
    roots: list[tuple[str, object]] = []

    def add(name, obj):
        for part, value in parts_of(name, obj):
            if part in EXPAND:
                add(part, value)
            roots.append((part, value))

    for name, obj in holders.items():
        if name in EXPAND:
            add(name, obj)
        else:
            roots.extend(parts_of(name, obj))
    # expanded parts first: they claim what they reach before their owner does
    roots.sort(key=lambda r: -r[0].count("."))
    rows = []
    for part, size, count, types in deep_sizes(roots, seen):
        rows.append({"holder": part, "mb": round(size / 2**20, 1), "objects": count,
                     "types": {k: round(v / 2**20, 1) for k, v in types.most_common(6)}})
    rows.sort(key=lambda r: -r["mb"])
    return {"rss_mb": _status("self").get("VmRSS"), "holders": [r for r in rows if r["mb"] >= 0.5],
            "walk_s": round(time.perf_counter() - t, 1)}


def install(rec: Recorder, walk_at: str | None, out: dict) -> None:
    import archaudit.pipeline as P
    from archaudit.progress import adapt_progress

    holders: dict[str, object] = {}

    def remember(cls, label):
        init = cls.__init__

        def wrapped(self, *a, **k):
            init(self, *a, **k)
            if label not in holders:
                try:  # not kept alive by the harness
                    holders[label] = weakref.ref(self)
                except TypeError:
                    holders[label] = lambda obj=self: obj

        cls.__init__ = wrapped

    from archaudit.callgraph import Analysis
    from archaudit.cuda.tu import CudaProject
    from archaudit.python.index import Index
    from archaudit.verdict.inventory import Inventory
    from archaudit.verdict.judge import TuCache
    from archaudit.verdict.patch import Patcher

    for cls, label in ((Index, "index"), (Analysis, "analysis"), (CudaProject, "cuda_project"), (TuCache, "tus"),
                       (Inventory, "inventory"), (Patcher, "patcher")):
        remember(cls, label)

    def walk(msg: str) -> None:
        t = time.perf_counter()
        import archaudit.parsing.python_ir as IR
        live = {k: r() for k, r in holders.items()}
        live = {k: v for k, v in live.items() if v is not None}
        extra = {"python_ir._NAMES": IR._NAMES, "python_ir._LEAF_FIELDS": IR._LEAF_FIELDS}
        out.setdefault("walks", []).append({"phase": msg, **walk_heap({**live, **extra})})
        del live
        rec.paused_s += time.perf_counter() - t

    pending = list(walk_at)

    def adapt(progress):
        inner = adapt_progress(progress)

        def say(msg, done=None, total=None):
            rec.set_phase(str(msg))
            if pending and pending[0] in str(msg):
                walk(pending.pop(0))
            return inner(msg, done, total)

        return say

    P.adapt_progress = adapt
    scan = P.scan

    def scan_then_mark(*a, **k):
        result = scan(*a, **k)
        rec.set_phase("after the scan: reporting")
        if pending and pending[0] == "end":
            walk(pending.pop(0))
        return result

    P.scan = scan_then_mark

    # finer phases inside the verdicts, and the TU analyses this process runs itself
    def marked(cls, meth, label):
        fn = getattr(cls, meth)

        def wrapped(*a, **k):
            rec.set_phase(label)
            try:
                return fn(*a, **k)
            finally:
                rec.set_phase(f"after {label}")

        setattr(cls, meth, wrapped)

    marked(Inventory, "judge", "inventory.judge")
    marked(Inventory, "build_flag_findings", "inventory.build_flag_findings")
    analyse_tu = CudaProject.analyse_tu
    out["tus_in_scan_process"] = Counter()

    def counted(self, *a, **k):
        out["tus_in_scan_process"][rec.phase.split(" ")[0]] += 1
        return analyse_tu(self, *a, **k)

    CudaProject.analyse_tu = counted


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path")
    ap.add_argument("-o", "--out", help="JSON output (default: stdout)")
    ap.add_argument("--walk", metavar="TEXT", action="append", default=[],
                    help="walk the heap at the first progress message holding TEXT (repeatable, in the "
                         "order the messages come; 'end': when the scan returns, before the report)")
    ap.add_argument("rest", nargs="*", help="more `archaudit scan` arguments (after --)")
    a = ap.parse_args()
    out: dict = {"path": a.path}
    rec = Recorder()
    install(rec, a.walk, out)
    sampler = threading.Thread(target=rec.run, daemon=True)
    sampler.start()
    sys.argv = ["archaudit", "scan", a.path, "-t", "sm_120", "--no-cache", *(a.rest or ["--format", "json", "-o", os.devnull])]
    from archaudit.cli.app import main as cli_main

    t = time.perf_counter()
    try:
        out["rc"] = cli_main(args=sys.argv[1:], standalone_mode=False)
    except SystemExit as e:
        out["rc"] = e.code
    rec.stop.set()
    sampler.join()
    rec.sample()
    self_ru, kids_ru = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    out.update({
        "wall_s": round(time.perf_counter() - t, 1),
        "walk_s": round(rec.paused_s, 1),
        "cpu_s_main": round(self_ru.ru_utime + self_ru.ru_stime, 1),
        "cpu_s_children": round(kids_ru.ru_utime + kids_ru.ru_stime, 1),
        "peak_rss_mb_main": self_ru.ru_maxrss // 1024,
        "peak_rss_mb_largest_child": kids_ru.ru_maxrss // 1024,
        "children": sorted(rec.kids.values(), key=lambda k: k["first_s"]),
        "phases": rec.phases,
        "timeline": rec.timeline,
    })
    text = json.dumps(out, indent=1)
    if a.out:
        Path(a.out).write_text(text)
    else:
        print(text)
    sys.stderr.write(f"main peak {out['peak_rss_mb_main']} MB, largest child {out['peak_rss_mb_largest_child']} MB, "
          f"cpu main {out['cpu_s_main']} s + children {out['cpu_s_children']} s, wall {out['wall_s']} s\n")
    sys.stderr.flush()
    os._exit(0)  # as the CLI: tearing down the heap object by object takes a minute


if __name__ == "__main__":
    main()
