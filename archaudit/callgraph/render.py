"""Formatters for the call graph and explanations: pure functions of data, no analysis."""
from __future__ import annotations

import json
import re

import networkx as nx

from ..report.shown import shown
from . import Explanation


def _label(g: nx.DiGraph, n: str, names: dict) -> str:
    if n.startswith("<jit:"):
        return f"JIT {names.get(n, n)}"
    return n


def to_dot(g: nx.DiGraph, names: dict | None = None, title: str = "callgraph") -> str:
    names = names or {}
    ids = {n: f"n{i}" for i, n in enumerate(sorted(g.nodes))}
    out = [f"digraph {json.dumps(title)} {{", "  rankdir=LR;", "  node [shape=box, fontsize=10];"]
    for n in sorted(g.nodes):
        kind = g.nodes[n].get("kind", "")
        attrs = {"label": _label(g, n, names)}
        if kind == "jit":
            attrs.update(shape="box3d", style="filled", fillcolor="lightyellow")
        elif kind == "unresolved":
            attrs.update(style="dashed", color="red")
        elif kind == "gate":
            attrs.update(shape="diamond", style="filled", fillcolor="lightblue")
        elif kind in ("external", "builtin"):
            attrs.update(color="gray", fontcolor="gray")
        a = ", ".join(f"{k}={json.dumps(v)}" for k, v in attrs.items())
        out.append(f"  {ids[n]} [{a}];")
    for u, v, d in sorted(g.edges(data=True), key=lambda e: (e[0], e[1])):
        site = d.get("sites", [("", 0, "")])[0]
        lab = f"{d.get('how', '')} @{site[0].rsplit('/', 1)[-1]}:{site[1]}" if site[0] else d.get("how", "")
        out.append(f"  {ids[u]} -> {ids[v]} [label={json.dumps(lab)}, fontsize=8];")
    out.append("}")
    return "\n".join(out) + "\n"


_MERMAID_BAD = re.compile(r'["\[\]{}()<>|]')


def to_mermaid(g: nx.DiGraph, names: dict | None = None) -> str:
    names = names or {}
    ids = {n: f"n{i}" for i, n in enumerate(sorted(g.nodes))}
    out = ["flowchart LR"]
    for n in sorted(g.nodes):
        kind = g.nodes[n].get("kind", "")
        lab = _MERMAID_BAD.sub(" ", shown(_label(g, n, names))).strip()
        if kind == "jit":
            out.append(f'  {ids[n]}[["{lab}"]]')
        elif kind == "gate":
            out.append(f'  {ids[n]}{{"{lab}"}}')
        elif kind == "unresolved":
            out.append(f'  {ids[n]}(["{lab}"])')
        else:
            out.append(f'  {ids[n]}["{lab}"]')
    for u, v, d in sorted(g.edges(data=True), key=lambda e: (e[0], e[1])):
        how = _MERMAID_BAD.sub(" ", shown(d.get("how", ""))).strip()
        out.append(f"  {ids[u]} -->|{how}| {ids[v]}" if how else f"  {ids[u]} --> {ids[v]}")
    return "\n".join(out) + "\n"


def explain_text(e: Explanation) -> str:
    s = e.site
    out = [f"{s.path}:{s.line}  in {e.function or '?'}", f"  {s.expr}" if s.expr else ""]
    out = [x for x in out if x]
    if not e.modules:
        out.append(f"  {e.note}")
    for b in e.modules:
        m = b.module
        out.append("")
        out.append(f"JIT module {m.name}  [{b.arm}]  ({m.rule}, {m.path}:{m.line}, in {m.function})")
        out.append("  chain:")
        for ln in b.chain:
            how = f"  ({ln.how})" if ln.how else ""
            out.append(f"    {ln.kind:10} {ln.path}:{ln.line}  {ln.text}{how}")
        if b.built_by:
            out.append("  built by:")
            for ln in b.built_by:
                out.append(f"    {ln.path}:{ln.line}  {ln.text}")
        out.append(f"  entry points: {', '.join(b.entry_points) if b.entry_points else 'unknown'}")
        out.append("  nvcc flags:")
        for f in m.flags or []:
            maj = f" majors={list(f.majors)}" if f.majors else ""
            out.append(f"    {f.kind:10} {f.path}:{f.line}  {f.text}{maj}")
        if not m.flags:
            out.append("    (none)")
        out.append("  sources:")
        for sf in m.sources:
            extra = f"  <- {', '.join(sf.templates)}" if sf.templates else (f"  ({sf.reason})" if sf.reason else "")
            out.append(f"    {sf.status:10} {sf.path or sf.text}{extra}")
        for kind, why in m.unresolved:
            out.append(f"  unresolved {kind}: {why}")
    return "\n".join(map(shown, out)) + "\n"  # names from the scanned tree: report/shown.py
