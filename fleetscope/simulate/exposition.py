"""The one exposition writer of the simulator: series as text, recorded (OpenMetrics) or live.

Recorded (:func:`iter_openmetrics`, :func:`write_openmetrics_file`): what ``promtool tsdb
create-blocks-from openmetrics`` 2.42 accepts: one metric family after the other, each with its
``# TYPE`` and ``# HELP``; inside a family one series after the other, each series' samples in time
order; a timestamp (Unix seconds) on every sample; ``# EOF`` last. Counters whose name ends in
``_total`` are typed ``counter`` (the family name without the suffix); DCGM counters have no
``_total`` and are typed ``unknown``, as docs/design.md#recorded-series says.

Live (:func:`text_family`): the Prometheus text format a node's ``/metrics`` serves, without
timestamps, every counter typed ``counter`` under its own name, empty labels left out.

Both take the same shape: a metric name and its series, each series its label pairs and values.
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from fleetscope import contract as c
from fleetscope.textformat import escape_label_value, format_number

#: Label pairs of one series, in the metric's label order.
LabelPairs = Iterable[tuple[str, str]]
#: One recorded series: its label pairs, sample timestamps and values (same length, time order).
RecordedSeries = tuple[LabelPairs, np.ndarray, np.ndarray]
#: Samples gathered elsewhere (the demo scrapes them): series name -> the series' label pairs ->
#: (timestamps, values), the timestamps in increasing order.
Samples = Mapping[str, Mapping[tuple[tuple[str, str], ...], tuple[Sequence[float], Sequence[float]]]]


def _labels_text(labels: LabelPairs) -> str:
    return ",".join(f'{k}="{escape_label_value(x)}"' for k, x in labels)


def _fmt_all(x: np.ndarray) -> list[str]:
    """Sample values or timestamps as text: integers without a decimal point, others exactly."""
    if x.size and np.all(np.abs(x) < 1e15) and np.array_equal(x, np.floor(x)):
        return list(map(str, x.astype(np.int64).tolist()))
    return [format_number(v) for v in x.tolist()]


def _openmetrics_family(name: str) -> tuple[str, str]:
    """(family name, OpenMetrics type) of a series name."""
    meta = c.METRICS.get(name)
    if meta is not None and meta.type == "counter":
        if name.endswith("_total"):
            return name[: -len("_total")], "counter"
        return name, "unknown"
    return name, "gauge"


def _openmetrics_header(name: str) -> str:
    """The ``# TYPE`` (and, for a contract metric, ``# HELP``) lines opening the family of ``name``."""
    family, typ = _openmetrics_family(name)
    meta = c.METRICS.get(name)
    head = f"# TYPE {family} {typ}\n"
    if meta is not None:
        head += f"# HELP {family} {escape_label_value(meta.help)}\n"
    return head


def _recorded_series_text(name: str, labels: LabelPairs, t: np.ndarray, v: np.ndarray) -> str:
    """Every sample of one series, one line each, with its timestamp."""
    head = name + "{" + _labels_text(labels) + "} "
    return "".join(f"{head}{a} {b}\n" for a, b in zip(_fmt_all(v), _fmt_all(t), strict=True))


def iter_openmetrics(families: Iterable[tuple[str, Iterable[RecordedSeries]]]) -> Iterator[str]:
    """The recorded OpenMetrics text of ``(metric name, its series)``, chunk by chunk; a metric
    without series is left out."""
    for name, series in families:
        opened = False
        for labels, t, v in series:
            if not opened:
                yield _openmetrics_header(name)
                opened = True
            yield _recorded_series_text(name, labels, t, v)
    yield "# EOF\n"


def samples_families(samples: Samples) -> Iterator[tuple[str, Iterator[RecordedSeries]]]:
    """``samples`` as :func:`iter_openmetrics` reads them."""
    for name, series in samples.items():
        yield (
            name,
            (
                (labels, np.asarray(t, dtype=float), np.asarray(v, dtype=float))
                for labels, (t, v) in series.items()
            ),
        )


def write_openmetrics_file(chunks: Iterable[str], path: str | Path) -> None:
    """Write text chunks; gzip when the name ends in ``.gz``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = gzip.open(path, "wb", compresslevel=3) if path.suffix == ".gz" else path.open("wb")  # noqa: SIM115
    with raw, io.TextIOWrapper(raw, encoding="utf-8", newline="\n") as out:
        for chunk in chunks:
            out.write(chunk)


def text_family(name: str, rows: Sequence[tuple[LabelPairs, float]]) -> str:
    """One metric of a live ``/metrics`` page: ``# HELP``, ``# TYPE`` and one line per series."""
    if not rows:
        return ""
    meta = c.METRICS.get(name)
    out = []
    if meta is not None:
        out.append(f"# HELP {name} {meta.help}\n")
    out.append(f"# TYPE {name} {meta.type if meta is not None else 'gauge'}\n")
    for labels, v in rows:
        kept = _labels_text((k, x) for k, x in labels if x != "")
        out.append(f"{name}{{{kept}}} {format_number(float(v))}\n")
    return "".join(out)
