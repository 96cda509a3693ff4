"""Reading files that are not part of the scanned tree (cache entries, baselines, pin files, probe
results) without trusting whoever could write them: no blocking on FIFOs or devices, no link
followed where a link is not expected, a size cap, and JSON parsed with a bounded depth."""
from __future__ import annotations

import json
import os
import stat

# a baseline, pin or probe file larger than this is refused (real ones are a few MB at most)
MAX_INPUT_BYTES = 256 << 20
# JSON nested deeper than this is refused before it is parsed (ours nests 4 levels)
MAX_JSON_DEPTH = 64


class UnsafeInput(ValueError):
    """The file exists but is not one archaudit reads: a FIFO, device, oversized or foreign file."""


def read_regular_file(path, max_bytes: int = MAX_INPUT_BYTES, *, follow_links: bool = True,
                      owned: bool = False, private: bool = False) -> bytes:
    """The bytes of a regular file, opened without blocking (a FIFO or device is refused, not waited
    on). follow_links=False refuses a final symlink; owned: the file must belong to this user;
    private: nobody else may read or write it. Raises OSError, or UnsafeInput for the checks."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow_links:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeInput("not a regular file")
        if owned and hasattr(os, "geteuid") and st.st_uid != os.geteuid():
            raise UnsafeInput("owned by another user")
        if private and st.st_mode & 0o077:
            raise UnsafeInput("readable or writable by others")
        if st.st_size > max_bytes:
            raise UnsafeInput(f"larger than {max_bytes:,} bytes")
        chunks, left = [], st.st_size + 1  # one byte more than stat said: a file that grows is refused
        while left > 0:
            b = os.read(fd, min(left, 1 << 24))
            if not b:
                break
            chunks.append(b)
            left -= len(b)
        data = b"".join(chunks)
        if len(data) > st.st_size:
            raise UnsafeInput("it grew while being read")
        return data
    finally:
        os.close(fd)


def json_depth_ok(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether no array/object in text nests deeper than limit (brackets inside strings ignored)."""
    depth = 0
    in_str = esc = False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def load_json_file(path, max_bytes: int = MAX_INPUT_BYTES):
    """Parse a JSON file read with read_regular_file. Raises OSError, UnsafeInput or ValueError
    (bad UTF-8, bad JSON, nested too deep)."""
    text = read_regular_file(path, max_bytes).decode("utf-8")
    if not json_depth_ok(text):
        raise UnsafeInput(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    return json.loads(text)
