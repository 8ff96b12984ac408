"""Replay speculation policies on recorded outputs, with a cost curve instead of a clock.

At temperature 0 the target's answer is fixed, so whether a draft is accepted does not depend on
timing: the policy under study (auto, or a fixed lookup K) is run step by step against the
recorded answer, each step charged what the cost curve says a target pass over its batch costs.
The speedup it reports is what that policy would reach on a machine with that curve, free of the
noise of a shared machine. Record answers with `--record` (plain decoding of every built-in
prompt), then replay them with a curve of your machine's costs (see `specrun doctor`).

Answers sampled at a temperature replay sampling too: a sample matches a drafted token x with
probability p(x), which is the chance the point-mass rule accepts x, and after a mismatch the
sample is the target's own token. Record several seeds for a stable figure.

`--session` replays as a bench or a chat runs: one controller and one lookup across every answer,
in `--orders` shuffled orders, each order read twice and the second pass counted.

`auto+prediction:K` replays auto with each prompt's last code block (the file an edit starts
from, recorded with the answers) as its predicted output beside prompt lookup, as
`specrun bench --predict` runs it; answers recorded without one replay as plain auto.

Two ceilings say how far any choice of K could go with the same proposals on that curve.
`oracle:K` knows before each step how many of the proposal's tokens will be accepted and takes
the cheapest schedule of steps (no real policy can see that far). `fitted:K` is the best fixed
rule that looks only at the past: a K for each length of the run of tokens the proposal has got
right so far (none, 1-3, 4-7, 8-15, 16 or more), chosen over a grid to do best on these very
answers (geometric mean), so it flatters itself. With `+prediction` both read the prediction's
proposal beside prompt lookup's: the oracle the one that keeps more, the rule the one whose run
is longer.

    python scripts/replay_auto.py --record answers.json --target T.gguf -n 128
    python scripts/replay_auto.py --record sampled.json --target T.gguf --temperature 0.8 --seeds 1,2,3
    python scripts/replay_auto.py answers.json --curve 1:0.028,2:0.042,5:0.084,16:0.140,32:0.240
    python scripts/replay_auto.py sampled.json --session --orders 6 --configs auto:31
    python scripts/replay_auto.py answers.json --configs auto:63,auto+prediction:63
    python scripts/replay_auto.py answers.json --configs auto:63,oracle:63,fitted:63
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from specrun.engine.auto.control import LEARNED_WEIGHT, PLAIN, Ask, Choice, Controller, Outcome
from specrun.engine.auto.estimates import CostCurve
from specrun.engine.drafting.prediction import Prediction, beside_lookup
from specrun.engine.drafting.prompt_lookup import PromptLookup
from specrun.engine.drafting.protocol import DraftTuning
from specrun.engine.llama import common_prefix

LOOKUP_SECONDS = 0.0002  # what proposing costs prompt lookup, per step
PREDICTED = "auto+prediction"
CEILINGS = ("oracle", "fitted")
RUN_BUCKETS = (1, 4, 8, 16)  # a fitted rule's K changes where the proposal's run reaches these lengths
FITTED_KS = (0, 1, 2, 3, 4, 7, 15, 31, 63)  # the K a fitted rule may give a run length


def policy(curve: CostCurve, mode: str, k: int) -> tuple[Controller | None, PromptLookup]:
    """A fresh lookup, and for auto its controller seeded with the curve."""
    controller = None
    if mode.startswith("auto"):
        drafters = ["ngram", "prediction"] if mode == PREDICTED else ["ngram"]
        controller = Controller(drafters, k_max=k, k_start=min(k, 4))
        controller.seed(curve.points())
    return controller, PromptLookup(1, 8, k_max=k)


def replay(
    prompt: list[int],
    output: list[int],
    curve: CostCurve,
    mode: str,
    k: int,
    learned: dict | None = None,
    state: tuple[Controller | None, PromptLookup] | None = None,
    prediction: list[int] | None = None,
) -> tuple[float, dict]:
    """Seconds the policy takes to produce `output` after its first token, and step counts. With
    `learned` (auto only), the run starts from what an earlier process kept, and leaves there what
    it learned, as one-shot runs do through specrun's cache. With `state`, it goes on with that
    controller and lookup, as one process does from answer to answer."""
    controller, lookup = state if state is not None else policy(curve, mode, k)
    if controller is not None and learned:
        controller.learn(learned["controller"])
        lookup.restore(learned["lookup"], LEARNED_WEIGHT)
    predicted = Prediction(prediction, len(prompt), DraftTuning(k_max=k)) if mode == PREDICTED and prediction else None
    history = list(prompt) + output[:1]
    position, seconds = 1, 0.0
    counts = defaultdict(int)
    while position < len(output):
        room = min(k, len(output) - position - 1)
        proposals = {"ngram": lookup.propose(history, room)}
        if predicted is not None:
            proposals["prediction"] = beside_lookup(predicted.propose(history, room), proposals["ngram"])
        proposal, drafter = proposals["ngram"], "ngram"
        if controller is not None:
            in_hand = {name: made.confidence or [] for name, made in proposals.items()}
            ask = Ask(0, k, len(output) - position, in_hand=in_hand)
            choice = controller.plan([ask], max_rows=k + 1).choice(0)
            drafter = choice.drafter or "ngram"
            proposal = proposals.get(drafter, proposal)
            draft = proposal.tokens[: min(choice.k, room)] if choice.drafter in proposals else []
        else:
            draft = proposal.tokens
        accepted = common_prefix(draft, output[position:])
        t_verify, t_draft = curve(len(draft) + 1), LOOKUP_SECONDS
        if draft:
            (predicted.lookup if drafter == "prediction" else lookup).feedback(len(draft), accepted)
        if controller is not None:
            ran = Choice(drafter, len(draft), choice.reason) if draft else PLAIN
            outcome = Outcome(ran, len(draft), accepted, t_draft)
            controller.observe([outcome], rows=len(draft) + 1, verify_s=t_verify, draft_s=t_draft)
        committed = output[position : position + accepted + 1]
        history += committed
        position += len(committed)
        seconds += t_verify + t_draft
        counts["steps"] += 1
        counts["drafted"] += len(draft)
        counts["accepted"] += accepted
    if controller is not None and learned is not None:
        learned.update(controller=controller.learned(), lookup=lookup.state())
    return seconds, dict(counts)


def proposals_at(prompt: list[int], output: list[int], k: int, prediction: list[int] | None) -> list[list[tuple]]:
    """At every position after the first, each source's proposal as (accepted, drafted, run):
    how many of its tokens the answer keeps, how many it drafts, and for how many positions in a
    row before this one its first token was right. Proposals depend on the history only (their
    confidence, which feedback moves, is not read), so one pass over the answer gives them all."""
    sources = [PromptLookup(1, 8, k_max=k)]
    if prediction:
        sources.append(Prediction(prediction, len(prompt), DraftTuning(k_max=k)))
    runs = [0] * len(sources)
    out = []
    for position in range(1, len(output)):
        history = list(prompt) + output[:position]
        row = []
        for i, source in enumerate(sources):
            tokens = source.propose(history, min(k, len(output) - position - 1)).tokens
            accepted = common_prefix(tokens, output[position:])
            row.append((accepted, len(tokens), runs[i]))
            runs[i] = runs[i] + 1 if accepted else 0
        out.append(row)
    return out


def oracle_seconds(rows: list[list[tuple]], curve: CostCurve) -> float:
    """The cheapest schedule of steps when every step knows how much of each proposal will be kept."""
    n = len(rows)
    best = [0.0] * (n + 1)
    for i in range(n - 1, -1, -1):
        keep = min(max(accepted for accepted, _, _ in rows[i]), n - i - 1)
        best[i] = min(curve(j + 1) + best[i + j + 1] for j in range(keep + 1))
    return best[0]


def _bucket(run: int) -> int:
    return sum(run >= bound for bound in RUN_BUCKETS)


def rule_seconds(rows: list[list[tuple]], curve: CostCurve, rule: tuple[int, ...]) -> float:
    """Seconds a fixed rule takes: K = rule[bucket of the longest run], from that run's proposal."""
    n, i, seconds = len(rows), 0, 0.0
    while i < n:
        accepted, drafted, run = max(rows[i], key=lambda source: source[2])
        k = min(rule[_bucket(run)], drafted, n - i - 1)
        seconds += curve(k + 1)
        i += min(accepted, k) + 1
    return seconds


