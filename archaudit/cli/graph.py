"""Click commands of the call graph: `graph`, `callgraph`, `explain`."""
from __future__ import annotations

import json
import re

import click

from .common import (check_output, format_option, no_cache_option, output_option, parse_targets, scan_with_progress,
                     source_errors_as_usage, targets_option, write_output)

_SITE = re.compile(r"^(?P<file>.+):(?P<line>\d+)$")


def _open(path: str):
    # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
    from ..callgraph import Analysis

    with source_errors_as_usage():
        return Analysis.open(path)


def _file_line(source, text: str) -> tuple[str, int]:
    """FILE:LINE -> (FILE relative to the scan root, LINE); FILE may also be absolute under it."""
    m = _SITE.match(text)
    if not m:
        raise click.BadParameter(f"{text!r}: expected FILE:LINE", param_hint="FILE:LINE")
    f = m.group("file").replace("\\", "/")
    root = getattr(source, "root", None)
    if root is not None and f.startswith(str(root).rstrip("/") + "/"):
        f = f[len(str(root).rstrip("/")) + 1:]
    return f, int(m.group("line"))


def _site(a, text: str):
    """FILE:LINE -> GateSite; FILE is relative to the scan root (or absolute under it)."""
    f, line = _file_line(a.source, text)
    if not f.endswith(".py") and a.source.read(f) is not None:
        # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
        from ..callgraph import GateSite

        # a C/C++ runtime check: found again by explain from the file's bytes
        return GateSite(f, line, 1, None, "", "")
    site = a.site_at(f, line)
    if site is None:
        raise click.UsageError(f"{text}: no such file/line in the scan (paths are relative to the scan root)")
    return site


def explain_data(a, site):
    """Data for `explain` (the lead adds per-target verdicts on top of this)."""
    return a.explain(site)


@click.command("explain")
@click.argument("path", type=click.Path(path_type=str))
@click.argument("site", metavar="FILE:LINE")
@targets_option("Judge the gate for this GPU (sm_120, 12.0, 'RTX PRO 6000', ...). Repeatable.")
@format_option("text", "json")
@output_option()
@no_cache_option("With --target: neither read nor write the cache `scan` uses.")
def explain_cmd(path, site, targets, fmt, output, no_cache):
    """Chain from the gate at FILE:LINE to each JIT module it controls, with its sources. With
    --target: the gate as the scan of PATH for those targets judged it (read from the scan's cache
    when `archaudit scan` has run), for each target it excludes the verdict (software-only /
    partial / hardware-bound / binary-only / unresolved) with evidence and patch."""
    # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
    from ..callgraph.render import explain_text
    from ..runtime import run_with_big_stack

    check_output(output)
    if targets:
        _explain_targets(path, site, targets, fmt, output, no_cache)
        return
    a = _open(path)
    s = _site(a, site)
    if not s.path.endswith(".py"):
        raise click.UsageError(f"{site}: a C/C++ runtime check is explained with --target (it is judged with the "
                               "JIT module that compiles its file)")
    e = run_with_big_stack(lambda: explain_data(a, s))
    write_output(json.dumps(e.to_json(), indent=2) + "\n" if fmt == "json" else explain_text(e), output)


def _explain_targets(path, site, targets, fmt, output, no_cache) -> None:
    """The scan's verdicts for the gates on one line: the scan runs through its cache (a hit after
    `archaudit scan PATH -t ...` with the same targets), so explain says what scan reported."""
    # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
    from ..verdict.explain import from_scan, render_text
    from ..report.jsonout import finding_to_json, gate_to_json
    from ..sources import open_source
    from ..targets import registry

    if not _SITE.match(site):
        raise click.BadParameter(f"{site!r}: expected FILE:LINE", param_hint="FILE:LINE")
    reqs = parse_targets(tuple(targets))
    reg = registry()
    with source_errors_as_usage():
        source = open_source(path)
    f, line = _file_line(source, site)
    result = scan_with_progress(path, reqs, reg, False, cache=not no_cache)
    expls = from_scan(result, f, line)
    if not expls:
        if source.read(f) is None:
            raise click.UsageError(f"{site}: no such file/line in the scan (paths are relative to the scan root)")
        raise click.UsageError(f"{f}:{line}: no architecture gate on this line")
    if fmt == "json":
        data = [{"gate": gate_to_json(e.gate, reg, reqs), "admitted": e.admitted,
                 "not_evaluated": [{"target": t, "earlier_arm": {"path": eg.path, "line": eg.line, "expr": eg.expr}}
                                   for t, eg in e.not_evaluated],
                 "findings": [finding_to_json(f) for f in e.findings]} for e in expls]
        write_output(json.dumps(data, indent=2) + "\n", output)
    else:
        write_output(render_text(expls, reg), output)


