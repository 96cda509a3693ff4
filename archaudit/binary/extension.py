"""Prebuilt PyTorch extensions (`torch.ops.<ns>.<op>`): which shared object registers a namespace,
which kernels an op launches, and which GPUs have code for them, read from the ELF's bytes.

A host shared object built by nvcc keeps, per translation unit, an STT_FILE symbol followed by that
unit's local symbols: `__fatDeviceText` (the fatbin wrapper nvcc registers, whose data pointer
names the unit's fatbin container in `.nv_fatbin`) and one `__device_stub__<kernel>` per kernel
it defines. The container's entry headers (never compressed) give the unit's architectures, so
each kernel's architectures are known without decompressing a cubin. The namespace comes from the
registration functions TORCH_LIBRARY / TORCH_LIBRARY_FRAGMENT / STABLE_TORCH_LIBRARY* define
(`TORCH_LIBRARY_FRAGMENT_init_<ns>_<uid>`), the op's presence from its schema string (`op(`).

Which kernels an op launches: the functions named as the op (`rms_norm`, `vllm::rms_norm`) and
what they reach through direct calls and jumps (E8/E9/0F 8x rel32) and RIP-relative address loads
(`lea` of a kernel's host function, as cudaLaunchKernel takes it) whose target is the exact start
of a function symbol. Indirect calls (virtual, tables) are not followed: what is reached is a lower
bound, and the reason says so. Nothing is run or disassembled beyond these byte patterns.
"""
from __future__ import annotations

import re
import struct
from bisect import bisect_right
from dataclasses import dataclass, field

from .fatbin import FATBIN_MAGIC, BinArch, read_binary, runs_on_detail

_ELF64 = b"\x7fELF\x02\x01"
_FATBIN_WRAPPER_MAGIC = 0x466243B1
STT_FUNC, STT_FILE = 2, 4
MAX_SYMBOLS = 4_000_000
# functions followed from one op's entry points before the search gives up (a real vllm op: < 200)
MAX_REACH = 20_000
_REGISTRATION = re.compile(r"^(?:STABLE_)?TORCH_LIBRARY(_FRAGMENT)?_init_(\w+)$")
_UNIT = re.compile(r"^tmpxft_[0-9a-f]+_[0-9a-f]+-\d+_(.+?)(?:\.compute_\d+[af]?)?\.cudafe1\.(?:cpp|c)$")
_STUB = "__device_stub_"
# call rel32, jmp rel32, jcc rel32, lea/mov reg, [rip+disp32] (REX.W 8D/8B, mod 00, rm 101: the
# address of a kernel's host function, or the load of the `__handle` its stub registered, which
# is what an inlined stub passes to __cudaLaunchKernel), and call/jmp/push [rip+disp32] through a
# GOT slot (-fno-plt code, PLT entries, a function's address handed on as an argument)
_BRANCH = re.compile(rb"[\xe8\xe9]|\x0f[\x80-\x8f]|[\x48\x4c][\x8b\x8d][\x05\x0d\x15\x1d\x25\x2d\x35\x3d]|\xff[\x15\x25\x35]", re.S)
R_X86_64_GLOB_DAT, R_X86_64_JUMP_SLOT, R_X86_64_RELATIVE = 6, 7, 8


@dataclass(frozen=True)
class Unit:
    """One translation unit with device code."""

    name: str  # its source file ("layernorm_kernels.cu"), as nvcc's temporary file names it
    archs: tuple[BinArch, ...]  # of its fatbin container; () when the container was not found
    kernels: tuple[str, ...]  # mangled kernel names


