"""A loaded pair made ready to serve: the batch engine, its thread, the metrics, and requests turned
into jobs (chat template, tokens, settings, the context check).

The HTTP layer (app.py) only translates: bodies in, events out. Everything that decides what a
request means lives here, so the same service runs under uvicorn, in a test, or in the bench.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from .. import defaults
from ..engine import compute_thread
from ..engine import constraint as constraints
from ..engine.auto.costs import DecodeCosts
from ..engine.constraint import Constraint, ConstraintError
from ..engine.drafting.lookup import LookupStart
from ..engine.drafting.prediction import Predicted
from ..engine.line_rules import LineRules
from ..engine.matcher import grammar_tokenizer
from ..engine.sampling import SamplingParams
from ..engine.sequence import GenerationSettings, check_prompt_fits
from ..errors import ContextOverflowError, InputError, SpecrunError
from ..models.chat_template import RESERVED
from ..models.fim import Chunk, FimPrompt, model_fim_prompt, within_budgets
from ..models.tool_syntax import ToolSyntax, tool_syntax
from ..runtime.chat_format import ChatPrompt
from ..runtime.pair import Pair
from ..runtime.session import Session
from .infill_request import InfillRequest, end_line
from .metrics import Metrics
from .requests import Job
from .schemas import ChatRequest, CompletionRequest, Sampling
from .tools import ToolRequestError, call_constraint, template_messages, tool_use, unread_syntax_note
from .worker import Worker

UNKNOWN_FIELDS_NAMED = 1024  # unknown fields named in the log at most: a client cannot fill it


class RequestError(Exception):
    """A request this server cannot answer as asked (400): the message, and the field at fault."""

    def __init__(self, message: str, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code


@dataclass(frozen=True)
class ServeOptions:
    """How the server runs and the defaults of a request's settings."""

    parallel: int = defaults.SERVE_PARALLEL
    queue: int = defaults.SERVE_QUEUE
    schedule: str = defaults.SERVE_SCHEDULE
    api_key: str | None = None
    max_body: int = defaults.SERVE_MAX_BODY  # bytes; larger bodies are a 413
    max_connections: int | None = None  # connections served at once (None: parallel + queue + SERVE_SPARE_CONNECTIONS)
    cors_origins: tuple[
        str, ...
    ] = ()  # origins whose pages may call the server (none: browsers' same-origin rule holds)
    mode: str = defaults.SPEC_MODE
    draft_max: int = defaults.AUTO_K_MAX  # the most draft tokens a step may verify per request
    cache_ram: int = field(default_factory=defaults.cache_ram_mib)  # MiB of host RAM for saved caches (0: none)
    lookup_pool: bool = True  # prompt lookup may draft from earlier requests' texts
    log_requests: bool = True  # one line on the log (warn) per answered request
    cache_reuse: int = 0  # > 0: a prompt keeps a later run of at least this many cached tokens (engine/kv_reuse.py)
    base: GenerationSettings = GenerationSettings()  # filters, drafters' tuning; temperature when a request gives none

    def connections(self) -> int:
        return (
            self.max_connections
            if self.max_connections is not None
            else self.parallel + self.queue + defaults.SERVE_SPARE_CONNECTIONS
        )


