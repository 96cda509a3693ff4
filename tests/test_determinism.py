"""Identical findings with and without the cache, with 1 or N workers, and after changes that the
early cutoff does or does not accept (always compared with a fresh scan of the same bytes)."""
import os
import shutil
import time

import pytest

from archaudit import scancache, workers
from archaudit.cache import Cache
from archaudit.pipeline import scan
from archaudit.scancache import rebuild_old, split_trailer

from conftest import FIXTURES


def _tree(tmp_path):
    dst = tmp_path / "tree"
    shutil.copytree(FIXTURES / "pygates", dst)
    return dst


def _key(r):
    return (r.gates, r.diagnostics, r.findings, {k: v for k, v in r.stats.items() if k != "seconds"})


def _age(tree, seconds=10):
    """Make every file older than the racy window, as a tree untouched for a while is."""
    t = time.time() - seconds
    for d, _, fs in os.walk(tree):
        for f in fs:
            os.utime(os.path.join(d, f), (t, t))


@pytest.fixture
def pooled(monkeypatch):
    # make the fixture big enough for worker processes
    monkeypatch.setattr(scancache, "PARALLEL_MIN_BYTES", 0)


@pytest.fixture
def patient_parse_worker(monkeypatch):
    """The analysis thread waits for the parse worker's parse of a module it loads instead of
    parsing the module itself (in a scan it never waits): every module asked for then comes
    from the worker, and one the worker failed to parse counts as parsed here."""
    take = workers.ParsePool.take

    def waiting_take(self, path, data, shallow):
        if (path, shallow) in self.ids:
            self.receive(timeout=60)
        return take(self, path, data, shallow)

    monkeypatch.setattr(workers.ParsePool, "take", waiting_take)


def test_workers_and_cache_give_identical_results(tmp_path, pooled, patient_parse_worker):
    tree = _tree(tmp_path)
    alone = scan(tree, workers=1)
    base = _key(alone)
    assert alone.work["helpers"] == {"parse_worker": None, "host_checks": None, "cuda": None}
    r = scan(tree, workers=2)
    assert _key(r) == base
    # the parse worker ran and made every parse the gate rounds asked of it (no C/C++ files, no
    # targets: the other helpers have nothing to do)
    assert r.work["helpers"]["parse_worker"]["taken"] >= 5
    assert r.work["helpers"]["parse_worker"]["parsed_here"] == 0
    assert (r.work["helpers"]["host_checks"], r.work["helpers"]["cuda"]) == (None, None)
    c = tmp_path / "c"
    r = scan(tree, workers=2, cache=Cache(c))
    assert r.cache["mode"] == "miss" and r.cache["hashed"] > 0
    assert _key(r) == base
    assert r.work["helpers"]["parse_worker"]["taken"] >= 5
    r = scan(tree, workers=1, cache=Cache(c))
    assert r.cache["mode"] == "hit"
    assert _key(r) == base


def test_warm_scan_reads_no_source(tmp_path, monkeypatch):
    tree = _tree(tmp_path)
    _age(tree)
    c = tmp_path / "c"
    base = _key(scan(tree, cache=Cache(c)))
    import archaudit.python.index as index_mod
    from archaudit.sources import DirSource

    def boom(*a, **k):
        raise AssertionError("a warm scan must not parse or read sources")

    monkeypatch.setattr(index_mod, "parse_python", boom)
    monkeypatch.setattr(DirSource, "read", boom)
    r = scan(tree, cache=Cache(c))
    assert r.cache["mode"] == "hit" and r.cache["hashed"] == 0 and r.cache["reused"] == sum(1 for p in tree.rglob("*") if p.is_file())
    assert _key(r) == base


