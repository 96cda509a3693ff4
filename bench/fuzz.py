"""Mutation fuzzer for the two parsers that take raw bytes (issue 8).

    nice -n 15 python bench/fuzz.py python --minutes 15 --seeds SITE_PACKAGES --out DIR
    nice -n 15 python bench/fuzz.py cuda   --minutes 15 --seeds SITE_PACKAGES --out DIR

`python`: archaudit.parsing.python_ir.parse_python (full and shallow), the byte screen, and the
gate finder (index + abstract interpreter) on the result. `cuda`: the lexical scanner
(parsing.cpp.scan/structure), build_program, features.extract, a TU analysis for sm_120f and
sm_90a (the file includes itself and a second mutant), and the runtime-check finder.

Seeds are small real files from SITE_PACKAGES plus built-in hostile snippets. Mutations: bit
flips, interesting bytes, token insertion from a dictionary, range deletion/duplication, splicing
two inputs, truncation and deep nesting. An input whose outcome (errors, prediction, diagnostic
kinds) was not seen before joins the pool: cheap feedback without coverage instrumentation.

A crash is any exception escaping a target; an input taking more than --slow seconds of CPU is
reported as slow; more than --hang seconds of wall time stops the run (the worker thread cannot
be killed).
Inputs are saved under DIR/{crash,slow}/; a JSON summary goes to DIR/summary-<target>.json.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import queue
import random
import sys
import threading
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PY_TOKENS = [b"def f(", b"):\n", b"    ", b"\t", b"if ", b":\n", b"else:\n", b"elif x:\n", b"(", b")", b"[", b"]", b"{",
             b"}", b"'''", b'"""', b"'", b'"', b"\\\n", b"lambda x: ", b"print 'x'\n", b"exec 'x'\n", b"`x`", b"<>",
             b"\xff", b"\x00", b"\r", b"\r\n", b"\x0c", b"async def ", b"await ", b"match x:\n    case 1:\n", b"@d\n",
             b"f'{x!r:>{w}}'", b"torch.cuda.get_device_capability()", b"major >= 9", b"is_sm90_supported()",
             b"import torch\n", b"from . import *\n", b"class C:\n", b"return ", b"raise ", b"yield ", b"global x\n",
             b"supported_major_versions=[9, 10]", b"\xef\xbb\xbf", b"# -*- coding: latin-1 -*-\n", b"not ", b" or ",
             b" and ", b"*args", b"**kw", b"x := 1", b"0x_", b"1e", b"\\N{", b"u'", b"rb'", b"try:\n", b"except:\n",
             b"finally:\n", b"with a as (b, c):\n", b"for x in y:\n", b"while 1:\n", b"del x\n", b"type X = int\n"]
CU_TOKENS = [b"#if ", b"#ifdef X\n", b"#ifndef X\n", b"#else\n", b"#elif 1\n", b"#elif __CUDA_ARCH__ >= 900\n",
             b"#endif\n", b"#define F(x) F(x x)\n", b"#define X X\n", b"#define A(...) __VA_ARGS__\n", b"#undef X\n",
             b"#include \"self.cu\"\n", b"#include \"other.cuh\"\n", b"#include <cuda.h>\n", b"#include X\n",
             b"__CUDA_ARCH__ >= 900\n", b"defined(__CUDA_ARCH_FEAT_SM90_ALL)", b"__CUDA_ARCH_SPECIFIC__",
             b"asm volatile(\"wgmma.fence.sync.aligned;\");", b"asm(\"trap;\");", b"R\"x(", b")x\"", b"/*", b"*/",
             b"//", b"\\\n", b"'", b"\"", b"{", b"}", b"(", b")", b"<", b">", b"::", b";", b"__global__ void k() ",
             b"template <int N> ", b"struct S ", b"namespace n ", b"__device__ ", b"__shared__ float s[65536];",
             b"\x00", b"\xff", b"\r\n", b"#pragma once\n", b"#error nope\n", b"__trap();", b"CUTLASS_NOT_IMPLEMENTED();",
             b"TORCH_CHECK(major >= 9, \"x\");", b"cudaGetDeviceProperties(&prop, 0);", b"prop.major * 10 + prop.minor",
             b"##", b"#x", b"__has_include(<x>)", b"0x7fffffffffffffff", b"18446744073709551615ULL", b"1/0", b"%0"]