@click.command("graph")
@click.argument("path", type=click.Path(path_type=str))
@click.option("--from", "start", required=True, metavar="QUALNAME|FILE:LINE",
              help="A function (pkg.mod.func) or a gate position (file.py:LINE).")
@format_option("dot", "mermaid")
@click.option("--depth", type=click.IntRange(1, 30), default=10, show_default=True)
@output_option()
def graph_cmd(path, start, fmt, depth, output):
    """The subgraph from a gate or function down to the JIT modules it reaches (DOT or Mermaid)."""
    # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
    from ..callgraph.render import to_dot, to_mermaid
    from ..runtime import run_with_big_stack

    check_output(output)
    a = _open(path)
    g, names = run_with_big_stack(lambda: _subgraph(a, start, depth))
    write_output(to_dot(g, names) if fmt == "dot" else to_mermaid(g, names), output)


def _subgraph(a, start: str, depth: int):
    # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
    import networkx as nx

    names = {}
    if _SITE.match(start) and ".py:" in start:
        site = _site(a, start)
        g = nx.DiGraph()
        gate = f"gate {site.path}:{site.line}"
        g.add_node(gate, kind="gate")
        for b in a.modules_behind(site):
            prev = gate
            for ln in b.chain:
                if ln.kind == "call":
                    node = ln.text
                elif ln.kind == "jit-module":
                    node = b.module.node
                    names[node] = b.module.name
                else:
                    continue
                if node not in g:
                    g.add_node(node, kind="jit" if ln.kind == "jit-module" else "function")
                how = b.arm if prev == gate else ln.how  # the first edge says which region of the gate
                if not g.has_edge(prev, node):
                    g.add_edge(prev, node, how=how, sites=[(ln.path, ln.line, how)])
                prev = node
        return g, names
    if a.graph.r.ctx(start) is None:
        raise click.UsageError(f"{start}: no such module, class or function in the scan")
    sub = a.graph.reachable(start, max_depth=depth)
    jits = [n for n in sub if n.startswith("<jit:")]
    if jits:
        keep = set(jits) | {start}
        for j in jits:
            keep |= nx.ancestors(sub, j)
        sub = sub.subgraph(keep).copy()
    else:
        keep = {start} | set(sub.successors(start))
        sub = sub.subgraph(keep).copy()
    for n in sub:
        if n.startswith("<jit:"):
            m = a.jit.module(n[5:-1])
            if m is not None:
                names[n] = m.name
    return sub, names


@click.command("callgraph")
@click.argument("path", type=click.Path(path_type=str))
@format_option("pycg", "json")
@output_option()
@no_cache_option("Neither read nor write the cache `scan` uses.")
def callgraph_cmd(path, fmt, output, no_cache):
    """The whole call graph: PyCG JSON ({"pkg.mod.func": [callees]}) or archaudit JSON (edges with sites)."""
    # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
    from ..cache import Cache
    from ..derived import cached_by_inputs

    check_output(output)
    store = None if no_cache else Cache()
    # the whole graph of a large tree takes minutes: stored under the fingerprint of the files
    with source_errors_as_usage():
        text = cached_by_inputs(store, path, "callgraph", (fmt,), lambda: _callgraph_text(path, fmt))
    write_output(text, output)


def _callgraph_text(path, fmt) -> str:
    # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
    from ..runtime import run_with_big_stack

    a = _open(path)
    run_with_big_stack(lambda: a.graph.build_all(arg_flow=True))
    if fmt == "pycg":
        return json.dumps(a.graph.to_pycg(), indent=1, sort_keys=True) + "\n"
    g = a.graph.g
    data = {
        "nodes": [{"name": n, **{k: v for k, v in d.items() if v is not None}} for n, d in sorted(g.nodes(data=True))],
        "edges": [{"caller": u, "callee": v, "how": d["how"], "sites": [list(s) for s in d["sites"]]}
                  for u, v, d in sorted(g.edges(data=True), key=lambda e: (e[0], e[1]))],
        "jit_modules": [m.to_json() for m in (a.jit.module(k) for k in sorted(a.graph.r.sinks)) if m is not None],
    }
    return json.dumps(data, indent=1) + "\n"


def register(main: click.Group) -> None:
    main.add_command(explain_cmd)
    main.add_command(graph_cmd)
    main.add_command(callgraph_cmd)
