"""The maintainers' own words at an edit: a comment that says the target is left out on purpose
(or does not work there) where a patch changes the code is shown as a warning with the patch.

Which comments: those on the lines of the statement an edit changes, up to the changed lines (for
an `if`, its test, not its body), and the block of comment lines right above that statement.
A sentence of them warns when it names the target (sm_120, SM12x, sm120f, "compute capability
12.0", (12, 0), a product such as "RTX 5090", a word of the target's architecture description
such as "consumer") and says that something is excluded, unsupported, disabled or does not work.
Nothing here changes a patch: the edit is still verified and offered; the reader is told.
"""
from __future__ import annotations

import ast
import difflib
import io
import re
import tokenize

from ..targets import Gpu

PY_SUFFIXES = (".py", ".pyi")

# a statement about not supporting something
_EXCLUDES = re.compile(
    r"\b(?:exclud\w*|unsupported|not\s+(?:yet\s+)?(?:be\s+)?(?:supported|available|enabled|allowed|work\w*|run\w*|"
    r"compile\w*|meant|intended|targeted)|disabl\w*|intentional\w*|deliberate\w*|on\s+purpose|"
    r"(?:do|does|did|will|would|should|must)(?:\s+not|n't)\s+(?:support|work|run|have|compile|build|use|enable)\w*|"
    r"lacks?|lacking|cannot|can't|never|broken|no\s+support)\b", re.I)


def target_mention(gpu: Gpu) -> re.Pattern:
    """Ways a comment names the target: its sm name and family/major spellings, its capability,
    its products, and the words of its architecture's description (`Blackwell (consumer /
    workstation)` -> consumer, workstation)."""
    major, minor = gpu.major, gpu.minor
    pats = [rf"\bsm_?{major}{minor}[af]?\b", rf"\bsm_?{major}x\b", rf"\bsm_?{major}(?:\.|_)?x\b",
            rf"\b(?:compute\s+capability|capability|cc|sm)\s*{major}\.(?:{minor}|x)\b",
            rf"\(\s*{major}\s*,\s*{minor}\s*\)"]
    pats += [r"\b" + re.escape(p) + r"\b" for p in gpu.products]
    described = re.search(r"\(([^)]*)\)", gpu.arch or "")
    if described:
        pats += [rf"\b{re.escape(w)}\b" for w in re.split(r"[\s/,]+", described.group(1))
                 if w.isalpha() and len(w) > 3]
    return re.compile("|".join(pats), re.I)


def excluding_comments(path: str, old: str, new: str, gpu: Gpu) -> list[str]:
    """Warnings, one per comment sentence near the edit of `path` (old -> new) that says the
    target is excluded or unsupported: 'the comment at PATH:LINE may exclude sm_120 on purpose:
    "..."'."""
    changed = _changed_lines(old, new)
    if not changed:
        return []
    lines = old.splitlines()
    python = path.endswith(PY_SUFFIXES)
    spans = _py_spans(old) if python else None
    if python and spans is None:
        return []
    c_comments = None if python else _c_comments(lines)
    wanted: set[int] = set()
    for first, last in changed:
        top = _py_statement_start(spans, first) if python else _c_statement_start(lines, first)
        wanted.update(range(top, last + 1))
        above = top - 1  # the comment block right above the statement
        while above >= 1 and (_py_comment_line(spans, lines, above, top) if python
                              else above in c_comments and _comment_only(lines[above - 1])):
            wanted.add(above)
            above -= 1
    comments = _py_comments(lines, wanted) if python else c_comments
    mention = target_mention(gpu)
    out, seen = [], set()
    for block in _blocks(sorted(n for n in wanted if n in comments)):
        for line, sentence in _sentences([(n, comments[n]) for n in block]):
            if mention.search(sentence) and _EXCLUDES.search(sentence) and sentence not in seen:
                seen.add(sentence)
                out.append(f'the comment at {path}:{line} may exclude {gpu.name} on purpose: "{sentence}"')
    return out


def _changed_lines(old: str, new: str) -> list[tuple[int, int]]:
    """1-based (first, last) line ranges of `old` that the edit replaces; an insertion counts as
    a change of the line before it. (The common head and tail are cut first: an edit touches a
    few lines of what may be a large file.)"""
    a, b = old.splitlines(), new.splitlines()
    head = 0
    while head < len(a) and head < len(b) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < len(a) - head and tail < len(b) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    out = []
    matcher = difflib.SequenceMatcher(None, a[head:len(a) - tail], b[head:len(b) - tail], autojunk=False)
    for tag, i1, i2, _j1, _j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        i1, i2 = i1 + head, i2 + head
        first = i1 + 1 if i2 > i1 else max(i1, 1)
        out.append((first, max(i2, first)))
    return out


