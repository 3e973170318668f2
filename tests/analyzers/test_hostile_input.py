"""Hostile recordings and slow or huge Prometheus answers: one warning or one clear error, bounded
time and memory, no traceback, no numpy warning, no finding that the clean data does not give."""

from __future__ import annotations

import json
import logging
import time
import warnings

import numpy as np
import pytest

from fleetscope.analyzers.features import METRICS_USED
from fleetscope.cli import main
from fleetscope.errors import FleetscopeError
from fleetscope.options_cli import DEFAULT_MAX_ANSWER_BYTES
from fleetscope.simulate.record import write_scenario
from fleetscope.simulate.spec import ScenarioSpec
from fleetscope.window import frames as fr
from fleetscope.window.prometheus import DEFAULT_MAX_ANSWER_BYTES as LOADER_DEFAULT
from fleetscope.window.prometheus import PrometheusAccess, PrometheusClient, load_prometheus
from tests.support.analysis import load_file
from tests.support.slow_peers import oversize_server, trickling_server

T0 = 1_796_000_000.0


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    out, _ = write_scenario(
        ScenarioSpec(nodes=2, duration_s=300, seed=2), tmp_path_factory.mktemp("rec") / "r.om"
    )
    return out


def _with_extra(recording, tmp_path, make_line, name="x.om", metric=b"DCGM_FI_DEV_GPU_UTIL{"):
    """The recording with one line added after the first sample of ``metric``."""
    lines = recording.read_bytes().split(b"\n")
    i = next(k for k, line in enumerate(lines) if line.startswith(metric))
    head, v, t = lines[i].rsplit(b" ", 2)
    lines.insert(i + 1, make_line(head, v, t))
    path = tmp_path / name
    path.write_bytes(b"\n".join(lines))
    return path


def _findings(path, capsys) -> tuple[list, str]:
    rc = main(["analyze", "--input", str(path), "--format", "json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "Traceback" not in err
    return json.loads(out)["findings"], err


@pytest.mark.parametrize("stamp,why", [
    (b"1", "stamped more than 24 h"), (b"4102444800", "stamped more than 24 h"),
    (b"1e300", "stamped more than 24 h"), (b"NaN", "non-finite timestamp"), (b"-Inf", "non-finite timestamp"),
])  # fmt: skip
def test_an_odd_timestamp_is_skipped_with_one_warning(recording, tmp_path, capsys, caplog, stamp, why):
    path = _with_extra(recording, tmp_path, lambda h, v, t: h + b" " + v + b" " + stamp)
    with caplog.at_level(logging.WARNING), warnings.catch_warnings():
        warnings.simplefilter("error")  # a numpy RuntimeWarning fails the test
        frames = load_file(path, METRICS_USED)
    assert frames.end - frames.start < 400  # the grid spans the recording, not decades
    messages = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(messages) == 1 and "skipped 1 sample (1 " in messages[0] and why in messages[0], messages
    clean, _ = _findings(recording, capsys)
    hostile, _ = _findings(path, capsys)
    assert hostile == clean


@pytest.mark.parametrize("value", [b"NaN", b"+Inf", b"-Inf"])
def test_non_finite_counters_give_no_warning_storm_and_no_spurious_finding(
    recording, tmp_path, capsys, caplog, value
):
    lines = recording.read_bytes().split(b"\n")
    hit = 0
    for k, line in enumerate(lines):  # every 7th sample of the step-time counter of every rank
        if line.startswith(b"training_step_seconds_total{") and k % 7 == 0:
            head, _, t = line.rsplit(b" ", 2)
            lines[k] = head + b" " + value + b" " + t
            hit += 1
    assert hit > 5
    path = tmp_path / "nf.om"
    path.write_bytes(b"\n".join(lines))
    with caplog.at_level(logging.WARNING), warnings.catch_warnings():
        warnings.simplefilter("error")
        hostile, _ = _findings(path, capsys)
    messages = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(messages) == 1 and f"skipped {hit} samples ({hit} with a NaN or infinite value)" in messages[0]
    assert not [f for f in hostile if f["kind"] == "straggler"]


def test_a_window_too_big_for_memory_is_one_clear_error(recording, capsys):
    rc = main(
        ["analyze", "--input", str(recording), "--format", "json", "--start", "0", "--end", "4102444800"]
    )
    err = capsys.readouterr().err.strip()
    assert rc == 1 and len(err.splitlines()) == 1, err
    assert "--start/--end" in err and "--step" in err and "grid times" in err
    with pytest.raises(FleetscopeError, match="over the limit"):
        load_prometheus(PrometheusAccess("http://127.0.0.1:1"), 0, 4102444800, 15.0, METRICS_USED)


def test_grid_limits_are_checked_before_allocation():
    assert fr.check_grid(0, 150, 15) == 11
    with pytest.raises(FleetscopeError, match="finite"):
        fr.check_grid(0, float("inf"), 15)
    with pytest.raises(FleetscopeError, match="cells"):
        fr.check_grid(0, 15.0 * 1000, 15, series=fr.MAX_GRID_CELLS // 500)
    raw = {"m": [fr.RawSeries({"a": "1"}, np.array([0.0, 1e9]), np.array([1.0, 2.0]))]}
    with pytest.raises(FleetscopeError, match="grid times"):
        fr.build_frames(raw, 0.0, 1e9, 1.0)


@pytest.mark.parametrize("phase", ["head", "body"])
def test_a_trickling_server_is_cut_off_at_the_whole_request_deadline(phase):
    with trickling_server(phase, gap_s=0.1) as url:
        client = PrometheusClient(url, timeout=1.0)
        started = time.monotonic()
        with pytest.raises(FleetscopeError, match=r"did not answer within 1 s \(the whole answer"):
            client.query_range("up", T0, T0 + 60, 15)
        took = time.monotonic() - started
        client.close()
    assert 0.9 < took < 3.0, took


def test_analyze_against_a_trickling_server_is_one_clear_line(capsys):
    with trickling_server("body", gap_s=0.1) as url:
        started = time.monotonic()
        rc = main(["analyze", "--prometheus", url, "--start=-10m", "--timeout", "1", "--format", "json"])
        took = time.monotonic() - started
    err = capsys.readouterr().err.strip()
    assert rc == 1 and len(err.splitlines()) == 1 and "did not answer within 1 s" in err, err
    assert took < 5, took


@pytest.mark.parametrize("chunked", [False, True])
def test_an_oversize_answer_is_refused_without_reading_it_all(capsys, chunked):
    size = 64 * 1024 * 1024
    with oversize_server(size, chunked=chunked) as (url, sent):
        rc = main(
            [
                "analyze",
                "--prometheus",
                url,
                "--start=-10m",
                "--max-answer-bytes",
                "1000000",
                "--format",
                "json",
            ]
        )
    err = capsys.readouterr().err.strip()
    assert rc == 1 and len(err.splitlines()) == 1, err
    assert "over 1,000,000 bytes (--max-answer-bytes)" in err
    assert sent and max(sent) < size  # the client hung up long before the end


def test_the_cli_default_is_the_loaders():
    assert DEFAULT_MAX_ANSWER_BYTES == LOADER_DEFAULT == 256 * 1024 * 1024
