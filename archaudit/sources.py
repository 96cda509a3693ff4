"""Where bytes come from: a directory (site-packages or a source tree) or a wheel read in place.

Files are only ever read as bytes; nothing is imported, executed or extracted. Paths handed to
the rest of archaudit are POSIX paths relative to the scan root. Problems become Diagnostics.
"""
from __future__ import annotations

import bz2
import csv
import errno
import lzma
import mmap
import os
import re
import stat
import struct
import sys
import sysconfig
import zipfile
import zlib
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path, PurePosixPath

from .model import Diagnostic
from .parsing.screen import binary_problem, python_text_problem
from .python.pybytes import more_defs_than, more_tokens_than

PY_EXT = (".py", ".pyi")
CUDA_EXT = (".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc", ".cxx", ".inl", ".hh", ".cuinl")
# the CUDA/C++ files searched for runtime architecture checks
CPP_SUFFIXES = (".cu", ".cuh", ".h", ".hpp", ".cc", ".cpp", ".cxx", ".inl")
# Limits on untrusted input (README "Untrusted input"). Larger files are reported and skipped:
# the biggest real source in flashinfer/sglang is about 4 MB.
MAX_FILE_BYTES = 16 * 1024 * 1024
# Python parses and converts at ~0.5-1 MB/s here, so .py files have a lower bound of their own
# (largest real one: 1.2 MB, a generated flashinfer kernel); worst case ~10 s per file.
MAX_PYTHON_BYTES = 4 * 1024 * 1024
# Tokens of one .py file: what parsing costs is tokens, not bytes (a 4 MiB list literal is 2.8
# million of them, and tree-sitter plus the IR took 1.5 GB for it). The most in flashinfer and
# sglang: 277,000 (a generated 0.96 MB kernel module).
MAX_PYTHON_TOKENS = 1_000_000
# Function definitions in one .py file: finding and judging gates costs per function, so a file
# with more is skipped before it is parsed. 10x the most in flashinfer and sglang (408).
MAX_PYTHON_DEFS = 4_096
# A prebuilt extension (.so) is read only for its section and symbol tables and fatbin headers
# (binary/extension.py), and only when a torch.ops call asks for it; vllm 0.33's largest is 308 MB.
MAX_SHARED_OBJECT_BYTES = 512 * 1024 * 1024
# A wheel member may not claim to inflate beyond this (zip bombs); the file limit applies too.
MAX_WHEEL_MEMBER_BYTES = 64 * 1024 * 1024
# Inflated bytes read from one wheel in total (many small bombs); flashinfer's wheel is ~500 MB.
MAX_WHEEL_TOTAL_BYTES = 2 * 1024 * 1024 * 1024
# Entries in one wheel's central directory (flashinfer has ~15,000): bounds the listing's memory.
MAX_WHEEL_MEMBERS = 500_000
# A wheel member is inflated in pieces of at most this many bytes (each checked against the caps).
INFLATE_CHUNK = 1 << 20
# RECORD lines naming absent files reported one by one, then summarised.
MAX_RECORD_DIAGNOSTICS = 20


@dataclass
class Distribution:
    name: str
    version: str
    top_level: list[str] = field(default_factory=list)
    dist_info: str = ""


def size_limit(rel: str) -> int:
    if rel.endswith(PY_EXT):
        return MAX_PYTHON_BYTES
    name = rel.rsplit("/", 1)[-1]
    return MAX_SHARED_OBJECT_BYTES if name.endswith(".so") or ".so." in name else MAX_FILE_BYTES


class SourceError(Exception):
    """The scan root itself cannot be read (exit code 2)."""


