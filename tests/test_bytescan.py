"""Packages with no architecture-dependent code cost a byte scan (fixtures/bytescan): a name looked
up through star imports parses only the modules whose bytes can bind it, and a gate whose path
goes through a module without a gate is judged as before."""
import shutil

from archaudit.binary.fatbin import FATBIN_MAGIC
from archaudit.pipeline import scan
from archaudit.python.index import Index
from archaudit.python.gates import holds_trigger
from archaudit.python.pybytes import star_imports
from archaudit.python.scope import gpu_packages, passive_packages
from archaudit.sources import open_source

from conftest import FIXTURES

ROOT = FIXTURES / "bytescan"


def test_only_read_package_and_gate_through_module_without_gate(reg):
    res = scan(ROOT, [reg.parse("sm_120")])
    assert [(g.path, g.line, g.kind, sorted(g.admits)) for g in res.gates] == [
        ("servepkg/layers.py", 8, "capability-compare", ["sm_100", "sm_103", "sm_107"])]
    (f,) = res.findings
    assert (f.gate.path, f.gate.line, f.verdict) == ("servepkg/layers.py", 8, "software-only")
    assert f.reason.startswith("scale_{arch}: every source builds for sm_120f")
    # zoo is star-imported by hub but never spells Settings: read, never parsed; hub.relay
    # (no gate) is parsed because the gate's path goes through it
    assert res.stats["packages_read"] == ["zoo"]
    assert res.stats["packages_analysed"] == {"hub": 3, "servepkg": 4}
    assert res.diagnostics == []


def test_may_bind_follows_star_imports_by_bytes():
    src = open_source(ROOT)
    index = Index(src, [p for p in src.files() if p.endswith(".py")], path_based=False)
    assert index.may_bind("hub", "Settings")  # through `from .settings import *`
    assert index.may_bind("zoo", "LlamaModel")  # through `from .llama import *`
    assert not index.may_bind("zoo", "Settings")
    assert index.may_bind("hub", "relay")  # a submodule
    assert index.loaded_modules() == []  # bytes only


def test_star_imports_from_bytes():
    assert star_imports(b"from .models import *\nfrom x.y import *  # c\nimport os\n") == [(1, b"models"), (0, b"x.y")]
    assert star_imports(b"from . import *\n") == [(1, b"")]
    assert star_imports(b"import os, sys\nfrom m import a as b\n") == []
    # not understood: any name may be bound
    assert star_imports(b"if X: from m import *\n") is None
    assert star_imports(b"# from m import *\n") is None


def _findings(res):
    return [(f.gate.path, f.gate.line, f.target, f.verdict, f.reason) for f in res.findings]


def test_package_without_gpu_code_is_only_read(reg, tmp_path):
    """fixtures/passive: helperlib (no trigger, no word of GPU code, no native file) beside
    servepkg is read as outside the scan from it: only read, and servepkg's finding is the one
    it gets with helperlib not installed. gpulib names the CUDA runtime: analysed."""
    res = scan(FIXTURES / "passive", [reg.parse("sm_120")])
    assert [(g.path, g.line, sorted(g.admits)) for g in res.gates] == [
        ("servepkg/layers.py", 9, ["sm_100", "sm_103", "sm_107"])]
    assert res.stats["packages_read"] == ["helperlib"]
    assert res.stats["packages_analysed"] == {"gpulib": 1, "servepkg": 1}
    alone = tmp_path / "sp"
    shutil.copytree(FIXTURES / "passive", alone)
    shutil.rmtree(alone / "helperlib")
    shutil.rmtree(alone / "helperlib-1.0.dist-info")
    assert _findings(res) == _findings(scan(alone, [reg.parse("sm_120")]))


def test_passive_packages_by_bytes(tmp_path):
    for name, files in {
        "plain": {"__init__.py": b"def f(x):\n    return x\n", "_speedups.so": b"\x7fELF plain host code"},
        "withfatbin": {"__init__.py": b"", "_k.so": b"\x7fELF" + FATBIN_MAGIC.to_bytes(4, "little")},
        "linkscudart": {"__init__.py": b"", "_k.so": b"\x7fELF libcudart.so.12"},
        # registers torch ops: kernels built at run time (DeepGEMM's _C.so has no device code)
        "registersops": {"__init__.py": b"", "_C.so": b"\x7fELF _ZL25TORCH_LIBRARY_init_opspkgRi"},
        "cudasrc": {"__init__.py": b"", "k.cu": b"__global__ void k() {}\n"},
        "mentions": {"__init__.py": b"import triton\n"},
        "trigger": {"__init__.py": b"import torch\nMAJOR = torch.cuda.get_device_capability()[0]\n"},
        "torch": {"__init__.py": b""},  # a runtime: excluded by the caller
        "flashinfer": {"__init__.py": b""},  # rules/externals.toml gpu_code
    }.items():
        for f, data in files.items():
            (tmp_path / name).mkdir(exist_ok=True)
            (tmp_path / name / f).write_bytes(data)
    src = open_source(tmp_path)
    assert passive_packages(src, src.files(), None, frozenset(["torch"]), lambda p: None, holds_trigger) == {"plain"}
    assert src.diagnostics == []


def test_gpu_packages_by_bytes(tmp_path):
    for name, files in {
        "plain": {"__init__.py": b"", "_speedups.so": b"\x7fELF plain host code"},
        "registersops": {"__init__.py": b"", "_C.so": b"\x7fELF _ZL25TORCH_LIBRARY_init_opspkgRi"},
        "cudasrc": {"__init__.py": b"", "csrc/k.cuh": b"__global__ void k() {}\n"},
        "flashinfer": {"__init__.py": b""},  # rules/externals.toml gpu_code
        "torch": {"__init__.py": b"", "k.cu": b""},  # a runtime: excluded by the caller
    }.items():
        for f, data in files.items():
            (tmp_path / name / f).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name / f).write_bytes(data)
    src = open_source(tmp_path)
    index = Index(src, [p for p in src.files() if p.endswith(".py")], path_based=True)
    assert index.package_dirs() == {t: f"{t}/" for t in ("cudasrc", "flashinfer", "plain", "registersops", "torch")}
    assert gpu_packages(src, src.files(), index.package_dirs(), frozenset(["torch"])) == {
        "registersops", "cudasrc", "flashinfer"}
