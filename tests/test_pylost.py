"""Issue 29 item 8: gates that were lost with no diagnostic. The fixture fixtures/pylost/lostpkg
holds the small cases (a 14-package re-export chain, a star-import cycle, lru_cache(partial(..))
predicates, a self-recursive one, eleven ways to look a capability query up by string, and
strings the analysis cannot read); the large ones are generated here: a re-export chain past
MAX_IMPORT_HOPS and a 50-deep chain of symlinks."""
from __future__ import annotations

import json
import os
import shutil

import pytest
from click.testing import CliRunner

from archaudit.cli import main
from archaudit.python.interp import MAX_IMPORT_HOPS

from conftest import FIXTURES

LOST = FIXTURES / "pylost"
SM90 = "sm_90"
SM10 = "sm_100,sm_103,sm_107"
CAP = "evaluated: capability-source torch.cuda.get_device_capability"


def scan(root) -> dict:
    r = CliRunner().invoke(main, ["scan", str(root), "-t", "sm_120", "--format", "json", "-q", "--no-cache"])
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.output)


def gates(doc: dict, path: str) -> list[tuple]:
    return [(g["line"], g["kind"], ",".join(g["admits"]), g["resolution"])
            for g in doc["gates"] if g["path"] == path]


def diags(doc: dict, kind: str) -> list[tuple]:
    return sorted((d["path"], d.get("line"), d["message"]) for d in doc["diagnostics"] if d["kind"] == kind)


def _fixture():
    return scan(LOST)


_DOC: dict = {}


def fixture_doc() -> dict:
    if not _DOC:
        _DOC.update(_fixture())
    return _DOC


# --- re-export chains ----------------------------------------------------------------------------

def test_re_export_chain_of_14_packages_and_a_star_cycle():
    # before: the flag (line 6) and the call (line 12) were lost past about 11 packages; the
    # star-import cycle (stara <-> starb) ran into RecursionError, reported as a step budget
    assert gates(fixture_doc(), "lostpkg/reexport.py") == [
        (6, "flag", SM90, "inferred: lostpkg.chain.base.fast_ok"),
        (12, "predicate-call", SM90, "inferred: lostpkg.chain.base.fast_ok"),
        (18, "predicate-call", SM90, "inferred: lostpkg.chain.base.fast_ok"),
    ]
    assert diags(fixture_doc(), "analysis-budget") == []


def _chain(root, n: int) -> None:
    pkg = root / "rx"
    (pkg / "base").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "base" / "__init__.py").write_text(
        "import torch\n\n\ndef fast_ok():\n    return torch.cuda.get_device_capability()[0] == 9\n")
    prev = "base"
    for i in range(1, n + 1):
        (pkg / f"p{i}").mkdir()
        (pkg / f"p{i}" / "__init__.py").write_text(f"from ..{prev} import fast_ok\n")
        prev = f"p{i}"
    (pkg / "use.py").write_text(f"from .{prev} import fast_ok\n\n\ndef g():\n    if fast_ok():\n        return 1\n    return 0\n")


def test_re_export_chain_of_300_packages_is_followed(tmp_path):
    _chain(tmp_path, 300)
    doc = scan(tmp_path)
    assert gates(doc, "rx/use.py") == [(5, "predicate-call", SM90, "inferred: rx.base.fast_ok")]
    # the call graph follows it too: the call is resolved (no 'missing-attribute: rx.p262 has no fast_ok')
    (f,) = [f for f in doc["findings"] if f["gate"]["path"] == "rx/use.py"]
    assert "could not resolve" not in f["reason"]


def test_re_export_chain_past_the_bound_says_so(tmp_path):
    n = MAX_IMPORT_HOPS + 20
    _chain(tmp_path, n)
    doc = scan(tmp_path)
    assert gates(doc, "rx/use.py") == []
    assert diags(doc, "analysis-budget") == [(
        "rx/use.py", None,
        f"import of 'fast_ok' not followed past {MAX_IMPORT_HOPS} modules (rx.use -> rx.p{n} -> rx.p{n - 1} -> "
        f"rx.p{n - 2} -> ... ({MAX_IMPORT_HOPS + 1 - 8} more) -> rx.p{n - MAX_IMPORT_HOPS + 4} -> "
        f"rx.p{n - MAX_IMPORT_HOPS + 3} -> rx.p{n - MAX_IMPORT_HOPS + 2} -> rx.p{n - MAX_IMPORT_HOPS + 1}); "
        "gates that read it may be missing")]


# --- lru_cache(partial(...)) -----------------------------------------------------------------------

def test_cached_partials_are_predicates():
    # before: only line 46 (is_sm90, by its name); hopper, hopper_b, hopper_c and blackwell were
    # a decorator waiting for its function (always true), and no name carried _cap_is to them
    assert gates(fixture_doc(), "lostpkg/cached.py") == [
        (22, "predicate-call", SM90, "inferred: lostpkg.cached._cap_is"),
        (28, "predicate-call", SM90, "inferred: lostpkg.cached._cap_is"),
        (34, "predicate-call", SM90, "inferred: lostpkg.cached._cap_is"),
        (40, "predicate-call", SM10, "inferred: lostpkg.cached._cap_is"),
        (46, "predicate-call", SM90, "inferred: lostpkg.cached._cap_is"),
    ]


