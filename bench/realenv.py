"""The real serving environment of issue 27: everything sglang 0.5.23 installs, scanned as one
site-packages, against sglang + flashinfer scanned alone.

    python bench/realenv.py                  # build (once), measure, write bench/results/realenv-<date>.{md,json}
    python bench/realenv.py --build-only     # print the site-packages path
    python bench/realenv.py --compare OLD.json NEW.json   # the pair's differences between two reports

The pinned list is bench/realenv.toml. Wheels are downloaded with `pip download --no-deps` into
the corpus cache (bench/corpus.py) and unpacked once into site-packages/realenv; nothing in them
is imported or run. Measured, each scan a subprocess with a cache directory of its own:
cold and warm `archaudit scan DIR -t sm_120 --format json` of the environment, and a cold scan
of the pair (corpus fi072) for the ratio the issue asks for (at most 2x) and for the comparison:
for sglang and flashinfer, the same gates (admitted GPUs included) and the same verdict for
every gate x target, else each difference is listed.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import sys
import tempfile
import tomllib
import zipfile
from collections import Counter, defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

import corpus  # noqa: E402
import perf  # noqa: E402

PINS = REPO / "bench" / "realenv.toml"
# kept free on the cache's file system beyond the unpacked environment (the scans' caches, the reports)
DISK_MARGIN = 2 * 1024 ** 3
TARGET = "sm_120"


def load_pins(path: Path = PINS) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


def pip_platform(pins: dict) -> list[str]:
    out = ["--python-version", pins["python_version"], "--only-binary=:all:"]
    for p in pins["platforms"]:
        out += ["--platform", p]
    return out


def unpacked_size(wheel: Path) -> int:
    with zipfile.ZipFile(wheel) as zf:
        return sum(i.file_size for i in zf.infolist())


def fitting_prefix(sizes: list[int], free: int) -> int:
    """How many wheels, taken in the list's order, fit in `free` bytes."""
    total = 0
    for i, s in enumerate(sizes):
        if total + s > free:
            return i
        total += s
    return len(sizes)


def build(pins: dict, log=print) -> tuple[Path, list[str], dict]:
    """Download and unpack the environment (once). Returns (directory, the specs it holds, disk facts)."""
    root = corpus.cache_root()
    wheels_dir = root / "wheels"
    target = root / "site-packages" / pins["name"]
    marker = target / ".archaudit-corpus-complete"
    specs = list(pins["wheels"])
    root.mkdir(parents=True, exist_ok=True)
    disk = {"free_before_gib": round(shutil.disk_usage(root).free / 1024 ** 3, 1)}
    if marker.exists():
        held = marker.read_text().split()
        disk["reused"] = True
        return target, held, disk
    wheels = [corpus.download(s, wheels_dir, pip_platform(pins)) for s in specs]
    sizes = [unpacked_size(w) for w in wheels]
    free = shutil.disk_usage(root).free - DISK_MARGIN
    n = fitting_prefix(sizes, free)
    disk.update(unpacked_gib=round(sum(sizes) / 1024 ** 3, 2), free_gib=round(free / 1024 ** 3, 1))
    if n < len(specs):
        log(f"realenv: {sum(sizes) / 1024 ** 3:.1f} GiB unpacked does not fit in {free / 1024 ** 3:.1f} GiB; "
            f"using the first {n} of {len(specs)} wheels (dropped: {', '.join(specs[n:])})")
        disk["dropped"] = specs[n:]
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    for w in wheels[:n]:
        log(f"unpacking {w.name}")
        with zipfile.ZipFile(w) as zf:
            zf.extractall(tmp)
    (tmp / ".archaudit-corpus-complete").write_text("\n".join(specs[:n]) + "\n")
    if target.exists():  # a concurrent build finished first
        shutil.rmtree(tmp, ignore_errors=True)
        return target, marker.read_text().split(), disk
    tmp.rename(target)
    return target, specs[:n], disk


