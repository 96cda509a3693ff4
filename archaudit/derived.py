"""What the commands other than `scan` make of a scan's result, on the scan's cache.

`patch`, `baseline`, `diff` and `explain --target` run the scan exactly as `scan` does (the same
cache, the same result) and then compute their output from that result alone, plus, for `patch`,
the bytes of the files its edits touch. So their reports are the same with and without the cache.

The only further work, the combined patch (each edit re-evaluated with the others applied), is
stored beside the scan's result (a scan of one target that runs the analysis makes it right away
with its own patcher, so that `patch` after `scan` only reads): under a key made of the result key (every input file's content
hash, the file listing and the targets: scancache.Fingerprint.key), the command and its options.
The cache's version tag covers archaudit's code and rules. A changed input file changes the result
key, even when early cutoff proved the result itself unchanged, since a patch quotes file lines.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .cache import Cache, key_of
from .model import PARTIAL, SOFTWARE_ONLY, Gate
from .python.index import Index
from .runtime import run_with_big_stack
from .scancache import input_fingerprint, inputs_unchanged
from .sources import WheelSource, open_source
from .targets import Gpu, Registry
from .verdict.inventory import protected_sinks
from .verdict.judge import patch_gates_of, protected_functions
from .verdict.patch import Patcher, combined_patch, module_binding, reevaluate_gate

DERIVED_NS = "derived"
DERIVED_VERSION = "derived-v1"


def cached(store: Cache | None, result, what: str, args: tuple, compute: Callable[[], object]):
    """compute(), stored under the scan result's key; a miss, no cache, or a result that was not
    stored (its inputs changed during the scan) computes it."""
    key = result.cache.get("key") if isinstance(getattr(result, "cache", None), dict) else None
    if store is None or not store.enabled or key is None:
        return compute()
    k = key_of(DERIVED_VERSION, what, key, *args)
    value = store.get(DERIVED_NS, k)
    if value is not None:
        return value
    value = compute()
    store.put(DERIVED_NS, k, value)
    return value


def cached_by_inputs(store: Cache | None, path, what: str, args: tuple, compute: Callable[[], object]):
    """compute(), stored under the fingerprint of path's inputs (for outputs made from the files
    alone, such as the whole call graph); stored only when no input changed while it ran."""
    if store is None or not store.enabled:
        return compute()
    source, fp = input_fingerprint(path, store)
    k = key_of(DERIVED_VERSION, what, fp.key([]), *args)
    value = store.get(DERIVED_NS, k)
    if value is not None:
        return value
    value = compute()
    if inputs_unchanged(source, fp):
        store.put(DERIVED_NS, k, value)
    return value


def fresh_patcher(path, reg: Registry):
    """A Patcher over a new, lazily parsed index of the scan root: what a combined patch needs
    without the scan's in-memory state, which a cached result does not have."""
    source = open_source(path)
    files = source.files()
    py_files = [f for f in files if f.endswith(".py")]
    path_based = bool(source.distributions()) or isinstance(source, WheelSource)
    index = Index(source, py_files, path_based=path_based)
    return Patcher(source, index, reg, lambda s, g: reevaluate_gate(s, g, reg, py_files, path_based),
                   module_binding(index, reg))


@dataclass
class PatchOutput:
    diff: str  # the combined unified diff ("" when there is nothing to patch)
    done: list[tuple[str, str, int, str]] = field(default_factory=list)  # (mark, path, line, description)
    skipped: dict[str, int] = field(default_factory=dict)  # verdict -> findings left alone