@dataclass
class Extension:
    """What archaudit needs of one prebuilt extension; the file's bytes are not kept."""

    path: str
    namespaces: dict[str, str] = field(default_factory=dict)  # ns -> registration symbol
    units: list[Unit] = field(default_factory=list)
    archs: tuple[BinArch, ...] = ()  # every fatbin entry of the file
    has_symbols: bool = False
    containers: int = 0  # fatbin containers in the file
    wrappers: int = 0  # __fatDeviceText symbols: containers that belong to a known unit
    diagnostics: list[str] = field(default_factory=list)
    # functions sorted by address: (address, size, name); the .text bytes and their address
    funcs: list[tuple[int, int, str]] = field(default_factory=list, repr=False)
    text: bytes = field(default=b"", repr=False)
    text_addr: int = 0
    kernel_unit: dict[str, int] = field(default_factory=dict, repr=False)  # kernel or stub name -> unit
    # calls of a global function in a shared object go through its PLT entry or GOT slot:
    # entry or slot address -> index in funcs of the function defined here under that name
    indirect: dict[int, int] = field(default_factory=dict, repr=False)
    handles: dict[int, str] = field(default_factory=dict, repr=False)  # a stub's __handle address -> kernel
    schemas: bytes = field(default=b"", repr=False)  # .rodata, for op schema strings
    schemas_addr: int = 0

    def registers(self, ns: str) -> bool:
        return ns in self.namespaces

    def defines_op(self, op: str) -> bool | None:
        """Whether the op's schema text ("op(" or "op.overload(") is in the file; None: not read."""
        if not self.schemas:
            return None
        return (op + "(").encode() in self.schemas or (op + ".").encode() in self.schemas


# ------------------------------------------------------------------------------------ ELF reading
@dataclass
class _Sec:
    name: str
    type: int
    addr: int
    offset: int
    size: int
    link: int


