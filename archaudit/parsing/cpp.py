"""C++/CUDA source reading: a careful lexical scanner, and tree-sitter where structure is needed.

Parsing every CUDA/C++ file of a package with tree-sitter takes minutes (DESIGN §6), so the
engine reads preprocessor structure, string literals and brace structure lexically:

* `scan(data)` blanks comments and the *contents* of string/char literals (offsets and line
  breaks are kept, so every offset in the blanked text is an offset in the file), records the
  literal spans, and finds the preprocessor directives (logical lines, continuations joined).
* `structure(scan)` matches braces in the blanked text and names the definitions at namespace
  and class scope ("owners": functions, classes, aliases), marks `__global__` kernels and gives
  their body extents.  Braces split across `#if` branches are handled the way ctags does: each
  `#elif`/`#else` branch restarts from the depth at the `#if`, and `#endif` continues with the
  depth the first branch reached.

tree-sitter (tree-sitter-cuda, which has fewer ERROR nodes than tree-sitter-cpp on .cu/.cuh,
see the module note in the report) is used lazily, per file, only where a syntax tree is worth
its cost: finding the enclosing function of a host-side runtime check, and cross-checks.

Bytes are decoded as latin-1 so that string offsets equal byte offsets (tree-sitter works on
bytes) and no file can fail to decode; everything that matters here is ASCII.
"""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from functools import lru_cache

import tree_sitter as ts

# --- lexical scan ----------------------------------------------------------------------------

# Comments, string and character literals. Written so that each alternative starts with a
# literal character (an order of magnitude faster than prefix-optional alternatives); raw
# strings are completed by hand from their `R"` candidate.
_LEX = re.compile(
    r"//[^\n\\]*(?:\\.[^\n\\]*)*"  # line comment; backslash-newline continues it
    r"|/\*.*?\*/"  # block comment
    r'|"[^"\\\n]*(?:\\.[^"\\\n]*)*"'  # string literal (encoding prefixes stay outside)
    r"|(?<![0-9A-Fa-f])'[^'\\\n]*(?:\\.[^'\\\n]*)*'"  # char literal, not a digit separator
    r'|R"',  # raw string candidate
    re.S,
)
_RAW_OPEN = re.compile(r'R"([^()\\\s"]{0,16})\(')

# A directive: `#` (or its digraph `%:`) first on a line, its name, and the rest of the logical
# line. A backslash-newline (LF or CRLF) continues it, in the name too (`#en\<newline>dif`), as
# line splicing precedes everything in C; the rest is matched as runs between backslashes, which
# keeps a 15 MiB one-line directive linear. It runs on the code with comments blanked *and*
# their line breaks removed (see scan), since a block comment that spans lines continues the
# directive it starts in.
_SPLICE = r"\\(?:\r?\n)"
_DIRECTIVE = re.compile(
    rf"^[ \t]*(?:#|%:)(?:[ \t]|{_SPLICE})*((?:\w|{_SPLICE}\w)*)([^\n\\]*(?:\\(?:\r\n|.)[^\n\\]*)*)", re.M | re.S)
_SPLICES = re.compile(_SPLICE)
_LONE_CR = re.compile(r"\r(?!\n)")
_NEWLINES = re.compile(r"[^\n]")
_BOM = "\xef\xbb\xbf"  # UTF-8 byte-order mark, latin-1 decoded
IDENT = re.compile(r"[A-Za-z_]\w*")


def _blank(s: str) -> str:
    """Same length, line breaks kept, everything else a space."""
    if "\n" not in s:
        return " " * len(s)
    return _NEWLINES.sub(" ", s)


@dataclass
class Directive:
    line: int  # 1-based line of the '#'
    start: int  # offset of the line start
    end: int  # offset just past the logical line (before its newline)
    name: str  # "if", "ifdef", "include", "define", ... ("" for a null directive)
    text: str  # the rest of the logical line: comments blanked, literals intact, continuations joined