class Source:
    """A read-only view of files, addressed by root-relative POSIX paths."""

    label: str = ""

    def __init__(self) -> None:
        self.diagnostics: list[Diagnostic] = []
        self._seen: set[Diagnostic] = set()
        self._screened: set[str] = set()  # C/C++ files whose #if structure was checked

    def files(self) -> list[str]:
        raise NotImplementedError

    def read(self, rel: str) -> bytes | None:
        """The file's bytes, or None (with a diagnostic) when it cannot or must not be read.
        Python files that Python itself could not load (NUL bytes, UTF-16, invalid UTF-8) and
        C/C++ files that are binary data are reported here, once, whether or not an analysis
        would have parsed them."""
        data = self._read_bytes(rel)
        if data is not None and rel.endswith(PY_EXT):
            if b"\r" in data:
                data = lone_cr_as_lf(data)
            why = python_text_problem(data)
            if why is not None:
                self.diag(rel, "unreadable-source", f"skipped: {why}")
                return None
            if more_defs_than(data, MAX_PYTHON_DEFS):
                self.diag(rel, "too-large", f"more than {MAX_PYTHON_DEFS} function definitions; skipped")
                return None
            if more_tokens_than(data, MAX_PYTHON_TOKENS):
                self.diag(rel, "too-large", f"more than {MAX_PYTHON_TOKENS} tokens; skipped")
                return None
        elif data is not None and rel.endswith(CUDA_EXT):
            why = binary_problem(data)
            if why is not None:
                self.diag(rel, "binary-file", f"{why}; not C/C++ source, skipped")
                return None
            if rel not in self._screened:
                self._screened.add(rel)
                # lazy: a cache hit imports no analysis
                from .cuda.preproc import unbalanced_conditionals, unbalanced_message

                for line, msg in unbalanced_conditionals(data):
                    self.diag(rel, "unbalanced-conditional", unbalanced_message(msg), line=line)
        return data

    def read_quietly(self, rel: str) -> bytes | None:
        """The file's bytes when read() would give them without a diagnostic; else None, and
        no trace: a speculative read (the CUDA worker's warm-up) must not report a file the
        analysis itself never reads, nor keep a later real read from reporting it."""
        n = len(self.diagnostics)
        screened = rel in self._screened
        data = self.read(rel)
        added = self.diagnostics[n:]
        if added:
            del self.diagnostics[n:]
            self._seen.difference_update(added)
            if not screened:
                self._screened.discard(rel)
            return None
        return data

    def read_mark(self) -> tuple[int, frozenset]:
        return len(self.diagnostics), frozenset(self._screened)

    def reads_since(self, mark: tuple[int, frozenset]) -> tuple[list[Diagnostic], set[str]]:
        """What reading told this Source since `mark` (a `read_mark()`): new diagnostics and
        newly screened files, for a worker process to hand to its parent's `adopt_reads`."""
        return self.diagnostics[mark[0]:], self._screened - mark[1]

    def adopt_reads(self, diags: list[Diagnostic], screened: set[str]) -> None:
        """Record what a worker's reads told its copy of this Source, as reading here would
        have (each diagnostic once)."""
        for d in diags:
            if d not in self._seen:
                self._seen.add(d)
                self.diagnostics.append(d)
        self._screened |= screened

    def _read_bytes(self, rel: str) -> bytes | None:
        raise NotImplementedError

    def exists(self, rel: str) -> bool:
        raise NotImplementedError

    def is_dir(self, rel: str) -> bool:
        raise NotImplementedError

    def diag(self, path: str, kind: str, message: str, severity: str = "warning", line: int | None = None) -> None:
        d = Diagnostic(path, kind, message, line=line, severity=severity)
        if d not in self._seen:  # a file read twice is reported once
            self._seen.add(d)
            self.diagnostics.append(d)

    # --- distributions ----------------------------------------------------------------
    def distributions(self) -> list[Distribution]:
        dists = []
        infos = sorted({p.split("/", 1)[0] for p in self.files() if p.split("/", 1)[0].endswith(".dist-info")})
        for info in infos:
            meta = self.read(f"{info}/METADATA") if self.exists(f"{info}/METADATA") else None
            name, version = "", ""
            if meta is not None:
                hdr = HeaderParser().parsestr(meta.decode("utf-8", "replace"), headersonly=True)
                name, version = hdr.get("Name", "") or "", hdr.get("Version", "") or ""
            else:
                self.diag(f"{info}/METADATA", "missing-metadata", "distribution has no METADATA")
            if not name:
                name = info[: -len(".dist-info")].rsplit("-", 1)[0]
            if not version and meta is not None:
                self.diag(f"{info}/METADATA", "missing-version", "METADATA has no Version")
            top = []
            # top_level.txt is optional metadata (most wheels built by modern backends lack it)
            tl = self.read(f"{info}/top_level.txt") if self.exists(f"{info}/top_level.txt") else None
            if tl is not None:
                top = [x.strip() for x in tl.decode("utf-8", "replace").splitlines() if x.strip()]
            else:
                rec = self.read(f"{info}/RECORD") if self.exists(f"{info}/RECORD") else None
                if rec is not None:
                    seen = set()
                    for line in rec.decode("utf-8", "replace").splitlines():
                        first = line.split(",", 1)[0].split("/", 1)[0]
                        if not first or first.endswith((".dist-info", ".data")) or first in ("..",):
                            continue
                        mod = first[:-3] if first.endswith(".py") else first
                        if mod not in seen and (first.endswith(".py") or "/" in line.split(",", 1)[0]):
                            seen.add(mod)
                    top = sorted(seen)
            dists.append(Distribution(name=name, version=version, top_level=top, dist_info=info))
        return dists


