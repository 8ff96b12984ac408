"""Write a random-weight GGUF with the real shapes of a Qwen2.5 model, to time llama.cpp without downloads.

Decoding speed depends on a model's shapes and weight type, not on its values, so a file laid out like
Qwen2.5-7B-Instruct runs as fast as the real one. Matrices are Q8_0 (or Q4_0) blocks written directly
as bytes: a constant f16 scale sized so each product keeps unit variance, then random int8 (or 4-bit)
values; norms are ones and biases zeros, so nothing overflows to NaN or inf. Tensors stream to disk one
at a time, so memory stays at the largest tensor.

The vocabulary is byte-level gpt2: 256 byte tokens, a few merges, the chat special tokens, then
`<extra_i>` padding up to the model's size. Every id below the smaller size means the same in every
shape, so any two shapes pass speculative decoding's vocabulary check (7B and 0.5B differ by 128).

Usage: python scripts/shaped_gguf.py --shape qwen2.5-7b OUT.gguf [--type q8_0|q4_0] [--seed N]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Shape:
    """The hyperparameters that decide a qwen2 model's tensor shapes and cost."""

    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_vocab: int
    tied_embeddings: bool
    context_length: int = 32768
    rope_freq_base: float = 1e6
    rms_eps: float = 1e-6


SHAPES = {
    "qwen2.5-7b": Shape(
        n_embd=3584, n_layer=28, n_head=28, n_head_kv=4, n_ff=18944, n_vocab=152064, tied_embeddings=False
    ),
    "qwen2.5-0.5b": Shape(
        n_embd=896, n_layer=24, n_head=14, n_head_kv=2, n_ff=4864, n_vocab=151936, tied_embeddings=True
    ),
    # A rehearsal pair for a CPU: the same layout, small enough that a check runs in minutes.
    "small-qwen2": Shape(
        n_embd=512, n_layer=8, n_head=8, n_head_kv=2, n_ff=1536, n_vocab=600, tied_embeddings=False, context_length=4096
    ),
    "tiny-qwen2": Shape(
        n_embd=256, n_layer=2, n_head=2, n_head_kv=1, n_ff=512, n_vocab=600, tied_embeddings=False, context_length=2048
    ),
}

MERGES = ["Ġ t", "h e", "i n", "Ġ a", "e r", "o n", "Ġt he", "r e"]  # llama.cpp's BPE loader needs at least one
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# Standard deviation of a random stored value: uniform int8, or a uniform 4-bit value minus 8.
PAYLOAD_STD = {"q8_0": float(np.sqrt((256**2 - 1) / 12)), "q4_0": float(np.sqrt((16**2 - 1) / 12))}


def byte_tokens() -> list[str]:
    """GPT-2's printable stand-ins for the 256 byte values, in byte order."""
    visible = (
        list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    )
    codes = visible[:]
    extra = 0
    for b in range(256):
        if b not in visible:
            visible.append(b)
            codes.append(256 + extra)
            extra += 1
    table = dict(zip(visible, codes))
    return [chr(table[b]) for b in range(256)]


def vocabulary(n_vocab: int) -> tuple[list[str], list[int]]:
    """Token texts and types (1 normal, 3 control): bytes, merges, specials, then padding to `n_vocab`."""
    tokens = byte_tokens() + [m.replace(" ", "") for m in MERGES]
    types = [1] * len(tokens) + [3] * len(SPECIALS)
    tokens += SPECIALS
    if n_vocab < len(tokens):
        raise ValueError(f"a vocabulary needs at least {len(tokens)} tokens, not {n_vocab}")
    padding = n_vocab - len(tokens)
    return tokens + [f"<extra_{i}>" for i in range(padding)], types + [1] * padding