def patch_output(result, path, gpu: Gpu, include_partial: bool, reg: Registry) -> PatchOutput:
    """The combined patch that makes every software-only (and with include_partial, partial) gate
    of the result admit gpu: a pure function of the result and the files under path."""
    wanted = (SOFTWARE_ONLY, PARTIAL) if include_partial else (SOFTWARE_ONLY,)
    gates: list[Gate] = []
    own: set[str] = set()  # the modules of the findings patched (their build calls may be edited)
    elsewhere: list[tuple[Gate, list[Gate]]] = []  # findings whose plan edits only other places
    out = PatchOutput("")
    for f in result.findings:
        if f.target != gpu.name:
            continue
        if f.verdict in wanted:
            plan = patch_gates_of(f, result.gates)
            gates += plan
            own |= {m.name for m in f.modules}
            if all(_place(g) != _place(f.gate) for g in plan):
                elsewhere.append((f.gate, plan))
        else:
            out.skipped[f.verdict] = out.skipped.get(f.verdict, 0) + 1
    if not gates:
        return out

    def run():
        # the scan's own patcher when this process ran the analysis (its index is loaded), else
        # one over a fresh index: the edits and their checks read the files, not the scan's state
        patcher = result.patcher if result.patcher is not None else fresh_patcher(path, reg)
        patcher.protected = protected_functions(result.findings, result.gates, gpu.name)
        patcher.protected_sinks = protected_sinks(result.modules, gpu.name)
        patcher.own_modules = own
        try:
            return combined_patch(patcher, gates, gpu)
        finally:
            patcher.protected = {}
            patcher.protected_sinks, patcher.own_modules = {}, set()

    diff, done = run_with_big_stack(run)
    out.diff = diff
    for g, p in done:
        mark = "patched" if p.new_text is not None else "covered" if p.covered else "NOT patched"
        out.done.append((mark, g.path, g.line, p.description))
    out.done = sorted(out.done + _findings_edited_elsewhere(elsewhere, out.done), key=lambda d: (d[1], d[2]))
    return out


def _place(g: Gate) -> tuple[str, int]:
    return (g.path, g.line)


def _findings_edited_elsewhere(elsewhere: list[tuple[Gate, list[Gate]]],
                               done: list[tuple[str, str, int, str]]) -> list[tuple[str, str, int, str]]:
    """A line for each finding whose plan edits other places only (a build-flag gate at a generator,
    edited at its build call): the finding is not patched when one of those edits was not made,
    and its line says where the edit is, or why it was refused."""
    at = {(path, line): (mark, text) for mark, path, line, text in done}
    out = []
    for gate, plan in elsewhere:
        marks = [(g, at[_place(g)]) for g in plan if _place(g) in at]
        if not marks:
            continue
        refused = [(g, m) for g, m in marks if m[0] == "NOT patched"]
        g0, (mark, text) = refused[0] if refused else marks[0]
        if not refused and any(m[0] == "patched" for _g, m in marks):
            mark = "patched"
        out.append((mark, gate.path, gate.line, f"by the edit at {g0.path}:{g0.line}: {text}"))
    return out


def _patch_args(gpu: Gpu, include_partial: bool) -> tuple:
    return (gpu.name, "partial" if include_partial else "software-only")


def cached_patch_output(store: Cache | None, result, path, gpu: Gpu, include_partial: bool,
                        reg: Registry) -> PatchOutput:
    return cached(store, result, "patch", _patch_args(gpu, include_partial),
                  lambda: patch_output(result, path, gpu, include_partial, reg))


def store_scan_patch(store: Cache, result, reg: Registry) -> None:
    """After a scan of one target that ran the analysis and stored its result: the combined patch
    of its software-only gates, made with the scan's patcher and stored as `archaudit patch` would
    store it, so that the patch after a scan (the patch-and-rescan workflow) is read back too.
    `patch` scans one target: a scan of several has another result key, nothing to make it for."""
    if len(result.targets) != 1 or result.patcher is None or result.cache.get("key") is None:
        return
    gpu = result.targets[0].gpu
    k = key_of(DERIVED_VERSION, "patch", result.cache["key"], *_patch_args(gpu, False))
    try:
        out = patch_output(result, None, gpu, False, reg)
    except Exception:  # noqa: BLE001 - the scan stands; `archaudit patch` makes it and says why
        return
    store.put(DERIVED_NS, k, out)
