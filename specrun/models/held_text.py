"""What a streamed answer holds back before showing it: the end of its text that may still turn out
to be the start of a tag (a reasoning or tool-call marker) once more text comes."""

from __future__ import annotations


def partial_suffix(text: str, tag: str) -> int:
    """Length of the longest end of `text` that is a proper beginning of `tag`."""
    for n in range(min(len(text), len(tag) - 1), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0
