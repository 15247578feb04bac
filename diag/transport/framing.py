"""Length-prefixed frames over a stream socket (hook -> daemon).

A frame is a 4-byte big-endian length followed by that many bytes (a serialized ``EventBatch``).
Frames above :data:`MAX_FRAME_BYTES` are refused: a peer that sends one is not speaking diag.
"""

from __future__ import annotations

import struct

from diag.errors import SchemaError

MAX_FRAME_BYTES = 16 * 1024 * 1024
_HEADER = struct.Struct(">I")


def encode_frame(payload: bytes) -> bytes:
    if len(payload) > MAX_FRAME_BYTES:
        raise SchemaError(f"frame of {len(payload)} bytes exceeds {MAX_FRAME_BYTES}")
    return _HEADER.pack(len(payload)) + payload


class FrameDecoder:
    """Incremental decoder: feed bytes as they arrive, take whole frames out."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        out: list[bytes] = []
        while len(self._buf) >= _HEADER.size:
            (size,) = _HEADER.unpack_from(self._buf)
            if size > MAX_FRAME_BYTES:
                raise SchemaError(f"frame header announces {size} bytes (max {MAX_FRAME_BYTES})")
            end = _HEADER.size + size
            if len(self._buf) < end:
                break
            out.append(bytes(self._buf[_HEADER.size : end]))
            del self._buf[:end]
        return out

    @property
    def pending_bytes(self) -> int:
        return len(self._buf)
