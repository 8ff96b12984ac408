"""Every default value, in one place, so the engine, the CLI and the docs cannot drift apart."""

from __future__ import annotations

import os
from dataclasses import dataclass

MAX_TOKENS = 256
CHAT_MAX_TOKENS = 1024  # a chat answer may be long; the context policy keeps room for it
TEMPERATURE = 0.8  # llama.cpp's default
TOP_K = 40
TOP_P = 0.95
MIN_P = 0.05
SHORTLIST_MAX = 1024  # top-k up to this is applied in llama.cpp's graph, and the host reads only the survivors
LOOKUP = "ngram"  # the drafters' names, as stats and --json report them
MODEL = "draft"
TEXT = "text"  # a draft model of another vocabulary, drafting through text
MTP = "mtp"  # the target's own multi-token-prediction (nextn) heads, or a Gemma 4 assistant
PREDICTION = "prediction"  # a request's predicted output (OpenAI's `prediction`, `run --predict`)
VALUES = "values"  # a constrained answer's values copied from its prompt, closed as the constraint requires
EAGLE3 = "eagle3"  # an EAGLE-3 head: one decoder layer on three of the target's layer inputs
DFLASH = "dflash"  # a DFlash head: a block of drafts per pass from the target's layer inputs
FEATURE_HEADS = (EAGLE3, DFLASH)  # heads given as the draft that read the target's layer inputs
DRAFT_MODEL_DRAFTERS = (MODEL, TEXT)  # the drafters that run a draft model, one per session
DRAFT_MAX = 4  # K in the fixed modes when neither --draft-max nor the pair says; auto starts from it
RECURRENT_K_MAX = 8  # draft tokens a recurrent or hybrid target can take back: one state snapshot each, per sequence
AUTO_K_MAX = 63  # auto's default cap on draft tokens per step (a batch of 64: a copy drafts far); --draft-max lowers it


@dataclass(frozen=True)
class Mode:
    """A --spec mode: the drafters it drafts with, in order of preference (MODEL: the session's draft
    model, whichever way it drafts; a request's prediction comes first wherever it has one), what
    the session must have for it (a drafter's name; MODEL: any draft model), its default K (None:
    the pair's recommended K, else DRAFT_MAX), and whether auto's controller chooses drafter and K
    every step among all the session's drafters."""

    name: str
    drafters: tuple[str, ...] = ()
    needs: str | None = None
    k_max: int | None = None
    chooses: bool = False


OFF, AUTO = "off", "auto"
MODES = {
    mode.name: mode
    for mode in (
        Mode(OFF),
        Mode("draft", (PREDICTION, MODEL), needs=MODEL),
        Mode("ngram", (PREDICTION, LOOKUP)),
        Mode("hybrid", (PREDICTION, LOOKUP, MODEL), needs=MODEL),
        Mode(TEXT, (PREDICTION, TEXT), needs=TEXT),
        Mode(MTP, (PREDICTION, MTP), needs=MTP),
        Mode(EAGLE3, (PREDICTION, EAGLE3), needs=EAGLE3),
        Mode(DFLASH, (PREDICTION, DFLASH), needs=DFLASH),
        Mode(AUTO, k_max=AUTO_K_MAX, chooses=True),
    )
}  # --spec
SPEC_MODE = AUTO
DRAFT_MIN = 0
DRAFT_P_MIN = 0.0  # stop drafting when the draft's top probability falls below this
NGRAM_MIN = 1  # prompt lookup matches the history's last NGRAM_MIN..NGRAM_MAX tokens
NGRAM_MAX = 8
# prompt lookup's pool of earlier requests' texts (the server's; --lookup-pool)
LOOKUP_POOL_TOKENS = 262_144  # tokens kept in all pools
LOOKUP_POOL_KEY_TOKENS = 65_536  # tokens kept per pool; its oldest texts go first
LOOKUP_POOL_PROMPT_TAIL = 1024  # a finished request gives its answer and its prompt's last tokens
LOOKUP_POOL_KEY_PREFIX = 32  # without a `user`, a request's pool is named by its prompt's first tokens
# the prompt cache in host RAM (--cache-ram)
CACHE_RAM_MAX_MIB = 8192  # by default the smaller of this and a quarter of the machine's memory
PROMPT_CACHE_MIN_GAIN = 16  # a saved cache is restored when it spares reading at least this many more tokens
# A cache cut back is saved first only when it loses at least 1/this of its tokens: copying a token's
# state costs a small fraction of reading it again, but a save copies them all to keep the lost ones.
SAVE_BEFORE_CUT_SHARE = 32
FIM_PREFIX_TOKENS = 1536  # an infill prompt keeps the prefix's last this many tokens (llama-server's, at its batch)
FIM_SUFFIX_TOKENS = 512  # … and the suffix's first this many, less the cursor line and two markers

