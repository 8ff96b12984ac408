"""The one step of the engine, for any number of sequences: plan → draft → one target pass →
accept, commit and trim each. `specrun run`, chat, bench, the library and the server all drive it;
a single request is a batch of one.

A step (1) finishes sequences whose context is full, (2) asks the policy's drafters that propose
ahead (prompt lookup) for every decoding sequence, (3) plans who drafts and how much (the auto
controller, or the mode's fixed K), (4) runs each other drafter once for all the sequences it was
given, (5) verifies every `[last] + draft` and the prompt chunks of sequences still reading their
prompt in one llama_decode, and (6) accepts each sequence's longest agreeing prefix (or resamples
at the first rejection), trims its cache past it, commits, and lets the drafters and the
controller learn from the outcome. Sequences ids are shared by the target's and the drafters'
contexts; the slot pool decides which sequence a new generation takes (the one whose cache shares
the longest prefix with its prompt) and which idle caches are dropped when cells run short. With a
prompt cache in RAM, a cache given up is saved there first, and a generation whose prompt a saved
cache serves further than any sequence's restores it (engine/prompt_cache.py).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .. import defaults
from .auto.control import PLAIN, Ask, Choice, Controller, Outcome
from .auto.plan import Candidate, Option, fixed
from .cache_keeper import CacheKeeper
from .constrained import constrained_draft, constrained_pick, guide, verify_constrained
from .drafting.protocol import Draft, Drafter, DraftRequest, DraftTuning, handed
from .llama import Context, common_prefix
from .logprobs import TokenLogprob, committed
from .prompt_cache import PromptCache
from .sampling import make_rng
from .segments import Segment
from .sequence import GenerationSettings, Lead, SequenceState
from .slots import SlotPool
from .verify import Verifier, only_row, verify

EMPTY = Draft()
Proposed = dict[str, dict[int, Draft]]  # drafter -> sequence -> its proposal in hand


def _after(state: SequenceState, leads: Mapping[int, Lead]) -> list[int]:
    """A sequence's history with the tokens its constraint leads with: what its drafters draft after."""
    lead = leads.get(state.seq)
    return state.history + lead.tokens if lead is not None else state.history


def _defer(proposals: Proposed, ahead: Sequence[Drafter]) -> None:
    """A drafter that `defers_to` another (a prediction to prompt lookup) offers each sequence its
    proposal as it stands beside the other's (`beside`): what both propose is judged once."""
    for drafter in ahead:
        other = proposals.get(drafter.defers_to or "")
        if other is not None and drafter.name in proposals:
            proposals[drafter.name] = {
                seq: drafter.beside(draft, other.get(seq)) for seq, draft in proposals[drafter.name].items()
            }


def _confidence(draft: Draft) -> list[float]:
    """A proposal's per-token chances of acceptance (certain where it gives none)."""
    return draft.confidence or [1.0] * len(draft.tokens)


@dataclass
class Update:
    """What one step did for one sequence."""

    sequence: SequenceState
    tokens: list[int] = field(default_factory=list)
    text: str = ""
    choice: Choice = PLAIN
    drafted: int = 0
    accepted: int = 0
    forced: int = 0  # tokens the constraint forced ahead of the draft (certain, not counted in drafted)
    lead: int = 0  # rows the constraint's lead took at the head of the draft (forced and likely tokens)
    lead_kept: int = 0  # of them, those kept
    done: bool = False
    draft_s: float = 0.0  # the step's planning and drafting, and its target pass with verification
    verify_s: float = 0.0
    logprobs: list[TokenLogprob] = field(default_factory=list)  # of `tokens`, when the settings ask
    prompt_logprobs: list[TokenLogprob] | None = None  # of the prompt's tokens after the first, once it is read

    @property
    def drafter(self) -> str | None:
        return self.choice.drafter if self.drafted else None


@dataclass
class StepReport:
    """One step: every sequence's update, and the batch it took."""

    updates: list[Update] = field(default_factory=list)
    rows: int = 0
    prompt_rows: int = 0
    draft_seconds: float = 0.0  # planning and drafting, before the target pass
    verify_seconds: float = 0.0  # the target pass and verification
    decode_seconds: float = 0.0  # inside llama_decode, target and drafters
    seconds: float = 0.0  # the whole step

    @property
    def host_seconds(self) -> float:
        """Time outside llama_decode: the Python side of the step."""
        return max(0.0, self.seconds - self.decode_seconds)


