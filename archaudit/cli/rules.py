"""Click commands about the rule data: `archaudit rules verify`."""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import click

from ..report.shown import cell, shown
from .common import format_option

EXIT_OK, EXIT_DISAGREE, EXIT_USAGE = 0, 1, 2


def _default_include() -> tuple[str, ...]:
    env = os.environ.get("ARCHAUDIT_CUTLASS_INCLUDE", "")
    dirs = tuple(p for p in env.split(os.pathsep) if p)
    if dirs:
        return dirs
    # An installed flashinfer ships CUTLASS in its data dir; find_spec does not import it.
    try:
        spec = importlib.util.find_spec("flashinfer")
    except (ImportError, ValueError):
        spec = None
    for loc in (spec.submodule_search_locations or []) if spec else []:
        inc = Path(loc) / "data" / "cutlass" / "include"
        if (inc / "cute" / "arch" / "config.hpp").is_file():
            return (str(inc),)
    return ()


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s} s" if s < 60 else f"{s // 60} min {s % 60} s"


@click.group("rules")
def rules_group() -> None:
    """Inspect and check the architecture rule data (rules/*.toml)."""


@rules_group.command("verify")
@click.option("--rule", "rule_ids", multiple=True, metavar="ID", help="Only this feature rule (repeatable).")
@click.option("--target", "target_names", multiple=True, metavar="sm_XY[a|f]", help="Only this compile target (repeatable).")
@click.option("--no-macros", is_flag=True, help="Do not re-probe rules/macros.toml.")
@click.option("--no-targets", is_flag=True, help="Do not check the variants lists of rules/targets.toml.")
@click.option(
    "--include",
    "include_dirs",
    multiple=True,
    type=click.Path(exists=True, file_okay=False),
    help="Include dir for atom probes, e.g. a CUTLASS include/ (default: $ARCHAUDIT_CUTLASS_INCLUDE, "
    "else the CUTLASS of an installed flashinfer).",
)
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, help="Parallel probes (default: CPU count).")
@click.option("--no-cache", is_flag=True, help="Ignore and do not write the probe cache.")
@format_option("text", "json")
def verify_cmd(rule_ids, target_names, no_macros, no_targets, include_dirs, jobs, no_cache, fmt) -> None:
    """Compile every rule's probe for every target and report rules the toolchain disagrees with.

    A first run compiles a few thousand small probes (several minutes on 2 cores; it says how many
    and about how long before it starts, and shows progress); results are cached per toolkit
    version, so a rerun takes seconds.

    Exit status: 0 all agree, 1 some disagree, 2 nvcc missing or bad arguments.
    """
    # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)
    from rich.text import Text

    from ..cuda.ruleset import RuleError
    # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
    from ..rules_verify import ToolchainMissing, UnknownName, default_cache_dir, verify

    err = Console(stderr=True)
    includes = tuple(include_dirs) or _default_include()
    # Only narrow the macro/target checks when the user narrowed the targets.
    progress = Progress(
        TextColumn("[bold]probing[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("left"),
        TimeRemainingColumn(),
        TextColumn("{task.description}"),
        console=err,
        transient=True,
        disable=not err.is_terminal,
    )
    t0 = time.monotonic()
    step = [0]

    def start(total: int, cached: int, seconds: float) -> None:
        # said before the first compile: a first run compiles thousands of probes
        left = total - cached
        how = ("all answered by the probe cache" if not left else
               f"{left} to compile, about {_duration(seconds)} (estimate for a 2-core machine; "
               f"cached afterwards, a rerun takes seconds)")
        click.echo(f"archaudit: rules verify: {total} probes, {cached} cached; {how}", err=True)
        step[0] = max(1, left // 10)

    try:
        with progress:
            task = progress.add_task("", total=None)

            def tick(done: int, total: int, label: str) -> None:
                progress.update(task, completed=done, total=total, description=label)
                if not err.is_terminal and step[0] and (done % step[0] == 0 or done == total):
                    # a log or a pipe gets a line per tenth, so a long run is seen to move
                    click.echo(f"archaudit: probed {done}/{total} ({_duration(time.monotonic() - t0)})", err=True)

            report = verify(
                rule_ids=rule_ids or None,
                target_names=target_names or None,
                check_macros=not no_macros,
                check_targets=not no_targets and not target_names,
                jobs=jobs,
                cache_dir=None if no_cache else default_cache_dir(),
                include_dirs=includes,
                progress=tick,
                start=start,
            )
    except ToolchainMissing as e:
        err.print(Text.assemble(("error:", "red"), " ", cell(e)))
        sys.exit(EXIT_USAGE)
    except (UnknownName, RuleError, OSError) as e:
        err.print(Text.assemble(("error:", "red"), " ", cell(e)))
        sys.exit(EXIT_USAGE)

    if fmt == "json":
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        _print_text(report)
    sys.exit(EXIT_OK if report.ok else EXIT_DISAGREE)


def _print_text(report) -> None:
    # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    out = Console(highlight=False)
    tc = report.toolchain
    for rid, why in report.skipped.items():  # what the toolchain said: never markup
        out.print(Text.assemble(("skipped", "yellow"), " ", cell(f"{rid}: {why}")))
    if report.findings:
        table = Table(title="rules that disagree with the toolchain", show_lines=True)
        table.add_column("kind")
        table.add_column("rule / subject")
        table.add_column("problem")
        table.add_column("in data, not toolchain")
        table.add_column("toolchain, not data")
        for f in report.findings:
            msg = f.message
            if f.details.get("suggested_supported_on"):
                msg += f"\nsuggest: supported_on = {json.dumps(f.details['suggested_supported_on'])}"
            if f.details.get("diff"):
                msg += "\n" + "\n".join(f"{k}: data={v['data']!r} nvcc={v['nvcc']!r}" for k, v in f.details["diff"].items())
            errors = f.details.get("errors") or {}
            if errors:
                first = next(iter(errors.items()))
                msg += f"\n{first[0]}: {first[1]}"
            cells = (f.kind, f.subject, msg, " ".join(f.data_only), " ".join(f.toolchain_only))
            table.add_row(*(Text("\n".join(map(shown, str(x).split("\n")))) for x in cells))  # lines kept
        out.print(table)
    status = "[green]all rules agree[/]" if report.ok else f"[red]{len(report.findings)} disagreement(s)[/]"
    out.print(
        f"{status} with nvcc {tc.version}: {len(report.checked_rules)} feature rules x "
        f"{len(report.checked_targets)} targets, {report.probes} probes "
        f"({report.cache_hits} cached) in {report.seconds:.1f}s"
    )


@rules_group.command("dump-macros", hidden=True)
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None)
def dump_macros_cmd(jobs) -> None:
    """Print the probed [common]/[host]/[device.*] tables for rules/macros.toml."""
    # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
    from ..rules_verify import ToolchainMissing, default_cache_dir, render_macros_toml

    try:
        click.echo(render_macros_toml(jobs=jobs, cache_dir=default_cache_dir()), nl=False)
    except ToolchainMissing as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(EXIT_USAGE)


def register(main: click.Group) -> None:
    """Attach the `rules` command group to the main group."""
    main.add_command(rules_group)
