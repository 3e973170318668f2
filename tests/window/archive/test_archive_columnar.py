"""The archive's columnar path: frames built from the rows, without a Python object per series, are
exactly the frames of the series path (``RawSeries`` through ``samples.summarize`` and
``frames_from_raw``), and the series path still runs where only it is exact.

The reference is the same ``load_parquet`` with the columnar path switched off, so every rule of the
series path (grid phase, typical spacing, duplicate timestamps, NaN samples, series merged by their
labels, stray samples dropped with a warning) is compared, not re-implemented.
"""

from __future__ import annotations

import numpy as np
import pytest

from fleetscope.analyzers.core import LOADED
from fleetscope.simulate.record import write_scenario
from fleetscope.simulate.spec import FaultSpec, ScenarioSpec
from fleetscope.window.archive import read as lp
from fleetscope.window.archive.write import ArchiveWriter, convert_recording
from fleetscope.window.frames import RawSeries
from tests.window.archive.test_archive_stream import _same_frames

T0 = 1_796_000_000.0
UTIL = "DCGM_FI_DEV_GPU_UTIL"


@pytest.fixture(scope="module")
def archived(tmp_path_factory):
    """A recording with a replaced node, an ECC error (XID labels lie outside the columns) and a
    throttled GPU."""
    spec = ScenarioSpec(
        name="col",
        nodes=3,
        duration_s=2400,
        seed=11,
        faults=[
            FaultSpec(kind="gpu_lost", at_s=900, node=1, gpu=2, restart="replace"),
            FaultSpec(kind="ecc_uncorrectable", at_s=600, node=2, gpu=5),
            FaultSpec(kind="thermal_throttle", at_s=1200, node=0, gpu=3, slowdown=0.3),
        ],
    )
    tmp = tmp_path_factory.mktemp("col")
    rec, _ = write_scenario(spec, tmp / "s.om.gz")
    out = tmp / "s.parquet"
    convert_recording(rec, out, LOADED)
    return out


def _both(monkeypatch, path, **kw):
    """(columnar frames, series-path frames, whether the columnar path answered)."""
    answered = []
    real = lp._ColumnarGrid.run

    def spy(self, reads):
        got = real(self, reads)
        answered.append(got is not None)
        return got

    monkeypatch.setattr(lp._ColumnarGrid, "run", spy)
    fast = lp.load_parquet(path, LOADED, **kw)
    monkeypatch.setattr(lp._ColumnarGrid, "run", lambda self, reads: None)
    slow = lp.load_parquet(path, LOADED, **kw)
    monkeypatch.setattr(lp._ColumnarGrid, "run", real)
    return fast, slow, answered == [True]


def test_columnar_frames_are_the_series_paths(archived, monkeypatch):
    fast, slow, columnar = _both(monkeypatch, archived)
    assert columnar
    _same_frames(fast, slow)
    xid = fast.metrics["DCGM_FI_DEV_XID_ERRORS"].labels
    assert "err_code" in xid.columns or "err_msg" in xid.columns, list(xid.columns)  # from __labels__
    times = fast.times
    # Without a step the grid comes from the rows; with start, end and step it is known before
    # reading, and each metric is placed as soon as it is read.
    for k0, k1, step in ((10, 60, None), (0, 40, 15.0), (70, len(times) - 1, None), (33, 34, 30.0)):
        fast, slow, columnar = _both(
            monkeypatch, archived, start=float(times[k0]), end=float(times[k1]), step=step
        )
        assert columnar
        _same_frames(fast, slow)


def _write(path, batches, grid=None):
    """An archive of hand-made series: ``batches`` of (metric, [(labels, times, values)])."""
    labels = {k for _, series in batches for lab, _, _ in series for k in lab} - {"odd"}
    with ArchiveWriter(path, labels, source="hand-made", grid=grid) as w:
        for name, series in batches:
            w.add(name, [RawSeries(lab, np.asarray(t, float), np.asarray(v, float)) for lab, t, v in series])
        w.close()
    return path


def _util(gpu: str, **more: str) -> dict[str, str]:
    return {"Hostname": "n1", "gpu": gpu, "UUID": f"GPU-{gpu}", **more}


