"""Name resolution for the call graph: what a Python expression refers to, statically.

Works on the IR of `archaudit.parsing.python_ir` through `Index` (modules parsed on demand).
Resolution is flow-insensitive per scope (every binding of a name counts) and yields `Ref`s:
modules, functions, classes, instances, names outside the scan, JIT spec / built-module objects,
or `unresolved` with a reason. Each Ref carries `how`: the resolution rules used on the way
("import", "reexport", "module-global-alias", "self-method", ...), so every edge says why it exists.
"""
from __future__ import annotations

import builtins
import re
from dataclasses import dataclass

from ..parsing.brackets import split_top_level_commas
from ..parsing.python_ir import N, decorator_name, dotted_name, iter_stmts
from ..python.bindings import (AugmentedAssignment, Assignment, ClassDefinition, Definition, FromImport, LoopBinding,
                               ModuleImport, StarImport, WithBinding, statement_bindings)
from ..python.index import Index, ModuleInfo, flatten_top
from ..python.pybytes import may_hold_global_statement
from .rules import JitRules, SinkRule, jit_rules

BUILTINS = frozenset(n for n in dir(builtins) if not n.startswith("_")) | {"__import__", "__build_class__"}
MAX_DEPTH = 40
# Classes one class's MRO lists (real hierarchies: a few tens); past it the lookup of a member not
# found in those is unresolved ("depth-limit"), never a missing attribute or an external one
MAX_MRO_CLASSES = 200
_MRO_CUT = "cut:"
# a re-export hop (`from .a import X` in package after package, star imports) costs a tenth of a
# level: chains of up to 400 modules resolve, deeper ones end in depth-limit
IMPORT_HOP = 0.1


@dataclass(frozen=True)
class Ref:
    kind: str  # module function class instance external builtin const spec built entry partial wrapper unresolved
    target: str  # qualname / dotted name / reason kind
    how: tuple = ()
    jit: frozenset = frozenset()  # sink keys whose spec or built module this value is
    extra: str = ""  # detail: unresolved detail, const value, entry-point name

    def with_how(self, *labels: str) -> "Ref":
        h = self.how
        for lab in labels:
            if lab and lab not in h:
                h = h + (lab,)
        return Ref(self.kind, self.target, h, self.jit, self.extra)

    def prefixed(self, labels: tuple) -> "Ref":
        h = tuple(x for x in labels if x) + tuple(x for x in self.how if x not in labels)
        return Ref(self.kind, self.target, h, self.jit, self.extra)


# `torch.ops.<ns>`: the ops a prebuilt extension registers under namespace <ns>
TORCH_OPS_NS_RE = re.compile(r"torch\.ops\.[A-Za-z_][A-Za-z0-9_]*")
# the last part of `torch.ops.<ns>.<op>` when the op's name is computed at run time
COMPUTED_OP = "<op named at run time>"


def unres(kind: str, detail: str = "") -> Ref:
    return Ref("unresolved", kind, (), frozenset(), detail)


def _is_parameter(r: Ref) -> bool:
    """A parameter's value (or an attribute of it): what the callers pass, an unknown receiver."""
    return r.kind == "unresolved" and r.target == "unknown-receiver" and r.extra.startswith("parameter ")


_LOOKED_UP = {
    "dynamic-attribute": re.compile(r"(?P<owner>[\w.]+)\.(?P<attr>\w+) via __getattr__"),
    "module-getattr": re.compile(r"(?P<owner>[\w.]+)\.(?P<attr>\w+) comes from a module __getattr__"),
    "missing-attribute": re.compile(r"(?:no base of )?(?P<owner>[\w.]+) has (?:no )?(?P<attr>\w+)"),
}


def looked_up_name(kind: str, detail: str) -> str | None:
    """For an unresolved attribute whose owner is known (the details `unres` gets above: a class
    or module with `__getattr__`, or one without the name), the dotted name looked up at run time;
    None for any other unresolved value."""
    pat = _LOOKED_UP.get(kind)
    m = pat.fullmatch(detail) if pat is not None else None
    return f"{m['owner']}.{m['attr']}" if m else None


@dataclass
class SinkSite:
    key: str  # "path:line:col" of the call
    rule: SinkRule
    ctx: "Ctx"
    call: N
    via: str  # "function" | "class" | "external"
    callee: str  # qualname or dotted name of what was called


class Ctx:
    """A scope: a module, a class body, or a function (with its enclosing scopes)."""

    __slots__ = ("mod", "qual", "node", "kind", "cls", "parent", "_locals", "globals_decl", "self_name", "_memo")

    def __init__(self, mod: ModuleInfo, qual: str | None, node: N | None, kind: str, cls: str | None, parent: "Ctx | None"):
        self.mod = mod
        self.qual = qual  # qualified name inside the module (None for the module)
        self.node = node
        self.kind = kind  # "module" | "class" | "function"
        self.cls = cls  # for methods: the class qualname (module-qualified)
        self.parent = parent
        self._locals: dict | None = None
        self.globals_decl: set = set()
        self.self_name: str | None = None
        self._memo: dict = {}

    @property
    def qualname(self) -> str:
        return self.mod.name if self.qual is None else f"{self.mod.name}.{self.qual}"


def walk_exprs(x):
    """Every N below x (x: N, list, tuple, dict values), without entering nested def/class/lambda bodies."""
    stack = [x]
    while stack:
        v = stack.pop()
        if isinstance(v, N):
            yield v
            if v.k in ("def", "class", "lambda"):
                continue
            stack.extend(v.f.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)


_ANN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_ANN_WRAPPERS = {"Optional", "typing.Optional", "Union", "typing.Union", "Type", "type", "typing.Type", "Final", "ClassVar", "Annotated"}


def annotation_names(text: str) -> list[str]:
    """Class names an annotation can denote: `Foo`, `"Foo"`, `Optional[Foo]`, `Foo | None`."""
    text = text.strip().strip("'\"")
    out = []
    for m in _ANN_NAME.findall(text):
        if m in _ANN_WRAPPERS or m == "None" or m.split(".")[-1] in ("Optional", "Union", "List", "Dict", "Tuple", "Any", "Callable", "Sequence", "Iterable", "Mapping"):
            continue
        out.append(m)
    # containers (List[Foo]) do not make the object a Foo
    if re.match(r"\s*(typing\.)?(List|Dict|Tuple|Sequence|Iterable|Mapping|Set|list|dict|tuple|set|Callable)\b", text):
        return []
    return out[:3]


def param_annotations(src: bytes, node: N) -> dict[str, str]:
    """Parameter annotations of a def, read from its header bytes (the IR keeps no annotations)."""
    head = src[node.sb : node.eb]
    i = head.find(b"(")
    if i < 0:
        return {}
    depth, j = 0, i
    while j < len(head):
        c = head[j]
        if c in b"([{":
            depth += 1
        elif c in b")]}":
            depth -= 1
            if depth == 0:
                break
        j += 1
    params = head[i + 1 : j].decode("utf-8", "replace")
    out = {}
    for p in split_top_level_commas(params):
        p = p.split("=", 1)[0]
        if ":" in p:
            name, ann = p.split(":", 1)
            name = name.strip().lstrip("*")
            if name.isidentifier():
                out[name] = ann.strip()
    return out


