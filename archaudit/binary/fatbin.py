"""Which GPU architectures a prebuilt binary carries, read from its bytes (nothing is run).

Handles a bare cubin (CUDA ELF), a `.fatbin` file, and host ELF objects/shared libraries whose
`.nv_fatbin` / `__nv_relfatbin` sections hold one or more fatbin containers. Every read is
bounds-checked; malformed input gives a diagnostic, never an exception, and the work is bounded
by the input size (containers and entries are walked once, each header read once).

Layout facts (checked against cuobjdump 13.2 on objects built here with nvcc 13.0, see
tests/test_binary_nvcc.py):
- fatbin container: u32 magic 0xBA55ED50, u16 version, u16 header size, u64 payload size;
  containers in a section are 8-byte aligned, one after the other.
- fatbin entry: u16 kind (1 PTX, 2 ELF), u16 version, u32 header size, u64 payload size, ...,
  u16 minor / u16 major at 0x18 (the PTX ISA version for PTX), u32 SM number at 0x1c
  (e.g. 100), u64 flags at 0x28: 0x2000 LZ4-compressed, 0x8000 zstd-compressed (nvcc 13
  compresses PTX by default), 0x100000 arch-specific ("a"), 0x200000 family-specific ("f").
- cubin ELF (e_machine 190): EI_ABIVERSION 7 (CUDA <= 12) keeps the SM in the low byte of
  e_flags with "a" at 0x800; EI_ABIVERSION 8 (CUDA 13) keeps the SM in bits 8..15. ptxas 13.0
  does not set an "a" bit in e_flags: the marker is attribute 0x09 = 1 of the `.nv.compat`
  section (that is what cuobjdump reads: patching it flips cuobjdump's sm_100a to sm_100).
  "f" is not in the cubin proper (sm_100f and sm_100 cubins are identical); only ptxas's
  command line in `.note.nv.tkinfo` ("-arch sm_100f") records it.
"""
from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass, field

from ..targets import CompileTarget, registry

FATBIN_MAGIC = 0xBA55ED50
_FATBIN_MAGIC_BYTES = struct.pack("<I", FATBIN_MAGIC)
EM_CUDA = 190
_ELF_MAGIC = b"\x7fELF"

# fatbin entry flags
_F_LZ4 = 0x2000
_F_ZSTD = 0x8000
_F_ARCH_SPECIFIC = 0x100000
_F_FAMILY_SPECIFIC = 0x200000

# Bounds on work for hostile input
MAX_CONTAINERS = 1 << 16
MAX_ENTRIES = 1 << 18
MAX_SECTIONS = 1 << 16
MAX_FILE_BYTES = 4 << 30

# Sections of a host ELF that hold fatbin containers: executable and relocatable device code.
FATBIN_SECTIONS = (".nv_fatbin", "__nv_relfatbin")


@dataclass(frozen=True, order=True)
class BinArch:
    """One architecture entry of a binary: SASS for sm_XY[a|f] or PTX for compute_XY[a|f]."""

    kind: str  # "sass" | "ptx"
    sm: int  # 100 for sm_100
    variant: str = ""  # "", "a" or "f"
    container: int = -1  # index of the fatbin container, -1 for a bare cubin
    offset: int = 0  # byte offset of the entry (or of the ELF) in the file
    compressed: str = ""  # "", "lz4", "zstd", "unknown"
    ptx_version: str = ""  # PTX ISA version of a PTX entry, e.g. "9.0"
    relocatable: bool = False  # from __nv_relfatbin (device code still to be linked)
    how: str = ""  # where the architecture was read: "fatbin-header", "elf-e_flags", ...

    @property
    def major(self) -> int:
        return self.sm // 10

    @property
    def minor(self) -> int:
        return self.sm % 10

    @property
    def name(self) -> str:
        return f"{'sm' if self.kind == 'sass' else 'compute'}_{self.sm}{self.variant}"

    def to_json(self) -> dict:
        d = {"name": self.name, "kind": self.kind, "container": self.container, "offset": self.offset, "how": self.how}
        if self.compressed:
            d["compressed"] = self.compressed
        if self.ptx_version:
            d["ptx_version"] = self.ptx_version
        if self.relocatable:
            d["relocatable"] = True
        return d


