"""Tiny llama-architecture GGUF models with random weights, written with the `gguf` package.

They load in milliseconds, so the engine can be tested on real llama.cpp without downloads. The
vocabulary is byte-level gpt2 (256 byte tokens, a few merges, chat special tokens); knobs let a test
make a second model whose vocabulary differs in size, in one token's text, or in BOS id, or whose
weights are a noisy copy of another's (a draft that agrees with the target part of the time).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content']"
    " + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

MERGES = ["Ġ t", "h e", "i n", "Ġ a", "e r", "o n", "Ġt he", "r e"]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def byte_tokens() -> list[str]:
    """GPT-2's printable stand-ins for the 256 byte values, in byte order."""
    visible = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    codes = visible[:]
    extra = 0
    for b in range(256):
        if b not in visible:
            visible.append(b)
            codes.append(256 + extra)
            extra += 1
    table = dict(zip(visible, codes))
    return [chr(table[b]) for b in range(256)]


def vocabulary(extra_tokens: int = 0, overrides: dict[int, str] | None = None) -> tuple[list[str], list[int]]:
    """Token texts and types: bytes, merge results, `extra_tokens` filler tokens, then specials."""
    tokens = byte_tokens() + [m.replace(" ", "") for m in MERGES]
    tokens += [f"<extra_{i}>" for i in range(extra_tokens)]
    types = [1] * len(tokens)
    tokens += SPECIALS
    types += [3] * len(SPECIALS)
    for index, text in (overrides or {}).items():
        tokens[index] = text
    return tokens, types


def write_tiny_gguf(
    path: Path | str,
    *,
    seed: int = 0,
    noise: float = 0.0,
    noise_seed: int = 1,
    n_embd: int = 64,
    n_layer: int = 2,
    n_head: int = 4,
    n_ff: int = 128,
    context_length: int = 512,
    extra_tokens: int = 0,
    token_overrides: dict[int, str] | None = None,
    bos_id: int | None = None,
    eos_id: int | None = None,
    add_bos: bool = False,
    chat_template: str | None = CHATML_TEMPLATE,
    logit_scale: float = 4.0,
    name: str = "tiny",
    arch: str = "llama",
) -> Path:
    """Write a tiny model to `path` and return it.

    Weights come from `seed`; with `noise` > 0 they get Gaussian noise from `noise_seed` added, so
    two calls with the same seed and different noise give a target and a draft that mostly agree.
    `logit_scale` sharpens the output distribution so sampled tokens are not uniform noise.
    """
    import gguf

    path = Path(path)
    tokens, types = vocabulary(extra_tokens, token_overrides)
    n_vocab = len(tokens)
    endoftext = tokens.index("<|endoftext|>") if "<|endoftext|>" in tokens else n_vocab - 3
    rng = np.random.default_rng(seed)
    noise_rng = np.random.default_rng(noise_seed)

    def tensor(*shape: int, scale: float = 0.2) -> np.ndarray:
        data = rng.standard_normal(shape).astype(np.float32) * scale
        if noise:
            data += noise_rng.standard_normal(shape).astype(np.float32) * scale * noise
        return data.astype(np.float32)

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(name)
    writer.add_block_count(n_layer)
    writer.add_context_length(context_length)
    writer.add_embedding_length(n_embd)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(n_embd // n_head)
    writer.add_file_type(0)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(MERGES)
    writer.add_bos_token_id(endoftext if bos_id is None else bos_id)
    writer.add_eos_token_id(endoftext if eos_id is None else eos_id)
    writer.add_add_bos_token(add_bos)
    writer.add_add_eos_token(False)
    if chat_template:
        writer.add_chat_template(chat_template)

    writer.add_tensor("token_embd.weight", tensor(n_vocab, n_embd, scale=1.0))
    writer.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    writer.add_tensor("output.weight", tensor(n_vocab, n_embd, scale=float(logit_scale / np.sqrt(n_embd))))
    for i in range(n_layer):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.attn_q.weight", tensor(n_embd, n_embd))
        writer.add_tensor(f"blk.{i}.attn_k.weight", tensor(n_embd, n_embd))
        writer.add_tensor(f"blk.{i}.attn_v.weight", tensor(n_embd, n_embd))
        writer.add_tensor(f"blk.{i}.attn_output.weight", tensor(n_embd, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", tensor(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", tensor(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", tensor(n_embd, n_ff))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
