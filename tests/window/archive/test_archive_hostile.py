"""Hostile and malformed archives (issue 26, item 15): a stray stamp a recording survives never
makes its archive unusable, a malformed archive is one clear line (never a traceback), and a read
larger than the machine is refused from the footer, before any row is read."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetscope.cli import main
from fleetscope.errors import FleetscopeError
from fleetscope.simulate.record import write_scenario
from fleetscope.simulate.spec import ScenarioSpec
from fleetscope.window.archive import read as ar
from fleetscope.window.archive.format import META_KEY, SERIES_COL, TIME_COL, VALUE_COL
from fleetscope.window.archive.write import convert_recording
from tests.support.analysis import load_file

FUZZ = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def recording(tmp_path_factory) -> Path:
    out, _ = write_scenario(
        ScenarioSpec(nodes=2, duration_s=300, seed=2), tmp_path_factory.mktemp("rec") / "r.om"
    )
    return out


@pytest.fixture(scope="module")
def archive(recording, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("arc") / "a.parquet"
    convert_recording(recording, out, None)
    return out


def _analyze(path: Path, capsys) -> tuple[int, list, str]:
    rc = main(["analyze", "--input", str(path), "--format", "json"])
    out, err = capsys.readouterr()
    return rc, (json.loads(out)["findings"] if rc == 0 else []), err.strip()


def _one_line(rc: int, err: str) -> None:
    assert rc == 1, err
    assert len(err.splitlines()) == 1 and err.startswith("fleetscope: error: ") and "Traceback" not in err, (
        err
    )


def _key(findings: list) -> list:
    return sorted((f["kind"], f.get("node"), f.get("gpu")) for f in findings)


# ---------------------------------------------------------------------- stray stamps
@pytest.mark.parametrize("stamp", [b"0", b"4102444800", b"4102444800000", b"1e300", b"-5"])
def test_a_stray_stamp_leaves_the_archive_usable(recording, archive, tmp_path, capsys, stamp):
    """1970 and 2100 refused the window (decades at 15 s); 1e300 was written as the smallest int64,
    then raised OverflowError. Now the same findings as without it."""
    lines = recording.read_bytes().split(b"\n")
    i = next(k for k, line in enumerate(lines) if line.startswith(b"DCGM_FI_DEV_GPU_UTIL{"))
    head, _, _ = lines[i].rsplit(b" ", 2)
    lines.insert(i + 1, head + b" 1 " + stamp)
    hostile = tmp_path / "x.om"
    hostile.write_bytes(b"\n".join(lines))
    out = tmp_path / "x.parquet"
    assert main(["record", "--input", str(hostile), "-o", str(out)]) == 0
    capsys.readouterr()
    rc, findings, err = _analyze(out, capsys)
    clean_rc, clean, _ = _analyze(archive, capsys)
    assert rc == 0 == clean_rc, err
    assert _key(findings) == _key(clean)
    first, last, _ = ar.archive_span(out)
    assert last - first < 3600  # the span is the bulk's


# ---------------------------------------------------------------------- malformed archives
def rewrite(
    src: Path,
    dst: Path,
    meta: bytes | Callable[[dict], object] | None = None,
    table: Callable[[pa.Table], pa.Table] | None = None,
) -> Path:
    """``src`` written again row group by row group, its tables through ``table`` and its footer's
    archive metadata replaced by ``meta`` (bytes as they are; a function of the parsed metadata,
    JSON-encoded; None: left out)."""
    pf = pq.ParquetFile(src)
    old = json.loads(pf.metadata.metadata[META_KEY])
    writer = None
    for i in range(pf.metadata.num_row_groups):
        t = pf.read_row_group(i).replace_schema_metadata(None)
        if table is not None:
            t = table(t)
        writer = writer or pq.ParquetWriter(dst, t.schema)
        writer.write_table(t, row_group_size=max(t.num_rows, 1))
    assert writer is not None
    if meta is not None:
        value = meta if isinstance(meta, bytes) else json.dumps(meta(old)).encode()
        writer.add_key_value_metadata({META_KEY: value})
    writer.close()
    return dst


def _with(key: str, value: object) -> Callable[[dict], dict]:
    return lambda m: {**m, key: value}


def _metrics_series(value: object) -> Callable[[dict], dict]:
    return lambda m: {**m, "metrics": {k: {**v, "series": value} for k, v in m["metrics"].items()}}


def _groups(key: str, value: object) -> Callable[[dict], dict]:
    return lambda m: {**m, "row_groups": [{**g, key: value} for g in m["row_groups"]]}


def _column(name: str, fn: Callable[[pa.Array], pa.Array]) -> Callable[[pa.Table], pa.Table]:
    def change(t: pa.Table) -> pa.Table:
        i = t.schema.get_field_index(name)
        return t.set_column(i, name, fn(t.column(name).combine_chunks()))

    return change


FOOTERS: dict[str, bytes | Callable[[dict], object]] = {
    "not JSON": b"{",
    "a list": b"[]",
    "a string": b'"x"',
    "version a string": _with("version", "2"),
    "version 99": _with("version", 99),
    "row groups a dict": _with("row_groups", {}),
    "row groups one short": lambda m: {**m, "row_groups": m["row_groups"][1:]},
    "row group not a dict": lambda m: {**m, "row_groups": [1] * len(m["row_groups"])},
    "metric not a string": _groups("metric", 5),
    "metrics a list": _with("metrics", []),
    "series a string": _metrics_series("abc"),
    "series negative": _metrics_series(-5),
    "series huge": _metrics_series(10**30),
    "series a float": _metrics_series(1.5),
    "span strings": _with("span", ["a", "b"]),
    "span reversed huge": _with("span", [1e300, -1e300]),
    "grid strings": _with("grid", {"start": "x", "end": 1, "step": 1}),
    "grid zero step": _with("grid", {"start": 0, "end": 1e300, "step": 0}),
    "grid missing keys": _with("grid", {"step": 15}),
    "labels a list": _with("labels", [1]),
    "spacing a string": _with("spacing", "x"),
    "t0 strings": _groups("t0", "x"),
}
COLUMNS: dict[str, Callable[[pa.Table], pa.Table]] = {
    "time as text": _column(TIME_COL, lambda a: a.cast(pa.int64()).cast(pa.string())),
    "value as text": _column(VALUE_COL, lambda a: a.cast(pa.string())),
    "series as float": _column(SERIES_COL, lambda a: a.cast(pa.float64())),
    "series as text": _column(SERIES_COL, lambda a: a.cast(pa.string())),
    "series negative": _column(SERIES_COL, lambda a: pa.array(np.full(len(a), -3, dtype=np.int32))),
    "series huge": _column(SERIES_COL, lambda a: pa.array(np.full(len(a), 2**31 - 1, dtype=np.int32))),
    "time the smallest int64": _column(
        TIME_COL, lambda a: pa.array(np.full(len(a), np.iinfo(np.int64).min)).cast(a.type)
    ),
}


#: Fields only a hint: where they are unusable the reader does without them (reads every group).
HINTS = {"metrics a list", "t0 strings"}


@pytest.mark.parametrize("case", sorted(FOOTERS))
def test_a_malformed_footer_is_one_clear_line(archive, tmp_path, capsys, case):
    path = rewrite(archive, tmp_path / "m.parquet", FOOTERS[case])
    rc, findings, err = _analyze(path, capsys)
    if case in HINTS:
        assert rc == 0 and findings is not None, err
    else:
        _one_line(rc, err)


@pytest.mark.parametrize("case", sorted(COLUMNS))
def test_a_column_of_another_type_or_range_is_one_clear_line(archive, tmp_path, capsys, case):
    path = rewrite(archive, tmp_path / "c.parquet", lambda m: m, COLUMNS[case])
    rc, _, err = _analyze(path, capsys)
    _one_line(rc, err)


def test_a_footer_without_the_archive_metadata_is_one_clear_line(archive, tmp_path, capsys):
    rc, _, err = _analyze(rewrite(archive, tmp_path / "n.parquet", None), capsys)
    _one_line(rc, err)
    assert "not a fleetscope archive" in err


@pytest.mark.parametrize("where", ["head", "tail"])
def test_a_wrong_magic_is_one_clear_line(archive, tmp_path, capsys, where):
    data = archive.read_bytes()
    path = tmp_path / "w.parquet"
    path.write_bytes(b"XXXX" + data[4:] if where == "head" else data[:-4] + b"XXXX")
    rc, _, err = _analyze(path, capsys)
    _one_line(rc, err)


@settings(FUZZ)
@given(cut=st.integers(min_value=0, max_value=10**9))
def test_a_truncated_archive_is_one_clear_error(archive, tmp_path, cut):
    data = archive.read_bytes()
    path = tmp_path / "t.parquet"
    path.write_bytes(data[: cut % len(data)])
    with pytest.raises(FleetscopeError) as err:
        load_file(path)
    assert "\n" not in str(err.value)


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
KEYS = st.sampled_from(["version", "row_groups", "metrics", "labels", "span", "grid", "spacing", "block_s"])


@pytest.mark.slow
@settings(FUZZ)
@given(changes=st.dictionaries(KEYS, JSON, min_size=1, max_size=3))
def test_any_garbled_footer_field_is_a_clear_error_or_a_load(archive, tmp_path, changes):
    path = rewrite(archive, tmp_path / "g.parquet", lambda m: {**m, **changes})
    try:
        load_file(path)
    except FleetscopeError as exc:
        assert "\n" not in str(exc)


# ---------------------------------------------------------------------- read budget from the footer
def test_rows_over_the_read_budget_are_refused_from_the_footer(archive, capsys, monkeypatch):
    """A 33 MB archive of 335 M rows reached 2.1 GB before its refusal; the footer holds the count."""
    rows = pq.ParquetFile(archive).metadata.num_rows
    monkeypatch.setattr(ar, "MAX_READ_ROWS", rows // 2)
    stats = ar.ReadStats()
    with pytest.raises(FleetscopeError, match=r"rows of .* series, over the limit of") as err:
        ar.load_parquet(archive, stats=stats)
    assert stats.row_groups == 0 and stats.rows == 0  # nothing read
    assert "--start/--end" in str(err.value)
    rc, _, msg = _analyze(archive, capsys)
    _one_line(rc, msg)


def test_series_over_the_read_budget_are_refused_from_the_footer(archive, monkeypatch):
    """A 25 MB archive of 4 M distinct hosts reached 3.0 GB; the footer holds the series count."""
    monkeypatch.setattr(ar, "MAX_READ_SERIES", 100)
    stats = ar.ReadStats()
    with pytest.raises(FleetscopeError, match="series read at once"):
        ar.load_parquet(archive, stats=stats)
    assert stats.rows == 0


def test_a_footer_that_understates_its_series_is_refused_before_the_labels_are_read(archive, tmp_path):
    lying = rewrite(archive, tmp_path / "l.parquet", _metrics_series(1))
    stats = ar.ReadStats()
    with pytest.raises(FleetscopeError, match="where the footer counts 1 series"):
        ar.load_parquet(lying, stats=stats)


# ---------------------------------------------------------------------- footers spanning decades
DECADES: dict[str, Callable[[dict], object]] = {
    "span 1970 to 2030": _with("span", [0, 1.9e9]),
    "grid 1970 to 2030 at 1 s": _with("grid", {"start": 0, "end": 1.9e9, "step": 1}),
    "row groups 1970 to 2030": lambda m: {
        **m,
        "span": [0, 1.9e9],
        "row_groups": [{**g, "t0": 0, "t1": 1.9e9} for g in m["row_groups"]],
    },
}


@pytest.mark.parametrize("case", sorted(DECADES))
def test_a_footer_spanning_decades_is_checked_against_the_data(archive, tmp_path, capsys, case):
    """A footer whose span or grid reaches from 1970 to 2030 (a 1 s grid over 57 years) ran past
    120 s with no output (issue 36, item 4): it is checked against the row groups' own statistics
    before any work is sized by it, and the data's window is analyzed."""
    path = rewrite(archive, tmp_path / "d.parquet", DECADES[case])
    started = time.monotonic()
    rc, findings, err = _analyze(path, capsys)
    assert time.monotonic() - started < 30
    clean_rc, clean, _ = _analyze(archive, capsys)
    assert rc == 0 == clean_rc, err
    if not case.startswith("grid"):  # a 1 s grid analyzes at its own step
        assert _key(findings) == _key(clean)
    first, last, _ = ar.archive_span(path)
    assert last - first <= 3600


def test_a_grid_that_misses_its_data_is_one_clear_line(archive, tmp_path, capsys):
    path = rewrite(archive, tmp_path / "g.parquet", _with("grid", {"start": 0, "end": 100, "step": 15}))
    rc, _, err = _analyze(path, capsys)
    _one_line(rc, err)
    assert "does not cover its data" in err
