"""A recording or archive analyzed, or loaded, through the one door every caller uses
(:func:`~fleetscope.window.sources.open_source`, then
:func:`~fleetscope.analyzers.analyze_source.analyze_source`): the tests read files as
``fleetscope analyze --input`` does, streamed when the window is long."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from fleetscope.analyzers.analyze_source import analyze_source
from fleetscope.analyzers.config import DetectorConfig
from fleetscope.analyzers.core import LOADED
from fleetscope.analyzers.report import Report
from fleetscope.times import parse_time
from fleetscope.window.frames import Frames
from fleetscope.window.prometheus import PrometheusAccess
from fleetscope.window.sources import open_source


def analyze_file(
    path: str | Path,
    config: DetectorConfig | None = None,
    *,
    step: float | None = None,
    start: float | None = None,
    end: float | None = None,
) -> Report:
    """The report of ``path`` (a recording or a ``fleetscope record`` archive)."""
    return analyze_source(open_source(path, None, LOADED), config, start=start, end=end, step=step)


def load_file(
    path: str | Path,
    metrics: Collection[str] | None = None,
    step: float | None = None,
    start: float | None = None,
    end: float | None = None,
) -> Frames:
    """The frames of ``path`` (``metrics``: the families read, None: all)."""
    return open_source(path, None, metrics).load(start, end, step)


def analyze_prometheus(url: str, start: float | str, end: float | str, step: float = 15.0) -> Report:
    """The report of ``[start, end]`` (RFC 3339 or Unix seconds) of the Prometheus at ``url``."""
    source = open_source(None, PrometheusAccess(url), LOADED)
    return analyze_source(source, start=parse_time(start), end=parse_time(end), step=step)
