"""Text from scanned files made safe to show on a terminal or in a line-based report.

File names, expressions, module names, package metadata and the messages built from them come
from packages nobody here wrote. Printed raw, a newline in a directory name forges a report line
(`d\nFORGED:1:1: sm_120: hardware-bound: forged`), an escape sequence (ESC, CSI, OSC) recolours
or retitles the terminal or plants a hyperlink, and a bidirectional override reorders what is
shown. `shown` writes every character that is not printable (control, format, separator and
unassigned code points) as a Python-style escape: `\\n`, `\\x1b`, `\\u202e`. `cell` does the same
for rich output, as a `Text` (never parsed for markup or emoji, so `x[/red]y.cu` is shown as
written). JSON and SARIF escape by their own syntax and do not use this.
"""
from __future__ import annotations

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(c: str) -> str:
    if c in _NAMED:
        return _NAMED[c]
    n = ord(c)
    if n < 0x100:
        return f"\\x{n:02x}"
    return f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def shown(value) -> str:
    """str(value) with every non-printable character written as an escape (see the module)."""
    s = str(value)
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() else _escape(c) for c in s)


def cell(value, style: str = ""):
    """A rich Text of shown(value), in `style`: no markup, no emoji codes."""
    # lazy: a command's imports load only when it runs, so `archaudit --help` stays quick
    from rich.text import Text

    return Text(shown(value), style=style)
