"""``fleetscope analyze --chunk``: the sources a window can be streamed from, chunk by chunk.

* ``--prometheus``: each chunk is its own range queries over the chunk and its lead-in.
* ``--input`` of a Parquet archive (``fleetscope record``): each chunk reads only the archive's
  rows of its time span.
* ``--input`` of an OpenMetrics recording: a recording is one text whose families each span the
  whole window, so it cannot be read a time span at a time; it is first converted to a Parquet
  archive in the temporary directory (``$TMPDIR``; family by family), then streamed from it.

The grid is the one the one-shot analysis would use: the same step and the same phase (for a
recording, placed between the nodes' scrape phases from the first samples), so the findings are
the same (:mod:`fleetscope.analyzers.stream`).
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path

from fleetscope.analyzers.config import DetectorConfig
from fleetscope.analyzers.core import LOADED
from fleetscope.analyzers.report import Report
from fleetscope.analyzers.samples import PHASE_SAMPLES
from fleetscope.analyzers.stream import DEFAULT_LEAD_S, Progress, analyze_chunked, chunk_seconds
from fleetscope.errors import FleetscopeError
from fleetscope.times import parse_time

#: How many of each series' first samples place the grid's phase: the probe read covers that many
#: steps, and a margin.
PROBE_SAMPLES = PHASE_SAMPLES


#: A progress bar for a label ("converting", "analyzing").
Bars = Callable[[str], Progress]


def streamed_report(args: argparse.Namespace, config: DetectorConfig, bars: Bars, region: str | None,
                    headers: dict[str, str]) -> Report | None:  # fmt: skip
    """The report of a streamed analysis, or None when ``--chunk`` says one piece (the caller's).

    ``region``/``headers``: the Prometheus access (SigV4 region, extra headers) of ``--prometheus``.
    """
    progress = bars("analyzing")
    if args.prometheus:
        return _from_prometheus(args, config, progress, region, headers)
    if args.input:
        from fleetscope.analyzers.load_parquet import is_parquet

        if is_parquet(args.input):
            return _from_archive(Path(args.input), args, config, progress)
        if args.chunk in ("auto", "off"):  # a recording's window is known only once it is read
            return None
        chunk = chunk_seconds(args.chunk, None)
        with tempfile.TemporaryDirectory(prefix="fleetscope-stream-") as tmp:
            archive = Path(tmp) / "window.parquet"
            _convert(Path(args.input), archive, bars("converting"))
            return _from_archive(archive, args, config, progress, chunk)
    return None


def _from_prometheus(args: argparse.Namespace, config: DetectorConfig, progress: Progress, region: str | None,
                     headers: dict[str, str]) -> Report | None:  # fmt: skip
    from fleetscope.analyzers.load_prometheus import load_prometheus

    start, end = parse_time(args.start or "-1h"), parse_time(args.end or "now")
    step = args.step or 15.0
    chunk = chunk_seconds(args.chunk, end - start)
    if chunk is None:
        return None

    def load(a: float, b: float):
        return load_prometheus(args.prometheus, a, b, step, LOADED, timeout=args.timeout, sigv4_region=region,
                               headers=headers, max_answer_bytes=args.max_answer_bytes)  # fmt: skip

    return analyze_chunked(load, start, end, step, config, chunk_s=chunk, lead_s=DEFAULT_LEAD_S,
                           progress=progress, prefetch=args.prefetch)  # fmt: skip


def _from_archive(path: Path, args: argparse.Namespace, config: DetectorConfig, progress: Progress,
                  chunk: float | None = None) -> Report | None:  # fmt: skip
    from fleetscope.analyzers.load_parquet import archive_span, load_parquet

    first, last, span_step = archive_span(path)
    start = parse_time(args.start) if args.start else None
    end = parse_time(args.end) if args.end else last
    if chunk is None:
        chunk = chunk_seconds(args.chunk, end - (first if start is None else start))
        if chunk is None:
            return None
    # The one-shot grid: its step and phase from the archive's first samples (or the --start asked for).
    probe_end = min(end, (first if start is None else start) + (PROBE_SAMPLES + 2) * (args.step or span_step))
    probe = load_parquet(path, LOADED, step=args.step, start=start, end=probe_end)
    grid_start, step = float(probe.times[0]), probe.step
    del probe
    if end < grid_start:
        raise FleetscopeError("the window ends before it starts")

    def load(a: float, b: float):
        return load_parquet(path, LOADED, step=step, start=a, end=b)

    return analyze_chunked(load, grid_start, end, step, config, chunk_s=chunk, lead_s=DEFAULT_LEAD_S,
                           progress=progress, prefetch=args.prefetch)  # fmt: skip


def _convert(recording: Path, archive: Path, progress: Progress) -> None:
    """The recording as a Parquet archive of the series the analyzers read."""
    from fleetscope.archive import convert_recording

    convert_recording(recording, archive, LOADED, progress=progress)
