"""Flight Recorder pickles read as plain data, whatever their bytes: nothing built but dicts,
lists, tuples, sets, strings, bytes, numbers, bools and ``None``, in time and memory bounded by
the file's size.

:func:`load_plain_pickle` runs its own small pickle machine over the bytes, never ``pickle.load``:
it knows only the opcodes that build plain data (protocols 0-5); a class or function reference,
a call, an extension code, a persistent id, an out-of-band buffer or a ``bytearray`` is refused,
never built. And:

* the memo is a dict whose indexes are checked as a pickler numbers them (0, 1, 2, ... in the
  order it stores values): an index beyond the values stored so far is refused (the C
  unpickler sizes its memo array by the largest index: nine bytes naming index 2**26 cost it
  1 GB);
* every opcode builds at most one object and reads its argument from the file, so building
  costs time and memory in proportion to the file's size;
* dict keys and set items are only strings, bytes, bools, ``None`` and 64-bit integers (keys
  that all hash alike, such as multiples of 2**61 - 1 or crafted tuples, would make building
  the dict quadratic);
* the result is checked by :func:`diag.untrusted.check_plain`: each shared object walked once,
  at most :data:`~diag.untrusted.MAX_DEPTH` deep and :data:`~diag.untrusted.MAX_VALUES`
  values once shared references are expanded (a 350-byte pickle of lists that each hold the
  previous one twice expands to 2**38 values: refused after walking 38 lists).

Speed: about 4 MB/s, the check included (a 1.6 MB dump of 2,000 entries with 30 frames each in
0.4 s; ``pickle.loads`` and a recursive walk took 0.3 s); a dump larger than
:data:`MAX_DUMP_BYTES` is not read at all.
"""

from __future__ import annotations

import codecs
import struct
from typing import Any

from diag.errors import InputError
from diag.untrusted import check_plain, mib

#: Largest pickle read (bytes).
MAX_DUMP_BYTES = 64 << 20
#: Longest text argument of a protocol-0 opcode (a number, a memo index, a quoted string).
_MAX_LINE = 4096
_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
_F64 = struct.Struct(">d")
#: Opcodes refused by name: what they would do.
_REFUSED = {
    b"c"[0]: "GLOBAL (a class or function reference)",
    0x93: "STACK_GLOBAL (a class or function reference)",
    b"R"[0]: "REDUCE (a call)",
    b"b"[0]: "BUILD (an object's state)",
    b"i"[0]: "INST (an object)",
    b"o"[0]: "OBJ (an object)",
    0x81: "NEWOBJ (an object)",
    0x92: "NEWOBJ_EX (an object)",
    0x82: "EXT1 (an extension code)",
    0x83: "EXT2 (an extension code)",
    0x84: "EXT4 (an extension code)",
    b"P"[0]: "PERSID (a persistent id)",
    b"Q"[0]: "BINPERSID (a persistent id)",
    0x96: "BYTEARRAY8 (a bytearray)",
    0x97: "NEXT_BUFFER (an out-of-band buffer)",
    0x98: "READONLY_BUFFER (an out-of-band buffer)",
}


class _Refused(Exception):
    """What the machine will not build (the message says what)."""


class _Malformed(Exception):
    """Bytes that are not a well-formed pickle (the message says where)."""


def _key(value: Any) -> Any:
    kind = type(value)
    if kind in (str, bytes, bool, type(None)) or (kind is int and -(1 << 63) <= value < 1 << 64):
        return value
    beyond = " beyond 64 bits" if kind is int else ""
    raise _Refused(f"a dict key or set item of type {kind.__name__}{beyond}")


def _run(data: bytes) -> Any:
    """The pickle machine: the value the pickle builds (module docstring). Reading past the end
    (``data[i]`` or ``unpack_from``) raises, so only slices check their length."""
    try:
        return _machine(data)
    except (IndexError, struct.error):
        raise _Malformed("truncated") from None


