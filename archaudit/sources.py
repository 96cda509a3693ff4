"""Where bytes come from: a directory (site-packages or a source tree) or a wheel read in place.

Files are only ever read as bytes; nothing is imported, executed or extracted. Paths handed to
the rest of archaudit are POSIX paths relative to the scan root. Problems become Diagnostics.
"""
from __future__ import annotations

import os
import stat
import sys
import sysconfig
import zipfile
from dataclasses import dataclass, field
from email.parser import HeaderParser
from pathlib import Path, PurePosixPath

from .model import Diagnostic

PY_EXT = (".py", ".pyi")
CUDA_EXT = (".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc", ".cxx", ".inl", ".hh", ".cuinl")
# Upper bound on one file's size; larger files are reported and skipped (bounded memory/time).
MAX_FILE_BYTES = 16 * 1024 * 1024
# A wheel member may not claim to inflate beyond this (zip bombs).
MAX_WHEEL_MEMBER_BYTES = 64 * 1024 * 1024


@dataclass
class Distribution:
    name: str
    version: str
    top_level: list[str] = field(default_factory=list)
    dist_info: str = ""


class SourceError(Exception):
    """The scan root itself cannot be read (exit code 2)."""


class Source:
    """A read-only view of files, addressed by root-relative POSIX paths."""

    label: str = ""

    def __init__(self) -> None:
        self.diagnostics: list[Diagnostic] = []

    def files(self) -> list[str]:
        raise NotImplementedError

    def read(self, rel: str) -> bytes | None:
        raise NotImplementedError

    def exists(self, rel: str) -> bool:
        raise NotImplementedError

    def is_dir(self, rel: str) -> bool:
        raise NotImplementedError

    def diag(self, path: str, kind: str, message: str) -> None:
        self.diagnostics.append(Diagnostic(path, kind, message))

    # --- distributions ----------------------------------------------------------------
    def distributions(self) -> list[Distribution]:
        dists = []
        infos = sorted({p.split("/", 1)[0] for p in self.files() if p.split("/", 1)[0].endswith(".dist-info")})
        for info in infos:
            meta = self.read(f"{info}/METADATA")
            name, version = "", ""
            if meta is not None:
                hdr = HeaderParser().parsestr(meta.decode("utf-8", "replace"), headersonly=True)
                name, version = hdr.get("Name", "") or "", hdr.get("Version", "") or ""
            else:
                self.diag(f"{info}/METADATA", "missing-metadata", "distribution has no METADATA")
            if not name:
                name = info[: -len(".dist-info")].rsplit("-", 1)[0]
            if not version:
                self.diag(f"{info}/METADATA", "missing-version", "METADATA has no Version")
            top = []
            tl = self.read(f"{info}/top_level.txt")
            if tl is not None:
                top = [x.strip() for x in tl.decode("utf-8", "replace").splitlines() if x.strip()]
            else:
                rec = self.read(f"{info}/RECORD")
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


def _safe_member(name: str) -> str | None:
    """A wheel member name as a safe relative POSIX path, or None if it escapes the root."""
    if not name or name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        return None
    p = PurePosixPath(name.replace("\\", "/"))
    if any(part == ".." for part in p.parts):
        return None
    return str(p)


