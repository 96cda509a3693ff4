"""What a report shows: the filters of `archaudit scan` (--verdict, --package, --include,
--exclude, --include-tests), applied the same way to every format.

Two stages, so that fingerprints and baselines stay what they are:
- the *scope* (packages, path globs, the packages' own test files) keeps or drops whole files:
  gates and findings outside it are left out of the result;
- the *verdict* filter keeps findings (and reported SARIF/CI items) with one of the verdicts; the
  gate inventory is not filtered by verdict (a gate has a verdict per target, not one).

Paths are the gates' paths, POSIX and relative to the scan root. A glob's `*` also matches `/`
(`flashinfer/jit/*` is everything under flashinfer/jit), and a glob without wildcards that names a
directory matches everything under it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from fnmatch import fnmatchcase

from .model import VERDICTS

TEST_DIRS = frozenset({"test", "tests", "testing"})


def is_test_path(path: str) -> bool:
    """A package's own test code: a path component `test`, `tests` or `testing`, or a file
    `test_*.py`, `*_test.py` or `conftest.py`."""
    parts = path.split("/")
    if any(p in TEST_DIRS for p in parts[:-1]):
        return True
    name = parts[-1]
    return name == "conftest.py" or (name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py")))


def _norm_pkg(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_verdicts(values) -> frozenset[str] | None:
    """--verdict values (repeatable, each may be a comma list) -> a set; ValueError names an
    unknown one."""
    out: set[str] = set()
    for v in values or ():
        for part in str(v).split(","):
            part = part.strip().lower()
            if not part:
                continue
            if part not in VERDICTS:
                raise ValueError(f"unknown verdict {part!r}; one of {', '.join(VERDICTS)}")
            out.add(part)
    return frozenset(out) or None


@dataclass(frozen=True)
class Filters:
    verdicts: frozenset | None = None  # None: every verdict
    packages: tuple[str, ...] = ()  # distribution names or top-level packages
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    include_tests: bool = False

    @property
    def narrowed(self) -> bool:
        """Does anything beyond the default (test files left out) narrow the report?"""
        return bool(self.verdicts or self.packages or self.include or self.exclude)

    def _glob(self, path: str, pattern: str) -> bool:
        p = pattern.strip()
        if p.startswith("./"):
            p = p[2:]
        return fnmatchcase(path, p) or fnmatchcase(path, p.rstrip("/") + "/*")

    def in_scope(self, path: str, package: str | None) -> bool:
        if self.packages:
            names = {_norm_pkg(path.split("/", 1)[0].removesuffix(".py"))}
            if package:
                names.add(_norm_pkg(package))
            if not names & {_norm_pkg(p) for p in self.packages}:
                return False
        if self.include and not any(self._glob(path, g) for g in self.include):
            return False
        if any(self._glob(path, g) for g in self.exclude):
            return False
        return True

    def keeps_verdict(self, verdict: str) -> bool:
        return self.verdicts is None or verdict in self.verdicts

    def keeps_item(self, finding) -> bool:
        """A reported finding (SARIF result, baseline entry, --fail-on) passes every filter."""
        g = finding.gate
        return (self.keeps_verdict(finding.verdict) and self.in_scope(g.path, g.package)
                and (self.include_tests or not is_test_path(g.path)))

    def to_json(self) -> dict:
        return {"verdict": sorted(self.verdicts) if self.verdicts else None, "package": list(self.packages),
                "include": list(self.include), "exclude": list(self.exclude), "include_tests": self.include_tests}


@dataclass
class LeftOut:
    """What the filters left out of a result (counted before the verdict filter for gates)."""

    test_gates: int = 0
    test_findings: int = 0
    scope_gates: int = 0  # --package / --include / --exclude
    scope_findings: int = 0
    verdict_findings: int = 0  # --verdict
    by_target: dict = field(default_factory=dict)  # target -> findings in test files left out

    def to_json(self) -> dict:
        return {"gates_in_test_files": self.test_gates, "findings_in_test_files": self.test_findings,
                "gates_by_package_or_path": self.scope_gates, "findings_by_package_or_path": self.scope_findings,
                "findings_by_verdict": self.verdict_findings,
                "findings_in_test_files_by_target": dict(sorted(self.by_target.items()))}


def scope_result(result, flt: Filters):
    """The result with the gates and findings outside the scope (package, globs, test files)
    left out; the verdict filter is not applied here (see verdict_result)."""
    lo = LeftOut()

    def keep(path, package, is_finding, target=None) -> bool:
        if not flt.in_scope(path, package):
            if is_finding:
                lo.scope_findings += 1
            else:
                lo.scope_gates += 1
            return False
        if not flt.include_tests and is_test_path(path):
            if is_finding:
                lo.test_findings += 1
                lo.by_target[target] = lo.by_target.get(target, 0) + 1
            else:
                lo.test_gates += 1
            return False
        return True

    gates = [g for g in result.gates if keep(g.path, g.package, False)]
    findings = [f for f in result.findings if keep(f.gate.path, f.gate.package, True, f.target)]
    stats = {**result.stats, "filters": {**flt.to_json(), "left_out": lo.to_json()}}
    return replace(result, gates=gates, findings=findings, stats=stats), lo


def verdict_result(result, flt: Filters, lo: LeftOut):
    """The result with only the findings of the --verdict filter."""
    if flt.verdicts is None:
        return result
    findings = [f for f in result.findings if f.verdict in flt.verdicts]
    lo.verdict_findings += len(result.findings) - len(findings)
    stats = {**result.stats, "filters": {**flt.to_json(), "left_out": lo.to_json()}}
    return replace(result, findings=findings, stats=stats)
