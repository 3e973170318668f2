"""Load a Parquet archive written by ``fleetscope record`` (:mod:`fleetscope.archive`) into frames.

Only the row groups of the metrics asked for are read (each row group holds one metric). A metric's
rows are its series one after another, so a series ends where any label column changes; each becomes
one :class:`~fleetscope.analyzers.frames.RawSeries`, in the archive's order, and from there the
archive goes through exactly what a recording goes through (:func:`samples.summarize` and
:func:`samples.frames_from_raw`): the same samples give the same grid and the same findings. An
export from Prometheus holds grid values already; it is put back on its own grid without a second
lookback, as :func:`~fleetscope.analyzers.load_prometheus.load_prometheus` does.

The grid's size is checked (:func:`~fleetscope.analyzers.frames.check_grid`) from the archive's
metadata before any sample is read, so a window too large for the machine is one clear error naming
the flags that make it fit, not an exhausted machine.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

import numpy as np

from fleetscope.analyzers.frames import Frames, RawSeries, build_frames, check_grid
from fleetscope.analyzers.grid import round_step
from fleetscope.analyzers.samples import frames_from_raw, summarize
from fleetscope.archive import FORMAT_VERSION, META_KEY, NAME_COL, TIME_COL, VALUE_COL, pyarrow_modules
from fleetscope.errors import FleetscopeError

#: The first bytes (and the last) of every Parquet file.
MAGIC = b"PAR1"


def is_parquet(path: str | Path) -> bool:
    """Whether ``path`` is a Parquet file (by its magic bytes; by its suffix when it cannot be read)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == MAGIC
    except OSError:
        return str(path).endswith(".parquet")


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
        raise FleetscopeError(f"{path} is archive format {meta['version']}; this fleetscope reads up to "
                              f"{FORMAT_VERSION}: upgrade fleetscope")  # fmt: skip
    groups = meta.get("row_groups")
    if not isinstance(groups, list) or len(groups) != pf.metadata.num_row_groups:
        raise FleetscopeError(f"{path}: the archive's metadata does not match its row groups")
    return pf, meta


def read_archive(
    path: str | Path,
    metrics: Collection[str] | None = None,
    progress: Callable[[float], None] | None = None,
    window: tuple[float | None, float | None, float | None] = (None, None, None),
) -> tuple[dict[str, list[RawSeries]], dict[str, Any]]:
    """(raw series by metric, the archive's metadata), of ``metrics`` only (all when None).

    ``window`` (start, end, step as asked for, None = unknown) bounds the grid before reading.
    """
    path = Path(path)
    pf, meta = _open(path)
    pa, _ = pyarrow_modules()
    wanted = set(metrics) if metrics is not None else None
    by_metric: dict[str, list[int]] = {}
    for i, g in enumerate(meta["row_groups"]):
        name = g.get("metric") if isinstance(g, dict) else None
        if not isinstance(name, str):
            raise FleetscopeError(f"{path}: the archive's metadata is malformed")
        if wanted is None or name in wanted:
            by_metric.setdefault(name, []).append(i)
    _check_size(pf, meta, by_metric, window)
    labels: dict[str, str] = meta.get("labels") or {}
    columns = [c for c in pf.schema_arrow.names if c not in (NAME_COL, TIME_COL, VALUE_COL)]
    total = sum(pf.metadata.row_group(i).num_rows for ids in by_metric.values() for i in ids) or 1
    done = 0
    raw: dict[str, list[RawSeries]] = {}
    try:
        for name, ids in by_metric.items():
            present = [c for c in columns if not _all_null(pf, ids, c)]  # a metric has few of the labels
            table = pf.read_row_groups(ids, columns=[*present, TIME_COL, VALUE_COL])
            series = _split_series(pa, table, present, labels)
            if series:
                raw[name] = series
            done += table.num_rows
            if progress:
                progress(done / total)
    except (pa.ArrowException, OSError) as exc:
        raise FleetscopeError(f"{path} is truncated or corrupt ({str(exc)[:120]})") from None
    if not raw:
        raise FleetscopeError(f"{path} holds none of the series the analyzers read")
    return raw, meta


def _check_size(pf: Any, meta: dict[str, Any], by_metric: dict[str, list[int]],
                window: tuple[float | None, float | None, float | None]) -> None:  # fmt: skip
    """check_grid before reading: the series count from the metadata, the span from the statistics."""
    series = sum(int(meta["row_groups"][i].get("series") or 0) for ids in by_metric.values() for i in ids)
    lo, hi = np.inf, -np.inf
    col = pf.schema_arrow.get_field_index(TIME_COL)
    for ids in by_metric.values():
        for i in ids:
            st = pf.metadata.row_group(i).column(col).statistics
            if st is not None and st.has_min_max:
                lo = min(lo, _seconds(st.min))
                hi = max(hi, _seconds(st.max))
    start, end, step = window
    grid = meta.get("grid") or {}
    step = step or grid.get("step")
    if step is None and isinstance(meta.get("spacing"), int | float):
        step = round_step(float(meta["spacing"]))
    if not step or not np.isfinite(lo):
        return
    check_grid(lo if start is None else start, hi if end is None else end, float(step), series)


def _all_null(pf: Any, ids: list[int], column: str) -> bool:
    """Whether the statistics say ``column`` holds only nulls in these row groups (unknown: False)."""
    col = pf.schema_arrow.get_field_index(column)
    for i in ids:
        chunk = pf.metadata.row_group(i).column(col)
        st = chunk.statistics
        if st is None or st.null_count is None or st.null_count < chunk.num_values:
            return False
    return True


def _seconds(ts: Any) -> float:
    if hasattr(ts, "timestamp"):
        return float(ts.timestamp())
    return float(ts) / 1000.0


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


def load_parquet(
    path: str | Path,
    metrics: Collection[str] | None = None,
    step: float | None = None,
    start: float | None = None,
    end: float | None = None,
    progress: Callable[[float], None] | None = None,
) -> Frames:
    """Load the archive onto a grid, as :func:`~fleetscope.analyzers.load_file.load_file` a recording."""
    raw, meta = read_archive(path, metrics, progress, (start, end, step))
    source = os.fspath(path)
    grid = meta.get("grid")
    if grid:  # query_range grid values: their own grid, no second lookback
        g_start, g_end, g_step = float(grid["start"]), float(grid["end"]), float(grid["step"])
        if step is not None and step != g_step:
            raise FleetscopeError(f"{path} was exported from Prometheus at a {g_step:g} s step; "
                                  f"analyze it at that --step (or export it again at {step:g} s)")  # fmt: skip
        if start is not None and (start < g_start or round((start - g_start) / g_step, 6) % 1):
            raise FleetscopeError(
                f"--start must be a grid time of {path}'s window (from {g_start:g}, every {g_step:g} s)"
            )
        summarize(raw, source)  # drops what no exporter writes, as for a recording
        return build_frames(raw, g_start if start is None else start, g_end if end is None else min(end, g_end),
                            g_step, source=source, gridded=True)  # fmt: skip
    raw, t_min, t_max, spacing = summarize(raw, source)
    return frames_from_raw(raw, t_min, t_max, spacing, step=step, start=start, end=end, source=source)
