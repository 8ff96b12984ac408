"""Write a random-weight GGUF with the real shapes of a model, to time llama.cpp without downloads.

Decoding speed depends on a model's shapes and weight type, not on its values, so a file laid out like
Qwen2.5-7B-Instruct runs as fast as the real one. Shapes: Qwen2.5 models (`qwen2`), a Llama 3.1 8B
(`llama`, an architecture whose llama.cpp graph hands out its layer inputs), and two draft heads for
it that read those inputs: an EAGLE-3 head laid out like yuhuili/EAGLE3-LLaMA3.1-Instruct-8B (one
decoder layer, `fc` fusing three target layers) and a DFlash head laid out like
z-lab/Qwen3-8B-DFlash-b16 (five layers, blocks of 16) at the Llama's width. Neither head has an
embedding or output projection of its own (llama.cpp lends them the target's), and both carry the
target's vocabulary; DFlash's mask token is `<extra_0>`. Matrices are Q8_0 (or Q4_0) blocks written directly
as bytes: a constant f16 scale sized so each product keeps unit variance, then random int8 (or 4-bit)
values; norms are ones and biases zeros, so nothing overflows to NaN or inf. Tensors stream to disk one
at a time, so memory stays at the largest tensor.

The vocabulary is byte-level gpt2: 256 byte tokens, a few merges, the chat special tokens, then
`<extra_i>` padding up to the model's size. Every id below the smaller size means the same in every
shape, so any two shapes pass speculative decoding's vocabulary check (7B and 0.5B differ by 128).

Usage: python scripts/shaped_gguf.py --shape qwen2.5-7b OUT.gguf [--type q8_0|q4_0] [--seed N]
       python scripts/shaped_gguf.py --list     (every shape, one a line: name, architecture, target, block)
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
    """The hyperparameters that decide a model's tensor shapes and cost.

    `arch` is the GGUF architecture: "qwen2" (biases on q, k, v), "llama" (none), or a head that
    reads a target's layer inputs, "eagle3" or "dflash", whose `target` names the target's shape,
    `target_layers` the layers whose inputs it reads and `block_size` (DFlash) the block it drafts.
    A head's vocabulary is its target's; `tied_embeddings` does not apply to it (it has neither
    embedding nor output projection)."""

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
    arch: str = "qwen2"
    target: str | None = None
    target_layers: tuple[int, ...] = ()
    block_size: int = 0

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def is_head(self) -> bool:
        return self.arch in HEAD_ARCHS


HEAD_ARCHS = ("eagle3", "dflash")


def _llama(n_embd, n_layer, n_head, n_head_kv, n_ff, n_vocab, context_length, rope_freq_base=500000.0) -> Shape:
    return Shape(
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        n_head_kv=n_head_kv,
        n_ff=n_ff,
        n_vocab=n_vocab,
        tied_embeddings=False,
        context_length=context_length,
        rope_freq_base=rope_freq_base,
        rms_eps=1e-5,
        arch="llama",
    )


def _head(arch: str, target_name: str, *, n_layer, n_head, n_head_kv, n_ff, layers, block=0) -> Shape:
    """A head of the width and vocabulary of the shape `target_name` (a DFlash head must share the
    width; the EAGLE-3 heads published for Llama 3.1 8B do too)."""
    target = SHAPES[target_name]
    return Shape(
        n_embd=target.n_embd,
        n_layer=n_layer,
        n_head=n_head,
        n_head_kv=n_head_kv,
        n_ff=n_ff,
        n_vocab=target.n_vocab,
        tied_embeddings=True,
        context_length=target.context_length,
        rope_freq_base=target.rope_freq_base,
        rms_eps=target.rms_eps,
        arch=arch,
        target=target_name,
        target_layers=tuple(layers),
        block_size=block,
    )


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
    # A target whose layer inputs llama.cpp hands out, for the heads below.
    "llama3.1-8b": _llama(4096, 32, 32, 8, 14336, 128256, context_length=131072),
    "small-llama": _llama(512, 8, 8, 2, 1536, 600, context_length=4096),
    "tiny-llama": _llama(256, 2, 2, 1, 512, 600, context_length=2048),
}
SHAPES |= {
    # EAGLE-3 reads the inputs of layers 2, n/2 and n - 3 (the converter's default); its q, k and v
    # read [token embedding | fused features], twice the width.
    "eagle3-llama3.1-8b": _head(
        "eagle3", "llama3.1-8b", n_layer=1, n_head=32, n_head_kv=8, n_ff=14336, layers=(2, 16, 29)
    ),
    # DFlash reads five layers spread from 1 to n - 3, as z-lab's heads do, and drafts blocks of 16.
    "dflash-llama3.1-8b": _head(
        "dflash",
        "llama3.1-8b",
        n_layer=5,
        n_head=32,
        n_head_kv=8,
        n_ff=14336,
        layers=(1, 8, 15, 22, 29),
        block=16,
    ),
    "small-eagle3": _head("eagle3", "small-llama", n_layer=1, n_head=8, n_head_kv=2, n_ff=1536, layers=(2, 4, 5)),
    "small-dflash": _head(
        "dflash",
        "small-llama",
        n_layer=2,
        n_head=8,
        n_head_kv=2,
        n_ff=1536,
        layers=(1, 3, 5),
        block=16,
    ),
    "tiny-eagle3": _head("eagle3", "tiny-llama", n_layer=1, n_head=2, n_head_kv=1, n_ff=512, layers=(0, 1, 1)),
    "tiny-dflash": _head("dflash", "tiny-llama", n_layer=1, n_head=2, n_head_kv=1, n_ff=512, layers=(0, 1), block=16),
}

MERGES = ["Ġ t", "h e", "i n", "Ġ a", "e r", "o n", "Ġt he", "r e"]  # llama.cpp's BPE loader needs at least one
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MASK_TOKEN = "<extra_0>"  # DFlash's noise block: the first padding token, the same id in every shape
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
    """(name, numpy shape as (rows, columns), kind) for every tensor llama.cpp's loader of the
    shape's architecture reads (the optional ones it can do without are left out).

    Kinds: "matrix" (quantized), "norm" (f32 ones), "bias" (f32 zeros).
    """
    if shape.arch == "eagle3":
        return _eagle3_plan(shape)
    if shape.arch == "dflash":
        return _dflash_plan(shape)
    n_kv = shape.head_dim * shape.n_head_kv
    biases = shape.arch == "qwen2"
    plan = [("token_embd.weight", (shape.n_vocab, shape.n_embd), "matrix")]
    for i in range(shape.n_layer):
        blk = f"blk.{i}"
        plan.append((f"{blk}.attn_norm.weight", (shape.n_embd,), "norm"))
        for name, rows in (("attn_q", shape.n_embd), ("attn_k", n_kv), ("attn_v", n_kv)):
            plan.append((f"{blk}.{name}.weight", (rows, shape.n_embd), "matrix"))
            if biases:
                plan.append((f"{blk}.{name}.bias", (rows,), "bias"))
        plan += [(f"{blk}.attn_output.weight", (shape.n_embd, shape.n_embd), "matrix")]
        plan += _ffn(blk, shape)
    plan.append(("output_norm.weight", (shape.n_embd,), "norm"))
    if not shape.tied_embeddings:  # a tied model reads its output head from token_embd
        plan.append(("output.weight", (shape.n_vocab, shape.n_embd), "matrix"))
    return plan


def _ffn(blk: str, shape: Shape) -> list[tuple[str, tuple[int, ...], str]]:
    return [
        (f"{blk}.ffn_norm.weight", (shape.n_embd,), "norm"),
        (f"{blk}.ffn_gate.weight", (shape.n_ff, shape.n_embd), "matrix"),
        (f"{blk}.ffn_up.weight", (shape.n_ff, shape.n_embd), "matrix"),
        (f"{blk}.ffn_down.weight", (shape.n_embd, shape.n_ff), "matrix"),
    ]


def _eagle3_plan(shape: Shape) -> list[tuple[str, tuple[int, ...], str]]:
    """llama.cpp's eagle3 loader: `fc` fuses the three target layers' inputs to the head's width;
    each layer's q, k and v read [normed token embedding | normed fused features]."""
    n_kv = shape.head_dim * shape.n_head_kv
    wide = 2 * shape.n_embd
    plan = [
        ("fc.weight", (shape.n_embd, len(shape.target_layers) * shape.n_embd), "matrix"),
        ("output_norm.weight", (shape.n_embd,), "norm"),
    ]
    for i in range(shape.n_layer):
        blk = f"blk.{i}"
        plan += [
            (f"{blk}.attn_norm.weight", (shape.n_embd,), "norm"),
            (f"{blk}.attn_norm_2.weight", (shape.n_embd,), "norm"),
            (f"{blk}.attn_q.weight", (shape.n_embd, wide), "matrix"),
            (f"{blk}.attn_k.weight", (n_kv, wide), "matrix"),
            (f"{blk}.attn_v.weight", (n_kv, wide), "matrix"),
            (f"{blk}.attn_output.weight", (shape.n_embd, shape.n_embd), "matrix"),
        ]
        plan += _ffn(blk, shape)
    return plan