@dataclass(frozen=True)
class Policy:
    """How the engine speculates: a mode, the registered drafters it drafts with (in the mode's
    order of preference; every one under auto), their tuning (the most draft tokens a step may
    verify, the draft models' early stop, prompt lookup's match lengths), under `auto` the
    controller that decides (elsewhere a controller, when given, only keeps the cost curves
    current), and the rule that accepts drafts: `verify`, or a benchmark's synthetic stand-in
    (verify.SyntheticAcceptance). Made by runtime.Session.policy."""

    mode: str = defaults.OFF
    drafters: tuple[str, ...] = ()
    tuning: DraftTuning = DraftTuning()
    controller: Controller | None = None
    verifier: Verifier = verify

    @property
    def k_max(self) -> int:
        return self.tuning.k_max

    @property
    def plain(self) -> bool:
        """Nothing drafts: every step verifies one token a sequence."""
        return not self.drafters or self.k_max <= 0

    @property
    def auto(self) -> bool:
        return defaults.MODES[self.mode].chooses and self.controller is not None

    def label(self) -> str:
        if self.auto:
            return self.controller.label()
        return "plain" if self.plain else f"{self.mode} K={self.k_max}"


class Engine:
    """Decodes sequences of a target context together, with the drafters given (every drafter's
    context shares the target's sequence ids). The slot pool has one slot per sequence of the
    target context."""

    def __init__(
        self,
        target: Context,
        drafters: Sequence[Drafter] = (),
        *,
        n_batch: int | None = None,
        cache: PromptCache | None = None,
    ):
        self.target = target
        self.cache = cache
        self.drafters: dict[str, Drafter] = {d.name: d for d in drafters}
        self.n_batch = n_batch or target.n_batch
        self.policy = Policy()
        self._active: list[Drafter] = []
        self.slots = SlotPool(target.n_seq, target.common_prefix, lambda s: len(self.target.tokens[s]))
        self.keeper = None if cache is None else CacheKeeper(cache, target, self.drafters, self._make_room, self._drop)
        self.steps = 0
        self.reuse_runs = 0  # > 0: a prompt keeps later runs of at least this many cached tokens (kv_reuse.py)

    # -- configuration -----------------------------------------------------------------------

    def configure(self, policy: Policy) -> None:
        """Speculate as `policy` says from now on."""
        missing = [name for name in policy.drafters if name not in self.drafters]
        if missing:
            raise ValueError(f"no drafter {missing[0]!r} is registered")
        if policy.plain:
            policy = Policy(defaults.OFF, controller=policy.controller)
        self.policy = policy
        self._active = [self.drafters[name] for name in policy.drafters]
        for drafter in self.drafters.values():
            drafter.configure(policy.tuning)
        if self.target.features:  # the layer inputs a head reads cost every pass: kept only while it may draft
            self.target.capture(any(d.reads_layer_inputs for d in self._active))

    @property
    def reads_ahead(self) -> list[Drafter]:
        """In a fixed mode, its drafters that keep a cache: they read each prompt at prefill. Under
        auto a drafter catches up when first chosen, a cost the controller weighs."""
        return [] if self.policy.auto else [d for d in self._active if d.ctx is not None]

    # -- sequences ---------------------------------------------------------------------------

    def admit(
        self,
        prompt: Sequence[int],
        settings: GenerationSettings,
        *,
        arrived: float | None = None,
        given: Sequence[object] = (),
        boundaries: Sequence[int] = (),
        rng=None,
        expected_tokens: float | None = None,
    ) -> SequenceState:
        """Give a generation a sequence, reusing the longest cached prefix of its prompt (every
        token but the last, whose logits the first step needs), from a sequence or from the prompt
        cache. `given`: what the caller hands the drafters, each value to the drafter that `takes`
        its type (drafter.begin). `boundaries`: positions in the prompt where a later prompt is
        likely to part (message boundaries), saved to the prompt cache as they are read where a
        restored cache cannot be cut. `expected_tokens`: how long answers like this one ran, where
        the caller knows (auto weighs exploring a drafter against what is left of it)."""
        admitted = time.perf_counter()
        seq, shared = self.slots.claim(prompt)
        try:
            self._drop_dominated(seq, prompt, shared)
            scoring = settings.score_prompt  # every prompt row's logits are wanted: the whole prompt is read
            keep = 0 if scoring else min(shared, len(prompt) - 1)
            if self.cache is not None and not scoring:
                keep = self.keeper.restore(seq, prompt, keep, self.target.keepable(seq, keep))
            read_before = self.target.run_reads
            if self.reuse_runs and not scoring:
                keep = self._reuse_runs(seq, prompt, keep)
            if self.cache is not None:
                self.keeper.save_before_cut(seq, keep)
            self.target.trim(seq, keep)
            k_max = min(settings.k_max_for(self.policy.mode), self.policy.k_max) if self.policy.k_max else 0
            state = SequenceState(
                seq,
                prompt,
                settings,
                self.target.model,
                cached=keep,
                k_max=k_max,
                rng=rng if rng is not None else make_rng(settings.seed),
                arrived=arrived,
                admitted=admitted,
                read_in_cache=self.target.run_reads - read_before,
                expected_tokens=expected_tokens,
            )
            if self.cache is not None and not self.target.cuts_restored:
                state.save_at = sorted({b for b in boundaries if keep < b < len(prompt)} | {len(prompt)})
            self.target.shortlist(seq, state.shortlist)
        except BaseException:  # a generation that cannot start never holds a sequence
            self.slots.release(seq)
            self._drop(seq)
            raise
        for drafter in self.drafters.values():
            drafter.begin(seq, prompt, handed(given, drafter.takes))
        return state

    def _drop_dominated(self, seq: int, prompt: Sequence[int], shared: int) -> None:
        """Forget the kept caches that hold nothing but a part of what `seq` holds of `prompt` (a
        cancelled request's partial read of the same prompt): `seq` serves every prompt they
        would. Left in the shared cache, their cells would be attended to (masked) by every pass
        while a cell beyond them is used, and the prompt's new tokens would go beyond them."""
        for other in self.slots.evictable():
            held = len(self.target.tokens[other])
            if other != seq and held <= shared and self.target.common_prefix(other, prompt) == held:
                self._drop(other)

    def _reuse_runs(self, seq: int, prompt: Sequence[int], keep: int) -> int:
        """Keep the later runs of the cache of `seq` that `prompt` holds too (kv_reuse.py), in the
        target's cache and in a draft model's that reads the same tokens; how many tokens of
        `prompt` the target's cache then holds."""
        kept = self.target.reuse_run(
            seq, prompt, keep, self.reuse_runs, lambda cells: self._make_room(self.target, cells)
        )
        for drafter in self.drafters.values():
            ctx = drafter.ctx
            if drafter.holds_target_tokens and ctx is not None and ctx.reuses_runs:
                held = min(ctx.common_prefix(seq, prompt), len(prompt) - 1)
                ctx.reuse_run(seq, prompt, held, self.reuse_runs, lambda cells, ctx=ctx: self._make_room(ctx, cells))
        return kept

    def release(self, state: SequenceState) -> None:
        """The generation is over; its sequence keeps its cache for a follow-up (a recurrent one
        from a checkpoint, since a follow-up's prompt may take tokens back)."""
        self.slots.release(state.seq)
        self.target.checkpoint(state.seq)
        for drafter in self.drafters.values():
            drafter.finish(state.seq, state.history)

    def cancel(self, state: SequenceState) -> Update:
        """Stop a generation now (its client went away, or the server is stopping)."""
        state.finish("cancelled")
        self.release(state)
        return Update(state, done=True)

    def abort(self, state: SequenceState) -> None:
        """End a generation after a failure and forget its caches, whose state is unknown. The
        sequence is given back first, so it is free even if dropping the caches fails."""
        if not state.done:
            state.finish("cancelled")
        self.release(state)
        self._drop(state.seq)

    def _drop(self, seq: int) -> None:
        """Forget a sequence's caches: the target's, and every drafter's with what it keeps beside."""
        self.target.clear(seq)
        for drafter in self.drafters.values():
            drafter.forget(seq)

    def _save(self, seq: int) -> None:
        """Keep what `seq` caches in the prompt cache (when there is one)."""
        if self.keeper is not None:
            self.keeper.save(seq)

    def _contexts(self) -> list[Context]:
        return [self.target] + [d.ctx for d in self.drafters.values() if d.ctx is not None]

    # -- one step ----------------------------------------------------------------------------

    def step(self, sequences: Sequence[SequenceState]) -> StepReport:
        """Advance every live sequence by one target pass (see the module docstring)."""
        start = time.perf_counter()
        decoded_before = self.decode_seconds()
        self.steps += 1
        report = StepReport()
        live = [s for s in sequences if not s.done]
        for state in live:
            if state.prefilled and len(self.target.tokens[state.seq]) + 1 > self.target.n_ctx:
                state.finished = "context"
                report.updates.append(self._finish(Update(state)))
        decoding = [s for s in live if s.prefilled and not s.done]
        reading = [s for s in live if not s.prefilled]
        reserve = min(sum(len(s.pending) for s in reading), self.n_batch // 2)
        choices, proposals, leads = self._plan(decoding, reserve)
        drafts, passes = self._draft(decoding, choices, proposals, leads)
        skips = {s.seq: self._skipped(leads[s.seq], s) for s in decoding if s.seq in leads}
        segments = [
            Segment(
                s.seq,
                [s.history[-1]] + drafts.get(s.seq, EMPTY).tokens,
                "all" if drafts.get(s.seq, EMPTY).tokens else "last",
                skips.get(s.seq, 0),
            )
            for s in decoding
        ]
        room = self.n_batch - sum(len(seg.tokens) for seg in segments)
        chunks: list[tuple[SequenceState, int]] = []
        for state in reading:
            n = min(len(state.pending), room, state.read_until_save())
            if n <= 0:
                break
            rows = "all" if state.settings.score_prompt else "last" if n == len(state.pending) else "none"
            segments.append(Segment(state.seq, state.pending[:n], rows))
            chunks.append((state, n))
            room -= n
        if segments:
            self._target_pass(decoding, choices, drafts, leads, skips, passes, segments, chunks, report, start)
        report.seconds = time.perf_counter() - start
        report.decode_seconds = self.decode_seconds() - decoded_before
        return report

    def _skipped(self, lead: Lead, state: SequenceState) -> int:
        """The rows of a step's segment that need no logits: those predicting the tokens its
        constraint forces (a target that keeps hidden rows returns every row, and a sequence
        reporting log-probabilities needs every row)."""
        return 0 if self.target.hidden or state.settings.logprobs is not None else lead.certain

    def decode_seconds(self) -> float:
        """Time spent inside llama_decode so far, target and draft model."""
        return sum(ctx.decode_seconds for ctx in self._contexts())

    def _target_pass(
        self, decoding, choices, drafts, leads, skips, passes, segments, chunks, report: StepReport, start: float
    ) -> None:
        bases = {seg.seq: len(self.target.tokens[seg.seq]) for seg in segments}
        report.rows = sum(len(seg.tokens) for seg in segments)
        report.prompt_rows = sum(n for _, n in chunks)
        self._make_room(self.target, report.rows)
        verify_start = time.perf_counter()
        report.draft_seconds = verify_start - start
        decode_before = self.target.decode_seconds
        rows = self.target.decode(segments, copy=False)
        decode_s = self.target.decode_seconds - decode_before
        outcomes = []
        for state, logits in zip(decoding, rows):
            draft = drafts.get(state.seq, EMPTY)
            update, outcome = self._accept(
                state,
                choices.get(state.seq, PLAIN),
                draft,
                logits,
                bases[state.seq],
                leads.get(state.seq),
                skips.get(state.seq, 0),
            )
            report.updates.append(update)
            outcomes.append((state, update, outcome))
        report.verify_seconds = time.perf_counter() - verify_start
        for state, update, _ in outcomes:
            update.draft_s, update.verify_s = report.draft_seconds, report.verify_seconds
            state.stats.record_step(
                update.drafted, update.accepted, report.draft_seconds, report.verify_seconds, update.drafter
            )
            state.stats.forced_tokens += update.forced
            self._finish(update)
        controller = self.policy.controller
        if controller is not None and decoding:
            controller.observe(
                [o for _, _, o in outcomes],
                rows=None if chunks else report.rows,
                verify_s=decode_s,
                draft_s=sum(p.seconds for made in passes.values() for p in made),
                passes={name: [(p.rows, p.seconds) for p in made] for name, made in passes.items() if made},
            )
        for (state, n), logits in zip(chunks, rows[len(decoding) :]):
            update = self._read(state, n, logits)
            if update is not None:
                report.updates.append(update)

    def _accept(
        self,
        state: SequenceState,
        choice: Choice,
        draft: Draft,
        logits,
        base: int,
        lead: Lead | None = None,
        skipped: int = 0,
    ) -> tuple[Update, Outcome]:
        """Verify one sequence's draft, trim its cache past the first rejection, commit, learn. The
        draft's head is its constraint's `lead`: the drafter is judged on the rest, and only where
        the lead was accepted whole (otherwise its tokens were never tried). The first `skipped`
        rows came without logits."""
        forced, head = (lead.certain, len(lead.tokens)) if lead is not None else (0, 0)
        n_rows = len(draft.tokens)
        rows = logits.reshape(1 + n_rows - skipped, -1) if n_rows else logits  # a plain step's row stays as it came
        if state.matcher is not None:
            after = rows[forced - skipped :] if n_rows else rows  # the rows from the first unforced token on
            verdict = verify_constrained(draft.tokens, draft.q, after, state.sampling, state.rng, state.matcher, forced)
        else:
            verdict = self.policy.verifier(draft.tokens, draft.q, rows, state.sampling, state.rng)
        self.target.trim(state.seq, base + 1 + verdict.accepted)
        drafted, accepted = n_rows - head, max(0, verdict.accepted - head)
        if verdict.accepted < head:
            drafted = 0
        if drafted and choice.drafter is not None:
            self.drafters[choice.drafter].learn(state.seq, drafted, accepted)
            if self.policy.auto:
                own = state.own.get(choice.drafter)
                if own is None:
                    own = state.own[choice.drafter] = self.policy.controller.own_rates()
                own.update(choice.k, accepted)
        kept, text = state.commit(verdict.tokens)
        update = Update(
            state,
            kept,
            text,
            choice,
            drafted,
            accepted,
            forced=min(forced, len(kept)),
            lead=head,
            lead_kept=common_prefix(lead.tokens, kept) if lead is not None else 0,
            logprobs=committed(state.settings.logprobs, rows, kept),
        )
        return update, Outcome(choice, drafted, accepted)

    def _finish(self, update: Update) -> Update:
        """Close a sequence that met a stop condition: its held-back text, and its slot back."""
        state = update.sequence
        if state.finished is not None and not state.done:
            update.text += state.finish(state.finished)
            update.done = True
            self.release(state)
        return update

    def _read(self, state: SequenceState, n: int, logits) -> Update | None:
        """A prompt chunk was read; after the last one, the first token."""
        if state.settings.score_prompt:
            logits = state.score_read(n, logits)
        del state.pending[:n]
        if state.save_at and state.save_at[0] <= len(state.prompt) - len(state.pending):
            del state.save_at[0]
            self._save(state.seq)
        if not state.prefilled:
            return None
        for reader in self.reads_ahead:
            self._make_room(reader.ctx, len(state.prompt))
            reader.read([(state.seq, state.prompt)])
        state.stats.prefill_time = time.perf_counter() - (state.timings.admitted or state.timings.arrived)
        scores = state.prompt_logprobs if state.settings.score_prompt else None
        if state.settings.max_tokens <= 0:  # only the prompt was asked for: its scores, or a cache warmed
            state.finished = "max_tokens"
            return self._finish(Update(state, prompt_logprobs=scores))
        if state.matcher is not None:
            first = constrained_pick(only_row(logits), state.sampling, state.rng, state.matcher)
            state.matcher.consume([first])
        else:
            first = state.sampling.pick(logits, state.rng)
        kept, text = state.commit([first])
        state.stats.time_to_first_token = state.stats.prefill_time
        logprobs = committed(state.settings.logprobs, logits, kept)
        return self._finish(Update(state, kept, text, logprobs=logprobs, prompt_logprobs=scores))

    # -- planning and drafting ---------------------------------------------------------------

    def _plan(
        self, decoding: Sequence[SequenceState], reserve: int
    ) -> tuple[dict[int, Choice], Proposed, dict[int, Lead]]:
        """Each decoding sequence's choice, with the proposals of drafters that propose ahead, and
        the tokens a constraint forces ahead of any draft (the drafters draft what follows them)."""
        if not self._active or not decoding:
            return {}, {}, {}
        k_maxes = {s.seq: s.step_k_max(self.target.n_ctx, len(self.target.tokens[s.seq])) for s in decoding}
        leads = {s.seq: lead for s in decoding if (lead := s.lead(k_maxes[s.seq])) is not None}
        for seq, lead in leads.items():
            k_maxes[seq] -= len(lead.tokens)
        reserve += sum(len(lead.tokens) for lead in leads.values())
        proposals: Proposed = {}
        ahead = [d for d in self._active if d.ahead]
        if ahead:
            asked = [
                DraftRequest(s.seq, _after(s, leads), k, s.sampling, s.rng, guide(s, leads))
                for s in decoding
                if (k := k_maxes[s.seq]) > 0
            ]
            proposals = {d.name: d.propose(asked).drafts for d in ahead} if asked else {}
            _defer(proposals, ahead)
        max_rows = self.n_batch - reserve
        if not self.policy.auto:
            return self._fixed(decoding, k_maxes, proposals, max_rows), proposals, leads
        controller = self.policy.controller
        asks = []
        for s in decoding:
            in_hand = {name: _confidence(made[s.seq]) for name, made in proposals.items() if s.seq in made}
            behind = {
                d.name: controller.catch_up_seconds(d.name, d.lag(s.seq, _after(s, leads)))
                for d in self._active
                if not d.ahead and k_maxes[s.seq] > 0 and controller.weighs(d.name)
            }
            asks.append(Ask(s.seq, k_maxes[s.seq], s.expected_remaining(), s.own, in_hand, behind))
        decision = controller.plan(asks, max_rows=max_rows, base_rows=reserve)
        return dict(decision.choices), proposals, leads

    def _fixed(self, decoding, k_maxes: dict[int, int], proposals: Proposed, max_rows: int) -> dict[int, Choice]:
        """A fixed mode's choices: each sequence's options are its drafters' proposals in hand and
        the other drafters at its K, taken in the mode's order (plan.fixed)."""
        candidates = []
        for s in decoding:
            options = []
            for drafter in self._active:
                if not drafter.ahead:
                    options.append(Option(drafter.name, [1.0] * k_maxes[s.seq]))
                elif (draft := proposals.get(drafter.name, {}).get(s.seq)) is not None and draft.tokens:
                    options.append(Option(drafter.name, _confidence(draft)))
            candidates.append(Candidate(s.seq, options, k_maxes[s.seq]))
        alloc = fixed(candidates, self.policy.drafters, self.policy.k_max, max_rows=max_rows)
        return {seq: Choice(drafter, k) for seq, (drafter, k) in alloc.drafts.items()}

    def _draft(self, decoding, choices: dict[int, Choice], proposals: Proposed, leads: dict[int, Lead]):
        """The drafts the plan asked for: proposals in hand cut to their K, and each other
        drafter's, drafted for all its sequences together; with the passes each drafter ran. A
        constrained sequence's draft starts with its forced tokens and stops before the first
        token its constraint refuses."""
        drafts: dict[int, Draft] = {}
        requests: dict[str, list[DraftRequest]] = {}
        for s in decoding:
            choice = choices.get(s.seq, PLAIN)
            if choice.drafter is None or choice.k <= 0:
                continue
            if choice.drafter in proposals:
                if s.seq in proposals[choice.drafter]:
                    drafts[s.seq] = proposals[choice.drafter][s.seq].cut(choice.k)
            else:
                requests.setdefault(choice.drafter, []).append(
                    DraftRequest(s.seq, _after(s, leads), choice.k, s.sampling, s.rng, guide(s, leads))
                )
        passes = {}
        for name, asked in requests.items():
            drafter = self.drafters[name]
            if drafter.ctx is not None:
                self._make_room(drafter.ctx, sum(drafter.lag(r.seq, r.history) + r.k for r in asked))
            made = drafter.propose(asked)
            drafts.update(made.drafts)
            passes[name] = made.passes
        for s in decoding:
            if s.matcher is not None:
                drafts[s.seq] = constrained_draft(s, leads.get(s.seq), drafts.get(s.seq, EMPTY))
        return drafts, passes

    def _make_room(self, ctx: Context, needed: int) -> None:
        """Drop the caches of idle sequences, least recently used first, until `needed` cells are
        free; each is saved to the prompt cache first."""
        for seq in self.slots.evictable():
            if ctx.free() >= needed:
                return
            self._save(seq)
            self._drop(seq)

    def close(self) -> None:
        for ctx in reversed(self._contexts()):
            ctx.close()
