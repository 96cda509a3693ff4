"""Agreement of a scan's sm_120 verdicts with nvcc-verified labels (../shared/calibration/).

    python bench/calibration.py SCAN.json [LABELS.json]

A label names a gate site (file, line) and the generator function holding it: the
`get_nvcc_flags_list(` call of a `supported_major_versions` gate, or, for a hard-coded `-gencode`
gate, the generator's `def` or the line where the flags enter it. It is matched to the scan's
finding at that line, else to a build-flag finding of that function, else to the JIT-module
records that function generates (the strongest verdict among them, as a gate over several
modules is judged). Prints each
label with archaudit's verdict and the agreement; exit 0 always (a measurement, not a test).
"""
from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

DEFAULT_LABELS = Path(__file__).resolve().parent.parent.parent / "shared" / "calibration" / "flashinfer-0.7.2.post1-sm120.json"
# gate kinds that fix what a JIT build compiles for
BUILD_KINDS = ("build-flags", "arch-list", "nvcc-flags")
STRENGTH = ("hardware-bound", "unresolved", "binary-only", "partial", "software-only", "admitted")


def verdict_for(label: dict, scan: dict, target: str) -> tuple[str, str]:
    site = (label["file"], label["line"])
    fn = label["function"]
    own = [f for f in scan["findings"] if f["target"] == target and f["gate"]["path"] == label["file"]]
    hit = [f for f in own if f["gate"]["line"] == site[1]] or [
        f for f in own if f["gate"]["function"].rsplit(".", 1)[-1] == fn and f["gate"]["kind"] in BUILD_KINDS]
    if hit:
        f = min(hit, key=lambda f: STRENGTH.index(f["verdict"]))
        return f["verdict"], f"finding {f['gate']['line']} ({f['gate']['kind']}): {f['reason'][:160]}"
    mods = [m for m in scan.get("modules", []) if m["generator"]["path"] == label["file"]
            and (m["generator"]["line"] == site[1] or m["generator"]["function"].rsplit(".", 1)[-1] == fn)]
    if mods:
        vs = [m["verdicts"][target]["verdict"] for m in mods if target in m["verdicts"]]
        v = min(vs, key=STRENGTH.index) if vs else "missing"
        why = next((m["verdicts"][target]["reason"] for m in mods if m["verdicts"].get(target, {}).get("verdict") == v), "")
        return v, f"{len(mods)} module record(s): {why[:160]}"
    return "missing", "no finding or module record at this site"


def main(argv: list[str]) -> int:
    scan = json.loads(Path(argv[1]).read_text())
    labels = json.loads(Path(argv[2] if len(argv) > 2 else DEFAULT_LABELS).read_text())
    target = labels.get("target", "sm_120")
    rows, agree, swaps = [], 0, 0
    got = Counter()
    for r in labels["records"]:
        v, why = verdict_for(r, scan, target)
        ok = v == r[target]
        agree += ok
        swaps += {v, r[target]} == {"software-only", "hardware-bound"}
        got[(r[target], v)] += 1
        rows.append((ok, r["file"], r["line"], r["gate_kind"], r[target], v, why))
    for ok, f, ln, kind, want, v, why in rows:
        print(f"{'ok  ' if ok else 'DIFF'} {f}:{ln} [{kind}] label={want} archaudit={v} | {why}")
    n = len(rows)
    print(f"\n{agree}/{n} agree ({100 * agree / n:.0f} %), {swaps} software-only <-> hardware-bound swap(s)")
    for (want, v), c in sorted(got.items()):
        print(f"  label {want:15} archaudit {v:15} {c}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
