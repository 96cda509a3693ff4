"""SARIF 2.1.0 output for code review (GitHub code scanning and other SARIF viewers).

A pure function of the scan, its reportable findings and the repository context: no file is read
here. One run per target (`automationDetails.id` = "archaudit/<target>/", so runs for several GPUs
are separate analyses), one result per gate x target. Gates outside the repository point at the
line that pins their package; the gate itself, the chain and the evidence become related locations
and a code flow. Output is deterministic: no clocks, no random ids, stable ordering.
"""
from __future__ import annotations

import json
import re
from urllib.parse import quote

from .. import __version__
from ..model import BINARY_ONLY, HARDWARE_BOUND, NO_GPU_CODE, PARTIAL, SOFTWARE_ONLY, UNRESOLVED
from ..verdict.baseline import fingerprint, gate_keys

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
INFORMATION_URI = "https://github.com/archaudit/archaudit"
INVENTORY = "gate-inventory"
MAX_RESULTS_PER_RUN = 25_000  # GitHub rejects more
MAX_RELATED = 100  # GitHub shows at most 100 locations per result (and accepts 1,000)
MAX_FLOW = 1_000  # thread flow locations GitHub displays per result
MAX_NOTIFICATIONS = 1_000
MAX_PATCH_IN_MESSAGE = 6_000  # characters of patch inlined in a message

_WHAT_TO_DO = {
    SOFTWARE_ONLY: "Nothing behind this gate needs a feature the GPU lacks: widen the gate (patch below, "
                   "or `archaudit patch`) and propose the change upstream.",
    PARTIAL: "Some kernels behind this gate are stubs on this GPU while others are real: enable only the "
             "real entry points, or keep the fallback for the stubbed ones.",
    HARDWARE_BOUND: "The code behind this gate needs an instruction or resource this GPU lacks: keep the "
                    "gate and use another backend on this GPU.",
    BINARY_ONLY: "Only prebuilt binaries for other GPUs are behind this gate: rebuild from source for this "
                 "GPU or ask upstream for a build that includes it.",
    UNRESOLVED: "archaudit could not decide what this gate protects: check it by hand or on the GPU.",
    NO_GPU_CODE: "No GPU code is behind this gate: it changes only Python (a tile size, a message, a choice "
                 "among Triton kernels); widen it if the behaviour it selects suits this GPU.",
}

