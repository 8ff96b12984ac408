"""Cost curves (engine.auto.estimates.CalibratedCurve): the calibrated shape, scaled by what live passes measure."""

from __future__ import annotations

import pytest

from specrun import defaults
from specrun.engine.auto.costs import calibration_sizes
from specrun.engine.auto.estimates import CalibratedCurve

# A CPU-like shape: a pass over 32 tokens costs less than one over 31 (tiles).
SHAPE = {1: 0.03, 4: 0.09, 16: 0.25, 31: 0.46, 32: 0.44}


def test_every_size_follows_the_scale_live_steps_measure():
    curve = CalibratedCurve(SHAPE)
    for _ in range(40):
        curve.add(4, 0.12)  # contexts grew: the size plain steps have now costs a third more
    assert curve(4) == pytest.approx(0.12, rel=0.01)
    assert curve(16) == pytest.approx(0.25 * 0.12 / 0.09, rel=0.01)  # seldom-seen sizes scale alike
    assert curve(16) - curve(4) > SHAPE[16] - SHAPE[4]


def test_beyond_the_largest_size_the_curve_grows_at_the_rate_of_its_upper_half():
    curve = CalibratedCurve(SHAPE)
    slope = (0.44 - 0.25) / (32 - 16)
    assert curve(64) == pytest.approx(0.44 + slope * 32)
    assert curve(64) > curve(32) > curve(16)


def test_one_stalled_pass_moves_the_scale_at_most_twofold():
    curve = CalibratedCurve(SHAPE)
    curve.add(4, 0.09 * 50)
    assert curve.level <= 2.0


def test_passes_far_beyond_the_measured_sizes_do_not_move_the_scale():
    curve = CalibratedCurve(SHAPE)
    curve.add(500, 1.0)  # a draft model reading a whole prompt
    assert curve.level == 1.0


def test_without_a_calibration_the_passes_measured_make_the_shape():
    curve = CalibratedCurve()
    assert not curve
    curve.add(1, 0.01)
    curve.add(9, 0.05)  # far beyond the first size: still learned, there is no calibration to protect
    assert curve(1) == pytest.approx(0.01) and curve(9) == pytest.approx(0.05) and curve.sizes() == [1, 9]


def test_calibration_times_small_drafts_tile_edges_and_multiples_of_the_batch():
    sizes, drafts = calibration_sizes(parallel=4, limit=1000)
    assert {1, 2, 4, 5, 8, 15, 16, 17, 31, 32, 64} <= set(sizes) and max(sizes) == 64 and {1, 4, 8} <= set(drafts)
    assert max(calibration_sizes(parallel=4, limit=20)[0]) <= 20
    assert max(calibration_sizes(parallel=1)[0]) == defaults.AUTO_K_MAX + 1  # one sequence: up to auto's cap
