"""A thin wrapper over llama_cpp's C API: load, decode a batch with chosen logits, trim the KV cache.

Only what the speculative loop needs, with every ctypes object kept referenced by its owner (C keeps
pointers into them). Logits come back as numpy arrays copied out of llama.cpp's buffer, because the
next decode overwrites that buffer.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from ..errors import ContextOverflowError, ModelFileError, SpecrunError

_LOG_CALLBACK = None  # module-level reference: llama.cpp keeps the pointer
_BACKEND_READY = False


def _llama():
    """Import llama_cpp lazily, so `specrun --help` and pure code never pay for loading the library."""
    import llama_cpp

    return llama_cpp


def init_backend() -> None:
    """Initialise llama.cpp once and route its log output to our stderr only in debug mode."""
    global _BACKEND_READY, _LOG_CALLBACK
    if _BACKEND_READY:
        return
    lib = _llama()
    debug = bool(os.environ.get("SPECRUN_DEBUG"))

    def _log(level, text, user_data):  # noqa: ARG001 - C signature
        if debug and text:
            sys.stderr.write(text.decode("utf-8", "replace"))

    _LOG_CALLBACK = lib.llama_log_callback(_log)
    lib.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p(0))
    lib.llama_backend_init()
    _BACKEND_READY = True


def version() -> str:
    """llama-cpp-python's version (it pins the llama.cpp it builds)."""
    return str(_llama().__version__)


def system_info() -> str:
    """llama.cpp's build description (CPU features, backends)."""
    return _llama().llama_print_system_info().decode("utf-8", "replace")


def has_amx() -> bool:
    """True when the loaded llama.cpp was built with AMX, whose matmul path segfaults on some CPUs."""
    return "AMX_INT8 = 1" in system_info()


def supports_gpu_offload() -> bool:
    """A GPU is present to offload layers to (llama.cpp's own check also says yes for RPC builds)."""
    from .devices import has_gpu

    return has_gpu()


AMX_WARNING = (
    "warning: this llama-cpp-python build uses AMX, which crashes on some CPUs; loading models "
    "without extra buffer types instead (slower). Rebuild without AMX: "
    "CFLAGS='-mno-amx-tile -mno-amx-int8 -mno-amx-bf16' CXXFLAGS=\"$CFLAGS\" "
    "pip install --no-cache-dir --force-reinstall llama-cpp-python"
)


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
            "the file may be damaged or of an architecture this llama.cpp build does not know; SPECRUN_DEBUG=1 shows its log",
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
        )
    finally:
        lib.llama_model_free(model)


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

    def load_mode(self) -> int:
        """llama.cpp's load mode for mmap/mlock; mapping stays llama.cpp's automatic choice by default."""
        lib = _llama()
        if self.mmap:
            return lib.LLAMA_LOAD_MODE_MMAP_MLOCK if self.mlock else lib.LLAMA_LOAD_MODE_AUTO
        return lib.LLAMA_LOAD_MODE_MLOCK if self.mlock else lib.LLAMA_LOAD_MODE_NONE


