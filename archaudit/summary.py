"""The first screen of a scan, as data: per target, how many gates stop it, which can be patched,
which features are hardware-bound and why, and the unresolved ones counted by reason.

Formatters print a Summary (report/text.py); nothing here prints. Labels are short names of the
JIT modules behind a finding (`cake_fmha_context_bf16_*` for a module named from placeholders),
so that the dozens of variants of one generator read as one feature.
"""
from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field

from .model import BINARY_ONLY, HARDWARE_BOUND, PARTIAL, SOFTWARE_ONLY, UNRESOLVED

# how many lines of each list the first screen holds; the rest is counted on one line
MAX_PATCH_LINES = 10
MAX_HARDWARE_LINES = 12
MAX_BINARY_LINES = 4
MAX_REASON_LINES = 8

_HEX = re.compile(r"_(?=[0-9a-f]*\d)[0-9a-f]{8,}(?=_|$)")


def _clean(name: str) -> str:
    """A literal module name without build hashes (`_34d36b82be62`) and stray underscores."""
    return _HEX.sub("", name).strip("_/ ")


def module_label(name: str, sources=()) -> str:
    """A short name for a JIT module: its literal name, or what its name starts with before the
    first placeholder (`cake_fmha_context_bf16_{target}_...` -> `cake_fmha_context_bf16_*`), or for
    alternatives `{a_sm100a|a_sm103a}` their common start; a name that starts with a placeholder
    (`{name}_{arch}`) is named after its first source file; a prebuilt artifact
    (`<hash>/fmha/trtllm-gen/`) after its path."""
    n = name.strip()
    if not n:
        return ""
    m = re.match(r"^\{([^{}]*\|[^{}]*)\}", n)
    if m:  # alternatives first: their common start, then the rest of the name
        alts = m.group(1).split("|")
        common = os.path.commonprefix(alts)
        if len(set(alts)) > 1 and "_" in common:
            common = common[: common.rfind("_") + 1]
        n = common + ("{*}" if len(set(alts)) > 1 else "") + n[m.end():]
    if "/" in n and "{" not in n.split("/", 1)[0]:  # an artifact path
        parts = [p for p in n.split("/") if p and not re.fullmatch(r"[0-9a-f]{16,}", p) and "." not in p]
        if parts:
            return "prebuilt " + "/".join(parts[:3])
    cut = n.find("{")
    if cut < 0:
        return _clean(n)
    prefix = _clean(n[:cut])
    if len(prefix) >= 3 and "/" not in prefix:
        return prefix + "_*"
    for s in sources:
        stem = os.path.basename(str(s)).split(".", 1)[0]
        stem = re.sub(r"_(jit_)?(binding|kernel|ops|jit)$", "", _HEX.sub("", stem))
        stem = _clean(stem)
        if stem:
            return stem + "_*" if not stem.endswith("*") else stem
    return ""


def _evidence_label(path: str) -> str:
    return _clean(os.path.basename(path).split(".", 1)[0]) or path


def feature_label(f) -> str:
    """The feature a finding belongs to: the labels of the JIT modules that decide its verdict
    (for hardware-bound and binary-only, those that fail, are stubs or are prebuilt)."""
    mods = list(f.modules)
    if f.verdict in (HARDWARE_BOUND, BINARY_ONLY):
        deciding = [m for m in mods if m.prediction in ("fails", "stub", "binary")] or [
            m for m in mods if any(k.status in ("empty-stub", "trap-stub") for k in m.kernels)]
        ev = next((e for e in f.evidence if e.path and e.feature != "prebuilt-code"), None)
        if not deciding and ev is not None:
            # the verdict comes from code outside the modules named (a CuTe DSL kernel in Python,
            # a header the entry points reach): the file of the evidence names the feature
            return _evidence_label(ev.path)
        mods = deciding or mods
    labels: list[str] = []
    for m in mods:
        lab = module_label(m.name, m.sources)
        if lab and lab not in labels:
            labels.append(lab)
    if not labels:
        ev = next((e for e in f.evidence if e.path), None)
        if ev is not None:
            labels.append(_evidence_label(ev.path))
        else:
            labels.append(f.gate.function.rsplit(".", 1)[-1] if f.gate.function else f.gate.path)
    labels.sort()
    return ", ".join(labels[:2]) + (f" +{len(labels) - 2}" if len(labels) > 2 else "")


