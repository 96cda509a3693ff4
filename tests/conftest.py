import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"
sys.path.insert(0, str(REPO / "bench"))


def one_module_package(root: Path, source: bytes) -> Path:
    """A package of one module under root: pkg/__init__.py (empty) and pkg/m.py (source)."""
    pkg = root / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_bytes(b"")
    (pkg / "m.py").write_bytes(source)
    return pkg


# a module whose names are defined more than once: `major` is redefined (the second reads the
# capability), `W.run` has an @overload stub before its implementation (a gate on line 11)
REDEFINED_MODULE = (
    b"import torch\n"
    b"from typing import overload\n"
    b"def major():\n"
    b"    return 9\n"
    b"def major():\n"
    b"    return torch.cuda.get_device_capability()[0]\n"
    b"class W:\n"
    b"    @overload\n"
    b"    def run(self, x: int) -> int: ...\n"
    b"    def run(self, x):\n"
    b"        if torch.cuda.get_device_capability()[0] == 12:\n"
    b"            return 1\n"
    b"def pick():\n"
    b"    if major() == 10:\n"
    b"        return 1\n"
)


@pytest.fixture(scope="session")
def reg():
    from archaudit.targets import registry

    return registry()


def _corpus(name):
    import corpus

    try:
        return corpus.site_packages(name)
    except Exception as e:  # network or pip failure: the real-package tests cannot run here
        pytest.fail(f"could not fetch the pinned corpus {name}: {e}")


@pytest.fixture(scope="session")
def sp072():
    return _corpus("fi072")


@pytest.fixture(scope="session")
def sp0615():
    return _corpus("fi0615")


@pytest.fixture(scope="session")
def scan072(sp072):
    from archaudit.pipeline import scan

    return scan(sp072)
