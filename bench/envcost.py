"""Where a cold scan's time and memory go: per phase and per package (issue 27, the cost part).

    python bench/envcost.py SITE [-t sm_120] [--out STEM]

Runs one cold scan (no cache) in this process with the pipeline's progress callback, and records
for each phase (the progress message without its numbers) the wall and CPU seconds of this
process, its RSS and peak RSS (VmHWM) when the phase ends; and for each Python module parsed,
the phase that first parsed it and the code that asked for it (the first frames outside the
index), by package, with the module's bytes. Nothing scanned is imported or run. Writes
STEM.json (and prints a summary); bench/results/ holds the findings written from it by hand.
"""
from __future__ import annotations

import argparse
import gc
import json
import re
import resource
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from archaudit import pipeline  # noqa: E402
from archaudit.python import index as pyindex  # noqa: E402
from archaudit.targets import registry  # noqa: E402

_NUM = re.compile(r"\d[\d,]*")


def proc_mem() -> tuple[int, int]:
    """(VmRSS, VmHWM) of this process in MB."""
    vals = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                vals[line.split(":")[0]] = int(line.split()[1]) // 1024
    return vals.get("VmRSS", 0), vals.get("VmHWM", 0)


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


class Recorder:
    def __init__(self):
        self.t0 = time.perf_counter()
        self.c0 = cpu_s()
        self.phase = "start"
        self.phases: list[dict] = []
        self.loads: dict[str, dict] = {}

    def key(self, msg: str) -> str:
        return _NUM.sub("N", msg.split("(")[0].split(":")[0]).strip()

    def close_phase(self) -> None:
        rss, hwm = proc_mem()
        self.phases.append({"phase": self.phase, "end_wall_s": round(time.perf_counter() - self.t0, 2),
                            "end_cpu_s": round(cpu_s() - self.c0, 2), "rss_mb": rss, "hwm_mb": hwm})

    census = False

    def progress(self, msg, done=None, total=None) -> None:
        k = self.key(str(msg))
        if k != self.phase:
            self.close_phase()
            self.phase = k
            if self.census and k.startswith("releasing"):
                self.census_result = census()


    def who(self) -> str:
        """The first two frames outside python/index.py and pipeline.py's pool: who asked."""
        f = sys._getframe(2)
        out = []
        while f is not None and len(out) < 2:
            name = f.f_code.co_filename
            if not name.endswith(("python/index.py", "bench/envcost.py")):
                out.append(f"{Path(name).parent.name}/{Path(name).stem}.{f.f_code.co_name}")
            f = f.f_back
        return " < ".join(out)


def census() -> dict:
    """Objects by type (count, shallow MB) after the gate scan, ModuleInfo objects alive, and
    what one gc.collect() frees (cycles) and costs."""
    from archaudit.python.index import ModuleInfo
    objs = gc.get_objects()
    by: dict = defaultdict(lambda: [0, 0])
    for o in objs:
        e = by[type(o).__name__]
        e[0] += 1
        e[1] += sys.getsizeof(o)
    mods = sum(1 for o in objs if isinstance(o, ModuleInfo))
    del objs
    t = time.perf_counter()
    n = gc.collect()
    after = sum(1 for o in gc.get_objects() if isinstance(o, ModuleInfo))
    top = sorted(by.items(), key=lambda kv: -kv[1][1])[:15]
    out = {"module_infos": mods, "gc_freed_objects": n, "gc_seconds": round(time.perf_counter() - t, 2),
           "module_infos_after_gc": after, "top_types": {k: [v[0], round(v[1] / 1e6, 1)] for k, v in top}}
    print("census:", json.dumps(out), flush=True)
    return out


def instrument(rec: Recorder) -> None:
    orig = pyindex.Index._load

    def _load(self, name, path, shallow):
        info = orig(self, name, path, shallow)
        if info is not None and name not in rec.loads:
            rec.loads[name] = {"path": path, "phase": rec.phase, "who": rec.who(), "shallow": shallow,
                               "bytes": len(info.parsed.src)}
        return info

    pyindex.Index._load = _load


def collect_before_judge(rec: Recorder) -> None:
    orig = pipeline.judge_scan

    def judge_scan(*a, **k):
        t = time.perf_counter()
        before = proc_mem()[0]
        n = gc.collect()
        rec.collected = {"objects": n, "seconds": round(time.perf_counter() - t, 2), "rss_before": before,
                         "rss_after": proc_mem()[0]}
        print("gc before the verdicts:", rec.collected, flush=True)
        return orig(*a, **k)

    pipeline.judge_scan = judge_scan


def package_of(path: str) -> str:
    return path.split("/", 1)[0].removesuffix(".py")


def summarize(rec: Recorder) -> dict:
    per_pkg: dict[str, Counter] = defaultdict(Counter)
    per_pkg_bytes: Counter = Counter()
    why: dict[str, Counter] = defaultdict(Counter)
    for m in rec.loads.values():
        p = package_of(m["path"])
        per_pkg[p][m["phase"]] += 1
        per_pkg_bytes[p] += m["bytes"]
        why[p][m["who"]] += 1
    return {
        "phases": rec.phases,
        "parsed_per_package": {p: {"modules": sum(c.values()), "bytes": per_pkg_bytes[p], "by_phase": dict(c),
                                   "asked_by": dict(why[p].most_common(6))}
                               for p, c in sorted(per_pkg.items(), key=lambda kv: -sum(kv[1].values()))},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("path")
    ap.add_argument("-t", "--target", default="sm_120")
    ap.add_argument("--out", default="/tmp/envcost")
    ap.add_argument("--census", action="store_true", help="objects by type after the gate scan (see census)")
    ap.add_argument("--collect", action="store_true",
                    help="experiment: one gc.collect() before the verdicts, timed, with what it freed")
    args = ap.parse_args()
    reg = registry()
    rec = Recorder()
    instrument(rec)
    if args.collect:
        collect_before_judge(rec)
    rec.census = args.census
    result = pipeline.scan(args.path, [reg.parse(args.target)], reg, progress=rec.progress, cache=None)
    rec.progress("done")
    s = summarize(rec)
    s["stats"] = {k: v for k, v in result.stats.items() if not k.startswith("not_evaluated_")}
    s["gates"], s["findings"] = len(result.gates), len(result.findings)
    Path(args.out + ".json").write_text(json.dumps(s, indent=1) + "\n")
    for ph in s["phases"]:
        print(f"{ph['phase'][:60]:60s} wall {ph['end_wall_s']:8.1f} cpu {ph['end_cpu_s']:8.1f} "
              f"rss {ph['rss_mb']:6d} hwm {ph['hwm_mb']:6d}")
    for p, v in s["parsed_per_package"].items():
        print(f"{p:30s} {v['modules']:5d} mods {v['bytes'] / 1e6:7.1f} MB {v['by_phase']}")
        for w, n in v["asked_by"].items():
            print(f"      {n:5d} {w}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
