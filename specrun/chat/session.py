"""The chat session: conversation history, the chat template, KV-cache reuse between turns and the
context-limit policy. Slash commands live in chat_slash.py, the read → answer loop in chat_repl.py,
display and input in chat_display.py and chat_input.py; none of them imports typer.

Cache reuse: the loop keeps the longest common prefix of the target's cache, so a turn only
prefills what is new if its prompt tokens extend exactly what was fed before. Re-tokenizing the
whole rendered conversation would not guarantee that (a generated answer is not always tokenized the
way the tokenizer would split its text), so the session keeps the tokens it actually fed and
generated, and appends only the template's delta for the new turn.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from .. import defaults
from ..engine.generation import Step
from ..engine.sequence import GenerationSettings
from ..engine.stats import Stats
from ..errors import InputError
from ..models.reasoning import CONTENT, join
from ..runtime.pair import Pair
from .transcript import RESET, save_transcript

MIN_ANSWER_ROOM = 16  # a turn whose prompt leaves less room than this for the answer is refused


@dataclass
class Totals:
    """Session-wide sums of every answer's statistics, for /stats and the end-of-session line."""

    turns: int = 0
    generated: int = 0
    prompt_tokens: int = 0
    prefilled: int = 0
    steps: int = 0
    drafted: int = 0
    accepted: int = 0
    decode_tokens: int = 0
    decode_time: float = 0.0
    total_time: float = 0.0
    first_token_time: float = 0.0
    interrupted: int = 0
    by_drafter: dict = field(default_factory=dict)  # name → {"steps", "drafted", "accepted"}

    def add(self, stats: Stats, prefilled: int, interrupted: bool) -> None:
        self.turns += 1
        self.generated += stats.generated_tokens
        self.prompt_tokens += stats.prompt_tokens
        self.prefilled += prefilled
        self.steps += stats.steps
        self.drafted += stats.drafted
        self.accepted += stats.accepted
        if stats.generated_tokens > 1 and stats.total_time > stats.time_to_first_token:
            self.decode_tokens += stats.generated_tokens - 1
            self.decode_time += stats.total_time - stats.time_to_first_token
        self.total_time += stats.total_time
        self.first_token_time += stats.time_to_first_token
        self.interrupted += int(interrupted)
        for name, counts in stats.by_drafter.items():
            mine = self.by_drafter.setdefault(name, {"steps": 0, "drafted": 0, "accepted": 0})
            for key in mine:
                mine[key] += counts.get(key, 0)

    def to_dict(self) -> dict:
        rate = self.accepted / self.drafted if self.drafted else None
        return {
            "turns": self.turns,
            "generated_tokens": self.generated,
            "prefilled_tokens": self.prefilled,
            "reused_prompt_tokens": self.prompt_tokens - self.prefilled,
            "decode_tokens_per_s": round(self.decode_tokens / self.decode_time, 2) if self.decode_time else None,
            "mean_time_to_first_token_s": round(self.first_token_time / self.turns, 4) if self.turns else None,
            "total_time_s": round(self.total_time, 3),
            "steps": self.steps,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "acceptance_rate": round(rate, 4) if rate is not None else None,
            "mean_tokens_per_step": round(self.decode_tokens / self.steps, 3) if self.steps else None,
            "interrupted": self.interrupted,
            "by_drafter": {name: dict(counts) for name, counts in self.by_drafter.items()},
        }


@dataclass
class Answer:
    """One finished (or interrupted) answer, as the display and the transcript need it.

    text: the answer's content; reasoning: a thinking model's reasoning (None without); raw: all
    the model generated, tags included (what the KV cache holds).
    """

    text: str
    stats: Stats
    prefilled: int
    mode: str
    k: int
    interrupted: bool = False
    error: str | None = None
    reasoning: str | None = None
    raw: str = ""

    def record(self) -> dict:
        """The figures kept with the answer in a saved transcript."""
        s = self.stats
        return {
            "mode": self.mode,
            "draft_max": self.k,
            "generated_tokens": s.generated_tokens,
            "prompt_tokens": s.prompt_tokens,
            "prefilled_tokens": self.prefilled,
            "time_to_first_token_s": round(s.time_to_first_token, 4),
            "total_time_s": round(s.total_time, 4),
            "decode_tokens_per_s": None if s.decode_tokens_per_second is None else round(s.decode_tokens_per_second, 2),
            "drafted": s.drafted,
            "accepted": s.accepted,
            "stop_reason": s.stop_reason,
        }


