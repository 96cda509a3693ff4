"""Confirmation of static verdicts by the compiler (`archaudit verify`).

Each selected JIT module's CUDA translation units are compiled device-only for the target's JIT
compile target (`nvcc -cubin -gencode=arch=compute_X,code=sm_X --keep`: cicc, then ptxas on the
kept PTX, whose kernels are then read), with the module's own defines and constant flags and its
include paths. nvcc compiles the scanned code; nothing is run. What the compiles show is compared with archaudit's static verdict (CONSISTENT):

- `rejected`: nvcc or ptxas rejects a TU for the target while it compiles for a target the
  module's own build flags give code for (the control compile): hardware-bound;
- otherwise each PTX `.entry` is classified (`parse_ptx`): `real`, `empty` (only `ret`), `trap`
  (only traps and prints, or a trap that every run reaches before any branch) or `arch-abort` (it
  prints CuTe's "... without CUTE_ARCH_..." message, the code CuTe compiles in place of an
  instruction the target lacks, followed by a breakpoint). No stub confirms software-only; stubs
  confirm partial and hardware-bound (the census cannot see which entry point launches which
  kernel, so the finer distinction is left to the static verdict and said in the report).

What cannot be decided is reported as such, never as a refutation: a missing header (a
third-party package such as apache-tvm-ffi that the JIT passes with -isystem: pass -I), a TU that
does not compile for the module's own target either, a timeout, a source the JIT generates.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Callable

from .children import ending_with_us
from .cuda.preproc import UNKNOWN_VALUE
from .model import HARDWARE_BOUND, PARTIAL, SOFTWARE_ONLY
from .parsing.cpp import closing_bracket

CONFIRMED, REFUTED, NOT_VERIFIED = "confirmed", "refuted", "not verified"
# the verdicts a compile can confirm or refute (admitted and unresolved make no such claim)
CHECKABLE = (SOFTWARE_ONLY, PARTIAL, HARDWARE_BOUND)
CUDA_SUFFIXES = (".cu",)
DEFAULT_TIMEOUT = 600.0


class VerifyError(Exception):
    """A condition that stops the command before anything is compiled (exit 2)."""


# --- tools -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tools:
    nvcc: str
    version: str


def find_tools() -> Tools:
    """nvcc from PATH (it runs cicc and ptxas itself); VerifyError if absent or not answering."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise VerifyError("nvcc not found on PATH: archaudit verify needs the CUDA toolkit")
    version = nvcc_version(nvcc)
    if not version:
        raise VerifyError(f"{nvcc} --version did not answer: is the CUDA toolkit installed completely?")
    return Tools(nvcc, version)


def nvcc_version(nvcc: str = "nvcc") -> str:
    """`release 13.0, V13.0.88`, or "" when nvcc cannot be asked."""
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60,
                                 preexec_fn=ending_with_us()).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    m = re.search(r"release [\d.]+, V[\d.]+", out)
    return m.group(0) if m else out.strip().splitlines()[-1] if out.strip() else ""


class _Running:
    """The compiles in flight, so that an interrupted verify ends them (each runs in a session of
    its own, out of reach of the terminal's Ctrl-C) and starts no more."""

    def __init__(self):
        self.lock = threading.Lock()
        self.procs: set[subprocess.Popen] = set()
        self.stopping = False

    def stop(self) -> None:
        with self.lock:
            self.stopping = True
            procs = list(self.procs)
        for p in procs:
            _kill_group(p)


_RUNNING = _Running()


def _kill_group(p: subprocess.Popen) -> None:
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_group(argv: list[str], timeout: float, workdir: Path) -> tuple[int | None, str]:
    """Run in its own process group (stdout and stderr together); on timeout end that group, so
    nvcc's cicc/ptxas children go too. rc None means it timed out (or verify is stopping)."""
    with _RUNNING.lock:
        if _RUNNING.stopping:
            return None, ""
        try:
            p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                                 cwd=str(workdir), start_new_session=True, preexec_fn=ending_with_us())
        except OSError as e:
            return 127, f"error: cannot run {argv[0]}: {e}"
        _RUNNING.procs.add(p)
    try:
        out, _ = p.communicate(timeout=max(0.1, timeout))
        return p.returncode, out or ""
    except subprocess.TimeoutExpired:
        _kill_group(p)
        p.communicate()
        return None, ""
    finally:
        with _RUNNING.lock:
            _RUNNING.procs.discard(p)


