"""Run the model over a window and write it as a recorded OpenMetrics file plus its ground truth.

File layout (what ``promtool tsdb create-blocks-from openmetrics`` 2.42 accepts): one metric family
after the other, each with its ``# TYPE`` and ``# HELP``; inside a family one series after the
other, each series' samples in time order; a timestamp (Unix seconds) on every sample; ``# EOF``
last. Counters whose name ends in ``_total`` are typed ``counter`` (the family name without the
suffix); DCGM counters have no ``_total`` and are typed ``unknown``, as docs/design.md#recorded-series says.
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fleetscope import contract as c
from fleetscope.simulate.families import cluster_model
from fleetscope.simulate.spec import FAIL_STOP, ScenarioSpec, node_name
from fleetscope.textformat import escape_label_value, format_number
from fleetscope.times import rfc3339


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


def _fmt_all(x: np.ndarray) -> list[str]:
    """Sample values or timestamps as text: integers without a decimal point, others exactly."""
    if x.size and np.all(np.abs(x) < 1e15) and np.array_equal(x, np.floor(x)):
        return list(map(str, x.astype(np.int64).tolist()))
    return [format_number(v) for v in x.tolist()]


def _family(name: str) -> tuple[str, str]:
    """(family name, OpenMetrics type) of a series name."""
    meta = c.METRICS.get(name)
    if meta is not None and meta.type == "counter":
        if name.endswith("_total"):
            return name[: -len("_total")], "counter"
        return name, "unknown"
    return name, "gauge"


def _family_header(name: str) -> str:
    """The ``# TYPE`` (and, for a contract metric, ``# HELP``) lines opening the family of ``name``."""
    family, typ = _family(name)
    meta = c.METRICS.get(name)
    head = f"# TYPE {family} {typ}\n"
    if meta is not None:
        head += f"# HELP {family} {escape_label_value(meta.help)}\n"
    return head


def _series_text(name: str, labels: Iterable[tuple[str, str]], t: np.ndarray, v: np.ndarray) -> str:
    """Every sample of one series, one line each, with its timestamp."""
    head = name + "{" + ",".join(f'{k}="{escape_label_value(x)}"' for k, x in labels) + "} "
    return "".join(f"{head}{a} {b}\n" for a, b in zip(_fmt_all(v), _fmt_all(t), strict=True))


def iter_openmetrics(rec: Recording) -> Iterator[str]:
    for name in rec.metric_names():
        series = rec.series_of(name)
        if not series:
            continue
        yield _family_header(name)
        labels = rec.labels[name]
        for key, (t, v) in series.items():
            yield _series_text(name, zip(labels, key, strict=True), t, v)
    yield "# EOF\n"


#: Samples gathered elsewhere (the demo scrapes them): series name -> the series' label pairs ->
#: (timestamps, values), the timestamps in increasing order.
Samples = Mapping[str, Mapping[tuple[tuple[str, str], ...], tuple[Sequence[float], Sequence[float]]]]


def _iter_samples(samples: Samples) -> Iterator[str]:
    """``samples`` in the recording's layout (the same types, help texts and number formats)."""
    for name, series in samples.items():
        if not series:
            continue
        yield _family_header(name)
        for labels, (t, v) in series.items():
            yield _series_text(name, labels, np.asarray(t, dtype=float), np.asarray(v, dtype=float))
    yield "# EOF\n"


