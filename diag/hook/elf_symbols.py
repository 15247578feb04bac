"""Where torch keeps the functions it does not export: read from its library's ELF symbol table.

torch's generic Flight Recorder (:mod:`diag.hook.fr_dump`) is a singleton that only torch's own
code reaches: ``FlightRecorder<c10::Event>::get()`` is a local symbol of ``libtorch_cpu.so``,
absent from its dynamic symbol table, so neither ``dlsym`` nor the linker finds it. The full
symbol table (``.symtab``) of torch's wheels still names it. diag's native library is built once
per torch installation (:mod:`diag.hook.opstats`); the build reads, here, that function's
address in the file, the address of one exported function beside it (``dump_fr_trace``) and the
file's GNU build id, and compiles them in. At run time the library checks that the loaded
``libtorch_cpu.so`` has the same build id and puts the exported function where the file said,
before it calls anything at the other address (``opstats.cpp``).

Plain reading of a file (``mmap``, stdlib only: the hook imports nothing else): a stripped or
foreign file gives an empty answer, never an exception.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

_SHT_SYMTAB, _SHT_NOTE, _SHT_DYNSYM = 2, 7, 11
_STT_FUNC = 2
_NT_GNU_BUILD_ID = 3
_SYM = struct.Struct("<IBBHQQ")  # Elf64_Sym: name, info, other, shndx, value, size

#: the generic ring's singleton accessor and the exported dump beside it (Itanium mangling)
FR_GET = "_ZN4c10d14FlightRecorderIN3c105EventEE3getEv"
FR_DUMP = "_ZN4c10d13dump_fr_traceB5cxx11Ebbb"


@dataclass(frozen=True, slots=True)
class ElfFacts:
    """A shared library's GNU build id (hex, "" without one) and the file addresses
    (``st_value``) of the function symbols asked for that it defines exactly once."""

    build_id: str = ""
    functions: Mapping[str, int] = field(default_factory=dict)


def read(path: Path, names: Iterable[str]) -> ElfFacts:
    """The facts of the 64-bit little-endian ELF file ``path`` (see :class:`ElfFacts`); an empty
    answer for anything else, a file without symbol table or names it does not define."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            return _read(mm, tuple(names))
    except (OSError, ValueError, struct.error, IndexError):
        return ElfFacts()


def _read(mm: mmap.mmap, names: tuple[str, ...]) -> ElfFacts:
    if mm[:4] != b"\x7fELF" or mm[4] != 2 or mm[5] != 1:  # ELFCLASS64, little-endian
        return ElfFacts()
    shoff, = struct.unpack_from("<Q", mm, 0x28)  # fmt: skip
    shentsize, shnum = struct.unpack_from("<HH", mm, 0x3A)
    if shentsize != 64 or shoff + shnum * 64 > len(mm):
        return ElfFacts()
    sections = [struct.unpack_from("<IIQQQQIIQQ", mm, shoff + i * 64) for i in range(shnum)]
    build_id = ""
    for _, kind, _, _, offset, size, *_ in sections:
        if kind == _SHT_NOTE and not build_id:
            build_id = _build_id(mm, offset, size)
    symtabs = [s for s in sections if s[1] == _SHT_SYMTAB] or [
        s for s in sections if s[1] == _SHT_DYNSYM
    ]
    if not symtabs:
        return ElfFacts(build_id)
    _, _, _, _, sym_off, sym_size, link, _, _, entsize = symtabs[0]
    if entsize != _SYM.size or link >= shnum or sym_off + sym_size > len(mm):
        return ElfFacts(build_id)
    str_off, str_size = sections[link][4], sections[link][5]
    if str_off + str_size > len(mm):
        return ElfFacts(build_id)
    sym_end = sym_off + sym_size - sym_size % _SYM.size
    functions: dict[str, int] = {}
    for name in names:
        # every place the name ends a string of the table (the linker may share a tail)
        wanted = name.encode() + b"\0"
        starts: list[int] = []
        at = mm.find(wanted, str_off, str_off + str_size)
        while at >= 0:
            starts.append(at - str_off)
            at = mm.find(wanted, at + 1, str_off + str_size)
        if not starts:
            continue
        values = {v for start in starts for v in _functions_named(mm, sym_off, sym_end, start)}
        if len(values) == 1:
            functions[name] = values.pop()
    return ElfFacts(build_id, functions)


def _functions_named(mm: mmap.mmap, sym_off: int, sym_end: int, name_at: int) -> list[int]:
    """The values of the defined function symbols in ``[sym_off, sym_end)`` whose name is at
    ``name_at`` in the string table: the name's 4 bytes searched for, kept where a symbol
    starts (a C-speed search, where unpacking ~500k symbols took seconds)."""
    needle = struct.pack("<I", name_at)
    out: list[int] = []
    at = mm.find(needle, sym_off, sym_end)
    while at >= 0:
        if (at - sym_off) % _SYM.size == 0:
            _, info, _, shndx, value, _ = _SYM.unpack_from(mm, at)
            if info & 0xF == _STT_FUNC and shndx != 0:
                out.append(value)
        at = mm.find(needle, at + 1, sym_end)
    return out


def _build_id(mm: mmap.mmap, offset: int, size: int) -> str:
    """The GNU build id among the notes at ``[offset, offset + size)`` ("" if none)."""
    end = min(offset + size, len(mm))
    while offset + 12 <= end:
        namesz, descsz, kind = struct.unpack_from("<III", mm, offset)
        name_at = offset + 12
        desc_at = name_at + ((namesz + 3) & ~3)
        if desc_at + descsz > end:
            return ""
        if kind == _NT_GNU_BUILD_ID and mm[name_at : name_at + namesz] == b"GNU\0":
            return mm[desc_at : desc_at + descsz].hex()
        offset = desc_at + ((descsz + 3) & ~3)
    return ""


def fr_defines(torch_lib: Path) -> list[str]:
    """The compiler flags that let diag's native library read torch's generic Flight Recorder
    (``-DDIAG_FR_GET=..``, ``-DDIAG_FR_DUMP=..``, ``-DDIAG_FR_BUILD_ID=..``) from
    ``torch_lib`` (``libtorch_cpu.so``); none where the file does not say all three."""
    facts = read(torch_lib, (FR_GET, FR_DUMP))
    get, dump = facts.functions.get(FR_GET), facts.functions.get(FR_DUMP)
    if not facts.build_id or get is None or dump is None:
        return []
    return [f"-DDIAG_FR_GET={get:#x}", f"-DDIAG_FR_DUMP={dump:#x}",
            f"-DDIAG_FR_BUILD_ID={facts.build_id}"]  # fmt: skip