# gcc's preprocessor (nvcc's host and device -E) and EDG (cicc's front end)
_MISSING_HEADER = (re.compile(r"fatal error: ([^:\n]+): No such file or directory"),
                   re.compile(r'cannot open source file "([^"\n]+)"'))
_ERROR_LINE = re.compile(r"\berror\b", re.I)


def missing_header(log: str) -> str | None:
    """The header a failed compile could not find, if that is why it failed."""
    for rx in _MISSING_HEADER:
        m = rx.search(log)
        if m:
            return m.group(1).strip()
    return None


def first_error(log: str, rc: int | None = None) -> str:
    """The first line of a compiler log that says error (else its first line)."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    return next((ln for ln in lines if _ERROR_LINE.search(ln)), lines[0] if lines else f"exit status {rc}")[:400]


# --- PTX census ------------------------------------------------------------------------------------

REAL, EMPTY, TRAP, ARCH_ABORT = "real", "empty", "trap", "arch-abort"
STUBS = (EMPTY, TRAP, ARCH_ABORT)

_HEAD = re.compile(r"^[ \t]*(?:\.(?:visible|weak|extern)[ \t]+)*\.(entry|func)\b", re.M)
_NAME = re.compile(r"[\w$.]+")
_STRING = re.compile(r"\.b8[ \t]+([\w$]+)\[\d+\][ \t]*=[ \t]*\{([\d,\s]+)\}")
_SYMBOL = re.compile(r"\$?[A-Za-z_$][\w$]*")
# `call.uni (retval0), vprintf, (param0, param1);`, spread over lines as nvcc writes it
_CALLEE = re.compile(r"\bcall(?:\.uni)?\s+(?:\([^)]*\)\s*,\s*)?([A-Za-z_$][\w$]*)")
# the messages CuTe/CUTLASS print (CUTE_INVALID_CONTROL_PATH, then a breakpoint) in place of an
# instruction the compile target lacks: "Attempting to use SM100_MMA_... without
# CUTE_ARCH_MMA_SM100A_ENABLED", "Arch conditional MMA instruction used without targeting sm90a"
ARCH_ABORT_MESSAGE = re.compile(r"\bwithout (?:CUTE_ARCH_\w+|targeting\b)|\bCUTE_ARCH_\w+ is not defined")
# an instruction line that does no work of the kernel: control, parameter moves, printing
_NOT_WORK = re.compile(
    r"^(?:ret|exit|trap|brkpt|bra(?:\.uni)?|ld\.param|mov|cvta|call(?:\.uni)?|st\.param|\.param|\.reg|\.local|\.shared|"
    r"\{|\}|\)|\(|add\.u64\s+%rd\d+,\s*%SPL?\b|vprintf|_|\$)")
_DIRECTIVE = (".reg", ".local", ".shared", ".loc", ".pragma")


@dataclass
class Entry:
    """One kernel (`.entry`) of a PTX file."""

    mangled: str
    status: str  # real | empty | trap | arch-abort
    instructions: int
    message: str = ""  # the abort message of an arch-abort

    def to_json(self) -> dict:
        d = {"kernel": self.mangled, "status": self.status, "instructions": self.instructions}
        if self.message:
            d["message"] = self.message
        return d


def _functions(ptx: str) -> list[tuple[str, str, str]]:
    """(kind, name, body) of every defined .entry and .func (declarations have no body)."""
    out = []
    for m in _HEAD.finditer(ptx):
        i = m.end()
        while i < len(ptx) and ptx[i].isspace():
            i += 1
        if m.group(1) == "func" and ptx.startswith("(", i):  # the return value
            i = closing_bracket(ptx, i, "(", ")") + 1
            while i < len(ptx) and ptx[i].isspace():
                i += 1
        nm = _NAME.match(ptx, i)
        if nm is None:
            continue
        i = nm.end()
        while i < len(ptx) and ptx[i].isspace():
            i += 1
        if ptx.startswith("(", i):
            i = closing_bracket(ptx, i, "(", ")") + 1
        brace, semi = ptx.find("{", i), ptx.find(";", i)
        if brace < 0 or (0 <= semi < brace):
            continue  # a declaration (.extern .func vprintf ...;)
        end = closing_bracket(ptx, brace, "{", "}")
        out.append((m.group(1), nm.group(0), ptx[brace + 1:end]))
    return out


def _instructions(body: str) -> list[str]:
    out = []
    for ln in body.splitlines():
        ln = ln.split("//")[0].strip()
        if not ln or ln.startswith(_DIRECTIVE):
            continue
        out.append(ln)
    return out


def _strings(ptx: str) -> dict[str, str]:
    """The byte-array constants of a PTX file (printf formats), decoded."""
    out = {}
    for m in _STRING.finditer(ptx):
        try:
            data = bytes(int(x) for x in m.group(2).replace("\n", " ").split(",") if x.strip())
        except ValueError:
            continue
        out[m.group(1)] = data.split(b"\0", 1)[0].decode("latin-1")
    return out


def _always_traps(instrs: list[str]) -> bool:
    """An unpredicated trap before the first label or branch: every run of the kernel reaches it."""
    for ln in instrs:
        if ln.endswith(":") or ln.startswith(("bra", "@")) or ln.split()[0].startswith("bra"):
            return False
        if ln.rstrip(";").strip() == "trap":
            return True
    return False


def parse_ptx(ptx: str) -> list[Entry]:
    """Every kernel of a PTX file with its class; see the module docstring."""
    funcs = _functions(ptx)
    strings = _strings(ptx)
    aborts = {name: msg for name, msg in strings.items() if ARCH_ABORT_MESSAGE.search(msg)}
    # the abort message each function prints itself or through the functions it calls
    names = {name for _kind, name, _body in funcs}
    direct: dict[str, str] = {}
    calls: dict[str, set[str]] = {}
    for _kind, name, body in funcs:
        for sym in _SYMBOL.findall(body):
            if sym in aborts and name not in direct:
                direct[name] = aborts[sym]
        calls[name] = {c for c in _CALLEE.findall(body) if c in names}

    def abort_of(name: str, seen: set[str]) -> str:
        if name in direct:
            return direct[name]
        seen.add(name)
        for c in calls.get(name, ()):
            if c not in seen:
                msg = abort_of(c, seen)
                if msg:
                    return msg
        return ""

    out = []
    for kind, name, body in funcs:
        if kind != "entry":
            continue
        instrs = [ln for ln in _instructions(body) if not ln.endswith(":")]
        plain = [re.sub(r"^@!?%p\d+\s+", "", ln) for ln in instrs]
        ops = [x.split()[0].rstrip(";") for x in plain]
        msg = ""
        if all(o == "ret" for o in ops):
            status = EMPTY
        elif _always_traps(_instructions(body)) or (
                any(o == "trap" for o in ops) and all(_NOT_WORK.match(x) for x in plain)):
            status = TRAP
        else:
            msg = abort_of(name, set())
            status = ARCH_ABORT if msg else REAL
        out.append(Entry(name, status, len(instrs), msg.strip()))
    return out


def demangle(names: list[str]) -> dict[str, str]:
    """Mangled -> demangled C++ names (c++filt or cu++filt; the names themselves without one)."""
    tool = shutil.which("c++filt") or shutil.which("cu++filt")
    if not tool or not names:
        return {n: n for n in names}
    try:
        p = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, timeout=120,
                           preexec_fn=ending_with_us())
    except (OSError, subprocess.TimeoutExpired):
        return {n: n for n in names}
    got = p.stdout.splitlines()
    return dict(zip(names, got)) if len(got) == len(names) else {n: n for n in names}


def family(demangled: str) -> str:
    """`void ns::k<float, 2>(P<float>)` -> `k`: the function name without scope or arguments."""
    s = re.sub(r"\(.*$", "", demangled)  # parameters (the first '(' after the name)
    depth, out = 0, []
    for c in s:  # drop template arguments
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif depth == 0:
            out.append(c)
    words = "".join(out).split()
    return (words[-1] if words else s).split("::")[-1]


def label(demangled: str) -> str:
    """A kernel's name with its first template argument's name: `device_kernel<Sm100MlaKernel>`
    for `void cutlass::device_kernel<cutlass::fmha::Sm100MlaKernel<...>, 2>(...)`, where the
    function name alone would say nothing."""
    name = family(demangled)
    head = re.sub(r"\(.*$", "", demangled)
    i = head.find("<")
    if i < 0:
        return name
    depth, j = 0, i
    for j in range(i, len(head)):
        if head[j] == "<":
            depth += 1
        elif head[j] == ">":
            depth -= 1
            if depth == 0:
                break
        elif head[j] == "," and depth == 1:
            break
    first = family(head[i + 1:j].strip())
    return f"{name}<{first}>" if first else name


# --- what to compile -------------------------------------------------------------------------------


@dataclass
class Candidate:
    """A module to verify: its record and the static verdict to check."""

    record: object  # inventory.ModuleRecord
    claim: str | None  # software-only / partial / hardware-bound; None: nothing to check
    claim_reason: str = ""
    via: str = "default"  # default | --module GLOB | --gate PATH:LINE


def claim_of(record, gpu_name: str) -> tuple[str | None, str]:
    v = record.verdicts.get(gpu_name) or {}
    verdict = v.get("verdict")
    return (verdict if verdict in CHECKABLE else None), v.get("reason", "")


def _module_claim(mv) -> tuple[str | None, str]:
    """The claim a finding's module verdict makes about the whole module (for a module whose own
    verdict is admitted or unresolved: a gate elsewhere, e.g. a C++ runtime check, decides it)."""
    if mv.prediction in ("fails", "stub"):
        return HARDWARE_BOUND, mv.reason
    if mv.prediction != "builds":
        return None, mv.reason
    known = [k for k in mv.kernels if k.status != "unknown"]
    stubs = [k for k in known if k.status != "real"]
    if not known:
        return None, "no kernel of the module is known statically"
    if len(stubs) == len(known):
        return HARDWARE_BOUND, "every kernel is a stub"
    return (PARTIAL, "stubs: " + ", ".join(k.name for k in stubs)) if stubs else (SOFTWARE_ONLY, "every kernel is real")


def select(result, gpu_name: str, modules: tuple[str, ...] = (), gates: tuple[str, ...] = ()) -> tuple[list[Candidate], list[str]]:
    """The modules to verify and the selections that matched nothing. Default (no --module and no
    --gate): every module whose verdict for the target is software-only, partial or hardware-bound."""
    records = list(result.modules)
    chosen: dict[int, Candidate] = {}
    unmatched: list[str] = []
    if not modules and not gates:
        for i, r in enumerate(records):
            claim, why = claim_of(r, gpu_name)
            if claim is not None:
                chosen[i] = Candidate(r, claim, why)
        return list(chosen.values()), unmatched
    for pat in modules:
        hit = [i for i, r in enumerate(records) if fnmatchcase(r.name, pat)]
        if not hit:
            unmatched.append(f"--module {pat}: no JIT module of the scan has a matching name")
        for i in hit:
            if i not in chosen:
                chosen[i] = Candidate(records[i], *claim_of(records[i], gpu_name), via=f"--module {pat}")
    for spec in gates:
        path, _, line = spec.rpartition(":")
        found = [f for f in result.findings
                 if f.target == gpu_name and f.gate.path == path and str(f.gate.line) == line]
        matched = 0
        for f in found:
            for mv in f.modules:
                for i, r in enumerate(records):
                    if r.name != mv.name or sorted(r.sources) != sorted(mv.sources):
                        continue
                    matched += 1
                    if i not in chosen:
                        claim, why = claim_of(r, gpu_name)
                        if claim is None:
                            claim, why = _module_claim(mv)
                        chosen[i] = Candidate(r, claim, why, via=f"--gate {spec}")
        if not found:
            unmatched.append(f"--gate {spec}: no finding for {gpu_name} at that line")
        elif not matched:
            names = sorted({mv.name for f in found for mv in f.modules})
            unmatched.append(f"--gate {spec}: no JIT module of the scan builds what it guards"
                             + (f" ({', '.join(names)})" if names else ""))
    return list(chosen.values()), unmatched


# --- compiling -------------------------------------------------------------------------------------

# flags that choose the architecture, the output or the link: this command sets those itself
_ARCH_FLAGS = ("-gencode", "--generate-code", "-arch", "--gpu-architecture", "-code", "--gpu-code")
_DROP = ("-c", "-o", "-ptx", "--ptx", "-cubin", "--cubin", "-dc", "-dlink", "-shared", "-lib", "-Xlinker", "--linker-options")
_DROP_PREFIX = ("-l", "-L", "-I", "-isystem", "-D", "-U", "-o")
_KEEP = ("-lineinfo",)  # an nvcc flag, not a library


def module_flags(flags: list[str]) -> list[str]:
    """The module's constant nvcc flags that shape device code (architecture, output, link,
    include and define flags are set from elsewhere)."""
    out = []
    skip_next = False
    for f in flags:
        if skip_next:
            skip_next = False
            continue
        if f in _ARCH_FLAGS or f in ("-I", "-isystem", "-o", "-D", "-U", "-l", "-L", "-Xlinker", "--linker-options"):
            skip_next = True
            continue
        if not f or f in _DROP or f.startswith(tuple(a + "=" for a in _ARCH_FLAGS)) or (
                f.startswith(_DROP_PREFIX) and f not in _KEEP):
            continue
        out.append(f)
    return out


def define_flags(defines: dict[str, str]) -> list[str]:
    return [f"-D{k}" if v in ("", None) else f"-D{k}={v}" for k, v in defines.items()]


@dataclass
class Build:
    """How one TU of a module is compiled: everything but the compile target."""

    source: str  # scan-relative
    path: Path  # absolute
    flags: tuple[str, ...]  # defines, module flags, include dirs


@dataclass
class Compile:
    """One compile of one TU for one compile target."""

    target: str
    outcome: str  # ok | error | missing-header | timeout
    stage: str = ""  # nvcc | ptxas (of an error)
    detail: str = ""
    wall_s: float = 0.0
    entries: list[Entry] = field(default_factory=list)
    command: str = ""

    def to_json(self) -> dict:
        d = {"target": self.target, "outcome": self.outcome, "wall_s": self.wall_s, "command": self.command}
        if self.stage:
            d["stage"] = self.stage
        if self.detail:
            d["detail"] = self.detail
        if self.entries:
            d["kernels"] = [e.to_json() for e in self.entries]
        return d


def compile_tu(tools: Tools, build: Build, target: str, timeout: float) -> Compile:
    """One device-only nvcc run in a temporary directory: cicc to PTX (kept), ptxas to a cubin, as
    `-gencode=arch=compute_X,code=sm_X` (the JIT's spelling) asks; no host compile."""
    code = target[3:] if target.startswith("sm_") else target
    with tempfile.TemporaryDirectory(prefix="archaudit-verify-") as td:
        work = Path(td)
        argv = [tools.nvcc, "-cubin", f"-gencode=arch=compute_{code},code=sm_{code}", "--keep", "--keep-dir", str(work),
                *build.flags, "-o", str(work / "tu.cubin"), str(build.path)]
        shown = " ".join([Path(argv[0]).name, *argv[1:4], "--keep-dir", "TMP", *build.flags, "-o", "TMP/tu.cubin", build.source])
        t0 = time.monotonic()
        rc, log = run_group(argv, timeout, work)
        wall = round(time.monotonic() - t0, 1)
        ptx = next(iter(sorted(work.glob("*.ptx"))), None)
        text = ptx.read_text(errors="replace") if rc == 0 and ptx is not None else ""
    log = log.replace(str(work) + "/", "")
    if rc is None:
        return Compile(target, "timeout", "", f"ran past {timeout:.0f} s", wall, command=shown)
    if rc != 0:
        hdr = missing_header(log)
        if hdr is not None:
            return Compile(target, "missing-header", "nvcc", hdr, wall, command=shown)
        stage = "ptxas" if any(ln.startswith("ptxas") and _ERROR_LINE.search(ln) for ln in log.splitlines()) else "nvcc"
        return Compile(target, "error", stage, first_error(log, rc), wall, command=shown)
    return Compile(target, "ok", "", "", wall, parse_ptx(text), command=shown)


@dataclass
class TuCheck:
    source: str
    result: Compile | None  # None: not compiled (see note)
    control: Compile | None = None  # the same TU for a target of the module's own build
    note: str = ""

    def to_json(self) -> dict:
        d = {"source": self.source}
        if self.result is not None:
            d["compile"] = self.result.to_json()
        if self.control is not None:
            d["control"] = self.control.to_json()
        if self.note:
            d["note"] = self.note
        return d


@dataclass
class ModuleCheck:
    name: str
    sources: list[str]
    generator: tuple[str, int, str]
    claim: str | None
    claim_reason: str
    compile_target: str
    via: str
    result: str = NOT_VERIFIED
    observed: str | None = None
    why: str = ""
    tus: list[TuCheck] = field(default_factory=list)
    # the build compiles one of these lists of the sources, chosen by its arguments
    source_lists: list[tuple[str, ...]] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"name": self.name, "generator": {"path": self.generator[0], "line": self.generator[1],
                                                 "function": self.generator[2]},
                "sources": list(self.sources), "selected_by": self.via, "static_verdict": self.claim,
                "static_reason": self.claim_reason, "compile_target": self.compile_target, "result": self.result,
                "observed": self.observed, "why": self.why, "tus": [t.to_json() for t in self.tus]}


