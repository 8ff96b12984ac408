"""The context a server gives each request when no --ctx-size is given: what the target was trained
for, as far as the KV caches of every sequence fit in memory.

Agents open with prompts of 10,000–20,000 tokens (their tools and instructions), so a fixed 4,096
refuses them; the trained context of a 7B model, times the sequences a server holds, may not fit a
laptop's memory. Half of the memory available now, less the weights, is what the caches may take.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .. import defaults
from ..models.modelfile import read_model_header
from ..models.sizes import sizes_from_header

ROUND = 256  # a context is a multiple of this (llama.cpp pads its KV cache to 256 cells)
SMALLEST = 512  # below this a server is of no use to anyone; memory that holds less fails at load


@dataclass(frozen=True)
class ContextChoice:
    """The context chosen, and why (said when the server starts)."""

    n_ctx: int
    trained: int | None  # the target's trained context (None: its file does not say)
    reason: str


def trained_context(path: str | Path) -> int | None:
    """The context the model at `path` was trained for, from its GGUF metadata."""
    meta = read_model_header(path).metadata
    value = meta.get(f"{meta.get('general.architecture', '')}.context_length")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def kv_bytes_per_token(path: str | Path) -> tuple[int, int]:
    """(KV cache bytes one token of context takes in all layers, the weights' bytes) of a model."""
    header = read_model_header(path)
    size = sizes_from_header(header, path)
    return size.kv_bytes_per_token * size.n_layer, size.weight_bytes


def available_memory() -> int | None:
    """Bytes of host memory available now (Linux's MemAvailable, else physical memory); None if unknown."""
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def serve_context(
    target: str | Path, draft: str | Path | None, sequences: int, memory: int | None = None
) -> ContextChoice:
    """The context of each of `sequences` sequences: the target's trained context, at most what
    half of the `memory` left beside the weights holds in KV caches (target's and draft's)."""
    trained = trained_context(target)
    wanted = trained or defaults.CTX_SIZE
    per_token, weights = kv_bytes_per_token(target)
    if draft is not None:
        draft_token, draft_weights = kv_bytes_per_token(draft)
        per_token, weights = per_token + draft_token, weights + draft_weights
    memory = available_memory() if memory is None else memory
    said = f"the model's trained context, {trained}" if trained else f"{wanted} (the model does not say its own)"
    if memory is None or per_token <= 0:
        return ContextChoice(wanted, trained, said)
    fits = max(0, memory - weights) // 2 // (per_token * max(1, sequences))
    fits = max(SMALLEST, fits // ROUND * ROUND)
    if fits >= wanted:
        return ContextChoice(wanted, trained, said)
    return ContextChoice(
        fits,
        trained,
        f"{fits}: what the KV caches of {sequences} sequences fit in half the memory available "
        f"({memory // 2**20} MiB; {said})",
    )
