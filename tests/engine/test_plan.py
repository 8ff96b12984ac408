"""Who drafts how much in a step of one or many sequences (engine.auto.plan), with made-up costs
and acceptance: pure functions, no model, no clock."""

from __future__ import annotations

import pytest
from sim_control import OneSequence

from specrun.defaults import LOOKUP, MODEL
from specrun.engine.auto.control import Controller
from specrun.engine.auto.cost_model import Costs
from specrun.engine.auto.plan import Candidate, Grant, Option, allocate, fixed


def linear(per_token: float = 0.01):
    """A pass costs in proportion to its tokens, as on a CPU whose cores a single token already fills."""
    return lambda n: per_token * n


def flat(seconds: float = 0.01, per_token: float = 0.0001):
    """A pass costs about the same whatever its size, as on a GPU."""
    return lambda n: seconds + per_token * n


def lookup(seq: int, rate: float, n: int = 8, k_max: int = 8) -> Candidate:
    return Candidate(seq, [Option(LOOKUP, [rate] * n)], k_max)


def test_nothing_drafts_when_batch_cost_grows_with_its_size():
    candidates = [lookup(0, 0.99), lookup(1, 0.95), lookup(2, 0.9), lookup(3, 0.99)]
    alloc = allocate(candidates, Costs(linear()), max_rows=512)
    assert alloc.drafts == {}
    assert alloc.tokens == 4 and alloc.seconds == pytest.approx(0.04)


def test_alone_a_sure_draft_pays_even_on_a_growing_cost_when_its_tokens_are_nearly_free():
    # A CPU whose pass over 16 tokens costs only 3 single ones (tiles): a long, sure lookup draft pays.
    costs = Costs(lambda n: 0.01 if n == 1 else 0.03 if n <= 16 else 0.01 * n)
    alloc = allocate([lookup(0, 0.95, n=15, k_max=31)], costs, max_rows=512)
    assert alloc.drafts == {0: (LOOKUP, 15)}


def test_the_request_with_better_acceptance_gets_the_draft_tokens():
    # Each extra row costs a tenth of a plain step of the two: worth only sure tokens.
    costs = Costs(lambda n: 0.02 + 0.004 * max(0, n - 2))
    alloc = allocate([lookup(0, 0.3), lookup(1, 0.9)], costs, max_rows=512)
    assert 0 not in alloc.drafts
    assert alloc.drafts[1][0] == LOOKUP and alloc.drafts[1][1] >= 4


def test_everyone_drafts_when_passes_are_flat():
    alloc = allocate([lookup(0, 0.8), lookup(1, 0.7)], Costs(flat()), max_rows=512)
    assert alloc.drafts == {0: (LOOKUP, 8), 1: (LOOKUP, 8)}
    assert alloc.tokens > 2 * (1 + 0.7 + 0.49)


def test_the_batch_never_exceeds_its_rows():
    alloc = allocate([lookup(s, 0.9) for s in range(4)], Costs(flat()), max_rows=10)
    assert 4 + sum(k for _, k in alloc.drafts.values()) <= 10
    alloc = allocate([lookup(s, 0.9) for s in range(4)], Costs(flat()), max_rows=40, base_rows=30)
    assert 30 + 4 + sum(k for _, k in alloc.drafts.values()) <= 40


def test_a_costly_draft_model_is_not_used_and_a_cheap_one_is():
    model = Candidate(0, [Option(MODEL, [0.8] * 8)], 8)
    dear = allocate([model], Costs(flat(), {MODEL: lambda n: 0.02}), max_rows=512)
    cheap = allocate([model], Costs(flat(), {MODEL: lambda n: 0.001}), max_rows=512)
    assert dear.drafts == {}
    assert cheap.drafts[0][0] == MODEL and cheap.drafts[0][1] >= 2


