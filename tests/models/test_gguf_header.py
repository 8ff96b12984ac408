"""The GGUF header reader on crafted files: each piece of nonsense is a one-line "not a readable
GGUF model" (exit 2) within 100 ms, never an endless walk or a Python error, and valid files still
read exactly as the `gguf` package wrote them."""

from __future__ import annotations

import math
import struct
import time
from pathlib import Path

import gguf
import numpy as np
import pytest
from cli_helpers import specrun
from gguf_bytes import (
    ARRAY,
    FLOAT32,
    INT32,
    STRING,
    UINT8,
    UINT32,
    UINT64,
    array,
    header,
    kv,
    minimal_llama,
    model,
    nested_array,
    scalar,
    string,
    tensor,
    text,
    u32,
    u64,
)
from test_cli_run import one_line_error

from specrun.errors import ModelFileError
from specrun.models.gguf_header import Corrupt, Truncated, check_complete, parse_header
from specrun.models.modelfile import check_gguf_file
from specrun.models.sizes import model_size

TIME_BOUND_S = 0.100  # CPU time of this thread: what the reader costs, whatever else the machine runs


def cpu_seconds(fn, *args):
    """Run fn(*args), return (its CPU seconds on this thread, the exception it raised or None)."""
    start = time.thread_time()
    try:
        fn(*args)
        error = None
    except Exception as exc:  # noqa: BLE001 - the caller checks which
        error = exc
    return time.thread_time() - start, error


# name → (bytes, words the message must hold). Each is refused by the header walk itself.
NONSENSE = {
    # 40,000 dimensions of 2^32: multiplying them out took seconds (quadratic in their number)
    "forty-thousand-dims": (
        header([], [string("t") + u32(40_000) + u64(2**32) * 40_000 + u32(0) + u64(0)]),
        ["40000 dimensions", "at most 4"],
    ),
    "five-dims": (model([], [("t", (1, 1, 1, 1, 1))]), ["5 dimensions"]),
    "nested-1200-deep": (header([nested_array("k", 1200)]), ["array of arrays"]),
    "nested-2-deep": (header([nested_array("k", 1)]), ["array of arrays"]),
    "alignment-inf": (
        model([scalar("general.alignment", FLOAT32, math.inf)], [("t", (8,))]),
        ["general.alignment", "uint32"],
    ),
    "alignment-nan": (model([scalar("general.alignment", FLOAT32, math.nan)]), ["general.alignment"]),
    "alignment-zero": (header([scalar("general.alignment", UINT32, 0)]), ["general.alignment is 0", "power of two"]),
    "alignment-three": (header([scalar("general.alignment", UINT32, 3)]), ["power of two"]),
    "alignment-u64": (header([scalar("general.alignment", UINT64, 32)]), ["uint32"]),
    "alignment-array": (header([array("general.alignment", UINT32, 1, u32(32))]), ["uint32"]),
    "negative-tensor-count": (header([], n_tensors=2**64 - 1), ["tensor count", "beyond any file"]),
    "negative-kv-count": (header([], n_kv=2**63), ["metadata count"]),
    "negative-string-length": (header([string("k", length=2**64 - 2) + bytes(64)]), ["beyond any file"]),
    "negative-dimension": (header([], [tensor("t", (2**63,))]), ["dimension"]),
    "element-count-overflow": (header([], [tensor("t", (2**32, 2**32))]), ["int64"]),
    "offset-beyond-any-file": (header([], [tensor("t", (8,), offset=2**63 - 1)]), ["beyond any file"]),
    "unknown-value-type": (header([kv("k", 13, bytes(8))]), ["unknown type 13"]),
    "unknown-array-type": (header([array("k", 99, 1, bytes(8))]), ["unknown type 99"]),
    "duplicate-key": (header([scalar("k", UINT8, 1), scalar("k", UINT8, 2)]), ["twice"]),
    "duplicate-tensor": (header([], [tensor("t", (8,)), tensor("t", (8,), offset=32)]), ["twice"]),
    "long-tensor-name": (header([], [tensor("x" * 64, (8,))]), ["64 bytes"]),
    "version-7": (header([], version=7), ["version 7"]),
}

