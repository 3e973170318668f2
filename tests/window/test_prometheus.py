"""The Prometheus loader's fast paths give exactly what the plain ones give.

Concurrent and chunked queries, the PromQL push-down of what the detectors do not read, the fast
decoder of matrix answers and the direct grid builder are each compared against the plain way
(one query at a time, every series, ``json`` + ``frames.build_frames``), on a real Prometheus and on
crafted answers.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import numpy as np
import pytest

from fleetscope import contract as c
from fleetscope.analyzers.core import analyze
from fleetscope.analyzers.features import METRICS_USED
from fleetscope.errors import FleetscopeError
from fleetscope.simulate.record import write_scenario
from fleetscope.simulate.spec import FaultSpec, ScenarioSpec
from fleetscope.window import prometheus as lp
from fleetscope.window.aliases import with_aliases
from fleetscope.window.budget import DEFAULT_RETRIES
from fleetscope.window.frames import Frames, RawSeries, build_frames, make_grid
from tests.support.prom import Prometheus, backfill_openmetrics

pytestmark = [pytest.mark.server]

T0 = 1796032800.0


def _same_frames(a: Frames, b: Frames) -> None:
    assert np.array_equal(a.times, b.times)
    assert sorted(a.metrics) == sorted(b.metrics)
    for name, fa in a.metrics.items():
        fb = b.metrics[name]
        assert fa.labels.equals(fb.labels), name
        assert np.array_equal(fa.values, fb.values, equal_nan=True), name


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("loader")
    spec = ScenarioSpec(
        name="loader",
        nodes=2,
        duration_s=900,
        seed=4,
        faults=[FaultSpec(kind="gpu_lost", at_s=420, node=1, gpu=2)],
    )
    out, _ = write_scenario(spec, tmp / "s.om")
    backfill_openmetrics(out, tmp / "data")
    with Prometheus(tmp / "p", data_dir=tmp / "data") as p:
        yield p, spec.start, spec.start + spec.duration_s


def test_concurrent_chunked_queries_give_the_same_frames(prom, monkeypatch):
    p, start, end = prom
    seen: list[float] = []
    one = lp.load_prometheus(lp.PrometheusAccess(p.url), start, end, 15.0, METRICS_USED, concurrency=1)
    four = lp.load_prometheus(
        lp.PrometheusAccess(p.url), start, end, 15.0, METRICS_USED, concurrency=4, progress=seen.append
    )
    _same_frames(one, four)
    assert seen == sorted(seen) and seen[-1] == 1.0
    monkeypatch.setattr(lp, "MAX_POINTS", 7)  # 61 grid times -> 9 chunks per metric, answers out of order
    for n in (1, 3, 8):
        _same_frames(
            one, lp.load_prometheus(lp.PrometheusAccess(p.url), start, end, 15.0, METRICS_USED, concurrency=n)
        )
    assert one.has(c.GPU_UP) and one.has(c.TRAINING_PHASE_SECONDS)


def test_fast_decoding_and_grid_match_the_plain_json_path(prom):
    """Every answer decoded both ways; the frames built directly equal ``build_frames``'."""
    p, start, end = prom
    client = lp.PrometheusClient(p.url)
    grid = make_grid(start, end, 15.0)
    raw: dict[str, list[RawSeries]] = {}
    fast = Frames(times=grid, step=15.0)
    for name in METRICS_USED:
        resp = client._send(
            "query_range",
            {"query": lp.metric_query(name, 29.999), "start": repr(start), "end": repr(end), "step": "15.0"},
        )
        decoded = lp._decode_fast(resp.content)
        assert decoded is not None, name  # Prometheus' layout takes the fast path
        _, series = decoded
        _, reference = lp._decode_json(resp.content)
        assert len(series) == len(reference)
        for (l1, t1, v1), (l2, t2, v2) in zip(series, reference, strict=True):
            assert l1 == l2 and np.array_equal(t1, t2) and np.array_equal(v1, v2, equal_nan=True)
        raw[name] = [RawSeries(*s) for s in reference]
        frame = lp.frame_from_grid(series, grid)
        if frame is not None:
            fast.metrics[name] = frame
    client.close()
    _same_frames(fast, build_frames({k: v for k, v in raw.items() if v}, start, end, 15.0, gridded=True))


