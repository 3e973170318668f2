"""``fleetscope record``: an incident's series in one Apache Parquet file, analyzable later.

A post-mortem needs the window that held the incident long after Prometheus' retention dropped it,
and reading it back must be fast: an OpenMetrics recording is text that takes seconds per node-hour
to parse. The archive is columnar instead:

* one row per sample: ``__name__`` (the metric), one column per label key of any series
  (dictionary-encoded strings; null where a series lacks the label), ``timestamp`` (milliseconds
  since the epoch, stored as int64 with the UTC timestamp type) and ``value`` (float64);
* row groups per metric (a reader skips the metrics it does not need without reading them); rows
  sorted by series (in the order the source gave them, which the analyzers' grid placement reads)
  then by time;
* key-value metadata ``fleetscope.archive``: the format version, the source, the metric of each row
  group, its series count, and for an export from Prometheus the query grid (``start``, ``end``,
  ``step``): those values are already ``last_over_time`` grid values, which the loader must not
  look back over a second time.

It is written to a temporary name beside the target and renamed when complete, so a crash leaves no
half-written archive. ``fleetscope analyze --input X.parquet`` reads it
(:mod:`fleetscope.analyzers.load_parquet`) and gives the same findings as the recording or the
Prometheus window it came from. pyarrow is imported only here and in that loader (extra
``archive``), never by the node agent.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetscope.analyzers.cli import add_prometheus_access
from fleetscope.argtypes import positive_float
from fleetscope.errors import FleetscopeError

if TYPE_CHECKING:
    from fleetscope.analyzers.frames import RawSeries

#: Key of the archive's metadata in the Parquet file.
META_KEY = b"fleetscope.archive"
#: Version of the layout above; a reader refuses a newer one.
FORMAT_VERSION = 1
#: Fixed columns; label columns are named after their label (label names never start with ``__``,
#: and a label called ``timestamp`` or ``value`` is stored as ``__label_<name>``).
NAME_COL, TIME_COL, VALUE_COL = "__name__", "timestamp", "value"
#: With --input and --start: samples kept before the start, so the first grid times still see their
#: last sample (the lookback is two steps: this covers scrape intervals up to 5 minutes).
LOOKBACK_MARGIN_S = 600.0
#: Rows per row group at most (a metric with more spans several groups, never sharing one).
ROW_GROUP_ROWS = 4_000_000


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


def write_archive(
    raw: dict[str, list[RawSeries]],
    path: str | Path,
    *,
    source: str,
    grid: tuple[float, float, float] | None = None,
    progress: Callable[[float], None] | None = None,
) -> dict[str, int]:
    """Write ``raw`` (metric -> series, as the loaders hold them) to ``path``; (rows, series, metrics).

    ``grid``: (start, end, step) when the samples are query_range grid values (module docstring).
    """
    import numpy as np

    pa, pq = pyarrow_modules()
    path = Path(path)
    labels = sorted({k for series in raw.values() for s in series for k in s.labels})
    columns = {label_column(k): k for k in labels}
    if len(columns) != len(labels) or NAME_COL in columns:
        raise FleetscopeError("a label name clashes with the archive's own columns")
    dict_type = pa.dictionary(pa.int32(), pa.string())
    schema = pa.schema(
        [pa.field(NAME_COL, dict_type)]
        + [pa.field(col, dict_type) for col in columns]
        + [pa.field(TIME_COL, pa.timestamp("ms", tz="UTC")), pa.field(VALUE_COL, pa.float64())]
    )
    groups: list[dict[str, Any]] = []
    meta: dict[str, Any] = {"version": FORMAT_VERSION, "source": source, "row_groups": groups,
                            "labels": columns}  # fmt: skip
    if grid is not None:
        meta["grid"] = {"start": grid[0], "end": grid[1], "step": grid[2]}
    else:
        from fleetscope.analyzers.samples import typical_spacing

        meta["spacing"] = typical_spacing(raw)
    total_rows = sum(s.times.size for series in raw.values() for s in series)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    done = 0
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        writer = pq.ParquetWriter(tmp, schema, compression="zstd")
        try:
            for name, series in raw.items():
                series = [s for s in series if s.times.size]
                if not series:
                    continue
                table = _metric_table(pa, np, name, series, columns, schema)
                writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
                for _ in range(-(-table.num_rows // ROW_GROUP_ROWS)):
                    groups.append({"metric": name, "series": len(series)})
                done += table.num_rows
                if progress and total_rows:
                    progress(done / total_rows)
            writer.add_key_value_metadata({META_KEY: json.dumps(meta).encode()})
        finally:
            writer.close()
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise FleetscopeError(f"cannot write {path}: {exc.strerror or exc}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if progress:
        progress(1.0)
    return {"rows": done, "series": sum(g["series"] for g in groups), "metrics": len(raw)}


def _metric_table(pa: Any, np: Any, name: str, series: list[RawSeries], columns: dict[str, str], schema: Any):
    """One metric's rows: its series one after another, each sorted by time (stable)."""
    counts = np.array([s.times.size for s in series], dtype=np.int64)
    times, values = [], []
    for s in series:
        t = np.round(np.asarray(s.times, dtype=float) * 1000).astype(np.int64)
        order = np.argsort(t, kind="stable")
        times.append(t[order])
        values.append(np.asarray(s.values, dtype=float)[order])
    n = int(counts.sum())
    arrays = [pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, dtype=np.int32)), pa.array([name]))]
    for label in columns.values():
        vals = [s.labels.get(label) for s in series]
        uniq = sorted({v for v in vals if v is not None})
        code = {v: i for i, v in enumerate(uniq)}
        per_series = np.array([code[v] if v is not None else -1 for v in vals], dtype=np.int32)
        rows = np.repeat(per_series, counts)
        mask = rows < 0
        indices = pa.array(np.where(mask, 0, rows), mask=mask if mask.any() else None, type=pa.int32())
        arrays.append(pa.DictionaryArray.from_arrays(indices, pa.array(uniq, type=pa.string())))
    arrays.append(pa.array(np.concatenate(times), type=pa.int64()).cast(pa.timestamp("ms", tz="UTC")))
    arrays.append(pa.array(np.concatenate(values), type=pa.float64()))
    return pa.Table.from_arrays(arrays, schema=schema)


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
    concurrency), as raw series of grid values, in query order."""
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
        lp._run_concurrently(run, len(jobs), lp.DEFAULT_CONCURRENCY, progress)
    finally:
        client.close()
    raw: dict[str, list[RawSeries]] = {}
    for (name, *_), answer in zip(jobs, answers, strict=True):
        for labels, t, v in answer or []:
            raw.setdefault(name, []).append(RawSeries(labels, np.asarray(t, float), np.asarray(v, float)))
    if not raw:
        from fleetscope.times import rfc3339

        raise FleetscopeError(
            f"Prometheus at {url} has no fleetscope series between {rfc3339(start)} and {rfc3339(end)}"
        )
    return raw


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
    from fleetscope.times import parse_time

    pyarrow_modules()  # fail before any work when the extra is missing
    out = Path(args.output)
    show = args.progress if args.progress is not None else sys.stderr.isatty()
    t0 = time.monotonic()
    if args.input:
        raw, grid, source = _raw_from_file(args, None if args.all_series else LOADED, show)
    elif args.prometheus:
        region, headers = prometheus_access(args)
        start, end = parse_time(args.start or "-1h"), parse_time(args.end or "now")
        raw = raw_from_prometheus(args.prometheus, start, end, args.step, LOADED, timeout=args.timeout,
                                  sigv4_region=region, headers=headers, max_answer_bytes=args.max_answer_bytes,
                                  progress=ProgressBar("querying", show))  # fmt: skip
        grid, source = (start, end, args.step), args.prometheus
    else:
        raise FleetscopeError("give --input FILE or --prometheus URL")
    stats = write_archive(raw, out, source=source, grid=grid, progress=ProgressBar("writing", show))
    print(f"wrote {out}: {stats['rows']:,} samples of {stats['series']:,} series ({stats['metrics']} metrics), "
          f"{out.stat().st_size / 1e6:.1f} MB in {time.monotonic() - t0:.1f} s", file=sys.stderr)  # fmt: skip
    return 0


def _raw_from_file(
    args: argparse.Namespace, metrics: Sequence[str] | None, show: bool
) -> tuple[dict[str, list[RawSeries]], None, str]:
    import numpy as np

    from fleetscope.analyzers.cli import ProgressBar
    from fleetscope.analyzers.load_file import read_openmetrics
    from fleetscope.times import parse_time

    raw, _, _, _ = read_openmetrics(args.input, metrics, ProgressBar("reading", show))
    if args.start or args.end:  # keep the window, and LOOKBACK_MARGIN_S before it for the grid rule
        lo = parse_time(args.start) - LOOKBACK_MARGIN_S if args.start else -np.inf
        hi = parse_time(args.end) if args.end else np.inf
        for name in list(raw):
            for s in raw[name]:
                keep = (s.times >= lo) & (s.times <= hi)
                s.times, s.values = s.times[keep], s.values[keep]
            raw[name] = [s for s in raw[name] if s.times.size]
            if not raw[name]:
                del raw[name]
        if not raw:
            raise FleetscopeError(f"{args.input} has no samples in the requested window")
    return raw, None, os.fspath(args.input)
