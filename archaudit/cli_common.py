"""Pieces shared by the commands that run a scan: progress on stderr, clean usage errors."""
from __future__ import annotations

import click


def scan_with_progress(path, reqs, reg, quiet: bool, **scan_options):
    """Run the pipeline with a progress bar on stderr (only on a terminal, never with --quiet);
    an unreadable PATH is a usage error."""
    from .pipeline import scan as run_scan
    from .sources import SourceError

    try:
        if quiet:  # rich is not even imported: a cache hit takes about a second, all told
            return run_scan(path, reqs, reg, **scan_options)
        from rich.console import Console

        from .progress import scan_progress

        err = Console(stderr=True)
        with scan_progress(err, enabled=err.is_terminal) as progress:
            return run_scan(path, reqs, reg, progress=progress, **scan_options)
    except SourceError as e:
        raise click.UsageError(str(e)) from None


def write_output(text: str, output: str | None) -> None:
    if output:
        with open(output, "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        click.echo(text, nl=False)
