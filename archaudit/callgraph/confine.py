"""Whether a gate decides only Python: no GPU code on any path whose behaviour it changes.

A gate that reaches no JIT module may still stand in front of GPU code the search did not see:
a value it sets that is read later, a state it writes, an exception or a return value its callers
act on, a call archaudit could not resolve. `Confiner.check` follows every such way out of the
gate's statement and says the gate is confined (verdict no-gpu-code) only when each one was
followed to its end and none reached GPU code; otherwise it names the first thing that stopped it.

What the gate's statement changes, in its own function:
- `if C:` / `while C:`: both arms; when an arm leaves the function (return, raise) or the loop
  (break, continue), or binds a name read elsewhere in the function, the whole function body
  (conservative: a name bound in a branch may be read on a later iteration or after it);
- `x = <gate>` / `x += <gate>`: the whole function body when `x` is read elsewhere;
- `assert <gate>`: the whole function body;
- `return <gate>`: what each caller does with the value.
The same rules apply to a read of state the changed code wrote (below), with two more places a
read can sit: an expression statement (`log(self.x)`: its calls, and the whole body when a name
whose method it calls or whose item it writes is read elsewhere) and a `for`/`with` header (the
whole body).
When what changes can leave the function (a return, a raise, an assert), each call of the function
is followed the same way, as if its call expression were the gate (up to MAX_CALLER_LEVELS);
a function named in the scan other than by a call, its definition, an import or `__all__`, or one
whose callers were not searched, stops the proof. A function the scan never calls is an API the
package offers: its callers are code outside the scan.

State the changed code stores (an attribute, a module global, an item of either; see
callgraph/stateflow.py) is followed to every place the scan reads it, each read as if it were the
gate's value (at most MAX_STATES states per gate); a store whose reads cannot all be listed (an
item of a parameter, an attribute named in too many modules or in a getattr string) stops the
proof, and a stop found past a read names that read ("following X (written at ..) read at ..").

In the code that changes and in every function it reaches (resolved calls, breadth first,
MAX_NODES functions): a JIT module, a prebuilt-binary load, a call into a package that can hold
NVIDIA GPU code (rules/externals.toml `gpu_code`, `torch.ops` of an extension), a call into a
scanned package that is not Python (an extension module), a `global`/`nonlocal` declaration in a
function reached, a `nonlocal` one in the changed code, an attribute or item written on a
parameter by a function reached (outside a constructor), syntax the reader keeps opaque, and any call that could not be
resolved, except a method of an object returned by a package outside the scan that holds no GPU
code and does not hand back objects it was given (rules/externals.toml `passes_objects`), stop
the proof."""
from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass
from typing import Callable

from ..parsing.python_ir import N, iter_stmts
from ..python.bindings import flat_targets, names_bound, statement_bindings
from ..python.pybytes import word_pattern
from .behind import path_to_call
from .graph import UNRESOLVED_PREFIX, Call
from .resolve import Ctx, walk_exprs
from .stateflow import State, StateReads, in_comment, state_of, written_targets

MAX_CALLER_LEVELS = 3
MAX_NODES = 4000
MAX_DEPTH = 10
MAX_CALL_SITES = 64
MAX_STATES = 8  # states (attributes, globals) followed for one gate
CONSTRUCTORS = ("__init__", "__post_init__", "__new__", "__init_subclass__")
_LEAVES_FUNCTION = ("return", "raise", "assert")
NORETURN_METHODS = ("skipTest", "skip", "fail", "xfail", "exit", "abort", "_exit")
DYNAMIC_BUILTINS = {f"<builtin>.{n}" for n in ("eval", "exec", "__import__", "compile")}
_LEAVES_LOOP = ("break", "continue")


@dataclass
class Confinement:
    confined: bool
    reason: str  # what was shown, or the first thing that stopped the proof
    functions: int = 0  # functions searched


class _Stop(Exception):
    pass


