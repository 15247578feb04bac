"""Where torch keeps its generic Flight Recorder, read from ``libtorch_cpu.so``'s symbol table
(:mod:`diag.hook.elf_symbols`): found in the installed torch, nothing (never an error) from a
file that does not say."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import torch

from diag.hook import elf_symbols

LIBTORCH = Path(torch.__file__).parent / "lib" / "libtorch_cpu.so"


def test_the_installed_torch_says_where_its_ring_is() -> None:
    facts = elf_symbols.read(LIBTORCH, (elf_symbols.FR_GET, elf_symbols.FR_DUMP, "no_such"))
    assert len(facts.build_id) == 40 and int(facts.build_id, 16)
    assert set(facts.functions) == {elf_symbols.FR_GET, elf_symbols.FR_DUMP}
    get, dump = facts.functions[elf_symbols.FR_GET], facts.functions[elf_symbols.FR_DUMP]
    assert get != dump and get > 0 and dump > 0
    flags = elf_symbols.fr_defines(LIBTORCH)
    assert flags == [f"-DDIAG_FR_GET={get:#x}", f"-DDIAG_FR_DUMP={dump:#x}",
                     f"-DDIAG_FR_BUILD_ID={facts.build_id}"]  # fmt: skip


def test_the_loaded_library_has_the_dump_where_the_file_says() -> None:
    """What the native library checks before it trusts the other address: the exported dump,
    as the dynamic linker resolved it in this process, is at the library's load address plus
    the address the symbol table gives."""
    import ctypes
    import os

    lib = ctypes.CDLL(str(LIBTORCH), mode=os.RTLD_NOLOAD)  # torch loaded it
    loaded = ctypes.cast(getattr(lib, elf_symbols.FR_DUMP), ctypes.c_void_p).value
    real = os.path.realpath(LIBTORCH)
    base = next(
        int(line.split("-")[0], 16)
        for line in Path("/proc/self/maps").read_text().splitlines()
        if line.endswith(real) and line.split()[2] == "00000000"
    )
    facts = elf_symbols.read(LIBTORCH, (elf_symbols.FR_DUMP,))
    assert loaded == base + facts.functions[elf_symbols.FR_DUMP]


def test_files_that_do_not_say_give_nothing(tmp_path: Path) -> None:
    names = (elf_symbols.FR_GET, elf_symbols.FR_DUMP)
    text = tmp_path / "text"
    text.write_text("not an ELF file\n")
    assert elf_symbols.read(text, names) == elf_symbols.ElfFacts()
    assert elf_symbols.read(tmp_path / "missing", names) == elf_symbols.ElfFacts()
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert elf_symbols.read(empty, names) == elf_symbols.ElfFacts()
    head = LIBTORCH.open("rb").read(4096)  # the header, its section table cut off
    cut = tmp_path / "cut.so"
    cut.write_bytes(head)
    assert elf_symbols.read(cut, names).functions == {}
    assert elf_symbols.fr_defines(cut) == []
    # a header whose section table points past the end
    bad = bytearray(head)
    struct.pack_into("<Q", bad, 0x28, 1 << 40)
    cut.write_bytes(bytes(bad))
    assert elf_symbols.read(cut, names) == elf_symbols.ElfFacts()
    python = Path(shutil.which("python3") or "/bin/sh").resolve()  # a stripped executable
    assert elf_symbols.read(python, names).functions == {}
