"""GGUF headers built byte by byte, so a test can write what no writer would: more than four
dimensions, arrays nested a thousand deep, lengths beyond the file, an infinite alignment.

Layout (GGUF v3, little-endian): magic, version u32, tensor count u64, metadata count u64; each
metadata entry is a string key, a type u32 and its value (an array: element type u32, count u64,
elements); each tensor is a string name, a dimension count u32, the dimensions u64, a ggml type u32
and a data offset u64; then padding to the alignment and the tensor data.
"""

from __future__ import annotations

import struct

UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, FLOAT64 = range(13)
SCALAR_FORMATS = {
    UINT8: "<B",
    INT8: "<b",
    UINT16: "<H",
    INT16: "<h",
    UINT32: "<I",
    INT32: "<i",
    FLOAT32: "<f",
    BOOL: "<?",
    UINT64: "<Q",
    INT64: "<q",
    FLOAT64: "<d",
}
F32 = 0  # the ggml type of a float32 tensor


def u32(value: int) -> bytes:
    return struct.pack("<I", value)


def u64(value: int) -> bytes:
    return struct.pack("<Q", value)


def string(text: str | bytes, length: int | None = None) -> bytes:
    """A GGUF string; `length` overrides the declared length (to lie about it)."""
    raw = text.encode() if isinstance(text, str) else text
    return u64(len(raw) if length is None else length) + raw


def kv(key: str, kind: int, value: bytes) -> bytes:
    """A metadata entry whose value is already packed."""
    return string(key) + u32(kind) + value


def scalar(key: str, kind: int, value) -> bytes:
    return kv(key, kind, struct.pack(SCALAR_FORMATS[kind], value))


def text(key: str, value: str) -> bytes:
    return kv(key, STRING, string(value))


def array(key: str, inner: int, count: int, elements: bytes) -> bytes:
    """An array entry: `count` is declared as given, whatever `elements` holds."""
    return kv(key, ARRAY, u32(inner) + u64(count) + elements)


def nested_array(key: str, depth: int) -> bytes:
    """An array of an array of … (`depth` levels) of one empty uint32 array."""
    return kv(key, ARRAY, (u32(ARRAY) + u64(1)) * depth + u32(UINT32) + u64(0))


def tensor(
    name: str, dims: list[int] | tuple[int, ...], kind: int = F32, offset: int = 0, n_dims: int | None = None
) -> bytes:
    """A tensor description; `n_dims` overrides the declared dimension count."""
    return (
        string(name)
        + u32(len(dims) if n_dims is None else n_dims)
        + b"".join(u64(d) for d in dims)
        + u32(kind)
        + u64(offset)
    )


def header(
    kvs: list[bytes],
    tensors: list[bytes] = (),
    *,
    version: int = 3,
    n_kv: int | None = None,
    n_tensors: int | None = None,
) -> bytes:
    """Magic, version, counts (as given, or the true ones), the entries and the tensor table."""
    return (
        b"GGUF"
        + u32(version)
        + u64(len(tensors) if n_tensors is None else n_tensors)
        + u64(len(kvs) if n_kv is None else n_kv)
        + b"".join(kvs)
        + b"".join(tensors)
    )


def model(kvs: list[bytes], tensors: list[tuple[str, tuple[int, ...]]] = (), alignment: int = 32, **counts) -> bytes:
    """A complete file: the header, padding to `alignment`, and zeroed float32 tensor data laid out
    one tensor after another (each padded to the alignment, as llama.cpp expects)."""
    described, offset, sizes = [], 0, []
    for name, dims in tensors:
        described.append(tensor(name, dims, F32, offset))
        size = 4
        for d in dims:
            size *= d
        sizes.append(size)
        offset += -(-size // alignment) * alignment
    head = header(kvs, described, **counts)
    return head + bytes(-len(head) % alignment) + bytes(offset)


def minimal_llama(
    extra: list[bytes] = (), *, block_count: int | None = 1, tensors=(("blk.0.attn_norm.weight", (8,)),)
) -> bytes:
    """A small llama-architecture header with the keys specrun's size arithmetic reads."""
    kvs = [text("general.architecture", "llama")]
    if block_count is not None:
        kvs.append(scalar("llama.block_count", UINT32, block_count))
    kvs += [scalar("llama.embedding_length", UINT32, 8), scalar("llama.attention.head_count", UINT32, 2), *extra]
    return model(kvs, list(tensors))
