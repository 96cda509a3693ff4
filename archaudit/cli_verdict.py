"""`archaudit patch`: one diff that makes every software-only gate admit the target."""
from __future__ import annotations

import click

from .cli_common import check_output, scan_with_progress, write_output
from .report.shown import shown


@click.command("patch")
@click.argument("path", required=False, type=click.Path(path_type=str))
@click.option("--target", "-t", "target", required=True, metavar="GPU", help="The GPU to enable (sm_120, RTX 5090, ...).")
@click.option("--include-partial", is_flag=True,
              help="Also patch gates whose modules build but have stub kernels (see each finding's safe entry points).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), help="Write the diff to a file.")
@click.option("-q", "--quiet", is_flag=True, help="No progress or summary on stderr.")
def patch_cmd(path, target, include_partial, output, quiet):
    """Print a unified diff (paths relative to the scan root: apply with `patch -p0` or
    `git apply -p0`) that makes each software-only gate admit TARGET, including the gates further
    down its chain. Hardware-bound, binary-only and unresolved gates are never patched."""
    from .cli import parse_targets
    from .judge import patch_gates_of, protected_functions
    from .patch import combined_patch
    from .targets import registry

    reg = registry()
    (req,) = parse_targets((target,))
    check_output(output)
    result = scan_with_progress(path, [req], reg, quiet)
    wanted = ("software-only", "partial") if include_partial else ("software-only",)
    gates, skipped = [], []
    for f in result.findings:
        if f.verdict in wanted:
            gates += patch_gates_of(f, result.gates)
        else:
            skipped.append(f)
    if not gates:
        if not quiet:
            click.echo(f"archaudit: no software-only gate excludes {req.gpu.name}; nothing to patch", err=True)
        raise SystemExit(0)
    patcher = result.patcher
    patcher.protected = protected_functions(result.findings, result.gates, req.gpu.name)
    diff, done = combined_patch(patcher, gates, req.gpu)
    write_output(diff, output)
    if not quiet:
        for g, p in done:
            mark = "patched" if p.new_text is not None else "covered" if p.covered else "NOT patched"
            click.echo(shown(f"{mark}: {g.path}:{g.line}: {p.description}"), err=True)
        by = {}
        for f in skipped:
            by[f.verdict] = by.get(f.verdict, 0) + 1
        if by:
            click.echo("left alone: " + ", ".join(f"{n} {v}" for v, n in sorted(by.items()))
                       + " (hardware-bound, binary-only and unresolved gates are never patched"
                       + ("; partial ones only with --include-partial" if "partial" in by else "") + ")", err=True)


def register(main: click.Group) -> None:
    main.add_command(patch_cmd)
