"""Tiny llama-architecture GGUF models with random weights, written with the `gguf` package.

They load in milliseconds, so the engine can be tested on real llama.cpp without downloads. Three
vocabulary families:

- "gpt2" (the default): byte-level BPE (256 byte tokens, a few merges, ChatML special tokens), like
  Qwen; no BOS is added.
- "spm": SentencePiece, like Llama 2: `<unk>` 0, `<s>` 1 (BOS, added), `</s>` 2 (EOS), the 256
  byte-fallback tokens `<0x00>`..`<0xFF>`, scored "▁"-prefixed pieces, a Llama-2 chat template.
- "llama3": byte-level BPE with the Llama 3 special tokens (`<|begin_of_text|>` added as BOS;
  `<|end_of_text|>` and `<|eot_id|>` both end generation) and a Llama-3 chat template.

Knobs let a test make a second model whose vocabulary differs in size, in one token's text, or in
BOS id; whose vocabulary is padded at the end with unused `[PAD<id>]` tokens (as converted models
whose embedding matrix is larger than their tokenizer are); whose weights are a noisy copy of
another's (a draft that agrees with the target part of the time); or whose end-of-generation tokens
are made likely where a chosen ordinary token would be generated (`eog_like`, with
`frequent_token` to choose that token), so a test knows that and where generation ends.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content']"
    " + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# Llama-2-chat's template; llama.cpp recognises it by "[INST]" (and "content.strip()": llama2-sys-strip).
LLAMA2_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"
)
# Llama-3-instruct's template; llama.cpp recognises it by "<|start_header_id|>" and "<|end_header_id|>".
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
    "{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)

MERGES = ["Ġ t", "h e", "i n", "Ġ a", "e r", "o n", "Ġt he", "r e"]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
SPM_SPECIALS = ["<unk>", "<s>", "</s>"]
SPM_SPACE = "\u2581"  # "▁": SentencePiece's word-start marker
SPM_WORDS = (
    "the of and to in is it you that he was for on are with as his they at be this have from or one had by "
    "word but not what all were we when your can said there use an each which she do how their if will up "
    "other about out many then them these so some her would make like him into time has look two more write "
    "go see number no way could people my than first water been call who hello world def return print count "
    "ten three four five quick brown fox jumps over lazy dog explain answer question INST SYS"
).split()
SPM_SUBWORDS = ["ing", "ed", "er", "tion", "ly", "es", "st", "re", "an", "on"]

# Token types, as gguf.TokenType numbers them.
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
DEFAULT_TEMPLATE = "default"  # `chat_template` value: the vocabulary family's own template


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


def vocabulary(extra_tokens: int = 0, overrides: dict[int, str] | None = None) -> tuple[list[str], list[int]]:
    """Token texts and types: bytes, merge results, `extra_tokens` filler tokens, then specials."""
    tokens = byte_tokens() + [m.replace(" ", "") for m in MERGES]
    tokens += [f"<extra_{i}>" for i in range(extra_tokens)]
    types = [NORMAL] * len(tokens)
    tokens += SPECIALS
    types += [CONTROL] * len(SPECIALS)
    for index, text in (overrides or {}).items():
        tokens[index] = text
    return tokens, types


def spm_pieces() -> list[str]:
    """SentencePiece pieces: "▁word" for common words and every prefix of it (so the tokenizer's
    pairwise merges can reach the whole word), a few subwords with their prefixes, then the space
    marker and the printable ASCII characters."""
    pieces: list[str] = []
    for word in [SPM_SPACE + w for w in SPM_WORDS] + SPM_SUBWORDS:
        pieces += [word[:end] for end in range(2, len(word) + 1)]
    pieces += [SPM_SPACE] + [chr(c) for c in range(ord("!"), ord("~") + 1)]
    return list(dict.fromkeys(pieces))


@dataclass
class Vocab:
    """One vocabulary family's tokens and tokenizer metadata."""

    model: str
    pre: str | None
    tokens: list[str]
    types: list[int]
    bos: int
    eos: int
    add_bos: bool
    template: str
    scores: list[float] | None = None
    merges: list[str] = field(default_factory=list)
    unk: int | None = None


