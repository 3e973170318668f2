"""The spool of a streamed analysis gives what a Parquet archive of the same recording gives.

A recording streamed (``analyze --chunk``) is parsed once and spooled (:mod:`fleetscope.window.archive.spool`)
instead of converted to a Parquet archive; the spool emulates the archive's row groups and reads
its rows back for the reader's own grid code. Each test writes the same batches both ways and
compares the metadata (every row group's rows, series and [t0, t1], the span, the grid's phase), the
rows a window reads (series, times, values, labels) and the frames, for windows whose edges fall
inside blocks, on samples, and between milliseconds, with blocks small enough that every row-group
rule is met: whole blocks, small ones merged, large ones cut in the middle of a series.
"""

from __future__ import annotations

import numpy as np
import pytest

from fleetscope.analyzers.core import LOADED
from fleetscope.errors import NoData
from fleetscope.simulate.record import write_scenario
from fleetscope.simulate.spec import FaultSpec, ScenarioSpec
from fleetscope.window.archive import read as lp
from fleetscope.window.archive import write as archive
from fleetscope.window.archive.spool import SpoolWriter, spool_recording
from fleetscope.window.frames import RawSeries
from fleetscope.window.sources import RecordingSource
from tests.window.archive.test_archive_stream import _same_frames

T0 = 1_796_000_000.0
UTIL, TEMP = "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_TEMP"


@pytest.fixture
def small_groups(monkeypatch):
    """5-minute blocks, groups merged up to 30 rows and cut at 45: every rule of the row groups
    is met by a few hundred samples."""
    monkeypatch.setattr(archive, "BLOCK_S", 300.0)
    monkeypatch.setattr(archive, "GROUP_ROWS_MIN", 30)
    monkeypatch.setattr(archive, "ROW_GROUP_ROWS", 45)


def _util(gpu: str, **more: str) -> dict[str, str]:
    return {"Hostname": "n1", "gpu": gpu, "UUID": f"GPU-{gpu}", **more}


def _hand_made() -> list[tuple[str, list[RawSeries]]]:
    """Jittered and sub-millisecond stamps, duplicates, NaN, a series written in two batches (the
    second earlier in time), a series that starts late and one that stops early, a label outside
    the columns, a stray stamp three days off, samples out of time order."""
    rng = np.random.default_rng(5)
    t = T0 + 15 * np.arange(240)
    jitter = t + rng.uniform(0, 0.4, t.size)
    dup_t = np.r_[t[:50], t[40:45], t[50:]]
    dup_v = np.r_[np.arange(50.0), [np.nan, 7.0, 8.0, np.nan, 9.0], np.arange(50.0, 240.0)]
    shuffled = rng.permutation(t.size)
    batches = [
        (
            UTIL,
            [
                (_util("0"), dup_t, dup_v),
                (_util("1", odd="x"), jitter, np.ones(t.size)),
                (_util("2"), t[120:], np.full(120, 3.0)),
                (_util("3"), np.r_[t[:30], T0 + 3 * 86400.0], np.r_[np.arange(30.0), 1.0]),
                (_util("5"), np.r_[t[:20], T0 + 30 * 86400.0], np.r_[np.arange(20.0), 1.0]),  # int64 times
                (_util("4"), t[shuffled] + 0.0004, shuffled.astype(float)),
            ],
        ),
        (TEMP, [(_util(str(g)), t[g * 7 :], 40.0 + g + np.sin(np.arange(t.size - g * 7))) for g in range(6)]),
        (UTIL, [(_util("2"), t[:120], np.full(120, 2.0))]),  # the same series, its earlier part, later
    ]
    return [
        (n, [RawSeries(lab, np.asarray(tt, float), np.asarray(v, float)) for lab, tt, v in s])
        for n, s in batches
    ]


def _both(tmp_path, batches):
    """The batches written as an archive and as a spool: (archive path, spool)."""
    labels = {k for _, series in batches for s in series for k in s.labels} - {"odd"}
    with archive.ArchiveWriter(tmp_path / "a.parquet", labels, source="hand-made") as w:
        for name, series in batches:
            w.add(name, series)
        w.close()
    with SpoolWriter(tmp_path / "s.spool", labels, source="hand-made") as s:
        for name, series in batches:
            s.add(name, series)
        spool = s.close()
    return w.path, spool


def _same_rows(a: lp.MetricRows, b: lp.MetricRows) -> None:
    for field in ("series", "tms", "values", "starts"):
        assert np.array_equal(getattr(a, field), getattr(b, field), equal_nan=True), field
    ra, rb = a.to_raw(), b.to_raw()
    assert [s.labels for s in ra] == [s.labels for s in rb]
    assert [list(s.labels) for s in ra] == [list(s.labels) for s in rb]  # the same order of keys


