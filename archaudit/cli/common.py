"""Pieces shared by the commands: --target parsing, scanning with progress on stderr, clean usage
errors, report files."""
from __future__ import annotations

import os
from contextlib import contextmanager

import click


def parse_targets(names: tuple[str, ...]):
    """--target values -> TargetRequests; an unknown name is a usage error (exit 2)."""
    # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
    from ..targets import UnknownTarget, registry

    reg = registry()
    out = []
    for n in names:
        try:
            out.append(reg.parse(n))
        except UnknownTarget as e:
            raise click.BadParameter(str(e), param_hint="--target") from None
    return out


@contextmanager
def source_errors_as_usage():
    """A PATH that cannot be read as a scan input (missing, not a wheel, ...) is a usage error
    (exit 2), said in one line."""
    # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
    from ..sources import SourceError

    try:
        yield
    except SourceError as e:
        raise click.UsageError(str(e)) from None


def scan_with_progress(path, reqs, reg, quiet: bool, what: str = "", **scan_options):
    """Run the pipeline with a progress bar on stderr (only on a terminal, never with --quiet),
    its messages prefixed with `what` (which of two scans); an unreadable PATH is a usage error."""
    # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
    from ..pipeline import scan as run_scan

    with source_errors_as_usage():
        if quiet:  # rich is not even imported: a cache hit takes about a second, all told
            return run_scan(path, reqs, reg, **scan_options)
        # lazy: rich only when a progress bar may be shown
        from rich.console import Console

        from ..progress import scan_progress

        err = Console(stderr=True)
        with scan_progress(err, enabled=err.is_terminal) as progress:
            say = progress if not what else (lambda msg, *counts: progress(f"{what}: {msg}", *counts))
            return run_scan(path, reqs, reg, progress=say, **scan_options)


def check_repo_root(repo_root: str | None) -> None:
    """--repo-root names a directory, or is a usage error (exit 2)."""
    if repo_root is not None and not os.path.isdir(repo_root):
        raise click.BadParameter(f"{repo_root}: not a directory", param_hint="--repo-root")


def check_output(output: str | None, directory_ok: bool = False) -> None:
    """A usage error (exit 2) before the scan when the report could not be written to `output`:
    its directory is missing or not writable, or it is a directory (allowed with directory_ok,
    SARIF's one file per target, which creates the directory)."""
    if output is None:
        return
    if directory_ok and (output.endswith(("/", os.sep)) or os.path.isdir(output)):
        return
    if os.path.isdir(output):
        raise click.BadParameter(f"{output}: is a directory", param_hint="--output")
    parent = os.path.dirname(output) or "."
    if not os.path.isdir(parent):
        raise click.BadParameter(f"{output}: directory {parent} does not exist", param_hint="--output")
    if not os.access(parent, os.W_OK | os.X_OK) or (os.path.exists(output) and not os.access(output, os.W_OK)):
        raise click.BadParameter(f"{output}: not writable", param_hint="--output")


def write_file(path, text) -> None:
    """Write a report file as a new file renamed onto `path`: a symlink committed at that path
    (a pull request's `archaudit-sarif/archaudit-sm_120.sarif -> ~/.bashrc`) is replaced, never
    written through, and a FIFO there cannot block the run. Created with the usual permissions.
    text: a str, or an iterator of str pieces written one after the other (a long report is
    never held whole)."""
    # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
    import tempfile

    path = os.fspath(path)
    fd, tmp = tempfile.mkstemp(prefix=".archaudit-", dir=os.path.dirname(path) or ".")
    try:
        mask = os.umask(0)
        os.umask(mask)
        os.fchmod(fd, 0o666 & ~mask)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            if isinstance(text, str):
                fh.write(text)
            else:
                fh.writelines(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_output(text, output: str | None) -> None:
    """The report to the file `output` (see write_file), or to stdout when there is none. text:
    a str or an iterator of str pieces."""
    if output:
        write_file(output, text)
    elif isinstance(text, str):
        click.echo(text, nl=False)
    else:
        for piece in text:
            click.echo(piece, nl=False)


# --- options several commands take, each declared once -------------------------------------
def targets_option(help: str, required: bool = False):
    """--target/-t GPU, repeatable, into `targets`."""
    return click.option("--target", "-t", "targets", multiple=True, metavar="GPU", required=required, help=help)


def target_option(help: str, dest: str = "target", metavar: str = "GPU"):
    """--target/-t: the one GPU the command is for (required), into `dest`."""
    return click.option("--target", "-t", dest, required=True, metavar=metavar, help=help)


def format_option(*choices: str):
    """--format FMT into `fmt`, the first choice by default."""
    return click.option("--format", "fmt", type=click.Choice(list(choices)), default=choices[0], show_default=True)


def output_option(help: str | None = None, **kw):
    """-o/--output FILE (a file, not a directory, unless `type` says otherwise)."""
    kw.setdefault("type", click.Path(dir_okay=False, writable=True))
    return click.option("-o", "--output", help=help, **kw)


def quiet_option(help: str = "No progress output on stderr."):
    return click.option("-q", "--quiet", is_flag=True, help=help)


def no_cache_option(help: str = "Neither read nor write the cache (the same one `scan` uses)."):
    return click.option("--no-cache", is_flag=True, help=help)
