"""The JSON report's text (report/jsonout.to_json) is built one list item at a time: it must be
exactly json.dumps of the whole report object with indent=2, for full and empty lists alike."""
import json

from archaudit.model import Diagnostic
from archaudit.pipeline import scan
from archaudit.report.jsonout import report_sections, to_json

from conftest import FIXTURES


def _whole_object_text(result, reg) -> str:
    obj = {k: list(v) if not isinstance(v, (dict, list, str, int, float, bool, type(None))) else v
           for k, v in report_sections(result, reg)}
    return json.dumps(obj, indent=2, sort_keys=False) + "\n"


def test_same_text_as_one_dump_with_findings_and_modules(reg):
    result = scan(FIXTURES / "jitvariants", [reg.parse("sm_120")])
    # a message with a newline, a quote and non-ASCII text: escaped alike in both ways
    result.diagnostics.append(Diagnostic("varlib/x.py", "note", 'two\nlines "quoted" – ü', line=3))
    assert result.findings and result.modules and result.gates
    text = to_json(result, reg)
    assert text == _whole_object_text(result, reg)
    d = json.loads(text)
    assert d["diagnostics"][-1]["message"] == 'two\nlines "quoted" – ü'


def test_same_text_as_one_dump_with_empty_lists(reg):
    result = scan(FIXTURES / "jitvariants")  # no target: no findings, no modules
    assert result.findings == [] and result.modules == []
    text = to_json(result, reg)
    assert text == _whole_object_text(result, reg)
    assert '"findings": [],' in text and '"modules": [],' in text


def test_scan_command_writes_the_same_text_to_a_file_and_to_stdout(reg, tmp_path):
    from click.testing import CliRunner

    from archaudit.cli import main

    root = str(FIXTURES / "jitvariants")
    out = tmp_path / "r.json"
    args = ["scan", root, "-t", "sm_120", "--format", "json", "--no-cache", "--include-tests"]
    to_file = CliRunner().invoke(main, [*args, "-o", str(out)])
    to_stdout = CliRunner().invoke(main, args)
    assert to_file.exit_code == to_stdout.exit_code == 0, (to_file.output, to_stdout.output)
    text = out.read_text(encoding="utf-8")
    assert text == to_stdout.output
    d = json.loads(text)
    assert d["root"] == root and d["targets"] == ["sm_120"] and d["findings"] and d["modules"]
    # the same text as the report object dumped whole
    assert text == json.dumps(d, indent=2) + "\n"
