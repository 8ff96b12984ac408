"""Flags → what the engine takes, in one place for every command: the models, the mode, the seed,
the generation settings, the pair's configuration."""

from __future__ import annotations

import random
from typing import Sequence

from .. import defaults
from ..engine.loop import GenerationSettings
from ..engine.sampling import SamplingParams
from ..errors import InputError
from ..models.fetch import Resolved, is_none, resolve_models
from ..models.registry import load_registry
from ..runtime.pair import PairConfig
from ..terminal import progress_display
from .options import FilterFlags, ModelFlags, RuntimeFlags, TuningFlags


def resolve(models: ModelFlags) -> Resolved:
    """--target/--draft/--pair (default: the default pair) → local files, fetching or assembling
    with progress on stderr."""
    registry = load_registry(models.registry)
    with progress_display() as hook:
        return resolve_models(models.target, models.draft, models.pair, registry, hook)


def spec_mode(spec: str | None, draft: str | None) -> str:
    """--spec as given; otherwise plain decoding for `--draft none`, else the default (auto)."""
    if spec:
        return spec.strip().lower()
    return "off" if is_none(draft) else defaults.SPEC_MODE


def pick_seed(seed: int | None) -> int:
    """The seed given, or a fresh one that is reported so the run can be repeated."""
    return seed if seed is not None else random.SystemRandom().randrange(2**31)


def generation_settings(
    *, max_tokens: int, temperature: float, filters: FilterFlags, tuning: TuningFlags, draft_max: int | None,
    seed: int | None, stop: Sequence[str] | None = None, ignore_eos: bool = False,
) -> GenerationSettings:
    """GenerationSettings from flags; `draft_max` is the cap for the mode (defaults.draft_max_for)."""
    check_ngram_range(tuning.ngram_min, tuning.ngram_max)
    return GenerationSettings(
        max_tokens=max_tokens,
        sampling=SamplingParams(temperature=temperature, top_k=filters.top_k, top_p=filters.top_p, min_p=filters.min_p),
        seed=seed,
        draft_max=draft_max,
        draft_min=tuning.draft_min,
        draft_p_min=tuning.draft_p_min,
        ngram_min=tuning.ngram_min,
        ngram_max=tuning.ngram_max,
        stop=tuple(stop or ()),
        ignore_eos=ignore_eos,
    )


def check_ngram_range(ngram_min: int, ngram_max: int) -> None:
    if ngram_min > ngram_max:
        raise InputError(f"--ngram-min {ngram_min} is above --ngram-max {ngram_max}", "give --ngram-min at most --ngram-max")


def pair_config(models: Resolved, runtime: RuntimeFlags) -> PairConfig:
    return PairConfig(models.target, models.draft, ctx_size=runtime.ctx_size, threads=runtime.threads,
                      gpu_layers=runtime.gpu_layers, draft_gpu_layers=runtime.draft_gpu_layers)
