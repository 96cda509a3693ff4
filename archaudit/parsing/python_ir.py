"""Python sources -> a small, picklable IR, via tree-sitter-python.

The tree-sitter tree is walked once and dropped; analyses work on `N` nodes, which are plain
data (cacheable by content hash) and much cheaper to traverse from Python than tree-sitter nodes.
Unknown syntax becomes an "other" node rather than an error: the analyses treat it as opaque.
"""
from __future__ import annotations

import copyreg
import io
import pickle
import re
import sys
from functools import lru_cache, partial
from typing import NamedTuple

import tree_sitter
import tree_sitter_python

from .words import WORD_BYTE


class N:
    """An IR node: kind `k`, position (line and 1-based column, byte range [sb, eb)), and the
    fields of its kind in `f`, a dict whose keys NODE_FIELDS lists per kind.

    The end byte is kept as the node's length (`eb` reads sb + length): most nodes are shorter
    than 257 bytes, a length Python keeps as a shared small int, where the end offset would be an
    int object per node."""

    __slots__ = ("k", "line", "col", "sb", "size", "f")

    def __init__(self, k: str, line: int, col: int, sb: int, eb: int, f: dict):
        self.k = k
        self.line = line
        self.col = col
        self.sb = sb
        self.size = eb - sb
        self.f = f

    @property
    def eb(self) -> int:
        return self.sb + self.size

    @eb.setter
    def eb(self, value: int) -> None:
        self.size = value - self.sb

    def __getstate__(self):
        return (self.k, self.line, self.col, self.sb, self.size, self.f)

    def __setstate__(self, s):
        self.k, self.line, self.col, self.sb, self.size, self.f = s

    def __repr__(self) -> str:  # for debugging and test failure messages
        return f"N({self.k}@{self.line}:{self.col} {self.f!r})"


class Field(NamedTuple):
    """One field of an IR node's `f`: its key, what its value is (one of FIELD_VALUES), whether
    it may be None, and what it holds."""

    name: str
    value: str
    optional: bool
    about: str


# What a field's value is, by the name NODE_FIELDS gives it.
FIELD_VALUES = {
    "N": "a node",
    "[N]": "a list of nodes (a block of statements, or expressions)",
    "[[N]]": "a list of blocks",
    "str": "a str",
    "[str]": "a list of str",
    "int": "an int",
    "bool": "a bool",
    "const": "an int, float, str, bool or None (a literal's value)",
    "params": "a list of (name, default node or None, kind), kind \"\" (positional or keyword), \"*\", \"**\" or \"kwonly\"",
    "imported": "a list of (dotted name, alias or None)",
    "with-items": "a list of (context expression node or None, `as` target node or None)",
    "kwargs": "a list of (keyword, value node)",
    "pairs": "a list of (key node or None for a `**` entry, value node)",
    "gens": "a list of (\"for\", target node, iterable node) or (\"if\", condition node, None)",
}

_BODY = Field("body", "[N]", False, "the statements of the block")
_DECORATORS = Field("decorators", "[N]", False, "the decorator expressions, outermost first")
_ORELSE = Field("orelse", "[N]", False, "the else block ([] when none)")
_ELTS = Field("elts", "[N]", False, "the elements")

# Every IR node kind (`N.k`) and the fields of its `f`, in the order the converter writes them:
# each node's `f` has exactly these keys (a lazily converted def's body included, see
# LazyFields). Statements first, then expressions; "other" is any construct the analyses do not
# look into, statement or expression.
NODE_FIELDS: dict[str, tuple[Field, ...]] = {
    # statements
    "def": (Field("name", "str", False, "the function's name (\"?\" when missing)"),
            Field("params", "params", False, "the parameters"),
            _BODY,
            _DECORATORS,
            Field("returns", "N", True, "the return annotation")),
    "class": (Field("name", "str", False, "the class's name (\"?\" when missing)"),
              Field("bases", "[N]", False, "the base class expressions (keyword arguments left out)"),
              _BODY,
              _DECORATORS),
    "if": (Field("test", "N", False, "the condition"),
           _BODY,
           Field("orelse", "[N]", False, "the else block; an elif is one nested if in it"),
           Field("elif_", "bool", False, "this if is an elif clause (it spans to the end of the chain)")),
    "for": (Field("target", "N", False, "the loop variable(s)"),
            Field("iter", "N", False, "the iterable"),
            _BODY,
            _ORELSE),
    "while": (Field("test", "N", False, "the condition"), _BODY, _ORELSE),
    "try": (_BODY,
            Field("handlers", "[[N]]", False, "one block per except clause"),
            _ORELSE,
            Field("final", "[N]", False, "the finally block ([] when none)")),
    "with": (Field("items", "with-items", False, "the context managers"), _BODY),
    "return": (Field("value", "N", True, "the returned expression"),),
    "raise": (),
    "assert": (Field("test", "N", True, "the asserted condition"),),
    "assign": (Field("targets", "[N]", False, "the targets, left to right (a = b = v: two)"),
               Field("value", "N", True, "the assigned value (None: an annotation alone)"),
               Field("annotation", "N", True, "the annotation of `x: T = v`")),
    "augassign": (Field("target", "N", False, "the target"),
                  Field("op", "str", False, "the operator without \"=\" (\"+\", \"|\", ...)"),
                  Field("value", "N", False, "the operand")),
    "expr": (Field("value", "N", False, "the expression (several: one tuple)"),),
    "import": (Field("names", "imported", False, "the imported modules"),),
    "importfrom": (Field("module", "str", False, "the module's dotted name without leading dots (\"\" for `from . import`)"),
                   Field("level", "int", False, "the leading dots of a relative import"),
                   Field("names", "imported", False, "the imported names ([] for `import *`)"),
                   Field("star", "bool", False, "`from m import *`")),
    "pass": (),  # also del and `from __future__ import`
    "break": (),
    "continue": (),
    "global": (Field("names", "[str]", False, "the declared names"),),
    "nonlocal": (Field("names", "[str]", False, "the declared names"),),
    "block": (Field("body", "[N]", False, "the statements recognised inside a syntax error"),),
    "other": (),
    # expressions
    "name": (Field("id", "str", False, "the identifier"),),
    "attr": (Field("value", "N", False, "the object"), Field("attr", "str", False, "the attribute's name")),
    "call": (Field("func", "N", False, "the called expression"),
             Field("args", "[N]", False, "the positional arguments (* and ** ones left out)"),
             Field("kwargs", "kwargs", False, "the keyword arguments"),
             Field("star", "bool", False, "a * or ** argument is passed")),
    "const": (Field("value", "const", True, "the literal's value (adjacent strings joined)"),),
    "fstring": (Field("parts", "[N]", False, "the literal parts (\"const\") and the interpolated expressions, in order"),),
    "tuple": (_ELTS,),
    "list": (_ELTS,),
    "set": (_ELTS,),
    "dict": (Field("pairs", "pairs", False, "the entries"),),
    "subscript": (Field("value", "N", False, "the subscripted object"),
                  Field("index", "N", False, "the index (several: one tuple)")),
    "compare": (Field("operands", "[N]", False, "the operands, left to right"),
                Field("ops", "[str]", False, "the operators between them (\"not in\", \"is not\" as one)")),
    "boolop": (Field("op", "str", False, "\"and\" or \"or\""), Field("left", "N", False, "the left operand"),
               Field("right", "N", False, "the right operand")),
    "not": (Field("value", "N", False, "the operand"),),
    "unary": (Field("op", "str", False, "\"-\", \"+\" or \"~\""), Field("value", "N", False, "the operand")),
    "binop": (Field("op", "str", False, "the operator"), Field("left", "N", False, "the left operand"),
              Field("right", "N", False, "the right operand")),
    "ifexp": (Field("body", "N", False, "the value when the test holds"), Field("test", "N", False, "the condition"),
              Field("orelse", "N", False, "the value otherwise")),
    "walrus": (Field("target", "str", False, "the assigned name"), Field("value", "N", False, "the value")),
    "starred": (Field("value", "N", True, "the expression after * or **"),),
    "slice": (Field("lower", "N", True, "the start (None: left out)"),
              Field("upper", "N", True, "the stop (None: left out)"),
              Field("step", "N", True, "the step (None: left out)")),
    "lambda": (Field("body", "N", True, "the body expression"), Field("params", "params", False, "the parameters")),
    "comp": (Field("kind", "str", False, "\"list\", \"set\", \"gen\" or \"dict\""),
             Field("body", "N", True, "the element expression (None for a dict comprehension)"),
             Field("gens", "gens", False, "the for and if clauses, in order")),
}


