"""Where a window comes from: one :class:`Source` protocol, chosen once from the argument.

A source answers what a window analysis asks of it: :meth:`Source.seconds`, how long the window is
from what is cheap to know; :meth:`Source.span`, the grid a window asked for gets (its first and last
grid time and its step, checked once by :meth:`Span.of`, known before any sample is read where the
source allows it); :meth:`Source.load`, the frames of a window on that grid;
:meth:`Source.for_chunks`, the source in a form read a time span at a time (streamed analysis); and
:meth:`Source.history_changes`, what a sliding window noticed. Three sources implement it (and
the spool of a recording, read as an archive):

* :class:`RecordingSource`: a recorded OpenMetrics file (:mod:`.openmetrics`). Its span is known
  only once it is read (one text whose families each span the whole window), so a streamed
  analysis parses it once and spools it first (:meth:`RecordingSource.for_chunks`), then reads the
  spool as a :class:`SpoolSource` (:mod:`.archive.spool`: what an archive of it reads).
* :class:`ArchiveSource`: a Parquet archive of ``fleetscope record`` (:mod:`.archive`); a window's
  read costs what the window holds.
* :class:`PrometheusSource`: any Prometheus-compatible HTTP API (:mod:`.prometheus`). With
  ``sliding=True`` (the live service) it keeps its window's grid tables between loads as instance
  state (:class:`~fleetscope.window.sliding.SlidingWindow`) and asks only for what is new; its
  access options are one :class:`~fleetscope.window.prometheus.PrometheusAccess`, and
  :meth:`PrometheusSource.restrict` makes a new source narrowed to a service shard's nodes.

:func:`open_source` is the one door: it picks a source from ``--input``/``--prometheus``, for every
caller (``analyze``, ``plan``, ``evaluate``, the demo, the tests). A new kind of source is one class
here with these methods, and one branch in :func:`open_source`.
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
    from fleetscope.window.archive.spool import Spool
    from fleetscope.window.openmetrics import RecordingRead
    from fleetscope.window.prometheus import PrometheusAccess
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

    @classmethod
    def of(cls, first: float, last: float, step: float) -> Span:
        """The span, checked: it ends at or after its start, its step is positive (one clear
        error otherwise)."""
        check_window(first, last, step)
        return cls(first, last, step)


class Source(Protocol):
    """A window's data: how long it is (:meth:`seconds`), its grid (:meth:`span`), its frames
    (:meth:`load`), a form that reads it a time span at a time (:meth:`for_chunks`), and what it
    noticed while loading (:meth:`history_changes`)."""

    #: How the source is named in messages (a path or a URL).
    name: str
    #: What loading it is called on a progress bar ("loading", "querying").
    load_label: str

    def seconds(
        self, start: float | None = None, end: float | None = None, step: float | None = None
    ) -> float | None:
        """How long the window ``[start, end]`` is (None: the source's own bounds), from what is cheap
        to know (an archive's footer, a recording's first family); None when that says nothing."""
        ...

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

    def for_chunks(self, tmpdir: Callable[[], Path], progress: Progress | None = None) -> Source:
        """This source in a form that reads a time span at a time and knows its :meth:`span` before
        reading: itself, or a copy written under ``tmpdir()`` (a directory made on demand, only by a
        source that converts: a recording becomes an archive)."""
        ...

    def history_changes(self) -> int:
        """Samples that changed behind the source's back since its last load (a sliding window's
        re-fetch found history rewritten); 0 when nothing changed or the source does not slide."""
        ...


class RecordingSource:
    """A recorded OpenMetrics file (gzip allowed)."""

    load_label = "loading"

    def __init__(self, path: str | Path, metrics: Collection[str] | None) -> None:
        self.path, self.metrics, self.name = Path(path), with_aliases(metrics), os.fspath(path)
        self._head: RecordingRead | None = None  # the read that judged the window's length, paused

    def seconds(
        self, start: float | None = None, end: float | None = None, step: float | None = None
    ) -> float | None:
        """The window's length from the recording's head: its first family's
        (:meth:`first_family_seconds`), or ``end - start`` when that is shorter. The read stops
        there, and a :meth:`load` of the same window goes on with it."""
        recorded_s = self.first_family_seconds((start, end, step))
        if start is not None and end is not None and recorded_s is not None:
            return min(recorded_s, end - start)
        return recorded_s

    def span(
        self, start: float | None = None, end: float | None = None, step: float | None = None
    ) -> Span | None:
        return None

    def for_chunks(self, tmpdir: Callable[[], Path], progress: Progress | None = None) -> SpoolSource:
        """The recording parsed once and spooled under ``tmpdir()`` (:mod:`.archive.spool`): a
        recording is one text whose families each span the whole window, so it cannot be read a
        time span at a time."""
        from fleetscope.window.archive.spool import spool_recording
        from fleetscope.window.memory import release_freed

        self._drop_head()
        spool = spool_recording(self.path, tmpdir() / "window.spool", self.metrics, progress)
        release_freed()  # the parser's buffers, before the spool is read
        return SpoolSource(spool, self.metrics)

    def history_changes(self) -> int:
        return 0

    def load(
        self,
        start: float | None = None,
        end: float | None = None,
        step: float | None = None,
        progress: Progress | None = None,
    ) -> Frames:
        from fleetscope.window.openmetrics import load_recording

        head, self._head = self._head, None
        frames = load_recording(
            self.path, self.metrics, step=step, start=start, end=end, progress=progress, head=head
        )
        return fold_aliases(frames)

    def first_family_seconds(
        self, window: tuple[float | None, float | None, float | None] = (None, None, None)
    ) -> float | None:
        """The time the first family the analyzers read spans (None: no such family, or unreadable;
        :meth:`~fleetscope.window.openmetrics.RecordingRead.first_family_seconds`): the window's
        length, from the file's head alone. The read is kept for a :meth:`load` of ``window``."""
        from fleetscope.window.openmetrics import RecordingRead

        self._drop_head()
        read = RecordingRead(self.path, self.metrics, window)
        try:
            seconds = read.first_family_seconds()
        except FleetscopeError:  # the load reads it again, and says what is wrong
            read.close()
            return None
        self._head = read
        return seconds

    def _drop_head(self) -> None:
        if self._head is not None:
            self._head.close()
            self._head = None

    def to_archive(
        self, out: Path, progress: Progress | None = None, compression: str = "zstd"
    ) -> ArchiveSource:
        """The recording converted to a Parquet archive at ``out`` (family by family), as a source;
        ``compression``: Parquet's codec."""
        from fleetscope.window.archive.write import convert_recording
        from fleetscope.window.memory import release_freed

        convert_recording(self.path, out, self.metrics, progress=progress, compression=compression)
        release_freed()  # the parser's buffers, before the archive is read
        return ArchiveSource(out, self.metrics)