def test_pushdown_asks_for_less_and_changes_no_result(prom, monkeypatch):
    p, start, end = prom
    pushed = lp.load_prometheus(lp.PrometheusAccess(p.url), start, end, 15.0, METRICS_USED)
    monkeypatch.setattr(lp, "PUSHDOWN", {})
    everything = lp.load_prometheus(lp.PrometheusAccess(p.url), start, end, 15.0, METRICS_USED)
    peaks = pushed.get(c.GPU_PEAK_FLOPS)
    assert set(peaks.column("dtype")) == {"bf16"}
    assert len(peaks) < len(everything.get(c.GPU_PEAK_FLOPS))
    # Only the contract's phases are asked for, and every phase the (classic) recording has comes back.
    phases = set(pushed.get(c.TRAINING_PHASE_SECONDS).column("phase"))
    assert phases <= set(c.TRAINING_PHASES)
    assert phases == set(everything.get(c.TRAINING_PHASE_SECONDS).column("phase")) >= set(c.COMPUTE_PHASES)
    a, b = analyze(pushed), analyze(everything)
    assert a.findings and a.jobs and next(iter(a.jobs.values())).mfu  # MFU needs the bf16 peak
    assert dataclasses.asdict(a) == dataclasses.asdict(b)


def _answer(result: list[dict], **extra) -> dict:
    return {"status": "success", "data": {"resultType": "matrix", "result": result}, **extra}


def _compact(doc: dict) -> str:
    return json.dumps(doc, separators=(",", ":"))  # Prometheus' layout


@pytest.mark.parametrize("body", [
    # values before metric, a label value that looks like the layout, NaN and infinities, empty values
    _compact(_answer([
        {"values": [[T0, "1.5"], [T0 + 15, "NaN"], [T0 + 30, "+Inf"], [T0 + 45.123, "-Inf"]],
         "metric": {"__name__": "m", "a": 'x"values":[[1,"2"]]', "b": "\\\\"}},
        {"metric": {"a": "empty"}, "values": []},
        {"metric": {"a": "y"}, "values": [[T0, "-1e-300"], [T0 + 15, "123456789012345678"]]},
    ], warnings=['"values":[ in a warning'])),
    # Thanos/VictoriaMetrics-style spacing: falls back to json
    json.dumps(_answer([{"metric": {"a": "z"}, "values": [[T0, "2"], [T0 + 15, "3"]]}]), indent=1),
    _compact(_answer([])),
    _compact(_answer([{"metric": {"a": "h"}, "histograms": [[T0, {"count": "1"}]]}])),
])  # fmt: skip
def test_decode_matrix_equals_json(body):
    doc, series = lp.decode_matrix(body.encode())
    _, reference = lp._decode_json(body.encode())
    assert doc["status"] == "success" and doc["data"]["resultType"] == "matrix"
    assert len(series) == len(reference)
    for (l1, t1, v1), (l2, t2, v2) in zip(series, reference, strict=True):
        assert l1 == l2 and "__name__" not in l1
        assert np.array_equal(t1, t2) and np.array_equal(v1, v2, equal_nan=True)
    if series and series[0][0]["a"].startswith("x"):
        assert lp._decode_fast(body.encode()) is not None
        assert list(series[0][1]) == [T0, T0 + 15, T0 + 30, T0 + 45.123]
        assert np.isnan(series[0][2][1]) and list(series[0][2][2:]) == [np.inf, -np.inf]
        assert series[0][0]["b"] == "\\\\" and len(series) == 2


