"""The parse floor of a cold scan (issue 7): the CPU that reading and parsing alone take, before
anything is converted or evaluated.

    python bench/parse_floor.py <site-packages> [--target sm_120] [--out floor.json]

1. A cold scan runs in this process (no cache, the default workers) and records every Python
   module it loads, in full or shallow (Index._load).
2. The bytes of those modules are parsed again here, one process: by tree-sitter alone, then as
   the index parses them (parse_python, bodies lazy: tree-sitter plus the top-level conversion).
3. Every Python file of the tree is read and given the prefilter's byte facts (byte_facts), the
   work the prefilter's worker processes share.

On N cores no schedule of this work takes less wall time than its CPU divided by N. Nothing
scanned is imported or executed: archaudit reads the files as bytes.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def loaded_modules(root: str, target: str) -> tuple[dict[str, bool], float]:
    """path -> shallow (True only if never loaded in full) of every module a cold scan loads,
    and that scan's wall time."""
    from archaudit import pipeline
    from archaudit.python import index
    from archaudit.targets import registry

    loaded: dict[str, bool] = {}
    load = index.Index._load

    def recording(self, name, path, shallow):
        loaded[path] = loaded.get(path, True) and shallow
        return load(self, name, path, shallow)

    index.Index._load = recording
    try:
        reg = registry()
        t = time.perf_counter()
        pipeline.scan(root, targets=[reg.parse(target)], reg=reg, cache=None, workers=pipeline.default_workers())
        return loaded, time.perf_counter() - t
    finally:
        index.Index._load = load


def cpu(fn, items) -> float:
    """CPU of fn over items, without the cyclic GC (the scan pauses it too: with it, the objects
    made here would have it walk whatever the heap holds, a cost that is not the work's)."""
    gc.collect()
    gc.disable()
    try:
        t = time.process_time()
        for x in items:
            fn(x)
        return time.process_time() - t
    finally:
        gc.enable()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root")
    ap.add_argument("--target", default="sm_120")
    ap.add_argument("--out")
    args = ap.parse_args()
    if not os.path.isdir(args.root):
        print(f"parse_floor: not a directory: {args.root}", file=sys.stderr)
        return 2

    from archaudit.parsing.python_ir import _parser, parse_python
    from archaudit.pipeline import default_workers
    from archaudit.python.gates import byte_facts

    loaded, scan_wall = loaded_modules(args.root, args.target)
    full = [Path(args.root, p).read_bytes() for p, shallow in sorted(loaded.items()) if not shallow]
    shallow = [Path(args.root, p).read_bytes() for p, s in sorted(loaded.items()) if s]
    parser = _parser()
    out = {
        "root": args.root, "target": args.target, "scan_wall_s": round(scan_wall, 1),
        "full": {"modules": len(full), "bytes": sum(map(len, full)),
                 "tree_sitter_cpu_s": round(cpu(parser.parse, full), 2),
                 "parse_python_cpu_s": round(cpu(lambda d: parse_python(d, lazy=True), full), 2)},
        "shallow": {"modules": len(shallow), "bytes": sum(map(len, shallow)),
                    "tree_sitter_cpu_s": round(cpu(parser.parse, shallow), 2),
                    "parse_python_cpu_s": round(cpu(lambda d: parse_python(d, shallow=True), shallow), 2)},
    }
    files = sorted(str(p) for p in Path(args.root).rglob("*.py") if p.is_file())
    total = [0]

    def read_and_prefilter(p: str) -> None:
        data = Path(p).read_bytes()
        total[0] += len(data)
        byte_facts(data)

    out["prefilter"] = {"files": len(files), "cpu_s": round(cpu(read_and_prefilter, files), 2), "bytes": total[0]}
    cores = default_workers()
    work = out["prefilter"]["cpu_s"] + out["full"]["tree_sitter_cpu_s"] + out["shallow"]["tree_sitter_cpu_s"]
    out["cores"] = cores
    out["floor_wall_s"] = round(work / cores, 1)  # reading, prefilter and tree-sitter, perfectly shared
    text = json.dumps(out, indent=2)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
