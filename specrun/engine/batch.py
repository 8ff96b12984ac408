"""Several sequences in one llama.cpp context, decoded together: one llama_batch per step for all.

A server decodes its requests side by side. Each request is a sequence id in one context whose KV
cache is unified (one pool of cells shared by every sequence), so llama.cpp computes a batch in one
pass whatever its mix of sequences and lengths; a per-sequence cache would split it by sequence.
Each sequence's cached tokens are mirrored in Python, as Context mirrors its one sequence, so a
prefix is reused and rejected draft tokens are trimmed per sequence.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..errors import ContextOverflowError, SpecrunError
from .llama import Model, OwnsContext, _llama, common_prefix


class CacheFullError(SpecrunError):
    """The shared pool of KV cells cannot hold a batch: free the cache of an idle sequence first."""


@dataclass(frozen=True)
class Segment:
    """One sequence's share of a batch: tokens appended at its end, and which rows return logits
    ("all", "last" or "none")."""

    seq: int
    tokens: Sequence[int]
    logits: str = "all"


class SharedContext(OwnsContext):
    """One context holding `n_seq` sequences of up to `n_ctx_seq` tokens each, in a pool of
    `n_seq_pool` sequences' worth of cells (default: all of them).

    `tokens[seq]` mirrors the cache of each sequence exactly: decode appends, trim drops a tail.
    """

    def __init__(self, model: Model, *, n_seq: int, n_ctx_seq: int, n_threads: int, n_batch: int = 512,
                 n_seq_pool: int | None = None):
        lib = _llama()
        self.model = model
        params = lib.llama_context_default_params()
        params.n_ctx = n_ctx_seq * (n_seq_pool or n_seq)
        params.n_batch = n_batch
        params.n_ubatch = n_batch
        params.n_seq_max = n_seq
        params.kv_unified = True
        params.n_threads = n_threads
        params.n_threads_batch = n_threads
        params.no_perf = True
        self._params = params
        self.ptr = lib.llama_init_from_model(model.ptr, params)
        if not self.ptr:
            raise SpecrunError(f"llama.cpp could not create a context of {params.n_ctx} tokens for {n_seq} sequences",
                               "lower --ctx-size or --parallel")
        self.n_ctx = lib.llama_n_ctx(self.ptr)
        self.n_ctx_seq = n_ctx_seq
        self.n_seq = n_seq
        self.n_batch = n_batch
        self.memory = lib.llama_get_memory(self.ptr)
        self.batch = lib.llama_batch_init(n_batch, 0, 1)
        self.tokens: list[list[int]] = [[] for _ in range(n_seq)]
        self.decode_seconds = 0.0

    def used(self) -> int:
        """Cells holding a token of some sequence."""
        return sum(len(t) for t in self.tokens)

    def free(self) -> int:
        return self.n_ctx - self.used()

    def decode(self, segments: Sequence[Segment]) -> list[np.ndarray | None]:
        """Append every segment's tokens to its sequence in as few passes as n_batch allows (one,
        for a step's verification batch); return, per segment, its logits: shape (n, n_vocab) for
        "all", (n_vocab,) for "last", None for "none". On failure no sequence keeps any of it."""
        self._check(segments)
        rows: list[tuple[int, int, int, bool]] = []  # (segment, token, position, wants logits)
        for index, seg in enumerate(segments):
            base = len(self.tokens[seg.seq])
            last = len(seg.tokens) - 1
            for i, token in enumerate(seg.tokens):
                wanted = seg.logits == "all" or (seg.logits == "last" and i == last)
                rows.append((index, token, base + i, wanted))
        out: list[list[np.ndarray]] = [[] for _ in segments]
        bases = {seg.seq: len(self.tokens[seg.seq]) for seg in segments}
        try:
            for start in range(0, len(rows), self.n_batch):
                chunk = rows[start : start + self.n_batch]
                self._decode_chunk(chunk, segments)
                self._collect(chunk, out)
        except BaseException:
            self._rollback(bases)
            raise
        for seg in segments:
            self.tokens[seg.seq].extend(seg.tokens)
        return [None if seg.logits == "none" else (rows_[0] if seg.logits == "last" else np.stack(rows_))
                for seg, rows_ in zip(segments, out)]

    def _check(self, segments: Sequence[Segment]) -> None:
        seen: set[int] = set()
        added = 0
        for seg in segments:
            if not seg.tokens:
                raise ValueError("a segment needs at least one token")
            if seg.seq in seen or not 0 <= seg.seq < self.n_seq:
                raise ValueError(f"sequence {seg.seq} is repeated or out of range")
            seen.add(seg.seq)
            size = len(self.tokens[seg.seq]) + len(seg.tokens)
            if size > self.n_ctx_seq:
                raise ContextOverflowError(f"{size} tokens do not fit in a sequence of {self.n_ctx_seq}",
                                           "raise --ctx-size or shorten the prompt")
            added += len(seg.tokens)
        if added > self.free():
            raise CacheFullError(f"{added} tokens do not fit in the {self.free()} free cells of the shared cache",
                                 "lower --parallel or raise --ctx-size")

    def _decode_chunk(self, chunk: Sequence[tuple[int, int, int, bool]], segments: Sequence[Segment]) -> None:
        lib = _llama()
        batch = self.batch
        batch.n_tokens = len(chunk)
        for i, (index, token, pos, wanted) in enumerate(chunk):
            batch.token[i] = token
            batch.pos[i] = pos
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = segments[index].seq
            batch.logits[i] = 1 if wanted else 0
        start = time.perf_counter()
        status = lib.llama_decode(self.ptr, batch)
        self.decode_seconds += time.perf_counter() - start
        if status != 0:
            raise SpecrunError(f"llama_decode failed with status {status} on a batch of {len(chunk)} tokens",
                               "lower --parallel or raise --ctx-size; SPECRUN_DEBUG=1 shows details")

    def _collect(self, chunk: Sequence[tuple[int, int, int, bool]], out: list[list[np.ndarray]]) -> None:
        wanted = [index for index, _, _, w in chunk if w]
        if not wanted:
            return
        pointer = _llama().llama_get_logits(self.ptr)
        view = np.ctypeslib.as_array(pointer, shape=(len(wanted), self.model.n_vocab))
        for row, index in enumerate(wanted):
            out[index].append(view[row].copy())

    def _rollback(self, bases: dict[int, int]) -> None:
        """Drop whatever a failed decode left in the cache, so it holds exactly what `tokens` says."""
        for seq, base in bases.items():
            _llama().llama_memory_seq_rm(self.memory, seq, base, -1)

    def trim(self, seq: int, n_keep: int) -> None:
        """Drop every cached position of `seq` from n_keep on."""
        if n_keep < 0:
            raise ValueError(f"cannot keep {n_keep} cached tokens")
        if n_keep >= len(self.tokens[seq]):
            return
        if not _llama().llama_memory_seq_rm(self.memory, seq, n_keep, -1):
            raise SpecrunError("llama.cpp could not trim its KV cache", "this model's cache type cannot rewind; use --spec off")
        del self.tokens[seq][n_keep:]

    def clear(self, seq: int) -> None:
        """Forget one sequence entirely (its cells return to the pool)."""
        _llama().llama_memory_seq_rm(self.memory, seq, -1, -1)
        self.tokens[seq].clear()

    def common_prefix(self, seq: int, history: Sequence[int]) -> int:
        return common_prefix(self.tokens[seq], history)

    def view(self, seq: int) -> "SequenceView":
        return SequenceView(self, seq)



class SequenceView:
    """One sequence of a SharedContext behind Context's single-sequence interface (decode, trim,
    clear, tokens, n_ctx), so code written for a Context (cost measurement, identity checks, a
    draft model catching up) runs on it unchanged."""

    def __init__(self, shared: SharedContext, seq: int):
        self.shared = shared
        self.seq = seq
        self.model = shared.model
        self.n_ctx = shared.n_ctx_seq
        self.n_batch = shared.n_batch

    @property
    def tokens(self) -> list[int]:
        return self.shared.tokens[self.seq]

    @property
    def decode_seconds(self) -> float:
        return self.shared.decode_seconds

    def decode(self, tokens: Sequence[int], logits: str = "last") -> np.ndarray | None:
        if not tokens:
            raise ValueError("decode needs at least one token")
        return self.shared.decode([Segment(self.seq, list(tokens), logits)])[0]

    def trim(self, n_keep: int) -> None:
        self.shared.trim(self.seq, n_keep)

    def clear(self) -> None:
        self.shared.clear(self.seq)

    def common_prefix(self, history: Sequence[int]) -> int:
        return self.shared.common_prefix(self.seq, history)
