"""The patch round trip on a corpus (issue 28): `archaudit patch` for a target, the diff applied
with `patch -p0` to a copy of the corpus, the copy scanned again, and every finding compared.

    python bench/patch_roundtrip.py                        # the pinned pair, sm_120
    python bench/patch_roundtrip.py --corpus fi0615 -t sm_120 --include-partial

What must hold, and is checked:
- every software-only finding of the original (and partial, with --include-partial) has a patch
  (the command's `patched:` or `covered:` line), or is listed as NOT patched with its reason;
- `patch -p0` applies the diff with no rejected hunk;
- in the copy, each patched (or covered) gate admits the target: no finding at its place;
- no other finding changed: the same (path, line, col, kind, verdict) set once the patched places
  are taken out. A gate that moved because an edit added lines above it in its file is matched by
  the lines the diff added before it.

Writes bench/results/patch_roundtrip_<corpus>_<target>[_partial].{md,json}. Scans run as subprocesses
(python -P -m archaudit) of this checkout's code with the default cache, so a second run of the
original scan is warm; the copy is always a cold scan. Nothing scanned is imported or executed.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

import corpus  # noqa: E402

_MSG = re.compile(r"^(patched|covered|NOT patched): (\S+?):(\d+): (.*)$")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def archaudit(args: list[str]) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-P", "-m", "archaudit", *args], env=env, capture_output=True, text=True)


def scan_json(root: Path, target: str, out: Path) -> dict:
    p = archaudit(["scan", str(root), "-t", target, "--format", "json", "-o", str(out), "-q"])
    if p.returncode not in (0, 1) or "internal error" in p.stderr:
        raise SystemExit(f"scan of {root} failed ({p.returncode}): {p.stderr[-2000:]}")
    return json.loads(out.read_text())


def line_maps(diff: str) -> dict[str, tuple[dict[int, int], list[tuple[int, int]]]]:
    """path -> (new line -> old line inside the hunks, [(first new line after a hunk, offset)]):
    where the patched file's lines were in the original. An added line maps to the old line it
    was added before."""
    out: dict[str, tuple[dict[int, int], list[tuple[int, int]]]] = {}
    path, old, new = None, 0, 0
    removed = None
    for ln in diff.splitlines():
        if ln.startswith("--- "):
            continue
        if ln.startswith("+++ "):
            path = ln[4:].split("\t")[0].strip()
            out.setdefault(path, ({}, []))
            continue
        m = _HUNK.match(ln)
        if m and path:
            old, new = int(m.group(1)), int(m.group(3))
            removed = None
            continue
        if path is None or not ln or ln[0] not in " +-":
            continue
        inside, after = out[path]
        if ln[0] == " ":
            inside[new] = old
            old, new = old + 1, new + 1
            removed = None
        elif ln[0] == "-":
            removed = old if removed is None else removed
            old += 1
        else:
            # a line that replaces removed ones is where the first of them was
            inside[new] = removed if removed is not None else old
            new += 1
        if after and after[-1][0] == new:
            after[-1] = (new, old - new)
        else:
            after.append((new, old - new))
    return out


def old_line(path: str, new: int, maps: dict) -> int:
    if path not in maps:
        return new
    inside, after = maps[path]
    if new in inside:
        return inside[new]
    offset = 0
    for start, off in after:
        if start <= new:
            offset = off
    return new + offset


def key(f: dict, maps: dict | None = None) -> tuple:
    g = f["gate"]
    line = old_line(g["path"], g["line"], maps) if maps else g["line"]
    return (g["path"], line, g["kind"], f["target"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default="fi072", help="a bench/corpus.py SETS name (default fi072)")
    ap.add_argument("-t", "--target", default="sm_120")
    ap.add_argument("--include-partial", action="store_true")
    ap.add_argument("--keep", help="keep the patched copy in this directory")
    a = ap.parse_args()

    src = corpus.site_packages(a.corpus)
    work = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="archaudit-roundtrip-"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    before = scan_json(src, a.target, work / "before.json")
    wanted = {"software-only"} | ({"partial"} if a.include_partial else set())
    pargs = ["patch", str(src), "-t", a.target, "-o", str(work / "patch.diff")]
    p = archaudit(pargs + (["--include-partial"] if a.include_partial else []))
    if p.returncode != 0:
        raise SystemExit(f"archaudit patch failed ({p.returncode}): {p.stderr[-2000:]}")
    diff = (work / "patch.diff").read_text()
    msgs = [m.groups() for m in map(_MSG.match, p.stderr.splitlines()) if m]
    status = {(path, int(line)): (kind, text) for kind, path, line, text in msgs}

    copy = work / "site-packages"
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(src, copy, symlinks=True)
    ap_ = subprocess.run(["patch", "-p0", "--batch", "--forward", "-d", str(copy), "-i", str(work / "patch.diff")],
                         capture_output=True, text=True)
    rejects = sorted(str(r.relative_to(copy)) for r in copy.rglob("*.rej"))
    after = scan_json(copy, a.target, work / "after.json")
    maps = line_maps(diff)

    targeted = [f for f in before["findings"] if f["verdict"] in wanted and f["target"] == a.target]
    rows = []
    patched_keys = set()
    for f in sorted(targeted, key=lambda f: (f["gate"]["path"], f["gate"]["line"])):
        g = f["gate"]
        kind, text = status.get((g["path"], g["line"]), ("missing", "no message from archaudit patch"))
        if kind == "missing" and f.get("patch"):
            # a gate whose plan edits elsewhere (build-flags at a generator's def: the build call)
            kind, text = "patched", "by its plan: " + f["reason"].rsplit("patch plan: ", 1)[-1]
        if kind in ("patched", "covered"):
            patched_keys.add(key(f))
        rows.append({"path": g["path"], "line": g["line"], "verdict": f["verdict"], "status": kind, "what": text})
    after_keys = {key(f, maps): f for f in after["findings"]}
    before_keys = {key(f): f for f in before["findings"]}
    for r in rows:
        k = (r["path"], r["line"], next(f["gate"]["kind"] for f in targeted
                                        if (f["gate"]["path"], f["gate"]["line"]) == (r["path"], r["line"])), a.target)
        r["admits_after"] = k not in after_keys
    others_before = {k: f["verdict"] for k, f in before_keys.items() if k not in patched_keys}
    others_after = {k: f["verdict"] for k, f in after_keys.items() if k not in patched_keys}
    gone = sorted(set(others_before) - set(others_after))
    new = sorted(set(others_after) - set(others_before))
    changed = sorted(k for k in set(others_before) & set(others_after) if others_before[k] != others_after[k])
    ok = (not rejects and ap_.returncode == 0 and all(r["status"] in ("patched", "covered") for r in rows)
          and all(r["admits_after"] for r in rows if r["status"] in ("patched", "covered"))
          and not gone and not new and not changed)
    res = {
        "corpus": a.corpus, "target": a.target, "include_partial": a.include_partial,
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                                 text=True).stdout.strip(),
        "findings_before": len(before["findings"]), "findings_after": len(after["findings"]),
        "verdicts_before": _count(before["findings"]), "verdicts_after": _count(after["findings"]),
        "wanted": len(rows), "patched": sum(r["status"] == "patched" for r in rows),
        "covered": sum(r["status"] == "covered" for r in rows),
        "not_patched": [r for r in rows if r["status"] not in ("patched", "covered")],
        "patched_still_found": [r for r in rows if r["status"] in ("patched", "covered") and not r["admits_after"]],
        "diff_lines": len(diff.splitlines()), "patch_rc": ap_.returncode, "rejects": rejects,
        "other_findings_gone": [list(k) for k in gone], "other_findings_new": [list(k) for k in new],
        "other_verdicts_changed": [[*k, others_before[k], others_after[k]] for k in changed],
        "internal_errors": [d for d in after["diagnostics"] if d.get("kind") == "internal-error"],
        "ok": ok, "seconds": round(time.time() - t0, 1),
        "rows": rows,
    }
    out = REPO / "bench" / "results" / (f"patch_roundtrip_{a.corpus}_{a.target}"
                                         + ("_partial" if a.include_partial else ""))
    out.with_suffix(".json").write_text(json.dumps(res, indent=1) + "\n")
    out.with_suffix(".md").write_text(_markdown(res))
    print(_markdown(res))
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


def _count(findings: list[dict]) -> dict:
    out: dict[str, int] = {}
    for f in findings:
        out[f["verdict"]] = out.get(f["verdict"], 0) + 1
    return dict(sorted(out.items()))


def _markdown(r: dict) -> str:
    lines = [f"# Patch round trip: {r['corpus']}, {r['target']}" + (" (--include-partial)" if r["include_partial"] else ""),
             "",
             f"archaudit at {r['commit']}; `python bench/patch_roundtrip.py --corpus {r['corpus']} -t {r['target']}"
             + (" --include-partial" if r["include_partial"] else "") + f"` ({r['seconds']} s).",
             "",
             f"- findings before: {r['findings_before']} {r['verdicts_before']}",
             f"- wanted (software-only{' + partial' if r['include_partial'] else ''}): {r['wanted']}: "
             f"{r['patched']} patched, {r['covered']} covered by an earlier edit, {len(r['not_patched'])} not patched",
             f"- diff: {r['diff_lines']} lines; `patch -p0` exit {r['patch_rc']}, rejected hunks: {len(r['rejects'])}",
             f"- after: {r['findings_after']} {r['verdicts_after']}",
             f"- patched gates still found in the copy: {len(r['patched_still_found'])}",
             f"- other findings gone: {len(r['other_findings_gone'])}, new: {len(r['other_findings_new'])}, "
             f"verdict changed: {len(r['other_verdicts_changed'])}",
             f"- internal errors in the copy's scan: {len(r['internal_errors'])}",
             f"- **{'OK' if r['ok'] else 'NOT OK'}**", ""]
    if r["not_patched"]:
        lines += ["## Not patched", ""] + [f"- `{x['path']}:{x['line']}` ({x['verdict']}): {x['what']}"
                                            for x in r["not_patched"]] + [""]
    for title, key in (("Patched gates still found", "patched_still_found"),):
        if r[key]:
            lines += [f"## {title}", ""] + [f"- `{x['path']}:{x['line']}`" for x in r[key]] + [""]
    for title, key in (("Other findings gone", "other_findings_gone"), ("Other findings new", "other_findings_new"),
                       ("Other verdicts changed", "other_verdicts_changed")):
        if r[key]:
            lines += [f"## {title}", ""] + [f"- {' '.join(map(str, x))}" for x in r[key]] + [""]
    lines += ["## Every wanted finding", "", "| gate | verdict | patch | admits the target after |", "|---|---|---|---|"]
    lines += [f"| `{x['path']}:{x['line']}` | {x['verdict']} | {x['status']} | {'yes' if x['admits_after'] else 'no'} |"
              for x in r["rows"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
