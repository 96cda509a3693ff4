"""PyCG's micro-benchmark (issue 23, item 2): archaudit's call graph on plain Python.

    python bench/pycg.py [--snippets DIR] [--out-dir bench/results] [--show-misses]

The benchmark ships in the `pycg==0.0.8` sdist: `micro-benchmark/snippets/<category>/<case>/`
holds `main.py` (and the modules it imports) and the expected `callgraph.json`. The sdist is
fetched with `pip download --no-deps --no-binary :all:` into the corpus cache
(~/.cache/archaudit-corpus/wheels) when it is not there, and unpacked under
~/.cache/archaudit-corpus/pycg-0.0.8.

Each snippet directory is a scan root of its own (module names as PyCG gives them: `main`,
`to_import`, `pkg.mod`), and archaudit's graph is built in this process as
`archaudit callgraph DIR --format pycg` builds it. Nothing in a snippet is imported or executed.

Scoring follows PyCG's evaluation: the call graph is an adjacency list and an edge is a pair
(caller, callee) with callee in the caller's list; node names are PyCG's (`main.func`,
`main.Cls.__init__` for a constructor call, `<builtin>.len`, `ext.func` for a module outside
the snippet). Nodes without edges do not count. Per snippet, correct = |ours & expected|;
precision = sum(correct) / sum(|ours|), recall = sum(correct) / sum(|expected|), summed per
category and over all snippets. A snippet is "exact" when both edge sets are equal (PyCG's own
test: the same adjacency lists, empty ones aside).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SPEC = "pycg==0.0.8"
SDIST = "pycg-0.0.8.tar.gz"


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "archaudit-corpus"


def snippets_dir() -> Path:
    """The unpacked micro-benchmark, fetched and unpacked on first use."""
    root = cache_root()
    wheels = root / "wheels"
    sdist = wheels / SDIST
    if not sdist.is_file():
        wheels.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q",
                        "-d", str(wheels), SPEC], check=True)
        if not sdist.is_file():
            raise RuntimeError(f"pip download of {SPEC} produced no {SDIST} in {wheels}")
    target = root / "pycg-0.0.8"
    snippets = target / "micro-benchmark" / "snippets"
    marker = target / ".unpacked"
    if not marker.is_file():
        tmp = root / "pycg-0.0.8.tmp"
        if tmp.exists():
            import shutil
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        with tarfile.open(sdist) as tf:
            # only the benchmark's files, and none that would land outside tmp
            members = [m for m in tf.getmembers() if "/micro-benchmark/" in m.name and (m.isfile() or m.isdir())
                       and not m.name.startswith("/") and ".." not in m.name.split("/")]
            tf.extractall(tmp, members=members)
        inner = tmp / "pycg-0.0.8"
        if target.exists():
            import shutil
            shutil.rmtree(target)
        inner.rename(target)
        tmp.rmdir()
        marker.write_text(SPEC + "\n")
    return snippets


def edges(cg: dict) -> set[tuple[str, str]]:
    return {(src, dst) for src, dsts in cg.items() for dst in dsts}


def our_graph(case: Path) -> dict:
    from archaudit.callgraph import Analysis

    a = Analysis.open(str(case))
    a.graph.build_all(arg_flow=True)
    return a.graph.to_pycg()


def run(snippets: Path) -> dict:
    cases = []
    for cat in sorted(p for p in snippets.iterdir() if p.is_dir()):
        for case in sorted(p for p in cat.iterdir() if p.is_dir() and (p / "callgraph.json").is_file()):
            expected = edges(json.loads((case / "callgraph.json").read_text()))
            t = time.process_time()
            ours = edges(our_graph(case))
            cpu = time.process_time() - t
            cases.append({"category": cat.name, "case": case.name, "expected": len(expected), "ours": len(ours),
                          "correct": len(ours & expected), "exact": ours == expected, "cpu_s": round(cpu, 3),
                          "missed": sorted(map(list, expected - ours)), "extra": sorted(map(list, ours - expected))})
    cats: dict[str, dict] = {}
    for c in cases:
        s = cats.setdefault(c["category"], {"cases": 0, "exact": 0, "expected": 0, "ours": 0, "correct": 0})
        s["cases"] += 1
        s["exact"] += c["exact"]
        for k in ("expected", "ours", "correct"):
            s[k] += c[k]
    total = {"cases": 0, "exact": 0, "expected": 0, "ours": 0, "correct": 0}
    for s in cats.values():
        for k in total:
            total[k] += s[k]
    for s in list(cats.values()) + [total]:
        s["precision"] = s["correct"] / s["ours"] if s["ours"] else 1.0
        s["recall"] = s["correct"] / s["expected"] if s["expected"] else 1.0
    return {"categories": cats, "total": total, "cases": cases}


def table(res: dict) -> str:
    rows = ["| category | snippets | exact | expected edges | our edges | correct | precision | recall |",
            "|---|---|---|---|---|---|---|---|"]
    for name, s in list(res["categories"].items()) + [("**all**", res["total"])]:
        rows.append(f"| {name} | {s['cases']} | {s['exact']} | {s['expected']} | {s['ours']} | {s['correct']} | "
                    f"{100 * s['precision']:.1f} % | {100 * s['recall']:.1f} % |")
    return "\n".join(rows)


def misses(res: dict) -> str:
    out = []
    for c in res["cases"]:
        if c["exact"]:
            continue
        out.append(f"- {c['category']}/{c['case']}:"
                   + "".join(f"\n  - missed {a} -> {b}" for a, b in c["missed"])
                   + "".join(f"\n  - extra {a} -> {b}" for a, b in c["extra"]))
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--snippets", help="micro-benchmark/snippets directory (default: the cached sdist's)")
    ap.add_argument("--out-dir", default=str(Path(__file__).resolve().parent / "results"),
                    help="where pycg-<date>.md/.json are written ('' writes nothing)")
    ap.add_argument("--show-misses", action="store_true", help="print every missed and extra edge")
    args = ap.parse_args()

    from archaudit.pipeline import run_with_big_stack

    snippets = Path(args.snippets) if args.snippets else snippets_dir()
    t = time.perf_counter()
    res = run_with_big_stack(lambda: run(snippets))
    wall = time.perf_counter() - t
    tot = res["total"]
    print(table(res))
    print(f"\noverall: precision {100 * tot['precision']:.1f} %, recall {100 * tot['recall']:.1f} %, "
          f"{tot['exact']}/{tot['cases']} snippets exact, {wall:.1f} s")
    if args.show_misses:
        print("\n" + misses(res))
    if args.out_dir:
        day = datetime.date.today().isoformat()
        out = Path(args.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        res["benchmark"] = f"{SPEC} sdist, micro-benchmark/snippets"
        res["date"] = day
        (out / f"pycg-{day}.json").write_text(json.dumps(res, indent=1) + "\n")
        md = (f"# PyCG micro-benchmark ({SPEC} sdist), {day}\n\n"
              f"`python bench/pycg.py`: each snippet directory scanned as its own root, edges scored as "
              f"PyCG's evaluation does (see the script's docstring).\n\n"
              f"{table(res)}\n\nOverall: precision {100 * tot['precision']:.1f} %, recall {100 * tot['recall']:.1f} %, "
              f"{tot['exact']}/{tot['cases']} snippets exact.\n\n## Snippets not exact\n\n{misses(res) or 'none'}\n")
        (out / f"pycg-{day}.md").write_text(md)
        print(f"wrote {out}/pycg-{day}.md and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
