"""What `run` and `chat` build alike from their flags: the mode, the seed, the settings, the pair."""

from __future__ import annotations

import random

from .. import defaults
from ..engine.loop import GenerationSettings
from ..engine.sampling import SamplingParams
from ..errors import InputError
from ..models.fetch import is_none
from ..runtime.pair import PairConfig
from .resolve import Resolved


def spec_mode(spec: str | None, draft: str | None) -> str:
    """--spec as given; otherwise plain decoding for `--draft none`, else the default (auto)."""
    if spec:
        return spec.strip().lower()
    return "off" if is_none(draft) else defaults.SPEC_MODE


def pick_seed(seed: int | None) -> int:
    """The seed given, or a fresh one that is reported so the run can be repeated."""
    return seed if seed is not None else random.SystemRandom().randrange(2**31)


def generation_settings(
    draft_max: int | None, *, max_tokens: int, temperature: float, top_k: int, top_p: float, min_p: float, seed: int | None,
    draft_min: int, draft_p_min: float, stop: list[str] | None, ignore_eos: bool,
    ngram_min: int = defaults.NGRAM_MIN, ngram_max: int = defaults.NGRAM_MAX,
) -> GenerationSettings:
    """GenerationSettings from command flags; `draft_max` is the cap for the mode (Resolved.draft_max_for)."""
    check_ngram_range(ngram_min, ngram_max)
    return GenerationSettings(
        max_tokens=max_tokens,
        sampling=SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p),
        seed=seed,
        draft_max=draft_max,
        draft_min=draft_min,
        draft_p_min=draft_p_min,
        ngram_min=ngram_min,
        ngram_max=ngram_max,
        stop=tuple(stop or ()),
        ignore_eos=ignore_eos,
    )


def check_ngram_range(ngram_min: int, ngram_max: int) -> None:
    if ngram_min > ngram_max:
        raise InputError(f"--ngram-min {ngram_min} is above --ngram-max {ngram_max}", "give --ngram-min at most --ngram-max")


def pair_config(models: Resolved, *, ctx_size: int, threads: int, gpu_layers: int | None, draft_gpu_layers: int | None) -> PairConfig:
    return PairConfig(models.target, models.draft, ctx_size=ctx_size, threads=threads, gpu_layers=gpu_layers, draft_gpu_layers=draft_gpu_layers)
