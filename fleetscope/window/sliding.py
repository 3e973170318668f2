"""The live service's window, loaded from Prometheus a little at a time.

Every cycle the service analyzes the last ``window`` seconds; consecutive windows overlap in all but
one interval (a 30-minute window every 30 s: 59/60 of it). Fetching the whole window each cycle
makes the cycle's cost grow with the window: at 512 nodes x 8 GPUs, 29 range queries answer about
330 MB of JSON every cycle. :class:`SlidingWindow` keeps the grid table of every metric between
cycles and asks Prometheus only for the grid times it does not hold yet, plus a re-fetch margin for
samples that arrive late (a slow scrape, remote-write lag), so a cycle fetches ``interval +
margin`` of samples for every series instead of the whole window.

The grid is aligned to whole multiples of the step (``end`` rounded up, so the latest samples are in
it), so consecutive windows share their grid times. The window is the state of one
:class:`~fleetscope.window.sources.PrometheusSource` (``sliding=True``), which the service's
analysis keeps between its cycles. The frames are those :func:`~fleetscope.window.prometheus.load_prometheus`
gives for the same aligned window, as long as Prometheus does not change samples older than the
margin after they were fetched (a backfill into the past, a remote-write delay longer than the
margin). Anything that does not line up (another step, a window that moved backwards or jumped
further than the held one) drops what is held and loads the whole window.

A query that fails for a reason that may pass (connection lost, a 5xx) is sent again with a
back-off, up to :data:`~fleetscope.window.budget.DEFAULT_RETRIES` times within the cycle's
``timeout`` (:func:`~fleetscope.window.prometheus.query_with_retries`), and a cycle that fails all
the same keeps what is held: the next cycle fetches only what it lacks (all of it once the window
has moved past everything held), rather than the whole window, which is when a failure is likeliest.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import numpy as np

from fleetscope.window.budget import DEFAULT_RETRIES, memory_is_one_line
from fleetscope.window.frames import Frames, Skipped, check_grid, check_window, make_grid
from fleetscope.window.prometheus import (
    DEFAULT_CONCURRENCY,
    PrometheusAccess,
    SeriesKey,
    fetch_grid_series,
    frame_of_table,
    grid_table,
    no_series_error,
)

log = logging.getLogger(__name__)

#: Grid times fetched again every cycle, at least: samples of the last two minutes may still arrive.
DEFAULT_REFETCH_S = 120.0


@dataclass
class _Held:
    """One metric's grid table over the held grid."""

    keys: list[SeriesKey]
    table: np.ndarray


@dataclass
class SlidingWindow:
    """Frames of ``[end - window, end]`` on a step-aligned grid, fetched incrementally.

    ``load(start, end)`` returns the frames of the aligned window; :attr:`fetched_from` tells what the
    last load asked Prometheus for (the first grid time fetched), for tests and logs.
    """

    access: PrometheusAccess
    step: float
    metrics: Collection[str]
    concurrency: int = DEFAULT_CONCURRENCY
    refetch_s: float = DEFAULT_REFETCH_S
    retries: int = DEFAULT_RETRIES
    grid: np.ndarray | None = None
    held: dict[str, _Held] = field(default_factory=dict)
    fetched_from: float | None = None
    #: Cells of the oldest re-fetched grid time that differ from what was held (last load): history
    #: changed at the edge of the re-fetch margin, so it may have changed behind it too.
    edge_changes: int = 0
    held_matcher: str = ""
    #: History changed at the margin's edge and the whole window has not been fetched again since:
    #: every cycle fetches it whole (and says so in :attr:`edge_changes`) until one succeeds.
    history_suspect: bool = False

    def load(
        self,
        start: float,
        end: float,
        progress: Callable[[float], None] | None = None,
        matcher: str = "",
    ) -> Frames:
        """The frames of the aligned window; ``matcher``: extra label matchers of every query (a
        service shard's nodes). The held tables are dropped when it changes, so a window never
        mixes two selections.

        When the oldest re-fetched grid time differs from what was held, history may have changed
        behind the re-fetch margin too: the whole window is fetched again in the same cycle, so no
        onset found in it stays on the old history; should that fail, the next cycles try again,
        and :attr:`edge_changes` stays set until one succeeds (it was said for one cycle only, and
        the old history kept)."""
        if not self.history_suspect:
            frames, changes, back_s = self._load(start, end, progress, matcher)
            if not changes:
                self.edge_changes = 0
                return frames
            if not self.edge_changes:
                log.warning(
                    "Prometheus at %s changed %d samples %gs back, at the edge of the re-fetch margin: "
                    "history behind it may have changed too (a backfill, or a remote-write lag): the "
                    "window is fetched whole again; raise --refetch",
                    self.access.url,
                    changes,
                    back_s,
                )
            self.edge_changes, self.history_suspect = changes, True
        self.forget()
        frames, _, _ = self._load(start, end, progress, matcher)
        self.history_suspect = False
        return frames

    def _load(
        self, start: float, end: float, progress: Callable[[float], None] | None, matcher: str
    ) -> tuple[Frames, int, float]:
        """One load: (frames, cells changed at the re-fetch margin's edge, how far back that is)."""
        with memory_is_one_line(self.access.url):
            return self._load_in_memory(start, end, progress, matcher)

    def _load_in_memory(
        self, start: float, end: float, progress: Callable[[float], None] | None, matcher: str
    ) -> tuple[Frames, int, float]:
        check_window(start, end, self.step)
        grid = aligned_grid(start, end, self.step)
        check_grid(float(grid[0]), float(grid[-1]), self.step)
        if matcher != self.held_matcher:
            self.forget()
            self.held_matcher = matcher
        reuse = self._reusable_rows(grid)
        names = list(dict.fromkeys(self.metrics))
        fetch = grid[reuse:]
        client = self.access.client()
        try:  # a failed cycle keeps what is held (module docstring)
            by_name = fetch_grid_series(
                client,
                names,
                fetch,
                self.step,
                self.concurrency,
                progress,
                matcher=matcher,
                retries=self.retries,
            )
        finally:
            client.close()
        self.fetched_from = float(fetch[0])
        skipped = Skipped()
        held: dict[str, _Held] = {}
        changes = 0
        for name in names:
            keys, table = grid_table(by_name[name], fetch, skipped)
            if reuse and name in self.held:
                changes += _edge_changes(self.held[name], self.grid, float(fetch[0]), keys, table)
            if reuse:
                old = self.held.get(name) or _Held([], np.full((len(grid), 0), np.nan))
                keys, table = _merge(old, grid, self.grid, reuse, keys, table)
            alive = ~np.isnan(table).all(axis=0) if keys else np.zeros(0, dtype=bool)
            if alive.any():
                held[name] = _Held([k for k, a in zip(keys, alive, strict=True) if a], table[:, alive])
        if skipped.total:
            log.warning("%s", skipped.message(self.access.url))
        self.grid, self.held = grid, held
        if not held:
            raise no_series_error(self.access.url, float(grid[0]), float(grid[-1]))
        check_grid(float(grid[0]), float(grid[-1]), self.step, sum(len(h.keys) for h in held.values()))
        frames = Frames(times=grid, step=self.step, source=self.access.url)
        for name, h in held.items():
            frame = frame_of_table(h.keys, h.table)
            if frame is not None:
                frames.metrics[name] = frame
        return frames, changes, float(grid[-1] - fetch[0])

    def forget(self) -> None:
        self.grid, self.held = None, {}

    def _reusable_rows(self, grid: np.ndarray) -> int:
        """How many leading grid times of ``grid`` can come from what is held (0: fetch it all)."""
        old = self.grid
        if old is None or not self.held or len(old) == 0:
            return 0
        margin = max(self.refetch_s, 2 * self.step)
        keep_until = float(old[-1]) - margin  # held grid times after this are fetched again
        if grid[0] < old[0] - 1e-6 or grid[-1] < old[-1] - 1e-6 or grid[0] > keep_until:
            return 0  # the window moved backwards (at either end), or past everything that is kept
        return int(np.searchsorted(grid, keep_until, side="right"))


