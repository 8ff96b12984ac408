"""`specrun run`: one prompt in, generated text on stdout, statistics on stderr or in --json."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from .. import defaults
from ..engine.loop import GenerationSettings
from ..engine.stats import Stats
from ..errors import InputError
from ..runtime.pair import Pair
from ..terminal import Output
from . import options as opt
from .prompt_input import read_prompt
from .resolve import resolve_models
from .settings import generation_settings, pair_config, pick_seed, spec_mode


def status_line(stats: Stats, elapsed: float, label: str) -> str:
    """The live line: speed, acceptance, tokens per step, and what drafts."""
    parts = [f"{stats.generated_tokens} tok", f"{stats.decode_rate_at(elapsed):.1f} tok/s"]
    if stats.drafted:
        parts.append(f"accept {100 * stats.acceptance_rate:.0f}% ({stats.accepted}/{stats.drafted})")
        parts.append(f"{stats.mean_tokens_per_step:.2f} tok/step")
    parts.append(label)
    return " · ".join(parts)


def mode_label(stats: Stats, mode: str, label: str) -> str:
    """What drafted: the fixed mode's label, or for auto how many steps each choice got."""
    if mode != "auto" or not stats.by_drafter:
        return label
    return "auto: " + stats.steps_by_drafter()


def summary_line(stats: Stats, label: str) -> str:
    """The one-line summary printed at the end."""
    parts = [f"{stats.generated_tokens} tokens in {stats.total_time:.2f} s"]
    if stats.decode_tokens_per_second is not None:
        parts.append(f"{stats.decode_tokens_per_second:.1f} tok/s decode")
    parts.append(f"first token {stats.time_to_first_token:.2f} s")
    if stats.drafted:
        parts.append(f"accept {100 * stats.acceptance_rate:.1f}% ({stats.accepted}/{stats.drafted})")
        parts.append(f"{stats.mean_tokens_per_step:.2f} tok/step")
        parts.append(f"draft {stats.draft_time:.2f} s / verify {stats.verify_time:.2f} s")
    parts.append(label)
    return " · ".join(parts)


def run(
    prompt: Annotated[Optional[str], typer.Argument(help="The prompt; '-' or a pipe reads stdin (both given: stdin first).")] = None,
    target: opt.Target = None,
    draft: opt.Draft = None,
    pair: opt.PairName = None,
    registry: opt.Registry = None,
    max_tokens: opt.MaxTokens = defaults.MAX_TOKENS,
    temperature: opt.Temperature = defaults.TEMPERATURE,
    top_k: opt.TopK = defaults.TOP_K,
    top_p: opt.TopP = defaults.TOP_P,
    min_p: opt.MinP = defaults.MIN_P,
    seed: opt.Seed = None,
    stop: opt.Stop = None,
    ignore_eos: opt.IgnoreEos = False,
    spec: opt.Spec = None,
    draft_max: opt.DraftMax = None,
    draft_min: opt.DraftMin = defaults.DRAFT_MIN,
    draft_p_min: opt.DraftPMin = defaults.DRAFT_P_MIN,
    ngram_min: opt.NgramMin = defaults.NGRAM_MIN,
    ngram_max: opt.NgramMax = defaults.NGRAM_MAX,
    ctx_size: opt.CtxSize = defaults.CTX_SIZE,
    threads: opt.Threads = 0,
    gpu_layers: opt.GpuLayers = None,
    draft_gpu_layers: opt.DraftGpuLayers = None,
    chat: opt.Chat = True,
    system: opt.System = None,
    json_output: opt.Json = False,
    quiet: opt.Quiet = False,
) -> None:
    """Generate text for one prompt: text to stdout, statistics to stderr (or one JSON document)."""
    out = Output(quiet=quiet, json_mode=json_output)
    text = read_prompt(prompt)
    models = resolve_models(target, draft, pair, registry, draft_max)
    seed = pick_seed(seed)
    config = pair_config(models, ctx_size=ctx_size, threads=threads, gpu_layers=gpu_layers, draft_gpu_layers=draft_gpu_layers)
    mode = spec_mode(spec, draft)
    settings = generation_settings(
        models.draft_max_for(mode), max_tokens=max_tokens, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed,
        draft_min=draft_min, draft_p_min=draft_p_min, stop=stop, ignore_eos=ignore_eos,
        ngram_min=ngram_min, ngram_max=ngram_max,
    )
    loaded = Pair(config, warn=out.warn)
    try:
        tokens = loaded.prompt_tokens(text, chat=chat, system=system)
        if len(tokens) >= loaded.target_ctx.n_ctx:
            raise InputError(
                f"the prompt is {len(tokens)} tokens but the context holds {loaded.target_ctx.n_ctx}",
                f"raise --ctx-size above {len(tokens) + max_tokens} or shorten the prompt",
            )
        generate(loaded, tokens, settings, out, seed, mode)
    finally:
        loaded.close()


def generate(loaded: Pair, tokens: list[int], settings: GenerationSettings, out: Output, seed: int, mode: str) -> None:
    """Stream one generation through `out`; on Ctrl-C flush what was generated, then re-raise."""
    loop = loaded.loop(settings, mode=mode)
    pieces: list[str] = []
    started = time.perf_counter()
    try:
        for step in loop.run(tokens):
            pieces.append(step.text)
            out.text(step.text)
            out.status(status_line(loop.stats, time.perf_counter() - started, loop.policy.label()))
    except KeyboardInterrupt:
        # Text of a step interrupted before it was yielded, then whatever was held back.
        tail = loop.text.text[len("".join(pieces)) :] + loop.flush_text()
        pieces.append(tail)
        out.text(tail)
        loop.stats.stop_reason = "interrupted"
        _finish(loaded, loop.stats, settings, out, "".join(pieces), mode, loop.policy.label(), seed)
        raise
    _finish(loaded, loop.stats, settings, out, "".join(pieces), mode, loop.policy.label(), seed)


def _finish(loaded: Pair, stats: Stats, settings: GenerationSettings, out: Output, text: str, mode: str, label: str, seed: int) -> None:
    out.end_text()
    if stats.stop_reason == "context":
        out.warn(f"stopped: the context of {loaded.target_ctx.n_ctx} tokens is full (raise --ctx-size)")
    if out.json_mode:
        out.document(result_document(loaded, stats, settings, text, seed, mode))
    else:
        out.summary(summary_line(stats, mode_label(stats, mode, label)))


def result_document(loaded: Pair, stats: Stats, settings: GenerationSettings, text: str, seed: int, mode: str) -> dict:
    """The --json document: text, statistics, models and settings (schema in the README)."""
    config = loaded.config
    return {
        "text": text,
        "stats": stats.to_dict(),
        "models": {
            "target": str(Path(config.target).resolve()),
            "draft": str(Path(config.draft).resolve()) if config.draft else None,
        },
        "settings": {
            "mode": mode,
            "max_tokens": settings.max_tokens,
            "temperature": settings.sampling.temperature,
            "top_k": settings.sampling.top_k,
            "top_p": settings.sampling.top_p,
            "min_p": settings.sampling.min_p,
            "seed": seed,
            "draft_max": settings.draft_cap(mode),
            "draft_min": settings.draft_min,
            "draft_p_min": settings.draft_p_min,
            "ngram_min": settings.ngram_min,
            "ngram_max": settings.ngram_max,
            "stop": list(settings.stop),
            "ignore_eos": settings.ignore_eos,
            "ctx_size": loaded.target_ctx.n_ctx,
            "threads": loaded.threads,
        },
    }