def test_frame_from_grid_equals_build_frames_on_messy_series():
    """Off-grid samples, duplicate label sets (the last write wins), NaN, all-NaN series, empty labels."""
    rng = np.random.default_rng(3)
    grid = make_grid(T0, T0 + 300, 15.0)
    series = []
    for k in range(40):
        n = int(rng.integers(1, 25))
        t = T0 + 15.0 * rng.integers(-2, 24, n) + rng.choice([0.0, 0.0, 0.0, 0.004, 7.5], n)
        v = np.where(rng.random(n) < 0.15, np.nan, rng.normal(size=n))
        labels = {"node": f"n{k % 9}", "gpu": str(k % 2), "extra": "" if k % 3 else "e"}
        series.append((labels, t, v))
    series.append(({"node": "nan-only"}, np.array([T0, T0 + 15]), np.array([np.nan, np.nan])))
    frame = lp.frame_from_grid(series, grid)
    ref = build_frames({"m": [RawSeries(*s) for s in series]}, T0, T0 + 300, 15.0, gridded=True).metrics["m"]
    assert frame is not None and frame.labels.equals(ref.labels)
    assert np.array_equal(frame.values, ref.values, equal_nan=True)
    assert "nan-only" not in set(frame.column("node"))
    assert lp.frame_from_grid([], grid) is None


class _Recorder(BaseHTTPRequestHandler):
    """Answers every range query with one series; a query naming ``fail`` gets ``status`` after ``delay``."""

    status = 503
    answer = b"overloaded"
    fail = "DCGM_FI_DEV_GPU_TEMP"
    delay = 0.0
    seen: ClassVar[list[dict]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
        type(self).seen.append(dict(self.headers) | {"body": body})
        if self.fail in body:
            time.sleep(self.delay)
            self.send_response(self.status)
            payload = self.answer
        else:
            self.send_response(200)
            payload = json.dumps(  # spaced JSON: decoded by the json fallback
                _answer([{"metric": {"Hostname": "n", "gpu": "0"}, "values": [[T0, "1"]]}])
            ).encode()
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *a) -> None:
        pass


@pytest.fixture
def recorder():
    servers = []

    def start(**attrs):
        handler = type("R", (_Recorder,), {"seen": [], **attrs})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}", handler

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def test_one_failing_query_is_one_clear_error(recorder):
    url, handler = recorder(status=503)
    with pytest.raises(FleetscopeError, match=r"answered 503: overloaded"):
        lp.load_prometheus(lp.PrometheusAccess(url), T0, T0 + 600, 15.0, METRICS_USED, concurrency=4)
    assert any(c.DCGM_FI_DEV_GPU_TEMP in h["body"] for h in handler.seen)
    # every query sent once, the failing one retried (a 503 may pass), then the load ends
    # (with the older names of the metrics that have one: contract.METRIC_ALIASES)
    assert len(handler.seen) <= len(with_aliases(METRICS_USED) or ()) + DEFAULT_RETRIES
    assert sum(c.DCGM_FI_DEV_GPU_TEMP in h["body"] for h in handler.seen) == 1 + DEFAULT_RETRIES
    url, _ = recorder(fail="training_", delay=0.3)
    started = time.monotonic()
    with pytest.raises(FleetscopeError, match=r"did not answer within 0.1 s"):
        lp.load_prometheus(
            lp.PrometheusAccess(url, timeout=0.1), T0, T0 + 600, 15.0, METRICS_USED, concurrency=4
        )
    assert time.monotonic() - started < 5  # the first error ends the load


@pytest.mark.parametrize("answer", [
    b"overloaded",
    b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1]]}]}}',
    b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":"x","values":[[1,"2"]]}]}}',
    b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"x"]]}]}}',
])  # fmt: skip
def test_an_answer_in_another_layout_is_one_clear_error(recorder, answer):
    url, _ = recorder(status=200, answer=answer)
    with pytest.raises(FleetscopeError, match=r"answered 200 with something that is not the Prometheus API"):
        lp.load_prometheus(lp.PrometheusAccess(url), T0, T0 + 600, 15.0, METRICS_USED, concurrency=4)


