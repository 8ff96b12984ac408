"""A loaded GGUF model and its vocabulary, and the vocab-only reader that compares models
without their weights.

Kept apart from the context (llama.py), which decodes with a model: nothing here touches a KV
cache or a batch.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .. import defaults
from ..errors import InputError, ModelFileError, SpecrunError
from .fim_tokens import FimTokens, read_fim_tokens
from .lib import _llama, init_backend


@dataclass(frozen=True)
class Vocabulary:
    """A model's vocabulary and identifying metadata, read without its weights."""

    path: Path
    size: int  # bytes of the file
    vocab_type: int
    n_tokens: int
    bos: int
    eos: int
    add_bos: bool
    add_eos: bool
    texts: tuple[bytes, ...] = field(repr=False)
    architecture: str | None
    n_ctx_train: int | None  # from the metadata: vocab-only loads leave llama_model_n_ctx_train at 0
    chat_template: str | None = field(repr=False)
    name: str | None
    round_trips: bool = True  # sample text tokenized and detokenized comes back as it was (drafting through text works)
    fim: FimTokens | None = None  # its fill-in-the-middle markers (None: it cannot infill)


def read_vocabulary(path: str | os.PathLike) -> Vocabulary:
    """Open `path` with llama.cpp's vocab-only loader (no weights read: fast even for 70B files)."""
    init_backend()
    lib = _llama()
    params = lib.llama_model_default_params()
    params.vocab_only = True
    path_bytes = os.fsencode(path)  # keep a reference while C reads it
    model = lib.llama_model_load_from_file(path_bytes, params)
    if not model:
        raise ModelFileError(
            f"llama.cpp cannot read {path}",
            "the file may be damaged or of an architecture this llama.cpp build does not know; SPECRUN_DEBUG=1 shows "
            "its log",
        )
    try:
        vocab = lib.llama_model_get_vocab(model)
        n = lib.llama_vocab_n_tokens(vocab)
        arch = _meta(model, "general.architecture")
        texts = tuple(lib.llama_vocab_get_text(vocab, i) or b"" for i in range(n))
        ids = {text: i for i, text in enumerate(texts)}
        return Vocabulary(
            path=Path(path),
            size=os.path.getsize(path),
            vocab_type=int(lib.llama_vocab_type(vocab)),
            n_tokens=n,
            bos=int(lib.llama_vocab_bos(vocab)),
            eos=int(lib.llama_vocab_eos(vocab)),
            add_bos=bool(lib.llama_vocab_get_add_bos(vocab)),
            add_eos=bool(lib.llama_vocab_get_add_eos(vocab)),
            texts=texts,
            architecture=arch,
            n_ctx_train=_int(_meta(model, f"{arch}.context_length")),
            chat_template=_meta(model, "tokenizer.chat_template"),
            name=_meta(model, "general.name"),
            round_trips=_round_trips(vocab),
            fim=read_fim_tokens(vocab, lambda text: ids.get(text.encode())),
        )
    finally:
        lib.llama_model_free(model)


CHUNKED_WINDOW_ARCHS = {"llama4"}  # windows of fixed chunks (a token sees its own chunk) instead of sliding ones
ROUND_TRIP_TEXT = "Hello, world! def f(x):\n    return x ** 2  # ünïcödé, 你好, 🙂 and 3.14\n"


def _round_trips(vocab) -> bool:
    """Whether text tokenized and detokenized again is the text (a leading space aside, which
    SentencePiece vocabularies add): what drafting through text needs of a vocabulary."""
    lib = _llama()
    data = ROUND_TRIP_TEXT.encode("utf-8")
    capacity = len(data) + 16
    ids = (lib.llama_token * capacity)()
    n = lib.llama_tokenize(vocab, data, len(data), ids, capacity, False, False)
    if n <= 0:
        return False
    out = bytearray()
    buf = ctypes.create_string_buffer(256)
    for token in ids[:n]:
        size = lib.llama_token_to_piece(vocab, token, buf, 256, 0, False)
        if size < 0:
            return False
        out += buf.raw[:size]
    return bytes(out).lstrip(b" ") == data


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _meta(model, key: str) -> str | None:
    """A metadata string; the first call reports the length, a second fills a buffer that fits."""
    lib = _llama()
    key_bytes = key.encode()
    n = lib.llama_model_meta_val_str(model, key_bytes, None, 0)
    if n < 0:
        return None
    buf = ctypes.create_string_buffer(n + 1)
    lib.llama_model_meta_val_str(model, key_bytes, buf, n + 1)
    return buf.value.decode("utf-8", "replace")


