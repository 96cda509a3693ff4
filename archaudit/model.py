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


# Gate kinds
PREDICATE_CALL = "predicate-call"  # is_sm90_supported(), has_device_capability(90)
FLAG = "flag"  # get_platform().is_sm100, _is_sm90 module constants
CAPABILITY_COMPARE = "capability-compare"  # major == 10, get_device_capability() >= (9, 0)
ARCH_LIST = "arch-list"  # get_nvcc_flags_list(supported_major_versions=[9, 10])
NVCC_FLAGS = "nvcc-flags"  # hard-coded -gencode flags given to a JIT build
CPP_RUNTIME_CHECK = "cpp-runtime-check"  # TORCH_CHECK(sm >= 90) in C++ host code

GATE_KINDS = (PREDICATE_CALL, FLAG, CAPABILITY_COMPARE, ARCH_LIST, NVCC_FLAGS, CPP_RUNTIME_CHECK)


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
    resolution: str  # how the admitted set was established (see README)
    resolved: bool = True
    package: str | None = None
    region: str = ""  # what the gate guards: "branch", "after-early-exit", "argument", ...
    via: list[str] = field(default_factory=list)  # definitions/rules the resolution went through

    @property
    def location(self) -> Location:
        return Location(self.path, self.line, self.col)

    def sort_key(self):
        return (self.path, self.line, self.col, self.kind, self.expr)