_LONE_CR = re.compile(rb"\r(?!\n)")


def lone_cr_as_lf(data: bytes) -> bytes:
    """Python source with each carriage return that ends a line alone (old Mac line ends) made a
    line feed: Python reads a lone CR as a line end, tree-sitter counts lines by LF. The length,
    so every offset, stays the same; CRLF stays. (The C scanner does the same: parsing/cpp.scan.)"""
    return _LONE_CR.sub(b"\n", data)


def _safe_member(name: str) -> str | None:
    """A wheel member name as a safe relative POSIX path, or None if it escapes the root."""
    if not name or name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        return None
    if "\x00" in name:
        return None
    p = PurePosixPath(name.replace("\\", "/"))
    if any(part == ".." for part in p.parts) or str(p) in (".", ""):
        return None
    return str(p)


# links followed one at a time for a symlink the kernel gives up on (ELOOP after 40): a chain
# longer than this is not followed (symlink-chain)
MAX_SYMLINK_CHAIN = 1000
_LOOP = object()
_TOO_LONG = object()


@dataclass
class _WalkState:
    """What DirSource._walk gathers as it goes."""

    rootp: str  # the root's path with a trailing separator
    stack: list  # (relative path, path) of the directories still to walk
    out: list = field(default_factory=list)  # the files listed (relative paths)
    seen_dirs: set = field(default_factory=set)  # (st_dev, st_ino) of the directories walked
    chains: dict = field(default_factory=dict)  # see DirSource._chain_target
    linked: dict = field(default_factory=dict)  # listed path of a symlinked file -> its real path
    # a directory symlink to another directory of the tree -> that directory's path: its files
    # are listed once, under their real paths (the walk reaches every real directory itself)
    dir_links: dict = field(default_factory=dict)