@lru_cache(maxsize=1)
def _parser() -> tree_sitter.Parser:
    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_python.language()))


class ParsedModule:
    """Result of parsing one file: the IR body, the source bytes, and syntax problems."""

    __slots__ = ("body", "src", "errors", "shallow")

    def __init__(self, body: list, src: bytes, errors: list[tuple[int, str]], shallow: bool = False):
        self.body = body
        self.src = src
        self.errors = errors  # (line, message)
        self.shallow = shallow  # function bodies were not converted

    def text(self, n: N) -> str:
        return self.src[n.sb : n.eb].decode("utf-8", "replace")


def parse_python(src: bytes, shallow: bool = False, lazy: bool = False) -> ParsedModule:
    """Parse and convert. shallow=True leaves function bodies empty: enough to resolve imports
    and definitions in modules whose code cannot test the architecture, at a fraction of the cost.
    lazy=True converts a function's body only when it is first read (see LazyFields): about half
    the body bytes of flashinfer + sglang never are. Such a body is converted from the def parsed
    alone, which is the file's parse of it except where tree-sitter's grammar is ambiguous (see
    _def_node): every caller that reads a file's IR (the index, the cache's cutoff view) reads it
    lazily, so all see the same IR."""
    tree = _parser().parse(src)
    # Lazy bodies need an error-free tree (a body is parsed again alone, and error recovery
    # depends on the context) and one too shallow for the converter's nesting limits (their
    # diagnostics are found while converting: a body converted late would report them late).
    lazy = lazy and not shallow and not tree.root_node.has_error and _depth_below(tree.root_node, LAZY_MAX_DEPTH)
    conv = _Converter(src, shallow, lazy)
    body = conv.block_children(tree.root_node)
    errors = []
    if tree.root_node.has_error:
        errors = _first_errors(tree.root_node)
    errors.extend(conv.problems)
    # `^`-anchored patterns are tried at every offset: test the bytes they need first
    if b"\t" in src and _TAB_INDENT.search(src):
        errors.extend(_tab_errors(tree.root_node, src))
    if _py2_hint(src):
        errors.extend(_py2_errors(tree.root_node, src))
    errors.sort()
    return ParsedModule(body, src, errors, shallow)


def _first_errors(root, limit: int = 3) -> list[tuple[int, str]]:
    out = []
    stack = [root]
    while stack and len(out) < limit:
        n = stack.pop()
        if n.type == "ERROR" or n.is_missing:
            what = f"missing {n.type}" if n.is_missing else "syntax error"
            out.append((_error_point(n).start_point[0] + 1, what))
            continue
        if n.has_error:
            stack.extend(reversed(n.children))
    return out


def _error_point(n):
    """Where an ERROR node really goes wrong: tree-sitter's recovery often wraps the complete
    statements before the bad token in it (a whole-file ERROR), so skip those."""
    for _ in range(1000):
        if n.is_missing:
            return n
        for c in n.children:
            if c.is_missing or c.type == "ERROR" or c.has_error:
                n = c
                break
            if c.is_named and (c.type.endswith(("_statement", "_definition")) or c.type == "comment"):
                continue
            return c
        else:
            return n
    return n


# Python 2 constructs tree-sitter-python accepts silently: print/exec statements, `x`, <>.
# Searched in the whole tree (function bodies too, even for a shallow parse), after a byte test.
_PY2_STATEMENT = re.compile(rb"(?:print|exec)[ \t]+[^\s(=.,)\[\]:;]")


def _py2_hint(src: bytes) -> bool:
    r"""The byte test: a backquote, `<>`, or a print/exec statement shape with only blanks
    before it on its line. What rb"^[ \t]*(?:print|exec)[ \t]+[^\s(=.,)\[\]:;]|`|<>" (re.M)
    finds, without trying `^` at every offset."""
    if b"`" in src or b"<>" in src:
        return True
    for m in _PY2_STATEMENT.finditer(src):
        start = m.start()
        if not src[src.rfind(b"\n", 0, start) + 1 : start].strip(b" \t"):
            return True
    return False


@lru_cache(maxsize=1)
def _py2_query():
    lang = tree_sitter.Language(tree_sitter_python.language())
    return tree_sitter.Query(lang, '"<>" @op')


def _py2_errors(root, src: bytes) -> list[tuple[int, str]]:
    found = []
    if b"<>" in src:
        for n in tree_sitter.QueryCursor(_py2_query()).captures(root).get("op", []):
            found.append((n.start_point[0] + 1, "'<>' operator"))
    # Each construct starts with its own bytes: look only where they are rather than walking
    # the whole tree (half the corpus has backquotes in docstrings). A print/exec statement
    # starts at its keyword token; a backquote repr is a string_start token "`".
    for word, kind in ((b"print", "print_statement"), (b"exec", "exec_statement"), (b"`", "string_start")):
        pos = src.find(word)
        while pos >= 0:
            n = root.descendant_for_byte_range(pos, pos + len(word))
            while n is not None and n.start_byte == pos and n.type != kind:
                n = n.parent
            if n is not None and n.type == kind and n.start_byte == pos:
                what = "backquote repr" if kind == "string_start" else f"{kind.split('_')[0]} statement"
                found.append((n.start_point[0] + 1, what))
            pos = src.find(word, pos + 1)
    out, said = [], set()
    for line, what in sorted(found):
        if what not in said:  # once per construct per file
            said.add(what)
            out.append((line, f"Python 2 syntax ({what}); Python 3 cannot run this file"))
    return out


