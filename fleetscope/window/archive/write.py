"""The archive writer (``fleetscope record``): an incident's series in one Parquet file, for later.

A post-mortem needs the window that held the incident long after Prometheus' retention dropped it,
and reading it back must be fast: an OpenMetrics recording is text that takes seconds per node-hour
to parse. The archive is columnar instead. Format 2 (written now; format 1 is still read):

* one row per sample: ``__name__`` (the metric), one column per label key (dictionary-encoded
  strings; null where a series lacks the label), ``__labels__`` (the series' other labels as one
  JSON object, dictionary-encoded; null when none), ``__series__`` (int32: the series' place in
  its metric, in the order the source gave the series, which the analyzers' grid placement reads),
  ``timestamp`` (milliseconds since the epoch, int64 with the UTC timestamp type) and ``value``
  (float64);
* row groups per metric (never two metrics in one), and within a metric rows ordered by
  (time block of :data:`BLOCK_S`, series, time): a row group holds whole blocks, adjacent small
  ones merged up to :data:`GROUP_ROWS_MIN` rows, so a reader asked for an hour reads the row
  groups of that hour only (their [t0, t1] are in the metadata, and the Parquet statistics);
* key-value metadata ``fleetscope.archive``: the format version, the source, each row group's
  metric, series count, rows and [t0, t1], each metric's series count and label columns, the
  span of the samples and their typical spacing, and for an export from Prometheus the query grid
  (``start``, ``end``, ``step``): those values are already ``last_over_time`` grid values, which
  the loader must not look back over a second time.

Which label columns. Parquet needs the schema before the first row group, and ``record --input``
writes each family as soon as the parser has finished it, a large one in batches
(:func:`~fleetscope.window.openmetrics.iter_openmetrics`, so memory follows the batch, not the
file): the label keys of families not yet parsed are unknown then. The columns are therefore the keys the
contract declares for the metrics recorded
(plus the MIG, attribution and scrape labels); any other label goes, per series, into
``__labels__``. ``record --prometheus`` writes the window an hour at a time (``--chunk``, so
memory follows the piece, not the window), with the same columns for the same reason. Either
way the reader gives back the same labels.

It is written to a temporary name beside the target and renamed when complete, so a crash leaves no
half-written archive. ``fleetscope analyze --input X.parquet`` reads it
(:mod:`fleetscope.window.archive.read`) and gives the same findings as the recording or the
Prometheus window it came from. pyarrow is imported only through
:func:`~fleetscope.window.archive.format.pyarrow_modules`, by this writer and that reader (extra
``archive``), never by the node agent.
"""

from __future__ import annotations

import bisect
import json
import logging
import os
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import Any, NamedTuple, Self

from fleetscope import strictjson
from fleetscope.atomicfile import install, temp_path_for
from fleetscope.errors import FleetscopeError, NoData
from fleetscope.window.archive.format import (
    BLOCK_S,
    DEFAULT_PIECE_S,
    EXTRA_COL,
    FORMAT_VERSION,
    GROUP_BLOCKS_MAX,
    GROUP_ROWS_MIN,
    MAX_STAMP_S,
    META_KEY,
    NAME_COL,
    ROW_GROUP_ROWS,
    SERIES_COL,
    TIME_COL,
    VALUE_COL,
    contract_label_keys,
    label_column,
    plausible_span,
    pyarrow_modules,
)
from fleetscope.window.frames import (
    RawSeries,
    check_grid,
    check_window,
    make_grid,
    say_skipped,
)
from fleetscope.window.grid import grid_start, round_step
from fleetscope.window.prometheus import PrometheusAccess, no_series_error, raw_from_prometheus
from fleetscope.window.samples import PHASE_SAMPLES, PHASE_SERIES, SpacingSample

log = logging.getLogger(__name__)


