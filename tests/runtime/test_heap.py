"""The collector settings a long-running command gives its process."""

import gc

import pytest

from specrun.runtime import heap


@pytest.fixture
def collector():
    """The process's collector settings, restored after the test."""
    threshold, enabled = gc.get_threshold(), gc.isenabled()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)
    if enabled:
        gc.enable()


def test_settle_sets_aside_what_exists_and_collects_young_objects_less_often(collector):
    gc.set_threshold(700, 10, 10)
    kept = [[i] for i in range(1000)]
    heap.settle()
    assert gc.get_freeze_count() >= len(kept)
    assert gc.get_threshold() == (heap.YOUNG_THRESHOLD, 10, 10)
    heap.release()
    assert gc.get_freeze_count() == 0


def test_settle_leaves_a_higher_threshold_and_a_disabled_collector_alone(collector):
    gc.set_threshold(50_000, 5, 5)
    heap.settle()
    assert gc.get_threshold() == (50_000, 5, 5)
    gc.set_threshold(0, 10, 10)
    heap.settle()
    assert gc.get_threshold()[0] == 0
