"""`torch.ops.<ns>.<op>` calls judged through the prebuilt extensions in the scanned tree.

An ExtensionIndex reads every shared object of the scan once, on the first op it is asked about
(binary/extension.py: namespaces, translation units, kernels), keeps what registers a namespace
and answers, per op and GPU, whether the code it launches can run there. Nothing is loaded or run.
"""
from __future__ import annotations

from ..ruledata import load_rule
from .extension import ABSENT, MIXED, NO, PTX_JIT, SASS, UNKNOWN, Extension, OpVerdict, judge_op, read_extension

# the GPU runtimes' own namespaces: torch's kernels ship for every current architecture
PORTABLE_DEFAULT = ("aten", "prims", "_c10d_functional", "c10d", "profiler")
_SO_SUFFIXES = (".so",)


def torch_op(dotted: str) -> tuple[str, str] | None:
    """`torch.ops._C.rms_norm` or `torch.ops._C.rms_norm.default` -> ("_C", "rms_norm"); None for
    anything else, an op whose name is computed at run time included (no one op to judge)."""
    parts = dotted.split(".")
    if len(parts) >= 4 and parts[0] == "torch" and parts[1] == "ops" and parts[2] and parts[3].isidentifier():
        return parts[2], parts[3]
    return None


def _is_shared_object(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.endswith(_SO_SUFFIXES) or ".so." in name


class ExtensionIndex:
    """The scan's prebuilt extensions, read on first use: every shared object but those of the GPU
    runtimes (rules/externals.toml `runtimes`: torch's own namespaces are portable anyway)."""

    def __init__(self, source):
        self.source = source
        self._by_ns: dict[str, list[Extension]] | None = None
        self._verdicts: dict[tuple[str, str, str], OpVerdict] = {}
        self.unread: list[str] = []  # shared objects that could not be read (Source diagnostics say why)

    def _load(self) -> dict[str, list[Extension]]:
        if self._by_ns is None:
            self._by_ns = {}
            skip = tuple(f"{r}/" for r in load_rule("externals").get("runtimes", []))
            for path in sorted(p for p in self.source.files() if _is_shared_object(p) and not p.startswith(skip)):
                # quietly: a file no op turns out to need is no input of the scan's verdicts
                data = self.source.read_quietly(path)
                if data is None:
                    self.unread.append(path)
                    continue
                ext = read_extension(path, data)
                del data
                if not ext.namespaces:
                    continue
                for ns in ext.namespaces:
                    self._by_ns.setdefault(ns, []).append(ext)
        return self._by_ns

    def registers(self, ns: str) -> bool:
        """Whether a shared object of the scan registers namespace `ns`."""
        return bool(self._load().get(ns))

    def judge(self, ns: str, op: str, gpu: str) -> OpVerdict:
        key = (ns, op, gpu)
        got = self._verdicts.get(key)
        if got is None:
            got = self._verdicts[key] = self._judge(ns, op, gpu)
        return got

    def defines(self, ns: str, op: str) -> bool:
        """False when every file registering `ns` was read and none has the op's schema: the op
        does not exist in this build (an op of another platform's build)."""
        exts = self._load().get(ns, [])
        return not exts or any(e.defines_op(op) is not False for e in exts)

    def paths(self, ns: str) -> list[str]:
        return [e.path for e in self._load().get(ns, [])]

    def _judge(self, ns: str, op: str, gpu: str) -> OpVerdict:
        exts = self._load().get(ns, [])
        if not exts:
            unread = f" ({len(self.unread)} could not be read)" if self.unread else ""
            return OpVerdict(UNKNOWN, f"no shared object in the scan{unread} registers namespace {ns}")
        verdicts = [judge_op(e, ns, op, gpu) for e in exts]
        present = [v for v in verdicts if v.runs != ABSENT]
        if not present:
            return verdicts[0] if len(verdicts) == 1 else OpVerdict(
                ABSENT, "; ".join(v.reason for v in verdicts))
        if len(present) == 1:
            return present[0]
        # several files define it: the op is whichever registers last at run time, not known here
        runs = {v.runs for v in present}
        kind = runs.pop() if len(runs) == 1 else MIXED
        if kind == MIXED:
            kind = UNKNOWN
        return OpVerdict(kind, f"torch.ops.{ns}.{op} is defined by {len(present)} files: "
                         + "; ".join(v.reason for v in present), sorted({u for v in present for u in v.units}))


def prediction(v: OpVerdict) -> str:
    """The ModuleVerdict prediction an op verdict gives: builds (code for the GPU), binary (none),
    unknown (mixed or not read)."""
    if v.runs in (SASS, PTX_JIT, ABSENT):
        return "builds"
    if v.runs == NO:
        return "binary"
    return "unknown"
