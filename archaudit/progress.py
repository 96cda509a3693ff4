"""Progress on stderr for long scans: a rich bar when stderr is a terminal, nothing otherwise.

The pipeline calls `progress(message)` or `progress(message, done, total)`; this turns those calls
into one transient line (phase, bar, counts, elapsed time) that appears only after a second,
so short scans print nothing.
"""
from __future__ import annotations

import inspect
import time
from contextlib import contextmanager
from typing import Callable

from .report.shown import shown


@contextmanager
def scan_progress(console, enabled: bool, delay: float = 1.0):
    """Yields a progress callback. enabled=False (quiet, or stderr not a terminal): a no-op."""
    if not enabled:
        yield lambda msg, done=None, total=None: None
        return
    # lazy: rich only when a progress bar is shown
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )
    task = bar.add_task("scanning", total=None)
    t0 = time.monotonic()
    started = False

    def update(msg: str, done: int | None = None, total: int | None = None) -> None:
        nonlocal started
        if not started:
            if time.monotonic() - t0 < delay:
                return
            bar.start()
            started = True
        # messages name files and modules of the scan: never markup, no control characters
        bar.update(task, description=escape(shown(msg)), completed=done or 0, total=total)

    try:
        yield update
    finally:
        if started:
            bar.stop()


def adapt_progress(progress) -> Callable[..., None]:
    """Callbacks that take only the message still work (counts are dropped for them)."""
    if progress is None:
        return lambda msg, done=None, total=None: None
    try:
        inspect.signature(progress).bind("", 0, 0)
        return progress
    except (TypeError, ValueError):
        return lambda msg, done=None, total=None: progress(msg)