RULES = [
    {
        "id": SOFTWARE_ONLY, "name": "SoftwareOnlyGate", "level": "warning", "precision": "medium",
        "short": "Architecture gate excludes a GPU that could run the code",
        "full": "An architecture check excludes the target GPU, but every JIT module and source line "
                "reachable behind it compiles for that GPU without a feature it lacks. The exclusion is "
                "a software decision and can be lifted with a patch to the gate.",
        "tags": ["gpu", "cuda", "portability", "software-only"],
    },
    {
        "id": PARTIAL, "name": "PartialGate", "level": "warning", "precision": "medium",
        "short": "Architecture gate protects code that is only partly real on a GPU",
        "full": "The JIT module behind the gate builds for the target GPU, but some of its kernels are "
                "stubs there (trap-only, empty bodies under #if, CUTLASS/CuTe invalid paths) while others "
                "are real. Enabling the gate wholesale would reach the stubs.",
        "tags": ["gpu", "cuda", "portability", "partial"],
    },
    {
        "id": HARDWARE_BOUND, "name": "HardwareBoundGate", "level": "note", "precision": "high",
        "short": "Architecture gate reflects a real hardware limit of a GPU",
        "full": "Code behind the gate needs an instruction, feature or resource (for example wgmma, "
                "tcgen05, shared memory per block) that the target GPU does not have, or takes a trap-only "
                "branch on it. The gate is right to exclude the GPU.",
        "tags": ["gpu", "cuda", "portability", "hardware-bound"],
    },
    {
        "id": BINARY_ONLY, "name": "BinaryOnlyGate", "level": "warning", "precision": "high",
        "short": "Architecture gate leads to prebuilt binaries without this GPU",
        "full": "The path behind the gate ends in prebuilt cubins or shared objects that were built for "
                "other architectures only; no source is available to build for the target GPU.",
        "tags": ["gpu", "cuda", "portability", "binary-only"],
    },
    {
        "id": UNRESOLVED, "name": "UnresolvedGate", "level": "note", "precision": "low",
        "short": "Architecture gate excludes a GPU for reasons archaudit could not follow",
        "full": "The gate excludes (or may exclude) the target GPU, but its admitted architectures or the "
                "code behind it could not be resolved statically. The reason is in the message.",
        "tags": ["gpu", "cuda", "portability", "unresolved"],
    },
    {
        "id": NO_GPU_CODE, "name": "NoGpuCodeGate", "level": "note", "precision": "medium",
        "short": "Architecture gate that decides only Python",
        "full": "The gate excludes the target GPU, but every path its decision changes was followed (values "
                "read later, the callers it returns or raises to, functions handed on) and none builds, loads "
                "or calls GPU code: it selects Python behaviour (or Triton, which compiles for the running GPU).",
        "tags": ["gpu", "cuda", "portability", "no-gpu-code"],
    },
    {
        "id": INVENTORY, "name": "GateInventory", "level": "note", "precision": "very-high",
        "short": "Architecture gate (inventory)",
        "full": "A place where behaviour depends on the GPU architecture, with the GPUs it admits. "
                "Listed for completeness; it does not exclude the target GPU.",
        "tags": ["gpu", "cuda", "inventory"],
    },
]
_RULE_INDEX = {r["id"]: i for i, r in enumerate(RULES)}
_SUPPRESS_DOC = ("To keep a gate you patched deliberately out of reports, put "
                 "`# archaudit: ignore[{id}]` on the gate's line (`//` in C++).")


def _rule_descriptor(r: dict) -> dict:
    todo = _WHAT_TO_DO.get(r["id"], "No action needed.")
    md = (f"## {r['short']}\n\n{r['full']}\n\n**What to do:** {todo}\n\n"
          "For gates in installed packages the alert points at the line of your repository that pins the "
          "package; the gate, the call chain and the evidence are listed as related locations and as a "
          "code flow. For software-only gates the message carries the patch (GitHub does not show SARIF "
          "`fixes`).\n\n" + _SUPPRESS_DOC.format(id=r["id"]))
    text = f"{r['full']} What to do: {todo} " + _SUPPRESS_DOC.format(id=r["id"]).replace("`", "")
    return {
        "id": r["id"],
        "name": r["name"],
        "shortDescription": {"text": r["short"]},
        "fullDescription": {"text": r["full"]},
        "defaultConfiguration": {"level": r["level"]},
        "help": {"text": text, "markdown": md},
        "helpUri": f"{INFORMATION_URI}#sarif-baselines-and-ci",
        "properties": {"tags": r["tags"], "precision": r["precision"],
                       "problem.severity": {"note": "recommendation"}.get(r["level"], r["level"])},
    }


def _uri(path: str) -> str:
    return quote(path, safe="/")


def _region(line: int | None, col: int | None = None) -> dict | None:
    if not line or line < 1:
        return None
    d = {"startLine": int(line)}
    if col and col >= 1:
        d["startColumn"] = int(col)
    return d


class _Locator:
    """Physical locations: repository files under %SRCROOT%, scanned files under SCANROOT."""

    def __init__(self, repo):
        self.repo = repo

    def artifact(self, path: str) -> dict:
        rel = self.repo.rel(path) if self.repo is not None else None
        if rel is not None:
            return {"uri": _uri(rel), "uriBaseId": "%SRCROOT%"}
        return {"uri": _uri(path), "uriBaseId": "SCANROOT"}

    def physical(self, path: str, line: int | None, col: int | None = None) -> dict:
        d = {"artifactLocation": self.artifact(path)}
        reg = _region(line, col)
        if reg:
            d["region"] = reg
        return d

    def location(self, path: str, line: int | None, text: str, col: int | None = None, id_: int | None = None) -> dict:
        d: dict = {}
        if id_ is not None:
            d["id"] = id_
        d["physicalLocation"] = self.physical(path, line, col)
        d["message"] = {"text": text}
        return d