def test_self_recursive_cached_partial_inside_an_or():
    # before: line 6 was lost (line 12, a def rebound to lru_cache(partial(itself)), was found)
    assert gates(fixture_doc(), "lostpkg/recursive_use.py") == [
        (6, "predicate-call", SM90, "inferred: lostpkg.recursive._probe"),
        (12, "predicate-call", SM10, "inferred: lostpkg.recursive.ready"),
    ]


# --- names looked up by string ---------------------------------------------------------------------

def test_eleven_lookups_by_constant_string():
    # before: 11, 41 (by the name alone) and 47; the other eight were lost
    assert gates(fixture_doc(), "lostpkg/dynamic.py") == [
        (11, "capability-compare", SM90, CAP),   # getattr(torch.cuda, "get_device_capability")()
        (17, "capability-compare", SM90, CAP),   # getattr(torch.cuda, NAME)()
        (23, "capability-compare", SM90, CAP),   # eval("torch.cuda.get_device_capability()")
        (29, "capability-compare", SM90, "inferred: lostpkg.dynamic._arch_major"),  # globals()["_arch_major"]()
        (35, "capability-compare", SM90, CAP),   # operator.attrgetter("cuda.get_device_capability")(torch)()
        (41, "capability-compare", SM90, CAP),   # importlib.import_module("torch").cuda...
        (47, "capability-compare", SM90, CAP),   # getattr(torch, "cuda").get_device_capability()
        (53, "capability-compare", SM90, CAP),   # getattr(torch.cuda, "get_device_" + PART)()
        (59, "capability-compare", SM90, CAP),   # vars(torch.cuda)["get_device_capability"]()
        (65, "capability-compare", SM90, CAP),   # torch.cuda.__dict__["get_device_capability"]()
        (71, "capability-compare", SM90, CAP),   # getattr(torch.cuda, f"get_device_{PART}")()
    ]


def test_strings_the_analysis_cannot_read_are_reported():
    why = "a gate may be built from strings the analysis cannot read"
    assert diags(fixture_doc(), "dynamic-lookup") == [
        ("lostpkg/unread.py", 9, f'getattr(torch.cuda, os.environ["PROBE"]) in lostpkg.unread.by_env: {why}'),
        ("lostpkg/unread.py", 15, f"vars(pynvml)[name] in lostpkg.unread.by_name: {why}"),
        ("lostpkg/unread.py", 20, f'eval(os.environ["PROBE"]) in lostpkg.unread.by_eval: {why}'),
        ("lostpkg/unread.py", 26, f'importlib.import_module(os.environ["BACKEND"]) in lostpkg.unread.by_import: {why}'),
    ]
    # the capability tests beside them are still gates; getattr(obj, name) on an object that
    # holds no capability query (line 33) is not reported, nor an import no test reads (line 42)
    assert [g[0] for g in gates(fixture_doc(), "lostpkg/unread.py")] == [20, 27, 34, 41]


# --- a chain of symlinks -----------------------------------------------------------------------------

GATE_PY = ("import torch\n\n\ndef hopper():\n    return torch.cuda.get_device_capability()[0] == 9\n\n\n"
           "def pick():\n    if torch.cuda.get_device_capability()[0] == 9:\n        return 1\n    return 0\n")


def _symlink_chain(root, n: int = 50) -> None:
    pkg = root / "slpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "real.py").write_text(GATE_PY)
    prev = "real.py"
    for i in range(1, n + 1):
        os.symlink(prev, pkg / f"a{i:02d}.py")
        prev = f"a{i:02d}.py"
    # imported through the 47th link: past the 40 links the kernel follows
    (pkg / "user.py").write_text("from .a47 import hopper\n\n\ndef use():\n    if hopper():\n        return 1\n    return 0\n")


def test_a_chain_of_50_symlinks_is_one_file(tmp_path):
    # before: real.py and a01..a40 each reported the gate of line 9 (41 gates), a41..a50 were
    # 'symlink-loop', and the gate of user.py (through a47) was lost
    _symlink_chain(tmp_path)
    doc = scan(tmp_path)
    assert [(g["path"], g["line"], g["resolution"]) for g in doc["gates"]] == [
        ("slpkg/real.py", 9, CAP),
        ("slpkg/user.py", 5, "inferred: slpkg.real.hopper"),
    ]
    assert [(d["path"], d["kind"], d["severity"], d["message"]) for d in doc["diagnostics"]] == [
        ("slpkg/real.py", "symlink-alias", "note",
         "also reached through 50 symlink(s) (slpkg/a01.py, slpkg/a02.py, slpkg/a03.py and 47 more); "
         "the same file, analysed once under this path")]


