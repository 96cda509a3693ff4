"""`archaudit patch`: one diff that makes every software-only gate admit the target."""
from __future__ import annotations

import click

from ..report.shown import shown
from .common import (check_output, no_cache_option, output_option, parse_targets, quiet_option, scan_with_progress,
                     target_option, write_output)


@click.command("patch")
@click.argument("path", required=False, type=click.Path(path_type=str))
@target_option("The GPU to enable (sm_120, RTX 5090, ...).")
@click.option("--include-partial", is_flag=True,
              help="Also patch gates whose modules build but have stub kernels (see each finding's safe entry points).")
@output_option("Write the diff to a file.")
@quiet_option("No progress or summary on stderr.")
@no_cache_option()
def patch_cmd(path, target, include_partial, output, quiet, no_cache):
    """Print a unified diff (paths relative to the scan root: apply with `patch -p0` or
    `git apply -p0`) that makes each software-only gate admit TARGET, including the gates further
    down its chain. Hardware-bound, binary-only and unresolved gates are never patched."""
    # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
    from ..cache import Cache
    from ..derived import cached_patch_output
    from ..targets import registry

    reg = registry()
    (req,) = parse_targets((target,))
    check_output(output)
    # the scan's own cache: after `archaudit scan`, the result is read back, not recomputed; the
    # combined patch made from it is stored beside it (derived.py)
    store = None if no_cache else Cache()
    result = scan_with_progress(path, [req], reg, quiet, cache=store)
    out = cached_patch_output(store, result, path, req.gpu, include_partial, reg)
    if not out.done:
        if not quiet:
            click.echo(f"archaudit: no software-only gate excludes {req.gpu.name}; nothing to patch", err=True)
        raise SystemExit(0)
    write_output(out.diff, output)
    if not quiet:
        for mark, gpath, line, description in out.done:
            click.echo(shown(f"{mark}: {gpath}:{line}: {description}"), err=True)
        by = out.skipped
        if by:
            click.echo("left alone: " + ", ".join(f"{n} {v}" for v, n in sorted(by.items()))
                       + " (hardware-bound, binary-only and unresolved gates are never patched"
                       + ("; partial ones only with --include-partial" if "partial" in by else "") + ")", err=True)


def register(main: click.Group) -> None:
    main.add_command(patch_cmd)
