"""What a collector is, and what it is given.

A collector builds fresh metric families on every scrape (client_python's custom-collector
pattern), reads its inputs below the roots in :class:`NodeContext` (node_exporter's
``--path.sysfs`` / ``--path.procfs`` idea, so a fixture tree is just another root), and labels every
series with the node label. It may raise: the exporter then reports
``fleetscope_collector_success{collector} 0`` and serves the other collectors' series. Inputs it
skips (an unreadable file, a malformed line) go through :meth:`Collector.skip`, which logs once per
distinct problem and counts it in ``fleetscope_collector_errors_total{collector, reason}``.
"""

from __future__ import annotations

import argparse
import logging
import threading
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, overload

from prometheus_client.metrics_core import Metric as MetricFamily

from fleetscope import contract


class CollectorFailed(RuntimeError):
    """Raised by :meth:`Collector.collect` when it fails but still has series to serve (its own
    health, say): the scrape reports ``success 0`` with this message and serves ``families``."""

    def __init__(self, message: str, families: list[MetricFamily]) -> None:
        super().__init__(message)
        self.families = families


@dataclass(frozen=True)
class NodeContext:
    """Where a collector reads from and how it names the node."""

    sysfs: Path = Path("/sys")
    procfs: Path = Path("/proc")
    debugfs: Path = Path("/sys/kernel/debug")
    node_label: str = contract.NODE_LABEL
    node_name: str = ""
    #: The parsed command line, for collector-specific flags (see :meth:`Collector.add_arguments`).
    options: argparse.Namespace = field(default_factory=argparse.Namespace)

    def option(self, name: str, default: object = None) -> object:
        return getattr(self.options, name, default)

    def option_str(self, name: str, default: str | None = None) -> str | None:
        """A flag as text; ``default`` when it is not set."""
        value = self.option(name)
        return default if value is None else str(value)

    def option_int(self, name: str, default: int) -> int:
        """A flag as an integer; ``default`` when it is not set."""
        value = self.option(name)
        return default if value is None else int(_scalar(name, value))

    @overload
    def option_float(self, name: str, default: float) -> float: ...
    @overload
    def option_float(self, name: str, default: None = None) -> float | None: ...
    def option_float(self, name: str, default: float | None = None) -> float | None:
        """A flag as a float; ``default`` when it is not set."""
        value = self.option(name)
        return default if value is None else float(_scalar(name, value))


def _scalar(name: str, value: object) -> str | int | float:
    # argparse gives str, or int/float with type=; anything else is a caller's bug.
    if isinstance(value, str | int | float):
        return value
    raise TypeError(f"option {name}: expected a number, got {type(value).__name__}")


class Collector(ABC):
    """One source of series. Subclasses set ``name`` and implement :meth:`collect`."""

    #: A class attribute in every collector (the stub for a collector that failed sets it per instance).
    name: str
    #: One line for ``--help``.
    description: ClassVar[str] = ""
    #: Series one scrape may yield; beyond it samples are dropped and counted (``series_limit``).
    max_series: ClassVar[int] = 20_000

    def __init__(self, ctx: NodeContext) -> None:
        self.ctx = ctx
        self.log = logging.getLogger(f"fleetscope.exporters.{self.name}")
        self._errors: Counter[str] = Counter()
        self._errors_lock = threading.Lock()
        self._logged: set[str] = set()

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        """Add this collector's own flags (``--collector.<name>.<option>``)."""

    @abstractmethod
    def collect(self) -> Iterable[MetricFamily]:
        """Yield fresh metric families for this scrape."""

    def close(self) -> None:
        """Release what the collector holds (threads, handles). Called once at shutdown."""

    def deadline(self, default: float) -> float:
        """Seconds a scrape waits for this collector; ``default`` is ``--collector.timeout``."""
        return default

    def skip(self, reason: str, detail: str, count: int = 1) -> None:
        """Count ``count`` inputs that were skipped, and log it the first time this detail is seen."""
        with self._errors_lock:
            self._errors[reason] += count
            # Log each distinct problem once; past 1000 of them, stop logging new ones (still counted).
            first = detail not in self._logged and len(self._logged) < 1000
            if first:
                self._logged.add(detail)
        if first:
            self.log.warning("skipped (%s): %s", reason, detail)

    def error_counts(self) -> dict[str, int]:
        with self._errors_lock:
            return dict(self._errors)
