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

    python scripts/replay_auto.py --record answers.json --target T.gguf -n 128
    python scripts/replay_auto.py --record sampled.json --target T.gguf --temperature 0.8 --seeds 1,2,3
    python scripts/replay_auto.py answers.json --curve 1:0.028,2:0.042,5:0.084,16:0.140,32:0.240
    python scripts/replay_auto.py sampled.json --session --orders 6 --configs auto:31
    python scripts/replay_auto.py answers.json --configs auto:63,auto+prediction:63
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from specrun.engine.auto.control import LEARNED_WEIGHT, PLAIN, Ask, Choice, Controller, Outcome
from specrun.engine.auto.estimates import CostCurve
from specrun.engine.drafting.prediction import Prediction
from specrun.engine.drafting.prompt_lookup import PromptLookup
from specrun.engine.drafting.protocol import DraftTuning

LOOKUP_SECONDS = 0.0002  # what proposing costs prompt lookup, per step
PREDICTED = "auto+prediction"


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
            proposals["prediction"] = predicted.propose(history, room)
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
        accepted = 0
        while (
            accepted < len(draft)
            and position + accepted < len(output)
            and draft[accepted] == output[position + accepted]
        ):
            accepted += 1
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
        help="MODE:K, comma-separated; MODE ngram, auto or auto+prediction",
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
