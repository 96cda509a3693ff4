"""The performance machinery keeps results exact: bounded IR memory (eviction and re-parse), the
prefilter facts computed in worker processes, the CLI options and the quiet progress output."""
import json
import shutil

from click.testing import CliRunner

from archaudit import scancache
from archaudit.cli import main
from archaudit.pipeline import scan
from archaudit.progress import scan_progress

from conftest import FIXTURES


def _key(r):
    return (r.gates, r.diagnostics, r.findings, {k: v for k, v in r.stats.items() if k != "seconds"})


def test_ir_eviction_gives_identical_results(monkeypatch):
    base = scan(FIXTURES / "pygates")
    # evict everything but the module just parsed
    monkeypatch.setattr("archaudit.pipeline.IR_BUDGET", 1)
    r = scan(FIXTURES / "pygates")
    assert _key(r) == _key(base)
    assert r.work["parses"] > base.work["parses"]  # it did re-parse
    assert r.work["modules_parsed"] == base.work["modules_parsed"] == base.stats["python_modules_parsed"]


def test_worker_facts_equal_in_process_facts(monkeypatch):
    from archaudit.python.gates import byte_facts

    monkeypatch.setattr(scancache, "PARALLEL_MIN_BYTES", 0)
    root = FIXTURES / "pygates"
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*.py"))
    facts = scancache.prefilter_in_workers(str(root), files, 2, None)
    assert facts == {p: byte_facts((root / p).read_bytes()) for p in files}
    assert facts["gatepkg/features.py"][0] is True


def test_prefilter_trigger_read_from_the_words_as_from_the_bytes():
    """byte_facts looks for the in-word triggers in the file's words: the same answer as the
    whole pattern over the bytes, at a word's end, inside a word and across non-word bytes."""
    from archaudit.python.gates import byte_facts, trigger_pattern

    cases = [b"x = is_sm90_supported()", b"if xis_sm9:", b"is_sm", b"is_smx9", b"get_device_sm",
             b"props.device_sm\n", b"device_sm_count", b"device_sm9", b"nvcc --gpu-arch=compute_90",
             b"arch = compute_90", b"-gencode", b"flags = extra_cuda_cflags", b"# sm_version", b"smversion"]
    got = [byte_facts(c)[0] for c in cases]
    assert got == [trigger_pattern().search(c) is not None for c in cases]
    assert got == [True, True, False, False, True, True, False, False, True, False, True, True, True, False]


def test_words_of_is_the_word_pattern():
    """words_of splits at C speed what WORD.findall finds: every byte value next to a word byte,
    runs of non-word bytes (blanks, non-ASCII, NUL), and every fixture file."""
    from archaudit.parsing.words import WORD, words_of

    every = bytes(range(256))
    cases = [every, every[::-1], b"".join(bytes((b,)) + b"a_1" for b in range(256)), b"", b" \t\n", b"x",
             "é_x ÿ9".encode(), b"\x00ab\x1cc\x85d", b"12ab __x__ a.b(c)"]
    cases += [p.read_bytes() for p in sorted(FIXTURES.rglob("*.py"))]
    for c in cases:
        assert words_of(c) == set(WORD.findall(c)), c[:40]
    assert words_of(b"a\x1cb\xa0c") == {b"a", b"b", b"c"}


def test_cli_cache_and_workers_options(tmp_path, monkeypatch):
    tree = tmp_path / "t"
    shutil.copytree(FIXTURES / "pygates", tree)
    monkeypatch.setenv("ARCHAUDIT_CACHE_DIR", str(tmp_path / "c"))
    runner = CliRunner()
    outs = []
    for extra in ([], [], ["--no-cache", "--workers", "1"], ["--workers", "2"]):
        r = runner.invoke(main, ["scan", str(tree), "--format", "json", "-q", *extra])
        assert r.exit_code == 0, r.output
        outs.append(json.loads(r.output))
    assert all(o["gates"] == outs[0]["gates"] and o["stats"] == outs[0]["stats"] for o in outs)
    assert len(outs[0]["gates"]) == len(scan(FIXTURES / "pygates").gates) > 0
    assert any(p.name.startswith("scan-") for p in (tmp_path / "c").iterdir())
    r = runner.invoke(main, ["scan", str(tree), "--workers", "0"])
    assert r.exit_code == 2


def test_progress_is_silent_when_disabled_or_short():
    import io

    from rich.console import Console

    buf = io.StringIO()
    con = Console(file=buf, force_terminal=True)
    with scan_progress(con, enabled=False) as p:
        p("x", 1, 2)
    with scan_progress(con, enabled=True, delay=3600) as p:
        p("x", 1, 2)  # shorter than the delay: nothing is drawn
    assert buf.getvalue() == ""
    with scan_progress(con, enabled=True, delay=0) as p:
        p("reading files", 1, 2)
    assert "reading files" in buf.getvalue()


def test_workers_from_an_unguarded_script(tmp_path):
    """A library user's script without `if __name__ == "__main__"` must not be re-run by workers."""
    import subprocess
    import sys

    from conftest import REPO

    script = tmp_path / "s.py"
    script.write_text(
        "from archaudit import scancache\n"
        "scancache.PARALLEL_MIN_BYTES = 0\n"
        "from archaudit.pipeline import scan\n"
        f"print(len(scan({str(FIXTURES / 'pygates')!r}, workers=2).gates))\n"
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == str(len(scan(FIXTURES / "pygates").gates)), out.stderr[-800:]
