"""A window of one :class:`~fleetscope.window.sources.Source` analyzed: in one piece or streamed.

``fleetscope analyze``, ``plan``, ``evaluate``, the demo and the tests come here. The window is one
chunk of the streamed path (:func:`~fleetscope.analyzers.stream.analyze_chunked`) when ``--chunk``
says one piece, and chunks of the one-shot grid otherwise:

* ``--prometheus``: each chunk is its own range queries over the chunk and its lead-in.
* ``--input`` of a Parquet archive (``fleetscope record``): each chunk reads only the archive's
  rows of its time span.
* ``--input`` of an OpenMetrics recording: a recording is one text whose families each span the
  whole window, so it cannot be read a time span at a time; it is first parsed once and spooled to
  the temporary directory (``$TMPDIR``; family by family, :mod:`fleetscope.window.archive.spool`:
  plain arrays, about 0.75 MB per node-hour of 8 GPUs at 15 s), then streamed from it. With
  ``--chunk auto`` this happens when the recording is longer than two hours, which its first
  family tells (:meth:`~fleetscope.window.sources.RecordingSource.first_family_seconds`).

The grid is the one the one-shot analysis would use: the same step and the same phase (for a
recording, placed between the nodes' scrape phases from the first samples), so the findings are
the same (:mod:`fleetscope.analyzers.stream`). Chunks that hold no data at all are skipped and
said so once; only a window without any data is an error.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable
from pathlib import Path

from fleetscope.analyzers.config import DetectorConfig
from fleetscope.analyzers.report import Report
from fleetscope.analyzers.stream import (
    DEFAULT_LEAD_S,
    Progress,
    analyze_chunked,
    analyze_one_chunk,
    chunk_seconds,
)
from fleetscope.errors import NoData
from fleetscope.window.frames import Frames
from fleetscope.window.sources import Source

#: A progress bar for a label ("converting", "analyzing").
Bars = Callable[[str], Progress | None]


def analyze_source(
    source: Source,
    config: DetectorConfig | None = None,
    bars: Bars | None = None,
    *,
    start: float | None = None,
    end: float | None = None,
    step: float | None = None,
    chunk: str = "auto",
    prefetch: bool | None = None,
) -> Report:
    """The report of ``[start, end]`` (None: the source's own bounds) of ``source`` at ``step``,
    in chunks as ``chunk`` (``--chunk``: a duration, ``auto`` or ``off``) says (module docstring);
    ``bars``: a progress bar per stage (None: none)."""
    bars = bars or _no_bars
    # The window's length from what is cheap to know (an archive's footer, a recording's first
    # family), before any probe; only ``auto`` asks.
    chunk_s = chunk_seconds(chunk, source.seconds(start, end, step) if chunk == "auto" else None)
    if chunk_s is None:  # the window as the streamed path's one chunk: loaded whole, analyzed once
        return analyze_one_chunk(source.load(start, end, step, bars(source.load_label)), config)
    with contextlib.ExitStack() as stack:

        def tmpdir() -> Path:  # made only for a source that converts (a recording)
            return Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fleetscope-stream-")))

        chunked = source.for_chunks(tmpdir, bars("converting"))
        return _streamed(chunked, config, bars, start, end, step, chunk_s, prefetch)


def _no_bars(label: str) -> Progress | None:
    return None


def _streamed(
    source: Source,
    config: DetectorConfig | None,
    bars: Bars,
    start: float | None,
    end: float | None,
    step: float | None,
    chunk_s: float,
    prefetch: bool | None,
) -> Report:
    span = source.span(start, end, step)
    assert span is not None  # a source for chunks knows its span (Source.for_chunks)

    def load(a: float, b: float) -> Frames:
        return source.load(a, b, span.step)

    try:
        return analyze_chunked(
            load,
            span.first,
            span.last,
            span.step,
            config,
            chunk_s=chunk_s,
            lead_s=DEFAULT_LEAD_S,
            progress=bars("analyzing"),
            prefetch=prefetch,
        )
    except NoData as exc:  # every chunk empty: said of the source
        raise NoData(f"{source.name} has {exc}") from None