def _gpu_label(reg, name: str) -> str:
    g = reg.by_name.get(name)
    if g is not None and g.products:
        return f"{name} ({g.products[0]})"
    return name


def _admits_text(reg, admits) -> str:
    names = reg.sort_names(admits)
    if not names:
        return "no GPU"
    if frozenset(names) == reg.all:
        return "every GPU"
    return ", ".join(names)


def _blocks(f) -> str:
    mods = sorted({m.name for m in f.modules})
    if mods:
        return "the JIT module" + ("s " if len(mods) > 1 else " ") + ", ".join(mods)
    g = f.gate
    return {
        "argument": "the build it configures",
        "branch": "the branch it guards",
        "after-early-exit": "everything after its early exit",
        "conditional-expression": "the value it selects",
        "assert": "the code after the assertion",
    }.get(g.region, "the code it guards")


def _message(r, reg, versions: dict) -> dict:
    f = r.finding
    g = f.gate
    pkg = f"{g.package} {versions.get(g.package, '')}".strip() if g.package else "the scanned code"
    head = (f"`{_short(g.expr)}` in {g.function} ({pkg}, {g.path}:{g.line}) excludes "
            f"{_gpu_label(reg, f.target)} from {_blocks(f)}; it admits {_admits_text(reg, g.admits)}.")
    verdict = f"Verdict for {f.target}: {f.verdict}" + (f": {f.reason}" if f.reason else "") + "."
    ev = ""
    if f.evidence:
        e = f.evidence[0]
        more = f" (+{len(f.evidence) - 1} more)" if len(f.evidence) > 1 else ""
        ev = f" Evidence: {e.feature} at {e.path}:{e.line}{more}."
    todo = _WHAT_TO_DO[f.verdict] if f.verdict in _WHAT_TO_DO else ""
    text = f"{head} {verdict}{ev} {todo}"
    md = text
    if f.patch:
        if len(f.patch) <= MAX_PATCH_IN_MESSAGE:
            text += "\n\nPatch:\n" + f.patch
            md += "\n\nPatch:\n\n```diff\n" + f.patch.rstrip("\n") + "\n```"
        else:
            note = f"\n\nThe patch ({len(f.patch)} characters) is too long to show here: run `archaudit patch`."
            text += note
            md += note
    return {"text": text, "markdown": md}


def _short(expr: str, n: int = 120) -> str:
    s = re.sub(r"\s+", " ", expr).strip()
    return s if len(s) <= n else s[: n - 1] + "…"