# a line indented with a tab somewhere in its leading whitespace
_TAB_INDENT = re.compile(rb"^[ \f]*\t", re.M)
_CLAUSES = frozenset(("elif_clause", "else_clause", "except_clause", "except_group_clause", "finally_clause",
                      "case_clause", "decorator"))


def _tab_errors(root, src: bytes) -> list[tuple[int, str]]:
    """CPython's TabError check: indentation must compare the same way with tabs as 8 columns
    (what tree-sitter uses) and as 1 column, on every line that starts a statement or clause."""
    rows: set[int] = set()
    stack = [root]
    while stack:
        n = stack.pop()
        for c in n.children:
            if c.is_named and (n.type in ("module", "block") or c.type in _CLAUSES):
                rows.add(c.start_point[0])
            if c.child_count and c.type not in ("string", "comment"):
                stack.append(c)
    lines = src.split(b"\n")
    indents = [(0, 0)]
    for row in sorted(rows):
        if row >= len(lines):
            continue
        line = lines[row]
        col = alt = 0
        for ch in line:
            if ch == 0x20:
                col += 1
                alt += 1
            elif ch == 0x09:
                col = (col // 8 + 1) * 8
                alt += 1
            elif ch == 0x0C:
                col = alt = 0
            else:
                break
        while len(indents) > 1 and col < indents[-1][0]:
            indents.pop()
        top_col, top_alt = indents[-1]
        if (col == top_col) != (alt == top_alt) or (col > top_col) != (alt > top_alt):
            return [(row + 1, "inconsistent use of tabs and spaces in indentation (Python 3 raises TabError); "
                     "analysed with tabs as 8 columns")]
        if col > top_col:
            indents.append((col, alt))
    return []


# identifier bytes -> their str, shared by every module converted in this process
_NAMES: dict[bytes, str] = {}

# (kind, type, value) -> the fields dict every name or constant node of that value shares. Names
# are a third of the IR's nodes and constants a tenth; nothing writes a node's fields after
# creation except a decorated def's or class's. Long strings (docstrings) are not kept.
_LEAF_FIELDS: dict[tuple, dict] = {}
_LEAF_MAX_STR = 64

# Nesting limits of the converter (it recurses). CPython itself refuses more than 100 indentation
# levels and 200 nested parentheses; deeper parts become opaque "other" nodes, with a diagnostic.
MAX_BLOCK_DEPTH = 100
MAX_EXPR_DEPTH = 200


class _Converter:
    def __init__(self, src: bytes, shallow: bool = False, lazy: bool = False):
        self.src = src
        self.depth = 0
        self.bdepth = 0
        self.shallow = shallow
        self.lazy = lazy
        self.problems: list[tuple[int, str]] = []  # (line, message): not syntax errors for tree-sitter
        self._said: set[str] = set()
        self._lines: dict[int, int] = {}

    def problem(self, ts, msg: str) -> None:
        if msg not in self._said:  # once per kind per file
            self._said.add(msg)
            self.problems.append((ts.start_point[0] + 1, msg))

    def mk(self, k: str, ts, **f) -> N:
        row, col = ts.start_point  # one Point and one range, not four calls: this runs for every IR node
        sb, eb = ts.byte_range
        return N(k, self._line(row), col + 1, sb, eb, f)

    def _line(self, row: int) -> int:
        line = self._lines.get(row)
        if line is None:  # nodes of one line share its number (an int above 256 is an object)
            line = self._lines[row] = row + 1
        return line

    def leaf(self, k: str, ts, key: str, value) -> N:
        """A "name" or "const" node, with shared fields (see _LEAF_FIELDS)."""
        row, col = ts.start_point
        sb, eb = ts.byte_range
        t = type(value)
        if t is float or t is str and len(value) > _LEAF_MAX_STR:  # 0.0 == -0.0; docstrings
            return N(k, self._line(row), col + 1, sb, eb, {key: value})
        f = _LEAF_FIELDS.get((k, t, value))
        if f is None:
            f = _LEAF_FIELDS[(k, t, value)] = {key: value}
        return N(k, self._line(row), col + 1, sb, eb, f)

    def text(self, ts) -> str:
        sb, eb = ts.byte_range
        return self.src[sb:eb].decode("utf-8", "replace")

    def name(self, ts) -> str:
        """An identifier's text, one shared str per spelling (names repeat a lot in the IR)."""
        sb, eb = ts.byte_range
        b = self.src[sb:eb]
        s = _NAMES.get(b)
        if s is None:
            s = _NAMES[b] = b.decode("utf-8", "replace")
        return s

    # ---------------------------------------------------------------- statements
    def block_children(self, ts) -> list[N]:
        out: list[N] = []
        if ts is None:
            return out
        if self.bdepth >= MAX_BLOCK_DEPTH:
            self.problem(ts, f"statements nested deeper than {MAX_BLOCK_DEPTH} levels; the inner ones are not analysed")
            return out
        self.bdepth += 1
        try:
            for c in ts.named_children:
                s = self.stmt(c)
                if s is not None:
                    out.append(s)
        finally:
            self.bdepth -= 1
        return out

    def stmt(self, ts) -> N | None:
        """One statement's IR node, converted by the handler of its tree-sitter type (None for a comment)."""
        t = ts.type
        if t == "comment":
            return None
        h = _STMT_HANDLERS.get(t)
        return h(self, ts) if h is not None else self.mk("other", ts)

    def _s_decorated(self, ts) -> N | None:
        """A decorated def or class: the inner definition with its decorator expressions."""
        decos = [self.expr(d.named_children[0]) for d in ts.named_children if d.type == "decorator" and d.named_children]
        inner = ts.child_by_field_name("definition")
        if inner is None:
            return self.mk("other", ts)
        n = self.stmt(inner)
        if n is not None:
            n.f["decorators"] = decos
        return n

    def _s_def(self, ts) -> N:
        """A function definition; its body converted now or, when lazy and it nests no def, on first use."""
        params = self.params(ts.child_by_field_name("parameters"))
        name = ts.child_by_field_name("name")
        body_ts = ts.child_by_field_name("body")
        if self.lazy and body_ts is not None and not may_nest_def(self.src, body_ts.start_byte, body_ts.end_byte):
            # a body without nested defs/classes (those must be indexed now) is converted on
            # first use; the key order is the eager one (walkers iterate f.values())
            row, col = ts.start_point
            f = LazyFields(name=self.text(name) if name else "?", params=params, decorators=[],
                           returns=self.opt_expr(ts.child_by_field_name("return_type")))
            # where the def is, to parse it alone when its body is first read (see _def_node)
            f.pending = f.origin = (self.src, ts.start_byte, ts.end_byte, (row, col), tuple(ts.end_point),
                                    self.bdepth)
            return N("def", self._line(row), col + 1, ts.start_byte, ts.end_byte, f)
        return self.mk(
            "def",
            ts,
            name=self.text(name) if name else "?",
            params=params,
            body=[] if self.shallow else self.block_children(body_ts),
            decorators=[],
            returns=self.opt_expr(ts.child_by_field_name("return_type")),
        )

    def _s_class(self, ts) -> N:
        """A class definition with its bases and body."""
        name = ts.child_by_field_name("name")
        sup = ts.child_by_field_name("superclasses")
        bases = []
        if sup is not None:
            bases = [self.expr(c) for c in sup.named_children if c.type not in ("keyword_argument", "comment")]
        return self.mk(
            "class",
            ts,
            name=self.text(name) if name else "?",
            bases=bases,
            body=self.block_children(ts.child_by_field_name("body")),
            decorators=[],
        )

    def _s_if(self, ts) -> N:
        """An if statement; elif chains become nested ifs in `orelse`, as in Python's ast."""
        cond = self.expr(ts.child_by_field_name("condition"))
        body = self.block_children(ts.child_by_field_name("consequence"))
        orelse: list[N] = []
        alts = [c for c in ts.children_by_field_name("alternative")]
        tail = orelse
        for a in alts:
            if a.type == "elif_clause":
                n = self.mk(
                    "if",
                    a,
                    test=self.expr(a.child_by_field_name("condition")),
                    body=self.block_children(a.child_by_field_name("consequence")),
                    orelse=[],
                    elif_=True,
                )
                # as in Python's ast, an elif spans to the end of the whole chain: the
                # later clauses are inside it
                n.eb = ts.end_byte
                tail.append(n)
                tail = n.f["orelse"]
            elif a.type == "else_clause":
                tail.extend(self.block_children(a.child_by_field_name("body")))
        return self.mk("if", ts, test=cond, body=body, orelse=orelse, elif_=False)

    def _s_for(self, ts) -> N:
        """A for loop with its else block."""
        alt = ts.child_by_field_name("alternative")
        return self.mk(
            "for",
            ts,
            target=self.expr(ts.child_by_field_name("left")),
            iter=self.expr(ts.child_by_field_name("right")),
            body=self.block_children(ts.child_by_field_name("body")),
            orelse=self.block_children(alt.child_by_field_name("body")) if alt is not None else [],
        )

    def _s_while(self, ts) -> N:
        """A while loop with its else block."""
        alt = ts.child_by_field_name("alternative")
        return self.mk(
            "while",
            ts,
            test=self.expr(ts.child_by_field_name("condition")),
            body=self.block_children(ts.child_by_field_name("body")),
            orelse=self.block_children(alt.child_by_field_name("body")) if alt is not None else [],
        )

    def _s_try(self, ts) -> N:
        """A try statement: its body, one block per handler, the else and finally blocks."""
        handlers, orelse, final = [], [], []
        for c in ts.named_children:
            if c.type in ("except_clause", "except_group_clause"):
                blk = [x for x in c.named_children if x.type == "block"]
                handlers.append(self.block_children(blk[0]) if blk else [])
            elif c.type == "else_clause":
                orelse = self.block_children(c.child_by_field_name("body"))
            elif c.type == "finally_clause":
                blk = [x for x in c.named_children if x.type == "block"]
                final = self.block_children(blk[0]) if blk else []
        return self.mk(
            "try", ts, body=self.block_children(ts.child_by_field_name("body")), handlers=handlers, orelse=orelse, final=final
        )

    def _s_with(self, ts) -> N:
        """A with statement: (context expression, `as` target or None) per item, and the body."""
        items = []
        for c in ts.named_children:
            if c.type == "with_clause":
                for it in c.named_children:
                    if it.type == "with_item":
                        v = it.child_by_field_name("value")
                        if v is not None and v.type == "as_pattern":
                            ch = v.named_children
                            tgt = v.child_by_field_name("alias")
                            items.append((self.expr(ch[0]), self.expr(tgt.named_children[0]) if tgt is not None and tgt.named_children else None))
                        else:
                            items.append((self.opt_expr(v), None))
        return self.mk("with", ts, items=items, body=self.block_children(ts.child_by_field_name("body")))

    def _s_return(self, ts) -> N:
        """A return statement and its value."""
        ch = ts.named_children
        return self.mk("return", ts, value=self.expr(ch[0]) if ch else None)

    def _s_raise(self, ts) -> N:
        """A raise statement (its exception is not kept)."""
        return self.mk("raise", ts)

    def _s_assert(self, ts) -> N:
        """An assert statement and its test."""
        ch = ts.named_children
        return self.mk("assert", ts, test=self.expr(ch[0]) if ch else None)

    def _s_expression(self, ts) -> N:
        """An expression statement: an assignment, an augmented assignment or a bare expression."""
        ch = ts.named_children
        if len(ch) == 1:
            c = ch[0]
            if c.type == "assignment":
                return self.assignment(c)
            if c.type == "augmented_assignment":
                return self.mk(
                    "augassign",
                    c,
                    target=self.expr(c.child_by_field_name("left")),
                    op=self.text(c.child_by_field_name("operator"))[:-1],
                    value=self.expr(c.child_by_field_name("right")),
                )
            return self.mk("expr", ts, value=self.expr(c))
        return self.mk("expr", ts, value=self.mk("tuple", ts, elts=[self.expr(c) for c in ch]))

    def _import_names(self, children) -> list[tuple[str, str | None]]:
        """(dotted name, alias or None) for each imported name among children."""
        names = []
        for c in children:
            if c.type == "dotted_name":
                names.append((self.text(c), None))
            elif c.type == "aliased_import":
                names.append((self.text(c.child_by_field_name("name")), self.text(c.child_by_field_name("alias"))))
        return names

    def _s_import(self, ts) -> N:
        """`import a.b [as c], ...`."""
        return self.mk("import", ts, names=self._import_names(ts.named_children))

    def _s_import_from(self, ts) -> N:
        """`from [.]mod import a [as b], ...` or `from mod import *`."""
        mod = ts.child_by_field_name("module_name")
        level, modname = 0, ""
        if mod is not None:
            mt = self.text(mod)
            level = len(mt) - len(mt.lstrip("."))
            modname = mt.lstrip(".")
        names = self._import_names(ts.children_by_field_name("name"))
        star = any(c.type == "wildcard_import" for c in ts.named_children)
        return self.mk("importfrom", ts, module=modname, level=level, names=names, star=star)

    def _s_keyword(self, ts) -> N:
        """pass, break or continue: a node of that kind."""
        return self.mk(ts.type.split("_")[0], ts)

    def _s_scope_names(self, ts) -> N:
        """global or nonlocal and the names it declares."""
        return self.mk(ts.type.split("_")[0], ts, names=[self.text(c) for c in ts.named_children])

    def _s_pass(self, ts) -> N:
        """A statement the analysis treats as `pass` (del, from __future__ import)."""
        return self.mk("pass", ts)

    def _s_other(self, ts) -> N:
        """A statement the analysis does not look into."""
        return self.mk("other", ts)

    def _s_error(self, ts) -> N:
        """A parse error region: a block of what is recognisable inside it."""
        inner = self.block_children(ts)
        return self.mk("block", ts, body=inner)

    def assignment(self, c) -> N:
        left = c.child_by_field_name("left")
        right = c.child_by_field_name("right")
        ann = c.child_by_field_name("type")
        targets = [self.expr(left)]
        # chained assignment a = b = value: tree-sitter nests assignments on the right
        while right is not None and right.type == "assignment":
            targets.append(self.expr(right.child_by_field_name("left")))
            right = right.child_by_field_name("right")
        return self.mk("assign", c, targets=targets, value=self.opt_expr(right), annotation=self.opt_expr(ann))

    def params(self, ts) -> list[tuple[str, N | None, str]]:
        """[(name, default, kind)] kind: "" normal, "*" varargs, "**" kwargs, "kwonly"."""
        out = []
        if ts is None:
            return out
        kwonly = False
        for c in ts.named_children:
            t = c.type
            if t == "identifier":
                out.append((self.text(c), None, "kwonly" if kwonly else ""))
            elif t in ("default_parameter", "typed_default_parameter"):
                nm = c.child_by_field_name("name")
                out.append((self.text(nm) if nm else "?", self.opt_expr(c.child_by_field_name("value")), "kwonly" if kwonly else ""))
            elif t == "typed_parameter":
                inner = c.named_children[0] if c.named_children else None
                if inner is not None and inner.type == "list_splat_pattern":
                    out.append((self.text(inner).lstrip("*"), None, "*"))
                    kwonly = True
                elif inner is not None and inner.type == "dictionary_splat_pattern":
                    out.append((self.text(inner).lstrip("*"), None, "**"))
                else:
                    out.append((self.text(inner) if inner else "?", None, "kwonly" if kwonly else ""))
            elif t == "list_splat_pattern":
                out.append((self.text(c).lstrip("*"), None, "*"))
                kwonly = True
            elif t == "dictionary_splat_pattern":
                out.append((self.text(c).lstrip("*"), None, "**"))
            elif t == "keyword_separator":
                kwonly = True
        return out

    # ---------------------------------------------------------------- expressions
    def opt_expr(self, ts) -> N | None:
        return None if ts is None else self.expr(ts)

    def expr(self, ts) -> N:
        self.depth += 1
        try:
            if self.depth > MAX_EXPR_DEPTH:
                self.problem(ts, f"expression nested deeper than {MAX_EXPR_DEPTH} levels; its inner part is not analysed")
                return self.mk("other", ts)
            return self._expr(ts)
        finally:
            self.depth -= 1

    def _expr(self, ts) -> N:
        """One expression's IR node, converted by the handler of its tree-sitter type."""
        h = _EXPR_HANDLERS.get(ts.type)
        return h(self, ts) if h is not None else self.mk("other", ts)

    def _e_name(self, ts) -> N:
        """An identifier."""
        return self.leaf("name", ts, "id", self.name(ts))

    def _e_attr(self, ts) -> N:
        """`obj.attr`."""
        obj = ts.child_by_field_name("object")
        attr = ts.child_by_field_name("attribute")
        return self.mk("attr", ts, value=self.expr(obj), attr=self.name(attr) if attr else "?")

    def _e_call(self, ts) -> N:
        """A call: positional and keyword arguments, and whether a * or ** argument is passed."""
        fn = ts.child_by_field_name("function")
        argl = ts.child_by_field_name("arguments")
        args, kwargs, star = [], [], False
        if argl is not None and argl.type == "argument_list":
            for c in argl.named_children:
                if c.type == "keyword_argument":
                    nm = c.child_by_field_name("name")
                    kwargs.append((self.text(nm) if nm else "?", self.expr(c.child_by_field_name("value"))))
                elif c.type in ("list_splat", "dictionary_splat"):
                    star = True
                elif c.type == "comment":
                    continue
                else:
                    args.append(self.expr(c))
        elif argl is not None:  # generator expression argument: `"".join(f(x) for x in xs)`
            args.append(self.comprehension(argl))
        return self.mk("call", ts, func=self.expr(fn), args=args, kwargs=kwargs, star=star)

    def _e_integer(self, ts) -> N:
        """An integer literal (any base, underscores, a Python 2 `L` suffix)."""
        txt = self.text(ts).replace("_", "").rstrip("lLjJ")
        try:
            v = int(txt, 0)
        except ValueError:
            try:
                v = int(txt.lstrip("0") or "0")
            except ValueError:
                return self.mk("other", ts)
        return self.leaf("const", ts, "value", v)

    def _e_float(self, ts) -> N:
        """A float literal."""
        try:
            return self.mk("const", ts, value=float(self.text(ts).replace("_", "")))
        except ValueError:
            return self.mk("other", ts)

    def _e_true(self, ts) -> N:
        """`True`."""
        return self.leaf("const", ts, "value", True)

    def _e_false(self, ts) -> N:
        """`False`."""
        return self.leaf("const", ts, "value", False)

    def _e_none(self, ts) -> N:
        """`None`."""
        return self.leaf("const", ts, "value", None)

    def _e_concatenated(self, ts) -> N:
        """Adjacent string literals: one constant, or one f-string of all their parts."""
        parts = [self.string(c) for c in ts.named_children if c.type == "string"]
        if all(p.k == "const" for p in parts):
            return self.mk("const", ts, value="".join(p.f["value"] for p in parts))
        return self.mk("fstring", ts, parts=[x for p in parts for x in (p.f["parts"] if p.k == "fstring" else [p])])

    def _elts(self, ts) -> list[N]:
        """The element expressions of a tuple, list or set display."""
        return [self.expr(c) for c in ts.named_children if c.type != "comment"]

    def _e_tuple(self, ts) -> N:
        """A tuple (or a tuple pattern, an expression list)."""
        return self.mk("tuple", ts, elts=self._elts(ts))

    def _e_list(self, ts) -> N:
        """A list (or a list pattern)."""
        return self.mk("list", ts, elts=self._elts(ts))

    def _e_set(self, ts) -> N:
        """A set display."""
        return self.mk("set", ts, elts=self._elts(ts))

    def _e_dict(self, ts) -> N:
        """A dict display: (key, value) pairs, key None for a `**` entry."""
        pairs = []
        for c in ts.named_children:
            if c.type == "pair":
                pairs.append((self.expr(c.child_by_field_name("key")), self.expr(c.child_by_field_name("value"))))
            elif c.type == "dictionary_splat":
                pairs.append((None, self.expr(c.named_children[0]) if c.named_children else self.mk("other", c)))
        return self.mk("dict", ts, pairs=pairs)

    def _e_subscript(self, ts) -> N:
        """`value[index]`; several subscripts become a tuple index."""
        subs = ts.children_by_field_name("subscript")
        idx = self.expr(subs[0]) if len(subs) == 1 else self.mk("tuple", ts, elts=[self.expr(s) for s in subs])
        return self.mk("subscript", ts, value=self.expr(ts.child_by_field_name("value")), index=idx)

    def _e_compare(self, ts) -> N:
        """A comparison chain: its operands and operators (`not in`, `is not` as one operator)."""
        operands, ops = [], []
        pending = ""
        for c in ts.children:
            if c.is_named and c.type != "comment":
                if pending:
                    ops.append(pending)
                    pending = ""
                operands.append(self.expr(c))
            elif not c.is_named:
                tok = self.text(c)
                pending = f"{pending} {tok}".strip() if pending else tok
        return self.mk("compare", ts, operands=operands, ops=ops)

    def _e_boolop(self, ts) -> N:
        """`left and right`, `left or right`."""
        return self._two_operands("boolop", ts, "and")

    def _e_not(self, ts) -> N:
        """`not value`."""
        return self.mk("not", ts, value=self.expr(ts.child_by_field_name("argument")))

    def _e_unary(self, ts) -> N:
        """A unary operator (-, +, ~)."""
        op = ts.child_by_field_name("operator")
        return self.mk("unary", ts, op=self.text(op) if op else "-", value=self.expr(ts.child_by_field_name("argument")))

    def _e_binop(self, ts) -> N:
        """A binary operator."""
        return self._two_operands("binop", ts, "?")

    def _two_operands(self, kind: str, ts, default_op: str) -> N:
        """A node of `kind` with fields op (the operator's text, `default_op` where the tree has
        none), left and right."""
        op = ts.child_by_field_name("operator")
        return self.mk(
            kind,
            ts,
            op=self.text(op) if op else default_op,
            left=self.expr(ts.child_by_field_name("left")),
            right=self.expr(ts.child_by_field_name("right")),
        )

    def _e_ifexp(self, ts) -> N:
        """`body if test else orelse`."""
        ch = [c for c in ts.named_children if c.type != "comment"]
        if len(ch) == 3:
            return self.mk("ifexp", ts, body=self.expr(ch[0]), test=self.expr(ch[1]), orelse=self.expr(ch[2]))
        return self.mk("other", ts)

    def _e_paren(self, ts) -> N:
        """A parenthesized expression: the expression inside."""
        ch = [c for c in ts.named_children if c.type != "comment"]
        return self.expr(ch[0]) if len(ch) == 1 else self.mk("other", ts)

    def _e_await(self, ts) -> N:
        """`await value`: the awaited expression."""
        ch = ts.named_children
        return self.expr(ch[0]) if ch else self.mk("other", ts)

    def _e_walrus(self, ts) -> N:
        """`name := value`."""
        return self.mk(
            "walrus", ts, target=self.text(ts.child_by_field_name("name")), value=self.expr(ts.child_by_field_name("value"))
        )

    def _e_starred(self, ts) -> N:
        """`*value` or `**value`."""
        ch = ts.named_children
        return self.mk("starred", ts, value=self.expr(ch[0]) if ch else None)

    def _e_slice(self, ts) -> N:
        """`lower:upper:step` inside a subscript, each part optional (the grammar names none of
        them: they are told apart by the colons before them)."""
        parts: list = [None, None, None]
        colons = 0
        for c in ts.children:
            if c.type == ":":
                colons += 1
            elif c.is_named and colons < 3 and c.type != "comment":
                parts[colons] = self.expr(c)
        return self.mk("slice", ts, lower=parts[0], upper=parts[1], step=parts[2])

    def _e_lambda(self, ts) -> N:
        """A lambda: its body expression and parameters."""
        return self.mk("lambda", ts, body=self.opt_expr(ts.child_by_field_name("body")), params=self.params(ts.child_by_field_name("parameters")))

    def _e_keyword_argument(self, ts) -> N:
        """A keyword argument outside an argument list: its value."""
        return self.expr(ts.child_by_field_name("value"))

    def comprehension(self, ts) -> N:
        body = ts.child_by_field_name("body")
        gens = []
        for c in ts.named_children:
            if c.type == "for_in_clause":
                gens.append(("for", self.expr(c.child_by_field_name("left")), self.expr(c.child_by_field_name("right"))))
            elif c.type == "if_clause":
                ch = c.named_children
                if ch:
                    gens.append(("if", self.expr(ch[0]), None))
        kind = {"list_comprehension": "list", "set_comprehension": "set", "generator_expression": "gen"}.get(ts.type, "dict")
        return self.mk("comp", ts, kind=kind, body=self.opt_expr(body) if body is not None and body.type != "pair" else None, gens=gens)

    def string(self, ts) -> N:
        parts: list[N] = []
        chunks: list[str] = []
        is_f = False
        prefix = ""
        for c in ts.children:
            if c.type == "string_start":
                prefix = self.text(c).lower()
                is_f = "f" in prefix.rstrip("'\"")
            elif c.type == "string_content":
                chunks.append(self._content(c, prefix))
            elif c.type == "interpolation":
                is_f = True
                if chunks:
                    parts.append(N("const", 0, 0, 0, 0, {"value": "".join(chunks)}))
                    chunks = []
                e = c.child_by_field_name("expression")
                parts.append(self.expr(e) if e is not None else self.mk("other", c))
            elif c.type == "escape_sequence":
                chunks.append(_unescape(self.text(c)))
        if not is_f:
            return self.leaf("const", ts, "value", "".join(chunks))
        if chunks:
            parts.append(N("const", 0, 0, 0, 0, {"value": "".join(chunks)}))
        return self.mk("fstring", ts, parts=parts)

    def _content(self, c, prefix: str) -> str:
        # string_content may contain escape_sequence children; reconstruct
        if not c.named_children or "r" in prefix:
            return self.text(c)
        out, pos = [], c.start_byte
        for e in c.named_children:
            out.append(self.src[pos : e.start_byte].decode("utf-8", "replace"))
            out.append(_unescape(self.text(e)) if e.type == "escape_sequence" else self.text(e))
            pos = e.end_byte
        out.append(self.src[pos : c.end_byte].decode("utf-8", "replace"))
        return "".join(out)


# tree-sitter statement type -> the _Converter method that converts it (others become "other")
_STMT_HANDLERS = {
    "decorated_definition": _Converter._s_decorated,
    "function_definition": _Converter._s_def,
    "class_definition": _Converter._s_class,
    "if_statement": _Converter._s_if,
    "for_statement": _Converter._s_for,
    "while_statement": _Converter._s_while,
    "try_statement": _Converter._s_try,
    "with_statement": _Converter._s_with,
    "return_statement": _Converter._s_return,
    "raise_statement": _Converter._s_raise,
    "assert_statement": _Converter._s_assert,
    "expression_statement": _Converter._s_expression,
    "import_statement": _Converter._s_import,
    "import_from_statement": _Converter._s_import_from,
    "pass_statement": _Converter._s_keyword,
    "break_statement": _Converter._s_keyword,
    "continue_statement": _Converter._s_keyword,
    "global_statement": _Converter._s_scope_names,
    "nonlocal_statement": _Converter._s_scope_names,
    "delete_statement": _Converter._s_pass,
    "future_import_statement": _Converter._s_pass,
    "match_statement": _Converter._s_other,
    "ERROR": _Converter._s_error,
}

# tree-sitter expression type -> the _Converter method that converts it (others become "other")
_EXPR_HANDLERS = {
    "identifier": _Converter._e_name,
    "attribute": _Converter._e_attr,
    "call": _Converter._e_call,
    "integer": _Converter._e_integer,
    "float": _Converter._e_float,
    "true": _Converter._e_true,
    "false": _Converter._e_false,
    "none": _Converter._e_none,
    "string": _Converter.string,
    "concatenated_string": _Converter._e_concatenated,
    "tuple": _Converter._e_tuple,
    "expression_list": _Converter._e_tuple,
    "pattern_list": _Converter._e_tuple,
    "tuple_pattern": _Converter._e_tuple,
    "list": _Converter._e_list,
    "list_pattern": _Converter._e_list,
    "set": _Converter._e_set,
    "dictionary": _Converter._e_dict,
    "subscript": _Converter._e_subscript,
    "comparison_operator": _Converter._e_compare,
    "boolean_operator": _Converter._e_boolop,
    "not_operator": _Converter._e_not,
    "unary_operator": _Converter._e_unary,
    "binary_operator": _Converter._e_binop,
    "conditional_expression": _Converter._e_ifexp,
    "parenthesized_expression": _Converter._e_paren,
    "await": _Converter._e_await,
    "named_expression": _Converter._e_walrus,
    "slice": _Converter._e_slice,
    "list_splat": _Converter._e_starred,
    "dictionary_splat": _Converter._e_starred,
    "list_splat_pattern": _Converter._e_starred,
    "lambda": _Converter._e_lambda,
    "list_comprehension": _Converter.comprehension,
    "set_comprehension": _Converter.comprehension,
    "generator_expression": _Converter.comprehension,
    "dictionary_comprehension": _Converter.comprehension,
    "keyword_argument": _Converter._e_keyword_argument,
}


# ---------------------------------------------------------------- lazy function bodies
# A tree deeper than this cannot be converted lazily: each level of the converter's block and
# expression nesting is a strictly nested tree-sitter node, so below this depth neither of its
# limits (MAX_BLOCK_DEPTH, MAX_EXPR_DEPTH) can be reached and converting never reports anything.
LAZY_MAX_DEPTH = 100


def may_nest_def(src: bytes, start: int, end: int) -> bool:
    """May src[start:end] define a function or class? (A body that may is converted at once:
    what it defines is indexed by name.) The answer of re.compile(rb"\\b(?:def|class)\\b")
    .search(src, start, end) (a word boundary at `start` looks at the byte before it, one at
    `end` does not), found by substring search: the pattern, tried at every offset, took 4x as
    long."""
    for word in (b"def", b"class"):
        n = len(word)
        i = src.find(word, start, end)
        while i >= 0:
            if (i == 0 or not WORD_BYTE[src[i - 1]]) and (i + n == end or not WORD_BYTE[src[i + n]]):
                return True
            i = src.find(word, i + 1, end)
    return False


def _depth_below(root, limit: int) -> bool:
    """Is every node of the tree less than `limit` levels below root? Subtrees with too few
    descendants to reach the limit are not visited (descendant_count counts the node itself)."""
    stack = [(root, 0)]
    while stack:
        n, d = stack.pop()
        if d >= limit:
            return False
        for c in n.children:
            if d + c.descendant_count >= limit:
                stack.append((c, d + 1))
    return True


# bodies converted late, and how many of them needed the whole file parsed again
LAZY_STATS = {"converted": 0, "reparsed": 0}


@lru_cache(maxsize=1)
def _range_parser() -> tree_sitter.Parser:
    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_python.language()))


