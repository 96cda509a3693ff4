"""A refusal written as a returned message (fixtures/refusals): `if major not in (9, 10): return
"FA4 requires ..."` guards what follows, like a raise, so sm_120 is excluded, not admitted; a
returned name (`return "fa3"`) stays a selection."""
from archaudit.pipeline import scan

from conftest import FIXTURES

FA4 = "refpkg/fa4.py"


def test_message_returns_are_refusals(reg):
    res = scan(FIXTURES / "refusals", [reg.parse("sm_120")])
    gates = {g.line: (g.region, sorted(g.admits)) for g in res.gates if g.path == FA4}
    assert gates == {
        6: ("after-early-exit", ["sm_100", "sm_103", "sm_107", "sm_90"]),
        13: ("after-early-exit", ["sm_100", "sm_103", "sm_107", "sm_90"]),
        18: ("after-early-exit", ["sm_100"]),
        24: ("branch", ["sm_90"]),
        # `return f"compute_capability={capability}"` reports a value: a refusal, what follows
        # is guarded; `return f"sm{major}{minor}a"` names a choice
        31: ("after-early-exit", ["sm_90"]),
        38: ("branch", ["sm_100", "sm_103", "sm_107"]),
    }
    assert {(f.gate.line, f.verdict) for f in res.findings if f.gate.path == FA4} == {
        (6, "no-gpu-code"), (13, "no-gpu-code"), (18, "unresolved"), (24, "unresolved"), (31, "unresolved"),
        (38, "unresolved")}


AVAIL = "refpkg/availability.py"


def test_returned_calls_of_functions_that_only_refuse(reg):
    """`return report_unmet(msg, raise_error=...)` (raises or returns False) and `return
    log_unmet(msg)` (logs, returns False) leave the function as `return False` would: a refusal.
    A returned call of a function that returns its argument, or of a procedure that does the work
    and returns None (`return scale_in_place(x)`), is the guarded path: a selection."""
    res = scan(FIXTURES / "refusals", [reg.parse("sm_120")])
    gates = {g.line: (g.region, sorted(g.admits)) for g in res.gates if g.path == AVAIL}
    assert gates == {
        27: ("after-early-exit", ["sm_100", "sm_103", "sm_107", "sm_90"]),
        35: ("after-early-exit", ["sm_100", "sm_103", "sm_107", "sm_110", "sm_120", "sm_121", "sm_90"]),
        41: ("branch", ["sm_90"]),
        47: ("branch", ["sm_100", "sm_103", "sm_107", "sm_110", "sm_120", "sm_121", "sm_90"]),
        54: ("after-early-exit", ["sm_90"]),
        # `if error is not None: return error`, error a message or None: the reason passed on
        61: ("after-early-exit", ["sm_90"]),
        # `if backend is not None: return backend`, backend "fa3" or None: a selection
        67: ("conditional-expression", ["sm_90"]),
        68: ("branch", ["sm_90"]),
    }
    assert {(f.gate.line, f.verdict) for f in res.findings if f.gate.path == AVAIL} == {
        (27, "unresolved"), (41, "unresolved"), (54, "unresolved"), (61, "unresolved"), (67, "unresolved"),
        (68, "unresolved")}
