"""A drafter defined here, outside the package, and registered with one line: the engine under
auto, `specrun run`, the bench and the server all draft with it, their greedy answers stay plain
decoding's, and its steps are timed and priced like any other drafter's. Nothing else knows its
name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest
from cli_helpers import env
from serve_helpers import FLAT_COSTS, WAIT, costs_of, served

from specrun.bench.pair_engine import PairEngine
from specrun.bench.report import document
from specrun.bench.runner import BenchPrompt, BenchSettings, configurations, run_bench
from specrun.engine import drafting
from specrun.engine.drafting.protocol import Draft, DraftRequest, Proposals, Sources, Traits
from specrun.engine.sampling import SamplingParams
from specrun.engine.sequence import GenerationSettings
from specrun.runtime.pair import Pair, PairConfig

PROMPT = "an oracle knows"
TOKENS = 40
CONTINUATION = "SPECRUN_TEST_ORACLE"  # the environment variable a child process reads the continuation from


class Oracle(Traits):
    """Proposes what follows the history's last three tokens in a continuation it was given (the
    answer plain decoding writes): a toy that is right whenever it speaks."""

    name = "oracle"
    title = "a fixed continuation"
    ahead = True

    def __init__(self, continuation: Sequence[int]):
        self.continuation = list(continuation)

    def configure(self, tuning) -> None:
        pass

    def begin(self, seq: int, prompt: Sequence[int], given: object | None) -> None:
        pass

    def finish(self, seq: int, history: Sequence[int]) -> None:
        pass

    def propose(self, requests: Sequence[DraftRequest]) -> Proposals:
        out = Proposals()
        for request in requests:
            tokens = self.following(list(request.history))[: request.k]
            out.drafts[request.seq] = Draft(tokens, None, [1.0] * len(tokens))
        return out

    def following(self, history: list[int]) -> list[int]:
        tail, known = history[-3:], self.continuation
        for start in range(len(known) - len(tail), -1, -1):
            if known[start : start + len(tail)] == tail:
                return known[start + len(tail) :]
        return []

    def lag(self, seq: int, history: Sequence[int]) -> int:
        return 0

    def read(self, items) -> Proposals:
        return Proposals()

    def learn(self, seq: int, drafted: int, accepted: int) -> None:
        pass

    def forget(self, seq: int) -> None:
        pass


def build(sources: Sources) -> Oracle:
    return Oracle(json.loads(os.environ[CONTINUATION]))


@pytest.fixture
def registered(monkeypatch):
    """The registry as it was, once the test is over."""
    monkeypatch.setattr(drafting, "REGISTRY", list(drafting.REGISTRY))
    yield


def settings(**kw) -> GenerationSettings:
    return GenerationSettings(
        **{"max_tokens": TOKENS, "sampling": SamplingParams(temperature=0.0), "ignore_eos": True, **kw}
    )


def plain_answer(tiny_target: Path) -> tuple[list[int], list[int], str]:
    pair = Pair(PairConfig(tiny_target, None, ctx_size=512, threads=1))
    try:
        prompt = pair.prompt_tokens(PROMPT, chat=False)
        generation = pair.generation(prompt, settings(), mode="off")
        steps = list(generation.run())
        return prompt, [t for s in steps for t in s.tokens], "".join(s.text for s in steps)
    finally:
        pair.close()


@pytest.mark.slow
def test_a_drafter_registered_from_outside_drafts_everywhere_auto_runs(tiny_target, registered, monkeypatch):
    prompt, answer, text = plain_answer(tiny_target)
    monkeypatch.setenv(CONTINUATION, json.dumps(prompt + answer))
    drafting.register(build)  # the one line

    pair = Pair(PairConfig(tiny_target, None, ctx_size=512, threads=1))
    try:
        assert "oracle" in pair.session.engine.drafters
        pair.session.costs = costs_of(FLAT_COSTS)  # auto's choices from seeded costs, not this machine's clock
        generation = pair.generation(prompt, settings(), mode="auto")
        assert [t for s in generation.run() for t in s.tokens] == answer
        assert generation.stats.by_drafter["oracle"]["accepted"] >= TOKENS // 2

        # The bench: the same answer, the drafter's steps timed and priced as auto prices them.
        bench = BenchSettings(runs=1, warmup=0, base=settings())
        result = run_bench(
            PairEngine(pair, chat=False),
            [BenchPrompt("o/1", "code", PROMPT)],
            configurations(["off", "auto"], None, [0.0]),
            bench,
        )
        doc = document(result, {}, {"runs": 1, "max_tokens": TOKENS, "seed": 0, "temperatures": [0.0]})
        auto = next(row for row in doc["categories"] if row["config"].startswith("auto") and row["category"] == "all")
        assert auto["identical"] is True and auto["accepted"] >= TOKENS // 2 and auto["predicted_speedup"] > 1.0

        # The server: the same answer, and the drafter named where it starts.
        with served(pair, costs=FLAT_COSTS) as server:
            assert "oracle" in server.service.drafting
            body = {"prompt": PROMPT, "max_tokens": TOKENS, "temperature": 0, "ignore_eos": True}
            reply = httpx.post(server.url + "/v1/completions", json=body, timeout=WAIT).json()
            assert reply["choices"][0]["text"] == text
            assert reply["timings"]["draft_n_accepted"] >= TOKENS // 2
    finally:
        pair.close()

    # `specrun run` in a process of its own that registers the drafter the same way.
    here = Path(__file__).parent
    register = f"import sys; sys.path[:0] = [{str(here)!r}, {str(here.parent / 'support')!r}]; "
    register += "import test_new_drafter as t; "
    register += "from specrun.engine import drafting; drafting.register(t.build); "
    register += "from specrun.cli.app import main; sys.argv[0] = 'specrun'; main()"
    run = subprocess.run(
        [sys.executable, "-c", register, "run", "--target", str(tiny_target), "--draft", "none", "--spec", "auto"]
        + ["-n", str(TOKENS), "--temp", "0", "--raw", "--ignore-eos", "--json", PROMPT],
        capture_output=True,
        text=True,
        env=env(**{CONTINUATION: json.dumps(prompt + answer)}),
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    out = json.loads(run.stdout)
    assert out["text"] == text and out["stats"]["by_drafter"]["oracle"]["accepted"] > 0