def _compact_targets(names) -> str:
    """sm_100a sm_100f sm_103a -> sm_100a/f sm_103a."""
    by: dict[str, list[str]] = {}
    for n in names:
        m = re.fullmatch(r"(sm_\d+)([af]?)", n)
        base, suf = (m.group(1), m.group(2)) if m else (n, "")
        by.setdefault(base, []).append(suf)
    out = []
    for base, sufs in by.items():
        out.append(base + "/".join(s for s in sufs if s) if any(sufs) else base)
    return " ".join(out)


def evidence_why(e, compile_target: str) -> str:
    """One evidence line as the reason a feature is hardware-bound (without its location: the
    finding's evidence lines give it)."""
    if e.feature == "trap-stub":
        return f"its kernels trap on {compile_target}"
    if e.feature == "empty-stub":
        return f"its kernels are empty on {compile_target}"
    if e.feature == "prebuilt-code":
        archs = _compact_targets(e.supported_on)
        return "prebuilt code" + (f" for {archs} only" if archs else ", built for other GPUs")
    if e.supported_on:
        return f"needs {e.feature} (only {_compact_targets(e.supported_on)})"
    return e.feature


def _finding_why(f, compile_target: str) -> str:
    evs = [e for e in f.evidence if e.feature != "prebuilt-code"] or list(f.evidence)
    if evs:
        return evidence_why(evs[0], compile_target)
    return first_clause(f.reason)


# Unresolved reasons, by what stopped the analysis: (pattern, label). The category of a reason
# is the one whose pattern matches earliest in it (the first obstacle named).
REASON_CATEGORIES: tuple[tuple[str, str], ...] = (
    (r"test's outcome is not decided by the architecture alone",
     "its test is not decided by the architecture alone (run-time values)"),
    (r"\bwrites [\w.\[\]\"']+", "its outcome is stored (an attribute, item or global) and read elsewhere"),
    (r"setting `[^`]*` .*is read as", "a setting it turns on is read in several classes"),
    (r"is named here other than by a call", "a function it changes is referenced, not only called"),
    (r"callers (were )?not searched", "callers not searched (the name is in too many modules)"),
    (r"callers are more than \d+ levels", "callers more than 3 levels above the gate"),
    (r"nothing in the scan calls it", "an API predicate: its callers are outside the scan"),
    (r"module-level name it binds", "it binds a module-level name that can be read anywhere"),
    (r"calls code outside the scan|code outside the scan that can hold GPU code",
     "calls code outside the scan (cutlass, deep_gemm, ...) whose GPU support is not analysed"),
    (r"a call archaudit could not resolve", "a call that could not be resolved"),
    (r"reaches the JIT module", "a path it changes reaches a JIT module (not judged as this gate's)"),
    (r"loads prebuilt code|prebuilt code \(", "prebuilt code whose architectures are not known"),
    (r"cannot resolve #include", "an #include that cannot be resolved"),
    (r"flags-unknown|flags-define-value", "a JIT module's nvcc flags are not known"),
    (r"sources?-(missing|none|unresolved|generated|comprehension)|source [^:]*: (missing|inline|unresolved|generated)",
     "a JIT module's sources cannot be followed (missing, inline, built at run time)"),
    (r"runtime check in a header|defines no kernel", "a C++ runtime check with no kernel known behind it"),
    (r"value-dispatch|which returned value|branches on the parameter", "the value it selects is dispatched on elsewhere"),
    (r"declares global or nonlocal", "a function it changes declares global names"),
    (r"could not be resolved \(", "the gate itself could not be resolved"),
    (r"no verdict was computed", "no verdict was computed"),
    (r"#error", "a source stops at #error in the configuration followed"),
    (r"names what is instantiated|given at render time", "a template decides at render time which code is compiled"),
    (r"is used in a `\w+` statement|sits in \S+, not followed|not in its statement's header|no statement holds",
     "code the analysis does not follow (statement kinds, class bodies)"),
)
_CATEGORY_RES = tuple((re.compile(p), label) for p, label in REASON_CATEGORIES)
_LEADS = ("no JIT module is reached from the region this gate guards", "not shown free of GPU code")


