"""Fixtures the engine's cache tests share."""

from __future__ import annotations

import pytest
from serve_helpers import load_pair


@pytest.fixture(scope="module")
def pairs(tiny_target, tiny_draft, hybrid_target, swa_target):
    """A dense target with its draft, a hybrid target and a sliding-window target, loaded once per module."""
    loaded = {
        "dense": load_pair(tiny_target, tiny_draft),
        "hybrid": load_pair(hybrid_target, None),
        "swa": load_pair(swa_target, None),
    }
    yield loaded
    for pair in loaded.values():
        pair.close()
