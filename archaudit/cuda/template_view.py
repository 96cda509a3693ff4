"""A jinja template read as the CUDA source it renders to, as far as the template alone says.

A JIT generator renders a template (flashinfer's data/csrc/*.jinja) into a .cu file at build
time with values the scan does not know. The view keeps every line where it is, so evidence
points at the template's own lines:

- `{{ expr }}` becomes the preprocessor's unknown value (`__archaudit_unknown_value__`): an
  identifier in code, undecided in an `#if`, and so is a macro defined from it;
- `{# comment #}` and the `{% for %}`, `{% endfor %}` and `{% set %}` tags are blanked: a loop's
  body is read once (each iteration is the same code with other values);
- `{% if %}`, `{% elif %}`, `{% else %}`, `{% endif %}` alone on their line become `#if` /
  `#elif` of the unknown value, `#else`, `#endif`: which arm is rendered is not known, so what
  an arm holds is undecided, never certain.

What the view cannot stand for is returned as notes (line, message), and the TU that reads the
file cannot be predicted to build (tu.CudaProject.analyse_tu): a placeholder where a declaration
or statement begins (it may insert any code), one that names what is instantiated or called
(`{{ kernel }}<...>`, `{{ f }}(...)`: which code is compiled), one inside a string literal (an asm
template) or an `#include`, any other tag, and a conditional tag that shares its line with other
text.
"""
from __future__ import annotations

import re

from ..parsing import cpp
from .preproc import UNKNOWN_VALUE

_TAG = re.compile(r"\{\{.*?\}\}|\{%-?\s*(\w*).*?%\}|\{#.*?#\}", re.S)
_BLANKED = frozenset(("for", "endfor", "set"))
_CONDITIONAL = {"if": "#if " + UNKNOWN_VALUE, "elif": "#elif " + UNKNOWN_VALUE, "else": "#else", "endif": "#endif"}
_INCLUDES = frozenset(("include", "include_next", "import"))


def render_view(data: bytes) -> tuple[bytes, list[tuple[int, str]]]:
    """The template's text with its jinja syntax neutralised (see the module doc), and notes."""
    text = data.decode("latin-1")
    if "{" not in text:
        return data, []
    out: list[str] = []
    notes: list[tuple[int, str]] = []
    holes: list[tuple[int, int, str]] = []  # (offset in the view, line, placeholder text)
    size = pos = 0
    for m in _TAG.finditer(text):
        s, e = m.span()
        out.append(text[pos:s])
        size += s - pos
        tok = m.group()
        line = text.count("\n", 0, s) + 1
        keep = "\n" * tok.count("\n")
        if tok.startswith("{{"):
            holes.append((size, line, " ".join(tok.split())))
            rep = UNKNOWN_VALUE + keep
        elif tok.startswith("{#"):
            rep = keep
        else:
            name = m.group(1)
            bol = text.rfind("\n", 0, s) + 1
            eol = text.find("\n", e)
            alone = not text[bol:s].strip() and not text[e:eol if eol >= 0 else len(text)].strip() and not keep
            if name in _CONDITIONAL and alone:
                rep = _CONDITIONAL[name]
            elif name in _BLANKED:
                rep = keep
            else:
                what = ("shares its line with other text: what it selects is not known" if name in _CONDITIONAL
                        else "is not modelled: the text it renders is not known")
                notes.append((line, f"jinja tag {{% {name} %}} {what}"))
                rep = keep
        out.append(rep)
        size += len(rep)
        pos = e
    out.append(text[pos:])
    view = "".join(out)
    if holes:
        notes.extend(_hole_notes(view, holes))
    return view.encode("latin-1"), sorted(notes)


def _hole_notes(view: str, holes: list[tuple[int, int, str]]) -> list[tuple[int, str]]:
    """Placeholders whose text decides more than a value: in an #include, in a string literal,
    or where a declaration or statement begins."""
    sc = cpp.scan(view)
    notes = []
    d = 0
    dirs = sc.directives
    for off, line, tok in holes:
        while d < len(dirs) and dirs[d].end < off:
            d += 1
        directive = dirs[d] if d < len(dirs) and dirs[d].start <= off <= dirs[d].end else None
        if directive is not None:
            if directive.name in _INCLUDES:
                notes.append((line, f"the #include names a file given at render time ({tok})"))
            continue
        if sc.code[off] != view[off]:  # blanked: in a comment, or inside a literal
            if sc.string_at(off) is not None:
                notes.append((line, f"{tok} is inside a string literal: its text is given at render time"))
            continue
        before = sc.body[:off].rstrip()
        after = sc.body[off + len(UNKNOWN_VALUE):off + len(UNKNOWN_VALUE) + 80].lstrip()
        if not before or before[-1] in ";{}":
            notes.append((line, f"{tok} stands where a declaration or statement begins: the code it inserts "
                                "is given at render time"))
        elif after.startswith(("<", "(", "::")):
            notes.append((line, f"{tok} names what is instantiated or called: which code is compiled is given "
                                "at render time"))
    return notes
