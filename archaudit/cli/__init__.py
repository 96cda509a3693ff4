"""The command line: `main` is the click group (cli/app.py), `run` the console entry point.
One module per command group (scan: app.py; patch; explain/graph/callgraph: graph.py; baseline
and diff: ci.py; cuda; binary; rules; verify); the pieces they share are in common.py."""
from .app import main, run

__all__ = ["main", "run"]
