"""Command-line interface: parse options, call the pipeline, pick a formatter. Nothing imports this."""
from __future__ import annotations

import sys

import click

from . import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="archaudit")
def main() -> None:
    """Static auditor of GPU-architecture gates in LLM-serving Python packages."""


def _register_optional_commands() -> None:
    # Command groups that live in their own modules register here.
    from . import cli_cuda, cli_rules

    cli_cuda.register(main)
    cli_rules.register(main)


_register_optional_commands()
