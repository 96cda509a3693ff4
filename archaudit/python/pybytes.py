"""What Python source says at byte level, without parsing it: identifiers, import statements,
attributes and their receivers. The gate rounds and the call graph's caller search decide from
these which modules and functions can refer to a name, before anything is parsed."""
from __future__ import annotations

import re
from bisect import bisect_left

from ..parsing.words import WORD, WORD_BYTE

IDENT = re.compile(rb"[A-Za-z_][A-Za-z0-9_]*")
# a token as far as counting them goes: a run of word bytes, or any other byte but a blank
_TOKEN = re.compile(rb"\w+|[^\w\s]")


def more_tokens_than(data: bytes, limit: int) -> bool:
    """Does data hold more than `limit` tokens (word runs and other non-blank bytes, an upper
    bound of Python's count)? Stops counting at limit + 1, and a file of no more bytes than
    `limit` is not counted at all."""
    if len(data) <= limit:
        return False
    for n, _ in enumerate(_TOKEN.finditer(data), 1):
        if n > limit:
            return True
    return False


# a line that starts a function definition (inside a string too: an upper bound of the count)
_DEF_LINE = re.compile(rb"^[ \t]*(?:async[ \t]+)?def[ \t]", re.M)
_SHORTEST_DEF = len(b"def f():0\n")


def more_defs_than(data: bytes, limit: int) -> bool:
    """Does data hold more than `limit` lines that start a `def`? Stops counting at limit + 1;
    a file too short to hold that many is not counted at all."""
    if len(data) <= limit * _SHORTEST_DEF:
        return False
    for n, _ in enumerate(_DEF_LINE.finditer(data), 1):
        if n > limit:
            return True
    return False


# digits, as a lookup table (WORD_BYTE: the bytes that continue an identifier)
DIGIT_BYTE = bytes(1 if 48 <= b <= 57 else 0 for b in range(256))
SPACE = b" \t"


def word_pattern(word: bytes) -> re.Pattern:
    """The pattern rb"\\bWORD\\b", written to start with WORD's literal when WORD starts with a
    word byte (`\\b` there is "no word byte before"): `re` then finds the literal by a fast
    search instead of trying the pattern at every offset."""
    w = re.escape(word)
    if word and WORD_BYTE[word[0]]:
        return re.compile(w + rb"(?<!\w" + w + rb")\b")
    return re.compile(rb"\b" + w + rb"\b")


# past this many names, one pass over the identifiers beats a substring search per name (a
# module defining 60,000 functions searched for each of them is quadratic)
MANY_NAMES = 64


def name_occurrences(data: bytes, names) -> list[tuple[int, int]]:
    """Sorted (offset, length) of every occurrence of each name's bytes in data (substring
    search: `ident_at` decides which are identifiers). With more than MANY_NAMES names, only the
    occurrences `ident_at` can accept in a window that does not cut an identifier: the word runs,
    without their leading digits, that are one of the names."""
    names = list(names)
    if len(names) > MANY_NAMES:
        want = set(names)
        out = []
        for m in WORD.finditer(data):
            s, e = m.span()
            while s < e and DIGIT_BYTE[data[s]]:
                s += 1
            if s < e and data[s:e] in want:
                out.append((s, e - s))
        return out
    out = []
    for nm in names:
        n = len(nm)
        p = data.find(nm)
        while p >= 0:
            out.append((p, n))
            p = data.find(nm, p + 1)
    out.sort()
    return out


def ident_at(data: bytes, p: int, n: int, start: int, end: int) -> bool:
    """Is data[p:p+n] (an ASCII identifier) one of `IDENT.findall(data, start, end)`? findall
    takes maximal runs of word bytes, without their leading digits, cut at the window's ends."""
    q = p + n
    if p < start or q > end or (q < end and WORD_BYTE[data[q]]):
        return False
    j = p
    while j > start and WORD_BYTE[data[j - 1]]:
        j -= 1
        if not DIGIT_BYTE[data[j]]:
            return False  # inside a longer identifier
    return True


def _import_segment(data: bytes, i: int) -> tuple[int, int]:
    """The text after an `import` keyword ending at i, to the end of its logical line: to the
    matching `)`, or across `\\`-continued lines."""
    j = i
    while j < len(data) and data[j] in SPACE:
        j += 1
    if data[j:j + 1] == b"(":
        e, depth = j, 0
        while e < len(data):
            depth += (data[e] == 40) - (data[e] == 41)  # ( )
            if depth == 0:
                break
            e += 1
        return i, min(e + 1, len(data))
    e = i
    while True:
        e = data.find(b"\n", e)
        if e < 0 or data[e - 1:e] != b"\\" and data[e - 2:e] != b"\\\r":
            break
        e += 1
    return i, len(data) if e < 0 else e


