"""``fleetscope record``: an incident's series in one Apache Parquet file, analyzable later.

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
(:func:`~fleetscope.analyzers.load_file.iter_openmetrics`, so memory follows the batch, not the
file): the label keys of families not yet parsed are unknown then. The columns are therefore the keys the contract declares for the metrics recorded
(plus the MIG, attribution and scrape labels); any other label goes, per series, into
``__labels__``. ``record --prometheus`` writes the window an hour at a time (``--chunk``, so
memory follows the piece, not the window), with the same columns for the same reason. Either
way the reader gives back the same labels.

It is written to a temporary name beside the target and renamed when complete, so a crash leaves no
half-written archive. ``fleetscope analyze --input X.parquet`` reads it
(:mod:`fleetscope.analyzers.load_parquet`) and gives the same findings as the recording or the
Prometheus window it came from. pyarrow is imported only here and in that loader (extra
``archive``), never by the node agent.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetscope.analyzers.cli import add_prometheus_access
from fleetscope.argtypes import positive_float
from fleetscope.errors import FleetscopeError

if TYPE_CHECKING:
    from fleetscope.analyzers.frames import RawSeries

log = logging.getLogger(__name__)

#: Key of the archive's metadata in the Parquet file.
META_KEY = b"fleetscope.archive"
#: Version of the layout above; a reader refuses a newer one.
FORMAT_VERSION = 2
#: Fixed columns; label columns are named after their label (label names never start with ``__``,
#: and a label called ``timestamp`` or ``value`` is stored as ``__label_<name>``).
NAME_COL, TIME_COL, VALUE_COL = "__name__", "timestamp", "value"
#: Format 2: the series' place in its metric, and its labels that have no column of their own.
SERIES_COL, EXTRA_COL = "__series__", "__labels__"
#: With --input and --start: samples kept before the start, so the first grid times still see their
#: last sample (the lookback is two steps: this covers scrape intervals up to 5 minutes).
LOOKBACK_MARGIN_S = 600.0
#: Rows per row group at most (a block with more is cut; a group never holds two metrics).
ROW_GROUP_ROWS = 4_000_000
#: Time blocks (seconds, from the epoch): the unit a time-sliced read skips by.
BLOCK_S = 900.0
#: Adjacent blocks of one metric are merged into one row group until it holds this many rows (a
#: metric of a few series would otherwise make thousands of tiny groups and a large footer) or
#: spans :data:`GROUP_BLOCKS_MAX` blocks (so a slice of an hour never reads more than about two).
GROUP_ROWS_MIN = 50_000
GROUP_BLOCKS_MAX = 2
#: ``record --prometheus``: the window is exported in pieces of this many seconds (``--chunk``).
DEFAULT_PIECE_S = 3600.0


def pyarrow_modules() -> tuple[Any, Any]:
    """(pyarrow, pyarrow.parquet), or one clear error naming the extra that provides them."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ModuleNotFoundError:
        raise FleetscopeError("Parquet archives need pyarrow: pip install 'fleetscope[archive]'") from None
    return pa, pq


def label_column(label: str) -> str:
    return f"__label_{label}" if label in (TIME_COL, VALUE_COL) else label


def contract_label_keys(metrics: Collection[str] | None) -> list[str]:
    """The label keys the contract declares for ``metrics`` (every metric when None), with the
    MIG, attribution and scrape labels that may follow them."""
    from fleetscope import contract
    from fleetscope.analyzers.frames import SCRAPE_LABELS

    known = contract.METRICS
    names = known if metrics is None else [m for m in metrics if m in known]
    keys = {k for m in names for k in known[m].labels}
    keys |= {*contract.GPU_MIG_LABELS, *contract.GPU_ATTRIBUTION_LABELS, *SCRAPE_LABELS}
    return sorted(keys)