def first_clause(reason: str) -> str:
    """The reason's first clause, without the lead-ins every such reason shares and without a
    leading location or name (`path:12: `, `pkg.mod.f: `)."""
    text = reason
    changed = True
    while changed:
        changed = False
        for lead in _LEADS:
            if text.startswith(lead):
                text = text[len(lead):].lstrip(";: ")
                changed = True
        m = re.match(r"^built only with hard-coded nvcc flags \([^)]*\)[^:]*: ", text)
        if m:
            text, changed = text[m.end():], True
        m = re.match(r"^[^\s:;]+(:\d+)?: ", text)
        if m and len(text) > m.end():
            text, changed = text[m.end():], True
    clause = re.split(r"[;:]", text, maxsplit=1)[0].strip()
    return clause[:80] or "(no reason given)"


def reason_category(reason: str) -> str:
    best = None
    for rx, label in _CATEGORY_RES:
        m = rx.search(reason)
        if m and (best is None or m.start() < best[0]):
            best = (m.start(), label)
    return best[1] if best else first_clause(reason)


@dataclass
class Group:
    """Findings that share a feature (or, for unresolved ones, a reason)."""

    label: str
    count: int  # findings
    why: str = ""  # hardware-bound / binary-only: what the target lacks
    example: str = ""  # path:line of a gate of the group
    modules: int = 1  # distinct module labels merged into this feature
    manual: int = 0  # patchable groups: findings whose patch plan needs a step by hand


@dataclass
class TargetSummary:
    target: str
    products: tuple[str, ...]
    compile_target: str
    stopped: int  # findings: gates that exclude the target
    counts: dict  # verdict -> findings
    patch_auto: int = 0  # software-only/partial findings that come with a patch
    patch_manual: int = 0
    # each list holds what the first screen shows; *_more the rest, counted on one line (or None)
    patchable: list[Group] = field(default_factory=list)
    patchable_more: Group | None = None
    hardware: list[Group] = field(default_factory=list)
    hardware_more: Group | None = None
    binary: list[Group] = field(default_factory=list)
    binary_more: Group | None = None
    unresolved: list[Group] = field(default_factory=list)
    unresolved_more: Group | None = None
    tests_left_out: int = 0
    baseline: tuple | None = None  # (known, new) against a baseline


@dataclass
class Summary:
    root: str
    packages: list[tuple[str, str]]
    files: int
    gates: int
    gates_by_kind: dict
    excluding: dict  # GPU name -> gates that exclude it
    targets: list[TargetSummary]
    diagnostics: int
    filters: dict | None = None
    tests_left_out: int = 0  # findings in test files left out (all targets)
    test_gates_left_out: int = 0
    # packages whose Python was parsed, and those only read as bytes (pipeline.package_scope)
    packages_analysed: list[str] = field(default_factory=list)
    packages_read: list[str] = field(default_factory=list)


def family_key(label: str) -> str:
    """Features whose labels start with the same two words are one family on the first screen
    (`cake_fmha_context_bf16_*` and `cake_fmha_decode_quant_fp8_*`: `cake_fmha`)."""
    first = label.split(", ", 1)[0].split(" +", 1)[0].rstrip("*").rstrip("_")
    if first.startswith("prebuilt "):
        return first
    words = first.split("_")
    return "_".join(words[:2]) if len(words) > 2 else first


def _family_label(labels: list[str]) -> str:
    if len(labels) == 1:
        return labels[0]
    firsts = [lab.split(", ", 1)[0].split(" +", 1)[0] for lab in labels]
    common = os.path.commonprefix(firsts)
    if "_" in common and not all(f == common for f in firsts):
        common = common[: common.rfind("_") + 1]
    return (common.rstrip("*") + "*") if common else labels[0]


def needs_hand(f) -> bool:
    """A patchable finding whose patch plan has a step no edit was found for (the diff, if any,
    holds the other steps)."""
    return not f.patch or "patch plan, manual" in f.reason


def _groups(findings, key, why=None) -> list[Group]:
    by: dict[str, list] = {}
    for f in findings:
        by.setdefault(key(f), []).append(f)
    out = []
    for label, fs in by.items():
        fs.sort(key=lambda f: (f.gate.path, f.gate.line))
        w = Counter(why(f) for f in fs).most_common(1)[0][0] if why is not None else ""
        out.append(Group(label, len(fs), w, f"{fs[0].gate.path}:{fs[0].gate.line}",
                         manual=sum(1 for f in fs if needs_hand(f))))
    out.sort(key=lambda g: (-g.count, g.label))
    return out