def module_imports(data: bytes) -> tuple[frozenset, dict] | None:
    """Every identifier in the text after each `import` keyword up to the end of its logical line
    (a superset of the names the module imports, comments and strings included), and the aliases
    each is imported as (`from m import name as alias`); None when the module may star-import
    (then any bare name may have been imported)."""
    out: set[bytes] = set()
    aliases: dict[bytes, set[bytes]] = {}
    for _s, k in _import_keywords(data):
        i, e = _import_segment(data, k)
        seg = data[i:e]
        if b"*" in seg:
            return None
        out.update(IDENT.findall(seg))
        for name, alias in _ALIAS.findall(seg):
            aliases.setdefault(name, set()).add(alias)
    return frozenset(out), aliases


def star_imports(data: bytes) -> list[tuple[int, bytes]] | None:
    """(level, module) of every `from <module> import *` in data, comments and strings included
    (a superset); None when some `import` followed by `*` is not one of that form at the start
    of a line (`if X: from m import *`, a `\\`-continued prefix): then any name may be bound."""
    out: list[tuple[int, bytes]] = []
    for k0, k in _import_keywords(data):
        i, e = _import_segment(data, k)
        seg = data[i:e]
        if b"*" not in seg:
            continue
        ls = data.rfind(b"\n", 0, k0) + 1
        pre = _IMPORT_PREFIX.fullmatch(data, ls, k0)
        if pre is None or pre.group(1) is None or _COMMENT.sub(b"", seg).strip() != b"*":
            return None
        frm = pre.group(1)
        rest = frm.lstrip(b".")
        out.append((len(frm) - len(rest), rest))
    return out


_ALL_WORD = word_pattern(b"__all__")
_ALL_LIST = re.compile(rb"__all__[ \t]*=[ \t]*[\[(]")
_ALL_ITEMS = re.compile(rb"""(?:\s*(?:"[A-Za-z0-9_]*"|'[A-Za-z0-9_]*')\s*,)*(?:\s*(?:"[A-Za-z0-9_]*"|'[A-Za-z0-9_]*'))?\s*,?\s*""")
_LINE_END = re.compile(rb"[ \t]*(?:#[^\n]*)?(?:\n|\Z)")
_STRING_ITEM = re.compile(rb"""["']([A-Za-z0-9_]*)["']""")


def literal_all(data: bytes) -> frozenset | None:
    """The names of a module's `__all__` when its bytes spell `__all__` once, at the start of a
    line, as `__all__ = [...]` (or a tuple) of plain string literals (comments allowed); None
    otherwise (no `__all__`, a computed or extended one: unknown from the bytes)."""
    hits = [m.start() for m in _ALL_WORD.finditer(data)]
    if len(hits) != 1 or (hits[0] and data[hits[0] - 1:hits[0]] != b"\n"):
        return None
    m = _ALL_LIST.match(data, hits[0])
    if m is None:
        return None
    close = b"]" if data[m.end() - 1:m.end()] == b"[" else b")"
    end = data.find(close, m.end())
    if end < 0:
        return None
    body = _COMMENT.sub(b"", data[m.end():end])
    if not _ALL_ITEMS.fullmatch(body) or not _LINE_END.match(data, end + 1):
        return None
    return frozenset(x.decode() for x in _STRING_ITEM.findall(body))


def _import_keywords(data: bytes):
    """(start, end) of each `import` word in data (re's `\\bimport\\b`, without its slow scan)."""
    p = data.find(b"import")
    while p >= 0:
        q = p + 6
        if (p == 0 or not WORD_BYTE[data[p - 1]]) and (q == len(data) or not WORD_BYTE[data[q]]):
            yield p, q
        p = data.find(b"import", q)


_ALIAS = re.compile(rb"([A-Za-z_][A-Za-z0-9_]*)\s+as\s+([A-Za-z_][A-Za-z0-9_]*)")
_QUALIFIERS = b".\"'"  # x.name, "name"
_GAP = b" \t\r\n\\"


def qualified(data: bytes, p: int) -> bool:
    """Is the identifier at p an attribute (`x.name`, `x .\\n name`) or the start of a string?"""
    j = p
    while j > 0 and data[j - 1] in _GAP:
        j -= 1
    return j > 0 and data[j - 1] in _QUALIFIERS


