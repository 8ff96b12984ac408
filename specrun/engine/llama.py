"""A thin wrapper over llama_cpp's C API: models, and the one context type that holds any number of
sequences, decodes a batch of them with chosen logits, and trims each sequence's tail.

Only what the engine needs, with every ctypes object kept referenced by its owner (C keeps pointers
into them).
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import defaults
from ..errors import ContextOverflowError, InputError, ModelFileError, SpecrunError
from .lib import _llama, _llama_ext, init_backend
from .shortlist import Shortlist


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
        return Vocabulary(
            path=Path(path),
            size=os.path.getsize(path),
            vocab_type=int(lib.llama_vocab_type(vocab)),
            n_tokens=n,
            bos=int(lib.llama_vocab_bos(vocab)),
            eos=int(lib.llama_vocab_eos(vocab)),
            add_bos=bool(lib.llama_vocab_get_add_bos(vocab)),
            add_eos=bool(lib.llama_vocab_get_add_eos(vocab)),
            texts=tuple(lib.llama_vocab_get_text(vocab, i) or b"" for i in range(n)),
            architecture=arch,
            n_ctx_train=_int(_meta(model, f"{arch}.context_length")),
            chat_template=_meta(model, "tokenizer.chat_template"),
            name=_meta(model, "general.name"),
            round_trips=_round_trips(vocab),
        )
    finally:
        lib.llama_model_free(model)


LLAMA_MAX_SEQ = 256  # sequences one llama.cpp context can name
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
        self.arch = _meta(self.ptr, "general.architecture") or ""
        self.feature_head = FeatureHead.of(self) if self.arch in defaults.FEATURE_HEADS else None
        self.bos = int(lib.llama_vocab_bos(self.vocab))  # -1: the vocabulary has none
        self.eos = int(lib.llama_vocab_eos(self.vocab))

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


class CacheFullError(SpecrunError):
    """The shared pool of KV cells cannot hold a batch: free the cache of an idle sequence first."""


@dataclass(frozen=True)
class Segment:
    """One sequence's share of a batch: tokens appended at its end, and which rows return logits
    ("all", "last" or "none"); with "all", the first `skip` rows return none (rows no one reads:
    those predicting tokens a constraint forces), which spares their output layer."""

    seq: int
    tokens: Sequence[int]
    logits: str = "all"
    skip: int = 0


@dataclass(frozen=True)
class HeadSegment:
    """One sequence's share of a head context's batch: tokens appended at its end, each with the
    hidden row it is paired with, and whether its last entry returns logits."""

    seq: int
    tokens: Sequence[int]
    rows: Sequence[np.ndarray]
    last: bool = True


class Context(FreedOnCollection):
    """One llama.cpp context holding `n_seq` sequences of up to `n_ctx` tokens each, in a pool of
    `n_seq_pool` sequences' worth of cells (default: all of them).

    The KV cache is unified (one pool of cells shared by every sequence), so llama.cpp computes a
    batch in one pass whatever its mix of sequences and lengths. `tokens[seq]` mirrors each
    sequence's cache exactly: decode appends, trim drops a tail; a prefix is reused by comparing
    with it. The batch is built in numpy arrays that llama.cpp reads directly, so a step costs the
    same few array writes whether it carries one sequence or many.

    How a tail is cut (`rewind`): "positions" where the cache is made of positions (attention,
    sliding windows kept in full); "snapshots" for a recurrent or hybrid model made with `rollback`
    snapshots, which undo up to that many of the tokens a sequence got in the last decode call
    (a verification batch), once; "none" for a recurrent model without them. A cut snapshots
    cannot make goes back to the latest checkpoint at or before it (`checkpoint`), or to nothing,
    and decodes the tokens in between again: slower, never wrong.

    `hidden`: also keep, for every token decoded, the model's last hidden state (the input of its
    multi-token-prediction head), handed to `on_hidden(seq, position, rows)` after every pass.
    `features`: instead, the inputs of these layers, side by side in each row (what an EAGLE-3
    or DFlash head reads of its target).

    A context of a feature head (`model.feature_head`) is made on its target's context (`other`,
    whose token embedding and output projection it may borrow) and fed through `feed_head`
    (EAGLE-3's decoder), `encode` (EAGLE-3's encoder), `inject` and `block` (DFlash).
    """

    def __init__(
        self,
        model: Model,
        *,
        n_ctx: int,
        n_threads: int,
        n_batch: int = 512,
        n_seq: int = 1,
        n_seq_pool: int | None = None,
        rollback: int = 0,
        hidden: bool = False,
        head: bool = False,
        other: Context | None = None,
        features: Sequence[int] = (),
    ):
        lib = _llama()
        self.model = model
        self._lib = lib  # kept: the lookup costs a cold call on every pass
        self.other = other  # the context whose cache this one reads (a Gemma 4 assistant's target), kept alive with it
        params = lib.llama_context_default_params()
        params.n_ctx = n_ctx * (n_seq_pool or n_seq)
        params.n_batch = n_batch
        params.n_ubatch = (
            max(n_batch, rollback + 2) if model.recurrent and rollback else n_batch
        )  # llama.cpp needs the room
        # A sliding-window cache hands a cell its window has left to the next token it stores, held
        # by one sequence or not, so cutting that sequence back would find the cell gone: each
        # sequence's cells are also held by a pin sequence (n_seq + seq), which no batch ever names.
        self.pins = n_seq if model.n_swa > 0 else 0
        self._pinned = [0] * n_seq  # positions below this are held by the sequence's pin
        if 2 * n_seq > LLAMA_MAX_SEQ and self.pins:
            raise SpecrunError(
                f"a sliding-window model holds at most {LLAMA_MAX_SEQ // 2} sequences, not {n_seq}",
                f"lower --parallel to {LLAMA_MAX_SEQ // 4} or less",
            )
        params.n_seq_max = n_seq + self.pins
        params.kv_unified = True
        params.n_threads = n_threads
        params.n_threads_batch = n_threads
        params.no_perf = True
        params.swa_full = True  # a sliding window kept in full: every cut of a kept cache stays exact
        params.n_outputs_max_per_seq = 0  # a shortlisted sequence may verify a whole batch's rows
        if model.recurrent:
            params.n_rs_seq = rollback
        if head:
            params.ctx_type = lib.LLAMA_CONTEXT_TYPE_MTP
        if other is not None:
            params.ctx_other = other.ptr  # made before `other` holds anything: making it empties `other`'s cache
        self._params = params
        self.ptr = lib.llama_init_from_model(model.ptr, params)
        if not self.ptr:
            what = f"{params.n_ctx} tokens" + (f" for {n_seq} sequences" if n_seq > 1 else "")
            raise SpecrunError(
                f"llama.cpp could not create a context of {what}",
                "lower --ctx-size" + (" or --parallel" if n_seq > 1 else ""),
            )
        self.n_cells = lib.llama_n_ctx(self.ptr)
        self.n_ctx = min(n_ctx, self.n_cells)
        self.n_seq = n_seq
        self.n_batch = n_batch
        self.memory = lib.llama_get_memory(self.ptr)
        self.tokens: list[list[int]] = [[] for _ in range(n_seq)]
        self.decode_seconds = 0.0  # time inside llama_decode, to tell engine overhead from model time
        self.snapshots = int(lib.llama_n_rs_seq(self.ptr)) if model.recurrent and not head else 0
        # a head's cache is attention only, whatever the trunk's: its positions cut like any attention cache's
        self.rewind = "positions" if head or not model.recurrent else "snapshots" if self.snapshots else "none"
        self._last_call = [0] * n_seq  # tokens each sequence got in the last decode call; 0 once undone
        self._checkpoints: list[tuple[int, bytes] | None] = [None] * n_seq
        self.head = head
        self.hidden = hidden
        self.on_hidden = None
        self.features = tuple(features)
        feature_head = model.feature_head
        if hidden or head:
            _llama_ext().llama_set_embeddings_nextn(self.ptr, True, head)  # the head: rows for its outputs only
        if feature_head is not None:  # its hidden rows for its outputs only (DFlash2: its selector's, for all)
            _llama_ext().llama_set_embeddings_nextn(self.ptr, True, not feature_head.selector_top_k)
            if feature_head.kind == defaults.DFLASH:
                lib.llama_set_causal_attn(self.ptr, feature_head.causal)
        self._capturing = False
        self.capture(bool(self.features))
        self._head_batch = lib.llama_batch_ext_init(self.ptr) if head or feature_head is not None else None
        self._shortlists = [0] * n_seq  # each sequence's top-k cut in the graph (0: full rows)
        self._chains: dict[int, object] = {}  # sequence → the chain llama.cpp holds for it now, freed when taken off
        self._batch_arrays(lib)

    @property
    def max_rewind(self) -> int | None:
        """The most tokens a step's verification may take back exactly (None: any)."""
        return None if self.rewind == "positions" else self.snapshots

    def _batch_arrays(self, lib) -> None:
        """A llama_batch whose arrays are numpy's: filled by slicing, never row by row in Python."""
        n = self.n_batch
        self._token = np.zeros(n, dtype=np.int32)
        self._pos = np.zeros(n, dtype=np.int32)
        self._n_seq_id = np.ones(n, dtype=np.int32)
        self._seq = np.zeros(n, dtype=np.int32)
        self._wants = np.zeros(n, dtype=np.int8)
        base = self._seq.ctypes.data
        self._seq_ptrs = (ctypes.POINTER(ctypes.c_int32) * n)(
            *(ctypes.cast(base + 4 * i, ctypes.POINTER(ctypes.c_int32)) for i in range(n))
        )
        batch = lib.llama_batch()
        batch.token = self._token.ctypes.data_as(ctypes.POINTER(lib.llama_token))
        batch.embd = None
        batch.pos = self._pos.ctypes.data_as(ctypes.POINTER(lib.llama_pos))
        batch.n_seq_id = self._n_seq_id.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        batch.seq_id = ctypes.cast(self._seq_ptrs, ctypes.POINTER(ctypes.POINTER(lib.llama_seq_id)))
        batch.logits = self._wants.ctypes.data_as(ctypes.POINTER(ctypes.c_int8))
        self.batch = batch
        self._logits_address: int | None = None
        self._logits_at = address_function("llama_get_logits", [ctypes.c_void_p])
        self._logits: np.ndarray | None = None
        by_row = [ctypes.c_void_p, ctypes.c_int32]  # a shortlisted row's candidate ids, their logits, their count
        self._row_types = (ctypes.c_int32 * 1, ctypes.c_float * 1)  # ctypes row types of the last shortlist width read
        self._sampled_at = (
            address_function("llama_get_sampled_candidates_ith", by_row),
            address_function("llama_get_sampled_logits_ith", by_row),
            address_function("llama_get_sampled_candidates_count_ith", by_row, ctypes.c_uint32),
        )

    # -- state -------------------------------------------------------------------------------

    def used(self) -> int:
        """Cells holding a token of some sequence."""
        return sum(len(t) for t in self.tokens)

    def free(self) -> int:
        return self.n_cells - self.used()

    def common_prefix(self, seq: int, history: Sequence[int]) -> int:
        """Length of the longest prefix shared by sequence `seq`'s cache and `history`."""
        return common_prefix(self.tokens[seq], history)

    def shortlist(self, seq: int, k: int) -> None:
        """From now on, have llama.cpp cut sequence `seq`'s rows to their top k in its graph and
        return them as Shortlists (engine/shortlist.py); 0 returns full rows again. A context that
        keeps hidden rows or runs a head always returns full rows, and so does a backend that
        cannot run the cut. A change takes effect at the next pass, which rebuilds the graph."""
        if self.hidden or self.head or not 0 < k < self.model.n_vocab:
            k = 0
        if k == self._shortlists[seq]:
            return
        self._detach(seq)
        self._shortlists[seq] = k if k and self._attach(seq, k) else 0

    def _attach(self, seq: int, k: int) -> bool:
        """Put a new top-k chain on `seq` (llama.cpp aborts if a chain is initialised twice, so a
        chain is never put back); False where the backend cannot run it."""
        lib = _llama()
        chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
        lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_top_k(k))
        if not lib.llama_set_sampler(self.ptr, seq, chain):
            lib.llama_sampler_free(chain)  # not offloaded: llama.cpp dropped the sequence's cut
            return False
        self._chains[seq] = chain
        return True

    def _detach(self, seq: int) -> None:
        chain = self._chains.pop(seq, None)
        if chain is not None:
            lib = _llama()
            lib.llama_set_sampler(self.ptr, seq, None)
            lib.llama_sampler_free(chain)

    def _attach_for(self, outputs: set[int]) -> None:
        """Before a pass with output rows: the chains on exactly the shortlisted sequences that
        have rows in it. llama.cpp runs a chain whose sequence has no row in a pass on a stand-in
        row, and that corrupts other sequences' candidates (ids wrong, logits right), so a chain
        comes off while its sequence has no row and a new one goes on when it has one again."""
        for seq in self._chains.keys() - outputs:
            self._detach(seq)
        for seq in outputs - self._chains.keys():
            k = self._shortlists[seq]
            if k and not self._attach(seq, k):
                self._shortlists[seq] = 0

    def shortlisted(self, seq: int) -> int:
        """The top-k cut sequence `seq`'s rows take (0: full rows)."""
        return self._shortlists[seq]

    # -- decoding ----------------------------------------------------------------------------

    def decode(self, segments: Sequence[Segment], *, copy: bool = True) -> list[np.ndarray | Shortlist | None]:
        """Append every segment's tokens to its sequence in as few passes as n_batch allows (one,
        for a step's verification batch); return, per segment, its logits: shape (n - skip, n_vocab) for
        "all", (n_vocab,) for "last", None for "none"; a shortlisted sequence's rows come as a
        Shortlist of those shapes, with k columns. On failure no sequence keeps any of it.

        `copy=False` returns views of llama.cpp's buffer (no copy of vocabulary-sized rows), valid
        only until the next decode on this context, and only for segments that fit one pass.
        """
        total = self._check(segments)
        if not copy and total > self.n_batch:
            raise ValueError("views of the logits need the segments in one pass")
        out: list[list[np.ndarray]] = [[] for _ in segments]
        with self._appending(segments) as bases:
            if self.snapshots and len(segments) > 1:
                # A recurrent cache computes the sequences of one pass as several groups and moves
                # their states between cells to lay each group out side by side; a group's
                # snapshots then land in cells holding other sequences' snapshots, and a cut back
                # through those restores a wrong state. One sequence per pass moves nothing.
                for index, seg in enumerate(segments):
                    for pieces in self._chunks([seg]):
                        self._pass(segments, bases, [(index, start, end) for _, start, end in pieces], out, True)
            elif total <= self.n_batch:
                self._pass(segments, bases, [(i, 0, len(seg.tokens)) for i, seg in enumerate(segments)], out, copy)
            else:
                for pieces in self._chunks(segments):
                    self._pass(segments, bases, pieces, out, True)
        return [
            None if seg.logits == "none" else (rows[0] if seg.logits == "last" else _joined(rows))
            for seg, rows in zip(segments, out)
        ]

    def feed(self, seq: int, tokens: Sequence[int], logits: str = "last") -> np.ndarray | None:
        """Append `tokens` to one sequence (any length; long inputs take several passes)."""
        if not tokens:
            raise ValueError("decode needs at least one token")
        return self.decode([Segment(seq, tokens, logits)])[0]

    def _check(self, segments: Sequence[Segment]) -> int:
        seen: set[int] = set()
        added = 0
        for seg in segments:
            if not len(seg.tokens):
                raise ValueError("a segment needs at least one token")
            if seg.seq in seen or not 0 <= seg.seq < self.n_seq:
                raise ValueError(f"sequence {seg.seq} is repeated or out of range")
            seen.add(seg.seq)
            size = len(self.tokens[seg.seq]) + len(seg.tokens)
            if size > self.n_ctx:
                raise ContextOverflowError(
                    f"{size} tokens do not fit in the context of {self.n_ctx}", "raise --ctx-size or shorten the prompt"
                )
            added += len(seg.tokens)
        if added > self.free():
            raise CacheFullError(
                f"{added} tokens do not fit in the {self.free()} free cells of the shared cache",
                "lower --parallel or raise --ctx-size",
            )
        return added

    def _chunks(self, segments: Sequence[Segment]):
        """(segment, start, end) pieces of at most n_batch tokens in all per pass, in order."""
        pieces, room = [], self.n_batch
        for index, seg in enumerate(segments):
            start = 0
            while start < len(seg.tokens):
                n = min(room, len(seg.tokens) - start)
                pieces.append((index, start, start + n))
                start += n
                room -= n
                if room == 0:
                    yield pieces
                    pieces, room = [], self.n_batch
        if pieces:
            yield pieces

    def _pass(
        self, segments: Sequence[Segment], bases: Sequence[int], pieces, out: list[list[np.ndarray]], copy: bool
    ) -> None:
        """One llama_decode over `pieces`; the logits rows each piece asked for go to `out`."""
        row, wanted = 0, []
        for index, start, end in pieces:
            seg = segments[index]
            n = end - start
            if n == 1:  # a draft depth's pass: item stores touch less than slices right after a pass
                self._token[row] = seg.tokens[start]
                self._pos[row] = bases[index] + start
                self._seq[row] = seg.seq
            else:
                self._token[row : row + n] = seg.tokens[start:end]
                self._pos[row : row + n] = np.arange(bases[index] + start, bases[index] + end, dtype=np.int32)
                self._seq[row : row + n] = seg.seq
            if seg.logits == "all":
                first = min(max(start, seg.skip), end)  # the first token of this piece whose row returns logits
                self._wants[row : row + first - start] = 0
                self._wants[row + first - start : row + n] = 1
                if first < end:
                    wanted.append((index, end - first, row + first - start))
            else:
                if n == 1:
                    self._wants[row] = 0
                else:
                    self._wants[row : row + n] = 0
                if seg.logits == "last" and end == len(seg.tokens):
                    self._wants[row + n - 1] = 1
                    wanted.append((index, 0, row + n - 1))  # 0: one row, returned as a row, not a block
            row += n
        self.batch.n_tokens = row
        if wanted and (self._chains or any(self._shortlists)):
            outputs = {segments[index].seq for index, _, _ in wanted}
            if self._chains.keys() != outputs:
                self._attach_for(outputs)
        start_time = time.perf_counter()
        status = self._lib.llama_decode(self.ptr, self.batch)
        self.decode_seconds += time.perf_counter() - start_time
        if status != 0:
            raise SpecrunError(
                f"llama_decode failed with status {status} on a batch of {row} tokens",
                "raise --ctx-size"
                + (" or lower --parallel" if self.n_seq > 1 else "")
                + "; SPECRUN_DEBUG=1 shows details",
            )
        for index, start, end in pieces:
            self._last_call[segments[index].seq] = end - start
        if self.pins:
            for index, _, end in pieces:
                self._pin_leaving(segments[index].seq, bases[index] + end)
        if (self.hidden or self._capturing) and self.on_hidden is not None:
            block = self._hidden_block(row)
            at = 0
            for index, start, end in pieces:
                seg = segments[index]
                self.on_hidden(seg.seq, bases[index] + start, block[at : at + end - start].copy())
                at += end - start
        if not wanted:
            return
        view = None
        at = 0
        for index, n, position in wanted:
            k = self._shortlists[segments[index].seq]
            if k:
                out[index].append(self._shortlist_rows(position, n, k) if n else self._shortlist_row(position, k))
            else:
                if view is None:  # llama.cpp copies full rows out only when some row is not shortlisted
                    view = self._logits_rows(sum(n or 1 for _, n, _ in wanted))
                block = view[at : at + n] if n else view[at]
                out[index].append(block.copy() if copy else block)
            at += n or 1

    @property
    def feature_width(self) -> int:
        """Floats in one row of the `features` layers' inputs, side by side."""
        return len(self.features) * self.model.n_embd

    def capture(self, on: bool) -> None:
        """Whether passes keep the inputs of the `features` layers from now on (a change takes
        effect at the next pass, which reserves its graph again)."""
        on = on and bool(self.features)
        if on == self._capturing:
            return
        from .feature_api import capture_layer_inputs

        for layer in self.features:
            capture_layer_inputs(self.ptr, layer, on)
        self._capturing = on

    def _hidden_block(self, rows: int) -> np.ndarray:
        """The last pass's hidden rows: the model's last hidden state, or its `features` layer
        inputs side by side (a view of llama.cpp's buffers when only one is read)."""
        if not self.features:
            return float_view(_llama_ext().llama_get_embeddings_nextn(self.ptr), (rows, self.model.n_embd_out))
        from .feature_api import layer_inputs_address

        width = self.model.n_embd
        blocks = [float_view(layer_inputs_address(self.ptr, layer), (rows, width)) for layer in self.features]
        return blocks[0] if len(blocks) == 1 else np.concatenate(blocks, axis=1)

    def _shortlist_row(self, position: int, k: int) -> Shortlist:
        """The shortlist of the output row at batch position `position`, as Python lists: what
        a draft depth's pass returns, read with the fewest calls right after the pass."""
        ids_at, logits_at, count_at = self._sampled_at
        _check_count(count_at(self.ptr, position), k)
        if self._row_types[0]._length_ != k:
            self._row_types = (ctypes.c_int32 * k, ctypes.c_float * k)
        id_row, logit_row = self._row_types
        return Shortlist(
            id_row.from_address(ids_at(self.ptr, position))[:], logit_row.from_address(logits_at(self.ptr, position))[:]
        )

    def _shortlist_rows(self, position: int, n: int, k: int) -> Shortlist:
        """The shortlists of the n output rows from batch position `position` on (copies: k
        numbers a row). Consecutive outputs lie a vocabulary apart in llama.cpp's buffers once
        it has put them back in batch order, and are then read as one strided block; every row's
        address is checked first, since only that makes the strided read right whatever order
        the rows are stored in (checking the first and last alone misses a swapped middle pair)."""
        ids_at, logits_at, count_at = self._sampled_at
        _check_count(count_at(self.ptr, position), k)
        stride = 4 * self.model.n_vocab
        first_ids, first_logits = ids_at(self.ptr, position), logits_at(self.ptr, position)
        if all(
            ids_at(self.ptr, position + i) == first_ids + i * stride
            and logits_at(self.ptr, position + i) == first_logits + i * stride
            for i in range(1, n)
        ):
            return Shortlist(
                np.array(float_view(first_ids, (n, k), "<i4", stride)),
                np.array(float_view(first_logits, (n, k), "<f4", stride)),
            )
        ids = np.stack([float_view(ids_at(self.ptr, position + i), (k,), "<i4") for i in range(n)])
        logits = np.stack([float_view(logits_at(self.ptr, position + i), (k,)) for i in range(n)])
        return Shortlist(ids, logits)

    def _logits_rows(self, rows: int) -> np.ndarray:
        """The first `rows` rows of llama.cpp's logits buffer: a slice of one view kept while the
        buffer stays where it is (no pass has more outputs than n_batch)."""
        address = self._logits_at(self.ptr)
        if not address or address != self._logits_address:  # float_view refuses no buffer
            self._logits = float_view(address, (self.n_batch, self.model.n_vocab))
            self._logits_address = address
        return self._logits[:rows]

    def feed_head(self, segments: Sequence[HeadSegment]) -> list[tuple[np.ndarray, np.ndarray] | None]:
        """Append, on a head context, each segment's (token, hidden row) pairs to its sequence, in
        passes of at most n_batch entries; return per segment, when it asked for it, the logits and
        the head's own hidden row of its last entry (what drafting the next token takes). On
        failure no sequence keeps any of it."""
        if self._head_batch is None:
            raise ValueError("feed_head needs a context made with head=True")
        self._check([Segment(seg.seq, seg.tokens) for seg in segments])
        entries = [(index, i) for index, seg in enumerate(segments) for i in range(len(seg.tokens))]
        out: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(segments)
        with self._appending(segments) as bases:
            for start in range(0, len(entries), self.n_batch):
                self._head_pass(segments, bases, entries[start : start + self.n_batch], out)
        return out

    def head_rows(self, entries: Sequence[tuple[int, int, int, np.ndarray]]) -> list[tuple[np.ndarray, np.ndarray]]:
        """One pass of a head that attends over another context's cache (`other`) and keeps
        nothing of its own: (sequence, position, token, hidden row) entries, each with its
        logits and the head's own hidden row back. Nothing is appended to any sequence."""
        if self._head_batch is None or self.other is None:
            raise ValueError("head_rows needs a head context made on another context")
        return self._process_head([(seq, pos, token, row, True) for seq, pos, token, row in entries])

    def encode(self, rows: np.ndarray) -> np.ndarray:
        """EAGLE-3's encoder over target feature rows (n, width): its fused rows (n, n_embd), in
        passes of at most n_batch rows. It reads no cache and keeps nothing."""
        out = []
        for start in range(0, len(rows), self.n_batch):
            chunk = rows[start : start + self.n_batch]
            base = len(self.tokens[0])  # the encoder ignores positions; these follow what sequence 0 holds
            self._process_embd([(0, base + i, row) for i, row in enumerate(chunk)], encode=True)
            out.append(float_view(_llama_ext().llama_get_embeddings_nextn(self.ptr), (len(chunk), self.model.n_embd)))
        return np.concatenate(out) if len(out) > 1 else out[0].copy()

    def inject(self, segments: Sequence[HeadSegment]) -> None:
        """DFlash: append each segment's tokens to its sequence as the keys and values its head
        derives from the target's feature rows (`rows`), in passes of at most n_batch rows. On
        failure no sequence keeps any of it."""
        self._check([Segment(seg.seq, seg.tokens) for seg in segments])
        items = [
            (seg.seq, i, row) for seg in segments for i, row in enumerate(seg.rows)
        ]  # (sequence, offset, row), offsets from each sequence's end
        with self._appending(segments) as bases:
            at = {seg.seq: base for seg, base in zip(segments, bases)}
            for start in range(0, len(items), self.n_batch):
                self._process_embd([(seq, at[seq] + i, row) for seq, i, row in items[start : start + self.n_batch]])

    def block(self, blocks: Sequence[tuple[int, Sequence[int]]]) -> list[np.ndarray]:
        """DFlash: one pass over each (sequence, tokens) block placed after what its sequence
        holds, every row an output; per block its logits (rows, n_vocab), or for a DFlash2 head its
        selector's rows (rows, n_embd: each position's candidates and their transition scores).
        Nothing is kept: the blocks' cells are dropped again after the pass."""
        lattice = bool(self.model.feature_head.selector_top_k)
        self._check([Segment(seq, tokens) for seq, tokens in blocks])
        lib = _llama()
        entries = _ExtBatch(self, "a DFlash block")
        firsts = []
        for seq, tokens in blocks:
            base = len(self.tokens[seq])
            for i, token in enumerate(tokens):  # the selector's rows come for every entry; logits only if asked
                entries.add(seq, base + i, token=token, output=not lattice)
            firsts.append(base)
        try:
            total = sum(len(t) for _, t in blocks)
            entries.run(lib.LLAMA_PROCESS_TYPE_DECODE)
            if lattice:
                rows = float_view(_llama_ext().llama_get_embeddings_nextn(self.ptr), (total, self.model.n_embd))
            else:
                rows = float_view(lib.llama_get_logits_ith(self.ptr, 0), (total, self.model.n_vocab))
            out, at = [], 0
            for _, tokens in blocks:
                out.append(rows[at : at + len(tokens)].copy())
                at += len(tokens)
            return out
        finally:
            for (seq, _), first in zip(blocks, firsts):
                lib.llama_memory_seq_rm(self.memory, seq, first, -1)

    def _process_embd(self, items, *, encode: bool = False) -> None:
        """One llama_process over (sequence, position, row) entries that carry a row and no token
        (the encoder's rows are what it returns)."""
        lib = _llama()
        entries = _ExtBatch(self, "a draft head's batch")
        for seq, pos, row in items:
            entries.add(seq, pos, row=row, output=encode)
        entries.run(lib.LLAMA_PROCESS_TYPE_ENCODE if encode else lib.LLAMA_PROCESS_TYPE_DECODE)

    def _appending(self, segments) -> _Appending:
        """The passes inside append each segment's tokens to its sequence (entering gives where
        each starts): all of them when they succeed, none of them when one fails."""
        return _Appending(self, segments)

    def select_head(self, index: int) -> None:
        """Which of the model's MTP blocks the next head passes run (0: the first): a model
        whose blocks are trained one per draft depth is drafted block by block."""
        if self._head_batch is None:
            raise ValueError("select_head needs a context made with head=True")
        _llama_ext().llama_set_nextn_layer_offset(self.ptr, int(index))

    def _head_pass(self, segments, bases, entries, out) -> None:
        """One head pass over (segment, entry) pairs; each segment that asked for it gets the
        logits and hidden row of its last entry."""
        items, wanted = [], []
        for index, i in entries:
            seg = segments[index]
            last = seg.last and i == len(seg.tokens) - 1
            items.append((seg.seq, bases[index] + i, seg.tokens[i], seg.rows[i], last))
            if last:
                wanted.append(index)
        for index, result in zip(wanted, self._process_head(items)):
            out[index] = result

    def _process_head(self, items) -> list[tuple[np.ndarray, np.ndarray]]:
        """One llama_process through llama_batch_ext, which carries a hidden row with every
        token: (sequence, position, token, row, output) items; the logits and hidden row of
        each item marked as an output, in order."""
        lib, ext = _llama(), _llama_ext()
        width = self.model.n_embd_out
        # EAGLE-3's graph keeps every row to its end, and llama.cpp reads a pass's outputs from the
        # first rows: a pass that returns any row makes every row an output, so each lands in place.
        # Many rows read only to catch up go in a pass of their own first, without outputs, so
        # llama.cpp does not copy out a vocabulary's logits for each.
        every = self.model.feature_head is not None and any(item[4] for item in items)
        if every and sum(not item[4] for item in items) > QUIET_ROWS:
            self._process_head([item for item in items if not item[4]])
            items = [item for item in items if item[4]]
        entries = _ExtBatch(self, "a multi-token-prediction batch", "the multi-token-prediction head")
        ats = [
            entries.add(seq, pos, token=token, row=row, output=output or every)
            for seq, pos, token, row, output in items
        ]
        outputs = [at for at, item in zip(ats, items) if item[4]]
        entries.run(lib.LLAMA_PROCESS_TYPE_DECODE)
        if self.pins:
            for seq, pos, _, _, _ in items:
                self._pin_leaving(seq, pos + 1)
        return [
            (
                float_view(lib.llama_get_logits_ith(self.ptr, at), (self.model.n_vocab,)).copy(),
                float_view(ext.llama_get_embeddings_nextn_ith(self.ptr, at), (width,)).copy(),
            )
            for at in outputs
        ]

    # -- rewinding ---------------------------------------------------------------------------

    def trim(self, seq: int, n_keep: int) -> None:
        """Drop every cached position of `seq` from n_keep on (rejected draft tokens, diverged
        history); see the class docstring for how each kind of cache does it."""
        if n_keep < 0:
            raise ValueError(f"cannot keep {n_keep} cached tokens")
        if n_keep >= len(self.tokens[seq]):
            return
        if self._cuts_in_place(seq, n_keep):
            if not _llama().llama_memory_seq_rm(self.memory, seq, n_keep, -1):
                raise SpecrunError(
                    "llama.cpp could not trim its KV cache", "this model's cache type cannot rewind; use --spec off"
                )
            self._unpin(seq, n_keep)
            del self.tokens[seq][n_keep:]
            self._last_call[seq] = 0  # a snapshot undoes once
            return
        self._rewind_from_checkpoint(seq, n_keep)

    def _cuts_in_place(self, seq: int, n_keep: int) -> bool:
        """Whether the tail of `seq` from n_keep on can be taken off where it lies: positions, or
        a recurrent cut within the snapshots of the last decode call."""
        cut = len(self.tokens[seq]) - n_keep
        return self.rewind == "positions" or (
            self.rewind == "snapshots" and cut <= min(self.snapshots, self._last_call[seq] - 1)
        )

    def keepable(self, seq: int, n_keep: int) -> int:
        """How many of the first `n_keep` tokens of `seq` a trim to `n_keep` keeps without decoding
        them again: all where the cache cuts in place, else those before the checkpoint it goes
        back to (trim decodes the rest again)."""
        held = len(self.tokens[seq])
        if n_keep >= held:
            return held
        if self._cuts_in_place(seq, n_keep):
            return n_keep
        saved = self._checkpoints[seq]
        if saved is not None and saved[0] <= n_keep:
            return saved[0]
        return 0

    def checkpoint(self, seq: int) -> None:
        """Keep what a recurrent cache of `seq` holds now, to come back to (a chat's next turn, a
        draft's rejected tokens). Positions need none."""
        if self.rewind == "positions" or not self.tokens[seq]:
            return
        lib = _llama()
        flags = lib.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
        size = lib.llama_state_seq_get_size_ext(self.ptr, seq, flags)
        buf = (ctypes.c_uint8 * size)()
        if lib.llama_state_seq_get_data_ext(self.ptr, buf, size, seq, flags) == size:
            self._checkpoints[seq] = (len(self.tokens[seq]), bytes(buf))

    def _rewind_from_checkpoint(self, seq: int, n_keep: int) -> None:
        """Back to the latest checkpoint at or before n_keep (or to nothing), then the tokens after it again."""
        lib = _llama()
        tokens = self.tokens[seq][:n_keep]
        saved = self._checkpoints[seq]
        at = 0
        if saved is not None and saved[0] <= n_keep and self.tokens[seq][: saved[0]] == tokens[: saved[0]]:
            data = saved[1]
            buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
            if lib.llama_state_seq_set_data_ext(
                self.ptr, buf, len(data), seq, lib.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
            ) == len(data):
                lib.llama_memory_seq_rm(self.memory, seq, saved[0], -1)
                self._unpin(seq, 0)
                self._pin_leaving(seq, saved[0])
                at = saved[0]
        if at == 0:
            lib.llama_memory_seq_rm(self.memory, seq, -1, -1)
            self._unpin(seq, 0)
            self._checkpoints[seq] = None
        self.tokens[seq] = tokens[:at]
        self._last_call[seq] = 0
        if at < n_keep:
            self.feed(seq, tokens[at:], "none")

    # -- saving and restoring ------------------------------------------------------------------

    @property
    def cuts_restored(self) -> bool:
        """Whether a restored cache may be cut back like any other: positions whose sequences hold
        every cell they wrote. A recurrent state is only right at the position it was saved at,
        and a sliding window's cells that left it are held by the pin, not saved with the sequence."""
        return self.rewind == "positions" and not self.pins

    def save(self, seq: int) -> np.ndarray | None:
        """The cache of `seq` as llama.cpp serialises it (the tokens it holds are `tokens[seq]`),
        or None when it holds nothing or llama.cpp cannot write it."""
        if not self.tokens[seq]:
            return None
        lib = _llama()
        size = lib.llama_state_seq_get_size(self.ptr, seq)
        if not size:
            return None
        data = np.empty(size, dtype=np.uint8)
        written = lib.llama_state_seq_get_data(self.ptr, data.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)), size, seq)
        return data if written == size else None

    def load(self, seq: int, tokens: Sequence[int], data: np.ndarray) -> bool:
        """Replace the cache of `seq` by a saved one holding `tokens`. False when llama.cpp refuses
        it (another model's state, too few free cells): the sequence is then left empty."""
        self.clear(seq)
        lib = _llama()
        read = lib.llama_state_seq_set_data(
            self.ptr, data.ctypes.data_as(ctypes.POINTER(ctypes.c_uint8)), len(data), seq
        )
        if read != len(data):
            self.clear(seq)
            return False
        self.tokens[seq] = list(tokens)
        self._pin_leaving(seq, len(tokens))
        self.checkpoint(seq)  # a recurrent state to come back to when a draft of the next request is cut
        return True

    def clear(self, seq: int | None = None) -> None:
        """Forget one sequence entirely (its cells return to the pool), or every sequence. Also right
        after a decode torn down halfway, when the cache may hold positions the mirror does not know."""
        if seq is None:
            _llama().llama_memory_clear(self.memory, True)
            for tokens in self.tokens:
                tokens.clear()
            self._checkpoints = [None] * self.n_seq
            self._last_call = [0] * self.n_seq
            self._pinned = [0] * self.n_seq
            return
        _llama().llama_memory_seq_rm(self.memory, seq, -1, -1)
        self._unpin(seq, 0)
        self.tokens[seq].clear()
        self._checkpoints[seq] = None
        self._last_call[seq] = 0

    def _pin_leaving(self, seq: int, length: int) -> None:
        """Once `seq` holds `length` positions, pin every cell it holds if some unpinned one has left
        its window (llama.cpp may then hand it out at the next pass). Pinning when the window moves
        on, not at every pass, costs one walk over the cells every window's worth of tokens."""
        if not self.pins:
            return
        n_swa = self.model.n_swa
        left = (length // n_swa) * n_swa - 1 if self.model.swa_chunked else length - n_swa  # highest position out
        if left >= self._pinned[seq]:
            self._lib.llama_memory_seq_cp(self.memory, seq, seq + self.pins, self._pinned[seq], -1)
            self._pinned[seq] = length

    def _unpin(self, seq: int, start: int) -> None:
        """Let go of the pin sequence's hold on the cells of `seq` from `start` on, as the sequence's own is dropped."""
        if self.pins:
            self._lib.llama_memory_seq_rm(self.memory, seq + self.pins, start, -1)
            self._pinned[seq] = min(self._pinned[seq], start)

    # -- lifetime ----------------------------------------------------------------------------

    def close(self) -> None:
        if getattr(self, "_head_batch", None):
            _llama().llama_batch_ext_free(self._head_batch)
            self._head_batch = None
        if getattr(self, "ptr", None):
            _llama().llama_free(self.ptr)
            self.ptr = None
        chains = getattr(self, "_chains", {})
        for chain in chains.values():  # after the context, which holds them to the end
            _llama().llama_sampler_free(chain)
        chains.clear()


class _Appending:
    """Context._appending's guard; a class, since a generator-based one adds cold code to every
    draft pass."""

    __slots__ = ("ctx", "segments", "bases")

    def __init__(self, ctx: Context, segments):
        self.ctx, self.segments = ctx, segments
        self.bases = [len(ctx.tokens[seg.seq]) for seg in segments]

    def __enter__(self) -> list[int]:
        return self.bases

    def __exit__(self, kind, error, trace) -> bool:
        tokens = self.ctx.tokens
        if kind is None:
            for seg in self.segments:
                tokens[seg.seq].extend(seg.tokens)
        else:
            for seg, base in zip(self.segments, self.bases):
                self.ctx._lib.llama_memory_seq_rm(self.ctx.memory, seg.seq, base, -1)
                self.ctx._unpin(seg.seq, base)
        return False


class _FloatBlock:
    """Describes a block of C floats (or int32s) to numpy (its array interface), so that a view
    costs one small dict; np.ctypeslib.as_array builds a ctypes array type for every call, which
    is slow once a pass has flushed the CPU's caches."""

    __slots__ = ("__array_interface__",)

    def __init__(self, address: int, shape: tuple[int, ...], typestr: str = "<f4", row_stride: int | None = None):
        self.__array_interface__ = {"data": (address, False), "shape": shape, "typestr": typestr, "version": 3}
        if row_stride is not None and len(shape) == 2:
            self.__array_interface__["strides"] = (row_stride, 4)


_HEAD_FIX = "raise --ctx-size or use another --spec mode; SPECRUN_DEBUG=1 shows details"


class _ExtBatch:
    """One llama_process through a head context's llama_batch_ext: entries of a token, a row, or
    both, each at its position; the rows are kept alive until the pass has read them. `what` names
    the batch in a refusal, `who` the head in a failed pass."""

    def __init__(self, ctx: Context, what: str, who: str = "the draft head"):
        self.ctx, self.what, self.who = ctx, what, who
        self.lib = _llama()
        self.batch = ctx._head_batch
        self.lib.llama_batch_ext_clear(self.batch)
        self.position = (self.lib.llama_pos * 1)()
        self.kept: list[np.ndarray] = []  # C reads the rows when the batch is processed
        self.n = 0

    def add(self, seq: int, pos: int, *, token: int | None = None, row=None, output: bool = False) -> int:
        """Append an entry; its index in the batch."""
        lib, batch = self.lib, self.batch
        embd = None
        if row is not None:
            row = np.ascontiguousarray(row, dtype=np.float32)
            self.kept.append(row)
            embd = lib.llama_embd(row.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, row.size)
        if token is not None:
            at = lib.llama_batch_ext_add_token(batch, seq, int(token))
        else:
            at = lib.llama_batch_ext_add_embd(batch, seq, embd)
        self.position[0] = pos
        if (
            at < 0
            or not lib.llama_batch_ext_set_pos(batch, at, self.position)
            or (token is not None and embd is not None and not lib.llama_batch_ext_set_embd_token(batch, at, embd))
        ):
            raise SpecrunError(f"llama.cpp refused an entry of {self.what}", _HEAD_FIX)
        if output:  # a row's output: its logits, or an encoder's row
            lib.llama_batch_ext_set_output_logits(batch, at, True)
        self.n += 1
        return at

    def run(self, kind: int) -> None:
        ctx = self.ctx
        start_time = time.perf_counter()
        status = self.lib.llama_process(ctx.ptr, kind, self.batch)
        ctx.decode_seconds += time.perf_counter() - start_time
        if status != 0:
            raise SpecrunError(f"{self.who} failed with status {status} on {self.n} entries", _HEAD_FIX)


QUIET_ROWS = 8  # an EAGLE-3 pass with more rows than this that return nothing reads them in a pass of their own


def _check_count(count: int, k: int) -> None:
    """A shortlisted row holds the k candidates its sequence's cut keeps, or it is misread."""
    if count != k:
        raise SpecrunError(f"llama.cpp returned {count} candidates for a row, not {k}", "SPECRUN_DEBUG=1 shows details")


def address_function(name: str, argtypes: list, restype=ctypes.c_void_p):
    """llama.cpp's function `name` returning a plain int (an address, or a count by `restype`):
    the binding's own returns a ctypes pointer object, which costs a cast on every pass."""
    lib = _llama()
    handle = getattr(getattr(lib, "llama_cpp", None), "_lib", None)
    if handle is None:
        binding = getattr(lib, name)
        if restype is not ctypes.c_void_p:
            return binding
        return lambda *args: ctypes.cast(binding(*args), ctypes.c_void_p).value
    function = handle[name]
    function.argtypes, function.restype = argtypes, restype
    return function


def float_view(pointer, shape: tuple[int, ...], typestr: str = "<f4", row_stride: int | None = None) -> np.ndarray:
    """A numpy view of the C floats (or, by `typestr`, int32s) at `pointer` (a ctypes pointer
    llama.cpp returned, or its address), rows `row_stride` bytes apart when given, valid as long
    as llama.cpp keeps that buffer."""
    address = pointer if isinstance(pointer, int) else ctypes.cast(pointer, ctypes.c_void_p).value
    if not address:
        raise SpecrunError("llama.cpp returned no output for this pass", "SPECRUN_DEBUG=1 shows details")
    return np.asarray(_FloatBlock(address, shape, typestr, row_stride))


def _joined(blocks: list) -> np.ndarray | Shortlist:
    """One segment's rows from the passes it took, in order."""
    if len(blocks) == 1:
        return blocks[0]
    if isinstance(blocks[0], Shortlist):
        return Shortlist(np.concatenate([b.ids for b in blocks]), np.concatenate([b.logits for b in blocks]))
    return np.concatenate(blocks)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading items a and b share. Two lists are compared in slices, which Python
    compares in C: a drafter asks every step how much of a history its cache holds, and the answer
    is all of it but the last few tokens, which item by item costs time in proportion to the history."""
    n = min(len(a), len(b))
    start = 0
    if type(a) is list and type(b) is list:
        if a[:n] == b[:n]:
            return n
        tail = max(0, n - 64)
        if a[:tail] == b[:tail]:
            start = tail
    for i in range(start, n):
        if a[i] != b[i]:
            return i
    return n
