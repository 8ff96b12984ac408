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
from ..engine.auto.control import LEARNED_WEIGHT, Controller
from ..engine.auto.costs import DecodeCosts
from ..engine.auto.costs import measure as measure_costs
from ..engine.auto.drift import DISAGREE
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
        self.cost_key: str | None = None
        self.fresh = False  # every auto generation starts afresh, as a one-shot process (bench --fresh)
        self._snapshots: dict[tuple[int, int], dict | None] = {}

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
        catchup = self.costs.draft_prefill_token_s or self.costs.draft_token_s or 0.0
        return AutoPolicy(controller, lookup, model, catchup_token_s=catchup,
                          on_finish=lambda policy: self.finished(policy, ngrams))

    def _auto_state(self, names: list[str], k_max: int, k_start: int, ngrams: tuple[int, int]) -> tuple[Controller, PromptLookupDrafter]:
        """The auto controller and its lookup drafter live as long as the pair: costs and acceptance
        learned in one generation (a chat turn, a bench run) carry over to the next. A new one
        starts from the pair's costs and from what earlier runs learned (kept in specrun's cache);
        with `fresh` every generation gets a new one, as a new process would."""
        key = (tuple(names), k_max, ngrams)
        if self.fresh or self.auto is None or self.auto[0] != key:
            controller = Controller(names, k_max=k_max, k_start=k_start)
            costs = self.decode_costs()
            per_token = {ModelDrafter.name: costs.draft_token_s} if costs.draft_token_s and ModelDrafter.name in names else {}
            controller.seed(costs.verify_s, per_token)
            lookup = PromptLookupDrafter(*ngrams, max_draft=k_max)
            learned = self._learned(ngrams)
            if learned:
                controller.learn(learned.get("controller", {}))
                lookup.restore(learned.get("lookup", {}), LEARNED_WEIGHT)
            self.auto = (key, controller, lookup)
        return self.auto[1], self.auto[2]

    def _learned_key(self, ngrams: tuple[int, int]) -> str:
        config = self.pair.config
        return cost_cache.learned_key(Path(config.target), Path(config.draft) if config.draft else None, ngrams)

    def _learned(self, ngrams: tuple[int, int]) -> dict | None:
        """What earlier runs learned; read once per process, so runs in one process (a bench with
        `fresh`) all start from the same point."""
        if ngrams not in self._snapshots:
            self._snapshots[ngrams] = cost_cache.LEARNED.get(self._learned_key(ngrams))
        return self._snapshots[ngrams]

    def finished(self, policy: AutoPolicy, ngrams: tuple[int, int]) -> None:
        """After an auto generation: keep what it learned for later runs (not when `fresh`), and
        drop cached costs that its own timing proved far too high (a calibration on a busy
        machine): the next run measures again."""
        controller = policy.controller
        drift = controller.drift
        if drift is not None and drift.factor < 1 / DISAGREE and self.cost_key is not None:
            cost_cache.drop(self.cost_key)
        if not self.fresh:
            cost_cache.LEARNED.put(self._learned_key(ngrams), {"controller": controller.learned(), "lookup": policy.lookup.state()})

    def calibrate(self) -> DecodeCosts:
        """Measure the pair's decode costs now, whatever is cached, and keep them for later runs
        if they were measured in good conditions."""
        self.costs = None
        return self.decode_costs(measure=True)

    def costs_key(self) -> str:
        """The cost cache's key for this pair: models, threads, offload, build and placement."""
        pair = self.pair
        config = pair.config
        return cost_cache.cache_key(
            Path(config.target), Path(config.draft) if config.draft else None, threads=pair.threads,
            gpu_layers=pair.gpu_layers, draft_gpu_layers=pair.draft_gpu_layers, build=engine_llama.system_info() + pair.placement.key(),
        )

    def decode_costs(self, *, measure: bool = False) -> DecodeCosts:
        """The pair's decode costs: from specrun's cache, else measured now (a few seconds, once).
        Costs measured in bad conditions are used for this run only, and said so."""
        if self.costs is None:
            pair = self.pair
            self.cost_key = self.costs_key()
            self.costs = None if measure else cost_cache.load(self.cost_key, pair.threads)
            if self.costs is None:
                pair.warn("specrun: measuring decode costs for these models and settings (a few seconds; kept for next time)")
                text = "The quick brown fox jumps over the lazy dog. " * 8
                tokens = pair.target_model.tokenize(text, add_special=True, parse_special=False)[:48]
                self.costs = measure_costs(pair.target_ctx, pair.draft_ctx, tokens, threads=pair.threads,
                                           offloaded=bool(pair.gpu_layers or pair.draft_gpu_layers))
                rejected = cost_cache.store(self.cost_key, self.costs, pair.threads)
                if rejected:
                    pair.warn(f"specrun: these costs are used for this run only and not kept: {'; '.join(rejected)}")
        return self.costs