def aligned_grid(start: float, end: float, step: float) -> np.ndarray:
    """The grid of ``[start, end]`` moved forward to whole multiples of ``step`` (the window's length
    rounded down to whole steps), so windows that slide share their grid times.

    Forward, not back: the last grid time is at or just after ``end``, so the latest samples (up to a
    step old) are in the window, as they are in an unaligned one. Moved back, a Prometheus that has
    just started scraping holds nothing up to the last grid time, and a cycle misses what is there.
    """
    last = math.ceil(end / step - 1e-9) * step
    n = math.floor((end - start) / step + 1e-9)
    return make_grid(last - n * step, last, step)


def _edge_changes(
    old: _Held, old_grid: np.ndarray | None, t: float, keys: list[SeriesKey], table: np.ndarray
) -> int:
    """How many cells of the fetched grid time ``t`` (the oldest re-fetched, row 0 of ``table``)
    differ from what ``old`` holds for it, over the series both have: a value changed, appeared or
    went. Samples arriving late change the newest rows; a change this far back means Prometheus
    changed history at the margin's edge. One row per metric: cheap."""
    if old_grid is None or not keys or not old.keys or not table.shape[0]:
        return 0
    row = int(np.searchsorted(old_grid, t - 1e-6))
    if row >= len(old_grid) or abs(float(old_grid[row]) - t) > 1e-6:
        return 0
    at = {k: j for j, k in enumerate(old.keys)}
    both = [(at[k], j) for j, k in enumerate(keys) if k in at]
    if not both:
        return 0
    held = old.table[row, [a for a, _ in both]]
    now = table[0, [b for _, b in both]]
    same = (held == now) | (np.isnan(held) & np.isnan(now))
    return int((~same).sum())


def _merge(
    old: _Held,
    grid: np.ndarray,
    old_grid: np.ndarray | None,
    reuse: int,
    keys: list[SeriesKey],
    table: np.ndarray,
) -> tuple[list[SeriesKey], np.ndarray]:
    """The held rows for ``grid[:reuse]`` above the fetched rows for ``grid[reuse:]``, over the union
    of their series (held ones first, in their order; a series missing on one side is NaN there)."""
    assert old_grid is not None
    at = {k: j for j, k in enumerate(old.keys)}
    union = list(old.keys) + [k for k in keys if k not in at]
    col = {k: j for j, k in enumerate(union)}
    out = np.full((len(grid), len(union)), np.nan)
    first = int(np.searchsorted(old_grid, grid[0] - 1e-6))  # held row of grid[0]
    out[:reuse, : len(old.keys)] = old.table[first : first + reuse]
    if keys:
        out[reuse:, [col[k] for k in keys]] = table
    return union, out