def tree_census(root: Path) -> dict:
    files = 0
    size = 0
    by_suffix: Counter = Counter()
    for dirpath, _dirs, names in os.walk(root):
        for n in names:
            files += 1
            try:
                size += os.lstat(os.path.join(dirpath, n)).st_size
            except OSError:
                pass
            suf = n.rsplit(".", 1)[-1] if "." in n else ""
            if suf in ("py", "so", "cu", "cuh", "h", "hpp"):
                by_suffix["h/hpp" if suf in ("h", "hpp") else suf] += 1
    return {"files": files, "gib": round(size / 1024 ** 3, 2), "by_suffix": dict(sorted(by_suffix.items()))}


# ---------------------------------------------------------------- reading reports

def gate_key(g: dict) -> tuple:
    return (g["path"], g["line"], g["col"], g["kind"])


def package_of_gates(report: dict) -> dict[tuple, str]:
    return {gate_key(g): g.get("package") or g["path"].split("/", 1)[0] for g in report["gates"]}


def per_package(report: dict) -> dict[str, dict]:
    """package -> {"gates": n, verdict: n, ...}."""
    pkg = package_of_gates(report)
    out: dict[str, Counter] = defaultdict(Counter)
    for g in report["gates"]:
        out[pkg[gate_key(g)]]["gates"] += 1
    for f in report["findings"]:
        out[pkg.get(gate_key(f["gate"]), f["gate"]["path"].split("/", 1)[0])][f["verdict"]] += 1
    return {p: dict(c) for p, c in sorted(out.items())}


def diagnostics_by_kind(report: dict) -> dict[str, int]:
    return dict(sorted(Counter(d["kind"] for d in report["diagnostics"]).items()))


def pair_view(report: dict, packages: list[str]) -> tuple[dict, dict]:
    """The pair's gates ({key: (admits, resolved)}) and findings ({(key, target): (verdict, reason)})."""
    pkg = package_of_gates(report)
    keep = set(packages)
    gates = {gate_key(g): (tuple(g.get("admits") or ()), bool(g.get("resolved")))
             for g in report["gates"] if pkg[gate_key(g)] in keep}
    findings = {(gate_key(f["gate"]), f["target"]): (f["verdict"], f["reason"])
                for f in report["findings"] if gate_key(f["gate"]) in gates}
    return gates, findings


def compare(alone: dict, env: dict, packages: list[str]) -> dict:
    """Differences of the pair's gates and verdicts between the pair alone and the environment.
    Reasons that differ under one verdict are listed apart (the verdict is what the issue asks
    to be equal; a reason naming other code is still worth reading)."""
    ga, fa = pair_view(alone, packages)
    ge, fe = pair_view(env, packages)
    fmt = lambda k: f"{k[0]}:{k[1]}:{k[2]} {k[3]}"  # noqa: E731
    out = {
        "gates_only_alone": [fmt(k) for k in sorted(ga.keys() - ge.keys())],
        "gates_only_env": [fmt(k) for k in sorted(ge.keys() - ga.keys())],
        "gates_admits_differ": [f"{fmt(k)}: alone {list(ga[k][0])}, env {list(ge[k][0])}"
                                for k in sorted(ga.keys() & ge.keys()) if ga[k] != ge[k]],
        "findings_only_alone": [f"{fmt(k)} {t}: {fa[(k, t)][0]}" for k, t in sorted(fa.keys() - fe.keys())],
        "findings_only_env": [f"{fmt(k)} {t}: {fe[(k, t)][0]}" for k, t in sorted(fe.keys() - fa.keys())],
        "verdicts_differ": [],
        "reasons_differ": [],
    }
    for kt in sorted(fa.keys() & fe.keys()):
        (va, ra), (ve, re_) = fa[kt], fe[kt]
        k, t = kt
        if va != ve:
            out["verdicts_differ"].append(f"{fmt(k)} {t}: alone {va}, env {ve}: {re_[:300]}")
        elif ra != re_:
            out["reasons_differ"].append(f"{fmt(k)} {t} ({va}): alone: {ra[:200]} | env: {re_[:200]}")
    out["counts"] = {k: len(v) for k, v in out.items() if isinstance(v, list)}
    out["verdicts_alone"] = dict(Counter(v for v, _r in fa.values()))
    out["verdicts_env"] = dict(Counter(v for v, _r in fe.values()))
    return out


# ---------------------------------------------------------------- measuring