def test_a_draft_model_pass_is_shared_by_every_request_drafting_with_it():
    # Each depth's draft pass costs the same for 1 row or 4. Alone, a request drafts; in a batch of
    # four, each lengthening its draft alone would pay a whole pass for one row and never pay.
    costs = Costs(flat(), {MODEL: lambda n: 0.004})
    model = [Option(MODEL, [0.6, 0.6, 0.5, 0.5, 0.4, 0.4, 0.3, 0.3])]
    one = allocate([Candidate(0, model, 8)], costs, max_rows=512)
    four = allocate([Candidate(s, model, 8) for s in range(4)], costs, max_rows=512)
    assert one.drafts == {0: (MODEL, 1)}
    assert four.drafts == {s: (MODEL, 1) for s in range(4)}


def test_a_request_drafts_with_one_drafter_per_step():
    cand = Candidate(0, [Option(LOOKUP, [0.9] * 3), Option(MODEL, [0.9] * 8)], 8)
    alloc = allocate([cand], Costs(flat(), {MODEL: lambda n: 0.0001}), max_rows=512)
    assert alloc.drafts[0][0] in (LOOKUP, MODEL)
    assert alloc.drafts[0][1] <= (3 if alloc.drafts[0][0] == LOOKUP else 8)


def test_a_probe_is_granted_whatever_the_estimates_say():
    probe = Option(MODEL, [0.01] * 8)
    alloc = allocate(
        [Candidate(0, [probe], 8)], Costs(linear(), {MODEL: lambda n: 0.01}), max_rows=512, grants=[Grant(0, probe, 2)]
    )
    assert alloc.drafts == {0: (MODEL, 2)}


def test_the_fixed_modes_draft_their_k_however_full_the_batch():
    cands = [Candidate(s, [Option(LOOKUP, [0.9] * 3), Option(MODEL, [0.5] * 8)], 8) for s in range(3)]
    assert fixed(cands, (MODEL,), 4, max_rows=512).drafts == {s: (MODEL, 4) for s in range(3)}
    assert fixed(cands, (LOOKUP,), 4, max_rows=512).drafts == {
        s: (LOOKUP, 3) for s in range(3)
    }  # as far as the lookup goes
    unsure = [Candidate(0, [Option(LOOKUP, [0.2] * 3), Option(MODEL, [0.5] * 8)], 8)]
    assert fixed(unsure, (LOOKUP, MODEL), 4, max_rows=512).drafts == {0: (MODEL, 4)}
    assert fixed(cands, (LOOKUP, MODEL), 4, max_rows=512).drafts[0] == (LOOKUP, 3)


def test_the_draft_model_can_pay_only_when_its_passes_and_verification_are_cheap():
    sizes = (1, 2, 4, 8, 16, 32)

    def judged(verify, draft) -> bool:
        controller = Controller([LOOKUP, MODEL], 8)
        controller.seed({n: verify(n) for n in sizes}, {MODEL: {n: draft(n) for n in sizes}} if draft else None)
        return not controller.hopeless(MODEL)

    assert judged(flat(), lambda n: 0.001)
    assert not judged(linear(), lambda n: 0.006 * n)  # this project's CPU: 0.6 of a target token
    unknown = OneSequence([LOOKUP, MODEL], 8)
    unknown.seed({n: flat()(n) for n in sizes})
    assert (
        MODEL not in unknown.costs().draft and unknown.best().drafter is None
    )  # unmeasured: never chosen on estimates


def test_a_block_drafter_drafts_every_sequence_in_one_pass_over_their_rows():
    """A DFlash head's draft of m tokens is one pass over m + 1 rows, and the sequences drafting
    with it share that pass: priced as one pass over all their rows, not a pass per depth."""
    block = "dflash"
    pass_s = {1: 0.002, 2: 0.002, 9: 0.0025, 36: 0.004}
    costs = Costs(flat(), {block: lambda n: pass_s.get(n, 0.002 + 0.00006 * n)}, blocks=frozenset({block}))
    assert costs.draft_seconds(block, 8) == pytest.approx(0.0025)  # one pass over 9 rows
    sure = [Option(block, [0.9] * 8)]
    four = allocate([Candidate(s, sure, 8) for s in range(4)], costs, max_rows=512)
    assert set(four.drafts) == {0, 1, 2, 3} and all(d == (block, 8) for d in four.drafts.values())
    per_depth = Costs(flat(), {block: lambda n: pass_s.get(n, 0.002 + 0.00006 * n)})
    assert allocate([Candidate(s, sure, 8) for s in range(4)], per_depth, max_rows=512).seconds > four.seconds