class Resolver:
    def __init__(self, index: Index, rules: JitRules | None = None):
        self.index = index
        self.rules = rules or jit_rules()
        self._gbind: dict[str, dict] = {}
        self._star: dict[str, list] = {}
        self._all: dict[str, list | None] = {}
        self._gmemo: dict = {}
        self._ctx: dict[str, Ctx | None] = {}
        self._ret: dict[str, tuple] = {}
        self._mro: dict[str, tuple] = {}
        self._members: dict[str, dict] = {}
        self._iattrs: dict[str, dict] = {}
        self._forwards: dict[str, tuple | None] = {}  # __getattr__ -> the values it hands names on to
        self._busy: set = set()
        # list/tuple/set/dict displays met by eval: key (Ref.extra of their builtin Ref) -> (ctx, display)
        self._containers: dict[str, tuple] = {}
        self.sinks: dict[str, SinkSite] = {}
        # the call sites of each function when the whole graph is known (CallGraph.build_all
        # with arg_flow): qualname -> [(caller qualname, call, number of leading parameters
        # the call binds itself: 1 for a bound method or a constructor)]; a parameter then has
        # the arguments passed there. None: parameters have only their annotations and defaults.
        self.arg_sites: dict[str, list] | None = None
        # per module: (lambda start byte -> qual, qual -> lambda node), see lambdas()
        self._lambdas: dict[str, tuple[dict, dict]] = {}

    def reset(self) -> None:
        """Forget everything resolved (bindings, returns, sinks), keeping the index, the rules
        and arg_sites: for another pass over the same tree."""
        sites = self.arg_sites
        self.__init__(self.index, self.rules)
        self.arg_sites = sites

    # ------------------------------------------------------------------ definitions
    def split(self, qualname: str) -> tuple[str, str | None] | None:
        """(module, qual inside it) for a qualified name, using the longest module prefix."""
        if self.index.has_module(qualname):
            return qualname, None
        parts = qualname.split(".")
        for i in range(len(parts) - 1, 0, -1):
            m = ".".join(parts[:i])
            if self.index.has_module(m):
                return m, ".".join(parts[i:])
        return None

    def module(self, name: str) -> ModuleInfo | None:
        return self.index.module(name, full=True) if self.index.has_module(name) else None

    def defn(self, qualname: str) -> tuple[ModuleInfo, str | None, N | None, str] | None:
        sp = self.split(qualname)
        if sp is None:
            return None
        mod = self.module(sp[0])
        if mod is None:
            return None
        q = sp[1]
        if q is None:
            return mod, None, None, "module"
        if q in mod.functions:
            return mod, q, mod.functions[q], "function"
        if q in mod.classes:
            return mod, q, mod.classes[q], "class"
        if "<lambda" in q:
            node = self.lambdas(mod)[1].get(q)
            if node is not None:
                return mod, q, node, "function"
        return None

    def lambdas(self, mod: ModuleInfo) -> tuple[dict, dict]:
        """The lambdas of a module as scopes, named as PyCG names them: `<lambdaN>`, counted in
        source order per enclosing scope (`f.<locals>.<lambda1>`, `C.<lambda2>`, `<lambda1>` at
        module level; a lambda inside a lambda under it). (start byte -> qual, qual -> node)."""
        got = self._lambdas.get(mod.name)
        if got is not None:
            return got
        by_sb: dict[int, str] = {}
        by_q: dict[str, N] = {}
        self._lambdas[mod.name] = (by_sb, by_q)
        src = mod.parsed.src
        if b"lambda" not in src:
            return by_sb, by_q
        # (statements, scope qual or None, prefix of names defined in it)
        todo: list = [(mod.parsed.body, None, "")]
        while todo:
            body, scope, prefix = todo.pop()
            exprs: list[N] = []
            for st in iter_stmts(body):
                if st.k == "def":
                    exprs.extend(st.f.get("decorators", []))
                    exprs.extend(d for _n, d, _k in st.f["params"] if d is not None)
                    q = prefix + st.f["name"]
                    todo.append((st.f["body"], q, q + ".<locals>."))
                elif st.k == "class":
                    exprs.extend(st.f.get("decorators", []))
                    exprs.extend(st.f["bases"])
                    q = prefix + st.f["name"]
                    todo.append((st.f["body"], q, q + "."))
                else:
                    exprs.append([v for key, v in st.f.items() if key not in ("body", "orelse", "handlers", "final")])
            found = [e for e in walk_exprs(exprs) if e.k == "lambda"]
            self._name_lambdas(found, prefix, by_sb, by_q)
        return by_sb, by_q

    def _name_lambdas(self, found: list, prefix: str, by_sb: dict, by_q: dict) -> None:
        for i, lam in enumerate(sorted(found, key=lambda x: x.sb), 1):
            q = f"{prefix}<lambda{i}>"
            if lam.sb in by_sb:
                continue
            by_sb[lam.sb] = q
            by_q[q] = lam
            inner = [e for e in walk_exprs([lam.f["body"]] + [d for _n, d, _k in lam.f["params"] if d is not None])
                     if e.k == "lambda"]
            self._name_lambdas(inner, q + ".<locals>.", by_sb, by_q)

    def ctx(self, qualname: str) -> Ctx | None:
        if qualname in self._ctx:
            return self._ctx[qualname]
        self._ctx[qualname] = None  # cycles in malformed input
        d = self.defn(qualname)
        c = None
        if d is not None:
            mod, q, node, kind = d
            if kind == "module":
                c = Ctx(mod, None, None, "module", None, None)
            else:
                parent_q, cls = self._enclosing(mod, q)
                parent = self.ctx(f"{mod.name}.{parent_q}" if parent_q else mod.name)
                c = Ctx(mod, q, node, kind, cls, parent)
                if kind == "function" and cls is not None:
                    params = node.f["params"]
                    decos = [decorator_name(x) for x in node.f.get("decorators", [])]
                    if params and params[0][2] == "" and "staticmethod" not in decos:
                        c.self_name = params[0][0]
                        if "classmethod" in decos:
                            c.self_name = "@cls:" + params[0][0]
        self._ctx[qualname] = c
        return c

    def _enclosing(self, mod: ModuleInfo, q: str) -> tuple[str | None, str | None]:
        """(qual of the enclosing function or class scope whose names are visible, class of a method)."""
        if "." not in q:
            return None, None
        head, _ = q.rsplit(".", 1)
        if head.endswith(".<locals>"):
            return head[: -len(".<locals>")], None
        if head in mod.classes:
            # a method: class scope names are not visible; the scope around the class is
            outer, _ = self._enclosing(mod, head)
            return outer, f"{mod.name}.{head}"
        return None, None

    # ------------------------------------------------------------------ bindings
    def gbind(self, modname: str) -> dict:
        b = self._gbind.get(modname)
        if b is not None:
            return b
        b = {}
        self._gbind[modname] = b
        mod = self.module(modname)
        if mod is None:
            return b
        stars = []
        self._collect(mod.parsed.body, b, stars, mod, top=True)
        if may_hold_global_statement(mod.parsed.src):
            # assignments to `global` names inside functions also bind module names
            for q, fn in mod.all_functions():
                if not may_hold_global_statement(mod.parsed.src, fn.sb, fn.eb):
                    continue  # its statements lie in its span (nested defs are not entered)
                g = set()
                for st in iter_stmts(fn.f["body"]):
                    if st.k == "global":
                        g.update(st.f["names"])
                if g:
                    fctx = self.ctx(f"{modname}.{q}")
                    for st in iter_stmts(fn.f["body"]):
                        if st.k == "assign":
                            for t in st.f["targets"]:
                                if t.k == "name" and t.f["id"] in g:
                                    b.setdefault(t.f["id"], []).append(("assign", st.f["value"], st.f["annotation"], fctx))
        self._star[modname] = stars
        return b

    def _collect(self, body, b: dict, stars: list | None, mod: ModuleInfo, top: bool, prefix: str = "") -> None:
        stmts = flatten_top(body) if top else iter_stmts(body)
        for st in stmts:
            if st.k == "expr":
                self._bind_growth(b, st.f["value"])
                continue
            for bd in statement_bindings(st, mod.name, mod.is_pkg):
                self._bind(b, bd, stars, prefix)

    def _bind(self, b: dict, bd, stars: list | None, prefix: str) -> None:
        """Enter one binding (python/bindings.py) in `b` as this resolver's tuple, its kind first
        (see _eval_binding); a star import goes to `stars` when given."""
        st = bd.node
        if isinstance(bd, ModuleImport):
            b.setdefault(bd.local, []).append(("import-as" if bd.aliased else "import", bd.module, st))
        elif isinstance(bd, FromImport):
            b.setdefault(bd.local, []).append(("from", bd.module, bd.name, bd.aliased, bd.relative, st))
        elif isinstance(bd, StarImport):
            if stars is not None:
                stars.append((bd.module, bd.relative, st))
        elif isinstance(bd, Assignment):
            self._bind_target(b, bd.target, st.f["value"], st.f["annotation"], st)
        elif isinstance(bd, Definition):
            b.setdefault(bd.name, []).append(("def", prefix + bd.name, st))
        elif isinstance(bd, ClassDefinition):
            b.setdefault(bd.name, []).append(("class", prefix + bd.name, st))
        elif isinstance(bd, LoopBinding):
            for t in walk_exprs(bd.target):
                if t.k == "name":
                    b.setdefault(t.f["id"], []).append(("iter", st.f["iter"], st))
        elif isinstance(bd, WithBinding):
            if bd.target.k == "name":
                b.setdefault(bd.target.f["id"], []).append(("with", bd.context, st))
        elif isinstance(bd, AugmentedAssignment):
            if bd.target.k == "name":
                b.setdefault(bd.target.f["id"], []).append(("aug", st.f["value"], st))

    def _bind_target(self, b: dict, t: N, value: N | None, ann: N | None, st: N, path: tuple = ()) -> None:
        """Bindings of an assignment target. `path`: the places of a nested target inside the
        assigned value when that value is not a display (`a, (b, c) = f()`)."""
        if t.k == "name":
            if path:
                b.setdefault(t.f["id"], []).append(("unpack-at", value, path, st))
            else:
                b.setdefault(t.f["id"], []).append(("assign", value, ann, None))
        elif t.k in ("tuple", "list"):
            elts = t.f["elts"]
            stars = [i for i, e in enumerate(elts) if e.k == "starred"]
            vel = value.f["elts"] if not path and value is not None and value.k in ("tuple", "list") else None
            if vel is not None and any(v.k == "starred" for v in vel):
                vel = None
            if vel is not None and not stars and len(vel) != len(elts):
                vel = None
            if vel is not None and len(stars) == 1 and len(vel) >= len(elts) - 1:
                # `a, *b, c = f1, f2, f3, f4`: b is the list of the values between
                s0 = stars[0]
                after = len(elts) - s0 - 1
                for i, e in enumerate(elts):
                    if i < s0:
                        self._bind_target(b, e, vel[i], None, st)
                    elif i > s0:
                        self._bind_target(b, e, vel[len(vel) - (len(elts) - i)], None, st)
                    elif e.f["value"] is not None:
                        mid = vel[s0:len(vel) - after]
                        sb, eb = (mid[0].sb, mid[-1].eb) if mid else (e.sb, e.eb)
                        self._bind_target(b, e.f["value"], N("list", e.line, e.col, sb, eb, {"elts": mid}), None, st)
                return
            if vel is not None and not stars:
                for i, e in enumerate(elts):
                    self._bind_target(b, e, vel[i], None, st)
                return
            for i, e in enumerate(elts):
                if e.k == "name" and not path:
                    b.setdefault(e.f["id"], []).append(("unpack", value, i, st))
                elif e.k in ("name", "tuple", "list"):
                    self._bind_target(b, e, value, None, st, path + (i,))
                elif e.k == "starred" and e.f["value"] is not None and e.f["value"].k == "name":
                    # any item of the value (its place is not known without the value's length)
                    b.setdefault(e.f["value"].f["id"], []).append(("unpack-at", value, path + (None,), st))
        elif t.k == "subscript" and t.f["value"].k == "name" and value is not None:
            # `d["k"] = f`: an item of the container bound to d (read through `d[...]`)
            b.setdefault(t.f["value"].f["id"] + "[]", []).append(("item", t.f["index"], value, None))

    # methods that put an item (or the items of their argument) into a list, set or dict
    _GROW_ONE = {"append": 0, "add": 0, "insert": 1}
    _GROW_MANY = ("extend", "update")

    def _bind_growth(self, b: dict, e: N) -> None:
        """`d.append(f)`, `d.update({...})`, `d.setdefault(k, f)` as statements: items of d."""
        if e is None or e.k != "call" or e.f["func"].k != "attr" or e.f["func"].f["value"].k != "name":
            return
        meth, args = e.f["func"].f["attr"], e.f["args"]
        key = e.f["func"].f["value"].f["id"] + "[]"
        if meth in self._GROW_ONE and len(args) > self._GROW_ONE[meth]:
            b.setdefault(key, []).append(("item", None, args[self._GROW_ONE[meth]], None))
        elif meth == "setdefault" and len(args) == 2:
            b.setdefault(key, []).append(("item", args[0], args[1], None))
        elif meth in self._GROW_MANY and len(args) == 1:
            b.setdefault(key, []).append(("items", args[0], None, None))

    def locals_of(self, ctx: Ctx) -> dict:
        if ctx._locals is not None:
            return ctx._locals
        b: dict = {}
        if ctx.kind == "function" and ctx.node.k == "lambda":
            for i, (pname, default, _pkind) in enumerate(ctx.node.f["params"]):
                b.setdefault(pname, []).append(("param", pname, None, default, i == 0 and ctx.self_name is not None))
            for e in walk_exprs([ctx.node.f["body"]]):
                if e.k == "walrus":
                    b.setdefault(e.f["target"], []).append(("assign", e.f["value"], None, None))
        elif ctx.kind == "function":
            # every def that may be bound to the name (one per branch of an if) binds its locals
            nodes = ctx.mod.bound_defs(ctx.qual)
            src = ctx.mod.parsed.src
            for node in nodes:
                anns = None
                for i, (pname, default, pkind) in enumerate(node.f["params"]):
                    if anns is None:
                        # an annotation needs a `:` before the def's first `)` (searched in
                        # place: splitting the whole def's bytes at every `)` copied them all)
                        close = src.find(b")", node.sb, node.eb)
                        has_colon = src.find(b":", node.sb, node.eb if close < 0 else close) >= 0
                        anns = param_annotations(src, node) if has_colon else {}
                    b.setdefault(pname, []).append(("param", pname, anns.get(pname), default, i == 0 and ctx.self_name is not None))
                for st in iter_stmts(node.f["body"]):
                    if st.k in ("global", "nonlocal"):  # names of another scope, not locals
                        ctx.globals_decl.update(st.f["names"])
                self._collect(node.f["body"], b, None, ctx.mod, top=False, prefix=ctx.qual + ".<locals>.")
            for name in ctx.globals_decl:
                b.pop(name, None)
            # walrus targets
            for e in walk_exprs([node.f["body"] for node in nodes]):
                if e.k == "walrus":
                    b.setdefault(e.f["target"], []).append(("assign", e.f["value"], None, None))
        elif ctx.kind == "class":
            self._collect(ctx.node.f["body"], b, None, ctx.mod, top=True, prefix=ctx.qual + ".")
        ctx._locals = b
        return b

    # ------------------------------------------------------------------ lookup
    def lookup(self, ctx: Ctx, name: str, depth: int = 0) -> tuple:
        c = ctx
        while c is not None and c.kind != "module":
            if c.kind == "function" or c is ctx:
                loc = self.locals_of(c)
                if name in loc:
                    return self._eval_bindings(c, name, loc[name], depth, local=c.kind == "function")
            c = c.parent
        r = self.global_name(ctx.mod.name, name, depth)
        if not r and name not in BUILTINS:
            return (unres("undefined-name", name),)
        return r

    def global_name(self, modname: str, name: str, depth: int = 0, export: bool = False) -> tuple:
        key = (modname, name, export)
        if key in self._gmemo:
            return self._gmemo[key]
        if key in self._busy:
            return ()
        self._busy.add(key)
        try:
            b = self.gbind(modname).get(name)
            mctx = self.ctx(modname)
            if b and mctx is not None:
                out = self._eval_bindings(mctx, name, b, depth, local=False, export=export)
            elif name == "__file__" or name == "__name__":
                out = (Ref("const", "str"),)
            elif not export and name in BUILTINS:
                out = (Ref("builtin", name),)
            else:
                out = self._star_or_sub(modname, name, depth)
                if not out and not export and name in BUILTINS:
                    out = (Ref("builtin", name),)
        finally:
            self._busy.discard(key)
        self._gmemo[key] = out
        return out

    def _star_or_sub(self, modname: str, name: str, depth: int) -> tuple:
        self.gbind(modname)
        for absmod, _rel, _st in self._star.get(modname, ()):
            if not self.index.has_module(absmod) or self.index.hidden(modname, absmod):
                continue
            if not self.index.may_bind(absmod, name):
                continue  # known from the bytes: not parsed to find nothing
            allowed = self.all_names(absmod)
            if allowed is not None and name not in allowed:
                continue
            if allowed is None and name.startswith("_"):
                continue
            r = self.export(absmod, name, depth + IMPORT_HOP)
            r = tuple(x for x in r if x.kind != "unresolved")
            if r:
                return tuple(x.prefixed(("star-import",)) for x in r)
        sub = f"{modname}.{name}"
        if self.index.has_module(sub):
            return (Ref("module", sub),)
        return ()

    def all_names(self, modname: str) -> set | None:
        """__all__ of a module when it is a constant list (with += extensions), else None."""
        if modname in self._all:
            return self._all[modname]
        mod = self.module(modname)
        out: set | None = None
        if mod is not None:
            for st in flatten_top(mod.parsed.body):
                if st.k in ("assign", "augassign"):
                    tg = st.f["targets"][0] if st.k == "assign" else st.f["target"]
                    if tg.k == "name" and tg.f["id"] == "__all__":
                        v = st.f["value"]
                        if v is not None and v.k in ("list", "tuple") and all(e.k == "const" and isinstance(e.f["value"], str) for e in v.f["elts"]):
                            out = (out or set()) | {e.f["value"] for e in v.f["elts"]}
                        else:
                            out = None
                            break
        self._all[modname] = out
        return out

    def export(self, modname: str, name: str, depth: int = 0) -> tuple:
        """What `modname.name` is, for a module in the scan."""
        r = self.global_name(modname, name, depth, export=True)
        if r:
            return r
        mod = self.module(modname)
        if mod is not None and "__getattr__" in mod.defs:
            return self.getattr_forward(f"{modname}.__getattr__", name, depth) or (
                unres("module-getattr", f"{modname}.{name} comes from a module __getattr__"),)
        return (unres("missing-attribute", f"{modname} has no {name}"),)

    def _module_ref(self, dotted: str, how: tuple, frm: str = "") -> Ref:
        """frm: the importing module (a runtime it imports is external to it: Index.hidden)."""
        if self.index.has_module(dotted) and not (frm and self.index.hidden(frm, dotted)):
            return Ref("module", dotted, how)
        return Ref("external", dotted, how)

    def _eval_bindings(self, ctx: Ctx, name: str, binds: list, depth: int, local: bool, export: bool = False) -> tuple:
        key = ("b", name, export)
        if key in ctx._memo:
            return ctx._memo[key]
        if depth > MAX_DEPTH:
            return (unres("depth-limit", f"{name}: resolution too deep"),)
        if (id(ctx), key) in self._busy:
            return ()
        self._busy.add((id(ctx), key))
        out: list[Ref] = []
        try:
            for bd in binds:
                out.extend(self._eval_binding(ctx, bd, depth, local, export))
        finally:
            self._busy.discard((id(ctx), key))
        res = _dedup(out)
        ctx._memo[key] = res
        return res

    def _eval_binding(self, ctx: Ctx, bd: tuple, depth: int, local: bool, export: bool) -> list[Ref]:
        """What one binding of a name in ctx refers to. bd: the binding, its kind first (import,
        import-as, from, def, class, assign, param, iter, with, unpack, unpack-at, aug; any other
        is an unknown value); local: the name is a function's; export: it is read from another
        module."""
        k = bd[0]
        if k in ("import", "import-as"):
            return [self._imported_module(ctx, bd, local, export)]
        if k == "from":
            return self._imported_name(ctx, bd, depth, local, export)
        if k == "def":
            return [self._func_ref(ctx.mod, bd[1], bd[2], depth)]
        if k == "class":
            return [Ref("class", f"{ctx.mod.name}.{bd[1]}")]
        if k == "assign":
            return self._assigned(ctx, bd, depth, local)
        if k == "param":
            return self._parameter(ctx, bd, depth)
        if k == "iter":
            return self._loop_variable(ctx, bd, depth)
        if k == "with":
            return [unres("unknown-receiver", "with-statement target")]
        if k in ("unpack", "unpack-at"):
            return self._unpacked(ctx, bd, depth)
        if k == "aug":
            return []
        return [unres("unknown-value", k)]

    def _imported_module(self, ctx: Ctx, bd: tuple, local: bool, export: bool) -> Ref:
        """`import a.b` (bd: ("import", "a", statement)) or `import a.b as c` (("import-as", "a.b",
        statement)): the module, external when it is not in the scan or is a runtime hidden from
        ctx's module."""
        if export:
            how: tuple = ("reexport",)
        else:
            how = ("local-import" if local else "import",) + (("alias",) if bd[0] == "import-as" else ())
        return self._module_ref(bd[1], how, ctx.mod.name)

    def _imported_name(self, ctx: Ctx, bd: tuple, depth: int, local: bool, export: bool) -> list[Ref]:
        """`from absmod import name` (bd: ("from", absmod, name, aliased, relative, statement)):
        what absmod exports as name (or its submodule name) when absmod is in the scan, else an
        external reference."""
        _, absmod, name, aliased, rel, _st = bd
        if export:
            labels: tuple = ("reexport",)
        else:
            labels = ("local-import" if local else "relative-import" if rel else "import",) + (("alias",) if aliased else ())
        if self.index.has_module(absmod) and not self.index.hidden(ctx.mod.name, absmod):
            r = self.export(absmod, name, depth + IMPORT_HOP)
            # `from pkg import submodule`
            if all(x.kind == "unresolved" for x in r) and self.index.has_module(f"{absmod}.{name}"):
                r = (Ref("module", f"{absmod}.{name}"),)
            return [x.prefixed(labels) for x in r]
        if not absmod:
            return [unres("relative-import-outside-scan", f"from {'.' * 1}{absmod} import {name}")]
        return [Ref("external", f"{absmod}.{name}", labels)]

    def _annotated(self, ctx: Ctx, annotation: str, depth: int, external: bool) -> list[Ref]:
        """The instances an annotation's text names: of each class in the scan it names, and with
        external, of each class outside the scan ("instance-external")."""
        out: list[Ref] = []
        for nm in annotation_names(annotation):
            for r in self.dotted(ctx, nm, depth):
                if r.kind == "class":
                    out.append(Ref("instance", r.target, r.how + ("annotation",)))
                elif external and r.kind == "external":
                    out.append(Ref("instance-external", r.target, r.how + ("annotation",)))
        return out

    def _assigned(self, ctx: Ctx, bd: tuple, depth: int, local: bool) -> list[Ref]:
        """`name[: annotation] = value` (bd: ("assign", value, annotation, where it is evaluated or
        None for ctx)): the instances the annotation names, then the value's references, with
        how a module or function kept under another name was reached."""
        _, value, ann, bctx = bd
        c = bctx or ctx
        out = self._annotated(c, c.mod.parsed.text(ann), depth + 1, external=False) if ann is not None else []
        if value is None:
            return out
        vals = self.eval(c, value, depth + 1)
        if value.k == "name" and not local and ctx.kind == "module":
            # `_flashinfer_comm = comm`: a module object kept in a global
            vals = tuple(v.with_how("module-global-alias") if v.kind == "module" else v for v in vals)
        elif value.k == "name" and local:
            vals = tuple(v.with_how("alias") if v.kind in ("module", "function") else v for v in vals)
        for v in vals:
            if v.kind == "instance" and value.k == "call":
                v = v.with_how("assignment-type")
            out.append(v)
        return out

    def _parameter(self, ctx: Ctx, bd: tuple, depth: int) -> list[Ref]:
        """A parameter (bd: ("param", name, annotation text, default, is_self)): self or cls of a
        method is its class; else the instances its annotation names (unresolved when none),
        its default's references and what the known call sites pass."""
        _, pname, ann, default, is_self = bd
        if is_self and ctx.cls is not None:
            if ctx.self_name and ctx.self_name.startswith("@cls:"):
                return [Ref("class", ctx.cls, ("self-method",))]
            return [Ref("instance", ctx.cls, ("self-method",))]
        out = self._annotated(ctx.parent or ctx, ann, depth + 1, external=True) if ann else []
        if not out:
            out.append(unres("unknown-receiver", f"parameter {pname}"))
        if default is not None:
            # evaluated where the def is; callers may pass something else (so the
            # parameter stays unresolved beside it)
            out.extend(x for x in self.eval(ctx.parent or ctx, default, depth + 1) if x.kind != "unresolved")
        if self.arg_sites is not None:
            out.extend(self._passed(ctx, pname, depth + 1))
        return out

    def _loop_variable(self, ctx: Ctx, bd: tuple, depth: int) -> list[Ref]:
        """A for loop's target (bd: ("iter", iterable, statement)): the items of the iterable, or
        for a tuple target any part of an item."""
        it, st = bd[1], bd[2]
        got = [x for x in self.iterated(ctx, it, depth + 1) if x.kind != "unresolved"]
        if got and st.f["target"].k != "name":
            # `for a, b in [(f, g)]`: each name any part of an item
            got = [y for y in self.items(tuple(got), None, depth + 1) if y.kind != "unresolved"] or got
        return got or [unres("unknown-receiver", "loop variable")]

    def _unpacked(self, ctx: Ctx, bd: tuple, depth: int) -> list[Ref]:
        """A name unpacked from a value (bd: ("unpack", value, index) or ("unpack-at", value,
        index path)): the items at that place."""
        path = (bd[2],) if bd[0] == "unpack" else bd[2]
        got = self.eval(ctx, bd[1], depth + 1)
        for i in path:
            got = self.items(got, i, depth + 1)
        got = tuple(x for x in got if x.kind != "unresolved")
        return list(got) or [unres("unknown-receiver", "unpacked value")]

    def _passed(self, ctx: Ctx, pname: str, depth: int) -> list[Ref]:
        """The arguments the known call sites (arg_sites) pass for parameter pname of ctx's
        function, by position or keyword, each evaluated where it is passed."""
        sites = self.arg_sites.get(ctx.qualname) if self.arg_sites else None
        if not sites or ctx.node is None:
            return []
        params = ctx.node.f["params"]
        names = [p[0] for p in params]
        if pname not in names:
            return []
        i = names.index(pname)
        kind = params[i][2]
        pos = i if kind == "" and all(p[2] == "" for p in params[:i]) else None
        out: list[Ref] = []
        for caller, call, bound in sites:
            cctx = self.ctx(caller)
            if cctx is None:
                continue
            arg = None
            args = call.f["args"]
            if pos is not None and pos >= bound and pos - bound < len(args):
                if not any(a.k == "starred" for a in args[:pos - bound + 1]):
                    arg = args[pos - bound]
            if arg is None and kind in ("", "kwonly"):
                arg = next((v for k, v in call.f["kwargs"] if k == pname), None)
            if arg is not None:
                out.extend(x.with_how("argument") for x in self.eval(cctx, arg, depth + 1) if x.kind != "unresolved")
        return out

    def _func_ref(self, mod: ModuleInfo, qual: str, node: N, depth: int) -> Ref:
        qn = f"{mod.name}.{qual}"
        how: tuple = ()
        for d in node.f.get("decorators", []):
            name = decorator_name(d)
            if name in ("staticmethod", "classmethod", "property", "abstractmethod", "overload"):
                continue
            full = self._dotted_text(d.f["func"] if d.k == "call" else d)
            if full in self.rules.cache_wrappers or name in self.rules.cache_wrapper_names:
                how = how + ("lru_cache/partial",) if "lru_cache/partial" not in how else how
            elif "decorator" not in how:
                how = how + ("decorator",)
        return Ref("function", qn, how)

    _dotted_text = staticmethod(dotted_name)

    def dotted(self, ctx: Ctx, dotted: str, depth: int = 0) -> tuple:
        parts = dotted.split(".")
        refs = self.lookup(ctx, parts[0], depth)
        for p in parts[1:]:
            refs = self.attr(refs, p, depth + 1)
        return refs

    # ------------------------------------------------------------------ classes
    def mro(self, cls: str, _depth: int = 0) -> tuple:
        """Class qualnames (scanned) and external base names, nearest first (depth-first, left to
        right); at most MAX_MRO_CLASSES of them, then _MRO_CUT when bases were left out (or a
        chain of bases more than MAX_MRO_CLASSES deep from the class first asked about). Each
        class's list is made once: a hierarchy of diamonds costs its classes, not its paths."""
        if cls in self._mro:
            return self._mro[cls]
        if _depth > MAX_MRO_CLASSES:
            return (cls, _MRO_CUT)
        self._mro[cls] = (cls,)
        out = [cls]
        seen = {cls}
        c = self.ctx(cls)
        # a name bound to a class and later to a function (a decorator replacing it) has no bases
        if c is not None and c.node is not None and c.node.k == "class":
            outer = c.parent or self.ctx(c.mod.name)
            for b in c.node.f["bases"]:
                for r in self.eval(outer, b, 1):
                    if r.kind == "class":
                        for x in self.mro(r.target, _depth + 1):
                            if x not in seen:
                                seen.add(x)
                                out.append(x)
                    elif r.kind == "external":
                        ext = "ext:" + r.target
                        if ext not in seen:
                            seen.add(ext)
                            out.append(ext)
        if _MRO_CUT in seen:  # a base's list was cut: what would follow it is not known
            out = out[:out.index(_MRO_CUT) + 1]
        if len(out) > MAX_MRO_CLASSES + 1:
            out = out[:MAX_MRO_CLASSES] + [_MRO_CUT]
            seen.add(_MRO_CUT)
        self._mro[cls] = tuple(out)
        return self._mro[cls]

    def members(self, cls: str) -> dict:
        m = self._members.get(cls)
        if m is not None:
            return m
        c = self.ctx(cls)
        m = self.locals_of(c) if c is not None and c.kind == "class" else {}
        self._members[cls] = m
        return m

    def instance_attrs(self, cls: str) -> dict:
        """`self.x = value` assignments in the methods of a class: name -> [(method ctx, value)]."""
        m = self._iattrs.get(cls)
        if m is not None:
            return m
        m = {}
        self._iattrs[cls] = m
        for mctx, s, owner, attr in self._method_attr_assigns(cls):
            if mctx.self_name and not mctx.self_name.startswith("@") and owner == mctx.self_name:
                m.setdefault(attr, []).append((mctx, s.f["value"], s.f["annotation"]))
        return m

    def _method_attr_assigns(self, cls: str):
        """(method ctx, assignment, owner name, attribute) for each `owner.attribute = value`
        target in the methods of the class `cls` (nothing when it is not a scanned class)."""
        c = self.ctx(cls)
        if c is None or c.kind != "class":
            return
        for st in flatten_top(c.node.f["body"]):
            if st.k != "def":
                continue
            mctx = self.ctx(f"{cls}.{st.f['name']}")
            if mctx is None:
                continue
            for s in iter_stmts(st.f["body"]):
                if s.k == "assign":
                    for t in s.f["targets"]:
                        if t.k == "attr" and t.f["value"].k == "name":
                            yield mctx, s, t.f["value"].f["id"], t.f["attr"]

    def class_member(self, cls: str, attr: str, depth: int, on_instance: bool) -> tuple:
        for i, c in enumerate(self.mro(cls)):
            inh = ("inheritance",) if i > 0 else ()
            if c == _MRO_CUT:
                return (unres("depth-limit", f"{cls}: {attr} not found in its first {MAX_MRO_CLASSES} base classes, "
                                             f"the others not followed"),)
            if c.startswith("ext:"):
                return (Ref("external", f"{c[4:]}.{attr}", inh),)
            mem = self.members(c)
            if attr in mem:
                cctx = self.ctx(c)
                out = []
                for r in self._eval_bindings(cctx, attr, mem[attr], depth + 1, local=False):
                    out.append(r.with_how(*inh))
                return tuple(out)
        if on_instance:
            for c in self.mro(cls):
                if c.startswith("ext:"):
                    continue
                ia = self.instance_attrs(c).get(attr)
                if ia:
                    out = []
                    for mctx, value, ann in ia:
                        out.extend(self._eval_binding(mctx, ("assign", value, ann, None), depth + 1, True, False))
                    return tuple(r.with_how("assignment-type") if r.kind == "instance" else r for r in out)
        for c in self.mro(cls):
            if not c.startswith("ext:") and "__getattr__" in self.members(c):
                return self.getattr_forward(f"{c}.__getattr__", attr, depth) or (
                    unres("dynamic-attribute", f"{cls}.{attr} via __getattr__"),)
        return (unres("missing-attribute", f"{cls} has no {attr}"),)

    # ------------------------------------------------------------------ expressions
    def attr(self, refs: tuple, attr: str, depth: int) -> tuple:
        out: list[Ref] = []
        for r in refs:
            k = r.kind
            if k == "module":
                out.extend(x.prefixed(r.how) for x in self.export(r.target, attr, depth + 1))
            elif k == "external":
                out.append(Ref("external", f"{r.target}.{attr}", r.how))
            elif k == "instance-external":
                out.append(Ref("external", f"{r.target}.{attr}", r.how))
            elif k == "class":
                out.extend(x.prefixed(r.how) for x in self.class_member(r.target, attr, depth, False))
            elif k == "instance":
                for x in self.class_member(r.target, attr, depth, True):
                    x = x.prefixed(r.how)
                    if r.jit:
                        x = Ref(x.kind, x.target, x.how, x.jit | r.jit, x.extra)
                    out.append(x)
            elif k == "super":
                m = self.mro(r.target)
                for c in m[1:]:
                    if c == _MRO_CUT:
                        out.append(unres("depth-limit", f"{attr} not found in the first {MAX_MRO_CLASSES} bases of "
                                                        f"{r.target}, the others not followed"))
                        break
                    if c.startswith("ext:"):
                        out.append(Ref("external", f"{c[4:]}.{attr}", ("inheritance",)))
                        break
                    if attr in self.members(c):
                        out.extend(x.with_how("inheritance") for x in self.class_member(c, attr, depth, True))
                        break
                else:
                    out.append(unres("missing-attribute", f"no base of {r.target} has {attr}"))
            elif k in ("built",):
                out.append(Ref("entry", attr, r.how, r.jit))
            elif k == "spec":
                if attr in self.rules.build_methods:
                    out.append(Ref("function", "<build>", r.how, r.jit, attr))
                else:
                    out.append(unres("spec-attribute", attr))
            elif k == "unresolved":
                out.append(unres(r.target, f"{r.extra}.{attr}" if r.extra else attr))
            elif k == "const":
                if r.target != "None":
                    out.append(Ref("builtin", f"{r.target}.{attr}"))
            elif k == "builtin":
                out.append(Ref("builtin", f"{r.target}.{attr}"))
            else:
                out.append(unres("unknown-receiver", f"attribute {attr} of a {k} value"))
        return _dedup(out)

    def eval(self, ctx: Ctx, n: N | None, depth: int = 0) -> tuple:
        if n is None or depth > MAX_DEPTH:
            return () if n is None else (unres("depth-limit", "resolution too deep"),)
        k = n.k
        if k == "name":
            return self.lookup(ctx, n.f["id"], depth + 1)
        if k == "attr":
            return self.attr(self.eval(ctx, n.f["value"], depth + 1), n.f["attr"], depth + 1)
        if k == "call":
            return self.call_result(ctx, n, depth + 1)
        if k == "const":
            v = n.f["value"]
            return (Ref("const", type(v).__name__ if v is not None else "None", extra=v if isinstance(v, str) else ""),)
        if k == "fstring":
            return (Ref("const", "str"),)
        if k in ("list", "tuple", "dict", "set"):
            # the display's items are read back through subscripts, loops and unpacking
            key = f"{ctx.mod.path}:{n.sb}:{n.eb}"
            self._containers.setdefault(key, (ctx, n))
            return (Ref("builtin", k, extra=key),)
        if k == "comp":
            return (Ref("builtin", "list"),)
        if k == "ifexp":
            return _dedup(list(self.eval(ctx, n.f["body"], depth + 1)) + list(self.eval(ctx, n.f["orelse"], depth + 1)))
        if k == "boolop":
            return _dedup(list(self.eval(ctx, n.f["left"], depth + 1)) + list(self.eval(ctx, n.f["right"], depth + 1)))
        if k == "walrus":
            return self.eval(ctx, n.f["value"], depth + 1)
        if k == "subscript":
            return self.subscript(ctx, n, depth + 1)
        if k == "lambda":
            q = self.lambdas(ctx.mod)[0].get(n.sb)
            return (Ref("function", f"{ctx.mod.name}.{q}"),) if q else (unres("dynamic-callee", "lambda"),)
        return (unres("dynamic-callee", k),)

    def subscript(self, ctx: Ctx, n: N, depth: int) -> tuple:
        """`x[k]`: the items of the displays x may be bound to (those under a constant key or
        index equal to k when there are such, else all), and what was put into x by name in
        the scopes that see it (`x[k] = f`, `x.append(f)`, `x.update({...})`). A slice is the
        container itself."""
        base = self.eval(ctx, n.f["value"], depth + 1)
        idx = n.f["index"]
        if idx is not None and idx.k in ("slice", "other") and b":" in ctx.mod.parsed.src[idx.sb:idx.eb]:
            got = tuple(x for x in base if x.kind == "builtin" and x.extra in self._containers)
            return got or (unres("dynamic-callee", "subscript"),)
        key = idx.f["value"] if idx is not None and idx.k == "const" and isinstance(idx.f["value"], (str, int)) else None
        out = list(self.items(base, key, depth + 1))
        if n.f["value"].k == "name":
            out.extend(self.item_bindings(ctx, n.f["value"].f["id"], key, depth + 1))
        out = [x for x in out if x.kind != "unresolved"]
        return _dedup(out) if out else (unres("dynamic-callee", "subscript"),)

    def items(self, refs: tuple, key, depth: int) -> tuple:
        """Items of the displays among refs: under key (a constant key or index; None: any)
        when some item is, else all of them. Starred items and `**` splats give their own items."""
        out: list[Ref] = []
        if depth > MAX_DEPTH:
            return ()
        for r in refs:
            got = self._containers.get(r.extra) if r.kind == "builtin" else None
            if got is None:
                continue
            cctx, disp = got
            if disp.k == "dict":
                pairs = [(kn.f["value"] if kn is not None and kn.k == "const" else _ANY if kn is not None else None, v)
                         for kn, v in disp.f["pairs"]]
            else:
                pairs = []
                for i, e in enumerate(disp.f["elts"]):
                    pairs.append((None, e.f["value"]) if e.k == "starred" else (i, e))
            if key is not None and any(pk == key for pk, _v in pairs):
                pairs = [(pk, v) for pk, v in pairs if pk == key]
            for pk, v in pairs:
                if v is None:
                    continue
                if pk is None:  # a splat: the items of what is spread
                    out.extend(self.items(self.eval(cctx, v, depth + 1), key, depth + 1))
                else:
                    out.extend(self.eval(cctx, v, depth + 1))
        return _dedup(out)

    def item_bindings(self, ctx: Ctx, name: str, key, depth: int) -> list[Ref]:
        """What statements put into the container bound to `name`: in ctx and the scopes
        around it, up to the one that binds the name."""
        binds = []
        c = ctx
        while c is not None:
            if c.kind == "function" or c is ctx or c.kind == "module":
                loc = self.gbind(c.mod.name) if c.kind == "module" else self.locals_of(c)
                for b in loc.get(name + "[]", ()):
                    binds.append((c, b))
                if name in loc:
                    break
            c = c.parent if c.kind != "module" else None
        out: list[Ref] = []
        for c, (kind, kn, v, _x) in binds:
            if kind == "item":
                if key is not None and kn is not None and kn.k == "const" and kn.f["value"] != key:
                    continue
                out.extend(self.eval(c, v, depth + 1))
            else:
                out.extend(self.items(self.eval(c, kn, depth + 1), key, depth + 1))
        return out

    def iterated(self, ctx: Ctx, it: N, depth: int) -> list[Ref]:
        """Values a `for` loop over `it` binds: the items of displays, what `__next__` returns for
        an instance of a class of the scan (through `__iter__`)."""
        refs = self.eval(ctx, it, depth + 1)
        out = list(self.items(refs, None, depth + 1))
        if it.k == "name":
            out.extend(self.item_bindings(ctx, it.f["id"], None, depth + 1))
        for m in self.iter_protocol(refs, depth + 1):
            if m.target.endswith(".__next__"):
                out.extend(_returned(self.returns(m.target, depth + 1)))
        return out

    def iter_protocol(self, refs: tuple, depth: int) -> list[Ref]:
        """`__iter__` and `__next__` of the instances among refs, as a loop over them calls them:
        `__next__` of what `__iter__` returns."""
        out: list[Ref] = []
        for r in refs:
            if r.kind != "instance":
                continue
            its = [m for m in self.class_member(r.target, "__iter__", depth, True) if m.kind == "function"]
            out.extend(its)
            for m in its:
                for x in self.returns(m.target, depth + 1):
                    if x.kind == "instance":
                        out.extend(n for n in self.class_member(x.target, "__next__", depth, True) if n.kind == "function")
        return list(_dedup(out))

    def callee(self, ctx: Ctx, call: N, depth: int = 0) -> tuple:
        """What a call expression calls (the value of `getattr(mod, "const")` is resolved in eval)."""
        return self.eval(ctx, call.f["func"], depth + 1)

    def call_result(self, ctx: Ctx, call: N, depth: int) -> tuple:
        fn = call.f["func"]
        if fn.k == "name" and fn.f["id"] == "getattr" and len(call.f["args"]) >= 2:
            a1 = call.f["args"][1]
            if a1.k == "const" and isinstance(a1.f["value"], str):
                base = self.eval(ctx, call.f["args"][0], depth + 1)
                return tuple(x.with_how("getattr-const") for x in self.attr(base, a1.f["value"], depth + 1))
            ns = self._torch_ops_namespace(ctx, call.f["args"][0], depth)
            if ns is not None:
                # an op of a prebuilt extension, which one known only at run time
                return (Ref("external", f"{ns}.{COMPUTED_OP}", ("getattr-computed",)),)
            return (unres("dynamic-attribute", "getattr with a computed name"),)
        if fn.k == "name" and fn.f["id"] == "super":
            c = ctx
            while c is not None and c.cls is None:
                c = c.parent
            if c is not None:
                return (Ref("super", c.cls),)
        out: list[Ref] = []
        for r in self.callee(ctx, call, depth):
            out.extend(self.apply(ctx, call, r, depth))
        return _dedup(out)

    def _torch_ops_namespace(self, ctx: Ctx, n: N, depth: int) -> str | None:
        """`torch.ops.<ns>` when the expression is that namespace of ops (every value it can have)."""
        refs = self.eval(ctx, n, depth + 1)
        targets = {r.target for r in refs if r.kind == "external"}
        if len(targets) != 1 or len(refs) != 1:
            return None
        t = targets.pop()
        return t if TORCH_OPS_NS_RE.fullmatch(t) else None

    def getattr_forward(self, qual: str, attr: str, depth: int) -> tuple:
        """What `X.attr` is when X's `__getattr__` (the function `qual`) hands the name on,
        `return getattr(E, name)` (possibly through a local): E's attribute `attr`, E evaluated
        in the __getattr__ (None aside: the value before a lazy load). With E a namespace of
        torch ops, `getattr(torch.ops.<ns>, name).default` too: the op `torch.ops.<ns>.<attr>` of
        the prebuilt extension registering <ns>. () for any other __getattr__, or an E not known."""
        if qual not in self._forwards:
            self._forwards[qual] = None  # while it is evaluated: a forward to itself is none
            self._forwards[qual] = self._forward_base(qual, depth)
        base = self._forwards[qual]
        key = ("getattr-forward", qual, attr)
        if base is None or key in self._busy:
            return ()
        self._busy.add(key)
        try:
            got = self.attr(base, attr, depth + 1)
        finally:
            self._busy.discard(key)
        return tuple(x.with_how("getattr-forward") for x in got)

    def _forward_base(self, qual: str, depth: int) -> tuple | None:
        """The values of E in a `__getattr__` that returns `getattr(E, name)` (see getattr_forward)."""
        fctx = self.ctx(qual)
        if fctx is None or fctx.kind != "function" or fctx.node.k == "lambda":
            return None
        positional = [p[0] for p in fctx.node.f["params"] if p[2] == ""][1 if fctx.self_name else 0:]
        if len(positional) != 1:
            return None
        stmts = list(iter_stmts(fctx.node.f["body"]))
        own = [v for st in stmts for key, v in st.f.items() if key not in ("body", "orelse", "handlers", "final")]
        looks = [e for e in walk_exprs(own) if e.k == "call" and e.f["func"].k == "name"
                 and e.f["func"].f["id"] == "getattr" and len(e.f["args"]) == 2
                 and e.f["args"][1].k == "name" and e.f["args"][1].f["id"] == positional[0]]
        if len(looks) != 1:
            return None
        look = looks[0]
        ops = self._torch_ops_namespace(fctx, look.f["args"][0], depth) is not None

        def value(x: N | None) -> bool:
            # the looked-up value itself; of an op, its overloads (`.default`) stand for it too
            return x is not None and (x is look or (ops and x.k == "attr" and value(x.f["value"])))

        carriers = {t.f["id"] for st in stmts if st.k == "assign" and value(st.f["value"])
                    for t in st.f["targets"] if t.k == "name"}
        returns = [st.f["value"] for st in stmts if st.k == "return"]
        if not returns or not all(value(v) or (v is not None and v.k == "name" and v.f["id"] in carriers)
                                  for v in returns):
            return None
        refs = tuple(r for r in self.eval(fctx, look.f["args"][0], depth + 1)
                     if not (r.kind == "const" and r.target == "None"))
        if not refs or any(r.kind == "unresolved" for r in refs):
            return self._forward_class_attr(fctx, look.f["args"][0], depth)
        return refs

    def _forward_class_attr(self, fctx: Ctx, e: N, depth: int) -> tuple | None:
        """E of a `__getattr__` when E is an attribute of the instance or class (`self._comm`,
        a class attribute set to None and assigned in a classmethod on first use): every value
        any method of the class assigns to it (see _class_attr_values). A parameter's value
        stays an unknown receiver, as a method called on a parameter does. None when a value is
        not known or none is assigned."""
        chain = self._self_chain(fctx, e)
        if chain is None or fctx.cls is None:
            return None
        got = self._chain_values(fctx.cls, chain, depth, set())
        if not got or any(r.kind == "unresolved" and not _is_parameter(r) for r in got):
            return None
        return got

    def _chain_values(self, cls: str, chain: list[str], depth: int, seen: set) -> tuple | None:
        """`self.a.b` in a method of `cls` (chain ["a", "b"]): the attribute's values (see
        _class_attr_values), then their attributes along the chain; None when one is not known."""
        got = self._class_attr_values(cls, chain[0], depth, seen)
        for a in chain[1:]:
            if got is None:
                return None
            got = self.attr(got, a, depth + 1)
        return got

    @staticmethod
    def _self_chain(fctx: Ctx, e: N) -> list[str] | None:
        """`self.a.b` (or `cls.a.b` in a classmethod) -> ["a", "b"]; None for any other expression."""
        names: list[str] = []
        while e.k == "attr":
            names.append(e.f["attr"])
            e = e.f["value"]
        own = (fctx.self_name or "").rsplit(":", 1)[-1]
        if e.k != "name" or not own or e.f["id"] != own or not names:
            return None
        return names[::-1]

    def _class_attr_values(self, cls: str, attr: str, depth: int, seen: set) -> tuple | None:
        """The values the class `cls` and its scanned bases give the attribute `attr`: the class
        bodies' bindings and each `self.attr = v`, `cls.attr = v` or `Class.attr = v` in their
        methods (None dropped), a value that is itself such an attribute followed the same way
        (a cycle adds nothing). None when a value is not known. Writes in subclasses are not seen."""
        if (cls, attr) in seen:
            return ()
        if depth > MAX_DEPTH:
            return None
        seen.add((cls, attr))
        out: list[Ref] = []
        for c in self.mro(cls):
            if c == _MRO_CUT:
                return None
            cctx = self.ctx(c) if not c.startswith("ext:") else None
            if cctx is None or cctx.kind != "class":
                continue
            mem = self.members(c)
            if attr in mem:
                out.extend(self._eval_bindings(cctx, attr, mem[attr], depth + 1, local=False))
            cname = c.rsplit(".", 1)[-1]
            for mctx, st, owner, name in self._method_attr_assigns(c):
                own = {cname, mctx.self_name.rsplit(":", 1)[-1]} if mctx.self_name else {cname}
                if name != attr or owner not in own:
                    continue
                value = st.f["value"]
                chain = self._self_chain(mctx, value)
                got = (self.eval(mctx, value, depth + 1) if chain is None
                       else self._chain_values(cls, chain, depth + 1, seen))
                if got is None:
                    return None
                out.extend(got)
        return _dedup(r for r in out if not (r.kind == "const" and r.target == "None"))

    def sink_key(self, ctx: Ctx, call: N) -> str:
        return f"{ctx.mod.path}:{call.line}:{call.col}"

    def sink_rule_for(self, ctx: Ctx, call: N, r: Ref) -> SinkRule | None:
        if r.kind == "function" and r.target != "<build>":
            rule = self.rules.rule_for_def(r.target.rsplit(".", 1)[-1])
            if rule is not None and not self.inside_sink_def(ctx):
                return rule
        elif r.kind == "class":
            rule = self.jitspec_rule(r.target)
            if rule is not None and not self.inside_sink_def(ctx):
                return rule
        elif r.kind == "external":
            return self.rules.by_external.get(r.target)
        return None

    def inside_sink_def(self, ctx: Ctx) -> bool:
        """Calls inside a sink's own definition (gen_jit_spec building its JitSpecNvcc) are not new sinks."""
        c = ctx
        while c is not None:
            if c.kind == "function" and c.qual.rsplit(".", 1)[-1] in self.rules.by_def_name:
                return True
            c = c.parent
        return False

    def jitspec_rule(self, cls: str) -> SinkRule | None:
        m = self.mro(cls)
        for c in m[1:] if len(m) > 1 else ():
            name = c[4:] if c.startswith("ext:") else c
            rule = self.rules.base_names.get(name.rsplit(".", 1)[-1])
            if rule is not None:
                return rule
        return None

    def apply(self, ctx: Ctx, call: N, r: Ref, depth: int) -> list[Ref]:
        """The value of calling r."""
        k = r.kind
        rule = self.sink_rule_for(ctx, call, r)
        if rule is not None:
            key = self.sink_key(ctx, call)
            if key not in self.sinks:
                via = {"function": "function", "class": "class"}.get(k, "external")
                self.sinks[key] = SinkSite(key, rule, ctx, call, via, r.target)
            kind = "built" if rule.kind == "built" else "spec"
            tag = frozenset([key])
            if k == "class":
                return [Ref("instance", r.target, r.how, tag)]
            if k == "function" and kind == "spec":
                # gen_jit_spec returns a JitSpecNvcc: keep the class so .build_and_load() resolves to its method
                inst = [Ref("instance", x.target, r.how, tag) for x in self.returns(r.target, depth + 1) if x.kind == "instance"]
                if inst:
                    return inst
            return [Ref(kind, rule.id, r.how, tag)]
        if k == "function":
            if r.target == "<build>" or (r.jit and r.target.rsplit(".", 1)[-1] in self.rules.build_methods):
                return [Ref("built", "build", r.how, r.jit)]
            return _returned(self.returns(r.target, depth + 1))
        if k == "class":
            return [Ref("instance", r.target, ("constructor",))]
        if k == "partial":
            return _returned(self.returns(r.target, depth + 1))
        if k == "external":
            if r.target in self.rules.partial_functions and call.f["args"]:
                return [Ref("partial", x.target, x.how + ("lru_cache/partial",), x.jit)
                        for x in self.eval(ctx, call.f["args"][0], depth + 1) if x.kind == "function"]
            if r.target in self.rules.cache_wrappers:
                if call.f["args"]:
                    return [x.with_how("lru_cache/partial") for x in self.eval(ctx, call.f["args"][0], depth + 1)]
                return [Ref("wrapper", r.target)]
            return [unres("external-result", f"result of {r.target}()")]
        if k == "wrapper" and call.f["args"]:
            return [x.with_how("lru_cache/partial") for x in self.eval(ctx, call.f["args"][0], depth + 1)]
        if k == "instance":
            out = []
            for m in self.class_member(r.target, "__call__", depth, True):
                if m.kind == "function":
                    out.extend(self.returns(m.target, depth + 1))
            return out
        if k == "unresolved":
            return [r]
        return [unres("unknown-value", f"result of calling a {k}")]

    def returns(self, qualname: str, depth: int = 0) -> tuple:
        """Values a scanned function can return (flow-insensitive; memoised; cycles give ())."""
        if qualname in self._ret:
            return self._ret[qualname]
        if qualname in self._busy or depth > MAX_DEPTH:
            return ()
        c = self.ctx(qualname)
        if c is None or c.kind != "function":
            if c is not None and c.kind == "class":
                return (Ref("instance", qualname),)
            return ()
        self._busy.add(qualname)
        out: list[Ref] = []
        if c.node.k == "lambda":
            try:
                out.extend(self.eval(c, c.node.f["body"], depth + 1))
            finally:
                self._busy.discard(qualname)
            self._ret[qualname] = _dedup(out)
            return self._ret[qualname]
        try:
            for st in iter_stmts(c.node.f["body"]):
                if st.k == "return" and st.f["value"] is not None:
                    out.extend(self.eval(c, st.f["value"], depth + 1))
            useful = [x for x in out if x.kind not in ("unresolved", "const")]
            if not any(x.kind in ("built", "spec") or x.jit for x in useful):
                # a module getter: builds a JIT module and returns it, or a namespace around it
                built = self.built_locals(c, depth)
                if built and (not useful or all(x.kind in ("external", "builtin") for x in useful)):
                    out = [Ref("built", "module-getter", ("module-getter",), frozenset().union(*(b.jit for b in built)))] + [
                        x for x in out if x.kind != "unresolved"]
        finally:
            self._busy.discard(qualname)
        res = _dedup(out)
        self._ret[qualname] = res
        return res

    def built_locals(self, c: Ctx, depth: int) -> list[Ref]:
        out = []
        for name, binds in self.locals_of(c).items():
            if any(b[0] == "assign" for b in binds):
                for r in self._eval_bindings(c, name, binds, depth + 1, local=True):
                    if r.kind == "built":
                        out.append(r)
        return out


def _returned(refs) -> list[Ref]:
    """Values coming out of a call: the labels of how they were found inside the callee do not
    describe the call site; they are marked "return-value" (or "module-getter")."""
    out = []
    for x in refs:
        how = ("module-getter",) if "module-getter" in x.how else ("return-value",) if x.kind != "unresolved" else ()
        out.append(Ref(x.kind, x.target, how, x.jit, x.extra))
    return out


_ANY = object()  # a dict key that is not a constant: matches no constant key


def _dedup(refs) -> tuple:
    seen = {}
    for r in refs:
        seen.setdefault(r, None)
    return tuple(seen)