@dataclass
class BinaryInfo:
    """What a file is and which architectures it carries."""

    format: str  # "cubin" | "fatbin" | "host-elf" | "unknown"
    archs: list[BinArch] = field(default_factory=list)
    containers: int = 0
    diagnostics: list[str] = field(default_factory=list)  # why something could not be read

    @property
    def has_device_code(self) -> bool:
        return bool(self.archs)

    def names(self, kind: str | None = None) -> list[str]:
        """Distinct architecture names in file order ("sm_90a", "compute_80")."""
        out: list[str] = []
        for a in self.archs:
            if (kind is None or a.kind == kind) and a.name not in out:
                out.append(a.name)
        return out

    def to_json(self) -> dict:
        return {"format": self.format, "containers": self.containers,
                "sass": self.names("sass"), "ptx": self.names("ptx"),
                "entries": [a.to_json() for a in self.archs], "diagnostics": list(self.diagnostics)}


class _Short(Exception):
    """A read past the end of the buffer (caught inside this module only)."""


def _u(fmt: str, buf, off: int):
    size = struct.calcsize(fmt)
    if off < 0 or off + size > len(buf):
        raise _Short(f"read of {size} bytes at offset {off} past the end ({len(buf)} bytes)")
    return struct.unpack_from(fmt, buf, off)


# ------------------------------------------------------------------------------------- entry points
def read_binary(data: bytes | bytearray | memoryview) -> BinaryInfo:
    """Classify the bytes and list the architectures they carry. Never raises for bad input."""
    # bytes, not a memoryview: find() is needed to skip padding, and slices stay bounded by the file
    buf = data if isinstance(data, bytes) else bytes(data)
    try:
        if buf[:4] == _ELF_MAGIC:
            return _read_elf(buf)
        if buf[:4] == _FATBIN_MAGIC_BYTES:
            info = BinaryInfo("fatbin")
            _read_containers(buf, 0, len(buf), info, relocatable=False, file_base=0)
            return info
    except (_Short, struct.error, ValueError, OverflowError, IndexError) as e:  # defensive: all reads are checked
        return BinaryInfo("unknown", diagnostics=[f"malformed binary: {e}"])
    return BinaryInfo("unknown", diagnostics=["not an ELF file or fatbin container (unknown magic)"])


def read_file(path: str | os.PathLike, max_bytes: int = MAX_FILE_BYTES) -> BinaryInfo:
    """read_binary on a file; unreadable or oversized files give a diagnostic."""
    try:
        size = os.path.getsize(path)
        if size > max_bytes:
            return BinaryInfo("unknown", diagnostics=[f"file too large to read ({size} bytes > {max_bytes})"])
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        return BinaryInfo("unknown", diagnostics=[f"cannot read {os.fspath(path)}: {e.strerror or e}"])
    return read_binary(data)


# ------------------------------------------------------------------------------------------- ELF
@dataclass
class _Section:
    name: str
    type: int
    offset: int
    size: int


