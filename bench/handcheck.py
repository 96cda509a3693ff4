"""Pick findings for a hand-check: unresolved in an earlier scan, with a verdict in a later one.

    python bench/handcheck.py BEFORE.json NOW.json [--n 30] [--seed 20261205] [--target sm_120]

A finding is keyed by (gate path, gate line, target). The candidates are the findings of NOW
whose verdict is not unresolved and whose key was unresolved in BEFORE. The pick is random with a
fixed seed and stratified by NOW's verdict: every verdict kind present gets at least
min(FLOOR, its count) findings, the rest of the n are shared out in proportion to the counts
left (largest remainders first). Prints one line per pick (verdict, path:line, gate kind, the
reason's first 120 characters), sorted by verdict then path, and the counts behind the pick.
A measurement aid, not a test: exit 0 always.
"""
from __future__ import annotations

import argparse
import json
import random
from collections import defaultdict
from pathlib import Path

FLOOR = 3


def keyed(scan: dict, target: str) -> dict[tuple[str, int, str], dict]:
    """The scan's findings for target by (path, line, target); the first finding of a line wins."""
    out: dict[tuple[str, int, str], dict] = {}
    for f in scan["findings"]:
        if f["target"] == target:
            out.setdefault((f["gate"]["path"], f["gate"]["line"], f["target"]), f)
    return out


def candidates(before: dict, now: dict, target: str) -> dict[str, list[dict]]:
    """NOW's findings with a verdict that BEFORE left unresolved, grouped by verdict."""
    was = {k for k, f in keyed(before, target).items() if f["verdict"] == "unresolved"}
    by: dict[str, list[dict]] = defaultdict(list)
    for k, f in sorted(keyed(now, target).items()):
        if k in was and f["verdict"] != "unresolved":
            by[f["verdict"]].append(f)
    return dict(sorted(by.items()))


def quotas(counts: dict[str, int], n: int) -> dict[str, int]:
    """FLOOR per kind (or all it has), the rest in proportion to what is left, largest remainders first."""
    q = {k: min(FLOOR, c) for k, c in counts.items()}
    left = {k: c - q[k] for k, c in counts.items()}
    room, total = n - sum(q.values()), sum(left.values())
    if room <= 0 or total == 0:
        return q
    share = {k: room * c / total for k, c in left.items()}
    for k in share:
        q[k] += min(left[k], int(share[k]))
    for k in sorted(share, key=lambda k: share[k] - int(share[k]), reverse=True):
        if sum(q.values()) >= n:
            break
        if q[k] < counts[k]:
            q[k] += 1
    return q


def pick(by: dict[str, list[dict]], n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    q = quotas({k: len(v) for k, v in by.items()}, n)
    out = []
    for k, fs in by.items():
        out += rng.sample(fs, q[k])
    return sorted(out, key=lambda f: (f["verdict"], f["gate"]["path"], f["gate"]["line"]))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("before")
    ap.add_argument("now")
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--seed", type=int, default=20261205)
    ap.add_argument("--target", default="sm_120")
    a = ap.parse_args()
    by = candidates(json.loads(Path(a.before).read_text()), json.loads(Path(a.now).read_text()), a.target)
    print("candidates:", {k: len(v) for k, v in by.items()}, f"seed {a.seed}")
    for f in pick(by, a.n, a.seed):
        g = f["gate"]
        print(f"{f['verdict']:15} {g['path']}:{g['line']} [{g['kind']}] {f['reason'][:120]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
