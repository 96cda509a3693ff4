"""Kernel census: which kernels of a JIT module are real, empty or trap-only for a target, per
nvcc's PTX, next to archaudit's per-kernel stub detection for the same TUs (issue 5 evidence).

For each TU this runs `nvcc --ptx` with the command line flashinfer's JIT uses (bench/
nvcc_flags.py; only the device pass, which decides what a kernel's body is) and reads every
`.entry` with `archaudit.verify.parse_ptx`: `empty` when its body is only `ret;` (a kernel whose
whole body an `#if` removed), `trap` when it does nothing but trap (and print) or always traps
first, `arch-abort` when it prints CuTe's "... without CUTE_ARCH_..." abort, `real` otherwise.
Entries are grouped by
kernel family (the demangled function name without template arguments) and compared with
`CudaProject.analyse_tu(...).kernels` (status real/empty/trap, with the guard line).

    python bench/kernel_census.py                                 # flashinfer 0.6.15 trtllm_comm, sm_120f
    python bench/kernel_census.py --corpus fi072 --target sm_90a  # the same module of 0.7.2
    python bench/kernel_census.py --tu data/csrc/norm.cu --target sm_120f

The TU list of a module is read from its `gen_*_module` in flashinfer/jit/*.py (the
`FLASHINFER_CSRC_DIR / "x.cu"` entries), so it follows the package version.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import corpus  # noqa: E402
import nvcc_flags as NF  # noqa: E402

from archaudit.verify import STUBS, demangle, family, parse_ptx, run_group  # noqa: E402

MODULES = {"trtllm_comm": ("jit/comm.py", "gen_trtllm_comm_module")}
CLASSES = ("real", *STUBS)


def module_sources(fi_dir: Path, jit_file: str, func: str) -> list[str]:
    """The csrc .cu files a gen_*_module lists, read from its source text."""
    text = (fi_dir / jit_file).read_text()
    m = re.search(rf"^def {func}\(.*?(?=^def |\Z)", text, re.S | re.M)
    if not m:
        raise SystemExit(f"error: {func} not found in {jit_file}")
    return [f"data/csrc/{x}" for x in re.findall(r'FLASHINFER_CSRC_DIR\s*/\s*"([^"]+\.cu)"', m.group(0))]


# --- main ----------------------------------------------------------------------------------------


def census(fi_dir: Path, sp: Path, tus: list[str], target: str, timeout: float, nice: int) -> dict:
    from archaudit.cuda import ruleset
    from archaudit.cuda.tu import CudaProject, FsReader

    reader = FsReader(str(sp))
    files = reader.files("flashinfer")
    proj = CudaProject(reader, CudaProject.discover_include_roots(files, reader, "flashinfer"), {}, files)
    rows = []
    for tu in tus:
        with tempfile.TemporaryDirectory(prefix="fi-census-") as td:
            out = Path(td) / "tu.ptx"
            cmd = NF.jit_command(fi_dir, fi_dir / tu, target, out=str(out), mode="--ptx")
            argv = (["nice", "-n", str(nice)] if nice else []) + cmd
            t0 = time.monotonic()
            rc, err = run_group(argv, timeout, Path(td))
            err = err if rc is not None else "timeout"
            wall = round(time.monotonic() - t0, 1)
            ptx = out.read_text() if rc == 0 and out.exists() else ""
        entries = parse_ptx(ptx)
        dm = demangle([e.mangled for e in entries])
        fams: dict[str, dict] = {}
        for e in entries:
            f = fams.setdefault(family(dm[e.mangled]), dict.fromkeys(CLASSES, 0))
            f[e.status] += 1
        t1 = time.monotonic()
        res = proj.analyse_tu(f"flashinfer/{tu}", ruleset.target_by_name(target), extra_defines=NF.defines_of(cmd))
        a_wall = round(time.monotonic() - t1, 1)
        kern = {k.name: {"status": k.status, "path": k.path, "line": k.line, "guard_line": k.guard_line, "reason": k.reason}
                for k in res.kernels}
        comp = []
        for name in sorted(set(fams) | set(kern)):
            f = fams.get(name)
            ptx_status = None
            if f:
                nonzero = [s for s in CLASSES if f[s]]
                ptx_status = nonzero[0] if len(nonzero) == 1 else "mixed"
            a = kern.get(name)
            comp.append({"family": name, "ptx": f, "ptx_status": ptx_status, "archaudit": a,
                         "agree": (a is not None and f is not None and a["status"] == ptx_status)})
        rows.append({"tu": tu, "cmd": " ".join(cmd), "nvcc_rc": rc, "nvcc_error": "" if rc == 0 else err.strip()[:500],
                     "nvcc_wall_s": wall, "archaudit_wall_s": a_wall, "entries": len(entries),
                     "prediction": res.prediction, "reason": res.reason, "families": comp})
        print(f"  {tu}: nvcc rc={rc} {wall}s, {len(entries)} entries; archaudit {res.prediction} ({a_wall}s)",
              file=sys.stderr, flush=True)
    return {"target": target, "nvcc": NF.nvcc_version(), "rows": rows}


def markdown(d: dict, title: str) -> str:
    out = [f"# Kernel census: {title}, {d['target']} ({d['nvcc']})", "",
           "Generated by `bench/kernel_census.py`. PTX `.entry` bodies from `nvcc --ptx` with flashinfer's JIT flags:",
           "`empty` = only `ret;`, `trap` = only trap/printf or a trap first, `arch-abort` = CuTe's abort message,",
           "`real` = anything else; counts are instantiations",
           "per kernel family. `archaudit` is `CudaProject.analyse_tu(...).kernels` for the same TU, target and -D flags.", ""]
    for r in d["rows"]:
        out += [f"## {r['tu']}", "",
                f"- nvcc: rc={r['nvcc_rc']}, wall {r['nvcc_wall_s']} s, {r['entries']} entries"
                + (f"; error: `{r['nvcc_error'][:200]}`" if r["nvcc_rc"] != 0 else ""),
                f"- archaudit: {r['prediction']} ({r['archaudit_wall_s']} s): {r['reason'][:300]}", "",
                "| kernel family | PTX real | PTX empty | PTX trap | PTX arch-abort | archaudit | guard line | agree |",
                "|---|---|---|---|---|---|---|---|"]
        for c in r["families"]:
            f = c["ptx"] or dict.fromkeys(CLASSES, "-")
            a = c["archaudit"]
            astat = "not listed" if a is None else a["status"]
            guard = "" if a is None or a["guard_line"] is None else f"{a['path'].split('/')[-1]}:{a['guard_line']}"
            out.append(f"| {c['family']} | {f['real']} | {f['empty']} | {f['trap']} | {f['arch-abort']} | {astat} | {guard} | "
                       f"{'yes' if c['agree'] else 'NO'} |")
        out += ["", "Command:", "", "```", r["cmd"], "```", ""]
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", default="fi0615", choices=sorted(corpus.CORPORA))
    ap.add_argument("--module", default="trtllm_comm", choices=sorted(MODULES))
    ap.add_argument("--tu", action="append", default=[], help="TU relative to the flashinfer package (repeatable); overrides --module")
    ap.add_argument("--target", default="sm_120f")
    ap.add_argument("--timeout", type=float, default=1800.0)
    ap.add_argument("--nice", type=int, default=10)
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--name", default="")
    args = ap.parse_args(argv)
    from archaudit.cuda import ruleset

    if ruleset.target_by_name(args.target) is None:
        print(f"error: unknown compile target {args.target!r}", file=sys.stderr)
        return 2
    sp = corpus.site_packages(args.corpus)
    fi_dir = sp / "flashinfer"
    tus = args.tu or module_sources(fi_dir, *MODULES[args.module])
    d = census(fi_dir, sp, tus, args.target, args.timeout, args.nice)
    ver = args.corpus.replace("fi", "")
    name = args.name or f"kernel_census_{ver}_{args.target.replace('sm_', 'sm')}"
    d["corpus"] = corpus.CORPORA[args.corpus]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(d, indent=1) + "\n")
    title = f"{corpus.CORPORA[args.corpus][0]} " + (args.module if not args.tu else "selected TUs")
    (out / f"{name}.md").write_text(markdown(d, title))
    print(markdown(d, title))
    return 0


if __name__ == "__main__":
    sys.exit(main())