def control_target(record, reg, target: str) -> str | None:
    """A compile target the module's own build flags give code for (the JIT's choice for the first
    GPU they admit), other than `target`."""
    admits = record.build_admits or frozenset()
    for name in reg.sort_names(admits):
        gpu = reg.by_name.get(name)
        if gpu is None:
            continue
        ct = reg.jit_target(gpu).name
        if ct != target:
            return ct
    return None


def include_dirs(root: Path, record, scan_roots: list[str], user: tuple[str, ...]) -> list[str]:
    """-I flags: the module's include paths, then the user's, then the scan's include roots (a
    JIT passes its module's directories first, then the ones of its own environment)."""
    dirs = [Path(rel) if os.path.isabs(rel) else root / rel for rel in record.include_paths]
    dirs += [Path(d).resolve() for d in user]
    dirs += [root / rel for rel in scan_roots]
    out: list[str] = []
    for p in dirs:
        flag = f"-I{p}"
        if p.is_dir() and flag not in out:
            out.append(flag)
    return out


# what the compiles show about a module, and the static verdicts each is consistent with. The
# census sees kernels, not which entry point launches which: stubs beside real kernels are what a
# partial module shows, and also a hardware-bound one whose every entry point launches a stub (a
# real reduction kernel after an aborting main kernel); a partial module's real entry points may
# launch no kernel at all.
REJECTED, ALL_STUBS, SOME_STUBS, NO_STUBS = "rejected", "all kernels stubs", "some kernels stubs", "no stubs"
# a module compiling one of several source lists: some lists rejected, every TU of another compiles
SOME_LISTS_REJECTED = "some source lists rejected"
CONSISTENT = {
    SOFTWARE_ONLY: (NO_STUBS,),
    PARTIAL: (SOME_STUBS, ALL_STUBS, SOME_LISTS_REJECTED),
    HARDWARE_BOUND: (REJECTED, ALL_STUBS, SOME_STUBS),
}
# the matches that rest on what the census cannot see, said in the report
_CAVEAT = {
    (HARDWARE_BOUND, SOME_STUBS): "consistent if every entry point launches one of the stubs",
    (PARTIAL, ALL_STUBS): "consistent only if the real entry points launch no kernel",
}