# what precedes an `import` keyword that starts a statement: indentation, or `from <module>`
_IMPORT_PREFIX = re.compile(rb"[ \t]*(?:from[ \t]+(\.*[A-Za-z0-9_.]*)[ \t]+)?")
_IMPORT_ITEM = re.compile(rb"([A-Za-z_][A-Za-z0-9_.]*)(?:[ \t]+as[ \t]+([A-Za-z_][A-Za-z0-9_]*))?")
_COMMENT = re.compile(rb"#[^\n]*")


def receiver_roots(data: bytes) -> dict[bytes, frozenset]:
    """Names bound only by absolute imports (`import a.b`, `import a.b as r`, `from a.b import
    r`) and otherwise only read as the receiver of an attribute (`r.x`) or named as one
    (`y.r`), each with the top-level packages of the modules those imports read. Such a name is
    that package's module or object everywhere in the file, so when the package is not in the
    scan, `r.x.name` cannot refer to a scanned definition of `name`. Conservative: an import
    that is not understood (a relative or star import, an `import` inside a string, one after
    `;`) or any other occurrence outside comments and docstrings (a parameter, an assignment,
    a short string) excludes the name."""
    ib = import_bindings(data)
    if ib is None:
        return {}
    bound, regions = ib
    prose: list = []
    return {r: tops for r, tops in bound.items() if tops is not None and only_receiver(data, r, regions, prose)}


def import_bindings(data: bytes) -> tuple[dict[bytes, frozenset | None], list[tuple[int, int]]] | None:
    """The names import statements bind, each with the top-level packages of the modules they
    read (None: some import of it is relative or not understood), and the spans of the import
    statements understood; None when the module may star-import."""
    bound: dict[bytes, set | None] = {}
    regions: list[tuple[int, int]] = []
    for k0, k in _import_keywords(data):
        i, e = _import_segment(data, k)
        seg = data[i:e]
        if b"*" in seg:
            return None
        ls = data.rfind(b"\n", 0, k0) + 1
        pre = _IMPORT_PREFIX.fullmatch(data, ls, k0)
        items = _import_items(seg)
        if pre is None or items is None or pre.group(1) is not None and pre.group(1)[:1] in (b".", b""):
            for r in IDENT.findall(seg):  # not understood, or relative: in the scan
                bound[r] = None
            continue
        regions.append((ls, e))
        frm = pre.group(1)
        for dotted, alias in items:
            if frm is None:
                top = dotted.split(b".", 1)[0]
                name = alias or top
            elif b"." in dotted:
                continue  # `from a import b.c` is not Python
            else:
                name, top = alias or dotted, frm.split(b".", 1)[0]
            if bound.get(name, ()) is not None:
                bound.setdefault(name, set()).add(top)
    return {r: None if t is None else frozenset(t) for r, t in bound.items()}, regions


def only_receiver(data: bytes, r: bytes, regions: list[tuple[int, int]], prose: list) -> bool:
    """Is every occurrence of the identifier r outside the import statements `regions` (see
    import_bindings) the receiver of an attribute (`r.x`), an attribute itself (`y.r`), or in a
    comment or docstring? prose: [] or the file's prose_spans (filled on first need)."""
    for p, n in name_occurrences(data, [r]):
        if not ident_at(data, p, n, 0, len(data)) or in_spans(regions, p):
            continue
        q = p + n
        while q < len(data) and data[q] in SPACE:
            q += 1
        j = p
        while j > 0 and data[j - 1] in SPACE:
            j -= 1
        if data[q:q + 1] == b"." or j > 0 and data[j - 1] == 46:
            continue
        if not prose:
            prose.append(prose_spans(data))
        if not in_spans(prose[0], p):
            return False  # bound or read otherwise
    return True


# comments and string literals, in one left-to-right pass (a string's quotes and a comment's
# "#" are found only outside the others)
_STRING_OR_COMMENT = re.compile(
    rb"#[^\r\n]*"
    rb'|"""(?:[^"\\]|\\.|"(?!""))*"""'
    rb"|'''(?:[^'\\]|\\.|'(?!''))*'''"
    rb'|"(?:[^"\\\r\n]|\\.)*"'
    rb"|'(?:[^'\\\r\n]|\\.)*'", re.S)


def prose_spans(data: bytes) -> list[tuple[int, int]]:
    """The comments and triple-quoted strings (docstrings) of a file: a name there
    binds nothing (unlike a short string: `globals()["name"] = ...`)."""
    return [m.span() for m in _STRING_OR_COMMENT.finditer(data) if data[m.start()] == 35 or m.end() - m.start() >= 6
            and data[m.start():m.start() + 3] in (b'"""', b"'''")]