def _greedy_chunks(candidates, costs, max_rows, value):
    """The allocation spelled out: while some chunk gains more expected tokens than its seconds
    are worth (at the better of `value` and the plan's rate), take the first of the largest net;
    a chunk lengthens by j tokens the drafts of the r sequences most likely to gain among those
    drafting k0 tokens with one drafter (or not drafting yet)."""
    from specrun.engine.auto.plan import _Plan

    plan = _Plan(candidates, costs, 0)
    while True:
        worth, best, best_net = max(value, plan.alloc.rate), None, 1e-12
        groups = {}
        for cand in candidates:
            current, k0 = plan.alloc.drafter(cand.seq), plan.alloc.k(cand.seq)
            for option in cand.options:
                if current is None or option.drafter == current:
                    groups.setdefault((option.drafter, k0), []).append((cand, option))
        for (drafter, k0), group in groups.items():
            room = {c.seq: min(c.k_max, len(o.acceptance)) - k0 for c, o in group}
            for j in range(1, max(room.values(), default=0) + 1):
                able = sorted(
                    ((plan.gain(o, k0, j), c.seq, o) for c, o in group if room[c.seq] >= j),
                    key=lambda x: x[0],
                    reverse=True,
                )
                for r in range(1, len(able) + 1):
                    if plan.rows + r * j > max_rows:
                        break
                    gain, cost = sum(g for g, _, _ in able[:r]), plan.cost(drafter, r, k0, j)
                    if gain - worth * cost > best_net:
                        best, best_net = (able[:r], k0, j, gain, cost), gain - worth * cost
        if best is None:
            return plan.alloc
        members, k0, j, gain, cost = best
        plan.apply([(seq, option) for _, seq, option in members], k0, j, gain, cost)


@pytest.mark.parametrize("seed", range(40))
def test_the_allocation_takes_the_chunk_of_the_largest_net_gain_until_none_gains(seed):
    """allocate, which weighs its chunks without making an object for each, chooses as the
    plain greedy search over every chunk does, on random batches, curves and drafters."""
    import random

    rnd = random.Random(seed)
    per_row = rnd.choice([0.00002, 0.0002, 0.002])
    verify = {n: 0.01 + per_row * n * rnd.uniform(0.8, 1.2) for n in range(1, 600)}
    pass_s = {n: 0.001 + 0.0001 * n for n in range(1, 600)}
    costs = Costs(
        verify.__getitem__, {MODEL: pass_s.__getitem__, "dflash": pass_s.__getitem__}, blocks=frozenset({"dflash"})
    )
    candidates = []
    for seq in range(rnd.randint(1, 6)):
        names = rnd.sample([LOOKUP, MODEL, "dflash"], rnd.randint(0, 3))
        options = [Option(name, [rnd.uniform(0.3, 1.0) for _ in range(rnd.randint(1, 40))]) for name in names]
        candidates.append(Candidate(seq, options, rnd.randint(1, 40)))
    max_rows, value = rnd.choice([8, 32, 512]), rnd.uniform(0.0, 150.0)
    got = allocate(candidates, costs.remembered(), max_rows=max_rows, value=value)
    want = _greedy_chunks(candidates, costs.remembered(), max_rows, value)
    assert got.drafts == want.drafts
    assert got.tokens == pytest.approx(want.tokens) and got.seconds == pytest.approx(want.seconds)
