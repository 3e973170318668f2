"""The whole window of ``analyze --prometheus`` is bounded, not only each answer (issue 26, item 13).

Each answer is bounded by ``--max-answer-bytes`` and ``--timeout``; a window is one query per metric
and time chunk, so many answers each just under the limit added up to an out-of-memory (29 x 266 MB
decoded to 5.6 GB), and a query that started late ran its own full timeout after the first had
failed (``analyze`` gave up after twice ``--timeout``). These run a real HTTP server on loopback that
answers well-formed matrices; the load must stop early, with one line naming the flag to change.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetscope.analyzers.core import LOADED
from fleetscope.cli import main
from fleetscope.errors import FleetscopeError
from fleetscope.window import budget as wb
from fleetscope.window.prometheus import PrometheusAccess, count_samples, decode_matrix, load_prometheus
from tests.support.http import http_server

T0 = 1_796_000_000.0


def matrix(pairs: int, pad: int = 0) -> bytes:
    """A ``query_range`` answer of one series with ``pairs`` samples on a 15 s grid (and a label
    of ``pad`` characters)."""
    values = ",".join(f'[{T0 + 15 * i:.3f},"{i % 7}.5"]' for i in range(pairs))
    return (
        '{"status":"success","data":{"resultType":"matrix","result":[{"metric":'
        '{"__name__":"m","node":"a","pad":"' + "p" * pad + '"},"values":[' + values + "]}]}}"
    ).encode()


class Matrices(BaseHTTPRequestHandler):
    """Every query answered with the same matrix; ``chunked`` without a Content-Length; counts answers."""

    body: ClassVar[bytes] = b""
    chunked: ClassVar[bool] = False
    answered: ClassVar[list[int]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if self.chunked:
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            try:
                for i in range(0, len(self.body), 8192):
                    part = self.body[i : i + 8192]
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                self.wfile.write(b"0\r\n\r\n")
            except OSError:
                return
        else:
            self.send_header("Content-Length", str(len(self.body)))
            self.end_headers()
            try:
                self.wfile.write(self.body)
            except OSError:
                return
        self.answered.append(len(self.body))

    def log_message(self, *args: object) -> None:
        pass


def _serve(body: bytes, chunked: bool) -> type[Matrices]:
    return type("M", (Matrices,), {"body": body, "chunked": chunked, "answered": []})


@pytest.mark.parametrize("chunked", [False, True])
def test_answers_each_under_the_limit_cannot_add_up_past_the_windows_budget(capsys, monkeypatch, chunked):
    monkeypatch.setattr(wb, "MAX_GRID_CELLS", 1000)  # the floor of the byte budget: 24 kB
    body = matrix(3, pad=20_000)  # few samples, many bytes
    handler = _serve(body, chunked)
    limit = len(body) + 100  # every answer just under --max-answer-bytes: 4 of them pass the budget
    with http_server(handler) as hostport:
        rc = main(
            [
                "analyze",
                "--prometheus",
                f"http://{hostport}",
                "--start",
                str(T0),
                "--end",
                str(T0 + 15 * 1999),
                "--max-answer-bytes",
                str(limit),
                "--format",
                "json",
            ]
        )
    err = capsys.readouterr().err.strip()
    assert rc == 1 and len(err.splitlines()) == 1, err
    assert "for one window" in err and "--max-answer-bytes" in err and "Traceback" not in err
    # Refused once the answers together pass 4 x the limit, with at most the queries in flight after.
    assert len(LOADED) > 2 * wb.WINDOW_ANSWERS
    assert len(handler.answered) <= wb.WINDOW_ANSWERS + 4, handler.answered


def test_the_samples_of_all_answers_are_counted_before_decoding(monkeypatch):
    monkeypatch.setattr(wb, "MAX_GRID_CELLS", 5000)
    handler = _serve(matrix(2000), False)
    with http_server(handler) as hostport, pytest.raises(FleetscopeError, match="--step") as err:
        load_prometheus(PrometheusAccess(f"http://{hostport}"), T0, T0 + 15 * 1999, 15, LOADED)
    assert "over 5,000 samples or grid cells" in str(err.value)
    assert len(handler.answered) <= 3 + 4  # the third answer passes the budget; queries in flight


class LateAndHanging(BaseHTTPRequestHandler):
    """The first query answered after ``first_s``, every other one never (until ``release``)."""

    first_s: ClassVar[float] = 1.0
    release: ClassVar[threading.Event] = threading.Event()
    seen: ClassVar[list[float]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.seen.append(time.monotonic())
        if len(self.seen) == 1:
            time.sleep(self.first_s)
            body = matrix(3)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self.release.wait(30)

    def log_message(self, *args: object) -> None:
        pass


def _query_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("fleetscope-query")]


def test_analyze_gives_up_after_the_timeout_overall_not_twice_it(capsys):
    """A query sent when the first answer came (at 1 s) used to run its own 1.5 s: 2.5 s in all."""
    handler = type("H", (LateAndHanging,), {"release": threading.Event(), "seen": []})
    for t in _query_threads():  # an earlier test's queries, still ending
        t.join(5)
    with http_server(handler) as hostport:
        started = time.monotonic()
        rc = main(
            [
                "analyze",
                "--prometheus",
                f"http://{hostport}",
                "--start",
                str(T0),
                "--end",
                str(T0 + 600),
                "--timeout",
                "1.5",
                "--format",
                "json",
            ]
        )
        for t in _query_threads():
            t.join(5)
        took = time.monotonic() - started
        handler.release.set()
    err = capsys.readouterr().err.strip()
    assert rc == 1 and len(err.splitlines()) == 1 and "did not answer within 1.5 s" in err, err
    assert len(handler.seen) >= 5  # a fifth query was sent late, after the first answer
    assert took < 1.5 + 0.6, took  # every query ended at the one deadline


def test_the_byte_budget_is_the_larger_of_four_answers_and_the_cell_limit_as_json():
    """A window at the cell limit (512 nodes x 2 h at 15 s: 1.4 GB of JSON in 29 answers) still loads."""
    assert wb.LoadBudget("u", 1, 256 << 20).max_bytes == wb.BYTES_PER_CELL * wb.MAX_GRID_CELLS > 2_000_000_000
    assert wb.LoadBudget("u", 1, 1 << 30).max_bytes == 4 << 30


LABEL = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)


@settings(max_examples=80, deadline=None, derandomize=True, database=None)
@given(
    series=st.lists(
        st.tuples(
            st.dictionaries(st.sampled_from(["node", "gpu", "x"]), LABEL, max_size=3),
            st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=30),
        ),
        max_size=6,
    )
)
def test_samples_are_counted_before_decoding_never_fewer_than_decoded(series):
    """The count the budget takes before decoding (in the answer's bytes, as Prometheus lays it out,
    with any label text) is at least what the decoder gives."""
    result = [
        {
            "metric": {"__name__": "m", **labels},
            "values": [[T0 + 15 * i, repr(v) if v == v else "NaN"] for i, v in enumerate(values)],
        }
        for labels, values in series
    ]
    body = json.dumps(
        {"status": "success", "data": {"resultType": "matrix", "result": result}}, separators=(",", ":")
    ).encode()
    samples, with_samples = count_samples(body)
    _, decoded = decode_matrix(body)
    assert samples >= sum(t.size for _, t, _ in decoded)
    assert with_samples >= len(decoded)
