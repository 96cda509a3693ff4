"""Performance benchmark (issue 7): archaudit scan --target sm_120 cold / warm / one file touched,
against ripgrep for the trigger patterns as the floor, plus the scaling from 1 to 3 packages.

    python bench/perf.py                      # everything, medians of 3, writes bench/results/perf.{json,md}
    python bench/perf.py --repeat 5 --skip-scaling --out bench/results/perf-quick
    python bench/perf.py --scaling-only --out bench/results/perf-scaling   # 1 -> 3 packages, 3 runs each

Corpora (bench/corpus.py, downloaded once with pip and unpacked into its cache):
fi072only = flashinfer-python 0.7.2.post1; fi072 = + sglang 0.5.23; fi072vllm = + vllm 0.33.0.
Each scan runs as a subprocess (python -m archaudit); wall time, CPU time (user+system, worker
processes included) and peak RSS come from os.wait4 on that process. The load average is
recorded with every run: the machine's cores are shared. The scans run on a private copy
of the corpus so the touched file can be replaced without changing the cached corpus.
With bench/parse_floor.py, the CPU that reading, prefiltering and parsing alone take (the floor
of any schedule on this design). Nothing scanned is imported or executed.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

import corpus  # noqa: E402

PATTERN = r"__CUDA_ARCH|supported_major_versions|is_sm[0-9]|get_device_capability"
TOUCH_CANDIDATES = ("sglang/srt/layers/flashinfer_comm_fusion.py", "flashinfer/comm/trtllm_ar.py")


def run_measured(cmd: list[str], env: dict | None = None, cwd: str | None = None) -> dict:
    """Run cmd; wall, cpu (self + reaped descendants) and peak RSS of that process tree."""
    load = os.getloadavg()[0]
    t = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _pid, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    err = p.stderr.read().decode("utf-8", "replace") if p.stderr else ""
    p.returncode = os.waitstatus_to_exitcode(status)
    return {
        "wall_s": round(wall, 3),
        "cpu_s": round(ru.ru_utime + ru.ru_stime, 3),
        "rss_mb": round(ru.ru_maxrss / 1024, 1),
        "load1": round(load, 2),
        "rc": p.returncode,
        "stderr": err[-2000:] if p.returncode not in (0, 1) else "",
    }


def private_copy(src: Path, dst: Path) -> None:
    """A private copy of the tree. Not hard links: another benchmark linking the same cached
    corpus changes the inodes' ctime, which the cache rightly reads as a change (a cold run's
    result is then not stored, and the next warm run is a full scan)."""
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, symlinks=True)


def touch(path: Path, text: str) -> None:
    """Append text to a file without writing through its hard link (replace it)."""
    data = path.read_bytes()
    tmp = path.with_name(path.name + ".bench-tmp")
    tmp.write_bytes(data + text.encode())
    os.replace(tmp, path)


def find_rg(cache: Path) -> tuple[list[str] | None, str]:
    rg = shutil.which("rg")
    if rg:
        return [rg], "rg (PATH)"
    target = cache / "rg"
    cand = list(target.glob("bin/rg")) + list(target.glob("**/rg"))
    if not cand:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(target), "ripgrep"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cand = [p for p in list(target.glob("bin/rg")) + list(target.glob("**/rg")) if p.is_file()]
    if cand and os.access(cand[0], os.X_OK):
        return [str(cand[0])], "rg (pip package ripgrep)"
    return None, "grep -rE (ripgrep not available)"


def floor_cmd(rg: list[str] | None, root: Path) -> list[str]:
    if rg:
        return [*rg, "-c", "-uu", "-e", PATTERN, str(root)]
    return ["grep", "-rEc", PATTERN, str(root)]


def scan_cmd(root: Path, out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "archaudit", "scan", str(root), "--target", "sm_120", "--format", "json",
            "-o", str(out), "-q", *extra]


def env_for(cache_dir: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["ARCHAUDIT_CACHE_DIR"] = str(cache_dir)
    return env


def report_of(path: Path) -> dict:
    """What must not depend on the cache or the worker count: gates, findings, diagnostics."""
    d = json.loads(path.read_text())
    return {k: d[k] for k in ("gates", "findings", "diagnostics")}


def prefilter_bytes(root: Path) -> dict:
    """Bytes of Python files, and of those the byte prefilter passes in its first round."""
    from archaudit.python.gates import trigger_pattern

    pat = trigger_pattern()
    total = passed = n = 0
    for p in root.rglob("*.py"):
        try:
            data = p.read_bytes()
        except OSError:
            continue
        total += len(data)
        if pat.search(data):
            passed += len(data)
            n += 1
    return {"python_bytes": total, "prefilter_bytes": passed, "prefilter_files": n}


def med(runs: list[dict], k: str) -> float:
    return round(statistics.median(r[k] for r in runs), 3)


def summary(runs: list[dict]) -> dict:
    return {"runs": runs, **{f"median_{k}": med(runs, k) for k in ("wall_s", "cpu_s", "rss_mb", "load1")}}


def compile_package() -> str:
    """Byte-compile the archaudit that `python -m archaudit` runs here (as scan_cmd does)."""
    where = subprocess.run([sys.executable, "-c", "import archaudit, os; print(os.path.dirname(archaudit.__file__))"],
                           capture_output=True, text=True).stdout.strip()
    ok = bool(where) and subprocess.run([sys.executable, "-m", "compileall", "-q", where]).returncode == 0
    return f"compiled before the runs, as pip install does ({where})" if ok else "not compiled: each run compiles it"


def measure_fi072(args, work: Path, rg: list[str] | None, result: dict) -> None:
    """Cold, warm and one-file-touched scans of flashinfer + sglang, the floor, the identity
    check and the parse floor, into result["fi072"]."""
    src = corpus.site_packages("fi072")
    tree = work / "fi072"
    private_copy(src, tree)
    touched = next((tree / c for c in TOUCH_CANDIDATES if (tree / c).is_file()), None)

    floor = [run_measured(floor_cmd(rg, tree)) for _ in range(args.repeat)]
    cold, warm, touch_runs, jsons = [], [], [], {}
    # cold runs, each with an empty cache directory; the first one's cache then serves the warm
    # runs and, after each touch (a new comment appended every time), the touched runs
    for i in range(args.cold_repeat):
        cache = work / f"cache-{i}"
        shutil.rmtree(cache, ignore_errors=True)
        out = work / f"cold-{i}.json"
        cold.append(run_measured(scan_cmd(tree, out), env_for(cache)))
        jsons.setdefault("cold", out)
        print(f"cold {i}: {cold[-1]['wall_s']} s", file=sys.stderr)
    env = env_for(work / "cache-0")
    time.sleep(2.5)  # so the snapshot's files are older than its racy window
    for i in range(args.repeat):
        out = work / f"warm-{i}.json"
        warm.append(run_measured(scan_cmd(tree, out), env))
        jsons.setdefault("warm", out)
        if touched is not None:
            # a comment line with no word the file lacks (a new word could change which modules
            # name it, which the call graph reads, so the cache rightly re-scans for that)
            touch(touched, "\n" + "#" * (i + 1) + "\n")
            out = work / f"touched-{i}.json"
            touch_runs.append(run_measured(scan_cmd(tree, out), env))
            jsons.setdefault("touched", out)
            time.sleep(2.5)
            # the touched state as the next warm start (its snapshot must leave the racy window)
            run_measured(scan_cmd(tree, work / "settle.json"), env)
        print(f"run {i}: warm {warm[-1]['wall_s']} s, touched {touch_runs[-1]['wall_s'] if touch_runs else '-'} s",
              file=sys.stderr)
    result["fi072"] = {
        "floor": summary(floor),
        "cold": summary(cold),
        "warm": summary(warm),
        "touched": summary(touch_runs) if touch_runs else None,
        "touched_file": str(touched.relative_to(tree)) if touched else None,
        **prefilter_bytes(tree),
    }
    fl = result["fi072"]["floor"]["median_wall_s"] or 1e-9
    result["fi072"]["ratio_to_floor"] = {
        k: round(result["fi072"][k]["median_wall_s"] / fl, 1) for k in ("cold", "warm", "touched") if result["fi072"][k]
    }
    # identical reports (gates, findings with their verdicts, diagnostics): cold (N workers, cache
    # written), warm (cache hit), touched (a comment appended), and 1 worker without cache
    ref = report_of(jsons["cold"])
    check = {"warm": report_of(jsons["warm"]) == ref}
    if "touched" in jsons:
        check["touched"] = report_of(jsons["touched"]) == ref
    if not args.skip_check:
        out = work / "check-w1-nocache.json"
        r = run_measured(scan_cmd(tree, out, "--no-cache", "--workers", "1"), env_for(work / "cache-none"))
        check["workers1_nocache"] = report_of(out) == ref
        check["workers1_nocache_run"] = r
    check["gates"] = len(ref["gates"])
    check["findings"] = len(ref["findings"])
    result["fi072"]["identical"] = check
    if not args.skip_parse_floor:
        # what reading, prefiltering and parsing the modules a cold scan loads cost by themselves
        out = work / "parse-floor.json"
        subprocess.run([sys.executable, str(REPO / "bench" / "parse_floor.py"), str(tree), "--out", str(out)],
                       check=True, stdout=subprocess.DEVNULL)
        result["fi072"]["parse_floor"] = json.loads(out.read_text())


def measure_scaling(args, work: Path, rg: list[str] | None) -> list[dict]:
    """Cold --no-cache scans of one, two and three packages, the repeats taken in turns (run 1 of
    each corpus, then run 2 of each...), so that a slow spell of the shared host does not fall on
    one corpus."""
    names = ("fi072only", "fi072", "fi072vllm")
    runs: dict[str, list] = {n: [] for n in names}
    for i in range(args.scaling_repeat):
        for name in names:
            runs[name].append(run_measured(scan_cmd(corpus.site_packages(name), work / f"scale-{name}.json", "--no-cache"),
                                           env_for(work / "x")))
            print(f"scaling {name} run {i}: {runs[name][-1]['wall_s']} s", file=sys.stderr)
    scaling = []
    for name in names:
        root = corpus.site_packages(name)
        out = work / f"scale-{name}.json"
        stats = json.loads(out.read_text()).get("stats", {}) if out.is_file() else {}
        scaling.append({"corpus": name, "packages": corpus.CORPORA[name], **prefilter_bytes(root),
                        # what the gate rounds evaluated in the end (the first round's prefilter
                        # passes fewer: later rounds add the modules that use a name found)
                        "evaluated_bytes": stats.get("python_bytes_evaluated"),
                        "evaluated_modules": stats.get("python_modules_evaluated"),
                        "floor": summary([run_measured(floor_cmd(rg, root))]), "cold": summary(runs[name])})
    return scaling


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3, help="floor, warm and touched runs")
    ap.add_argument("--cold-repeat", type=int, default=3)
    ap.add_argument("--scaling-repeat", type=int, default=3)
    ap.add_argument("--skip-scaling", action="store_true")
    ap.add_argument("--scaling-only", action="store_true", help="only the scaling runs (use another --out)")
    ap.add_argument("--skip-check", action="store_true", help="skip the --workers 1 --no-cache identity check")
    ap.add_argument("--skip-parse-floor", action="store_true", help="skip bench/parse_floor.py (about 2.5 min)")
    ap.add_argument("--workdir", default=None, help="where the corpus copy and caches go (default: a temp dir)")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "perf"))
    args = ap.parse_args()

    work = Path(args.workdir or tempfile.mkdtemp(prefix="archaudit-perf-"))
    work.mkdir(parents=True, exist_ok=True)
    result: dict = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                "started": time.strftime("%Y-%m-%d %H:%M:%S")}}
    # the state `pip install` leaves: archaudit's modules byte-compiled (a checkout run with
    # PYTHONDONTWRITEBYTECODE, as here, would otherwise compile them on every run: about 0.3 s
    # of a warm run)
    result["machine"]["bytecode"] = compile_package()
    rg, rg_kind = find_rg(corpus.cache_root())
    result["floor_tool"] = rg_kind
    if not args.scaling_only:
        measure_fi072(args, work, rg, result)
    if not args.skip_scaling:
        result["scaling"] = measure_scaling(args, work, rg)

    outp = Path(args.out)
    outp.parent.mkdir(parents=True, exist_ok=True)
    outp.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    md = render(result)
    outp.with_suffix(".md").write_text(md)
    print(md)
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


def render(r: dict) -> str:
    out = ["# archaudit performance: flashinfer-python 0.7.2.post1 + sglang 0.5.23, --target sm_120", "",
           f"started {r['machine']['started']}, {r['machine']['cpus']} CPUs, Python {r['machine']['python']}; "
           f"archaudit's bytecode {r['machine'].get('bytecode', '?')}", ""]
    if "fi072" in r:
        out += render_fi072(r)
    if r.get("scaling"):
        out += render_scaling(r["scaling"])
    return "\n".join(out) + "\n"


def render_fi072(r: dict) -> list[str]:
    f = r["fi072"]
    rows = [
        "| case | wall s (median) | CPU s | peak RSS MB | load avg | x floor |",
        "|---|---|---|---|---|---|",
    ]
    for k, label in (("floor", f"floor: {r['floor_tool']}"), ("cold", "cold (empty cache)"), ("warm", "warm"),
                     ("touched", f"one file touched ({f.get('touched_file')})")):
        s = f.get(k)
        if not s:
            continue
        ratio = f["ratio_to_floor"].get(k, 1.0) if k != "floor" else 1.0
        rows.append(f"| {label} | {s['median_wall_s']} | {s['median_cpu_s']} | {s['median_rss_mb']} | "
                    f"{s['median_load1']} | {ratio} |")
    out = [*rows, "",
           f"Python bytes {f['python_bytes']:,}; passing the first-round byte prefilter {f['prefilter_bytes']:,} "
           f"({f['prefilter_files']} files).", "",
           "Identical reports (gates, findings, diagnostics) to the cold run: "
           + ", ".join(f"{k}={v}" for k, v in f["identical"].items() if isinstance(v, bool))
           + f" ({f['identical']['gates']} gates, {f['identical'].get('findings', '?')} findings)", ""]
    pf = f.get("parse_floor")
    if pf:
        full, shallow, pre = pf["full"], pf["shallow"], pf["prefilter"]
        out += ["## Parse floor (bench/parse_floor.py, one process)", "",
                "| work | modules or files | MB | CPU s |", "|---|---|---|---|",
                f"| read every Python file + byte prefilter | {pre['files']} | {pre['bytes'] / 1e6:.1f} | {pre['cpu_s']} |",
                f"| tree-sitter: modules a cold scan loads in full | {full['modules']} | {full['bytes'] / 1e6:.1f} | "
                f"{full['tree_sitter_cpu_s']} |",
                f"| tree-sitter: modules it loads only shallow | {shallow['modules']} | {shallow['bytes'] / 1e6:.1f} | "
                f"{shallow['tree_sitter_cpu_s']} |",
                f"| parse_python (tree-sitter + top-level IR, bodies lazy): in full | {full['modules']} | "
                f"{full['bytes'] / 1e6:.1f} | {full['parse_python_cpu_s']} |",
                f"| parse_python: shallow | {shallow['modules']} | {shallow['bytes'] / 1e6:.1f} | "
                f"{shallow['parse_python_cpu_s']} |", "",
                f"Reading, prefilter and tree-sitter alone, shared perfectly over {pf['cores']} cores: "
                f"{pf['floor_wall_s']} s wall.", ""]
    return out


def render_scaling(scaling: list[dict]) -> list[str]:
    out = ["## Scaling (cold, --no-cache)", "",
           "| corpus | Python MB | prefilter MB | evaluated MB (modules) | cold wall s (median; runs) | s per prefilter MB "
           "| s per evaluated MB | CPU s | RSS MB | floor s | load |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for s in scaling:
        wall, ev = s["cold"]["median_wall_s"], s.get("evaluated_bytes")
        evaluated = f"{ev / 1e6:.1f} ({s['evaluated_modules']})" if ev else "-"
        per_ev = f"{wall / (ev / 1e6):.2f}" if ev else "-"
        runs = ", ".join(str(x["wall_s"]) for x in s["cold"]["runs"])
        out.append(f"| {' + '.join(s['packages'])} | {s['python_bytes'] / 1e6:.1f} | {s['prefilter_bytes'] / 1e6:.1f} | "
                   f"{evaluated} | {wall} ({runs}) | {wall / (s['prefilter_bytes'] / 1e6):.2f} | {per_ev} | "
                   f"{s['cold']['median_cpu_s']} | {s['cold']['median_rss_mb']} | "
                   f"{s['floor']['median_wall_s']} | {s['cold']['median_load1']} |")
    out.append("")
    return out


if __name__ == "__main__":
    raise SystemExit(main())
