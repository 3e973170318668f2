"""Load a window from any Prometheus-compatible HTTP API into frames.

One ``query_range`` per metric the analyzers read (``last_over_time(<metric>[L])``, the same grid
rule the file loader applies, see ``frames.py``), split into time chunks below Prometheus' 11,000
points-per-series limit, all chunks on one grid. Works with Prometheus, Thanos, Mimir,
VictoriaMetrics and Amazon Managed Prometheus; for AMP, requests are signed with SigV4 through
botocore (``sigv4_region``), with credentials from the usual AWS chain.

Speed (one service cycle fetches about 40 MB of JSON for a 64-node job's last 30 minutes):

* the queries run ``concurrency`` at a time (default 4) on a small thread pool, so Prometheus
  evaluates and serializes one answer while this process decodes another;
* a metric of which the detectors read only part is asked for only that part, where the PromQL is
  exactly equivalent (:data:`PUSHDOWN`);
* an answer's sample arrays are not turned into one Python list per sample: they are cut out of the
  body and parsed by pandas' C CSV reader into one float array, and only the small rest (labels,
  status) goes through ``json``. Anything unexpected in the layout falls back to plain ``json``.

The answers are assembled in query order, so the frames are the same whatever order they arrive in.

Limits, because the far end is outside input: ``timeout`` bounds each *whole* request (connecting,
sending, and reading the last byte of the answer; a server that trickles one byte every two seconds
is cut off at the deadline, see :class:`_Deadline`), and ``max_answer_bytes`` bounds each answer's
decoded size (read in chunks, refused past the limit before it is decoded). Both end in one
:class:`FleetscopeError`. Non-finite sample values in an answer are dropped (with one warning), as
the file loader drops them.
"""

from __future__ import annotations

import io
import json
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import numpy as np
import pandas as pd

from fleetscope import contract as c
from fleetscope.defaults import MAX_ANSWER_BYTES
from fleetscope.errors import FleetscopeError, NoData
from fleetscope.times import parse_time, rfc3339
from fleetscope.window.aliases import fold_aliases, with_aliases
from fleetscope.window.budget import DEFAULT_RETRIES, FIRST_BACKOFF_S, LoadBudget, memory_is_one_line
from fleetscope.window.frames import (
    Frames,
    MetricFrame,
    RawSeries,
    Skipped,
    check_grid,
    check_window,
    lookback_seconds,
    make_grid,
)

log = logging.getLogger(__name__)

#: Largest answer (decoded bytes) read from Prometheus, by default: 256 MiB.
DEFAULT_MAX_ANSWER_BYTES = MAX_ANSWER_BYTES

#: Points per series per request; Prometheus refuses more than 11,000.
MAX_POINTS = 10000
#: Range queries in flight at once.
DEFAULT_CONCURRENCY = 4

#: metric -> (extra label matchers, labels kept by ``max by`` or None): only the part the detectors
#: read, where the PromQL gives exactly the values the detectors would compute from the whole.
#: ``training_phase_seconds_total``: ``features.rank_signals`` selects exactly ``c.TRAINING_PHASES``
#: (an application may report more phases). ``fleetscope_gpu_peak_flops``: ``signals.mfu._peaks`` reads
#: only the bf16 peak of each (node, GPU), the max over that GPU's series; the other dtypes and the
#: other labels would double the largest answer for nothing.
PUSHDOWN: dict[str, tuple[str, tuple[str, ...] | None]] = {
    c.TRAINING_PHASE_SECONDS: (f'phase=~"{"|".join(re.escape(p) for p in c.TRAINING_PHASES)}"', None),
    c.GPU_PEAK_FLOPS: ('dtype="bf16"', (c.NODE_LABEL, "gpu", "dtype")),
}

#: One decoded series: labels (without ``__name__``), sample times, sample values.
#: One answered series: its labels, sample times and values.
AnsweredSeries = tuple[dict[str, str], np.ndarray, np.ndarray]