def _elf_sections(buf) -> tuple[str, list[_Section]]:
    """(class note, sections). ELF64/ELF32 little-endian only."""
    ei_class, ei_data = buf[4], buf[5]
    if ei_data != 1:
        raise ValueError("big-endian ELF is not supported")
    if ei_class == 2:
        shoff, = _u("<Q", buf, 0x28)
        shentsize, shnum, shstrndx = _u("<HHH", buf, 0x3A)
        ent = "<IIQQQQIIQQ"
    elif ei_class == 1:
        shoff, = _u("<I", buf, 0x20)
        shentsize, shnum, shstrndx = _u("<HHH", buf, 0x2E)
        ent = "<IIIIIIIIII"
    else:
        raise ValueError(f"unknown ELF class {ei_class}")
    if shoff == 0 or shnum == 0:
        return "", []
    if shnum > MAX_SECTIONS or shentsize < struct.calcsize(ent):
        raise ValueError(f"implausible section table ({shnum} entries of {shentsize} bytes)")
    raw = []
    for i in range(shnum):
        name, typ, _flags, _addr, off, size = _u(ent, buf, shoff + i * shentsize)[:6]
        raw.append((name, typ, off, size))
    if shstrndx >= len(raw):
        raise ValueError("section name table index out of range")
    _, _, stroff, strsize = raw[shstrndx]
    if stroff + strsize > len(buf):
        raise ValueError("section name table past the end of the file")
    strtab = buf[stroff : stroff + strsize]
    out = []
    for name, typ, off, size in raw:
        end = strtab.find(b"\0", name) if name < len(strtab) else -1
        nm = strtab[name:end].decode("latin-1") if end >= 0 else ""
        out.append(_Section(nm, typ, off, size))
    return "", out


def _read_elf(buf) -> BinaryInfo:
    if len(buf) < 0x34:
        return BinaryInfo("unknown", diagnostics=["truncated ELF header"])
    e_machine, = _u("<H", buf, 0x12)
    if e_machine == EM_CUDA:
        info = BinaryInfo("cubin")
        arch, diag = _cubin_arch(buf, container=-1, offset=0, relocatable=False)
        if arch is not None:
            info.archs.append(arch)
        info.diagnostics += diag
        return info
    info = BinaryInfo("host-elf")
    try:
        _, sections = _elf_sections(buf)
    except (ValueError, _Short) as e:
        info.diagnostics.append(f"unreadable section table: {e}")
        sections = []
    fat = [s for s in sections if s.name in FATBIN_SECTIONS and s.type != 8]  # 8 = SHT_NOBITS
    if not sections:
        # no section table (stripped or damaged): fall back to a scan for container magic
        start = buf.find(_FATBIN_MAGIC_BYTES)
        if start >= 0:
            info.diagnostics.append("no section table: fatbin containers found by scanning for their magic")
            _read_containers(buf, start, len(buf), info, relocatable=False, file_base=0, scan=True)
        return info
    for s in fat:
        if s.offset + s.size > len(buf):
            info.diagnostics.append(f"section {s.name} extends past the end of the file")
            continue
        _read_containers(buf, s.offset, s.offset + s.size, info, relocatable=s.name == "__nv_relfatbin", file_base=0)
    return info


def _cubin_arch(buf, container: int, offset: int, relocatable: bool, compressed: str = "") -> tuple[BinArch | None, list[str]]:
    """The SASS architecture of a cubin ELF at buf (the cubin's own bytes)."""
    diags: list[str] = []
    if len(buf) < 0x34 or buf[:4] != _ELF_MAGIC:
        return None, ["cubin entry does not start with an ELF header"]
    e_machine, = _u("<H", buf, 0x12)
    if e_machine != EM_CUDA:
        return None, [f"ELF entry is not CUDA code (e_machine {e_machine})"]
    abi = buf[8]
    flags, = _u("<I", buf, 0x30 if buf[4] == 2 else 0x24)
    if abi >= 8:
        sm, accel = (flags >> 8) & 0xFF, bool(flags & 0x8)
    else:
        sm, accel = flags & 0xFF, bool(flags & 0x800)
    how = "elf-e_flags"
    variant = "a" if accel else ""
    try:
        _, sections = _elf_sections(buf)
    except (ValueError, _Short) as e:
        sections = []
        diags.append(f"cubin section table unreadable: {e}")
    for s in sections:
        if s.name == ".nv.compat" and s.offset + s.size <= len(buf):
            if _compat_attr(buf[s.offset : s.offset + s.size], 0x09) == 1:
                variant, how = "a", "elf-e_flags+nv.compat"
        elif s.name == ".note.nv.tkinfo" and not variant and s.offset + s.size <= len(buf):
            m = re.search(rb"-arch[ =]sm_(\d+)(f)\b", buf[s.offset : s.offset + min(s.size, 4096)])
            if m and int(m.group(1)) == sm:
                variant, how = m.group(2).decode(), "elf-e_flags+tkinfo"
    if not 10 <= sm <= 255:
        return None, diags + [f"implausible SM number {sm} in cubin e_flags 0x{flags:x}"]
    return BinArch("sass", sm, variant, container, offset, compressed, "", relocatable, how), diags


