"""The recording reader's answers compared: the line-by-line parser's read of a whole file (the
reference every faster path must equal), and two reads' equality, series by series."""

from __future__ import annotations

import gzip
from collections.abc import Collection
from pathlib import Path

import numpy as np

from fleetscope.window import openmetrics as om
from fleetscope.window.samples import summarize


def reference_read(path: Path, metrics: Collection[str] | None = None) -> tuple:
    """``read_openmetrics``' answer for ``path``, through the line-by-line parser alone."""
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    reader = om._Reader(path, metrics)
    reader._lines(data, 0, len(data))
    return summarize(om._to_raw(path, reader), str(path))


def assert_same_reads(a: tuple, b: tuple) -> None:
    """Two ``read_openmetrics`` answers alike: span and spacing, metrics in order, each series'
    labels, times and values (NaN where NaN)."""
    assert a[1:] == b[1:]
    assert list(a[0]) == list(b[0])
    for name in a[0]:
        assert [s.labels for s in a[0][name]] == [s.labels for s in b[0][name]], name
        for x, y in zip(a[0][name], b[0][name], strict=True):
            assert np.array_equal(x.times, y.times), name
            assert np.array_equal(x.values, y.values, equal_nan=True), name
