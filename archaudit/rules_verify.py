"""Check the architecture rule data against the local CUDA toolchain.

For every feature rule and compile target the rule's probe is compiled (PTX through ptxas, CUDA
through `nvcc -cubin`, macro probes through `nvcc -E`) and the outcome is compared with the rule's
`supported_on`. rules/macros.toml is re-probed with `nvcc -E -dM`, and the `variants` lists of
rules/targets.toml with the compile targets nvcc accepts. Results are cached on disk per
(toolkit version, probe text, target). Nothing here touches the network.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from .children import ending_with_us
from .cuda.ruleset import (
    all_compile_targets,
    expand_supported,
    feature_rule,
    feature_rules,
    function_macros,
    predefined_macros,
)
from .cuda.tu import smem_limit
from .ruledata import load_rule
from .safeio import load_json_file
from .targets import CompileTarget, registry

CACHE_FORMAT = 1  # bump when probe wrappers change meaning
PROBE_TIMEOUT_S = 120


class ToolchainMissing(RuntimeError):
    pass


class UnknownName(ValueError):
    """A --rule or --target that the rule data does not know."""


# --- toolchain ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Toolchain:
    nvcc: str
    ptxas: str
    version: str  # e.g. "13.0.88"

    @classmethod
    def find(cls) -> Toolchain:
        nvcc = shutil.which("nvcc")
        if nvcc is None:
            raise ToolchainMissing("nvcc not found on PATH; install the CUDA toolkit or add its bin/ to PATH")
        ptxas = shutil.which("ptxas") or str(Path(nvcc).resolve().parent / "ptxas")
        if not os.access(ptxas, os.X_OK):
            raise ToolchainMissing(f"ptxas not found next to {nvcc} nor on PATH")
        try:
            out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60,
                                 preexec_fn=ending_with_us()).stdout
        except (OSError, subprocess.SubprocessError) as e:
            raise ToolchainMissing(f"cannot run {nvcc}: {e}") from None
        m = re.search(r"\bV(\d+\.\d+\.\d+)", out)
        if not m:
            raise ToolchainMissing(f"cannot read the version of {nvcc} from `nvcc --version`")
        return cls(nvcc, ptxas, m.group(1))


def _gencode(target: str) -> str:
    # What a JIT passes; -arch=sm_90a would add a second, generic compute_90 pass (see rules/README.md).
    return f"-gencode=arch={target.replace('sm_', 'compute_')},code={target}"


def _run(cmd: list[str], cwd: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                              preexec_fn=ending_with_us())
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(cmd, 124, "", f"timed out after {PROBE_TIMEOUT_S}s")
    except OSError as e:
        return subprocess.CompletedProcess(cmd, 127, "", str(e))


def _first_error(text: str) -> str:
    for line in text.splitlines():
        if "error" in line.lower() or "fatal" in line.lower():
            return re.sub(r"\S*/tmp\S*", "<probe>", line.strip())[:300]
    return text.strip().splitlines()[0][:300] if text.strip() else ""


# --- probe cache --------------------------------------------------------------------------


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "archaudit" / "probes"


class ProbeCache:
    """One JSON file per probe; atomic writes; unreadable entries count as misses."""

    def __init__(self, root: Path | None):
        self.root = root
        self.hits = 0
        self.misses = 0
        self._lock = threading.Lock()

    def count(self, hit: bool) -> None:
        with self._lock:
            if hit:
                self.hits += 1
            else:
                self.misses += 1

    @staticmethod
    def key(*parts: str) -> str:
        h = hashlib.sha256()
        for p in (str(CACHE_FORMAT),) + parts:
            h.update(p.encode())
            h.update(b"\0")
        return h.hexdigest()

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"  # type: ignore[operator]

    def get(self, key: str) -> dict | None:
        if self.root is None:
            return None
        try:
            v = load_json_file(self._path(key))
            if isinstance(v, dict) and v.get("key") == key:
                return v
        except (OSError, ValueError):
            pass
        return None

    def put(self, key: str, value: dict) -> None:
        if self.root is None:
            return
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(dict(value, key=key), f)
            os.replace(tmp, path)
        except OSError:
            pass  # a cache that cannot be written only costs time


# --- probes -------------------------------------------------------------------------------

PTX_PRELUDE = """\
.reg .b16 h<16>; .reg .b32 r<64>; .reg .b64 rd<16>; .reg .f32 f<64>; .reg .f64 d<8>; .reg .pred p<8>;
.shared .align 1024 .b8 smem[4096];
ld.param.u64 rd0, [P0];
"""


def ptx_source(body: str, target: str, isa: str) -> str:
    return (
        f".version {isa}\n.target {target}\n.address_size 64\n\n"
        f".visible .entry archaudit_probe(.param .u64 P0, .param .align 64 .b8 TM[128])\n{{\n"
        f"{PTX_PRELUDE}{body.strip()}\nret;\n}}\n"
    )


MACRO_TOKEN = "ARCHAUDIT_SUPPORTED"


def macro_source(condition: str, include: str) -> str:
    head = f"#include <{include}>\n" if include else ""
    return f"{head}#if {condition}\n{MACRO_TOKEN}\n#endif\n"


@dataclass
class ProbeResult:
    ok: bool
    detail: str = ""
    cached: bool = False


class Prober:
    def __init__(self, tc: Toolchain, cache: ProbeCache, include_dirs: tuple[str, ...] = ()):
        self.tc = tc
        self.cache = cache
        self.include_dirs = include_dirs
        self._isa: str | None = None

    # PTX ISA version this nvcc emits: read it from real output instead of assuming it.
    def ptx_isa(self) -> str:
        if self._isa is None:
            key = self.cache.key("ptx-isa", self.tc.version)
            hit = self.cache.get(key)
            if hit and isinstance(hit.get("isa"), str):
                self._isa = hit["isa"]
            else:
                with tempfile.TemporaryDirectory(prefix="archaudit-") as d:
                    Path(d, "k.cu").write_text("__global__ void k() {}\n")
                    r = _run([self.tc.nvcc, "-ptx", "k.cu", "-o", "k.ptx"], d)
                    text = Path(d, "k.ptx").read_text() if r.returncode == 0 else ""
                m = re.search(r"^\.version\s+(\d+\.\d+)", text, re.M)
                if not m:
                    raise ToolchainMissing(f"nvcc -ptx failed: {_first_error(r.stderr)}")
                self._isa = m.group(1)
                self.cache.put(key, {"isa": self._isa})
        return self._isa

    def _cached(self, kind: str, text: str, target: str, extra: str, fn: Callable[[str], ProbeResult]) -> ProbeResult:
        key = self.cache.key(kind, self.tc.version, text, target, extra)
        hit = self.cache.get(key)
        if hit is not None and isinstance(hit.get("ok"), bool):
            self.cache.count(True)
            return ProbeResult(hit["ok"], str(hit.get("detail", "")), cached=True)
        self.cache.count(False)
        with tempfile.TemporaryDirectory(prefix="archaudit-") as d:
            res = fn(d)
        self.cache.put(key, {"ok": res.ok, "detail": res.detail})
        return res

    def probe_key(self, kind: str, text: str, target: str, include: str = "") -> str:
        """The cache key probe() uses (ptx_isa() must have run for a ptx probe)."""
        if kind == "ptx":
            return self.cache.key("ptx", self.tc.version, ptx_source(text, target, self.ptx_isa()), target, "")
        if kind == "cuda":
            return self.cache.key("cuda", self.tc.version, text, target, "")
        src = text if MACRO_TOKEN in text else macro_source(text, include)
        return self.cache.key("macro", self.tc.version, src, target, "\0".join(self.include_dirs))

    def macros_key(self, target: str | None) -> str:
        return self.cache.key("macros", self.tc.version, target or "<host>")

    def probe(self, kind: str, text: str, target: str, include: str = "") -> ProbeResult:
        if kind == "ptx":
            src = ptx_source(text, target, self.ptx_isa())

            def run(d: str) -> ProbeResult:
                Path(d, "p.ptx").write_text(src)
                r = _run([self.tc.ptxas, f"-arch={target}", "p.ptx", "-o", "p.cubin"], d)
                return ProbeResult(r.returncode == 0, _first_error(r.stderr))

            return self._cached("ptx", src, target, "", run)
        if kind == "cuda":

            def run(d: str) -> ProbeResult:
                Path(d, "p.cu").write_text(text)
                r = _run([self.tc.nvcc, "-cubin", _gencode(target), "p.cu", "-o", "p.cubin"], d)
                return ProbeResult(r.returncode == 0, _first_error(r.stderr))

            return self._cached("cuda", text, target, "", run)
        if kind == "macro":
            incs = [f"-I{p}" for p in self.include_dirs]
            src = text if MACRO_TOKEN in text else macro_source(text, include)

            def run(d: str) -> ProbeResult:
                Path(d, "p.cu").write_text(src)
                r = _run([self.tc.nvcc, "-E", _gencode(target), *incs, "p.cu", "-o", "p.ii"], d)
                if r.returncode != 0:
                    return ProbeResult(False, "preprocessing failed: " + _first_error(r.stderr))
                out = Path(d, "p.ii").read_text(errors="replace")
                ok = re.search(rf"^\s*{MACRO_TOKEN}\b", out, re.M) is not None
                return ProbeResult(ok, "" if ok else "condition is false")

            return self._cached("macro", src, target, "\0".join(self.include_dirs), run)
        raise ValueError(f"unknown probe kind {kind!r}")

    # --- macros ---------------------------------------------------------------------------

    def dump_macros(self, target: str | None) -> dict | None:
        """{"ints": {...}, "funcs": {...}} for the device pass of `target` (None: host pass);
        None when nvcc does not accept the target."""
        key = self.macros_key(target)
        hit = self.cache.get(key)
        if hit is not None and "accepted" in hit:
            self.cache.count(True)
            return hit if hit["accepted"] else None
        self.cache.count(False)
        with tempfile.TemporaryDirectory(prefix="archaudit-") as d:
            Path(d, "e.cu").write_text("")
            if target is not None:
                r = _run([self.tc.nvcc, "-E", "-Xcompiler", "-dM", _gencode(target), "e.cu", "-o", "e.ii"], d)
            else:
                r = self._host_dump(d)
            if r.returncode != 0:
                if target is None:
                    raise ToolchainMissing(f"host preprocessing failed: {_first_error(r.stderr)}")
                self.cache.put(key, {"accepted": False})
                return None
            text = Path(d, "e.ii").read_text(errors="replace")
        ints, funcs = parse_dm(text)
        value = {"accepted": True, "ints": ints, "funcs": funcs}
        self.cache.put(key, value)
        return value

    def _host_dump(self, d: str) -> subprocess.CompletedProcess:
        # nvcc has no "host pass only" switch for -E: take the host preprocessing command
        # from --dryrun (the gcc -E without -D__CUDA_ARCH__) and re-run it with -dM.
        r = _run([self.tc.nvcc, "--dryrun", "-c", _gencode("sm_80"), "e.cu", "-o", "e.o"], d)
        for line in r.stderr.splitlines():
            if not line.startswith("#$ "):
                continue
            try:
                args = shlex.split(line[3:])
            except ValueError:
                continue
            if args and os.path.basename(args[0]) in ("gcc", "g++", "c++", "clang++", "cl.exe") and "-E" in args:
                if any(a.startswith("-D__CUDA_ARCH__") for a in args):
                    continue
                if "-o" in args:
                    i = args.index("-o")
                    args[i + 1] = "e.ii"
                else:
                    args += ["-o", "e.ii"]
                return _run([args[0], "-dM", *args[1:]], d)
        return subprocess.CompletedProcess([], 1, "", "no host preprocessing step in `nvcc --dryrun`")


_DEFINE_RE = re.compile(r"^#define (\w+)(\([^)]*\))?(?: (.*))?$")


def parse_dm(text: str) -> tuple[dict[str, int], dict[str, str]]:
    """Object-like integer macros and function-like macros (signature -> body) of `-dM` output,
    restricted to macros.toml's meta.record pattern."""
    record = re.compile(load_rule("macros").get("meta", {}).get("record", r"^__CUDA"))
    ints: dict[str, int] = {}
    funcs: dict[str, str] = {}
    for line in text.splitlines():
        m = _DEFINE_RE.match(line)
        if not m or not record.search(m.group(1)):
            continue
        value = (m.group(3) or "").strip()
        if m.group(2):
            funcs[m.group(1) + m.group(2).replace(" ", "")] = value
            continue
        if value == "":
            continue  # header include guards and the like; -DX without a value shows as 1
        vm = re.fullmatch(r"(\d+)[uUlL]*", value)
        if vm:
            ints[m.group(1)] = int(vm.group(1))
    return ints, funcs


