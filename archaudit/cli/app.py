"""The `archaudit` group and `scan`; the other commands register from their own modules in this
package, which import nothing from here (shared pieces: common.py)."""
from __future__ import annotations

import os
import sys

import click

from .. import __version__
from ..report.shown import shown
from . import binary, ci, cuda, graph, patch, rules, verify
from .common import (no_cache_option, output_option, parse_targets, quiet_option, scan_with_progress, targets_option,
                     write_output)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="archaudit")
def main() -> None:
    """Static auditor of GPU-architecture gates in LLM-serving Python packages."""


def _filters(verdicts, packages, include, exclude, include_tests):
    # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
    from ..filters import Filters, parse_verdicts

    try:
        v = parse_verdicts(verdicts)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--verdict") from None
    return Filters(v, tuple(packages), tuple(include), tuple(exclude), include_tests)


def _nothing_to_scan(path, result) -> bool:
    """True when PATH holds no Python or C/C++/CUDA source at all (an empty directory, a wrong
    path): said on stderr, exit 2."""
    if result.gates or result.stats.get("python_files"):
        return False
    # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
    from ..sources import CUDA_EXT, SourceError, open_source

    try:
        files = open_source(path).files() if path else [".py"]
    except SourceError:
        return False
    return not any(f.endswith((".py", *CUDA_EXT)) for f in files)


@main.command()
@click.argument("path", required=False, type=click.Path(path_type=str))
@targets_option("GPU to judge for: sm_120, 12.0, 120f, sm_120a, or a product such as 'RTX PRO 6000'. Repeatable.")
@click.option("--format", "fmt", type=click.Choice(["table", "text", "json", "sarif"]), default=None,
              help="table (default on a terminal: the first screen, as wide as the terminal), text (plain lines, "
                   "the default when piped or with -o), json, sarif.")
@output_option("Write the report to a file (sarif: a directory gets one file per target).", type=click.Path(writable=True))
@quiet_option()
@click.option("--verdict", "verdicts", multiple=True, metavar="VERDICT",
              help="Only findings with this verdict (repeatable or comma-separated): software-only, partial, "
                   "hardware-bound, binary-only, no-gpu-code, unresolved. Lists them one by one.")
@click.option("--package", "packages", multiple=True, metavar="NAME",
              help="Only gates of this distribution or top-level package (flashinfer-python, sglang, ...). Repeatable.")
@click.option("--include", "include", multiple=True, metavar="GLOB",
              help="Only gates whose path (relative to PATH) matches; '*' also matches '/', a directory matches "
                   "what is under it. Repeatable.")
@click.option("--exclude", "exclude", multiple=True, metavar="GLOB", help="Leave out gates whose path matches. Repeatable.")
@click.option("--include-tests", is_flag=True,
              help="Keep the packages' own test files (test/, tests/, testing/, test_*.py, *_test.py, conftest.py), "
                   "left out by default.")
@click.option("--all", "show_all", is_flag=True, help="Text and table: list every finding and every gate after the summary.")
@ci.scan_options
@no_cache_option("Neither read nor write the cache (ARCHAUDIT_CACHE_DIR, default ~/.cache/archaudit).")
@click.option("--workers", type=click.IntRange(min=1), default=None, metavar="N",
              help="Processes for reading and prefiltering files (default: the usable cores).")
def scan(path, targets, fmt, output, quiet, verdicts, packages, include, exclude, include_tests, show_all,
         baseline_file, fail_on, repo_root, sarif_inventory, no_cache, workers):
    """Scan a site-packages directory, a source tree or a wheel (default: this Python's site-packages).

    Prints first, per --target, how many gates stop the GPU, which can be patched (and the command
    that makes the patch), which features are hardware-bound and why, and the unresolved ones
    counted by reason; --verdict, --all and --format json give the findings one by one."""
    # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
    from ..filters import scope_result, verdict_result
    from ..targets import registry

    flt = _filters(verdicts, packages, include, exclude, include_tests)
    if fmt is None:
        fmt = "table" if output is None and sys.stdout.isatty() else "text"
    elif fmt == "table" and (output is not None or not sys.stdout.isatty()):
        fmt = "text"  # piped or to a file: plain lines, never wrapped mid-path
    sci = ci.ScanCI(fmt, output, baseline_file, fail_on, repo_root, sarif_inventory)
    reqs = sci.targets(parse_targets(targets))
    sci.check(reqs)
    reg = registry()
    result = scan_with_progress(path, reqs, reg, quiet, cache=not no_cache, workers=workers)
    if _nothing_to_scan(path, result):
        click.echo(shown(f"archaudit: {path}: no Python or CUDA/C++ source files found; nothing to audit"), err=True)
        raise SystemExit(2)
    result, left_out = scope_result(result, flt)
    result = sci.apply(result, reg, keep=flt.keeps_item)  # SARIF is written here
    result = verdict_result(result, flt, left_out)
    # the patcher holds the Python IR and the call graph (for `archaudit patch`), which no report
    # reads: freed, the report is built in their memory instead of on top of it
    result.patcher = None
    text = _report(result, reg, fmt, path, show_all)
    if text is not None:
        write_output(text, output)
    sci.finish()


def _report(result, reg, fmt, path, show_all):
    """The report as text to write (a str, or for JSON an iterator of its pieces), or None when
    it is written already (SARIF, by ScanCI) or drawn on the terminal (table)."""
    if fmt == "sarif":
        return None
    if fmt == "json":
        # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
        from ..report.jsonout import json_pieces

        return json_pieces(result, reg)
    # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
    from ..report.text import View, render_table, render_text

    view = View(path_arg=path, show_all=show_all)
    if fmt == "text":
        return render_text(result, reg, view)
    # lazy: rich only when the table is drawn
    from rich.console import Console

    render_table(result, reg, Console(highlight=False, emoji=False), view)
    return None


def _register_optional_commands() -> None:
    # Command groups that live in their own modules register here.
    cuda.register(main)
    rules.register(main)
    graph.register(main)
    patch.register(main)
    binary.register(main)
    ci.register(main)
    verify.register(main)


_register_optional_commands()


def run() -> None:
    """Console entry point: no traceback for users (ARCHAUDIT_DEBUG=1 shows it)."""
    try:
        main(standalone_mode=True)
    except SystemExit as e:
        _exit_now(e.code)
    except KeyboardInterrupt:
        click.echo("archaudit: interrupted", err=True)
        raise SystemExit(130)
    except Exception as e:  # noqa: BLE001
        if os.environ.get("ARCHAUDIT_DEBUG"):
            raise
        click.echo(shown(f"archaudit: internal error: {type(e).__name__}: {e} (set ARCHAUDIT_DEBUG=1 for details)"), err=True)
        raise SystemExit(2)


def _exit_now(code) -> None:
    """Leave without tearing down the heap: after a full scan, freeing millions of IR objects one
    by one took longer than a minute. Everything the command writes is flushed first."""
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    for fh in (sys.stdout, sys.stderr):
        try:
            fh.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
