"""Click command of the binary side: `archaudit binary FILE... [--target T]`."""
from __future__ import annotations

import json
import os
import sys

import click

from ..report.shown import shown
from .common import format_option, parse_targets, targets_option

# What a directory walk picks up: device code lives in these files
_BINARY_SUFFIXES = (".so", ".cubin", ".fatbin", ".o", ".a")
_MAX_WALK_FILES = 100_000


def _expand(paths: tuple[str, ...]) -> list[str]:
    out: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            for root, dirs, files in os.walk(p):
                dirs.sort()
                for f in sorted(files):
                    if f.endswith(_BINARY_SUFFIXES) or ".so." in f:
                        out.append(os.path.join(root, f))
                        if len(out) >= _MAX_WALK_FILES:
                            return out
        else:
            out.append(p)
    return out


def _describe(a) -> str:
    extra = [x for x in (a.compressed, "relocatable" if a.relocatable else "") if x]
    return a.name + (f" ({', '.join(extra)})" if extra else "")


def register(main: click.Group) -> None:
    @main.command("binary")
    @click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=str))
    @targets_option("GPU to check: sm_120, 12.0, 'RTX PRO 6000', ... Repeatable.")
    @format_option("text", "json")
    def binary_cmd(paths: tuple[str, ...], targets: tuple[str, ...], fmt: str) -> None:
        """List the GPU architectures prebuilt binaries carry, read from their bytes.

        PATHS are cubins, .fatbin files, host objects or shared libraries (their .nv_fatbin
        sections), or directories (searched for .so/.cubin/.fatbin/.o/.a). With --target, says
        whether each GPU runs the code as machine code (SASS), only through the driver's PTX JIT,
        or not at all. Exit status: 0 readable (and, with --target, runnable on every target),
        1 some target cannot run some file, 2 usage error or unreadable/malformed input.
        """
        # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
        from ..binary.fatbin import read_file, runs_on_detail
        from ..targets import registry

        reqs = parse_targets(targets)
        reg = registry()
        files = _expand(paths)
        missing = [p for p in files if not os.path.exists(p)]
        if missing:
            raise click.UsageError(f"no such file: {missing[0]}")
        results = []
        status = 0
        for path in files:
            info = read_file(path)
            verdicts = {}
            host_only = not info.archs and not info.diagnostics and info.format == "host-elf"
            for r in reqs:
                # host code without device code does not depend on the GPU
                v, via = ("host-only", "") if host_only else runs_on_detail(info.archs, r.gpu, reg)
                verdicts[r.gpu.name] = (v, via)
                if v == "no":
                    status = max(status, 1)
            if info.format == "unknown" or (not info.archs and info.diagnostics):
                status = 2
            results.append((path, info, verdicts))
        if fmt == "json":
            out = []
            for path, info, verdicts in results:
                d = {"path": path, **info.to_json()}
                if reqs:
                    d["runs_on"] = {g: {"how": v, "via": via} for g, (v, via) in verdicts.items()}
                out.append(d)
            click.echo(json.dumps(out, indent=2))
        else:
            def echo(line: str) -> None:  # names and notes read from the files: report/shown.py
                click.echo(shown(line))

            for path, info, verdicts in results:
                head = f"{path}: {info.format}"
                if info.format in ("fatbin", "host-elf"):
                    head += f", {info.containers} fatbin container(s)"
                echo(head)
                sass = [_describe(a) for a in info.archs if a.kind == "sass"]
                ptx = [_describe(a) for a in info.archs if a.kind == "ptx"]
                if not info.archs and info.format != "unknown":
                    echo("  no device code")
                if sass:
                    echo("  SASS: " + " ".join(dict.fromkeys(sass)))
                if ptx:
                    echo("  PTX:  " + " ".join(dict.fromkeys(ptx)))
                for d in info.diagnostics:
                    echo(f"  note: {d}")
                for g, (v, via) in verdicts.items():
                    text = {"sass": f"runs (SASS {via})", "ptx-jit": f"runs through the driver's PTX JIT ({via})",
                            "no": "does not run (no SASS or PTX usable on it)",
                            "host-only": "no device code, nothing GPU-specific"}[v]
                    echo(f"  {g}: {text}")
        sys.exit(status)