class Service:
    """Everything a running server holds."""

    def __init__(
        self,
        pair: Pair,
        options: ServeOptions,
        *,
        costs: DecodeCosts | None = None,
        warn: Callable[[str], None] | None = None,
        before_step: Callable[[], None] | None = None,
    ):
        self.pair = pair
        self.options = options
        self.model_name = Path(pair.config.target).stem
        self.ctx_size = pair.config.ctx_size
        # No token covers more bytes than the longest piece of the vocabulary (an unknown character,
        # at most 4 bytes, becomes one token), so a prompt of more bytes than this cannot fit.
        self.max_prompt_bytes = self.ctx_size * max(pair.target_model.longest_piece(), 4)
        template = pair.chat_format.template
        # How the target's chat template writes a tool call (None: no syntax specrun reads), and
        # which of its markers are single tokens of the vocabulary (the call grammars name them).
        self.tool_syntax: ToolSyntax | None = tool_syntax(template.source if template is not None else None)
        self.tool_markers = self._special_tokens(self.tool_syntax)
        self._warn = warn
        self._unread_syntax_said = False
        self._unknown_said: set[tuple[str, str, str]] = set()  # (route, what, name) already named in the log
        # The cache of every finished request is kept for a follow-up: as many sequences again as decode together.
        # Caches given up beyond those are saved to host RAM, up to --cache-ram.
        self.session = Session(
            pair.models(),
            n_seq=2 * options.parallel,
            n_seq_pool=options.parallel,
            costs=costs,
            cache_ram=options.cache_ram * 2**20,
        )
        if costs is None:
            if warn is not None:
                warn("specrun serve: measuring batch costs")
            self.session.costs = compute_thread.call(self.session.measure)  # the engine loop's thread
        self.engine = self.session.engine
        # Every mode gets a controller: outside auto it keeps the cost curves the scheduler predicts from.
        policy, _ = self.session.policy(
            options.mode, replace(options.base, draft_max=options.draft_max), fresh=True, track_costs=True
        )
        self.controller = policy.controller
        self.controller.explore_share = defaults.SERVE_EXPLORE_SHARE
        # The drafters that may draft: under auto, not one whose measured cost can never pay.
        self.drafting = tuple(d for d in policy.drafters if not (policy.auto and self.controller.hopeless(d)))
        model = self.session.model_drafter
        self.draft_model_enabled = model is not None and model.name in self.drafting
        self.engine.configure(policy)
        self.engine.reuse_runs = options.cache_reuse
        self.metrics = Metrics(gauges=self._gauges)
        self.worker = Worker(
            self.engine,
            self.controller,
            parallel=options.parallel,
            queue=options.queue,
            schedule=options.schedule,
            metrics=self.metrics,
            before_step=before_step,
            warn=warn,
            log=warn if options.log_requests else None,
        )

    def _gauges(self) -> dict[str, tuple[str, float]]:
        state = self.worker.snapshot()
        return {
            "specrun_queue_length": ("Requests waiting for a sequence.", state["queued"]),
            "specrun_active_requests": ("Requests being decoded.", state["active"]),
            "specrun_parallel": ("Sequences decoded together at most (--parallel).", self.options.parallel),
            "specrun_kv_cells_used": (
                "Cells of the target's shared KV cache holding a token.",
                self.engine.target.used(),
            ),
            "specrun_kv_cells": ("Cells of the target's shared KV cache.", self.engine.target.n_cells),
            "specrun_draft_model_enabled": (
                "1 when the draft model may draft (its measured cost can pay), else 0.",
                float(self.draft_model_enabled),
            ),
            **self._cache_gauges(),
        }

    def _cache_gauges(self) -> dict[str, tuple[str, float]]:
        cache = self.engine.cache
        if cache is None:
            return {}
        return {
            "specrun_prompt_cache_bytes": ("Bytes of saved caches held in host RAM.", cache.bytes),
            "specrun_prompt_cache_budget_bytes": ("Bytes saved caches may hold (--cache-ram).", cache.budget),
            "specrun_prompt_cache_entries": ("Saved caches held in host RAM.", len(cache.entries)),
            "specrun_prompt_cache_hits_total": (
                "Requests that restored a saved cache from host RAM.",
                cache.hits,
            ),
            "specrun_prompt_cache_misses_total": (
                "Requests no saved cache served better than the sequences' own.",
                cache.misses,
            ),
            "specrun_prompt_cache_restore_failures_total": (
                "Saved caches llama.cpp refused to restore (counted as misses and dropped).",
                cache.failures,
            ),
            "specrun_prompt_cache_restored_tokens_total": (
                "Prompt tokens restored from host RAM instead of read.",
                cache.restored_tokens,
            ),
        }

    # -- requests → jobs ---------------------------------------------------------------------

    def note_unknown(self, fields: list[str], route: str) -> None:
        """Name in the log, once per route and field (an item's index written `*`), the fields a
        client sent that this server does not know and so ignores."""
        named = {".".join("*" if part.isdigit() else part for part in f.split(".")) for f in fields}
        self._note_once(route, named, "ignores fields it does not know")

    def note_left_out(self, names: list[str], route: str) -> None:
        """Name in the log, once per route and name, the hosted tools (web search, code
        interpreter...) a request declared that this server cannot run and left out of the prompt."""
        self._note_once(route, set(names), "leaves out tools this server cannot run")

    def _note_once(self, route: str, names: set[str], what: str) -> None:
        """One log line naming those of `names` not yet named for `route` under `what` (at most
        UNKNOWN_FIELDS_NAMED names are remembered: a client cannot fill the memory)."""
        new = sorted(n for n in names if (route, what, n) not in self._unknown_said)
        if not new or len(self._unknown_said) >= UNKNOWN_FIELDS_NAMED:
            return
        self._unknown_said.update((route, what, n) for n in new)
        if self._warn is not None:
            self._warn(f"specrun serve: note: {route} {what}: {', '.join(new)}")

    def count_chat_tokens(self, body: ChatRequest) -> int:
        """The prompt tokens a chat request makes, as the engine would read them, however many
        (a client asks to learn whether its conversation has outgrown the context)."""
        return len(self._chat_prompt(body, bounded=False)[3].tokens)

    def chat_prompt(self, body: ChatRequest, *, add_generation_prompt: bool = True) -> ChatPrompt:
        """A chat request's conversation as the model reads it, text and tokens, however long;
        without the generation prompt, the conversation alone (the assistant's turn not opened)."""
        return self._chat_prompt(body, bounded=False, add_generation_prompt=add_generation_prompt)[3]

    def chat_job(self, body: ChatRequest) -> Job:
        messages, variables, use, prompt = self._chat_prompt(body)
        job = self._job("chat", prompt.tokens, body, "messages", body.answer_limit())
        if use is not None and use.required and job.settings.constraint is not None:
            raise RequestError(
                f"{job.constraint_param} and a required tool call each constrain the answer: send only one",
                "tool_choice",
                "conflicting_parameters",
            )
        if use is not None and job.settings.constraint is None:  # under "auto", a response_format wins
            try:
                made = call_constraint(use, self.tool_markers, prompt.tags, prompt.inside_reasoning)
            except ToolRequestError as error:
                raise RequestError(str(error), error.param, "invalid_tools") from None
            if made is not None:
                grammar_tokenizer(self.engine.target.model)
                job = replace(job, settings=replace(job.settings, constraint=made), constraint_param="tools")
        boundaries = self._boundaries(messages, prompt.tokens, variables)
        return replace(
            job, reasoning=prompt.tags, inside_reasoning=prompt.inside_reasoning, boundaries=boundaries, tools=use
        )

    def _chat_prompt(self, body: ChatRequest, bounded: bool = True, add_generation_prompt: bool = True):
        """The template's messages, its variables, the request's tool use and the rendered prompt;
        `bounded`: a conversation of more bytes than the context can hold is refused before it is
        rendered."""
        messages = template_messages(body.messages)
        variables = body.chat_template_kwargs or {}
        reserved = sorted(set(variables) & set(RESERVED))
        if reserved:
            raise RequestError(
                f"chat_template_kwargs may not set {reserved[0]!r} (the request itself sets it)", "chat_template_kwargs"
            )
        if bounded:
            self._check_bytes(sum(len(m["content"].encode("utf-8")) for m in messages), "messages")
        try:
            use = tool_use(
                [t.model_dump(exclude_none=True) for t in body.tools or []],
                body.tool_choice.model_dump() if hasattr(body.tool_choice, "model_dump") else body.tool_choice,
                body.parallel_tool_calls,
                self.tool_syntax,
            )
        except ToolRequestError as error:
            raise RequestError(str(error), error.param, "invalid_tools") from None
        if use is not None:
            if bounded:
                self._check_bytes(len(json.dumps(list(use.tools))), "tools")
            if use.syntax is None and not self._unread_syntax_said:
                self._unread_syntax_said = True
                if self._warn is not None:
                    self._warn(unread_syntax_note(self.pair.target_model.path.name))
        try:
            prompt = self.pair.chat_format.prompt(
                messages,
                variables=variables,
                tools=use.tools if use else None,
                add_generation_prompt=add_generation_prompt,
            )
        except SpecrunError as error:
            raise RequestError(f"{error.message}; use /v1/completions with a formatted prompt", "messages") from None
        return messages, variables, use, prompt

    def _special_tokens(self, syntax: ToolSyntax | None) -> dict[str, int]:
        """The call syntax's markers that are single tokens of the model's vocabulary, by text."""
        model = self.pair.target_model
        found = {}
        for marker in {syntax.opening, syntax.closing} - {""} if syntax is not None else ():
            ids = model.tokenize(marker, add_special=False, parse_special=True)
            if len(ids) == 1:
                found[marker] = ids[0]
        return found

    def _boundaries(self, messages: list[dict], tokens: list[int], variables: dict) -> tuple[int, ...]:
        """Message boundaries worth a saved cache: only where a restored cache cannot be cut back
        (elsewhere any prefix of a saved cache serves)."""
        if self.engine.cache is None or self.engine.target.cuts_restored:
            return ()
        return tuple(self.pair.chat_format.boundaries(messages, tokens, variables=variables))

    def completion_job(self, body: CompletionRequest, index: int = 0) -> Job:
        """The job of the request's `index`-th prompt."""
        prompt = body.prompts()[index]
        limit = body.answer_limit()
        limit = limit if limit is not None else defaults.COMPLETION_MAX_TOKENS
        if body.suffix and body.echo:
            raise RequestError("echo cannot be combined with suffix (the prompt is not the start of the text)", "echo")
        if isinstance(prompt, list):  # token ids, as evaluation harnesses send them
            if body.suffix:
                raise RequestError("suffix needs the prompt as text, not token ids", "suffix")
            vocab = self.pair.target_model.n_vocab
            outside = next((t for t in prompt if t >= vocab), None)
            if outside is not None:
                raise RequestError(f"{outside} is no token id of this model (0 to {vocab - 1})", "prompt")
            return self._job("completion", list(prompt), body, "prompt", limit)
        text = prompt
        if body.suffix:  # OpenAI's legacy insertion: the prompt is the prefix, the model's FIM tokens around them
            prefix, suffix = within_budgets(text, body.suffix, self.pair.target_model.longest_piece())
            self._check_bytes(len(prefix.encode("utf-8")) + len(suffix.encode("utf-8")), "prompt")
            fim = self._fim_prompt("suffix", prefix=prefix, suffix=suffix, n_predict=limit)
            return self._job("completion", fim.tokens, body, "prompt", limit)
        self._check_bytes(len(text.encode("utf-8")), "prompt")
        tokens = self.pair.target_model.tokenize(text, add_special=True, parse_special=True)
        return self._job("completion", tokens, body, "prompt", limit)

    def infill_job(self, body: InfillRequest) -> Job:
        """llama-server's /infill: the FIM prompt, the answer ended by its lines (infill.py)."""
        prefix, suffix = within_budgets(body.input_prefix, body.input_suffix, self.pair.target_model.longest_piece())
        pieces = [prefix, suffix, body.prompt]
        pieces += [part for chunk in body.input_extra for part in (chunk.text, chunk.filename)]
        self._check_bytes(
            sum(len(p.encode("utf-8")) for p in pieces), "input_extra" if body.input_extra else "input_prefix"
        )
        limit = body.answer_limit()
        fim = self._fim_prompt(
            "input_prefix",
            prefix=prefix,
            suffix=suffix,
            prompt=body.prompt,
            extra=[Chunk(c.filename, c.text) for c in body.input_extra],
            n_predict=limit if limit is not None else defaults.INFILL_MAX_TOKENS,
        )
        job = self._job("infill", fim.tokens, body, "input_prefix", limit, pool="infill")
        lines = LineRules(
            min_indent=body.n_indent,
            end_line=end_line(body.input_suffix),
            time_limit_s=body.t_max_predict_ms / 1000 if body.t_max_predict_ms else None,
        )
        job.settings = replace(job.settings, lines=lines)
        job.boundaries = (fim.extra,) if 0 < fim.extra < len(fim.tokens) else ()
        return job

    def _fim_prompt(self, param: str, *, n_predict: int, **parts) -> FimPrompt:
        """The model's FIM prompt of `parts` (models/fim.py); a model that cannot infill is a 400 on `param`."""
        try:
            return model_fim_prompt(self.pair.target_model, n_ctx=self.ctx_size, n_predict=n_predict, **parts)
        except InputError as error:
            raise RequestError(f"{error.message}; {error.hint}", param, "not_supported") from None

    def _check_bytes(self, n_bytes: int, param: str) -> None:
        """Refuse, before tokenizing, a prompt too long in bytes to fit the context in tokens."""
        if n_bytes > self.max_prompt_bytes:
            raise RequestError(
                f"the prompt is {n_bytes} bytes, more than {self.ctx_size} tokens can hold (at most "
                f"{self.max_prompt_bytes} "
                "bytes with this vocabulary; shorten it, or start the server with a larger --ctx-size)",
                param,
                "context_length_exceeded",
            )

    def _job(
        self, kind: str, tokens: list[int], body: Sampling, param: str, max_tokens: int | None, pool: str | None = None
    ) -> Job:
        """The job for a request's tokens; `max_tokens` None: until the end of the answer or of the context
        (0: the prompt is only read). `pool`: what names prompt lookup's pool when the client does not."""
        if not tokens:
            raise RequestError("the prompt is empty", param)
        try:
            check_prompt_fits(len(tokens), self.ctx_size)
        except ContextOverflowError as error:
            raise RequestError(
                f"{error.message} (shorten it, or start the server with a larger --ctx-size)",
                param,
                "context_length_exceeded",
            ) from None
        room = self.ctx_size - len(tokens)  # a longer answer is cut where the context ends ("length")
        given = None if max_tokens is None else min(max_tokens, room)
        base = self.options.base
        filters = base.sampling
        sampling = SamplingParams(
            temperature=body.temperature if body.temperature is not None else filters.temperature,
            top_k=body.top_k if body.top_k is not None else filters.top_k,
            top_p=body.top_p if body.top_p is not None else filters.top_p,
            min_p=body.min_p if body.min_p is not None else filters.min_p,
        )
        seed = (
            body.seed % 2**64 if body.seed is not None else None
        )  # any integer, as OpenAI's API takes (numpy wants ≥ 0)
        constraint, constraint_param = self._constraint(body)
        settings = replace(
            base,
            max_tokens=room if given is None else given,
            sampling=sampling,
            seed=seed,
            stop=body.stops(),
            ignore_eos=False,
            constraint=constraint,
            logprobs=body.logprob_count(),
            score_prompt=body.scores_prompt(),
        )
        return Job(
            kind,
            tokens,
            settings,
            max_tokens_given=given,
            given=self._given(tokens, body, pool),
            constraint_param=constraint_param,
        )

    def _constraint(self, body: Sampling) -> tuple[Constraint | None, str | None]:
        """What the answer must match, and the field that says so: compiled here, off the engine
        thread and before the request queues, so a bad schema or grammar is a 400 naming its field."""
        fields = {
            "response_format": body.response_format is not None and body.response_format.type != "text",
            "grammar": bool(body.grammar),
            "json_schema": body.json_schema is not None,
        }
        given = [name for name, present in fields.items() if present]
        if len(given) > 1:
            named = " and ".join([", ".join(given[:-1]), given[-1]])
            raise RequestError(
                f"{named} each constrain the answer: send only one of them", given[-1], "conflicting_parameters"
            )
        if not given:
            return None, None
        param = given[0]
        try:
            if param == "grammar":
                constraint = constraints.grammar(body.grammar, what="grammar")
            elif param == "json_schema":
                constraint = constraints.json_schema(body.json_schema, what="json_schema")
            elif body.response_format.type == "json_object":
                constraint = constraints.json_object()
            else:
                schema = body.response_format.json_schema.schema_
                constraint = constraints.json_schema(
                    schema if schema is not None else {"type": "object"}, what="response_format.json_schema.schema"
                )
        except ConstraintError as error:
            raise RequestError(error.one_line(), param, "invalid_schema") from None
        # The model's vocabulary as the constraint sees it is built once (a second for a large
        # vocabulary): here, rather than on the engine thread while other answers wait.
        grammar_tokenizer(self.engine.target.model)
        return constraint, param

    def _given(self, tokens: list[int], body: Sampling, pool: str | None = None) -> tuple[object, ...]:
        """What the request hands the drafters: its prediction's tokens, and prompt lookup's pool
        (named by the client, else by `pool`, else by the prompt's opening tokens), unless either
        side opts out."""
        given: list[object] = []
        if body.prediction is not None:
            text = body.prediction.text()
            self._check_bytes(len(text.encode("utf-8")), "prediction")
            try:
                predicted = self.pair.prediction_tokens(text)
            except ContextOverflowError as error:
                raise RequestError(
                    f"{error.message} (shorten it, or start the server with a larger --ctx-size)",
                    "prediction",
                    "context_length_exceeded",
                ) from None
            if predicted:
                given.append(Predicted(tuple(predicted)))
        if self.options.lookup_pool and body.lookup_pool is not False:
            client = body.prompt_cache_key or body.user or body.safety_identifier
            if client:
                key = "client:" + client
            elif pool is not None:
                key = "pool:" + pool
            else:
                opening = ",".join(map(str, tokens[: defaults.LOOKUP_POOL_KEY_PREFIX]))
                key = "prompt:" + hashlib.sha256(opening.encode()).hexdigest()[:16]
            given.append(LookupStart(pool_key=key))
        return tuple(given)

    # -- running -----------------------------------------------------------------------------

    def start(self) -> None:
        self.worker.start()

    def stop(self, grace: float = 0.0) -> None:
        """Drain within `grace` seconds and end the engine thread; the models stay loaded."""
        self.worker.stop(grace)

    def close(self) -> None:
        self.session.close()