def test_duplicates_nan_and_late_batches(tmp_path, monkeypatch):
    """Duplicate stamps (the last written wins; the writer leaves NaN samples out), jittered
    scrapes, a series written in two batches whose second is earlier in time, a label outside the
    columns."""
    t = T0 + 15 * np.arange(120)
    jitter = t + np.random.default_rng(3).uniform(0, 0.4, t.size)
    dup_t = np.r_[t[:50], t[40:45], t[50:]]
    dup_v = np.r_[np.arange(50.0), [np.nan, 7.0, 8.0, np.nan, 9.0], np.arange(50.0, 120.0)]
    path = _write(
        tmp_path / "d.parquet",
        [
            (
                UTIL,
                [
                    (_util("0"), dup_t, dup_v),
                    (_util("1", odd="x"), jitter, np.ones(t.size)),
                    (_util("2"), t[60:], np.full(60, 3.0)),
                ],
            ),
            (UTIL, [(_util("2"), t[:60], np.full(60, 2.0))]),  # the same series, its earlier hour, later
        ],
    )
    fast, slow, columnar = _both(monkeypatch, path)
    assert columnar
    _same_frames(fast, slow)
    util = fast.metrics[UTIL]
    assert util.labels["odd"].tolist() == ["", "x", ""]
    assert util.values[40, 0] == 40.0 and util.values[41, 0] == 7.0 and util.values[44, 0] == 9.0
    assert (util.values[:, 2] == np.where(np.arange(len(fast.times)) < 60, 2.0, 3.0)).all()


def test_export_grid_values(tmp_path, monkeypatch):
    """An export from Prometheus: its own grid, no second lookback (a missing grid time stays empty)."""
    t = T0 + 15 * np.arange(40)
    keep = np.ones(t.size, dtype=bool)
    keep[[5, 6, 20]] = False
    path = _write(
        tmp_path / "g.parquet",
        [(UTIL, [(_util("0"), t[keep], np.arange(40.0)[keep]), (_util("1"), t, np.ones(40))])],
        grid=(float(t[0]), float(t[-1]), 15.0),
    )
    for kw in ({}, {"start": float(t[10]), "end": float(t[30])}):
        fast, slow, columnar = _both(monkeypatch, path, **kw)
        assert columnar
        _same_frames(fast, slow)
    assert np.isnan(lp.load_parquet(path, LOADED).metrics[UTIL].values[[5, 6, 20], 0]).all()


@pytest.mark.parametrize("case", ["merged labels", "stray stamp"])
def test_the_series_path_answers_where_only_it_is_exact(tmp_path, monkeypatch, case):
    """Two series whose labels differ only by an empty one are one series there; a sample stamped three
    days off is dropped there with one warning. The columnar path steps aside."""
    t = T0 + 15 * np.arange(60)
    v = np.arange(60.0)
    series = [(_util("0"), t, v), (_util("1"), t, v + 1)]
    if case == "merged labels":
        series.append((_util("0", pod=""), t + 5, v + 2))
    else:
        series.append((_util("2"), np.r_[t, T0 + 3 * 86400.0], np.r_[v, 1.0]))
    path = _write(tmp_path / "x.parquet", [(UTIL, series)])
    fast, slow, columnar = _both(monkeypatch, path)
    assert not columnar
    _same_frames(fast, slow)
    assert len(fast.metrics[UTIL]) == (2 if case == "merged labels" else 3)


@pytest.mark.slow
def test_a_known_grid_holds_one_metrics_rows_at_a_time(archived, monkeypatch):
    """Given start, end and step (every chunk of a streamed analysis), each metric is placed on
    the grid as soon as it is read: no more than one metric's rows are alive at a time."""
    import gc
    import weakref

    alive: list[weakref.ref] = []
    most = []
    confirm = False  # the whole load's rows are held by the load itself: counted as they are
    real_of_table, real_add = lp.MetricRows.of_table.__func__, lp._ColumnarGrid.add

    def of_table(cls, *a, **k):
        got = real_of_table(cls, *a, **k)
        if got is not None:
            alive.append(weakref.ref(got))
        return got

    def add(self, name, m):
        count = sum(r() is not None for r in alive)
        if count > 1 and confirm:  # a full collection is slow in a long test session: only to confirm
            gc.collect()
            count = sum(r() is not None for r in alive)
        most.append(count)
        return real_add(self, name, m)

    monkeypatch.setattr(lp.MetricRows, "of_table", classmethod(of_table))
    monkeypatch.setattr(lp._ColumnarGrid, "add", add)
    whole = lp.load_parquet(archived, LOADED)  # the grid from the rows: every metric read first
    assert max(most) > 10, most
    most.clear()
    confirm = True
    t0, t1 = float(whole.times[20]), float(whole.times[120])
    part = lp.load_parquet(archived, LOADED, start=t0, end=t1, step=whole.step)
    assert len(part.metrics) > 10 and len(most) >= len(part.metrics) and max(most) == 1, most