@dataclass(frozen=True)
class PrometheusAccess:
    """How to reach a Prometheus-compatible API: its base URL, the time a whole load may take
    (``--timeout``), the SigV4 region that signs its requests (Amazon Managed Prometheus; None:
    unsigned), extra headers (``--header``) and the largest answer read (``--max-answer-bytes``).

    One value, built once from the command line, and the one place a :class:`PrometheusClient` is
    built from (:meth:`client`)."""

    url: str
    timeout: float = 30.0
    sigv4_region: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    max_answer_bytes: int = MAX_ANSWER_BYTES

    def client(self) -> PrometheusClient:
        """A new client of this API (close it when done)."""
        return PrometheusClient(
            self.url, self.timeout, self.sigv4_region, dict(self.headers), self.max_answer_bytes
        )


def _duration_ms(seconds: float) -> str:
    return f"{round(seconds * 1000)}ms"


class PrometheusClient:
    """A small HTTP client for the query API, with optional SigV4 signing; safe to share between
    threads (each thread gets its own HTTP session)."""

    def __init__(
        self,
        url: str,
        timeout: float = 30.0,
        sigv4_region: str | None = None,
        headers: dict[str, str] | None = None,
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    ) -> None:
        if not timeout > 0:
            raise FleetscopeError("the Prometheus timeout must be positive")
        if max_answer_bytes < 1:
            raise FleetscopeError("the largest Prometheus answer must be at least 1 byte")
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.max_answer_bytes = int(max_answer_bytes)
        self.headers = dict(headers or {})
        self.region = sigv4_region
        self._credentials = None
        self._local = threading.local()
        self._sessions: list = []
        self._lock = threading.Lock()
        #: The load these requests belong to (:mod:`.budget`): its deadline, bytes and samples.
        self.budget: LoadBudget | None = None
        if sigv4_region:
            import botocore.session

            creds = botocore.session.Session().get_credentials()
            if creds is None:
                raise FleetscopeError("--sigv4 needs AWS credentials (environment, profile or instance role)")
            self._credentials = creds

    @property
    def session(self):
        s = getattr(self._local, "session", None)
        if s is None:
            import requests

            s = self._local.session = requests.Session()
            adapter = _watched_adapter()
            s.mount("http://", adapter)
            s.mount("https://", adapter)
            with self._lock:
                self._sessions.append(s)
        return s

    def close(self) -> None:
        with self._lock:
            sessions, self._sessions = self._sessions, []
        for s in sessions:
            s.close()

    def _signed(self, url: str, body: str) -> dict[str, str]:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        req = AWSRequest(
            method="POST", url=url, data=body, headers={"Content-Type": "application/x-www-form-urlencoded"}
        )
        SigV4Auth(self._credentials, "aps", self.region).add_auth(req)
        return dict(req.headers.items())

    def _send(self, path: str, params: dict[str, str]) -> _Answer:
        """POST one API call; the whole exchange within ``timeout``, the answer within the size limit."""
        import requests

        url = f"{self.url}/api/v1/{path}"
        body = urlencode(params)
        headers = {"Content-Type": "application/x-www-form-urlencoded", **self.headers}
        if self._credentials is not None:
            headers.update(self._signed(url, body))
        seconds, budget = self.timeout, self.budget
        if budget is not None:
            seconds = min(seconds, budget.remaining())
            if seconds <= 0:
                raise budget.too_slow()
        deadline = _Deadline(seconds)
        _current.deadline = deadline
        try:
            resp = self.session.post(url, data=body, headers=headers, timeout=seconds, stream=True)
            try:
                content = self._read(resp)
            finally:
                resp.close()
        except requests.exceptions.RequestException as exc:
            if deadline.expired or isinstance(exc, requests.exceptions.Timeout):
                raise self._too_slow() from None
            reason = type(exc).__name__
            raise TransientError(f"cannot reach Prometheus at {self.url} ({reason})") from None
        except OSError:
            if deadline.expired:
                raise self._too_slow() from None
            raise TransientError(f"cannot reach Prometheus at {self.url} (connection lost)") from None
        finally:
            deadline.finish()
            _current.deadline = None
        if deadline.expired:  # the answer ended early because the deadline cut the connection
            raise self._too_slow()
        answer = _Answer(resp.status_code, content, resp.reason or "")
        if answer.status_code >= 500:
            raise TransientError(
                f"Prometheus at {self.url} answered {answer.status_code}: {_error_text(answer)}"
            )
        return answer

    def _read(self, resp) -> bytes:
        length = resp.headers.get("Content-Length", "")
        known = length.isdigit() and len(length) < 20
        if known and int(length) > self.max_answer_bytes:
            raise self._too_big()
        if known and self.budget is not None:
            self.budget.take_bytes(int(length))  # all answers together, before this one is read
        buf = bytearray()
        for chunk in resp.iter_content(1 << 16):
            buf += chunk
            if len(buf) > self.max_answer_bytes:
                raise self._too_big()
            if not known and self.budget is not None:
                self.budget.take_bytes(len(chunk))
        return bytes(buf)

    def _too_slow(self) -> FleetscopeError:
        if self.budget is not None and self.budget.remaining() <= 0:
            return self.budget.too_slow()
        return FleetscopeError(
            f"Prometheus at {self.url} did not answer within {self.timeout:g} s "
            "(the whole answer, by --timeout)"
        )

    def _too_big(self) -> FleetscopeError:
        return FleetscopeError(
            f"Prometheus at {self.url} sent an answer over {self.max_answer_bytes:,} bytes "
            "(--max-answer-bytes); narrow the window (--start/--end, --window) or coarsen --step"
        )

    def _check(self, resp, doc) -> dict:
        if not isinstance(doc, dict):
            raise FleetscopeError(
                f"{self.url} answered {resp.status_code} with something that is not the Prometheus API"
            )
        if resp.status_code != 200 or doc.get("status") != "success":
            raise FleetscopeError(
                f"Prometheus at {self.url} refused the query ({resp.status_code}): "
                f"{str(doc.get('error', ''))[:200]}"
            )
        return doc.get("data") or {}

    def query_range(self, query: str, start: float, end: float, step: float) -> list[AnsweredSeries]:
        """Every series of a range query, its samples as float arrays (see :func:`decode_matrix`)."""
        resp = self._send_range(query, start, end, step)
        try:
            doc, series = decode_matrix(resp.content)
        except (ValueError, TypeError, IndexError, AttributeError):  # not JSON, or not a matrix's layout
            doc, series = None, []
        self._check_matrix(resp, doc)
        return series

    def query_range_spans(
        self, query: str, start: float, end: float, step: float
    ) -> list[tuple[dict[str, str], float, float]]:
        """Every series of a range query with its first and last sample's time, for answers of many
        series of a few samples each (the sharded service's discovery: a row per node), where the
        per-series arrays of :meth:`query_range` cost more than reading the answer's JSON."""
        resp = self._send_range(query, start, end, step)
        out: list[tuple[dict[str, str], float, float]] = []
        try:
            doc = json.loads(resp.content)
            for r in _results(doc):
                values = r.get("values") or []
                if values:
                    labels = {k: str(v) for k, v in (r.get("metric") or {}).items() if k != "__name__"}
                    out.append((labels, float(values[0][0]), float(values[-1][0])))
        except (ValueError, TypeError, IndexError, AttributeError):  # not JSON, or not a matrix's layout
            doc, out = None, []
        self._check_matrix(resp, doc)
        return out

    def _send_range(self, query: str, start: float, end: float, step: float) -> _Answer:
        resp = self._send(
            "query_range",
            {"query": query, "start": repr(float(start)), "end": repr(float(end)), "step": repr(float(step))},
        )
        if self.budget is not None and resp.status_code == 200:  # counted before anything is decoded
            self.budget.take_samples(*count_samples(resp.content), query)
        return resp

    def _check_matrix(self, resp: _Answer, doc: object) -> None:
        data = self._check(resp, doc)
        if data.get("resultType") not in (None, "matrix"):
            raise FleetscopeError(f"{self.url} answered a {data.get('resultType')} to a range query")


