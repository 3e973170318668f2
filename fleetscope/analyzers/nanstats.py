"""Medians and percentiles that ignore NaN, by one sort instead of numpy's per-row path.

``np.nanmedian`` along an axis that holds NaN falls back to a Python call per row (thousands of
calls at a 4,096-rank job, seconds per analysis); sorting once puts NaN last, and the median is the
middle one or two of each row's ``n`` values, averaged as numpy averages them. The numbers are
numpy's own (tests/analyzers/test_nanstats.py compares them on random arrays with NaN and inf).
"""

from __future__ import annotations

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


def rolling_nanmedian(win: np.ndarray) -> np.ndarray:
    """``np.nanmedian(win, axis=2)`` of sliding windows (T x R x w)."""
    if win.size == 0:
        return np.full(win.shape[:2], np.nan)
    return nanmedian(win, axis=2)


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
