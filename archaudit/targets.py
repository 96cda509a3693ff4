"""GPU targets: compute capabilities, compile variants, families, and the name parser.

The facts live in rules/targets.toml; this module only loads and queries them.
An "arch set" throughout archaudit is a frozenset of GPU names such as {"sm_90", "sm_120"}.
"""
from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .ruledata import load_rule, load_toml

ArchSet = frozenset  # of GPU names ("sm_90"); kept as a plain frozenset for speed and hashing


@dataclass(frozen=True, order=True)
class Gpu:
    major: int
    minor: int
    arch: str = ""
    products: tuple[str, ...] = ()
    variants: tuple[str, ...] = ()
    family: str | None = None
    smem_per_block_kib: int = 0
    # platform features (rules/targets.toml): "may" | "no" | "unknown"
    nvlink_multicast: str = "unknown"
    nvlink_fabric: str = "unknown"

    @property
    def name(self) -> str:
        return f"sm_{self.major}{self.minor}"

    def lacks(self, feature: str) -> bool:
        """True when no system with this GPU can have the platform feature (a targets.toml field)."""
        return getattr(self, feature, "unknown") == "no"

    @property
    def cc(self) -> int:
        """Capability as get_device_sm() returns it: major*10+minor."""
        return self.major * 10 + self.minor

    @property
    def cuda_arch(self) -> int:
        """Value of __CUDA_ARCH__ when compiling for this GPU."""
        return self.major * 100 + self.minor * 10


@dataclass(frozen=True, order=True)
class CompileTarget:
    """What nvcc compiles for: sm_XY, sm_XYa or sm_XYf."""

    major: int
    minor: int
    variant: str = ""  # "", "a" or "f"

    @property
    def name(self) -> str:
        return f"sm_{self.major}{self.minor}{self.variant}"

    @property
    def gpu_name(self) -> str:
        return f"sm_{self.major}{self.minor}"

    @property
    def cuda_arch(self) -> int:
        return self.major * 100 + self.minor * 10


@dataclass(frozen=True)
class TargetRequest:
    """A --target as the user gave it: a GPU, and a compile variant when one was spelled out."""

    gpu: Gpu
    variant: str | None  # None: not given, use what a JIT would pass
    text: str


class UnknownTarget(ValueError):
    def __init__(self, text: str, suggestions: list[str]):
        self.text = text
        self.suggestions = suggestions
        hint = f"; closest known: {', '.join(suggestions)}" if suggestions else ""
        super().__init__(f"unknown target {text!r}{hint}")


_SM_RE = re.compile(r"^(?:sm|compute)?[_ ]?(\d{2,3})([af]?)$")
_DOTTED_RE = re.compile(r"^(\d{1,2})\.(\d)([af]?)$")


def _norm_alias(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "", text.lower())


