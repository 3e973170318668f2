"""The one layout both loaders produce: every metric as a (time x series) array on a common grid.

Why a grid: the Prometheus API answers ``query_range`` on a regular grid, and a recorded file must
give the *same* findings, so the file loader puts its raw samples onto the same grid with the same
rule Prometheus applies. The rule is ``last_over_time(m[L])``: the value at grid time ``t`` is the
last sample in ``[t - L, t]``, with the lookback ``L`` just under two steps. A series that stops is
therefore absent two steps later (not five minutes later, as a plain selector's staleness would
have it), which keeps fail-stop detection fast.

Raw samples are cleaned before they are gridded: sorted by time, duplicates of one timestamp
collapsed to the last one written, NaN samples dropped. Before that, :func:`drop_bad_samples` takes out
what outside input can hold but no exporter writes: non-finite timestamps or values, and timestamps far
from the window (one sample stamped 1970 or 2100 would otherwise stretch the grid over decades).
:func:`check_grid` bounds the grid before anything is allocated. Counters are never read raw: :func:`increase`
turns them into per-step increments that survive counter resets (a drop means the counter restarted
from zero, as in PromQL's ``increase``) and gaps (the increment is taken from the last value seen).
"""

from __future__ import annotations

import itertools
import os
import sys
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from fleetscope.errors import FleetscopeError
from fleetscope.times import rfc3339

#: Label keys added by Prometheus at scrape time; never used to identify a node or GPU.
SCRAPE_LABELS = ("job", "instance")


def lookback_seconds(step: float) -> float:
    """The lookback of the grid rule: just under two steps, so one missed scrape is bridged."""
    return 2 * step - 0.001


@dataclass
class RawSeries:
    """One series as loaded: its labels and its samples (any order, duplicates allowed)."""

    labels: dict[str, str]
    times: np.ndarray
    values: np.ndarray


@dataclass
class MetricFrame:
    """One metric: ``labels`` has one row per series (columns = label keys, missing = ""),
    ``values`` has one column per series and one row per grid time (NaN = no sample)."""

    labels: pd.DataFrame
    values: np.ndarray

    def __len__(self) -> int:
        return self.values.shape[1]

    def column(self, key: str) -> np.ndarray:
        if key in self.labels.columns:
            return self.labels[key].to_numpy(dtype=object)
        return np.full(len(self.labels), "", dtype=object)

    def select(self, **match: str | Sequence[str]) -> MetricFrame:
        """The series whose labels equal (or are in) the given values."""
        mask = np.ones(len(self.labels), dtype=bool)
        for k, v in match.items():
            col = self.column(k)
            mask &= np.isin(col, [v] if isinstance(v, str) else list(v))
        return MetricFrame(self.labels[mask].reset_index(drop=True), self.values[:, mask])

    def group(self, keys: Sequence[str], how: str = "max") -> tuple[pd.DataFrame, np.ndarray]:
        """Aggregate series sharing the same values of ``keys`` (max, sum, or min per time)."""
        if not len(self.labels):
            return pd.DataFrame(columns=list(keys)), np.zeros((self.values.shape[0], 0))
        cols = [self.column(k) for k in keys]
        codes, first = row_codes(cols)
        K = len(first)
        if len(codes) == K and np.array_equal(codes, np.arange(K)):
            out = self.values.copy()
        else:
            out = _reduce_columns(self.values, codes, K, how)
        frame = pd.DataFrame({k: col[first] for k, col in zip(keys, cols, strict=True)})
        return frame, out