class RowsWriter:
    """What every writer of a recording's rows keeps, metric batch by metric batch (:meth:`add`):
    each metric's series numbers (``__series__``), the row groups' and metrics' metadata, the
    sample spacing and the grid's phase; a subclass writes the rows (:meth:`_write_metric`) and
    closes. ``labels``: the label keys that get a column (module docstring); others go to
    ``__labels__``. ``window``: (lo, hi) seconds; samples outside are left out.
    """

    def __init__(
        self,
        path: str | Path,
        labels: Iterable[str],
        *,
        source: str,
        grid: tuple[float, float, float] | None = None,
        window: tuple[float, float] | None = None,
    ) -> None:
        self.path = Path(path)
        columns = {label_column(k): k for k in sorted(set(labels))}
        if len(columns) != len(set(labels)) or {NAME_COL, SERIES_COL, EXTRA_COL} & set(columns):
            raise FleetscopeError("a label name clashes with the archive's own columns")
        self.columns = columns
        self.by_label = {k: c for c, k in columns.items()}
        self.groups: list[dict[str, Any]] = []
        self.metrics: dict[str, dict[str, Any]] = {}
        self.ids: dict[str, dict[tuple, int]] = {}  # metric -> label set -> its __series__
        self.spacing = SpacingSample()  # of the first series written
        #: The first sample times of each metric's first series, and the first time: the phase of
        #: the grid a one-shot load of the recording places (samples.frames_from_raw), so a
        #: chunked analysis of the converted recording plans on that grid (``grid_start``).
        self.phase: dict[str, list[Any]] = {}
        self.first_time = float("inf")
        self.source, self.grid, self.window = source, grid, window
        self.rows = 0
        self.skipped = 0  # samples with a non-finite time or value (no exporter writes them)
        self.largest_batch = 0  # rows of the largest batch handed to add (tests: memory follows it)

    def add(self, name: str, series: list[RawSeries]) -> None:
        """Write one metric's series (a family as the parser finished it, or a whole metric)."""
        import numpy as np

        self.largest_batch = max(self.largest_batch, sum(s.times.size for s in series))
        kept = [s for s in (self._clean(np, s) for s in series) if s.times.size]
        if not kept:
            return
        ids = self.ids.setdefault(name, {})
        sid = []
        for s in kept:
            key = tuple(sorted(s.labels.items()))
            sid.append(ids.setdefault(key, len(ids)))
            self.spacing.add(s.times)
        phase = self.phase.setdefault(name, [])
        for s in kept[: max(PHASE_SERIES - len(phase), 0)]:
            phase.append(s.times[:PHASE_SAMPLES].copy())
        self.first_time = min(self.first_time, min(float(s.times.min()) for s in kept))
        order = sorted(range(len(kept)), key=sid.__getitem__)  # stable: by __series__
        kept, sid = [kept[k] for k in order], [sid[k] for k in order]
        self._write_metric(np, name, kept, np.array(sid, dtype=np.int32))
        info = self.metrics.setdefault(name, {"series": 0, "columns": []})
        info["series"] = len(ids)
        present = {self.by_label.get(k, EXTRA_COL) for s in kept for k in s.labels}
        info["columns"] = sorted(set(info["columns"]) | present)

    def _clean(self, np: Any, s: RawSeries) -> RawSeries:
        t, v = np.asarray(s.times, dtype=float), np.asarray(s.values, dtype=float)
        # A stamp before the epoch or past MAX_STAMP_S (1e300) is no sample: int64 milliseconds
        # and the reader's dates cannot hold it. Stray stamps it can hold are kept and left out of
        # the span (_span); the reader drops them as it drops a recording's.
        usable = np.isfinite(v) & (t >= 0) & (t <= MAX_STAMP_S)
        keep = usable.copy()
        if self.window is not None:
            keep &= (t >= self.window[0]) & (t <= self.window[1])
        if keep.all():
            return RawSeries(s.labels, t, v)
        self.skipped += int((~usable).sum())
        return RawSeries(s.labels, t[keep], v[keep])

    def _write_metric(self, np: Any, name: str, series: list[RawSeries], sid: Any) -> None:
        """Write one batch's series (each series' samples, its ``__series__`` in ``sid``)."""
        raise NotImplementedError

    def abort(self) -> None:
        """Leave nothing behind."""
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        """An error leaves nothing behind (:meth:`abort`), and an OS error is one line."""
        if kind is None:
            return
        self.abort()
        if isinstance(exc, OSError):
            raise FleetscopeError(f"cannot write {self.path}: {exc.strerror or exc}") from None

    def meta(self) -> dict[str, Any]:
        """The archive's metadata (module docstring) of what was written so far."""
        meta: dict[str, Any] = {
            "version": FORMAT_VERSION,
            "source": self.source,
            "row_groups": self.groups,
            "metrics": self.metrics,
            "labels": self.columns,
            "extra_labels": EXTRA_COL,
            "block_s": BLOCK_S,
            "span": list(_span(self.groups)),
        }
        if self.grid is not None:
            meta["grid"] = {"start": self.grid[0], "end": self.grid[1], "step": self.grid[2]}
        else:
            meta["spacing"] = self.spacing.value()
            if self.phase and self.first_time < float("inf"):
                import numpy as np

                step = round_step(meta["spacing"])
                phase = np.concatenate([t for ts in self.phase.values() for t in ts])
                meta["grid_start"] = {"start": grid_start(phase, self.first_time, step), "step": step}
        return meta