class ArchiveSource:
    """A Parquet archive written by ``fleetscope record``."""

    load_label = "loading"

    def __init__(self, path: str | Path, metrics: Collection[str] | None) -> None:
        self.path, self.metrics, self.name = Path(path), with_aliases(metrics), os.fspath(path)

    def seconds(
        self, start: float | None = None, end: float | None = None, step: float | None = None
    ) -> float:
        """The window's length from the archive's footer alone (no sample read)."""
        first, last = self.extent(start, end)
        return last - first

    def for_chunks(self, tmpdir: Callable[[], Path], progress: Progress | None = None) -> ArchiveSource:
        return self  # a window's read costs what the window holds

    def history_changes(self) -> int:
        return 0

    def extent(self, start: float | None = None, end: float | None = None) -> tuple[float, float]:
        """The window's first and last time from the archive's footer alone (no sample read)."""
        first, last, _ = self._own_span()
        return (first if start is None else start), (last if end is None else end)

    def span(self, start: float | None = None, end: float | None = None, step: float | None = None) -> Span:
        """The one-shot grid of the window: its step and phase from the archive's first samples
        (or the ``start`` asked for), read from a probe of its first :data:`PROBE_SAMPLES` steps."""
        first, last, own_step = self._own_span()
        end = last if end is None else end
        recorded = self._recorded_start(step) if start is None else None
        if recorded is not None:  # a converted recording: the grid its one-shot load places
            return Span.of(recorded, end, step or own_step)
        probe_end = min(end, (first if start is None else start) + (PROBE_SAMPLES + 2) * (step or own_step))
        try:
            probe = self._load(step, start, probe_end)
        except NoData:  # the window starts before the data (an export of a young Prometheus): its own grid
            return Span.of(first if start is None else start, end, step or own_step)
        grid_start, grid_step = float(probe.times[0]), probe.step
        del probe
        return Span.of(grid_start, end, grid_step)

    def load(
        self,
        start: float | None = None,
        end: float | None = None,
        step: float | None = None,
        progress: Progress | None = None,
    ) -> Frames:
        return fold_aliases(self._load(step, start, end, progress))

    def _own_span(self) -> tuple[float, float, float]:
        """The archive's first and last time and its step, from its footer."""
        from fleetscope.window.archive.read import archive_span

        return archive_span(self.path)

    def _recorded_start(self, step: float | None) -> float | None:
        """The grid start of the recording the archive was converted from (None: unknown)."""
        from fleetscope.window.archive.read import recorded_grid_start

        return recorded_grid_start(self.path, step)

    def _load(
        self, step: float | None, start: float | None, end: float | None, progress: Progress | None = None
    ) -> Frames:
        from fleetscope.window.archive.read import load_parquet

        return load_parquet(self.path, self.metrics, step=step, start=start, end=end, progress=progress)


