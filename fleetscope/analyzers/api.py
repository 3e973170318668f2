"""The analyzers' public entry points: what the CLI, the live service and the demo call.

Interface agreed between the analyzers and the service.
Everything returned is plain data (dataclasses), so the service needs no pandas types.
"""

from __future__ import annotations

from pathlib import Path

from fleetscope.analyzers.report import JobSummary, NodeVerdict, Report, StragglerScore

#: The old name of :class:`Report` (kept while callers move over).
Analysis = Report
__all__ = ["Analysis", "JobSummary", "NodeVerdict", "Report", "StragglerScore"]


def analyze_prometheus(
    url: str,
    start: float,
    end: float,
    step: float = 15.0,
    config: object | None = None,
    timeout: float = 30.0,
    *,
    sigv4_region: str | None = None,
    headers: dict[str, str] | None = None,
    progress: object | None = None,
) -> Analysis:
    """Load the window from a Prometheus-compatible API and run every detector.

    Raises :class:`fleetscope.errors.FleetscopeError` when Prometheus is down, answers 5xx, or the
    window holds no data. ``sigv4_region`` signs requests for Amazon Managed Prometheus.
    """
    from fleetscope.analyzers.features import METRICS_USED
    from fleetscope.analyzers.load_prometheus import load_prometheus
    from fleetscope.analyzers.pipeline import run_detectors

    frames = load_prometheus(url, start, end, step, METRICS_USED, timeout=timeout, sigv4_region=sigv4_region,
                             headers=headers, progress=progress)  # type: ignore[arg-type]  # fmt: skip
    return run_detectors(frames, config)[0]  # type: ignore[arg-type]


def analyze_file(
    path: str | Path,
    config: object | None = None,
    *,
    step: float | None = None,
    start: float | None = None,
    end: float | None = None,
    progress: object | None = None,
) -> Analysis:
    """Load a recorded OpenMetrics file (gzip allowed) and run every detector."""
    from fleetscope.analyzers.features import METRICS_USED
    from fleetscope.analyzers.load_file import load_file
    from fleetscope.analyzers.pipeline import run_detectors

    frames = load_file(path, METRICS_USED, step=step, start=start, end=end, progress=progress)  # type: ignore[arg-type]
    return run_detectors(frames, config)[0]  # type: ignore[arg-type]
