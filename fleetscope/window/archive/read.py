"""Load a Parquet archive written by ``fleetscope record`` (:mod:`fleetscope.window.archive.write`) into
frames.

Only the row groups of the metrics asked for are read (each row group holds one metric), and, given
``start``/``end``, of a format-2 archive only those whose [t0, t1] meets [start - margin, end]
(the margin: what the grid rule looks back, :data:`~fleetscope.window.archive.write.LOOKBACK_MARGIN_S` at
least), and of their rows only those in that range: a chunk's read costs what the chunk holds, and
gives the grid values a read of the whole archive gives on those grid times
(:func:`~fleetscope.window.frames.slice_frames`). Format 2 keeps each row's series number, so
its rows are put back together series by series (a stable sort, in time order), in the order the
source gave them; format 1 holds a metric's series one after another, so a series ends where any
label column changes. Either way each series becomes one
:class:`~fleetscope.window.frames.RawSeries`, in the source's order, and from there the
archive goes through exactly what a recording goes through (:func:`samples.summarize` and
:func:`samples.frames_from_raw`): the same samples give the same grid and the same findings. An
export from Prometheus holds grid values already; it is put back on its own grid without a second
lookback, as :func:`~fleetscope.window.prometheus.load_prometheus` does.

The grid's size is checked (:func:`~fleetscope.window.frames.check_grid`) from the archive's
metadata before any sample is read, so a window too large for the machine is one clear error naming
the flags that make it fit, not an exhausted machine.
"""

from __future__ import annotations

import functools
import json
import logging
import os
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from fleetscope.errors import FleetscopeError, NoData
from fleetscope.window.archive.format import (
    EXTRA_COL,
    FORMAT_VERSION,
    LOOKBACK_MARGIN_S,
    MAX_READ_ROWS,
    MAX_READ_SERIES,
    MAX_STAMP_S,
    META_KEY,
    NAME_COL,
    SERIES_COL,
    TIME_COL,
    VALUE_COL,
    plausible_span,
    pyarrow_modules,
)
from fleetscope.window.frames import (
    PLAUSIBLE_MARGIN_S,
    Frames,
    MetricFrame,
    RawSeries,
    build_frames,
    check_grid,
    check_window,
    grid_rows,
    lookback_seconds,
    make_grid,
    rows_in_order,
)
from fleetscope.window.grid import round_step
from fleetscope.window.samples import (
    PHASE_SAMPLES,
    PHASE_SERIES,
    SpacingSample,
    frames_from_raw,
    grid_window,
    summarize,
)

log = logging.getLogger(__name__)


@dataclass
class ReadStats:
    """What one read took from the archive (a caller passes one in to see it)."""

    row_groups: int = 0  #: row groups read
    row_groups_total: int = 0  #: row groups of the metrics asked for
    rows: int = 0  #: rows read (before the rows outside the slice were dropped)


class ArchiveSpan(NamedTuple):
    """What a chunked analysis plans from: the first and last sample time and the grid step (an
    export from Prometheus: its grid's start, end and step, so ``first + k * step`` are its grid
    times)."""

    first: float
    last: float
    step: float


