"""Whether a context computes attention with llama.cpp's fused (flash) kernel or as two matrix
products with the scores in between.

On a GPU the fused kernel is the fast path, and llama.cpp's own automatic choice. On a CPU the
fused kernel works one query row at a time against every cached key, while the unfused path
multiplies the keys by all of a pass's query rows at once: a pass of several rows deep into a long
context (a verification batch, the few new tokens of an agent's next turn) runs two to three times
faster unfused, and a single row no slower. But the unfused path scores every cell below the
highest one in use, while the fused kernel skips the cells its mask hides: where several sequences
share the cache, a pass of one would score all the others' cached prompts too. And it reserves a
score buffer of cells × batch rows × heads floats up front. So a context of one sequence whose
layers all stay on the CPU runs unfused while that buffer fits a share of the memory; any other
keeps llama.cpp's choice. `--flash-attn on|off` overrides both.
"""

from __future__ import annotations

from dataclasses import dataclass

MODES = ("auto", "on", "off")
SCORE_MEMORY_SHARE = 8  # the score buffer may take at most 1/this of the memory available
SCORE_BYTES_FALLBACK = 1 << 30  # its budget where the memory available is unknown
FLOAT_BYTES = 4


@dataclass(frozen=True)
class AttentionChoice:
    """Fused attention on (True), off (False) or llama.cpp's automatic choice (None), and why."""

    fused: bool | None
    reason: str

    @property
    def label(self) -> str:
        return {True: "on", False: "off", None: "auto"}[self.fused]


def score_bytes(n_cells: int, n_batch: int, n_head: int) -> int:
    """Bytes of the score buffer an unfused context reserves: one float per cell, row and head."""
    return n_cells * n_batch * n_head * FLOAT_BYTES


def choose_attention(
    mode: str, *, offloaded: bool, sequences: int, n_cells: int, n_batch: int, n_head: int, memory: int | None
) -> AttentionChoice:
    """How a context of `sequences` sequences in `n_cells` cells and `n_batch`-row passes over a model
    of `n_head` query heads computes attention under `mode` ("auto", "on", "off"); `memory`: bytes
    available (None: unknown)."""
    if mode not in MODES:
        raise ValueError(f"flash attention mode must be one of {', '.join(MODES)}, not {mode!r}")
    if mode == "on":
        return AttentionChoice(True, "--flash-attn on")
    if mode == "off":
        return AttentionChoice(False, "--flash-attn off")
    if offloaded:
        return AttentionChoice(None, "layers offloaded: llama.cpp's choice")
    if sequences > 1:
        return AttentionChoice(None, "sequences share the cache: llama.cpp's choice")
    budget = memory // SCORE_MEMORY_SHARE if memory else SCORE_BYTES_FALLBACK
    needed = score_bytes(n_cells, n_batch, n_head)
    if needed > budget:
        return AttentionChoice(
            None, f"unfused scores would take {needed >> 20} MiB, over {budget >> 20} MiB: llama.cpp's choice"
        )
    return AttentionChoice(False, "on the CPU: unfused attention is faster at depth")
