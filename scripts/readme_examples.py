#!/usr/bin/env python3
"""Write the README's example output from a real scan, so that it stays true.

    .venv/bin/python scripts/readme_examples.py            # rewrite the README's example blocks
    .venv/bin/python scripts/readme_examples.py --check    # exit 1 if the README is out of date

It scans the pinned pair (flashinfer-python 0.7.2.post1 + sglang 0.5.23, fetched by
bench/corpus.py, as scripts/demo.sh does) for sm_120 with the installed `archaudit`, through the
scan cache (after `bash scripts/demo.sh` this takes seconds; cold, a minute or more), and fills the
blocks between `<!-- example:NAME -->` and `<!-- /example -->` in README.md:

- `screen`:  `archaudit scan site-packages --target sm_120` (piped: the plain first screen);
- `finding`: one finding of `--format json` (the canonical sglang allreduce-fusion gate), its
  `modules`, `chain` and `evidence` lists cut to their first entry;
- `patch`:   that finding's patch (what `archaudit patch` writes for it).

The scanned directory's absolute path is written as `site-packages`. Nothing scanned is imported
or run.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
FINDING = ("sglang/srt/layers/flashinfer_comm_fusion.py", 48)
BLOCK = re.compile(r"(<!-- example:(\w+) -->\n)(.*?)(<!-- /example -->)", re.S)


def archaudit(*args: str) -> str:
    exe = Path(sys.executable).with_name("archaudit")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-P", "-m", "archaudit"]
    p = subprocess.run(cmd + list(args), capture_output=True, text=True, cwd=REPO, timeout=3600,
                       env=dict(os.environ, COLUMNS="100"))
    if p.returncode not in (0, 1):
        sys.exit(f"archaudit {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()}")
    return p.stdout


def examples(sp: Path) -> dict[str, str]:
    root = str(sp)
    screen = archaudit("scan", root, "--target", "sm_120").replace(root, "site-packages")
    doc = json.loads(archaudit("scan", root, "--target", "sm_120", "--format", "json", "-q"))
    f = next(x for x in doc["findings"] if (x["gate"]["path"], x["gate"]["line"]) == FINDING)
    patch = f["patch"] or ""
    short = dict(f)
    for k in ("modules", "chain", "evidence"):
        if len(short[k]) > 1:
            short[k] = short[k][:1]
    short["patch"] = "(the diff below)" if patch else None
    for m in short["modules"]:
        for k in ("kernels", "sources"):
            m[k] = m[k][:2]
        m["entry_points"] = dict(list(m["entry_points"].items())[:3])
    return {
        "screen": "```\n$ archaudit scan site-packages --target sm_120\n" + screen + "```\n",
        "finding": "```json\n" + compact(short) + "\n```\n",
        "patch": "```diff\n" + patch + ("" if patch.endswith("\n") else "\n") + "```\n",
    }


def compact(obj: dict) -> str:
    """One line per top-level key, and per entry of a list of objects."""
    out = []
    for k, v in obj.items():
        if isinstance(v, list) and v and isinstance(v[0], dict):
            items = ",\n".join("    " + json.dumps(x) for x in v)
            out.append(f"  {json.dumps(k)}: [\n{items}\n  ]")
        else:
            out.append(f"  {json.dumps(k)}: {json.dumps(v)}")
    return "{\n" + ",\n".join(out) + "\n}"


def fill(text: str, ex: dict[str, str]) -> str:
    def sub(m):
        name = m.group(2)
        if name not in ex:
            sys.exit(f"README.md: unknown example block {name!r}")
        return m.group(1) + ex[name] + m.group(4)

    return BLOCK.sub(sub, text)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if README.md differs from what would be written")
    ap.add_argument("--site-packages", type=Path, help="the pinned pair's site-packages (default: bench/corpus.py fi072)")
    a = ap.parse_args()
    sp = a.site_packages
    if sp is None:
        sys.path.insert(0, str(REPO / "bench"))
        import corpus

        sp = corpus.site_packages("fi072")
    old = README.read_text(encoding="utf-8")
    if not BLOCK.search(old):
        sys.exit("README.md has no <!-- example:NAME --> blocks")
    new = fill(old, examples(Path(sp)))
    if a.check:
        if new != old:
            print("README.md examples are out of date: run scripts/readme_examples.py", file=sys.stderr)
            return 1
        return 0
    README.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