# Lengths and counts the bytes left cannot hold: refused at once, before any loop over them.
CUT_SHORT = {
    "string-length-2^62": (header([string("k", length=2**62) + bytes(64)]), ["2^62", "4611686018427387904"]),
    "kv-count-2^40": (header([], n_kv=2**40) + bytes(64), ["1099511627776 metadata entries"]),
    "tensor-count-2^40": (header([], n_tensors=2**40) + bytes(64), ["1099511627776 tensor descriptions"]),
    "string-array-2^60": (header([array("k", STRING, 2**60, bytes(64))]), ["the array 'k'"]),
    "int-array-2^60": (header([array("k", INT32, 2**60, bytes(64))]), ["the array 'k'"]),
    "string-array-lying-length": (
        header([array("k", STRING, 3, string("a") + string("b", length=10**9) + bytes(64))]),
        ["runs past the end"],
    ),
}


@pytest.mark.parametrize("name", list(NONSENSE))
def test_nonsense_is_refused_as_unreadable_within_the_time_bound(tmp_path, name):
    data, words = NONSENSE[name]
    path = tmp_path / f"{name}.gguf"
    path.write_bytes(data)
    seconds, error = cpu_seconds(check_gguf_file, path)
    assert isinstance(error, ModelFileError), repr(error)
    assert error.exit_code == 2 and "is not a readable GGUF model" in error.message and error.hint
    assert isinstance(error.__cause__, Corrupt)
    for word in words:
        assert word in error.message, error.message
    assert seconds < TIME_BOUND_S, f"{name}: {seconds * 1000:.1f} ms"


@pytest.mark.parametrize("name", list(CUT_SHORT))
def test_lengths_beyond_the_bytes_left_are_refused_at_once(tmp_path, name):
    data, words = CUT_SHORT[name]
    path = tmp_path / f"{name}.gguf"
    path.write_bytes(data)
    seconds, error = cpu_seconds(check_gguf_file, path)
    assert isinstance(error, ModelFileError) and isinstance(error.__cause__, Truncated), repr(error)
    assert error.exit_code == 2 and "is incomplete or damaged" in error.message
    assert any(word in error.message for word in words), error.message
    assert seconds < TIME_BOUND_S, f"{name}: {seconds * 1000:.1f} ms"


# Valid headers whose numbers specrun's size arithmetic cannot use.
BAD_COUNTS = {
    "block-count-inf": (
        minimal_llama(block_count=None, extra=[scalar("llama.block_count", FLOAT32, math.inf)]),
        "llama.block_count is inf",
    ),
    "block-count-nan": (
        minimal_llama(block_count=None, extra=[scalar("llama.block_count", FLOAT32, math.nan)]),
        "llama.block_count is nan",
    ),
    "block-count-float": (
        minimal_llama(block_count=None, extra=[scalar("llama.block_count", FLOAT32, 2.0)]),
        "llama.block_count is 2.0",
    ),
    "block-count-100000": (minimal_llama(block_count=100_000), "from 0 to 512"),
    "head-count-negative": (
        minimal_llama(extra=[scalar("llama.attention.head_count_kv", INT32, -4)]),
        "head_count_kv is -4",
    ),
    "key-length-2^40": (
        minimal_llama(extra=[scalar("llama.attention.key_length", UINT64, 2**40)]),
        "key_length is 1099511627776",
    ),
    # no block count and a tensor of layer 10^7: the layer table was built entry by entry up to it
    "layer-ten-million": (
        minimal_llama(block_count=None, tensors=(("blk.10000000.attn_norm.weight", (8,)),)),
        "layer 10000000",
    ),
}


@pytest.mark.parametrize("name", list(BAD_COUNTS))
def test_counts_specrun_reads_must_be_counts(tmp_path, name):
    data, words = BAD_COUNTS[name]
    path = tmp_path / f"{name}.gguf"
    path.write_bytes(data)
    check_gguf_file(path)  # the header itself is well formed
    seconds, error = cpu_seconds(model_size, path)
    assert isinstance(error, ModelFileError) and error.exit_code == 2, repr(error)
    assert "is not a readable GGUF model" in error.message and words in error.message, error.message
    assert seconds < TIME_BOUND_S, f"{name}: {seconds * 1000:.1f} ms"


