"""specrun: lossless speculative decoding for local GGUF models on llama.cpp.

Library use::

    import specrun
    pair = specrun.load_pair("target.gguf", "draft.gguf")
    result = specrun.generate(pair, "Write a haiku", max_tokens=32, temperature=0)
    print(result.text, result.stats.acceptance_rate)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

__version__ = "0.1.0"

from .engine import constraint
from .engine.constraint import Constraint, ConstraintError
from .engine.generation import Step
from .engine.sampling import SamplingParams
from .engine.sequence import GenerationSettings
from .engine.stats import Stats
from .errors import InputError
from .models.reasoning import ReasoningSplitter, join, split_reasoning
from .runtime.chat_format import thinking_variables
from .runtime.pair import Pair, PairConfig, load_pair


@dataclass
class Result:
    """A finished generation: its text, tokens and statistics. For a thinking model in chat mode,
    `text` is the answer and `reasoning` what the model thought before it (None otherwise)."""

    text: str
    tokens: list[int]
    stats: Stats
    reasoning: str | None = None


def settings_from(**options) -> GenerationSettings:
    """GenerationSettings from flat keyword options (temperature, top_k, top_p, min_p, the constraint
    as `schema`, `regex` or `grammar`, and the rest)."""
    sampling_keys = {"temperature", "top_k", "top_p", "min_p"}
    sampling = SamplingParams(**{k: v for k, v in options.items() if k in sampling_keys})
    rest = {k: v for k, v in options.items() if k not in sampling_keys and k not in CONSTRAINT_KEYS}
    made = constraint_from(**{k: options[k] for k in CONSTRAINT_KEYS if options.get(k) is not None})
    if made is not None:
        rest["constraint"] = made
    return GenerationSettings(sampling=sampling, **rest)


CONSTRAINT_KEYS = ("schema", "regex", "grammar")


def constraint_from(
    schema: dict | str | None = None, regex: str | None = None, grammar: str | None = None
) -> Constraint | None:
    """The constraint an answer must meet: a JSON schema (a dict or its JSON text; `{"type":
    "object"}` for any object), a regex the whole answer matches, or a grammar (Lark or GBNF); at
    most one. ConstraintError (an InputError) names what is wrong with it."""
    chosen = constraint.one_of({"schema": schema, "regex": regex, "grammar": grammar})
    if chosen is None:
        return None
    kind, value = chosen
    return {"schema": constraint.json_schema, "regex": constraint.regex, "grammar": constraint.grammar}[kind](value)


def _prompt(
    pair: Pair, prompt: str, chat: bool, system: str | None, think: bool | None, chat_template_kwargs: dict | None
) -> tuple[list[int], ReasoningSplitter | None]:
    if not isinstance(prompt, str) or not prompt:
        raise InputError("the prompt is empty", "pass some prompt text")
    if not chat:
        return pair.prompt_tokens(prompt, chat=False, system=system), None
    variables = {**(chat_template_kwargs or {}), **thinking_variables(think)}
    rendered = pair.chat_prompt(prompt, system=system, variables=variables)
    return rendered.tokens, rendered.splitter()


def stream(
    pair: Pair,
    prompt: str,
    *,
    chat: bool = True,
    system: str | None = None,
    mode: str | None = None,
    think: bool | None = None,
    chat_template_kwargs: dict | None = None,
    prediction: str | None = None,
    **options,
) -> Iterator[Step]:
    """Yield generation steps for a prompt; each step's `text` can be printed as it comes (a thinking
    model's reasoning and tags included: `split_reasoning` separates them).

    mode: "off", "draft", "ngram", "hybrid", "text", "mtp" (the target's own multi-token-prediction
    heads), "eagle3" or "dflash" (such a head given as the draft) or "auto" (the default); schema,
    regex, grammar: what the answer must match (see `constraint_from`); think: a thinking model's
    reasoning on or off (the template's enable_thinking; None: its default); chat_template_kwargs:
    other variables for the chat template; prediction: the text the answer is expected to be (the
    file before an edit), drafted from as a copy is (OpenAI's predicted outputs); options: GenerationSettings fields
    (max_tokens, seed, draft_max, stop, ...) and sampling ones (temperature, top_k, top_p, min_p).
    """
    tokens, _ = _prompt(pair, prompt, chat, system, think, chat_template_kwargs)
    predicted = pair.prediction_tokens(prediction) if prediction else None
    return pair.stream(tokens, settings_from(**options), mode=mode, prediction=predicted)


def generate(
    pair: Pair,
    prompt: str,
    *,
    chat: bool = True,
    system: str | None = None,
    mode: str | None = None,
    think: bool | None = None,
    chat_template_kwargs: dict | None = None,
    prediction: str | None = None,
    **options,
) -> Result:
    """Generate a whole answer and return it with its statistics (options as for `stream`)."""
    tokens, splitter = _prompt(pair, prompt, chat, system, think, chat_template_kwargs)
    predicted = pair.prediction_tokens(prediction) if prediction else None
    generation = pair.generation(tokens, settings_from(**options), mode=mode, prediction=predicted)
    pieces, generated = [], []
    for step in generation.run():
        pieces.append(step.text)
        generated.extend(step.tokens)
    text = "".join(pieces)
    if splitter is None:
        return Result(text, generated, generation.stats)
    split = join([*splitter.feed(text), *splitter.finish()])
    return Result(split.content, generated, generation.stats, split.reasoning)


__all__ = [
    "Constraint",
    "ConstraintError",
    "GenerationSettings",
    "Pair",
    "PairConfig",
    "Result",
    "SamplingParams",
    "constraint_from",
    "Stats",
    "Step",
    "generate",
    "load_pair",
    "split_reasoning",
    "stream",
]
