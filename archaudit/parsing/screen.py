"""Cheap byte checks that decide whether a file can be analysed as source text at all.

They run on every file read (a few memchr-speed passes), so a file that Python could never load,
or a C/C++ file that is binary data, is reported once with the reason instead of being parsed
into nonsense.
"""
from __future__ import annotations

import codecs
import re

_BOMS = (
    (b"\x00\x00\xfe\xff", "UTF-32"),
    (b"\xff\xfe\x00\x00", "UTF-32"),
    (b"\xfe\xff", "UTF-16"),
    (b"\xff\xfe", "UTF-16"),
)
# PEP 263: a coding declaration in one of the first two lines
_CODING = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)", re.M)


def python_text_problem(data: bytes) -> str | None:
    """Why Python could not load these bytes as source, or None if it could (or may: a declared
    legacy encoding is accepted, tree-sitter reads its ASCII structure fine)."""
    for bom, name in _BOMS:
        if data.startswith(bom):
            return f"{name} encoded (byte-order mark); Python reads only UTF-8 or a declared 8-bit encoding"
    nul = data.find(b"\x00")
    if nul >= 0:
        return f"binary data (NUL byte at offset {nul}); Python refuses source with NUL bytes"
    coding = declared_coding(data)
    if coding is not None:
        # Python loads the file in the declared encoding, and refuses an unknown one even for
        # bytes that are valid UTF-8
        try:
            info = codecs.lookup(coding)
        except LookupError:
            return f"declares the unknown encoding {coding!r}; Python refuses to load it"
        if not getattr(info, "_is_text_encoding", True):
            return f"declares {coding!r}, which is not a text encoding; Python refuses to load it"
        if info.name != "utf-8":
            try:
                data.decode(info.name)
            except (UnicodeError, ValueError) as e:
                return f"not valid in its declared encoding {coding!r} ({type(e).__name__})"
            return None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        return f"not valid UTF-8 at byte {e.start}" + ("" if coding else " and no coding declaration")
    return None


def declared_coding(data: bytes) -> str | None:
    """The encoding a PEP 263 declaration in the first two lines names, or None."""
    end = data.find(b"\n")
    if end >= 0:
        end = data.find(b"\n", end + 1)
    head = data[: end if end >= 0 else len(data)]
    if b"coding" not in head:
        return None
    m = _CODING.search(head)
    return m.group(1).decode("ascii", "replace") if m else None


def binary_problem(data: bytes, sample: int = 65536) -> str | None:
    """Why bytes read as C/C++ source are not text, or None. Looks at the head only: a NUL byte
    or more than 5 % control bytes (random data, an object file renamed .cu)."""
    head = data[:sample]
    if not head:
        return None
    nul = head.find(b"\x00")
    if nul >= 0:
        return f"binary data (NUL byte at offset {nul})"
    ctrl = len(head.translate(None, _TEXT_BYTES))
    if ctrl * 20 > len(head):  # random bytes have ~11 %, real sources ~0
        return f"binary data ({100 * ctrl // len(head)}% control bytes in the first {len(head)} bytes)"
    return None


# bytes that occur in text: printable ASCII, tab/newline/CR/form feed/vertical tab, and >= 0x80
# (UTF-8 or latin-1 comments); everything else is a control byte
_TEXT_BYTES = bytes(range(0x20, 0x7F)) + b"\t\n\r\f\v" + bytes(range(0x80, 0x100))
