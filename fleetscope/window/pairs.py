"""The ``value timestamp`` lines of a recording's sample runs as floats, in bulk, on a second core.

The recording reader (:mod:`fleetscope.window.openmetrics`) strips each run of a series' lines of
its ``<name>{labels} `` prefix and hands the rest of a chunk's runs here as one text. Every
conversion is correctly rounded, so a value is bit-identical to ``float(b"...")``, the
line-by-line parser's; a text that is not exactly ``n`` lines of two numbers gives None, and the
reader then goes line by line.

Three converters, by size and by what is installed:

* up to :data:`SMALL_PAIRS` lines, :func:`numbers` (numpy's conversion, the line-by-line parser's
  own): a reader call costs a quarter of a millisecond, and every chunk's first line (the one the
  chunk before cut) is a call of its own;
* more, with pyarrow (the analyze extra), Arrow's CSV reader: it parses with fast_float
  (correctly rounded), fails on a row without exactly two fields, and lets go of the GIL for the
  whole parse, so a worker thread (:func:`parse_soon`) runs it beside the reader's own thread
  (the 0.4 s that pandas' reader took per 64-node hour leave that thread; docs/benchmarks.md);
* more, without pyarrow, pandas' C reader (``round_trip`` before pandas 3), on the reader's thread:
  it holds the GIL, so a second thread would gain nothing.
"""

from __future__ import annotations

import csv
import io
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Literal

import numpy as np
import pandas as pd

#: Up to this many lines, the pairs are converted as the line-by-line parser converts a series'
#: text (:func:`numbers`).
SMALL_PAIRS = 16

#: pandas before 3 needs ``round_trip`` for Python's correctly rounded parsing; pandas 3 deprecates the
#: option, and its default gave the same bits as ``float()`` on 200,000 random decimals.
_ROUND_TRIP: Literal["round_trip"] | None = "round_trip" if int(pd.__version__.split(".")[0]) < 3 else None

#: A run's values and its timestamps.
Pairs = tuple[np.ndarray, np.ndarray]


def numbers(tokens: list[bytes] | list[list[bytes]]) -> np.ndarray:
    """The line-by-line parser's conversion of sample texts to floats (ValueError: not numbers)."""
    return np.array(tokens, dtype=np.bytes_).astype(float)


def _small(text: bytes, n: int) -> Pairs | None:
    rows = text.split(b"\n")
    if rows and not rows[-1]:
        rows.pop()
    pairs = [row.split(b" ") for row in rows]
    if len(pairs) != n or any(len(pair) != 2 for pair in pairs):
        return None
    try:
        table = numbers(pairs)
    except ValueError:
        return None
    return table[:, 0], table[:, 1]


def _by_pandas(text: bytes, n: int) -> Pairs | None:
    # pandas fills a row's missing fields with NaN: one space a line, counted first, rules that out.
    if text.count(b" ") != n:
        return None
    try:
        table = pd.read_csv(
            io.BytesIO(text),
            sep=" ",
            header=None,
            dtype=float,
            engine="c",
            quoting=csv.QUOTE_NONE,
            keep_default_na=False,
            na_values=["NaN"],
            skip_blank_lines=True,
            float_precision=_ROUND_TRIP,
        ).to_numpy()
    except (ValueError, pd.errors.ParserError, pd.errors.EmptyDataError):
        return None
    if table.shape != (n, 2):
        return None
    return table[:, 0], table[:, 1]