def _lists_compiled(check: ModuleCheck, compiled: list, rejected: set[str]) -> None:
    """For a module compiling one of several source lists: SOME_LISTS_REJECTED when a list with a
    rejected TU sits beside one whose every TU compiled (no arch error, nothing left unverified)."""
    ok = {t.source for t in compiled if t.source not in rejected and not _not_verified(t)}
    seen = {t.source for t in compiled}
    fine = [lst for lst in check.source_lists
            if any(p in ok for p in lst) and all(p in ok or p not in seen for p in lst)]
    if fine and len(fine) < len(check.source_lists):
        check.observed = SOME_LISTS_REJECTED
        check.why = (f"{len(fine)} of {len(check.source_lists)} source lists compile for {check.compile_target} "
                     f"(e.g. {', '.join(fine[0])}); {check.why}")


def judge(check: ModuleCheck) -> None:
    """What the TU compiles show about a module, and the result against its static verdict."""
    compiled = [t for t in check.tus if t.result is not None]
    if not compiled:
        check.why = next((t.note for t in check.tus if t.note), "no CUDA source to compile")
        return
    arch = [t for t in compiled if _arch_error(t)]
    if arch:
        t = arch[0]
        r = t.result
        ctrl = f"; {t.control.target} compiles it" if t.control is not None else ""
        check.observed = REJECTED
        check.why = f"{r.stage} rejects {t.source} for {r.target}: {r.detail}{ctrl}"
        _lists_compiled(check, compiled, {t.source for t in arch})
    else:
        for t in compiled:
            why = _not_verified(t)
            if why:
                check.why = why
                return
        entries = [e for t in compiled for e in t.result.entries]
        stubs = [e for e in entries if e.status != REAL]
        counts = {st: sum(1 for e in entries if e.status == st) for st in (REAL, *STUBS)}
        census = ", ".join(f"{n} {st}" for st, n in counts.items() if n) or "none"
        if not stubs:
            check.observed = NO_STUBS
            check.why = f"every TU compiles for {check.compile_target}; kernels: {census}"
        else:
            check.observed = ALL_STUBS if len(stubs) == len(entries) else SOME_STUBS
            names = demangle(sorted({e.mangled for e in stubs}))
            labels = sorted({label(names[e.mangled]) for e in stubs})
            msgs = sorted({e.message for e in stubs if e.message})
            check.why = (f"kernels: {census}; stubs: {', '.join(labels[:6])}{' ...' if len(labels) > 6 else ''}"
                         + (f" ({'; '.join(msgs[:3])})" if msgs else ""))
    if check.claim is None:
        check.why = f"no static verdict to check ({check.claim_reason or 'admitted or unresolved'}); nvcc: {check.why}"
        return
    check.result = CONFIRMED if check.observed in CONSISTENT.get(check.claim, ()) else REFUTED
    caveat = _CAVEAT.get((check.claim, check.observed))
    if caveat:
        check.why += f" ({caveat})"


