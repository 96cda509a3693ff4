"""CI commands and scan options: SARIF output, baselines, --fail-on, and `archaudit diff`.

Exit codes (README, "Exit codes"): 0 nothing to report (or nothing new against the baseline),
1 findings that --fail-on selects (new ones with --baseline), 2 usage or input error.
"""
from __future__ import annotations

import gzip
import os
from dataclasses import replace
from pathlib import Path

import click

from ..report.shown import shown
from .common import (check_output, check_repo_root, format_option, no_cache_option, output_option, parse_targets,
                     quiet_option, scan_with_progress, targets_option, write_file, write_output)

DEFAULT_BASELINE = ".archaudit-baseline.json"
GITHUB_GZIP_LIMIT = 10 * 1024 * 1024


def scan_options(f):
    """Options that `archaudit scan` gets from this module."""
    f = click.option("--sarif-inventory", is_flag=True,
                     help="SARIF: also list every gate that does not exclude the target (note level).")(f)
    f = click.option("--repo-root", type=click.Path(file_okay=False, path_type=str), metavar="DIR",
                     help="Repository that results should point into (default: the git work tree around "
                          "the current directory). Gates outside it point at the line pinning their package.")(f)
    f = click.option("--fail-on", metavar="VERDICTS",
                     help="Exit 1 when a finding has one of these verdicts: comma-separated from software-only, "
                          "partial, hardware-bound, binary-only, unresolved; or 'any' / 'none'. "
                          "Default: none (with --baseline: any new finding).")(f)
    f = click.option("--baseline", "baseline_file", type=click.Path(dir_okay=False, path_type=str), metavar="FILE",
                     help="Report only findings not in this baseline (see `archaudit baseline`); exit 1 only for them.")(f)
    return f


def _fail_set(text):
    # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
    from ..verdict.baseline import parse_fail_on

    try:
        return parse_fail_on(text)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--fail-on") from None


def _repo(repo_root, result):
    check_repo_root(repo_root)
    tops = [t for d in result.packages for t in d.top_level] + [d.dist_info for d in result.packages]
    scan_root = result.root if result.root and os.path.exists(result.root) else None
    return _repo_context(repo_root, scan_root, installed_tops=tops)


def _repo_context(repo_root, scan_root, **kw):
    """repo.repo_context, with a pin file that cannot be read as an input error (exit 2)."""
    # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
    from ..repo import PinFileError, repo_context

    try:
        return repo_context(repo_root, scan_root, **kw)
    except PinFileError as e:
        raise click.UsageError(str(e)) from None


def _items(result, suppress: bool = True):
    # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
    from ..verdict.baseline import line_reader, reportable
    from ..sources import SourceError, open_source

    reader = None
    if suppress:
        try:
            reader = line_reader(open_source(result.root), only_suppressions=True)
        except SourceError:
            reader = None
    return reportable(result, reader)


class ScanCI:
    """What the CI options do around one `archaudit scan`: checked before the (slow) scan,
    applied after it."""

    def __init__(self, fmt, output, baseline_file, fail_on, repo_root, inventory):
        # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
        from ..verdict.baseline import BaselineError, load_baseline

        self.fmt, self.output = fmt, output
        self.fail = _fail_set(fail_on)
        self.repo_root = repo_root
        self.inventory = inventory
        self.baseline = None
        self.baseline_file = baseline_file
        check_repo_root(repo_root)
        if output is not None and fmt != "sarif" and os.path.isdir(output):
            raise click.BadParameter(f"{output}: is a directory (only --format sarif writes one file per target)",
                                     param_hint="--output")
        check_output(output, directory_ok=fmt == "sarif")
        if baseline_file is not None:
            try:
                self.baseline = load_baseline(baseline_file)
            except BaselineError as e:
                raise click.UsageError(str(e)) from None
            if self.fail is None:
                # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
                from ..model import VERDICTS

                self.fail = frozenset(VERDICTS)
        self.code = 0
        self.summary: list[str] = []

    def targets(self, reqs):
        """The baseline's targets when none were given."""
        if reqs or self.baseline is None or not self.baseline.targets:
            return reqs

        return parse_targets(tuple(self.baseline.targets))

    def check(self, reqs):
        if self.fmt == "sarif" and not reqs:
            raise click.UsageError("--format sarif needs at least one --target (results are per GPU)")
        if (self.baseline is not None or self.fail) and not reqs:
            raise click.UsageError("--baseline and --fail-on need at least one --target")

    def apply(self, result, reg, keep=None):
        """Compute findings, mark new ones, write SARIF if asked; returns the result to format
        (findings limited to the new ones with --baseline). `keep(finding)`: the report's filters
        (archaudit/filters.py), applied to what SARIF, the baseline and --fail-on see."""
        # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
        from ..verdict.baseline import mark_new

        items = _items(result)
        if keep is not None:
            items = [r for r in items if keep(r.finding)]
        active = [r for r in items if r.suppressed is None]
        if self.baseline is not None:
            new = mark_new(items, self.baseline)
            shown = new
            known = len(active) - len(new)
            self.summary.append(f"{known} known, {len(new)} new finding(s) (not in {self.baseline_file})")
            # the formatter sees only the new judged findings, and per target how many were known
            # (its summary says "N known, M new", not that no gate excludes the target)
            keep = {(id(r.finding.gate), r.finding.target) for r in new}
            counts = {t.gpu.name: [sum(1 for r in active if r.finding.target == t.gpu.name and not r.new),
                                   sum(1 for r in new if r.finding.target == t.gpu.name)] for t in result.targets}
            result = replace(result, findings=[f for f in result.findings if (id(f.gate), f.target) in keep],
                             stats={**result.stats, "baseline": counts})
        else:
            shown = active
        failing = [r for r in shown if self.fail and r.rule in self.fail]
        if failing:
            self.code = 1
            if self.baseline is None:
                self.summary.append(f"{len(failing)} finding(s) with a verdict in --fail-on")
            for r in failing[:50]:
                g = r.finding.gate
                self.summary.append(f"  {g.path}:{g.line}: {r.rule} on {r.finding.target}: "
                                    f"{' '.join(g.expr.split())[:100]} ({g.function})")
            if len(failing) > 50:
                self.summary.append(f"  ... and {len(failing) - 50} more")
        if self.fmt == "sarif":
            # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
            from ..report.sarif import to_sarif

            log = to_sarif(result, reg, items if self.baseline is None else [r for r in items if r.new or r.suppressed],
                           _repo(self.repo_root, result), inventory=self.inventory,
                           with_baseline=self.baseline is not None)
            write_sarif(log, self.output)
        self.items = items
        return result

    def finish(self):
        for line in self.summary:
            click.echo(shown(f"archaudit: {line}" if not line.startswith("  ") else line), err=True)
        if self.code:
            raise SystemExit(self.code)


