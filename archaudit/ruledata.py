"""Where the rule files (rules/*.toml) are, in a source checkout and in an installed wheel."""
from __future__ import annotations

import sys
from functools import lru_cache
from importlib.resources import files
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


@lru_cache(maxsize=1)
def rules_dir() -> Path:
    here = Path(__file__).resolve().parent
    checkout = here.parent / "rules"
    if (checkout / "targets.toml").is_file():
        return checkout
    return Path(str(files("archaudit.rules")))


def load_toml(path: Path) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


@lru_cache(maxsize=None)
def load_rule(name: str) -> dict:
    """Load rules/<name>.toml."""
    return load_toml(rules_dir() / f"{name}.toml")