def _sections(buf: bytes) -> list[_Sec]:
    shoff, = struct.unpack_from("<Q", buf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", buf, 0x3A)
    if shoff == 0 or shnum == 0 or shentsize < 64 or shoff + shnum * shentsize > len(buf):
        return []
    raw = [struct.unpack_from("<IIQQQQIIQQ", buf, shoff + i * shentsize) for i in range(min(shnum, 1 << 16))]
    if shstrndx >= len(raw):
        return []
    so, ss = raw[shstrndx][4], raw[shstrndx][5]
    names = buf[so:so + ss]
    out = []
    for name, typ, _fl, addr, off, size, link, *_ in raw:
        end = names.find(b"\0", name)
        out.append(_Sec(names[name:end].decode("latin-1") if end >= 0 else "", typ, addr, off, size, link))
    return out


def _symbols(buf: bytes, secs: list[_Sec], which: str):
    """(name, value, size, type, bind) of .symtab or .dynsym, in table order."""
    sec = next((s for s in secs if s.name == which), None)
    if sec is None or sec.link >= len(secs) or sec.offset + sec.size > len(buf):
        return []
    strs = secs[sec.link]
    strtab = buf[strs.offset:strs.offset + strs.size]
    out = []
    n = min(sec.size // 24, MAX_SYMBOLS)
    for st_name, info, _other, _shndx, value, size in struct.iter_unpack("<IBBHQQ", buf[sec.offset:sec.offset + n * 24]):
        end = strtab.find(b"\0", st_name)
        name = strtab[st_name:end].decode("latin-1") if end >= 0 else ""
        out.append((name, value, size, info & 0xF, info >> 4))
    return out


def _file_offset(secs: list[_Sec], addr: int) -> int | None:
    for s in secs:
        if s.type != 8 and s.addr and s.addr <= addr < s.addr + s.size:
            return s.offset + addr - s.addr
    return None


def _local_name(mangled: str) -> str:
    """`_ZL39STABLE_TORCH_LIBRARY_init__C_0RN5...` -> `STABLE_TORCH_LIBRARY_init__C_0`; other names as they are."""
    m = re.match(r"_ZL(\d+)", mangled)
    if m:
        n = int(m.group(1))
        return mangled[m.end():m.end() + n]
    return mangled


def registered_namespace(name: str) -> str | None:
    m = _REGISTRATION.match(_local_name(name))
    if not m:
        return None
    ns = m.group(2)
    # a FRAGMENT's function name ends in _<uid>; TORCH_LIBRARY_init_<ns>'s does not
    if m.group(1):
        ns = re.sub(r"_\d+$", "", ns)
    return ns or None


def _container_archs(buf: bytes, secs: list[_Sec], wrapper: int) -> tuple[BinArch, ...]:
    off = _file_offset(secs, wrapper)
    if off is None or off + 24 > len(buf):
        return ()
    magic, _ver, data = struct.unpack_from("<IIQ", buf, off)
    coff = _file_offset(secs, data) if magic == _FATBIN_WRAPPER_MAGIC else None
    if coff is None or coff + 16 > len(buf):
        return ()
    cmagic, _v, hsize, fsize = struct.unpack_from("<IHHQ", buf, coff)
    if cmagic != FATBIN_MAGIC or coff + hsize + fsize > len(buf):
        return ()
    return tuple(read_binary(buf[coff:coff + hsize + fsize]).archs)


def _stub_name(name: str) -> str:
    """`_ZL<n>__device_stub__<kernel>` or `_Z<n>__device_stub__<kernel>...` (a static or an extern
    kernel's stub) -> `__device_stub__<kernel>`; "" for anything else."""
    m = _STUB_FUNC.match(name)
    return name[m.end():m.end() + int(m.group(1))] if m else ""


def _stub_of(name: str, typ: int) -> str | None:
    """The kernel a stub function or its registered handle (`_ZZ[L]<n>__device_stub__<kernel>
    ...E8__handle`, kept when the stub was inlined) names."""
    if typ == STT_FUNC and "." not in name:
        stub = _stub_name(name)
    elif typ == 1 and name.endswith("E8__handle"):  # 1 = STT_OBJECT
        m = _HANDLE.match(name)
        stub = name[m.end():m.end() + int(m.group(1))] if m else ""
    else:
        return None
    return stub[len(_STUB):] if stub.startswith(_STUB + "_Z") else None


def _units(buf: bytes, secs: list[_Sec], syms) -> tuple[list[Unit], dict[str, int], dict[int, str]]:
    """Translation units with device code, from the symbol groups STT_FILE starts; and the
    addresses of the stubs' handles -> kernel."""
    units: list[Unit] = []
    kernel_unit: dict[str, int] = {}
    handles: dict[int, str] = {}
    groups: list[tuple[str, list]] = []
    for s in syms:
        if s[3] == STT_FILE:
            groups.append((s[0], []))
        elif groups and s[4] == 0:  # local symbols follow their file
            groups[-1][1].append(s)
    for fname, members in groups:
        wrapper = next((v for n, v, _sz, _t, _b in members if _local_name(n) == "__fatDeviceText"), None)
        found = [(k, n, v, t) for n, v, _sz, t, _b in members if (k := _stub_of(n, t))]
        if wrapper is None or not found:
            continue  # no device code of its own (host code, nvlink's link.stub); stubs outside
            # their file's group are found by their kernel's name
        kernels = tuple(sorted({k for k, *_ in found}))
        m = _UNIT.match(fname)
        idx = len(units)
        units.append(Unit((m.group(1) + ".cu") if m else fname,
                          _container_archs(buf, secs, wrapper) if wrapper is not None else (), kernels))
        for k, n, v, t in found:
            kernel_unit.setdefault(k, idx)
            if t != STT_FUNC:
                handles[v] = k
    return units, kernel_unit, handles


def read_extension(path: str, data: bytes) -> Extension:
    """The extension's namespaces, units and functions. Never raises for bad input: what cannot
    be read is a diagnostic, and a file without symbols keeps only its architectures."""
    ext = Extension(path)
    if data[:6] != _ELF64:
        ext.diagnostics.append("not a 64-bit little-endian ELF file")
        return ext
    try:
        info = read_binary(data)
        ext.archs, ext.containers = tuple(info.archs), info.containers
        secs = _sections(data)
        syms = _symbols(data, secs, ".symtab")
        ext.has_symbols = bool(syms)
        syms = syms or _symbols(data, secs, ".dynsym")
        for name, *_ in syms:
            ns = registered_namespace(name) if "TORCH_LIBRARY" in name else None
            if ns:
                ext.namespaces.setdefault(ns, _local_name(name))
        ext.units, ext.kernel_unit, ext.handles = _units(data, secs, syms)
        ext.wrappers = sum(1 for n, *_ in syms if _local_name(n) == "__fatDeviceText")
        text = next((s for s in secs if s.name == ".text"), None)
        if text is not None and text.offset + text.size <= len(data):
            ext.text, ext.text_addr = data[text.offset:text.offset + text.size], text.addr
        ro = next((s for s in secs if s.name == ".rodata"), None)
        if ro is not None and ro.offset + ro.size <= len(data):
            ext.schemas, ext.schemas_addr = data[ro.offset:ro.offset + ro.size], ro.addr
        ext.funcs = sorted({(v, sz, n) for n, v, sz, t, _b in syms if t == STT_FUNC and v and sz})
        ext.indirect = _plt_targets(data, secs, ext.funcs)
    except (struct.error, ValueError, IndexError, OverflowError) as e:
        ext.diagnostics.append(f"malformed ELF: {e}")
    return ext


_HANDLE = re.compile(r"^_ZZL?(\d+)")
_STUB_FUNC = re.compile(r"^_ZL?(\d+)(?=__device_stub_)")


def _plt_targets(buf: bytes, secs: list[_Sec], funcs) -> dict[int, int]:
    """PLT entry and GOT slot addresses -> the function of this file the slot holds (by its
    dynamic symbol's name, or a relative relocation's address)."""
    by_name, by_addr = {}, {}
    for i, (a, _sz, n) in enumerate(funcs):
        by_name.setdefault(n, i)
        by_addr.setdefault(a, i)
    dyn = _symbols(buf, secs, ".dynsym")
    slots: dict[int, int] = {}
    for s in secs:
        if s.type != 4 or s.name not in (".rela.plt", ".rela.dyn") or s.offset + s.size > len(buf):
            continue  # 4 = SHT_RELA
        for off, info, addend in struct.iter_unpack("<QQq", buf[s.offset:s.offset + s.size // 24 * 24]):
            sym, typ = info >> 32, info & 0xFFFFFFFF
            if typ == R_X86_64_RELATIVE and addend in by_addr:
                slots[off] = by_addr[addend]
            elif typ in (R_X86_64_GLOB_DAT, R_X86_64_JUMP_SLOT) and 0 < sym < len(dyn):
                i = by_name.get(dyn[sym][0])
                if i is not None:
                    slots[off] = i
    out = dict(slots)
    for s in secs:
        if s.name not in (".plt", ".plt.sec", ".plt.got") or s.offset + s.size > len(buf):
            continue
        body = buf[s.offset:s.offset + s.size]
        for m in re.finditer(rb"\xff\x25", body):
            if m.end() + 4 <= len(body):
                slot = s.addr + m.end() + 4 + struct.unpack_from("<i", body, m.end())[0]
                if slot in slots:
                    out[s.addr + (m.start() // 16) * 16] = slots[slot]
    return out


# ------------------------------------------------------------------------------------ op -> kernels
def function_name(mangled: str) -> str | None:
    """The unqualified name of a mangled function (`_ZN4vllm8rms_normE...` -> rms_norm)."""
    s = mangled[2:] if mangled.startswith("_Z") else None
    if s is None:
        return None
    s = s[1:] if s[:1] in ("L",) else s
    nested = s[:1] == "N"
    i, last = (1 if nested else 0), None
    while i < len(s) and s[i].isdigit():
        j = i
        while j < len(s) and s[j].isdigit():
            j += 1
        n = int(s[i:j])
        last, i = s[j:j + n], j + n
        if not nested:
            break
    return last


@dataclass
class OpReach:
    entries: list[str]  # functions named as the op
    kernels: dict[str, int]  # kernel -> unit index
    complete: bool  # False: the search stopped at MAX_REACH


_IMPL = re.compile(r"^(?:STABLE_)?TORCH_LIBRARY_(?:IMPL|FRAGMENT)_init_|^(?:STABLE_)?TORCH_LIBRARY_init_")


def _string_at(ext: Extension, addr: int) -> bytes:
    i = addr - ext.schemas_addr
    if not ext.schemas or not 0 <= i < len(ext.schemas):
        return b""
    end = ext.schemas.find(b"\0", i, i + 4096)
    return ext.schemas[i:end] if end >= 0 else b""


def _registered(ext: Extension, op: str, starts: dict[int, int]) -> list[int]:
    """The functions the registration functions hand over with the op's name (`m.impl("op", fn)`):
    between two calls, an address load of the string "op" (or a schema "op(...") and of a function."""
    want, schema = op.encode(), (op + "(").encode()
    out: list[int] = []
    lo = ext.text_addr
    for addr, size, name in ext.funcs:
        if not _IMPL.match(_local_name(name)) or not lo <= addr < lo + len(ext.text):
            continue
        body = ext.text[addr - lo:addr - lo + size]
        named, fns = False, []
        for m in _BRANCH.finditer(body):
            if m.end() + 4 > len(body):
                break
            target = addr + m.end() + 4 + struct.unpack_from("<i", body, m.end())[0]
            if body[m.start()] in (0x48, 0x4C):  # an address load
                text = _string_at(ext, target)
                if text == want or text.startswith(schema):
                    named = True
                elif target in starts or target in ext.indirect:
                    fns.append(starts[target] if target in starts else ext.indirect[target])
            elif body[m.start()] == 0xE8 or body[m.start():m.start() + 2] == b"\xff\x15":  # a call ends a group
                if named:
                    out += fns
                named, fns = False, []
    return out


def op_reach(ext: Extension, op: str) -> OpReach:
    """The kernels reached from the functions named `op` or registered under its name, through
    direct calls and address loads."""
    if not ext.text:
        return OpReach([], {}, True)
    starts = {a: i for i, (a, _sz, _n) in enumerate(ext.funcs)}
    entries = [i for i, (_a, _sz, n) in enumerate(ext.funcs) if function_name(n) == op]
    entries += [i for i in _registered(ext, op, starts) if i not in entries]
    seen, todo, kernels = set(entries), list(entries), {}
    lo, hi = ext.text_addr, ext.text_addr + len(ext.text)
    while todo:
        if len(seen) > MAX_REACH:
            return OpReach([ext.funcs[i][2] for i in entries], kernels, False)
        addr, size, name = ext.funcs[todo.pop()]
        kernel = name if name in ext.kernel_unit else _stub_of(name, STT_FUNC)
        if kernel in ext.kernel_unit:
            kernels[kernel] = ext.kernel_unit[kernel]
            continue  # a kernel's host function or stub: the launch itself
        if not lo <= addr < hi:
            continue
        body = ext.text[addr - lo:addr - lo + size]
        for m in _BRANCH.finditer(body):
            end = m.end() + 4
            if end > len(body):
                break
            target = addr + end + struct.unpack_from("<i", body, m.end())[0]
            k = ext.handles.get(target)
            if k is not None:
                kernels[k] = ext.kernel_unit[k]
                continue
            i = starts.get(target)
            if i is None:
                i = ext.indirect.get(target)
            if i is not None and i not in seen:
                seen.add(i)
                todo.append(i)
    return OpReach([ext.funcs[i][2] for i in entries], kernels, True)


# ------------------------------------------------------------------------------------ verdict
SASS, PTX_JIT, NO, MIXED, UNKNOWN, ABSENT = "sass", "ptx-jit", "no", "mixed", "unknown", "absent"


@dataclass
class OpVerdict:
    runs: str  # sass | ptx-jit | no | mixed | unknown | absent (not an op of this build)
    reason: str
    units: list[str] = field(default_factory=list)  # the units the verdict rests on


def _runs(archs, gpu: str) -> tuple[str, str]:
    return runs_on_detail(list(archs), gpu)


def _describe_units(ext: Extension, idxs, gpu: str, limit: int = 4) -> str:
    parts = []
    for i in sorted(idxs, key=lambda i: ext.units[i].name)[:limit]:
        u = ext.units[i]
        sass = sorted({a.name for a in u.archs})
        parts.append(f"{u.name} ({' '.join(sass) or 'architectures not found'})")
    more = f" and {len(idxs) - limit} more" if len(idxs) > limit else ""
    return ", ".join(parts) + more


def judge_op(ext: Extension, ns: str, op: str, gpu: str) -> OpVerdict:
    """Can `gpu` run what torch.ops.<ns>.<op> launches, as far as this extension's bytes say."""
    full = f"registered by {ext.path} ({ext.namespaces.get(ns, 'its file name')})"
    if ext.defines_op(op) is False:
        return OpVerdict(ABSENT, f"{full}, which has no schema `{op}(`: not an op of this build")
    reach = op_reach(ext, op) if ext.has_symbols else OpReach([], {}, True)
    if reach.kernels and reach.complete:
        units = sorted(set(reach.kernels.values()))
        how = {i: _runs(ext.units[i].archs, gpu) for i in units}
        ok = [i for i in units if how[i][0] != NO]
        bad = [i for i in units if how[i][0] == NO]
        via = (f"{full}; launches {len(reach.kernels)} kernel(s) of {len(units)} translation unit(s), found through "
               f"direct calls from {', '.join(sorted(set(map(_short, reach.entries)))[:3])} (calls through pointers are not followed)")
        names = [i for i in units if not ext.units[i].archs]
        if names:
            return OpVerdict(UNKNOWN, f"{via}; the fatbin of {_describe_units(ext, names, gpu)} was not found", _names(ext, units))
        if not bad:
            kind = PTX_JIT if all(how[i][0] == PTX_JIT for i in ok) else SASS
            return OpVerdict(kind, f"{via}: each has code for {gpu}: {_describe_units(ext, ok, gpu)} (the binary's "
                                   f"host code is not read for checks of its own)", _names(ext, units))
        if not ok:
            return OpVerdict(NO, f"{via}: none has code for {gpu}: {_describe_units(ext, bad, gpu)}", _names(ext, units))
        return OpVerdict(MIXED, f"{via}: some have code for {gpu} ({_describe_units(ext, ok, gpu)}), others not "
                                f"({_describe_units(ext, bad, gpu)}); which of them run is decided in the binary at run time",
                         _names(ext, units))
    return _whole_binary(ext, full, op, gpu, reach)


def _whole_binary(ext: Extension, full: str, op: str, gpu: str, reach: OpReach) -> OpVerdict:
    """No kernel launch found for the op: the binary as a whole."""
    why = ("the file has no symbol table, so which kernels the op launches is not known" if not ext.has_symbols else
           "the kernel search from its functions stopped at its budget" if not reach.complete else
           f"no kernel launch was found from its function(s) {', '.join(sorted(set(map(_short, reach.entries)))[:3])}"
           if reach.entries else f"no function named {op} was found in its symbols")
    units = [i for i, u in enumerate(ext.units) if u.archs]
    if not ext.archs:
        # what such a file runs on the GPU is compiled or loaded at run time, or lives elsewhere
        return OpVerdict(UNKNOWN, f"{full}; {why}; the file has no device code of its own: kernels it runs are "
                                  f"built or loaded at run time (e.g. NVRTC) or come from another library, not read here")
    if units and ext.has_symbols and ext.wrappers >= ext.containers:  # every container is a known unit's
        how = {i: _runs(ext.units[i].archs, gpu)[0] for i in units}
        bad = [i for i in units if how[i] == NO]
        if not bad and len(units) == sum(1 for u in ext.units if u.archs or u.kernels):
            return OpVerdict(SASS, f"{full}; {why}; every one of the file's {len(units)} translation units with device "
                                   f"code has code for {gpu}", _names(ext, units))
        if len(bad) == len(units):
            return OpVerdict(NO, f"{full}; {why}; none of the file's {len(units)} translation units with device code "
                                 f"has code for {gpu}", _names(ext, units))
        return OpVerdict(UNKNOWN, f"{full}; {why}, and {len(bad)} of the file's {len(units)} translation units with device "
                                  f"code have none for {gpu} ({_describe_units(ext, bad, gpu, 3)})")
    runs, via = _runs(ext.archs, gpu)
    if runs == NO:
        return OpVerdict(NO, f"{full}; {why}; the file has no code for {gpu} at all")
    return OpVerdict(UNKNOWN, f"{full}; {why}; the file has code for {gpu} ({via}) but which of its kernels it covers is "
                              f"not known")


def _names(ext: Extension, idxs) -> list[str]:
    return sorted({ext.units[i].name for i in idxs})


def _short(mangled: str) -> str:
    """A function's name; for a template that wraps a function pointer (torch's boxer<..., &fn>),
    that function's."""
    i = mangled.find("XadL_Z")
    inner = function_name(mangled[i + 4:]) if i >= 0 else None
    return inner or function_name(mangled) or mangled