@dataclass
class Scan:
    text: str  # the file, latin-1 decoded
    code: str  # comments and literal contents blanked
    body: str  # `code` with directive lines blanked too (what the compiler proper sees)
    strings: list[tuple[int, int]]  # spans of string literals (quotes included), in order
    directives: list[Directive]
    line_starts: list[int]

    def line_of(self, offset: int) -> int:
        return bisect.bisect_right(self.line_starts, offset)

    def string_at(self, offset: int) -> tuple[int, int] | None:
        i = bisect.bisect_right(self.strings, (offset, 1 << 62)) - 1
        if i >= 0 and self.strings[i][0] <= offset < self.strings[i][1]:
            return self.strings[i]
        return None


def decode(data: bytes | str) -> str:
    return data if isinstance(data, str) else data.decode("latin-1")


def scan(data: bytes | str) -> Scan:
    """The file's text with comments and literals blanked, its string literals and directives."""
    text = decode(data)
    if "\r" in text:
        # a carriage return that ends a line alone (old Mac line ends) ends it for the C
        # preprocessor too; lines are counted by LF here. Same length, so offsets are kept.
        text = _LONE_CR.sub("\n", text)
    code, cleaned, dcode, strings = _blank_comments_and_literals(text)
    line_starts = [0]
    line_starts.extend(m.end() for m in re.finditer(r"\n", text))
    directives, body = _directives(code, cleaned, dcode, line_starts)
    return Scan(text, code, body, strings, directives, line_starts)


def _blank_comments_and_literals(text: str) -> tuple[str, str, str, list[tuple[int, int]]]:
    """(code: comments and literal contents blanked, cleaned: comments blanked only, dcode:
    comments as plain spaces, line breaks included, string literal spans), all as long as text."""
    pieces: list[str] = []  # comments and literal contents blanked
    clean: list[str] = []  # comments blanked only (directive text keeps its string literals)
    strings: list[tuple[int, int]] = []
    # comments as plain spaces, line breaks included: what directives are found in
    flat: list[str] = []
    pos = 0
    search = _LEX.search
    i = 0
    while True:
        m = search(text, i)
        if m is None:
            break
        s, e = m.span()
        tok = m.group()
        c = tok[0]
        if c == "R":
            e = _raw_string_end(text, s)
            if e >= 0:
                pieces.append(text[pos : s + 2])
                pieces.append(_blank(text[s + 2 : e - 1]) + '"')
                flat.append(text[pos : s + 2])
                flat.append(_blank(text[s + 2 : e - 1]) + '"')
                clean.append(text[pos:e])
                strings.append((s, e))
                pos = i = e
                continue
            i = s + 1  # an identifier ending in R before a string: rescan from the quote
            continue
        pieces.append(text[pos:s])
        clean.append(text[pos:s])
        flat.append(text[pos:s])
        if c == "/":
            b = _blank(tok)
            pieces.append(b)
            clean.append(b)
            flat.append(" " * len(tok))
        else:
            if c == '"':
                strings.append((s, e))
            b = c + _blank(tok[1:-1]) + c
            pieces.append(b)
            flat.append(b)
            clean.append(tok)
        pos = i = e
    pieces.append(text[pos:])
    clean.append(text[pos:])
    flat.append(text[pos:])
    code = "".join(pieces)
    dcode = "".join(flat)
    if dcode.startswith(_BOM):
        dcode = "   " + dcode[3:]  # a BOM before a first-line directive is not a token
    assert len(code) == len(text) == len(dcode)
    return code, "".join(clean), dcode, strings


def _raw_string_end(text: str, s: int) -> int:
    """The end of the raw string literal R"d(...)d" whose R is at s, or -1 when there is none."""
    prev = text[s - 2 : s] if s >= 2 else text[:s]
    rm = _RAW_OPEN.match(text, s)
    if rm and (not prev or not (prev[-1].isalnum() or prev[-1] == "_") or prev in ("u8",) or prev[-1] in "uUL"):
        close = text.find(")" + rm.group(1) + '"', rm.end())
        if close >= 0:
            return close + len(rm.group(1)) + 2
    return -1


