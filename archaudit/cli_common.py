"""Pieces shared by the commands that run a scan: progress on stderr, clean usage errors."""
from __future__ import annotations

import click


def scan_with_progress(path, reqs, reg, quiet: bool):
    """Run the pipeline with a status line on stderr (only on a terminal, never with --quiet)."""
    from rich.console import Console

    from .pipeline import scan as run_scan
    from .sources import SourceError

    err = Console(stderr=True)
    status = err.status("scanning") if (not quiet and err.is_terminal) else None

    def progress(msg: str, *_counts) -> None:
        if status is not None:
            status.update(msg)

    try:
        if status is not None:
            status.start()
        return run_scan(path, reqs, reg, progress=progress)
    except SourceError as e:
        raise click.UsageError(str(e)) from None
    finally:
        if status is not None:
            status.stop()


def write_output(text: str, output: str | None) -> None:
    if output:
        with open(output, "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        click.echo(text, nl=False)
