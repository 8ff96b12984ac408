"""A loaded target (and optional draft) with their contexts: the object scripts and the CLI drive.

Loading checks the vocabularies first (no weights read), picks AMX-safe load options, and keeps
the contexts alive across generations so a conversation's KV cache is reused.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

from .. import defaults
from ..engine import llama as engine_llama
from ..engine.auto.control import Controller
from ..engine.auto.costs import DecodeCosts
from ..engine.auto.costs import measure as measure_costs
from ..engine.auto.policy import AutoPolicy, FixedPolicy
from ..engine.drafting.hybrid import HybridDrafter
from ..engine.drafting.model import ModelDrafter, VocabBridge
from ..engine.drafting.prompt_lookup import PromptLookupDrafter
from ..engine.llama import Context, LoadOptions, Model
from ..engine.loop import GenerationSettings, SpeculativeLoop, Step
from ..engine.sampling import make_rng
from ..errors import InputError
from ..models.modelfile import check_gguf_file
from . import cost_cache


@dataclass(frozen=True)
class PairConfig:
    """Where the models are and how they run; identical settings for every configuration compared."""

    target: Path
    draft: Path | None = None
    ctx_size: int = defaults.CTX_SIZE
    threads: int = 0  # 0: defaults.threads()
    gpu_layers: int | None = None  # None: all layers when the build can offload, else 0
    draft_gpu_layers: int | None = None
    n_batch: int = defaults.N_BATCH


_AMX_WARNED = False
MODES = ("off", "draft", "ngram", "hybrid", "auto")


def load_options(gpu_layers: int | None, warn: Callable[[str], None]) -> LoadOptions:
    """GPU layers default to all when offload exists; extra buffers are turned off on AMX builds."""
    global _AMX_WARNED
    engine_llama.init_backend()
    if gpu_layers is None:
        gpu_layers = 999 if engine_llama.supports_gpu_offload() else 0
    amx = engine_llama.has_amx()
    if amx and not _AMX_WARNED:
        warn(engine_llama.AMX_WARNING)
        _AMX_WARNED = True
    return LoadOptions(gpu_layers=gpu_layers, use_extra_bufts=not amx)


class Pair:
    """Target and draft models with one context each."""

    def __init__(self, config: PairConfig, warn: Callable[[str], None] | None = None):
        warn = warn or (lambda message: print(message, file=sys.stderr))
        self.config = config
        if config.draft is not None:
            from ..models.compat import require_compatible

            check_gguf_file(config.target)
            check_gguf_file(config.draft)
            require_compatible(Path(config.target), Path(config.draft))
        threads = config.threads or defaults.threads()
        self.threads = threads
        self.warn = warn
        target_options = load_options(config.gpu_layers, warn)
        self.gpu_layers = target_options.gpu_layers
        self.draft_gpu_layers = 0
        self.target_model = Model(config.target, target_options)
        self.target_ctx = Context(self.target_model, n_ctx=config.ctx_size, n_threads=threads, n_batch=config.n_batch)
        self.draft_model = self.draft_ctx = self.bridge = None
        self._auto = None  # (key, controller, lookup) kept across generations
        self._costs: DecodeCosts | None = None
        if config.draft is not None:
            draft_layers = config.draft_gpu_layers if config.draft_gpu_layers is not None else config.gpu_layers
            draft_options = load_options(draft_layers, warn)
            self.draft_gpu_layers = draft_options.gpu_layers
            self.draft_model = Model(config.draft, draft_options)
            self.draft_ctx = Context(self.draft_model, n_ctx=config.ctx_size, n_threads=threads, n_batch=config.n_batch)
            self.bridge = VocabBridge(self.target_model, self.draft_model)

    @property
    def has_draft(self) -> bool:
        return self.draft_ctx is not None

    def prompt_tokens(self, prompt: str, *, chat: bool = True, system: str | None = None) -> list[int]:
        """Tokenize a prompt, formatted with the target's chat template unless `chat` is False."""
        if chat:
            messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
            return self.tokens_for_messages(messages)
        text = f"{system}\n\n{prompt}" if system else prompt
        return self.target_model.tokenize(text, add_special=True, parse_special=True)

    def tokens_for_messages(self, messages: Sequence[dict], add_assistant: bool = True) -> list[int]:
        """Token ids for a conversation, ending with the assistant's turn opened."""
        text = self.target_model.apply_chat_template(messages, add_assistant)
        return self.target_model.tokenize(text, add_special=True, parse_special=True)

    def loop(self, settings: GenerationSettings, *, mode: str | None = None, use_draft: bool = True) -> SpeculativeLoop:
        """A generation loop over this pair's contexts.

        mode: "off" (plain decoding), "draft" (the draft model), "ngram" (prompt lookup), "hybrid"
        (lookup when it has a confident match, else the draft model) or "auto" (chosen per step from
        measured costs and acceptance); None is the default mode. `use_draft=False` means "off".
        """
        mode = "off" if not use_draft else (mode or defaults.SPEC_MODE)
        rng = make_rng(settings.seed)
        policy = self.policy(mode, settings, rng)
        return SpeculativeLoop(self.target_ctx, policy, settings, rng=rng, draft_ctx=self.draft_ctx)

    def policy(self, mode: str, settings: GenerationSettings, rng) -> FixedPolicy | AutoPolicy:
        """The per-step drafting policy for a mode (fresh state: estimates are per generation)."""
        if mode not in MODES:
            raise InputError(f"unknown speculation mode {mode!r}", f"use one of: {', '.join(MODES)}")
        model = None
        if self.has_draft:
            model = ModelDrafter(self.draft_ctx, settings.sampling, rng, p_min=settings.draft_p_min, min_draft=settings.draft_min,
                                 bridge=self.bridge)
        elif mode in ("draft", "hybrid"):
            raise InputError(f"--spec {mode} needs a draft model", "pass --draft MODEL, or use --spec ngram or off")
        k = settings.draft_cap(mode)
        if mode == "off" or k <= 0:
            return FixedPolicy(None, 0)
        if mode == "draft":
            return FixedPolicy(model, k)
        lookup = PromptLookupDrafter(settings.ngram_min, settings.ngram_max, max_draft=k)
        if mode == "ngram":
            return FixedPolicy(lookup, k)
        if mode == "hybrid":
            return FixedPolicy(HybridDrafter(lookup, model), k)
        names = [lookup.name] + ([model.name] if model is not None else [])
        ngrams = (settings.ngram_min, settings.ngram_max)
        controller, lookup = self._auto_state(names, k, min(k, defaults.DRAFT_MAX), ngrams)
        return AutoPolicy(controller, lookup, model)

    def _auto_state(self, names: list[str], k_max: int, k_start: int, ngrams: tuple[int, int]) -> tuple[Controller, PromptLookupDrafter]:
        """The auto controller and its lookup drafter live as long as the pair: costs and acceptance
        learned in one generation (a chat turn, a bench run) carry over to the next."""
        key = (tuple(names), k_max, ngrams)
        if self._auto is None or self._auto[0] != key:
            controller = Controller(names, k_max=k_max, k_start=k_start)
            costs = self.decode_costs()
            per_token = {ModelDrafter.name: costs.draft_token_s} if costs.draft_token_s and ModelDrafter.name in names else {}
            controller.seed(costs.verify_s, per_token)
            self._auto = (key, controller, PromptLookupDrafter(*ngrams, max_draft=k_max))
        return self._auto[1], self._auto[2]

    def decode_costs(self) -> DecodeCosts:
        """This pair's decode costs: from specrun's cache, else measured now (a few seconds, once)."""
        if self._costs is None:
            key = cost_cache.cache_key(
                Path(self.config.target), Path(self.config.draft) if self.config.draft else None, threads=self.threads,
                gpu_layers=self.gpu_layers, draft_gpu_layers=self.draft_gpu_layers, build=engine_llama.system_info(),
            )
            self._costs = cost_cache.load(key)
            if self._costs is None:
                self.warn("specrun: measuring decode costs once for these models and settings (kept for next time)")
                text = "The quick brown fox jumps over the lazy dog. " * 8
                tokens = self.target_model.tokenize(text, add_special=True, parse_special=False)[:48]
                self._costs = measure_costs(self.target_ctx, self.draft_ctx, tokens)
                cost_cache.store(key, self._costs)
        return self._costs

    def stream(self, prompt_tokens: Sequence[int], settings: GenerationSettings, *, mode: str | None = None) -> Iterator[Step]:
        """Generate, yielding steps; the loop's `stats` are complete when the iterator ends."""
        return self.loop(settings, mode=mode).run(prompt_tokens)

    def close(self) -> None:
        for obj in (self.draft_ctx, self.target_ctx, self.draft_model, self.target_model):
            if obj is not None:
                obj.close()


def load_pair(target: str | Path, draft: str | Path | None = None, **options) -> Pair:
    """Load a target and optional draft from local GGUF paths (see PairConfig for options)."""
    return Pair(PairConfig(Path(target), Path(draft) if draft else None, **options))