def family_vocabulary(kind: str = "gpt2", extra_tokens: int = 0) -> Vocab:
    """The tokens and tokenizer metadata of a vocabulary family (before overrides and padding)."""
    if kind == "gpt2":
        tokens, types = vocabulary(extra_tokens)
        endoftext = tokens.index("<|endoftext|>")
        return Vocab(
            "gpt2", "default", tokens, types, endoftext, endoftext, False, CHATML_TEMPLATE, merges=list(MERGES)
        )
    if kind == "llama3":
        tokens = byte_tokens() + [m.replace(" ", "") for m in MERGES] + [f"<extra_{i}>" for i in range(extra_tokens)]
        types = [NORMAL] * len(tokens) + [CONTROL] * len(LLAMA3_SPECIALS)
        tokens += LLAMA3_SPECIALS
        bos, eos = tokens.index("<|begin_of_text|>"), tokens.index("<|end_of_text|>")
        return Vocab("gpt2", "llama-bpe", tokens, types, bos, eos, True, LLAMA3_TEMPLATE, merges=list(MERGES))
    if kind == "spm":
        pieces = spm_pieces() + [f"{SPM_SPACE}extra{i}" for i in range(extra_tokens)]
        tokens = SPM_SPECIALS + [f"<0x{b:02X}>" for b in range(256)] + pieces
        types = [UNKNOWN, CONTROL, CONTROL] + [BYTE] * 256 + [NORMAL] * len(pieces)
        # Scores order the tokenizer's merges (higher first), as a SentencePiece model's log-probabilities do.
        scores = [0.0] * (3 + 256) + [-float(i) for i in range(len(pieces))]
        return Vocab("llama", None, tokens, types, 1, 2, True, LLAMA2_TEMPLATE, scores=scores, unk=0)
    raise ValueError(f"unknown vocabulary {kind!r}: use 'gpt2', 'spm' or 'llama3'")


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
    add_bos: bool | None = None,
    chat_template: str | None = DEFAULT_TEMPLATE,
    logit_scale: float = 4.0,
    name: str = "tiny",
    arch: str = "llama",
    vocab: str = "gpt2",
    pad_tokens: int = 0,
    eog_like: dict[str, int] | None = None,
    eog_scale: float = 1.05,
    added_tokens: Sequence[str] = (),
    special_tokens: Sequence[str] = (),
    metadata: dict[str, int] | None = None,
    successors: dict[str, str] | None = None,
    extra_merges: Sequence[str] = (),
    layer_scale: float = 0.2,
) -> Path:
    """Write a tiny model to `path` and return it.

    Weights come from `seed`; with `noise` > 0 they get Gaussian noise from `noise_seed` added, so
    two calls with the same seed and different noise give a target and a draft that mostly agree.
    `logit_scale` sharpens the output distribution so sampled tokens are not uniform noise;
    `layer_scale` is the spread of the layers' weights (small: the next token depends mostly on
    the current one).

    vocab: "gpt2", "spm" or "llama3" (see the module docstring). `add_bos` and `chat_template`
    default to the family's ("default": ChatML, Llama-2 or Llama-3; None: no template).

    extra_merges: BPE merges ("a b") added after the family's, their results as tokens before the
    special tokens: a vocabulary that splits words more coarsely than another of the family (and,
    its specials moved, shares no token ids with it from there on).

    pad_tokens: that many unused `[PAD<id>]` tokens (type UNUSED, as llama.cpp's converter pads a
    vocabulary) after every other token. Their embedding and output rows come from their own random
    streams, so every other weight is the same whatever the padding: models that differ only in
    `pad_tokens` agree on every id below the smaller size, and the padding ids get real probability.

    eog_like: {special token text: ordinary token id}; the special token's output row becomes
    `eog_scale` times that token's row, so under greedy decoding the special token is generated
    where the ordinary one would have been (while its logit is positive; also where that logit comes
    within the scale of the top one): an end-of-generation token at a place `frequent_token` can
    predict. Applied after the noise, so a draft keeps the relation.

    special_tokens: texts added after those as control tokens (a code model's FIM markers, …).

    metadata: further uint32 keys of the file (`tokenizer.ggml.fim_pre_token_id`, …).

    added_tokens: texts added after the family's tokens as user-defined tokens (as a converter adds
    a tokenizer's non-special added tokens, e.g. Qwen3's `<think>`): matched whole in text, and
    rendered as their text.

    successors: {token text: token text}. The layers then contribute nothing (their weights are
    zero), so each next token depends on the current one alone, and the output rows are built so
    that greedy decoding follows the map: a model whose answer is a known sequence of tokens, for
    tests of what is done with an answer's text.
    """
    import gguf

    path = Path(path)
    spec = family_vocabulary(vocab, extra_tokens)
    if extra_merges:
        if not spec.merges:
            raise ValueError("extra_merges: only a byte-level BPE vocabulary has merges")
        results = [m.replace(" ", "") for m in extra_merges]
        at = len(spec.tokens) - sum(t == CONTROL for t in spec.types)  # before the special tokens
        spec.tokens[at:at] = results
        spec.types[at:at] = [NORMAL] * len(results)
        spec.merges += list(extra_merges)
        spec.bos, spec.eos = spec.bos + len(results) * (spec.bos >= at), spec.eos + len(results) * (spec.eos >= at)
    tokens, types, scores = list(spec.tokens), list(spec.types), spec.scores
    tokens += list(added_tokens) + list(special_tokens)
    types += [USER_DEFINED] * len(added_tokens) + [CONTROL] * len(special_tokens)
    if scores is not None:
        scores = scores + [0.0] * (len(added_tokens) + len(special_tokens))
    n_base = len(tokens)
    tokens += [f"[PAD{i}]" for i in range(n_base, n_base + pad_tokens)]
    types += [UNUSED] * pad_tokens
    if scores is not None:
        scores = scores + [0.0] * pad_tokens
    for index, text in (token_overrides or {}).items():
        tokens[index] = text
    n_vocab = len(tokens)
    rng = np.random.default_rng(seed)
    noise_rng = np.random.default_rng(noise_seed)

    def tensor(
        *shape: int, scale: float = 0.2, gen: np.random.Generator = rng, noise_gen: np.random.Generator = noise_rng
    ) -> np.ndarray:
        data = gen.standard_normal(shape).astype(np.float32) * scale
        if noise:
            data += noise_gen.standard_normal(shape).astype(np.float32) * scale * noise
        return data.astype(np.float32)

    out_scale = float(logit_scale / np.sqrt(n_embd))
    embd = tensor(n_base, n_embd, scale=1.0)
    output = tensor(n_base, n_embd, scale=out_scale)
    if pad_tokens:
        pad_rng, pad_noise_rng = np.random.default_rng([seed, 0x9AD]), np.random.default_rng([noise_seed, 0x9AD])
        embd = np.concatenate([embd, tensor(pad_tokens, n_embd, scale=1.0, gen=pad_rng, noise_gen=pad_noise_rng)])
        output = np.concatenate(
            [output, tensor(pad_tokens, n_embd, scale=out_scale, gen=pad_rng, noise_gen=pad_noise_rng)]
        )
    if successors:
        for source, target in successors.items():
            for text in (source, target):
                if text not in tokens:
                    raise ValueError(f"successors: no token {text!r} in the vocabulary")
        output = np.zeros_like(output)
        for source, target in successors.items():  # logit of `target` after `source`: about n_embd × 4
            row = embd[tokens.index(source)]
            output[tokens.index(target)] += 4.0 * row / np.sqrt(np.mean(row**2))
    for special, like in (eog_like or {}).items():
        if special not in tokens:
            raise ValueError(f"eog_like: no token {special!r} in the {vocab} vocabulary")
        if not 0 <= like < n_vocab:
            raise ValueError(f"eog_like: token id {like} outside the vocabulary (0..{n_vocab - 1})")
        output[tokens.index(special)] = output[like] * eog_scale

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
    writer.add_tokenizer_model(spec.model)
    if spec.pre is not None:
        writer.add_tokenizer_pre(spec.pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    if scores is not None:
        writer.add_token_scores(scores)
    if spec.merges:
        writer.add_token_merges(spec.merges)
    # BOS/EOS follow their text if an override moved it (the family's ids otherwise).
    bos_text, eos_text = spec.tokens[spec.bos], spec.tokens[spec.eos]
    writer.add_bos_token_id(
        bos_id if bos_id is not None else tokens.index(bos_text) if bos_text in tokens else spec.bos
    )
    writer.add_eos_token_id(
        eos_id if eos_id is not None else tokens.index(eos_text) if eos_text in tokens else spec.eos
    )
    if spec.unk is not None:
        writer.add_unk_token_id(spec.unk)
    writer.add_add_bos_token(spec.add_bos if add_bos is None else add_bos)
    writer.add_add_eos_token(False)
    template = spec.template if chat_template == DEFAULT_TEMPLATE else chat_template
    if template:
        writer.add_chat_template(template)
    for key, value in (metadata or {}).items():
        writer.add_uint32(key, value)

    writer.add_tensor("token_embd.weight", embd)
    writer.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    writer.add_tensor("output.weight", output)

    def layer(*shape: int) -> np.ndarray:
        return np.zeros(shape, dtype=np.float32) if successors else tensor(*shape, scale=layer_scale)

    for i in range(n_layer):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.attn_q.weight", layer(n_embd, n_embd))
        writer.add_tensor(f"blk.{i}.attn_k.weight", layer(n_embd, n_embd))
        writer.add_tensor(f"blk.{i}.attn_v.weight", layer(n_embd, n_embd))
        writer.add_tensor(f"blk.{i}.attn_output.weight", layer(n_embd, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", layer(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", layer(n_ff, n_embd))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", layer(n_embd, n_ff))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


# -- greedy decoding straight through llama.cpp, to choose where `eog_like` tokens should go --------

Prompt = str | Sequence[int]
_LOG_CALLBACK = None  # llama.cpp keeps the pointer


def _llama_cpp():
    """llama_cpp with its backend initialised; its log is dropped unless SPECRUN_DEBUG is set."""
    global _LOG_CALLBACK
    import llama_cpp

    if _LOG_CALLBACK is None:
        debug = bool(os.environ.get("SPECRUN_DEBUG"))

        def log(level, text, user_data):  # noqa: ARG001 - C signature
            if debug and text:
                sys.stderr.write(text.decode("utf-8", "replace"))

        _LOG_CALLBACK = llama_cpp.llama_log_callback(log)
        llama_cpp.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
    return llama_cpp


def _token_text(lib, vocab, token: int) -> str:
    buf = ctypes.create_string_buffer(256)
    n = lib.llama_token_to_piece(vocab, token, buf, 256, 0, True)
    return buf.raw[: max(n, 0)].decode("utf-8", "replace") if token >= 0 else ""


def _chat_tokens(lib, model, vocab, message: str) -> list[int]:
    """One user message rendered with the model's own template as specrun renders it (its Jinja
    renderer, BOS and EOS texts from the vocabulary), the assistant turn opened, tokenized with one BOS."""
    from specrun.models.chat_template import ChatTemplate

    template = lib.llama_model_chat_template(model, None)
    if not template:
        raise ValueError("the model has no chat template")
    bos = _token_text(lib, vocab, lib.llama_vocab_bos(vocab))
    eos = _token_text(lib, vocab, lib.llama_vocab_eos(vocab))
    text = ChatTemplate(template.decode(), bos_token=bos, eos_token=eos).render([{"role": "user", "content": message}])
    if lib.llama_vocab_get_add_bos(vocab) and bos and text.startswith(bos):
        text = text[len(bos) :]
    return _tokenize(lib, vocab, text)


def _tokenize(lib, vocab, text: str) -> list[int]:
    """As specrun tokenizes prompts: the vocabulary's BOS added, special-token text parsed."""
    data = text.encode("utf-8")
    capacity = len(data) + 16
    buf = (lib.llama_token * capacity)()
    n = lib.llama_tokenize(vocab, data, len(data), buf, capacity, True, True)
    if n < 0:
        raise ValueError(f"tokenizing needs {-n} tokens")
    return list(buf[:n])


def greedy_tokens(
    path: Path | str, prompts: Sequence[Prompt] = (), n: int = 32, *, chat_prompts: Sequence[str] = ()
) -> list[list[int]]:
    """Greedy plain decoding of up to `n` tokens after each prompt, stopping after an
    end-of-generation token (which is included). A prompt is text (tokenized with BOS and special
    tokens, as specrun's `--raw` does) or token ids; a chat prompt is one user message, formatted
    with the model's chat template as specrun's chat mode does. Results: prompts first."""
    lib = _llama_cpp()
    mparams = lib.llama_model_default_params()
    mparams.n_gpu_layers = 0
    mparams.use_extra_bufts = False  # AMX repacking crashes on some CPUs; tiny models do not need it
    model = lib.llama_model_load_from_file(os.fsencode(str(path)), mparams)
    if not model:
        raise ValueError(f"llama.cpp cannot load {path}")
    ctx = None
    try:
        vocab = lib.llama_model_get_vocab(model)
        n_vocab = lib.llama_vocab_n_tokens(vocab)
        cparams = lib.llama_context_default_params()
        cparams.n_ctx = 1024
        cparams.n_batch = cparams.n_ubatch = 1024
        cparams.n_threads = cparams.n_threads_batch = 1
        ctx = lib.llama_init_from_model(model, cparams)
        if not ctx:
            raise RuntimeError("llama.cpp cannot create a context")
        if isinstance(prompts, str):
            prompts = [prompts]
        token_lists = [_tokenize(lib, vocab, p) if isinstance(p, str) else list(p) for p in prompts]
        token_lists += [_chat_tokens(lib, model, vocab, m) for m in chat_prompts]
        results = []
        for prompt in token_lists:
            lib.llama_memory_clear(lib.llama_get_memory(ctx), True)
            feed, out = prompt, []
            for _ in range(n):
                array = (lib.llama_token * len(feed))(*feed)
                if lib.llama_decode(ctx, lib.llama_batch_get_one(array, len(feed))) != 0:
                    raise RuntimeError("llama_decode failed")
                logits = np.ctypeslib.as_array(lib.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))
                token = int(np.argmax(logits))
                out.append(token)
                if lib.llama_vocab_is_eog(vocab, token):
                    break
                feed = [token]
            results.append(out)
        return results
    finally:
        if ctx:
            lib.llama_free(ctx)
        lib.llama_model_free(model)


def frequent_token(
    path: Path | str, prompts: Sequence[Prompt] = (), n: int = 32, *, chat_prompts: Sequence[str] = ()
) -> int:
    """The ordinary token that greedy decoding (see greedy_tokens) generates after the most of the
    prompts, and among those the one that comes soonest in its latest run, then the most often;
    control, unused and end-of-generation tokens are not counted. A model of the same seed with
    `eog_like={eog_text: frequent_token(...)}` ends its greedy answers to these prompts at the
    latest where this token would first have come."""
    lib = _llama_cpp()
    runs = greedy_tokens(path, prompts, n, chat_prompts=chat_prompts)
    model = _load_vocab_only(lib, path)
    try:
        vocab = lib.llama_model_get_vocab(model)
        skip = lib.LLAMA_TOKEN_ATTR_CONTROL | lib.LLAMA_TOKEN_ATTR_UNUSED
        generated = {t for run in runs for t in run}
        ordinary = {
            t
            for t in generated
            if not lib.llama_vocab_get_attr(vocab, t) & skip and not lib.llama_vocab_is_eog(vocab, t)
        }
    finally:
        lib.llama_model_free(model)
    if not ordinary:
        raise ValueError("greedy decoding generated no ordinary token")

    def rank(token: int) -> tuple[int, int, int]:
        firsts = [run.index(token) for run in runs if token in run]
        return len(firsts), -max(firsts), sum(run.count(token) for run in runs)

    return max(sorted(ordinary), key=rank)


def _load_vocab_only(lib, path: Path | str):
    params = lib.llama_model_default_params()
    params.vocab_only = True
    model = lib.llama_model_load_from_file(os.fsencode(str(path)), params)
    if not model:
        raise ValueError(f"llama.cpp cannot load {path}")
    return model
