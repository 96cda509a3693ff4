"""The user's repository: where it is, which scanned files lie in it, and where it pins packages.

Code review tools (GitHub code scanning) can only show and fingerprint files of the repository.
Gates in site-packages or a wheel are mapped to the line that pins their package instead
(requirements*.txt, constraints*.txt, pyproject.toml, uv.lock, poetry.lock).
Only reads files; never runs git.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from .safeio import UnsafeInput, read_regular_file

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

# files that pin packages, in order of preference (hand-edited files first: that is where a
# reviewer changes a version)
PIN_GLOBS = ("requirements*.txt", "constraints*.txt", "pyproject.toml", "uv.lock", "poetry.lock")
# directories never searched for pin files
_SKIP_DIRS = {".git", ".hg", ".venv", "venv", "env", "node_modules", "site-packages", "dist-packages",
              "__pycache__", ".tox", ".nox", "build", "dist", ".mypy_cache", ".pytest_cache"}
_MAX_DEPTH = 3  # requirements/ subfolders, monorepo packages; not the whole tree
_INSTALL_DIRS = {"site-packages", "dist-packages"}


def find_repo_root(start: str | os.PathLike | None = None) -> Path | None:
    """The work tree that holds `start` (default: cwd): the nearest ancestor with a `.git`
    directory or file (worktrees and submodules have a `.git` file)."""
    p = Path(start or os.getcwd()).resolve()
    for d in (p, *p.parents):
        if (d / ".git").exists():
            return d
    return None


def normalize_name(name: str) -> str:
    """PEP 503 normalisation: flashinfer_python, FlashInfer.Python -> flashinfer-python."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Pin:
    path: str  # relative to the repository root, POSIX
    line: int
    text: str


def _pin_files(root: Path) -> list[Path]:
    out: list[tuple[int, int, str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root)
        depth = len(rel.parts)
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith(".")
                             and not (Path(dirpath) / d / "pyvenv.cfg").exists())
        if depth >= _MAX_DEPTH:
            dirnames[:] = []
        for f in filenames:
            for rank, pat in enumerate(PIN_GLOBS):
                if Path(f).match(pat):
                    out.append((rank, depth, (rel / f).as_posix(), Path(dirpath) / f))
                    break
    out.sort(key=lambda t: (t[0], t[1], t[2]))
    return [t[3] for t in out]


class PinFileError(ValueError):
    """A pin file that cannot be read as one (a link to a device, a FIFO, oversized, unreadable, or
    TOML that does not parse): an input error of the run, never a file that silently pins nothing."""


_REQ_LINE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(?:[<>=!~;@ ]|$)")
_LOCK_NAME = re.compile(r"""^\s*name\s*=\s*["']([^"']+)["']""")


def _pins_in(path: Path, rel: str) -> dict[str, Pin]:
    # a pull request can commit any of these as a link to /dev/zero, a FIFO or a huge file: read
    # without blocking, size-capped, and an error names the file (results would otherwise point
    # at another pin, or none, without a word)
    try:
        text = read_regular_file(path).decode("utf-8", errors="replace")
    except UnsafeInput as e:
        raise PinFileError(f"{rel}: cannot read pin file: {e}") from None
    except OSError as e:
        raise PinFileError(f"{rel}: cannot read pin file: {e.strerror or e}") from None
    out: dict[str, Pin] = {}
    name = path.name
    lines = text.splitlines()
    if name.endswith(".lock"):
        # [[package]] blocks: the `name = "..."` line of each
        in_pkg = False
        for i, line in enumerate(lines, 1):
            s = line.strip()
            if s.startswith("[["):
                in_pkg = s == "[[package]]"
            elif s.startswith("["):
                in_pkg = False
            elif in_pkg:
                m = _LOCK_NAME.match(line)
                if m:
                    out.setdefault(normalize_name(m.group(1)), Pin(rel, i, s))
        return out
    if name.endswith(".toml"):
        # tomllib says which names are dependencies; the line is where the name first appears as a
        # requirement string ("flashinfer-python==0.7.2") or a poetry key (flashinfer-python = "0.7.2")
        for dep in sorted(_toml_dependency_names(text, rel)):
            pat = re.compile(r"""(["'])\s*""" + _name_re(dep) + r"""\s*(\[[^\]]*\])?\s*([<>=!~;@ ]|\1)"""
                             r"""|^\s*["']?""" + _name_re(dep) + r"""["']?\s*=""", re.I)
            for i, line in enumerate(lines, 1):
                if pat.search(line.split("#", 1)[0]):
                    out.setdefault(dep, Pin(rel, i, line.strip()))
                    break
        return out
    for i, line in enumerate(lines, 1):  # requirements / constraints
        s = line.split(" #", 1)[0]
        if s.lstrip().startswith(("#", "-")):
            continue
        m = _REQ_LINE.match(s)
        if m:
            out.setdefault(normalize_name(m.group(1)), Pin(rel, i, line.strip()))
    return out