def _families(groups: list[Group]) -> list[Group]:
    by: dict[str, list[Group]] = {}
    for g in groups:
        by.setdefault(family_key(g.label), []).append(g)
    out = []
    for gs in by.values():
        whys = Counter()
        for g in gs:
            whys[g.why] += g.count
        big = max(gs, key=lambda g: (g.count, g.label))
        out.append(Group(_family_label(sorted(g.label for g in gs)), sum(g.count for g in gs),
                         whys.most_common(1)[0][0], big.example, sum(g.modules for g in gs),
                         sum(g.manual for g in gs)))
    out.sort(key=lambda g: (-g.count, g.label))
    return out


def _why_kind(why: str) -> str:
    """`needs ptx.tcgen05, only on ...` -> `need ptx.tcgen05`; stubs -> `trap` / `are empty`."""
    m = re.match(r"needs (\S+)", why)
    if m:
        return f"need {m.group(1)}"
    if why.startswith("its kernels trap"):
        return "trap on the target"
    if why.startswith("its kernels are empty"):
        return "compile to empty kernels"
    return why.split(",", 1)[0].split(" (", 1)[0]


def _cut(groups: list[Group], limit: int, what: str, by_why: bool = False) -> tuple[list[Group], Group | None]:
    """The first `limit` groups, and one Group counting the rest (or None)."""
    if len(groups) <= limit:
        return groups, None
    shown, rest = groups[: limit - 1], groups[limit - 1:]
    n = sum(g.count for g in rest)
    why = ""
    if by_why:
        kinds = Counter()
        for g in rest:
            kinds[_why_kind(g.why)] += g.count
        why = ", ".join(f"{c} {k}" for k, c in kinds.most_common(3))
    more = Group(f"{len(rest)} more {what}", n, why, "", sum(g.modules for g in rest), sum(g.manual for g in rest))
    return shown, more


def summarize(result, reg) -> Summary:
    """The Summary of a (filtered) scan result."""
    flt = result.stats.get("filters")
    left = (flt or {}).get("left_out", {})
    by_target = left.get("findings_in_test_files_by_target", {})
    base = result.stats.get("baseline")
    excluding: dict[str, int] = {}
    for g in result.gates:
        for n in reg.all - g.admits:
            excluding[n] = excluding.get(n, 0) + 1
    tss = []
    for t in result.targets:
        name = t.gpu.name
        ct = reg.compile_target(t).name
        fs = [f for f in result.findings if f.target == name]
        patch = [f for f in fs if f.verdict in (SOFTWARE_ONLY, PARTIAL)]
        ts = TargetSummary(name, tuple(t.gpu.products), ct, len(fs), dict(Counter(f.verdict for f in fs)))
        ts.patch_auto = sum(1 for f in patch if not needs_hand(f))
        ts.patch_manual = len(patch) - ts.patch_auto
        ts.patchable, ts.patchable_more = _cut(_families(_groups(patch, feature_label)), MAX_PATCH_LINES, "features")
        for attr, verdict, limit in (("hardware", HARDWARE_BOUND, MAX_HARDWARE_LINES),
                                     ("binary", BINARY_ONLY, MAX_BINARY_LINES)):
            gs = _families(_groups([f for f in fs if f.verdict == verdict], feature_label,
                                   lambda f, ct=ct: _finding_why(f, ct)))
            shown, more = _cut(gs, limit, "features", by_why=True)
            setattr(ts, attr, shown)
            setattr(ts, attr + "_more", more)
        ts.unresolved, ts.unresolved_more = _cut(
            _groups([f for f in fs if f.verdict == UNRESOLVED], lambda f: reason_category(f.reason)),
            MAX_REASON_LINES, "reasons")
        ts.tests_left_out = int(by_target.get(name, 0))
        if base is not None:
            ts.baseline = tuple(base.get(name, (0, 0)))
        tss.append(ts)
    pk = [(d.name, d.version) for d in sorted(result.packages, key=lambda d: d.name.lower())]
    return Summary(
        root=result.root, packages=pk, files=int(result.stats.get("files", 0) or 0), gates=len(result.gates),
        gates_by_kind=dict(Counter(g.kind for g in result.gates)), excluding=excluding, targets=tss,
        diagnostics=len(result.diagnostics), filters=flt,
        tests_left_out=int(left.get("findings_in_test_files", 0)),
        test_gates_left_out=int(left.get("gates_in_test_files", 0)),
        packages_analysed=sorted(result.stats.get("packages_analysed") or {}),
        packages_read=list(result.stats.get("packages_read") or []),
    )


__all__ = ["Summary", "TargetSummary", "Group", "summarize", "feature_label", "module_label", "reason_category",
           "first_clause", "family_key"]
