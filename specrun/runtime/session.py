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
from ..engine.attention import AttentionChoice, choose_attention
from ..engine.auto.control import LEARNED_WEIGHT, Controller
from ..engine.auto.costs import DecodeCosts, calibration_sizes
from ..engine.auto.costs import measure as measure_costs
from ..engine.auto.drift import DISAGREE
from ..engine.drafting import build_drafters
from ..engine.drafting.lookup import LookupStart
from ..engine.drafting.prediction import Predicted
from ..engine.drafting.prompt_lookup import PromptLookup
from ..engine.drafting.protocol import Drafter, DraftTuning, Sources
from ..engine.drafting.vocab_bridge import VocabBridge
from ..engine.generation import Generation, Step
from ..engine.llama import Context
from ..engine.model import Model
from ..engine.prompt_cache import PromptCache
from ..engine.sequence import GenerationSettings
from ..engine.step import Engine, Policy, Update
from ..engine.verify import Verifier
from ..errors import IncompatibleModelsError, InputError
from ..models.modelfile import FEATURE_HEAD_NAMES, a_feature_head
from . import cost_cache
from .context_size import available_memory


@dataclass(frozen=True)
class Offer:
    """What a pair can draft with, as far as it is known: the drafters its session registered (None
    before the models are loaded), whether a draft model was given, a Gemma 4 assistant's file
    name when one was, and the target's file name."""

    drafters: frozenset[str] | None = None
    draft: bool = False
    assistant: str | None = None
    target: str = "the target"


def check_mode(mode: str, offer: Offer | None = None) -> None:
    """Refuse a speculation mode that does not exist, or that `offer` cannot run (defaults.MODES
    says what each mode needs); what is not known yet is not judged."""
    if mode not in defaults.MODES:
        raise InputError(f"unknown speculation mode {mode!r}", f"use one of: {', '.join(defaults.MODES)}")
    needs = defaults.MODES[mode].needs
    if needs is None or offer is None:
        return
    if needs in defaults.DRAFT_MODEL_DRAFTERS and not offer.draft:
        if offer.assistant is not None:
            raise InputError(
                f"--spec {mode} drafts with a draft model, and {offer.assistant} is a Gemma 4 MTP assistant",
                "use --spec mtp (or auto, the default) with the assistant",
            )
        raise InputError(f"--spec {mode} needs a draft model", "pass --draft MODEL, or use --spec auto, ngram or off")
    if offer.drafters is None or needs in offer.drafters or needs == defaults.MODEL:
        return
    if needs in defaults.FEATURE_HEADS:
        raise InputError(
            f"--spec {mode} drafts with {a_feature_head(needs)} given as --draft, and this session has none",
            f"pass --draft {FEATURE_HEAD_NAMES[needs].split()[0]}-HEAD.gguf made for {offer.target}, "
            "or use --spec auto, ngram or draft",
        )
    if needs == defaults.MTP:
        raise IncompatibleModelsError(
            f"--spec mtp drafts with the target's multi-token-prediction heads, and {offer.target} has none",
            "use a model with MTP layers (Qwen3.5/3.6, GLM-4.5), or --spec auto, ngram or draft",
        )
    raise InputError(
        f"--spec {mode} drafts with a model of another vocabulary, and this draft shares the target's",
        "use --spec draft (or auto) with this pair",
    )


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
    feature_head: Model | None = None  # an EAGLE-3 or DFlash head given as the draft: reads the target's layer inputs
    flash_attn: str = "auto"  # fused attention: "on", "off", or "auto" (engine/attention.py)