class SpoolSource(ArchiveSource):
    """A recording spooled for one streamed analysis (:mod:`.archive.spool`): read as the archive
    of the same recording is, from the spool's file and what it keeps in memory."""

    def __init__(self, spool: Spool, metrics: Collection[str] | None) -> None:
        super().__init__(spool.path, metrics)
        self.spool = spool

    def _own_span(self) -> tuple[float, float, float]:
        return self.spool.span()

    def _recorded_start(self, step: float | None) -> float | None:
        return self.spool.recorded_grid_start(step)

    def _load(
        self, step: float | None, start: float | None, end: float | None, progress: Progress | None = None
    ) -> Frames:
        return self.spool.load(self.metrics, step=step, start=start, end=end)


class _Held:
    """The sliding window a :class:`PrometheusSource` keeps between loads, shared by the sources
    :meth:`PrometheusSource.restrict` makes of it (window-layer state: nothing outside sets it)."""

    def __init__(self) -> None:
        self.window: SlidingWindow | None = None


class PrometheusSource:
    """A Prometheus-compatible HTTP API; ``sliding``: keep the window between loads (the service).

    ``matcher``: extra label matchers of every query (a service shard's nodes; empty: every
    series); :meth:`restrict` makes a source with another one.
    """

    load_label = "querying"

    def __init__(
        self,
        access: PrometheusAccess,
        metrics: Collection[str],
        *,
        sliding: bool = False,
        refetch_s: float | None = None,
        matcher: str = "",
        _held: _Held | None = None,
    ) -> None:
        self.access, self.name = access, f"Prometheus at {access.url}"
        self.metrics = with_aliases(metrics) or ()
        self.sliding, self.refetch_s, self.matcher = sliding, refetch_s, matcher
        self._held = _Held() if _held is None else _held

    def restrict(self, matcher: str) -> PrometheusSource:
        """This source with every query narrowed by ``matcher`` (a service shard's nodes): a new
        source sharing this one's sliding window, which starts afresh when the matcher changes."""
        return PrometheusSource(
            self.access,
            self.metrics,
            sliding=self.sliding,
            refetch_s=self.refetch_s,
            matcher=matcher,
            _held=self._held,
        )

    def seconds(
        self, start: float | None = None, end: float | None = None, step: float | None = None
    ) -> float:
        span = self.span(start, end, step)
        return span.last - span.first

    def span(self, start: float | None = None, end: float | None = None, step: float | None = None) -> Span:
        from fleetscope.times import parse_time

        first = parse_time(DEFAULT_START) if start is None else start
        last = parse_time(DEFAULT_END) if end is None else end
        return Span.of(first, last, step or DEFAULT_STEP)

    def for_chunks(self, tmpdir: Callable[[], Path], progress: Progress | None = None) -> PrometheusSource:
        return self  # each chunk is its own range queries

    def load(
        self,
        start: float | None = None,
        end: float | None = None,
        step: float | None = None,
        progress: Progress | None = None,
    ) -> Frames:
        first, last, step = self.span(start, end, step)
        if self.sliding:
            return fold_aliases(self._sliding(step).load(first, last, progress, matcher=self.matcher))
        from fleetscope.window.prometheus import load_prometheus

        return load_prometheus(
            self.access, first, last, step, self.metrics, progress=progress, matcher=self.matcher
        )

    def history_changes(self) -> int:
        """Samples of the oldest re-fetched grid time that differ from what the sliding window held
        (its last load): history changed at the edge of the re-fetch margin, so it may have changed
        behind it too. 0 when nothing changed, or when the source does not slide."""
        window = self._held.window
        return window.edge_changes if window is not None else 0

    @property
    def window(self) -> SlidingWindow | None:
        """The sliding window's grid tables (None: not sliding, or not loaded yet)."""
        return self._held.window

    def _sliding(self, step: float) -> SlidingWindow:
        """This source's sliding window at ``step`` (a new one when the step changed)."""
        from fleetscope.window.sliding import DEFAULT_REFETCH_S, SlidingWindow

        held = self._held
        if held.window is None or held.window.step != step:
            held.window = SlidingWindow(
                self.access,
                float(step),
                self.metrics,
                refetch_s=DEFAULT_REFETCH_S if self.refetch_s is None else self.refetch_s,
            )
        return held.window


def open_source(
    input: str | Path | None,
    prometheus: PrometheusAccess | None = None,
    metrics: Collection[str] | None = None,
) -> Source:
    """The one door to a source: ``--input FILE`` (an archive by its magic bytes, else a recording)
    or ``--prometheus URL`` (its access options); ``metrics``: the families read (None: all of a
    file's)."""
    if input:
        return ArchiveSource(input, metrics) if is_parquet(input) else RecordingSource(input, metrics)
    if prometheus is not None:
        if metrics is None:
            raise FleetscopeError("a Prometheus source needs the metric names to query")
        return PrometheusSource(prometheus, metrics)
    raise FleetscopeError("give --input FILE or --prometheus URL")