class ArchiveWriter:
    """Writes a format-2 archive metric batch by metric batch (:meth:`add`), then :meth:`close`.

    ``labels``: the label keys that get a column (module docstring); others go to ``__labels__``.
    ``window``: (lo, hi) seconds; samples outside are left out. Use it as a context manager: an
    error leaves nothing behind (the temporary file is removed) and an OS error is one line.
    """

    def __init__(self, path: str | Path, labels: Iterable[str], *, source: str,
                 grid: tuple[float, float, float] | None = None,
                 window: tuple[float, float] | None = None) -> None:  # fmt: skip
        pa, pq = pyarrow_modules()
        self.pa, self.path = pa, Path(path)
        columns = {label_column(k): k for k in sorted(set(labels))}
        if len(columns) != len(set(labels)) or {NAME_COL, SERIES_COL, EXTRA_COL} & set(columns):
            raise FleetscopeError("a label name clashes with the archive's own columns")
        self.columns = columns
        self.by_label = {k: c for c, k in columns.items()}
        self.dict_type = pa.dictionary(pa.int32(), pa.string())
        self.schema = pa.schema(
            [pa.field(NAME_COL, self.dict_type)]
            + [pa.field(col, self.dict_type) for col in columns]
            + [pa.field(EXTRA_COL, self.dict_type), pa.field(SERIES_COL, pa.int32()),
               pa.field(TIME_COL, pa.timestamp("ms", tz="UTC")), pa.field(VALUE_COL, pa.float64())]
        )  # fmt: skip
        self.groups: list[dict[str, Any]] = []
        self.metrics: dict[str, dict[str, Any]] = {}
        self.ids: dict[str, dict[tuple, int]] = {}  # metric -> label set -> its __series__
        self.spacings: list[float] = []  # of the first 200 series (samples.typical_spacing)
        self.source, self.grid, self.window = source, grid, window
        self.rows = 0
        self.skipped = 0  # samples with a non-finite time or value (no exporter writes them)
        self.largest_batch = 0  # rows of the largest batch handed to add (tests: memory follows it)
        self.tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.writer = pq.ParquetWriter(self.tmp, self.schema, compression="zstd",
                                           write_statistics=[TIME_COL, SERIES_COL])  # fmt: skip
        except OSError as exc:
            raise FleetscopeError(f"cannot write {self.path}: {exc.strerror or exc}") from None

    def __enter__(self) -> ArchiveWriter:
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        if kind is None:
            return
        self.abort()
        if isinstance(exc, OSError):
            raise FleetscopeError(f"cannot write {self.path}: {exc.strerror or exc}") from None

    def abort(self) -> None:
        try:
            self.writer.close()
        except Exception:  # noqa: BLE001 -- the file is removed either way
            pass
        self.tmp.unlink(missing_ok=True)

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
            if len(self.spacings) < 200 and s.times.size > 1:
                d = np.diff(np.unique(s.times))
                if d.size:
                    self.spacings.append(float(np.median(d)))
        order = sorted(range(len(kept)), key=sid.__getitem__)  # stable: by __series__
        kept, sid = [kept[k] for k in order], [sid[k] for k in order]
        self._write_metric(np, name, kept, np.array(sid, dtype=np.int32))
        info = self.metrics.setdefault(name, {"series": 0, "columns": []})
        info["series"] = len(ids)
        present = {self.by_label.get(k, EXTRA_COL) for s in kept for k in s.labels}
        info["columns"] = sorted(set(info["columns"]) | present)

    def _clean(self, np: Any, s: RawSeries) -> RawSeries:
        from fleetscope.analyzers.frames import RawSeries

        t, v = np.asarray(s.times, dtype=float), np.asarray(s.values, dtype=float)
        keep = np.isfinite(t) & np.isfinite(v)
        if self.window is not None:
            keep &= (t >= self.window[0]) & (t <= self.window[1])
        if keep.all():
            return RawSeries(s.labels, t, v)
        self.skipped += int((~(np.isfinite(t) & np.isfinite(v))).sum())
        return RawSeries(s.labels, t[keep], v[keep])

    def _write_metric(self, np: Any, name: str, series: list[RawSeries], sid: Any) -> None:
        """One batch's rows ordered by (time block, series, time), cut into row groups."""
        times, values = [], []
        for s in series:
            t = np.round(s.times * 1000).astype(np.int64)
            v = s.values
            if t.size > 1 and (np.diff(t) < 0).any():
                o = np.argsort(t, kind="stable")
                t, v = t[o], v[o]
            times.append(t)
            values.append(v)
        counts = np.array([t.size for t in times], dtype=np.int64)
        t = np.concatenate(times)
        v = np.concatenate(values)
        del times, values
        local = np.repeat(np.arange(len(series), dtype=np.int32), counts)
        block = t // int(BLOCK_S * 1000)
        block -= block.min()
        if block.max() < 1 << 16:
            block = block.astype(np.uint16)  # a stable sort of 16-bit keys is a radix sort
        order = np.argsort(block, kind="stable")  # (series, time) order kept within a block
        block = block[order]
        cuts = np.flatnonzero(block[1:] != block[:-1]) + 1
        codes = self._label_codes(np, series)
        for a, b in _groups(np, block, cuts):
            idx = order[a:b]
            self._write_group(np, name, idx, t, v, local, sid, codes)

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

    def _write_group(self, np: Any, name: str, idx: Any, t: Any, v: Any, local: Any, sid: Any,
                     codes: list[tuple[str, Any, Any]]) -> None:  # fmt: skip
        pa = self.pa
        n = int(idx.size)
        rows_local = local[idx]
        arrays: dict[str, Any] = {
            NAME_COL: pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), pa.array([name]))
        }
        for col, per_series, words in codes:
            rows = per_series[rows_local]
            mask = rows < 0
            indices = pa.array(np.where(mask, 0, rows), mask=mask if mask.any() else None, type=pa.int32())
            arrays[col] = pa.DictionaryArray.from_arrays(indices, words)
        tg = t[idx]
        arrays[SERIES_COL] = pa.array(sid[rows_local], type=pa.int32())
        arrays[TIME_COL] = pa.array(tg, type=pa.int64()).cast(pa.timestamp("ms", tz="UTC"))
        arrays[VALUE_COL] = pa.array(v[idx], type=pa.float64())
        cols = [arrays.get(f.name) if f.name in arrays else pa.nulls(n, f.type) for f in self.schema]
        self.writer.write_table(pa.Table.from_arrays(cols, schema=self.schema), row_group_size=n)
        self.groups.append({"metric": name, "series": int(np.unique(rows_local).size), "rows": n,
                            "t0": int(tg.min()) / 1000.0, "t1": int(tg.max()) / 1000.0})  # fmt: skip
        self.rows += n

    def close(self) -> dict[str, int]:
        """Write the metadata, close, rename into place; (rows, series, metrics)."""
        if not self.groups:
            self.abort()
            raise FleetscopeError(f"nothing to write to {self.path}: no samples")
        meta: dict[str, Any] = {"version": FORMAT_VERSION, "source": self.source, "row_groups": self.groups,
                                "metrics": self.metrics, "labels": self.columns, "extra_labels": EXTRA_COL,
                                "block_s": BLOCK_S, "span": list(_span(self.groups))}  # fmt: skip
        if self.grid is not None:
            meta["grid"] = {"start": self.grid[0], "end": self.grid[1], "step": self.grid[2]}
        else:
            import numpy as np

            meta["spacing"] = float(np.median(self.spacings)) if self.spacings else 15.0
        try:
            self.writer.add_key_value_metadata({META_KEY: json.dumps(meta).encode()})
            self.writer.close()
            os.replace(self.tmp, self.path)
        except OSError as exc:
            self.tmp.unlink(missing_ok=True)
            raise FleetscopeError(f"cannot write {self.path}: {exc.strerror or exc}") from None
        if self.skipped:
            log.warning("%s: skipped %s samples with a NaN or infinite value or time", self.source,
                        f"{self.skipped:,}")  # fmt: skip
        series = sum(m["series"] for m in self.metrics.values())
        return {"rows": self.rows, "series": series, "metrics": len(self.metrics)}