# Constrained answers (JSON schemas, regexes, grammars: engine/constraint.py)
CONSTRAINT_MAX_CHARS = 100_000  # a schema, regex or grammar longer than this is refused
CONSTRAINT_MAX_DEPTH = 32  # a JSON schema nested deeper than this is refused
GRAMMAR_MAX_ITEMS_IN_ROW = 2000  # llguidance's parser limits (LLParserLimits), so a step stays bounded
GRAMMAR_INITIAL_LEXER_FUEL = 1_000_000
GRAMMAR_STEP_LEXER_FUEL = 200_000
GRAMMAR_STEP_MAX_ITEMS = 50_000
GRAMMAR_MAX_LEXER_STATES = 250_000
GRAMMAR_MAX_SIZE = 500_000
CTX_SIZE = 4096
BENCH_MAX_TOKENS = 128  # tokens per benchmark run
BENCH_RUNS = 3  # measured repetitions per prompt and configuration
N_BATCH = 512  # prompt tokens decoded per llama_decode call
# Think tags of reasoning models, most specific first: a template that contains both texts of a pair
# is taken to use it, and the answer's text between them becomes its reasoning.
REASONING_TAGS = (
    ("<seed:think>", "</seed:think>"),  # ByteDance Seed-OSS
    ("<|START_THINKING|>", "<|END_THINKING|>"),  # Cohere Command R7B / A
    ("[THINK]", "[/THINK]"),  # Mistral's reasoning models (Magistral, Ministral)
    ("<think>", "</think>"),  # Qwen3, QwQ, DeepSeek-R1 and V3.1, SmolLM3, GLM, Granite, MiniMax, Kimi...
)


HYBRID_MIN_CONFIDENCE = 0.6  # hybrid: prompt lookup drafts when its first token is at least this likely

# auto
PROBE_EVERY = 16  # steps between probes of a drafter nobody uses; a failed probe doubles it
PROBE_EVERY_MAX = 512
SERVE_EXPLORE_SHARE = 0.03  # a server's tries of a head or draft model cost at most this share of its busy time
HOPE_MARGIN = 1.2  # full acceptance never happens: a drafter must promise this much over plain to be tried
CALIBRATION_SIZES = (1, 2, 3, 4, 5, 8, 9, 15, 16, 17, 31, 32, 47, 48, 63, 64)  # target batches timed: tile edges
CALIBRATION_REPS = 3  # the fastest of three: a first pass builds its graph, a busy machine stalls any pass
CALIBRATION_TEXT = "The quick brown fox jumps over the lazy dog. " * 8
CALIBRATION_TOKENS = 48  # context the calibration's passes run on
COST_SCALE_STEP = 2.0  # one pass moves a cost curve's level by at most this factor
COST_LEARNED_BEYOND = 2  # passes up to this many times the largest calibrated size move a cost curve


def draft_max_for(mode: str, explicit: int | None, recommended: int | None = None) -> int:
    """--draft-max means the most draft tokens per step in every mode. Given, it is that; otherwise
    the mode's default (MODES): the fixed modes use the pair's recommended K (else DRAFT_MAX), and
    auto its own cap, AUTO_K_MAX, within which it picks K each step."""
    if explicit is not None:
        return explicit
    known = MODES.get(mode)  # an unknown mode is refused where it is checked, with its hint
    return (known.k_max if known is not None else None) or recommended or DRAFT_MAX


def cache_ram_mib() -> int:
    """--cache-ram's default: the smaller of CACHE_RAM_MAX_MIB and a quarter of physical memory."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return CACHE_RAM_MAX_MIB
    return max(0, min(CACHE_RAM_MAX_MIB, total // 4 // 2**20))


def threads() -> int:
    """Physical cores are what llama.cpp scales with; os.cpu_count is the best portable guess."""
    return max(1, os.cpu_count() or 1)


# `specrun serve`
SERVE_HOST = "127.0.0.1"  # loopback: reachable from this machine only unless --host says otherwise
SERVE_PORT = 8080  # llama.cpp's server uses the same
SERVE_PARALLEL = 4  # requests decoded together in one batch
SERVE_QUEUE = 64  # requests waiting beyond the busy sequences; more are answered 503
SERVE_SCHEDULE = "srpt"  # srpt (shortest predicted remaining time first, with aging) or fcfs
SERVE_KEEPALIVE_S = 10.0  # a stream silent this long (a long prompt being read) sends its API's keep-alive
RESPONSES_KEPT = 256  # recent Responses conversations kept in memory for previous_response_id
RESPONSES_KEPT_MIB = 64  # and the most memory they take
SERVE_DRAIN_S = 10.0  # on Ctrl-C or SIGTERM, active requests get this long to finish
SERVE_MAX_BODY = 8 * 1024 * 1024  # bytes of a request body: far more than any context's prompt, as JSON
SERVE_SPARE_CONNECTIONS = (
    16  # connections beyond --parallel + --queue (health checks, metrics, clients between requests)
)
COMPLETION_MAX_TOKENS = 16  # /v1/completions without max_tokens, as OpenAI's API defaults
INFILL_MAX_TOKENS = 256  # /infill without n_predict: a block at the cursor, not a file