class Confiner:
    """One per scan: `check(site)` for the gates that reach no JIT module.

    behind: the Behind the gates' regions come from; holds_gpu_code(dotted) and passes_objects
    (dotted) read rules/externals.toml; binary_sinks(functions) lists prebuilt-code loads in them;
    scanned_packages: the top-level package names of the scan."""

    def __init__(self, behind, holds_gpu_code: Callable[[str], bool], passes_objects: Callable[[str], bool],
                 noreturn: Callable[[str], bool], binary_sinks: Callable[[set], list], scanned_packages: set[str]):
        self.b = behind
        self.g = behind.g
        self.r = behind.r
        self.holds_gpu_code = holds_gpu_code
        self.passes_objects = passes_objects
        self.noreturn = noreturn
        self.binary_sinks = binary_sinks
        self.scanned = scanned_packages
        self._fn_ok: dict[str, str] = {}  # function -> "" or why it stops a proof
        self._pending: list[str] = []  # stops found while collecting, said after the search
        self._allowed: dict[str, list[tuple[int, int]]] = {}  # module -> spans where naming is not a use
        self._origin = ""  # the module of the gate being checked
        self.reads = StateReads(behind)
        self._states: set = set()  # states followed for the gate being checked
        self._via = ""  # the state read being followed, to name it where the search stops
        self._deferred: list = []  # (state, caller levels left, via): written, not yet followed

    def check(self, site) -> Confinement:
        ctx = self.b.locate(site)
        if ctx is None:
            return Confinement(False, "the gate's scope is not in the scan")
        self._origin = ctx.mod.name  # a runtime is outside the scan from here (Index.hidden)
        work: list[tuple[Ctx, list[tuple[int, int]], str]] = []
        self._pending = []
        self._states = set()
        self._deferred = []
        self._via = ""
        try:
            off = self.b._offset(ctx, site.line, site.col)
            seen: set = set()
            self._statement(ctx, off, None, work, MAX_CALLER_LEVELS, seen)
            n = self._search(work)
            # the state it writes is followed only when the rest was shown free of GPU code
            if self._deferred and not self._pending:
                while self._deferred:
                    st, levels, self._via = self._deferred.pop(0)
                    self._follow_state(st, work, levels, seen)
                self._via = ""
                n = self._search(work)
            if self._pending:
                raise _Stop(self._pending[0])
        except _Stop as e:
            return Confinement(False, str(e))
        return Confinement(True, f"every path the gate changes was followed ({n} function(s)) and none builds, "
                                 f"loads or calls GPU code: patching it changes only Python (or Triton, which "
                                 f"compiles for the running GPU)", n)

    # ------------------------------------------------------------ what the gate's statement changes
    def _statement(self, ctx: Ctx, off: int, call: N | None, work: list, levels: int, seen: set) -> None:
        """Collect into `work` the code whose behaviour the value at `off` (the gate's test, or a
        call of a function that holds one) changes in ctx, and its callers' where it leaves."""
        if (ctx.qualname, off) in seen:
            return
        seen.add((ctx.qualname, off))
        body = self.b._body_at(ctx, off)
        chain = self.b._chain_at(body, off)
        if not chain:
            raise _Stop(f"{ctx.mod.path}: no statement holds the position {self.b._line_of(ctx, off)}")
        st = chain[-1][2]
        where = f"{ctx.mod.path}:{st.line}"
        fbody = self.b._body(ctx)
        if ctx.kind != "function" and _bound_names([st]):
            raise _Stop(f"{where}: a module-level name it binds can be read anywhere")
        if call is not None:
            path = path_to_call(st, off, "")
            if path is None or any(n.k in ("lambda", "comp") for n in path):
                raise _Stop(f"{where}: the call is deferred (a lambda or comprehension), when it runs is not followed")
        changed = self._changed(ctx, st, off, call, fbody, where)
        if ctx.kind == "function" and any(s.k == "nonlocal" for s in iter_stmts(fbody)):
            raise _Stop(f"{where}: {ctx.qualname} declares nonlocal names")
        work.append((ctx, _spans(changed), self._via))
        self._state_writes(ctx, changed, levels)
        # what leaves the function: a raise or assert, a value returned (a bare `return` only skips
        # code that is itself in `changed`), the gate's own `return`
        leaves = st.k == "return" or (call is not None and st.k == "expr") or any(
            s.k in ("raise", "assert") or (s.k == "return" and s.f["value"] is not None) for s in iter_stmts(changed))
        # whether the value the function returns is what the gate decides (not only whether it
        # returns at all, as for a refusal: that reaches the callers as an exception)
        if st.k in ("if", "while") and st.f["test"].sb <= off < st.f["test"].eb:
            arms = st.f["body"] + st.f["orelse"]
            by_value = any(s.k == "return" and s.f["value"] is not None for s in iter_stmts(arms)) or \
                _flows_to_return(fbody, _bound_names(arms) | _receivers(arms) | _written_bases(arms, ctx))
        elif st.k in ("assign", "augassign"):
            by_value = _flows_to_return(fbody, {x.f["id"] for t in (st.f["targets"] if st.k == "assign" else [st.f["target"]])
                                                for x in flat_targets(t) if x.k == "name"})
        else:
            by_value = st.k == "return" or (st.k == "expr" and call is None and
                                            _flows_to_return(fbody, _receivers([st]) | _written_bases([st], ctx)))
        if leaves or self._may_not_return(ctx, changed):
            if ctx.kind != "function":
                raise _Stop(f"{where}: module-level code that raises stops the import of {ctx.mod.name}")
            self._callers(ctx, work, levels, seen, by_value)

    def _changed(self, ctx: Ctx, st: N, off: int, call: N | None, fbody: list[N], where: str) -> list[N]:
        """The statements whose behaviour the value at `off` in statement `st` changes."""
        if st.k in ("if", "while") and st.f["test"].sb <= off < st.f["test"].eb:
            arms = st.f["body"] + st.f["orelse"]
            exits = any(s.k in _LEAVES_FUNCTION + _LEAVES_LOOP for s in iter_stmts(arms)) or self._may_not_return(ctx, arms)
            names = _bound_names(arms) | _receivers(arms) | _written_bases(arms, ctx)
            return fbody if exits or _read_outside(fbody, arms, names) else arms
        if st.k in ("assign", "augassign"):
            targets = st.f["targets"] if st.k == "assign" else [st.f["target"]]
            names = {x.f["id"] for t in targets for x in flat_targets(t) if x.k == "name"} | _written_bases([st], ctx)
            return fbody if _read_outside(fbody, [st], names) else [st]
        if st.k in ("assert", "return"):
            return fbody if st.k == "assert" else [st]
        if st.k == "expr" and call is not None:
            # a call as a statement, or inside one: whether it raises, and where its value goes
            return fbody
        if st.k == "expr":
            # a state read passed to a call: the calls it makes, and what their receivers hold
            return fbody if _read_outside(fbody, [st], _receivers([st]) | _written_bases([st], ctx)) else [st]
        if st.k in ("for", "with") and call is None:
            return fbody  # a state read in a loop's iterable or a context manager
        raise _Stop(f"{where}: the value is used in a `{st.k}` statement, which is not followed")

    def _state_writes(self, ctx: Ctx, stmts: list[N], levels: int) -> None:
        """Note what the statements store (callgraph/stateflow.py), to be followed to where it is
        read once the rest of the gate's code is shown free of GPU code; stop at opaque syntax and
        at stores whose readers cannot be listed."""
        local = self.r.locals_of(ctx) if ctx.kind == "function" else {}
        for s in iter_stmts(stmts):
            if s.k == "other":
                raise _Stop(f"{ctx.mod.path}:{s.line}: syntax read as opaque in the code the gate changes")
        for s, x in written_targets(stmts):
            got = state_of(ctx, x, local, f"{ctx.mod.path}:{s.line}", ctx.mod.parsed.text(x)[:60])
            if isinstance(got, str):
                raise _Stop(got)
            if got is not None and got.kind != "local":
                self._deferred.append((got, levels, self._via))

    def _follow_state(self, st: State, work: list, levels: int, seen: set) -> None:
        """Each read of the state is followed as if it were the gate's value. What stops one read
        is said after the search (which may find the GPU code itself), and the other reads are
        still followed."""
        if st.key in self._states:
            return
        if len(self._states) >= MAX_STATES:
            self._pending.append(f"{st.where}: the code the gate changes writes {st.text}; more than {MAX_STATES} "
                                 f"states written on the way, not followed")
            return
        self._states.add(st.key)
        sites, why = self.reads.reads(st)
        if why:
            self._pending.append(f"{st.where}: the code the gate changes writes {st.text}; {why}")
            return
        outer = self._via
        for rctx, off in sites:
            self._via = f"{st.text} (written at {st.where}) read at {rctx.mod.path}:{self.b._line_of(rctx, off)}"
            try:
                self._statement(rctx, off, None, work, levels - 1, seen)
            except _Stop as e:
                self._pending.append(f"{e}; following {self._via}" if "; following " not in str(e) else str(e))
            finally:
                self._via = outer

    def _may_not_return(self, ctx: Ctx, stmts: list[N]) -> bool:
        """Whether a call among the statements can end the function without a `raise` of its own:
        a function that does not return (rules/externals.toml `noreturn`: `pytest.skip`,
        `sys.exit`; by method name `self.skipTest`), or one of the scan whose body ends in `raise`."""
        spans = _spans(stmts)
        for c in self.g.expand(ctx.qualname):
            o = self.b._offset(ctx, c.line, c.col)
            if not any(a <= o < b for a, b in spans):
                continue
            name = (c.detail or c.callee).rstrip(">").rsplit(".", 1)[-1]
            if self.noreturn(c.callee) or name in NORETURN_METHODS:
                return True
            fctx = self.r.ctx(c.callee)
            if fctx is not None and fctx.kind == "function" and fctx.node is not None:
                body = fctx.node.f["body"]
                if body and body[-1].k == "raise":
                    return True
        return False

    def _callers(self, ctx: Ctx, work: list, levels: int, seen: set, by_value: bool) -> None:
        if levels <= 0:
            raise _Stop(f"{ctx.qualname}: its callers are more than {MAX_CALLER_LEVELS} levels above the gate")
        calls = self.g.callers(ctx.qualname)
        if ctx.qualname in self.g.skipped_callers:
            raise _Stop(f"{ctx.qualname}: its callers were not searched (its name is in too many modules)")
        if len(calls) > MAX_CALL_SITES:
            raise _Stop(f"{ctx.qualname}: more than {MAX_CALL_SITES} call sites")
        # with no call in the scan and named nowhere else, it is called from outside the scan
        # (an API of the package): what its callers do is their own code, not the scan's
        self._only_called(ctx, calls)
        if not calls and by_value:
            # said after the search, which may name the GPU code itself
            decos = ctx.node.f.get("decorators", []) if ctx.node is not None else []
            if decos:
                self._pending.append(f"{ctx.qualname} returns what the gate decides, and is handed to its decorator "
                                     f"@{ctx.mod.parsed.text(decos[0])[:60]}, which may pass it to callers not "
                                     f"followed: they act on that value")
            else:
                self._pending.append(f"{ctx.qualname} returns what the gate decides, and nothing in the scan calls "
                                     f"it: its callers outside the scan act on that value")
        for c in calls:
            gctx = self.r.ctx(c.caller)
            if gctx is None or gctx.kind not in ("function", "module"):
                raise _Stop(f"{c.path}:{c.line}: the call of {ctx.qualname} sits in {c.caller}, not followed")
            coff = self.b._offset(gctx, c.line, c.col)
            body = self.b._body_at(gctx, coff)
            chain = self.b._chain_at(body, coff)
            if not chain:
                raise _Stop(f"{c.path}:{c.line}: no statement holds the call of {ctx.qualname}")
            st = chain[-1][2]
            path = path_to_call(st, coff, "")
            if path is None:
                raise _Stop(f"{c.path}:{c.line}: the call of {ctx.qualname} is not in its statement's header")
            self._statement(gctx, coff, path[-1], work, levels - 1, seen)

    def _only_called(self, ctx: Ctx, calls: list) -> None:
        """Every place the scan names the function is a call found, a call resolved to another
        function of that name, a definition, an import, an `__all__` entry or a docstring: a
        function also passed as a value (a table, a callback, a decorator's argument) runs where
        that value is called."""
        short = ctx.qualname.rsplit(".", 1)[-1]
        lines = {(c.path, c.line) for c in calls}
        pat = word_pattern(short.encode())
        defn = re.compile(rb"(?:def|class)\s+$")
        for m in self.g.modules_naming(short):
            data = self.g.index.source_bytes(m)
            path = self.g.index.path_of[m]
            mod = self.r.module(m)
            if mod is None:
                raise _Stop(f"{path}: names {ctx.qualname} and could not be read")
            allowed = self._allowed.get(m)
            if allowed is None:
                # every statement of the module, once per module (charged to the search's budget)
                self.g.check_budget()
                stmts = list(iter_stmts(mod.parsed.body, into_defs=True))
                self.g.work += len(stmts)
                allowed = self._allowed[m] = [
                    (s.sb, s.eb) for s in stmts
                    if s.k in ("import", "importfrom") or (s.k == "assign" and any(
                        t.k == "name" and t.f["id"] == "__all__" for t in s.f["targets"]))
                    or (s.k == "expr" and s.f["value"].k == "const" and isinstance(s.f["value"].f["value"], str))]
            for x in pat.finditer(data):
                self.g.work += 1
                line = data.count(b"\n", 0, x.start()) + 1
                if (path, line) in lines or defn.search(data[max(0, x.start() - 16):x.start()]):
                    continue
                if in_comment(data, x.start()) or any(a <= x.start() < b for a, b in allowed):
                    continue
                if self._other_function_called(ctx, m, mod, x.start(), line, short):
                    continue
                raise _Stop(f"{path}:{line}: {ctx.qualname} is named here other than by a call archaudit resolved")

    def _other_function_called(self, ctx: Ctx, m: str, mod, pos: int, line: int, short: str) -> bool:
        """Whether a call on that line was resolved to another module-level function of the same
        name (a method's call resolved to another class's may still reach it by overriding)."""
        if ctx.self_name or self.r.ctx(ctx.qualname.rsplit(".", 1)[0]) is None or \
                self.r.ctx(ctx.qualname.rsplit(".", 1)[0]).kind != "module":
            return False
        for q, node in mod.all_functions():
            if node.sb <= pos < node.eb:
                for c in self.g.expand(f"{m}.{q}"):
                    if c.line == line and not c.callee.startswith("<") and c.callee.rsplit(".", 1)[-1] == short:
                        owner = self.r.ctx(c.callee.rsplit(".", 1)[0])
                        if owner is not None and owner.kind == "module":
                            return True
        return False

    # ------------------------------------------------------------ the search
    def _search(self, work: list) -> int:
        parent: dict[str, int] = {}
        q: deque = deque()

        def visit(c, d: int) -> None:
            callee = c.callee
            if callee.startswith("<jit:"):
                m = self.b.jit.module(callee[5:-1])
                raise _Stop(f"{c.path}:{c.line}: reaches the JIT module {m.name if m else callee[5:-1]}")
            if callee.startswith(UNRESOLVED_PREFIX):
                if not self._benign_unresolved(c):
                    raise _Stop(f"{c.path}:{c.line}: a call archaudit could not resolve "
                                f"({callee[len(UNRESOLVED_PREFIX):-1]}: {c.detail})")
                return
            if callee in DYNAMIC_BUILTINS:
                raise _Stop(f"{c.path}:{c.line}: runs code built at run time ({callee.split('.')[-1]})")
            if callee.startswith("<"):
                return
            if callee in parent:
                return
            if self.g.index.hidden(self._origin, callee) or self.r.ctx(callee) is None:
                top = callee.split(".", 1)[0]
                if self.holds_gpu_code(callee):
                    raise _Stop(f"{c.path}:{c.line}: calls {callee}, code outside the scan that can hold GPU code")
                if top in self.scanned and not self.g.index.hidden(self._origin, callee):
                    raise _Stop(f"{c.path}:{c.line}: calls {callee}, in a scanned package but not Python "
                                f"read by archaudit (an extension module?)")
                return
            if d > MAX_DEPTH or len(parent) >= MAX_NODES:
                raise _Stop(f"the search stopped at its bounds ({MAX_NODES} functions, depth {MAX_DEPTH})")
            parent[callee] = d
            q.append(callee)

        via: dict[str, str] = {}  # function -> the state read its search started from
        current = ""
        try:
            for ctx, spans, current in work:
                for c in self.g.expand(ctx.qualname):
                    o = self.b._offset(ctx, c.line, c.col)
                    if any(a <= o < b for a, b in spans):
                        visit(c, 1)
                        via.setdefault(c.callee, current)
                for c in self._callbacks(ctx, spans):
                    visit(c, 1)
                    via.setdefault(c.callee, current)
            while q:
                fn = q.popleft()
                current = via.get(fn, "")
                self._function_ok(fn)
                for c in self.g.expand(fn):
                    visit(c, parent[fn] + 1)
                    via.setdefault(c.callee, current)
                fctx = self.r.ctx(fn)
                if fctx is not None and fctx.kind == "function" and fctx.node is not None:
                    for c in self._callbacks(fctx, [(fctx.node.sb, fctx.node.eb)]):
                        visit(c, parent[fn] + 1)
                        via.setdefault(c.callee, current)
        except _Stop as e:
            raise _Stop(f"{e}; following {current}" if current and "; following " not in str(e) else str(e)) from None
        funcs = set(parent) | {ctx.qualname for ctx, _s, _v in work if ctx.kind == "function"}
        sinks = self.binary_sinks(funcs)
        if sinks:
            s = sinks[0]
            raise _Stop(f"{s.path}:{s.line}: loads prebuilt code ({s.loader})")
        return len(funcs)

    def _callbacks(self, ctx: Ctx, spans: list[tuple[int, int]]) -> list[Call]:
        """Functions of the scan handed to a call as an argument (`pool.submit(work)`,
        `map(self.step, xs)`, `Thread(target=run)`): whoever receives one may call it, so it is
        searched as if called there. Only names that are not the function's own locals, and
        attributes, are evaluated."""
        body = ctx.node.f["body"] if ctx.kind == "function" else ctx.mod.parsed.body
        local = set(self.r.locals_of(ctx)) if ctx.kind == "function" else set()
        out = []
        for e in walk_exprs(list(iter_stmts(body))):
            if e.k != "call" or not any(a <= e.sb < b for a, b in spans):
                continue
            for a in list(e.f["args"]) + [v for _k, v in e.f["kwargs"]]:
                a = a.f["value"] if a.k == "starred" else a
                if a.k == "name" and a.f["id"] not in local or a.k == "attr":
                    for ref in self.r.eval(ctx, a):
                        if ref.kind in ("function", "partial", "class") and ref.target != "<build>":
                            out.append(Call(ctx.qualname, ref.target, ctx.mod.path, a.line, a.col, "callback"))
        return out

    def _function_ok(self, fn: str) -> None:
        why = self._fn_ok.get(fn)
        if why is None:
            why = self._fn_ok[fn] = self._function_problem(fn)
        if why:
            raise _Stop(why)

    def _function_problem(self, fn: str) -> str:
        """Why a function the changed code reaches may carry the change further: it declares
        global names, holds opaque syntax, or writes an attribute or item of a parameter
        (a constructor's writes to its own new object excepted)."""
        ctx = self.r.ctx(fn)
        if ctx is None or ctx.kind != "function" or ctx.node is None:
            return ""
        params = {p[0] for p in ctx.node.f["params"]}
        if fn.rsplit(".", 1)[-1] in CONSTRUCTORS and ctx.self_name:
            params.discard(ctx.self_name)
        for s in iter_stmts(ctx.node.f["body"]):
            if s.k in ("global", "nonlocal"):
                return f"{ctx.mod.path}:{s.line}: {fn} declares {s.k} names"
            if s.k == "other":
                return f"{ctx.mod.path}:{s.line}: {fn} holds syntax read as opaque"
            if s.k in ("assign", "augassign"):
                targets = s.f["targets"] if s.k == "assign" else [s.f["target"]]
                for t in targets:
                    for x in flat_targets(t):
                        base = _base_name(x)
                        if x.k != "name" and base in params:
                            return f"{ctx.mod.path}:{s.line}: {fn} writes {ctx.mod.parsed.text(x)[:60]}"
        return ""

    def _benign_unresolved(self, c) -> bool:
        """A method called on what a package outside the scan returned (`logging.getLogger(..)
        .info`, `json.loads(..).get`): that package's code, when it holds no GPU code and does not
        hand back objects it was given."""
        if c.callee != f"{UNRESOLVED_PREFIX}external-result>":
            return False
        d = c.detail
        if not d.startswith("result of "):
            return False
        dotted = d[len("result of "):].split("(", 1)[0].rstrip(".")
        top = dotted.split(".", 1)[0]
        return bool(top) and (top not in self.scanned or self.g.index.hidden(self._origin, dotted)) \
            and not self.holds_gpu_code(dotted) and not self.passes_objects(dotted)


