"""The archive as the spill format of a chunked analysis: time-sliced reads, the span from the footer,
format 1 still read, and ``record --input`` holding one family at a time.

A sliced read must give exactly the grid values a whole read gives on the same grid times
(``slice_frames``) while reading fewer row groups; the record must hand the writer one family at a
time and keep nothing else of the file.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fleetscope.analyzers.core import LOADED
from fleetscope.cli import main
from fleetscope.simulate.record import write_scenario
from fleetscope.simulate.spec import FaultSpec, ScenarioSpec
from fleetscope.window.archive import write as archive
from fleetscope.window.archive.format import LOOKBACK_MARGIN_S, META_KEY
from fleetscope.window.archive.read import ReadStats, archive_span, load_parquet
from fleetscope.window.frames import slice_frames
from fleetscope.window.openmetrics import _Reader, _to_raw, iter_openmetrics, read_openmetrics
from tests.support.analysis import analyze_file
from tests.window.archive.test_archive import _messy


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    spec = ScenarioSpec(
        name="slices",
        nodes=3,
        duration_s=2400,
        seed=4,
        faults=[
            FaultSpec(kind="gpu_lost", at_s=1300, node=1, gpu=3, restart="replace"),
        ],
    )
    out, _ = write_scenario(spec, tmp_path_factory.mktemp("rec") / "s.om.gz")
    return out


@pytest.fixture(scope="module")
def small_blocks(recording, tmp_path_factory):
    """The recording archived with 5-minute blocks, one row group each (the real sizes make one
    group of this small recording)."""
    mp = pytest.MonkeyPatch()
    mp.setattr(archive, "BLOCK_S", 300.0)
    mp.setattr(archive, "GROUP_ROWS_MIN", 1)
    out = tmp_path_factory.mktemp("arch") / "small.parquet"
    try:
        archive.convert_recording(recording, out, LOADED)
    finally:
        mp.undo()
    return out


def _same_frames(a, b):
    assert np.array_equal(a.times, b.times) and a.step == b.step
    assert list(a.metrics) == list(b.metrics)
    for name, m in a.metrics.items():
        n = b.metrics[name]
        assert m.labels.equals(n.labels), name
        assert np.array_equal(m.values, n.values, equal_nan=True), name


def test_sliced_read_is_the_slice_of_a_whole_read(small_blocks):
    every = ReadStats()
    whole = load_parquet(small_blocks, LOADED, stats=every)
    assert every.row_groups == every.row_groups_total
    for k0, k1 in ((60, 100), (0, 30), (120, len(whole.times) - 1)):
        t0, t1 = float(whole.times[k0]), float(whole.times[k1])
        stats = ReadStats()
        part = load_parquet(small_blocks, LOADED, start=t0, end=t1, stats=stats)  # step: the archive's
        _same_frames(part, slice_frames(whole, t0, t1))
        if (k0, k1) == (60, 100):  # 10 minutes (+ the 10-minute margin) of 40: 5 blocks of 9
            assert 0 < stats.row_groups < 0.6 * every.row_groups, stats
            # Rows: 5/9 if every series spanned the recording alike; the checkpoint series begin at
            # the first save (as the library writes them), so the middle blocks hold a little more.
            assert stats.rows < 0.62 * every.rows, stats


def test_v2_round_trip_gives_the_recordings_frames_and_findings(recording, small_blocks, tmp_path):
    from tests.support.analysis import load_file

    _same_frames(load_parquet(small_blocks, LOADED), load_file(recording, LOADED))
    out = tmp_path / "a.parquet"
    archive.convert_recording(recording, out, LOADED)
    doc = analyze_file(recording).document()
    assert ("failing_node", "gpu_lost") in {(f["kind"], f["cause"]) for f in doc["findings"]}
    assert analyze_file(out).document() == doc == analyze_file(small_blocks).document()


def test_archive_span_reads_the_footer_only(recording, small_blocks, tmp_path):
    _, t_min, t_max, _ = read_openmetrics(recording, LOADED)
    span = archive_span(small_blocks)
    assert span == (t_min, t_max, 15.0)
    first, last, step = span  # what the chunked analyzer unpacks
    assert first < last and step == load_parquet(small_blocks, LOADED).step
    # The data pages zeroed: the span still comes from the footer, a read is one clear error.
    data = bytearray(small_blocks.read_bytes())
    footer = int.from_bytes(data[-8:-4], "little") + 8
    data[4 : len(data) - footer] = bytes(len(data) - footer - 4)
    broken = tmp_path / "zeroed.parquet"
    broken.write_bytes(bytes(data))
    assert archive_span(broken) == span
    with pytest.raises(Exception) as err:
        load_parquet(broken, LOADED)
    assert type(err.value).__name__ == "FleetscopeError" and "truncated or corrupt" in str(err.value)


def test_corrupt_v2_archive_is_one_line(small_blocks, tmp_path, capsys):
    data = small_blocks.read_bytes()
    for name, body in (("cut.parquet", data[: len(data) * 2 // 3]), ("tail.parquet", data[:-10])):
        bad = tmp_path / name
        bad.write_bytes(body)
        rc = main(["analyze", "--input", str(bad), "--format", "json"])
        err = capsys.readouterr().err.strip()
        assert rc != 0 and err.count("\n") == 0 and "Traceback" not in err and name in err, err


def _write_v1(raw, path):
    """Format 1 as fleetscope wrote it before format 2: a metric's series one after another, each in
    time order, one row group per metric, label columns for every key."""
    keys = sorted({k for ss in raw.values() for s in ss for k in s.labels})
    tables = []
    for name, series in raw.items():
        n = [s.times.size for s in series]
        order = [np.argsort(s.times, kind="stable") for s in series]
        cols = {"__name__": pa.array([name] * sum(n)).dictionary_encode()}
        for k in keys:
            cols[k] = pa.array(
                [s.labels.get(k) for s, c in zip(series, n, strict=True) for _ in range(c)], type=pa.string()
            ).dictionary_encode()
        t = np.concatenate(
            [np.round(s.times[o] * 1000).astype(np.int64) for s, o in zip(series, order, strict=True)]
        )
        cols["timestamp"] = pa.array(t).cast(pa.timestamp("ms", tz="UTC"))
        cols["value"] = pa.array(np.concatenate([s.values[o] for s, o in zip(series, order, strict=True)]))
        tables.append((name, len(series), pa.table(cols)))
    meta = {
        "version": 1,
        "source": "t",
        "labels": {k: k for k in keys},
        "row_groups": [{"metric": name, "series": k} for name, k, _ in tables],
        "spacing": 15.0,
    }
    schema = tables[0][2].schema.with_metadata({META_KEY: json.dumps(meta).encode()})
    with pq.ParquetWriter(path, schema) as w:
        for _, _, t in tables:
            w.write_table(t.cast(schema))


def test_format_1_archives_still_read(recording, tmp_path):
    raw = read_openmetrics(recording, LOADED)[0]
    v1 = tmp_path / "v1.parquet"
    _write_v1(raw, v1)
    assert json.loads(pq.ParquetFile(v1).metadata.metadata[META_KEY])["version"] == 1
    assert analyze_file(v1).document() == analyze_file(recording).document()
    span = archive_span(v1)  # from the statistics
    assert span[:2] == read_openmetrics(recording, LOADED)[1:3] and span.step == 15.0
    whole = load_parquet(v1, LOADED)
    t0, t1 = float(whole.times[50]), float(whole.times[90])
    _same_frames(load_parquet(v1, LOADED, start=t0, end=t1, step=15.0), slice_frames(whole, t0, t1))


def test_record_holds_one_family_at_a_time(recording, tmp_path, monkeypatch):
    raw = read_openmetrics(recording, LOADED)[0]
    total = sum(s.times.size for ss in raw.values() for s in ss)
    largest = max(sum(s.times.size for s in ss) for ss in raw.values())
    stats = archive.convert_recording(recording, tmp_path / "a.parquet", LOADED)
    assert stats["rows"] == total and len(raw) >= 10
    assert stats["largest_batch"] <= largest < total / 5  # the writer was handed one family at a time
    # And the parser held no more: at each hand-off, the samples its series entries still hold
    # (the family being parsed, a chunk's worth) are at most about one family.
    from fleetscope.window import openmetrics as load_file

    held = []
    take = load_file._Reader.take_ready

    def counted(self):
        held.append(sum(sum(a.size for a in e.values) + len(e.vtext) for e in self.series.values()))
        return take(self)

    monkeypatch.setattr(load_file, "CHUNK_BYTES", 1 << 18)
    monkeypatch.setattr(load_file._Reader, "take_ready", counted)
    archive.convert_recording(recording, tmp_path / "b.parquet", None)
    assert len(held) > 10 and max(held) <= largest * 1.5, (max(held), largest, total)


@pytest.mark.slow
def test_a_large_family_is_handed_over_in_batches(recording, tmp_path, monkeypatch):
    """A family that grows with the window (a day of a large job) is written in batches of about
    BATCH_SAMPLES, series cut by a hand-off coming again in the next batch, and the archive still
    gives the recording's frames and findings."""
    from fleetscope.window import openmetrics as load_file

    raw = read_openmetrics(recording, LOADED)[0]
    largest = max(sum(s.times.size for s in ss) for ss in raw.values())
    monkeypatch.setattr(load_file, "CHUNK_BYTES", 1 << 16)
    monkeypatch.setattr(load_file, "BATCH_SAMPLES", 2000)
    monkeypatch.setattr(load_file, "BATCH_CHECK_CHUNKS", 1)
    batches: dict[str, int] = {}
    for name, _ in iter_openmetrics(recording, LOADED):
        batches[name] = batches.get(name, 0) + 1
    assert max(batches.values()) > 3, batches  # large families came in several batches
    out = tmp_path / "batched.parquet"
    stats = archive.convert_recording(recording, out, LOADED)
    assert stats["largest_batch"] < largest / 3, (stats["largest_batch"], largest)
    _same_frames(load_parquet(out, LOADED), load_file.load_recording(recording, LOADED))
    assert analyze_file(out).document() == analyze_file(recording).document()


