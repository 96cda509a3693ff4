"""Issue 26 items 3-7 and issue 29 items 3b and 7: hostile inputs to the preprocessor, the Python
reader, the file system walk and the terminal. Each case asserts the exact outcome (diagnostic
kind, file and line, exit code, the gates beside it), and bombs a bound on time and memory: they
run in a process of their own under RLIMIT_AS (1.5 GiB: the analysis thread alone reserves a
512 MiB stack) whose peak RSS (with its workers') is read back from wait4. Large inputs are generated here; the small
ones are the fixture package fixtures/hostile/hostpkg (see its README)."""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from archaudit.cli import main

REPO = Path(__file__).resolve().parent.parent
HOST = REPO / "fixtures" / "hostile"
GATEPKG = REPO / "fixtures" / "pygates" / "gatepkg"
CSRC = HOST / "hostpkg" / "csrc"
WGMMA = '  asm volatile("wgmma.fence.sync.aligned;");\n'
GATE_PY = "import torch\n\n\ndef pick():\n    if torch.cuda.get_device_capability()[0] == 9:\n        return 1\n    return 0\n"
# what a bomb may take: the targets of issue 26 (10 s, 500 MB), with room for a loaded CI machine
MAX_SECONDS = 60
MAX_RSS_MB = 500
AS_LIMIT = 3 << 29  # 1.5 GiB


# The command runs as the grandchild of pytest, under a small Python that forks it: a process
# forked from pytest itself starts with pytest's resident pages, and Linux carries that high-water
# mark into ru_maxrss across exec, so the measure would be pytest's size, not the scan's.
_MEASURE = r"""
import json, os, resource, signal, sys
report, limit, seconds, args = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
pid = os.fork()
if pid == 0:
    os.close(report)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    os.execv(sys.executable, [sys.executable, "-c", "from archaudit.cli import run; run()", *args])
signal.signal(signal.SIGALRM, lambda *_: os.kill(pid, signal.SIGKILL))
signal.setitimer(signal.ITIMER_REAL, seconds)
while True:
    try:
        _, status, ru = os.wait4(pid, 0)
        break
    except InterruptedError:
        continue
signal.setitimer(signal.ITIMER_REAL, 0)
os.write(report, json.dumps([os.waitstatus_to_exitcode(status), ru.ru_maxrss]).encode())
"""


def run_bounded(*args: str, cwd=None) -> tuple[int, str, str, float, float]:
    """archaudit ARGS in a process of its own: (exit code, stdout, stderr, seconds, peak RSS in MB)."""
    out, err, report = io.BytesIO(), io.BytesIO(), io.BytesIO()
    rfd, wfd = os.pipe()
    t0 = time.monotonic()
    p = subprocess.Popen([sys.executable, "-c", _MEASURE, str(wfd), str(AS_LIMIT), str(MAX_SECONDS * 3), *args], cwd=cwd,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(wfd,), env=dict(os.environ, PYTHONPATH=str(REPO)))
    os.close(wfd)
    with os.fdopen(rfd, "rb") as measure:
        readers = [threading.Thread(target=lambda s=s, b=b: b.write(s.read()))
                   for s, b in ((p.stdout, out), (p.stderr, err), (measure, report))]
        for r in readers:
            r.start()
        p.wait()
        for r in readers:
            r.join()
    code, maxrss_kb = json.loads(report.getvalue())
    return (code, out.getvalue().decode("utf-8", "replace"), err.getvalue().decode("utf-8", "replace"),
            time.monotonic() - t0, maxrss_kb / 1024)


def bounded(seconds: float, rss: float) -> None:
    assert seconds < MAX_SECONDS, f"took {seconds:.1f} s"
    assert rss < MAX_RSS_MB, f"peak RSS {rss:.0f} MB"


def cuda(path: Path, target: str = "sm_120") -> tuple[int, dict]:
    r = CliRunner().invoke(main, ["cuda", str(path), "--target", target, "--format", "json"])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.output
    return r.exit_code, json.loads(r.output)