def fit_rule(answers: list[list[list[tuple]]], curve: CostCurve) -> tuple[int, ...]:
    """The rule of the best geometric-mean speedup over these answers."""

    def score(rule: tuple[int, ...]) -> float:
        return sum(math.log(len(rows) * curve(1) / rule_seconds(rows, curve, rule)) for rows in answers)

    return max(itertools.product(FITTED_KS, repeat=len(RUN_BUCKETS) + 1), key=score)


def ceilings(answers: dict, curve: CostCurve, mode: str, k: int, max_tokens: int) -> dict[tuple[str, str], list[float]]:
    """Speedups of `oracle` or `fitted` (see the module's text) by (category, config)."""
    with_prediction = mode.endswith("+prediction")
    rows = {
        pid: proposals_at(
            item["prompt"], item["output"][:max_tokens], k, item.get("prediction") if with_prediction else None
        )
        for pid, item in answers.items()
    }
    rule = fit_rule(list(rows.values()), curve) if mode.startswith("fitted") else None
    if rule is not None:
        print(f"{mode}:{k} rule, K by run length (0, 1-3, 4-7, 8-15, 16+): {rule}")
    by_category: dict[tuple[str, str], list[float]] = defaultdict(list)
    for pid, item in answers.items():
        seconds = oracle_seconds(rows[pid], curve) if rule is None else rule_seconds(rows[pid], curve, rule)
        speedup = len(rows[pid]) * curve(1) / seconds
        by_category[(item["category"], f"{mode}:{k}")].append(speedup)
        print(f"{pid:32s} {mode}:{k} {speedup:.2f}×")
    return by_category