# --- checks -------------------------------------------------------------------------------


@dataclass
class Finding:
    """One disagreement between the data and the toolchain."""

    kind: str  # "feature" | "macros" | "targets" | "probe-error"
    subject: str
    message: str
    data_only: list[str] = field(default_factory=list)  # in the data, not confirmed by the toolchain
    toolchain_only: list[str] = field(default_factory=list)  # confirmed by the toolchain, not in the data
    details: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "subject": self.subject,
            "message": self.message,
            "data_only": self.data_only,
            "toolchain_only": self.toolchain_only,
            "details": self.details,
        }


@dataclass
class Report:
    toolchain: Toolchain
    findings: list[Finding]
    checked_rules: list[str]
    checked_targets: list[str]
    skipped: dict[str, str]
    probes: int
    cache_hits: int
    seconds: float
    observed: dict[str, list[str]] = field(default_factory=dict)  # rule id -> targets where the probe passed

    @property
    def ok(self) -> bool:
        return not self.findings

    def to_json(self) -> dict:
        return {
            "ok": self.ok,
            "nvcc": self.toolchain.nvcc,
            "nvcc_version": self.toolchain.version,
            "rules": self.checked_rules,
            "targets": self.checked_targets,
            "skipped": self.skipped,
            "probes": self.probes,
            "cache_hits": self.cache_hits,
            "seconds": round(self.seconds, 3),
            "observed": self.observed,
            "disagreements": [f.to_json() for f in self.findings],
        }