def _directives(code: str, cleaned: str, dcode: str, line_starts: list[int]) -> tuple[list[Directive], str]:
    """The preprocessor directives (found in dcode) and the code with their text blanked."""
    directives: list[Directive] = []
    body_parts: list[str] = []
    bpos = 0
    for m in _DIRECTIVE.finditer(dcode):
        s, e = m.span()
        line = bisect.bisect_right(line_starts, s)
        name = m.group(1)
        if "\\" in name:
            name = _SPLICES.sub("", name)
        joined = cleaned[m.start(2) : e]
        if "\\" in joined or "\n" in joined:
            # spliced lines join with nothing between them; a line break left is one inside a
            # block comment (already blanked), which is a space
            joined = _SPLICES.sub("", joined).replace("\r\n", " ").replace("\n", " ")
        directives.append(Directive(line, s, e, name, joined.strip()))
        body_parts.append(code[bpos:s])
        body_parts.append(_blank(code[s:e]))
        bpos = e
    body_parts.append(code[bpos:])
    return directives, "".join(body_parts)


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "'": "'", "\\": "\\", "0": "\0", "\n": ""}


def string_value(literal: str) -> str:
    """The characters of one C string literal (simple escapes decoded; raw strings verbatim)."""
    q = literal.index('"')
    if literal[:q].endswith("R"):
        m = re.match(r'[^(]*\((.*)\)[^)]*"$', literal[q + 1 :], re.S)
        return m.group(1) if m else ""
    inner = literal[q + 1 : -1]
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), inner, flags=re.S)


# --- brace structure ---------------------------------------------------------------------------

# Kinds of scope opened by '{'
NS, CLASS, FUNC, BLOCK = "ns", "class", "func", "block"

_TEMPLATE_HEAD = re.compile(r"^\s*template\s*<")
_CLASS_KW = re.compile(r"^(?:[\w:]+\s+)*?\b(struct|class|union)\b(.*)$", re.S)
_ATTR_CALL = re.compile(
    r"\b(?:__attribute__|__launch_bounds__|__cluster_dims__|__maxnreg__|__declspec|alignas|__align__|decltype|"
    r"__grid_constant__|noexcept|requires|throw|static_assert)\s*\("
)
_KEYWORDS_NOT_NAMES = frozenset(
    "if for while switch catch return sizeof alignof decltype typeid static_cast reinterpret_cast "
    "const_cast dynamic_cast new delete do else case default try".split()
)


@dataclass
class Owner:
    """A definition at namespace or class scope: function, class/struct/union, or alias."""

    name: str
    kind: str  # "func" | "class" | "alias"
    template: bool
    start: int  # offset of the head
    body_start: int  # offset of '{' (or of the alias' '=')
    end: int  # offset just past '}' (or ';')
    kernel: bool = False
    device_only: bool = False  # __device__ without __host__ / __global__
    qual: str = ""  # qualifier of an out-of-line definition ("A" for A::f), else ""
    parent: int = -1  # index of the enclosing class owner, -1 at namespace scope
    line: int = 0
    head_words: tuple[str, ...] = ()  # macro-like words before the name (CUTLASS_GLOBAL, ...)
    # enclosing named namespaces as written ("a::b"); inline and unnamed namespaces, whose members
    # are found from the enclosing one, are left out; "?" stands for a namespace head not read
    ns: str = ""


@dataclass
class Structure:
    owners: list[Owner] = field(default_factory=list)
    # Outermost owners, sorted, non-overlapping: (start, end, owner index)
    top: list[tuple[int, int, int]] = field(default_factory=list)
    funcs: list[tuple[int, int, int]] = field(default_factory=list)  # every function owner (start,end,idx)
    # (body start, end) of every namespace with a name or an unread head (the `{`, just past `}`)
    namespaces: list[tuple[int, int]] = field(default_factory=list)

    def top_owner_at(self, offset: int) -> int:
        i = bisect.bisect_right(self.top, (offset, 1 << 62, 1 << 62)) - 1
        if i >= 0 and self.top[i][0] <= offset < self.top[i][1]:
            return self.top[i][2]
        return -1

    def function_at(self, offset: int) -> int:
        """Innermost function owner whose body contains offset, or -1."""
        best = -1
        for s, e, idx in self.funcs:
            if s > offset:
                break
            if self.owners[idx].body_start <= offset < e:
                best = idx
        return best


