"""Every command on the scan's cache (issue 24): after `archaudit scan`, `patch`, `baseline`, `diff`
and `explain --target` read the scan's result back instead of analysing again (no Python or C++
parse on a warm cache), and print exactly what they print with --no-cache."""
import shutil
import subprocess

import pytest
from click.testing import CliRunner

from archaudit.cli import main

from conftest import FIXTURES


@pytest.fixture
def tree(tmp_path):
    dst = tmp_path / "patches"
    shutil.copytree(FIXTURES / "patches", dst)
    return dst


@pytest.fixture
def probe(tmp_path, monkeypatch):
    """The cache in tmp_path; counts of parses (Python modules and C++ files, in this process) and
    the cache mode of every scan the commands run."""
    import archaudit.parsing.cpp as cpp
    import archaudit.pipeline as pipeline
    import archaudit.python.index as index

    monkeypatch.setenv("ARCHAUDIT_CACHE_DIR", str(tmp_path / "cache"))
    seen = {"py": 0, "cpp": 0, "modes": []}
    py, cc, scan = index.parse_python, cpp.parse, pipeline.scan

    def count(kind, fn):
        def wrapped(*a, **k):
            seen[kind] += 1
            return fn(*a, **k)
        return wrapped

    def scan_(*a, **k):
        r = scan(*a, **k)
        seen["modes"].append(r.cache.get("mode"))
        return r

    monkeypatch.setattr(index, "parse_python", count("py", py))
    monkeypatch.setattr(cpp, "parse", count("cpp", cc))
    monkeypatch.setattr(pipeline, "scan", scan_)

    def reset():
        seen.update(py=0, cpp=0, modes=[])
    seen["reset"] = reset
    return seen


def _run(args):
    try:
        runner = CliRunner(mix_stderr=False)
    except TypeError:  # click >= 8.2 always separates stderr
        runner = CliRunner()
    r = runner.invoke(main, args)
    return r.exit_code, r.stdout, r.stderr


def _warm(probe, args):
    """Run args on the warm cache: no parse, every scan a hit; returns (code, stdout, stderr)."""
    probe["reset"]()
    out = _run(args)
    assert (probe["py"], probe["cpp"]) == (0, 0), (args, probe)
    assert probe["modes"] and set(probe["modes"]) == {"hit"}, (args, probe["modes"])
    return out


def test_patch_on_a_warm_cache_does_not_parse_and_equals_no_cache(tree, probe):
    plain = _run(["patch", str(tree), "-t", "sm_120", "--no-cache"])
    assert plain[0] == 0 and "+++ gpukit/" in plain[1] and "patched: " in plain[2]
    assert probe["py"] > 0  # the hook sees the parses of a run without the cache
    probe["reset"]()
    assert _run(["scan", str(tree), "-t", "sm_120", "-q"])[0] in (0, 1)
    assert probe["modes"] == ["miss"] and probe["py"] > 0
    # the scan made the combined patch too: the patch after it reads both back
    assert _warm(probe, ["patch", str(tree), "-t", "sm_120"]) == plain
    assert _warm(probe, ["patch", str(tree), "-t", "sm_120"]) == plain
    assert _warm(probe, ["patch", str(tree), "-t", "sm_120", "-q"])[1] == plain[1]


def test_patch_on_a_result_read_back_without_its_patch(tree, probe, tmp_path):
    """--include-partial (or a scan result stored by an early cutoff) has no stored patch: it is
    made from the stored result with a fresh index, the same as with --no-cache, then stored."""
    args = ["patch", str(tree), "-t", "sm_120", "--include-partial"]
    plain = _run(args + ["--no-cache"])
    assert _run(["scan", str(tree), "-t", "sm_120", "-q"])[0] in (0, 1)
    probe["reset"]()
    assert _run(args) == plain
    assert probe["modes"] == ["hit"] and probe["py"] > 0  # the combined patch was made here
    assert _warm(probe, args) == plain