@dataclass
class Turn:
    """A prepared turn: the prompt tokens after the context policy, and the loop that answers it."""

    session: ChatSession
    user: dict
    messages: list[dict]  # the conversation the prompt renders, user message last
    prompt: list[int]
    rendered: str
    notices: list[str] = field(default_factory=list)
    prefilled: int = 0
    parts: list[tuple[str, str]] = field(default_factory=list)  # the last step's text, labelled (models.reasoning)

    def __post_init__(self) -> None:
        session = self.session
        self.mode = session.mode
        self.k = session.k
        settings = replace(
            session.settings_for(session.mode),
            seed=None if session.seed is None else session.seed + session.totals.turns,
        )
        self.generation = session.pair.generation(self.prompt, settings, mode=session.mode)
        cached = session.pair.session.target_ctx.common_prefix(0, self.prompt)
        self.prefilled = len(self.prompt) - min(cached, len(self.prompt) - 1)
        self._run: Iterator[Step] | None = None
        self._pieces: list[str] = []
        self._splitter = session.pair.chat_format.prompt_splitter(self.rendered)
        self._segments: list[tuple[str, str]] = []

    def steps(self) -> Iterator[Step]:
        """The loop's steps; stop iterating at any time and call finish(). After each, `parts` holds
        the text it made final, labelled content, reasoning or markup (think tags)."""
        self._run = self.generation.run()
        for step in self._run:
            self._pieces.append(step.text)
            self.parts = self._split(step.text, final=step.finished is not None)
            yield step

    def _split(self, text: str, *, final: bool) -> list[tuple[str, str]]:
        if self._splitter is None:
            parts = [(CONTENT, text)] if text else []
        else:
            parts = self._splitter.feed(text) + (self._splitter.finish() if final else [])
        self._segments += parts
        return parts

    def finish(self, *, interrupted: bool = False, broken: bool = False, error: str | None = None) -> Answer:
        """Close the loop, keep the (partial) answer in the history, add it to the totals.

        broken: the loop was torn down mid-decode, so the KV caches no longer match what they hold.
        """
        if self._run is not None:
            self._run.close()
        tail = "" if broken else self.generation.flush_text()
        self._split(tail, final=True)
        self._splitter = None  # finished: nothing more to split
        stats = self.generation.stats
        if interrupted:
            stats.stop_reason = "interrupted"
        split = join(self._segments)
        answer = Answer(
            split.content,
            stats,
            self.prefilled,
            self.mode,
            self.k,
            interrupted,
            error,
            split.reasoning,
            "".join(self._pieces) + tail,
        )
        self.session._commit(self, answer, broken)
        return answer