@dataclass(frozen=True)
class FeatureHead:
    """What a head that reads a target's layer inputs says of itself: its kind ("eagle3",
    "dflash"), the target layers it reads, the target width it was made for, and for DFlash its
    block (the most tokens one pass proposes is block - 1), mask token, whether its block attends
    causally, and its selector's top-k (DFlash2; 0: none)."""

    kind: str
    layers: tuple[int, ...]
    target_embd: int
    block: int = 0
    mask: int = -1
    causal: bool = False
    selector_top_k: int = 0

    @property
    def drafts_blocks(self) -> bool:
        """A block head (DFlash): a pass over a block's rows proposes the whole block."""
        return self.block > 0

    @classmethod
    def of(cls, model: Model) -> FeatureHead:
        from .feature_api import api, target_layers

        kind = model.arch
        if kind == defaults.EAGLE3:
            return cls(kind, target_layers(model.ptr), _int(_meta(model.ptr, "eagle3.target_hidden_size")) or 0)
        return cls(
            kind,
            target_layers(model.ptr),
            model.n_embd,
            block=_int(_meta(model.ptr, "dflash.block_size")) or 16,
            mask=int(_llama().llama_vocab_mask(model.vocab)),
            causal=_meta(model.ptr, "dflash.attention.causal") == "true",
            selector_top_k=int(api()["llama_model_dflash_selector_top_k"](model.ptr)),
        )


@dataclass(frozen=True)
class LoadOptions:
    """How a model is placed and read.

    gpu_layers: llama.cpp's n_gpu_layers (the output layer counts as one; negative: all).
    devices: ggml device handles to offload to, in order (None: llama.cpp's default choice; empty:
    none, everything on the CPU). tensor_split: one proportion per device. use_extra_bufts: whether
    llama.cpp may use extra (repacked/AMX) buffers. mmap: map the file instead of reading it into
    memory; mlock: lock the weights in RAM.
    """

    gpu_layers: int = 0
    use_extra_bufts: bool = True
    devices: tuple[int, ...] | None = None
    tensor_split: tuple[float, ...] | None = None
    mmap: bool = True
    mlock: bool = False
    load_mtp: bool = False  # load the model's multi-token-prediction (nextn) layers, to draft with them

    def load_mode(self) -> int:
        """llama.cpp's load mode for mmap/mlock; mapping stays llama.cpp's automatic choice by default."""
        lib = _llama()
        if self.mmap:
            return lib.LLAMA_LOAD_MODE_MMAP_MLOCK if self.mlock else lib.LLAMA_LOAD_MODE_AUTO
        return lib.LLAMA_LOAD_MODE_MLOCK if self.mlock else lib.LLAMA_LOAD_MODE_NONE


