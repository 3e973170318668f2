"""``fleetscope record``: the Parquet archive of a recording or a Prometheus window, and reading it back.

The archive must give exactly the findings of what it came from (the whole JSON document), hold the
layout it promises (dictionary-encoded label columns, millisecond timestamps, one metric per row
group, rows in time-block, series, time order), never be left half-written, and refuse bad archives
in one line. Time-sliced reads, format 1 and the bounded-memory record: test_archive_stream.py.
"""

from __future__ import annotations

import itertools
import json
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fleetscope.cli import main
from fleetscope.errors import FleetscopeError
from fleetscope.simulate.record import write_scenario
from fleetscope.simulate.spec import FaultSpec, ScenarioSpec
from fleetscope.window.archive import write as archive
from fleetscope.window.archive.format import BLOCK_S, META_KEY, contract_label_keys, is_parquet
from fleetscope.window.prometheus import raw_from_prometheus
from tests.support.analysis import analyze_file, analyze_prometheus
from tests.support.prom import Prometheus, backfill_openmetrics
from tests.support.reads import assert_same_reads, reference_read


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    spec = ScenarioSpec(
        name="arch",
        nodes=4,
        duration_s=1500,
        seed=9,
        faults=[
            FaultSpec(kind="gpu_lost", at_s=600, node=2, gpu=6, restart="replace"),
            FaultSpec(kind="thermal_throttle", at_s=300, node=0, gpu=1, slowdown=0.3),
        ],
    )
    out, _ = write_scenario(spec, tmp_path_factory.mktemp("rec") / "s.om.gz")
    return out


def _record(args, capsys) -> tuple[int, str]:
    rc = main(["record", *args, "--no-progress"])
    return rc, capsys.readouterr().err.strip()


def test_archive_of_a_recording_gives_the_same_report(recording, tmp_path, capsys):
    out = tmp_path / "incident.parquet"
    rc, err = _record(["--input", str(recording), "-o", str(out)], capsys)
    assert rc == 0 and err.startswith(f"wrote {out}:"), err
    assert is_parquet(out) and not is_parquet(recording)
    assert [p.name for p in tmp_path.iterdir()] == ["incident.parquet"]  # no temporary file left
    from_file = analyze_file(recording).document()
    kinds = {(f["kind"], f["cause"]) for f in from_file["findings"]}
    assert ("failing_node", "gpu_lost") in kinds and ("straggler", "thermal_throttle") in kinds
    assert analyze_file(out).document() == from_file
    # The CLI routes the archive by its magic bytes, whatever its name.
    renamed = out.rename(tmp_path / "incident.bin")
    assert main(["analyze", "--input", str(renamed), "--format", "json", "-o", str(tmp_path / "r.json")]) == 0