def closing_bracket(text: str, i: int, open_: str, close: str) -> int:
    """Index of the bracket closing the one at text[i] (== open_), or len(text) when unbalanced."""
    depth = 0
    for j in range(i, len(text)):
        c = text[j]
        if c == open_:
            depth += 1
        elif c == close:
            depth -= 1
            if depth == 0:
                return j
    return len(text)


def _strip_balanced(s: str, open_: str, close: str, start: int) -> int:
    """Index just past the bracket group that opens at s[start] (== open_), or len(s)."""
    return min(closing_bracket(s, start, open_, close) + 1, len(s))


def _strip_template_clause(head: str) -> tuple[str, bool]:
    """Remove leading `template <...>` clauses (angles counted outside parens)."""
    templ = False
    while True:
        m = _TEMPLATE_HEAD.match(head)
        if not m:
            return head, templ
        templ = True
        i = m.end() - 1
        depth = 0
        paren = 0
        j = i
        while j < len(head):
            c = head[j]
            if c == "(":
                paren += 1
            elif c == ")":
                paren -= 1
            elif paren == 0 and c == "<":
                depth += 1
            elif paren == 0 and c == ">":
                depth -= 1
                if depth == 0:
                    break
            j += 1
        head = head[j + 1 :]


def _remove_attr_calls(head: str) -> str:
    while True:
        m = _ATTR_CALL.search(head)
        if not m:
            return head
        end = _strip_balanced(head, "(", ")", m.end() - 1)
        head = head[: m.start()] + " " + head[end:]


_BRACKETS_EQ = re.compile(r"[()\[\]]|(?<![=!<>])=(?!=)")


def _top_level_char(s: str, chars: str = "=") -> int:
    """First index of a top-level (outside () and []) assignment '=', or -1."""
    depth = 0
    for m in _BRACKETS_EQ.finditer(s):
        c = m.group()
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif depth == 0:
            return m.start()
    return -1




_TRAILING_QUALIFIED_NAME = re.compile(r"((?:[A-Za-z_]\w*(?:<[^<>(){};]*>)?\s*::\s*)*~?[A-Za-z_]\w*)$")


def _function_name(head: str) -> str | None:
    """Name of the function whose definition has this head (template clause already stripped)."""
    h = _remove_attr_calls(head)
    if "operator" in h:
        m = re.search(r"((?:[A-Za-z_]\w*\s*::\s*)*operator\s*(?:\(\s*\)|\[\s*\]|[^\s(]+))\s*\(", h)
        if m:
            return re.sub(r"\s+", "", m.group(1))
    depth = 0
    for pm in re.finditer(r"[()]", h):
        i, c = pm.start(), pm.group()
        if c == "(":
            if depth == 0:
                tail = h[max(0, i - 400) : i].rstrip()
                if tail.endswith(">"):  # explicit template arguments: f<T>(...)
                    d = 0
                    for j in range(len(tail) - 1, -1, -1):
                        if tail[j] == ">":
                            d += 1
                        elif tail[j] == "<":
                            d -= 1
                            if d == 0:
                                tail = tail[:j].rstrip()
                                break
                m = _TRAILING_QUALIFIED_NAME.search(tail[-300:])
                if not m:
                    return None
                name = re.sub(r"\s+", "", m.group(1))
                name = re.sub(r"<[^<>]*>", "", name)
                last = name.rsplit("::", 1)[-1]
                if last in _KEYWORDS_NOT_NAMES:
                    return None
                return name
            depth += 1
        elif c == ")":
            depth -= 1
    return None


def _class_name(rest: str) -> str:
    rest = _remove_attr_calls(rest)
    rest = re.sub(r"\[\[.*?\]\]", " ", rest)
    m = re.match(r"\s*(?:(?:[A-Z_][A-Z0-9_]*_API|__device_builtin__|__cudart_builtin__|final)\s+)*([A-Za-z_]\w*(?:\s*::\s*[A-Za-z_]\w*)*)", rest)
    if not m:
        return ""
    name = re.sub(r"\s+", "", m.group(1))
    return "" if name == "final" else name


def _paren_balance(s: str) -> int:
    return s.count("(") - s.count(")")