class Registry:
    def __init__(self, data: dict):
        gpus = []
        for g in data.get("gpu", []):
            m = re.fullmatch(r"sm_(\d+)(\d)", g["sm"])
            if not m:
                raise ValueError(f"targets.toml: bad sm name {g['sm']!r}")
            gpus.append(
                Gpu(
                    major=int(m.group(1)),
                    minor=int(m.group(2)),
                    arch=g.get("arch", ""),
                    products=tuple(g.get("products", ())),
                    variants=tuple(g.get("variants", ())),
                    family=g.get("family"),
                    smem_per_block_kib=int(g.get("smem_per_block_kib", 0)),
                    nvlink_multicast=g.get("nvlink_multicast", "unknown"),
                    nvlink_fabric=g.get("nvlink_fabric", "unknown"),
                )
            )
        self.gpus: tuple[Gpu, ...] = tuple(sorted(gpus))
        self.by_name: dict[str, Gpu] = {g.name: g for g in self.gpus}
        self.static_smem_kib = int(data.get("static_smem_kib", 48))
        self.families: dict[str, tuple[str, ...]] = {
            k: tuple(v.get("members", ())) for k, v in data.get("family", {}).items()
        }
        jv = data.get("jit_variant", {})
        self._jit_default = jv.get("default", "")
        self._jit_by_major = {int(k): v for k, v in jv.get("by_major", {}).items()}
        self._jit_by_cap = dict(jv.get("by_capability", {}))
        self.aliases: dict[str, Gpu] = {}
        for g in self.gpus:
            for p in g.products:
                self.aliases[_norm_alias(p)] = g
        self.all: ArchSet = frozenset(self.by_name)

    # --- naming -------------------------------------------------------------------------
    def sort_names(self, names) -> list[str]:
        def key(n: str):
            g = self.by_name.get(n)
            return (g.major, g.minor) if g else (999, 0)

        return sorted(names, key=key)

    def gpu(self, major: int, minor: int) -> Gpu | None:
        return self.by_name.get(f"sm_{major}{minor}")

    def parse(self, text: str) -> TargetRequest:
        """Parse sm_120, sm120, 12.0, 120f, sm_120a, compute_90a or a product alias."""
        raw = text.strip()
        t = raw.lower()
        m = _SM_RE.match(t)
        major = minor = None
        variant = None
        if m:
            digits, suffix = m.group(1), m.group(2)
            major, minor = int(digits[:-1]), int(digits[-1])
            variant = suffix or None
        else:
            m = _DOTTED_RE.match(t)
            if m:
                major, minor = int(m.group(1)), int(m.group(2))
                variant = m.group(3) or None
        if major is not None:
            g = self.gpu(major, minor)
            if g is not None:
                if variant is not None and variant not in g.variants:
                    raise UnknownTarget(raw, [f"{g.name}{v}" for v in g.variants])
                return TargetRequest(g, variant, raw)
        g = self.aliases.get(_norm_alias(raw))
        if g is not None:
            return TargetRequest(g, None, raw)
        raise UnknownTarget(raw, self.suggest(raw))

    def suggest(self, text: str, n: int = 4) -> list[str]:
        """Known targets close to an unknown one: for a number (sm_999, 12.5, compute_95) the GPUs
        nearest to it numerically (capabilities, not spellings: sm_999 is not close to sm_90); for
        a name, the closest spellings of the known names and products."""
        t = text.strip().lower()
        m = re.match(r"^(?:sm|compute)?[_ ]?(\d{2,4})[af]?$", t)
        d = re.match(r"^(\d{1,2})\.(\d)[af]?$", t)
        cc = None
        if m:
            digits = m.group(1)
            cc = int(digits) // 10 if len(digits) == 4 else int(digits)  # 1200: __CUDA_ARCH__
        elif d:
            cc = int(d.group(1)) * 10 + int(d.group(2))
        if cc is not None:
            return [g.name for g in sorted(self.gpus, key=lambda g: (abs(g.cc - cc), -g.cc))[:n]]
        names = list(self.by_name)
        for g in self.gpus:
            names += [f"{g.name}{v}" for v in g.variants if v]
            names += list(g.products)
        return difflib.get_close_matches(text, names, n=n, cutoff=0.4) or difflib.get_close_matches(
            text.lower(), [x.lower() for x in names], n=n, cutoff=0.3
        )

    # --- compilation --------------------------------------------------------------------
    def jit_target(self, gpu: Gpu) -> CompileTarget:
        """The compile target a JIT (flashinfer's normalisation) builds for this GPU."""
        v = self._jit_by_cap.get(gpu.name)
        if v is None:
            v = self._jit_by_major.get(gpu.major, self._jit_default)
        if v not in gpu.variants and "" in gpu.variants:
            v = ""
        return CompileTarget(gpu.major, gpu.minor, v)

    def compile_target(self, req: TargetRequest) -> CompileTarget:
        if req.variant is not None:
            return CompileTarget(req.gpu.major, req.gpu.minor, req.variant)
        return self.jit_target(req.gpu)

    def family_of(self, gpu_name: str) -> tuple[str, ...]:
        g = self.by_name.get(gpu_name)
        if g is None or g.family is None:
            return (gpu_name,)
        return self.families.get(g.family, (gpu_name,))

    def runs_on(self, code: CompileTarget, ptx: bool = False) -> ArchSet:
        """GPUs that can run code built for `code` (SASS, or PTX when ptx=True)."""
        out = set()
        for g in self.gpus:
            if code.variant == "a":
                ok = (g.major, g.minor) == (code.major, code.minor)
            elif code.variant == "f":
                ok = g.name in self.family_of(code.gpu_name) and g.minor >= code.minor and g.major == code.major
            elif ptx:
                ok = (g.major, g.minor) >= (code.major, code.minor)
            else:
                ok = g.major == code.major and g.minor >= code.minor
            if ok:
                out.add(g.name)
        return frozenset(out)

    def with_major(self, majors) -> ArchSet:
        ms = set(majors)
        return frozenset(g.name for g in self.gpus if g.major in ms)


def _split_cc(digits: str) -> tuple[int, int]:
    return int(digits[:-1]), int(digits[-1])