def test_archive_layout(recording, tmp_path, capsys):
    out = tmp_path / "a.parquet"
    assert _record(["--input", str(recording), "-o", str(out)], capsys)[0] == 0
    pf = pq.ParquetFile(out)
    schema = pf.schema_arrow
    for col in ("__name__", "Hostname", "gpu", "job_id", "rank", "phase", "device", "__labels__"):
        assert pa.types.is_dictionary(schema.field(col).type), col
    assert schema.field("timestamp").type == pa.timestamp("ms", tz="UTC")
    assert pf.metadata.schema.column(schema.get_field_index("timestamp")).physical_type == "INT64"
    assert schema.field("value").type == pa.float64()
    assert schema.field("__series__").type == pa.int32()
    meta = json.loads(pf.metadata.metadata[META_KEY])
    assert meta["version"] == 2 and len(meta["row_groups"]) == pf.num_row_groups
    block_ms = int(BLOCK_S * 1000)
    names = []
    for i in range(pf.num_row_groups):
        g = pf.read_row_group(i)
        metric = set(g.column("__name__").to_pylist())
        assert len(metric) == 1 and meta["row_groups"][i]["metric"] in metric  # one metric per row group
        names.append(metric.pop())
        # Rows in (time block, series, time) order, the group's [t0, t1] in the metadata.
        t = g.column("timestamp").cast(pa.int64()).to_numpy()
        sid = g.column("__series__").to_numpy()
        key = np.lexsort((t, sid, t // block_ms))
        assert (key == np.arange(len(t))).all()
        assert meta["row_groups"][i]["t0"] == t.min() / 1000 and meta["row_groups"][i]["t1"] == t.max() / 1000
    for name in set(names):  # series numbers 0..n-1 per metric, in the recording's order
        ids = np.unique(
            pq.read_table(out, columns=["__series__"], filters=[("__name__", "=", name)])["__series__"]
        )
        assert (ids == np.arange(meta["metrics"][name]["series"])).all(), name
    assert "DCGM_FI_DEV_GPU_UTIL" in names and "training_steps_total" in names
    # Each row's labels: a label the contract does not declare for these metrics is in __labels__.
    first = pf.read_row_group(0).to_pylist()[0]
    assert first["__series__"] == 0 and first["Hostname"]


@pytest.mark.server
def test_archive_of_a_prometheus_window(recording, tmp_path, capsys):
    """Exported from a real Prometheus: the archive gives what analyzing Prometheus gives."""
    om = tmp_path / "s.om"
    import gzip

    om.write_bytes(gzip.decompress(recording.read_bytes()))
    backfill_openmetrics(om, tmp_path / "data")
    w = analyze_file(recording).document()["window"]
    out = tmp_path / "p.parquet"
    pieces = tmp_path / "pieces.parquet"
    asked: list[tuple[float, float]] = []
    real = raw_from_prometheus

    def spy(url, a, b, *args, **kw):
        asked.append((a, b))
        return real(url, a, b, *args, **kw)

    window = ["--start", w["start"], "--end", w["end"], "--step", "15"]
    with Prometheus(tmp_path / "p", data_dir=tmp_path / "data") as prom:
        rc, err = _record(["--prometheus", prom.url, *window, "-o", str(out)], capsys)
        assert rc == 0, err
        with pytest.MonkeyPatch.context() as mp:  # in 5-minute pieces: memory follows the piece
            mp.setattr(archive, "raw_from_prometheus", spy)
            rc, err = _record(["--prometheus", prom.url, *window, "--chunk", "5m", "-o", str(pieces)], capsys)
        assert rc == 0, err
        live = analyze_prometheus(prom.url, w["start"], w["end"], 15.0).document()
    assert live["findings"]
    assert analyze_file(out).document() == live
    assert len(asked) >= 5 and all(b - a <= 300 for a, b in asked), asked
    assert all(b + 15 == a2 for (_, b), (a2, _) in itertools.pairwise(asked))  # they tile the grid
    assert analyze_file(pieces).document() == live
    # Its grid is the export's: another step is refused in one line.
    with pytest.raises(FleetscopeError, match="exported from Prometheus at a 15 s step"):
        analyze_file(out, step=30)


def test_bad_archives(recording, tmp_path, capsys):
    plain = tmp_path / "plain.parquet"
    pq.write_table(pa.table({"x": [1, 2]}), plain)
    rc = main(["analyze", "--input", str(plain), "--format", "json"])
    err = capsys.readouterr().err.strip()
    assert rc != 0 and err.count("\n") == 0 and "not a fleetscope archive" in err, err
    good = tmp_path / "good.parquet"
    assert _record(["--input", str(recording), "-o", str(good)], capsys)[0] == 0
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    rc = main(["analyze", "--input", str(cut), "--format", "json"])
    err = capsys.readouterr().err.strip()
    assert rc != 0 and err.count("\n") == 0 and "Traceback" not in err and "cut.parquet" in err, err
    # A grid too large for the machine is refused from the metadata, naming the flags that make it fit.
    rc = main(["analyze", "--input", str(good), "--step", "0.001", "--format", "json"])
    err = capsys.readouterr().err.strip()
    assert rc != 0 and "--step" in err and "--start/--end" in err and err.count("\n") == 0, err


def test_failed_write_leaves_nothing(recording, tmp_path, monkeypatch):
    from fleetscope.analyzers.core import LOADED
    from fleetscope.window.openmetrics import read_openmetrics

    raw = read_openmetrics(recording, LOADED)[0]
    calls = []
    real = archive.ArchiveWriter._write_group

    def boom(*args, **kwargs):
        if calls:
            raise RuntimeError("disk went away")
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(archive.ArchiveWriter, "_write_group", boom)
    out = tmp_path / "x.parquet"
    with (
        pytest.raises(RuntimeError),
        archive.ArchiveWriter(out, contract_label_keys(LOADED), source="t") as w,
    ):
        for name, series in raw.items():
            w.add(name, series)
        w.close()
    assert list(tmp_path.iterdir()) == []
    # record --input too: the error, and nothing left.
    with pytest.raises(RuntimeError):
        archive.convert_recording(recording, tmp_path / "y.parquet", LOADED)
    assert list(tmp_path.iterdir()) == []


def test_without_pyarrow_one_clear_line(recording, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    rc, err = _record(["--input", str(recording), "-o", str(tmp_path / "x.parquet")], capsys)
    assert (
        rc != 0
        and err == "fleetscope: error: Parquet archives need pyarrow: pip install 'fleetscope[archive]'"
    )


# ---------------------------------------------------------------------- the recording loader's fast path
# ``read_openmetrics`` parses runs of one series in bulk and sends everything else through its
# line-by-line parser (``_Reader._lines``, the reference). Whatever the layout, both must give the same
# series, samples and errors: here the reference is run over the whole file and compared.
T0 = 1796032800


def _messy() -> str:
    g = 'DCGM_FI_DEV_GPU_UTIL{gpu="%d",Hostname="n 1",modelName="NVIDIA H100 80GB HBM3"}'
    lines = ["# TYPE DCGM_FI_DEV_GPU_UTIL gauge", "# HELP DCGM_FI_DEV_GPU_UTIL util"]
    lines += [f"{g % 0} {v} {T0 + 15 * k}" for k, v in enumerate([1, 2, "NaN", "+Inf", 5.5, 6e2] * 20)]
    lines += [f"{g % 1} {k} {T0 + 15 * k}" for k in range(90)]
    lines += [""]  # a blank line inside the family
    lines += [f"{g % 2} {k} {T0 + 15 * k}" for k in range(3)]
    lines += [f"{g % 0} 9 {T0 + 15 * 200}"]  # gpu 0 comes back after the others
    # Scrape order (time-major): every run is one line long.
    lines += [f"{g % (3 + i)} {k} {T0 + 15 * k}\r" for k in range(40) for i in range(3)]
    lines += ["# TYPE something_else gauge"]
    lines += [f'something_else{{a="{k % 3}"}} 1 {T0 + k}' for k in range(100)]
    lines += ['fleetscope_gpu_up{gpu="0",Hostname="n 1"} 1 ' + str(T0)]  # not of the skipped family
    lines += ["# TYPE fleetscope_gpu_up gauge"]
    lines += [f'fleetscope_gpu_up{{gpu="0",Hostname="n 1"}} 1 {(T0 + 15 * k) * 1000}' for k in range(1, 300)]
    lines += ["# EOF", ""]
    return "\n".join(lines)


@pytest.mark.parametrize("chunk", [64, 997, 1 << 20])
@pytest.mark.parametrize("gz", [False, True])
def test_fast_path_gives_what_the_line_parser_gives(tmp_path, monkeypatch, chunk, gz):
    import gzip

    from fleetscope.window import openmetrics as lf

    monkeypatch.setattr(lf, "CHUNK_BYTES", chunk)  # runs cut by chunk boundaries, lines cut in two
    body = _messy().encode()
    path = tmp_path / ("m.om.gz" if gz else "m.om")
    path.write_bytes(gzip.compress(body) if gz else body)
    for metrics in (None, ["DCGM_FI_DEV_GPU_UTIL", "fleetscope_gpu_up"]):
        fast = lf.read_openmetrics(path, metrics)
        assert_same_reads(fast, reference_read(path, metrics))
    assert len(fast[0]["DCGM_FI_DEV_GPU_UTIL"]) == 6 and "something_else" not in fast[0]
    util0 = fast[0]["DCGM_FI_DEV_GPU_UTIL"][0]
    assert (
        util0.times.size == 81 and util0.values[-1] == 9 and np.isfinite(util0.values).all()
    )  # NaN, Inf dropped


def test_fast_path_on_a_simulated_recording(recording):
    from fleetscope.analyzers.core import LOADED
    from fleetscope.window.openmetrics import read_openmetrics

    for metrics in (LOADED, None):
        assert_same_reads(read_openmetrics(recording, metrics), reference_read(recording, metrics))


@pytest.mark.parametrize(
    "bad, message",
    [
        ("{h} 5", "line 43: sample without a timestamp"),
        ("{h} five {t}", "has a value or timestamp that is not a number"),
        ("{h} 5 {t} 7", "line 43"),
        ('{h} "5" {t}', "not a number"),
        ("{h} 0x10 {t}", "not a number"),
        ("{h} 5 {t}\t", None),  # trailing whitespace reads as the line-by-line parser reads it
    ],
)
def test_fast_path_errors_are_the_line_parsers(tmp_path, bad, message):
    from fleetscope.window.openmetrics import read_openmetrics

    h = 'training_steps_total{job_id="1",rank="0",Hostname="n",gpu="0"}'
    lines = ["# TYPE training_steps counter"] + [f"{h} {k} {T0 + 15 * k}" for k in range(80)]
    lines[42] = bad.format(h=h, t=T0 + 15 * 41 + 1)
    path = tmp_path / "b.om"
    path.write_text("\n".join([*lines, "# EOF", ""]))
    if message is None:
        assert_same_reads(read_openmetrics(path), reference_read(path, None))
        return
    with pytest.raises(FleetscopeError) as fast:
        read_openmetrics(path)
    with pytest.raises(FleetscopeError) as ref:
        reference_read(path, None)
    assert str(fast.value) == str(ref.value) and message in str(fast.value)


def test_a_grid_over_the_limit_is_refused_before_the_whole_recording_is_read(recording, monkeypatch):
    from fleetscope.window import openmetrics as lf

    monkeypatch.setattr(lf, "CHUNK_BYTES", 1 << 20)
    chunks = []
    real = lf._chunks

    def counted(path):
        for item in real(path):
            chunks.append(item)
            yield item

    monkeypatch.setattr(lf, "_chunks", counted)
    with pytest.raises(FleetscopeError, match="coarsen it with --step"):
        analyze_file(recording, step=0.002)  # 750,001 grid times: the cells are over the limit
    refused_after = len(chunks)
    chunks.clear()
    lf.read_openmetrics(recording)
    assert refused_after < len(chunks) / 2, (refused_after, len(chunks))
