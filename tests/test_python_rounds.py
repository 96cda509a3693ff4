"""Which functions the gate scan evaluates once a name carries an architecture dependence
(fixtures/pyrounds): uses of the name count, definitions and bindings of it do not."""
import pytest

from archaudit.pipeline import scan
from archaudit.python import gates as G

from conftest import FIXTURES


@pytest.mark.parametrize("text, use", [
    (b"if block_size() == 128:", True),
    (b"x = block_size", True),
    (b"return f(block_size=3)", False),
    (b"def g(block_size=3):", False),
    (b"    block_size = n", False),
    (b"block_size == 3", True),
    (b"block_size: int = 3", True),  # annotated: conservatively a use
    (b"block_size += 1", True),
    (b"def block_size(self):", False),
    (b"async def block_size():", False),
    (b"class block_size:", False),
    (b"undef block_size", True),  # "def" only as a whole word
    (b'f"{block_size=}"', True),
    (b'f"{block_size = !r}"', True),
    (b"block_size", True),
    (b"def f(x: block_size = None):", True),  # an annotation
    (b"x: block_size = make()", True),
    (b"{k: block_size}", True),
])
def test_is_use(text, use):
    p = text.index(b"block_size")
    assert G._is_use(text, p, len(b"block_size")) is use


def _reported(monkeypatch):
    got = []
    orig = G.Interp.report_function

    def record(self, mod, qual, node):
        got.append((mod.name, qual))
        return orig(self, mod, qual, node)

    monkeypatch.setattr(G.Interp, "report_function", record)
    return got, scan(FIXTURES / "pyrounds")


def test_functions_evaluated_and_gates(monkeypatch):
    reported, r = _reported(monkeypatch)
    assert [(g.path, g.line, g.function) for g in r.gates] == [
        ("roundpkg/arch.py", 7, "roundpkg.arch.block_size"),  # found only by its own name (round 2)
        ("roundpkg/arch.py", 13, "roundpkg.arch.launch"),
        ("roundpkg/users.py", 5, "roundpkg.users.reads"),
    ]
    # binds_only (a keyword) and Layer.other (a local of that name) do not use block_size;
    # Layer.block_size shares the name, which is enough to be evaluated
    assert sorted(reported) == [
        ("roundpkg.arch", "block_size"), ("roundpkg.arch", "launch"),
        ("roundpkg.users", "Layer.block_size"), ("roundpkg.users", "formats"), ("roundpkg.users", "reads"),
    ]
    assert r.stats["python_functions_evaluated"] == 5
