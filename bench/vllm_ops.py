"""vllm's findings on vllm==0.33.0 + flashinfer-python==0.7.2.post1 (corpus vllm033), counted.

    python bench/vllm_ops.py SCAN.json [--out bench/results/NAME]     # count a scan made before
    python bench/vllm_ops.py --scan [--out ...]                         # scan the corpus first (cold)

A scan is `archaudit scan SP -t sm_120 --format json --no-cache`. Counted for the findings whose
gate is in vllm's own files: findings per verdict, the unresolved share, the unresolved ones per
reason (the reason's first clause, with paths and names folded into a category), and the
findings that reach a `torch.ops.<ns>` op of a prebuilt extension, per verdict and namespace.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

import corpus  # noqa: E402

PACKAGE = "vllm/"
TARGET = "sm_120"

# reason -> category, first match wins (the reason's wording is archaudit's own)
CATEGORIES = [
    ("internal error", re.compile(r"archaudit's .* failed")),
    ("torch.ops op: its extension's units mixed, or no launch found", re.compile(
        r"torch\.ops\.\w+\.\w+: registered by [^;]*; (?:no kernel launch|no function named|launches [^;]*others not)")),
    ("outside the scan: torch.ops (no extension in the scan registers it)", re.compile(r"not analysed: torch\.ops")),
    ("outside the scan: cutlass (CuTe DSL)", re.compile(r"not analysed: cutlass")),
    ("outside the scan: other package", re.compile(r"outside the scan whose GPU support")),
    ("callers not searched (name in too many modules)", re.compile(r"callers not searched")),
    ("setting read in unrelated classes", re.compile(r"unrelated classes")),
    ("writes state read elsewhere", re.compile(r"not shown free of GPU code: \S+: the code the gate changes writes")),
    ("a call that could not be resolved", re.compile(r"not shown free of GPU code: \S+: a call archaudit could not")),
    ("not shown free of GPU code (other)", re.compile(r"not shown free of GPU code")),
    ("no JIT module reached (other)", re.compile(r"no JIT module is reached")),
    ("module sources not followed", re.compile(r"sources-none|source .*: |generated at build time")),
    ("value selection not followed", re.compile(r"selects a value|refusal sits inside")),
    ("architecture alone does not decide the test", re.compile(r"not decided by the architecture alone")),
]


def category(reason: str) -> str:
    for name, rx in CATEGORIES:
        if rx.search(reason):
            return name
    return "other"


_OP = re.compile(r"torch\.ops\.(\w+)\.\w+")


def count(scan: dict) -> dict:
    fs = [f for f in scan["findings"] if f["gate"]["path"].startswith(PACKAGE) and f["target"] == TARGET]
    verdicts = Counter(f["verdict"] for f in fs)
    unresolved = [f for f in fs if f["verdict"] == "unresolved"]
    reasons = Counter(category(f["reason"]) for f in unresolved)
    ops = [f for f in fs if any(m["name"].startswith("torch.ops.") for m in f.get("modules", []))
           or "torch.ops." in f["reason"]]
    ops_ns = Counter(ns for f in ops for ns in sorted(set(_OP.findall(f["reason"]))))
    return {"findings": len(fs), "verdicts": dict(verdicts.most_common()),
            "unresolved_share": round(len(unresolved) / len(fs), 4) if fs else 0.0,
            "unresolved_reasons": dict(reasons.most_common()),
            "torch_ops_findings": {"count": len(ops), "verdicts": dict(Counter(f["verdict"] for f in ops).most_common()),
                                   "namespaces": dict(ops_ns.most_common())},
            "torch_ops_list": [{"gate": f"{f['gate']['path']}:{f['gate']['line']}", "verdict": f["verdict"],
                                "reason": f["reason"][:400]} for f in ops]}


def run_scan(sp: Path, out: Path) -> float:
    t0 = time.time()
    subprocess.run([sys.executable, "-m", "archaudit", "scan", str(sp), "-t", TARGET, "--format", "json",
                    "--no-cache", "-o", str(out)], cwd=REPO, check=False)
    return time.time() - t0


def markdown(res: dict, title: str) -> str:
    lines = [f"# {title}", "", f"vllm's findings (gate in vllm/), target {TARGET}: {res['findings']}", "",
             "| verdict | findings |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in res["verdicts"].items()]
    lines += ["", f"unresolved share: {res['unresolved_share'] * 100:.1f} %", "", "| unresolved reason | findings |",
              "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in res["unresolved_reasons"].items()]
    t = res["torch_ops_findings"]
    lines += ["", f"findings whose path reaches torch.ops: {t['count']} ({t['verdicts']}); namespaces {t['namespaces']}", ""]
    lines += [f"- {x['gate']}: {x['verdict']}: {x['reason']}" for x in res["torch_ops_list"]]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("scan", nargs="?", help="a scan's JSON report")
    ap.add_argument("--scan", dest="do_scan", action="store_true", help="scan the vllm033 corpus first")
    ap.add_argument("--out", help="write OUT.json and OUT.md")
    ap.add_argument("--title", default="vllm 0.33.0 + flashinfer 0.7.2.post1, sm_120")
    a = ap.parse_args()
    path = Path(a.scan) if a.scan else Path("/tmp/vllm_ops_scan.json")
    extra = {}
    if a.do_scan:
        extra["scan_wall_s"] = round(run_scan(corpus.site_packages("vllm033"), path), 1)
    res = {**count(json.loads(path.read_text())), **extra}
    text = markdown(res, a.title)
    if a.out:
        Path(a.out + ".json").write_text(json.dumps(res, indent=1) + "\n")
        Path(a.out + ".md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