def write_sarif(log, output) -> list[str]:
    """Write the log to `output` (stdout when None). An existing directory (or a path ending in /)
    gets one file per target; a file whose gzip exceeds GitHub's 10 MB is split by target."""
    # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
    from ..report.sarif import dumps, split_by_run

    if output is None:
        write_output(dumps(log), None)
        return []
    out = Path(output)
    parts = None
    if output.endswith(("/", os.sep)) or out.is_dir():
        out.mkdir(parents=True, exist_ok=True)
        parts = [(out / f"archaudit-{t}.sarif", one) for t, one in split_by_run(log)]
    else:
        text = dumps(log)
        if len(log["runs"]) > 1 and len(gzip.compress(text.encode(), mtime=0)) > GITHUB_GZIP_LIMIT:
            parts = [(out.with_name(f"{out.stem}.{t}{out.suffix or '.sarif'}"), one) for t, one in split_by_run(log)]
            click.echo(f"archaudit: SARIF over 10 MB gzipped; split by target into {len(parts)} files", err=True)
        else:
            write_file(out, text)
            return [str(out)]
    written = []
    for p, one in parts:
        text = dumps(one)
        if len(gzip.compress(text.encode(), mtime=0)) > GITHUB_GZIP_LIMIT:
            click.echo(f"archaudit: warning: {p} is over 10 MB gzipped; GitHub will reject it", err=True)
        write_file(p, text)
        written.append(str(p))
    return written


def register(main) -> None:
    @main.command()
    @click.argument("path", required=False, type=click.Path(path_type=str))
    @targets_option("GPU to record findings for (repeatable).", required=True)
    @output_option("Baseline file to write.", default=DEFAULT_BASELINE, show_default=True)
    @quiet_option()
    @no_cache_option()
    def baseline(path, targets, output, quiet, no_cache):
        """Record today's findings so that `scan --baseline` reports only new ones."""
        # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
        from ..verdict.baseline import dump_baseline
        from ..targets import registry

        reqs = parse_targets(targets)
        check_output(output)
        result = scan_with_progress(path, reqs, registry(), quiet, cache=not no_cache)
        items = _items(result)
        text = dump_baseline(items, [t.gpu.name for t in reqs])
        write_file(output, text)
        n = sum(1 for r in items if r.suppressed is None)
        click.echo(f"archaudit: wrote {n} finding(s) for {', '.join(t.gpu.name for t in reqs)} to {output}", err=True)

    @main.command()
    @click.argument("old", type=click.Path(path_type=str))
    @click.argument("new", type=click.Path(path_type=str))
    @targets_option("GPU whose verdicts to compare (repeatable). Without one, only gates are compared.")
    @format_option("text", "json", "sarif")
    @output_option("Write the report to a file.")
    @click.option("--fail-on", type=click.Choice(["any", "regression", "none"]), default="any", show_default=True,
                  help="Exit 1 on any change, only when a target becomes excluded (regression), or never.")
    @click.option("--repo-root", type=click.Path(file_okay=False, path_type=str), metavar="DIR",
                  help="SARIF: repository whose pinning lines results point at (default: the git work tree).")
    @quiet_option()
    @no_cache_option()
    def diff(old, new, targets, fmt, output, fail_on, repo_root, quiet, no_cache):
        """Compare the gates of two environments (site-packages, wheels, source trees): a dependency bump."""
        # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
        from ..report.diff import render_json, render_text, to_sarif
        from ..targets import registry
        from ..verdict.diff import diff_scans

        reqs = parse_targets(targets)
        check_output(output)
        for p in (old, new):
            if not os.path.exists(p):
                raise click.UsageError(f"{p}: no such file or directory")
        check_repo_root(repo_root)
        reg = registry()
        a = scan_with_progress(old, reqs, reg, quiet, "old", cache=not no_cache)
        b = scan_with_progress(new, reqs, reg, quiet, "new", cache=not no_cache)
        res = diff_scans(a, b, [t.gpu.name for t in reqs])
        if fmt == "json":
            text = render_json(res, reg)
        elif fmt == "sarif":
            # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
            from ..report.sarif import dumps

            text = dumps(to_sarif(res, reg, _repo_context(repo_root, new)))
        else:
            text = render_text(res, reg)
        write_output(text, output)
        failing = res.changes if fail_on == "any" else [c for c in res.changes if c.regressions()] if fail_on == "regression" else []
        if failing:
            raise SystemExit(1)
