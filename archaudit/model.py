"""Plain data shared by every stage: locations, diagnostics, gates.

Analyses produce these; formatters only read them. Paths are POSIX, relative to the scan root.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, order=True)
class Location:
    path: str
    line: int  # 1-based
    col: int = 1  # 1-based

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}"


@dataclass(frozen=True, order=True)
class Diagnostic:
    """Something archaudit could not read or decide. Never fatal to the scan."""

    path: str
    kind: str  # short machine-readable reason: "syntax-error", "not-utf8", "unreadable", ...
    message: str
    line: int | None = None
    severity: str = "warning"  # "error" | "warning" | "note"

    def to_json(self) -> dict[str, Any]:
        d = {"path": self.path, "kind": self.kind, "message": self.message, "severity": self.severity}
        if self.line is not None:
            d["line"] = self.line
        return d


def internal_error(path: str, phase: str, exc: BaseException, line: int | None = None) -> Diagnostic:
    """What a failure of archaudit's own analysis on one file or function becomes: a diagnostic
    naming the phase, while the rest of the scan goes on."""
    return Diagnostic(path, "internal-error",
                      f"{phase} stopped on this file ({type(exc).__name__}: {str(exc)[:200]}); its results "
                      f"from that phase are incomplete. This is a bug in archaudit: please report it",
                      line, "error")


# Gate kinds
PREDICATE_CALL = "predicate-call"  # is_sm90_supported(), has_device_capability(90)
FLAG = "flag"  # get_platform().is_sm100, _is_sm90 module constants
CAPABILITY_COMPARE = "capability-compare"  # major == 10, get_device_capability() >= (9, 0)
ARCH_LIST = "arch-list"  # get_nvcc_flags_list(supported_major_versions=[9, 10])
NVCC_FLAGS = "nvcc-flags"  # hard-coded -gencode flags given to a JIT build
CPP_RUNTIME_CHECK = "cpp-runtime-check"  # TORCH_CHECK(sm >= 90) in C++ host code
# a JIT generator whose nvcc flags are hard-coded (a literal, a module constant, an arch-keyed
# table) and give code for some GPUs only: reported at the generator's def (archaudit.verdict.inventory)
BUILD_FLAGS = "build-flags"

@dataclass
class Gate:
    """One expression that makes behaviour depend on the GPU architecture."""

    path: str
    line: int
    col: int
    function: str  # qualified name of the enclosing function, or "<module>" form "pkg.mod"
    kind: str
    expr: str
    admits: frozenset  # GPU names ("sm_90") for which the guarded behaviour happens
    resolution: str  # how the admitted set was established (see docs/architecture.md)
    resolved: bool = True
    package: str | None = None
    region: str = ""  # what the gate guards: "branch", "after-early-exit", "argument", ...
    via: list[str] = field(default_factory=list)  # definitions/rules the resolution went through
    # GPUs on which the test's outcome is certain (the rest also hang on a condition that does not
    # depend on the architecture); not in the report
    decided: frozenset = frozenset()
    # GPUs the gate is read as refusing although the test may also let them through there (its
    # outcome hangs on a run-time value as well): not refused for certain; not in the report
    mixed: frozenset = frozenset()
    # platform features (fields of targets.toml, "nvlink_multicast") the guarded code needs besides the architecture,
    # as (facility, the flag test as written), from the same condition (python/platform_needs.py)
    platform_needs: tuple = ()

    @property
    def location(self) -> Location:
        return Location(self.path, self.line, self.col)

    def sort_key(self):
        return (self.path, self.line, self.col, self.kind, self.expr)


# Verdicts for a gate that excludes a target (issue 5)
SOFTWARE_ONLY = "software-only"
PARTIAL = "partial"
HARDWARE_BOUND = "hardware-bound"
BINARY_ONLY = "binary-only"
UNRESOLVED = "unresolved"
NO_GPU_CODE = "no-gpu-code"  # the gate changes only Python: no GPU code on any path it decides

VERDICTS = (SOFTWARE_ONLY, PARTIAL, HARDWARE_BOUND, BINARY_ONLY, UNRESOLVED, NO_GPU_CODE)


@dataclass(frozen=True)
class Link:
    """One step of the chain from a gate to the code it controls."""

    kind: str  # "call" | "region" | "jit-module" | "source" | "include" | "flags" | "export" | "launch"
    path: str
    line: int
    text: str  # what is at that step: callee name, module name, file
    how: str = ""  # how the link was established: "import", "self-method", "constant", ...

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.path, "line": self.line, "text": self.text, "how": self.how}


@dataclass(frozen=True)
class Evidence:
    """A source line that decides a verdict: an instruction, a stub, a shared-memory request."""

    path: str
    line: int
    feature: str  # rule id or kind ("wgmma", "trap-stub", "empty-stub", "smem")
    supported_on: tuple[str, ...] = ()  # compile targets / GPUs that have the feature
    message: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "line": self.line, "feature": self.feature,
                "supported_on": list(self.supported_on), "message": self.message}


@dataclass(frozen=True)
class Kernel:
    """A kernel or exported entry point of a JIT module, real or stub for the target."""

    name: str
    path: str
    line: int
    status: str  # "real" | "empty-stub" | "trap-stub" | "unknown"
    guard_line: int | None = None  # the #if that leaves the body empty for the target

    def to_json(self) -> dict[str, Any]:
        d = {"name": self.name, "path": self.path, "line": self.line, "status": self.status}
        if self.guard_line is not None:
            d["guard_line"] = self.guard_line
        return d


@dataclass
class ModuleVerdict:
    """A JIT module behind a gate, judged for one compile target."""

    name: str
    sources: list[str]
    compile_target: str  # e.g. "sm_120f": what the JIT would pass for the GPU
    prediction: str  # "builds" | "fails" | "stub" | "unknown" | "binary"
    kernels: list[Kernel] = field(default_factory=list)
    entry_points: dict[str, str] = field(default_factory=dict)  # exported name -> "real" | "stub" | ...
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "sources": list(self.sources), "compile_target": self.compile_target,
                "prediction": self.prediction, "kernels": [k.to_json() for k in self.kernels],
                "entry_points": dict(sorted(self.entry_points.items())), "reason": self.reason}


@dataclass
class Finding:
    """A gate that excludes a target, classified with its evidence."""

    gate: Gate
    target: str  # GPU, e.g. "sm_120"
    verdict: str  # one of VERDICTS
    modules: list[ModuleVerdict] = field(default_factory=list)
    chain: list[Link] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    reason: str = ""  # why (always for unresolved, a one-line summary otherwise)
    patch: str | None = None  # unified diff for software-only gates
    feature: str = ""  # the feature/JIT-module group this finding belongs to, for the patch plan
    plan: list[Gate] = field(default_factory=list)  # gates the patch plan edits, in order

    def sort_key(self):
        return (self.target, *self.gate.sort_key())