def _fixes(f, loc: _Locator) -> list[dict]:
    """SARIF fixes from a unified diff: one artifactChange per file, one replacement per run of
    removed/added lines."""
    if not f.patch:
        return []
    changes = []
    for path, reps in parse_unified_diff(f.patch):
        if reps:
            changes.append({"artifactLocation": loc.artifact(path), "replacements": reps})
    if not changes:
        return []
    return [{"description": {"text": f"Admit {f.target} in this gate"}, "artifactChanges": changes}]


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def parse_unified_diff(patch: str) -> list[tuple[str, list[dict]]]:
    """[(path, [replacement])] of a unified diff; paths lose their a/ b/ prefixes."""
    out: list[tuple[str, list[dict]]] = []
    path = None
    reps: list[dict] = []
    old_line = 0
    removed: list[str] = []
    added: list[str] = []
    start = 0

    def flush():
        nonlocal removed, added
        if removed or added:
            if removed:
                region = {"startLine": start, "startColumn": 1, "endLine": start + len(removed), "endColumn": 1}
            else:  # pure insertion: an empty region at the start of the line
                region = {"startLine": start, "startColumn": 1, "endLine": start, "endColumn": 1}
            rep = {"deletedRegion": region}
            if added:
                rep["insertedContent"] = {"text": "".join(a + "\n" for a in added)}
            reps.append(rep)
        removed, added = [], []

    for line in patch.splitlines():
        if line.startswith("--- "):
            flush()
            continue
        if line.startswith("+++ "):
            if path is not None:
                out.append((path, reps))
            p = line[4:].split("\t", 1)[0].strip()
            path = p[2:] if p.startswith(("a/", "b/")) else p
            reps = []
            continue
        m = _HUNK.match(line)
        if m:
            flush()
            old_line = int(m.group(1))
            continue
        if path is None:
            continue
        if line.startswith("-"):
            if not removed and not added:
                start = old_line
            removed.append(line[1:])
            old_line += 1
        elif line.startswith("+"):
            if not removed and not added:
                start = old_line
            added.append(line[1:])
        elif line.startswith("\\"):
            continue
        else:
            flush()
            old_line += 1
    flush()
    if path is not None:
        out.append((path, reps))
    return out


def _result(r, reg, loc: _Locator, versions: dict, with_baseline: bool) -> dict:
    f = r.finding
    rule = RULES[_RULE_INDEX[f.verdict]] if f.verdict in _RULE_INDEX else RULES[_RULE_INDEX[UNRESOLVED]]
    primary, related = _locations(f, loc)
    res: dict = {
        "ruleId": rule["id"],
        "ruleIndex": _RULE_INDEX[rule["id"]],
        "level": rule["level"],
        "message": _message(r, reg, versions),
        "locations": [primary],
    }
    if related:
        res["relatedLocations"] = related
    flow = _code_flow(f, loc)
    if len(flow) > 1:
        res["codeFlows"] = [{"message": {"text": f"from the gate to what decides the verdict on {f.target}"},
                             "threadFlows": [{"locations": flow[:MAX_FLOW]}]}]
    fixes = _fixes(f, loc)
    if fixes:
        res["fixes"] = fixes
    res["partialFingerprints"] = {"primaryLocationLineHash": r.fingerprint, "archaudit/gate/v1": r.fingerprint}
    res["properties"] = _properties(f, reg, versions)
    if r.suppressed is not None:
        res["suppressions"] = [{"kind": "inSource", "justification": r.suppressed}]
    if with_baseline and r.new is not None:
        res["baselineState"] = "new" if r.new else "unchanged"
    return res


def _locations(f, loc: _Locator) -> tuple[dict, list[dict]]:
    """The primary location (the gate, or the line pinning its package when the gate is outside
    the repository) and the related ones (evidence, chain, stub kernels), MAX_RELATED at most."""
    g = f.gate
    related: list[dict] = []
    in_repo = loc.repo is not None and loc.repo.rel(g.path) is not None
    pin = None if in_repo or loc.repo is None else loc.repo.pin(g.package)
    if pin is not None:
        primary = {
            "physicalLocation": {"artifactLocation": {"uri": _uri(pin.path), "uriBaseId": "%SRCROOT%"},
                                 "region": {"startLine": pin.line}},
            "message": {"text": f"{g.package} is pinned here; the gate is {g.path}:{g.line} in the installed package"},
        }
    else:
        primary = {"physicalLocation": loc.physical(g.path, g.line, g.col)}

    def add(path, line, text, col=None):
        if len(related) < MAX_RELATED:
            related.append(loc.location(path, line, text, col, len(related)))

    if pin is not None:
        add(g.path, g.line, f"the gate: {_short(g.expr)}", g.col)
    for e in f.evidence:
        on = f" (supported on {', '.join(e.supported_on)})" if e.supported_on else ""
        add(e.path, e.line, f"evidence: {e.feature}{on}" + (f": {e.message}" if e.message else ""))
    for lk in f.chain:
        add(lk.path, lk.line, f"{lk.kind}: {lk.text}" + (f" ({lk.how})" if lk.how else ""))
    for m in f.modules:
        for k in m.kernels:
            if k.status != "real":
                add(k.path, k.line, f"kernel {k.name} of {m.name} is {k.status} on {m.compile_target}")
    return primary, related