def diags(d: dict) -> set[tuple[str, str, int | None]]:
    return {(x["path"], x["kind"], x.get("line")) for x in d["diagnostics"] if x["severity"] != "note"}


def scan_json(root: Path, *extra: str) -> dict:
    r = CliRunner().invoke(main, ["scan", str(root), "-t", "sm_120", "--format", "json", "-q", "--no-cache", *extra])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def gate_rows(doc: dict, prefix: str) -> list[tuple]:
    return [(g["path"], g["line"], g["col"], g["kind"], g["expr"]) for g in doc["gates"] if g["path"].startswith(prefix)]


@pytest.fixture(scope="module")
def clean_gatepkg(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("clean")
    shutil.copytree(GATEPKG, root / "gatepkg")
    return scan_json(root)


def beside_gatepkg(tmp_path: Path) -> Path:
    """A scan root holding a copy of the gates fixture, next to which a hostile input is put."""
    shutil.copytree(GATEPKG, tmp_path / "gatepkg")
    return tmp_path


# --- preprocessor ------------------------------------------------------------------------------

EXPANSION = "expansion-limit"
# hostile TU -> (diagnostics with severity above note, as (path, kind, line)); prediction: unknown
BOMBS = {
    "fbomb.cu": {("hostpkg/csrc/fbomb.cu", EXPANSION, 32)},
    "fnest.cu": {("hostpkg/csrc/fnest.cu", EXPANSION, 3)},
    # the budget of the whole walk runs out at an #include of the eighth level
    "inc_bomb.cu": {("hostpkg/csrc/ibomb/l7.h", EXPANSION, 8)},
    # fresh case: a computed #include whose macro is a bomb
    "include_macro_bomb.cu": {("hostpkg/csrc/include_macro_bomb.cu", EXPANSION, 32),
                              ("hostpkg/csrc/include_macro_bomb.cu", "computed-include", 32)},
}


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_preprocessor_bombs_end_undecided_with_their_diagnostic(name):
    code, d = cuda(CSRC / name)
    assert code == 1 and d["prediction"] == "unknown"
    assert diags(d) == BOMBS[name]
    first = sorted(BOMBS[name], key=lambda x: x[1] != EXPANSION)[0]
    assert d["reason"].startswith(f"{EXPANSION} at {first[0]}:{first[2]}: ")


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_preprocessor_bombs_are_bounded_in_time_and_memory(name):
    code, out, err, seconds, rss = run_bounded("cuda", str(CSRC / name), "-t", "sm_120", "--format", "json")
    assert code == 1, err
    assert json.loads(out)["prediction"] == "unknown"
    bounded(seconds, rss)


# files nvcc reads as guarded by `__CUDA_ARCH__ == 900` that the lexer misread: the wgmma line
# must be active code for sm_90a and excluded for sm_120 (a misread gave a false fails or a
# false unbalanced-conditional, or left it undecided)
MISREAD = {"digraph.cu": 4, "splice.cu": 5, "comment_if.cu": 5, "bom.cu": 3, "continued.cu": 5}


@pytest.mark.parametrize("name", sorted(MISREAD))
def test_lexer_reads_the_guard_as_nvcc_does(name):
    code, d = cuda(CSRC / name, "sm_120")
    assert (code, d["prediction"], d["diagnostics"], d["features"]) == (0, "builds", [], [])
    code, d = cuda(CSRC / name, "sm_90a")
    assert code == 0 and d["diagnostics"] == []
    assert [(f["path"], f["line"], f["feature"], f["certain"]) for f in d["features"]] == [
        (f"hostpkg/csrc/{name}", MISREAD[name], "ptx.wgmma", True)]


def test_absolute_include_is_never_read_and_reported():
    code, d = cuda(CSRC / "abs_include.cu")
    assert diags(d) == {("hostpkg/csrc/abs_include.cu", "absolute-include", 2)}
    # it may define anything: the condition that reads it is undecided, not false
    assert code == 1 and d["prediction"] == "unknown"
    assert d["reason"].startswith("cannot resolve #include '/etc/shadow'; then ptx.wgmma at hostpkg/csrc/abs_include.cu:5")


def test_scan_of_hostile_package_beside_good_one(tmp_path, clean_gatepkg):
    root = beside_gatepkg(tmp_path)
    shutil.copytree(HOST / "hostpkg", root / "hostpkg")
    code, out, err, seconds, rss = run_bounded("scan", str(root), "-t", "sm_120", "--format", "json", "-q", "--no-cache")
    assert code == 0, err
    bounded(seconds, rss)
    doc = json.loads(out)
    assert {(x["path"], x["kind"], x.get("line")) for x in doc["diagnostics"]} == {
        ("hostpkg/csrc/fbomb.cu", EXPANSION, 32), ("hostpkg/csrc/fnest.cu", EXPANSION, 3),
        ("hostpkg/csrc/ibomb/l7.h", EXPANSION, 8), ("hostpkg/csrc/include_macro_bomb.cu", EXPANSION, 32),
        ("hostpkg/csrc/abs_include.cu", "absolute-include", 2)}
    assert gate_rows(doc, "gatepkg/") == gate_rows(clean_gatepkg, "gatepkg/")
    got = {(f["gate"]["path"], f["gate"]["line"]): f for f in doc["findings"] if f["gate"]["path"].startswith("hostpkg/")}
    assert {k: f["verdict"] for k, f in got.items()} == {
        ("hostpkg/jit.py", 21): "unresolved", ("hostpkg/jit.py", 27): "software-only",
        ("hostpkg/jit.py", 33): "unresolved", ("hostpkg/my-script.py", 4): "no-gpu-code"}
    assert got[("hostpkg/jit.py", 21)]["reason"].startswith(f"hostpkg_bombs: hostpkg/csrc/fbomb.cu: {EXPANSION} at ")
    assert "cannot resolve #include '/etc/shadow'" in got[("hostpkg/jit.py", 33)]["reason"]


def test_fifo_included_by_a_tu_is_never_opened(tmp_path):
    # fresh case (file system): a FIFO inside the tree named by an #include; opening it would block
    pkg = tmp_path / "fpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    os.mkfifo(pkg / "fifo.h")
    (pkg / "k.cu").write_text('#include "fifo.h"\n__global__ void k() {\n#if __CUDA_ARCH__ == 900\n' + WGMMA + "#endif\n}\n")
    code, out, err, seconds, rss = run_bounded("cuda", str(pkg / "k.cu"), "-t", "sm_120", "--format", "json")
    assert seconds < 30
    d = json.loads(out)
    # nvcc would block on it: no verdict stands
    assert code == 1 and d["prediction"] == "unknown"
    assert d["reason"] == "not-a-file at fpkg/fifo.h:1: fpkg/fifo.h is not a regular file; not read"
    assert diags(d) == {("fpkg/fifo.h", "unreadable", 1), ("fpkg/fifo.h", "not-a-file", 1)}


def test_cuda_command_on_a_fifo_says_what_it_is(tmp_path):
    os.mkfifo(tmp_path / "k.cu")
    r = CliRunner().invoke(main, ["cuda", str(tmp_path / "k.cu"), "-t", "sm_120"])
    assert r.exit_code == 2 and "not a regular file" in r.output and "no such file" not in r.output
    r = CliRunner().invoke(main, ["cuda", str(tmp_path / "none.cu"), "-t", "sm_120"])
    assert r.exit_code == 2 and "no such file" in r.output


# --- oversized lines ---------------------------------------------------------------------------


def test_15_mib_one_line_if(tmp_path):
    line = "#if " + " || ".join(["1"] * (15 * 1024 * 1024 // 5)) + "\n#endif\n"
    f = tmp_path / "longif.cu"
    f.write_text(line + "__global__ void k() {\n#if __CUDA_ARCH__ == 900\n" + WGMMA + "#endif\n}\n")
    assert f.stat().st_size > 15 * 1024 * 1024
    code, out, err, seconds, rss = run_bounded("cuda", str(f), "-t", "sm_120", "--format", "json")
    bounded(seconds, rss)
    d = json.loads(out)
    assert code == 1 and d["prediction"] == "unknown" and diags(d) == {("longif.cu", EXPANSION, 1)}
    # the guard after it is still read
    assert [(g["line"], g["active"]) for g in d["active_guards"]] == [(4, False)]


@pytest.mark.parametrize("shape", ["one line", "short lines"])
def test_4_mib_python_list_is_too_large(tmp_path, clean_gatepkg, shape):
    # "short lines" is the fresh case: the cost is tokens, which a per-line cap would not see
    root = beside_gatepkg(tmp_path)
    sep = ", " if shape == "one line" else ",\n"
    body = "X = [" + sep.join(["1"] * (4 * 1024 * 1024 // 3 - 40)) + "]\n"
    (root / "gatepkg" / "big.py").write_text(GATE_PY + body)
    assert (root / "gatepkg" / "big.py").stat().st_size <= 4 * 1024 * 1024
    code, out, err, seconds, rss = run_bounded("scan", str(root), "-t", "sm_120", "--format", "json", "-q", "--no-cache")
    assert code == 0, err
    bounded(seconds, rss)
    doc = json.loads(out)
    assert [(x["path"], x["kind"]) for x in doc["diagnostics"]] == [("gatepkg/big.py", "too-large")]
    assert "more than 1000000 tokens" in doc["diagnostics"][0]["message"]
    assert gate_rows(doc, "gatepkg/") == gate_rows(clean_gatepkg, "gatepkg/")


# --- Python reader -----------------------------------------------------------------------------


def test_long_elif_chain(tmp_path):
    # 4,500 branches nest 4,500 deep in the IR (an elif is an if in the orelse)
    src = "import torch\n\ncap = torch.cuda.get_device_capability()[0]\nif cap == 9:\n    mode = 0\n"
    src += "".join(f"elif cap == {i}:\n    mode = {i}\n" for i in range(100, 4600))
    pkg = tmp_path / "epkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "chain.py").write_text(src)
    doc = scan_json(tmp_path)
    # the module's evaluation stops at its step budget after the first branch: bounded, and said
    assert [(x["path"], x["kind"]) for x in doc["diagnostics"]] == [("epkg/chain.py", "analysis-budget")]
    assert [(g["path"], g["line"], g["kind"]) for g in doc["gates"]] == [("epkg/chain.py", 4, "capability-compare")]


def test_flatten_top_is_iterative_and_in_source_order():
    from archaudit.parsing.python_ir import parse_python
    from archaudit.python.index import _statement_lists, flatten_top

    src = b"a = 1\nif x:\n    b = 2\n    if y:\n        c = 3\nelif z:\n    d = 4\nelse:\n    e = 5\ntry:\n    f = 6\nexcept E:\n    g = 7\nh = 8\n"
    body = parse_python(src).body
    names = [st.line for st in flatten_top(body)]
    assert names == [1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 13, 14]
    assert [len(s) for s in _statement_lists(body)][:3] == [4, 2, 1]
    deep = b"if c == 0:\n    m = 0\n" + b"".join(b"elif c == %d:\n    m = %d\n" % (i, i) for i in range(1, 6000))
    body = parse_python(deep).body
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)  # far below the chain's depth
    try:
        assert len(list(flatten_top(body))) == 6000 * 2
        assert len(list(_statement_lists(body))) == 1 + 6000 * 2  # the body, and each if's body and orelse
    finally:
        sys.setrecursionlimit(old)


@pytest.mark.parametrize("name", ["my-script.py", "sp ace.py", "9lives.py"])
def test_script_that_is_not_a_module_name_is_analysed(tmp_path, name):
    pkg = tmp_path / "spkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / name).write_text(GATE_PY)
    doc = scan_json(tmp_path)
    assert doc["diagnostics"] == []
    assert [(g["path"], g["line"], g["kind"]) for g in doc["gates"]] == [(f"spkg/{name}", 5, "capability-compare")]


def test_cr_only_line_ends(tmp_path):
    pkg = tmp_path / "crpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_bytes(b"")
    (pkg / "m.py").write_bytes(GATE_PY.replace("\n", "\r").encode())
    doc = scan_json(tmp_path)
    assert [(g["path"], g["line"]) for g in doc["gates"]] == [("crpkg/m.py", 5)]
    (pkg / "k.cu").write_bytes(("// old Mac line ends\n__global__ void k() {\n#if __CUDA_ARCH__ == 900\n" + WGMMA
                                + "#endif\n}\n").replace("\n", "\r").encode())
    code, d = cuda(pkg / "k.cu", "sm_90a")
    assert [(f["line"], f["feature"]) for f in d["features"]] == [(4, "ptx.wgmma")]
    assert [(g["line"], g["active"]) for g in d["active_guards"]] == [(3, True)]


@pytest.mark.parametrize("coding,why", [
    ("made-up", "declares the unknown encoding 'made-up'; Python refuses to load it"),
    ("rot13", "declares 'rot13', which is not a text encoding; Python refuses to load it"),
])
def test_made_up_coding_declaration(tmp_path, coding, why):
    pkg = tmp_path / "cpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "m.py").write_text(f"# -*- coding: {coding} -*-\n" + GATE_PY)
    (pkg / "ok.py").write_text("# -*- coding: latin-1 -*-\n" + GATE_PY)  # a real one: analysed
    doc = scan_json(tmp_path)
    assert [(x["path"], x["kind"], x["message"]) for x in doc["diagnostics"]] == [
        ("cpkg/m.py", "unreadable-source", f"skipped: {why}")]
    assert [(g["path"], g["line"]) for g in doc["gates"]] == [("cpkg/ok.py", 6)]


# --- output ------------------------------------------------------------------------------------

FORGED = "d\nFORGED:1:1: sm_120: hardware-bound: forged"
HOSTILE_NAMES = [
    FORGED,
    "\x1b[31mred\x1b[0m",  # SGR: recolours the terminal
    "\x1b]8;;https:evil.example\x07link\x1b]8;;\x07",  # OSC 8: a hyperlink
    "x[/red]y",  # rich markup: MarkupError
    "[link=https://evil.example/]a",  # rich markup: a hyperlink
    "\u202eevil",  # fresh case: a bidirectional override reorders what the terminal shows
]


@pytest.fixture(scope="module")
def hostile_names_scan(tmp_path_factory):
    root = tmp_path_factory.mktemp("names")
    for i, name in enumerate(HOSTILE_NAMES):
        d = root / f"p{i}" / name
        d.mkdir(parents=True)
        (d / "m.py").write_text(GATE_PY)
    # a JIT module whose source (and evidence line) is named with rich markup
    shutil.copytree(GATEPKG, root / "gatepkg")
    return root


def _escaped(name: str) -> str:
    from archaudit.report.shown import shown

    return shown(name)


def test_text_format_escapes_every_name(hostile_names_scan):
    code, out, err, seconds, rss = run_bounded("scan", str(hostile_names_scan), "-t", "sm_120", "--format", "text", "-q",
                                               "--no-cache")
    assert code == 0, err
    lines = out.splitlines()
    assert not [ln for ln in lines if ln.startswith("FORGED")]
    assert "\x1b" not in out and "\u202e" not in out and "\x07" not in out
    for i, name in enumerate(HOSTILE_NAMES):
        assert any(ln.startswith(f"p{i}/{_escaped(os.path.normpath(name))}/m.py:5:") for ln in lines), name
    assert f"p0/d\\nFORGED:1:1: sm_120: hardware-bound: forged/m.py:5:" in out


def test_table_format_shows_names_as_written(hostile_names_scan):
    from rich.console import Console

    from archaudit.pipeline import scan
    from archaudit.report.text import render_table
    from archaudit.targets import registry

    reg = registry()
    res = scan(hostile_names_scan, [reg.parse("sm_120")], reg, cache=False)
    buf = io.StringIO()
    render_table(res, reg, Console(file=buf, force_terminal=True, width=400, color_system="truecolor"))
    out = buf.getvalue()
    assert "\x1b]8;" not in out and "evil.example\x07" not in out  # no hyperlink planted
    assert "FORGED" in out and "\u202e" not in out
    plain = Console(file=io.StringIO(), width=400)
    render_table(res, reg, plain)
    text = plain.file.getvalue()
    assert "x[/red]y" in text and "[link=https:/evil.example/]a" in text and "\\x1b[31mred" in text
    assert not [ln for ln in text.splitlines() if ln.startswith("FORGED")]


def test_table_format_default_command(hostile_names_scan):
    # the default format, as a user runs it (rich's MarkupError ended it before)
    code, out, err, seconds, rss = run_bounded("scan", str(hostile_names_scan), "-t", "sm_120", "-q", "--no-cache")
    assert code == 0 and "Traceback" not in err and "MarkupError" not in err
    assert "x[/red]y" in out and "\x1b" not in out


def test_findings_table_with_markup_in_evidence_path(tmp_path):
    # the evidence column of the findings table printed source paths as markup
    from rich.console import Console

    from archaudit.pipeline import scan
    from archaudit.report.text import render_table
    from archaudit.targets import registry

    shutil.copytree(HOST / "hostpkg", tmp_path / "hostpkg", ignore=shutil.ignore_patterns("ibomb", "*bomb*.cu"))
    src = tmp_path / "hostpkg" / "csrc"
    (src / "x[").mkdir()
    (src / "x[/red]y.cu").write_text("__global__ void k() {\n" + WGMMA + "}\n")
    jit = (tmp_path / "hostpkg" / "jit.py").read_text().replace('CSRC / "abs_include.cu"', 'CSRC / "x[/red]y.cu"')
    (tmp_path / "hostpkg" / "jit.py").write_text(jit)
    reg = registry()
    res = scan(tmp_path, [reg.parse("sm_120")], reg, cache=False)
    f = next(f for f in res.findings if f.gate.line == 33)
    assert f.verdict == "hardware-bound" and f.evidence[0].path == "hostpkg/csrc/x[/red]y.cu"
    con = Console(file=io.StringIO(), width=400)
    render_table(res, reg, con)
    assert "hostpkg/csrc/x[/red]y.cu:2 ptx.wgmma" in con.file.getvalue()


def test_cuda_command_text_escapes(tmp_path):
    f = tmp_path / "\x1b[31mred.cu"
    f.write_text("__global__ void k() {\n" + WGMMA + "}\n")
    r = CliRunner().invoke(main, ["cuda", str(f), "-t", "sm_120"])
    assert r.exit_code == 1 and "\x1b" not in r.output and "at \\x1b[31mred.cu:2 is not supported" in r.output


# --- command line ------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [["scan", "--format", "json"], ["scan", "--format", "text"], ["baseline"],
                                  ["patch"], ["explain", "gatepkg/utils.py:24"]])
def test_output_into_missing_directory_is_a_usage_error_before_the_scan(tmp_path, monkeypatch, args):
    import archaudit.pipeline as pipeline

    def no_scan(*a, **k):
        raise AssertionError("the scan ran")

    monkeypatch.setattr(pipeline, "scan", no_scan)
    root = beside_gatepkg(tmp_path)
    cmd = [args[0], str(root), *args[1:]] if args[0] != "explain" else ["explain", str(root), args[1]]
    if args[0] != "explain":
        cmd += ["-t", "sm_120"]
    r = CliRunner().invoke(main, [*cmd, "-o", str(tmp_path / "missing" / "out.txt")])
    assert r.exit_code == 2, r.output
    assert "does not exist" in r.output


def test_rules_verify_text_is_not_markup(capsys, monkeypatch):
    # what the toolchain says is shown as written, never as rich markup or escape sequences
    from types import SimpleNamespace as NS

    from archaudit.cli.rules import _print_text

    monkeypatch.setenv("COLUMNS", "300")
    f = NS(kind="mismatch", subject="ptx.x[/red]", message="bad\x1b[31m\nsecond line", details={},
           data_only=["[link=https:evil]a"], toolchain_only=[])
    rep = NS(toolchain=NS(version="13.0"), skipped={"r[/b]": "why\x1b]8;;x\x07"}, findings=[f], ok=False,
             checked_rules=[1], checked_targets=[1], probes=1, cache_hits=0, seconds=1.0)
    _print_text(rep)
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "r[/b]: why\\x1b]8;;x\\x07" in out and "ptx.x[/red]" in out and "[link=https:evil]a" in out
    assert "bad\\x1b[31m" in out and "second line" in out


@pytest.mark.real
def test_real_tus_stay_well_inside_the_preprocessing_budgets(sp072, reg, monkeypatch):
    # the two TUs of flashinfer 0.7.2 whose walks take the most work (CUTLASS included)
    from archaudit.cuda import preproc
    from archaudit.cuda.tu import CudaProject
    from archaudit.sources import SourceReader, open_source

    spent_by_condition = []
    real_expand = preproc.Preprocessor.expand

    def expand(self, toks, keep_names=False):
        start = min(preproc.MAX_EXPANSION_WORK, self._tu_left)
        try:
            return real_expand(self, toks, keep_names)
        finally:
            spent_by_condition.append(start - self._left)

    monkeypatch.setattr(preproc.Preprocessor, "expand", expand)
    src = open_source(sp072)
    files = src.files()
    reader = SourceReader(src)
    proj = CudaProject(reader, CudaProject.discover_include_roots(files, reader), files=files)
    target = reg.compile_target(reg.parse("sm_120"))
    for rel in ("flashinfer/data/csrc/fmhaReduction.cu",
                "flashinfer/data/csrc/fused_moe/trtllm_backend/trtllm_fused_moe_dev_kernel.cu"):
        pr, pp = proj.preprocess(rel, target)
        assert not [d for d in pr.diagnostics if d.kind == EXPANSION], rel
        assert preproc.MAX_TU_WORK - pp._tu_left < preproc.MAX_TU_WORK // 3, rel
        assert len(pr.files) > 700
    assert max(spent_by_condition) < preproc.MAX_EXPANSION_WORK // 10


# --- fresh cases of issue 29's last round: Python, preprocessor ------------------------------------

def _class_chain(root: Path, n: int, method: str, diamonds: bool = False) -> None:
    """C0 defines `method` (a capability test); n classes inherit it one from the other (or
    through diamonds: each level two classes on the same pair below); Leaf.run tests it."""
    lines = ["import torch", "", "class C0:", f"    def {method}(self):",
             "        return torch.cuda.get_device_capability()[0] == 9", ""]
    for i in range(1, n):
        if diamonds:
            lines += [f"class L{i}(C{i - 1}):", "    pass", "", f"class R{i}(C{i - 1}):", "    pass", "",
                      f"class C{i}(L{i}, R{i}):", "    pass", ""]
        else:
            lines += [f"class C{i}(C{i - 1}):", "    pass", ""]
    lines += [f"class Leaf(C{n - 1}):", "    def run(self):", f"        if self.{method}():", "            return 1",
              "        return 0", ""]
    pkg = root / "cpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "deep.py").write_text("\n".join(lines))
    (pkg / "gate.py").write_text(GATE_PY)


def test_gate_through_15_base_classes_is_found(tmp_path):
    # the evaluation followed 10 levels of bases: a method 15 classes up was not found, and the
    # gate testing it was lost without a word
    _class_chain(tmp_path, 15, "check")
    doc = scan_json(tmp_path)
    assert [(g["path"], g["line"], g["resolution"]) for g in doc["gates"]] == [
        ("cpkg/deep.py", 51, "inferred: cpkg.deep.C0.check"),
        ("cpkg/gate.py", 5, "evaluated: capability-source torch.cuda.get_device_capability")]
    assert doc["diagnostics"] == []


def test_gate_past_the_base_class_bound_is_said_missing(tmp_path):
    from archaudit.python.interp import MAX_MRO_DEPTH

    n = MAX_MRO_DEPTH + 6
    _class_chain(tmp_path, n, "check")
    doc = scan_json(tmp_path)
    assert [(g["path"], g["line"]) for g in doc["gates"]] == [("cpkg/gate.py", 5)]
    assert [(d["path"], d["kind"], d["line"], d["message"]) for d in doc["diagnostics"]] == [
        ("cpkg/deep.py", "analysis-budget", 3 * n + 4,
         f"class Leaf: bases more than {MAX_MRO_DEPTH} levels up are not followed; a gate reading a member defined "
         f"there is missing")]


@pytest.mark.parametrize("shape", ["chain", "diamonds"])
def test_deep_class_hierarchy_is_bounded(tmp_path, shape):
    # 3,000 classes in a chain took 25 s of CPU (the call graph's MRO: a list membership test per
    # class per level, O(n^3)); 80 levels of diamonds have 2^80 paths, each class is listed once; a member past
    # the bound is unresolved ("depth-limit"), the gate by its name rule still found
    from archaudit.callgraph.resolve import MAX_MRO_CLASSES

    n = 3000 if shape == "chain" else 80
    _class_chain(tmp_path, n, "is_hopper", diamonds=shape == "diamonds")
    code, out, err, seconds, rss = run_bounded("scan", str(tmp_path), "-t", "sm_120", "--format", "json", "-q",
                                               "--no-cache")
    assert code == 0, err
    bounded(seconds, rss)
    doc = json.loads(out)
    leaf = 6 + (3 if shape == "chain" else 9) * (n - 1) + 3
    got = {(f["gate"]["path"], f["gate"]["line"]): f for f in doc["findings"]}
    assert sorted(got) == [("cpkg/deep.py", leaf), ("cpkg/gate.py", 5)]
    assert next(g for g in doc["gates"] if g["path"] == "cpkg/deep.py")["resolution"].startswith("name-rule")
    if shape == "chain":
        assert (f"a call archaudit could not resolve (depth-limit: cpkg.deep.Leaf: is_hopper not found in its first "
                f"{MAX_MRO_CLASSES} base classes, the others not followed)") in got[("cpkg/deep.py", leaf)]["reason"]


@pytest.mark.parametrize("directive", ["#if __LINE__ == 1", "#line 900\n#if __LINE__ == 900"])
def test_line_macro_in_a_condition_is_not_an_undefined_name(tmp_path, directive):
    # __LINE__ read as an undefined name (0): the wgmma line looked excluded and the file was
    # said to build on sm_120, where nvcc compiles it and fails
    f = tmp_path / "k.cu"
    f.write_text(f"{directive}\n{WGMMA}#endif\n")
    code, d = cuda(f)
    line = directive.count("\n") + 2
    assert (code, d["prediction"], d["diagnostics"]) == (1, "unknown", [])
    assert d["reason"] == f"ptx.wgmma at k.cu:{line} is under a condition that could not be decided"
    f.write_text(f"#ifdef __LINE__\n{WGMMA}#endif\n")  # defined, as in every C preprocessor
    code, d = cuda(f)
    assert (code, d["prediction"]) == (1, "fails")