def _base_name(x: N) -> str | None:
    while x.k in ("attr", "subscript"):
        x = x.f["value"]
    return x.f["id"] if x.k == "name" else None


def _bound_names(stmts: list[N]) -> set[str]:
    """The names the statements bind (python/bindings.py), in nested blocks too."""
    return {name for s in iter_stmts(stmts) for bd in statement_bindings(s, "", False) for name in names_bound(bd)}


def _receivers(stmts: list[N]) -> set[str]:
    """Names whose methods the statements call (`backends.append(x)` may change `backends`)."""
    out = set()
    for e in walk_exprs(list(iter_stmts(stmts))):
        if e.k == "call" and e.f["func"].k == "attr":
            base = _base_name(e.f["func"].f["value"])
            if base:
                out.add(base)
    return out


def _flows_to_return(body: list[N], names: set[str]) -> bool:
    """Whether a value bound to one of the names can be returned: through assignments from
    expressions naming it (to a name, or into an item or attribute of one) and method calls taking
    it (`out.append(x)`), to a `return`."""
    names = set(names)
    stmts = list(iter_stmts(body))
    grew = True
    while grew and names:
        grew = False
        for s in stmts:
            new: set[str] = set()
            if s.k in ("assign", "augassign") and _names_in(s.f["value"]) & names:
                # `d[k] = x`, `o.a = x`: the value is now in `d`, `o`
                for t in (s.f["targets"] if s.k == "assign" else [s.f["target"]]):
                    new |= {b for x in flat_targets(t) if (b := _base_name(x))}
            elif s.k == "for" and _names_in(s.f["iter"]) & names:
                new |= {x.f["id"] for x in flat_targets(s.f["target"]) if x.k == "name"}
            for e in walk_exprs([v for k, v in s.f.items() if k not in ("body", "orelse", "handlers", "final")]):
                if e.k == "call" and e.f["func"].k == "attr" and any(
                        _names_in(a) & names for a in list(e.f["args"]) + [v for _k, v in e.f["kwargs"]]):
                    base = _base_name(e.f["func"].f["value"])
                    if base:
                        new.add(base)
            if new - names:
                names |= new
                grew = True
    return any(s.k == "return" and s.f["value"] is not None and _names_in(s.f["value"]) & names for s in stmts)


def _written_bases(stmts: list[N], ctx: Ctx) -> set[str]:
    """Names whose items or attributes the statements write (`d[k] = v`, `d.x = v`), other than
    the method's own object (whose attributes are followed as state)."""
    own = (ctx.self_name or "").removeprefix("@cls:")
    out = set()
    for _s, x in written_targets(stmts):
        if x.k != "name":
            base = _base_name(x)
            if base and base != own:
                out.add(base)
    return out


def _names_in(x) -> set[str]:
    return {e.f["id"] for e in walk_exprs(x) if e.k == "name"} if x is not None else set()


def _read_outside(body: list[N], inside: list[N], names: set[str]) -> bool:
    """Whether a name is read in the body outside the given statements (nested defs included)."""
    if not names:
        return False
    spans = [(s.sb, s.eb) for s in inside]
    for e in walk_exprs(list(iter_stmts(body, into_defs=True))):
        if e.k == "name" and e.f["id"] in names and not any(a <= e.sb < b for a, b in spans):
            return True
    return False


def _spans(stmts: list[N]) -> list[tuple[int, int]]:
    return [(s.sb, s.eb) for s in stmts]