class DirSource(Source):
    def __init__(self, root: Path):
        super().__init__()
        self.root = root.resolve()
        self.label = str(root)
        self._files: list[str] | None = None
        self._dirs: set[str] = set()

    def _walk(self) -> list[str]:
        out: list[str] = []
        root = self.root
        seen_dirs: set[tuple[int, int]] = set()
        stack = [("", root)]
        while stack:
            rel, d = stack.pop()
            try:
                st = os.stat(d)
            except OSError as e:
                self.diag(rel or ".", "unreadable", f"cannot stat directory: {e.strerror}")
                continue
            key = (st.st_dev, st.st_ino)
            if key in seen_dirs:
                self.diag(rel, "symlink-loop", "directory reached twice through symlinks; skipped")
                continue
            seen_dirs.add(key)
            try:
                entries = sorted(os.scandir(d), key=lambda e: e.name)
            except OSError as e:
                self.diag(rel or ".", "unreadable", f"cannot list directory: {e.strerror}")
                continue
            for e in entries:
                erel = f"{rel}/{e.name}" if rel else e.name
                if e.name in ("__pycache__", ".git"):
                    continue
                try:
                    if e.is_symlink():
                        target = os.path.realpath(e.path)
                        if not (target == str(root) or target.startswith(str(root) + os.sep)):
                            self.diag(erel, "symlink-outside", "symlink points outside the scan root; not followed")
                            continue
                        if not os.path.exists(e.path):
                            self.diag(erel, "dangling-symlink", "symlink target does not exist")
                            continue
                    if e.is_dir():
                        self._dirs.add(erel)
                        stack.append((erel, Path(e.path)))
                    elif e.is_file():
                        out.append(erel)
                except OSError as err:
                    self.diag(erel, "unreadable", f"cannot stat: {err.strerror}")
        out.sort()
        return out

    def files(self) -> list[str]:
        if self._files is None:
            self._files = self._walk()
        return self._files

    def _path(self, rel: str) -> Path:
        return self.root / rel

    def read(self, rel: str) -> bytes | None:
        p = self._path(rel)
        try:
            st = os.stat(p)
            if not stat.S_ISREG(st.st_mode):
                self.diag(rel, "not-a-file", "not a regular file")
                return None
            if st.st_size > MAX_FILE_BYTES:
                self.diag(rel, "too-large", f"{st.st_size} bytes exceeds the {MAX_FILE_BYTES} byte limit; skipped")
                return None
            with open(p, "rb") as f:
                return f.read(MAX_FILE_BYTES + 1)
        except FileNotFoundError:
            self.diag(rel, "vanished", "file disappeared during the scan")
        except OSError as e:
            self.diag(rel, "unreadable", f"cannot read: {e.strerror}")
        return None

    def exists(self, rel: str) -> bool:
        if self._files is not None:
            return rel in self._fileset()
        return self._path(rel).is_file()

    def _fileset(self) -> set[str]:
        fs = getattr(self, "_fs", None)
        if fs is None:
            fs = self._fs = set(self.files())
        return fs

    def is_dir(self, rel: str) -> bool:
        self.files()
        return rel in self._dirs or rel == ""


class WheelSource(Source):
    def __init__(self, path: Path):
        super().__init__()
        self.label = str(path)
        self.path = path
        try:
            self.zf = zipfile.ZipFile(path)
            infos = self.zf.infolist()
        except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
            raise SourceError(f"{path}: not a readable wheel ({e})") from None
        self._members: dict[str, zipfile.ZipInfo] = {}
        self._dirs: set[str] = {""}
        for info in infos:
            safe = _safe_member(info.filename)
            if safe is None:
                self.diag(info.filename, "unsafe-member", "wheel entry escapes the root (absolute or '..'); skipped")
                continue
            if info.is_dir():
                continue
            if safe in self._members:
                self.diag(safe, "duplicate-member", "wheel has this entry more than once; the first is used")
                continue
            self._members[safe] = info
            parts = safe.split("/")
            for i in range(1, len(parts)):
                self._dirs.add("/".join(parts[:i]))
        self._files = sorted(self._members)

    def files(self) -> list[str]:
        return self._files

    def read(self, rel: str) -> bytes | None:
        info = self._members.get(rel)
        if info is None:
            return None
        if info.file_size > min(MAX_FILE_BYTES, MAX_WHEEL_MEMBER_BYTES):
            self.diag(rel, "too-large", f"{info.file_size} bytes uncompressed exceeds the limit; skipped")
            return None
        try:
            with self.zf.open(info) as f:
                data = f.read(MAX_FILE_BYTES + 1)
            if len(data) > MAX_FILE_BYTES:
                self.diag(rel, "too-large", "inflates beyond the size limit; skipped")
                return None
            return data
        except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError, RuntimeError) as e:
            self.diag(rel, "corrupt-member", f"cannot read wheel entry: {e}")
            return None

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
    if p.suffix == ".whl" or zipfile.is_zipfile(p):
        return WheelSource(p)
    raise SourceError(f"{p}: not a directory or a wheel (.whl)")


def module_name_for(rel: str) -> str | None:
    """Dotted module name of a .py file path, or None if the path is not importable."""
    if not rel.endswith(".py"):
        return None
    parts = rel[:-3].split("/")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    if not parts or not all(x.isidentifier() for x in parts):
        return None
    return ".".join(parts)


if sys.version_info < (3, 10):  # pragma: no cover
    raise RuntimeError("archaudit needs Python 3.10+")