class ChatSession:
    """A conversation with one loaded pair: what the model sees, what the user said, and settings."""

    def __init__(
        self,
        pair: Pair,
        settings: GenerationSettings,
        *,
        mode: str | None = None,
        system: str | None = None,
        seed: int | None = None,
        recommended_k: int | None = None,
        variables: dict | None = None,
    ):
        """variables: what the chat template is given besides the messages (e.g. enable_thinking)."""
        self.pair = pair
        self.variables = dict(variables or {})
        self.model = pair.target_model
        self.settings = settings  # draft_max: as given (--draft-max, /k), else None
        self.recommended_k = recommended_k  # the pair's K for the fixed modes
        self.mode = mode or defaults.SPEC_MODE
        pair.session.check_mode(self.mode)  # an unknown mode fails here, before the first turn
        self.system = system or None
        self.seed = seed
        self.messages: list[dict] = []  # what the model sees (oldest turns may have been dropped)
        self.transcript: list[dict] = [{"role": "system", "content": self.system}] if self.system else []
        self.totals = Totals()
        self._fed: list[int] | None = None  # tokens fed and generated so far
        self._fed_text: str | None = None  # the template text those tokens stand for

    def settings_for(self, mode: str) -> GenerationSettings:
        """The settings a turn in `mode` runs with: the cap on draft tokens depends on the mode
        unless K was set (defaults.draft_max_for)."""
        return replace(
            self.settings, draft_max=defaults.draft_max_for(mode, self.settings.draft_max, self.recommended_k)
        )

    @property
    def k(self) -> int:
        """The most draft tokens per step in the current mode."""
        return self.settings_for(self.mode).k_max_for(self.mode)

    @property
    def n_ctx(self) -> int:
        return self.pair.n_ctx

    # -- prompts -----------------------------------------------------------------------------

    def _with_system(self, messages: list[dict]) -> list[dict]:
        return ([{"role": "system", "content": self.system}] if self.system else []) + messages

    def _tokens(self, messages: list[dict]) -> tuple[list[int], str]:
        """Prompt tokens for a conversation: the fed history plus the template's delta when possible."""
        chat = self.pair.chat_format
        text = chat.render(self._with_system(messages), variables=self.variables)
        if self._fed is not None and self._fed_text is not None and text.startswith(self._fed_text):
            delta = self.model.tokenize(text[len(self._fed_text) :], add_special=False, parse_special=True)
            history = list(self._fed)
            if history and self.model.is_eog(history[-1]):
                if delta and delta[0] == history[-1]:
                    delta = delta[1:]  # the end-of-turn token the model generated is the template's
                else:
                    history.pop()
            return history + delta, text
        return chat.tokenize(text), text

    def prepare(self, content: str) -> Turn:
        """Apply the context policy and build the turn; an impossible message raises InputError.

        Policy: the prompt must leave room for the answer (max tokens, at most half the context).
        Otherwise the oldest turns are dropped, one user message (and what followed it) at a time;
        the system prompt is always kept. A message that does not fit even alone is refused.
        """
        user = {"role": "user", "content": content}
        messages = self.messages + [user]
        reserve = max(MIN_ANSWER_ROOM, min(self.settings.max_tokens, self.n_ctx // 2))
        prompt, text = self._tokens(messages)
        dropped = 0
        while len(prompt) + reserve > self.n_ctx and len(messages) > 1:
            messages = _drop_oldest_turn(messages)
            dropped += 1
            prompt, text = self._tokens(messages)
        if len(prompt) + MIN_ANSWER_ROOM > self.n_ctx:
            raise InputError(
                f"this message needs {len(prompt)} tokens but the context holds {self.n_ctx}",
                "shorten it, or restart with a larger --ctx-size",
            )
        notices = []
        if dropped:
            notices.append(
                f"context: dropped the {_plural(dropped, 'oldest turn')} to fit "
                f"({len(prompt)} of {self.n_ctx} tokens; /reset starts afresh)"
            )
        if len(prompt) + reserve > self.n_ctx:
            notices.append(f"context: only {self.n_ctx - len(prompt)} tokens left for the answer")
        return Turn(self, user, messages, prompt, text, notices)

    def _commit(self, turn: Turn, answer: Answer, broken: bool) -> None:
        """Record the answer in the history, the transcript and the totals."""
        reply = {
            "role": "assistant",
            "content": answer.text,
            **({"reasoning_content": answer.reasoning} if answer.reasoning else {}),
        }
        self.messages = turn.messages + [reply]
        self.transcript += [
            turn.user,
            {**reply, "stats": answer.record(), **({"interrupted": True} if answer.interrupted else {})},
        ]
        self.totals.add(answer.stats, turn.prefilled, answer.interrupted)
        if broken:
            self._fed = self._fed_text = None
            self.pair.session.reset()
            return
        self._fed = turn.prompt + list(turn.generation.generated)
        # a stop string leaves tokens in the history whose text the answer does not hold
        self._fed_text = None if answer.stats.stop_reason == "stop" else turn.rendered + answer.raw

    # -- commands' effects -------------------------------------------------------------------

    def reset(self) -> None:
        """Forget the conversation (the system prompt stays); the caches are reused from the prefix.

        The model forgets, the transcript does not: it keeps the earlier turns, with a marker where
        the reset happened, so `/save` after a `/reset` still writes what came before it."""
        self.messages = []
        if self._turns_since_reset():
            self.transcript.append(dict(RESET))
        self._fed = self._fed_text = None

    def _turns_since_reset(self) -> bool:
        """Whether anything was said since the last reset marker (two resets in a row mark once)."""
        for message in reversed(self.transcript):
            if message == RESET:
                return False
            if message["role"] in ("user", "assistant"):
                return True
        return False

    def set_system(self, text: str | None) -> None:
        self.system = text or None
        self.transcript.append({"role": "system", "content": self.system or ""})

    def add_message(self, message: dict) -> None:
        """A message given as input rather than generated (JSONL mode): system or assistant."""
        if message["role"] == "system":
            self.set_system(message["content"])
        else:
            self.messages.append(dict(message))
            self.transcript.append(dict(message))

    def set_mode(self, mode: str) -> None:
        self.pair.session.check_mode(mode)  # raises InputError for an unknown mode
        self.mode = mode

    def set_k(self, k: int) -> None:
        self.settings = replace(self.settings, draft_max=k)

    def set_temperature(self, value: float) -> None:
        self.settings = replace(self.settings, sampling=replace(self.settings.sampling, temperature=value))

    def save(self, path: str, *, replace: bool = False) -> str:
        """Write the transcript; an existing file is refused unless `replace` (InputError)."""
        return save_transcript(path, self.transcript_document(), replace=replace)

    def transcript_document(self) -> dict:
        config = self.pair.config
        return {
            "models": {"target": str(config.target), "draft": str(config.draft) if config.draft else None},
            "settings": {
                "mode": self.mode,
                "draft_max": self.k,
                "temperature": self.settings.sampling.temperature,
                "max_tokens": self.settings.max_tokens,
                "ctx_size": self.n_ctx,
            },
            "messages": list(self.transcript),
            "totals": self.totals.to_dict(),
        }


def _drop_oldest_turn(messages: list[dict]) -> list[dict]:
    """Drop the first user message and everything up to the next one (keeps the newest message)."""
    rest = messages[1:]
    while len(rest) > 1 and rest[0]["role"] != "user":
        rest = rest[1:]
    return rest


def _plural(n: int, word: str) -> str:
    return word if n == 1 else f"{n} {word}s"