def _write(chunks: Iterable[str], path: str | Path) -> None:
    """Write text chunks; gzip when the name ends in ``.gz``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = gzip.open(path, "wb", compresslevel=3) if path.suffix == ".gz" else path.open("wb")  # noqa: SIM115
    with raw, io.TextIOWrapper(raw, encoding="utf-8", newline="\n") as out:
        for chunk in chunks:
            out.write(chunk)


def write_openmetrics(rec: Recording, path: str | Path) -> None:
    """Write the recording; gzip when the name ends in ``.gz``."""
    _write(iter_openmetrics(rec), path)


def write_samples(samples: Samples, path: str | Path) -> None:
    """Write samples gathered outside the model as a recording; gzip when the name ends in ``.gz``."""
    _write(_iter_samples(samples), path)


#: Which findings each fault must produce (kind, cause) for the evaluation.
EXPECTED: dict[str, list[tuple[str, str]]] = {
    "thermal_throttle": [("straggler", "thermal_throttle"), ("mfu_drop", "straggler")],
    "power_brake": [("straggler", "power_brake"), ("mfu_drop", "straggler")],
    "gpu_lost": [("failing_node", "gpu_lost"), ("mfu_drop", "failing_node")],
    "ecc_uncorrectable": [("failing_node", "ecc_uncorrectable"), ("mfu_drop", "failing_node")],
    "row_remap_failure": [("failing_node", "row_remap_failure"), ("mfu_drop", "failing_node")],
    "efa_degraded": [("straggler", "network"), ("mfu_drop", "network")],
    "pcie_width_drop": [("failing_node", "pcie_width_drop")],
    "data_stall": [("mfu_drop", "data_loading")],
}


def ground_truth(spec: ScenarioSpec, goodput: dict[str, dict[str, float]] | None = None) -> dict[str, Any]:
    """The faults injected, where and when, and the findings they should produce.

    ``goodput``: the simulated true account (:attr:`Recording.goodput`), written as the truth's
    ``goodput`` block (realistic specs only).
    """
    if spec.realistic:
        from fleetscope.simulate.truth import goodput_block, realistic_truth

        truth = realistic_truth(spec)
        if goodput is not None:
            truth["goodput"] = goodput_block(goodput)
        return truth
    end_window = spec.start + (spec.duration_s // spec.step_s) * spec.step_s
    faults = []
    for f in spec.faults:
        onset = spec.start + f.at_s
        end = None if f.duration_s is None else min(onset + f.duration_s, end_window)
        node = node_name(f.node)
        per_gpu = f.kind not in ("efa_degraded", "data_stall")
        expected = []
        for kind, cause in EXPECTED[f.kind]:
            if kind == "mfu_drop" and not spec.training_telemetry:
                continue  # no FLOPs or tokens without the training library
            e: dict[str, Any] = {"kind": kind, "cause": cause}
            if kind == "mfu_drop" and f.kind in FAIL_STOP:
                # MFU drops measure throughput lost while training; a fail-stop fault stops the
                # job (its hang and failing node are their own findings) and a job that restarts
                # without the node trains at its old MFU: a drop may or may not show.
                e["optional"] = True
            if kind == "mfu_drop" and f.kind in ("thermal_throttle", "power_brake") and f.slowdown < 0.25:
                # One GPU s slower costs the job less than s (the healthy GPUs' own spread already sets
                # the pace a few percent above nominal): below 25% a job-level drop may or may not show.
                e["optional"] = True
            if kind != "mfu_drop":
                e["node"] = node
                e["gpu"] = str(f.gpu) if per_gpu else None
            expected.append(e)
        faults.append({
            "kind": f.kind,
            "node": node,
            "gpu": str(f.gpu) if per_gpu else None,
            "rank": f.node * spec.gpus_per_node + f.gpu if per_gpu else None,
            "device": f"rdmap{79 + 16 * f.device}s0" if f.kind == "efa_degraded" else None,
            "onset": rfc3339(onset),
            "end": rfc3339(end),
            "fail_stop": f.kind in ("gpu_lost", "ecc_uncorrectable", "row_remap_failure", "pcie_width_drop"),
            "slowdown": f.slowdown if f.kind in ("thermal_throttle", "power_brake", "efa_degraded", "data_stall") else None,
            "expected": expected,
        })  # fmt: skip
    return {
        "scenario": spec.name,
        "family": spec.family,
        "window": {"start": rfc3339(spec.start), "end": rfc3339(end_window)},
        "spec": spec.to_dict(),
        "faults": faults,
    }


def write_scenario(spec: ScenarioSpec, out: str | Path, truth: str | Path | None = None,
                   progress: Callable[[float], None] | None = None) -> tuple[Path, Path]:  # fmt: skip
    """Simulate ``spec`` into ``out`` (OpenMetrics) and its ground truth into ``truth`` (JSON)."""
    out = Path(out)
    truth = Path(truth) if truth else out.with_name(out.name.split(".")[0] + ".truth.json")
    rec = simulate(spec, progress)
    write_openmetrics(rec, out)
    truth.write_text(json.dumps(ground_truth(spec, rec.goodput), indent=2) + "\n")
    return out, truth