PY_EXTRA_SEEDS = [
    b"import torch\n\ndef f():\n    if torch.cuda.get_device_capability() >= (9, 0):\n        return 1\n    return 0\n",
    b"import torch\nmajor, minor = torch.cuda.get_device_capability()\nif major in (9, 10) and not minor:\n    X = [9, 10]\n",
    b"def is_sm90_supported():\n    return get_device_sm() // 10 == 9\nuse = is_sm90_supported() or is_sm100_supported()\n",
]
CU_EXTRA_SEEDS = [
    b"#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900\n__global__ void k() { asm volatile(\"wgmma.fence.sync.aligned;\"); }\n"
    b"#else\n__global__ void k() { __trap(); }\n#endif\n",
    b"#define SM90 (__CUDA_ARCH__ >= 900)\n#if SM90\n#include \"other.cuh\"\n#endif\nvoid host() { TORCH_CHECK(sm >= 90); }\n",
    b"#pragma once\ntemplate <int N> __global__ void k(float* p) {\n  __shared__ float s[N];\n  p[0] = s[0];\n}\n",
]

PY_EXT = (".py",)
CU_EXT = (".cu", ".cuh", ".h", ".hpp", ".cpp", ".cc", ".inl")


def collect_seeds(root: Path | None, exts: tuple[str, ...], n: int, max_bytes: int, rng: random.Random) -> list[bytes]:
    out: list[bytes] = []
    if root is not None:
        paths = []
        for dp, _dn, fn in os.walk(root):
            for f in fn:
                if f.endswith(exts):
                    p = os.path.join(dp, f)
                    try:
                        if 0 < os.path.getsize(p) <= max_bytes and not os.path.islink(p):
                            paths.append(p)
                    except OSError:
                        pass
        paths.sort()
        rng.shuffle(paths)
        for p in paths[:n]:
            with open(p, "rb") as fh:
                out.append(fh.read())
    return out


class Mutator:
    def __init__(self, rng: random.Random, tokens: list[bytes], nest: list[tuple[bytes, bytes]]):
        self.rng = rng
        self.tokens = tokens
        self.nest = nest

    def mutate(self, data: bytes, other: bytes) -> bytes:
        rng = self.rng
        b = bytearray(data)
        for _ in range(rng.choice((1, 1, 2, 3, 5, 8))):
            op = rng.randrange(10)
            n = len(b)
            pos = rng.randrange(n + 1)
            if op == 0 and n:
                i = rng.randrange(n)
                b[i] ^= 1 << rng.randrange(8)
            elif op == 1 and n:
                b[rng.randrange(n)] = rng.choice((0, 0x7F, 0x80, 0xFF, 0x0A, 0x09, 0x0D, 0x5C, 0x23, 0x28, 0x29, 0x27, 0x22))
            elif op in (2, 3):
                b[pos:pos] = rng.choice(self.tokens)
            elif op == 4 and n:
                end = min(n, pos + rng.randrange(1, 64))
                del b[pos:end]
            elif op == 5 and n:
                s = rng.randrange(n)
                chunk = b[s : s + rng.randrange(1, 128)]
                b[pos:pos] = chunk * rng.choice((1, 2, 8, 64))
            elif op == 6 and other:
                s = rng.randrange(len(other))
                b[pos:pos] = other[s : s + rng.randrange(1, 512)]
            elif op == 7 and n:
                del b[rng.randrange(n):]
            elif op == 8:
                left, right = rng.choice(self.nest)
                depth = rng.choice((10, 100, 250, 1000, 5000))
                b[pos:pos] = left * depth + b"x" + right * depth
            else:
                b[pos:pos] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 16)))
        return bytes(b[: 1 << 20])


# --- targets: each returns an outcome signature (for feedback) or raises ---------------------