def structure(sc: Scan) -> Structure:
    """Brace structure of the file: owners (functions, classes, aliases) and kernels."""
    walk = _BraceWalk(sc)
    for m in re.finditer(r"[{};]", sc.body):
        pos = m.start()
        walk.follow_conditionals(pos)
        c = m.group()
        if c == ";":
            walk.semicolon(pos)
        elif c == "{":
            walk.open_brace(pos)
        else:
            walk.close_brace(pos)
    return walk.finish()


_CONDITIONALS = ("if", "ifdef", "ifndef", "elif", "else", "endif", "elifdef", "elifndef")


class _BraceWalk:
    """The state of structure()'s walk over a file's braces and semicolons: the scope stack,
    the conditional directives passed, and where the current declaration's head starts."""

    def __init__(self, sc: Scan):
        self.sc = sc
        self.body = sc.body
        self.st = Structure()
        self.owners = self.st.owners
        self.ev_iter = iter([(d.start, d.name) for d in sc.directives if d.name in _CONDITIONALS])
        self.next_cond = next(self.ev_iter, None)
        # Scope stack: (kind, owner index; -1 for none, -2 for a brace nested in a running head,
        # -3 - i for a namespace whose name is ns_names[i])
        self.stack: list[tuple[str, int]] = []
        self.ns_names: list[str] = []
        self.ns_starts: list[int] = []
        self.cond_stack: list[list] = []  # [stack at #if, stack after the first branch or None]
        self.head_start = 0

    def enclosing_class(self) -> int:
        """The owner index of the innermost enclosing class, or -1."""
        for k, idx in reversed(self.stack):
            if k == CLASS:
                return idx
        return -1

    def namespace(self) -> str:
        """The enclosing named namespaces as written ("a::b")."""
        ns_names = self.ns_names
        return "::".join(n for k, idx in self.stack if k == NS and idx <= -3 for n in (ns_names[-3 - idx],) if n)

    def in_declarations(self) -> bool:
        """Whether every open scope is a namespace or a class (a head here may declare an owner)."""
        return all(k == NS or k == CLASS for k, _ in self.stack)

    def follow_conditionals(self, pos: int) -> None:
        """Apply the conditional directives before pos: each branch of an #if starts from the
        stack at the #if; after #endif the stack is the first branch's."""
        stack, cond_stack = self.stack, self.cond_stack
        while self.next_cond is not None and self.next_cond[0] < pos:
            name = self.next_cond[1]
            if name in ("if", "ifdef", "ifndef"):
                cond_stack.append([list(stack), None])
            elif name != "endif" and cond_stack:
                top = cond_stack[-1]
                if top[1] is None:
                    top[1] = list(stack)
                stack[:] = top[0]
            elif name == "endif" and cond_stack:
                top = cond_stack.pop()
                if top[1] is not None:
                    # Owners opened only in a later branch are left unterminated: close them here.
                    keep = {idx for _, idx in top[1]}
                    for _, idx in stack:
                        if idx >= 0 and idx not in keep and self.owners[idx].end < 0:
                            self.owners[idx].end = pos
                    stack[:] = top[1]
            self.next_cond = next(self.ev_iter, None)

    def semicolon(self, pos: int) -> None:
        """A ';' at declaration scope ends a head; a `using` or `typedef` alias becomes an owner."""
        if not self.in_declarations():
            return
        stmt = self.body[self.head_start:pos]
        if _paren_balance(stmt) > 0:
            return  # inside parentheses of a declaration (e.g. a lambda default)
        if "using" in stmt or "typedef" in stmt:
            alias = _ALIAS.match(stmt)
            tdef = None if alias else _TYPEDEF.match(stmt)
            if alias or tdef:
                nm = alias.group(1) if alias else tdef.group(1)
                st_off = self.head_start + (len(stmt) - len(stmt.lstrip()))
                self.owners.append(
                    Owner(nm, "alias", bool(alias and alias.group(0).lstrip().startswith("template")),
                          st_off, st_off, pos + 1, parent=self.enclosing_class(), line=self.sc.line_of(st_off),
                          ns=self.namespace())
                )
        self.head_start = pos + 1

    def open_brace(self, pos: int) -> None:
        """A '{': push the scope it opens; at declaration scope its head may make an owner."""
        if not self.in_declarations():
            self.stack.append((BLOCK, -1))
            return
        head = self.body[self.head_start:pos]
        if _paren_balance(head) > 0:
            self.stack.append((BLOCK, -2))  # a brace inside a declaration's parentheses
            return
        scope = self._scope_of(head, pos)
        self.stack.append(scope)
        if scope[1] != -2:
            self.head_start = pos + 1

    def _scope_of(self, head: str, pos: int) -> tuple[str, int]:
        """(kind, index) of the scope a declaration head opens at pos, its owner appended."""
        stripped, templ = _strip_template_clause(head)
        stripped = stripped.strip()
        if "namespace" in stripped and re.search(r"\bnamespace\b", stripped) or _EXTERN_C.match(stripped):
            return NS, self._open_namespace(stripped, pos)
        if "enum" in stripped and re.search(r"\benum\b", stripped):
            return BLOCK, -1
        cm = _CLASS_KW.match(stripped) if ("struct" in stripped or "class" in stripped or "union" in stripped) else None
        if cm and "(" not in stripped[: cm.start(1)]:
            s0 = self.head_start + (len(head) - len(head.lstrip()))
            self.owners.append(Owner(_class_name(cm.group(2)).rsplit("::", 1)[-1], "class", templ, s0, pos, -1,
                                     parent=self.enclosing_class(), line=self.sc.line_of(s0), ns=self.namespace()))
            return CLASS, len(self.owners) - 1
        if "=" in stripped and "operator" not in stripped and _top_level_char(stripped) >= 0:
            return BLOCK, -1  # brace initialiser
        if "(" in stripped:
            close = stripped.rfind(")")
            after = stripped[close + 1 :] if close >= 0 else ""
            if _CTOR_INIT.search(after) and _ENDS_MEMBER_INIT.search(stripped) and not _ENDS_QUALIFIER.search(stripped):
                return BLOCK, -2  # `: a_(x), b_{y}` member brace-initialiser
            nm = _function_name(stripped)
            if nm:
                self._add_function(nm, stripped, head, pos, templ)
                return FUNC, len(self.owners) - 1
        return BLOCK, -1

    def _open_namespace(self, stripped: str, pos: int) -> int:
        """Record a namespace (or extern "C") opened at pos; its stack index (-3 - i)."""
        idx = -3 - len(self.ns_names)
        self.ns_starts.append(pos)
        nm = _NAMESPACE.search(stripped)
        if nm is None:  # extern "C", or a head not read here ("?" says so)
            self.ns_names.append("" if _EXTERN_C.match(stripped) else "?")
        else:
            self.ns_names.append(re.sub(r"\s+", "", nm.group(2)) if nm.group(2) and not nm.group(1) else "")
        return idx

    def _add_function(self, nm: str, stripped: str, head: str, pos: int, templ: bool) -> None:
        """Append the function owner named nm whose body opens at pos."""
        s0 = self.head_start + (len(head) - len(head.lstrip()))
        words = set(_DUNDER.findall(stripped))
        kernel = "__global__" in words
        dev_only = "__device__" in words and "__host__" not in words and not kernel
        qual = nm.rsplit("::", 1)[0] if "::" in nm else ""
        o = Owner(nm.rsplit("::", 1)[-1], "func", templ, s0, pos, -1, kernel, dev_only,
                  qual=qual, parent=self.enclosing_class(), line=self.sc.line_of(s0), ns=self.namespace())
        o.head_words = tuple(sorted(set(_MACRO_WORD.findall(stripped[: stripped.find("(")]))))
        self.owners.append(o)

    def close_brace(self, pos: int) -> None:
        """A '}': pop its scope, ending its owner or recording its named namespace."""
        if not self.stack:
            self.head_start = pos + 1
            return
        _kind, idx = self.stack.pop()
        if idx >= 0 and self.owners[idx].end < 0:
            self.owners[idx].end = pos + 1
        elif idx <= -3 and self.ns_names[-3 - idx]:
            self.st.namespaces.append((self.ns_starts[-3 - idx], pos + 1))
        if idx != -2:
            self.head_start = pos + 1

    def finish(self) -> Structure:
        """End unterminated owners at the file's end; list the outermost owners and the functions."""
        st, owners = self.st, self.owners
        for o in owners:
            if o.end < 0:  # unterminated (truncated file or unmatched braces)
                o.end = len(self.body)
        top_candidates = sorted((o.start, o.end, i) for i, o in enumerate(owners) if o.parent < 0)
        top: list[tuple[int, int, int]] = []
        last_end = -1
        for s0, e, i in top_candidates:
            if s0 >= last_end:
                top.append((s0, e, i))
                last_end = e
        st.top = top
        st.funcs = sorted((o.start, o.end, i) for i, o in enumerate(owners) if o.kind == "func")
        return st