def _code_flow(f, loc: _Locator) -> list[dict]:
    """The gate, then its chain, then the evidence, as one thread flow's locations."""
    g = f.gate
    flow = [{"location": loc.location(g.path, g.line, f"gate excludes {f.target}: {_short(g.expr)}", g.col),
             "nestingLevel": 0}]
    for lk in f.chain:
        flow.append({"location": loc.location(lk.path, lk.line, f"{lk.kind}: {lk.text}" + (f" ({lk.how})" if lk.how else "")),
                     "nestingLevel": 1})
    for e in f.evidence:
        flow.append({"location": loc.location(e.path, e.line, f"needs {e.feature}"), "nestingLevel": 2})
    return flow


def _properties(f, reg, versions: dict) -> dict:
    g = f.gate
    props = {
        "target": f.target,
        "verdict": f.verdict,
        "admits": reg.sort_names(g.admits),
        "gateKind": g.kind,
        "function": g.function,
        "expr": _short(g.expr, 400),
        "package": g.package,
        "packageVersion": versions.get(g.package) if g.package else None,
        "resolution": g.resolution,
        "gatePath": g.path,
        "gateLine": g.line,
    }
    if f.feature:
        props["feature"] = f.feature
    if f.modules:
        props["modules"] = [{"name": m.name, "compileTarget": m.compile_target, "prediction": m.prediction}
                            for m in f.modules]
    return {k: v for k, v in props.items() if v is not None}


def _inventory_result(g, target: str, reg, loc: _Locator, key: str, fp: str, versions: dict) -> dict:
    ok = target in g.admits
    text = (f"`{_short(g.expr)}` in {g.function} ({g.path}:{g.line}) admits {_admits_text(reg, g.admits)}; "
            f"{target} is {'admitted' if ok else 'excluded'}.")
    return {
        "ruleId": INVENTORY,
        "ruleIndex": _RULE_INDEX[INVENTORY],
        "level": "note",
        "message": {"text": text},
        "locations": [{"physicalLocation": loc.physical(g.path, g.line, g.col)}],
        "partialFingerprints": {"primaryLocationLineHash": fp, "archaudit/gate/v1": fp},
        "properties": {"target": target, "verdict": "admitted" if ok else "excluded",
                       "admits": reg.sort_names(g.admits), "gateKind": g.kind, "function": g.function,
                       **({"package": g.package} if g.package else {})},
    }


def _notifications(diagnostics, loc: _Locator, extra) -> list[dict]:
    out = []
    for d in diagnostics:
        n = {"level": d.severity if d.severity in ("error", "warning", "note") else "warning",
             "message": {"text": f"{d.kind}: {d.message}"},
             "descriptor": {"id": d.kind},
             "locations": [{"physicalLocation": loc.physical(d.path, d.line)}]}
        out.append(n)
    dropped = len(out) - MAX_NOTIFICATIONS
    out = out[:MAX_NOTIFICATIONS]
    if dropped > 0:
        out.append({"level": "note", "message": {"text": f"{dropped} more diagnostics not listed (see --format json)"},
                    "descriptor": {"id": "truncated"}})
    for kind, text in extra:
        out.append({"level": "note", "message": {"text": text}, "descriptor": {"id": kind}})
    return out


def base_uri(path) -> str:
    u = path.as_uri()
    return u if u.endswith("/") else u + "/"