class Model:
    """A loaded GGUF model and its vocabulary."""

    def __init__(self, path: Path | str, options: LoadOptions = LoadOptions()):
        init_backend()
        lib = _llama()
        self.path = Path(path)
        params = lib.llama_model_default_params()
        params.n_gpu_layers = options.gpu_layers
        params.use_extra_bufts = options.use_extra_bufts
        params.load_mode = options.load_mode()
        if options.devices is not None:  # NULL-terminated; C reads it while loading, so it is kept here
            self._devices = (ctypes.c_void_p * (len(options.devices) + 1))(*options.devices, None)
            params.devices = ctypes.cast(self._devices, ctypes.c_void_p)
        if options.tensor_split:
            self._split = (ctypes.c_float * max(lib.llama_max_devices(), len(options.tensor_split)))(*options.tensor_split)
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

    def is_eog(self, token: int) -> bool:
        """Any end-of-generation token of the vocabulary (EOS, EOT, <|im_end|>, …)."""
        return bool(_llama().llama_vocab_is_eog(self.vocab, token))

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        """Text → token ids; `parse_special` lets chat-template markers become control tokens."""
        lib = _llama()
        data = text.encode("utf-8")
        capacity = len(data) + 16
        buf = (lib.llama_token * capacity)()
        n = lib.llama_tokenize(self.vocab, data, len(data), buf, capacity, add_special, parse_special)
        if n < 0:
            capacity = -n
            buf = (lib.llama_token * capacity)()
            n = lib.llama_tokenize(self.vocab, data, len(data), buf, capacity, add_special, parse_special)
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        """The bytes a token stands for (control tokens render as nothing)."""
        lib = _llama()
        buf = ctypes.create_string_buffer(64)
        n = lib.llama_token_to_piece(self.vocab, token, buf, 64, 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = lib.llama_token_to_piece(self.vocab, token, buf, -n, 0, False)
        return buf.raw[:n]

    def chat_template(self) -> str | None:
        raw = _llama().llama_model_chat_template(self.ptr, None)
        return raw.decode("utf-8", "replace") if raw else None

    def apply_chat_template(self, messages: Sequence[dict], add_assistant: bool = True) -> str:
        """Format messages with the template in the GGUF metadata (llama.cpp's built-in template support)."""
        lib = _llama()
        template = _llama().llama_model_chat_template(self.ptr, None)
        if not template:
            raise SpecrunError(f"{self.path.name} has no chat template in its metadata", "use --raw to feed the prompt as is")
        encoded = [(m["role"].encode(), m["content"].encode()) for m in messages]
        array = (lib.llama_chat_message * len(encoded))()
        for slot, (role, content) in zip(array, encoded):
            slot.role, slot.content = role, content
        size = sum(len(r) + len(c) for r, c in encoded) * 2 + 256
        for _ in range(2):
            buf = ctypes.create_string_buffer(size)
            n = lib.llama_chat_apply_template(template, array, len(encoded), add_assistant, buf, size)
            if n < 0:
                raise SpecrunError(
                    f"the chat template of {self.path.name} is not one llama.cpp knows", "use --raw and format the prompt yourself"
                )
            if n <= size:
                return buf.raw[:n].decode("utf-8", "replace")
            size = n + 1
        raise SpecrunError("chat template output kept growing", "use --raw")

    def close(self) -> None:
        if self.ptr:
            _llama().llama_model_free(self.ptr)
            self.ptr = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class OwnsContext:
    """Frees a llama.cpp context (`ptr`) and its batch (`batch`) once, on close or collection."""

    def close(self) -> None:
        lib = _llama()
        if getattr(self, "batch", None) is not None:
            lib.llama_batch_free(self.batch)
            self.batch = None
        if getattr(self, "ptr", None):
            lib.llama_free(self.ptr)
            self.ptr = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class Context(OwnsContext):
    """One inference context (KV cache) on a model, with the tokens it holds tracked in Python.

    `tokens` mirrors the KV cache exactly: decode appends, trim drops a tail. Drafters and the loop use
    it to reuse the longest common prefix instead of re-feeding history.
    """

    def __init__(self, model: Model, *, n_ctx: int, n_threads: int, n_batch: int = 512):
        lib = _llama()
        self.model = model
        params = lib.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = n_batch
        params.n_ubatch = n_batch
        params.n_seq_max = 1
        params.n_threads = n_threads
        params.n_threads_batch = n_threads
        params.no_perf = True
        self._params = params
        self.ptr = lib.llama_init_from_model(model.ptr, params)
        if not self.ptr:
            raise SpecrunError(f"llama.cpp could not create a context of {n_ctx} tokens", "lower --ctx-size")
        self.n_ctx = lib.llama_n_ctx(self.ptr)
        self.n_batch = params.n_batch
        self.memory = lib.llama_get_memory(self.ptr)
        self.batch = lib.llama_batch_init(self.n_batch, 0, 1)
        self.tokens: list[int] = []
        self.decode_seconds = 0.0  # time inside llama_decode, to tell engine overhead from model time

    def decode(self, tokens: Sequence[int], logits: str = "last", *, copy: bool = True) -> np.ndarray | None:
        """Append tokens to the cache; return logits rows ("last": shape (n_vocab,), "all": (n, n_vocab), "none").

        Long inputs are split into n_batch chunks; with "last" only the final chunk asks for logits,
        with "all" every chunk does and the rows are joined. `copy=False` returns a view of
        llama.cpp's own buffer (no copy of K+1 vocabulary-sized rows), valid only until the next
        decode on this context, and only for input that fits one chunk.
        """
        if not copy and len(tokens) > self.n_batch:
            raise ValueError("a view of the logits needs the tokens in one batch")
        if not tokens:
            raise ValueError("decode needs at least one token")
        if len(self.tokens) + len(tokens) > self.n_ctx:
            raise ContextOverflowError(
                f"{len(self.tokens) + len(tokens)} tokens do not fit in the context of {self.n_ctx}",
                "raise --ctx-size or shorten the prompt",
            )
        rows: list[np.ndarray] = []
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start : start + self.n_batch]
            final = start + self.n_batch >= len(tokens)
            mode = logits if final or logits == "all" else "none"
            self._decode_chunk(chunk, mode)
            if mode != "none":
                rows.append(self._logits(len(chunk) if mode == "all" else 1, copy))
        if logits == "none":
            return None
        return rows[0][0] if logits == "last" else rows[0] if len(rows) == 1 else np.concatenate(rows)

    def _decode_chunk(self, chunk: Sequence[int], mode: str) -> None:
        lib = _llama()
        batch = self.batch
        base = len(self.tokens)
        n = len(chunk)
        batch.n_tokens = n
        for i, token in enumerate(chunk):
            batch.token[i] = token
            batch.pos[i] = base + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = 1 if mode == "all" or (mode == "last" and i == n - 1) else 0
        start = time.perf_counter()
        status = lib.llama_decode(self.ptr, batch)
        self.decode_seconds += time.perf_counter() - start
        if status != 0:
            # An aborted decode can leave some of the batch in the cache: drop it, so the cache
            # holds exactly what `tokens` says.
            lib.llama_memory_seq_rm(self.memory, 0, base, -1)
            raise SpecrunError(f"llama_decode failed with status {status}", "raise --ctx-size; SPECRUN_DEBUG=1 shows details")
        self.tokens.extend(chunk)

    def _logits(self, rows: int, copy: bool = True) -> np.ndarray:
        pointer = _llama().llama_get_logits(self.ptr)
        view = np.ctypeslib.as_array(pointer, shape=(rows, self.model.n_vocab))
        return view.copy() if copy else view

    def trim(self, n_keep: int) -> None:
        """Drop every cached position from n_keep on (rejected draft tokens, diverged history)."""
        if n_keep < 0:
            raise ValueError(f"cannot keep {n_keep} cached tokens")
        if n_keep >= len(self.tokens):
            return
        if not _llama().llama_memory_seq_rm(self.memory, 0, n_keep, -1):
            raise SpecrunError("llama.cpp could not trim its KV cache", "this model's cache type cannot rewind; use --draft none")
        del self.tokens[n_keep:]

    def clear(self) -> None:
        """Empty the cache and its mirror at once (after a decode was torn down halfway, when the
        cache may hold positions the mirror does not know of)."""
        _llama().llama_memory_clear(self.memory, True)
        self.tokens.clear()

    def common_prefix(self, history: Sequence[int]) -> int:
        """Length of the longest prefix shared by the cache and `history`."""
        return common_prefix(self.tokens, history)



def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading items a and b share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