def test_patch_after_applying_it_is_made_from_the_new_tree(tree, probe, tmp_path):
    """The patch-and-rescan workflow: a stored patch is never reused for changed files."""
    if shutil.which("patch") is None:
        pytest.skip("patch(1) is needed")
    code, diff, _err = _run(["patch", str(tree), "-t", "sm_120"])
    assert code == 0 and diff
    subprocess.run(["patch", "-p0", "--quiet"], input=diff, text=True, cwd=tree, check=True)
    again = _run(["patch", str(tree), "-t", "sm_120"])
    assert again == _run(["patch", str(tree), "-t", "sm_120", "--no-cache"])
    assert again[1] != diff


def test_baseline_diff_and_explain_on_a_warm_cache(tree, probe, tmp_path):
    assert _run(["scan", str(tree), "-t", "sm_120", "-q"])[0] in (0, 1)
    # baseline: the same file with and without the cache, and no parse on the warm one
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    warm = _warm(probe, ["baseline", str(tree), "-t", "sm_120", "-q", "-o", str(a)])
    cold = _run(["baseline", str(tree), "-t", "sm_120", "-q", "-o", str(b), "--no-cache"])
    assert warm[:2] == cold[:2] and warm[2].replace("a.json", "b.json") == cold[2]
    assert a.read_text() == b.read_text() and '"fingerprint"' in a.read_text()
    # diff of the tree with itself: two hits, nothing changed
    warm = _warm(probe, ["diff", str(tree), str(tree), "-t", "sm_120", "-q"])
    assert warm == _run(["diff", str(tree), str(tree), "-t", "sm_120", "-q", "--no-cache"])
    assert warm[0] == 0  # nothing changed
    # explain --target: the scan's verdict, evidence and patch for the gates on that line
    for fmt in ("text", "json"):
        args = ["explain", str(tree), "gpukit/configs.py:34", "-t", "sm_120", "--format", fmt]
        warm = _warm(probe, args)
        assert warm == _run(args + ["--no-cache"])
        assert warm[0] == 0 and "software-only" in warm[1].lower()


def test_explain_says_what_the_scan_reported(tree, probe):
    """explain --target and scan agree on every finding: the verdict and the patch are the scan's."""
    import json

    code, out, _ = _run(["scan", str(tree), "-t", "sm_120", "-q", "--format", "json"])
    findings = json.loads(out)["findings"]
    assert findings
    for f in findings:
        g = f["gate"]
        code, out, err = _warm(probe, ["explain", str(tree), f"{g['path']}:{g['line']}", "-t", "sm_120",
                                       "--format", "json"])
        assert code == 0, err
        got = [x for e in json.loads(out) for x in e["findings"] if x["gate"]["col"] == g["col"]]
        assert got == [f]


def test_callgraph_is_stored_under_the_inputs_fingerprint(probe, tmp_path):
    """The whole call graph (minutes on a real tree) depends on the files alone: a second run reads
    it back without parsing, and a changed file is a new key."""
    tree = tmp_path / "cg"
    shutil.copytree(FIXTURES / "callgraph", tree)
    args = ["callgraph", str(tree), "--format", "json"]
    first = _run(args)
    assert first[0] == 0 and probe["py"] > 0
    probe["reset"]()
    assert _run(args) == first and probe["py"] == 0
    assert _run(args + ["--no-cache"]) == first
    api = tree / "jitpkg" / "api.py"
    api.write_text(api.read_text() + "\n\ndef added_later():\n    return run()\n")
    probe["reset"]()
    changed = _run(args)
    assert probe["py"] > 0 and "added_later" in changed[1] and changed == _run(args + ["--no-cache"])


def test_a_compile_variant_is_part_of_the_result_key(probe):
    """-t sm_100f judges sm_100f builds, -t sm_100 what the JIT passes: a warm sm_100 result must
    not answer for sm_100f (it did: the key held the GPU names only)."""
    tree = str(FIXTURES / "verdicts")
    outs = {}
    for t in ("sm_100", "sm_100f", "sm_100"):
        outs.setdefault(t, []).append(_run(["scan", tree, "-t", t, "--format", "json", "-q"]))
    for t in ("sm_100", "sm_100f"):
        ref = _run(["scan", tree, "-t", t, "--format", "json", "-q", "--no-cache"])
        assert all(o == ref for o in outs[t])
    assert outs["sm_100"][0] != outs["sm_100f"][0]