def _groups(np: Any, block: Any, cuts: Any) -> list[tuple[int, int]]:
    """Row ranges of the row groups: whole blocks, adjacent small ones merged, large ones cut."""
    bounds = [0, *cuts.tolist(), int(block.size)]
    out: list[tuple[int, int]] = []
    a = 0
    for k in range(1, len(bounds)):
        b = bounds[k]
        more = k + 1 < len(bounds) and int(block[b]) - int(block[a]) < GROUP_BLOCKS_MAX
        if more and int(block[b]) - int(block[b - 1]) == 1 and b - a < GROUP_ROWS_MIN:
            continue
        out.extend((x, min(x + ROW_GROUP_ROWS, b)) for x in range(a, b, ROW_GROUP_ROWS))
        a = b
    return out


def _span(groups: list[dict[str, Any]]) -> tuple[float, float]:
    """(first, last) sample time, leaving out row groups of stray stamps far from the bulk (the
    rule of frames.drop_bad_samples, at row-group resolution: 1st-99th percentile of the rows)."""
    import numpy as np

    from fleetscope.analyzers.frames import PLAUSIBLE_MARGIN_S

    t0 = np.array([g["t0"] for g in groups])
    t1 = np.array([g["t1"] for g in groups])
    rows = np.array([g["rows"] for g in groups], dtype=float)
    mid = (t0 + t1) / 2
    o = np.argsort(mid)
    cum = np.cumsum(rows[o]) / rows.sum()
    lo = mid[o][np.searchsorted(cum, 0.01)] - PLAUSIBLE_MARGIN_S
    hi = mid[o][min(np.searchsorted(cum, 0.99), len(o) - 1)] + PLAUSIBLE_MARGIN_S
    ok = (t1 >= lo) & (t0 <= hi)
    return float(t0[ok].min()), float(t1[ok].max())