def measure(site: Path, pair: Path, work: Path, pins: dict, log=print) -> dict:
    perf.compile_package()
    res: dict = {}
    env_cache, pair_cache = work / "cache-env", work / "cache-pair"
    env_out, pair_out = work / "env.json", work / "pair.json"
    log("cold scan of the pair ...")
    res["pair_cold"] = perf.run_measured(perf.scan_cmd(pair, pair_out), env=perf.env_for(pair_cache))
    log(f"  {res['pair_cold']}")
    log("cold scan of the environment ...")
    res["env_cold"] = perf.run_measured(perf.scan_cmd(site, env_out), env=perf.env_for(env_cache))
    log(f"  {res['env_cold']}")
    log("warm scan of the environment ...")
    warm_out = work / "env-warm.json"
    res["env_warm"] = perf.run_measured(perf.scan_cmd(site, warm_out), env=perf.env_for(env_cache))
    log(f"  {res['env_warm']}")
    for k in ("pair_cold", "env_cold", "env_warm"):
        if res[k]["rc"] not in (0, 1):
            raise SystemExit(f"{k} failed (rc {res[k]['rc']}): {res[k]['stderr']}")
    env_r, pair_r = json.loads(env_out.read_text()), json.loads(pair_out.read_text())
    res["warm_identical"] = perf.report_of(warm_out) == perf.report_of(env_out)
    res["ratio_cold_wall"] = round(res["env_cold"]["wall_s"] / res["pair_cold"]["wall_s"], 2)
    res["ratio_cold_cpu"] = round(res["env_cold"]["cpu_s"] / res["pair_cold"]["cpu_s"], 2)
    res["env"] = summarize(env_r)
    res["pair"] = summarize(pair_r)
    res["differences"] = compare(pair_r, env_r, pins["pair_packages"])
    res["reports"] = {"env": env_r, "pair": pair_r}
    return res


def summarize(r: dict) -> dict:
    s = r.get("stats", {})
    return {
        "gates": len(r["gates"]),
        "findings": len(r["findings"]),
        "verdicts": dict(Counter(f["verdict"] for f in r["findings"])),
        "per_package": per_package(r),
        "diagnostics": diagnostics_by_kind(r),
        "diagnostics_listed": sorted(f"{d['path']}:{d.get('line') or ''} {d['kind']}: {d['message'][:160]}"
                                     for d in r["diagnostics"] if d["kind"] in ("vanished", "syntax-error")),
        "stats": {k: v for k, v in s.items() if not k.startswith("not_evaluated_")},
    }


