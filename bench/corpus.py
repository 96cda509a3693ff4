"""The pinned real packages archaudit is tested and measured on.

Downloads wheels with `pip download --no-deps` into a cache and unpacks each set once into a
site-packages-like directory. Used by the end-to-end tests, the demo and the benchmarks.
Nothing here imports or runs the downloaded code.

    python bench/corpus.py fi072            # prints the site-packages path
"""
from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

CORPORA: dict[str, list[str]] = {
    # the main pair of the issues
    "fi072": ["flashinfer-python==0.7.2.post1", "sglang==0.5.23"],
    # the seed case: comm.py still passes supported_major_versions=[9, 10]
    "fi0615": ["flashinfer-python==0.6.15.post1", "sglang==0.5.17"],
    # the performance benchmark's scaling curve: one package, two, three (vllm: the large case)
    "fi072only": ["flashinfer-python==0.7.2.post1"],
    "fi072vllm": ["flashinfer-python==0.7.2.post1", "sglang==0.5.23", "vllm==0.33.0"],
    # vllm's prebuilt extensions (torch.ops._C and friends) beside the flashinfer it calls (issue 23)
    "vllm033": ["flashinfer-python==0.7.2.post1", "vllm==0.33.0"],
}
# pairs of single wheels compared by `archaudit diff` (tests/test_diff.py): adjacent releases where
# flashinfer/jit/comm.py's gen_trtllm_comm_module goes from supported_major_versions=[9, 10] to
# [9, 10, 12] (0.6.16.post4 is the last release with [9, 10]; 0.6.17 the first with 12)
WHEEL_PAIRS: dict[str, tuple[str, str]] = {
    "comm-sm120": ("flashinfer-python==0.6.16.post4", "flashinfer-python==0.6.17"),
}
# sglang ships a binary wheel per Python; ask for one fixed platform so any interpreter gets the same files
# (pip takes --platform literally: list the older manylinux tags too, vllm ships manylinux_2_28)
PIP_PLATFORM = ["--python-version", "3.11", "--platform", "manylinux_2_34_x86_64", "--platform", "manylinux_2_28_x86_64",
                "--platform", "manylinux_2_17_x86_64", "--only-binary=:all:"]


def cache_root() -> Path:
    env = os.environ.get("ARCHAUDIT_CORPUS_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "archaudit-corpus"


def wheel_for(spec: str, wheels: Path) -> Path | None:
    name, version = spec.split("==")
    stem = name.replace("-", "_").lower()
    for w in sorted(wheels.glob("*.whl")):
        parts = w.name.split("-")
        if parts[0].lower() == stem and parts[1] == version:
            return w
    return None


def download(spec: str, wheels: Path, platform: list[str] | None = None) -> Path:
    """The cached wheel of spec, downloaded first if needed; platform: pip's --python-version/
    --platform/--only-binary arguments (default PIP_PLATFORM)."""
    w = wheel_for(spec, wheels)
    if w is not None:
        return w
    wheels.mkdir(parents=True, exist_ok=True)
    print(f"downloading {spec} ...", file=sys.stderr)
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(wheels), *(PIP_PLATFORM if platform is None else platform), spec],
        check=True,
    )
    w = wheel_for(spec, wheels)
    if w is None:
        raise RuntimeError(f"pip download of {spec} produced no wheel in {wheels}")
    return w


def site_packages(name: str) -> Path:
    """The unpacked site-packages directory of a corpus, downloading and unpacking it if needed."""
    specs = CORPORA[name]
    root = cache_root()
    target = root / "site-packages" / name
    marker = target / ".archaudit-corpus-complete"
    if marker.exists():
        return target
    wheels = [download(s, root / "wheels") for s in specs]
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    for w in wheels:
        with zipfile.ZipFile(w) as zf:
            zf.extractall(tmp)
    (tmp / ".archaudit-corpus-complete").write_text("\n".join(specs) + "\n")
    if target.exists():  # a concurrent run finished first
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
        return target
    tmp.rename(target)
    return target


def wheel_path(spec: str) -> Path:
    return download(spec, cache_root() / "wheels")


def wheel_pair(name: str) -> tuple[Path, Path]:
    """The two wheels of a WHEEL_PAIRS entry, downloaded into the cache if needed (read in place)."""
    old, new = WHEEL_PAIRS[name]
    return wheel_path(old), wheel_path(new)


if __name__ == "__main__":
    for n in sys.argv[1:] or ["fi072"]:
        if n in WHEEL_PAIRS:
            print(*wheel_pair(n))
        else:
            print(site_packages(n))
