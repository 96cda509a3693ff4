"""Exact gates of the fixture package that reproduces each Python gate form."""
import json

from click.testing import CliRunner

from archaudit.cli import main
from archaudit.pipeline import scan

from conftest import FIXTURES, REDEFINED_MODULE, one_module_package

M9_10 = ["sm_90", "sm_100", "sm_103", "sm_107"]
NOT12 = ["sm_75", "sm_80", "sm_86", "sm_87", "sm_88", "sm_89", "sm_90", "sm_100", "sm_103", "sm_107", "sm_110"]
GE90 = ["sm_90", "sm_100", "sm_103", "sm_107", "sm_110", "sm_120", "sm_121"]

# (path, line, kind, admits, resolution prefix)
EXPECTED = [
    ("gatepkg/features.py", 13, "flag", M9_10, "inferred"),
    ("gatepkg/features.py", 19, "predicate-call", M9_10, "inferred"),
    ("gatepkg/features.py", 21, "flag", ["sm_90"], "inferred"),
    ("gatepkg/features.py", 27, "capability-compare", GE90, "evaluated"),
    ("gatepkg/features.py", 30, "capability-compare", M9_10, "inferred"),
    ("gatepkg/features.py", 32, "capability-compare", GE90, "inferred"),
    ("gatepkg/features.py", 35, "capability-compare", ["sm_120", "sm_121"], "inferred"),
    ("gatepkg/features.py", 37, "capability-compare", ["sm_103"], "inferred"),
    ("gatepkg/features.py", 44, "predicate-call", GE90, "evaluated"),
    ("gatepkg/features.py", 46, "predicate-call", ["sm_100"], "evaluated"),
    ("gatepkg/features.py", 48, "predicate-call", ["sm_90"], "inferred"),
    ("gatepkg/features.py", 50, "predicate-call", ["sm_120", "sm_121"], "inferred"),
    ("gatepkg/features.py", 52, "predicate-call", ["sm_80", "sm_86", "sm_87", "sm_88", "sm_89"], "name-rule"),
    ("gatepkg/features.py", 58, "capability-compare", GE90, "inferred"),
    ("gatepkg/features.py", 70, "predicate-call", NOT12, "inferred"),
    ("gatepkg/features.py", 78, "predicate-call", M9_10, "inferred"),
    ("gatepkg/jit/modules.py", 9, "arch-list", M9_10, "evaluated"),
    ("gatepkg/jit/modules.py", 14, "arch-list", ["sm_100", "sm_103", "sm_107", "sm_120", "sm_121"], "evaluated"),
    ("gatepkg/jit/modules.py", 21, "nvcc-flags", ["sm_90"], "evaluated"),
    ("gatepkg/jit/modules.py", 25, "nvcc-flags", ["sm_100"], "evaluated"),
    ("gatepkg/jit/modules.py", 29, "nvcc-flags", ["sm_90", "sm_100"], "evaluated"),
    ("gatepkg/utils.py", 22, "capability-compare", ["sm_120", "sm_121"], "inferred"),
    ("gatepkg/utils.py", 24, "capability-compare", ["sm_121"], "inferred"),
]


def _fixture_scan():
    return scan(FIXTURES / "pygates")


def test_exact_gates(reg):
    result = _fixture_scan()
    got = [
        (g.path, g.line, g.kind, reg.sort_names(g.admits), g.resolution.split(":", 1)[0]) for g in result.gates
    ]
    assert got == EXPECTED


def test_inference_chain_through_probe_table():
    g = next(g for g in _fixture_scan().gates if (g.path, g.line) == ("gatepkg/features.py", 13))
    assert g.region == "after-early-exit"
    assert g.function == "gatepkg.features.use_fusion"
    # resolved through __getattr__'s probe table, the partial, and the capability query
    assert "inferred gatepkg.platform.Platform.__getattr__" in g.via
    assert "inferred gatepkg.utils._check_cuda_device_version" in g.via
    assert "capability-source torch.cuda.get_device_capability" in g.via


def test_non_gates_are_not_reported():
    lines = {(g.path, g.line) for g in _fixture_scan().gates}
    assert ("gatepkg/features.py", 62) not in lines  # noqa  # `if x > 3` in not_a_gate


def test_json_output_schema():
    r = CliRunner().invoke(main, ["scan", str(FIXTURES / "pygates"), "--format", "json", "--target", "sm_120"])
    assert r.exit_code == 0, r.output
    obj = json.loads(r.output)
    assert obj["schema_version"] == 2
    assert sorted(m["name"] for m in obj["modules"]) == ["any", "b200", "comm", "gemm", "hopper"]
    assert obj["targets"] == ["sm_120"]
    g = next(g for g in obj["gates"] if g["path"] == "gatepkg/features.py" and g["line"] == 35)
    assert g["admits"] == ["sm_120", "sm_121"]
    assert g["admits_target"] == {"sm_120": True}
    assert set(g) >= {"path", "line", "col", "function", "kind", "expr", "admits", "resolution", "package"}