def to_sarif(result, reg, items, repo=None, *, inventory: bool = False, with_baseline: bool = False,
             notes: list[tuple[str, str]] | None = None) -> dict:
    """The SARIF log (a dict) for `items` (baseline.Reported) of `result`, one run per target."""
    loc = _Locator(repo)
    versions = {d.name: d.version for d in result.packages}
    targets = [t.gpu.name for t in result.targets] or sorted({r.finding.target for r in items})
    keys = gate_keys(list(result.gates)) if inventory else []
    runs = []
    for t in targets:
        mine = [r for r in items if r.finding.target == t]
        results = [_result(r, reg, loc, versions, with_baseline) for r in mine]
        if inventory:
            reported = {(r.finding.gate.path, r.finding.gate.line, r.finding.gate.col, r.finding.gate.kind) for r in mine}
            for g, k in zip(result.gates, keys):
                if (g.path, g.line, g.col, g.kind) not in reported:
                    results.append(_inventory_result(g, t, reg, loc, k, fingerprint(INVENTORY, k, t), versions))
        run_notes = list(notes or [])
        missing = sorted({r.finding.gate.package for r in mine
                          if repo is not None and repo.root is not None and r.finding.gate.package
                          and repo.rel(r.finding.gate.path) is None and repo.pin(r.finding.gate.package) is None})
        for p in missing:
            run_notes.append(("no-pin", f"{p} is not pinned in any requirements/constraints/pyproject/lock file of "
                                        f"the repository; its results point into the scanned files (SCANROOT)"))
        if len(results) > MAX_RESULTS_PER_RUN:
            # keep the most severe: rule order is by how actionable a verdict is
            order = {"warning": 0, "error": 0, "note": 1}
            results.sort(key=lambda x: order.get(x["level"], 2))
            run_notes.append(("truncated", f"{len(results) - MAX_RESULTS_PER_RUN} results left out: GitHub accepts at "
                                           f"most {MAX_RESULTS_PER_RUN} per run"))
            results = results[:MAX_RESULTS_PER_RUN]
        base = {}
        if repo is not None and repo.root is not None:
            base["%SRCROOT%"] = {"uri": base_uri(repo.root), "description": {"text": "the repository work tree"}}
        elif repo is not None and repo.scan_root is not None and repo.scan_is_dir:
            base["%SRCROOT%"] = {"uri": base_uri(repo.scan_root), "description": {"text": "the scan root"}}
        if repo is not None and repo.scan_root is not None:
            what = "the scanned directory" if repo.scan_is_dir else "members of the scanned wheel"
            base["SCANROOT"] = {"uri": base_uri(repo.scan_root), "description": {"text": what}}
        run = {
            "tool": {"driver": {
                "name": "archaudit",
                "fullName": f"archaudit {__version__}",
                "version": __version__,
                "semanticVersion": __version__,
                "informationUri": INFORMATION_URI,
                "rules": [_rule_descriptor(r) for r in RULES],
            }},
            "automationDetails": {"id": f"archaudit/{t}/",
                                  "description": {"text": f"archaudit architecture gates for {_gpu_label(reg, t)}"}},
            "invocations": [{"executionSuccessful": True,
                             "toolExecutionNotifications": _notifications(result.diagnostics, loc, run_notes)}],
        }
        if base:
            run["originalUriBaseIds"] = base
        run["results"] = results
        run["columnKind"] = "unicodeCodePoints"
        run["properties"] = {
            "target": t,
            "packages": [{"name": d.name, "version": d.version} for d in sorted(result.packages, key=lambda d: d.name.lower())],
        }
        runs.append(run)
    return {"$schema": SCHEMA_URI, "version": "2.1.0", "runs": runs}


def dumps(log: dict) -> str:
    return json.dumps(log, indent=2, ensure_ascii=False) + "\n"


def split_by_run(log: dict) -> list[tuple[str, dict]]:
    """One log per run, named by the run's target (for uploads over the size limit)."""
    out = []
    for run in log["runs"]:
        out.append((run["properties"]["target"], {"$schema": log["$schema"], "version": log["version"], "runs": [run]}))
    return out
