"""`archaudit verify`: compile the JIT modules with confident verdicts and check each verdict."""
from __future__ import annotations

import json
import signal
import time

import click

from ..report.shown import shown
from .common import (check_output, format_option, no_cache_option, output_option, parse_targets, quiet_option,
                     scan_with_progress, target_option, write_output)


@click.command("verify")
@click.argument("path", type=click.Path(exists=True, file_okay=False, path_type=str))
@target_option("The GPU to verify for (sm_120, RTX 5090, ...).")
@click.option("--module", "modules", multiple=True, metavar="GLOB",
              help="Only JIT modules whose name matches (fnmatch, repeatable).")
@click.option("--gate", "gates", multiple=True, metavar="PATH:LINE",
              help="Only the JIT modules behind the gate at PATH:LINE (scan-relative, repeatable).")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, metavar="N",
              help="Parallel compiles (default: the usable cores).")
@click.option("--timeout", type=click.FloatRange(min=1), default=600.0, show_default=True, metavar="SECONDS",
              help="Time limit per translation unit (nvcc and ptxas together).")
@click.option("-I", "includes", multiple=True, type=click.Path(exists=True, file_okay=False), metavar="DIR",
              help="Extra include directory for nvcc (repeatable): headers of packages the JIT passes itself.")
@click.option("--nvcc-flag", "nvcc_flags", multiple=True, metavar="FLAG",
              help="Extra nvcc flag for every compile (repeatable; write --nvcc-flag=-DX): flags the JIT adds to every module.")
@format_option("text", "json")
@output_option("Write the report to a file.")
@quiet_option("No progress on stderr.")
@no_cache_option("Neither read nor write the scan's cache (the one `scan` uses).")
def verify_cmd(path, target, modules, gates, jobs, timeout, includes, nvcc_flags, fmt, output, quiet, no_cache):
    """Confirm or refute the static verdicts of PATH's JIT modules for TARGET with nvcc.

    Each selected module's .cu sources are compiled device-only (nvcc -ptx, then ptxas) for the
    compile target the JIT uses, with the module's defines, flags and include paths; nothing is run.
    Default selection: every module whose verdict is software-only, partial or hardware-bound.
    Exit 0 when nothing is refuted, 1 when something is, 2 on a usage error or without nvcc."""
    # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
    from .. import verify as V
    from ..cuda.tu import CudaProject
    # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
    from ..sources import open_source
    from ..targets import registry

    check_output(output)
    for g in gates:
        p, _, line = g.rpartition(":")
        if not p or not line.isdigit():
            raise click.BadParameter(f"{g!r}: expected PATH:LINE", param_hint="--gate")
    try:
        tools = V.find_tools()
    except V.VerifyError as e:
        click.echo(f"archaudit verify: {e}", err=True)
        raise SystemExit(2) from None
    reg = registry()
    (req,) = parse_targets((target,))
    ct = reg.compile_target(req).name
    t0 = time.monotonic()
    result = scan_with_progress(path, [req], reg, quiet, cache=not no_cache)  # the scan's result, as `scan` left it
    cands, unmatched = V.select(result, req.gpu.name, modules, gates)
    for u in unmatched:
        click.echo(shown(f"archaudit verify: {u}"), err=True)
    source = open_source(path)
    files = source.files()
    roots: dict[str, list[str]] = {}

    def scan_roots_of(top: str) -> list[str]:
        if top not in roots:
            roots[top] = [r.path for r in CudaProject.discover_include_roots(files, source, top)]
        return roots[top]

    say = None if quiet else (lambda msg: click.echo(shown(msg), err=True))
    if say:
        say(f"archaudit verify: {len(cands)} module(s) for {req.gpu.name} ({ct}), nvcc {tools.version or '?'}")
    signal.signal(signal.SIGTERM, _stop)  # `timeout 600 archaudit verify ...` ends the compiles too
    try:
        checks = V.verify(path, cands, reg, req.gpu.name, ct, tools, scan_roots_of, includes, nvcc_flags,
                          jobs or V.default_jobs(), timeout, say)
    except KeyboardInterrupt:  # not click's "Aborted!" and exit 1, which would read as a refutation
        click.echo("archaudit verify: interrupted; the compiles in flight were ended", err=True)
        raise SystemExit(130) from None
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    summ = V.summary(checks)
    summ["wall_s"] = round(time.monotonic() - t0, 1)
    if fmt == "json":
        text = json.dumps({"root": path, "target": req.gpu.name, "compile_target": ct, "nvcc": tools.version,
                           "summary": summ, "modules": [c.to_json() for c in checks]}, indent=1) + "\n"
    else:
        text = render_text(checks, summ, req.gpu.name, ct)
    write_output(text, output)
    raise SystemExit(1 if summ["refuted"] else 0)


def _stop(signum, frame):
    raise KeyboardInterrupt


def render_text(checks, summ: dict, gpu: str, ct: str) -> str:
    lines = []
    for c in checks:
        claim = c.claim or "no static verdict"
        obs = f"; nvcc: {c.observed}" if c.observed else ""
        lines.append(shown(f"{c.result}: {c.name} ({claim}{obs}): {c.why}"))
        lines.append(shown(f"    generator {c.generator[0]}:{c.generator[1]}"))
        for t in c.tus:
            if t.result is None:
                lines.append(shown(f"    {t.source}: {t.note}"))
                continue
            r = t.result
            what = r.outcome if r.outcome != "error" else f"{r.stage} error: {r.detail}"
            if r.outcome == "ok":
                counts: dict[str, int] = {}
                for e in r.entries:
                    counts[e.status] = counts.get(e.status, 0) + 1
                what = "ok, kernels: " + (", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "none")
            elif r.outcome == "missing-header":
                what = f"missing header {r.detail}"
            ctrl = ""
            if t.control is not None:
                ctrl = f"; {t.control.target}: {t.control.outcome} ({t.control.wall_s} s)"
            lines.append(shown(f"    {t.source}: {what} ({r.wall_s} s{ctrl})"))
    lines.append(f"{summ['modules']} module(s) for {gpu} ({ct}): {summ['confirmed']} confirmed, {summ['refuted']} refuted, "
                 f"{summ['not verified']} not verified; {summ['tus_compiled']} TU(s), {summ['compile_s']} s of compiles, "
                 f"{summ['wall_s']} s wall")
    return "\n".join(lines) + "\n"


def register(main: click.Group) -> None:
    main.add_command(verify_cmd)