def _import_items(seg: bytes) -> list[tuple[bytes, bytes | None]] | None:
    """(dotted name, alias) of each item of an import statement's text after `import`; None when
    it is not a plain list of them."""
    body = seg.strip()
    if body.startswith(b"(") and body.endswith(b")"):
        body = _COMMENT.sub(b"", body[1:-1])
    else:
        body = body.split(b"#", 1)[0].replace(b"\\\r\n", b" ").replace(b"\\\n", b" ")
    out = []
    for item in body.split(b","):
        item = item.strip()
        if not item:
            continue
        m = _IMPORT_ITEM.fullmatch(item)
        if m is None:
            return None
        out.append((m.group(1), m.group(2)))
    return out or None


def in_spans(regions: list[tuple[int, int]], p: int) -> bool:
    i = bisect_left(regions, (p + 1, 0)) - 1
    return i >= 0 and regions[i][0] <= p < regions[i][1]


def receiver_chain(data: bytes, p: int) -> tuple[bytes, ...] | None:
    """The identifiers before the attribute at p, root first, when they are a plain dotted chain
    on its line (`a.b.name` -> (a, b)); None otherwise (`f().name`, `x[0].name`, a chain that
    crosses a line)."""
    chain = []
    j = p
    while True:
        k = j
        while k > 0 and data[k - 1] in SPACE:
            k -= 1
        if k == 0 or data[k - 1] != 46:  # "."
            break
        k -= 1
        while k > 0 and data[k - 1] in SPACE:
            k -= 1
        e = k
        while k > 0 and WORD_BYTE[data[k - 1]]:
            k -= 1
        if k == e or DIGIT_BYTE[data[k]]:
            return None
        chain.append(data[k:e])
        j = k
    return tuple(reversed(chain)) if chain else None


class ExternalRoots:
    """Which names of a module are bound only to packages outside the scan (receiver_roots),
    asked name by name: a module's imports are read on first need and the answers kept."""

    def __init__(self, modules, runtimes=frozenset()):
        # the scan's top-level packages; a runtime's (Index.hidden) only for its own modules
        self.runtimes = {r.encode() for r in runtimes}
        self.tops = {m.split(".", 1)[0].encode() for m in modules} - self.runtimes
        self._state: dict[str, tuple] = {}

    def external(self, m: str, src: bytes, r: bytes) -> bool:
        st = self._state.get(m)
        if st is None:
            st = self._state[m] = (import_bindings(src), {}, [])
        ib, memo, prose = st
        if ib is None:  # a star import may bind any name
            return False
        v = memo.get(r)
        if v is None:
            bound, regions = ib
            tops = bound.get(r)
            own = m.split(".", 1)[0].encode()
            inside = self.tops | ({own} if own in self.runtimes else set())
            v = memo[r] = bool(tops) and not tops & inside and only_receiver(src, r, regions, prose)
        return v

    def outside_attribute(self, m: str, src: bytes, p: int) -> bool:
        """Is the identifier at p an attribute of a chain (`r.x.name`) whose root r is bound only
        to a package outside the scan? Then it cannot refer to a definition in the scan."""
        chain = receiver_chain(src, p)
        return chain is not None and self.external(m, src, chain[0])


_GLOBAL = word_pattern(b"global")


def may_hold_global_statement(data: bytes, start: int = 0, end: int | None = None) -> bool:
    """Whether data[start:end] may hold a `global` statement: the word `global` first on its
    line (after blanks, or on a line a backslash continues), or after `;` or `:` (a statement
    after another, or after a compound statement's header). Every real one answers True; a
    string or a comment shaped like one does too (the caller then reads the body in vain)."""
    for m in _GLOBAL.finditer(data, start, len(data) if end is None else end):
        i = m.start() - 1
        while i >= 0:
            c = data[i]
            if c in b" \t\f":
                i -= 1
            elif c == 0x0A and i >= 1 and data[i - 1] == 0x5C:  # backslash-newline: same line
                i -= 2
            elif c == 0x0A and i >= 2 and data[i - 1] == 0x0D and data[i - 2] == 0x5C:
                i -= 3
            else:
                break
        if i < 0 or data[i] in b"\n\r;:":
            return True
    return False


def split_trailer(data: bytes) -> int:
    """Offset where the trailing run of blank and comment-only lines starts (the whole file:
    0). Only a hint for rebuilding old bytes; the cutoff check verifies everything."""
    pos = len(data)
    while pos > 0:
        nl = data.rfind(b"\n", 0, pos)
        line = data[nl + 1 : pos].strip()
        if line and not line.startswith(b"#"):
            return pos
        if nl < 0:
            return 0
        pos = nl
    return 0
