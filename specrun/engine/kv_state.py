"""What a context's KV cache holds over time: cutting a sequence's tail (rewind), checkpoints of
recurrent states, saving and restoring a sequence's cache, clearing, and the pins that keep a
sliding window's cells.

A mixin of Context (llama.py), apart from its decoding; see Context's docstring for how each kind
of cache rewinds.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import numpy as np

from ..errors import SpecrunError
from .host_memory import host_bytes
from .lib import _llama


class KVCacheState:
    """Context's rewinding, checkpoints, save and load, clear and pins, over the `tokens` mirror
    and `memory` its __init__ sets up."""

    @property
    def max_rewind(self) -> int | None:
        """The most tokens a step's verification may take back exactly (None: any)."""
        return None if self.rewind == "positions" else self.snapshots

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
        data = host_bytes(size)
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
