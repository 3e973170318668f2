"""Raw samples to frames, shared by the recording loader (:mod:`.openmetrics`) and the archive loader
(:mod:`.load_parquet`): the same samples go through the same steps, so they give the same grid and the
same findings whichever file held them.
"""

from __future__ import annotations

import logging

import numpy as np

from fleetscope.errors import FleetscopeError, NoData
from fleetscope.window.frames import (
    PLAUSIBLE_MARGIN_S,
    Frames,
    RawSeries,
    build_frames,
    check_window,
    drop_bad_samples,
)
from fleetscope.window.grid import grid_start, round_step

log = logging.getLogger(__name__)


def summarize(
    raw: dict[str, list[RawSeries]], source: str
) -> tuple[dict[str, list[RawSeries]], float, float, float]:
    """Drop the samples no exporter writes (one warning), then (raw, first time, last time, spacing).

    Shared by the recording and the archive loaders, so both place the same samples on the same grid.
    """
    plausible = _all_plausible(raw)
    if plausible is None:
        skipped = drop_bad_samples(raw)
        if skipped.total:
            log.warning("%s", skipped.message(source))
    if not raw:
        raise FleetscopeError(f"{source} holds no usable samples of the series the analyzers read")
    if plausible is not None:
        t_min, t_max = plausible
    else:
        t_min = min(float(s.times.min()) for ss in raw.values() for s in ss)
        t_max = max(float(s.times.max()) for ss in raw.values() for s in ss)
    return raw, t_min, t_max, typical_spacing(raw)


#: Series whose samples :func:`_all_plausible` checks in one numpy call.
PLAUSIBLE_BATCH = 256


def _all_plausible(raw: dict[str, list[RawSeries]]) -> tuple[float, float] | None:
    """The first and last sample time when :func:`drop_bad_samples` would take nothing out, so it
    can be skipped (it costs a quantile over every timestamp): every sample finite, no series empty,
    and all of them within ``PLAUSIBLE_MARGIN_S`` of each other (then none lies that far outside
    their 1st-99th percentile); None otherwise. Each series' times and values become float arrays;
    the checks run over :data:`PLAUSIBLE_BATCH` series' samples at once (one numpy call per series
    was 0.2 s at 21,000 series)."""
    lo, hi = np.inf, -np.inf
    every = [s for series in raw.values() for s in series]
    for s in every:
        if type(s.times) is not np.ndarray or s.times.dtype != np.float64:
            s.times = np.asarray(s.times, dtype=float)
        if type(s.values) is not np.ndarray or s.values.dtype != np.float64:
            s.values = np.asarray(s.values, dtype=float)
        if not s.times.size:
            return None
    for k in range(0, len(every), PLAUSIBLE_BATCH):  # a few hundred series at once: small copies
        part = every[k : k + PLAUSIBLE_BATCH]
        t = np.concatenate([s.times for s in part])
        if not np.isfinite(t).all() or not np.isfinite(np.concatenate([s.values for s in part])).all():
            return None
        lo, hi = min(lo, float(t.min())), max(hi, float(t.max()))
    if not np.isfinite(lo):  # no series at all: drop_bad_samples says so
        return None
    return (lo, hi) if hi - lo <= PLAUSIBLE_MARGIN_S else None


#: The typical sample spacing is the median of the first SPACING_SERIES series' own spacings;
#: DEFAULT_SPACING_S when no series has two sample times.
SPACING_SERIES = 200
DEFAULT_SPACING_S = 15.0


def series_spacing(times: np.ndarray) -> float | None:
    """One series' spacing: the median step between its distinct sample times (None: fewer than two)."""
    d = np.diff(np.unique(times))
    return float(np.median(d)) if d.size else None


class SpacingSample:
    """The one rule for a source's typical sample spacing, fed series by series (:meth:`add`):
    the median of the first :data:`SPACING_SERIES` series' median spacings between distinct
    sample times. The recording and archive loaders and the archive writer all use it."""

    def __init__(self) -> None:
        self.spacings: list[float] = []

    @property
    def full(self) -> bool:
        return len(self.spacings) >= SPACING_SERIES

    def add(self, times: np.ndarray) -> None:
        if self.full or times.size < 2:
            return
        spacing = series_spacing(times)
        if spacing is not None:
            self.spacings.append(spacing)

    def value(self) -> float:
        return float(np.median(self.spacings)) if self.spacings else DEFAULT_SPACING_S


def typical_spacing(raw: dict[str, list[RawSeries]]) -> float:
    """The typical spacing (:class:`SpacingSample`) of the raw series, in their order."""
    sample = SpacingSample()
    for s in (s for ss in raw.values() for s in ss):
        if sample.full:
            break
        sample.add(s.times)
    return sample.value()


def frames_from_raw(
    raw: dict[str, list[RawSeries]],
    t_min: float,
    t_max: float,
    spacing: float,
    *,
    step: float | None = None,
    start: float | None = None,
    end: float | None = None,
    source: str = "",
) -> Frames:
    """Raw samples onto the grid: the step from the spacing, the phase between the scrapes (grid.py)."""
    phase = [s.times[:PHASE_SAMPLES] for series in raw.values() for s in series[:PHASE_SERIES]]
    start, end, step = grid_window(
        phase, t_min, t_max, spacing, step=step, start=start, end=end, source=source
    )
    return build_frames(raw, start, end, step, source=source)


#: The grid's phase is placed from the first PHASE_SAMPLES samples of each metric's first
#: PHASE_SERIES series (a few thousand sample times are enough, grid.grid_start).
PHASE_SAMPLES, PHASE_SERIES = 64, 256


def grid_window(
    phase: list[np.ndarray],
    t_min: float,
    t_max: float,
    spacing: float,
    *,
    step: float | None = None,
    start: float | None = None,
    end: float | None = None,
    source: str = "",
) -> tuple[float, float, float]:
    """(start, end, step) of the grid over samples from ``t_min`` to ``t_max``: the step from the
    spacing, the start (unless given) at the phase between the scrapes of the ``phase`` samples."""
    step = step or round_step(spacing)
    if start is None:
        start = grid_start(np.concatenate(phase) if phase else np.array([]), t_min, step)
    end = t_max if end is None else end
    check_window(start, end)
    if end < t_min or start > t_max:
        raise NoData(f"{source} has no samples in the requested window")
    return start, end, step