def _macro_diff(expected_ints, expected_funcs, got: dict) -> dict:
    diff = {}
    gi, gf = got["ints"], got["funcs"]
    for k in sorted(set(expected_ints) | set(gi)):
        if expected_ints.get(k) != gi.get(k):
            diff[k] = {"data": expected_ints.get(k), "nvcc": gi.get(k)}
    for k in sorted(set(expected_funcs) | set(gf)):
        if expected_funcs.get(k) != gf.get(k):
            diff[k] = {"data": expected_funcs.get(k), "nvcc": gf.get(k)}
    return diff


def _expected_funcs(target: CompileTarget | None) -> dict[str, str]:
    return {f"{n}({','.join(p)})": body for n, (p, body) in function_macros(target).items()}


def compact_supported(names: Iterable[str]) -> list[str]:
    """A short supported_on list for a set of target names (used to suggest fixes)."""
    want = set(names)
    targets = all_compile_targets()
    present = [t for t in targets if t.name in want]
    if not present:
        return []
    # "sm_XY+" from the lowest capability present, optionally with a variant filter.
    lo = present[0].gpu_name
    for filt in ("", ":af", ":a", ":f", ":p"):
        if expand_supported([f"{lo}+{filt}"]) == want:
            return [f"{lo}+{filt}"]
    return [t.name for t in present]


