"""A lean GGUF header reader: magic, metadata scalars and the tensor table, never the weights.

It answers the questions asked before a model is loaded — is this GGUF at all, is the file complete,
what does its metadata say — in a fraction of a second on multi-GB files, by walking the header
through mmap instead of building numpy views the way the `gguf` package does.

The files it reads come from anywhere (a download folder, the Hugging Face cache), so it trusts no
number in them: its work is linear in the header's bytes whatever they say. Every element read
consumes bytes, a declared length is checked against the bytes left before anything loops over it,
and the shapes llama.cpp's own reader (ggml/src/gguf.cpp) refuses are refused here the same way: more
than GGML_MAX_DIMS dimensions, nested arrays, negative counts, an element count beyond int64, an
alignment that is not a power of two in a uint32.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path

MAGIC = b"GGUF"
MAX_DIMS = 4  # GGML_MAX_DIMS: llama.cpp refuses a tensor with more
MAX_NAME = 64  # GGML_MAX_NAME: a tensor name must be shorter
INT64_MAX = 2**63 - 1  # counts, dimensions and element totals are int64 in llama.cpp
DEFAULT_ALIGNMENT = 32
ALIGNMENT_KEY = "general.alignment"

# ggml type id → (elements per block, bytes per block)
GGML_BLOCKS = {
    0: (1, 4),
    1: (1, 2),
    2: (32, 18),
    3: (32, 20),
    6: (32, 22),
    7: (32, 24),
    8: (32, 34),
    9: (32, 40),
    10: (256, 84),
    11: (256, 110),
    12: (256, 144),
    13: (256, 176),
    14: (256, 210),
    15: (256, 292),
    16: (256, 66),
    17: (256, 74),
    18: (256, 98),
    19: (256, 50),
    20: (32, 18),
    21: (256, 110),
    22: (256, 82),
    23: (256, 136),
    24: (1, 1),
    25: (1, 2),
    26: (1, 4),
    27: (1, 8),
    28: (1, 8),
    29: (256, 56),
    30: (1, 2),
    34: (256, 54),
    35: (256, 66),
    39: (32, 17),
    40: (64, 36),
    41: (128, 18),
}
UINT32 = 4
STRING, ARRAY = 8, 9
_SCALARS = {
    k: struct.Struct(f)
    for k, f in {
        0: "<B",
        1: "<b",
        2: "<H",
        3: "<h",
        4: "<I",
        5: "<i",
        6: "<f",
        7: "<?",
        10: "<Q",
        11: "<q",
        12: "<d",
    }.items()
}
_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")
# The fewest bytes one entry can take: a metadata pair (key length, type, a one-byte value) and a
# tensor (name length, dimension count, type, offset); they bound the counts a header may declare.
_MIN_KV_BYTES = 8 + 4 + 1
_MIN_TENSOR_BYTES = 8 + 4 + 4 + 8


class NotGGUF(ValueError):
    """The file does not start with the GGUF magic."""


class Truncated(ValueError):
    """The file ends before its header or its tensor data does; `expected` is the full size if known."""

    def __init__(self, message: str, expected: int | None = None):
        super().__init__(message)
        self.expected = expected


class Corrupt(ValueError):
    """The header says something no readable GGUF file says (llama.cpp would refuse it too)."""


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
    """A position in the header that never moves past the end of the file."""

    def __init__(self, buf, size: int):
        self.buf, self.size, self.pos = buf, size, 0

    def need(self, n: int, what: str) -> None:
        """Refuse `what` when its `n` bytes are not all there."""
        if n > self.size - self.pos:
            raise Truncated(
                f"the file ends inside its header ({what}: {n} bytes at offset {self.pos}, {self.size - self.pos} left)"
            )

    def take(self, fmt: struct.Struct, what: str):
        self.need(fmt.size, what)
        value = fmt.unpack_from(self.buf, self.pos)[0]
        self.pos += fmt.size
        return value

    def count(self, what: str) -> int:
        """A uint64 count or length; one beyond int64 is negative to llama.cpp: nonsense."""
        n = self.take(_U64, what)
        if n > INT64_MAX:
            raise Corrupt(f"{what} is {n}, beyond any file")
        return n

    def raw(self, what: str) -> bytes:
        n = self.count(f"the length of {what}")
        self.need(n, what)
        start, self.pos = self.pos, self.pos + n
        return bytes(self.buf[start : self.pos])

    def string(self, what: str) -> str:
        return self.raw(what).decode("utf-8", "replace")

    def skip_strings(self, count: int, what: str) -> None:
        """Step over `count` strings; each takes at least its 8-byte length, so this ends within
        the bytes left whatever `count` says."""
        self.need(count * 8, what)
        buf, pos, size, unpack = self.buf, self.pos, self.size, _U64.unpack_from
        for _ in range(count):
            if pos + 8 > size:
                self.pos = pos
                self.need(8, what)
            pos += 8 + unpack(buf, pos)[0]
            if pos > size:
                self.pos = pos
                raise Truncated(f"the file ends inside its header (a string of {what} runs past the end of the file)")
        self.pos = pos


def read_header(path: str | Path) -> GGUFHeader:
    """Parse the header of `path`; raises NotGGUF, Truncated or Corrupt (all ValueErrors)."""
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        if size < len(MAGIC):
            raise NotGGUF("the file is too small to be a GGUF model")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            return parse_header(buf, size)


def parse_header(buf, size: int) -> GGUFHeader:
    """Parse a header held in `buf` (bytes or an mmap) of `size` bytes; the errors of read_header."""
    if size < len(MAGIC) or bytes(buf[: len(MAGIC)]) != MAGIC:
        raise NotGGUF(
            "the file does not start with the GGUF magic"
            if size >= len(MAGIC)
            else "the file is too small to be a GGUF model"
        )
    cur = _Cursor(buf, size)
    cur.pos = len(MAGIC)
    version = cur.take(_U32, "the version")
    if version not in (2, 3):
        raise Corrupt(f"unsupported GGUF version {version}")
    n_tensors, n_kv = cur.count("the tensor count"), cur.count("the metadata count")
    cur.need(n_kv * _MIN_KV_BYTES, f"{n_kv} metadata entries")
    header = GGUFHeader(version, n_tensors)
    for i in range(n_kv):
        _read_kv(cur, header, i)
    cur.need(n_tensors * _MIN_TENSOR_BYTES, f"{n_tensors} tensor descriptions")
    ends = [_read_tensor(cur, header, i) for i in range(n_tensors)]
    align = _alignment(header.metadata)
    data_start = (cur.pos + align - 1) // align * align
    header.data_end = data_start + max(ends, default=0)
    return header


def _read_kv(cur: _Cursor, header: GGUFHeader, i: int) -> None:
    key = cur.string(f"metadata key {i}")
    if key in header.metadata or key in header.array_lengths:
        raise Corrupt(f"metadata key {key!r} appears twice")
    kind = cur.take(_U32, f"the type of {key!r}")
    if kind == ARRAY:
        inner, count = cur.take(_U32, f"the element type of {key!r}"), cur.count(f"the length of {key!r}")
        header.array_lengths[key] = count
        if inner == STRING:
            cur.skip_strings(count, f"the array {key!r}")
        elif inner in _SCALARS:
            cur.need(count * _SCALARS[inner].size, f"the array {key!r}")
            cur.pos += count * _SCALARS[inner].size
        elif inner == ARRAY:
            raise Corrupt(f"metadata {key!r} is an array of arrays, which llama.cpp cannot read")
        else:
            raise Corrupt(f"metadata {key!r} is an array of unknown type {inner}")
    elif kind == STRING:
        header.metadata[key] = cur.string(f"the value of {key!r}")
    elif kind in _SCALARS:
        header.metadata[key] = cur.take(_SCALARS[kind], f"the value of {key!r}")
    else:
        raise Corrupt(f"metadata {key!r} has unknown type {kind}")
    if key == ALIGNMENT_KEY and kind != UINT32:
        raise Corrupt(f"{ALIGNMENT_KEY} must be a uint32 (it is of type {kind})")


def _read_tensor(cur: _Cursor, header: GGUFHeader, i: int) -> int:
    """One tensor's description; returns where its data ends, from the start of the data section."""
    raw = cur.raw(f"tensor name {i}")
    if len(raw) >= MAX_NAME:
        raise Corrupt(f"tensor {i}'s name is {len(raw)} bytes long; llama.cpp takes at most {MAX_NAME - 1}")
    name = raw.decode("utf-8", "replace")
    if name in header.tensor_bytes:
        raise Corrupt(f"tensor {name!r} appears twice")
    n_dims = cur.take(_U32, f"the dimension count of {name!r}")
    if n_dims > MAX_DIMS:
        raise Corrupt(f"tensor {name!r} has {n_dims} dimensions; GGML tensors have at most {MAX_DIMS}")
    dims = [cur.count(f"a dimension of {name!r}") for _ in range(n_dims)]
    elements = 1
    for d in dims:
        elements *= d
    if elements > INT64_MAX:
        raise Corrupt(f"tensor {name!r} of shape {dims} has more elements than int64 holds")
    kind, offset = cur.take(_U32, f"the type of {name!r}"), cur.count(f"the data offset of {name!r}")
    header.tensor_bytes[name] = _nbytes(kind, elements)
    end = offset + header.tensor_bytes[name]
    if end > INT64_MAX:
        raise Corrupt(f"tensor {name!r} ends {end} bytes into the data, beyond any file")
    return end


def _alignment(metadata: dict[str, object]) -> int:
    """general.alignment, checked as llama.cpp checks it: a uint32 power of two (the type is checked
    as the entry is read)."""
    align = metadata.get(ALIGNMENT_KEY, DEFAULT_ALIGNMENT)
    if not isinstance(align, int) or align <= 0 or align & (align - 1):
        raise Corrupt(f"{ALIGNMENT_KEY} is {align!r}, not a power of two")
    return align


def _nbytes(kind: int, elements: int) -> int:
    """Bytes a tensor occupies; 0 for a type this table does not know (its offset still counts)."""
    if kind not in GGML_BLOCKS:
        return 0
    block, type_size = GGML_BLOCKS[kind]
    return elements // block * type_size


def check_complete(path: str | Path) -> GGUFHeader:
    """Parse the header and make sure the file holds every byte of tensor data it declares."""
    header = read_header(path)
    size = Path(path).stat().st_size
    if header.data_end > size:
        raise Truncated(f"the file is truncated: {size} of {header.data_end} bytes", header.data_end)
    return header