class DirSource(Source):
    def __init__(self, root: Path):
        super().__init__()
        self.root = root.resolve()
        self.label = str(root)
        self._files: list[str] | None = None
        self._dirs: set[str] = set()
        # a file reached through symlinks under several paths is one file: listed once, under
        # its real path when that is listed, else its first path; the others map to it here
        # (still readable by their own path: an #include or import may name them)
        self.aliases: dict[str, str] = {}

    def _chain_target(self, path: str, memo: dict):
        """The real path of a symlink the kernel gave up on (ELOOP: more than 40 links), by
        following it one link at a time: _LOOP when a link comes back (a real loop), _TOO_LONG when
        more than MAX_SYMLINK_CHAIN links lead from it to a file, None when it ends nowhere. memo:
        link path -> (result, links from it to the end), shared by the walk, so that each link is
        followed once whichever link of its chain the walk meets first (the work is the number of
        links, each a file on disk)."""
        seen: list[str] = []
        keys: set[tuple[int, int]] = set()
        p = path
        rest = 0  # links from p to the end, once known
        while True:
            if p in memo:
                r, rest = memo[p]
                break
            try:
                st = os.lstat(p)
            except OSError as err:
                r = _LOOP if err.errno == errno.ELOOP else None
                break
            if not stat.S_ISLNK(st.st_mode):
                r = os.path.realpath(p)
                break
            if (st.st_dev, st.st_ino) in keys:
                r = _LOOP
                break
            if len(seen) > 100 * MAX_SYMLINK_CHAIN:  # a safety stop: every link is a file on disk
                return _TOO_LONG
            keys.add((st.st_dev, st.st_ino))
            seen.append(p)
            try:
                p = os.path.join(os.path.dirname(p), os.readlink(p))
            except OSError:
                r = None
                break
        for i, q in enumerate(seen):
            n = len(seen) - i + rest
            memo[q] = (_TOO_LONG if n > MAX_SYMLINK_CHAIN and isinstance(r, str) else r, n)
        return memo[path][0] if path in memo else r

    def _inside(self, real: str) -> bool:
        root = str(self.root)
        return real == root or real.startswith(root.rstrip(os.sep) + os.sep)

    def _walk(self) -> list[str]:
        """The regular files under the root (relative paths, sorted, one path per real file);
        what is skipped on the way (loops, links outside, unreadable entries) is noted."""
        root = self.root
        w = _WalkState(str(root).rstrip(os.sep) + os.sep, [("", root)])
        while w.stack:
            rel, d = w.stack.pop()
            listed = self._list_dir(rel, d, w.seen_dirs)
            if listed is None:
                continue
            dreal, entries = listed
            for e in entries:
                self._visit(e, rel, dreal, w)
        w.out.sort()
        kept = self._one_path_per_file(w.out, w.linked)
        self._alias_directories(kept, w.dir_links)
        return kept

    def _list_dir(self, rel: str, d: Path, seen_dirs: set[tuple[int, int]]):
        """(real path, entries sorted by name) of directory d, or None when it cannot be read or
        was reached before."""
        try:
            st = os.stat(d)
            dreal = os.path.realpath(d)
        except OSError as e:
            self.diag(rel or ".", "unreadable", f"cannot stat directory: {e.strerror}")
            return None
        key = (st.st_dev, st.st_ino)
        if key in seen_dirs:
            self.diag(rel, "symlink-loop", "directory reached twice through symlinks; skipped")
            return None
        seen_dirs.add(key)
        try:
            return dreal, sorted(os.scandir(d), key=lambda e: e.name)
        except OSError as e:
            self.diag(rel or ".", "unreadable", f"cannot list directory: {e.strerror}")
            return None

    def _visit(self, e: os.DirEntry, rel: str, dreal: str, w: _WalkState) -> None:
        """One directory entry: skipped, listed as a file, or queued as a directory."""
        if e.name in ("__pycache__", ".git"):
            return
        try:
            e.name.encode("utf-8")
        except UnicodeEncodeError:  # undecodable bytes in the name (surrogate escapes)
            shown = os.fsencode(e.name).decode("utf-8", "backslashreplace")
            self.diag(f"{rel}/{shown}" if rel else shown, "bad-filename",
                      "file name is not valid UTF-8; not read")
            return
        erel = f"{rel}/{e.name}" if rel else e.name
        try:
            self._visit_entry(e, erel, dreal, w)
        except OSError as err:
            self.diag(erel, "unreadable", f"cannot stat: {err.strerror}")

    def _visit_entry(self, e: os.DirEntry, erel: str, dreal: str, w: _WalkState) -> None:
        """Sort an entry with a readable name: a symlink is followed first (when it may be)."""
        real = None
        if e.is_symlink():
            followed = self._follow_link(e, erel, w.chains)
            if followed is None:
                return
            real, target_st = followed
            is_dir, is_file = stat.S_ISDIR(target_st.st_mode), stat.S_ISREG(target_st.st_mode)
        else:
            is_dir, is_file = e.is_dir(), e.is_file()
        if is_dir and real is not None and self._directory_link(erel, real, dreal, w):
            return
        if is_dir:
            if e.name.endswith(PY_EXT + CUDA_EXT):
                self.diag(erel, "not-a-file", "a directory named like a source file; not read as one",
                          severity="note")
            self._dirs.add(erel)
            w.stack.append((erel, Path(real) if real is not None else Path(e.path)))
        elif is_file:
            w.out.append(erel)
            if real is not None:
                w.linked[erel] = real
        else:
            self.diag(erel, "not-a-file", "special file (FIFO, socket or device); not read")

    def _follow_link(self, e: os.DirEntry, erel: str, chains: dict):
        """(real path, stat of the target) of a symlink inside the root, or None (noted) when it
        loops, dangles, is too long a chain or points outside the root."""
        real = None
        try:
            target_st = os.stat(e.path)
            real = os.path.realpath(e.path)
        except OSError as err:
            if err.errno == errno.ELOOP:
                # a loop, or a chain longer than the kernel follows (40 links)
                real = self._chain_target(e.path, chains)
                if real is _LOOP:
                    self.diag(erel, "symlink-loop", "symlink resolves to itself (loop); not followed")
                    return None
                if real is _TOO_LONG:
                    self.diag(erel, "symlink-chain",
                              f"chain of more than {MAX_SYMLINK_CHAIN} symlinks; not followed")
                    return None
            if real is None:
                if err.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                    self.diag(erel, "dangling-symlink", "symlink target does not exist")
                else:
                    self.diag(erel, "unreadable", f"cannot follow symlink: {err.strerror}")
                return None
            target_st = os.stat(real)
        if not self._inside(real):
            self.diag(erel, "symlink-outside", "symlink points outside the scan root; not followed")
            return None
        return real, target_st

    def _directory_link(self, erel: str, real: str, dreal: str, w: _WalkState) -> bool:
        """Whether a symlinked directory is not walked: a loop (noted), or an alias of another
        directory of the tree (recorded in w.dir_links)."""
        # a link to this directory or one enclosing it: a loop, never followed. One to another
        # directory of the tree: an alias of it, not walked again; the walk lists that directory
        # under its own path (unless it is one the walk skips, __pycache__ or .git: then this
        # link is the way in)
        if dreal == real or dreal.startswith(real.rstrip(os.sep) + os.sep):
            self.diag(erel, "symlink-loop", "directory symlink to an enclosing directory (loop); "
                      "not followed")
            return True
        target = real[len(w.rootp):].replace(os.sep, "/") if real.startswith(w.rootp) else ""
        if target and not {"__pycache__", ".git"} & set(target.split("/")):
            self._dirs.add(erel)
            w.dir_links[erel] = target
            return True
        return False

    def _alias_directories(self, files: list[str], dir_links: dict[str, str]) -> None:
        """Each file under a directory some symlinks alias is readable (an import or #include
        may name it) by the links' paths as well; one note on the directory names the links."""
        by_target: dict[str, list[str]] = {}
        for link, target in sorted(dir_links.items()):
            by_target.setdefault(target, []).append(link)
        for target, links in by_target.items():
            prefix = target + "/"
            under = [f for f in files if f.startswith(prefix)]
            for link in links:
                for f in under:
                    self.aliases.setdefault(link + "/" + f[len(prefix):], self.aliases.get(f, f))
                for d in [x for x in self._dirs if x.startswith(prefix)]:
                    self._dirs.add(link + "/" + d[len(prefix):])
            shown = ", ".join(links[:3]) + (f" and {len(links) - 3} more" if len(links) > 3 else "")
            self.diag(target, "symlink-alias", f"directory also reached through {len(links)} symlink(s) ({shown}); "
                      f"its {len(under)} file(s) analysed once under this path", severity="note")

    def _one_path_per_file(self, out: list[str], linked: dict[str, str]) -> list[str]:
        """The listing with each file reached through symlinks kept once: under its real path
        when the walk listed that, else under the first of its paths (sorted); the other paths
        become aliases, with one note on the path kept."""
        if not linked:
            return out
        listed = set(out)
        root = str(self.root).rstrip(os.sep) + os.sep
        by_real: dict[str, list[str]] = {}
        for p in out:  # sorted: the first path of each file comes first
            real = linked.get(p)
            if real is not None:
                by_real.setdefault(real, []).append(p)
        for real, paths in by_real.items():
            rel = real[len(root):].replace(os.sep, "/") if real.startswith(root) else None
            keep = rel if rel in listed and rel not in linked else paths[0]
            others = [p for p in paths if p != keep]
            if not others:
                continue
            for p in others:
                self.aliases[p] = keep
            shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
            self.diag(keep, "symlink-alias", f"also reached through {len(others)} symlink(s) ({shown}); "
                      "the same file, analysed once under this path", severity="note")
        return [p for p in out if p not in self.aliases]

    def files(self) -> list[str]:
        if self._files is None:
            self._files = self._walk()
        return self._files

    def _path(self, rel: str) -> Path:
        return self.root / rel

    def _allowed(self, rel: str) -> bool:
        """Listed files were checked by the walk; any other path (an include, a RECORD line) must
        resolve inside the root, so no symlink or '..' leads a read outside it."""
        if self._files is not None and rel in self._fileset():
            return True
        return self._inside(os.path.realpath(self._path(rel)))

    def _read_bytes(self, rel: str) -> bytes | None:
        rel = self.aliases.get(rel, rel)  # a chain of links may be longer than open() follows
        p = self._path(rel)
        if not self._allowed(rel):
            self.diag(rel, "symlink-outside", "path resolves outside the scan root; not read")
            return None
        try:
            # non-blocking: a FIFO swapped in after the listing must not hang the scan
            fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            self.diag(rel, "vanished", "file disappeared during the scan")
            return None
        except OSError as e:
            if e.errno == errno.ELOOP:
                self.diag(rel, "symlink-loop", "symlink loop; not read")
            else:
                self.diag(rel, "unreadable", f"cannot read: {e.strerror}")
            return None
        try:
            with os.fdopen(fd, "rb") as f:
                st = os.fstat(f.fileno())
                if not stat.S_ISREG(st.st_mode):
                    self.diag(rel, "not-a-file", "not a regular file; not read")
                    return None
                limit = size_limit(rel)
                if st.st_size > limit:
                    self.diag(rel, "too-large", f"{st.st_size} bytes exceeds the {limit} byte limit; skipped")
                    return None
                data = f.read(limit + 1)
                if len(data) > limit:  # grew while we read it
                    self.diag(rel, "too-large", f"exceeds the {limit} byte limit; skipped")
                    return None
                return data
        except OSError as e:
            self.diag(rel, "unreadable", f"cannot read: {e.strerror}")
        return None

    def exists(self, rel: str) -> bool:
        if self._files is not None:
            return rel in self._fileset() or rel in self.aliases
        return self._path(rel).is_file() and self._allowed(rel)

    def _fileset(self) -> set[str]:
        fs = getattr(self, "_fs", None)
        if fs is None:
            fs = self._fs = set(self.files())
        return fs

    def is_dir(self, rel: str) -> bool:
        self.files()
        return rel in self._dirs or rel == ""


