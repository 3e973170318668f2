"""The spool: a recording's rows kept on disk for one streamed analysis, in the cheapest layout to
write and to read back a time span at a time.

``analyze`` streams a recording longer than two hours (``--chunk auto``); a recording is one text
whose families each span the whole window, so it is parsed once and its rows put aside, then read
back chunk by chunk. The rows were put aside as a Parquet archive (snappy) until the round trip
cost more than the 10 % that the 4-hour analysis may take beyond four 1-hour ones
(docs/benchmarks.md): ordering the rows by time block, dictionary-encoding 50 label columns per row
and Parquet's encoding, then decoding and sorting them back into series order, chunk after chunk.
The spool is private to the process (written and deleted by it, in ``$TMPDIR``, never read by
another machine), so it is plain arrays instead:

* a batch of a family (as :func:`~fleetscope.window.openmetrics.iter_openmetrics` yields them) is
  written as its series' times (milliseconds, each series sorted by time, stably) then their
  values, series after series in ``__series__`` order, as they are but narrowed where that is exact
  (:func:`_narrow`: 8 to 12 bytes a sample instead of 16);
* what the archive's footer would say (:meth:`~fleetscope.window.archive.write.RowsWriter.meta`:
  the row groups a Parquet archive of the same batches has, with their rows and [t0, t1], the span,
  the spacing and the grid's phase) and, for each of those row groups, each series' rows in it,
  stay in memory; so do the label sets (one per series, as the parser made them);
* a chunk reads the row groups whose [t0, t1] meets it, as the archive's reader does, each series'
  rows of them at once from a memory map of its batch (let go after each metric), and gets the
  same rows in the same order as the archive's reader (:meth:`Spool.read`), which then go the
  same way onto the grid (:func:`~fleetscope.window.archive.read.frames_of_reads`): the frames,
  and so the report, are those of the archive.
"""

from __future__ import annotations

import bisect
import json
import os
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from itertools import groupby
from pathlib import Path
from typing import Any

import numpy as np

from fleetscope.errors import FleetscopeError, NoData
from fleetscope.window.archive.format import (
    EXTRA_COL,
    MAX_READ_ROWS,
    MAX_READ_SERIES,
    contract_label_keys,
    plausible_span,
)
from fleetscope.window.archive.read import (
    ArchiveSpan,
    Arranged,
    MetricRows,
    frames_of_reads,
    grid_start_of_meta,
    groups_by_metric,
    groups_meeting,
    row_range,
    span_of_meta,
)
from fleetscope.window.archive.write import (
    BlockLayout,
    RowsWriter,
    index_ranges,
    row_group_ranges,
    write_families,
)
from fleetscope.window.frames import Frames, RawSeries, check_grid, check_window, lookback_seconds
from fleetscope.window.memory import collector_paused


