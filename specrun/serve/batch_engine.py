"""The step loop of the server: every active request advances in one target batch per step.

A step (1) reads prompt chunks of newly admitted requests, (2) asks each decoding request's prompt
lookup for a proposal, (3) decides who drafts and how much (budget.allocate under auto, the
mode's fixed K otherwise), (4) runs the draft model for those it chose, all of them batched,
(5) verifies every request's `[last] + draft` and the prompt chunks in one llama_decode with
logits for every draft row, and (6) commits each request's accepted tokens, trimming its
sequence past its first rejection. Invariant between steps, as in the single-request loop: a
request's sequence holds its history except the last token, which is fed first in the next batch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from ..engine.auto.estimates import PositionRates
from ..engine.batch import Segment, SharedContext
from ..engine.drafting.batched_model import BatchedModelDrafter, DraftJob
from ..engine.drafting.model import VocabBridge
from ..engine.drafting.protocol import Draft
from ..engine.llama import Model
from ..engine.verify import verify_greedy, verify_sampling
from .budget import LOOKUP, MODEL, Allocation, Candidate, Option, allocate, fixed, model_can_pay
from .costs import CALIBRATION_TEXT, BatchCosts, calibrate
from .sequence import Generation, Job, blended_rates
from .slots import SlotPool

SERVE_MODES = ("off", "auto", "draft", "ngram", "hybrid")
PROBE_EVERY = 16  # steps between tries of the draft model for a request whose estimates keep it idle
PROBE_EVERY_MAX = 512


@dataclass(frozen=True)
class EngineConfig:
    """How the engine runs: sequences decoded together, each one's context, the speculation mode
    and K, and the draft model's early stop."""

    parallel: int
    ctx_size: int
    threads: int
    mode: str = "auto"
    k_cap: int = 31
    draft_min: int = 0
    draft_p_min: float = 0.0
    n_batch: int = 512
    idle_slots: int | None = None  # finished requests whose caches are kept (default: as many as parallel)


@dataclass
class Update:
    """What one step did for one request."""

    generation: Generation
    text: str = ""
    tokens: list[int] = field(default_factory=list)
    drafter: str | None = None
    drafted: int = 0
    accepted: int = 0
    done: bool = False


@dataclass
class StepReport:
    """One step: every request's update, and the batch it took."""

    updates: list[Update] = field(default_factory=list)
    rows: int = 0
    prompt_rows: int = 0
    verify_seconds: float = 0.0
    draft_seconds: float = 0.0