def _ename(e: BaseException) -> str:
    mod = type(e).__module__
    return type(e).__name__ if mod in ("builtins", "zipfile") else f"{mod}.{type(e).__name__}"


def _wheel_entry_count(path: Path) -> int | None:
    """Entries in the wheel's central directory, counted by walking it as zipfile will (every
    record its size_cd bytes hold; the end record's entry count is not trusted), stopping past
    MAX_WHEEL_MEMBERS: read before zipfile builds an object per entry. None when there is no end
    record (ZipFile below gives the reason)."""
    try:
        with open(path, "rb") as f:
            end = zipfile._EndRecData(f)  # noqa: SLF001 - the stdlib's own EOCD reader
            if end is None:
                return None
            size_cd = int(end[zipfile._ECD_SIZE])
            # where zipfile puts the directory: before the end record (and a zip64 end record and locator)
            start = int(end[zipfile._ECD_LOCATION]) - size_cd
            if end[zipfile._ECD_SIGNATURE] == zipfile.stringEndArchive64:
                start -= zipfile.sizeEndCentDir64 + zipfile.sizeEndCentDir64Locator
            size = os.fstat(f.fileno()).st_size
            if start < 0 or size == 0:
                return int(end[zipfile._ECD_ENTRIES_TOTAL])
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                stop = min(start + size_cd, size)
                pos, n = start, 0
                while pos + 46 <= stop and n <= MAX_WHEEL_MEMBERS and mm[pos:pos + 4] == b"PK\x01\x02":
                    name, extra, comment = struct.unpack_from("<3H", mm, pos + 28)
                    pos += 46 + name + extra + comment
                    n += 1
        return max(n, int(end[zipfile._ECD_ENTRIES_TOTAL]))
    except Exception:  # noqa: BLE001 - unreadable: ZipFile below gives the reason
        return None


