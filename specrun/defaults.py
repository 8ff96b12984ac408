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
DRAFT_MAX = 4  # K in the fixed modes when neither --draft-max nor the pair says; auto starts from it
AUTO_K_MAX = 31  # auto's default cap on draft tokens per step (a batch of 32); --draft-max lowers it
DRAFT_MIN = 0
DRAFT_P_MIN = 0.0  # stop drafting when the draft's top probability falls below this
NGRAM_MIN = 1  # prompt lookup matches the history's last NGRAM_MIN..NGRAM_MAX tokens
NGRAM_MAX = 8
CTX_SIZE = 4096
BENCH_MAX_TOKENS = 128  # tokens per benchmark run
BENCH_RUNS = 3  # measured repetitions per prompt and configuration
N_BATCH = 512  # prompt tokens decoded per llama_decode call


def draft_max_for(mode: str, explicit: int | None, recommended: int | None = None) -> int | None:
    """--draft-max means the most draft tokens per step in every mode. Given, it is that; otherwise
    the fixed modes use the pair's recommended K (else DRAFT_MAX), and auto gets None: its own
    cap, AUTO_K_MAX, within which it picks K each step."""
    if explicit is not None:
        return explicit
    return None if mode == "auto" else (recommended or DRAFT_MAX)


def threads() -> int:
    """Physical cores are what llama.cpp scales with; os.cpu_count is the best portable guess."""
    return max(1, os.cpu_count() or 1)

# `specrun serve`
SERVE_HOST = "127.0.0.1"  # loopback: reachable from this machine only unless --host says otherwise
SERVE_PORT = 8080  # llama.cpp's server uses the same
SERVE_PARALLEL = 4  # requests decoded together in one batch
SERVE_QUEUE = 64  # requests waiting beyond the busy sequences; more are answered 503
SERVE_SCHEDULE = "srpt"  # srpt (shortest predicted remaining time first, with aging) or fcfs
SERVE_DRAIN_S = 10.0  # on Ctrl-C or SIGTERM, active requests get this long to finish
COMPLETION_MAX_TOKENS = 16  # /v1/completions without max_tokens, as OpenAI's API defaults