def run_python(data: bytes) -> tuple:
    from archaudit.parsing.python_ir import parse_python
    from archaudit.parsing.screen import python_text_problem
    from archaudit.pipeline import package_resolver
    from archaudit.python.gates import find_python_gates
    from archaudit.python.index import Index
    from archaudit.sources import Source
    from archaudit.targets import registry

    why = python_text_problem(data)
    pm = parse_python(data)
    parse_python(data, shallow=True)
    nlines = data.count(b"\n") + 1
    for line, msg in pm.errors:
        if not (1 <= line <= nlines) or not isinstance(msg, str):
            raise AssertionError(f"error line {line} outside 1..{nlines}: {msg!r}")

    class Mem(Source):
        label = "<fuzz>"

        def files(self):
            return ["fz/__init__.py", "fz/m.py"]

        def _read_bytes(self, rel):
            return {"fz/__init__.py": b"", "fz/m.py": data}.get(rel)

        def exists(self, rel):
            return rel in self.files()

        def is_dir(self, rel):
            return rel in ("", "fz")

    src = Mem()
    index = Index(src, src.files(), path_based=True)
    scan = find_python_gates(src, index, registry(), package_resolver(src, []))
    kinds = tuple(sorted({m.split(" (")[0][:30] for _, m in pm.errors}))
    return ("py", why is not None, kinds, tuple(sorted({g.kind for g in scan.gates})),
            tuple(sorted({d.kind for d in index.diagnostics})), min(len(pm.body), 8))


def run_cuda(data: bytes, other: bytes = b"") -> tuple:
    from archaudit.cuda import features as F
    from archaudit.cuda import ruleset
    from archaudit.cuda.preproc import build_program
    from archaudit.cuda.runtime_checks import find_runtime_checks
    from archaudit.cuda.tu import CudaProject
    from archaudit.parsing import cpp

    sc = cpp.scan(data)
    if not (len(sc.code) == len(sc.text) == len(sc.body) == len(data)):
        raise AssertionError("scan changed the length")
    cpp.structure(sc)
    build_program(sc)
    F.extract("fz/self.cu", data)
    files = {"fz/self.cu": data, "fz/other.cuh": other or data}

    class Reader:
        problems: dict = {}

        def read(self, rel):
            return files.get(rel)

        def exists(self, rel):
            return rel in files

        def files(self):
            return sorted(files)

    proj = CudaProject(Reader(), ["fz", ""], {}, sorted(files))
    sig = []
    for t in ("sm_120f", "sm_90a"):
        res = proj.analyse_tu("fz/self.cu", ruleset.target_by_name(t))
        if res.prediction not in ("builds", "fails", "stub", "unknown"):
            raise AssertionError(f"prediction {res.prediction!r}")
        sig.append((res.prediction, tuple(sorted({d.kind for d in res.diagnostics}))))
    gates = find_runtime_checks("fz/self.cu", data)
    return ("cu", tuple(sig), len(gates) > 0)


# --- driver ------------------------------------------------------------------------------------