class _EntryError(Exception):
    """A wheel entry that cannot be read: (diagnostic kind, message)."""


class _Deflate:
    """zlib's raw inflater with the interface of bz2/lzma decompressors: input it could not take
    because of max_length is kept (unconsumed_tail) and given back first on the next call."""

    def __init__(self) -> None:
        self._d = zlib.decompressobj(-15)
        self._tail = b""

    @property
    def needs_input(self) -> bool:
        return not self._tail

    @property
    def eof(self) -> bool:
        return self._d.eof

    def decompress(self, data: bytes, max_length: int) -> bytes:
        out = self._d.decompress(self._tail + data, max_length)
        self._tail = self._d.unconsumed_tail
        return out

    def flush(self) -> bytes:
        return self._d.flush()


class _Stored:
    needs_input, eof = True, False

    def decompress(self, data: bytes, max_length: int) -> bytes:
        return data  # the caller asks for at most INFLATE_CHUNK compressed bytes at a time

    def flush(self) -> bytes:
        return b""


def _lzma_decompressor(header: bytes, cap: int):
    """A raw LZMA1 decompressor from a zip LZMA entry's header (version, properties size,
    properties). The dictionary is cut to what the entry may inflate to: a match can reach
    back no further than the bytes inflated so far, and the header's dictionary size is the
    allocation a hostile entry would ask for."""
    psize = struct.unpack("<H", header[2:4])[0]
    filt = lzma._decode_filter_properties(lzma.FILTER_LZMA1, header[4:4 + psize])  # noqa: SLF001 - as zipfile does
    filt["dict_size"] = max(4096, min(filt["dict_size"], cap + 1))
    return lzma.LZMADecompressor(lzma.FORMAT_RAW, filters=[filt]), 4 + psize