# Seconds of one uncached probe, by kind, measured with nvcc 13.0 on a shared 2-core machine:
# ptxas on a PTX snippet, nvcc -cubin of a small kernel, nvcc -E of a CUTLASS header, and the
# -dM dump of one target's macros. The estimate `rules verify` prints up front is their sum over
# the probes the cache does not answer, divided by the parallel jobs.
PROBE_SECONDS = {"ptx": 0.05, "cuda": 0.5, "macro": 1.5, "macros": 0.15}


def verify(
    *,
    rule_ids: Iterable[str] | None = None,
    target_names: Iterable[str] | None = None,
    check_macros: bool = True,
    check_targets: bool = True,
    jobs: int | None = None,
    cache_dir: Path | None = None,
    include_dirs: Iterable[str] = (),
    progress: Callable[[int, int, str], None] | None = None,
    start: Callable[[int, int, float], None] | None = None,
) -> Report:
    """Run the probes; raises ToolchainMissing when nvcc/ptxas cannot be used. `start(probes,
    cached, seconds)` is called before the first compile: how many probes, how many the cache
    already answers, and the estimated time of the others (PROBE_SECONDS, `jobs` at a time)."""
    t0 = time.monotonic()
    tc = Toolchain.find()
    cache = ProbeCache(cache_dir)
    prober = Prober(tc, cache, tuple(include_dirs))
    rules, targets = _selected(rule_ids, target_names)
    runnable, skipped = _runnable(rules, prober)
    tasks, costs = _tasks(prober, runnable, targets, check_macros, check_targets)
    if check_targets or any(r.probe_kind == "ptx" for r in runnable):
        prober.ptx_isa()  # once, before the threads race for it
    results = _run_tasks(tasks, costs, cache, jobs, progress, start)
    findings, observed = _feature_findings(runnable, targets, results, narrowed=target_names is not None)
    if check_macros:
        findings += _macro_findings(targets, results)
    if check_targets:
        findings += _target_findings(tc, results) + _smem_findings(targets, results)
    return Report(
        toolchain=tc,
        findings=findings,
        checked_rules=[r.id for r in runnable],
        checked_targets=[t.name for t in targets],
        skipped=skipped,
        probes=len(tasks),
        cache_hits=cache.hits,
        seconds=time.monotonic() - t0,
        observed=observed,
    )