def _dflash_plan(shape: Shape) -> list[tuple[str, tuple[int, ...], str]]:
    """llama.cpp's dflash loader (plain layers): `fc` and its norm make the injected features,
    then Qwen3-like layers with q and k norms."""
    n_kv = shape.head_dim * shape.n_head_kv
    plan = [
        ("fc.weight", (shape.n_embd, len(shape.target_layers) * shape.n_embd), "matrix"),
        ("enc.output_norm.weight", (shape.n_embd,), "norm"),
        ("output_norm.weight", (shape.n_embd,), "norm"),
    ]
    for i in range(shape.n_layer):
        blk = f"blk.{i}"
        plan += [
            (f"{blk}.attn_norm.weight", (shape.n_embd,), "norm"),
            (f"{blk}.attn_q.weight", (shape.n_embd, shape.n_embd), "matrix"),
            (f"{blk}.attn_k.weight", (n_kv, shape.n_embd), "matrix"),
            (f"{blk}.attn_v.weight", (n_kv, shape.n_embd), "matrix"),
            (f"{blk}.attn_output.weight", (shape.n_embd, shape.n_embd), "matrix"),
            (f"{blk}.attn_q_norm.weight", (shape.head_dim,), "norm"),
            (f"{blk}.attn_k_norm.weight", (shape.head_dim,), "norm"),
        ]
        plan += _ffn(blk, shape)
    return plan