class WheelSource(Source):
    def __init__(self, path: Path):
        super().__init__()
        self.label = str(path)
        self.path = path
        self._budget = MAX_WHEEL_TOTAL_BYTES
        count = _wheel_entry_count(path)
        if count is not None and count > MAX_WHEEL_MEMBERS:
            raise SourceError(f"{path}: {count} entries exceeds the limit of {MAX_WHEEL_MEMBERS}; not read")
        try:
            self.zf = zipfile.ZipFile(path)
            infos = self.zf.infolist()
            self._fh = open(path, "rb")  # entries are inflated from here (see _inflate)
        except Exception as e:  # noqa: BLE001 - any failure of the zip reader on untrusted bytes
            raise SourceError(f"{path}: not a readable wheel ({_ename(e)}: {e})") from None
        self._members: dict[str, zipfile.ZipInfo] = {}
        self._dirs: set[str] = {""}
        dups: dict[str, int] = {}
        self._unsafe: set[str] = set()
        for info in infos:
            safe = _safe_member(info.filename)
            if safe is None:
                self._unsafe.add(info.filename)
                shown = info.filename.encode("unicode_escape").decode("ascii") if not info.filename.isprintable() else info.filename
                self.diag(shown, "unsafe-member", "wheel entry escapes the root (absolute, '..' or NUL); skipped")
                continue
            if info.is_dir():
                continue
            if safe in self._members:
                dups[safe] = dups.get(safe, 1) + 1
            # the last entry wins, as when an installer extracts them in order
            self._members[safe] = info
            parts = safe.split("/")
            for i in range(1, len(parts)):
                self._dirs.add("/".join(parts[:i]))
        for safe, n in sorted(dups.items()):
            self.diag(safe, "duplicate-member", f"wheel has this entry {n} times; the last one (what an installer writes) is used")
        self._files = sorted(self._members)
        self._check_record()

    def _check_record(self) -> None:
        """RECORD lines naming files the wheel does not have (a tampered or broken wheel)."""
        infos = sorted({p.split("/", 1)[0] for p in self._files if p.split("/", 1)[0].endswith(".dist-info")})
        for info in infos:
            data = self._read_bytes(f"{info}/RECORD")
            if data is None:
                continue
            missing = []
            try:
                for row in csv.reader(data.decode("utf-8", "replace").splitlines()):
                    if not row or not row[0].strip():
                        continue
                    name = row[0].strip()
                    if name in self._unsafe:
                        continue  # reported as unsafe-member
                    safe = _safe_member(name)
                    if safe is None or (safe not in self._members and safe not in self._dirs):
                        missing.append(name)
            except csv.Error as e:
                self.diag(f"{info}/RECORD", "bad-record", f"RECORD is not valid CSV: {e}")
            for name in missing[:MAX_RECORD_DIAGNOSTICS]:
                self.diag(name, "record-missing", f"listed in {info}/RECORD but not in the wheel")
            if len(missing) > MAX_RECORD_DIAGNOSTICS:
                self.diag(f"{info}/RECORD", "record-missing",
                          f"{len(missing) - MAX_RECORD_DIAGNOSTICS} more RECORD entries are not in the wheel")

    def files(self) -> list[str]:
        return self._files

    def _read_bytes(self, rel: str) -> bytes | None:
        info = self._members.get(rel)
        if info is None:
            return None
        limit = min(size_limit(rel), MAX_WHEEL_MEMBER_BYTES)
        if info.file_size > limit:
            self.diag(rel, "too-large", f"{info.file_size} bytes uncompressed exceeds the {limit} byte limit; skipped")
            return None
        if info.file_size > self._budget:
            self.diag(rel, "too-large", f"the wheel inflated beyond {MAX_WHEEL_TOTAL_BYTES} bytes in total; not read")
            return None
        try:
            return self._inflate(info)
        except _EntryError as e:
            self.diag(rel, *e.args)
        except Exception as e:  # noqa: BLE001 - zlib/bz2/lzma errors, I/O errors on untrusted bytes
            self.diag(rel, "corrupt-member", f"cannot read wheel entry: {_ename(e)}: {e}")
        return None

    def _inflate(self, info: zipfile.ZipInfo) -> bytes:
        """The entry's bytes, inflated in pieces: never more than its declared size (which the
        caller checked against the file limit and the wheel's remaining budget) plus one byte,
        whatever the compressed stream holds, and each byte inflated is charged to the budget.
        Raises _EntryError for an entry that is not what its directory record says."""
        f = self._fh
        f.seek(info.header_offset)
        head = f.read(30)
        if len(head) != 30 or head[:4] != b"PK\x03\x04":
            raise _EntryError("corrupt-member", "cannot read wheel entry: bad local file header")
        flags, nlen, xlen = struct.unpack_from("<H", head, 6)[0], *struct.unpack_from("<2H", head, 26)
        name = f.read(nlen)
        if name.decode("utf-8" if flags & 0x800 else "cp437", "replace") != info.orig_filename:
            raise _EntryError("corrupt-member", "cannot read wheel entry: its local header names another file")
        if info.flag_bits & 0x61:  # encrypted (0x1), patch data (0x20), strong encryption (0x40)
            raise _EntryError("corrupt-member", "cannot read wheel entry: encrypted or patch data")
        f.seek(xlen, os.SEEK_CUR)
        cap, left = info.file_size, info.compress_size
        method = info.compress_type
        if method == zipfile.ZIP_STORED:
            dec = _Stored()
        elif method == zipfile.ZIP_DEFLATED:
            dec = _Deflate()
        elif method == zipfile.ZIP_BZIP2:
            dec = bz2.BZ2Decompressor()
        elif method == zipfile.ZIP_LZMA:
            head = f.read(min(left, 4 + 65535))
            if len(head) < 4 or len(head) < 4 + struct.unpack_from("<H", head, 2)[0]:
                raise _EntryError("corrupt-member", "cannot read wheel entry: truncated LZMA header")
            dec, used = _lzma_decompressor(head, cap)
            f.seek(used - len(head), os.SEEK_CUR)
            left -= used
        else:
            raise _EntryError("corrupt-member", f"cannot read wheel entry: compression method {method} is not supported")
        out: list[bytes] = []
        n = crc = 0
        while not dec.eof:
            data = b""
            if dec.needs_input:
                if left <= 0:
                    break
                data = f.read(min(INFLATE_CHUNK, left))
                if not data:
                    raise _EntryError("corrupt-member", "cannot read wheel entry: the wheel ends inside it")
                left -= len(data)
            piece = dec.decompress(data, min(INFLATE_CHUNK, cap + 1 - n))
            if not piece and not data and not dec.needs_input and not dec.eof:
                raise _EntryError("corrupt-member", "cannot read wheel entry: the compressed stream makes no progress")
            n += len(piece)
            self._budget -= len(piece)
            if n > cap:
                raise _EntryError("corrupt-member", f"inflates beyond its declared size of {cap} bytes; not read")
            crc = zlib.crc32(piece, crc)
            out.append(piece)
        if isinstance(dec, _Deflate) and not dec.eof and n <= cap:  # as zipfile: what a cut stream holds
            piece = dec.flush()[: cap + 1 - n]
            n += len(piece)
            self._budget -= len(piece)
            crc = zlib.crc32(piece, crc)
            out.append(piece)
        if n != cap:
            raise _EntryError("corrupt-member", f"cannot read wheel entry: inflates to {n} bytes, not the declared {cap}")
        if crc != info.CRC:
            raise _EntryError("corrupt-member", "cannot read wheel entry: Bad CRC-32")
        return b"".join(out)

    def exists(self, rel: str) -> bool:
        return rel in self._members

    def is_dir(self, rel: str) -> bool:
        return rel in self._dirs