def _selected(rule_ids, target_names) -> tuple[list, list]:
    """The feature rules and compile targets asked for (all by default); an unknown name raises
    UnknownName."""
    rules = list(feature_rules())
    if rule_ids is not None:
        wanted = list(rule_ids)
        known = {r.id for r in rules}
        unknown = [w for w in wanted if w not in known]
        if unknown:
            raise UnknownName(f"unknown rule(s): {', '.join(unknown)}")
        rules = [r for r in rules if r.id in set(wanted)]
    targets = all_compile_targets()
    if target_names is not None:
        wanted_t = list(target_names)
        by_name = {t.name: t for t in targets}
        unknown = [w for w in wanted_t if w not in by_name]
        if unknown:
            raise UnknownName(f"unknown compile target(s): {', '.join(unknown)}; known: {', '.join(by_name)}")
        targets = [by_name[w] for w in wanted_t]
    return rules, targets


def _runnable(rules, prober) -> tuple[list, dict[str, str]]:
    """The rules whose probe can run here, and why each other one is skipped."""
    skipped: dict[str, str] = {}
    runnable = []
    for r in rules:
        if not r.probe.strip():
            skipped[r.id] = "no probe"
        elif r.probe_kind == "macro" and r.probe_include and not prober.include_dirs:
            skipped[r.id] = "needs a CUTLASS include dir (--include / ARCHAUDIT_CUTLASS_INCLUDE)"
        elif r.probe_kind == "macro" and r.probe_include and not any(
            Path(d, r.probe_include).is_file() for d in prober.include_dirs
        ):
            skipped[r.id] = f"{r.probe_include} not found in the include dirs"
        else:
            runnable.append(r)
    return runnable, skipped


def _tasks(prober, runnable, targets, check_macros: bool, check_targets: bool):
    """(label, probe) of every probe to run, and (kind, cache key) of each, for the estimate."""
    tasks: list[tuple[str, Callable[[], object]]] = []
    costs: list[tuple[str, Callable[[], str]]] = []
    for r in runnable:
        for t in targets:
            tasks.append((f"{r.id} @ {t.name}", lambda r=r, t=t: prober.probe(r.probe_kind, r.probe, t.name, r.probe_include)))
            costs.append((r.probe_kind, lambda r=r, t=t: prober.probe_key(r.probe_kind, r.probe, t.name, r.probe_include)))
    macro_targets: list[str | None] = []
    if check_macros:
        macro_targets = [None] + [t.name for t in targets]
    if check_targets:
        # Every variant spelling of every GPU, to check the `variants` lists of targets.toml.
        for g in registry().gpus:
            for v in ("", "a", "f"):
                n = f"{g.name}{v}"
                if n not in macro_targets:
                    macro_targets.append(n)
    for mt in macro_targets:
        tasks.append((f"macros @ {mt or 'host'}", lambda mt=mt: prober.dump_macros(mt)))
        costs.append(("macros", lambda mt=mt: prober.macros_key(mt)))
    if check_targets:
        for label, _kind, body, t in _smem_probes(targets):
            tasks.append((label, lambda body=body, t=t: prober.probe("ptx", body, t.name)))
            costs.append(("ptx", lambda body=body, t=t: prober.probe_key("ptx", body, t.name)))
    return tasks, costs