@pytest.mark.parametrize("comment,mode", [
    # words the file already has: which modules name a word cannot change
    (b"\n# def return\n\n", "cutoff"),
    # which modules name a word bounds the call graph's caller search (and is quoted in its
    # notes), comments included: a comment that brings a word the file lacks is not cut off
    (b"\n# zebra_quagga_word\n", "miss"),
])
def test_appended_comment(tmp_path, comment, mode):
    tree = _tree(tmp_path)
    _age(tree)
    c = tmp_path / "c"
    scan(tree, cache=Cache(c))
    f = tree / "gatepkg" / "features.py"
    f.write_bytes(f.read_bytes() + comment)
    r = scan(tree, cache=Cache(c))
    assert r.cache["mode"] == mode
    if mode == "cutoff":
        assert r.cache["hashed"] == 1
    assert _key(r) == _key(scan(tree))
    assert scan(tree, cache=Cache(c)).cache["mode"] == "hit"


@pytest.mark.parametrize("edit", [
    # code: the IR changes
    b"\nx_touched = 1\n",
    # a comment that names a GPU-dependent function in a module that was not analysed: the
    # prefilter answer changes, so the module becomes relevant
    b"\n# see _check_cuda_device_version\n",
    # a trigger in a comment of a module without one
    b"\n# get_device_capability\n",
])
def test_changes_that_matter_are_rescanned(tmp_path, edit):
    tree = _tree(tmp_path)
    _age(tree)
    c = tmp_path / "c"
    scan(tree, cache=Cache(c))
    target = tree / "gatepkg" / "__init__.py"
    target.write_bytes(target.read_bytes() + edit)
    r = scan(tree, cache=Cache(c))
    assert r.cache["mode"] == "miss"
    assert _key(r) == _key(scan(tree))


def test_same_size_same_mtime_edit_is_seen(tmp_path):
    """A file rewritten within the racy window, same size, mtime put back: rehashed, not trusted."""
    tree = _tree(tmp_path)
    c = tmp_path / "c"
    scan(tree, cache=Cache(c))
    f = tree / "gatepkg" / "features.py"
    st = f.stat()
    data = f.read_bytes()
    f.write_bytes(data.replace(b"(9, 0)", b"(8, 0)", 1))
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    r = scan(tree, cache=Cache(c))
    assert r.cache["mode"] == "miss"
    assert _key(r) == _key(scan(tree))


def test_split_trailer_and_rebuild():
    data = b"x = 1\n# end\n\n   # more\n"
    end = split_trailer(data)
    assert data[:end] == b"x = 1"
    assert split_trailer(b"# only\n") == 0
    assert split_trailer(b"a") == 1
    st = scancache._state_of(data, None)
    assert rebuild_old(b"x = 1\n# new comment\n", st) == data
    assert rebuild_old(b"x = 2\n", st) is None


def test_findings_identical_from_cache(tmp_path, reg):
    tree = _tree(tmp_path)
    targets = [reg.parse("sm_120")]
    base = scan(tree, targets=targets)
    c = tmp_path / "c"
    first = scan(tree, targets=targets, cache=Cache(c))
    again = scan(tree, targets=targets, cache=Cache(c))
    assert again.cache["mode"] == "hit"
    assert _key(first) == _key(base) == _key(again)
    assert base.findings  # the fixture has gates that exclude sm_120
    # a different target set is a different result
    assert scan(tree, targets=[reg.parse("sm_90")], cache=Cache(c)).cache["mode"] == "miss"


