"""The names a Python statement binds, in one small vocabulary shared by every analysis.

Each binding statement of the IR (import, from-import, def, class, assignment, for, with,
augmented assignment) gives one typed binding per name it binds, in source order, with the
statement it comes from. Relative imports are made absolute here, once (`relative_module`).
What a binding means is left to the analyses: the value interpreter (python/interp.py) unions
every binding that reaches a name, the call-graph resolver (callgraph/resolve.py) follows each to
what it refers to, the binary-sink finder (binary/sinks.py) keeps the imports only, the index
(python/index.py) keeps the last def or class of each name (`last_definitions`), and the
containment check (callgraph/confine.py) the set of names bound (`names_bound`).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..parsing.python_ir import N


@dataclass(frozen=True, slots=True)
class ModuleImport:
    """`import a.b` binds `a` to module `a` (aliased False); `import a.b as c` binds `c` to
    module `a.b` (aliased True)."""
    local: str
    module: str
    aliased: bool
    node: N


@dataclass(frozen=True, slots=True)
class FromImport:
    """`from [.]m import name [as local]`: module is m made absolute; aliased when an alias
    other than the name is given; relative when the import has leading dots."""
    local: str
    module: str
    name: str
    aliased: bool
    relative: bool
    node: N


@dataclass(frozen=True, slots=True)
class StarImport:
    """`from [.]m import *`: module made absolute."""
    module: str
    relative: bool
    node: N


@dataclass(frozen=True, slots=True)
class Definition:
    """`def name(...)`."""
    name: str
    node: N


@dataclass(frozen=True, slots=True)
class ClassDefinition:
    """`class name(...)`."""
    name: str
    node: N


@dataclass(frozen=True, slots=True)
class Assignment:
    """One target of `t1 = t2 = value` or `t: annotation [= value]` (node: the statement)."""
    target: N
    node: N


@dataclass(frozen=True, slots=True)
class LoopBinding:
    """The target of `for target in ...` (node: the loop)."""
    target: N
    node: N


@dataclass(frozen=True, slots=True)
class WithBinding:
    """`with context as target` (node: the with statement)."""
    target: N
    context: N
    node: N


@dataclass(frozen=True, slots=True)
class AugmentedAssignment:
    """`target op= value` (node: the statement)."""
    target: N
    node: N


Binding = (ModuleImport | FromImport | StarImport | Definition | ClassDefinition | Assignment
           | LoopBinding | WithBinding | AugmentedAssignment)

# the statement kinds that bind names (any other gives no binding)
BINDING_KINDS = frozenset(("import", "importfrom", "def", "class", "assign", "for", "with", "augassign"))


def relative_module(modname: str, is_pkg: bool, level: int, name: str) -> str:
    """Absolute module name for `from <level dots><name> import ...` inside module `modname`
    (is_pkg: modname is a package's __init__, so one dot is the package itself)."""
    if level == 0:
        return name
    base = modname.split(".")
    if not is_pkg:
        base = base[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, name] if name else base)


def statement_bindings(st: N, modname: str, is_pkg: bool):
    """The bindings statement `st` of module `modname` makes, in source order (none for a
    statement that binds nothing; nested statements are the caller's to walk)."""
    k = st.k
    if k == "import":
        for name, alias in st.f["names"]:
            if alias:
                yield ModuleImport(alias, name, True, st)
            else:
                top = name.split(".")[0]
                yield ModuleImport(top, top, False, st)
    elif k == "importfrom":
        level = st.f["level"]
        base = relative_module(modname, is_pkg, level, st.f["module"])
        if st.f["star"]:
            yield StarImport(base, level > 0, st)
        for name, alias in st.f["names"]:
            yield FromImport(alias or name, base, name, bool(alias and alias != name), level > 0, st)
    elif k == "def":
        yield Definition(st.f["name"], st)
    elif k == "class":
        yield ClassDefinition(st.f["name"], st)
    elif k == "assign":
        for t in st.f["targets"]:
            yield Assignment(t, st)
    elif k == "for":
        yield LoopBinding(st.f["target"], st)
    elif k == "with":
        for e, t in st.f["items"]:
            if t is not None:
                yield WithBinding(t, e, st)
    elif k == "augassign":
        yield AugmentedAssignment(st.f["target"], st)


def imports_of(st: N, modname: str, is_pkg: bool):
    """The ModuleImport and FromImport bindings of an import statement (none for another)."""
    if st.k == "import" or st.k == "importfrom":
        for bd in statement_bindings(st, modname, is_pkg):
            if not isinstance(bd, StarImport):
                yield bd


def flat_targets(t: N) -> list[N]:
    """The single targets of an assignment target, through tuples, lists and starred items
    (names, attributes, subscripts)."""
    if t.k in ("tuple", "list"):
        return [x for e in t.f["elts"] for x in flat_targets(e)]
    if t.k == "starred":
        return flat_targets(t.f["value"])
    return [t]


def target_names(t: N) -> list[str]:
    """The names an assignment target binds, through tuples, lists and starred items."""
    return [x.f["id"] for x in flat_targets(t) if x.k == "name"]


def names_bound(bd: Binding) -> list[str]:
    """The names one binding binds (none for a star import: they are the other module's)."""
    if isinstance(bd, (ModuleImport, FromImport)):
        return [bd.local]
    if isinstance(bd, (Definition, ClassDefinition)):
        return [bd.name]
    if isinstance(bd, StarImport):
        return []
    return target_names(bd.target)


def last_definitions(bindings) -> dict[str, N]:
    """name -> the statement of the last def or class binding it, as running the statements
    in order leaves it."""
    out: dict[str, N] = {}
    for bd in bindings:
        if isinstance(bd, (Definition, ClassDefinition)):
            out[bd.name] = bd.node
    return out
