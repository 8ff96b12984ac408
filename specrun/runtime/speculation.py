"""What drafts in each generation of a loaded pair: a policy per mode, and auto's state.

The fixed modes get fresh drafters every generation. `auto`'s controller and its prompt-lookup
drafter live as long as the pair, seeded from the pair's decode costs, so what one generation
learned (a chat turn, a bench run) carries over to the next.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .. import defaults
from ..engine import llama as engine_llama
from ..engine.auto.control import Controller
from ..engine.auto.costs import DecodeCosts
from ..engine.auto.costs import measure as measure_costs
from ..engine.auto.policy import AutoPolicy, FixedPolicy
from ..engine.drafting.hybrid import HybridDrafter
from ..engine.drafting.model import ModelDrafter
from ..engine.drafting.prompt_lookup import PromptLookupDrafter
from ..engine.loop import GenerationSettings
from ..errors import InputError
from . import cost_cache

if TYPE_CHECKING:
    from .pair import Pair

MODES = ("off", "draft", "ngram", "hybrid", "auto")


class Speculation:
    """The drafting side of one loaded pair."""

    def __init__(self, pair: "Pair"):
        self.pair = pair
        self.auto: tuple | None = None  # (key, controller, lookup), kept across generations
        self.costs: DecodeCosts | None = None  # the pair's decode costs, once read or measured

    def policy(self, mode: str, settings: GenerationSettings, rng) -> FixedPolicy | AutoPolicy:
        """The per-step drafting policy for a mode (fresh state: estimates are per generation)."""
        pair = self.pair
        if mode not in MODES:
            raise InputError(f"unknown speculation mode {mode!r}", f"use one of: {', '.join(MODES)}")
        model = None
        if pair.has_draft:
            model = ModelDrafter(pair.draft_ctx, settings.sampling, rng, p_min=settings.draft_p_min, min_draft=settings.draft_min,
                                 bridge=pair.bridge)
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
        if self.auto is None or self.auto[0] != key:
            controller = Controller(names, k_max=k_max, k_start=k_start)
            costs = self.decode_costs()
            per_token = {ModelDrafter.name: costs.draft_token_s} if costs.draft_token_s and ModelDrafter.name in names else {}
            controller.seed(costs.verify_s, per_token)
            self.auto = (key, controller, PromptLookupDrafter(*ngrams, max_draft=k_max))
        return self.auto[1], self.auto[2]

    def calibrate(self) -> DecodeCosts:
        """Measure the pair's decode costs now, whatever is cached, and keep them for later runs."""
        self.costs = None
        return self.decode_costs(measure=True)

    def decode_costs(self, *, measure: bool = False) -> DecodeCosts:
        """The pair's decode costs: from specrun's cache, else measured now (a few seconds, once)."""
        if self.costs is None:
            pair = self.pair
            config = pair.config
            key = cost_cache.cache_key(
                Path(config.target), Path(config.draft) if config.draft else None, threads=pair.threads,
                gpu_layers=pair.gpu_layers, draft_gpu_layers=pair.draft_gpu_layers, build=engine_llama.system_info() + pair.placement.key(),
            )
            self.costs = None if measure else cost_cache.load(key)
            if self.costs is None:
                pair.warn("specrun: measuring decode costs once for these models and settings (kept for next time)")
                text = "The quick brown fox jumps over the lazy dog. " * 8
                tokens = pair.target_model.tokenize(text, add_special=True, parse_special=False)[:48]
                self.costs = measure_costs(pair.target_ctx, pair.draft_ctx, tokens)
                cost_cache.store(key, self.costs)
        return self.costs
