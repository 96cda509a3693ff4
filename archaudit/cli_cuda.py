"""Click commands of the CUDA side: `archaudit cuda` and `archaudit rules verify`."""
from __future__ import annotations

import click


def register(main: click.Group) -> None:
    """Attach the CUDA-side commands to the main group."""
