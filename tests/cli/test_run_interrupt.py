"""Ctrl-C in the middle of a step: the text that step committed still reaches stdout."""

from __future__ import annotations

import io
import re

import pytest

from specrun.cli.run import generate
from specrun.engine.sampling import SamplingParams
from specrun.engine.sequence import GenerationSettings, SequenceState
from specrun.runtime.pair import Pair, PairConfig
from specrun.terminal import Output


def test_interrupt_after_a_commit_prints_the_committed_text(monkeypatch, tiny_target, tiny_draft):
    pair = Pair(PairConfig(tiny_target, tiny_draft, ctx_size=512, threads=1))
    try:
        tokens = pair.prompt_tokens("interrupt me", chat=False)
        settings = GenerationSettings(
            max_tokens=60, sampling=SamplingParams(temperature=0.0), draft_max=4, ignore_eos=True
        )
        original = SequenceState.commit
        calls = {"n": 0}

        def commit_then_interrupt(self, step_tokens):
            result = original(self, step_tokens)
            calls["n"] += 1
            if calls["n"] == 4:
                raise KeyboardInterrupt
            return result

        monkeypatch.setattr(SequenceState, "commit", commit_then_interrupt)
        out = Output(stdout=io.StringIO(), stderr=io.StringIO())
        with pytest.raises(KeyboardInterrupt):
            generate(pair, tokens, settings, out, seed=1, mode="draft")
        monkeypatch.setattr(SequenceState, "commit", original)
        generated = int(re.search(r"(\d+) tok · ", out.err.getvalue()).group(1))
        assert generated > 4
        reference = pair.generation(
            tokens, GenerationSettings(max_tokens=generated, sampling=settings.sampling, ignore_eos=True), mode="off"
        )
        expected = "".join(step.text for step in reference.run())
        assert out.out.getvalue() == expected
    finally:
        pair.close()
