"""``nanstats``: numpy's own numbers (nanmedian, nanpercentile, median of a prefix) by one sort."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from fleetscope.analyzers import nanstats


def _arrays():
    rng = np.random.default_rng(7)
    for shape in ((1, 1), (5, 1), (1, 6), (7, 9), (40, 33), (3, 0)):
        x = rng.lognormal(size=shape) * rng.choice([1, 1e-3, 1e6], size=shape)
        holes = x.copy()
        if x.size:
            holes[rng.random(shape) < 0.3] = np.nan
            holes[:, 0] = np.nan  # a column all NaN
            holes[0, :] = np.nan  # a row all NaN
            holes.flat[rng.integers(0, x.size)] = np.inf
        yield x
        yield holes


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("keepdims", [False, True])
def test_nanmedian_is_numpys(axis, keepdims):
    for x in _arrays():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            ref = np.nanmedian(x, axis=axis, keepdims=keepdims)
        got = nanstats.nanmedian(x, axis=axis, keepdims=keepdims)
        assert got.shape == ref.shape and np.array_equal(got, ref, equal_nan=True), x.shape


def test_rolling_and_percentile_are_numpys():
    for x in _arrays():
        if not x.size:
            continue
        win = np.lib.stride_tricks.sliding_window_view(x, min(3, x.shape[1]), axis=1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            ref = np.nanmedian(win, axis=2)
            pct = np.nanpercentile(x, 10, axis=0)
        assert np.array_equal(nanstats.rolling_nanmedian(win), ref, equal_nan=True)
        assert np.array_equal(nanstats.column_nanpercentile(x, 10), pct, equal_nan=True)


def test_first_part_median_is_the_loop_it_replaced():
    for x in _arrays():
        ref = np.full(x.shape[1], np.nan)
        for k in range(x.shape[1]):
            idx = np.nonzero(np.isfinite(x[:, k]))[0]
            if idx.size:
                ref[k] = float(np.median(x[idx[: max(1, idx.size // 3)], k]))
        assert np.array_equal(nanstats.first_part_median(x, 3), ref, equal_nan=True), x.shape


@pytest.mark.parametrize("n", range(1, nanstats.NETWORK_MAX_WINDOW + 1))
def test_the_sorting_network_sorts_every_input(n):
    # The 0-1 principle: a comparator network that sorts every sequence of 0s and 1s sorts all.
    cols = [((np.arange(2**n) >> k) & 1).astype(np.int8) for k in range(n)]
    for i, j in nanstats.sorting_network(n):
        cols[i], cols[j] = np.minimum(cols[i], cols[j]), np.maximum(cols[i], cols[j])
    assert (np.diff(np.stack(cols, axis=1), axis=1) >= 0).all()


@pytest.mark.parametrize("w", [1, 2, 3, 5, 8, 13, 16, 17])
def test_the_rolling_median_of_every_window_length_is_numpys(w):
    rng = np.random.default_rng(w)
    for holes in (0.0, 0.1, 0.6, 1.0):
        x = rng.lognormal(size=(50, 6)) * rng.choice([1, 1e-3, 1e6], size=(50, 6))
        x[rng.random(x.shape) < holes] = np.nan
        x.flat[rng.integers(0, x.size, 3)] = np.inf
        x.flat[rng.integers(0, x.size, 2)] = -np.inf
        win = np.lib.stride_tricks.sliding_window_view(x, w, axis=0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            ref = np.nanmedian(win, axis=2)
        assert np.array_equal(nanstats.rolling_nanmedian(win), ref, equal_nan=True), holes
