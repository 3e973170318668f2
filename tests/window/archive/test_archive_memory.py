"""The archive writer gathers a row group's rows by index (issue 27: a long recording's conversion
held a batch's order, block and series arrays at its peak): the rows and row groups are those of
ordering the whole batch by (time block, series, time), and its temporaries stay below that."""

from __future__ import annotations

import os
import tracemalloc

import numpy as np
import pyarrow.parquet as pq

from fleetscope.window.archive import write as archive
from fleetscope.window.archive.format import BLOCK_S, SERIES_COL, TIME_COL, VALUE_COL, pyarrow_modules
from fleetscope.window.frames import RawSeries
from fleetscope.window.memory import release_freed

T0 = 1_796_000_000.0


def _reference(series: list[RawSeries], rows_max: int, rows_min: int, blocks_max: int) -> list[np.ndarray]:
    """The writer before: the batch concatenated, sorted by block (stable), cut into groups."""
    times, values, sids = [], [], []
    for k, s in enumerate(series):
        t = np.round(s.times * 1000).astype(np.int64)
        o = np.argsort(t, kind="stable")
        times.append(t[o])
        values.append(s.values[o])
        sids.append(np.full(t.size, k))
    t, v, sid = np.concatenate(times), np.concatenate(values), np.concatenate(sids)
    block = t // int(BLOCK_S * 1000)
    order = np.argsort(block, kind="stable")
    block = block[order]
    bounds = [0, *(np.flatnonzero(block[1:] != block[:-1]) + 1).tolist(), block.size]
    groups, a = [], 0
    for k in range(1, len(bounds)):
        b = bounds[k]
        more = k + 1 < len(bounds) and block[b] - block[a] < blocks_max
        if more and block[b] - block[b - 1] == 1 and b - a < rows_min:
            continue
        groups.extend(order[x : min(x + rows_max, b)] for x in range(a, b, rows_max))
        a = b
    return [np.stack([sid[g], t[g], v[g].view(np.int64)]) for g in groups]


def test_rows_and_row_groups_are_those_of_the_whole_batch_sorted(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(archive, "ROW_GROUP_ROWS", 70)  # a block of more rows is cut
    monkeypatch.setattr(archive, "GROUP_ROWS_MIN", 40)  # small adjacent blocks are merged
    rng = np.random.default_rng(3)
    series = []
    for k in range(9):
        n = int(rng.integers(1, 90))
        t = T0 + np.sort(rng.uniform(0, 4 * BLOCK_S, n))
        if k == 2:
            t = t[::-1].copy()  # out of order: sorted by the writer
        if k == 4:
            t[-1] = T0 + 40 * 365 * 86400.0  # a stray stamp decades later: one more block, not all between
        if k == 6:
            t = T0 + 3 * BLOCK_S + np.arange(n) * 0.5  # only in the last blocks
        series.append(RawSeries({"gpu": str(k)}, t, rng.normal(size=n)))
    out = tmp_path / "a.parquet"
    with archive.ArchiveWriter(out, ["gpu"], source="hand-made") as w:
        w.add("DCGM_FI_DEV_GPU_UTIL", series)
        w.close()
    pf = pq.ParquetFile(out)
    got = []
    for i in range(pf.metadata.num_row_groups):
        g = pf.read_row_group(i, columns=[SERIES_COL, TIME_COL, VALUE_COL])
        ms = g[TIME_COL].cast("int64").to_numpy()
        got.append(np.stack([g[SERIES_COL].to_numpy(), ms, g[VALUE_COL].to_numpy().view(np.int64)]))
    want = _reference(series, 70, 40, archive.GROUP_BLOCKS_MAX)
    assert [g.shape[1] for g in got] == [g.shape[1] for g in want]
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)


def test_the_writer_does_not_hold_the_batch_ordered_a_second_time(tmp_path) -> None:
    n_series, per = 400, 2_500  # 1 M samples, 16 MB of times and values
    series = [
        RawSeries({"gpu": str(k)}, T0 + np.arange(per) * 15.0 + k * 0.01, np.full(per, float(k)))
        for k in range(n_series)
    ]
    held = n_series * per * 16
    with archive.ArchiveWriter(tmp_path / "b.parquet", ["gpu"], source="hand-made") as w:
        tracemalloc.start()
        try:
            w.add("DCGM_FI_DEV_GPU_UTIL", series)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        w.close()
    # times in ms and the values, concatenated once (the batch's size again), and a row group's
    # rows: 1.17 times the batch; with the order, block and series arrays of a whole-batch sort, 2.0.
    assert peak < 1.4 * held, (peak / held, held)


def test_freed_memory_is_given_back_without_error() -> None:
    pa, _ = pyarrow_modules()
    try:
        pa.jemalloc_memory_pool()
    except NotImplementedError:  # a build without jemalloc keeps its default pool
        pass
    else:
        if not os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):  # else the user's choice stands
            assert pa.default_memory_pool().backend_name == "jemalloc"
    release_freed()
    release_freed()
