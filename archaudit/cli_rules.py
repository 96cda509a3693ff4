"""Click commands about the rule data: `archaudit rules verify`."""
from __future__ import annotations

import click


def register(main: click.Group) -> None:
    """Attach the `rules` command group to the main group."""
