"""Python's cycle collector, set for a process that decodes for long: a server, a benchmark.

Every request's prompt lookup indexes its prompt as thousands of small tuples and lists, and at
the collector's default thresholds those allocations start a collection every few hundred of them,
now and then a full one that walks every object the process holds (the models' vocabularies, the
web framework, earlier requests' indexes): milliseconds taken in the middle of a decoding step,
each time. What exists once the models are loaded lives as long as the process, so it is set
aside from collections (`gc.freeze`), and young objects are collected less often.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 20_000  # allocations between collections of the youngest generation (Python's default: 700)


def settle() -> None:
    """Collect once, exempt every surviving object from later collections, and collect young
    objects every YOUNG_THRESHOLD allocations. For a command that owns its process, once its
    models are loaded: a library must leave its host's collector alone."""
    gc.collect()
    gc.freeze()
    young, middle, old = gc.get_threshold()
    if young:  # 0: the collector is off, and stays so
        gc.set_threshold(max(young, YOUNG_THRESHOLD), middle, old)


def release() -> None:
    """Undo `settle`'s exemption: what it set aside can be collected again once its user is gone
    (a benchmark's server for one configuration, before the next one's)."""
    gc.unfreeze()