def default_site_packages() -> Path:
    return Path(sysconfig.get_paths()["purelib"])


def open_source(path: str | os.PathLike | None) -> Source:
    """Open a scan root: a directory, or a .whl file; None means this interpreter's site-packages."""
    p = Path(path) if path is not None else default_site_packages()
    if not p.exists():
        raise SourceError(f"{p}: no such file or directory")
    if p.is_dir():
        if not os.access(p, os.R_OK | os.X_OK):
            raise SourceError(f"{p}: directory is not readable")
        return DirSource(p)
    if not p.is_file():  # a FIFO or device would block or never end
        raise SourceError(f"{p}: not a directory or a regular file")
    if p.suffix == ".whl" or zipfile.is_zipfile(p):
        return WheelSource(p)
    raise SourceError(f"{p}: not a directory or a wheel (.whl)")


class SourceReader:
    """The CUDA side's reader protocol over a Source: bytes or None, never an exception."""

    def __init__(self, source: Source):
        self.source = source

    def read(self, rel: str) -> bytes | None:
        try:
            return self.source.read(rel)
        except (OSError, SourceError):
            return None

    def exists(self, rel: str) -> bool:
        # probing include candidates must not read (a missing file would be a diagnostic)
        try:
            return self.source.exists(rel)
        except (OSError, SourceError):
            return False


if sys.version_info < (3, 10):  # pragma: no cover
    raise RuntimeError("archaudit needs Python 3.10+")