class FreedOnCollection:
    """What llama.cpp allocated for an object is freed by its `close`, at the latest when the object is collected."""

    def close(self) -> None:
        raise NotImplementedError

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class Model(FreedOnCollection):
    """A loaded GGUF model and its vocabulary."""

    def __init__(self, path: Path | str, options: LoadOptions = LoadOptions()):
        init_backend()
        lib = _llama()
        self.path = Path(path)
        params = lib.llama_model_default_params()
        params.n_gpu_layers = options.gpu_layers
        params.use_extra_bufts = options.use_extra_bufts
        params.load_mode = options.load_mode()
        params.load_mtp = options.load_mtp
        if options.devices is not None:  # NULL-terminated; C reads it while loading, so it is kept here
            self._devices = (ctypes.c_void_p * (len(options.devices) + 1))(*options.devices, None)
            params.devices = ctypes.cast(self._devices, ctypes.c_void_p)
        if options.tensor_split:
            self._split = (ctypes.c_float * max(lib.llama_max_devices(), len(options.tensor_split)))(
                *options.tensor_split
            )
            params.tensor_split = ctypes.cast(self._split, ctypes.POINTER(ctypes.c_float))
        self._params = params
        self.ptr = lib.llama_model_load_from_file(str(self.path).encode(), params)
        if not self.ptr:
            raise ModelFileError(
                f"llama.cpp could not load {self.path} (truncated, corrupted or an unsupported architecture)",
                "re-download the file; SPECRUN_DEBUG=1 shows llama.cpp's reason",
            )
        self.vocab = lib.llama_model_get_vocab(self.ptr)
        self.n_vocab = lib.llama_vocab_n_tokens(self.vocab)
        self.n_ctx_train = lib.llama_model_n_ctx_train(self.ptr)
        self.add_bos = bool(lib.llama_vocab_get_add_bos(self.vocab))
        self._longest_piece: int | None = None
        # A recurrent state (Mamba, gated delta nets, hybrids) has no positions to cut: see Context.rewind.
        self.recurrent = bool(lib.llama_model_is_recurrent(self.ptr) or lib.llama_model_is_hybrid(self.ptr))
        self.n_swa = int(lib.llama_model_n_swa(self.ptr))  # tokens a sliding-window layer attends to (0: none)
        self.swa_chunked = _meta(self.ptr, "general.architecture") in CHUNKED_WINDOW_ARCHS
        self.mtp_heads = int(lib.llama_model_n_layer_nextn(self.ptr)) if options.load_mtp else 0
        self.n_embd_out = int(lib.llama_model_n_embd_out(self.ptr))
        self.n_embd = int(lib.llama_model_n_embd(self.ptr))
        self.n_layer = int(lib.llama_model_n_layer(self.ptr))
        self.n_head = int(lib.llama_model_n_head(self.ptr))  # query heads (of the first layer)
        self.arch = _meta(self.ptr, "general.architecture") or ""
        self.feature_head = FeatureHead.of(self) if self.arch in defaults.FEATURE_HEADS else None
        self.bos = int(lib.llama_vocab_bos(self.vocab))  # -1: the vocabulary has none
        self.eos = int(lib.llama_vocab_eos(self.vocab))
        self.pad = int(lib.llama_vocab_pad(self.vocab))  # -1: none
        self._fim: FimTokens | None | bool = False  # False: not read yet

    @property
    def fim(self) -> FimTokens | None:
        """Its fill-in-the-middle markers (None: it cannot infill), read once."""
        if self._fim is False:
            self._fim = read_fim_tokens(self.vocab, self._special_token)
        return self._fim

    def _special_token(self, text: str) -> int | None:
        """The id of the one special token spelled `text` (None: no such token)."""
        tokens = self.tokenize(text, add_special=False, parse_special=True)
        return tokens[0] if len(tokens) == 1 and self.token_text(tokens[0]) == text else None

    def is_eog(self, token: int) -> bool:
        """Any end-of-generation token of the vocabulary (EOS, EOT, <|im_end|>, …)."""
        return bool(_llama().llama_vocab_is_eog(self.vocab, token))

    def tokenize(self, text: str | bytes, *, add_special: bool, parse_special: bool) -> list[int]:
        """Text (or its UTF-8 bytes) → token ids; `parse_special` lets chat-template markers become
        control tokens."""
        lib = _llama()
        data = text if isinstance(text, bytes) else text.encode("utf-8")
        capacity = len(data) + 16
        buf = (lib.llama_token * capacity)()
        n = lib.llama_tokenize(self.vocab, data, len(data), buf, capacity, add_special, parse_special)
        if n < 0:
            capacity = -n
            buf = (lib.llama_token * capacity)()
            n = lib.llama_tokenize(self.vocab, data, len(data), buf, capacity, add_special, parse_special)
        return list(buf[:n])

    def piece(self, token: int, *, special: bool = False) -> bytes:
        """The bytes a token stands for (control tokens render as nothing, or as their text with
        `special`)."""
        lib = _llama()
        buf = ctypes.create_string_buffer(64)
        n = lib.llama_token_to_piece(self.vocab, token, buf, 64, 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = lib.llama_token_to_piece(self.vocab, token, buf, -n, 0, special)
        return buf.raw[:n]

    def longest_piece(self) -> int:
        """Bytes of the longest token text, control tokens' included (what `parse_special` reads
        as one token): no token covers more of a prompt, so prompt bytes / this ≤ its tokens."""
        if self._longest_piece is None:
            lib = _llama()
            size = 256
            buf = ctypes.create_string_buffer(size)
            longest = 0
            for token in range(self.n_vocab):
                n = lib.llama_token_to_piece(self.vocab, token, buf, size, 0, True)
                if n < 0:
                    size = -n
                    buf = ctypes.create_string_buffer(size)
                    n = lib.llama_token_to_piece(self.vocab, token, buf, size, 0, True)
                longest = max(longest, n)
            self._longest_piece = longest
        return self._longest_piece

    def chat_template(self) -> str | None:
        """The Jinja chat template in the GGUF metadata (None: the file has none)."""
        raw = _llama().llama_model_chat_template(self.ptr, None)
        return raw.decode("utf-8", "replace") if raw else None

    def token_text(self, token: int) -> str:
        """A token's text with control tokens spelled out (as templates write BOS and EOS); "" for none."""
        return self.piece(token, special=True).decode("utf-8", "replace") if 0 <= token < self.n_vocab else ""

    def builtin_chat_format(self, messages: Sequence[dict], add_assistant: bool = True) -> str:
        """Messages formatted as ChatML by llama.cpp's built-in template code: what llama.cpp does for
        a GGUF without a chat template. Its C strings cannot hold a NUL, so content with one is refused."""
        lib = _llama()
        if any("\0" in m["role"] or "\0" in m["content"] for m in messages):
            raise InputError(
                f"{self.path.name} has no chat template, and llama.cpp's built-in ChatML cannot carry a NUL character",
                "remove it, or use --raw",
            )
        encoded = [(m["role"].encode(), m["content"].encode()) for m in messages]
        array = (lib.llama_chat_message * len(encoded))()
        for slot, (role, content) in zip(array, encoded):
            slot.role, slot.content = role, content
        size = sum(len(r) + len(c) for r, c in encoded) * 2 + 256
        for _ in range(2):
            buf = ctypes.create_string_buffer(size)
            n = lib.llama_chat_apply_template(None, array, len(encoded), add_assistant, buf, size)
            if n < 0:
                raise SpecrunError(
                    "llama.cpp's built-in ChatML template failed", "use --raw and format the prompt yourself"
                )
            if n <= size:
                return buf.raw[:n].decode("utf-8", "replace")
            size = n + 1
        raise SpecrunError("chat template output kept growing", "use --raw")

    def close(self) -> None:
        if self.ptr:
            _llama().llama_model_free(self.ptr)
            self.ptr = None