_ALIAS = re.compile(r"\s*(?:template\s*<.*?>\s*)?using\s+([A-Za-z_]\w*)\s*=", re.S)
_TYPEDEF = re.compile(r"\s*typedef\b.*?\b([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*$", re.S)
_EXTERN_C = re.compile(r'extern\s*"')
# the last namespace head of a brace's head: (inline) and the name, absent for an unnamed one
_NAMESPACE = re.compile(r"\b(inline\s+)?namespace\b\s*(?:\[\[.*?\]\]\s*)?([A-Za-z_]\w*(?:\s*::\s*[A-Za-z_]\w*)*)?\s*$")
_CTOR_INIT = re.compile(r"(?<!:):(?!:)")
_ENDS_MEMBER_INIT = re.compile(r"[\w>]\s*$")
_ENDS_QUALIFIER = re.compile(r"\b(?:const|noexcept|override|final|mutable|volatile)\s*$|->\s*[\w:<>]+\s*$")
_DUNDER = re.compile(r"\b__\w+__\b")
_MACRO_WORD = re.compile(r"\b[A-Z_][A-Z0-9_]{2,}\b")


# --- tree-sitter (lazy) -----------------------------------------------------------------------


@lru_cache(maxsize=2)
def _language(name: str):
    # lazy: the grammars are loaded when C++/CUDA is parsed (a cache hit parses none)
    import tree_sitter_cpp
    import tree_sitter_cuda

    mod = tree_sitter_cuda if name == "cuda" else tree_sitter_cpp
    return ts.Language(mod.language())