class BatchEngine:
    """Decodes the active requests together on shared target and draft contexts."""

    def __init__(self, target: Model, draft: Model | None, bridge: VocabBridge | None, config: EngineConfig,
                 costs: BatchCosts | None = None, warn: Callable[[str], None] | None = None):
        if config.mode not in SERVE_MODES:
            raise ValueError(f"unknown mode {config.mode!r}")
        self.config = config
        self.model = target
        self.mode = config.mode
        self.k_cap = config.k_cap if config.mode != "off" else 0
        self.n_batch = config.n_batch
        n_slots = config.parallel + (config.idle_slots if config.idle_slots is not None else config.parallel)
        common = dict(n_seq=n_slots, n_ctx_seq=config.ctx_size, n_threads=config.threads, n_batch=config.n_batch,
                      n_seq_pool=config.parallel)
        self.target = SharedContext(target, **common)
        uses_model = draft is not None and config.mode in ("auto", "draft", "hybrid")
        self.draft_ctx = SharedContext(draft, **common) if uses_model else None
        self.drafter = (BatchedModelDrafter(self.draft_ctx, p_min=config.draft_p_min, min_draft=config.draft_min, bridge=bridge)
                        if self.draft_ctx is not None else None)
        self.slots = SlotPool(n_slots, self.target.common_prefix, lambda s: len(self.target.tokens[s]))
        if costs is None:
            if warn is not None:
                warn("specrun serve: measuring batch costs")
            tokens = target.tokenize(CALIBRATION_TEXT, add_special=True, parse_special=False)[:48]
            costs = calibrate(self.target, self.draft_ctx, tokens, parallel=config.parallel)
        self.costs = costs
        self.model_viable = self.drafter is not None and (
            config.mode != "auto" or (bool(costs.draft) and model_can_pay(costs.costs(), max(self.k_cap, 1))))
        self.pooled_model = PositionRates(max(self.k_cap, 1))
        self.active: dict[int, Generation] = {}
        self.steps = 0

    # -- requests ----------------------------------------------------------------------------

    def admit(self, job: Job, arrived: float) -> Generation:
        """Give a job a sequence, reusing the longest cached prefix of its prompt."""
        slot, shared = self.slots.claim(job.prompt)
        keep = min(shared, len(job.prompt) - 1)
        self.target.trim(slot, keep)
        gen = Generation(job, slot, self.model, cached=keep, k_cap=self.k_cap,
                         lookup=self.mode in ("auto", "ngram", "hybrid"), arrived=arrived)
        gen.next_probe = self.steps + PROBE_EVERY
        self.active[slot] = gen
        return gen

    def cancel(self, gen: Generation) -> Update:
        """Stop a request now (its client went away, or the server is stopping)."""
        gen.finish("cancelled")
        return self._release(gen, Update(gen, done=True))

    def abort(self, gen: Generation) -> None:
        """Cancel a request after a failed step and forget its caches, whose state is unknown."""
        if gen.slot in self.active:
            self.cancel(gen)
        self.target.clear(gen.slot)
        if self.draft_ctx is not None:
            self.draft_ctx.clear(gen.slot)

    def _release(self, gen: Generation, update: Update) -> Update:
        self.active.pop(gen.slot, None)
        self.slots.release(gen.slot)
        return update

    # -- one step ----------------------------------------------------------------------------

    def step(self) -> StepReport:
        """Advance every active request by one target pass (see the module docstring)."""
        self.steps += 1
        report = StepReport()
        for gen in list(self.active.values()):
            if gen.prefilled and len(self.target.tokens[gen.slot]) + 1 > self.target.n_ctx_seq:
                text = gen.finish("context")
                report.updates.append(self._release(gen, Update(gen, text=text, done=True)))
        decoding = [g for g in self.active.values() if g.prefilled]
        reading = [g for g in self.active.values() if not g.prefilled]
        reserve = min(sum(len(g.pending) for g in reading), self.n_batch // 2)
        alloc, proposals = self._plan(decoding, reserve)
        drafts = self._draft(decoding, alloc, proposals, report)
        segments = [Segment(g.slot, [g.history[-1]] + drafts.get(g.slot, Draft()).tokens, "all") for g in decoding]
        room = self.n_batch - sum(len(s.tokens) for s in segments)
        chunks: list[tuple[Generation, int]] = []
        for gen in reading:
            n = min(len(gen.pending), room)
            if n <= 0:
                break
            segments.append(Segment(gen.slot, gen.pending[:n], "last" if n == len(gen.pending) else "none"))
            chunks.append((gen, n))
            room -= n
        if not segments:
            return report
        bases = {s.seq: len(self.target.tokens[s.seq]) for s in segments}
        self._make_room(self.target, sum(len(s.tokens) for s in segments))
        start = time.perf_counter()
        rows = self.target.decode(segments)
        report.verify_seconds = time.perf_counter() - start
        report.rows = sum(len(s.tokens) for s in segments)
        report.prompt_rows = sum(n for _, n in chunks)
        if not chunks:
            self.costs.verify.add(report.rows, report.verify_seconds)
        for gen, logits in zip(decoding, rows):
            report.updates.append(self._verify(gen, drafts.get(gen.slot, Draft()), alloc, logits, bases[gen.slot], report))
        for (gen, n), logits in zip(chunks, rows[len(decoding):]):
            update = self._read(gen, n, logits, report)
            if update is not None:
                report.updates.append(update)
        return report

    def _plan(self, decoding: list[Generation], reserve: int) -> tuple[Allocation, dict[int, Draft]]:
        """Each request's options (the lookup proposal in hand, the draft model at its estimated
        acceptance), then who drafts how much."""
        proposals: dict[int, Draft] = {}
        if self.mode == "off" or not decoding:
            return Allocation(), proposals
        candidates = []
        for gen in decoding:
            cap = gen.room(self.target.n_ctx_seq, len(self.target.tokens[gen.slot]))
            options: list[Option] = []
            if gen.lookup is not None:
                proposal = gen.lookup.propose(gen.history, cap) if cap > 0 else Draft()
                proposals[gen.slot] = proposal
                if proposal.tokens:
                    options.append(Option(LOOKUP, proposal.confidence or [1.0] * len(proposal.tokens)))
            probe = None
            if self.model_viable and cap > 0:
                model = Option(MODEL, blended_rates(gen.model_rates, self.pooled_model, cap), catch_up=self.drafter.lag(gen.slot, gen.history))
                options.append(model)
                if self.mode == "auto" and self.steps >= gen.next_probe:
                    probe = model
            candidates.append(Candidate(gen.slot, options, cap, probe))
        max_rows = self.n_batch - reserve
        if self.mode == "auto":
            return allocate(candidates, self.costs.costs(), max_rows=max_rows, base_rows=reserve), proposals
        return fixed(candidates, self.mode, self.k_cap, max_rows=max_rows), proposals

    def _draft(self, decoding: list[Generation], alloc: Allocation, proposals: dict[int, Draft], report: StepReport) -> dict[int, Draft]:
        """The drafts the allocation asked for: lookup proposals cut to their K, and the draft
        model's, drafted for all its requests together."""
        drafts: dict[int, Draft] = {}
        jobs = []
        for gen in decoding:
            drafter, k = alloc.drafter(gen.slot), alloc.k(gen.slot)
            if drafter == LOOKUP:
                proposal = proposals[gen.slot]
                drafts[gen.slot] = Draft(proposal.tokens[:k], None, (proposal.confidence or [])[:k])
            elif drafter == MODEL:
                jobs.append(DraftJob(gen.slot, gen.history, k, gen.settings.sampling, gen.rng))
        if jobs:
            self._make_room(self.draft_ctx, sum(self.drafter.lag(j.seq, j.history) + j.k for j in jobs))
            made = self.drafter.propose(jobs)
            drafts.update(made.drafts)
            report.draft_seconds += made.seconds
            for drafted in made.passes:
                self.costs.draft.add(drafted.tokens, drafted.seconds)
        return drafts

    def _verify(self, gen: Generation, draft: Draft, alloc: Allocation, logits, base: int, report: StepReport) -> Update:
        """Accept the longest agreeing prefix of the draft (or resample at the first rejection),
        trim the sequence past it, commit, and learn from the outcome."""
        rows = logits.reshape(1 + len(draft.tokens), -1)
        sampling = gen.settings.sampling
        if sampling.greedy:
            verdict = verify_greedy(draft.tokens, rows)
        else:
            verdict = verify_sampling(draft.tokens, draft.probs, lambda i: sampling.probs(rows[i]), gen.rng)
        self.target.trim(gen.slot, base + 1 + verdict.accepted)
        n_draft = len(draft.tokens)
        drafter = alloc.drafter(gen.slot) if n_draft else None
        self._learn(gen, drafter, alloc.k(gen.slot), n_draft, verdict.accepted)
        gen.stats.record_step(n_draft, verdict.accepted, report.draft_seconds, report.verify_seconds, drafter)
        kept, text = gen.commit(verdict.tokens)
        update = Update(gen, text, kept, drafter, n_draft, verdict.accepted)
        return self._finish_if_done(gen, update)

    def _learn(self, gen: Generation, drafter: str | None, k: int, drafted: int, accepted: int) -> None:
        if drafter == LOOKUP and gen.lookup is not None:
            gen.lookup.feedback(drafted, accepted)
        if drafter == MODEL:
            gen.model_rates.update(k, accepted)
            self.pooled_model.update(k, accepted)
            gen.probe_every = PROBE_EVERY if accepted == drafted else min(2 * gen.probe_every, PROBE_EVERY_MAX)
            gen.next_probe = self.steps + gen.probe_every

    def _read(self, gen: Generation, n: int, logits, report: StepReport) -> Update | None:
        """A prompt chunk was read; after the last one, the first token."""
        del gen.pending[:n]
        if not gen.prefilled:
            return None
        if self.model_viable:
            self._make_room(self.draft_ctx, len(gen.job.prompt))
            caught = self.drafter.catch_up([(gen.slot, gen.job.prompt)])
            if caught is not None:
                report.draft_seconds += caught.seconds
                self.costs.draft.add(caught.tokens, caught.seconds)
        gen.stats.prefill_time = time.perf_counter() - (gen.timings.admitted or gen.timings.arrived)
        kept, text = gen.commit([gen.pick(logits)])
        gen.stats.time_to_first_token = gen.stats.prefill_time
        return self._finish_if_done(gen, Update(gen, text, kept))

    def _finish_if_done(self, gen: Generation, update: Update) -> Update:
        if gen.finished is None:
            return update
        update.text += gen.finish(gen.finished)
        update.done = True
        return self._release(gen, update)

    def _make_room(self, ctx: SharedContext, needed: int) -> None:
        """Drop the caches of idle sequences, least recently used first, until `needed` cells are free."""
        for seq in self.slots.evictable():
            if ctx.free() >= needed:
                return
            self.target.clear(seq)
            if self.draft_ctx is not None:
                self.draft_ctx.clear(seq)

    # -- shutting down -----------------------------------------------------------------------

    def close(self) -> None:
        for ctx in (self.draft_ctx, self.target):
            if ctx is not None:
                ctx.close()