class ArchiveWriter(RowsWriter):
    """Writes a format-2 archive metric batch by metric batch (:meth:`add`), then :meth:`close`.

    ``labels``: the label keys that get a column (module docstring); others go to ``__labels__``.
    ``window``: (lo, hi) seconds; samples outside are left out. Use it as a context manager: an
    error leaves nothing behind (the temporary file is removed) and an OS error is one line.
    """

    def __init__(
        self,
        path: str | Path,
        labels: Iterable[str],
        *,
        source: str,
        grid: tuple[float, float, float] | None = None,
        window: tuple[float, float] | None = None,
        compression: str = "zstd",
    ) -> None:
        super().__init__(path, labels, source=source, grid=grid, window=window)
        pa, pq = pyarrow_modules()
        self.pa = pa
        self.dict_type = pa.dictionary(pa.int32(), pa.string())
        self.schema = pa.schema(
            [pa.field(NAME_COL, self.dict_type)]
            + [pa.field(col, self.dict_type) for col in self.columns]
            + [
                pa.field(EXTRA_COL, self.dict_type),
                pa.field(SERIES_COL, pa.int32()),
                pa.field(TIME_COL, pa.timestamp("ms", tz="UTC")),
                pa.field(VALUE_COL, pa.float64()),
            ]
        )
        try:
            # beside the target, or in the temporary folder when -o is a device or a FIFO
            self.tmp = temp_path_for(self.path, str(os.getpid()))
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.writer = pq.ParquetWriter(
                self.tmp, self.schema, compression=compression, write_statistics=[TIME_COL, SERIES_COL]
            )
        except OSError as exc:
            raise FleetscopeError(f"cannot write {self.path}: {exc.strerror or exc}") from None

    def abort(self) -> None:
        try:
            self.writer.close()
        except Exception:  # noqa: BLE001 -- the file is removed either way
            pass
        self.tmp.unlink(missing_ok=True)

    def _write_metric(self, np: Any, name: str, series: list[RawSeries], sid: Any) -> None:
        """One batch's rows ordered by (time block, series, time) (:class:`BlockLayout`), cut into
        row groups: a row group's rows are gathered by their index alone."""
        layout = BlockLayout.of(np, series)
        lo, sizes, starts, blocks = (
            layout.lo + layout.first[:, None],
            layout.sizes,
            layout.starts,
            layout.blocks,
        )
        t, v = layout.times, layout.values
        del layout
        codes = self._label_codes(np, series)
        index = np.arange(len(series), dtype=np.int32)

        def gather(a: int, b: int) -> tuple[Any, Any, Any]:
            """Rows [a, b) in (block, series, time) order: their time, value and series in the batch."""
            ka = bisect.bisect_right(starts, a) - 1
            kb = bisect.bisect_left(starts, b)
            idx = np.concatenate([index_ranges(np, lo[:, j], sizes[:, j]) for j in range(ka, kb)])
            local = np.concatenate([np.repeat(index, sizes[:, j]) for j in range(ka, kb)])
            cut = slice(a - starts[ka], b - starts[ka])
            idx, local = idx[cut], local[cut]
            return t[idx], v[idx], local

        for a, b in row_group_ranges(blocks.tolist(), starts):
            self._write_group(np, name, *gather(a, b), sid, codes)

    def _label_codes(self, np: Any, series: list[RawSeries]) -> list[tuple[str, Any, Any]]:
        """(column, per-series dictionary codes, dictionary) of each column the batch uses."""
        pa = self.pa
        out = []
        per_col: dict[str, list[str | None]] = {}
        for k, s in enumerate(series):
            extra = {}
            for label, value in s.labels.items():
                col = self.by_label.get(label)
                if col is None:
                    extra[label] = value
                else:
                    per_col.setdefault(col, [None] * len(series))[k] = value
            if extra:
                per_col.setdefault(EXTRA_COL, [None] * len(series))[k] = json.dumps(
                    extra, sort_keys=True, separators=(",", ":")
                )
        for col, vals in per_col.items():
            uniq = sorted({x for x in vals if x is not None})
            code = {x: i for i, x in enumerate(uniq)}
            per_series = np.array([code[x] if x is not None else -1 for x in vals], dtype=np.int32)
            out.append((col, per_series, pa.array(uniq, type=pa.string())))
        return out

    def _write_group(
        self,
        np: Any,
        name: str,
        tg: Any,
        vg: Any,
        rows_local: Any,
        sid: Any,
        codes: list[tuple[str, Any, Any]],
    ) -> None:
        pa = self.pa
        n = int(tg.size)
        arrays: dict[str, Any] = {
            NAME_COL: pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), pa.array([name]))
        }
        for col, per_series, words in codes:
            rows = per_series[rows_local]
            mask = rows < 0
            indices = pa.array(np.where(mask, 0, rows), mask=mask if mask.any() else None, type=pa.int32())
            arrays[col] = pa.DictionaryArray.from_arrays(indices, words)
        arrays[SERIES_COL] = pa.array(sid[rows_local], type=pa.int32())
        arrays[TIME_COL] = pa.array(tg, type=pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
        arrays[VALUE_COL] = pa.array(vg, type=pa.float64())
        cols = [arrays.get(f.name) if f.name in arrays else pa.nulls(n, f.type) for f in self.schema]
        self.writer.write_table(pa.Table.from_arrays(cols, schema=self.schema), row_group_size=n)
        self.groups.append(
            {
                "metric": name,
                "series": int(np.unique(rows_local).size),
                "rows": n,
                "t0": int(tg.min()) / 1000.0,
                "t1": int(tg.max()) / 1000.0,
            }
        )
        self.rows += n

    def close(self) -> dict[str, int]:
        """Write the metadata, close, rename into place; (rows, series, metrics)."""
        if not self.groups:
            self.abort()
            raise FleetscopeError(f"nothing to write to {self.path}: no samples")
        meta = self.meta()
        try:
            self.writer.add_key_value_metadata({META_KEY: strictjson.dumps(meta).encode()})
            self.writer.close()
            install(self.tmp, self.path)  # renamed over a regular file, else written through
        except OSError as exc:
            self.tmp.unlink(missing_ok=True)
            raise FleetscopeError(f"cannot write {self.path}: {exc.strerror or exc}") from None
        if self.skipped:
            log.warning(
                "%s: skipped %s samples with a NaN or infinite value, or a time before 1970 or past 9999",
                self.source,
                f"{self.skipped:,}",
            )
        series = sum(m["series"] for m in self.metrics.values())
        return {"rows": self.rows, "series": series, "metrics": len(self.metrics)}


#: Rows a temporary array over the batch covers at once (the blocks found slice by slice: one
#: over the whole batch was its times' size again, twice, at the writer's peak).
SLICE_ROWS = 1 << 16


class BlockLayout(NamedTuple):
    """One batch's rows laid out by (time block of :data:`BLOCK_S`, series, time), without moving
    them: the series' times (int64 milliseconds, each series sorted, stably) and values one after
    another, each series' first row (``first``), the blocks that hold rows (in order), each series'
    first row in each block (``lo``, series by block, a position in the series) and its rows there
    (``sizes``), and each block's first row in that order, with the number of rows after them
    (``starts``).

    Each series' samples are sorted by time, so a block's rows are a slice of each series, found by
    one search per series for all its blocks: the batch is never ordered as a whole (the sort's order,
    block and series arrays were 55 MB more for a family of 2.5 M samples, the peak of a 4-hour
    recording's conversion), and the rest is done over the whole batch at once, not per series."""

    times: Any
    values: Any
    first: Any
    blocks: Any
    lo: Any
    sizes: Any
    starts: list[int]

    @classmethod
    def of(cls, np: Any, series: list[RawSeries]) -> BlockLayout:
        counts = np.array([s.times.size for s in series], dtype=np.int64)
        first = np.cumsum(counts) - counts
        times = np.concatenate([s.times for s in series])  # a new array: the series' are not changed
        times *= 1000
        np.round(times, out=times)
        t = times.view(np.int64)  # milliseconds, cast in place a slice at a time (numpy copies a
        for i in range(0, t.size, SLICE_ROWS):  # slice that overlaps its target before casting it)
            t[i : i + SLICE_ROWS] = times[i : i + SLICE_ROWS]
        del times
        v = np.concatenate([s.values for s in series])
        back = np.flatnonzero(t[1:] < t[:-1]) + 1  # a row earlier than the one before it ...
        back = back[np.isin(back, first, invert=True)]  # ... of its own series
        for k in np.unique(np.searchsorted(first, back, side="right") - 1).tolist():
            a, b = int(first[k]), int(first[k] + counts[k])
            o = np.argsort(t[a:b], kind="stable")
            t[a:b], v[a:b] = t[a:b][o], v[a:b][o]
        block_ms = int(BLOCK_S * 1000)
        # The blocks that hold rows, in order (a stray stamp far away is one more, not all between).
        blocks = np.unique(
            np.concatenate(
                [np.unique(t[i : i + SLICE_ROWS] // block_ms) for i in range(0, t.size, SLICE_ROWS)]
            )
        )
        edges = np.append(blocks, blocks[-1] + 1) * block_ms  # each block's start, then the last's end
        lo_hi = _search_each(np, t, first, counts, edges)
        lo, hi = lo_hi[:, :-1], lo_hi[:, 1:]
        # A series' rows of block j end where those of the next block that holds rows begin: no row
        # lies between two such blocks (it would make one between them hold rows).
        sizes = hi - lo
        starts = np.concatenate([[0], np.cumsum(sizes.sum(axis=0))]).tolist()
        return cls(t, v, first, blocks, lo, sizes, starts)


def _search_each(np: Any, t: Any, first: Any, counts: Any, edges: Any) -> Any:
    """``searchsorted(series, edges)`` of every series of ``t`` (each sorted, one after another from
    ``first``), as positions in its series (series by edge): one search per series (offsetting
    every series into one sorted key for a single search took a key and its offsets, twice the
    batch's times, at the writer's peak)."""
    return np.stack(
        [np.searchsorted(t[a : a + c], edges) for a, c in zip(first.tolist(), counts.tolist(), strict=True)]
    )


def row_group_ranges(blocks: list[int], starts: list[int]) -> list[tuple[int, int]]:
    """Row ranges of the row groups: whole blocks, adjacent small ones merged, large ones cut.
    ``blocks``: the blocks that hold rows, in order; ``starts``: the first row of each, and the
    number of rows after them."""
    out: list[tuple[int, int]] = []
    i = 0  # the group being filled starts at block i
    for k in range(1, len(starts)):
        a, b = starts[i], starts[k]
        more = k < len(blocks) and blocks[k] - blocks[i] < GROUP_BLOCKS_MAX
        if more and blocks[k] - blocks[k - 1] == 1 and b - a < GROUP_ROWS_MIN:
            continue
        out.extend((x, min(x + ROW_GROUP_ROWS, b)) for x in range(a, b, ROW_GROUP_ROWS))
        i = k
    return out


def index_ranges(np: Any, first: Any, sizes: Any) -> Any:
    """The positions ``first[k], first[k] + 1, ..., first[k] + sizes[k] - 1`` of every k, in order."""
    total = int(sizes.sum())
    ends = np.cumsum(sizes)
    return np.repeat(first - (ends - sizes), sizes) + np.arange(total, dtype=np.int64)


def _span(groups: list[dict[str, Any]]) -> tuple[float, float]:
    """(first, last) sample time, leaving out row groups of stray stamps far from the bulk
    (:func:`~fleetscope.window.archive.format.plausible_span`)."""
    return plausible_span([g["t0"] for g in groups], [g["t1"] for g in groups], [g["rows"] for g in groups])


def convert_recording(
    path: str | Path,
    out: str | Path,
    metrics: Collection[str] | None,
    *,
    window: tuple[float, float] | None = None,
    progress: Callable[[float], None] | None = None,
    compression: str = "zstd",
) -> dict[str, int]:
    """Convert a recording family by family (bounded memory, module docstring); (rows, series,
    metrics, largest batch). ``window``: (lo, hi) seconds kept, margin included; ``compression``:
    Parquet's codec (zstd for an archive that is kept)."""
    with ArchiveWriter(
        out, contract_label_keys(metrics), source=os.fspath(path), window=window, compression=compression
    ) as w:
        write_families(w, path, metrics, window=window, progress=progress)
        stats = w.close()
    return {**stats, "largest_batch": w.largest_batch}


def write_families(
    w: RowsWriter,
    path: str | Path,
    metrics: Collection[str] | None,
    *,
    window: tuple[float, float] | None = None,
    progress: Callable[[float], None] | None = None,
) -> None:
    """The recording's families handed to ``w`` as the parser finishes them (a large one in
    batches), each let go before the next; :class:`NoData` (``w`` aborted) when none was usable."""
    from fleetscope.window.memory import release_freed
    from fleetscope.window.openmetrics import iter_openmetrics

    for name, series in iter_openmetrics(path, metrics, progress):
        w.add(name, series)
        del series
        release_freed()  # each family's batch freed, given back: memory follows the batch
    if not w.groups:
        w.abort()
        what = "samples in the requested window" if window else "usable samples"
        raise NoData(f"{path} has no {what}")


# ---------------------------------------------------------------------- sources
def export_prometheus(
    access: PrometheusAccess,
    out: str | Path,
    start: float,
    end: float,
    step: float,
    metrics: Collection[str],
    *,
    piece_s: float | None = DEFAULT_PIECE_S,
    progress: Callable[[float], None] | None = None,
) -> dict[str, int]:
    """``record --prometheus``: the window's grid values written piece by piece of ``piece_s``
    (None: one piece), holding one piece's answers at a time, so memory follows the piece, not
    the window. The pieces tile the window's grid (``start + k * step``); a piece without series
    (a gap in the store, or before the store's first sample) writes nothing, and the pieces
    skipped are said once on stderr; only a window without any series is an error
    (:class:`NoData`). The label columns are the contract's keys (other labels go to
    ``__labels__``, module docstring): the labels of later pieces are not known ahead.
    ``access``: how to reach the store (URL, timeout, SigV4, headers, answer limit)."""
    check_window(start, end, step)
    check_grid(start, end, step)
    grid = make_grid(start, end, step)
    per = len(grid) if piece_s is None else max(1, round(piece_s / step))
    pieces = [(float(grid[i]), float(grid[min(i + per, len(grid)) - 1])) for i in range(0, len(grid), per)]
    empty: list[tuple[int, float, float]] = []
    with ArchiveWriter(out, contract_label_keys(metrics), source=access.url, grid=(start, end, step)) as w:
        for k, (a, b) in enumerate(pieces):
            part = None if progress is None else _part_of(progress, k, len(pieces))
            raw = raw_from_prometheus(access, a, b, step, metrics, progress=part)
            for name, series in raw.items():
                w.add(name, series)
            if not raw:
                empty.append((k, a, b))
            del raw
        if not w.groups:
            w.abort()
            raise no_series_error(access.url, start, end)
        stats = w.close()
    if empty:
        say_skipped("pieces", empty, len(pieces))
    return stats


def _part_of(progress: Callable[[float], None], k: int, n: int) -> Callable[[float], None]:
    """The progress of piece ``k`` of ``n`` as a share of the whole."""
    return lambda f: progress((k + f) / n)
