"""A request as the server holds it: validated and tokenized (`Job`), and what its answer reports
(usage and llama-server's `timings`) once the engine's sequence for it is done."""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..engine.drafting.prediction import kept_tokens
from ..engine.sequence import GenerationSettings, SequenceState
from ..models.reasoning import ReasoningTags

if TYPE_CHECKING:
    from .tools import ToolUse

_ids = itertools.count(1)

# finish reasons of the engine → OpenAI's
FINISH_REASONS = {
    "eog": "stop",
    "stop": "stop",
    "max_tokens": "length",
    "time_limit": "length",
    "context": "length",
    "cancelled": "cancelled",
}


@dataclass
class Job:
    """What a request asks for, validated and tokenized."""

    kind: str  # "chat" or "completion"
    prompt: list[int]
    settings: GenerationSettings
    max_tokens_given: int | None = None  # as the client sent it (None: until the end or the context)
    id: int = field(default_factory=lambda: next(_ids))
    reasoning: ReasoningTags | None = None  # a chat answer's think tags (models.reasoning), from the template
    inside_reasoning: bool = False  # the prompt opened the reasoning
    given: tuple[object, ...] = ()  # what the request hands the drafters, typed (Engine.admit)
    boundaries: tuple[int, ...] = ()  # where a later prompt may part from this one (Engine.admit)
    constraint_param: str | None = None  # the field settings.constraint came from, for a 400 at admission
    tools: ToolUse | None = None  # the tools the answer may call, and how its calls are read


def finish_reason(state: SequenceState) -> str:
    return FINISH_REASONS.get(state.finished or "", "stop")


def report(state: SequenceState, *, prediction: Sequence[int] | None = None) -> dict:
    """usage (with OpenAI's counts of predicted tokens, when the request brought a prediction) and
    llama-server's `timings` for the response; for a constrained answer, `forced_n` there counts the
    tokens its constraint forced (OpenAI's usage has no place for them)."""
    t = state.timings
    cached = state.cached - state.read_in_cache  # found in the cache; the rest was read for this request
    prompt_n = len(state.prompt) - cached
    end = t.finished or time.perf_counter()
    prompt_s = (t.first_token or end) - (t.admitted or t.arrived)
    predicted_s = end - (t.first_token or end)
    predicted_n = len(state.generated)
    steady = predicted_n - 1  # tokens after the first, over the time after the first: the decode speed
    usage = {
        "prompt_tokens": len(state.prompt),
        "completion_tokens": predicted_n,
        "total_tokens": len(state.prompt) + predicted_n,
        "prompt_tokens_details": {"cached_tokens": cached},
    }
    if prediction:  # the prediction's tokens the answer kept, and the rest
        accepted = kept_tokens(prediction, state.generated)
        usage["completion_tokens_details"] = {
            "accepted_prediction_tokens": accepted,
            "rejected_prediction_tokens": len(prediction) - accepted,
        }
    timings = {
        "cache_n": cached,
        "prompt_n": prompt_n,
        "prompt_ms": round(prompt_s * 1000, 3),
        "prompt_per_token_ms": round(prompt_s * 1000 / prompt_n, 3) if prompt_n else None,
        "prompt_per_second": round(prompt_n / prompt_s, 3) if prompt_s > 0 and prompt_n else None,
        "predicted_n": predicted_n,
        "predicted_ms": round(predicted_s * 1000, 3),
        "predicted_per_token_ms": round(predicted_s * 1000 / steady, 3) if steady else None,
        "predicted_per_second": round(steady / predicted_s, 3) if steady and predicted_s > 0 else None,
        "draft_n": state.stats.drafted,
        "draft_n_accepted": state.stats.accepted,
        "queue_ms": round(((t.admitted or end) - t.arrived) * 1000, 3),
    }
    if state.settings.constraint is not None:
        timings["forced_n"] = state.stats.forced_tokens
    return {"usage": usage, "timings": timings}


def log_line(kind: str, answer: dict) -> str:
    """One line per answered request for the server's log: where its time went, as `report` measured it
    (the prompt tokens read and found cached, the tokens written, what was drafted and kept)."""
    t = answer["timings"]
    usage = answer["usage"]
    line = (
        f"specrun serve: {kind} · prompt {usage['prompt_tokens']} tokens ({t['cache_n']} cached, "
        f"{t['prompt_n']} read in {t['prompt_ms'] / 1000:.2f} s) · {t['predicted_n']} tokens in "
        f"{t['predicted_ms'] / 1000:.2f} s"
    )
    if t["draft_n"]:
        line += f" · {t['draft_n_accepted']} of {t['draft_n']} drafted kept"
    if t["queue_ms"] >= 1:
        line += f" · queued {t['queue_ms'] / 1000:.2f} s"
    return line
