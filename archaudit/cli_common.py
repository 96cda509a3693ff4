"""Pieces shared by the commands that run a scan: progress on stderr, clean usage errors."""
from __future__ import annotations

import click


def scan_with_progress(path, reqs, reg, quiet: bool, **scan_options):
    """Run the pipeline with a progress bar on stderr (only on a terminal, never with --quiet);
    an unreadable PATH is a usage error."""
    from rich.console import Console

    from .pipeline import scan as run_scan
    from .progress import scan_progress
    from .sources import SourceError

    err = Console(stderr=True)
    try:
        with scan_progress(err, enabled=not quiet and err.is_terminal) as progress:
            return run_scan(path, reqs, reg, progress=progress, **scan_options)
    except SourceError as e:
        raise click.UsageError(str(e)) from None


def write_output(text: str, output: str | None) -> None:
    if output:
        with open(output, "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        click.echo(text, nl=False)
