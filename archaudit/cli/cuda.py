"""Click commands of the CUDA side: `archaudit cuda FILE --target T`."""
from __future__ import annotations

import json
import os
import re
import sys

import click

from ..report.shown import shown
from .common import format_option, target_option


def _scan_root_for(path: str) -> tuple[str, str]:
    """(scan root, file relative to it): the directory above the outermost Python package that
    holds the file, or the file's own directory for a standalone file."""
    d = os.path.dirname(path)
    outer = None
    while True:
        if os.path.isfile(os.path.join(d, "__init__.py")):
            outer = d
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    root = os.path.dirname(outer) if outer else os.path.dirname(path)
    return root, os.path.relpath(path, root).replace(os.sep, "/")


def _analyse(file: str, target_text: str, includes: tuple[str, ...], defines: tuple[str, ...]):
    # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
    from ..cuda.includes import IncludeRoot
    from ..cuda.preproc import parse_define_flags
    from ..cuda.tu import CudaProject, FsReader
    from ..targets import UnknownTarget, registry

    reg = registry()
    try:
        req = reg.parse(target_text)
    except UnknownTarget as e:
        hint = f"; closest: {', '.join(e.suggestions)}" if e.suggestions else ""
        raise click.UsageError(f"unknown target {target_text!r}{hint}") from None
    target = reg.compile_target(req)
    if not os.path.exists(file):
        raise click.UsageError(f"no such file: {file}")
    if not os.path.isfile(file):  # never opened: a FIFO would block, a device never end
        raise click.UsageError(f"not a regular file (a directory, FIFO, socket or device): {file}")
    path = os.path.abspath(file)
    root, rel = _scan_root_for(path)
    reader = FsReader(root)
    roots: list[IncludeRoot] = []
    for inc in includes:
        absd = os.path.abspath(inc)
        relr = os.path.relpath(absd, root).replace(os.sep, "/")
        if relr.startswith(".."):
            # an include dir outside the scan root: widen the root to their common ancestor
            common = os.path.commonpath([root, absd])
            rel = os.path.relpath(path, common).replace(os.sep, "/")
            roots = [IncludeRoot(os.path.relpath(os.path.join(root, r.path), common).replace(os.sep, "/"), r.vendored, r.origin)
                     for r in roots]
            root = common
            reader = FsReader(root)
            relr = os.path.relpath(absd, root).replace(os.sep, "/")
        roots.append(IncludeRoot("" if relr == "." else relr, False, "cli"))
    files = None
    pkg = rel.split("/")[0] if "/" in rel and os.path.isfile(os.path.join(root, rel.split("/")[0], "__init__.py")) else None
    if pkg:
        files = reader.files(pkg)
        roots += [r for r in CudaProject.discover_include_roots(files, reader, pkg) if r.path not in {x.path for x in roots}]
    defs = {}
    if pkg:
        # what flashinfer's JIT passes to every CUDA build (CompilationContext.COMMON_NVCC_FLAGS and
        # gen_jit_spec's defaults), found in its source rather than remembered
        defs.update(_jit_defines(reader, files or []))
    flags = []
    for d in defines:
        flags.append("-D" + d)
    defs.update(parse_define_flags(flags))
    proj = CudaProject(reader, roots, defs, files)
    res = proj.analyse_tu(rel, target)
    return req, target, res, root, defs


def _jit_defines(reader, files) -> dict[str, str]:
    out: dict[str, str] = {}
    for f in files:
        if not f.endswith(".py") or not (f.endswith("compilation_context.py") or "/jit/core.py" in "/" + f):
            continue
        data = reader.read(f)
        if not data:
            continue
        text = data.decode("utf-8", "replace")
        for block in re.findall(r"(?:COMMON_NVCC_FLAGS|common_nvcc_flags|cuda_cflags)\s*=\s*\[(.*?)\]", text, re.S):
            for m in re.finditer(r"[\"']-D([A-Za-z_]\w*)(?:=([^\"']*))?[\"']", block):
                out[m.group(1)] = m.group(2) if m.group(2) is not None else "1"
        for m in re.finditer(r"cuda_cflags\s*\+=\s*\[\s*[\"']-DNDEBUG[\"']", text):
            out["NDEBUG"] = "1"
    return out