def _signature_of_crash(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    ours = [f for f in tb if "archaudit" in f.filename]
    where = f"{Path(ours[-1].filename).name}:{ours[-1].lineno}" if ours else (f"{Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else "?")
    return f"{type(e).__name__} at {where}"


def fuzz(target: str, minutes: float, seeds_root: Path | None, out: Path, seed: int, slow: float, hang: float) -> dict:
    rng = random.Random(seed)
    if target == "python":
        pool = collect_seeds(seeds_root, PY_EXT, 400, 32 * 1024, rng) + PY_EXTRA_SEEDS
        mut = Mutator(rng, PY_TOKENS, [(b"(", b")"), (b"[", b"]"), (b"not ", b""), (b"-", b""), (b"if x:\n" + b" ", b"")])
        fn = run_python
    else:
        pool = collect_seeds(seeds_root, CU_EXT, 400, 32 * 1024, rng) + CU_EXTRA_SEEDS
        mut = Mutator(rng, CU_TOKENS, [(b"(", b")"), (b"#if 1\n", b"\n#endif\n"), (b"{", b"}"), (b"!", b""),
                                      (b"F(", b")")])
        fn = run_cuda
    (out / "crash").mkdir(parents=True, exist_ok=True)
    (out / "slow").mkdir(parents=True, exist_ok=True)
    jobs: queue.Queue = queue.Queue()
    results: queue.Queue = queue.Queue()

    def worker():
        while True:
            item = jobs.get()
            if item is None:
                return
            data, other = item
            # CPU time of this thread: on a shared machine wall time says more about the neighbours
            t0 = time.thread_time()
            try:
                sig = fn(data, other) if target == "cuda" else fn(data)
                results.put(("ok", sig, time.thread_time() - t0))
            except Exception as e:  # noqa: BLE001 - every escaping exception is a finding
                results.put(("crash", e, time.thread_time() - t0))

    # the scan runs its analyses in a thread with a 512 MB stack (pipeline.run_with_big_stack)
    threading.stack_size(512 * 1024 * 1024)
    th = threading.Thread(target=worker, daemon=True)
    th.start()
    seen: set = set()
    crashes: dict[str, dict] = {}
    slow_inputs: list[dict] = []
    execs = 0
    max_t = 0.0
    total_bytes = 0
    deadline = time.monotonic() + minutes * 60
    started = time.monotonic()
    hung = None
    # every seed once, then mutants
    schedule = list(pool)
    while time.monotonic() < deadline:
        if schedule:
            data = schedule.pop()
        else:
            data = mut.mutate(rng.choice(pool), rng.choice(pool))
        other = rng.choice(pool)
        jobs.put((data, other))
        try:
            status, val, dt = results.get(timeout=hang)
        except queue.Empty:
            h = hashlib.sha1(data).hexdigest()[:12]
            (out / "slow" / f"hang-{h}.bin").write_bytes(data)
            hung = {"input": f"slow/hang-{h}.bin", "bytes": len(data), "seconds": f">{hang}"}
            break
        execs += 1
        total_bytes += len(data)
        max_t = max(max_t, dt)
        if status == "crash":
            sig = _signature_of_crash(val)
            c = crashes.setdefault(sig, {"count": 0, "example": None, "message": str(val)[:300],
                                         "traceback": "".join(traceback.format_exception(val))[-3000:]})
            c["count"] += 1
            if c["example"] is None:
                h = hashlib.sha1(data).hexdigest()[:12]
                (out / "crash" / f"{h}.bin").write_bytes(data)
                c["example"] = f"crash/{h}.bin"
            continue
        if dt > slow:
            h = hashlib.sha1(data).hexdigest()[:12]
            (out / "slow" / f"{h}.bin").write_bytes(data)
            slow_inputs.append({"input": f"slow/{h}.bin", "bytes": len(data), "seconds": round(dt, 2)})
        if val not in seen:
            seen.add(val)
            if len(pool) < 3000:
                pool.append(data)
    jobs.put(None)
    took = time.monotonic() - started
    summary = {
        "target": target, "seconds": round(took, 1), "executions": execs, "exec_per_s": round(execs / max(took, 1e-9), 1),
        "mean_input_bytes": round(total_bytes / max(execs, 1)), "max_exec_cpu_seconds": round(max_t, 2),
        "distinct_outcomes": len(seen), "pool": len(pool), "crashes": crashes, "slow": slow_inputs[:50],
        "slow_count": len(slow_inputs), "hang": hung, "seed": seed,
    }
    (out / f"summary-{target}.json").write_text(json.dumps(summary, indent=1, default=str))
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("target", choices=["python", "cuda"])
    ap.add_argument("--minutes", type=float, default=1.0)
    ap.add_argument("--seeds", type=Path, help="directory of real sources to seed from (e.g. a site-packages)")
    ap.add_argument("--out", type=Path, default=Path("fuzz-out"))
    ap.add_argument("--seed", type=int, default=8)
    ap.add_argument("--slow", type=float, default=5.0, help="report inputs slower than this (s)")
    ap.add_argument("--hang", type=float, default=120.0, help="stop when one input takes longer (s)")
    ap.add_argument("--replay", type=Path, help="run one saved input and show the traceback")
    a = ap.parse_args(argv)
    if a.replay:
        data = a.replay.read_bytes()
        print((run_python if a.target == "python" else run_cuda)(data))
        return 0
    s = fuzz(a.target, a.minutes, a.seeds, a.out, a.seed, a.slow, a.hang)
    print(json.dumps({k: v for k, v in s.items() if k not in ("crashes", "slow")}, indent=1))
    for sig, c in s["crashes"].items():
        print(f"CRASH {sig} x{c['count']}: {c['message'][:200]} ({c['example']})")
    return 1 if s["crashes"] or s["hang"] else 0


if __name__ == "__main__":
    sys.exit(main())
