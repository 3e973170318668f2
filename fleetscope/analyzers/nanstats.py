"""Medians and percentiles that ignore NaN, by one sort instead of numpy's per-row path.

``np.nanmedian`` along an axis that holds NaN falls back to a Python call per row (thousands of
calls at a 4,096-rank job, seconds per analysis); sorting once puts NaN last, and the median is the
middle one or two of each row's ``n`` values, averaged as numpy averages them. The numbers are
numpy's own (tests/analyzers/test_nanstats.py compares them on random arrays with NaN and inf).
"""

from __future__ import annotations

import functools
import warnings

import numpy as np


def nanmedian(x: np.ndarray, axis: int, keepdims: bool = False) -> np.ndarray:
    """``np.nanmedian(x, axis=axis, keepdims=keepdims)``, NaN (no warning) where a slice is all NaN."""
    x = np.asarray(x, dtype=float)
    if x.shape[axis] == 0:
        shape = list(x.shape)
        shape[axis] = 1
        out = np.full(shape, np.nan)
        return out if keepdims else np.squeeze(out, axis=axis)
    s = np.sort(x, axis=axis)
    n = np.sum(~np.isnan(x), axis=axis, keepdims=True)
    lo = np.take_along_axis(s, np.clip((n - 1) // 2, 0, None), axis=axis)
    hi = np.take_along_axis(s, np.clip(n // 2, 0, None), axis=axis)
    with np.errstate(invalid="ignore"):
        med = np.where(n > 0, (lo + hi) / 2, np.nan)
    return med if keepdims else np.squeeze(med, axis=axis)


#: Windows up to this long are sorted by a sorting network over their columns (:func:`rolling_nanmedian`).
NETWORK_MAX_WINDOW = 16


def rolling_nanmedian(win: np.ndarray) -> np.ndarray:
    """``np.nanmedian(win, axis=2)`` of sliding windows (T x R x w).

    A short window (the slowness signals' 8 grid steps) is sorted by a sorting network over its
    ``w`` columns, elementwise minimum and maximum over whole T x R planes, instead of ``np.sort``
    of T x R rows of ``w`` values (the sort itself 1.4 ms against 7 ms, the whole median 5.2 ms
    against 8 ms, for a 512-rank hour: docs/benchmarks.md). NaN goes last as
    +inf, and each median takes only the first ``n`` (its finite and infinite values) of its
    sorted window, so the numbers are numpy's own.
    """
    if win.size == 0:
        return np.full(win.shape[:2], np.nan)
    w = win.shape[2]
    if w > NETWORK_MAX_WINDOW:
        return nanmedian(win, axis=2)
    n = np.zeros(win.shape[:2], dtype=np.intp)  # each window's values that are not NaN
    cols = []
    for k in range(w):
        col = win[..., k]
        nan = np.isnan(col)
        n += ~nan
        cols.append(np.where(nan, np.inf, col))
    spare = np.empty_like(cols[0])
    for i, j in sorting_network(w):
        np.minimum(cols[i], cols[j], out=spare)
        np.maximum(cols[i], cols[j], out=cols[j])
        cols[i], spare = spare, cols[i]
    lo, hi = _at_rank(cols, (n - 1) // 2), _at_rank(cols, n // 2)
    with np.errstate(invalid="ignore"):
        return np.where(n > 0, (lo + hi) / 2, np.nan)


def _at_rank(cols: list[np.ndarray], rank: np.ndarray) -> np.ndarray:
    """Elementwise ``cols[rank]`` (a rank below 0 reads column 0)."""
    out = cols[0].copy()
    for k in range(1, int(rank.max(initial=0)) + 1):
        np.copyto(out, cols[k], where=rank == k)
    return out


@functools.cache
def sorting_network(n: int) -> tuple[tuple[int, int], ...]:
    """Batcher's odd-even merge sort for ``n`` wires, as (lower, upper) compare-exchange pairs in
    order (the comparators that would touch a wire past ``n``, which holds the largest value, do
    nothing and are left out)."""
    pairs = []
    p = 1
    while p < n:
        k = p
        while k >= 1:
            for j in range(k % p, n - k, 2 * k):
                for i in range(min(k, n - j - k)):
                    if (i + j) // (2 * p) == (i + j + k) // (2 * p):
                        pairs.append((i + j, i + j + k))
            k //= 2
        p *= 2
    return tuple(pairs)


def column_nanpercentile(x: np.ndarray, q: float) -> np.ndarray:
    """``np.nanpercentile(x, q, axis=0)`` (linear interpolation) by one sort of the columns: the
    same numbers (numpy's own lerp), without its per-column Python loop where NaNs are present."""
    s = np.sort(x, axis=0)
    n = np.sum(~np.isnan(x), axis=0)
    pos = (n - 1) * (q / 100.0)
    lo = np.floor(pos).astype(int).clip(0)
    hi = np.minimum(lo + 1, np.maximum(n - 1, 0))
    t = pos - lo
    a = np.take_along_axis(s, lo[None, :], 0)[0]
    b = np.take_along_axis(s, hi[None, :], 0)[0]
    with np.errstate(invalid="ignore"):
        diff = b - a
        out = np.where(t >= 0.5, b - diff * (1 - t), a + diff * t)
    return np.where(n > 0, out, np.nan)


def first_part_median(x: np.ndarray, parts: int = 3) -> np.ndarray:
    """Each column's median over the first ``max(1, n // parts)`` of its ``n`` finite values (in row
    order); NaN for a column without one."""
    ok = np.isfinite(x)
    n = ok.sum(axis=0)
    rank = np.cumsum(ok, axis=0)
    keep = ok & (rank <= np.maximum(1, n // parts))
    return nanmedian(np.where(keep, x, np.nan), axis=0)


def mean_or_nan(x: np.ndarray) -> float:
    """The mean of the finite values of ``x`` (NaN, no warning, when none or empty)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(np.nanmean(x)) if x.size else float("nan")
