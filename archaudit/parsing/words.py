"""The bytes of a word ([A-Za-z0-9_]: what \\w matches in a bytes pattern), as the one table every
byte-level reader uses: a lookup table, the pattern of a run of them, and the split of a file into
its words."""
from __future__ import annotations

import re

# 1 for a byte that continues an identifier (IDENT's second class), else 0
WORD_BYTE = bytes(1 if chr(b).isascii() and (chr(b).isalnum() or chr(b) == "_") else 0 for b in range(256))
# a maximal run of word bytes (rb"\w+")
WORD = re.compile(rb"[A-Za-z0-9_]+")
# every byte that is not a word byte as a space (bytes.translate)
_WORDS_ONLY = bytes(b if WORD_BYTE[b] else 32 for b in range(256))


def words_of(data: bytes) -> set[bytes]:
    """set(WORD.findall(data)): the maximal runs of word bytes, split at C speed (translate and
    split instead of the regular expression)."""
    return set(data.translate(_WORDS_ONLY).split())
