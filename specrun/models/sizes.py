"""How much memory a model needs, layer by layer, read from its GGUF header (no weights read).

Placing a model on devices needs each layer's weights and its KV cache per token of context. The
weights are the tensor sizes the header declares, grouped as llama.cpp groups them: `blk.N.*` is
layer N, the token embeddings are the input (llama.cpp keeps them on the CPU), and the output
norm and head are one more layer after the last (a model with tied embeddings gets a copy of the
embeddings there). The KV cache holds, per layer and token, a key and a value vector per KV head
in f16, llama.cpp's default cache type.

The counts read here (layers, heads, lengths) are uint32 in llama.cpp, and a model has at most
LLAMA_MAX_LAYERS layers; anything else (a float, an infinity, a negative or huge number, a tensor
named for layer 10^50) makes the file unreadable rather than the arithmetic wrong or endless.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import ModelFileError
from .gguf_header import GGUFHeader
from .modelfile import read_model_header

KV_BYTES_PER_VALUE = 2  # f16 keys and values
_LAYER = re.compile(r"blk\.(\d+)\.")
_INPUT = ("token_embd.", "token_embd_norm.")
MAX_COUNT = 2**32 - 1  # llama.cpp reads these keys as uint32
LLAMA_MAX_LAYERS = 512  # llama.cpp's limit (llama-hparams.h); it asserts on more


@dataclass(frozen=True)
class ModelSize:
    """Bytes of a model's parts, as llama.cpp places them."""

    layer_bytes: tuple[int, ...]  # the weights of each repeating layer
    output_bytes: int  # output norm and head: llama.cpp's layer n_layer, offloaded first
    input_bytes: int  # token embeddings: always on the CPU
    kv_bytes_per_token: int  # one layer's K and V cache for one token of context

    @property
    def n_layer(self) -> int:
        return len(self.layer_bytes)

    def kv_bytes(self, n_ctx: int) -> int:
        """One layer's KV cache for a context of n_ctx tokens."""
        return self.kv_bytes_per_token * n_ctx

    @property
    def weight_bytes(self) -> int:
        return sum(self.layer_bytes) + self.output_bytes + self.input_bytes


def _unreadable(path: str | Path, why: str) -> ModelFileError:
    return ModelFileError(f"{path} is not a readable GGUF model: {why}", "download or copy it again")


def _count(path: str | Path, metadata: dict, key: str, default: int | None = None, most: int = MAX_COUNT) -> int | None:
    """metadata[key] as a count, `default` when absent; a value that is no count is refused."""
    if key not in metadata:
        return default
    value = metadata[key]
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= most:
        raise _unreadable(path, f"{key} is {value!r}, not a count from 0 to {most}")
    return value


def model_size(path: str | Path) -> ModelSize:
    """The sizes of the model at `path` (its header only: fast on multi-GB files)."""
    return sizes_from_header(read_model_header(path), path)


def sizes_from_header(header: GGUFHeader, path: str | Path) -> ModelSize:
    """The sizes a parsed header declares; `path` names the file in errors."""
    meta = header.metadata
    arch = str(meta.get("general.architecture", ""))
    n_layer = _count(path, meta, f"{arch}.block_count", most=LLAMA_MAX_LAYERS)
    layers: dict[int, int] = {}
    output = inputs = 0
    for name, size in header.tensor_bytes.items():
        match = _LAYER.match(name)
        if match:
            layers[int(match.group(1))] = layers.get(int(match.group(1)), 0) + size
        elif name.startswith(_INPUT):
            inputs += size
        else:
            output += size
    if "output.weight" not in header.tensor_bytes:
        output += header.tensor_bytes.get("token_embd.weight", 0)  # tied embeddings: llama.cpp duplicates them
    if n_layer is None:
        n_layer = max(layers) + 1 if layers else 0
        if n_layer > LLAMA_MAX_LAYERS:
            raise _unreadable(
                path,
                f"it has no {arch}.block_count and a tensor of layer {n_layer - 1}; llama.cpp takes at most "
                f"{LLAMA_MAX_LAYERS} layers",
            )
    n_embd = _count(path, meta, f"{arch}.embedding_length", 0)
    n_head = _count(path, meta, f"{arch}.attention.head_count", 0) or 1
    n_head_kv = _count(path, meta, f"{arch}.attention.head_count_kv", n_head)  # a per-layer array: assume the most
    head_k = _count(path, meta, f"{arch}.attention.key_length", n_embd // n_head)
    head_v = _count(path, meta, f"{arch}.attention.value_length", head_k)
    return ModelSize(
        layer_bytes=tuple(layers.get(i, 0) for i in range(n_layer)),
        output_bytes=output,
        input_bytes=inputs,
        kv_bytes_per_token=(head_k + head_v) * n_head_kv * KV_BYTES_PER_VALUE,
    )
