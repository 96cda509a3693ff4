"""Every command on the scan's cache (issue 24): on the pinned pair (flashinfer 0.7.2.post1 +
sglang 0.5.23), one cold `scan --target sm_120`, then warm: scan, patch (the first after the
scan, which makes the combined patch and stores it, then again), baseline, diff of the tree with
itself, explain --target; and for reference the commands that analyse lazily from one site
(explain without a target, graph). Writes bench/results/commands.{md,json}.

    python bench/commands.py                  # medians of 3 warm runs
    python bench/commands.py --check          # also each command with --no-cache: same bytes?

The code measured is a snapshot of archaudit/ and rules/ copied to a temporary directory (the
cache's version tag hashes the code: an edit in the checkout during the run would make every
later run cold). Each command runs as a subprocess (python -P -m archaudit, cache in a new
temporary ARCHAUDIT_CACHE_DIR); wall time, CPU and peak RSS from os.wait4; the load average is
recorded with each run (the machine's cores are shared). Nothing scanned is imported or executed.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

import corpus  # noqa: E402

SITE = "flashinfer/jit/comm.py:46"  # a software-only arch list (gen_trtllm_mnnvl_comm_module)


def run(cmd: list[str], env: dict) -> dict:
    """Wall time, and CPU time (user + system of the process and of its reaped workers: the
    difference of RUSAGE_CHILDREN, the commands run one at a time)."""
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = p.communicate()
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "load1": round(load, 2), "rc": p.returncode,
            "stdout": out, "stderr": err}


def snapshot(dst: Path) -> str:
    for d in ("archaudit", "rules"):
        shutil.copytree(REPO / d, dst / d, ignore=shutil.ignore_patterns("__pycache__"))
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "archaudit", "rules"], cwd=REPO, capture_output=True,
                           text=True).stdout.strip()
    return head + ("+uncommitted" if dirty else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--check", action="store_true", help="compare each warm output with --no-cache (a cold scan each)")
    ap.add_argument("--corpus", default="fi072")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "commands"))
    args = ap.parse_args()
    sp = str(corpus.site_packages(args.corpus))
    work = Path(tempfile.mkdtemp(prefix="archaudit-bench-commands-"))
    try:
        code = snapshot(work / "code")
        env = dict(os.environ, PYTHONPATH=str(work / "code"), ARCHAUDIT_CACHE_DIR=str(work / "cache"))
        env.pop("ARCHAUDIT_DEBUG", None)
        py = [sys.executable, "-P", "-m", "archaudit"]
        out = work / "out"
        out.mkdir()
        t = ["-t", "sm_120"]
        commands = {
            "scan": ["scan", sp, *t, "--format", "json", "-q", "-o", str(out / "scan.json")],
            "patch": ["patch", sp, *t, "-q", "-o", str(out / "patch.diff")],
            "baseline": ["baseline", sp, *t, "-q", "-o", str(out / "baseline.json")],
            "diff (tree with itself)": ["diff", sp, sp, *t, "-q", "-o", str(out / "diff.txt")],
            "explain --target": ["explain", sp, SITE, *t, "-o", str(out / "explain.txt")],
            "explain (no target, lazy)": ["explain", sp, SITE, "-o", str(out / "explain-chain.txt")],
            "graph (lazy)": ["graph", sp, "--from", SITE, "-o", str(out / "graph.dot")],
        }
        outputs = {"scan": "scan.json", "patch": "patch.diff", "baseline": "baseline.json",
                   "diff (tree with itself)": "diff.txt", "explain --target": "explain.txt"}
        rows: list[dict] = []

        def measure(name: str, argv: list[str], phase: str) -> dict:
            r = run(py + argv, env)
            if r["rc"] not in (0, 1):
                raise SystemExit(f"{name} failed ({r['rc']}): {r['stderr'][-2000:].decode('utf-8', 'replace')}")
            row = {"command": name, "phase": phase, "wall_s": r["wall_s"], "cpu_s": r["cpu_s"], "load1": r["load1"],
                   "rc": r["rc"]}
            rows.append(row)
            print(f"{name:28} {phase:18} {r['wall_s']:8.2f} s wall {r['cpu_s']:8.2f} s cpu  load {r['load1']}", flush=True)
            return row

        measure("scan", commands["scan"], "cold")
        measure("patch", commands["patch"], "first after scan")
        for _ in range(args.repeat):
            for name, argv in commands.items():
                measure(name, argv, "warm")
        checks = {}
        if args.check:
            ref = out / "ref"
            ref.mkdir()
            for name, fname in outputs.items():
                shutil.copy(out / fname, ref / fname)
                argv = [a if a != str(out / fname) else str(out / ("nocache-" + fname)) for a in commands[name]]
                measure(name, argv + ["--no-cache"], "--no-cache")
                same = (out / ("nocache-" + fname)).read_bytes() == (ref / fname).read_bytes()
                checks[name] = same
                print(f"  {name}: {'identical' if same else 'DIFFERENT'} with --no-cache", flush=True)
        sizes = {name: len((out / fname).read_bytes().splitlines()) for name, fname in outputs.items()}
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def med(name, phase, what="wall_s"):
        xs = [r[what] for r in rows if r["command"] == name and r["phase"] == phase]
        return statistics.median(xs) if xs else None

    warm_scan, warm_scan_cpu = med("scan", "warm"), med("scan", "warm", "cpu_s")
    summary = []
    for name in commands:
        for phase in ("cold", "first after scan", "warm", "--no-cache"):
            m, c = med(name, phase), med(name, phase, "cpu_s")
            if m is not None:
                summary.append({"command": name, "phase": phase, "median_wall_s": m, "median_cpu_s": c,
                                "runs": sum(1 for r in rows if r["command"] == name and r["phase"] == phase),
                                "x_warm_scan": round(m / warm_scan, 2) if warm_scan else None,
                                "x_warm_scan_cpu": round(c / warm_scan_cpu, 2) if warm_scan_cpu else None})
    data = {"corpus": args.corpus, "code": code, "site": SITE, "repeat": args.repeat, "summary": summary,
            "runs": rows, "identical_with_no_cache": checks, "output_lines": sizes,
            "cpus": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M")}
    Path(args.out + ".json").write_text(json.dumps(data, indent=1) + "\n")
    md = [f"# Every command on the scan's cache ({args.corpus}, --target sm_120)", "",
          f"Code {code}, {data['date']}, {os.cpu_count()} shared cores; `python bench/commands.py"
          + (" --check" if args.check else "") + "`. Medians of "
          f"{args.repeat} warm runs; x = times a warm scan (wall, and CPU of the process and its workers). Loads are the 1-minute load average at each run's start.", "",
          "| command | phase | runs | median wall s | x warm scan | median CPU s | x warm scan (CPU) |",
          "|---|---|---:|---:|---:|---:|---:|"]
    for s in summary:
        md.append(f"| {s['command']} | {s['phase']} | {s['runs']} | {s['median_wall_s']:.2f} | {s['x_warm_scan']} "
                  f"| {s['median_cpu_s']:.2f} | {s['x_warm_scan_cpu']} |")
    loads = [r["load1"] for r in rows]
    md += ["", f"Load average during the runs: {min(loads)} to {max(loads)}.", ""]
    if checks:
        md.append("Outputs with and without the cache (`--no-cache`, byte for byte): "
                  + ", ".join(f"{k} {'identical' if v else 'DIFFERENT'}" for k, v in checks.items()) + ".")
        md.append("")
    md.append("Output lines: " + ", ".join(f"{k} {v}" for k, v in sizes.items()) + ".")
    Path(args.out + ".md").write_text("\n".join(md) + "\n")
    print(f"wrote {args.out}.md and .json")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