def _machine(data: bytes) -> Any:
    stack: list[Any] = []
    push = stack.append
    marks: list[int] = []  # stack heights at each MARK
    base = 0  # the current mark's height: no opcode reaches below it
    memo: dict[int, Any] = {}
    i, n = 0, len(data)
    while True:
        op = data[i]
        i += 1
        # the opcodes of a protocol-2 FR dump first, by how often they occur
        if op == 0x68:  # BINGET
            index = data[i]
            i += 1
            if index not in memo:
                raise _Refused(f"memo index {index} was never stored")
            push(memo[index])
        elif op == 0x72 or op == 0x71 or op == 0x94:  # LONG_BINPUT, BINPUT, MEMOIZE
            if op == 0x72:
                index = _U32.unpack_from(data, i)[0]
                i += 4
            elif op == 0x71:
                index = data[i]
                i += 1
            else:
                index = len(memo)
            if index > len(memo):
                raise _Refused(f"memo index {index} beyond the {len(memo)} values stored so far")
            if len(stack) <= base:
                raise _Malformed("PUT with nothing to store")
            memo[index] = stack[-1]
        elif op == 0x4B:  # BININT1
            push(data[i])
            i += 1
        elif op == 0x28:  # MARK
            marks.append(len(stack))
            base = len(stack)
        elif op == 0x7D:  # EMPTY_DICT
            push({})
        elif op == 0x75 or op == 0x65 or op == 0x6C or op == 0x74 or op == 0x64:
            # SETITEMS, APPENDS, LIST, TUPLE, DICT: the items since the last MARK
            if not marks:
                raise _Malformed(f"{chr(op)!r} without a MARK")
            items = stack[base:]
            del stack[base:]
            marks.pop()
            base = marks[-1] if marks else 0
            if op == 0x6C:
                push(items)
            elif op == 0x74:
                push(tuple(items))
            elif op == 0x64:
                if len(items) % 2:
                    raise _Malformed("DICT of an odd number of items")
                push({_key(items[k]): items[k + 1] for k in range(0, len(items), 2)})
            else:
                if len(stack) <= base:
                    raise _Malformed(f"{chr(op)!r} with nothing to add to")
                target = stack[-1]
                if op == 0x65 and type(target) is list:
                    target.extend(items)
                elif op == 0x75 and type(target) is dict and not len(items) % 2:
                    for k in range(0, len(items), 2):
                        target[_key(items[k])] = items[k + 1]
                else:
                    raise _Refused(f"{chr(op)!r} on a {type(target).__name__}")
        elif op == 0x5D:  # EMPTY_LIST
            push([])
        elif op == 0x61 or op == 0x73:  # APPEND, SETITEM
            count = 1 if op == 0x61 else 2
            if len(stack) - base < count + 1:
                raise _Malformed(f"{chr(op)!r} with too few items")
            items = stack[-count:]
            del stack[-count:]
            target = stack[-1]
            if op == 0x61 and type(target) is list:
                target.append(items[0])
            elif op == 0x73 and type(target) is dict:
                target[_key(items[0])] = items[1]
            else:
                raise _Refused(f"{chr(op)!r} on a {type(target).__name__}")
        elif op == 0x4D:  # BININT2
            push(data[i] | data[i + 1] << 8)
            i += 2
        elif op == 0x58 or op == 0x8C or op == 0x8D:
            # BINUNICODE, SHORT_BINUNICODE, BINUNICODE8
            if op == 0x58:
                size = _U32.unpack_from(data, i)[0]
                i += 4
            elif op == 0x8C:
                size = data[i]
                i += 1
            else:
                size = _U64.unpack_from(data, i)[0]
                i += 8
            if i + size > n:
                raise _Malformed(f"a string of {size} bytes past the end")
            push(str(data[i : i + size], "utf-8", "surrogatepass"))
            i += size
        elif op == 0x4E:  # NONE
            push(None)
        elif op == 0x88 or op == 0x89:  # NEWTRUE, NEWFALSE
            push(op == 0x88)
        elif op == 0x4A:  # BININT
            push(_I32.unpack_from(data, i)[0])
            i += 4
        elif 0x85 <= op <= 0x87:  # TUPLE1, TUPLE2, TUPLE3
            size = op - 0x84
            if len(stack) - base < size:
                raise _Malformed(f"TUPLE{size} of fewer items")
            items = stack[-size:]
            del stack[-size:]
            push(tuple(items))
        elif op == 0x29:  # EMPTY_TUPLE
            push(())
        elif op == 0x8A or op == 0x8B:  # LONG1, LONG4
            if op == 0x8A:
                size = data[i]
                i += 1
            else:
                size = _I32.unpack_from(data, i)[0]
                i += 4
            if size < 0 or i + size > n:
                raise _Malformed(f"an integer of {size} bytes past the end")
            push(int.from_bytes(data[i : i + size], "little", signed=True))
            i += size
        elif op == 0x47:  # BINFLOAT
            push(_F64.unpack_from(data, i)[0])
            i += 8
        elif op == 0x6A:  # LONG_BINGET
            index = _U32.unpack_from(data, i)[0]
            i += 4
            if index not in memo:
                raise _Refused(f"memo index {index} was never stored")
            push(memo[index])
        elif op == 0x42 or op == 0x43 or op == 0x8E:  # BINBYTES, SHORT_BINBYTES, BINBYTES8
            width = 4 if op == 0x42 else 1 if op == 0x43 else 8
            size = int.from_bytes(data[i : i + width], "little")
            i += width
            if i > n or i + size > n:
                raise _Malformed(f"bytes of {size} past the end")
            push(data[i : i + size])
            i += size
        elif op == 0x54 or op == 0x55:  # BINSTRING, SHORT_BINSTRING (protocol 1 str)
            if op == 0x54:
                size = _I32.unpack_from(data, i)[0]
                i += 4
            else:
                size = data[i]
                i += 1
            if size < 0 or i + size > n:
                raise _Malformed(f"a string of {size} bytes past the end")
            push(str(data[i : i + size], "ascii"))
            i += size
        elif op == 0x8F:  # EMPTY_SET
            push(set())
        elif op == 0x90 or op == 0x91:  # ADDITEMS, FROZENSET
            if not marks:
                raise _Malformed(f"{'ADDITEMS' if op == 0x90 else 'FROZENSET'} without a MARK")
            items = [_key(x) for x in stack[base:]]
            del stack[base:]
            marks.pop()
            base = marks[-1] if marks else 0
            if op == 0x91:
                push(frozenset(items))
            elif len(stack) > base and type(stack[-1]) is set:
                stack[-1].update(items)
            else:
                raise _Refused("ADDITEMS on something not a set")
        elif op == 0x30:  # POP: the top item, or the mark when none is above it
            if len(stack) > base:
                stack.pop()
            elif marks:
                marks.pop()
                base = marks[-1] if marks else 0
            else:
                raise _Malformed("POP of an empty stack")
        elif op == 0x31:  # POP_MARK
            if not marks:
                raise _Malformed("POP_MARK without a MARK")
            del stack[base:]
            marks.pop()
            base = marks[-1] if marks else 0
        elif op == 0x32:  # DUP
            if len(stack) <= base:
                raise _Malformed("DUP of an empty stack")
            push(stack[-1])
        elif op == 0x2E:  # STOP
            if len(stack) != 1 or marks:
                raise _Malformed("STOP with a stack other than one value")
            return stack[0]
        elif op == 0x80:  # PROTO
            if data[i] > 5:
                raise _Malformed(f"pickle protocol {data[i]} (at most 5 exists)")
            i += 1
        elif op == 0x95:  # FRAME: its bytes are more opcodes; the length is not needed
            _U64.unpack_from(data, i)
            i += 8
        elif op in (0x49, 0x4C, 0x46, 0x53, 0x56, 0x67, 0x70):
            # protocol 0, a text argument: INT, LONG, FLOAT, STRING, UNICODE, GET, PUT
            end = data.find(b"\n", i, i + _MAX_LINE)
            if end < 0:
                raise _Malformed(f"no end of line within {_MAX_LINE} bytes of byte {i}")
            text = data[i:end]
            i = end + 1
            if op == 0x49:
                push(text == b"01" if text in (b"00", b"01") else _number(text))
            elif op == 0x4C:
                push(_number(text[:-1] if text.endswith(b"L") else text))
            elif op == 0x46:
                push(float(text))
            elif op == 0x53:
                if len(text) < 2 or text[:1] != text[-1:] or text[:1] not in (b"'", b'"'):
                    raise _Malformed("STRING without quotes")
                push(str(codecs.escape_decode(text[1:-1])[0], "ascii"))
            elif op == 0x56:
                push(str(text, "raw-unicode-escape"))
            else:
                index = _number(text)
                if op == 0x67:
                    if index not in memo:
                        raise _Refused(f"memo index {index} was never stored")
                    push(memo[index])
                elif not 0 <= index <= len(memo):
                    raise _Refused(f"memo index {index} beyond the {len(memo)} values stored")
                elif len(stack) <= base:
                    raise _Malformed("PUT with nothing to store")
                else:
                    memo[index] = stack[-1]
        elif op in _REFUSED:
            raise _Refused(f"opcode {_REFUSED[op]}")
        else:
            raise _Malformed(f"unknown opcode 0x{op:02x} at byte {i - 1}")