def test_a_symlink_loop_is_still_a_loop_and_the_chain_beside_it_one_file(tmp_path):
    _symlink_chain(tmp_path)
    pkg = tmp_path / "slpkg"
    os.symlink("loop_b.py", pkg / "loop_a.py")
    os.symlink("loop_a.py", pkg / "loop_b.py")
    doc = scan(tmp_path)
    assert [(g["path"], g["line"]) for g in doc["gates"]] == [("slpkg/real.py", 9), ("slpkg/user.py", 5)]
    assert sorted((d["path"], d["kind"]) for d in doc["diagnostics"]) == [
        ("slpkg/loop_a.py", "symlink-loop"), ("slpkg/loop_b.py", "symlink-loop"), ("slpkg/real.py", "symlink-alias")]


def test_links_to_a_file_outside_the_listing_keep_their_first_path(tmp_path):
    # the real file is in a directory the walk skips (__pycache__): the first link (sorted) is it
    shutil.copytree(LOST / "lostpkg", tmp_path / "lostpkg", symlinks=True)
    hidden = tmp_path / "lostpkg" / "__pycache__"
    hidden.mkdir()
    (hidden / "k.py").write_text(GATE_PY)
    os.symlink("__pycache__/k.py", tmp_path / "lostpkg" / "k1.py")
    os.symlink("k1.py", tmp_path / "lostpkg" / "k2.py")
    doc = scan(tmp_path)
    assert gates(doc, "lostpkg/k1.py") == [(9, "capability-compare", SM90, CAP)]
    assert gates(doc, "lostpkg/k2.py") == []
    assert ("lostpkg/k1.py", None, "also reached through 1 symlink(s) (lostpkg/k2.py); the same file, "
            "analysed once under this path") in diags(doc, "symlink-alias")


def test_chains_longer_than_the_bound_in_either_name_order(tmp_path):
    # the same links are past the bound whichever end of the chain the walk meets first
    from archaudit.sources import MAX_SYMLINK_CHAIN

    n = MAX_SYMLINK_CHAIN + 5
    pkg = tmp_path / "p"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "real.py").write_text(GATE_PY)
    os.symlink("real.py", pkg / "a0001.py")  # a0001 nearest the file
    os.symlink("real.py", pkg / f"z{n:04d}.py")  # z0001 farthest from it
    for i in range(2, n + 1):
        os.symlink(f"a{i - 1:04d}.py", pkg / f"a{i:04d}.py")
        os.symlink(f"z{n - i + 2:04d}.py", pkg / f"z{n - i + 1:04d}.py")
    doc = scan(tmp_path)
    assert [(g["path"], g["line"]) for g in doc["gates"]] == [("p/real.py", 9)]
    assert [d["path"] for d in doc["diagnostics"] if d["kind"] == "symlink-chain"] == [
        *(f"p/a{i:04d}.py" for i in range(MAX_SYMLINK_CHAIN + 1, n + 1)), *(f"p/z{i:04d}.py" for i in range(1, 6))]
    assert diags(doc, "symlink-alias") == [("p/real.py", None, f"also reached through {2 * n - 10} symlink(s) "
                                            "(p/a0001.py, p/a0002.py, p/a0003.py and "
                                            f"{2 * n - 13} more); the same file, analysed once under this path")]


@pytest.mark.parametrize("link", ["alias", "zlink"])  # the link's name before and after the directory's
def test_a_directory_symlink_to_another_directory_is_an_alias_not_a_loop(tmp_path, link):
    # before: the second of the two paths the walk met was 'symlink-loop' ("directory reached
    # twice"), and when the link sorted after the directory, the real directory was the one
    # called a loop and its files were listed under the link
    pkg = tmp_path / "dpkg"
    (pkg / "impl").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "impl" / "__init__.py").write_text("")
    (pkg / "impl" / "real.py").write_text(GATE_PY)
    os.symlink("impl", pkg / link)
    # an import through the link's path reads the same file
    (pkg / "user.py").write_text(f"from .{link}.real import hopper\n\n\ndef use():\n    if hopper():\n        return 1\n"
                                 "    return 0\n")
    os.symlink(".", pkg / "impl" / "self")  # a real loop beside it
    doc = scan(tmp_path)
    assert [(g["path"], g["line"], g["resolution"]) for g in doc["gates"]] == [
        ("dpkg/impl/real.py", 9, CAP), ("dpkg/user.py", 5, "inferred: dpkg.impl.real.hopper")]
    assert [(d["path"], d["kind"], d["severity"], d["message"]) for d in doc["diagnostics"]] == [
        ("dpkg/impl", "symlink-alias", "note",
         f"directory also reached through 1 symlink(s) (dpkg/{link}); its 2 file(s) analysed once under this path"),
        ("dpkg/impl/self", "symlink-loop", "warning", "directory symlink to an enclosing directory (loop); not followed")]
