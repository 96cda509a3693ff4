"""Diagnostics that are true (issue: a real serving environment): valid Python that the
tree-sitter grammar cannot read is a limit of archaudit's reader, not the user's syntax error;
optional wheel metadata that a distribution does not ship is not a file that vanished."""
import json

from archaudit.pipeline import scan

VALID_BUT_UNREAD = '''import torch


def f(x):
    if torch.cuda.get_device_capability()[0] == 9:
        return x
    return x, *((None,) * 14)
'''


def test_valid_python_the_grammar_cannot_read_is_a_reader_limit(tmp_path, reg):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "m.py").write_text(VALID_BUT_UNREAD)
    (pkg / "bad.py").write_text("import torch\n\nCAP = torch.cuda.get_device_capability()\n\n\ndef g(:\n    pass\n")
    res = scan(tmp_path, [reg.parse("sm_120")])
    got = sorted((d.path, d.kind, d.line) for d in res.diagnostics)
    assert got == [("pkg/bad.py", "syntax-error", 6), ("pkg/m.py", "reader-limit", 7)]
    # the gate before the unread line is still found
    assert [(f.gate.path, f.gate.line) for f in res.findings] == [("pkg/m.py", 5)]


def test_dist_info_without_optional_metadata(tmp_path, reg):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("import torch\nMAJOR = torch.cuda.get_device_capability()[0]\n")
    info = tmp_path / "pkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n")
    (info / "RECORD").write_text("pkg/__init__.py,,\npkg-1.0.dist-info/METADATA,,\n")
    res = scan(tmp_path, [reg.parse("sm_120")])
    assert [(d.path, d.kind) for d in res.diagnostics] == []
    assert [(d.name, d.version, d.top_level) for d in res.packages] == [("pkg", "1.0", ["pkg"])]
    # a distribution without METADATA says so once, and nothing vanished
    (info / "METADATA").unlink()
    res = scan(tmp_path, [reg.parse("sm_120")])
    assert [(d.path, d.kind) for d in res.diagnostics] == [("pkg-1.0.dist-info/METADATA", "missing-metadata")]
