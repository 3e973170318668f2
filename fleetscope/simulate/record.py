"""Run a spec's model over its window and write it as a recorded OpenMetrics file plus its ground truth.

The model comes from the spec's simulator family (:mod:`fleetscope.simulate.families`), the text
from the one exposition writer (:mod:`fleetscope.simulate.exposition`), the truth from the family.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from fleetscope import strictjson
from fleetscope.simulate.exposition import (
    RecordedSeries,
    Samples,
    iter_openmetrics,
    samples_families,
    write_openmetrics_file,
)
from fleetscope.simulate.families import cluster_model, ground_truth
from fleetscope.simulate.spec import ScenarioSpec

__all__ = [
    "Recording",
    "Samples",
    "ground_truth",
    "simulate",
    "write_openmetrics",
    "write_samples",
    "write_scenario",
]


class Recording:
    """Every sample the model produced, by metric and series."""

    def __init__(self) -> None:
        self.labels: dict[str, tuple[str, ...]] = {}
        self._blocks: dict[str, list[tuple[list, list[float], list[np.ndarray]]]] = {}
        self.times: list[float] = []
        #: The realistic model's true goodput account at the end (job id -> category -> GPU-seconds).
        self.goodput: dict[str, dict[str, float]] | None = None

    def add(self, t: float, series: dict) -> None:
        self.times.append(t)
        for name, s in series.items():
            self.labels.setdefault(name, s.labels)
            blocks = self._blocks.setdefault(name, [])
            if not blocks or blocks[-1][0] is not s.keys:
                blocks.append((s.keys, [], []))
            blocks[-1][1].append(t)
            blocks[-1][2].append(s.values)

    def series_of(self, name: str) -> dict[tuple[str, ...], tuple[np.ndarray, np.ndarray]]:
        """label tuple -> (times, values) of one metric, samples in time order, absent ones dropped."""
        chunks: dict[tuple, list[tuple[np.ndarray, np.ndarray]]] = {}
        for keys, times, rows in self._blocks.get(name, []):
            if not keys:
                continue
            t = np.asarray(times)
            arr = np.vstack(rows)
            for j, key in enumerate(keys):
                chunks.setdefault(key, []).append((t, arr[:, j]))
        out = {}
        for key, parts in chunks.items():
            t = np.concatenate([p[0] for p in parts])
            v = np.concatenate([p[1] for p in parts])
            keep = ~np.isnan(v)
            out[key] = (t[keep], v[keep])
        return out

    def metric_names(self) -> list[str]:
        return list(self._blocks)


def simulate(
    spec: ScenarioSpec, progress: Callable[[float], None] | None = None, scrape_labels: bool = False
) -> Recording:
    """Run the scenario from its start for its duration, one sample per ``step_s``."""
    model = cluster_model(spec, scrape_labels=scrape_labels)
    rec = Recording()
    n = int(spec.duration_s // spec.step_s)
    rec.add(model.t, model.series())
    for i in range(n):
        model.tick(spec.step_s)
        rec.add(model.t, model.series())
        if progress and i % 20 == 0:
            progress((i + 1) / n)
    truth = getattr(model, "goodput_truth", None)
    rec.goodput = truth() if truth is not None else None
    return rec


def recording_families(rec: Recording) -> Iterator[tuple[str, Iterator[RecordedSeries]]]:
    """The recording as the exposition writer reads it: each metric and its series."""
    for name in rec.metric_names():
        labels = rec.labels[name]
        yield name, ((zip(labels, key, strict=True), t, v) for key, (t, v) in rec.series_of(name).items())


def write_openmetrics(rec: Recording, path: str | Path) -> None:
    """Write the recording; gzip when the name ends in ``.gz``."""
    write_openmetrics_file(iter_openmetrics(recording_families(rec)), path)


def write_samples(samples: Samples, path: str | Path) -> None:
    """Write samples gathered outside the model as a recording; gzip when the name ends in ``.gz``."""
    write_openmetrics_file(iter_openmetrics(samples_families(samples)), path)


def write_scenario(
    spec: ScenarioSpec,
    out: str | Path,
    truth: str | Path | None = None,
    progress: Callable[[float], None] | None = None,
) -> tuple[Path, Path]:
    """Simulate ``spec`` into ``out`` (OpenMetrics) and its ground truth into ``truth`` (JSON)."""
    out = Path(out)
    truth = Path(truth) if truth else out.with_name(out.name.split(".")[0] + ".truth.json")
    rec = simulate(spec, progress)
    write_openmetrics(rec, out)
    truth.write_text(strictjson.dumps(ground_truth(spec, rec.goodput), indent=2) + "\n")
    return out, truth