class Session:
    """Contexts of `n_seq` sequences (a pool of `n_seq_pool` sequences' worth of cells) on the
    models, the engine over them with every drafter they can run, and what speculation learns
    across generations."""

    def __init__(
        self,
        models: Models,
        *,
        n_seq: int = 1,
        n_seq_pool: int | None = None,
        costs: DecodeCosts | None = None,
        cache_ram: int = 0,
    ):
        self.models = models
        common = dict(
            n_ctx=models.ctx_size, n_threads=models.threads, n_batch=models.n_batch, n_seq=n_seq, n_seq_pool=n_seq_pool
        )
        memory = available_memory()
        self.attention = self._attention(models, models.target, n_seq, n_seq_pool or n_seq, memory)
        common["fused_attention"] = self.attention.fused
        assistant, feature = models.assistant, models.feature_head
        heads = models.target.mtp_heads > 0 and assistant is None and feature is None
        self.target_ctx = Context(
            models.target,
            rollback=defaults.RECURRENT_K_MAX,
            hidden=heads or assistant is not None,
            features=feature.feature_head.layers if feature is not None else (),
            **common,
        )
        self.draft_ctx, self.draft_attention = None, None
        if models.draft is not None:
            self.draft_attention = self._attention(models, models.draft, n_seq, n_seq_pool or n_seq, memory)
            self.draft_ctx = Context(models.draft, **{**common, "fused_attention": self.draft_attention.fused})
        if assistant is not None:  # made while the target's cache is empty: making it empties that cache
            self.head_ctx = Context(assistant, head=True, other=self.target_ctx, **common)
        elif feature is not None:
            self.head_ctx = Context(feature, other=self.target_ctx, **common)
        else:
            self.head_ctx = Context(models.target, head=True, **common) if heads else None
        sources = Sources(
            self.target_ctx,
            self.draft_ctx,
            text=models.drafting == "text",
            bridge=models.bridge,
            head=self.head_ctx,
            assistant=assistant is not None,
            chained_heads=models.target.mtp_heads if models.mtp_chain == "chained" else 0,
            feature_head=feature.feature_head.kind if feature is not None else None,
        )
        cache = PromptCache(cache_ram) if cache_ram > 0 else None
        self.engine = Engine(self.target_ctx, build_drafters(sources), n_batch=models.n_batch, cache=cache)
        self.costs: DecodeCosts | None = costs  # the models' decode costs, once read or measured
        self.parallel = n_seq_pool or n_seq
        self._auto: tuple | None = None  # (key, controller, lookup), kept across generations
        self._snapshots: dict[tuple[int, int], dict | None] = {}
        self._said_plain = False  # a target that cannot rewind decodes plain: said once

    @staticmethod
    def _attention(models: Models, model: Model, sequences: int, pooled: int, memory: int | None) -> AttentionChoice:
        """How `model`'s context of `sequences` sequences in `pooled` sequences' cells computes
        attention, with `memory` bytes available (engine/attention.py)."""
        return choose_attention(
            models.flash_attn,
            offloaded=models.offloaded,
            sequences=sequences,
            n_cells=models.ctx_size * pooled,
            n_batch=models.n_batch,
            n_head=model.n_head,
            memory=memory,
        )

    @property
    def costs_key(self) -> str:
        """The cost cache's key: the pair's, and how the target and the draft compute attention
        (each is timed, and each may choose otherwise: their heads differ)."""
        draft = self.draft_attention.label if self.draft_attention is not None else "none"
        return f"{self.models.costs_key}-{self.attention.label}-{draft}"

    @property
    def max_rewind(self) -> int | None:
        """The most draft tokens a step may verify on this target's cache (None: no limit; 0: a
        recurrent cache that cannot take tokens back, so every generation decodes plain)."""
        return self.target_ctx.max_rewind

    @property
    def has_draft(self) -> bool:
        return self.models.draft is not None

    def rollback(self) -> dict:
        """How the target's cache takes tokens back: its kind ("positions", "snapshots", "none")
        and the most draft tokens a step may verify (None: any), with its MTP heads."""
        return {"kind": self.target_ctx.rewind, "limit": self.max_rewind, "mtp_heads": self.models.target.mtp_heads}

    @property
    def model_drafter(self) -> Drafter | None:
        """The drafter that runs the draft model (through tokens or through text), when there is one."""
        return next((d for d in self.engine.drafters.values() if d.runs_model), None)

    @property
    def head_drafter(self) -> Drafter | None:
        """The drafter that runs the head context (the target's own multi-token-prediction heads,
        a Gemma 4 assistant, or an EAGLE-3 or DFlash head), when there is one."""
        return next((d for d in self.engine.drafters.values() if d.runs_head), None)

    @property
    def n_ctx(self) -> int:
        return self.target_ctx.n_ctx

    # -- generations -------------------------------------------------------------------------

    def offer(self) -> Offer:
        assistant = self.models.draft_path.name if self.models.assistant is not None else None
        return Offer(frozenset(self.engine.drafters), self.has_draft, assistant, self.models.target_path.name)

    def check_mode(self, mode: str) -> None:
        """Refuse a mode this session cannot run, before anything else happens."""
        check_mode(mode, self.offer())

    def drafters_of(self, mode: str) -> tuple[str, ...]:
        """The registered drafters `mode` drafts with: every one under auto, else the mode's own
        (the draft model's, whichever way it drafts, where the mode names MODEL)."""
        if defaults.MODES[mode].chooses:
            return tuple(self.engine.drafters)
        model = self.model_drafter
        return tuple(
            model.name if name == defaults.MODEL and model is not None else name
            for name in defaults.MODES[mode].drafters
        )

    def policy(
        self,
        mode: str,
        settings: GenerationSettings,
        *,
        fresh: bool = False,
        verifier: Verifier | None = None,
        track_costs: bool = False,
    ) -> tuple[Policy, PromptLookup | None]:
        """How a generation in `mode` speculates with the settings' K and tuning, K within what the
        target's cache can take back and the mode's drafters can draft; under auto, also the prompt
        lookup that lives as long as the session. The one place a Policy is made.

        `fresh`: auto starts from what earlier processes learned, not this session, and keeps
        nothing. A `verifier` other than the real one (a benchmark's synthetic acceptance) gets an
        auto state of its own that starts from nothing learned and is thrown away after: what it
        sees is not the models' acceptance. `track_costs`: every mode gets a controller, which
        outside auto only keeps the cost curves current (a server predicts its requests' times
        from them)."""
        self.check_mode(mode)
        drafters = self.drafters_of(mode)
        k = settings.k_max_for(mode)
        if self.max_rewind is not None:
            k = min(k, self.max_rewind)
        if not defaults.MODES[mode].chooses:
            for name in drafters:
                cap = self.engine.drafters[name].k_max
                k = min(k, cap) if cap is not None else k
        if self.max_rewind == 0 and drafters and not self._said_plain:
            self._said_plain = True
            self.models.warn(
                f"specrun: {self.models.target_path.name}'s cache cannot take tokens back, so every mode decodes plain"
            )
        tuning = DraftTuning(k, settings.draft_min, settings.draft_p_min, (settings.ngram_min, settings.ngram_max))
        checked = {} if verifier is None else {"verifier": verifier}
        if not drafters or k <= 0:
            return Policy(defaults.OFF, controller=self.controller(1) if track_costs else None), None
        if not defaults.MODES[mode].chooses:
            return Policy(mode, drafters, tuning, self.controller(k) if track_costs else None, **checked), None
        if verifier is not None:
            controller, lookup = self.controller(k), PromptLookup(*tuning.ngrams, k_max=k)
        else:
            controller, lookup = self._auto_state(k, tuning.ngrams, fresh)
        return Policy(mode, drafters, tuning, controller, **checked), lookup

    def generation(
        self,
        tokens: Sequence[int],
        settings: GenerationSettings,
        *,
        mode: str | None = None,
        fresh: bool = False,
        on_step: Callable[[Update], None] | None = None,
        verifier: Verifier | None = None,
        prediction: Sequence[int] | None = None,
    ) -> Generation:
        """A generation of `tokens` in `mode` (None: the default mode): "off" (plain decoding),
        "draft" (the draft model), "ngram" (prompt lookup), "hybrid" (lookup when it has a confident
        match, else the draft model) or "auto" (chosen per step from measured costs and acceptance).
        `fresh`: auto starts from nothing this session learned and keeps nothing, as a new process.
        `verifier`: accept drafts by another rule than `verify` (see `policy`); nothing is kept.
        `prediction`: the tokens the answer is expected to be (the file before an edit), drafted
        from as a copy is (drafting/prediction.py)."""
        policy, lookup = self.policy(mode or defaults.SPEC_MODE, settings, fresh=fresh, verifier=verifier)
        keeps = policy.auto and verifier is None
        on_finish = (lambda _: self._finished(policy, lookup, settings, fresh)) if keeps else None
        given: list[object] = []
        if lookup is not None:
            given.append(LookupStart(carried=lookup))
        if prediction:
            given.append(Predicted(tuple(prediction)))
        return Generation(self.engine, tokens, settings, policy, given=given, on_step=on_step, on_finish=on_finish)

    def stream(
        self,
        tokens: Sequence[int],
        settings: GenerationSettings,
        *,
        mode: str | None = None,
        prediction: Sequence[int] | None = None,
    ) -> Iterator[Step]:
        return self.generation(tokens, settings, mode=mode, prediction=prediction).run()

    def reset(self) -> None:
        """Empty every cache: the next generation prefills its whole prompt."""
        for ctx in (self.target_ctx, self.draft_ctx, self.head_ctx):
            if ctx is not None:
                ctx.clear()
        if self.engine.cache is not None:
            self.engine.cache.clear()

    # -- auto's state ------------------------------------------------------------------------

    def controller(self, k_max: int) -> Controller:
        """A controller over every drafter of the session, seeded from the decode costs (measured
        now when none are known)."""
        drafters = self.engine.drafters
        caps = {name: d.k_max for name, d in drafters.items() if d.k_max is not None}
        controller = Controller(list(drafters), k_max=k_max, k_start=min(k_max, defaults.DRAFT_MAX), drafter_k_max=caps)
        costs = self.decode_costs()
        passes, blocks = self.drafter_passes(costs)
        controller.seed(costs.verify_s, passes or None, blocks=blocks)
        return controller

    def drafter_passes(self, costs: DecodeCosts) -> tuple[dict[str, dict[int, float]], frozenset[str]]:
        """Per drafter that runs passes, its pass seconds by rows as `costs` timed them (the draft
        model's, the head's), and which of them draft a block per pass: what auto is seeded with
        and the bench prices steps by."""
        timed = {}
        for drafter, seconds in ((self.model_drafter, costs.draft_passes()), (self.head_drafter, costs.head_s)):
            if drafter is not None and seconds:
                timed[drafter.name] = dict(seconds)
        return timed, frozenset(name for name in timed if self.engine.drafters[name].drafts_blocks)

    def _auto_state(self, k_max: int, ngrams: tuple[int, int], fresh: bool) -> tuple[Controller, PromptLookup]:
        """The controller and its lookup, kept across generations and started from what earlier
        runs learned (specrun's cache); with `fresh` every generation gets new ones."""
        key = (k_max, ngrams)
        if fresh or self._auto is None or self._auto[0] != key:
            controller = self.controller(k_max)
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
            cost_cache.drop(self.costs_key)
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
            self.costs = None if measure else cost_cache.load(self.costs_key, models.threads)
            if self.costs is not None and self.head_drafter is not None and not self.costs.head_s:
                self.costs = None  # kept before this target's head was timed
            if self.costs is None:
                models.warn(
                    "specrun: measuring decode costs for these models and settings (a few seconds; kept for next time)"
                )
                self.costs = self.measure()
                rejected = cost_cache.store(self.costs_key, self.costs, models.threads)
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