def _run_tasks(tasks, costs, cache, jobs, progress, start) -> dict[str, object]:
    """Every probe's result by label, `jobs` threads at a time; start() first, progress() after each."""
    results: dict[str, object] = {}
    done = 0
    workers = max(1, jobs or os.cpu_count() or 1)
    if start is not None:
        cached, seconds = 0, 0.0
        for kind, key in costs:
            if cache.get(key()) is not None:
                cached += 1
            else:
                seconds += PROBE_SECONDS.get(kind, 1.0)
        start(len(tasks), cached, seconds / workers)
    with ThreadPoolExecutor(max_workers=workers) as ex:
        futs = {ex.submit(fn): label for label, fn in tasks}
        for fut in _as_completed(futs):
            label = futs[fut]
            results[label] = fut.result()
            done += 1
            if progress:
                progress(done, len(tasks), label)
    return results


def _feature_findings(runnable, targets, results, narrowed: bool) -> tuple[list[Finding], dict[str, list[str]]]:
    """Feature rules whose supported_on disagrees with their probes, and where each probe built."""
    findings: list[Finding] = []
    observed: dict[str, list[str]] = {}
    for r in runnable:
        got = set()
        errors = {}
        for t in targets:
            res = results[f"{r.id} @ {t.name}"]
            if res.ok:  # type: ignore[attr-defined]
                got.add(t.name)
            else:
                errors[t.name] = res.detail  # type: ignore[attr-defined]
        # An atom builds where its guard is on AND the instructions it emits assemble; those
        # instruction rules are verified on their own, so their data stands in for them here.
        for q in r.requires:
            req = feature_rule(q)
            for t in targets:
                if t.name in got and not req.supports(t):
                    got.discard(t.name)
                    errors[t.name] = f"guard on, but {q} does not build"
        observed[r.id] = [t.name for t in targets if t.name in got]
        expected = {t.name for t in targets if r.supports(t)}
        if got != expected:
            data_only = [t.name for t in targets if t.name in expected - got]
            tool_only = [t.name for t in targets if t.name in got - expected]
            details = {"errors": {n: errors[n] for n in data_only}}
            if not narrowed:
                details["suggested_supported_on"] = compact_supported(got)
            findings.append(
                Finding("feature", r.id, f"supported_on disagrees with {r.probe_kind} probes", data_only, tool_only, details)
            )
    return findings, observed


def _macro_findings(targets, results) -> list[Finding]:
    """Targets whose predefined macros differ from macros.toml (or that nvcc does not accept)."""
    findings: list[Finding] = []
    for mt in [None] + [t.name for t in targets]:
        got = results[f"macros @ {mt or 'host'}"]
        target = None if mt is None else next(t for t in targets if t.name == mt)
        if got is None:
            findings.append(Finding("macros", mt or "host", "nvcc does not accept this target"))
            continue
        exp_i = predefined_macros(target)
        got = dict(got)  # type: ignore[arg-type]
        if target is None:
            got["ints"] = {k: v for k, v in got["ints"].items() if k != "__CUDA_ARCH_LIST__"}
        diff = _macro_diff(exp_i, _expected_funcs(target), got)
        if diff:
            findings.append(Finding("macros", mt or "host", "macros.toml differs from nvcc -E -dM", details={"diff": diff}))
    return findings


