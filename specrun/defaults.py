"""Every default value, in one place, so the engine, the CLI and the docs cannot drift apart."""

from __future__ import annotations

import os

MAX_TOKENS = 256
CHAT_MAX_TOKENS = 1024  # a chat answer may be long; the context policy keeps room for it
TEMPERATURE = 0.8  # llama.cpp's default
TOP_K = 40
TOP_P = 0.95
MIN_P = 0.05
SPEC_MODE = "auto"  # off | draft | ngram | hybrid | auto
DRAFT_MAX = 4  # K: draft tokens verified per step (a starting point and floor of the cap under auto)
AUTO_K_MAX = 31  # the most draft tokens auto may verify in one step (a batch of 32)
DRAFT_MIN = 0
DRAFT_P_MIN = 0.0  # stop drafting when the draft's top probability falls below this
NGRAM_MIN = 1  # prompt lookup matches the history's last NGRAM_MIN..NGRAM_MAX tokens
NGRAM_MAX = 8
CTX_SIZE = 4096
N_BATCH = 512  # prompt tokens decoded per llama_decode call


def threads() -> int:
    """Physical cores are what llama.cpp scales with; os.cpu_count is the best portable guess."""
    return max(1, os.cpu_count() or 1)