def _compat_attr(buf, attr: int) -> int | None:
    """Value of one attribute of a .nv.compat section: 4-byte records (format, attribute, value);
    format 4 records carry a u16 length and that many bytes."""
    off = 0
    for _ in range(256):
        if off + 4 > len(buf):
            return None
        fmt, a = buf[off], buf[off + 1]
        if fmt == 0:
            return None
        if fmt in (2, 3):
            if a == attr:
                return buf[off + 2] if fmt == 2 else struct.unpack_from("<H", buf, off + 2)[0]
            off += 4
        elif fmt == 4:
            ln, = struct.unpack_from("<H", buf, off + 2)
            off += 4 + ln
        elif fmt == 1:
            off += 4
        else:
            return None
    return None


# ---------------------------------------------------------------------------------------- fatbin
def _read_containers(buf, start: int, end: int, info: BinaryInfo, relocatable: bool, file_base: int, scan: bool = False) -> None:
    """Walk the fatbin containers in buf[start:end] and append their entries to info."""
    off = start
    for _ in range(MAX_CONTAINERS):
        if off + 16 > end:
            return
        magic, _ver, hsize, fsize = _u("<IHHQ", buf, off)
        if magic != FATBIN_MAGIC:
            # padding between containers is zeros; anything else: look for the next container
            nxt = buf.find(_FATBIN_MAGIC_BYTES, off, end)
            if nxt < 0:
                if buf[off:end].strip(b"\0") and not scan:
                    info.diagnostics.append(f"{end - off} trailing bytes after the last fatbin container at offset {off}")
                return
            if buf[off:nxt].strip(b"\0") and not scan:
                info.diagnostics.append(f"skipped {nxt - off} unknown bytes at offset {off} before a fatbin container")
            off = nxt
            continue
        if hsize < 16 or off + hsize + fsize > end:
            info.diagnostics.append(f"fatbin container at offset {off} claims {fsize} bytes beyond its section or file")
            fsize = max(0, end - off - max(hsize, 16))
            hsize = max(hsize, 16)
        idx = info.containers
        info.containers += 1
        _read_entries(buf, off + hsize, off + hsize + fsize, idx, info, relocatable)
        off = off + hsize + fsize
        off = (off + 7) & ~7
    info.diagnostics.append(f"stopped after {MAX_CONTAINERS} fatbin containers")


def _read_entries(buf, start: int, end: int, container: int, info: BinaryInfo, relocatable: bool) -> None:
    off = start
    n = 0
    while off + 16 <= end:
        if n >= MAX_ENTRIES:
            info.diagnostics.append(f"stopped after {MAX_ENTRIES} entries in container {container}")
            return
        n += 1
        kind, _ver, hsize, psize = _u("<HHIQ", buf, off)
        if kind == 0 and hsize == 0:
            return  # zero padding at the end of a container
        if hsize < 0x30 or off + hsize > end:
            info.diagnostics.append(f"fatbin entry at offset {off} has a bad header size {hsize}")
            return
        if psize > end - off - hsize:
            info.diagnostics.append(f"fatbin entry at offset {off} claims {psize} bytes past its container")
            return
        minor, major, sm = _u("<HHI", buf, off + 0x18)
        flags, = _u("<Q", buf, off + 0x28)
        variant = "a" if flags & _F_ARCH_SPECIFIC else ("f" if flags & _F_FAMILY_SPECIFIC else "")
        compressed = "lz4" if flags & _F_LZ4 else ("zstd" if flags & _F_ZSTD else "")
        payload = buf[off + hsize : off + hsize + psize]
        if kind not in (1, 2):
            info.diagnostics.append(f"fatbin entry at offset {off} has unknown kind {kind}; skipped")
        elif not 10 <= sm <= 255:
            info.diagnostics.append(f"fatbin entry at offset {off} has an implausible SM number {sm}; skipped")
        elif kind == 1:
            info.archs.append(BinArch("ptx", sm, variant, container, off, compressed, f"{major}.{minor}", relocatable, "fatbin-header"))
            if not compressed:
                _check_ptx(payload, sm, variant, off, info)
        else:
            info.archs.append(BinArch("sass", sm, variant, container, off, compressed, "", relocatable, "fatbin-header"))
            if not compressed:
                _check_elf_entry(payload, sm, variant, off, info)
        off += hsize + psize


