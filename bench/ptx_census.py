"""Per-kernel census of one CUDA translation unit's PTX for several compile targets.

    python bench/ptx_census.py TU.cu --target 120f --target 90a [--out DIR] -- NVCC_FLAGS...

Compiles TU.cu to PTX (`nvcc -ptx -gencode=arch=compute_T,code=compute_T`) for each target and
counts, per `.entry` (kernel), the instructions that tell a real kernel from one that stops on
that target: `brkpt` and `trap` (CuTe's CUTE_INVALID_CONTROL_PATH inlines printf + brkpt where an
instruction is not available), `vprintf` calls, and the arch-specific MMA families (`wgmma`,
`tcgen05`, `mma.sync`). Prints a table per target. A measurement for checking a verdict or a
label by hand, not part of the tool.
"""
from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

COUNTED = {"brkpt": re.compile(r"\bbrkpt\b"), "trap": re.compile(r"\btrap;"), "vprintf": re.compile(r"\bvprintf\b"),
           "wgmma": re.compile(r"\bwgmma\.mma_async"), "tcgen05": re.compile(r"\btcgen05\."),
           "mma.sync": re.compile(r"\bmma\.sync\.")}
ENTRY = re.compile(r"\.entry\s+([\w$]+)")


def census(ptx: str) -> dict[str, Counter]:
    """Kernel name -> counts of COUNTED in its body (a PTX function ends where the next begins)."""
    out: dict[str, Counter] = {}
    current = None
    for line in ptx.splitlines():
        m = ENTRY.search(line)
        if m:
            current = out.setdefault(m.group(1), Counter())
            continue
        if line.startswith((".func", ".visible .func", ".weak .func")):
            current = None  # device functions are counted where they are inlined only
            continue
        if current is not None:
            for k, rx in COUNTED.items():
                if rx.search(line):
                    current[k] += 1
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tu")
    ap.add_argument("--target", action="append", required=True, help="compute target, e.g. 120f, 90a")
    ap.add_argument("--out", help="keep the PTX files here")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    a = ap.parse_args(argv[:cut])
    flags = argv[cut + 1:]
    out = Path(a.out or tempfile.mkdtemp(prefix="ptx-census-"))
    out.mkdir(parents=True, exist_ok=True)
    for t in a.target:
        ptx = out / f"{Path(a.tu).stem}_{t}.ptx"
        cmd = ["nvcc", *flags, f"-gencode=arch=compute_{t},code=compute_{t}", "-ptx", "-o", str(ptx), a.tu]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"== compute_{t}: nvcc failed ({r.returncode})\n{r.stderr[-2000:]}")
            continue
        kernels = census(ptx.read_text(errors="replace"))
        brk = sum(1 for c in kernels.values() if c["brkpt"])
        print(f"== compute_{t}: {len(kernels)} kernels, {brk} with brkpt (an unavailable instruction's stop)")
        print("| kernel | " + " | ".join(COUNTED) + " |")
        print("|---|" + "---:|" * len(COUNTED))
        for k, c in sorted(kernels.items()):
            print(f"| `{k[:90]}` | " + " | ".join(str(c[x]) for x in COUNTED) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
