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