def _check_elf_entry(payload, sm: int, variant: str, off: int, info: BinaryInfo) -> None:
    """Cross-check an uncompressed cubin entry against its header: a disagreement is reported."""
    try:
        arch, diags = _cubin_arch(payload, -1, 0, False)
    except (_Short, struct.error, ValueError) as e:
        info.diagnostics.append(f"cubin in fatbin entry at offset {off} unreadable: {e}")
        return
    info.diagnostics += [f"entry at offset {off}: {d}" for d in diags]
    if arch is not None and (arch.sm != sm or (arch.variant == "a") != (variant == "a")):
        info.diagnostics.append(
            f"fatbin entry at offset {off}: header says sm_{sm}{variant} but its cubin says {arch.name}")


_PTX_TARGET = re.compile(rb"^\s*\.target\s+sm_(\d+)([af]?)", re.M)


def _check_ptx(payload, sm: int, variant: str, off: int, info: BinaryInfo) -> None:
    m = _PTX_TARGET.search(payload[:65536])
    if m and (int(m.group(1)) != sm or m.group(2).decode() != variant):
        info.diagnostics.append(
            f"fatbin PTX entry at offset {off}: header says compute_{sm}{variant} but .target is sm_{m.group(1).decode()}{m.group(2).decode()}")


# ------------------------------------------------------------------------------------ runs on
SASS, PTX_JIT, NO = "sass", "ptx-jit", "no"


def runs_on(binary_archs, gpu, reg=None) -> str:
    """How a GPU would run this binary: "sass" (machine code for it), "ptx-jit" (only PTX the
    driver can compile for it) or "no".

    binary_archs: BinArch items, or names such as "sm_90a" / "compute_80" / "sm_100f".
    gpu: a GPU name ("sm_120"), a targets.Gpu, or a TargetRequest.
    Machine code runs on the same major with an equal or higher minor; "a" code only on exactly
    that GPU; "f" code on the members of its family (rules/targets.toml); PTX is compiled by the
    driver for any later GPU, except arch-/family-specific PTX, which follows the same a/f rules.
    """
    return runs_on_detail(binary_archs, gpu, reg)[0]


def runs_on_detail(binary_archs, gpu, reg=None) -> tuple[str, str]:
    """(runs_on verdict, name of the entry that decides it, "" for "no")."""
    reg = reg or registry()
    name = getattr(getattr(gpu, "gpu", None), "name", None) or getattr(gpu, "name", None) or str(gpu)
    best = (NO, "")
    for a in binary_archs:
        arch = a if isinstance(a, BinArch) else parse_arch_name(a)
        if arch is None:
            continue
        ct = CompileTarget(arch.major, arch.minor, arch.variant)
        if name in reg.runs_on(ct, ptx=arch.kind == "ptx"):
            if arch.kind == "sass":
                return SASS, arch.name
            if best[0] == NO:
                best = (PTX_JIT, arch.name)
    return best


_ARCH_NAME = re.compile(r"^(sm|compute)_(\d{2,3})([af]?)$")


def parse_arch_name(text: str) -> BinArch | None:
    """"sm_90a" -> SASS sm 90 variant a; "compute_80" -> PTX sm 80."""
    m = _ARCH_NAME.match(text.strip().lower())
    if not m:
        return None
    return BinArch("sass" if m.group(1) == "sm" else "ptx", int(m.group(2)), m.group(3))
