"""Tiny random-weight GGUF models of the architectures that are not plain transformers, written with
the `gguf` package so llama.cpp's own cache types can be tested without downloads:

- `qwen35`: a hybrid of gated-delta-net (recurrent) layers with full attention every
  `full_attention_interval`-th layer; its cache keeps a recurrent state per sequence that cannot be
  cut back to an arbitrary position (only rolled back a few tokens with `n_rs_seq`). With
  `n_nextn` = 1 one multi-token-prediction (MTP, "nextn") block follows the trunk layers.
- `glm4moe` with every trunk layer dense: a plain attention cache and one MTP block (an MoE block,
  as the architecture's MTP graph requires), the smallest dense model with a head.
- `gemma3`: interleaved sliding-window attention (iSWA) with a small window, so drafts and chat
  turns cross it.
- `gemma4`, dense: the same kind of cache under Gemma 4's graph (q/k norms, a normalised v, its
  own rope factors for the full-attention layers), and a `gemma4-assistant` for it: Gemma 4's MTP
  drafter, a separate small model whose blocks attend over the target's cache.
- `step35`, dense: sliding-window and full-attention layers, then several MTP blocks that draft
  one depth each (chained heads).

They share the vocabulary families of tiny_models.py (default "gpt2", like the tiny llama-style
models), so the same prompts work. Every tensor's values come from its own random stream (seeded
by `seed` and the tensor's name): two models of the same seed agree on every tensor they both
have, so a smaller model of the same seed (a draft) shares the target's embeddings and output
projection. Layer weights (`layer_scale`) are small next to the embedding but large enough that the
context changes the next token, so such models agree on it part of the time (about a third for the
two-layer hybrid draft) while a wrong cache still shows in the output. `mtp_follow` weights how
much the MTP block's input projection passes the token embedding through against mixing in the
trunk's hidden state: at 0.8 the head agrees with the trunk's next prediction about 10% (qwen35) to
35% (glm4moe) of the time, and its drafts still depend on the hidden state.

llama.cpp aborts on a qwen35 trunk without a full-attention layer; keep `n_layer` at least
`full_attention_interval`.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
from tiny_models import DEFAULT_TEMPLATE, family_vocabulary


class _Weights:
    """Random tensors, each from a stream of its own (seed, name), so models differing in layer
    count or architecture still agree on every tensor they share."""

    def __init__(self, writer, seed: int):
        self.writer = writer
        self.seed = seed

    def rng(self, name: str) -> np.random.Generator:
        return np.random.default_rng([self.seed, zlib.crc32(name.encode())])

    def random(self, name: str, *shape: int, scale: float) -> np.ndarray:
        """`shape` in numpy order (rows last-dimension-first, the reverse of ggml's ne)."""
        data = (self.rng(name).standard_normal(shape) * scale).astype(np.float32)
        self.writer.add_tensor(name, data)
        return data

    def ones(self, name: str, n: int) -> None:
        self.writer.add_tensor(name, np.ones(n, dtype=np.float32))

    def add(self, name: str, data: np.ndarray) -> None:
        self.writer.add_tensor(name, data.astype(np.float32))


def _writer(path: Path, arch: str, name: str, vocab: str, chat_template: str | None):
    """A GGUFWriter with the general and tokenizer metadata of a tiny_models vocabulary family;
    returns it and the vocabulary size."""
    import gguf

    spec = family_vocabulary(vocab)
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(name)
    writer.add_file_type(0)
    writer.add_tokenizer_model(spec.model)
    if spec.pre is not None:
        writer.add_tokenizer_pre(spec.pre)
    writer.add_token_list(spec.tokens)
    writer.add_token_types(spec.types)
    if spec.scores is not None:
        writer.add_token_scores(spec.scores)
    if spec.merges:
        writer.add_token_merges(spec.merges)
    writer.add_bos_token_id(spec.bos)
    writer.add_eos_token_id(spec.eos)
    if spec.unk is not None:
        writer.add_unk_token_id(spec.unk)
    writer.add_add_bos_token(spec.add_bos)
    writer.add_add_eos_token(False)
    template = spec.template if chat_template == DEFAULT_TEMPLATE else chat_template
    if template:
        writer.add_chat_template(template)
    return writer, len(spec.tokens)


def _finish(writer, path: Path) -> Path:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _common(writer, *, n_layer_all, context_length, n_embd, n_ff, n_head, n_head_kv, n_rot, eps=1e-6) -> None:
    writer.add_block_count(n_layer_all)
    writer.add_context_length(context_length)
    writer.add_embedding_length(n_embd)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_layer_norm_rms_eps(eps)
    writer.add_rope_dimension_count(n_rot)


def _embeddings(w: _Weights, n_vocab: int, n_embd: int, logit_scale: float) -> None:
    """Input embeddings of unit scale and an output projection whose logits have spread
    `logit_scale` on a normalised hidden state (so sampled tokens are not uniform noise)."""
    w.random("token_embd.weight", n_vocab, n_embd, scale=1.0)
    w.ones("output_norm.weight", n_embd)
    w.random("output.weight", n_vocab, n_embd, scale=float(logit_scale / np.sqrt(n_embd)))


def _ffn(w: _Weights, il: int, n_embd: int, n_ff: int, scale: float) -> None:
    w.random(f"blk.{il}.ffn_gate.weight", n_ff, n_embd, scale=scale)
    w.random(f"blk.{il}.ffn_up.weight", n_ff, n_embd, scale=scale)
    w.random(f"blk.{il}.ffn_down.weight", n_embd, n_ff, scale=scale)


def _attention(w: _Weights, il: int, n_embd: int, head: int, n_head: int, n_head_kv: int, scale: float) -> None:
    """A plain attention block: its input norm and the q, k, v and output projections."""
    w.ones(f"blk.{il}.attn_norm.weight", n_embd)
    w.random(f"blk.{il}.attn_q.weight", head * n_head, n_embd, scale=scale)
    w.random(f"blk.{il}.attn_k.weight", head * n_head_kv, n_embd, scale=scale)
    w.random(f"blk.{il}.attn_v.weight", head * n_head_kv, n_embd, scale=scale)
    w.random(f"blk.{il}.attn_output.weight", n_embd, head * n_head, scale=scale)


def _nextn(w: _Weights, il: int, n_embd: int, mtp_follow: float, scale: float) -> None:
    """The MTP block's own tensors: norms of the token embedding and of the trunk's hidden state,
    and the projection of their concatenation [embedding | hidden] back to n_embd: a random matrix
    weighted 1 - mtp_follow plus the embedding half passed through weighted mtp_follow."""
    w.ones(f"blk.{il}.nextn.enorm.weight", n_embd)
    w.ones(f"blk.{il}.nextn.hnorm.weight", n_embd)
    proj = w.rng(f"blk.{il}.nextn.eh_proj.weight").standard_normal((n_embd, 2 * n_embd)).astype(np.float32)
    proj *= scale * (1.0 - mtp_follow)
    proj[:, :n_embd] += np.eye(n_embd, dtype=np.float32) * mtp_follow
    w.add(f"blk.{il}.nextn.eh_proj.weight", proj)


def write_qwen35_gguf(
    path: Path | str,
    *,
    seed: int = 0,
    n_layer: int = 4,
    n_nextn: int = 0,
    full_attention_interval: int = 4,
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 128,
    ssm_state: int = 16,
    ssm_groups: int = 2,
    ssm_heads: int = 4,
    ssm_conv: int = 4,
    context_length: int = 1024,
    layer_scale: float = 0.1,
    logit_scale: float = 4.0,
    mtp_follow: float = 0.8,
    vocab: str = "gpt2",
    chat_template: str | None = DEFAULT_TEMPLATE,
    name: str = "tiny-qwen35",
) -> Path:
    """A tiny `qwen35` hybrid: `n_layer` trunk layers, layer i full attention when (i + 1) is a
    multiple of `full_attention_interval` and a gated delta net otherwise, then `n_nextn` MTP
    blocks (llama.cpp's qwen35 MTP graph runs exactly one). Gated delta net: `ssm_groups` key heads
    and `ssm_heads` value heads of `ssm_state` dimensions, a causal convolution of `ssm_conv`."""
    if n_layer < full_attention_interval:
        raise ValueError("a qwen35 trunk needs a full-attention layer: n_layer >= full_attention_interval")
    path = Path(path)
    writer, n_vocab = _writer(path, "qwen35", name, vocab, chat_template)
    head = n_embd // n_head
    n_rot = head
    _common(
        writer,
        n_layer_all=n_layer + n_nextn,
        context_length=context_length,
        n_embd=n_embd,
        n_ff=n_ff,
        n_head=n_head,
        n_head_kv=n_head_kv,
        n_rot=n_rot,
    )
    # Multi-axis RoPE sections in rotation pairs, summing to n_rot / 2 (text positions use the first).
    writer.add_rope_dimension_sections([n_rot // 4, n_rot // 8, n_rot // 8, 0])
    writer.add_full_attention_interval(full_attention_interval)
    writer.add_ssm_conv_kernel(ssm_conv)
    writer.add_ssm_state_size(ssm_state)
    writer.add_ssm_group_count(ssm_groups)
    writer.add_ssm_time_step_rank(ssm_heads)
    writer.add_ssm_inner_size(ssm_state * ssm_heads)
    if n_nextn:
        writer.add_nextn_predict_layers(n_nextn)

    w = _Weights(writer, seed)
    _embeddings(w, n_vocab, n_embd, logit_scale)
    key_dim, value_dim = ssm_state * ssm_groups, ssm_state * ssm_heads
    conv_dim = 2 * key_dim + value_dim

    def attention(il: int) -> None:
        # Q carries a per-head output gate beside the query: 2 * head rows per head.
        w.random(f"blk.{il}.attn_q.weight", 2 * head * n_head, n_embd, scale=layer_scale)
        w.random(f"blk.{il}.attn_k.weight", head * n_head_kv, n_embd, scale=layer_scale)
        w.random(f"blk.{il}.attn_v.weight", head * n_head_kv, n_embd, scale=layer_scale)
        w.random(f"blk.{il}.attn_output.weight", n_embd, head * n_head, scale=layer_scale)
        w.ones(f"blk.{il}.attn_q_norm.weight", head)
        w.ones(f"blk.{il}.attn_k_norm.weight", head)

    for il in range(n_layer + n_nextn):
        w.ones(f"blk.{il}.attn_norm.weight", n_embd)
        w.ones(f"blk.{il}.post_attention_norm.weight", n_embd)
        if il >= n_layer or (il + 1) % full_attention_interval == 0:
            attention(il)
        else:
            w.random(f"blk.{il}.attn_qkv.weight", conv_dim, n_embd, scale=layer_scale)
            w.random(f"blk.{il}.attn_gate.weight", value_dim, n_embd, scale=layer_scale)
            w.random(f"blk.{il}.ssm_conv1d.weight", conv_dim, ssm_conv, scale=0.5)
            w.random(f"blk.{il}.ssm_dt.bias", ssm_heads, scale=0.5)
            # The decay rate A must be negative, or the state grows without bound.
            w.add(f"blk.{il}.ssm_a", -np.abs(w.rng(f"blk.{il}.ssm_a").standard_normal(ssm_heads)) - 0.1)
            w.random(f"blk.{il}.ssm_beta.weight", ssm_heads, n_embd, scale=layer_scale)
            w.random(f"blk.{il}.ssm_alpha.weight", ssm_heads, n_embd, scale=layer_scale)
            w.ones(f"blk.{il}.ssm_norm.weight", ssm_state)
            w.random(f"blk.{il}.ssm_out.weight", n_embd, value_dim, scale=layer_scale)
        _ffn(w, il, n_embd, n_ff, layer_scale)
        if il >= n_layer:
            _nextn(w, il, n_embd, mtp_follow, layer_scale)
    return _finish(writer, path)


def write_glm4moe_gguf(
    path: Path | str,
    *,
    seed: int = 0,
    n_layer: int = 2,
    n_nextn: int = 1,
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 128,
    n_expert: int = 2,
    n_ff_exp: int = 32,
    context_length: int = 1024,
    layer_scale: float = 0.1,
    logit_scale: float = 4.0,
    mtp_follow: float = 0.8,
    vocab: str = "gpt2",
    chat_template: str | None = DEFAULT_TEMPLATE,
    name: str = "tiny-glm4moe",
) -> Path:
    """A tiny `glm4moe` whose `n_layer` trunk layers are all dense (a plain transformer with an
    attention-only cache) followed by `n_nextn` MTP blocks; llama.cpp's glm4moe MTP graph routes
    the block's FFN through experts, so the block has `n_expert` small experts and a shared one."""
    path = Path(path)
    writer, n_vocab = _writer(path, "glm4moe", name, vocab, chat_template)
    head = n_embd // n_head
    _common(
        writer,
        n_layer_all=n_layer + n_nextn,
        context_length=context_length,
        n_embd=n_embd,
        n_ff=n_ff,
        n_head=n_head,
        n_head_kv=n_head_kv,
        n_rot=head // 2,
    )
    writer.add_leading_dense_block_count(n_layer)
    writer.add_expert_count(n_expert)
    writer.add_expert_used_count(min(2, n_expert))
    writer.add_expert_shared_count(1)
    writer.add_expert_feed_forward_length(n_ff_exp)
    writer.add_expert_weights_scale(1.0)
    writer.add_expert_weights_norm(True)
    if n_nextn:
        writer.add_nextn_predict_layers(n_nextn)

    w = _Weights(writer, seed)
    _embeddings(w, n_vocab, n_embd, logit_scale)
    for il in range(n_layer + n_nextn):
        _attention(w, il, n_embd, head, n_head, n_head_kv, layer_scale)
        w.ones(f"blk.{il}.post_attention_norm.weight", n_embd)
        if il < n_layer:
            _ffn(w, il, n_embd, n_ff, layer_scale)
            continue
        w.random(f"blk.{il}.ffn_gate_inp.weight", n_expert, n_embd, scale=layer_scale)
        w.add(f"blk.{il}.exp_probs_b.bias", np.zeros(n_expert))
        w.random(f"blk.{il}.ffn_gate_exps.weight", n_expert, n_ff_exp, n_embd, scale=layer_scale)
        w.random(f"blk.{il}.ffn_up_exps.weight", n_expert, n_ff_exp, n_embd, scale=layer_scale)
        w.random(f"blk.{il}.ffn_down_exps.weight", n_expert, n_embd, n_ff_exp, scale=layer_scale)
        w.random(f"blk.{il}.ffn_gate_shexp.weight", n_ff_exp, n_embd, scale=layer_scale)
        w.random(f"blk.{il}.ffn_up_shexp.weight", n_ff_exp, n_embd, scale=layer_scale)
        w.random(f"blk.{il}.ffn_down_shexp.weight", n_embd, n_ff_exp, scale=layer_scale)
        _nextn(w, il, n_embd, mtp_follow, layer_scale)
    return _finish(writer, path)


def write_gemma3_gguf(
    path: Path | str,
    *,
    seed: int = 0,
    n_layer: int = 2,
    sliding_window: int = 8,
    swa_pattern: int = 2,
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 128,
    context_length: int = 1024,
    layer_scale: float = 0.1,
    logit_scale: float = 4.0,
    vocab: str = "gpt2",
    chat_template: str | None = DEFAULT_TEMPLATE,
    name: str = "tiny-gemma3",
) -> Path:
    """A tiny `gemma3` with an iSWA cache: of every `swa_pattern` layers the first ones attend to
    the last `sliding_window` tokens only and the last one to all (with the defaults, layer 0
    sliding and layer 1 full)."""
    path = Path(path)
    writer, n_vocab = _writer(path, "gemma3", name, vocab, chat_template)
    head = n_embd // n_head
    _common(
        writer,
        n_layer_all=n_layer,
        context_length=context_length,
        n_embd=n_embd,
        n_ff=n_ff,
        n_head=n_head,
        n_head_kv=n_head_kv,
        n_rot=head,
    )
    writer.add_key_length(head)
    writer.add_value_length(head)
    writer.add_sliding_window(sliding_window)
    writer.add_sliding_window_pattern(swa_pattern)

    w = _Weights(writer, seed)
    _gemma_embeddings(w, n_vocab, n_embd, logit_scale)
    _gemma_blocks(w, n_layer, n_embd, head, n_head, n_head_kv, n_ff, layer_scale)
    return _finish(writer, path)


def _gemma_embeddings(w: _Weights, n_vocab: int, n_embd: int, logit_scale: float) -> None:
    """Gemma multiplies the input embedding by sqrt(n_embd): it is written at 1/sqrt(n_embd) so the
    residual stream keeps unit scale."""
    w.random("token_embd.weight", n_vocab, n_embd, scale=float(1.0 / np.sqrt(n_embd)))
    w.ones("output_norm.weight", n_embd)
    w.random("output.weight", n_vocab, n_embd, scale=float(logit_scale / np.sqrt(n_embd)))


def _gemma_blocks(
    w: _Weights, n_layer: int, n_embd: int, head: int, n_head: int, n_head_kv: int, n_ff: int, scale: float
) -> None:
    """Gemma 3 and 4 blocks: attention with q/k norms and a norm after it, a gated FFN with a norm after it."""
    for il in range(n_layer):
        _attention(w, il, n_embd, head, n_head, n_head_kv, scale)
        w.ones(f"blk.{il}.attn_q_norm.weight", head)
        w.ones(f"blk.{il}.attn_k_norm.weight", head)
        w.ones(f"blk.{il}.post_attention_norm.weight", n_embd)
        w.ones(f"blk.{il}.ffn_norm.weight", n_embd)
        _ffn(w, il, n_embd, n_ff, scale)
        w.ones(f"blk.{il}.post_ffw_norm.weight", n_embd)


def write_gemma4_gguf(
    path: Path | str,
    *,
    seed: int = 0,
    n_layer: int = 2,
    sliding_window: int = 8,
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 128,
    context_length: int = 1024,
    layer_scale: float = 0.1,
    logit_scale: float = 4.0,
    vocab: str = "gpt2",
    chat_template: str | None = DEFAULT_TEMPLATE,
    name: str = "tiny-gemma4",
) -> Path:
    """A tiny dense `gemma4` (no per-layer embeddings, no experts, no layers sharing another's
    cache) with an iSWA cache: every layer but the last slides over `sliding_window` tokens, the
    last attends to all. A Gemma 4 assistant reads the target's last sliding layer and its last
    full one, so at least two layers are needed."""
    path = Path(path)
    writer, n_vocab = _writer(path, "gemma4", name, vocab, chat_template)
    head = n_embd // n_head
    _common(
        writer,
        n_layer_all=n_layer,
        context_length=context_length,
        n_embd=n_embd,
        n_ff=n_ff,
        n_head=n_head,
        n_head_kv=n_head_kv,
        n_rot=head,
    )
    writer.add_key_length(head)
    writer.add_value_length(head)
    arch = "gemma4"
    writer.add_uint32(f"{arch}.attention.key_length_swa", head)
    writer.add_uint32(f"{arch}.attention.value_length_swa", head)
    writer.add_uint32(f"{arch}.embedding_length_per_layer_input", 0)
    writer.add_sliding_window(sliding_window)
    writer.add_sliding_window_pattern([il < n_layer - 1 for il in range(n_layer)])

    w = _Weights(writer, seed)
    _gemma_embeddings(w, n_vocab, n_embd, logit_scale)
    w.ones("rope_freqs.weight", head // 2)
    _gemma_blocks(w, n_layer, n_embd, head, n_head, n_head_kv, n_ff, layer_scale)
    return _finish(writer, path)


def write_gemma4_assistant_gguf(
    path: Path | str,
    *,
    seed: int = 0,
    n_layer: int = 2,
    target_embd: int = 64,
    n_embd: int = 32,
    n_head: int = 2,
    n_ff: int = 64,
    sliding_window: int = 8,
    context_length: int = 1024,
    layer_scale: float = 0.1,
    vocab: str = "gpt2",
    name: str = "tiny-gemma4-assistant",
) -> Path:
    """A tiny `gemma4-assistant` for `write_gemma4_gguf`'s target of width `target_embd`: its own
    blocks (queries only: they attend over the target's cache, the sliding ones over the target's
    last sliding layer, the full one over its last full layer), fed the target's token embedding
    and hidden state; its output projection is its own token embedding."""
    path = Path(path)
    writer, n_vocab = _writer(path, "gemma4-assistant", name, vocab, None)
    arch = "gemma4-assistant"
    head = target_embd // 4  # the target's head size: the assistant reads the target's keys and values
    _common(
        writer,
        n_layer_all=n_layer,
        context_length=context_length,
        n_embd=n_embd,
        n_ff=n_ff,
        n_head=n_head,
        n_head_kv=2,
        n_rot=head,
    )
    writer.add_uint32(f"{arch}.nextn_predict_layers", n_layer)
    writer.add_uint32(f"{arch}.embedding_length_out", target_embd)
    writer.add_key_length(head)
    writer.add_value_length(head)
    writer.add_uint32(f"{arch}.attention.key_length_swa", head)
    writer.add_uint32(f"{arch}.attention.value_length_swa", head)
    writer.add_sliding_window(sliding_window)
    writer.add_sliding_window_pattern([il < n_layer - 1 for il in range(n_layer)])

    w = _Weights(writer, seed + 1)
    w.random("token_embd.weight", n_vocab, n_embd, scale=float(1.0 / np.sqrt(n_embd)))
    w.ones("output_norm.weight", n_embd)
    w.random("nextn.pre_projection.weight", n_embd, 2 * target_embd, scale=float(1.0 / np.sqrt(2 * target_embd)))
    w.random("nextn.post_projection.weight", target_embd, n_embd, scale=float(1.0 / np.sqrt(n_embd)))
    w.ones("rope_freqs.weight", head // 2)
    for il in range(n_layer):
        w.ones(f"blk.{il}.attn_norm.weight", n_embd)
        w.random(f"blk.{il}.attn_q.weight", head * n_head, n_embd, scale=layer_scale)
        w.random(f"blk.{il}.attn_output.weight", n_embd, head * n_head, scale=layer_scale)
        w.ones(f"blk.{il}.attn_q_norm.weight", head)
        w.ones(f"blk.{il}.post_attention_norm.weight", n_embd)
        w.ones(f"blk.{il}.layer_output_scale.weight", 1)
        w.ones(f"blk.{il}.ffn_norm.weight", n_embd)
        _ffn(w, il, n_embd, n_ff, layer_scale)
        w.ones(f"blk.{il}.post_ffw_norm.weight", n_embd)
    return _finish(writer, path)


def write_step35_gguf(
    path: Path | str,
    *,
    seed: int = 0,
    n_layer: int = 2,
    n_nextn: int = 2,
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 128,
    sliding_window: int = 8,
    context_length: int = 1024,
    layer_scale: float = 0.1,
    logit_scale: float = 4.0,
    mtp_follow: float = 0.8,
    vocab: str = "gpt2",
    chat_template: str | None = DEFAULT_TEMPLATE,
    name: str = "tiny-step35",
) -> Path:
    """A tiny dense `step35`: `n_layer` trunk layers alternating a sliding window of
    `sliding_window` tokens and full attention, then `n_nextn` MTP blocks (full attention) that
    llama.cpp chains, one block per draft depth."""
    path = Path(path)
    writer, n_vocab = _writer(path, "step35", name, vocab, chat_template)
    head = n_embd // n_head
    _common(
        writer,
        n_layer_all=n_layer + n_nextn,
        context_length=context_length,
        n_embd=n_embd,
        n_ff=n_ff,
        n_head=n_head,
        n_head_kv=n_head_kv,
        n_rot=head,
    )
    writer.add_expert_feed_forward_length(n_ff)
    writer.add_sliding_window(sliding_window)
    writer.add_sliding_window_pattern([il < n_layer and il % 2 == 0 for il in range(n_layer + n_nextn)])
    if n_nextn:
        writer.add_nextn_predict_layers(n_nextn)

    w = _Weights(writer, seed)
    _embeddings(w, n_vocab, n_embd, logit_scale)
    for il in range(n_layer + n_nextn):
        _attention(w, il, n_embd, head, n_head, n_head_kv, layer_scale)
        w.ones(f"blk.{il}.ffn_norm.weight", n_embd)
        _ffn(w, il, n_embd, n_ff, layer_scale)
        if il >= n_layer:
            _nextn(w, il, n_embd, mtp_follow, layer_scale)
    return _finish(writer, path)