@pytest.mark.parametrize("metrics", [None, ["DCGM_FI_DEV_GPU_UTIL", "fleetscope_gpu_up"]])
def test_families_as_parsed_are_the_whole_files_series(tmp_path, metrics):
    """iter_openmetrics' batches, put together, are read_openmetrics' series (before cleaning), in
    its order, on a messy file: a family with a series that comes back, a sample outside its family,
    milliseconds."""
    path = tmp_path / "m.om"
    path.write_text(_messy())
    reader = _Reader(path, metrics)
    data = path.read_bytes()
    reader._lines(data, 0, len(data))
    ref = _to_raw(path, reader)
    got: dict = {}
    for name, series in iter_openmetrics(path, metrics):
        got.setdefault(name, []).extend(series)
    assert list(got) == list(ref)
    for name in ref:
        for a, b in zip(ref[name], got[name], strict=True):
            assert a.labels == b.labels and np.array_equal(a.times, b.times), name
            assert np.array_equal(a.values, b.values, equal_nan=True), name


def test_record_window_and_errors(recording, tmp_path, capsys):
    _, t_min, t_max, _ = read_openmetrics(recording, LOADED)
    out = tmp_path / "w.parquet"
    start, end = t_min + 1200, t_min + 1800
    rc = main(
        [
            "record",
            "--input",
            str(recording),
            "-o",
            str(out),
            "--start",
            f"{start:.3f}",
            "--end",
            f"{end:.3f}",
            "--no-progress",
        ]
    )
    assert rc == 0 and capsys.readouterr().err.startswith("wrote ")
    first, last, _ = archive_span(out)
    assert start - LOOKBACK_MARGIN_S <= first < start and end - 30 <= last <= end
    rc = main(
        [
            "record",
            "--input",
            str(recording),
            "-o",
            str(tmp_path / "e.parquet"),
            "--start",
            f"{t_max + 3600:.0f}",
            "--no-progress",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert rc != 0 and "no samples in the requested window" in err and err.count("\n") == 0, err
    cut = tmp_path / "cut.om.gz"
    cut.write_bytes(recording.read_bytes()[: recording.stat().st_size // 2])
    rc = main(["record", "--input", str(cut), "-o", str(tmp_path / "c.parquet"), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert rc != 0 and "truncated" in err and err.count("\n") == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cut.om.gz", "w.parquet"]  # nothing half written
