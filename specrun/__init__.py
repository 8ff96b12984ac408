"""specrun: lossless speculative decoding for local GGUF models on llama.cpp.

Library use::

    import specrun
    pair = specrun.load_pair("target.gguf", "draft.gguf")
    result = specrun.generate(pair, "Write a haiku", max_tokens=32, temperature=0)
    print(result.text, result.stats.acceptance_rate)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

__version__ = "0.1.0"

from .engine.loop import GenerationSettings, Step
from .engine.sampling import SamplingParams
from .engine.stats import Stats
from .errors import InputError
from .runtime.pair import Pair, PairConfig, load_pair


@dataclass
class Result:
    """A finished generation: its text, tokens and statistics."""

    text: str
    tokens: list[int]
    stats: Stats


def settings_from(**options) -> GenerationSettings:
    """GenerationSettings from flat keyword options (temperature, top_k, top_p, min_p, and the rest)."""
    sampling_keys = {"temperature", "top_k", "top_p", "min_p"}
    sampling = SamplingParams(**{k: v for k, v in options.items() if k in sampling_keys})
    rest = {k: v for k, v in options.items() if k not in sampling_keys}
    return GenerationSettings(sampling=sampling, **rest)


def _prompt_tokens(pair: Pair, prompt: str, chat: bool, system: str | None) -> list[int]:
    if not isinstance(prompt, str) or not prompt:
        raise InputError("the prompt is empty", "pass some prompt text")
    return pair.prompt_tokens(prompt, chat=chat, system=system)


def stream(pair: Pair, prompt: str, *, chat: bool = True, system: str | None = None, mode: str | None = None,
           **options) -> Iterator[Step]:
    """Yield generation steps for a prompt; each step's `text` can be printed as it comes.

    mode: "off", "draft", "ngram", "hybrid" or "auto" (the default); options: GenerationSettings
    fields (max_tokens, seed, draft_max, stop, ...) and sampling ones (temperature, top_k, top_p, min_p).
    """
    tokens = _prompt_tokens(pair, prompt, chat, system)
    return pair.stream(tokens, settings_from(**options), mode=mode)


def generate(pair: Pair, prompt: str, *, chat: bool = True, system: str | None = None, mode: str | None = None,
             **options) -> Result:
    """Generate a whole answer and return it with its statistics (options as for `stream`)."""
    tokens = _prompt_tokens(pair, prompt, chat, system)
    loop = pair.loop(settings_from(**options), mode=mode)
    pieces, generated = [], []
    for step in loop.run(tokens):
        pieces.append(step.text)
        generated.extend(step.tokens)
    return Result("".join(pieces), generated, loop.stats)


__all__ = ["GenerationSettings", "Pair", "PairConfig", "Result", "SamplingParams", "Stats", "Step", "generate", "load_pair", "stream"]