def convert_recording(
    path: str | Path,
    out: str | Path,
    metrics: Collection[str] | None,
    *,
    window: tuple[float, float] | None = None,
    progress: Callable[[float], None] | None = None,
) -> dict[str, int]:
    """Convert a recording family by family (bounded memory, module docstring); (rows, series,
    metrics, largest batch). ``window``: (lo, hi) seconds kept, margin included."""
    from fleetscope.analyzers.load_file import iter_openmetrics

    with ArchiveWriter(out, contract_label_keys(metrics), source=os.fspath(path), window=window) as w:
        for name, series in iter_openmetrics(path, metrics, progress):
            w.add(name, series)
        if not w.groups:
            w.abort()
            what = "samples in the requested window" if window else "usable samples"
            raise FleetscopeError(f"{path} has no {what}")
        stats = w.close()
    return {**stats, "largest_batch": w.largest_batch}


# ---------------------------------------------------------------------- sources
def raw_from_prometheus(
    url: str,
    start: float,
    end: float,
    step: float,
    metrics: Collection[str],
    *,
    timeout: float = 30.0,
    sigv4_region: str | None = None,
    headers: dict[str, str] | None = None,
    max_answer_bytes: int | None = None,
    progress: Callable[[float], None] | None = None,
) -> dict[str, list[RawSeries]]:
    """The range-query answers ``load_prometheus`` fetches for ``metrics`` (same queries, chunks and
    concurrency), as raw series of grid values, in query order (empty when there are none)."""
    import numpy as np

    from fleetscope.analyzers import load_prometheus as lp
    from fleetscope.analyzers.frames import RawSeries, check_grid, lookback_seconds, make_grid

    if end < start:
        raise FleetscopeError("the window ends before it starts")
    check_grid(start, end, step)
    client = lp.PrometheusClient(url, timeout, sigv4_region, headers,
                                 max_answer_bytes or lp.DEFAULT_MAX_ANSWER_BYTES)  # fmt: skip
    grid = make_grid(start, end, step)
    lb = lookback_seconds(step)
    chunks = [grid[i : i + lp.MAX_POINTS] for i in range(0, len(grid), lp.MAX_POINTS)]
    names = list(dict.fromkeys(metrics))
    jobs = [(name, lp.metric_query(name, lb), float(ch[0]), float(ch[-1])) for name in names for ch in chunks]
    answers: list[list[lp.Series] | None] = [None] * len(jobs)

    def run(k: int) -> int:
        _, query, a, b = jobs[k]
        answers[k] = client.query_range(query, a, b, step)
        return k

    try:
        lp.run_concurrently(run, len(jobs), lp.DEFAULT_CONCURRENCY, progress)
    finally:
        client.close()
    raw: dict[str, list[RawSeries]] = {}
    for (name, *_), answer in zip(jobs, answers, strict=True):
        for labels, t, v in answer or []:
            raw.setdefault(name, []).append(RawSeries(labels, np.asarray(t, float), np.asarray(v, float)))
    return raw


def export_prometheus(
    url: str,
    out: str | Path,
    start: float,
    end: float,
    step: float,
    metrics: Collection[str],
    *,
    piece_s: float | None = DEFAULT_PIECE_S,
    progress: Callable[[float], None] | None = None,
    **access: Any,
) -> dict[str, int]:
    """``record --prometheus``: the window's grid values written piece by piece of ``piece_s``
    (None: one piece), holding one piece's answers at a time, so memory follows the piece, not
    the window. The pieces tile the window's grid (``start + k * step``); a piece without series
    (a gap in the store) writes nothing. The label columns are the contract's keys (other labels
    go to ``__labels__``, module docstring): the labels of later pieces are not known ahead.
    ``access``: :func:`raw_from_prometheus`' keywords (timeout, SigV4, headers, answer limit)."""
    from fleetscope.analyzers.frames import check_grid, make_grid
    from fleetscope.times import rfc3339

    if end < start:
        raise FleetscopeError("the window ends before it starts")
    check_grid(start, end, step)
    grid = make_grid(start, end, step)
    per = len(grid) if piece_s is None else max(1, round(piece_s / step))
    pieces = [(float(grid[i]), float(grid[min(i + per, len(grid)) - 1])) for i in range(0, len(grid), per)]
    with ArchiveWriter(out, contract_label_keys(metrics), source=url, grid=(start, end, step)) as w:
        for k, (a, b) in enumerate(pieces):
            part = None if progress is None else _part_of(progress, k, len(pieces))
            raw = raw_from_prometheus(url, a, b, step, metrics, progress=part, **access)
            for name, series in raw.items():
                w.add(name, series)
            del raw
        if not w.groups:
            w.abort()
            raise FleetscopeError(
                f"Prometheus at {url} has no fleetscope series between {rfc3339(start)} and {rfc3339(end)}"
            )
        return w.close()


