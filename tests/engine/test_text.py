"""Streaming text: split UTF-8 sequences and stop strings that span steps."""

from specrun.engine.text import TextAssembler


def test_utf8_split_across_tokens_is_joined():
    text = TextAssembler()
    euro = "€".encode()
    assert text.feed(euro[:1]) == ""
    assert text.feed(euro[1:]) == "€"


def test_stop_string_spanning_pieces_is_cut_and_not_emitted():
    text = TextAssembler(["STOP"])
    out = text.feed(b"hello ST") + text.feed(b"OP and more")
    assert out == "hello "
    assert text.stopped and text.text == "hello "
    assert text.feed(b"x") == ""


def test_held_back_text_is_released_at_finish():
    text = TextAssembler(["###"])
    assert text.feed(b"ab#") == "a"
    assert text.finish() == "b#"
