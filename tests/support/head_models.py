"""Tiny random-weight draft heads that read a target's hidden states, written with the `gguf` package
after the shapes and keys the bundled llama.cpp loads (its converter writes the same):

- `eagle3`: one decoder layer whose attention reads [its token's embedding | the fused target
  features], the features being the inputs of three target layers projected by `fc`; it borrows
  the target's token embedding and output projection (it has neither of its own, like the Llama
  3.1 8B heads), so it is loaded on a context made on the target's.
- `dflash`: a block-diffusion head whose cache holds keys and values injected from the target's
  layer inputs; one pass over [last token, mask, mask, ...] proposes the whole block. It shares
  the target's width (its `fc` reads n_layers × n_embd features), embedding and output.

Both carry the target's vocabulary (tiny_models' families), so their token ids are the target's,
and a `mask` token for DFlash's noise block.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from arch_models import _common, _finish, _Weights, _writer


def write_eagle3_gguf(
    path: Path | str,
    *,
    target_layers: tuple[int, int, int] = (0, 1, 1),
    target_embd: int = 64,
    n_head: int = 4,
    n_ff: int = 128,
    context_length: int = 512,
    focus: float = 3.0,
    noise: float = 0.02,
    seed: int = 7,
    vocab: str = "gpt2",
    name: str = "tiny-eagle3",
) -> Path:
    """An EAGLE-3 head for a target of width `target_embd` (its own width too) whose layers
    `target_layers` it reads. Its weights make it echo: queries and keys are one large projection
    of the token's embedding (a rotation, scaled by `focus`), so each entry attends to itself, and the values and output
    copy that embedding through, so the head predicts from its last token alone what the target's
    output projection makes of that token's embedding; a tiny target often agrees. `noise` adds
    random weights everywhere (the fused features included), so drafts depend on them too."""
    path = Path(path)
    n_embd = target_embd
    writer, _ = _writer(path, "eagle3", name, vocab, None)
    shape = dict(n_embd=n_embd, n_ff=n_ff, n_head=n_head, n_head_kv=n_head, n_rot=n_embd // n_head, eps=1e-5)
    _common(writer, n_layer_all=1, context_length=context_length, **shape)
    writer.add_array("eagle3.target_layers", list(target_layers))
    writer.add_uint32("eagle3.target_hidden_size", target_embd)
    w = _Weights(writer, seed)
    n_in = len(target_layers) * target_embd
    rng = w.rng("echo")

    def noisy(name: str, data: np.ndarray) -> None:
        w.add(name, data + w.rng(name).standard_normal(data.shape) * noise)

    noisy("fc.weight", np.zeros((n_embd, n_in)))
    w.ones("output_norm.weight", n_embd)
    w.ones("blk.0.attn_norm.weight", n_embd)
    w.ones("blk.0.attn_norm_2.weight", n_embd)
    project = np.zeros((n_embd, 2 * n_embd))
    rotation, _ = np.linalg.qr(rng.standard_normal((n_embd, n_embd)))  # every embedding's query equally long
    project[:, :n_embd] = rotation * focus
    noisy("blk.0.attn_q.weight", project)
    noisy("blk.0.attn_k.weight", project)
    noisy("blk.0.attn_v.weight", np.eye(n_embd, 2 * n_embd))
    noisy("blk.0.attn_output.weight", np.eye(n_embd))
    w.ones("blk.0.ffn_norm.weight", n_embd)
    noisy("blk.0.ffn_gate.weight", np.zeros((n_ff, n_embd)))
    noisy("blk.0.ffn_up.weight", np.zeros((n_ff, n_embd)))
    noisy("blk.0.ffn_down.weight", np.zeros((n_embd, n_ff)))
    return _finish(writer, path)


def write_dflash_gguf(
    path: Path | str,
    target: Path | str,
    *,
    target_layers: tuple[int, ...] = (0, 1),
    n_layer: int = 1,
    n_head: int = 4,
    n_ff: int = 128,
    block_size: int = 8,
    mask_token: int = 3,
    context_length: int = 512,
    noise: float = 0.02,
    selector_top_k: int = 0,
    seed: int = 11,
    vocab: str = "gpt2",
    name: str = "tiny-dflash",
) -> Path:
    """A DFlash head for the target written at `target` (of its width), reading the inputs of
    `target_layers`, trained (so to speak) on blocks of `block_size`; `mask_token` fills the noise
    block. Its weights make it echo: it carries the target's embedding (the mask's row zero) and
    output projection, a mask row's query is then zero, so every mask attends evenly to the block
    and the cache, where only the block's first token has a value: each mask predicts what the
    target's output projection makes of that token's embedding. The first draft is then often the
    target's next token, later ones seldom. `noise` adds random weights elsewhere.

    `selector_top_k` > 0 makes it a DFlash2 head: convolutions around its attention and FFN
    (identities here) and a selector that walks each block's top-k candidates by small random
    transition scores, so it mostly keeps each position's favourite."""
    from gguf import GGUFReader

    path = Path(path)
    own = {t.name: np.array(t.data) for t in GGUFReader(str(target)).tensors}
    embedding, output = own["token_embd.weight"].astype(np.float32), own["output.weight"].astype(np.float32)
    n_embd = embedding.shape[1]
    writer, _ = _writer(path, "dflash", name, vocab, None)
    shape = dict(n_embd=n_embd, n_ff=n_ff, n_head=n_head, n_head_kv=n_head, n_rot=n_embd // n_head, eps=1e-5)
    _common(writer, n_layer_all=n_layer, context_length=context_length, **shape)
    writer.add_array("dflash.target_layers", list(target_layers))
    writer.add_uint32("dflash.block_size", block_size)
    writer.add_mask_token_id(mask_token)
    head = n_embd // n_head
    w = _Weights(writer, seed)

    def noisy(name: str, data: np.ndarray) -> None:
        w.add(name, data + w.rng(name).standard_normal(data.shape) * noise)

    kernel, group, rank = 3, 16, 8
    if selector_top_k:
        writer.add_uint32("dflash.conv_kernel_size", kernel)
        writer.add_uint32("dflash.conv_group_size", group)
        writer.add_uint32("dflash.selector_rank", rank)
        writer.add_uint32("dflash.selector_top_k", selector_top_k)
        n_vocab = embedding.shape[0]
        w.random("selector_predecessor.weight", n_vocab, rank, scale=0.05)
        w.random("selector_successor.weight", n_vocab, rank, scale=0.05)
        w.random("selector_hidden.weight", rank, n_embd, scale=0.05)

    embedding[mask_token] = 0.0
    w.add("token_embd.weight", embedding)
    w.add("output.weight", output)
    w.add("fc.weight", np.zeros((n_embd, len(target_layers) * n_embd)))
    w.ones("enc.output_norm.weight", n_embd)
    w.ones("output_norm.weight", n_embd)
    for il in range(n_layer):
        w.ones(f"blk.{il}.attn_norm.weight", n_embd)
        noisy(f"blk.{il}.attn_q.weight", np.zeros((n_embd, n_embd)))
        noisy(f"blk.{il}.attn_k.weight", np.zeros((n_embd, n_embd)))
        noisy(f"blk.{il}.attn_v.weight", np.eye(n_embd))
        noisy(f"blk.{il}.attn_output.weight", np.eye(n_embd))
        w.ones(f"blk.{il}.attn_q_norm.weight", head)
        w.ones(f"blk.{il}.attn_k_norm.weight", head)
        w.ones(f"blk.{il}.ffn_norm.weight", n_embd)
        noisy(f"blk.{il}.ffn_gate.weight", np.zeros((n_ff, n_embd)))
        noisy(f"blk.{il}.ffn_up.weight", np.zeros((n_ff, n_embd)))
        noisy(f"blk.{il}.ffn_down.weight", np.zeros((n_embd, n_ff)))
        if selector_top_k:  # each convolution's first tap passes its input through, the others add nothing
            identity = np.zeros((2, kernel, n_embd))
            identity[:, 0, :] = 1.0
            for part in ("attn", "ffn"):
                w.add(f"blk.{il}.{part}_conv_base", identity)
                w.add(f"blk.{il}.{part}_conv_proj.weight", np.zeros((2 * kernel * (n_embd // group), n_embd)))
    return _finish(writer, path)