def _one_line(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn(path, ...)`` with anything a malformed archive can raise past the checks below (a
    footer of the wrong shape, a column of another type, a truncated page) turned into one
    :class:`FleetscopeError` naming the file, never a traceback."""

    @functools.wraps(fn)
    def guarded(path: str | Path, *args: Any, **kwargs: Any) -> Any:
        pa, _ = pyarrow_modules()
        try:
            return fn(path, *args, **kwargs)
        except FleetscopeError:
            raise
        except (
            KeyError,
            IndexError,
            TypeError,
            ValueError,
            ArithmeticError,
            AttributeError,
            UnicodeError,
            pa.ArrowException,
        ) as exc:
            raise FleetscopeError(
                f"{path} is not a readable fleetscope archive ({type(exc).__name__}: {str(exc)[:120]})"
            ) from None

    return guarded


@_one_line
def recorded_grid_start(path: str | Path, step: float | None) -> float | None:
    """The first grid time a one-shot load of the recording this archive was converted from
    places (its phase between the nodes' scrapes, from every metric's first samples: the writer
    keeps it), at ``step`` (None: the recording's own); None when unknown, or at another step."""
    _pf, meta = _open(Path(path))
    return grid_start_of_meta(meta, step)


def grid_start_of_meta(meta: dict[str, Any], step: float | None) -> float | None:
    """:func:`recorded_grid_start` from the archive's metadata."""
    recorded = meta.get("grid_start")
    if not recorded or (step is not None and abs(step - float(recorded["step"])) > 1e-9):
        return None
    span = meta.get("span")
    start = float(recorded["start"])
    if isinstance(span, list) and len(span) == 2 and not float(span[0]) - 1e-3 <= start <= float(span[1]):
        return None  # stray stamps before the bulk: the loader drops them and places its own grid
    return start


@_one_line
def archive_span(path: str | Path) -> ArchiveSpan:
    """The archive's span and step from its footer alone (no data page is read).

    Format 2 keeps the span in its metadata (stray stamps far from the bulk left out, at row-group
    resolution); format 1 from the row groups' statistics. The step is the export's grid step, or
    the typical sample spacing rounded as the loader rounds it (:func:`~fleetscope.window.grid.round_step`).
    """
    pf, meta = _open(Path(path))
    groups = range(pf.metadata.num_row_groups)
    # What the data holds, from the row groups' own statistics: the footer's grid or span is checked
    # against it before any work is sized by it (a span of [0, 1.9e9] at 1 s ran for minutes).
    first, last = _stats_span(pf, groups)
    if not np.isfinite(first):
        raise FleetscopeError(f"{path}: the archive's row groups have no time statistics")
    return span_of_meta(path, meta, first, last, lambda: _stats_span(pf, groups, plausible=True))


def span_of_meta(
    path: str | Path,
    meta: dict[str, Any],
    first: float,
    last: float,
    plausible: Callable[[], tuple[float, float]],
) -> ArchiveSpan:
    """:func:`archive_span` from the metadata and the data's ``first`` and ``last`` time
    (``plausible()``: the span with stray stamps left out, where the metadata's does not do)."""
    grid = meta.get("grid")
    if grid:
        step = float(grid["step"])
        start, end = _grid_within_data(path, float(grid["start"]), float(grid["end"]), step, first, last)
        return ArchiveSpan(start, end, step)
    step = round_step(float(meta.get("spacing") or 15.0))
    span = meta.get("span")
    if isinstance(span, list) and len(span) == 2:
        a, b = float(span[0]), float(span[1])
        if first - 1e-3 <= a and b <= last + 1e-3:  # the bulk's span lies within the data
            return ArchiveSpan(a, b, step)
        _warn_once(
            "%s: the archive's span (%s to %s) is not within its data (%s to %s); using the data's",
            path, _when(a), _when(b), _when(first), _when(last),
        )  # fmt: skip
    lo, hi = plausible()
    return ArchiveSpan(lo, hi, step)


def _grid_within_data(
    path: str | Path, start: float, end: float, step: float, first: float, last: float
) -> tuple[float, float]:
    """The export's grid cut, on its own grid times, to where its data is (a grid may begin before
    its first sample, a series that appeared later, but not by more than PLAUSIBLE_MARGIN_S); one
    line naming both when the grid does not reach the data at all."""
    if end < first - step or start > last + step:
        raise FleetscopeError(
            f"{path}: the archive's grid ({_when(start)} to {_when(end)}) does not cover its data "
            f"({_when(first)} to {_when(last)}): the footer is not this archive's"
        )
    cut_start = start < first - PLAUSIBLE_MARGIN_S
    cut_end = end > last + PLAUSIBLE_MARGIN_S
    if cut_start:
        start += np.floor((first - start) / step) * step
    if cut_end:
        end = start + np.ceil((last - start) / step) * step
    if cut_start or cut_end:
        _warn_once(
            "%s: the archive's grid reaches more than a day past its data (%s to %s); analyzing %s to %s",
            path, _when(first), _when(last), _when(start), _when(end),
        )  # fmt: skip
    return float(start), float(end)


_warned: set[str] = set()


def _warn_once(msg: str, *args: object) -> None:
    """A warning about one archive's footer, said once per process (the footer is read more than once)."""
    text = msg % args
    if text not in _warned and len(_warned) < 1000:
        _warned.add(text)
        log.warning("%s", text)


def _when(ts: float) -> str:
    """A time for a message: RFC 3339, or seconds where no date holds it."""
    from fleetscope.times import rfc3339

    try:
        return rfc3339(ts)
    except (ValueError, OverflowError, OSError):
        return f"{ts:g} s"


def _open(path: Path) -> tuple[Any, dict[str, Any]]:
    pa, pq = pyarrow_modules()
    try:
        path.stat()
    except OSError as exc:
        raise FleetscopeError(f"cannot read {path}: {exc.strerror}") from None
    try:
        pf = pq.ParquetFile(path)
    except OSError as exc:
        raise FleetscopeError(f"cannot read {path}: {exc.strerror or 'not a Parquet file'}") from None
    except pa.ArrowException as exc:
        raise FleetscopeError(f"{path} is not a readable Parquet file ({str(exc)[:120]})") from None
    kv = pf.metadata.metadata or {}
    try:
        meta = json.loads(kv[META_KEY])
    except (KeyError, ValueError):
        raise FleetscopeError(
            f"{path} is a Parquet file but not a fleetscope archive (fleetscope record)"
        ) from None
    if not isinstance(meta, dict) or not isinstance(meta.get("version"), int):
        raise FleetscopeError(f"{path}: the archive's metadata is malformed")
    if meta["version"] > FORMAT_VERSION:
        raise FleetscopeError(
            f"{path} is archive format {meta['version']}; this fleetscope reads up to "
            f"{FORMAT_VERSION}: upgrade fleetscope"
        )
    groups = meta.get("row_groups")
    if not isinstance(groups, list) or len(groups) != pf.metadata.num_row_groups:
        raise FleetscopeError(f"{path}: the archive's metadata does not match its row groups")
    _check_columns(path, pa, pf.schema_arrow, meta["version"])
    _check_times(path, meta)
    return pf, meta


def _check_times(path: Path, meta: dict[str, Any]) -> None:
    """The footer's grid (finite start <= end, a positive step), span (two finite times in order)
    and spacing (positive), where present; one line naming what is wrong otherwise."""

    def finite(x: Any) -> bool:
        return isinstance(x, int | float) and not isinstance(x, bool) and bool(np.isfinite(x))

    grid, span, spacing = meta.get("grid"), meta.get("span"), meta.get("spacing")
    if grid is not None and not (
        isinstance(grid, dict)
        and all(finite(grid.get(k)) for k in ("start", "end", "step"))
        and grid["start"] <= grid["end"]
        and grid["step"] > 0
    ):
        raise FleetscopeError(f"{path}: the archive's grid is malformed")
    if span is not None and not (
        isinstance(span, list) and len(span) == 2 and all(map(finite, span)) and span[0] <= span[1]
    ):
        raise FleetscopeError(f"{path}: the archive's span is malformed")
    if spacing is not None and not (finite(spacing) and spacing > 0):
        raise FleetscopeError(f"{path}: the archive's sample spacing is malformed")
    recorded = meta.get("grid_start")
    if recorded is not None and not (
        isinstance(recorded, dict)
        and all(finite(recorded.get(k)) for k in ("start", "step"))
        and recorded["step"] > 0
    ):
        raise FleetscopeError(f"{path}: the archive's grid start is malformed")


def _check_columns(path: Path, pa: Any, schema: Any, version: int) -> None:
    """The fixed columns have their types: time (a timestamp or int64), value (a number), series (an int)."""
    want = {
        TIME_COL: lambda t: pa.types.is_timestamp(t) or pa.types.is_int64(t),
        VALUE_COL: lambda t: pa.types.is_floating(t) or pa.types.is_integer(t),
    }
    if version >= 2:
        want[SERIES_COL] = pa.types.is_integer
    for col, ok in want.items():
        i = schema.get_field_index(col)
        if i < 0:
            raise FleetscopeError(f"{path}: the archive has no {col} column")
        if not ok(schema.field(i).type):
            raise FleetscopeError(f"{path}: the archive's {col} column holds {schema.field(i).type}")


def _footer_series(path: Path, meta: dict[str, Any], name: str) -> int:
    """How many series the footer counts for ``name`` (:data:`MAX_READ_SERIES` when it does not say)."""
    info = meta.get("metrics")
    entry = info.get(name) if isinstance(info, dict) else None
    if not isinstance(entry, dict) or entry.get("series") is None:
        return MAX_READ_SERIES
    return _count(path, entry["series"])


def _count(path: Path, value: Any) -> int:
    """A count from the footer: a whole number from 0 to 2**40, else the footer is malformed."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 1 << 40:
        raise FleetscopeError(f"{path}: the archive's metadata is malformed (a count of {str(value)[:40]})")
    return value


@_one_line
def read_archive(
    path: str | Path,
    metrics: Collection[str] | None = None,
    progress: Callable[[float], None] | None = None,
    window: tuple[float | None, float | None, float | None] = (None, None, None),
    stats: ReadStats | None = None,
) -> tuple[dict[str, list[RawSeries]], dict[str, Any]]:
    """(raw series by metric, the archive's metadata), of ``metrics`` only (all when None).

    ``window`` (start, end, step as asked for, None = unknown) bounds the grid before reading and,
    in a format-2 archive, what is read: the rows in [start - margin, end] (module docstring).
    ``stats``: filled with what was read.
    """
    meta, metric_reads = _read(Path(path), metrics, progress, window, stats)
    raw = {name: m.to_raw() if isinstance(m, MetricRows) else m for name, m in metric_reads}
    return raw, meta


def _read(
    path: Path,
    metrics: Collection[str] | None,
    progress: Callable[[float], None] | None,
    window: tuple[float | None, float | None, float | None],
    stats: ReadStats | None,
) -> tuple[dict[str, Any], Iterator[tuple[str, MetricRows | list[RawSeries]]]]:
    """(the metadata, each metric as it is read): a format-2 metric as its rows
    (:class:`MetricRows`), a format-1 one as its series. The grid's size is checked before."""
    pf, meta = _open(path)
    pa, _ = pyarrow_modules()
    by_metric = groups_by_metric(path, meta, metrics)
    stats = stats if stats is not None else ReadStats()
    stats.row_groups_total = sum(map(len, by_metric.values()))
    v2 = meta["version"] >= 2
    rows = row_range(meta, window) if v2 else None
    by_metric = groups_meeting(meta, by_metric, rows)
    _check_size(path, pf, meta, by_metric, window)
    labels: dict[str, str] = meta.get("labels") or {}
    sizes = {name: sum(pf.metadata.row_group(i).num_rows for i in ids) for name, ids in by_metric.items()}
    total = sum(sizes.values()) or 1

    def each() -> Iterator[tuple[str, MetricRows | list[RawSeries]]]:
        done = 0
        any_read = False
        try:
            for name, ids in by_metric.items():
                got: MetricRows | list[RawSeries] | None
                n = sizes[name]
                if v2:  # of_table gets the only reference to the table, to let go of it early
                    present = _v2_columns(pf, meta, name)
                    got = MetricRows.of_table(
                        pa,
                        pf.read_row_groups(ids, columns=[SERIES_COL, TIME_COL, VALUE_COL]),
                        partial(pf.read_row_groups, ids, columns=present),
                        present,
                        labels,
                        rows,
                        _footer_series(path, meta, name),
                    )
                else:
                    columns = [c for c in pf.schema_arrow.names if c not in (NAME_COL, TIME_COL, VALUE_COL)]
                    present = [c for c in columns if not _all_null(pf, ids, c)]  # a metric has few labels
                    table = pf.read_row_groups(ids, columns=[*present, TIME_COL, VALUE_COL])
                    got = _split_series(pa, table, present, labels) or None
                    del table
                done += n
                stats.row_groups += len(ids)
                stats.rows += n
                if progress:
                    progress(done / total)
                if got is not None:
                    any_read = True
                    yield name, got
        except (pa.ArrowException, OSError) as exc:
            raise FleetscopeError(f"{path} is truncated or corrupt ({str(exc)[:120]})") from None
        if not any_read:
            if rows is not None:
                raise NoData(f"{path} has no samples in the requested window")
            raise FleetscopeError(f"{path} holds none of the series the analyzers read")

    return meta, each()


def groups_by_metric(
    path: Path, meta: dict[str, Any], metrics: Collection[str] | None
) -> dict[str, list[int]]:
    wanted = set(metrics) if metrics is not None else None
    by_metric: dict[str, list[int]] = {}
    for i, g in enumerate(meta["row_groups"]):
        name = g.get("metric") if isinstance(g, dict) else None
        if not isinstance(name, str):
            raise FleetscopeError(f"{path}: the archive's metadata is malformed")
        if wanted is None or name in wanted:
            by_metric.setdefault(name, []).append(i)
    return by_metric


def row_range(
    meta: dict[str, Any], window: tuple[float | None, float | None, float | None]
) -> tuple[float, float] | None:
    """[start - margin, end] in seconds (None: no slice asked for). The margin covers the grid
    rule's lookback at the step asked for (none for an export's grid values)."""
    start, end, step = window
    if start is None and end is None:
        return None
    margin = 0.0 if meta.get("grid") else max(LOOKBACK_MARGIN_S, lookback_seconds(step) if step else 0.0)
    return (-np.inf if start is None else start - margin), (np.inf if end is None else end)


def groups_meeting(
    meta: dict[str, Any], by_metric: dict[str, list[int]], rows: tuple[float, float] | None
) -> dict[str, list[int]]:
    """Each metric's row groups that meet the row range ``rows`` (all of them when it is None),
    metrics left with none left out."""
    if rows is None:
        return by_metric
    lo, hi = rows
    return {
        name: kept
        for name, ids in by_metric.items()
        if (kept := [i for i in ids if group_meets(meta["row_groups"][i], lo, hi)])
    }


def group_meets(group: dict[str, Any], lo: float, hi: float) -> bool:
    t0, t1 = group.get("t0"), group.get("t1")
    if not isinstance(t0, int | float) or not isinstance(t1, int | float):
        return True  # unknown: read it
    return t1 >= lo and t0 <= hi


def _v2_columns(pf: Any, meta: dict[str, Any], name: str) -> list[str]:
    """The label columns (and ``__labels__``) the metric's series use, from the metadata."""
    info = (meta.get("metrics") or {}).get(name) or {}
    names = pf.schema_arrow.names
    cols = info.get("columns")
    if not isinstance(cols, list):
        cols = [c for c in names if c not in (NAME_COL, SERIES_COL, TIME_COL, VALUE_COL)]
    return [c for c in cols if c in names]


@dataclass
class MetricRows:
    """One metric's rows of a format-2 archive, in series order (the ``__series__`` numbers read,
    ascending) and time order within a series (stable: duplicates as written), with no Python object
    per series: what the columnar path (:class:`_ColumnarGrid`) grids directly.

    ``series``: per row, the series' place among those read (0, 1, ...); ``starts``: each series'
    first row; ``labels``: per label column, (label name, each series' code, -1 for none; the
    dictionary's words).
    """

    series: np.ndarray
    tms: np.ndarray
    values: np.ndarray
    starts: np.ndarray
    labels: list[tuple[str, np.ndarray, list[str]]]

    @classmethod
    def of_table(
        cls,
        pa: Any,
        table: Any,
        label_table: Callable[[], Any],
        columns: list[str],
        labels: dict[str, str],
        rows: tuple[float, float] | None,
        most: int = MAX_READ_SERIES,
    ) -> MetricRows | None:
        """The rows of ``table`` (its series, time and value columns) in ``rows`` (seconds; None:
        all), None when there are none. ``label_table()`` reads the label ``columns`` of the same
        rows, once the numeric work is done (so both are never held whole together); only each
        series' first row of them is kept.
        """
        if not table.num_rows:
            return None
        tms = _int64(table.column(TIME_COL))
        sid = table.column(SERIES_COL).to_numpy()
        if sid.size and (sid.min() < 0 or sid.max() >= most):  # the footer's count, checked before, lied
            raise ValueError(f"series number {int(sid.max()):,} where the footer counts {most:,} series")
        values = table.column(VALUE_COL).to_numpy().astype(float, copy=False)
        del table  # the caller holds no reference: its buffers go once copied out
        arranged = Arranged.of(sid, tms, values, rows)
        if arranged is None:
            return None
        series, tms, values, starts, first = arranged[:5]
        at = label_table().take(pa.array(first)).unify_dictionaries().combine_chunks() if columns else None
        if at is None:
            return cls(series, tms, values, starts, [])
        lab = []
        for col in columns:
            arr = at.column(col).chunk(0) if at.column(col).num_chunks else None
            if arr is None or arr.null_count == len(arr):
                continue
            if not pa.types.is_dictionary(arr.type):
                arr = arr.dictionary_encode()
            codes = arr.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
            lab.append((col if col == EXTRA_COL else labels.get(col, col), codes, arr.dictionary.to_pylist()))
        return cls(series, tms, values, starts, lab)

    def ends(self) -> np.ndarray:
        """Each series' end (one past its last row)."""
        return np.append(self.starts[1:], self.tms.size)

    def to_raw(self) -> list[RawSeries]:
        """One :class:`RawSeries` per series, labels from the columns (and ``__labels__``)."""
        lab: list[dict[str, str]] = [{} for _ in range(self.starts.size)]
        for name, codes, words in self.labels:
            for k, code in enumerate(codes.tolist()):
                if code < 0:
                    continue
                if name == EXTRA_COL:
                    lab[k].update(json.loads(words[code]))
                else:
                    lab[k][name] = words[code]
        times = self.tms / 1000.0
        bounds = np.append(self.starts, self.tms.size)
        return [
            RawSeries(lab[k], times[bounds[k] : bounds[k + 1]], self.values[bounds[k] : bounds[k + 1]])
            for k in range(self.starts.size)
        ]


def _int64(column: Any) -> np.ndarray:
    """A timestamp column as int64 milliseconds, one array."""
    arr = column.to_numpy()
    return arr.view(np.int64) if arr.dtype.kind == "M" else arr.astype(np.int64)


class Arranged(NamedTuple):
    """One metric's rows in ``rows`` (seconds), in series order and time order within a series
    (stable), as :class:`MetricRows` holds them: ``series`` (per row, the series' place among
    those read), ``tms``, ``values``, ``starts`` (each series' first row), and where each series'
    first row was among the rows given (``first``) and its series number (``sids``)."""

    series: np.ndarray
    tms: np.ndarray
    values: np.ndarray
    starts: np.ndarray
    first: np.ndarray
    sids: np.ndarray

    @classmethod
    def of(
        cls,
        sid: np.ndarray,
        tms: np.ndarray,
        values: np.ndarray,
        rows: tuple[float, float] | None,
        maybe_ordered: bool = False,
    ) -> Arranged | None:
        """The rows (``sid``, ``tms``, ``values``) arranged; None when none lies in ``rows`` (None:
        all). ``maybe_ordered``: the rows may be in order already (then they are not sorted)."""
        keep = rows_inside(
            tms, (0.0, MAX_STAMP_S) if rows is None else (max(rows[0], 0.0), min(rows[1], MAX_STAMP_S))
        )
        if keep is not None:  # the rows asked for; never a stamp no date holds (the writer's rule)
            tms, sid, values = tms[keep], sid[keep], values[keep]
        if not tms.size:
            return None
        order = None if maybe_ordered and rows_in_order(sid, tms) else series_time_order(sid, tms)
        if order is not None:
            sid, tms, values = sid[order], tms[order], values[order]
        change = np.empty(sid.size, dtype=bool)
        change[0] = True
        np.not_equal(sid[1:], sid[:-1], out=change[1:])
        starts = np.flatnonzero(change)
        series = np.cumsum(change, dtype=np.int32) - 1
        first = starts if order is None else order[starts]  # each series' first row, among those kept
        if keep is not None:
            first = np.flatnonzero(keep)[first]  # ... among those given
        return cls(series, tms, values, starts, first, sid[starts])


def series_time_order(sid: np.ndarray, tms: np.ndarray) -> np.ndarray:
    """The stable order of rows by (series, time). The archive writes a series' rows in time order
    (block by block), so a stable sort by series alone (a radix sort below 65,536 series) is
    almost always enough; rows of a series out of time order (a metric written in two batches)
    are sorted by time too."""
    order = np.argsort(sid.astype(np.uint16) if sid.max() < 1 << 16 else sid, kind="stable")
    s, t = sid[order], tms[order]
    if ((np.diff(t) < 0) & (s[1:] == s[:-1])).any():
        order = np.lexsort((tms, sid))
    return order


def rows_inside(tms: np.ndarray, rows: tuple[float, float]) -> np.ndarray | None:
    """Which rows (milliseconds) lie in ``rows`` (seconds); None when all do."""
    lo, hi = rows
    keep = np.ones(tms.size, dtype=bool)
    if np.isfinite(lo):
        keep &= tms >= np.floor(lo * 1000)
    if np.isfinite(hi):
        keep &= tms <= np.ceil(hi * 1000)
    return None if keep.all() else keep


def _check_size(
    path: Path,
    pf: Any,
    meta: dict[str, Any],
    by_metric: dict[str, list[int]],
    window: tuple[float | None, float | None, float | None],
) -> None:
    """Before reading: the rows and series the read takes (rows from the Parquet footer, series
    from the metadata) against :data:`MAX_READ_ROWS` and :data:`MAX_READ_SERIES`, then check_grid
    on the span the statistics give, stray stamps left out as the loader drops them."""
    where = path
    if meta["version"] >= 2:
        info = meta.get("metrics") or {}
        if not isinstance(info, dict):
            raise FleetscopeError(f"{where}: the archive's metadata is malformed")
        series = sum(_count(where, (info.get(name) or {}).get("series") or 0) for name in by_metric)
    else:
        series = sum(
            _count(where, meta["row_groups"][i].get("series") or 0) for ids in by_metric.values() for i in ids
        )
    ids = [i for ids in by_metric.values() for i in ids]
    rows = sum(pf.metadata.row_group(i).num_rows for i in ids)
    if rows > MAX_READ_ROWS or series > MAX_READ_SERIES:
        raise FleetscopeError(
            f"{where}: the window holds {rows:,} rows of {series:,} series, over the limit of "
            f"{MAX_READ_ROWS:,} rows and {MAX_READ_SERIES:,} series read at once; narrow it with "
            "--start/--end or stream it (analyze --chunk 1h)"
        )
    lo, hi = _stats_span(pf, ids, plausible=True)
    start, end, step = window
    grid = meta.get("grid") or {}
    step = step or grid.get("step")
    if step is None and isinstance(meta.get("spacing"), int | float):
        step = round_step(float(meta["spacing"]))
    if not step or not np.isfinite(lo):
        return
    check_grid(lo if start is None else start, hi if end is None else end, float(step), series)


def _stats_span(pf: Any, ids: Any, plausible: bool = False) -> tuple[float, float]:
    """(first, last) sample time of row groups ``ids`` from their statistics (inf, -inf: none);
    ``plausible``: groups of stray stamps far from the bulk left out (:func:`plausible_span`)."""
    col = pf.schema_arrow.get_field_index(TIME_COL)
    t0, t1, rows = [], [], []
    for i in ids:
        group = pf.metadata.row_group(i)
        st = group.column(col).statistics
        if st is not None and st.has_min_max:
            t0.append(_raw_seconds(st.min_raw))
            t1.append(_raw_seconds(st.max_raw))
            rows.append(group.num_rows)
    if not t0:
        return np.inf, -np.inf
    if plausible:
        return plausible_span(t0, t1, rows)
    return min(t0), max(t1)


def _raw_seconds(ms: Any) -> float:
    """A time statistic as stored (int64 milliseconds), in seconds: no date is made of it, so a
    stamp no date holds (an int64 minimum) is a number like any other."""
    if isinstance(ms, bool) or not isinstance(ms, int | float):
        raise FleetscopeError("the archive's time statistics are not numbers")
    return float(ms) / 1000.0


def _all_null(pf: Any, ids: list[int], column: str) -> bool:
    """Whether the statistics say ``column`` holds only nulls in these row groups (unknown: False)."""
    col = pf.schema_arrow.get_field_index(column)
    for i in ids:
        chunk = pf.metadata.row_group(i).column(col)
        st = chunk.statistics
        if st is None or st.null_count is None or st.null_count < chunk.num_values:
            return False
    return True


def _split_series(pa: Any, table: Any, columns: list[str], labels: dict[str, str]) -> list[RawSeries]:
    """One metric's rows cut into series where any label column changes."""
    n = table.num_rows
    if not n:
        return []
    table = table.unify_dictionaries().combine_chunks()
    codes, dicts = [], []
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for col in columns:
        arr = table.column(col).chunk(0) if table.column(col).num_chunks else None
        if arr is None or arr.null_count == n:
            continue
        if not pa.types.is_dictionary(arr.type):
            arr = arr.dictionary_encode()
        idx = arr.indices.fill_null(-1).to_numpy(zero_copy_only=False)
        change[1:] |= idx[1:] != idx[:-1]
        codes.append((labels.get(col, col), idx))
        dicts.append(arr.dictionary.to_pylist())
    starts = np.flatnonzero(change)
    bounds = np.append(starts, n)
    times = table.column(TIME_COL).chunk(0).cast(pa.int64()).to_numpy(zero_copy_only=False) / 1000.0
    values = table.column(VALUE_COL).chunk(0).to_numpy(zero_copy_only=False).astype(float, copy=False)
    out = []
    for k, first in enumerate(starts.tolist()):
        lab = {}
        for (label, idx), words in zip(codes, dicts, strict=True):
            code = idx[first]
            if code >= 0:
                lab[label] = words[code]
        a, b = first, int(bounds[k + 1])
        out.append(RawSeries(lab, times[a:b], values[a:b]))
    return out


@_one_line
def load_parquet(
    path: str | Path,
    metrics: Collection[str] | None = None,
    step: float | None = None,
    start: float | None = None,
    end: float | None = None,
    progress: Callable[[float], None] | None = None,
    stats: ReadStats | None = None,
) -> Frames:
    """Load the archive onto a grid, as :func:`~fleetscope.window.openmetrics.load_recording` a recording.

    With ``start``/``end``, a format-2 archive is read only around that window (module docstring),
    and the grid step, when not given, comes from the archive's typical spacing (:func:`archive_span`),
    so every chunk of a chunked analysis gets the same step whatever its own samples' spacing.
    ``stats``: filled with the row groups and rows read.

    Format 2 goes the columnar way (:class:`_ColumnarGrid`): when the grid is known before reading
    (an export's own grid, or ``start``, ``end`` and ``step`` all given, as every chunk of a
    streamed analysis gives them) each metric is put on it as soon as it is read, so only one
    metric's rows are held at a time; otherwise all rows first, then the grid from them.
    """
    path = Path(path)
    source = os.fspath(path)
    meta, metric_reads = _read(path, metrics, progress, (start, end, step), stats)
    grid = meta.get("grid")
    if grid:
        g_start, g_end, g_step = float(grid["start"]), float(grid["end"]), float(grid["step"])
        if step is not None and step != g_step:
            raise FleetscopeError(
                f"{path} was exported from Prometheus at a {g_step:g} s step; "
                f"analyze it at that --step (or export it again at {step:g} s)"
            )
        if start is not None and (start < g_start or round((start - g_start) / g_step, 6) % 1):
            raise FleetscopeError(
                f"--start must be a grid time of {path}'s window (from {g_start:g}, every {g_step:g} s)"
            )
        if start is None or end is None:  # the footer's grid, cut to where the data is, and sized
            g_start, g_end, _ = archive_span(path)
        g_start, g_end = (g_start if start is None else start), (g_end if end is None else min(end, g_end))
        check_grid(g_start, g_end, g_step)
        known: tuple[float, float, float, float] | None = (g_start, g_end, g_step, 0.0)
    elif start is not None and end is not None and step is not None:
        check_window(start, end, step)
        known = (start, end, step, lookback_seconds(step))
    else:
        known = None
    if meta["version"] < 2:
        known = None  # format 1 holds series, not rows: the series path
    return frames_of_reads(
        meta,
        metric_reads,
        lambda: _read(path, metrics, None, (start, end, step), None)[1],
        known,
        (step, start, end),
        source,
        (g_start, g_end, g_step) if grid else None,
    )


def frames_of_reads(
    meta: dict[str, Any],
    metric_reads: Iterable[tuple[str, MetricRows | list[RawSeries]]],
    reread: Callable[[], Iterable[tuple[str, MetricRows | list[RawSeries]]]],
    known: tuple[float, float, float, float] | None,
    asked: tuple[float | None, float | None, float | None],
    source: str,
    grid: tuple[float, float, float] | None = None,
) -> Frames:
    """The frames of an archive's metrics as they are read (``metric_reads``): the columnar way
    when it is exact (:class:`_ColumnarGrid`, on the ``known`` grid (start, end, step, lookback)
    or on one placed from the rows), else the series path on a second read (``reread()``).
    ``asked``: the step, start and end asked for; ``grid``: an export's grid (start, end, step)."""
    step, start, end = asked
    if known is not None:
        frames = _ColumnarGrid(*known, source, gridded=grid is not None).run(metric_reads)
        if frames is not None:
            return frames
        read = dict(reread())  # the series path
    else:
        read = dict(metric_reads)
        frames = _columnar_frames(read, meta, step, start, end, source)
        if frames is not None:
            return frames
    raw = {name: m.to_raw() if isinstance(m, MetricRows) else m for name, m in read.items()}
    del read
    if grid:  # query_range grid values: their own grid, no second lookback
        summarize(raw, source)  # drops what no exporter writes, as for a recording
        return build_frames(raw, *grid, source=source, gridded=True)
    raw, t_min, t_max, spacing = summarize(raw, source)
    if _sliced(meta, start, end) and step is None and isinstance(meta.get("spacing"), int | float):
        spacing = float(meta["spacing"])
    return frames_from_raw(raw, t_min, t_max, spacing, step=step, start=start, end=end, source=source)


def _sliced(meta: dict[str, Any], start: float | None, end: float | None) -> bool:
    return meta["version"] >= 2 and (start is not None or end is not None)


class _ColumnarGrid:
    """Metrics' rows onto a known grid, one metric at a time, giving the frames the series path
    (:func:`samples.summarize`, then :func:`samples.frames_from_raw` or :func:`build_frames`)
    gives; :meth:`run` answers None where only that path is exact: a format-1 archive, two series
    of one metric with the same labels, or samples it would drop (non-finite values, stamps more
    than a day from the rest). tests/window/archive/test_archive_columnar.py compares the two."""

    def __init__(
        self, start: float, end: float, step: float, lookback: float, source: str, gridded: bool = False
    ) -> None:
        self.gridded = gridded  # an export's grid values: no window check (build_frames has none)
        self.times = make_grid(start, end, step)
        self.frames = Frames(times=self.times, step=step, source=source)
        self.start, self.end, self.lookback, self.source = start, end, lookback, source
        self.t_lo, self.t_hi = np.inf, -np.inf

    def add(self, name: str, m: MetricRows | list[RawSeries]) -> bool:
        """Put one metric on the grid (False: the series path must answer instead)."""
        if not isinstance(m, MetricRows) or not np.isfinite(m.values).all():
            return False
        keys = _label_keys(m)
        if keys is None:
            return False
        self.t_lo = min(self.t_lo, int(m.tms.min()) / 1000.0)
        self.t_hi = max(self.t_hi, int(m.tms.max()) / 1000.0)
        table = grid_rows(
            m.series, m.tms, m.values, int(m.starts.size), self.times, self.lookback, ordered=True
        )
        alive = ~np.isnan(table).all(axis=0)
        if alive.any():
            self.frames.metrics[name] = MetricFrame(_label_frame(m, keys, alive), table[:, alive])
        return True

    def run(self, metric_reads: Iterable[tuple[str, MetricRows | list[RawSeries]]]) -> Frames | None:
        for name, m in metric_reads:
            if not self.add(name, m):
                return None
        if self.t_hi - self.t_lo > PLAUSIBLE_MARGIN_S:
            return None  # samples.summarize would drop some: its path counts and reports them
        if not self.gridded and (self.end < self.t_lo or self.start > self.t_hi):
            raise NoData(f"{self.source} has no samples in the requested window")
        return self.frames


def _columnar_frames(
    read: dict[str, MetricRows | list[RawSeries]],
    meta: dict[str, Any],
    step: float | None,
    start: float | None,
    end: float | None,
    source: str,
) -> Frames | None:
    """:class:`_ColumnarGrid` where the grid comes from the rows themselves (their span, spacing
    and scrape phase, as :func:`samples.frames_from_raw` takes them): every metric read first."""
    rows: dict[str, MetricRows] = {}
    for name, m in read.items():
        if not isinstance(m, MetricRows):
            return None
        rows[name] = m
    t_min = min(int(m.tms.min()) for m in rows.values()) / 1000.0
    t_max = max(int(m.tms.max()) for m in rows.values()) / 1000.0
    if t_max - t_min > PLAUSIBLE_MARGIN_S:
        return None  # the series path drops the stray stamps before it places the grid
    if _sliced(meta, start, end) and step is None and isinstance(meta.get("spacing"), int | float):
        spacing = float(meta["spacing"])
    else:
        sample = SpacingSample()  # the series path's rule, on the rows: the first series, in order
        for m in rows.values():
            ends = m.ends()
            for k in range(m.starts.size):
                if sample.full:
                    break
                sample.add(m.tms[m.starts[k] : ends[k]] / 1000.0)
        spacing = sample.value()
    phase = [
        m.tms[a : min(a + PHASE_SAMPLES, b)] / 1000.0
        for m in rows.values()
        for a, b in zip(m.starts[:PHASE_SERIES].tolist(), m.ends()[:PHASE_SERIES].tolist(), strict=True)
    ]
    start, end, step = grid_window(
        phase, t_min, t_max, spacing, step=step, start=start, end=end, source=source
    )
    check_grid(start, end, step, sum(int(m.starts.size) for m in rows.values()))
    return _ColumnarGrid(start, end, step, lookback_seconds(step), source).run(rows.items())


def _label_keys(m: MetricRows) -> list[tuple[str, np.ndarray, np.ndarray]] | None:
    """Each label as (label, each series' word, whether it has one), an empty word counted as none
    (the grid's series keys leave empty labels out), the ``__labels__`` JSON spread into its
    labels; None when two series then have the same labels (the series path merges them into one)."""
    columns: list[tuple[str, np.ndarray, np.ndarray]] = []  # (label, dictionary codes, the words)
    for label, codes, words in m.labels:
        if label != EXTRA_COL:
            columns.append((label, codes, np.array(words, dtype=object)))
            continue
        parsed = [json.loads(w) for w in words]
        for key in sorted({k for d in parsed for k in d}):
            words_k = np.array([d.get(key, "") for d in parsed], dtype=object)
            columns.append((key, codes, words_k))
    if len({label for label, _, _ in columns}) < len(columns):
        return None
    out, kept = [], []
    for label, codes, w in columns:
        safe = np.maximum(codes, 0)
        has = (codes >= 0) & ((w != "")[safe] if w.size else False)
        if has.any():
            out.append((label, np.where(has, w[safe] if w.size else "", ""), has))
            ids = np.unique(w, return_inverse=True)[1].reshape(-1) if w.size else np.zeros(0, dtype=np.int64)
            kept.append(np.where(has, ids[safe] if w.size else -1, -1))
    n = int(m.starts.size)
    if n > 1 and (not kept or np.unique(np.stack(kept), axis=1).shape[1] < n):
        return None
    return out


def _label_frame(m: MetricRows, keys: list[tuple[str, np.ndarray, np.ndarray]], alive: np.ndarray) -> Any:
    """The labels of the ``alive`` series as the series path writes them: columns in the order the
    rows' sorted keys first show them, "" where a series has none."""
    import pandas as pd

    cols = []
    for label, words, has in keys:
        h = has[alive]
        if h.any():
            cols.append((int(np.argmax(h)), label, words[alive]))
    cols.sort(key=lambda c: (c[0], c[1]))
    return pd.DataFrame({label: w for _, label, w in cols}, index=pd.RangeIndex(int(alive.sum())))