def _part_of(progress: Callable[[float], None], k: int, n: int) -> Callable[[float], None]:
    """The progress of piece ``k`` of ``n`` as a share of the whole."""
    return lambda f: progress((k + f) / n)


# ---------------------------------------------------------------------- the subcommand
def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (
        "Export a window from a Prometheus-compatible API, or convert a recorded OpenMetrics file, into "
        "one Parquet archive that `fleetscope analyze --input` reads."
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--input", "-i", metavar="FILE", help="recorded OpenMetrics file (gzip allowed)")
    src.add_argument("--prometheus", metavar="URL", help="Prometheus-compatible API base URL")
    p.add_argument("--output", "-o", required=True, metavar="FILE.parquet", help="the archive to write")
    p.add_argument("--start", help="window start: RFC 3339, Unix seconds, or relative (--start=-6h); default -1h "
                   "(with --input: the file's first sample)")  # fmt: skip
    p.add_argument("--end", help="window end (default now; with --input: the file's last sample)")
    p.add_argument("--step", type=positive_float, default=15.0,
                   help="--prometheus: grid step in seconds (default 15)")  # fmt: skip
    p.add_argument("--chunk", metavar="DURATION", default="1h",
                   help="--prometheus: export the window in pieces of this length, holding one at a time "
                        "(default 1h; 'off': one piece)")  # fmt: skip
    p.add_argument("--all-series", action="store_true",
                   help="--input: keep every series of the file, not only those the analyzers read")  # fmt: skip
    p.add_argument("--timeout", type=positive_float, default=30.0,
                   help="seconds each Prometheus request may take, whole answer included (default 30)")  # fmt: skip
    add_prometheus_access(p)
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="show a progress bar on stderr (default: when stderr is a terminal)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from fleetscope.analyzers.cli import ProgressBar, prometheus_access
    from fleetscope.analyzers.core import LOADED
    from fleetscope.times import parse_duration, parse_time

    pyarrow_modules()  # fail before any work when the extra is missing
    out = Path(args.output)
    show = args.progress if args.progress is not None else sys.stderr.isatty()
    t0 = time.monotonic()
    if args.input:
        stats = convert_recording(args.input, out, None if args.all_series else LOADED, window=_window(args),
                            progress=ProgressBar("recording", show))  # fmt: skip
    elif args.prometheus:
        region, headers = prometheus_access(args)
        start, end = parse_time(args.start or "-1h"), parse_time(args.end or "now")
        piece = None if args.chunk == "off" else parse_duration(args.chunk)
        if piece is not None and piece <= 0:
            raise FleetscopeError(f"--chunk {args.chunk}: give a duration such as 1h, or off")
        stats = export_prometheus(args.prometheus, out, start, end, args.step, LOADED, piece_s=piece,
                                  progress=ProgressBar("exporting", show), timeout=args.timeout,
                                  sigv4_region=region, headers=headers,
                                  max_answer_bytes=args.max_answer_bytes)  # fmt: skip
    else:
        raise FleetscopeError("give --input FILE or --prometheus URL")
    print(f"wrote {out}: {stats['rows']:,} samples of {stats['series']:,} series ({stats['metrics']} metrics), "
          f"{out.stat().st_size / 1e6:.1f} MB in {time.monotonic() - t0:.1f} s", file=sys.stderr)  # fmt: skip
    return 0


def _window(args: argparse.Namespace) -> tuple[float, float] | None:
    """--start/--end of ``record --input``: the samples kept, with LOOKBACK_MARGIN_S before the
    start for the grid rule (None: all)."""
    from fleetscope.times import parse_time

    if not (args.start or args.end):
        return None
    lo = parse_time(args.start) - LOOKBACK_MARGIN_S if args.start else float("-inf")
    hi = parse_time(args.end) if args.end else float("inf")
    return lo, hi