def _arch_error(t: TuCheck) -> bool:
    """The target compile failed and the control compile (or, without one, ptxas) says it is the target's."""
    r = t.result
    if r is None or r.outcome != "error":
        return False
    if t.control is not None:
        return t.control.outcome == "ok"
    return r.stage == "ptxas"


def _not_verified(t: TuCheck) -> str:
    r = t.result
    if r.outcome == "ok":
        return ""
    if r.outcome == "missing-header":
        return f"missing header {r.detail} (pass -I): {t.source}"
    if r.outcome == "timeout":
        return f"timeout: {t.source}: {r.detail}"
    c = t.control
    if c is None:
        return f"{r.stage} error for {r.target} and no other target of the module to compare: {t.source}: {r.detail}"
    if c.outcome == "missing-header":
        return f"{r.stage} error for {r.target}; missing header {c.detail} for its own target {c.target} (pass -I): {t.source}"
    if c.outcome == "timeout":
        return f"{r.stage} error for {r.target}; its own target {c.target} timed out: {t.source}: {r.detail}"
    return f"does not compile for its own target {c.target} either: {t.source}: {c.detail}"


def verify(root: str, candidates: list[Candidate], reg, gpu_name: str, target: str, tools: Tools,
           scan_roots_of: Callable[[str], list[str]], user_includes: tuple[str, ...] = (),
           extra_flags: tuple[str, ...] = (), jobs: int = 1, timeout: float = DEFAULT_TIMEOUT,
           progress: Callable[[str], None] | None = None) -> list[ModuleCheck]:
    """Compile every CUDA TU of the candidates for `target` (a TU shared by modules with the same
    flags once), with a control compile where the target's fails; judge each module."""
    base = Path(root).resolve()
    checks: list[ModuleCheck] = []
    plan: list[tuple[ModuleCheck, TuCheck, Build | None, str | None]] = []
    for c in candidates:
        r = c.record
        check = ModuleCheck(r.name, list(r.sources), tuple(r.generator), c.claim, c.claim_reason, target, c.via,
                            source_lists=list(getattr(r, "source_lists", ())))
        checks.append(check)
        ctrl = control_target(r, reg, target)
        # a -D whose value the scan could not fix (a parameter, flags of alternative branches)
        unknown = sorted(k for k, v in r.defines.items() if v == UNKNOWN_VALUE)
        for src in r.sources:
            tu = TuCheck(src, None)
            check.tus.append(tu)
            if unknown:
                tu.note = f"the value of the module's -D{unknown[0]} is unknown to archaudit: nothing to compile it with"
                continue
            if not src.endswith(CUDA_SUFFIXES):
                tu.note = f"{src}: not a CUDA source (host code is not compiled)"
                continue
            path = base / src
            if not path.is_file() or base not in path.resolve().parents:
                tu.note = f"source {src} is not a file under the scan root (generated by the JIT?)"
                continue
            top = src.split("/", 1)[0]
            flags = (*define_flags(r.defines), *module_flags(r.cuda_flags), *extra_flags,
                     *include_dirs(base, r, scan_roots_of(top), user_includes))
            plan.append((check, tu, Build(src, path, tuple(flags)), ctrl))
    # one compile per distinct (file, flags, control target): modules share sources
    units: dict[tuple, list[tuple[ModuleCheck, TuCheck]]] = {}
    builds: dict[tuple, tuple[Build, str | None]] = {}
    for check, tu, build, ctrl in plan:
        key = (str(build.path), build.flags, ctrl)
        units.setdefault(key, []).append((check, tu))
        builds[key] = (build, ctrl)
    lock = threading.Lock()
    done = [0]

    def job(key):
        build, ctrl = builds[key]
        res = compile_tu(tools, build, target, timeout)
        control = compile_tu(tools, build, ctrl, timeout) if res.outcome == "error" and ctrl is not None else None
        for _check, tu in units[key]:
            tu.result, tu.control = res, control
        if progress is not None and not _RUNNING.stopping:
            with lock:
                done[0] += 1
                n = done[0]
            extra = f"; {control.target}: {control.outcome}, {control.wall_s} s" if control else ""
            stage = f" ({res.stage})" if res.stage else ""
            progress(f"[{n}/{len(units)}] {', '.join(sorted({c.name for c, _ in units[key]}))}: {build.source}: "
                     f"{res.outcome}{stage}, {res.wall_s} s{extra}")

    if units:
        _RUNNING.stopping = False
        ex = ThreadPoolExecutor(max_workers=max(1, jobs))
        try:
            list(ex.map(job, list(units)))
        except BaseException:  # Ctrl-C included: no compile outlives the command
            _RUNNING.stop()
            raise
        finally:
            ex.shutdown(wait=True, cancel_futures=True)
    for check in checks:
        judge(check)
    return checks


def summary(checks: list[ModuleCheck]) -> dict:
    by = {k: sum(1 for c in checks if c.result == k) for k in (CONFIRMED, REFUTED, NOT_VERIFIED)}
    tus = [t for c in checks for t in c.tus if t.result is not None]
    return {"modules": len(checks), **by, "tus_compiled": len(tus),
            "compile_s": round(sum(t.result.wall_s + (t.control.wall_s if t.control else 0) for t in tus), 1)}


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)
