"""A lean GGUF header reader: magic, metadata scalars and the tensor table, never the weights.

It answers the questions asked before a model is loaded — is this GGUF at all, is the file complete,
what does its metadata say — in a fraction of a second on multi-GB files, by walking the header
through mmap instead of building numpy views the way the `gguf` package does.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path

MAGIC = b"GGUF"

# ggml type id → (elements per block, bytes per block)
GGML_BLOCKS = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34), 9: (32, 40),
    10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210), 15: (256, 292),
    16: (256, 66), 17: (256, 74), 18: (256, 98), 19: (256, 50), 20: (32, 18), 21: (256, 110),
    22: (256, 82), 23: (256, 136), 24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8),
    29: (256, 56), 30: (1, 2), 34: (256, 54), 35: (256, 66), 39: (32, 17), 40: (64, 36), 41: (128, 18),
}
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9


class NotGGUF(ValueError):
    """The file does not start with the GGUF magic."""


class Truncated(ValueError):
    """The file ends before its header or its tensor data does; `expected` is the full size if known."""

    def __init__(self, message: str, expected: int | None = None):
        super().__init__(message)
        self.expected = expected


@dataclass
class GGUFHeader:
    """What the header says: scalar metadata, array lengths, each tensor's size in bytes, and the
    size the file must have."""

    version: int
    n_tensors: int
    metadata: dict[str, object] = field(default_factory=dict)
    array_lengths: dict[str, int] = field(default_factory=dict)
    tensor_bytes: dict[str, int] = field(default_factory=dict)
    data_end: int = 0


class _Cursor:
    def __init__(self, buf, size: int):
        self.buf, self.size, self.pos = buf, size, 0

    def take(self, fmt: str):
        n = struct.calcsize(fmt)
        if self.pos + n > self.size:
            raise Truncated("the file ends inside its header")
        value = struct.unpack_from(fmt, self.buf, self.pos)[0]
        self.pos += n
        return value

    def string(self, keep: bool = True) -> str | None:
        n = self.take("<Q")
        if self.pos + n > self.size:
            raise Truncated("the file ends inside its header")
        start, self.pos = self.pos, self.pos + n
        return bytes(self.buf[start : self.pos]).decode("utf-8", "replace") if keep else None

    def value(self, kind: int, keep: bool = True):
        if kind == STRING:
            return self.string(keep)
        if kind in _SCALARS:
            return self.take(_SCALARS[kind])
        raise ValueError(f"unknown metadata type {kind}")

    def skip_array(self, kind: int, count: int) -> None:
        if kind == STRING:
            for _ in range(count):
                self.string(keep=False)
        elif kind == ARRAY:
            for _ in range(count):
                inner, n = self.take("<I"), self.take("<Q")
                self.skip_array(inner, n)
        elif kind in _SCALARS:
            self.pos += struct.calcsize(_SCALARS[kind]) * count
            if self.pos > self.size:
                raise Truncated("the file ends inside its header")
        else:
            raise ValueError(f"unknown metadata type {kind}")


def read_header(path: str | Path) -> GGUFHeader:
    """Parse the header of `path`; raises NotGGUF, Truncated, or ValueError for a corrupt header."""
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        if size < 4:
            raise NotGGUF("the file is too small to be a GGUF model")
        f.seek(0)
        if f.read(4) != MAGIC:
            raise NotGGUF("the file does not start with the GGUF magic")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return _parse(buf, size)


def _parse(buf, size: int) -> GGUFHeader:
    cur = _Cursor(buf, size)
    cur.pos = 4
    version = cur.take("<I")
    if version not in (2, 3):
        raise ValueError(f"unsupported GGUF version {version}")
    n_tensors, n_kv = cur.take("<Q"), cur.take("<Q")
    header = GGUFHeader(version, n_tensors)
    for _ in range(n_kv):
        key, kind = cur.string(), cur.take("<I")
        if kind == ARRAY:
            inner, count = cur.take("<I"), cur.take("<Q")
            header.array_lengths[key] = count
            cur.skip_array(inner, count)
        else:
            header.metadata[key] = cur.value(kind)
    ends = []
    for _ in range(n_tensors):
        name = cur.string()
        dims = [cur.take("<Q") for _ in range(cur.take("<I"))]
        kind, offset = cur.take("<I"), cur.take("<Q")
        header.tensor_bytes[name] = _nbytes(kind, dims)
        ends.append(offset + header.tensor_bytes[name])
    align = int(header.metadata.get("general.alignment", 32) or 32)
    data_start = (cur.pos + align - 1) // align * align
    header.data_end = data_start + max(ends, default=0)
    return header


def _nbytes(kind: int, dims: list[int]) -> int:
    """Bytes a tensor occupies; 0 for a type this table does not know (its offset still counts)."""
    if kind not in GGML_BLOCKS:
        return 0
    block, type_size = GGML_BLOCKS[kind]
    n = 1
    for d in dims:
        n *= d
    return n // block * type_size


def check_complete(path: str | Path) -> GGUFHeader:
    """Parse the header and make sure the file holds every byte of tensor data it declares."""
    header = read_header(path)
    size = Path(path).stat().st_size
    if header.data_end > size:
        raise Truncated(f"the file is truncated: {size} of {header.data_end} bytes", header.data_end)
    return header
