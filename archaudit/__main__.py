"""`python -m archaudit`. Python put the current directory first on sys.path (unless -P or
PYTHONSAFEPATH, 3.11+): from a scanned checkout, its `click.py` or `json.py` would be imported in
place of the real ones. This package was found already; drop that entry before importing more.
(An `archaudit/` folder there is found before this package, which no code here can prevent: run
the `archaudit` console script, or `python -P -m archaudit`, from a checkout.)"""
import os
import sys


def _drop_cwd_from_path() -> None:
    if getattr(sys.flags, "safe_path", False) or not sys.path:
        return
    first = sys.path[0]
    try:
        if first == "" or os.path.samefile(first, os.getcwd()):
            del sys.path[0]
    except OSError:
        pass


_drop_cwd_from_path()

from .cli import run  # noqa: E402 - after the path is cleaned

run()