def tensor_plan(shape: Shape) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, numpy shape as (rows, columns), kind) for every tensor llama.cpp's qwen2 loader reads.

    Kinds: "matrix" (quantized), "norm" (f32 ones), "bias" (f32 zeros).
    """
    head_dim = shape.n_embd // shape.n_head
    n_kv = head_dim * shape.n_head_kv
    plan = [("token_embd.weight", (shape.n_vocab, shape.n_embd), "matrix")]
    for i in range(shape.n_layer):
        blk = f"blk.{i}"
        plan += [
            (f"{blk}.attn_norm.weight", (shape.n_embd,), "norm"),
            (f"{blk}.attn_q.weight", (shape.n_embd, shape.n_embd), "matrix"),
            (f"{blk}.attn_q.bias", (shape.n_embd,), "bias"),
            (f"{blk}.attn_k.weight", (n_kv, shape.n_embd), "matrix"),
            (f"{blk}.attn_k.bias", (n_kv,), "bias"),
            (f"{blk}.attn_v.weight", (n_kv, shape.n_embd), "matrix"),
            (f"{blk}.attn_v.bias", (n_kv,), "bias"),
            (f"{blk}.attn_output.weight", (shape.n_embd, shape.n_embd), "matrix"),
            (f"{blk}.ffn_norm.weight", (shape.n_embd,), "norm"),
            (f"{blk}.ffn_gate.weight", (shape.n_ff, shape.n_embd), "matrix"),
            (f"{blk}.ffn_up.weight", (shape.n_ff, shape.n_embd), "matrix"),
            (f"{blk}.ffn_down.weight", (shape.n_embd, shape.n_ff), "matrix"),
        ]
    plan.append(("output_norm.weight", (shape.n_embd,), "norm"))
    if not shape.tied_embeddings:  # a tied model reads its output head from token_embd
        plan.append(("output.weight", (shape.n_vocab, shape.n_embd), "matrix"))
    return plan


def quantized_matrix(rows: int, cols: int, qtype: str, rng: np.random.Generator) -> np.ndarray:
    """The bytes of a (rows, cols) Q8_0/Q4_0 matrix: per 32-value block an f16 scale, then random values.

    Every byte pattern of the payload is a valid value, and the scale makes a row times a unit-variance
    input come out at unit variance. Random stored values average -0.5, not 0; the scale's sign
    alternates from block to block so that offset cancels within each row (rows hold an even number of
    blocks in every shape here). Left in, it would pull every hidden state towards one direction, layer
    after layer, until all positions predicted the same token.
    """
    import gguf

    block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[qtype.upper()]]
    if cols % (2 * block):
        raise ValueError(f"a {qtype} row here needs a multiple of {2 * block} values, not {cols}")
    blocks = rows * (cols // block)
    payload = type_size - 2
    out = np.empty((blocks, type_size), dtype=np.uint8)
    scale = 1.0 / (PAYLOAD_STD[qtype] * np.sqrt(cols))
    signed = np.array([scale, -scale], dtype=np.float16).view(np.uint8).reshape(2, 2)
    out[:, :2] = np.tile(signed, (blocks // 2, 1))
    raw = rng.bit_generator.random_raw(-(-blocks * payload // 8)).view(np.uint8)
    out[:, 2:] = raw[: blocks * payload].reshape(blocks, payload)
    return out.reshape(rows, (cols // block) * type_size)


def write_shaped_gguf(path: str | os.PathLike, shape_name: str, qtype: str = "q8_0", seed: int = 0) -> Path:
    """Write the model `shape_name` to `path` (through a temporary file and a rename) and return the path."""
    import gguf

    shape = SHAPES[shape_name]
    raw_dtype = gguf.GGMLQuantizationType[qtype.upper()]
    block, type_size = gguf.GGML_QUANT_SIZES[raw_dtype]
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    tokens, types = vocabulary(shape.n_vocab)

    writer = gguf.GGUFWriter(str(partial), "qwen2")
    writer.add_name(f"{shape_name} (random weights, real shapes)")
    writer.add_block_count(shape.n_layer)
    writer.add_context_length(shape.context_length)
    writer.add_embedding_length(shape.n_embd)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_rope_freq_base(shape.rope_freq_base)
    writer.add_layer_norm_rms_eps(shape.rms_eps)
    writer.add_file_type(gguf.LlamaFileType[f"MOSTLY_{qtype.upper()}"])
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(MERGES)
    writer.add_bos_token_id(tokens.index("<|endoftext|>"))
    writer.add_eos_token_id(tokens.index("<|im_end|>"))
    writer.add_pad_token_id(tokens.index("<|endoftext|>"))
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML_TEMPLATE)

    plan = tensor_plan(shape)
    for name, dims, kind in plan:
        if kind == "matrix":
            byte_shape = (dims[0], dims[1] // block * type_size)
            writer.add_tensor_info(
                name, byte_shape, np.dtype(np.uint8), byte_shape[0] * byte_shape[1], raw_dtype=raw_dtype
            )
        else:
            writer.add_tensor_info(name, dims, np.dtype(np.float32), int(np.prod(dims)) * 4)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    for _name, dims, kind in plan:
        if kind == "matrix":
            writer.write_tensor_data(quantized_matrix(dims[0], dims[1], qtype, rng))
        else:
            writer.write_tensor_data((np.ones if kind == "norm" else np.zeros)(dims, dtype=np.float32))
    writer.close()
    os.replace(partial, path)
    return path


def main(argv: list[str] | None = None) -> int:
    """Command line: write one shaped model and say how big it is."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", required=True, choices=sorted(SHAPES), help="which model's shapes")
    parser.add_argument("--type", default="q8_0", choices=sorted(PAYLOAD_STD), help="weight type of the matrices")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random values")
    parser.add_argument("out", type=Path, help="the .gguf file to write")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    path = write_shaped_gguf(args.out, args.shape, args.type, args.seed)
    size = path.stat().st_size
    print(
        f"shaped_gguf: wrote {path} ({args.shape}, {args.type}, {size / 2**20:,.0f} MiB) "
        f"in {time.perf_counter() - start:.1f} s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
