"""Values copied from the prompt into a constrained answer: found where the value the answer has
begun starts a word in the prompt, copied up to a delimiter, closed as the constraint allows and
followed by what it forces; judged by how this sequence's proposals fared; and asked with the
sequence's constraint through the engine."""

from __future__ import annotations

import pytest

from specrun.engine import constraint
from specrun.engine.drafting.protocol import DraftRequest
from specrun.engine.drafting.values import FIRST_PRIOR, ValueCopy, ValueDrafter
from specrun.engine.matcher import Matcher
from specrun.engine.model import Model
from specrun.engine.sampling import SamplingParams, make_rng

PEOPLE = {
    "type": "object",
    "properties": {
        "people": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "role": {"type": "string"}},
                "required": ["name", "age", "role"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["people"],
    "additionalProperties": False,
}
PARAGRAPH = "List the people. Paragraph: Ann Lee, 34, leads. Bo Chan is 29 (design)."


@pytest.fixture(scope="module")
def model(tiny_target):
    return Model(tiny_target)


def tokens(model: Model, text: str) -> list[int]:
    return model.tokenize(text, add_special=False, parse_special=False)


def propose(model: Model, written: str, k: int = 16, state: ValueCopy | None = None) -> tuple[str, ValueCopy]:
    """The proposal after the answer `written` (compact JSON under PEOPLE), as text."""
    prompt = tokens(model, PARAGRAPH)
    state = state or ValueCopy(prompt)
    guide = Matcher(constraint.json_schema(PEOPLE), model)
    answer = guide.tokenize(written.encode())
    guide.consume(answer)
    draft = state.propose(prompt + answer, k, guide)
    return guide.decode(draft.tokens).decode(), state


def test_a_string_value_is_copied_to_its_delimiter_closed_and_followed_by_the_next_key(model):
    assert propose(model, '{"people":[{"name":"Ann')[0] == ' Lee","age":'


def test_a_number_stops_at_its_last_digit_and_is_closed_by_a_comma(model):
    assert propose(model, '{"people":[{"name":"Ann Lee","age":3')[0] == '4,"role":"'


def test_the_closing_is_drafted_only_with_a_first_token_the_answer_has_written(model):
    prompt = tokens(model, PARAGRAPH)
    guide = Matcher(constraint.json_schema(PEOPLE), model)
    guide.consume(guide.tokenize(b'{"people":[{"name":"Ann'))
    state = ValueCopy(prompt)
    state.text = PARAGRAPH.encode()
    end = PARAGRAPH.index("Ann") + 3
    assert guide.decode(state._continuation(end, b"Ann", guide)) == b" Lee"  # no closing written yet
    state.seen = guide.tokenize(b'"')
    assert guide.decode(state._continuation(end, b"Ann", guide)) == b' Lee","age":'


def test_a_string_stops_at_as_many_words_as_the_keys_longest_finished_value(model):
    answer = '{"people":[{"name":"Ann","age":34,"role":"x"},{"name":"Bo'
    assert propose(model, answer)[0] == '","age":'  # names here are one word: this one is written
    assert propose(model, '{"people":[{"name":"Bo')[0].startswith(" Chan is 29")  # no name finished: to the delimiter


def test_a_value_is_found_where_it_starts_a_word_after_the_last_value_found(model):
    _, state = propose(model, '{"people":[{"name":"Bo')
    assert state.found_at == PARAGRAPH.index("Bo Chan")
    assert propose(model, '{"people":[{"name":"Bo Chan","age":2', state=state)[0] == '9,"role":"'


def test_nothing_is_proposed_where_no_value_has_begun_or_the_prompt_lacks_it(model):
    assert propose(model, '{"people":[{"name":"')[0] == ""
    assert propose(model, '{"people":[{"name":"Zed')[0] == ""
    assert propose(model, '{"people":[{"name":"nn')[0] == ""  # inside a word of the prompt: not a value's start


def test_the_proposal_is_cut_to_k(model):
    whole, _ = propose(model, '{"people":[{"name":"Ann')
    cut, _ = propose(model, '{"people":[{"name":"Ann', k=1)
    assert cut and whole.startswith(cut) and len(cut) < len(whole)


def test_its_confidence_follows_how_its_proposals_fared(model):
    prompt = tokens(model, PARAGRAPH)
    state = ValueCopy(prompt)
    assert state.confidences(3)[0] == pytest.approx(FIRST_PRIOR)
    for _ in range(6):
        state.pending = (0, [1, 2, 3])
        state.feedback(3, 0)
    assert state.confidences(3)[0] < FIRST_PRIOR / 2
    for _ in range(6):
        state.pending = (0, [1, 2, 3])
        state.feedback(3, 3)
    assert state.confidences(3)[0] > FIRST_PRIOR


def test_an_unused_proposal_is_judged_by_the_tokens_that_followed(model):
    prompt = tokens(model, PARAGRAPH)
    state = ValueCopy(prompt)
    state.pending = (len(prompt), [7, 8])
    state._judge_unused(prompt + [9])  # the answer went another way
    assert state.pending is None and state.first == [0.0, 1.0]


def test_a_sequence_without_a_constraint_gets_an_empty_proposal(model):
    drafter = ValueDrafter()
    prompt = tokens(model, PARAGRAPH)
    drafter.begin(0, prompt, None)
    made = drafter.propose([DraftRequest(0, prompt, 4, SamplingParams(temperature=0.0), make_rng(0))])
    assert made.drafts[0].tokens == []


def test_the_engine_asks_with_each_constrained_sequences_constraint(tiny_target, tiny_draft, monkeypatch):
    from test_engine import GPU_LIKE

    from specrun.engine.sequence import GenerationSettings
    from specrun.runtime.pair import Pair, PairConfig

    guides = []
    original = ValueDrafter.propose

    def recording(self, requests):
        guides.extend(request.guide for request in requests)
        return original(self, requests)

    monkeypatch.setattr(ValueDrafter, "propose", recording)
    pair = Pair(PairConfig(tiny_target, tiny_draft, ctx_size=256, threads=1))
    pair.session.costs = GPU_LIKE
    try:
        settings = GenerationSettings(
            max_tokens=40, sampling=SamplingParams(temperature=0.0), constraint=constraint.json_schema(PEOPLE)
        )
        list(pair.generation(pair.prompt_tokens(PARAGRAPH, chat=False), settings, mode="auto").run())
    finally:
        pair.close()
    assert guides and all(isinstance(guide, Matcher) for guide in guides)
