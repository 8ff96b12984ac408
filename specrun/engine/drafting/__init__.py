"""Every drafter of the engine, and the one registry a session builds them from.

A drafter implements the protocol (protocol.py), declaring its traits on its class (`Traits`
gives the common ones), and offers a `build(sources)` that returns it, or None when the session's
models cannot draft that way; adding a drafter is its module and one line in REGISTRY (or one
`register(build)` call from outside the package). The engine's step asks each registered drafter
the same way (engine/step.py); under `auto` every registered drafter is weighed.
"""

from __future__ import annotations

from collections.abc import Callable

from . import assistant, dflash, eagle3, lookup, model, mtp, prediction, text, values
from .protocol import Drafter, Sources

REGISTRY: list[Callable[[Sources], Drafter | None]] = [
    lookup.build,  # prompt lookup: every session
    prediction.build,  # a request's predicted output: every session
    values.build,  # a constrained answer's values copied from its prompt: every session
    model.build,  # a draft model of the target's vocabulary
    text.build,  # a draft model of another vocabulary, drafting through text
    mtp.build,  # the target's own multi-token-prediction heads
    assistant.build,  # a Gemma 4 MTP assistant over the target's cache
    eagle3.build,  # an EAGLE-3 head on the target's layer inputs
    dflash.build,  # a DFlash head on the target's layer inputs, a block per pass
]


def register(build: Callable[[Sources], Drafter | None]) -> None:
    """Add a drafter to every session built from now on (once, however often it is called)."""
    if build not in REGISTRY:
        REGISTRY.append(build)


def build_drafters(sources: Sources) -> list[Drafter]:
    """The drafters `sources` can run, in registry order."""
    return [drafter for make in REGISTRY if (drafter := make(sources)) is not None]
