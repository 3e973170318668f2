"""Where a window comes from: one :class:`Source` protocol, chosen once from the argument.

A source answers two questions: :meth:`Source.span`, the grid a window asked for gets (its first
and last grid time and its step, known before any sample is read where the source allows it), and
:meth:`Source.load`, the frames of a window on that grid. Three sources implement it:

* :class:`RecordingSource`: a recorded OpenMetrics file (:mod:`.openmetrics`). Its span is known
  only once it is read (one text whose families each span the whole window), so a streamed
  analysis converts it to an archive first (:meth:`RecordingSource.to_archive`).
* :class:`ArchiveSource`: a Parquet archive of ``fleetscope record`` (:mod:`.archive`); a window's
  read costs what the window holds.
* :class:`PrometheusSource`: any Prometheus-compatible HTTP API (:mod:`.prometheus`). With
  ``sliding=True`` (the live service) it keeps its window's grid tables between loads as instance
  state (:class:`~fleetscope.window.sliding.SlidingWindow`) and asks only for what is new.

:func:`open_source` picks one from ``--input``/``--prometheus``. A new kind of source is one class
here with these two methods, and one branch in :func:`open_source`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol

from fleetscope.errors import FleetscopeError, NoData
from fleetscope.window.aliases import fold_aliases, with_aliases
from fleetscope.window.archive.format import is_parquet
from fleetscope.window.frames import Frames, check_window

if TYPE_CHECKING:
    from fleetscope.window.sliding import SlidingWindow

Progress = Callable[[float], None]

#: A window's defaults on Prometheus: the last hour, at a 15 s step.
DEFAULT_START, DEFAULT_END, DEFAULT_STEP = "-1h", "now", 15.0
#: How many of each series' first samples place an archive's grid phase: the probe read covers
#: that many steps, and a margin (:meth:`ArchiveSource.span`).
PROBE_SAMPLES = 64


class Span(NamedTuple):
    """The grid of a window: its first and last grid time, and its step (``first + k * step``)."""

    first: float
    last: float
    step: float


class Source(Protocol):
    """A window's data: its grid (:meth:`span`) and its frames (:meth:`load`)."""

    #: How the source is named in messages (a path or a URL).
    name: str

    def span(
        self, start: float | None = None, end: float | None = None, step: float | None = None
    ) -> Span | None:
        """The grid the window ``[start, end]`` at ``step`` gets (None: the source's own bounds or
        step); None when it is known only once the whole source is read (a recording)."""
        ...

    def load(
        self,
        start: float | None = None,
        end: float | None = None,
        step: float | None = None,
        progress: Progress | None = None,
    ) -> Frames:
        """The frames of ``[start, end]`` at ``step`` (None: the source's own); raises
        :class:`~fleetscope.errors.NoData` when the window holds no data at all."""
        ...


class RecordingSource:
    """A recorded OpenMetrics file (gzip allowed)."""

    def __init__(self, path: str | Path, metrics: Collection[str] | None) -> None:
        self.path, self.metrics, self.name = Path(path), with_aliases(metrics), os.fspath(path)

    def span(
        self, start: float | None = None, end: float | None = None, step: float | None = None
    ) -> Span | None:
        return None

    def load(
        self,
        start: float | None = None,
        end: float | None = None,
        step: float | None = None,
        progress: Progress | None = None,
    ) -> Frames:
        from fleetscope.window.openmetrics import load_recording

        frames = load_recording(self.path, self.metrics, step=step, start=start, end=end, progress=progress)
        return fold_aliases(frames)

    def first_family_seconds(self) -> float | None:
        """The time the first family the analyzers read spans (None: no such family, or unreadable):
        a recording's families each span its window, so this is the window's length, read from the
        file's head alone. A recording written time-major (every series' first samples first)
        says less here than its window holds."""
        from fleetscope.window.frames import drop_bad_samples
        from fleetscope.window.openmetrics import iter_openmetrics

        families = iter_openmetrics(self.path, self.metrics)
        try:
            name, series = next(families)
        except (StopIteration, FleetscopeError):
            return None
        finally:
            close = getattr(families, "close", None)  # a generator: stops its reading thread
            if close is not None:
                close()
        raw = {name: series}
        drop_bad_samples(raw)  # the samples the loader drops (odd timestamps) do not count (it warns)
        times = [s.times for s in raw.get(name, []) if len(s.times)]
        if not times:
            return None
        return float(max(t.max() for t in times) - min(t.min() for t in times))

    def to_archive(self, out: Path, progress: Progress | None = None) -> ArchiveSource:
        """The recording converted to a Parquet archive at ``out`` (family by family), as a source."""
        from fleetscope.window.archive.write import convert_recording
        from fleetscope.window.memory import release_freed

        convert_recording(self.path, out, self.metrics, progress=progress)
        release_freed()  # the parser's buffers, before the archive is read
        return ArchiveSource(out, self.metrics)


