"""A thin wrapper over llama_cpp's C API: the one context type that holds any number of sequences,
decodes a batch of them with chosen logits, and trims each sequence's tail.

Only what the engine needs, with every ctypes object kept referenced by its owner (C keeps pointers
into them). Models are in model.py; a head context's passes in head_passes.py; rewinding, saving
and restoring the cache in kv_state.py.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Sequence

import numpy as np

from ..errors import ContextOverflowError, SpecrunError
from .buffer_views import address_function, float_view
from .head_passes import HeadPasses
from .kv_reuse import KVReuse
from .kv_state import KVCacheState
from .lib import _llama, _llama_ext
from .model import FreedOnCollection, Model
from .segments import Segment
from .shortlist import Shortlist

LLAMA_MAX_SEQ = 256  # sequences one llama.cpp context can name


class CacheFullError(SpecrunError):
    """The shared pool of KV cells cannot hold a batch: free the cache of an idle sequence first."""


class Context(HeadPasses, KVCacheState, KVReuse, FreedOnCollection):
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

    `fused_attention`: llama.cpp's flash-attention kernel on (True), off (False) or its own choice
    (None); see attention.py.
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
        fused_attention: bool | None = None,
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
        # A spare sequence, never a request's, holds a run of cached tokens while the tokens before it are read
        # (kv_reuse.py): for caches of positions only.
        plain = not (model.recurrent or model.n_swa or head or other is not None or model.feature_head is not None)
        self.spare = n_seq if plain and n_seq < LLAMA_MAX_SEQ else None
        params.n_seq_max = n_seq + self.pins + (self.spare is not None)
        params.kv_unified = True
        params.n_threads = n_threads
        params.n_threads_batch = n_threads
        params.no_perf = True
        params.swa_full = True  # a sliding window kept in full: every cut of a kept cache stays exact
        params.n_outputs_max_per_seq = 0  # a shortlisted sequence may verify a whole batch's rows
        # a context on another's cache reads that cache as it is laid out (attention.py chooses)
        self.fused_attention = other.fused_attention if other is not None else fused_attention
        params.flash_attn_type = {
            None: lib.LLAMA_FLASH_ATTN_TYPE_AUTO,
            True: lib.LLAMA_FLASH_ATTN_TYPE_ENABLED,
            False: lib.LLAMA_FLASH_ATTN_TYPE_DISABLED,
        }[self.fused_attention]
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
        self.reused_tokens = 0  # cached tokens kept by moving them (kv_reuse.py), not read again
        self.run_reads = 0  # tokens read to move such runs into place
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
            if feature_head.drafts_blocks:
                lib.llama_set_causal_attn(self.ptr, feature_head.causal)
        self._capturing = False
        self.capture(bool(self.features))
        self._head_batch = lib.llama_batch_ext_init(self.ptr) if head or feature_head is not None else None
        self._shortlists = [0] * n_seq  # each sequence's top-k cut in the graph (0: full rows)
        self._chains: dict[int, object] = {}  # sequence → the chain llama.cpp holds for it now, freed when taken off
        self._batch_arrays(lib)

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

    def _appending(self, segments) -> _Appending:
        """The passes inside append each segment's tokens to its sequence (entering gives where
        each starts): all of them when they succeed, none of them when one fails."""
        return _Appending(self, segments)

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


def _check_count(count: int, k: int) -> None:
    """A shortlisted row holds the k candidates its sequence's cut keeps, or it is misread."""
    if count != k:
        raise SpecrunError(f"llama.cpp returned {count} candidates for a row, not {k}", "SPECRUN_DEBUG=1 shows details")


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