def _number(text: bytes) -> int:
    if len(text) > 40:
        raise _Refused(f"a protocol-0 number of {len(text)} digits")
    return int(text)


def load_plain_pickle(data: bytes) -> dict[str, Any]:
    """A Flight Recorder dump's pickle bytes as a dict of plain data; :class:`InputError` (one
    line) when it is empty, corrupt, truncated, refers to anything but plain data or exceeds
    the bounds of the module docstring."""
    if not data:
        raise InputError("Flight Recorder dump is empty")
    if len(data) > MAX_DUMP_BYTES:
        raise InputError(f"Flight Recorder dump larger than {mib(MAX_DUMP_BYTES)}; not read")
    try:
        obj = _run(data)
    except _Refused as exc:
        raise InputError(f"Flight Recorder dump refused: {exc}") from None
    except (_Malformed, ValueError, UnicodeError, struct.error) as exc:
        raise InputError(
            f"not a readable Flight Recorder dump ({len(data)} bytes): {str(exc)[:200]}"
        ) from None
    if not isinstance(obj, dict):
        raise InputError(f"Flight Recorder dump is a {type(obj).__name__}, expected a dict")
    try:
        check_plain(obj)
    except InputError as exc:
        raise InputError(f"Flight Recorder dump refused: it {exc}") from None
    return obj
