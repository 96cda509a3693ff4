"""Issue 8: bad and hostile input. Each input of the corpus (tests/badinput/make_corpus.py) gets a
diagnostic naming the file and the reason, the gates of the good package next to it are exactly
those of a clean scan, and no command shows a traceback."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from archaudit import sources
from archaudit.cli import main
from archaudit.pipeline import scan
from archaudit.report.jsonout import to_json
from archaudit.report.text import render_text

REPO = Path(__file__).resolve().parent.parent
FIX = REPO / "fixtures"
sys.path.insert(0, str(REPO / "tests" / "badinput"))
import make_corpus  # noqa: E402

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0

# (path, kind, line or None) of every diagnostic the corpus tree must produce, and nothing else
EXPECTED_TREE = {
    ("badpkg/syntax_error.py", "syntax-error", 7),
    ("badpkg/py2.py", "syntax-error", 7),
    ("badpkg/py2.py", "syntax-error", 8),
    ("badpkg/tabs.py", "syntax-error", 5),
    ("badpkg/nul_bytes.py", "unreadable-source", None),
    ("badpkg/bad_utf8.py", "unreadable-source", None),
    ("badpkg/utf16.py", "unreadable-source", None),
    ("badpkg/huge.py", "too-large", None),
    ("badpkg/deep_expr.py", "syntax-error", 7),
    ("badpkg/deep_blocks.py", "syntax-error", 6),  # tree-sitter's own error (its indent stack)
    ("badpkg/deep_blocks.py", "syntax-error", 595),  # the converter's 100-level limit
    ("badpkg/x.py", "not-a-file", None),
    ("badpkg/loop.py", "symlink-loop", None),
    ("badpkg/loopdir", "symlink-loop", None),
    ("badpkg/outside.py", "symlink-outside", None),
    ("badpkg/dangling.py", "dangling-symlink", None),
    ("badpkg/fifo.py", "not-a-file", None),
    ("badpkg/bad\\xffname.py", "bad-filename", None),
    ("badpkg/csrc/random.cu", "binary-file", None),  # every C/C++ file is read (runtime checks)
    # the #if balance screen every C/C++ file gets (also reported by preprocessing the TU)
    ("badpkg/csrc/unbalanced_if.cu", "unbalanced-conditional", 1),
    ("badpkg/csrc/stray_endif.cu", "unbalanced-conditional", 2),
    ("badpkg/csrc/stray_endif.cu", "unbalanced-conditional", 3),
    # found when badpkg/kernels.py's JIT module is judged for sm_120 (its TUs are preprocessed);
    # the cycle is reported where it closes
    *(FOUND_BY_PREPROCESSING := {
        ("badpkg/csrc/cyc_b.cuh", "include-cycle", 1),
        ("badpkg/csrc/macro_bomb.cu", "expansion-limit", 66),
        ("badpkg/csrc/deep_if.cu", "expression-depth", 1),
        ("badpkg/csrc/nested_args.cu", "expansion-limit", 2),
    }),
}
# where a bad CUDA input's diagnostic points when it is not the file itself
CUDA_REPORTED_AT = {"badpkg/csrc/include_cycle.cu": "badpkg/csrc/cyc_b.cuh"}
if not IS_ROOT:  # root reads a chmod 000 file anyway
    EXPECTED_TREE.add(("badpkg/unreadable.py", "unreadable", None))


GOOD = ("gatepkg/", "kernlib/", "servelib/")


def _gate_rows(result, prefix=GOOD):
    return [
        (g.path, g.line, g.col, g.kind, g.expr, tuple(sorted(g.admits)), g.resolution, g.region, g.function)
        for g in result.gates if g.path.startswith(prefix)
    ]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    base = tmp_path_factory.mktemp("badinput")
    clean, root = base / "clean", base / "dirty"
    for d in (clean, root):  # good packages: Python gates, and JIT modules with real verdicts
        for pkg in (FIX / "pygates" / "gatepkg", FIX / "verdicts" / "kernlib", FIX / "verdicts" / "servelib"):
            shutil.copytree(pkg, d / pkg.name)
    manifest = make_corpus.build_tree(root)
    yield {"clean": clean, "root": root, "manifest": manifest, "base": base}
    os.chmod(root / "badpkg" / "unreadable.py", 0o644)


@pytest.fixture(scope="module")
def scans(corpus, reg):
    # with a target, so verdicts (call graph, JIT modules, TU predictions) run over the tree too
    t = [reg.parse("sm_120")]
    return scan(corpus["clean"], t), scan(corpus["root"], t)


def _finding_rows(result, prefix=GOOD):
    return [(f.gate.path, f.gate.line, f.target, f.verdict, f.reason, f.patch,
             [(m.name, m.prediction, m.reason, [k.to_json() for k in m.kernels]) for m in f.modules],
             [e.to_json() for e in f.evidence]) for f in result.findings if f.gate.path.startswith(prefix)]


def test_every_bad_file_gets_its_diagnostic_and_nothing_else(corpus, scans):
    _, dirty = scans
    got = {(d.path, d.kind, d.line) for d in dirty.diagnostics}
    assert got == EXPECTED_TREE
    # every corpus entry with an expected kind is named (unreadable only when permissions bite)
    named = {(d.path, d.kind) for d in dirty.diagnostics}
    for bad in corpus["manifest"]:
        if bad.kind and not (IS_ROOT and bad.kind == "unreadable"):
            assert (CUDA_REPORTED_AT.get(bad.path, bad.path), bad.kind) in named, bad
    # a valid empty module is not a problem
    assert not [d for d in dirty.diagnostics if d.path == "badpkg/empty.py"]


def test_good_package_gates_identical_with_and_without_bad_files(scans):
    clean, dirty = scans
    assert clean.diagnostics == []
    from test_python_gates import EXPECTED as GATEPKG  # the exact gates of gatepkg, kept there

    assert len(_gate_rows(clean, "gatepkg/")) == len(GATEPKG)
    assert _gate_rows(dirty) == _gate_rows(clean)
    verdicts = [r[3] for r in _finding_rows(clean)]
    assert {"hardware-bound", "partial", "software-only"} <= set(verdicts)
    assert _finding_rows(dirty) == _finding_rows(clean)


def test_recoverable_files_still_yield_their_gates(scans):
    _, dirty = scans
    got = {(g.path, g.line, g.kind) for g in dirty.gates if g.path.startswith("badpkg/")}
    # the tab file is analysed as tree-sitter reads it (tabs = 8 columns), with its TabError
    assert ("badpkg/tabs.py", 4, "capability-compare") in got
    # nothing from files that were skipped
    assert not {p for p, _, _ in got} & {"badpkg/nul_bytes.py", "badpkg/bad_utf8.py", "badpkg/utf16.py", "badpkg/huge.py"}


def test_json_and_text_output_name_file_and_reason(scans, reg):
    _, dirty = scans
    doc = json.loads(to_json(dirty, reg))
    rows = {(d["path"], d["kind"]) for d in doc["diagnostics"]}
    text = render_text(dirty, reg)
    for path, kind, line in EXPECTED_TREE:
        assert (path, kind) in rows
        loc = f"{path}:{line}" if line else path
        assert f"{loc}: " in text and f": {kind}: " in text
    assert all(d["message"] for d in doc["diagnostics"])


def test_cli_scan_of_corpus_exit_0_no_traceback(corpus):
    # a real process: what a CI job sees (stderr included)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.run([sys.executable, "-m", "archaudit", "scan", str(corpus["root"]), "--format", "json", "-q"],
                       capture_output=True, text=True, env=env, timeout=300)
    assert "Traceback" not in p.stderr and "Traceback" not in p.stdout
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    # without a target no TU is preprocessed: only what reading and screening every file finds
    assert {(d["path"], d["kind"]) for d in doc["diagnostics"]} == {(p_, k) for p_, k, _ in EXPECTED_TREE - FOUND_BY_PREPROCESSING}


def test_file_vanishing_during_scan(corpus, monkeypatch, tmp_path):
    root = tmp_path / "t"
    shutil.copytree(REPO / "fixtures" / "pygates" / "gatepkg", root / "gatepkg")
    (root / "gatepkg" / "gone.py").write_text(make_corpus.TRIGGER)
    real_walk = sources.DirSource._walk

    def walk_then_delete(self):
        out = real_walk(self)
        (root / "gatepkg" / "gone.py").unlink()  # listed, then gone before it is read
        return out

    monkeypatch.setattr(sources.DirSource, "_walk", walk_then_delete)
    res = scan(root)
    assert [(d.path, d.kind) for d in res.diagnostics] == [("gatepkg/gone.py", "vanished")]
    monkeypatch.undo()
    assert _gate_rows(res, "gatepkg/") == _gate_rows(scan(corpus["clean"]), "gatepkg/")


def test_unreadable_file_by_permissions(tmp_path):
    if IS_ROOT:
        pytest.skip("running as root: chmod 000 does not stop reads (the simulated test covers the path)")
    (tmp_path / "m.py").write_text(make_corpus.TRIGGER)
    os.chmod(tmp_path / "m.py", 0)
    try:
        res = scan(tmp_path)
    finally:
        os.chmod(tmp_path / "m.py", 0o644)
    assert [(d.path, d.kind) for d in res.diagnostics] == [("m.py", "unreadable")]
    assert "Permission denied" in res.diagnostics[0].message


def test_unreadable_file_simulated(tmp_path, monkeypatch):
    (tmp_path / "m.py").write_text(make_corpus.TRIGGER)
    (tmp_path / "ok.py").write_text("import torch\nif torch.cuda.get_device_capability()[0] == 9:\n    x = 1\n")
    real_open = os.open

    def deny(path, flags, *a, **k):
        if str(path).endswith("m.py"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, flags, *a, **k)

    monkeypatch.setattr(sources.os, "open", deny)
    res = scan(tmp_path)
    assert [(d.path, d.kind, d.message) for d in res.diagnostics] == [("m.py", "unreadable", "cannot read: Permission denied")]
    assert [(g.path, g.line) for g in res.gates] == [("ok.py", 2)]


def test_reads_never_leave_the_root(corpus):
    src = sources.DirSource(corpus["root"])
    src.files()
    outside = corpus["root"].parent / (corpus["root"].name + "-outside.py")
    assert outside.exists()
    # neither the listed symlink nor a crafted relative path reads the outside file
    assert src.read("badpkg/outside.py") is None
    assert src.read("../" + outside.name) is None
    assert src.read("gatepkg/../../" + outside.name) is None
    assert not src.exists("../" + outside.name)
    kinds = {(d.path, d.kind) for d in src.diagnostics}
    assert ("../" + outside.name, "symlink-outside") in kinds


def test_fifo_read_does_not_block(corpus):
    src = sources.DirSource(corpus["root"])
    t0 = time.monotonic()
    assert src.read("badpkg/fifo.py") is None
    assert time.monotonic() - t0 < 2
    assert [(d.path, d.kind) for d in src.diagnostics] == [("badpkg/fifo.py", "not-a-file")]


def test_scan_root_that_is_not_a_file_or_dir(tmp_path):
    fifo = tmp_path / "p.whl"
    os.mkfifo(fifo)
    r = CliRunner().invoke(main, ["scan", str(fifo)])
    assert r.exit_code == 2 and "not a directory or a regular file" in r.output
    r = CliRunner().invoke(main, ["scan", str(tmp_path / "missing")])
    assert r.exit_code == 2 and "no such file or directory" in r.output


# --- wheels ---------------------------------------------------------------------------------

# wheel file -> (exit code, diagnostic (path, kind) or the usage-error text, gate path or None)
WHEELS = {
    "truncated-1.0-py3-none-any.whl": (2, "not a readable wheel (BadZipFile", None),
    "notzip-1.0-py3-none-any.whl": (2, "not a readable wheel (BadZipFile", None),
    "corrupt-1.0-py3-none-any.whl": (0, ("crcwhl/damaged.py", "corrupt-member"), "crcwhl/gate.py"),
    "bomb-1.0-py3-none-any.whl": (0, ("bombwhl/bomb.py", "too-large"), "bombwhl/gate.py"),
    "liar-1.0-py3-none-any.whl": (0, ("liarwhl/liar.py", "corrupt-member"), "liarwhl/gate.py"),
    "traversal-1.0-py3-none-any.whl": (0, ("../../etc/evil.py", "unsafe-member"), "travwhl/gate.py"),
    "duplicate-1.0-py3-none-any.whl": (0, ("dupwhl/gate.py", "duplicate-member"), "dupwhl/gate.py"),
    "record-1.0-py3-none-any.whl": (0, ("recwhl/missing.py", "record-missing"), "recwhl/gate.py"),
    "noversion-1.0-py3-none-any.whl": (0, ("nover-1.0.dist-info/METADATA", "missing-version"), "nover/gate.py"),
}


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    d = tmp_path_factory.mktemp("wheels")
    manifest = make_corpus.build_wheels(d)
    assert {b.path for b in manifest} == set(WHEELS)
    return d


@pytest.mark.parametrize("name", sorted(WHEELS))
def test_hostile_wheel(wheels, name):
    code, diag, gate = WHEELS[name]
    r = CliRunner().invoke(main, ["scan", str(wheels / name), "--format", "json"])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert "Traceback" not in r.output
    assert r.exit_code == code, r.output
    if code == 2:
        assert diag in r.output and name in r.output
        return
    doc = json.loads(r.output)
    assert tuple(diag) in {(d["path"], d["kind"]) for d in doc["diagnostics"]}
    # the good module next to the bad entry is still analysed: `if capability[0] == 9`
    assert [(g["path"], g["line"], g["admits"]) for g in doc["gates"]] == [(gate, 5, ["sm_90"])]


def test_wheel_details(wheels):
    w = sources.WheelSource(wheels / "traversal-1.0-py3-none-any.whl")
    assert sorted((d.path, d.kind) for d in w.diagnostics) == [
        ("../../etc/evil.py", "unsafe-member"), ("/abs/evil.py", "unsafe-member"),
        ("C:\\win\\evil.py", "unsafe-member"), ("travwhl/../../up.py", "unsafe-member")]
    assert not any(".." in f or f.startswith("/") for f in w.files())
    w = sources.WheelSource(wheels / "duplicate-1.0-py3-none-any.whl")
    assert b"get_device_capability" in w.read("dupwhl/gate.py")  # the last entry, as installed
    w = sources.WheelSource(wheels / "record-1.0-py3-none-any.whl")
    assert sorted((d.path, d.kind) for d in w.diagnostics) == [
        ("recwhl/also_missing.cu", "record-missing"), ("recwhl/missing.py", "record-missing")]


def test_wheel_total_inflation_budget(wheels, monkeypatch):
    path = wheels / "bomb-1.0-py3-none-any.whl"
    sizes = {i.filename: i.file_size for i in zipfile.ZipFile(path).infolist()}
    # RECORD (read when the wheel is opened) and gate.py fit, with 10 bytes to spare
    monkeypatch.setattr(sources, "MAX_WHEEL_TOTAL_BYTES", sizes["bombwhl-1.0.dist-info/RECORD"] + sizes["bombwhl/gate.py"] + 10)
    w = sources.WheelSource(path)
    assert w.read("bombwhl/gate.py") is not None  # the first read fits the budget...
    assert w.read("bombwhl-1.0.dist-info/METADATA") is None  # ...the next one does not fit what is left
    assert ("bombwhl-1.0.dist-info/METADATA", "too-large") in {(d.path, d.kind) for d in w.diagnostics}


def test_wheel_member_count_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "MAX_WHEEL_MEMBERS", 3)
    p = tmp_path / "many-1.0-py3-none-any.whl"
    p.write_bytes(make_corpus.good_wheel("many"))
    with pytest.raises(sources.SourceError, match="entries exceeds the limit of 3"):
        sources.WheelSource(p)


# --- CUDA side ------------------------------------------------------------------------------

# file -> (prediction, diagnostic kinds that must be present)
CUDA = {
    "unbalanced_if.cu": ("unknown", {"unbalanced-conditional"}),
    "stray_endif.cu": ("unknown", {"unbalanced-conditional"}),
    "include_cycle.cu": ("unknown", {"include-cycle"}),
    "self_macro.cu": ("builds", set()),
    "macro_bomb.cu": ("unknown", {"expansion-limit"}),
    "random.cu": ("unknown", {"binary-file"}),
    "deep_if.cu": ("unknown", {"expression-depth"}),
    "nested_args.cu": ("unknown", {"expansion-limit"}),
    "empty.cu": ("builds", set()),
}


@pytest.mark.parametrize("name", sorted(CUDA))
def test_cuda_command_on_bad_file(corpus, name):
    pred, kinds = CUDA[name]
    path = corpus["root"] / "badpkg" / "csrc" / name
    t0 = time.monotonic()
    r = CliRunner().invoke(main, ["cuda", str(path), "--target", "sm_120", "--format", "json"])
    assert time.monotonic() - t0 < 20
    assert "Traceback" not in r.output
    assert r.exit_code == (0 if pred == "builds" else 1), r.output
    doc = json.loads(r.output)
    assert doc["prediction"] == pred
    got = {d["kind"] for d in doc["diagnostics"] if d["severity"] != "note"}
    assert got == kinds
    if kinds:
        assert doc["reason"].startswith(sorted(kinds)[0]) or any(k in doc["reason"] for k in kinds) or "binary" in doc["reason"]


def test_cuda_self_macro_excludes_the_guarded_instruction(corpus):
    r = CliRunner().invoke(main, ["cuda", str(corpus["root"] / "badpkg/csrc/self_macro.cu"), "-t", "sm_120", "--format", "json"])
    doc = json.loads(r.output)
    assert [f["feature"] for f in doc["features"]] == []  # `#if PING || PONG` is 0, as nvcc says


def test_cuda_reader_does_not_follow_into_devices(tmp_path):
    # a header that is a symlink to /dev/zero would never end; a FIFO would block
    from archaudit.cuda.tu import FsReader

    (tmp_path / "z.cuh").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "f.cuh")
    (tmp_path / "k.cu").write_text('#include "z.cuh"\n#include "f.cuh"\n__global__ void k() {}\n')
    t0 = time.monotonic()
    r = CliRunner().invoke(main, ["cuda", str(tmp_path / "k.cu"), "-t", "sm_120", "--format", "json"])
    assert time.monotonic() - t0 < 20
    doc = json.loads(r.output)
    assert doc["prediction"] == "unknown"
    # not regular files: the resolver does not take them for headers, and the reader refuses them
    assert {(d["path"], d["kind"], d["line"]) for d in doc["diagnostics"]} == {
        ("k.cu", "unresolved-include", 1), ("k.cu", "unresolved-include", 2)}
    reader = FsReader(str(tmp_path))
    assert reader.read("z.cuh") is None and reader.read("f.cuh") is None
    assert {k: v[0] for k, v in reader.problems.items()} == {"z.cuh": "not-a-file", "f.cuh": "not-a-file"}


def test_runtime_check_scanner_on_bad_files(corpus):
    from archaudit.cuda.runtime_checks import scan_runtime_checks
    from archaudit.cuda.tu import FsReader

    reader = FsReader(str(corpus["root"]))
    files = sorted(f for f in reader.files("badpkg/csrc"))
    assert len(files) == 11
    t0 = time.monotonic()
    gates = scan_runtime_checks(reader, files)
    assert time.monotonic() - t0 < 20
    assert gates == []  # none of them holds a host-side check; none crashes it


# --- output safety and determinism ----------------------------------------------------------

def test_rich_markup_in_scanned_text_is_not_interpreted(tmp_path):
    # file names, expressions and METADATA come from the scanned files: "[/bold]" once made the
    # default table output fail with a MarkupError (exit 2)
    (tmp_path / "[red]").mkdir()
    (tmp_path / "[red]" / "m.py").write_text(
        'import torch\nif torch.cuda.get_device_capability() >= (9, 0) and X["[/bold]"]:\n    Y = 1\n')
    # --all: the gate admits sm_120, so only the full inventory shows its expression
    r = CliRunner(env={"COLUMNS": "400"}).invoke(main, ["scan", str(tmp_path), "-t", "sm_120", "--all"])
    assert r.exit_code == 0, r.output
    assert '"[/bold]"' in r.output and "[red]/m.py:2" in r.output
    info = tmp_path / "site" / "evil-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: [/x]evil\nVersion: [/y]1.0\n\n")
    (tmp_path / "site" / "evil.py").write_text("X = 1\n")  # a source, or there is nothing to audit (exit 2)
    r = CliRunner().invoke(main, ["scan", str(tmp_path / "site")])
    assert r.exit_code == 0, r.output
    assert "[/x]evil [/y]1.0: 0 gates" in r.output


def test_listing_order_does_not_change_the_json(corpus, monkeypatch, reg):
    import random

    first = to_json(scan(corpus["root"]), reg)
    real_scandir = os.scandir

    def shuffled(path):
        entries = list(real_scandir(path))
        random.Random(str(path)).shuffle(entries)
        entries.reverse()
        return iter(entries)

    monkeypatch.setattr(sources.os, "scandir", shuffled)
    assert to_json(scan(corpus["root"]), reg) == first


def test_cuda_command_on_oversized_file(tmp_path):
    big = tmp_path / "big.cu"
    with open(big, "wb") as f:
        f.write(b"__global__ void k() {}\n")
        f.truncate(sources.MAX_FILE_BYTES + 1)  # sparse: cheap to make
    r = CliRunner().invoke(main, ["cuda", str(big), "-t", "sm_120", "--format", "json"])
    assert r.exit_code == 1 and "Traceback" not in r.output
    doc = json.loads(r.output)
    assert doc["prediction"] == "unknown"
    assert [(d["path"], d["kind"]) for d in doc["diagnostics"]] == [("big.cu", "too-large")]


def test_broken_jit_source_makes_the_verdict_unresolved(tmp_path, reg):
    # hopper_gemm.cu is hardware-bound on sm_120 (wgmma); an unterminated #if makes nvcc reject
    # it on every target, so no hardware verdict may stand
    shutil.copytree(FIX / "verdicts", tmp_path / "v")
    with open(tmp_path / "v/kernlib/data/csrc/hopper_gemm.cu", "a") as f:
        f.write("#if 1\n")
    res = scan(tmp_path / "v", [reg.parse("sm_120")])
    got = {(f.gate.path, f.gate.line): (f.verdict, f.reason) for f in res.findings}
    why = ("hopper_gemm: kernlib/data/csrc/hopper_gemm.cu: unbalanced-conditional at kernlib/data/csrc/hopper_gemm.cu:11: "
           "#if without #endif (unterminated at the end of the file); nvcc rejects this file")
    assert got[("kernlib/gemm.py", 6)] == ("unresolved", why)
    assert got[("kernlib/jit/modules.py", 18)] == ("unresolved", why)
    assert got[("kernlib/jit/modules.py", 23)][0] == "software-only"  # other modules unaffected


def test_memory_stays_bounded_on_huge_inputs(wheels, tmp_path):
    import tracemalloc

    with open(tmp_path / "huge.py", "wb") as f:
        f.write(make_corpus.TRIGGER.encode())
        f.truncate(50 << 20)  # sparse: 50 MB on paper
    tracemalloc.start()
    try:
        res = scan(tmp_path)
        res_w = scan(wheels / "bomb-1.0-py3-none-any.whl")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [(d.path, d.kind) for d in res.diagnostics] == [("huge.py", "too-large")]
    assert ("bombwhl/bomb.py", "too-large") in {(d.path, d.kind) for d in res_w.diagnostics}
    assert peak < 16 << 20, peak  # neither the 50 MB file nor the 256 MiB member was loaded


def test_sarif_lists_every_bad_file_as_a_tool_notification(corpus):
    from urllib.parse import unquote

    r = CliRunner().invoke(main, ["scan", str(corpus["root"]), "-t", "sm_120", "--format", "sarif"])
    assert r.exit_code == 0 and "Traceback" not in r.output
    (run,) = json.loads(r.output)["runs"]
    got = set()
    for n in run["invocations"][0]["toolExecutionNotifications"]:
        if "locations" not in n:  # run-level notes (e.g. files not scanned by design)
            continue
        loc = n["locations"][0]["physicalLocation"]
        got.add((unquote(loc["artifactLocation"]["uri"]), n["descriptor"]["id"], loc.get("region", {}).get("startLine")))
    assert got == EXPECTED_TREE
