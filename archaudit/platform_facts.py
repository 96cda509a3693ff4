"""Findings whose path needs a platform facility the target's systems lack.

A gate's condition can test a system facility beside the architecture (`if device_sm not in (100,
103) or not has_multicast: return None`; python/platform_needs.py reads those tests into
Gate.platform_needs). A gate whose admitted set was inferred through the function holding such a
test (`state is None` after `state = _init_state()`) needs the facility as well, when it admits
what that test's gate admits: its decision is that gate's. On a GPU whose systems lack the
facility (targets.toml `lacks`), no edit of an architecture test brings the guarded code there:
the finding is hardware-bound, with the platform test as its evidence.
"""
from __future__ import annotations

from .model import HARDWARE_BOUND, Evidence, Finding, Gate
from .ruledata import load_rule
from .targets import Gpu

# (feature, the flag test as written, path and line of the gate whose condition holds it)
Need = tuple[str, str, str, int]


def needs_index(gates: list[Gate]) -> dict[str, list[Gate]]:
    """The gates with platform needs, by the function that holds them."""
    out: dict[str, list[Gate]] = {}
    for g in gates:
        if g.platform_needs:
            out.setdefault(g.function, []).append(g)
    return out


def needs_of(g: Gate, index: dict[str, list[Gate]]) -> list[Need]:
    """g's own platform needs and those of the same decision in the functions its resolution
    went through."""
    out: list[Need] = [(fac, term, g.path, g.line) for fac, term in g.platform_needs]
    if not index:
        return out
    for v in g.via:
        if not v.startswith("inferred "):
            continue
        for h in index.get(v[len("inferred "):], ()):
            if h is not g and h.admits == g.admits:
                out.extend((fac, term, h.path, h.line) for fac, term in h.platform_needs)
    return list(dict.fromkeys(out))


def refuse_on_platform(f: Finding, gpu: Gpu, needs: list[Need]) -> bool:
    """Make f hardware-bound when the target's systems lack a facility its path needs; True if so."""
    lacked = [n for n in needs if getattr(gpu, n[0], "unknown") == "no"]
    if not lacked or f.verdict == HARDWARE_BOUND:
        return False
    what = {r["needs"]: r.get("description", r["needs"]) for r in load_rule("gates").get("platform_flag", [])}
    fac, term, path, line = lacked[0]
    f.evidence.insert(0, Evidence(path, line, f"platform.{fac}", (),
                                  f"`{term}`: the guarded code needs {what.get(fac, fac)}; "
                                  f"{gpu.name} systems lack it"))
    f.reason = (f"the path needs {what.get(fac, fac)} (`{term}` at {path}:{line}), which {gpu.name} systems "
                f"lack: a platform fact, not an instruction, so no edit of the architecture test admits "
                f"{gpu.name} (was {f.verdict}: {f.reason})")
    f.verdict = HARDWARE_BOUND
    f.patch = None
    return True