def check_head(shape: Shape) -> None:
    """What llama.cpp and specrun require of a head beside its target; a ValueError otherwise."""
    target = SHAPES[shape.target]
    if target.arch == "qwen2":
        raise ValueError(f"a {shape.arch} head reads layer inputs, which llama.cpp's qwen2 graph does not hand out")
    if shape.n_embd != target.n_embd or shape.n_vocab != target.n_vocab:
        raise ValueError("a head shares its target's width and vocabulary")
    if not shape.target_layers or max(shape.target_layers) >= target.n_layer or min(shape.target_layers) < 0:
        raise ValueError(f"target layers {shape.target_layers} are not all layers of {shape.target}")
    if shape.arch == "eagle3" and len(shape.target_layers) != 3:
        raise ValueError("an EAGLE-3 head reads exactly three target layers")
    if shape.arch == "dflash" and shape.block_size < 2:
        raise ValueError("a DFlash head drafts blocks of at least 2")


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

    if shape.is_head:
        check_head(shape)
    writer = gguf.GGUFWriter(str(partial), shape.arch)
    writer.add_name(f"{shape_name} (random weights, real shapes)")
    writer.add_block_count(shape.n_layer)
    writer.add_context_length(shape.context_length)
    writer.add_embedding_length(shape.n_embd)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_rope_freq_base(shape.rope_freq_base)
    writer.add_layer_norm_rms_eps(shape.rms_eps)
    if shape.arch != "qwen2":
        writer.add_rope_dimension_count(shape.head_dim)
    if shape.is_head:
        writer.add_array(f"{shape.arch}.target_layers", list(shape.target_layers))
    if shape.arch == "eagle3":
        writer.add_uint32("eagle3.target_hidden_size", SHAPES[shape.target].n_embd)
    if shape.arch == "dflash":
        writer.add_uint32("dflash.block_size", shape.block_size)
        writer.add_mask_token_id(tokens.index(MASK_TOKEN))
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
    parser.add_argument(
        "--list", action="store_true", help="list the shapes (name, architecture, target, block) and stop"
    )
    parser.add_argument("--shape", choices=sorted(SHAPES), help="which model's shapes")
    parser.add_argument("--type", default="q8_0", choices=sorted(PAYLOAD_STD), help="weight type of the matrices")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random values")
    parser.add_argument("out", type=Path, nargs="?", help="the .gguf file to write")
    args = parser.parse_args(argv)
    if args.list:
        for name, shape in SHAPES.items():
            print(name, shape.arch, shape.target or "-", shape.block_size or "-")
        return 0
    if args.shape is None or args.out is None:
        parser.error("--shape and OUT are required")
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