_CODE_RE = re.compile(r"(sm|compute)_(\d{2,3})([af]?)$")
_GENCODE_VALUE = re.compile(r"arch=compute_\d{2,3}[af]?,code=\[?([a-z_0-9,]+)\]?$")
_FLAG_RE = re.compile(r"^(-gencode|--generate-code|-arch|--gpu-architecture|-code|--gpu-code)(?:[= ](.*))?$")


def _image(code: str) -> tuple[str, CompileTarget] | None:
    m = _CODE_RE.match(code.strip())
    if not m:
        return None
    maj, mi = _split_cc(m.group(2))
    return ("sass" if m.group(1) == "sm" else "ptx", CompileTarget(maj, mi, m.group(3)))


def nvcc_images(flags: list[str]) -> list[tuple[str, CompileTarget]] | None:
    """The images ("sass" | "ptx", target) nvcc 13 embeds in the fatbinary for these flags, in
    order; None when no target flag is present or one cannot be read statically (-arch=native,
    all, all-major, a value that is not a literal).

    Checked against `nvcc --dryrun` (its fatbinary --image3 list) and `cuobjdump --list-elf
    --list-ptx` (tests/test_targets.py):
      -gencode=arch=compute_V,code=X[,Y]  exactly the code list (sm_* SASS, compute_* PTX)
      -arch=compute_V -code=X[,Y]         exactly the code list
      -arch=sm_XY                         SASS sm_XY + PTX compute_XY
      -arch=sm_XYa / -arch=sm_XYf         generic PTX compute_XY + SASS sm_XYa/f + PTX compute_XYa/f
      -arch=compute_XY[a|f]               generic PTX compute_XY (+ PTX compute_XYa/f)
    The shorthand's generic PTX is what the driver can JIT for any later GPU.
    """
    toks: list[tuple[str, str]] = []
    it = iter(flags)
    for f in it:
        m = _FLAG_RE.match(f.strip())
        if not m:
            continue
        val = m.group(2)
        if val is None:  # "-arch", "sm_90a" as two arguments
            val = next(it, "")
        toks.append((m.group(1), val.strip()))
    if not toks:
        return None
    images: list[tuple[str, CompileTarget]] = []
    codes = [v for k, v in toks if k in ("-code", "--gpu-code")]
    for kind, val in toks:
        if kind in ("-gencode", "--generate-code"):
            m = _GENCODE_VALUE.match(val)
            if not m:
                return None
            for code in m.group(1).split(","):
                img = _image(code)
                if img is None:
                    return None
                images.append(img)
        elif kind in ("-arch", "--gpu-architecture"):
            img = _image(val)
            if img is None:
                return None  # native, all, all-major, or not a literal
            if codes:
                continue  # -arch names the virtual architecture; -code lists what is embedded
            k, t = img
            generic = CompileTarget(t.major, t.minor, "")
            if k == "sass":
                if t.variant:
                    images += [("ptx", generic), ("sass", t), ("ptx", t)]
                else:
                    images += [("sass", t), ("ptx", t)]
            else:
                images.append(("ptx", generic))
                if t.variant:
                    images.append(("ptx", t))
    for val in codes:
        for code in val.split(","):
            img = _image(code)
            if img is None:
                return None
            images.append(img)
    return images


def admits_of_nvcc_flags(reg: Registry, flags: list[str]) -> ArchSet | None:
    """GPUs that can run what these nvcc flags produce (see `nvcc_images`; each image runs where
    `Registry.runs_on` says), or None if no target flag is present or it cannot be read."""
    images = nvcc_images(flags)
    if images is None:
        return None
    out: set[str] = set()
    for kind, t in images:
        out |= reg.runs_on(t, ptx=kind == "ptx")
    return frozenset(out)


_ARCH_LIST_ITEM = re.compile(r"^(\d{1,2})\.(\d)([af]?)(\+PTX)?$", re.I)


def admits_of_arch_list(reg: Registry, text: str) -> ArchSet | None:
    """GPUs admitted by a TORCH_CUDA_ARCH_LIST / FLASHINFER_CUDA_ARCH_LIST style string."""
    items = [x for x in re.split(r"[;\s,]+", text.strip()) if x]
    if not items or not all(_ARCH_LIST_ITEM.match(x) for x in items):
        return None
    out: set[str] = set()
    for x in items:
        m = _ARCH_LIST_ITEM.match(x)
        ct = CompileTarget(int(m.group(1)), int(m.group(2)), m.group(3).lower())
        out |= reg.runs_on(ct, ptx=False)
        if m.group(4):
            out |= reg.runs_on(ct, ptx=True)
    return frozenset(out)


@lru_cache(maxsize=None)
def registry(path: str | None = None) -> Registry:
    return Registry(load_toml(Path(path)) if path else load_rule("targets"))
