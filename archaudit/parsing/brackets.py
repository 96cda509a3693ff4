"""Bracket-aware splitting of source text that is shared by the Python and the C++ readers."""
from __future__ import annotations


def split_top_level_commas(text: str) -> list[str]:
    """`text` cut at each comma outside (), [] and {}: the arguments of a call or the parameters
    of a def, each unstripped (one part for text without such a comma). Quotes are not tracked,
    so a comma inside a string literal at the top level also cuts."""
    parts, depth, cur = [], 0, []
    for c in text:
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    parts.append("".join(cur))
    return parts