def test_verdicts_are_identical_with_workers_and_cache(tmp_path, pooled, patient_parse_worker, reg):
    """The same with --target: findings (verdicts, chains, evidence, patches) do not depend on the
    worker count or on the cache. With two workers each helper process ran and delivered: the
    parse worker every parse asked of it, the host-code checks their gates, the CUDA worker every
    translation unit sent to it."""
    tree = tmp_path / "verdicts"
    shutil.copytree(FIXTURES / "verdicts", tree)
    targets = [reg.parse("sm_120"), reg.parse("sm_90")]
    base = _key(scan(tree, targets, workers=1))
    assert len(base[2]) > 20
    r = scan(tree, targets, workers=2)
    assert _key(r) == base
    ran = r.work["helpers"]
    assert ran["parse_worker"]["taken"] >= 10 and ran["parse_worker"]["parsed_here"] == 0
    assert ran["host_checks"] is True
    assert ran["cuda"]["installed"] == ran["cuda"]["sent"] >= 5
    c = tmp_path / "c"
    r = scan(tree, targets, workers=2, cache=Cache(c))
    assert r.cache["mode"] == "miss" and _key(r) == base
    r = scan(tree, targets, workers=1, cache=Cache(c))
    assert r.cache["mode"] == "hit" and _key(r) == base


def test_comment_appended_to_a_patched_file_is_cut_off(tmp_path, reg):
    """reach.py carries software-only patches far above its end: a comment appended keeps the
    result (the patches quote the same lines). fusion.py's patch reaches its last line: a comment
    appended there would join the hunk's context, so the scan runs again. Both equal a fresh scan."""
    tree = tmp_path / "verdicts"
    shutil.copytree(FIXTURES / "verdicts", tree)
    _age(tree)
    targets = [reg.parse("sm_120")]
    c = tmp_path / "c"
    first = scan(tree, targets, cache=Cache(c))
    for name, mode in (("reach.py", "cutoff"), ("fusion.py", "miss")):
        f = tree / "servelib" / name
        assert any(x.patch and f"--- servelib/{name}\n" in x.patch for x in first.findings)
        f.write_bytes(f.read_bytes() + b"\n# return x\n")
        r = scan(tree, targets, cache=Cache(c))
        assert r.cache["mode"] == mode
        assert _key(r) == _key(scan(tree, targets))
        _age(tree)


def test_hunks_unchanged():
    from archaudit.verdict.patch import hunks_unchanged, unified_diff

    old = "".join(f"line {i}\n" for i in range(1, 21))
    edited = old.replace("line 10\n", "line 10 or 12\n")
    patch = unified_diff("p.py", old, edited)
    assert hunks_unchanged(patch, "p.py", old, old + "# appended\n")
    assert hunks_unchanged(patch, "other.py", old, "anything\n")
    assert not hunks_unchanged(patch, "p.py", old, old.replace("line 8\n", "line 8 changed\n"))
    near_end = unified_diff("p.py", old, old.replace("line 19\n", "line 19 or 12\n"))
    assert not hunks_unchanged(near_end, "p.py", old, old + "# appended\n")


def test_a_failing_parse_worker_shows_and_changes_nothing(tmp_path, pooled, patient_parse_worker, monkeypatch):
    """A parse worker whose every parse fails: the scan parses each module itself (same result),
    and the helper's counters say so."""
    tree = _tree(tmp_path)
    base = _key(scan(tree, workers=1))
    monkeypatch.setattr(workers, "_parse_one", lambda data, shallow: None)  # inherited by the fork
    r = scan(tree, workers=2)
    assert _key(r) == base
    assert r.work["helpers"]["parse_worker"]["taken"] == 0
    assert r.work["helpers"]["parse_worker"]["parsed_here"] >= 5


def test_cuda_worker_reports_what_the_analysis_reads(tmp_path, pooled, reg):
    """The CUDA worker reads ahead only files that give no diagnostic (Source.read_quietly), so
    a header that nvcc would reject is still reported once, by the TU analysis that reads it,
    exactly as in-process; and the findings that depend on it are the same."""
    tree = tmp_path / "verdicts"
    shutil.copytree(FIXTURES / "verdicts", tree)
    csrc = tree / "kernlib" / "data" / "csrc"
    (csrc / "broken.hh").write_text("#pragma once\n#if defined(X)\nint x;\n")  # no #endif
    (csrc / "blob.hh").write_bytes(b"\x00\x01\x02" * 100)  # .hh: only the TU analysis reads it
    norm = csrc / "norm.cu"
    norm.write_text('#include "broken.hh"\n#include "blob.hh"\n' + norm.read_text())
    targets = [reg.parse("sm_120")]
    base = _key(scan(tree, targets, workers=1))
    got = _key(scan(tree, targets, workers=2))
    assert got == base
    kinds = {(d.path, d.kind) for d in got[1]}
    assert ("kernlib/data/csrc/broken.hh", "unbalanced-conditional") in kinds
    assert ("kernlib/data/csrc/blob.hh", "binary-file") in kinds