def _def_node(src: bytes, sb: int, eb: int, sp: tuple, ep: tuple):
    """The function_definition spanning [sb, eb) of src, parsed alone: tree-sitter's included
    ranges keep the file's positions, and the parse costs the def's bytes, not the file's.

    This parse is the reference for a lazy body, not the whole file's: where tree-sitter's
    grammar is ambiguous, its choice may depend on what follows the def. In flashinfer 0.7.2.post1
    + sglang 0.5.23 + vllm 0.33.0, 1 def in 141,673 parses differently alone: sglang's
    `return *t[:i], f(t[i]), *t[i + 1 :]` is starred(subscript) alone, as Python reads it, and
    subscript(starred) in its file. Checking every def against the file's tree (the S-expression's
    hash, taken while converting) cost a third of a lazy parse. The parse alone depends only on
    the def's bytes and position, so the IR stays a function of the file's bytes.
    A def that does not parse alone without errors (none of those 141,673 did; bodies are lazy
    only in error-free files) is taken from the whole file parsed again."""
    p = _range_parser()
    p.included_ranges = [tree_sitter.Range(tree_sitter.Point(*sp), tree_sitter.Point(*ep), sb, eb)]
    try:
        root = p.parse(src).root_node
    finally:
        p.included_ranges = []
    ch = root.children
    if not root.has_error and len(ch) == 1 and ch[0].type == "function_definition" and ch[0].byte_range == (sb, eb):
        return ch[0]
    LAZY_STATS["reparsed"] += 1
    n = _parser().parse(src).root_node.descendant_for_byte_range(sb, eb)
    while n is not None and not (n.type == "function_definition" and n.byte_range == (sb, eb)):
        n = n.parent
    if n is None:  # cannot happen for the bytes that gave the def: the parse is deterministic
        raise ValueError(f"function at byte {sb} not found on re-parse")
    return n