def render(r: dict) -> str:
    L = [f"# The real serving environment (issue 27), {r['date']}", "",
         f"`archaudit scan DIR --target {TARGET} --format json`, each scan a subprocess with its own cache directory; "
         f"wall, CPU (user+system, workers included) and peak RSS from wait4. Machine: {r['machine']}; "
         "its cores are shared, the load average is given with each run.", "",
         f"Environment: {len(r['specs'])} wheels of bench/realenv.toml, unpacked: {r['census']['gib']} GiB, "
         f"{r['census']['files']:,} files ({', '.join(f'{v:,} .{k}' for k, v in r['census']['by_suffix'].items())}).",
         f"Disk: {r['disk']}.", ""]
    if r["disk"].get("dropped"):
        L += [f"**Subset**: the disk held only the first {len(r['specs'])} wheels; left out: {', '.join(r['disk']['dropped'])}", ""]
    L += ["Wheels: " + ", ".join(f"`{s}`" for s in r["specs"]), ""]
    m = r["measured"]
    L += ["| run | wall s | CPU s | peak RSS MB | load1 |", "|---|---:|---:|---:|---:|"]
    for k, label in (("pair_cold", "pair alone (fi072), cold"), ("env_cold", "environment, cold"),
                     ("env_warm", "environment, warm")):
        x = m[k]
        L.append(f"| {label} | {x['wall_s']} | {x['cpu_s']} | {x['rss_mb']:,.0f} | {x['load1']} |")
    L += ["", f"Cold environment / cold pair: {m['ratio_cold_wall']}x wall, {m['ratio_cold_cpu']}x CPU "
          f"(issue 27: at most 2x, peak RSS under 2 GB). Warm report identical to cold: {m['warm_identical']}.", ""]
    for side in ("env", "pair"):
        s = m[side]
        L += [f"## {'Environment' if side == 'env' else 'Pair alone'}: {s['gates']} gates, {s['findings']} findings "
              f"({', '.join(f'{v} {k}' for k, v in sorted(s['verdicts'].items()))})", ""]
        verdicts = sorted({v for p in s["per_package"].values() for v in p if v != "gates"})
        L += ["| package | gates | " + " | ".join(verdicts) + " |", "|---|---:|" + "---:|" * len(verdicts)]
        for p, c in s["per_package"].items():
            L.append(f"| {p} | {c.get('gates', 0)} | " + " | ".join(str(c.get(v, 0)) for v in verdicts) + " |")
        L += ["", "Diagnostics: " + ", ".join(f"{v} {k}" for k, v in s["diagnostics"].items()), ""]
        if s["diagnostics_listed"]:
            L += ["vanished / syntax-error:", ""] + [f"- `{x}`" for x in s["diagnostics_listed"]] + [""]
        st = s["stats"]
        scope = st.get("packages_analysed")
        if scope is not None:
            L += [f"Analysed ({len(scope)}): {', '.join(scope)}.",
                  f"Only read (byte scan, no architecture-dependent code found): {', '.join(st.get('packages_read') or []) or 'none'}.", ""]
        L += ["Stats: " + ", ".join(f"{k} {v}" for k, v in st.items() if not isinstance(v, (list, dict))), ""]
    d = m["differences"]
    L += ["## sglang + flashinfer: environment against the pair alone", "",
          "Verdicts of the pair's findings: alone " + json.dumps(d["verdicts_alone"], sort_keys=True)
          + ", in the environment " + json.dumps(d["verdicts_env"], sort_keys=True), ""]
    for k in ("gates_only_alone", "gates_only_env", "gates_admits_differ", "findings_only_alone",
              "findings_only_env", "verdicts_differ", "reasons_differ"):
        L += [f"### {k.replace('_', ' ')}: {len(d[k])}", ""]
        L += [f"- `{x}`" for x in d[k][:200]] + ([f"- ... {len(d[k]) - 200} more"] if len(d[k]) > 200 else []) + [""]
    return "\n".join(L) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--workdir", default=None, help="where the scans' caches and reports go (default: a temp dir)")
    ap.add_argument("--out", default=None, help="output stem (default bench/results/realenv-<date>)")
    ap.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"), help="two JSON reports: the pair's differences")
    args = ap.parse_args()
    pins = load_pins()
    if args.compare:
        old, new = (json.loads(Path(p).read_text()) for p in args.compare)
        print(json.dumps(compare(old, new, pins["pair_packages"]), indent=1))
        return 0
    log = lambda *a: print(*a, file=sys.stderr, flush=True)  # noqa: E731
    log(f"disk: {shutil.disk_usage(corpus.cache_root().parent if not corpus.cache_root().exists() else corpus.cache_root())}")
    site, specs, disk = build(pins, log)
    if args.build_only:
        print(site)
        return 0
    pair = corpus.site_packages(pins["pair_corpus"])
    date = datetime.date.today().isoformat()
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="archaudit-realenv-"))
    work.mkdir(parents=True, exist_ok=True)
    r = {"date": date, "specs": specs, "disk": disk, "census": tree_census(site),
         "machine": f"{os.cpu_count()} cores, Python {sys.version.split()[0]}"}
    r["measured"] = measure(site, pair, work, pins, log)
    reports = r["measured"].pop("reports")
    stem = Path(args.out) if args.out else REPO / "bench" / "results" / f"realenv-{date}"
    stem.parent.mkdir(parents=True, exist_ok=True)
    Path(str(stem) + ".json").write_text(json.dumps(r, indent=1, sort_keys=True) + "\n")
    Path(str(stem) + ".md").write_text(render(r))
    for k, rep in reports.items():  # the full reports, for --compare against a later run
        (work / f"{k}-report.json").write_text(json.dumps(rep))
    d = r["measured"]["differences"]
    print(f"wrote {stem}.md/.json; reports in {work}")
    print("differences:", json.dumps(d["counts"]))
    for k in ("gates_only_alone", "gates_only_env", "gates_admits_differ", "verdicts_differ"):
        for x in d[k]:
            print(f"  {k}: {x}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