def _name_re(norm: str) -> str:
    return "[-_.]+".join(re.escape(p) for p in norm.split("-"))


def _toml_dependency_names(text: str, rel: str) -> set[str]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise PinFileError(f"{rel}: not a TOML file ({e})") from None
    except RecursionError:  # tomllib recurses once per nesting level
        raise PinFileError(f"{rel}: TOML nested too deeply to read") from None

    # the tables and lists are whatever the file holds: take only those of the expected types
    def table(t, key) -> dict:
        v = t.get(key) if isinstance(t, dict) else None
        return v if isinstance(v, dict) else {}

    def strings(v) -> list[str]:
        return [x for x in v if isinstance(x, str)] if isinstance(v, list) else []

    proj = table(data, "project")
    specs = strings(proj.get("dependencies"))
    for v in table(proj, "optional-dependencies").values():
        specs += strings(v)
    for v in table(data, "dependency-groups").values():
        specs += strings(v)
    specs += strings(table(data, "build-system").get("requires"))
    names = set()
    for s in specs:
        m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", s)
        if m:
            names.add(normalize_name(m.group(1)))
    poetry = table(table(data, "tool"), "poetry")
    tables = [table(poetry, "dependencies"), table(poetry, "dev-dependencies")]
    tables += [table(g, "dependencies") for g in table(poetry, "group").values()]
    for t in tables:
        names |= {normalize_name(k) for k in t if k.lower() != "python"}
    return names


@dataclass
class RepoContext:
    """Where the repository is, relative to the scan root, and where it pins each package."""

    root: Path | None  # repository work tree, or None when the scan is not in one
    scan_root: Path | None  # absolute scan root (a directory or a wheel file)
    scan_is_dir: bool = True
    installed_tops: frozenset = frozenset()  # first path parts that belong to installed distributions
    pins: dict[str, Pin] = field(default_factory=dict)

    def rel(self, path: str) -> str | None:
        """Path of a scanned file relative to the repository root, or None when the file is not
        part of the repository (wheel member, site-packages, installed distribution)."""
        if self.scan_root is None or not self.scan_is_dir:
            return None
        if self.root is None:  # no repository: the scanned directory stands in for it
            return path
        first = path.split("/", 1)[0]
        if first in self.installed_tops:
            return None
        absp = self.scan_root / path
        try:
            r = absp.relative_to(self.root)
        except ValueError:
            return None
        if any(p in _INSTALL_DIRS for p in r.parts):
            return None
        return r.as_posix()

    def pin(self, package: str | None) -> Pin | None:
        if not package:
            return None
        return self.pins.get(normalize_name(package))


def repo_context(repo_root: str | os.PathLike | None, scan_root: str | os.PathLike | None,
                 installed_tops=(), search: bool = True) -> RepoContext:
    """Build the context; `repo_root` None means: the work tree around the current directory.
    Raises PinFileError for a pin file that cannot be read (see _pins_in)."""
    root = Path(repo_root).resolve() if repo_root is not None else (find_repo_root() if search else None)
    scan = Path(scan_root).resolve() if scan_root is not None else None
    pins: dict[str, Pin] = {}
    if root is not None and root.is_dir():
        for f in _pin_files(root):
            for k, v in _pins_in(f, f.relative_to(root).as_posix()).items():
                pins.setdefault(k, v)
    else:
        root = None
    return RepoContext(root=root, scan_root=scan, scan_is_dir=bool(scan and scan.is_dir()),
                       installed_tops=frozenset(installed_tops), pins=pins)
