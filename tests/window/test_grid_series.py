"""``frames.grid_series`` (every series of a metric on the grid at once) gives exactly what the
per-series reference gives: ``clean`` (sort, the last of duplicate timestamps, no NaN samples) then
``to_grid`` (the last sample within the lookback, to the millisecond), series of the same non-empty
labels merged, on messy input: unsorted, duplicate stamps, NaN samples, samples outside the grid,
empty series, empty label values, and lookbacks of zero (gridded answers) and two steps."""

from __future__ import annotations

import numpy as np
import pytest

from fleetscope.window import frames as fr


def _reference(series: list[fr.RawSeries], grid: np.ndarray, lookback: float):
    merged: dict[tuple, list[fr.RawSeries]] = {}
    for s in series:
        merged.setdefault(tuple(sorted((k, v) for k, v in s.labels.items() if v != "")), []).append(s)
    keys, cols = [], []
    for key, parts in merged.items():
        t, v = fr.clean(np.concatenate([p.times for p in parts]), np.concatenate([p.values for p in parts]))
        keys.append(key)
        cols.append(fr.to_grid(t, v, grid, lookback))
    return keys, np.column_stack(cols) if cols else np.zeros((len(grid), 0))


def _messy(rng: np.random.Generator, grid: np.ndarray) -> list[fr.RawSeries]:
    out = []
    for _ in range(int(rng.integers(0, 7))):
        n = int(rng.integers(0, 50))
        t = np.round(rng.uniform(grid[0] - 60, grid[-1] + 60, n) * 1000) / 1000
        if rng.random() < 0.5:
            t = np.sort(t)
        if n and rng.random() < 0.4:
            t[int(rng.integers(0, n))] = t[0]  # a duplicate stamp
        if n and rng.random() < 0.3:
            t = np.concatenate([t, t[:3]])  # a series written twice
        if n and rng.random() < 0.3:
            t = np.concatenate([t, grid[: int(rng.integers(1, 5))]])  # samples exactly on grid times
        v = rng.normal(size=t.size)
        v[rng.random(t.size) < 0.15] = np.nan
        labels = {"gpu": str(rng.integers(0, 3)), "pod": "" if rng.random() < 0.4 else "p"}
        out.append(fr.RawSeries(labels, t, v))
    return out


@pytest.mark.parametrize("lookback", [0.0, 7.0, 29.999])
def test_grid_series_equals_the_per_series_reference(lookback: float, monkeypatch) -> None:
    rng = np.random.default_rng(int(lookback * 1000))
    grid = fr.make_grid(1_796_032_800.0, 1_796_033_400.0, 15.0)
    for case in range(150):
        if case == 75:
            monkeypatch.setattr(fr, "_GRID_BLOCK", 50)  # several passes over the keys
        series = _messy(rng, grid)
        want_keys, want = _reference(series, grid, lookback)
        keys, table = fr.grid_series(series, grid, lookback)
        assert keys == want_keys, case
        assert np.array_equal(table, want, equal_nan=True), case


@pytest.mark.parametrize("threads", [2, 3])
def test_a_window_gridded_on_threads_is_the_window_gridded_in_turn(monkeypatch, threads) -> None:
    """build_frames puts a large window's metrics on the grid on several threads, sharing the
    label key cache: the same frames, metric for metric, as one after another."""
    rng = np.random.default_rng(5)
    start, end = 1_796_032_800.0, 1_796_033_400.0
    grid = fr.make_grid(start, end, 15.0)
    raw = {f"m{k}": _messy(rng, grid) for k in range(40)}
    raw["m7"] = []  # a metric with no series
    monkeypatch.setattr(fr, "THREADED_GRID_SAMPLES", 10**18)
    alone = fr.build_frames(raw, start, end, 15.0)
    monkeypatch.setattr(fr, "THREADED_GRID_SAMPLES", 0)
    monkeypatch.setattr(fr, "GRID_THREADS", threads)
    seen: set[str] = set()
    real = fr.grid_series

    def noted(*args, **kwargs):
        import threading

        seen.add(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(fr, "grid_series", noted)
    beside = fr.build_frames(raw, start, end, 15.0)
    assert any(name.startswith("fleetscope-grid") for name in seen)
    assert list(beside.metrics) == list(alone.metrics) and len(alone.metrics) > 30
    for name, frame in alone.metrics.items():
        assert beside.metrics[name].labels.equals(frame.labels), name
        assert np.array_equal(beside.metrics[name].values, frame.values, equal_nan=True), name