def _windows(times: np.ndarray) -> list[tuple[float | None, float | None, float | None]]:
    a, b = float(times[0]), float(times[-1])
    return [
        (None, None, None),
        (a, b, 15.0),
        (a + 600.0, a + 1500.0, 15.0),  # edges on samples
        (a + 611.0004, a + 1799.9996, 15.0),  # edges between milliseconds
        (a + 300.0, a + 390.0, 30.0),
        (a + 900.0, None, None),
        (None, a + 1000.0, 15.0),
    ]


def test_the_spool_reads_what_the_archive_reads(tmp_path, small_groups):
    path, spool = _both(tmp_path, _hand_made())
    pf_meta = lp._open(path)[1]
    assert spool.meta == pf_meta  # every row group's rows, series and [t0, t1]; span; phase
    assert {(b.times.name, b.values.name) for b in spool.batches} == {
        ("int64", "float32"),  # a stamp 30 days off: 24 days of milliseconds are what int32 holds
        ("int32", "float64"),  # temperatures with decimals
        ("int32", "float32"),
    }
    groups = pf_meta["row_groups"]
    assert len(groups) > 8 and any(g["rows"] == 45 for g in groups)  # cut groups among them
    assert spool.span() == lp.archive_span(path)
    assert spool.recorded_grid_start(None) == lp.recorded_grid_start(path, None)
    whole = lp.load_parquet(path, LOADED)
    for window in _windows(whole.times):
        reads = dict(lp._read(path, LOADED, None, window, None)[1])
        mine = dict(spool.read(LOADED, window))
        assert list(reads) == list(mine), window
        for name in reads:
            _same_rows(reads[name], mine[name])
        start, end, step = window
        try:
            theirs = lp.load_parquet(path, LOADED, step, start, end)
        except NoData:  # the rows of the lookback, none in the window: NoData both ways
            with pytest.raises(NoData):
                spool.load(LOADED, step=step, start=start, end=end)
            continue
        _same_frames(spool.load(LOADED, step=step, start=start, end=end), theirs)


def test_an_empty_window_is_no_data(tmp_path, small_groups):
    path, spool = _both(tmp_path, _hand_made())
    far = T0 + 10 * 86400.0
    with pytest.raises(NoData, match="no samples in the requested window"):
        spool.load(LOADED, 15.0, far, far + 600)
    with pytest.raises(NoData, match="no samples in the requested window"):
        lp.load_parquet(path, LOADED, 15.0, far, far + 600)


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    spec = ScenarioSpec(
        name="spool",
        nodes=3,
        duration_s=3000,
        seed=9,
        faults=[
            FaultSpec(kind="gpu_lost", at_s=1300, node=1, gpu=3, restart="replace"),
            FaultSpec(kind="ecc_uncorrectable", at_s=600, node=2, gpu=5),
        ],
    )
    out, _ = write_scenario(spec, tmp_path_factory.mktemp("rec") / "s.om.gz")
    return out


def test_a_spooled_recording_streams_as_its_archive(recording, tmp_path):
    """Every chunk a streamed analysis asks of the spool is the archive's (the span and grid
    planned from it too), and the spool's file holds 8 to 12 bytes a sample (int32 times, values
    in float32 where that is exact), not 16."""
    source = RecordingSource(recording, LOADED)
    spooled = source.for_chunks(lambda: tmp_path)
    arch = source.to_archive(tmp_path / "a.parquet")
    assert spooled.span() == arch.span() and spooled.seconds() == arch.seconds()
    first, last, step = arch.span()
    for a in np.arange(first, last, 17 * 60.0):
        b = min(a + 17 * 60.0, last)
        _same_frames(spooled.load(a - 900.0, b, step), arch.load(a - 900.0, b, step))
    rows = sum(g["rows"] for g in spooled.spool.meta["row_groups"])
    assert 8 * rows < spooled.path.stat().st_size < 12 * rows
    kinds = {(b.times.name, b.values.name) for b in spooled.spool.batches}
    assert kinds == {("int32", "float32"), ("int32", "float64")}, kinds


def test_a_failed_spool_leaves_nothing(recording, tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(SpoolWriter, "_write_metric", boom)
    from fleetscope.errors import FleetscopeError

    with pytest.raises(FleetscopeError, match="No space left on device"):
        spool_recording(recording, tmp_path / "s.spool", LOADED)
    assert list(tmp_path.iterdir()) == []