class TransientError(FleetscopeError):
    """A failure that may pass (connection refused or lost, a 5xx): worth a retry."""


class _Answer:
    """One answer, read whole: status, body bytes, reason phrase."""

    def __init__(self, status_code: int, content: bytes, reason: str) -> None:
        self.status_code = status_code
        self.content = content
        self.reason = reason


def _error_text(resp: _Answer) -> str:
    try:
        doc = json.loads(resp.content)
        return str(doc.get("error", ""))[:200] if isinstance(doc, dict) else resp.reason
    except (ValueError, UnicodeDecodeError):
        return resp.content.decode("utf-8", "replace").strip()[:200] or resp.reason


# ---------------------------------------------------------------------- the whole-request deadline
#: The deadline of the request this thread is sending (read by the watched connections).
_current = threading.local()


class _Deadline:
    """Cuts the connection of one request when its time is up.

    A socket timeout bounds each read, not the request: a server sending a byte a second keeps
    every read short and the request alive forever. A timer thread therefore shuts the request's
    socket down at the deadline, which wakes the blocked read at once. The connection is known
    because the connection classes of :func:`_watched_adapter` register themselves with the
    deadline of the thread that uses them.
    """

    def __init__(self, seconds: float) -> None:
        self.expired = False
        self.conn: object | None = None
        self._done = False
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def _expire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.expired = True
            sock = getattr(self.conn, "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def finish(self) -> None:
        with self._lock:
            self._done = True
        self._timer.cancel()


def _register(conn: object) -> None:
    deadline = getattr(_current, "deadline", None)
    if deadline is not None:
        deadline.conn = conn


_ADAPTER: list = []


def _watched_adapter():
    """A requests adapter whose connections register with the current :class:`_Deadline`."""
    if not _ADAPTER:
        from requests.adapters import HTTPAdapter
        from urllib3.connection import HTTPConnection, HTTPSConnection
        from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

        def watched(base: type[HTTPConnection]) -> type:
            def connect(self: HTTPConnection) -> None:
                _register(self)
                base.connect(self)

            def request(self: HTTPConnection, *args: Any, **kwargs: Any) -> Any:
                _register(self)
                return base.request(self, *args, **kwargs)

            return type(f"Watched{base.__name__}", (base,), {"connect": connect, "request": request})

        pools = {
            "http": type(
                "WatchedHTTPPool", (HTTPConnectionPool,), {"ConnectionCls": watched(HTTPConnection)}
            ),
            "https": type(
                "WatchedHTTPSPool", (HTTPSConnectionPool,), {"ConnectionCls": watched(HTTPSConnection)}
            ),
        }

        class WatchedAdapter(HTTPAdapter):
            def init_poolmanager(self, *args, **kwargs) -> None:
                super().init_poolmanager(*args, **kwargs)
                self.poolmanager.pool_classes_by_scheme = pools

            def proxy_manager_for(self, *args, **kwargs):
                manager = super().proxy_manager_for(*args, **kwargs)
                manager.pool_classes_by_scheme = pools
                return manager

        _ADAPTER.append(WatchedAdapter)
    return _ADAPTER[0]()


# ---------------------------------------------------------------------- decoding a matrix answer
_VALUES = b'"values":['


def count_samples(body: bytes) -> tuple[int, int]:
    """(samples, series with samples) of a matrix answer, counted in its bytes before it is decoded:
    never fewer than it holds (a label value holding ``],[`` counts one more)."""
    series = body.count(_VALUES + b"[")
    return body.count(b"],[") + series, series


def decode_matrix(body: bytes) -> tuple[object, list[AnsweredSeries]]:
    """(the JSON document, its series with samples) of a ``query_range`` answer.

    Raises ``ValueError`` when the body is not JSON (and a ``TypeError``, ``IndexError`` or
    ``AttributeError`` for JSON in another layout). The document's ``values`` arrays are left
    empty; the samples come back as float arrays (``NaN``, ``+Inf``, ``-Inf`` as floats). Series
    without samples are left out.
    """
    fast = _decode_fast(body)
    return fast if fast is not None else _decode_json(body)


def _decode_json(body: bytes) -> tuple[object, list[AnsweredSeries]]:
    doc = json.loads(body)
    out: list[AnsweredSeries] = []
    for r in _results(doc):
        vals = r.get("values") or []
        if not vals:
            continue
        labels = {k: v for k, v in (r.get("metric") or {}).items() if k != "__name__"}
        out.append((labels, np.array([float(p[0]) for p in vals]), np.array([float(p[1]) for p in vals])))
    return doc, out


def _results(doc: object) -> list[dict]:
    data = doc.get("data") if isinstance(doc, dict) else None
    res = data.get("result") if isinstance(data, dict) else None
    return [r for r in res if isinstance(r, dict)] if isinstance(res, list) else []


def _decode_fast(body: bytes) -> tuple[object, list[AnsweredSeries]] | None:
    """The same as :func:`_decode_json` for Prometheus' compact layout, or None to fall back.

    ``"values":[`` can only occur in valid JSON as that key (a quote inside a string is escaped),
    and a values array holds only ``[<number>,"<number>"]`` pairs, so it ends at the first ``]]``.
    The pairs of all series become the lines of one CSV text (``t,"v"``), parsed in C; the body
    with every values array emptied is decoded by ``json`` for the labels and the status. Every
    count is checked; any surprise returns None.
    """
    split = _split_values(body)
    if split is None:
        return None
    rest, segments = split
    try:
        doc = json.loads(rest)
    except ValueError:
        return None
    results = [r for r in _results(doc) if "values" in r]
    if len(results) != len(segments) or len(results) != len(_results(doc)):
        return None
    counts = _pair_counts(segments)
    if counts is None:
        return None
    total = sum(counts)
    if total:
        text = b"\n".join(seg.replace(b"],[", b"\n") for seg in segments if seg)
        try:
            table = pd.read_csv(
                io.BytesIO(text),
                header=None,
                dtype=float,
                engine="c",
                keep_default_na=False,
                na_values=["NaN"],
            ).to_numpy()
        except (ValueError, pd.errors.ParserError):
            return None
        if table.shape != (total, 2):
            return None
    else:
        table = np.zeros((0, 2))
    out: list[AnsweredSeries] = []
    at = 0
    for r, n in zip(results, counts, strict=True):
        if n:
            labels = {k: v for k, v in (r.get("metric") or {}).items() if k != "__name__"}
            out.append((labels, table[at : at + n, 0], table[at : at + n, 1]))
            at += n
    return doc, out


def _split_values(body: bytes) -> tuple[bytes, list[bytes]] | None:
    """``body`` with every values array emptied, and each array's inside; None if one is odd."""
    pieces: list[bytes] = []
    segments: list[bytes] = []
    pos = i = 0
    while (i := body.find(_VALUES, i)) >= 0:
        s = i + len(_VALUES)
        nxt = body[s : s + 1]
        if nxt == b"]":
            segments.append(b"")
            i = s
            continue
        e = body.find(b"]]", s)
        if nxt != b"[" or e < 0:
            return None
        pieces.append(body[pos:s])
        segments.append(body[s + 1 : e])
        pos = i = e + 1
    pieces.append(body[pos:])
    return b"".join(pieces), segments


def _pair_counts(segments: list[bytes]) -> list[int] | None:
    """How many ``[t,"v"]`` pairs each values array holds; None when one is not only such pairs."""
    counts = []
    for seg in segments:
        n = seg.count(b"],[") + 1 if seg else 0
        # Exactly one pair per "[...]": one comma inside each, one between pairs, two quotes each.
        if seg and (
            seg.count(b"[") != n - 1
            or seg.count(b"]") != n - 1
            or seg.count(b",") != 2 * n - 1
            or seg.count(b'"') != 2 * n
        ):
            return None
        counts.append(n)
    return counts


# ---------------------------------------------------------------------- queries and frames
def metric_query(name: str, lookback_s: float, pushdown: bool = True, matcher: str = "") -> str:
    """The range query of one metric: its grid values (only the part the detectors read).
    ``matcher``: extra label matchers every query carries (a service shard's nodes)."""
    matchers, keep = PUSHDOWN.get(name, ("", None)) if pushdown else ("", None)
    sel = f'__name__="{name}"' + "".join(f",{m}" for m in (matchers, matcher) if m)
    q = f"last_over_time({{{sel}}}[{_duration_ms(lookback_s)}])"
    return f"max by ({', '.join(keep)}) ({q})" if keep else q


def frame_from_grid(
    series: list[AnsweredSeries], grid: np.ndarray, skipped: Skipped | None = None
) -> MetricFrame | None:
    """One metric's frame from query_range answers on ``grid`` (all chunks, in query order).

    The same result as ``frames.build_frames(..., gridded=True)``: series with the same labels
    (empty values dropped) are merged, a sample counts only on its own grid time (to the
    millisecond), the last one written wins, all-NaN series are left out. None when nothing is left.
    Non-finite values are dropped like the file loader drops them (counted in ``skipped``).
    """
    keys, table = grid_table(series, grid, skipped)
    return frame_of_table(keys, table)


#: A series' identity on the grid: its non-empty labels, sorted.
SeriesKey = tuple[tuple[str, str], ...]


def grid_table(
    series: list[AnsweredSeries], grid: np.ndarray, skipped: Skipped | None = None
) -> tuple[list[SeriesKey], np.ndarray]:
    """The answers of one metric placed on ``grid``: one column per series key (first-seen order),
    NaN where a series has no sample; all-NaN columns are kept (see :func:`frame_of_table`).

    Answers are already grid values, so each sample is placed by index on its own grid time;
    :func:`fleetscope.window.frames.grid_series` is the general rule (a lookback search) for
    samples scattered in time; at a lookback of 0 it places these the same way (this one also drops
    and counts non-finite values)."""
    keys: dict[SeriesKey, int] = {}
    cols, times, values = [], [], []
    for labels, t, v in series:
        key = tuple(sorted((k, x) for k, x in labels.items() if x != ""))
        cols.append(np.full(t.size, keys.setdefault(key, len(keys)), dtype=np.int64))
        times.append(t)
        values.append(v)
    T, S = len(grid), len(keys)
    if not keys:
        return [], np.full((T, 0), np.nan)
    gm = np.round(grid * 1000).astype(np.int64)
    tm = np.round(np.concatenate(times) * 1000).astype(np.int64)
    row = np.minimum(np.searchsorted(gm, tm), T - 1)
    ok = gm[row] == tm
    cell = row[ok] * S + np.concatenate(cols)[ok]
    val = np.concatenate(values)[ok]
    if np.bincount(cell, minlength=T * S).max(initial=0) > 1:
        _, last_rev = np.unique(cell[::-1], return_index=True)  # the last write of every cell
        keep = cell.size - 1 - last_rev
        cell, val = cell[keep], val[keep]
    bad = ~np.isfinite(val)  # a NaN written last still wins its cell, as in ``build_frames``
    if bad.any():
        if skipped is not None:
            skipped.non_finite_value += int(bad.sum())
        val = np.where(bad, np.nan, val)
    out = np.full(T * S, np.nan)
    out[cell] = val
    return list(keys), out.reshape(T, S)


def frame_of_table(keys: list[SeriesKey], table: np.ndarray) -> MetricFrame | None:
    """The frame of a grid table without its all-NaN columns; None when nothing is left."""
    if not keys:
        return None
    alive = ~np.isnan(table).all(axis=0)
    if not alive.any():
        return None
    rows = [dict(k) for k, a in zip(keys, alive, strict=True) if a]
    return MetricFrame(pd.DataFrame(rows).fillna(""), table[:, alive])


def load_prometheus(
    access: PrometheusAccess,
    start: float | str,
    end: float | str,
    step: float,
    metrics: Collection[str],
    *,
    progress: Callable[[float], None] | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
    matcher: str = "",
) -> Frames:
    """Query every metric over [start, end] on a ``step`` grid and build the frames (every query
    with the label matchers ``matcher`` added, when given).

    ``concurrency``: range queries in flight at once (1: one after another, in this thread). The
    first failing query's error is raised; the queries not yet sent are not sent. The access's
    ``timeout`` bounds each whole request and its ``max_answer_bytes`` each answer (module docstring).
    """
    start_s, end_s = parse_time(start), parse_time(end)
    check_window(start_s, end_s, step)
    if concurrency < 1:
        raise FleetscopeError("the query concurrency must be at least 1")
    check_grid(start_s, end_s, step)
    with memory_is_one_line(access.url):
        return _load_prometheus(access, start_s, end_s, step, metrics, progress, concurrency, matcher)


def _load_prometheus(
    access: PrometheusAccess,
    start_s: float,
    end_s: float,
    step: float,
    metrics: Collection[str],
    progress: Callable[[float], None] | None,
    concurrency: int,
    matcher: str,
) -> Frames:
    client = access.client()
    grid = make_grid(start_s, end_s, step)
    names = list(with_aliases(metrics) or ())
    try:
        by_name = fetch_grid_series(client, names, grid, step, concurrency, progress, matcher)
    finally:
        client.close()
    frames = Frames(times=grid, step=step, source=access.url)
    # The cell limit, now that the series are known and before their table is allocated.
    check_grid(
        start_s, end_s, step, sum(len({tuple(sorted(s[0].items())) for s in v}) for v in by_name.values())
    )
    found = False
    skipped = Skipped()
    for name in names:
        series = by_name[name]
        found = found or bool(series)
        frame = frame_from_grid(series, grid, skipped)
        if frame is not None:
            frames.metrics[name] = frame
    if skipped.total:
        log.warning("%s", skipped.message(access.url))
    if not found:
        raise no_series_error(access.url, start_s, end_s)
    return fold_aliases(frames)


def no_series_error(url: str, start_s: float, end_s: float) -> NoData:
    return NoData(f"Prometheus at {url} has no fleetscope series between {_iso(start_s)} and {_iso(end_s)}")


def fetch_grid_series(
    client: PrometheusClient,
    names: list[str],
    grid: np.ndarray,
    step: float,
    concurrency: int = DEFAULT_CONCURRENCY,
    progress: Callable[[float], None] | None = None,
    matcher: str = "",
    retries: int = DEFAULT_RETRIES,
) -> dict[str, list[AnsweredSeries]]:
    """Every series of every metric on ``grid`` (its grid values, :func:`metric_query`, each query
    with ``matcher`` added), the queries split below Prometheus' points limit and run
    ``concurrency`` at a time; per metric, the answers in query order.

    All the queries share one :class:`~fleetscope.window.budget.LoadBudget`: they end within the
    client's ``timeout`` together, and their answers together stay within the window's byte and
    cell budgets. ``retries``: how often a query that failed for a reason that may pass
    (:class:`TransientError`) is sent again, after a back-off, while the deadline leaves room
    (``serve``, ``analyze --prometheus`` and ``record --prometheus`` alike: a 503 of a busy server
    is not the end of a one-off analysis either)."""
    client.budget = LoadBudget(client.url, client.timeout, client.max_answer_bytes, len(grid))
    lb = lookback_seconds(step)
    chunks = [grid[i : i + MAX_POINTS] for i in range(0, len(grid), MAX_POINTS)]
    jobs = [
        (name, metric_query(name, lb, matcher=matcher), float(ch[0]), float(ch[-1]))
        for name in names
        for ch in chunks
    ]
    answers: list[list[AnsweredSeries] | None] = [None] * len(jobs)

    def run(k: int) -> int:
        _, query, a, b = jobs[k]
        answers[k] = query_with_retries(client, lambda: client.query_range(query, a, b, step), retries)
        return k

    if concurrency == 1 or len(jobs) == 1:
        for k in range(len(jobs)):
            run(k)
            if progress:
                progress((k + 1) / len(jobs))
    else:
        run_concurrently(run, len(jobs), concurrency, progress)
    return {
        name: [s for k, job in enumerate(jobs) if job[0] == name for s in answers[k] or []] for name in names
    }


def query_with_retries(
    client: PrometheusClient, query: Callable[[], list[AnsweredSeries]], retries: int
) -> list[AnsweredSeries]:
    """``query()``, sent again up to ``retries`` times after a :class:`TransientError`, with a
    doubling back-off, while the client's load deadline leaves room; the last error otherwise."""
    backoff = FIRST_BACKOFF_S
    for attempt in range(retries + 1):
        try:
            return query()
        except TransientError as exc:
            budget = client.budget
            if attempt == retries or (budget is not None and not budget.can_wait(backoff)):
                raise
            log.debug("retrying a Prometheus query in %.2gs: %s", backoff, exc)
            time.sleep(backoff)
            backoff *= 2
    raise AssertionError("unreachable")


def raw_from_prometheus(
    access: PrometheusAccess,
    start: float,
    end: float,
    step: float,
    metrics: Collection[str],
    *,
    progress: Callable[[float], None] | None = None,
) -> dict[str, list[RawSeries]]:
    """The answers :func:`load_prometheus` fetches for ``metrics`` (:func:`fetch_grid_series`: the
    same queries, chunks and concurrency) as raw series of grid values, by metric in query order;
    metrics without series are left out (empty when there are none). ``record --prometheus``
    writes them into an archive (:func:`~fleetscope.window.archive.write.export_prometheus`)."""
    check_window(start, end, step)
    check_grid(start, end, step)
    client = access.client()
    with memory_is_one_line(access.url):
        try:
            by_name = fetch_grid_series(
                client,
                list(with_aliases(metrics) or ()),
                make_grid(start, end, step),
                step,
                DEFAULT_CONCURRENCY,
                progress,
            )
        finally:
            client.close()
        return {
            name: [RawSeries(labels, np.asarray(t, float), np.asarray(v, float)) for labels, t, v in series]
            for name, series in by_name.items()
            if series
        }


def run_concurrently(
    run: Callable[[int], int], n: int, concurrency: int, progress: Callable[[float], None] | None
) -> None:
    """``run(0..n-1)`` on ``concurrency`` threads; the first error is raised, the rest cancelled."""
    pool = ThreadPoolExecutor(max_workers=min(concurrency, n), thread_name_prefix="fleetscope-query")
    try:
        pending = {pool.submit(run, k) for k in range(n)}
        done_count = 0
        while pending:
            done, pending = wait(pending, return_when=FIRST_EXCEPTION)
            for f in done:
                f.result()  # raises the query's error
            done_count += len(done)
            if progress:
                progress(done_count / n)
    finally:
        # On an error, queries not yet started are dropped; ones in flight end within the timeout.
        pool.shutdown(wait=False, cancel_futures=True)


def _iso(ts: float) -> str:
    return rfc3339(ts)