def _reduce_columns(values: np.ndarray, codes: np.ndarray, K: int, how: str) -> np.ndarray:
    """Columns of ``values`` with the same code reduced to one (max, min, or sum), NaN ignored, NaN
    where all are NaN: one ``reduceat`` over the columns sorted by code, not a pass per code."""
    order = np.argsort(codes, kind="stable")
    v = values[:, order]
    starts = np.flatnonzero(np.r_[True, codes[order][1:] != codes[order][:-1]])
    nan = np.isnan(v)
    allnan = np.logical_and.reduceat(nan, starts, axis=1)
    if how == "sum":
        out = np.add.reduceat(np.where(nan, 0.0, v), starts, axis=1)
    elif how == "min":
        out = np.minimum.reduceat(np.where(nan, np.inf, v), starts, axis=1)
    else:
        out = np.maximum.reduceat(np.where(nan, -np.inf, v), starts, axis=1)
    out[allnan] = np.nan
    return out


def row_codes(columns: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Rows numbered by their values in ``columns`` (equal rows, equal numbers; 0, 1, ... in the
    order rows first appear), and the first row of each number. One factorize per column instead
    of a pandas MultiIndex (which builds a categorical per level)."""
    n = len(columns[0]) if len(columns) else 0
    codes = np.zeros(n, dtype=np.int64)
    for col in columns:
        c, uniq = pd.factorize(np.asarray(col, dtype=object))
        codes, _ = pd.factorize(codes * max(len(uniq), 1) + c)
    if not n:
        return codes, np.zeros(0, dtype=np.int64)
    _, first = np.unique(codes, return_index=True)
    return codes.astype(np.int64, copy=False), first


@dataclass
class Frames:
    """A loaded window: the grid and every metric on it."""

    times: np.ndarray
    step: float
    metrics: dict[str, MetricFrame] = field(default_factory=dict)
    source: str = ""

    @property
    def start(self) -> float:
        return float(self.times[0])

    @property
    def end(self) -> float:
        return float(self.times[-1])

    def get(self, name: str) -> MetricFrame:
        m = self.metrics.get(name)
        if m is None:
            return MetricFrame(pd.DataFrame(), np.zeros((len(self.times), 0)))
        return m

    def has(self, name: str) -> bool:
        return name in self.metrics and len(self.metrics[name]) > 0


#: Most grid times of one window (1 M: 173 days at a 15 s step).
MAX_GRID_POINTS = 1_000_000
#: Most grid cells of one window, grid times x series of all metrics together (800 MB of float64).
MAX_GRID_CELLS = 100_000_000
#: How far (seconds) a sample may lie from the bulk of a recording's samples (their 1st to 99th
#: percentile of time) and still be read.
PLAUSIBLE_MARGIN_S = 86400.0


def check_window(start: float, end: float, step: float | None = None) -> None:
    """The one check of a window asked for: it ends at or after its start, its step is positive."""
    if end < start:
        raise FleetscopeError("the window ends before it starts")
    if step is not None and not step > 0:
        raise FleetscopeError("--step must be positive")


def say_skipped(what: str, empty: list[tuple[int, float, float]], total: int) -> None:
    """Say once, on stderr, which of a window's ``total`` chunks (or pieces) held no data and were
    skipped: ``empty`` holds their (place, first grid time, last grid time), in order; neighbours
    are said as one span."""
    spans: list[list[float]] = []
    for k, (place, a, b) in enumerate(empty):
        if k and place == empty[k - 1][0] + 1:
            spans[-1][1] = b
        else:
            spans.append([a, b])
    said = ", ".join(f"{_when(a)} to {_when(b)}" for a, b in spans)
    print(f"fleetscope: skipped {len(empty)} of {total} {what} with no data ({said})", file=sys.stderr)


def check_grid(start: float, end: float, step: float, series: int = 1) -> int:
    """The number of grid times of ``[start, end]`` at ``step``; an error past the limits.

    ``series``: how many series will share the grid (all metrics together), for the cell limit.
    """
    if not (np.isfinite(start) and np.isfinite(end) and np.isfinite(step)):
        raise FleetscopeError("the window's start, end and step must be finite numbers")
    check_window(start, end, step)
    points = int(np.floor((end - start) / step + 1e-9)) + 1
    cells = points * max(series, 1)
    if points > MAX_GRID_POINTS or cells > MAX_GRID_CELLS:
        raise FleetscopeError(
            f"the window {_when(start)} to {_when(end)} at a {step:g} s step is {points:,} grid times x "
            f"{max(series, 1):,} series, over the limit of {MAX_GRID_POINTS:,} times and {MAX_GRID_CELLS:,} "
            "cells; narrow it with --start/--end, coarsen it with --step, or stream it (analyze --chunk 1h)"
        )
    return max(points, 1)


def _when(ts: float) -> str:
    try:
        return rfc3339(ts)
    except (OverflowError, ValueError, OSError):
        return f"{ts:g}"


@dataclass
class Skipped:
    """Samples :func:`drop_bad_samples` took out, by reason."""

    non_finite_time: int = 0
    non_finite_value: int = 0
    implausible_time: int = 0

    @property
    def total(self) -> int:
        return self.non_finite_time + self.non_finite_value + self.implausible_time

    def message(self, source: str) -> str:
        """The one warning line (empty when nothing was skipped)."""
        if not self.total:
            return ""
        parts = [
            f"{n:,} {what}"
            for n, what in (
                (self.non_finite_time, "with a non-finite timestamp"),
                (self.non_finite_value, "with a NaN or infinite value"),
                (
                    self.implausible_time,
                    f"stamped more than {PLAUSIBLE_MARGIN_S / 3600:g} h from the other samples",
                ),
            )
            if n
        ]
        plural = "s" if self.total != 1 else ""
        return f"{source}: skipped {self.total:,} sample{plural} ({', '.join(parts)})"


def drop_bad_samples(raw: dict[str, list[RawSeries]]) -> Skipped:
    """Take out (in place) samples no exporter writes: non-finite times or values, and times more
    than :data:`PLAUSIBLE_MARGIN_S` outside the bulk of the samples (their 1st to 99th percentile of
    time, so a few odd stamps move nothing). Series left without samples are removed.

    A window asked for (``--start/--end``) needs no check of its own: the grid spans only it.
    """
    skipped = Skipped()
    for series in raw.values():
        for s in series:
            t = np.asarray(s.times, dtype=float)
            v = np.asarray(s.values, dtype=float)
            ok_t = np.isfinite(t)
            ok_v = np.isfinite(v)
            skipped.non_finite_time += int((~ok_t).sum())
            skipped.non_finite_value += int((ok_t & ~ok_v).sum())
            keep = ok_t & ok_v
            s.times, s.values = (t, v) if keep.all() else (t[keep], v[keep])
    lo, hi = _plausible_range(raw)
    for name in list(raw):
        kept = []
        for s in raw[name]:
            inside = (s.times >= lo) & (s.times <= hi)
            if not inside.all():
                skipped.implausible_time += int((~inside).sum())
                s.times, s.values = s.times[inside], s.values[inside]
            if s.times.size:
                kept.append(s)
        if kept:
            raw[name] = kept
        else:
            del raw[name]
    return skipped


def _plausible_range(raw: dict[str, list[RawSeries]]) -> tuple[float, float]:
    # A sample of every series' times (at most ~1000 each) stands in for all of them.
    sample = [s.times[:: max(1, s.times.size // 1000)] for ss in raw.values() for s in ss if s.times.size]
    if not sample:
        return -np.inf, np.inf
    lo, hi = np.quantile(np.concatenate(sample), [0.01, 0.99])
    return float(lo) - PLAUSIBLE_MARGIN_S, float(hi) + PLAUSIBLE_MARGIN_S


def make_grid(start: float, end: float, step: float) -> np.ndarray:
    """``start, start+step, ...`` up to ``end`` inclusive (Prometheus' query_range grid)."""
    n = int(np.floor((end - start) / step + 1e-9)) + 1
    return start + step * np.arange(max(n, 1))


def clean(times: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort by time, keep the last of duplicate timestamps, drop NaN samples."""
    t = np.asarray(times, dtype=float)
    v = np.asarray(values, dtype=float)
    if t.size > 1 and np.any(np.diff(t) <= 0):
        order = np.argsort(t, kind="stable")
        t, v = t[order], v[order]
        last = np.append(t[1:] != t[:-1], True)
        t, v = t[last], v[last]
    keep = ~np.isnan(v)
    return t[keep], v[keep]


def to_grid(times: np.ndarray, values: np.ndarray, grid: np.ndarray, lookback: float) -> np.ndarray:
    """The ``last_over_time(m[lookback])`` value of one cleaned series at every grid time."""
    if times.size == 0:
        return np.full(grid.shape, np.nan)
    # Millisecond resolution, as Prometheus stores it.
    tm = np.round(times * 1000).astype(np.int64)
    gm = np.round(grid * 1000).astype(np.int64)
    idx = np.searchsorted(tm, gm, side="right") - 1
    ok = idx >= 0
    safe = np.where(ok, idx, 0)
    ok &= (gm - tm[safe]) <= round(lookback * 1000)
    return np.where(ok, values[safe], np.nan)


def build_frames(
    raw: dict[str, list[RawSeries]],
    start: float,
    end: float,
    step: float,
    source: str = "",
    gridded: bool = False,
) -> Frames:
    """Clean every raw series and put it on the grid; series of the same labels are merged.

    ``gridded``: the samples are already grid values (a query_range answer), so each one lands on
    its own grid time and the lookback is not applied a second time.
    """
    check_grid(start, end, step, sum(len(series) for series in raw.values()))
    grid = make_grid(start, end, step)
    lb = 0.0 if gridded else lookback_seconds(step)
    frames = Frames(times=grid, step=step, source=source)
    for name, (keys, table) in zip(raw, _grid_each(raw, grid, lb), strict=True):
        alive = ~np.isnan(table).all(axis=0)
        if not alive.any():
            continue
        labels = pd.DataFrame([dict(k) for k, a in zip(keys, alive, strict=True) if a]).fillna("")
        frames.metrics[name] = MetricFrame(labels, table[:, alive])
    return frames


#: Samples of a window over which its metrics are put on the grid on several threads (numpy lets
#: go of the GIL in the sorts and searches that are most of it: 0.31 -> 0.22 s for a 64-node hour on
#: two cores, docs/benchmarks.md); below it a thread costs more than it saves.
THREADED_GRID_SAMPLES = 1_000_000
GRID_THREADS = 4


def _grid_each(
    raw: dict[str, list[RawSeries]], grid: np.ndarray, lookback: float
) -> Iterator[tuple[list[tuple[tuple[str, str], ...]], np.ndarray]]:
    """:func:`grid_series` of each metric of ``raw``, in order."""
    label_keys: dict[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]] = {}  # for every metric
    threads = min(GRID_THREADS, os.cpu_count() or 1, len(raw))
    samples = sum(s.times.size for series in raw.values() for s in series)
    if threads < 2 or samples < THREADED_GRID_SAMPLES:
        for series in raw.values():
            yield grid_series(series, grid, lookback, label_keys)
        return

    # Each metric's table is its own; the shared key cache only ever gains equal entries. At most
    # one table more than the threads is held before its caller takes it (a table before the
    # caller drops its dead columns can be tens of MB).
    def one(series: list[RawSeries]) -> tuple[list[tuple[tuple[str, str], ...]], np.ndarray]:
        return grid_series(series, grid, lookback, label_keys)

    with ThreadPoolExecutor(threads, thread_name_prefix="fleetscope-grid") as pool:
        todo = iter(raw.values())
        running = deque(pool.submit(one, series) for series in itertools.islice(todo, threads + 1))
        while running:
            done = running.popleft().result()
            for series in itertools.islice(todo, 1):
                running.append(pool.submit(one, series))
            yield done


def grid_series(
    series: Sequence[RawSeries],
    grid: np.ndarray,
    lookback: float,
    label_keys: dict[tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]] | None = None,
) -> tuple[list[tuple[tuple[str, str], ...]], np.ndarray]:
    """Every series of one metric on ``grid`` at once: (its keys, a grid times x keys table).

    Series with the same non-empty labels are one key (first-seen order). Per key, exactly
    :func:`clean` then :func:`to_grid`: samples sorted by time, the last of duplicate timestamps
    kept (in the order given), NaN samples dropped, then at every grid time the last sample within
    ``lookback`` (milliseconds, as Prometheus stores them). Vectorized over all keys: one sort
    and one ``searchsorted`` instead of a Python loop per series (15,232 series at 64 nodes).
    ``label_keys``: the key of each label set met before, by its items as given (a GPU's labels
    repeat in every metric of it), shared by the calls for the metrics of one window.
    """
    keys: dict[tuple[tuple[str, str], ...], int] = {}
    known = {} if label_keys is None else label_keys
    ids, sizes, times, values = [], [], [], []
    for s in series:
        items = tuple(s.labels.items())
        label_key = known.get(items)
        if label_key is None:
            label_key = known[items] = tuple(sorted((a, v) for a, v in items if v != ""))
        ids.append(keys.setdefault(label_key, len(keys)))
        t = np.asarray(s.times, dtype=float)
        sizes.append(t.size)
        times.append(t)
        values.append(np.asarray(s.values, dtype=float))
    if not keys:
        return [], np.full((len(grid), 0), np.nan)
    tm = np.round(np.concatenate(times) * 1000).astype(np.int64)
    key = np.repeat(np.array(ids, dtype=np.int64), np.array(sizes, dtype=np.int64))
    return list(keys), grid_rows(key, tm, np.concatenate(values), len(keys), grid, lookback)


def grid_rows(
    key: np.ndarray,
    tm: np.ndarray,
    val: np.ndarray,
    K: int,
    grid: np.ndarray,
    lookback: float,
    *,
    ordered: bool = False,
) -> np.ndarray:
    """The rule of :func:`grid_series` on flat rows: ``key`` (series number in ``[0, K)``), ``tm``
    (milliseconds), ``val``; a grid times x K table. ``ordered``: the rows are sorted by (key, time)
    already (stable: duplicates in the order written), so the sort is skipped.

    A columnar source (the archive) calls this directly, without a Python object per series.
    """
    T = len(grid)
    table = np.full((T, K), np.nan)
    if not K or not key.size:
        return table
    gm = np.round(grid * 1000).astype(np.int64)
    if not ordered and not rows_in_order(key, tm):  # by key, then time; stable: duplicates keep order
        base = min(int(tm.min()), int(gm.min()))
        span = max(int(tm.max()), int(gm.max())) - base + 1  # every offset below is in [0, span)
        fits = K * span < 2**62  # one int64 key (a timsort) unless it would overflow
        order = (
            np.argsort(key.astype(np.int64) * span + (tm - base), kind="stable")
            if fits
            else np.lexsort((tm, key))
        )
        key, tm, val = key[order], tm[order], val[order]
    next_key = key[1:] != key[:-1]  # the last row of each key
    keep = np.ones(key.size, dtype=bool)  # the last of every (key, timestamp) run, if not NaN
    keep[:-1] = next_key | (tm[1:] != tm[:-1])
    keep &= ~np.isnan(val)
    if not keep.all():
        key, tm, val = key[keep], tm[keep], val[keep]
        next_key = key[1:] != key[:-1]
    del keep
    if not key.size:
        return table
    # Each sample is the newest at or before every grid time from the first one at or after it (j)
    # until the next sample of its series takes over: place each at (j, key) -- the last of its
    # series with that j -- then carry the row numbers forward in time (they grow within a series).
    j = np.searchsorted(gm, tm, side="left")
    newest = np.ones(j.size, dtype=bool)
    newest[:-1] = next_key | (j[1:] != j[:-1])
    newest &= j < T
    rows = np.flatnonzero(newest)
    lb = round(lookback * 1000)
    block = max(1, _GRID_BLOCK // max(T, 1))  # keys per pass: bounds the temporary arrays
    for k0 in range(0, K, block):
        k1 = min(K, k0 + block)
        r = rows[np.searchsorted(key[rows], k0) : np.searchsorted(key[rows], k1)]
        at = np.full((T, k1 - k0), -1, dtype=np.int64)
        at[j[r], key[r] - k0] = r
        np.maximum.accumulate(at, axis=0, out=at)
        safe = np.maximum(at, 0)
        ok = (at >= 0) & ((gm[:, None] - tm[safe]) <= lb)
        np.copyto(table[:, k0:k1], val[safe], where=ok)
    return table


def rows_in_order(key: np.ndarray, tm: np.ndarray) -> bool:
    """Whether the rows are in key order, and in time order within each key (then the stable sort
    by (key, time) is the identity: a recording's series one after another, each in time order,
    need no sort)."""
    dk = np.diff(key)
    return bool((dk >= 0).all() and not ((np.diff(tm) < 0) & (dk == 0)).any())


#: Grid cells placed per pass of :func:`grid_rows` (its temporary arrays: about 30 bytes a cell).
_GRID_BLOCK = 4_000_000


# ---------------------------------------------------------------------- counter arithmetic
def increase_steps(values: np.ndarray) -> np.ndarray:
    """Per-step increments of counters (T x S): resets count from zero; gaps are bridged.

    Row 0 and rows where the series has no sample are NaN; the first sample of a series counts as
    no increase (its history before the window is unknown).
    """
    v = np.asarray(values, dtype=float)
    prev = pd.DataFrame(v).ffill().shift(1).to_numpy()
    d = v - prev
    d = np.where(d < 0, v, d)  # counter reset: it restarted from zero
    d = np.where(np.isnan(v), np.nan, d)
    return d


def rolling_sum(x: np.ndarray, window: int) -> np.ndarray:
    """Sum over the last ``window`` rows (NaN counts as 0; all-NaN windows give NaN)."""
    x = np.asarray(x, dtype=float)
    valid = ~np.isnan(x)
    cs = np.cumsum(np.where(valid, x, 0.0), axis=0)
    cn = np.cumsum(valid, axis=0)
    cs = np.vstack([np.zeros((1,) + cs.shape[1:]), cs])
    cn = np.vstack([np.zeros((1,) + cn.shape[1:]), cn])
    idx = np.arange(1, x.shape[0] + 1)
    lo = np.maximum(idx - window, 0)
    s = cs[idx] - cs[lo]
    n = cn[idx] - cn[lo]
    return np.where(n > 0, s, np.nan)


def rate(values: np.ndarray, step: float, window: int) -> np.ndarray:
    """Per-second rate of counters over the last ``window`` steps (reset-safe)."""
    return rolling_sum(increase_steps(values), window) / (window * step)


def iter_runs(mask: np.ndarray) -> Iterable[tuple[int, int]]:
    """(first, last) indices of each run of True in a 1-D boolean array."""
    m = np.asarray(mask, dtype=bool)
    if not m.any():
        return []
    d = np.diff(np.concatenate([[0], m.astype(np.int8), [0]]))
    starts = np.nonzero(d == 1)[0]
    ends = np.nonzero(d == -1)[0] - 1
    return list(zip(starts.tolist(), ends.tolist(), strict=True))


def slice_frames(frames: Frames, t0: float, t1: float) -> Frames:
    """The grid times of ``frames`` in ``[t0, t1]``, and only the series with a sample there
    (what a loader asked for that window would hold)."""
    keep = (frames.times >= t0 - 1e-6) & (frames.times <= t1 + 1e-6)
    metrics = {}
    for name, m in frames.metrics.items():
        v = m.values[keep]
        has = ~np.isnan(v).all(axis=0) if v.size else np.zeros(v.shape[1], dtype=bool)
        if has.any():
            metrics[name] = MetricFrame(m.labels[has].reset_index(drop=True), v[:, has])
    return Frames(frames.times[keep], frames.step, metrics, frames.source)
