"""The passes of a draft head's context: MTP and EAGLE-3 decoders fed (token, hidden row) pairs,
EAGLE-3's encoder, DFlash's injected rows and blocks.

A head's batch carries a hidden row with every token (llama.cpp's llama_batch_ext), which the
context's token batches (llama.py) do not; these passes are a mixin of that Context, apart from
its token decoding.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Sequence

import numpy as np

from ..errors import SpecrunError
from .buffer_views import float_view
from .lib import _llama, _llama_ext
from .segments import HeadSegment, Segment


class HeadPasses:
    """Context's passes for a head context (`head=True`, or a model with a `feature_head`); they
    use its batch checks, its `_appending` guard and its pins."""

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


_HEAD_FIX = "raise --ctx-size or use another --spec mode; SPECRUN_DEBUG=1 shows details"


class _ExtBatch:
    """One llama_process through a head context's llama_batch_ext: entries of a token, a row, or
    both, each at its position; the rows are kept alive until the pass has read them. `what` names
    the batch in a refusal, `who` the head in a failed pass."""

    def __init__(self, ctx: HeadPasses, what: str, who: str = "the draft head"):
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