def parser(lang: str = "cuda"):
    """A tree-sitter parser for CUDA (default; fewer ERROR nodes on .cu/.cuh) or C++."""
    return ts.Parser(_language(lang))


def parse(data: bytes | str, lang: str = "cuda"):
    if isinstance(data, str):
        data = data.encode("latin-1")
    return parser(lang).parse(data)


def enclosing_function_name(tree, byte_offset: int, source: bytes) -> str | None:
    """Qualified name of the function definition enclosing a byte offset, via tree-sitter."""
    node = tree.root_node.descendant_for_byte_range(byte_offset, byte_offset)
    while node is not None:
        if node.type == "function_definition":
            decl = node.child_by_field_name("declarator")
            while decl is not None and decl.type not in ("function_declarator",):
                nxt = decl.child_by_field_name("declarator")
                if nxt is None:
                    break
                decl = nxt
            if decl is not None and decl.type == "function_declarator":
                name = decl.child_by_field_name("declarator")
                if name is not None:
                    return source[name.start_byte : name.end_byte].decode("latin-1")
        node = node.parent
    return None


def kernel_extents_ts(data: bytes) -> list[tuple[str, int, int]]:
    """(name, body start byte, body end byte) of `__global__` function definitions, by tree-sitter.

    Used to cross-check the lexical structure; residual grammar errors (`__launch_bounds__`,
    braces split across #if branches) can hide kernels from it.
    """
    tree = parse(data)
    out = []
    stack = [tree.root_node]
    while stack:
        n = stack.pop()
        if n.type == "function_definition":
            head = data[n.start_byte : (n.child_by_field_name("body") or n).start_byte]
            if b"__global__" in head:
                body = n.child_by_field_name("body")
                name = enclosing_function_name(tree, body.start_byte, data) if body is not None else None
                if body is not None and name:
                    out.append((name, body.start_byte, body.end_byte))
            continue
        stack.extend(n.children)
    return sorted(out, key=lambda t: t[1])