def parse_curve(text: str) -> CostCurve:
    return CostCurve.of({int(size): float(seconds) for size, seconds in (item.split(":") for item in text.split(","))})


def record(
    path: Path,
    target: str,
    max_tokens: int,
    temperature: float = 0.0,
    seeds: list[int] | None = None,
    prompts_file: Path | None = None,
) -> None:
    import specrun
    from specrun.bench import prompts as bench_prompts

    pair = specrun.load_pair(target)
    answers = {}
    chosen = bench_prompts.load_file(prompts_file) if prompts_file is not None else bench_prompts.builtin()
    for seed in seeds or [None]:
        for prompt in chosen:
            tokens = pair.prompt_tokens(prompt.prompt, system=prompt.system)
            result = specrun.generate(
                pair,
                prompt.prompt,
                system=prompt.system,
                max_tokens=max_tokens,
                temperature=temperature,
                seed=seed,
                mode="off",
            )
            key = prompt.id if seed is None else f"{prompt.id}#{seed}"
            predicted = prompt.prediction()
            answers[key] = {
                "category": prompt.category,
                "prompt": tokens,
                "output": result.tokens,
                "prediction": pair.prediction_tokens(predicted) if predicted else None,
            }
            print(key, len(result.tokens), file=sys.stderr)
    path.write_text(json.dumps(answers))


def replay_all(
    answers: dict,
    curve: CostCurve,
    configs: list[tuple[str, int]],
    *,
    carry: bool,
    max_tokens: int,
    session: bool = False,
    orders: int = 1,
) -> dict[tuple[str, str], list[float]]:
    """Speedups over plain decoding by (category, config), one per answer (per order, in a session)."""
    by_category: dict[tuple[str, str], list[float]] = defaultdict(list)
    for mode, k in configs:
        if mode.split("+")[0] in CEILINGS:
            by_category.update(ceilings(answers, curve, mode, k, max_tokens))
            continue
        for order in range(orders if session else 1):
            items = list(answers.items())
            if session:
                random.Random(order).shuffle(items)
            state = policy(curve, mode, k) if session else None
            learned: dict | None = {} if carry else None
            for counted in (False, True) if session else (True,):
                for pid, item in items:
                    output = item["output"][:max_tokens]
                    seconds, counts = replay(
                        item["prompt"], output, curve, mode, k, learned, state, item.get("prediction")
                    )
                    if counted:
                        speedup = (len(output) - 1) * curve(1) / seconds
                        by_category[(item["category"], f"{mode}:{k}")].append(speedup)
                        if not session:
                            print(
                                f"{pid:32s} {mode}:{k} {speedup:.2f}× ({counts['accepted']}/{counts['drafted']}, "
                                f"{counts['steps']} steps)"
                            )
    return by_category


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("answers", type=Path)
    parser.add_argument(
        "--curve",
        default="1:0.028,2:0.042,3:0.056,4:0.070,5:0.084,8:0.120,9:0.135,15:0.165,16:0.140,17:0.165,31:0.272,32:0.240",
    )
    parser.add_argument(
        "--configs",
        default="ngram:4,ngram:15,auto:31",
        help="MODE:K, comma-separated; MODE ngram, auto, auto+prediction, or a ceiling: oracle, fitted, "
        "oracle+prediction, fitted+prediction",
    )
    parser.add_argument("--record", action="store_true", help="record plain greedy answers into ANSWERS first")
    parser.add_argument(
        "--carry",
        action="store_true",
        help="auto keeps what it learned from answer to answer, as one-shot processes do",
    )
    parser.add_argument(
        "--session",
        action="store_true",
        help="one controller and lookup across every answer, as a bench or chat keeps them",
    )
    parser.add_argument("--orders", type=int, default=6, help="with --session: shuffled orders to replay")
    parser.add_argument("--temperature", type=float, default=0.0, help="with --record: sample at this temperature")
    parser.add_argument("--seeds", default="1,2,3", help="with --record and a temperature: the seeds to sample with")
    parser.add_argument(
        "--prompts", type=Path, help="with --record: these prompts (JSONL) instead of the built-in ones"
    )
    parser.add_argument("--target")
    parser.add_argument("-n", "--max-tokens", type=int, default=128)
    args = parser.parse_args()
    if args.carry and args.session:
        parser.error(
            "--carry and --session both go on from answer to answer (a process's cache, one process); pick one"
        )
    if args.record:
        seeds = [int(x) for x in args.seeds.split(",")] if args.temperature > 0 else None
        record(args.answers, args.target, args.max_tokens, args.temperature, seeds, args.prompts)
        return
    curve = parse_curve(args.curve)
    answers = json.loads(args.answers.read_text())
    configs = [(mode, int(k)) for mode, k in (item.split(":") for item in args.configs.split(","))]
    by_category = replay_all(
        answers, curve, configs, carry=args.carry, max_tokens=args.max_tokens, session=args.session, orders=args.orders
    )
    print()
    for (category, config), values in sorted(by_category.items()):
        print(f"{category:24s} {config:10s} {math.exp(statistics.fmean(map(math.log, values))):.2f}×")


if __name__ == "__main__":
    main()
