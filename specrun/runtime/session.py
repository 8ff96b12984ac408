"""A generation session on loaded models: the contexts (one sequence, or many for a server), the
one engine that steps them, and the speculation state that outlives a generation.

`auto`'s controller and its prompt lookup live as long as the session, seeded from the models'
decode costs (read from specrun's cache, else measured once), so what one generation learned (a
chat turn, a bench run) carries over to the next; what they learned is also kept in the cache for
the next process. The fixed modes start every generation afresh.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from .. import defaults
from ..engine.auto.control import LEARNED_WEIGHT, Controller
from ..engine.auto.costs import DecodeCosts, calibration_sizes
from ..engine.auto.costs import measure as measure_costs
from ..engine.auto.drift import DISAGREE
from ..engine.drafting.model import ModelDrafter, VocabBridge
from ..engine.drafting.mtp import AssistantDrafter, MtpDrafter
from ..engine.drafting.prompt_lookup import PromptLookup
from ..engine.drafting.text import TextDrafter
from ..engine.generation import Generation, Step
from ..engine.llama import Context, Model
from ..engine.sequence import GenerationSettings
from ..engine.step import Engine, Policy, Update
from ..engine.verify import Verifier
from ..errors import IncompatibleModelsError, InputError
from . import cost_cache


def require_mode(mode: str) -> None:
    """Refuse a speculation mode that does not exist."""
    if mode not in defaults.MODES:
        raise InputError(f"unknown speculation mode {mode!r}", f"use one of: {', '.join(defaults.MODES)}")


@dataclass(frozen=True)
class Models:
    """What a session needs of a loaded pair: the models, where they came from, how they run, and
    the key their decode costs are cached under."""

    target: Model
    draft: Model | None
    bridge: VocabBridge | None
    drafting: str | None  # "token" (the draft shares the target's vocabulary), "text" (it drafts through text)
    target_path: Path
    draft_path: Path | None
    ctx_size: int
    n_batch: int
    threads: int
    offloaded: bool
    costs_key: str
    warn: Callable[[str], None]
    mtp_chain: str | None = None  # how the target's MTP heads draft (modelfile.mtp_chain)
    assistant: Model | None = None  # a Gemma 4 MTP assistant given as the draft: it drafts over the target's cache


class Session:
    """Contexts of `n_seq` sequences (a pool of `n_seq_pool` sequences' worth of cells) on the
    models, the engine over them, and what speculation learns across generations."""

    def __init__(
        self, models: Models, *, n_seq: int = 1, n_seq_pool: int | None = None, costs: DecodeCosts | None = None
    ):
        self.models = models
        common = dict(
            n_ctx=models.ctx_size, n_threads=models.threads, n_batch=models.n_batch, n_seq=n_seq, n_seq_pool=n_seq_pool
        )
        assistant = models.assistant
        heads = models.target.mtp_heads > 0 and assistant is None
        self.target_ctx = Context(
            models.target, rollback=defaults.RECURRENT_K_MAX, hidden=heads or assistant is not None, **common
        )
        self.draft_ctx = Context(models.draft, **common) if models.draft is not None else None
        if assistant is not None:  # made while the target's cache is empty: making it empties that cache
            self.head_ctx = Context(assistant, head=True, other=self.target_ctx, **common)
        else:
            self.head_ctx = Context(models.target, head=True, **common) if heads else None
        model = None
        if self.draft_ctx is not None:
            model = (
                TextDrafter(self.draft_ctx, models.target)
                if models.drafting == "text"
                else ModelDrafter(self.draft_ctx, bridge=models.bridge)
            )
        chained = models.target.mtp_heads if models.mtp_chain == "chained" else 0
        others = []
        if assistant is not None:
            others = [AssistantDrafter(self.head_ctx, self.target_ctx)]
        elif self.head_ctx is not None:
            others = [MtpDrafter(self.head_ctx, self.target_ctx, chained=chained)]
        self.engine = Engine(self.target_ctx, model, others=others, n_batch=models.n_batch)
        self.costs: DecodeCosts | None = costs  # the models' decode costs, once read or measured
        self.parallel = n_seq_pool or n_seq
        self._auto: tuple | None = None  # (key, controller, lookup), kept across generations
        self._snapshots: dict[tuple[int, int], dict | None] = {}
        self._said_plain = False  # a target that cannot rewind decodes plain: said once

    @property
    def rewind_limit(self) -> int | None:
        """The most draft tokens a step may verify on this target's cache (None: no limit; 0: a
        recurrent cache that cannot take tokens back, so every generation decodes plain)."""
        return self.target_ctx.max_rewind

    @property
    def has_draft(self) -> bool:
        return self.models.draft is not None

    def rollback(self) -> dict:
        """How the target's cache takes tokens back: its kind ("positions", "snapshots", "none")
        and the most draft tokens a step may verify (None: any), with its MTP heads."""
        return {"kind": self.target_ctx.rewind, "limit": self.rewind_limit, "mtp_heads": self.models.target.mtp_heads}

    @property
    def mtp(self) -> MtpDrafter | None:
        """The target's own multi-token-prediction head as a drafter, when its file has one."""
        return self.engine.drafters.get(defaults.MTP)

    @property
    def n_ctx(self) -> int:
        return self.target_ctx.n_ctx

    # -- generations -------------------------------------------------------------------------

    def check_mode(self, mode: str) -> None:
        """Refuse a mode this session cannot run, before anything else happens."""
        require_mode(mode)
        if mode in ("draft", "hybrid", defaults.TEXT) and not self.has_draft and self.models.assistant is not None:
            raise InputError(
                f"--spec {mode} drafts with a draft model, and {self.models.draft_path.name} is a Gemma 4 MTP assistant",
                "use --spec mtp (or auto, the default) with the assistant",
            )
        if mode in ("draft", "hybrid", defaults.TEXT) and not self.has_draft:
            raise InputError(f"--spec {mode} needs a draft model", "pass --draft MODEL, or use --spec ngram or off")
        if mode == defaults.MTP and self.mtp is None:
            raise IncompatibleModelsError(
                f"--spec mtp drafts with the target's multi-token-prediction heads, and {self.models.target_path.name} has none",
                "use a model with MTP layers (Qwen3.5/3.6, GLM-4.5), or --spec auto, ngram or draft",
            )
        if mode == defaults.TEXT and self.models.drafting != "text":
            raise InputError(
                "--spec text drafts with a model of another vocabulary, and this draft shares the target's",
                "use --spec draft (or auto) with this pair",
            )

    def policy(
        self, mode: str, settings: GenerationSettings, *, fresh: bool = False, verifier: Verifier | None = None
    ) -> tuple[Policy, PromptLookup | None]:
        """How a generation in `mode` speculates with the settings' K and tuning; under auto, also
        the prompt lookup that lives as long as the session. A `verifier` other than the real one
        (a benchmark's synthetic acceptance) gets an auto state of its own that starts from nothing
        learned and is thrown away after: what it sees is not the models' acceptance."""
        self.check_mode(mode)
        k = settings.draft_max_for(mode)
        if self.rewind_limit is not None:
            k = min(k, self.rewind_limit)
        if mode == defaults.MTP and self.mtp.k_max is not None:
            k = min(k, self.mtp.k_max)
        if self.rewind_limit == 0 and mode != "off" and not self._said_plain:
            self._said_plain = True
            self.models.warn(
                f"specrun: {self.models.target_path.name}'s cache cannot take tokens back, so every mode decodes plain"
            )
        tuning = dict(
            ngrams=(settings.ngram_min, settings.ngram_max),
            draft_p_min=settings.draft_p_min,
            draft_min=settings.draft_min,
        )
        if mode == "off" or k <= 0:
            return Policy("off", 0), None
        checked = {} if verifier is None else {"verifier": verifier}
        if mode != "auto":
            return Policy(mode, k, **tuning, **checked), None
        if verifier is not None:
            controller, lookup = (
                self.controller(k, min(k, defaults.DRAFT_MAX)),
                PromptLookup(*tuning["ngrams"], k_max=k),
            )
        else:
            controller, lookup = self._auto_state(k, min(k, defaults.DRAFT_MAX), tuning["ngrams"], fresh)
        return Policy("auto", k, controller, **tuning, **checked), lookup

    def generation(
        self,
        tokens: Sequence[int],
        settings: GenerationSettings,
        *,
        mode: str | None = None,
        fresh: bool = False,
        on_step: Callable[[Update], None] | None = None,
        verifier: Verifier | None = None,
    ) -> Generation:
        """A generation of `tokens` in `mode` (None: the default mode): "off" (plain decoding),
        "draft" (the draft model), "ngram" (prompt lookup), "hybrid" (lookup when it has a confident
        match, else the draft model) or "auto" (chosen per step from measured costs and acceptance).
        `fresh`: auto starts from nothing this session learned and keeps nothing, as a new process.
        `verifier`: accept drafts by another rule than `verify` (see `policy`); nothing is kept."""
        policy, lookup = self.policy(mode or defaults.SPEC_MODE, settings, fresh=fresh, verifier=verifier)
        keeps = policy.auto and verifier is None
        on_finish = (lambda _: self._finished(policy, lookup, settings, fresh)) if keeps else None
        return Generation(self.engine, tokens, settings, policy, lookup=lookup, on_step=on_step, on_finish=on_finish)

    def stream(self, tokens: Sequence[int], settings: GenerationSettings, *, mode: str | None = None) -> Iterator[Step]:
        return self.generation(tokens, settings, mode=mode).run()

    def reset(self) -> None:
        """Empty every cache: the next generation prefills its whole prompt."""
        for ctx in (self.target_ctx, self.draft_ctx, self.head_ctx):
            if ctx is not None:
                ctx.clear()

    # -- auto's state ------------------------------------------------------------------------

    def controller(self, k_max: int, k_start: int | None = None) -> Controller:
        """A controller seeded from the decode costs (measured now when none are known)."""
        model, mtp = self.engine.model, self.mtp
        names = (
            [defaults.LOOKUP] + ([model.name] if model is not None else []) + ([mtp.name] if mtp is not None else [])
        )
        caps = {mtp.name: mtp.k_max} if mtp is not None and mtp.k_max is not None else {}
        controller = Controller(names, k_max=k_max, k_start=k_start or min(k_max, defaults.DRAFT_MAX), caps=caps)
        costs = self.decode_costs()
        passes = {}
        if model is not None and costs.draft_passes():
            passes[model.name] = costs.draft_passes()
        if mtp is not None and costs.mtp_s:
            passes[mtp.name] = dict(costs.mtp_s)
        controller.seed(costs.verify_s, passes or None)
        return controller

    def _auto_state(
        self, k_max: int, k_start: int, ngrams: tuple[int, int], fresh: bool
    ) -> tuple[Controller, PromptLookup]:
        """The controller and its lookup, kept across generations and started from what earlier
        runs learned (specrun's cache); with `fresh` every generation gets new ones."""
        key = (k_max, ngrams)
        if fresh or self._auto is None or self._auto[0] != key:
            controller = self.controller(k_max, k_start)
            lookup = PromptLookup(*ngrams, k_max=k_max)
            learned = self._learned(ngrams)
            if learned:
                controller.learn(learned.get("controller", {}))
                lookup.restore(learned.get("lookup", {}), LEARNED_WEIGHT)
            self._auto = (key, controller, lookup)
        return self._auto[1], self._auto[2]

    def _learned_key(self, ngrams: tuple[int, int]) -> str:
        return cost_cache.learned_key(self.models.target_path, self.models.draft_path, ngrams)

    def _learned(self, ngrams: tuple[int, int]) -> dict | None:
        """What earlier runs learned; read once per process, so runs in one process (a bench with
        `fresh`) all start from the same point."""
        if ngrams not in self._snapshots:
            self._snapshots[ngrams] = cost_cache.LEARNED.get(self._learned_key(ngrams))
        return self._snapshots[ngrams]

    def _finished(self, policy: Policy, lookup: PromptLookup, settings: GenerationSettings, fresh: bool) -> None:
        """After an auto generation: keep what it learned for later runs (not when `fresh`), and
        drop cached costs that its own timing proved far too high (a calibration on a busy
        machine): the next run measures again."""
        controller = policy.controller
        drift = controller.drift
        if drift is not None and drift.factor < 1 / DISAGREE:
            cost_cache.drop(self.models.costs_key)
        if not fresh:
            ngrams = (settings.ngram_min, settings.ngram_max)
            cost_cache.LEARNED.put(
                self._learned_key(ngrams), {"controller": controller.learned(), "lookup": lookup.state()}
            )

    # -- decode costs ------------------------------------------------------------------------

    def calibrate(self) -> DecodeCosts:
        """Measure the decode costs now, whatever is cached, and keep them for later runs if they
        were measured in good conditions."""
        self.costs = None
        return self.decode_costs(measure=True)

    def decode_costs(self, *, measure: bool = False) -> DecodeCosts:
        """The decode costs: from specrun's cache, else measured now (a few seconds, once). Costs
        measured in bad conditions are used for this session only, and said so."""
        if self.costs is None:
            models = self.models
            self.costs = None if measure else cost_cache.load(models.costs_key, models.threads)
            if self.costs is not None and self.mtp is not None and not self.costs.mtp_s:
                self.costs = None  # kept before this target's head was timed
            if self.costs is None:
                models.warn(
                    "specrun: measuring decode costs for these models and settings (a few seconds; kept for next time)"
                )
                self.costs = self.measure()
                rejected = cost_cache.store(models.costs_key, self.costs, models.threads)
                if rejected:
                    models.warn(f"specrun: these costs are used for this run only and not kept: {'; '.join(rejected)}")
        return self.costs

    def measure(self, seq: int = 0, *, parallel: int | None = None) -> DecodeCosts:
        """Time target passes by batch size and draft passes by rows on one sequence (emptied
        afterwards), at the sizes `parallel` sequences decoded together need (default: this
        session's)."""
        tokens = self.models.target.tokenize(defaults.CALIBRATION_TEXT, add_special=True, parse_special=False)[
            : defaults.CALIBRATION_TOKENS
        ]
        verify, draft = calibration_sizes(parallel or self.parallel, self.target_ctx.n_ctx - len(tokens))
        return measure_costs(
            self.target_ctx,
            self.draft_ctx,
            tokens,
            verify,
            threads=self.models.threads,
            offloaded=self.models.offloaded,
            draft_sizes=draft,
            seq=seq,
            head=self.head_ctx,
        )

    def close(self) -> None:
        self.engine.close()