def _text_report(req, target, res, defs) -> str:
    lines = []
    if req.variant is None:
        lines.append(f"target: {req.gpu.name} -> {target.name} (what a JIT such as flashinfer's passes for {req.gpu.name})")
    else:
        lines.append(f"target: {target.name} (as given)")
    lines.append(f"file: {res.file}  ({len(res.closure)} file(s) in the include closure)")
    if defs:
        lines.append("defines: " + " ".join(f"-D{k}" + (f"={v}" if v not in ("1", "") else "") for k, v in sorted(defs.items())))
    if res.active_guards:
        lines.append("guards (architecture conditions):")
        for g in res.active_guards[:40]:
            state = {True: "active", False: "inactive", None: "undecided"}[g.state]
            lines.append(f"  {g.path}:{g.line}  #{g.directive} {g.condition}  -> {state}")
        if len(res.active_guards) > 40:
            lines.append(f"  ... {len(res.active_guards) - 40} more")
    needed = [f for f in res.features]
    if needed:
        lines.append("features the active code needs:")
        for f in needed[:60]:
            mark = "MISSING" if f in res.blocking else "ok"
            cert = "" if f.certain else " (undecided condition)"
            lines.append(f"  {f.path}:{f.line}  {f.feature}  {f.text!r}  [{mark}{cert}]")
        if len(needed) > 60:
            lines.append(f"  ... {len(needed) - 60} more")
    if res.kernels:
        lines.append("kernels:")
        for k in res.kernels[:60]:
            lines.append(f"  {k.path}:{k.line}  {k.name}: {k.status} ({k.reason})")
    for d in res.diagnostics:
        if d.severity != "note":
            lines.append(f"diagnostic: {d.path}:{d.line or ''} {d.kind}: {d.message}")
    verdict = {
        "builds": f"builds for {target.name}",
        "fails": f"fails for {target.name}: {res.reason}",
        "stub": f"stub for {target.name}: {res.reason}",
        "unknown": f"unknown: {res.reason}",
    }[res.prediction]
    lines.append(verdict)
    return "\n".join(map(shown, lines))  # names and text from the scanned tree: report/shown.py


def register(main: click.Group) -> None:
    """Attach the CUDA-side commands to the main group."""

    @main.command("cuda")
    @click.argument("file", type=click.Path(dir_okay=False))
    @target_option("sm_120, sm_120f, sm_90a, 12.0, 'RTX PRO 6000' ...", dest="target_text", metavar="TEXT")
    @format_option("text", "json")
    @click.option("-I", "includes", multiple=True, help="extra include directory (repeatable)")
    @click.option("-D", "defines", multiple=True, help="NAME or NAME=VALUE, as nvcc's -D (repeatable)")
    def cuda_cmd(file: str, target_text: str, fmt: str, includes: tuple[str, ...], defines: tuple[str, ...]) -> None:
        """Predict whether one CUDA translation unit builds and runs for a target.

        Prints the architecture guards, the features the active code needs (file:line) and the
        prediction: builds / fails (first missing feature) / stub (trap or empty kernel) /
        unknown (why). Exit status: 0 builds, 1 fails/stub/unknown, 2 usage error.
        """
        try:
            req, target, res, root, defs = _analyse(file, target_text, includes, defines)
        except click.UsageError:
            raise
        except Exception as e:  # never a traceback for the user
            click.echo(shown(f"archaudit: error: {type(e).__name__}: {e}"), err=True)
            sys.exit(2)
        if fmt == "json":
            d = res.to_json()
            d["target_requested"] = req.text
            d["target_mapped"] = req.variant is None
            d["scan_root"] = root
            d["defines"] = defs
            click.echo(json.dumps(d, indent=2, default=str))
        else:
            click.echo(_text_report(req, target, res, defs))
        sys.exit(0 if res.prediction == "builds" else 1)