def _target_findings(tc: Toolchain, results) -> list[Finding]:
    """GPUs nvcc knows that targets.toml lacks, and variants lists that differ from what nvcc accepts."""
    findings: list[Finding] = []
    listed = _list_gpu_code(tc)
    known = {g.name for g in registry().gpus}
    for name in sorted(listed - known):
        findings.append(Finding("targets", name, "nvcc --list-gpu-code lists a GPU that targets.toml lacks", [], [name]))
    for g in registry().gpus:
        accepted = [v for v in ("", "a", "f") if results[f"macros @ {g.name}{v}"] is not None]
        if sorted(accepted) != sorted(g.variants):
            findings.append(
                Finding(
                    "targets",
                    g.name,
                    f"targets.toml variants {list(g.variants)} but nvcc accepts {accepted}",
                    [f"{g.name}{v}" for v in g.variants if v not in accepted],
                    [f"{g.name}{v}" for v in accepted if v not in g.variants],
                )
            )
    return findings


def _smem_body(nbytes: int) -> str:
    """PTX statements using `nbytes` of static shared memory in all (the prelude's 4096 included)."""
    return (f".shared .align 16 .b8 big[{nbytes - 4096}];\n"
            "mov.u32 r1, big; st.shared.u32 [r1], 1; mov.u32 r2, smem; st.shared.u32 [r2], 1;")


def _smem_probes(targets) -> list[tuple[str, str, str, CompileTarget]]:
    """Two ptxas probes per compile target for targets.toml's shared-memory limits: static shared
    memory of exactly the limit archaudit applies (smem_limit: the GPU's opt-in limit on `a`
    targets, static_smem_kib elsewhere) must assemble, 16 bytes more must not."""
    out = []
    for t in targets:
        limit = smem_limit("static", t)
        if limit <= 4096:
            continue
        out.append((f"smem @ {t.name} = {limit}", "at", _smem_body(limit), t))
        out.append((f"smem @ {t.name} > {limit}", "over", _smem_body(limit + 16), t))
    return out


def _smem_findings(targets, results: dict) -> list[Finding]:
    out = []
    for label, kind, _body, t in _smem_probes(targets):
        ok = results[label].ok  # type: ignore[attr-defined]
        if ok != (kind == "at"):
            limit = smem_limit("static", t)
            what = (f"ptxas rejects {limit} bytes of static shared memory" if kind == "at"
                    else f"ptxas accepts more than {limit} bytes of static shared memory")
            out.append(Finding("targets", t.name, f"shared-memory limit in targets.toml disagrees: {what}",
                               details={"error": results[label].detail}))  # type: ignore[attr-defined]
    return out


def _list_gpu_code(tc: Toolchain) -> set[str]:
    r = _run([tc.nvcc, "--list-gpu-code"], ".")
    return set(re.findall(r"^(sm_\d+)$", r.stdout, re.M))


def _as_completed(futs):
    return as_completed(futs)


# --- regenerating macros.toml -------------------------------------------------------------


def render_macros_toml(jobs: int | None = None, cache_dir: Path | None = None) -> str:
    """The [common]/[host]/[device.*] tables of macros.toml from fresh probes.

    The header, [meta] and [functions] stay hand-written (they document the format and
    mirror crt/host_defines.h); verify checks that they reproduce the probes.
    """
    tc = Toolchain.find()
    prober = Prober(tc, ProbeCache(cache_dir))
    names = [t.name for t in all_compile_targets()]
    with ThreadPoolExecutor(max_workers=max(1, jobs or os.cpu_count() or 1)) as ex:
        dumps = list(ex.map(prober.dump_macros, [None] + names))
    host = dict(dumps[0]["ints"])  # type: ignore[index]
    host.pop("__CUDA_ARCH_LIST__", None)
    devices = {n: d["ints"] for n, d in zip(names, dumps[1:]) if d is not None}
    common = {k: v for k, v in host.items() if all(d.get(k) == v for d in devices.values())}
    lines = ["[common]"] + [f"{k} = {v}" for k, v in sorted(common.items())]
    lines += ["", "[host]"] + [f"{k} = {v}" for k, v in sorted(host.items()) if k not in common]
    for n, ints in devices.items():
        lines += ["", f"[device.{n}]"] + [f"{k} = {v}" for k, v in sorted(ints.items()) if k not in common]
    return "\n".join(lines) + "\n"
