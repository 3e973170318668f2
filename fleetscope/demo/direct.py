"""The demo's fallback without Prometheus: scrape the virtual nodes and analyze what was scraped."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections import deque
from pathlib import Path

from fleetscope.analyzers.findings import identity
from fleetscope.demo.watcher import describe_finding, say

#: One scraped sample: series name, its label pairs (sorted), its value.
Sample = tuple[str, tuple[tuple[str, str], ...], float]


def _declared_names(text: str) -> set[str]:
    """The metric names of the exposition's ``# TYPE`` lines."""
    return {
        line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ") and len(line.split()) > 2
    }


def _exposed_name(name: str, declared: set[str]) -> str:
    """The sample's name as the target wrote it.

    prometheus_client's parser renames the samples of a counter without ``_total`` (every DCGM
    counter, e.g. ``DCGM_FI_DEV_POWER_VIOLATION``) to ``..._total``; the analyzers look for the
    name the exporter serves, so the suffix comes off again when the target declared the bare name.
    """
    if name.endswith("_total") and name not in declared and name[: -len("_total")] in declared:
        return name[: -len("_total")]
    return name


class DirectAnalysis:
    """Scrape the virtual nodes into an OpenMetrics recording and run the analyzers over it.

    Only for machines without Prometheus: it keeps the last ``window`` seconds of scrapes in memory
    (tens of MB for four nodes) and there is no web page or alerting in this mode. The recording is
    written by the simulator's own writer, so it is laid out exactly like a simulated one.
    """

    def __init__(self, targets_file: Path, recording: Path, window: float = 900.0) -> None:
        self.targets_file = targets_file
        self.recording = recording
        self.window = window
        self.scrapes: deque[tuple[float, list[Sample]]] = deque()
        self.seen: set[tuple] = set()

    def targets(self) -> list[str]:
        groups = json.loads(self.targets_file.read_text())
        return [t for g in groups for t in g.get("targets", [])]

    def scrape(self) -> None:
        """One scrape of every target (an unreachable one is skipped); drops what left the window."""
        from prometheus_client.parser import text_string_to_metric_families

        now = round(time.time(), 3)
        samples: list[Sample] = []
        for target in self.targets():
            try:
                with urllib.request.urlopen(f"http://{target}/metrics", timeout=3) as resp:
                    text = resp.read().decode()
            except (OSError, urllib.error.URLError):
                continue
            declared = _declared_names(text)
            for family in text_string_to_metric_families(text):
                samples.extend(
                    (_exposed_name(s.name, declared), tuple(sorted(s.labels.items())), s.value)
                    for s in family.samples
                )
        self.scrapes.append((now, samples))
        while self.scrapes and self.scrapes[0][0] < now - self.window:
            self.scrapes.popleft()

    def samples(self) -> dict[str, dict[tuple[tuple[str, str], ...], tuple[list[float], list[float]]]]:
        """The kept scrapes by series name and labels, each series in time order."""
        by_name: dict[str, dict[tuple[tuple[str, str], ...], tuple[list[float], list[float]]]] = {}
        for t, samples in self.scrapes:
            for name, labels, value in samples:
                times, values = by_name.setdefault(name, {}).setdefault(labels, ([], []))
                times.append(t)
                values.append(value)
        return by_name

    def write(self) -> None:
        """Write the recording (through a temporary file, so a reader never sees half of one)."""
        from fleetscope.simulate.record import write_samples

        tmp = self.recording.with_suffix(".tmp")
        write_samples(self.samples(), tmp)
        tmp.replace(self.recording)

    def analyze(self) -> None:
        """Analyze the recording so far and print each finding not printed before."""
        from fleetscope.analyzers.analyze_source import analyze_source
        from fleetscope.analyzers.core import LOADED
        from fleetscope.window.sources import open_source

        self.write()
        analysis = analyze_source(open_source(self.recording, None, LOADED))
        for f in analysis.findings:
            d = f.to_dict()
            if identity(d) not in self.seen:
                self.seen.add(identity(d))
                say(describe_finding(d))