def _py_comments(lines: list[str], wanted: set[int]) -> dict[int, str]:
    """Line -> the text of the comment on it (without '#'), for the `wanted` lines: each run of
    them is tokenized on its own (a run is a statement's first lines and the comment lines above
    it, so it starts outside any string; one that ends inside a statement stops the tokenizer
    there, after the comments before it)."""
    out = {}
    for run in _blocks(sorted(wanted)):
        chunk = "\n".join(lines[run[0] - 1:run[-1]]) + "\n"
        try:
            for tok in tokenize.generate_tokens(io.StringIO(chunk).readline):
                if tok.type == tokenize.COMMENT:
                    out[run[0] + tok.start[0] - 1] = tok.string.lstrip("#").strip()
        except (tokenize.TokenError, SyntaxError, IndentationError):
            pass
    return out


_SPANS: dict[str, list[tuple[int, int]] | None] = {}


def _py_spans(text: str) -> list[tuple[int, int]] | None:
    """(first, last) line of every statement, None when the file does not parse; kept for the last
    few texts (one file is patched for several gates, each candidate read against the same text)."""
    if text not in _SPANS:
        if len(_SPANS) > 8:
            _SPANS.clear()
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError):
            _SPANS[text] = None
        else:
            _SPANS[text] = [(n.lineno, n.end_lineno or n.lineno) for n in ast.walk(tree) if isinstance(n, ast.stmt)]
    return _SPANS[text]


def _py_statement_start(spans: list[tuple[int, int]], line: int) -> int:
    """The first line of the innermost statement holding `line`."""
    holding = [(b - a, a) for a, b in spans if a <= line <= b]
    return min(holding)[1] if holding else line


def _py_comment_line(spans: list[tuple[int, int]], lines: list[str], line: int, top: int) -> bool:
    """Whether `line`, above the statement starting at `top`, is a comment line: '#' first, and
    not inside a statement that ends before `top` (a string holding '# ...')."""
    return (lines[line - 1].lstrip().startswith("#")
            and not any(a <= line <= b for a, b in spans if b < top))


_C_LINE = re.compile(r"//(.*)$")


def _c_comments(lines: list[str]) -> dict[int, str]:
    """Line -> comment text for `//` comments and the lines of `/* ... */` blocks (string
    literals holding // are rare in the lines near a check; a line whose // sits in a string is
    read as a comment, which can only add a warning)."""
    out, in_block = {}, False
    for i, line in enumerate(lines, 1):
        s = line
        if in_block:
            end = s.find("*/")
            out[i] = s[:end if end >= 0 else len(s)].strip().lstrip("*").strip()
            if end < 0:
                continue
            in_block, s = False, s[end + 2:]
        start = s.find("/*")
        m = _C_LINE.search(s)
        if m and (start < 0 or m.start() < start):
            out[i] = (out.get(i, "") + " " + m.group(1).strip()).strip()
        elif start >= 0:
            end = s.find("*/", start + 2)
            out[i] = (out.get(i, "") + " " + s[start + 2:end if end >= 0 else len(s)].strip().lstrip("*")).strip()
            in_block = end < 0
    return out


def _c_statement_start(lines: list[str], line: int) -> int:
    """The first line of the C/C++ statement holding `line`: up while the line above neither ends
    a statement or block nor is a directive, a comment or blank."""
    while line > 1:
        above = lines[line - 2].strip()
        if (not above or above.endswith((";", "{", "}")) or above.startswith(("#", "//", "/*", "*"))
                or above.endswith(("*/", ":"))):
            break
        line -= 1
    return line


def _comment_only(line: str) -> bool:
    s = line.strip()
    return s.startswith(("//", "/*", "*")) or s.endswith("*/")


def _blocks(nums: list[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for n in nums:
        if out and out[-1][-1] == n - 1:
            out[-1].append(n)
        else:
            out.append([n])
    return out


def _sentences(block: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """The sentences of a block of comment lines, each with the line it starts on."""
    text, at = "", []
    for n, s in block:
        if not s:
            continue
        at.append((len(text), n))
        text += s + " "
    out = []
    for m in re.finditer(r"\S.*?(?:[.!?;](?=\s)|$)", text.strip() + " ", re.S):
        line = max((n for off, n in at if off <= m.start()), default=block[0][0])
        s = " ".join(m.group(0).split())
        if s:
            out.append((line, s))
    return out
