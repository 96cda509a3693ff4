"""Command-line interface: parse options, call the pipeline, pick a formatter. Nothing imports this."""
from __future__ import annotations

import click

from . import __version__, cli_ci


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="archaudit")
def main() -> None:
    """Static auditor of GPU-architecture gates in LLM-serving Python packages."""


def parse_targets(names: tuple[str, ...]):
    """--target values -> TargetRequests; an unknown name is a usage error (exit 2)."""
    from .targets import UnknownTarget, registry

    reg = registry()
    out = []
    for n in names:
        try:
            out.append(reg.parse(n))
        except UnknownTarget as e:
            raise click.BadParameter(str(e), param_hint="--target") from None
    return out


@main.command()
@click.argument("path", required=False, type=click.Path(path_type=str))
@click.option("--target", "-t", "targets", multiple=True, metavar="GPU",
              help="GPU to judge for: sm_120, 12.0, 120f, sm_120a, or a product such as 'RTX PRO 6000'. Repeatable.")
@click.option("--format", "fmt", type=click.Choice(["table", "text", "json", "sarif"]), default="table", show_default=True)
@click.option("-o", "--output", type=click.Path(writable=True), help="Write the report to a file (sarif: a directory gets one file per target).")
@click.option("-q", "--quiet", is_flag=True, help="No progress output on stderr.")
@cli_ci.scan_options
@click.option("--no-cache", is_flag=True, help="Neither read nor write the cache (ARCHAUDIT_CACHE_DIR, default ~/.cache/archaudit).")
@click.option("--workers", type=click.IntRange(min=1), default=None, metavar="N",
              help="Processes for reading and prefiltering files (default: the usable cores).")
def scan(path, targets, fmt, output, quiet, baseline_file, fail_on, repo_root, sarif_inventory, no_cache, workers):
    """Scan a site-packages directory, a source tree or a wheel (default: this Python's site-packages)."""
    from .cli_common import scan_with_progress
    from .targets import registry

    ci = cli_ci.ScanCI(fmt, output, baseline_file, fail_on, repo_root, sarif_inventory)
    reqs = ci.targets(parse_targets(targets))
    ci.check(reqs)
    reg = registry()
    result = scan_with_progress(path, reqs, reg, quiet, cache=not no_cache, workers=workers)
    result = ci.apply(result, reg)  # SARIF is written here
    if fmt == "sarif":
        text = None
    elif fmt == "json":
        from .report.jsonout import to_json

        text = to_json(result, reg)
    elif fmt == "text" or output:
        from .report.text import render_text

        text = render_text(result, reg)
    else:
        from rich.console import Console

        from .report.text import render_table

        render_table(result, reg, Console())
        text = None
    if text is not None and output:
        with open(output, "w", encoding="utf-8") as f:
            f.write(text)
    elif text is not None:
        click.echo(text, nl=False)
    ci.finish()


def _register_optional_commands() -> None:
    # Command groups that live in their own modules register here.
    from . import cli_binary, cli_cuda, cli_graph, cli_rules, cli_verdict, cli_verify

    cli_cuda.register(main)
    cli_rules.register(main)
    cli_graph.register(main)
    cli_verdict.register(main)
    cli_binary.register(main)
    cli_ci.register(main)
    cli_verify.register(main)


_register_optional_commands()


def run() -> None:
    """Console entry point: no traceback for users (ARCHAUDIT_DEBUG=1 shows it)."""
    import os

    try:
        main(standalone_mode=True)
    except SystemExit as e:
        _exit_now(e.code)
    except KeyboardInterrupt:
        click.echo("archaudit: interrupted", err=True)
        raise SystemExit(130)
    except Exception as e:  # noqa: BLE001
        if os.environ.get("ARCHAUDIT_DEBUG"):
            raise
        from .report.shown import shown

        click.echo(shown(f"archaudit: internal error: {type(e).__name__}: {e} (set ARCHAUDIT_DEBUG=1 for details)"), err=True)
        raise SystemExit(2)


def _exit_now(code) -> None:
    """Leave without tearing down the heap: after a full scan, freeing millions of IR objects one
    by one took longer than a minute. Everything the command writes is flushed first."""
    import os
    import sys

    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    for fh in (sys.stdout, sys.stderr):
        try:
            fh.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
