"""How the auto controller learns what it does not know yet: warm-ups of new drafters, probes of
drafters not in use, and the budget those tries may spend. Kept apart from the estimates
(estimation.py) they feed and from the per-step protocol (control.py) that grants them.
"""

from __future__ import annotations

from collections.abc import Sequence

from .estimates import DrafterEstimates
from .estimation import Estimation
from .plan import Allocation, Grant, Option
from .protocol import Ask, Choice, Decision, Outcome

WEIGH_AGAIN = 8  # steps a loser's verdict stands while it is not used (its use judges it again at once)
ESTABLISHED_SHARE = 0.5  # a drafter drafting for this share of recent sequence-steps has shown it pays
USE_DECAY = 0.98  # per step, for that share: about the last fifty steps
EXPLORE_ODDS = 0.5  # the chance an untried drafter turns out as good as it could be, when weighing a try


class Exploration(Estimation):
    """Warm-ups, probes and their budget, on top of the estimates they measure.

    One plain step and `warmup_steps` steps of each drafter at `k_start` first; later each drafter
    that is not used is probed with K = `probe_k` every `probe_every` steps. A probe that fails
    doubles that interval (up to `probe_every_max`); one that surprises (all accepted where the
    estimate expected otherwise) is followed by another at once, and so is an empty probe of a cheap
    drafter while plain decoding is best, since it cost a plain step. Positions deeper than any
    tried borrow the drafter's pooled rate, so K grows while acceptance holds up, and a sudden change
    of acceptance drops the drafter's history (see DrafterEstimates), so K follows within a few
    steps. A hopeless drafter is neither warmed up nor probed. With `explore_share` (a server sets
    it), the tries of a drafter that runs passes, and the catch-ups of one not yet drafting for
    ESTABLISHED_SHARE of the sequences, together cost at most that share of the seconds stepped.
    """

    def __init__(
        self,
        k_max: int,
        *,
        k_start: int,
        warmup_steps: int,
        probe_k: int,
        probe_every: int,
        probe_every_max: int,
        explore_share: float | None,
        **estimation,
    ):
        super().__init__(k_max, **estimation)
        self.k_start = max(1, min(k_start, k_max))
        self.warmup_steps = warmup_steps
        self.probe_k = max(1, min(probe_k, k_max))
        self.probe_base = probe_every
        self.probe_every_max = probe_every_max
        self.probe_every: dict[str, int] = {}  # per drafter: steps between probes while it is not used
        self.next_probe: dict[str, int] = {}
        # Per drafter: whether `weighs` found it worth weighing, its steps then, and the step it was
        # judged: costs drift slowly, and its profile is its own pass over every K.
        self._weighed: dict[str, tuple[int, int, bool]] = {}
        self.steps = 0  # steps observed: the clock warm-ups and probes keep
        # Exploration's budget, when it has one: tries of drafters that run passes (warm-ups,
        # probes) may cost at most this share of the seconds stepped so far (see `affords`).
        self.explore_share = explore_share
        self.busy_s = 0.0
        self.explore_s = 0.0
        self._chosen: dict[str, float] = {}  # decayed count of sequence-steps each drafter drafted as the best choice
        self._decoded = 0.0  # and of all sequence-steps

    def _track(self, name: str) -> DrafterEstimates:
        if name not in self.tracks:
            self.probe_every[name] = self.probe_base
            self.next_probe[name] = 0
        return super()._track(name)

    def established(self, drafter: str) -> bool:
        """Whether `drafter` drafts for at least ESTABLISHED_SHARE of the sequences decoded lately:
        its catch-ups are then the price of a drafter that pays, not a bet on one that might."""
        chosen = self._chosen.get(drafter, 0.0)
        return chosen > 0 and chosen >= ESTABLISHED_SHARE * self._decoded

    def _count_use(self, decision: Decision) -> None:
        """Fold one step's choices into the decayed counts `established` reads."""
        for name in self._chosen:
            self._chosen[name] *= USE_DECAY
        self._decoded = USE_DECAY * self._decoded + len(decision.choices)
        for choice in decision.choices.values():
            if choice.drafter is not None and choice.reason == "best":
                self._chosen[choice.drafter] = self._chosen.get(choice.drafter, 0.0) + 1

    def weighs(self, drafter: str) -> bool:
        """Whether plan() weighs `drafter` at all; for one it does not, nothing it would need (its
        catch-up, its profile) is worth working out: one the seeded costs ruled out, and one that
        runs passes, was tried, loses to plain decoding at its best K and is not due a probe (its
        probes, warm-ups and a change of its estimates bring it back)."""
        if drafter in self.ruled_out:
            return False
        if drafter not in self.passes or self.tracks[drafter].steps < self.warmup_steps:
            return True
        if self.steps >= self.next_probe.get(drafter, 0):
            return True
        tried = self.tracks[drafter].steps
        kept = self._weighed.get(drafter)
        if kept is not None and kept[0] == tried and self.steps - kept[1] < WEIGH_AGAIN:
            return kept[2]
        best, plain = self.best_rate(drafter), self.plain_rate()
        verdict = best is None or plain is None or best >= plain
        self._weighed[drafter] = (tried, self.steps, verdict)
        return verdict

    def worth_exploring(
        self, drafter: str, steps: int = 1, remaining: int | None = None, catch_up_s: float = 0.0
    ) -> bool:
        """Whether trying `drafter` for `steps` steps can repay itself within the tokens left: a try
        costs its step over a plain one (and any catch-up its cache needs first); it pays back only
        if the drafter turns out good (EXPLORE_ODDS), by at most the time its ceiling saves per
        token over the remaining tokens. Unknown costs or budget: worth it."""
        ceiling, plain = self.ceiling(drafter), self.plain_rate()
        if remaining is None or ceiling is None or plain is None:
            return True
        saving = EXPLORE_ODDS * remaining * (1.0 / plain - 1.0 / ceiling)
        return saving > self.try_seconds(drafter, steps, catch_up_s)

    def try_seconds(self, drafter: str, steps: int = 1, catch_up_s: float = 0.0) -> float:
        """What trying `drafter` for `steps` steps costs over plain ones: its steps' extra seconds
        at the K a try uses, and the catch-up its cache needs first (costs unknown: the catch-up)."""
        if drafter not in self.tracks or not self._known(drafter) or not self.verify:
            return catch_up_s
        k = self.probe_k if self.tracks[drafter].steps >= self.warmup_steps else self.k_start
        costs = self.costs()
        return max(0.0, steps * (costs.step_seconds(k, drafter) - costs.plain_s)) + catch_up_s

    def affords(self, drafter: str, seconds: float) -> bool:
        """Whether exploration's budget has room for `seconds` more spent on `drafter`. Without a
        budget, or for a drafter that runs no passes (its proposals cost next to nothing), always.
        A server sets one: a try of a head or a draft model first reads the sequence's whole
        history, and in a server of short bursts those catch-ups cost more than the drafter could
        win back."""
        if self.explore_share is None or drafter not in self.passes:
            return True
        return self.explore_s + seconds <= self.explore_share * self.busy_s

    def _charge(self, drafter: str, seconds: float) -> None:
        """Take `seconds` spent on `drafter` from the budget `affords` consults."""
        if self.explore_share is not None and drafter in self.passes:
            self.explore_s += seconds

    def _affords_catch_up(self, ask: Ask, drafter: str) -> bool:
        """Under an exploration budget, a drafter not yet established may switch a sequence whose
        cache for it lags only while the budget has room for the catch-up: the plan weighs one
        step, and a catch-up it judged worth it on one sequence's rates does not always pay in a
        batch, where draft rows cost more."""
        catch_up = ask.catch_up_s.get(drafter, 0.0)
        return not catch_up or self.established(drafter) or self.affords(drafter, catch_up)

    def _warmups(self, asks: Sequence[Ask]) -> list[tuple[Grant, str]]:
        """Drafters still being measured, each granted to one sequence that can use it."""
        grants, taken = [], set()
        for name, track in self.tracks.items():
            for ask in self._least_behind(asks, name):
                if ask.seq in taken or ask.k_max <= 0:
                    continue
                if name in ask.in_hand:
                    confidence = ask.in_hand[name]
                    if confidence and len(self.verify.sizes()) < 2:
                        # Only single-token passes measured: verify costs for a batch are a guess
                        # that would veto every lookup draft, so take this proposal once to measure them.
                        grants.append(
                            (
                                Grant(
                                    ask.seq, Option(name, list(confidence)), min(len(confidence), self.k_max, ask.k_max)
                                ),
                                "warmup",
                            )
                        )
                        taken.add(ask.seq)
                        break
                    continue
                catch_up = ask.catch_up_s.get(name, 0.0)
                if (  # the budget first: under a server's, it refuses most steps and costs least to ask
                    track.steps < self.warmup_steps
                    and self.affords(name, tried := self.try_seconds(name, 1, catch_up))
                    and not self.hopeless(name)
                    and self.worth_exploring(name, self.warmup_steps - track.steps, ask.remaining, catch_up)
                ):
                    self._charge(name, tried)
                    option = Option(name, self.acceptance(name, ask.own.get(name), self._k_max_for(name, ask)))
                    grants.append((Grant(ask.seq, option, min(self.k_start, self._k_max_for(name, ask))), "warmup"))
                    taken.add(ask.seq)
                break
        return grants

    @staticmethod
    def _least_behind(asks: Sequence[Ask], name: str) -> list[Ask]:
        """The asks in the order a warm-up or probe of `name` tries them: those whose cache for it
        has least to catch up first (a head's or draft model's first use reads a whole history)."""
        return sorted(asks, key=lambda ask: ask.catch_up_s.get(name, 0.0))

    def _probe(self, asks: Sequence[Ask], decision: Decision, alloc: Allocation, max_rows: int) -> None:
        """A due probe of each drafter nobody uses, given to one sequence that is not drafting with
        a proposal in hand; every drafter in use has its probe interval reset."""
        used = {choice.drafter for choice in decision.choices.values() if choice.drafter}
        for name in used:
            self.probe_every[name] = self.probe_base
        rows = len(asks) + sum(c.k for c in decision.choices.values())
        for name, due in self.next_probe.items():
            if name in used or self.steps < due or self.hopeless(name):
                continue
            for ask in self._least_behind(asks, name):
                current = decision.choice(ask.seq)
                if (
                    name in ask.in_hand
                    or (current.drafter is not None and current.drafter in ask.in_hand)
                    or current.reason != "best"
                ):
                    continue
                k = min(self.probe_k, self._k_max_for(name, ask))
                catch_up = ask.catch_up_s.get(name, 0.0)
                if not self.affords(name, tried := self.try_seconds(name, 1, catch_up)):
                    break  # the asks behind it have as much to catch up or more
                if k <= 0 or rows - current.k + k > max_rows:
                    continue
                if not self.worth_exploring(name, 1, ask.remaining, catch_up):
                    continue
                self._charge(name, tried)
                decision.choices[ask.seq] = Choice(name, k, "probe")
                rows += k - current.k
                break

    def _observe_drafter(self, choice: Choice, outcome: Outcome, plain_is_best: bool, verify_s: float) -> None:
        """Fold one sequence's draft into its drafter's estimates, and schedule the drafter's next
        probe by what this one showed."""
        name = choice.drafter
        track = self._track(name)
        probing = choice.reason == "probe"
        drafted, accepted = outcome.drafted, outcome.accepted
        surprise = probing and drafted > 0 and accepted == drafted and track.accept.survival(drafted)[-1] < 0.5
        track.update(choice.k, drafted, accepted, outcome.draft_s)
        if probing:
            free = plain_is_best and drafted == 0 and outcome.draft_s <= 0.05 * self.verify(1)
            if surprise or free:
                self.next_probe[name] = self.steps
                return
            self.probe_every[name] = min(2 * self.probe_every[name], self.probe_every_max)
        self.next_probe[name] = self.steps + self.probe_every[name]