class LazyFields(dict):
    """The fields of a "def" node whose "body" is converted on first read. Every way of reading
    the dict sees the body (converted then), so it behaves exactly like the eager dict."""

    __slots__ = ("pending", "origin")

    def __init__(self, *a, **k):
        dict.__init__(self, *a, **k)
        self.pending = None
        self.origin = None  # what `pending` was: a converted body can be released (see release)

    def release(self) -> None:
        """Drop a converted body, to free its memory: the next read converts it again, to an
        equal IR (new node objects)."""
        if self.pending is None and self.origin is not None:
            dict.pop(self, "body", None)
            self.pending = self.origin

    def _force(self) -> None:
        pending = self.pending
        if pending is None:
            return
        src, sb, eb, sp, ep, bdepth = pending
        LAZY_STATS["converted"] += 1
        conv = _Converter(src)
        conv.bdepth = bdepth
        body = conv.block_children(_def_node(src, sb, eb, sp, ep).child_by_field_name("body"))
        self.pending = None
        rest = list(dict.items(self))
        dict.clear(self)
        for k, v in rest:  # the eager order: name, params, body, decorators, returns
            dict.__setitem__(self, k, v)
            if k == "params":
                dict.__setitem__(self, "body", body)

    def __missing__(self, key):
        if key == "body" and self.pending is not None:
            self._force()
            return dict.__getitem__(self, key)
        raise KeyError(key)

    def _forcing(name):  # noqa: N805 - builds the methods below
        base = getattr(dict, name)

        def method(self, *a, **k):
            if self.pending is not None:
                self._force()
            return base(self, *a, **k)

        method.__name__ = name
        return method

    keys, values, items, __iter__ = _forcing("keys"), _forcing("values"), _forcing("items"), _forcing("__iter__")
    __len__, __reversed__, __repr__ = _forcing("__len__"), _forcing("__reversed__"), _forcing("__repr__")
    copy, popitem, update = _forcing("copy"), _forcing("popitem"), _forcing("update")
    __or__, __ior__ = _forcing("__or__"), _forcing("__ior__")
    del _forcing

    # by key: only "body" is missing until converted (`f.get("decorators")` must stay cheap)
    def get(self, key, default=None):
        if key == "body" and self.pending is not None:
            self._force()
        return dict.get(self, key, default)

    def __contains__(self, key):
        return key == "body" or dict.__contains__(self, key)

    def pop(self, key, *default):
        if key == "body" and self.pending is not None:
            self._force()
        return dict.pop(self, key, *default)

    def setdefault(self, key, default=None):
        if key == "body" and self.pending is not None:
            self._force()
        return dict.setdefault(self, key, default)
    __hash__ = None

    def __eq__(self, other):
        for d in (self, other):
            if isinstance(d, LazyFields):
                d._force()
        return dict.__eq__(self, other)

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __ror__(self, other):
        self._force()
        return dict.__ror__(self, other)

    def __reduce__(self):
        self._force()
        return (dict, (dict(dict.items(self)),))

    @property
    def is_pending(self) -> bool:
        return self.pending is not None


