"""Steering values at float32's extremes (a hostile verifier may send ±3.4e38) draw without warnings."""

from __future__ import annotations

import warnings

import numpy as np

from specsteer.core.recovery import choose


def test_scores_at_float32_extremes_draw_without_an_overflow_warning() -> None:
    top = float(np.finfo(np.float32).max)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's RuntimeWarning would fail the draw
        for seed in range(5):
            rng = np.random.default_rng(seed)
            assert choose([top, -top], sampling=True, generator=rng) == 0
            assert choose([-top, top, -top], sampling=True, temperature=0.5, generator=rng) == 1