@dataclass
class _Batch:
    """One batch's rows in the spool file: ``n`` times at ``offset`` (milliseconds after ``base``,
    as ``times``), then ``n`` values (as ``values``); its series' numbers (``sid``, ascending)."""

    offset: int
    n: int
    sid: np.ndarray
    base: int
    times: np.dtype
    values: np.dtype

    def read(self, path: Path, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The times (int64 milliseconds) and values (float64) of the batch's rows ``idx``, from a
        memory map of the batch let go before returning (its pages leave the process)."""
        mapped = np.memmap(path, self.times, "r", offset=self.offset, shape=(self.n,))
        tms = mapped[idx].astype(np.int64)
        tms += self.base
        at = self.offset + self.n * self.times.itemsize
        mapped = np.memmap(path, self.values, "r", offset=at, shape=(self.n,))
        values = mapped[idx].astype(np.float64)
        del mapped
        return tms, values


def _narrow(t: np.ndarray, v: np.ndarray) -> tuple[int, np.ndarray, np.ndarray]:
    """A batch's times and values as they are spooled: times as int32 milliseconds after the
    first where they fit (24 days), values as float32 where every one is exactly that (counts,
    percentages, temperatures and clocks are: 63 % of a simulated 64-node hour's samples); both
    read back exactly (the writer left out non-finite values)."""
    base = int(t.min())
    if int(t.max()) - base < 2**31:
        t = (t - base).astype(np.int32)
    else:
        base = 0
    v32 = v.astype(np.float32)
    if np.array_equal(v32, v):
        v = v32
    return base, t, v


@dataclass
class _Group:
    """A row group (as a Parquet archive of the same batches has it): its batch, and each series'
    rows in it, [``lo``, ``hi``) as positions in the batch."""

    batch: int
    lo: np.ndarray
    hi: np.ndarray


@dataclass
class _Labels:
    """One metric's label sets by series number, and (once all are written) per label column each
    series' code and the words: what the archive's reader takes from its label columns."""

    sets: dict[int, dict[str, str]] = field(default_factory=dict)
    columns: list[tuple[str, np.ndarray, list[str]]] | None = None


class SpoolWriter(RowsWriter):
    """Writes a spool batch by batch (:meth:`add`), then :meth:`close` gives the :class:`Spool`.
    Use it as a context manager: an error removes the file, and an OS error is one line."""

    def __init__(self, path: str | Path, labels: Collection[str], *, source: str) -> None:
        super().__init__(path, labels, source=source)
        self.batches: list[_Batch] = []
        self.parts: list[_Group] = []
        self.label_sets: dict[str, _Labels] = {}
        self.offset = 0
        try:
            self.fh = open(self.path, "wb")  # noqa: SIM115 -- closed by close or abort
        except OSError as exc:
            raise FleetscopeError(f"cannot write {self.path}: {exc.strerror or exc}") from None

    def abort(self) -> None:
        self.fh.close()
        self.path.unlink(missing_ok=True)

    def _write_metric(self, np: Any, name: str, series: list[RawSeries], sid: Any) -> None:
        """The batch's series one after another, and its row groups' rows per series (module
        docstring); each series' label set kept, the first one met."""
        layout = BlockLayout.of(np, series)
        first = layout.first  # each series' first row in the batch
        t, v = layout.times, layout.values.astype(np.float64, copy=False)
        n = int(t.size)
        base, t_out, v_out = _narrow(t, v)
        del v
        self.fh.write(t_out.data)
        self.fh.write(v_out.data)
        batch = _Batch(self.offset, n, np.asarray(sid, dtype=np.int64), base, t_out.dtype, v_out.dtype)
        self.batches.append(batch)
        self.offset += t_out.nbytes + v_out.nbytes
        del t_out, v_out
        lo, per_block, starts = layout.lo, layout.sizes, layout.starts
        # A piece's place in (block, series, time) order: block j's first row, then the series before.
        at = np.asarray(starts[:-1], dtype=np.int64)[None, :] + np.cumsum(per_block, axis=0) - per_block
        for a, b in row_group_ranges(layout.blocks.tolist(), starts):
            ka, kb = bisect.bisect_right(starts, a) - 1, bisect.bisect_left(starts, b) - 1
            g_lo = first + lo[:, ka] + np.clip(a - at[:, ka], 0, per_block[:, ka])
            g_hi = first + lo[:, kb] + np.clip(b - at[:, kb], 0, per_block[:, kb])
            g_hi = np.maximum(g_hi, g_lo)
            held = g_hi > g_lo
            self.parts.append(_Group(len(self.batches) - 1, g_lo, g_hi))
            self.groups.append(
                {
                    "metric": name,
                    "series": int(held.sum()),
                    "rows": b - a,
                    "t0": int(t[g_lo[held]].min()) / 1000.0,
                    "t1": int(t[g_hi[held] - 1].max()) / 1000.0,
                }
            )
        self.rows += n
        sets = self.label_sets.setdefault(name, _Labels()).sets
        for k, s in enumerate(series):
            sets.setdefault(int(sid[k]), s.labels)

    def close(self) -> Spool:
        """The spool, ready to read (its file complete)."""
        if not self.groups:
            self.abort()
            raise FleetscopeError(f"nothing to write to {self.path}: no samples")
        try:
            self.fh.close()
        except OSError as exc:
            self.path.unlink(missing_ok=True)
            raise FleetscopeError(f"cannot write {self.path}: {exc.strerror or exc}") from None
        meta = self.meta()
        for name, labels in self.label_sets.items():
            labels.columns = self._columns(meta["metrics"][name]["columns"], labels.sets)
            labels.sets = {}
        return Spool(self.path, meta, self.batches, self.parts, self.label_sets)

    def _columns(
        self, columns: list[str], sets: dict[int, dict[str, str]]
    ) -> list[tuple[str, np.ndarray, list[str]]]:
        """Each label column's per-series codes (-1: none) and words, as the archive's writer
        spreads a label set over its columns and ``__labels__``."""
        n = max(sets) + 1
        out = []
        for col in columns:
            vals: list[str | None] = [None] * n
            for k, labels in sets.items():
                if col == EXTRA_COL:
                    extra = {a: b for a, b in labels.items() if a not in self.by_label}
                    if extra:
                        vals[k] = json.dumps(extra, sort_keys=True, separators=(",", ":"))
                else:
                    vals[k] = labels.get(self.columns[col])
            words = sorted({x for x in vals if x is not None})
            code = {x: i for i, x in enumerate(words)}
            out.append((col, np.array([-1 if x is None else code[x] for x in vals], dtype=np.int64), words))
        return out


class Spool:
    """A written spool (:class:`SpoolWriter`): read a time span at a time (:meth:`load`)."""

    def __init__(
        self,
        path: Path,
        meta: dict[str, Any],
        batches: list[_Batch],
        groups: list[_Group],
        labels: dict[str, _Labels],
    ) -> None:
        self.path, self.meta, self.batches, self.groups, self.labels = path, meta, batches, groups, labels

    def span(self) -> ArchiveSpan:
        """As :func:`~fleetscope.window.archive.read.archive_span` says of the archive."""
        groups = self.meta["row_groups"]
        first, last = min(g["t0"] for g in groups), max(g["t1"] for g in groups)
        return span_of_meta(self.path, self.meta, first, last, lambda: self._plausible(groups))

    def recorded_grid_start(self, step: float | None) -> float | None:
        """As :func:`~fleetscope.window.archive.read.recorded_grid_start` says of the archive."""
        return grid_start_of_meta(self.meta, step)

    def load(
        self,
        metrics: Collection[str] | None,
        step: float | None = None,
        start: float | None = None,
        end: float | None = None,
    ) -> Frames:
        """As :func:`~fleetscope.window.archive.read.load_parquet` loads the archive."""
        source = os.fspath(self.path)
        window = (start, end, step)
        known = None
        if start is not None and end is not None and step is not None:
            check_window(start, end, step)
            known = (start, end, step, lookback_seconds(step))
        return frames_of_reads(
            self.meta,
            self.read(metrics, window),
            lambda: self.read(metrics, window),
            known,
            (step, start, end),
            source,
        )

    def read(
        self, metrics: Collection[str] | None, window: tuple[float | None, float | None, float | None]
    ) -> Iterator[tuple[str, MetricRows]]:
        """Each metric's rows in ``window`` (start, end, step as asked for), as the archive's reader
        gives them (:class:`~fleetscope.window.archive.read.MetricRows`); the same checks of the
        window's size before."""
        meta = self.meta
        rows = row_range(meta, window)
        by_metric = groups_meeting(meta, groups_by_metric(self.path, meta, metrics), rows)
        self._check_size(by_metric, window)
        return self._each(by_metric, rows)

    def _each(
        self, by_metric: dict[str, list[int]], rows: tuple[float, float] | None
    ) -> Iterator[tuple[str, MetricRows]]:
        any_read = False
        for name, ids in by_metric.items():
            got = self._metric(name, ids, rows)
            if got is not None:
                any_read = True
                yield name, got
        if not any_read:
            if rows is not None:
                raise NoData(f"{self.path} has no samples in the requested window")
            raise FleetscopeError(f"{self.path} holds none of the series the analyzers read")

    def _metric(self, name: str, ids: list[int], rows: tuple[float, float] | None) -> MetricRows | None:
        """One metric's rows of row groups ``ids``: per batch, each series' rows of those groups
        (in group order), series after series; batch after batch."""
        sids, tms, values = [], [], []
        for b, group_ids in groupby(ids, key=lambda i: self.groups[i].batch):
            parts = [self.groups[i] for i in group_ids]
            lo = np.stack([p.lo for p in parts], axis=1).ravel()  # series by group, series-major
            sizes = np.stack([p.hi - p.lo for p in parts], axis=1)
            idx = index_ranges(np, lo, sizes.ravel())
            batch = self.batches[b]
            sids.append(np.repeat(batch.sid, sizes.sum(axis=1)))
            t, v = batch.read(self.path, idx)
            tms.append(t)
            values.append(v)
            del idx, t, v
        one = len(sids) == 1
        arranged = Arranged.of(
            sids[0] if one else np.concatenate(sids),
            tms[0] if one else np.concatenate(tms),
            values[0] if one else np.concatenate(values),
            rows,
            maybe_ordered=one,
        )
        del sids, tms, values
        if arranged is None:
            return None
        labels = self.labels[name].columns or []
        names: dict[str, str] = self.meta.get("labels") or {}
        lab = []
        for col, codes, words in labels:
            mine = codes[arranged.sids]
            if (mine < 0).all():
                continue
            lab.append((col if col == EXTRA_COL else names.get(col, col), mine, words))
        return MetricRows(arranged.series, arranged.tms, arranged.values, arranged.starts, lab)

    def _check_size(
        self, by_metric: dict[str, list[int]], window: tuple[float | None, float | None, float | None]
    ) -> None:
        """The archive reader's checks of what a read takes (rows, series, the grid)."""
        groups, info = self.meta["row_groups"], self.meta["metrics"]
        series = sum(info[name]["series"] for name in by_metric)
        ids = [i for ids in by_metric.values() for i in ids]
        rows = sum(groups[i]["rows"] for i in ids)
        if rows > MAX_READ_ROWS or series > MAX_READ_SERIES:
            raise FleetscopeError(
                f"{self.path}: the window holds {rows:,} rows of {series:,} series, over the limit of "
                f"{MAX_READ_ROWS:,} rows and {MAX_READ_SERIES:,} series read at once; narrow it with "
                "--start/--end or stream it (analyze --chunk 1h)"
            )
        if not ids:
            return
        lo, hi = self._plausible([groups[i] for i in ids])
        start, end, step = window
        step = step or self._step()
        check_grid(lo if start is None else start, hi if end is None else end, float(step), series)

    def _step(self) -> float:
        from fleetscope.window.grid import round_step

        return round_step(float(self.meta["spacing"]))

    @staticmethod
    def _plausible(groups: list[dict[str, Any]]) -> tuple[float, float]:
        t0, t1 = [g["t0"] for g in groups], [g["t1"] for g in groups]
        return plausible_span(t0, t1, [g["rows"] for g in groups])


def spool_recording(
    path: str | Path,
    out: str | Path,
    metrics: Collection[str] | None,
    progress: Callable[[float], None] | None = None,
) -> Spool:
    """The recording at ``path`` parsed once and spooled to ``out`` (family by family)."""
    with collector_paused(), SpoolWriter(out, contract_label_keys(metrics), source=os.fspath(path)) as w:
        write_families(w, path, metrics, progress=progress)
        return w.close()