def _pending_fields(src: bytes, items: dict, sb, eb, sp, ep, bdepth) -> LazyFields:
    f = LazyFields(items)
    f.pending = f.origin = (src, sb, eb, sp, ep, bdepth)
    return f


def _reduce_pending(f: LazyFields):
    """A LazyFields whose body is not converted yet, pickled as it is (LazyFields.__reduce__
    converts it): the source bytes are left out, the unpickler supplies them."""
    if f.pending is None:
        return f.__reduce__()
    _src, sb, eb, sp, ep, bdepth = f.pending
    return _pending_fields, (dict(dict.items(f)), sb, eb, sp, ep, bdepth)


_PENDING_DISPATCH = {**copyreg.dispatch_table, LazyFields: _reduce_pending}


def dumps_parsed(pm: ParsedModule) -> bytes:
    """pm's IR and errors for another process of this scan (loads_parsed): lazy bodies stay
    lazy, and the source, which the receiver has, is not sent."""
    buf = io.BytesIO()
    p = pickle.Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL)
    p.dispatch_table = _PENDING_DISPATCH
    p.dump((pm.body, pm.errors))
    return buf.getvalue()


class _ParsedUnpickler(pickle.Unpickler):
    def __init__(self, blob: bytes, src: bytes):
        super().__init__(io.BytesIO(blob))
        self.src = src

    def find_class(self, module, name):
        if module == __name__ and name == "_pending_fields":
            return partial(_pending_fields, self.src)
        return super().find_class(module, name)