def test_a_header_of_every_kind_reads_as_the_gguf_package_wrote_it(tmp_path):
    path = tmp_path / "kinds.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_uint8("u8", 200)
    writer.add_int8("i8", -100)
    writer.add_uint16("u16", 60_000)
    writer.add_int16("i16", -30_000)
    writer.add_uint32("u32", 4_000_000_000)
    writer.add_int32("i32", -2_000_000_000)
    writer.add_float32("f32", 0.5)
    writer.add_uint64("u64", 2**64 - 1)
    writer.add_int64("i64", -(2**63))
    writer.add_float64("f64", -1e300)
    writer.add_bool("yes", True)
    writer.add_string("name", "héllo")
    writer.add_array("strings", ["a", "", "ccc"])
    writer.add_array("ints", [1, 2, 3, 4])
    writer.add_uint32("general.alignment", 64)
    writer.add_tensor("blk.0.a", np.zeros((3, 64), dtype=np.float32))
    writer.add_tensor("blk.0.b", np.zeros((2, 2, 2, 64), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    head = check_complete(path)
    assert head.metadata["u8"] == 200 and head.metadata["i8"] == -100 and head.metadata["u16"] == 60_000
    assert (
        head.metadata["i16"] == -30_000
        and head.metadata["u32"] == 4_000_000_000
        and head.metadata["i32"] == -2_000_000_000
    )
    assert head.metadata["f32"] == 0.5 and head.metadata["u64"] == 2**64 - 1 and head.metadata["i64"] == -(2**63)
    assert head.metadata["f64"] == -1e300 and head.metadata["yes"] is True and head.metadata["name"] == "héllo"
    assert head.array_lengths == {"strings": 3, "ints": 4}
    assert head.tensor_bytes == {"blk.0.a": 3 * 64 * 4, "blk.0.b": 8 * 64 * 2}
    assert head.data_end == path.stat().st_size  # the last tensor ends where the file does


def test_the_tiny_models_read_completely(tiny_target, tiny_draft):
    for path in (tiny_target, tiny_draft):
        head = check_complete(path)
        assert head.n_tensors == len(head.tensor_bytes) > 0
        assert head.data_end == path.stat().st_size
        assert model_size(path).n_layer == head.metadata["llama.block_count"]


def test_a_file_cut_inside_its_tensor_data_is_still_incomplete(tmp_path, tiny_target):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny_target.read_bytes()[:-1000])
    with pytest.raises(ModelFileError, match="is incomplete: the file is truncated"):
        check_gguf_file(cut)


def test_parse_header_takes_bytes_and_refuses_what_is_not_gguf():
    assert parse_header(minimal_llama(), len(minimal_llama())).metadata["llama.block_count"] == 1
    for data in (b"", b"GG", b"GGUX" + bytes(20)):
        with pytest.raises(ValueError, match="GGUF magic|too small"):
            parse_header(data, len(data))


# ---- through the commands -------------------------------------------------------------------------


@pytest.fixture
def crafted(tmp_path) -> dict[str, Path]:
    out = {}
    for name, data in (
        ("dims", NONSENSE["forty-thousand-dims"][0]),
        ("nested", NONSENSE["nested-1200-deep"][0]),
        ("alignment", NONSENSE["alignment-inf"][0]),
        ("block-count", BAD_COUNTS["block-count-inf"][0]),
    ):
        out[name] = tmp_path / f"{name}.gguf"
        out[name].write_bytes(data)
    return out


@pytest.mark.parametrize("name", ["dims", "nested", "alignment"])
def test_check_says_one_line_and_exits_2(crafted, tiny_target, name):
    one_line_error(specrun("check", tiny_target, crafted[name]), 2, str(crafted[name]), "not a readable GGUF model")


@pytest.mark.parametrize("name", ["dims", "nested", "block-count"])
def test_run_says_one_line_and_exits_2(crafted, name):
    one_line_error(
        specrun("run", "hi", "--target", crafted[name], "--draft", "none", "-n", "1"), 2, "not a readable GGUF model"
    )


def test_interesting_numbers_are_what_the_format_says():
    """The byte builder writes what llama.cpp reads (a check on the test's own tool)."""
    entry = scalar("general.alignment", UINT32, 64)
    assert entry == u64(17) + b"general.alignment" + u32(UINT32) + struct.pack("<I", 64)
    assert text("a", "b") == u64(1) + b"a" + u32(STRING) + u64(1) + b"b"
    assert nested_array("k", 1) == u64(1) + b"k" + u32(ARRAY) + u32(ARRAY) + u64(1) + u32(UINT32) + u64(0)