class ArchiveSource:
    """A Parquet archive written by ``fleetscope record``."""

    def __init__(self, path: str | Path, metrics: Collection[str] | None) -> None:
        self.path, self.metrics, self.name = Path(path), with_aliases(metrics), os.fspath(path)

    def extent(self, start: float | None = None, end: float | None = None) -> tuple[float, float]:
        """The window's first and last time from the archive's footer alone (no sample read)."""
        from fleetscope.window.archive.read import archive_span

        first, last, _ = archive_span(self.path)
        return (first if start is None else start), (last if end is None else end)

    def span(self, start: float | None = None, end: float | None = None, step: float | None = None) -> Span:
        """The one-shot grid of the window: its step and phase from the archive's first samples
        (or the ``start`` asked for), read from a probe of its first :data:`PROBE_SAMPLES` steps."""
        from fleetscope.window.archive.read import archive_span, load_parquet

        first, last, own_step = archive_span(self.path)
        end = last if end is None else end
        probe_end = min(end, (first if start is None else start) + (PROBE_SAMPLES + 2) * (step or own_step))
        try:
            probe = load_parquet(self.path, self.metrics, step=step, start=start, end=probe_end)
        except NoData:  # the window starts before the data (an export of a young Prometheus): its own grid
            grid_start = first if start is None else start
            check_window(grid_start, end)
            return Span(grid_start, end, step or own_step)
        grid_start, grid_step = float(probe.times[0]), probe.step
        del probe
        check_window(grid_start, end)
        return Span(grid_start, end, grid_step)

    def load(
        self,
        start: float | None = None,
        end: float | None = None,
        step: float | None = None,
        progress: Progress | None = None,
    ) -> Frames:
        from fleetscope.window.archive.read import load_parquet

        frames = load_parquet(self.path, self.metrics, step=step, start=start, end=end, progress=progress)
        return fold_aliases(frames)


class PrometheusSource:
    """A Prometheus-compatible HTTP API; ``sliding``: keep the window between loads (the service)."""

    def __init__(
        self,
        url: str,
        metrics: Collection[str],
        *,
        timeout: float = 30.0,
        sigv4_region: str | None = None,
        headers: dict[str, str] | None = None,
        max_answer_bytes: int | None = None,
        sliding: bool = False,
        refetch_s: float | None = None,
    ) -> None:
        from fleetscope.window.prometheus import DEFAULT_MAX_ANSWER_BYTES

        self.url, self.name = url, f"Prometheus at {url}"
        self.metrics = with_aliases(metrics) or ()
        self.timeout, self.sigv4_region, self.headers = timeout, sigv4_region, headers
        self.max_answer_bytes = max_answer_bytes or DEFAULT_MAX_ANSWER_BYTES
        self.sliding, self.refetch_s = sliding, refetch_s
        self.window: SlidingWindow | None = None  # the sliding window's grid tables, when sliding
        #: Extra label matchers of every query (a service shard's nodes; empty: every series).
        self.matcher = ""

    def span(self, start: float | None = None, end: float | None = None, step: float | None = None) -> Span:
        from fleetscope.times import parse_time

        first = parse_time(DEFAULT_START) if start is None else start
        last = parse_time(DEFAULT_END) if end is None else end
        step = step or DEFAULT_STEP
        check_window(first, last, step)
        return Span(first, last, step)

    def load(
        self,
        start: float | None = None,
        end: float | None = None,
        step: float | None = None,
        progress: Progress | None = None,
    ) -> Frames:
        first, last, step = self.span(start, end, step)
        if self.sliding:
            window = self._sliding(step)
            window.matcher = self.matcher
            return fold_aliases(window.load(first, last, progress))
        from fleetscope.window.prometheus import load_prometheus

        return load_prometheus(
            self.url,
            first,
            last,
            step,
            self.metrics,
            timeout=self.timeout,
            sigv4_region=self.sigv4_region,
            headers=self.headers,
            progress=progress,
            max_answer_bytes=self.max_answer_bytes,
            matcher=self.matcher,
        )

    def history_changes(self) -> int:
        """Samples of the oldest re-fetched grid time that differ from what the sliding window held
        (its last load): history changed at the edge of the re-fetch margin, so it may have changed
        behind it too. 0 when nothing changed, or when the source does not slide."""
        return self.window.edge_changes if self.window is not None else 0

    def _sliding(self, step: float) -> SlidingWindow:
        """This source's sliding window at ``step`` (a new one when the step changed)."""
        from fleetscope.window.sliding import DEFAULT_REFETCH_S, SlidingWindow

        if self.window is None or self.window.step != step:
            self.window = SlidingWindow(
                self.url,
                float(step),
                self.metrics,
                timeout=self.timeout,
                sigv4_region=self.sigv4_region,
                headers=self.headers,
                max_answer_bytes=self.max_answer_bytes,
                refetch_s=DEFAULT_REFETCH_S if self.refetch_s is None else self.refetch_s,
            )
        return self.window


def open_source(
    input: str | None,
    prometheus: str | None,
    metrics: Collection[str],
    *,
    timeout: float = 30.0,
    sigv4_region: str | None = None,
    headers: dict[str, str] | None = None,
    max_answer_bytes: int | None = None,
) -> RecordingSource | ArchiveSource | PrometheusSource:
    """The source ``--input FILE`` (an archive by its magic bytes, else a recording) or
    ``--prometheus URL`` names (with its access options)."""
    if input:
        return ArchiveSource(input, metrics) if is_parquet(input) else RecordingSource(input, metrics)
    if prometheus:
        return PrometheusSource(
            prometheus,
            metrics,
            timeout=timeout,
            sigv4_region=sigv4_region,
            headers=headers,
            max_answer_bytes=max_answer_bytes,
        )
    raise FleetscopeError("give --input FILE or --prometheus URL")


def load_file(
    path: str | Path,
    metrics: Collection[str] | None = None,
    step: float | None = None,
    start: float | None = None,
    end: float | None = None,
    progress: Progress | None = None,
) -> Frames:
    """Load ``path`` onto a grid from its first to its last sample (or ``start``/``end``): a
    Parquet archive (``fleetscope record``, known by its magic bytes) or a recording."""
    source = ArchiveSource(path, metrics) if is_parquet(path) else RecordingSource(path, metrics)
    return source.load(start, end, step, progress)
