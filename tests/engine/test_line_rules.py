"""Where an infill answer ends by its lines: before a line indented less than the cursor's, before a
line that repeats the one after the cursor, never inside the first line; what streams out never
includes a line that is later cut."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specrun.engine.line_rules import LineRules
from specrun.engine.text import TextAssembler


def streamed(pieces: list[str], rules: LineRules, stops: tuple[str, ...] = ()) -> tuple[str, bool]:
    text = TextAssembler(stops, rules)
    out = ""
    for piece in pieces:
        out += text.feed(piece.encode())
        if text.stopped:
            return out, True
    return out + text.finish(), False


def test_a_line_indented_less_than_the_cursor_ends_the_answer_before_it():
    rules = LineRules(min_indent=4)
    out, stopped = streamed(["x = 1\n", "    y = 2\n", "z = 3\n", "    w = 4\n"], rules)
    assert (out, stopped) == ("x = 1\n    y = 2", True)


def test_the_first_line_and_blank_lines_are_never_cut_and_a_tab_counts_one():
    rules = LineRules(min_indent=4)
    out, stopped = streamed(["a", "\n", "\n", "    b\n", "\t\t\t\tc\n", "\t\t\td"], rules)
    assert (out, stopped) == ("a\n\n    b\n\t\t\t\tc", True)


def test_the_line_after_the_cursor_ends_the_answer_when_it_comes_again():
    rules = LineRules(end_line="    return total")
    out, stopped = streamed(["total += x\n", "    return total\n", "more"], rules)
    assert (out, stopped) == ("total += x", True)


def test_a_partial_match_of_the_line_after_the_cursor_is_not_cut():
    rules = LineRules(end_line="return total")
    out, stopped = streamed(["a\n", "return total + 1\n"], rules)
    assert (out, stopped) == ("a\nreturn total + 1\n", False)


def test_the_last_line_is_judged_when_the_answer_ends():
    out, _ = streamed(["a\n", "return total"], LineRules(end_line="return total"))
    assert out == "a"


def test_stop_strings_still_apply():
    out, stopped = streamed(["a\n    b", "STOP\n    c\n"], LineRules(min_indent=4), stops=("STOP",))
    assert (out, stopped) == ("a\n    b", True)


def test_without_rules_that_cut_text_nothing_is_held():
    text = TextAssembler((), LineRules(time_limit_s=1.0))
    assert text.feed(b"a\nb") == "a\nb"


@given(
    st.lists(st.text(alphabet="ab \t\n", max_size=6), max_size=12),
    st.integers(0, 3),
    st.sampled_from(["", "a", " b "]),
)
def test_streamed_text_is_the_whole_text_cut_where_the_rules_say(pieces, indent, end):
    rules = LineRules(min_indent=indent, end_line=end)
    out, _ = streamed(pieces, rules)
    whole = "".join(pieces)
    at, _ = rules.end_of(whole, 0, True)
    assert out == (whole if at is None else whole[:at])


@pytest.mark.parametrize("indent", [0, 2])
def test_text_streams_line_by_line_once_past_the_first(indent):
    text = TextAssembler((), LineRules(min_indent=indent, end_line="zz"))
    assert text.feed(b"first") == "first"
    assert text.feed(b" line\n  sec") == " line"
    assert text.feed(b"ond\n") == "\n  second"


def test_past_its_time_budget_an_answer_ends_with_its_next_newline(tiny_target):
    from specrun.engine.model import Model
    from specrun.engine.sequence import GenerationSettings, SequenceState

    model = Model(tiny_target)
    try:
        word = model.tokenize("ab", add_special=False, parse_special=False)
        newline = model.tokenize("\n", add_special=False, parse_special=False)
        settings = GenerationSettings(max_tokens=50, lines=LineRules(time_limit_s=0.5))
        state = SequenceState(0, [1, 2, 3], settings, model)
        state.commit(word)  # the first token starts the clock
        state.commit(newline)
        assert state.finished is None  # within the budget
        state.timings.first_token -= 1.0  # a second has passed
        state.commit(word)
        assert state.finished is None  # no newline yet
        state.commit(newline)
        assert state.finished == "time_limit"
    finally:
        model.close()