def test_read_quietly_leaves_no_trace(tmp_path):
    from archaudit.sources import DirSource

    (tmp_path / "bad.cuh").write_text("#if A\n")
    (tmp_path / "ok.cuh").write_text("int x;\n")
    s = DirSource(tmp_path)
    assert s.read_quietly("bad.cuh") is None and s.read_quietly("missing.h") is None
    assert s.diagnostics == [] and not s._seen and not s._screened
    assert s.read_quietly("ok.cuh") == b"int x;\n"
    assert s.read("bad.cuh") == b"#if A\n"
    assert [d.kind for d in s.diagnostics] == ["unbalanced-conditional"]


def test_cuda_warm_up_then_analysis_reports_in_the_analysis(tmp_path, reg):
    """The worker's two steps in-process (no race with a stop): the warm-up extracts the named
    sources and their includes without a diagnostic; the analysis that reads the bad header
    reports it, in the delta the parent adopts."""
    import threading

    from archaudit import workers
    from archaudit.verdict.judge import TuCache
    from archaudit.sources import DirSource

    tree = tmp_path / "verdicts"
    shutil.copytree(FIXTURES / "verdicts", tree)
    csrc = tree / "kernlib" / "data" / "csrc"
    (csrc / "broken.hh").write_text("#pragma once\n#if defined(X)\nint x;\n")
    norm = csrc / "norm.cu"
    norm.write_text('#include "broken.hh"\n' + norm.read_text())
    src = DirSource(tree)
    files = src.files()
    workers._CUDA.update(source=src, stop=threading.Event())
    try:
        assert workers._cuda_warm(files, [f for f in files if f.endswith(".py")]) >= 9
        assert src.diagnostics == []
        ct = reg.compile_target(reg.parse("sm_120"))
        key, args = TuCache.request("kernlib/data/csrc/norm.cu", ct)
        out, diags, _screened = workers._cuda_analyse([(key, args)])
    finally:
        workers._CUDA.clear()
    assert [k for k, _r in out] == [key]
    assert [(d.path, d.kind) for d in diags] == [("kernlib/data/csrc/broken.hh", "unbalanced-conditional")]


def test_cuda_warm_up_leaves_the_project_resolver_alone(tmp_path):
    """Resolving an include can add a root to the resolver (a package's own cub/): the warm-up
    resolves in its own order, so it must not touch the resolver the TU analyses use."""
    import threading

    from archaudit import workers
    from archaudit.sources import DirSource

    tree = tmp_path / "pkg"
    (tree / "pkg" / "csrc").mkdir(parents=True)
    (tree / "pkg" / "vendor" / "cub").mkdir(parents=True)
    (tree / "pkg" / "vendor" / "cub" / "cub.cuh").write_text("#pragma once\n")
    (tree / "pkg" / "csrc" / "k.cu").write_text("#include <cub/cub.cuh>\n__global__ void k() {}\n")
    (tree / "pkg" / "jit.py").write_text('SOURCES = ["k.cu"]\n')
    src = DirSource(tree)
    files = src.files()
    workers._CUDA.update(source=src, stop=threading.Event())
    try:
        assert workers._cuda_warm(files, ["pkg/jit.py"]) == 2  # k.cu and the cub header
        roots = [r.path for r in workers._CUDA["project"].resolver.roots]
    finally:
        workers._CUDA.clear()
    assert "pkg/vendor" not in roots