def test_every_concurrent_chunk_is_signed_and_carries_the_headers(recorder, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setattr(lp, "MAX_POINTS", 10)  # 41 grid times -> 5 chunks
    url, handler = recorder(fail="no metric has this name")
    names = (c.GPU_UP, c.DCGM_FI_DEV_GPU_TEMP, c.TRAINING_STEPS)
    access = lp.PrometheusAccess(
        url + "/workspaces/ws-1", sigv4_region="us-west-2", headers={"X-Scope-OrgID": "team-a"}
    )
    frames = lp.load_prometheus(access, T0, T0 + 600, 15.0, names, concurrency=4)
    assert len(handler.seen) == 3 * 5
    for h in handler.seen:
        assert h["X-Scope-OrgID"] == "team-a"
        assert h["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
        assert "/us-west-2/aps/aws4_request" in h["Authorization"]
    starts = sorted({float(b.split("start=")[1].split("&")[0]) for b in (h["body"] for h in handler.seen)})
    assert starts == [T0 + 150.0 * i for i in range(5)]
    assert frames.get(c.GPU_UP).values[0, 0] == 1.0


class _FirstBusy(_Recorder):
    """Answers every query 503 the first time it is sent, then as :class:`_Recorder` does."""

    fail = "\0never"
    asked: ClassVar[set[str]] = set()

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode()
        if body not in self.asked:
            self.asked.add(body)
            payload = b"busy"
            self.send_response(503)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        self.send_response(200)
        series = [{"metric": {"Hostname": "n", "gpu": "0"}, "values": [[T0, "1"]]}]
        payload = json.dumps(_answer(series)).encode()
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def test_a_503_is_retried_by_analyze_and_record() -> None:
    """``serve`` retried a 503; ``analyze --prometheus`` and ``record --prometheus`` failed on the
    first (issue 36, item 8)."""
    handler = type("B", (_FirstBusy,), {"asked": set(), "seen": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        _load_twice(url, handler)
    finally:
        server.shutdown()
        server.server_close()


def _load_twice(url: str, handler: type[_FirstBusy]) -> None:
    frames = lp.load_prometheus(
        lp.PrometheusAccess(url), T0, T0 + 600, 15.0, [c.DCGM_FI_DEV_GPU_TEMP], concurrency=1
    )
    assert len(frames.get(c.DCGM_FI_DEV_GPU_TEMP))
    handler.asked = set()
    raw = lp.raw_from_prometheus(lp.PrometheusAccess(url), T0, T0 + 600, 15.0, [c.DCGM_FI_DEV_GPU_TEMP])
    assert list(raw) == [c.DCGM_FI_DEV_GPU_TEMP]


@pytest.mark.parametrize("answer", [
    b"overloaded",
    b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":"x","values":[[1,"2"]]}]}}',
    b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[["t","2"]]}]}}',
    b'{"status":"success","data":{"resultType":"vector","result":[]}}',
])  # fmt: skip
def test_the_spans_of_an_answer_in_another_layout_are_one_clear_error(recorder, answer):
    url, _ = recorder(status=200, answer=answer, fail="group")
    client = lp.PrometheusAccess(url).client()
    try:
        with pytest.raises(FleetscopeError, match=r"answered 200 with something|answered a vector"):
            client.query_range_spans("group(x)", T0, T0 + 600, 60.0)
    finally:
        client.close()


def test_the_spans_are_the_first_and_last_sample_times(recorder):
    values = [[T0 + 60 * i, "1"] for i in range(4)]
    body = json.dumps(_answer([
        {"metric": {"__name__": "x", "Hostname": "a"}, "values": values},
        {"metric": {"Hostname": "b", "job_id": "7"}, "values": values[1:2]},
        {"metric": {"Hostname": "c"}, "values": []},
    ])).encode()  # fmt: skip
    url, _ = recorder(status=200, answer=body, fail="group")
    client = lp.PrometheusAccess(url).client()
    try:
        spans = client.query_range_spans("group(x)", T0, T0 + 600, 60.0)
        assert spans == [
            ({"Hostname": "a"}, T0, T0 + 180.0),
            ({"Hostname": "b", "job_id": "7"}, T0 + 60.0, T0 + 60.0),
        ]
        series = client.query_range("group(x)", T0, T0 + 600, 60.0)
        assert [(lab, t[0], t[-1]) for lab, t, _ in series] == spans  # what the full decode gives
    finally:
        client.close()