def test_unknown_target_exits_2():
    r = CliRunner().invoke(main, ["scan", str(FIXTURES / "pygates"), "--target", "sm_999"])
    assert r.exit_code == 2
    assert "closest known" in r.output


def test_missing_path_exits_2(tmp_path):
    r = CliRunner().invoke(main, ["scan", str(tmp_path / "nope")])
    assert r.exit_code == 2
    assert "no such file" in r.output


def _gates_of_module(tmp_path, reg, source: bytes) -> list:
    """(line, admits) of the gates of a package made of one module, pkg/m.py."""
    one_module_package(tmp_path, source)
    return [(g.line, reg.sort_names(g.admits)) for g in scan(tmp_path).gates]


def test_class_attributes_found_through_the_mro(tmp_path, reg):
    """Attribute lookups on classes (Interp.class_member, which indexes each class body once):
    a class's own member, one inherited from its base, a method and a nested class, asked in
    turn of the same classes."""
    got = _gates_of_module(tmp_path, reg, (
        b"import torch\n"
        b"class Base:\n"
        b"    THRESH = 9\n"
        b"    MINOR = 0\n"
        b"    def ok(self):\n"
        b"        return True\n"
        b"class Cfg(Base):\n"
        b"    THRESH = 10\n"
        b"    class Inner:\n"
        b"        pass\n"
        b"    def a(self):\n"
        b"        if torch.cuda.get_device_capability()[0] >= self.THRESH:\n"
        b"            return 1\n"
        b"    def b(self):\n"
        b"        if torch.cuda.get_device_capability()[0] == self.THRESH + 2 + self.MINOR:\n"
        b"            return 1\n"
        b"    def c(self):\n"
        b"        if self.ok() and self.Inner and torch.cuda.get_device_capability()[0] == Base.THRESH:\n"
        b"            return 1\n"
    ))
    assert got == [
        (12, ["sm_100", "sm_103", "sm_107", "sm_110", "sm_120", "sm_121"]),
        (15, ["sm_120", "sm_121"]),
        (18, ["sm_90"]),
    ]


def test_class_attribute_is_the_last_binding_in_the_class_body(tmp_path, reg):
    """A class body runs top to bottom: a name bound twice has its last value (a def after an
    assignment replaces it), and a property's setter keeps its getter."""
    got = _gates_of_module(tmp_path, reg, (
        b"import torch\n"
        b"class Cfg:\n"
        b"    MAJOR = 9\n"
        b"    MAJOR = 12\n"
        b"    major = 9\n"
        b"    def major(self, x=None):\n"
        b"        return 10\n"
        b"    @property\n"
        b"    def minor(self):\n"
        b"        return 3\n"
        b"    @minor.setter\n"
        b"    def minor(self, value):\n"
        b"        pass\n"
        b"    def a(self):\n"
        b"        if torch.cuda.get_device_capability()[0] == self.MAJOR:\n"
        b"            return 1\n"
        b"    def b(self):\n"
        b"        if torch.cuda.get_device_capability()[0] == self.major():\n"
        b"            return 1\n"
        b"    def c(self):\n"
        b"        if torch.cuda.get_device_capability() == (10, self.minor):\n"
        b"            return 1\n"
    ))
    assert got == [
        (15, ["sm_120", "sm_121"]),
        (18, ["sm_100", "sm_103", "sm_107"]),
        (21, ["sm_103"]),
    ]


def test_every_def_of_a_redefined_name_is_scanned_and_a_call_runs_the_bound_one(tmp_path, reg):
    """A qualname defined more than once: each def's body is scanned for gates (an overload's
    implementation after its stubs), and a call runs the def the name is bound to (the last),
    not the first."""
    got = _gates_of_module(tmp_path, reg, REDEFINED_MODULE)
    assert got == [
        (11, ["sm_120", "sm_121"]),
        (14, ["sm_100", "sm_103", "sm_107"]),
    ]


def test_container_filled_in_place(reg):
    """A list appended to in a loop and a dict given a key (fixtures/mutation) are not the empty
    constants they started as: the refusals on their emptiness are not certain, and the
    capability tests after them are reached and found."""
    res = scan(FIXTURES / "mutation", [reg.parse("sm_120")])
    sm10x = ["sm_100", "sm_103", "sm_107"]
    assert [(g.path, g.line, g.kind, g.region, reg.sort_names(g.admits)) for g in res.gates] == [
        ("mutkit/specs.py", 22, "capability-compare", "branch", sm10x),
        ("mutkit/specs.py", 30, "capability-compare", "branch", sm10x),
    ]
    assert [(x.gate.line, x.verdict) for x in res.findings] == [(22, "unresolved"), (30, "unresolved")]