def loads_parsed(blob: bytes, src: bytes, shallow: bool) -> ParsedModule:
    """The ParsedModule dumps_parsed(parse_python(src, shallow, lazy=True)) was made from."""
    body, errors = _ParsedUnpickler(blob, src).load()
    return ParsedModule(body, src, errors, shallow)


def _unescape(s: str) -> str:
    try:
        return s.encode("latin-1", "backslashreplace").decode("unicode_escape")
    except (UnicodeDecodeError, UnicodeEncodeError):
        return s


# deep expressions: the converter recurses; give it room but keep a hard cap above
if sys.getrecursionlimit() < 5000:
    sys.setrecursionlimit(5000)


def dotted_name(n: N | None) -> str:
    """"a.b.c" for a chain of names and attributes, "" for anything else."""
    parts = []
    while n is not None and n.k == "attr":
        parts.append(n.f["attr"])
        n = n.f["value"]
    if n is None or n.k != "name":
        return ""
    parts.append(n.f["id"])
    return ".".join(reversed(parts))


def decorator_name(d: N) -> str:
    """The last name of a decorator: `name`, `a.name`, `name(...)` and `a.name(...)` give "name";
    "" for any other expression."""
    while d.k == "call":
        d = d.f["func"]
    if d.k == "attr":
        return d.f["attr"]
    if d.k == "name":
        return d.f["id"]
    return ""


def iter_stmts(body: list, into_defs: bool = False):
    """Statements of a body, recursively through compound statements but not nested defs/classes."""
    for st in body:
        yield st
        k = st.k
        if k in ("def", "class") and not into_defs:
            continue
        for key in ("body", "orelse", "final"):
            sub = st.f.get(key)
            if isinstance(sub, list):
                yield from iter_stmts(sub, into_defs)
        if k == "try":
            for h in st.f["handlers"]:
                yield from iter_stmts(h, into_defs)
