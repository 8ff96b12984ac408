"""Flags → what the engine takes, in one place for every command: the models, the mode, the seed,
the generation settings, the pair's configuration."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from .. import defaults
from ..engine import attention
from ..engine.rpc import parse_endpoints
from ..engine.sampling import SamplingParams
from ..engine.sequence import GenerationSettings
from ..errors import InputError
from ..models.fetch import Resolved, is_none, resolve_models
from ..models.registry import load_registry
from ..runtime.pair import Pair, PairConfig
from ..terminal import progress_display
from . import fatal
from .options import FilterFlags, GenerateFlags, ModelFlags, RuntimeFlags, TuningFlags


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
    *,
    max_tokens: int,
    temperature: float,
    filters: FilterFlags,
    tuning: TuningFlags,
    draft_max: int | None,
    seed: int | None,
    stop: Sequence[str] | None = None,
    ignore_eos: bool = False,
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


def answer_settings(
    flags: GenerateFlags, *, max_tokens: int, draft_max: int | None, seed: int | None
) -> GenerationSettings:
    """The settings run and chat answer with, from the flags they share."""
    sampling = flags.sampling
    return generation_settings(
        max_tokens=max_tokens,
        temperature=sampling.temperature,
        filters=sampling.filters,
        tuning=flags.speculation.tuning,
        draft_max=draft_max,
        seed=seed,
        stop=sampling.stop,
        ignore_eos=sampling.ignore_eos,
    )


def check_ngram_range(ngram_min: int, ngram_max: int) -> None:
    if ngram_min > ngram_max:
        raise InputError(
            f"--ngram-min {ngram_min} is above --ngram-max {ngram_max}", "give --ngram-min at most --ngram-max"
        )


def open_pair(models: Resolved, runtime: RuntimeFlags, warn: Callable[[str], None]) -> Pair:
    """Load the pair the flags describe; from here on llama.cpp's fatal errors are one line (cli.fatal)."""
    fatal.install()
    return Pair(pair_config(models, runtime), warn=warn)


def pair_config(models: Resolved, runtime: RuntimeFlags) -> PairConfig:
    return PairConfig(
        models.target,
        models.draft,
        ctx_size=runtime.ctx_size or defaults.CTX_SIZE,
        threads=runtime.threads,
        gpu_layers=layers(runtime.gpu_layers, "--gpu-layers"),
        draft_gpu_layers=layers(runtime.draft_gpu_layers, "--draft-gpu-layers"),
        devices=names(runtime.device, "--device"),
        draft_devices=names(runtime.draft_device, "--draft-device"),
        tensor_split=tensor_split(runtime.tensor_split),
        rpc=endpoints(runtime.rpc),
        mmap=not runtime.no_mmap,
        mlock=runtime.mlock,
        flash_attn=flash_attn(runtime.flash_attn),
    )


def check_runtime(runtime: RuntimeFlags) -> None:
    """Every runtime flag that can be checked without models or devices, so bad values fail first."""
    layers(runtime.gpu_layers, "--gpu-layers")
    layers(runtime.draft_gpu_layers, "--draft-gpu-layers")
    names(runtime.device, "--device")
    names(runtime.draft_device, "--draft-device")
    tensor_split(runtime.tensor_split)
    endpoints(runtime.rpc)
    flash_attn(runtime.flash_attn)


def flash_attn(value: str) -> str:
    """--flash-attn's mode, checked (engine/attention.py)."""
    mode = value.strip().lower()
    if mode not in attention.MODES:
        raise InputError(f"--flash-attn {value!r} is not a mode", f"give one of {', '.join(attention.MODES)}")
    return mode


def layers(value: str, flag: str) -> int | None:
    """'auto' → None (fit into free memory), 'all' → -1 (llama.cpp: every layer), else a count."""
    text = value.strip().lower()
    if text == "auto":
        return None
    if text == "all":
        return -1
    if text.isdigit():
        return int(text)
    raise InputError(f"{flag}: {value!r} is not a number, auto or all", f"e.g. {flag} auto")


def names(value: str | None, flag: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    items = tuple(item.strip() for item in value.split(","))
    if not all(items):
        raise InputError(
            f"{flag} needs device names, got {value!r}",
            f"e.g. {flag} CUDA0, or {flag} cpu (`specrun doctor` lists the devices)",
        )
    return items


def tensor_split(value: str | None) -> tuple[float, ...] | None:
    if value is None:
        return None
    try:
        split = tuple(float(item) for item in value.replace("/", ",").split(","))
    except ValueError:
        raise InputError(f"--tensor-split: {value!r} is not a list of numbers", "e.g. --tensor-split 3,1") from None
    if any(s < 0 for s in split) or sum(split) <= 0:
        raise InputError(
            f"--tensor-split: {value!r} needs proportions of 0 or more, not all 0", "e.g. --tensor-split 3,1"
        )
    return split


def endpoints(value: str | None) -> tuple[str, ...]:
    return tuple(str(e) for e in parse_endpoints(value)) if value is not None else ()