class _Arrow:
    """Arrow's CSV reader set for ``value timestamp`` lines: one space between the two fields, no
    quotes or escapes, no empty lines, no missing values (``NaN`` is a float), both float64."""

    def __init__(self) -> None:
        import pyarrow as pa
        import pyarrow.csv as pa_csv

        self.pa, self.csv = pa, pa_csv
        self.parse_options = pa_csv.ParseOptions(
            delimiter=" ",
            quote_char=False,
            double_quote=False,
            escape_char=False,
            newlines_in_values=False,
            ignore_empty_lines=False,
        )
        # Timestamps are integers (seconds or milliseconds) in every recorder's output, and Arrow
        # reads integers faster; they are read as floats where any is not one.
        self.integer_times, self.float_times = (
            pa_csv.ConvertOptions(
                column_types={"v": pa.float64(), "t": t},
                null_values=[],
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            )
            for t in (pa.int64(), pa.float64())
        )

    def __call__(self, text: bytes, n: int) -> Pairs | None:
        table = self._read(text, self.integer_times)
        if table is None:
            table = self._read(text, self.float_times)
            if table is None or table.num_rows != n:
                return None
            return table.column(0).to_numpy(), table.column(1).to_numpy()
        if table.num_rows != n:
            return None
        times = table.column(1).to_numpy()
        # An integer converts to the double float() gives for its text (both round to nearest
        # even), but for one text: "-0", which float() reads as -0.0.
        if not times.all():
            table = self._read(text, self.float_times)
            if table is None:
                return None
            return table.column(0).to_numpy(), table.column(1).to_numpy()
        return table.column(0).to_numpy(), times.astype(np.float64)

    def _read(self, text: bytes, convert_options: Any) -> Any:
        # One block, so each column is one array (read without a copy); the reader's own threads
        # are left off: this already runs on a thread of its own.
        read_options = self.csv.ReadOptions(
            column_names=["v", "t"], use_threads=False, block_size=max(len(text) + 1, 1 << 20)
        )
        try:
            return self.csv.read_csv(
                self.pa.py_buffer(text),
                read_options=read_options,
                parse_options=self.parse_options,
                convert_options=convert_options,
            )
        except (self.pa.ArrowInvalid, self.pa.ArrowTypeError, ValueError):
            return None


def _arrow() -> _Arrow | None:
    try:
        return _Arrow()
    except ImportError:  # pragma: no cover -- exercised where pyarrow is not installed
        return None


_ARROW = _arrow()


def parse_pairs(text: bytes, n: int) -> Pairs | None:
    """``n`` lines of ``value timestamp`` (each ending in a newline) as (values, timestamps), or
    None if they are not exactly that."""
    if n <= SMALL_PAIRS:
        return _small(text, n)
    if _ARROW is not None:
        return _ARROW(text, n)
    return _by_pandas(text, n)


#: The result of one :func:`parse_pairs` call: made at once, or on the worker's thread.
Parsed = Future[Pairs | None]

_worker: ThreadPoolExecutor | None = None
_worker_lock = threading.Lock()


def _forget_worker() -> None:
    # A forked child has no copy of the worker's thread (its executor would wait for it forever):
    # it makes its own when it needs one.
    global _worker, _worker_lock
    _worker, _worker_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_worker)


def _pairs_worker() -> ThreadPoolExecutor:
    """One thread, shared by every read of the process, that runs :func:`parse_pairs` calls in the
    order they come; its calls are the few microseconds of handing over, the parse runs without the
    GIL."""
    global _worker
    with _worker_lock:
        if _worker is None:
            _worker = ThreadPoolExecutor(1, thread_name_prefix="fleetscope-pairs")
        return _worker


def _parse_or_none(text: bytes, n: int) -> Pairs | None:
    try:
        return parse_pairs(text, n)
    except Exception:  # noqa: BLE001 -- anything unexpected reads as "does not parse"
        return None


def parse_soon(text: bytes, n: int) -> Parsed:
    """:func:`parse_pairs` of ``text``: on the shared worker where that runs beside this thread
    (Arrow's reader, over :data:`SMALL_PAIRS` lines), else now."""
    if n > SMALL_PAIRS and _ARROW is not None:
        return _pairs_worker().submit(_parse_or_none, text, n)
    done: Parsed = Future()
    done.set_result(parse_pairs(text, n))
    return done
