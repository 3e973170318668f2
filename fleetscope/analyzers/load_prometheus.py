"""Load a window from any Prometheus-compatible HTTP API into frames.

One ``query_range`` per metric the analyzers read (``last_over_time(<metric>[L])``, the same grid
rule the file loader applies, see ``frames.py``), split into time chunks below Prometheus' 11,000
points-per-series limit, all chunks on one grid. Works with Prometheus, Thanos, Mimir,
VictoriaMetrics and Amazon Managed Prometheus; for AMP, requests are signed with SigV4 through
botocore (``sigv4_region``), with credentials from the usual AWS chain.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Collection
from datetime import datetime
from urllib.parse import urlencode

import numpy as np

from fleetscope.analyzers.frames import RawSeries, build_frames, lookback_seconds, make_grid
from fleetscope.errors import FleetscopeError

#: Points per series per request; Prometheus refuses more than 11,000.
MAX_POINTS = 10000


def parse_time(text: str | float, now: float | None = None) -> float:
    """RFC 3339, Unix seconds, ``now``, or relative like ``-6h`` / ``-30m`` -> Unix seconds."""
    now = time.time() if now is None else now
    if isinstance(text, int | float):
        return float(text)
    t = str(text).strip()
    if t == "now":
        return now
    m = re.fullmatch(r"-(\d+(?:\.\d+)?)([smhd])", t)
    if m:
        return now - float(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]
    try:
        return float(t)
    except ValueError:
        pass
    try:
        dt = datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        raise FleetscopeError(f"not a time: {text!r} (use RFC 3339, Unix seconds, or e.g. -6h)") from None
    if dt.tzinfo is None:
        raise FleetscopeError(f"time {text!r} needs a time zone (e.g. a trailing Z)")
    return dt.timestamp()


def _duration_ms(seconds: float) -> str:
    return f"{round(seconds * 1000)}ms"


class PrometheusClient:
    """A small HTTP client for the query API, with optional SigV4 signing."""

    def __init__(self, url: str, timeout: float = 30.0, sigv4_region: str | None = None,
                 headers: dict[str, str] | None = None) -> None:  # fmt: skip
        import requests

        self.url = url.rstrip("/")
        self.timeout = timeout
        self.session = requests.Session()
        self.headers = dict(headers or {})
        self.region = sigv4_region
        self._credentials = None
        if sigv4_region:
            import botocore.session

            creds = botocore.session.Session().get_credentials()
            if creds is None:
                raise FleetscopeError("--sigv4 needs AWS credentials (environment, profile or instance role)")
            self._credentials = creds

    def _signed(self, url: str, body: str) -> dict[str, str]:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        req = AWSRequest(method="POST", url=url, data=body,
                         headers={"Content-Type": "application/x-www-form-urlencoded"})  # fmt: skip
        SigV4Auth(self._credentials, "aps", self.region).add_auth(req)
        return dict(req.headers.items())

    def post(self, path: str, params: dict[str, str]) -> dict:
        import requests

        url = f"{self.url}/api/v1/{path}"
        body = urlencode(params)
        headers = {"Content-Type": "application/x-www-form-urlencoded", **self.headers}
        if self._credentials is not None:
            headers.update(self._signed(url, body))
        try:
            resp = self.session.post(url, data=body, headers=headers, timeout=self.timeout)
        except requests.exceptions.Timeout:
            raise FleetscopeError(
                f"Prometheus at {self.url} did not answer within {self.timeout:g} s"
            ) from None
        except requests.exceptions.RequestException as exc:
            reason = type(exc).__name__
            raise FleetscopeError(f"cannot reach Prometheus at {self.url} ({reason})") from None
        if resp.status_code >= 500:
            raise FleetscopeError(
                f"Prometheus at {self.url} answered {resp.status_code}: {_error_text(resp)}"
            )
        try:
            data = resp.json()
        except ValueError:
            raise FleetscopeError(
                f"{self.url} answered {resp.status_code} with something that is not the Prometheus API"
            ) from None
        if resp.status_code != 200 or data.get("status") != "success":
            raise FleetscopeError(f"Prometheus at {self.url} refused the query ({resp.status_code}): "
                                  f"{data.get('error', '')[:200]}")  # fmt: skip
        return data.get("data") or {}


def _error_text(resp) -> str:
    try:
        return str(resp.json().get("error", ""))[:200]
    except ValueError:
        return resp.text.strip()[:200] or resp.reason


def load_prometheus(
    url: str,
    start: float | str,
    end: float | str,
    step: float,
    metrics: Collection[str],
    timeout: float = 30.0,
    sigv4_region: str | None = None,
    headers: dict[str, str] | None = None,
    progress: Callable[[float], None] | None = None,
):
    """Query every metric over [start, end] on a ``step`` grid and build the frames."""
    start_s, end_s = parse_time(start), parse_time(end)
    if end_s < start_s:
        raise FleetscopeError("the window ends before it starts")
    if step <= 0:
        raise FleetscopeError("--step must be positive")
    client = PrometheusClient(url, timeout, sigv4_region, headers)
    grid = make_grid(start_s, end_s, step)
    lb = _duration_ms(lookback_seconds(step))
    chunks = [grid[i : i + MAX_POINTS] for i in range(0, len(grid), MAX_POINTS)]
    raw: dict[str, list[RawSeries]] = {}
    total = len(metrics) * len(chunks)
    done = 0
    for name in metrics:
        for chunk in chunks:
            data = client.post("query_range", {
                "query": f"last_over_time({{__name__={name!r}}}[{lb}])".replace("'", '"'),
                "start": repr(float(chunk[0])), "end": repr(float(chunk[-1])), "step": repr(float(step)),
            })  # fmt: skip
            if data.get("resultType") not in (None, "matrix"):
                raise FleetscopeError(f"{url} answered a {data.get('resultType')} to a range query")
            for r in data.get("result") or []:
                labels = {k: v for k, v in (r.get("metric") or {}).items() if k != "__name__"}
                vals = r.get("values") or []
                if not vals:
                    continue
                arr = np.array(vals, dtype=object)
                raw.setdefault(name, []).append(
                    RawSeries(labels, arr[:, 0].astype(float), arr[:, 1].astype(float))
                )
            done += 1
            if progress:
                progress(done / total)
    if not raw:
        raise FleetscopeError(
            f"Prometheus at {url} has no fleetscope series between {_iso(start_s)} and {_iso(end_s)}"
        )
    return build_frames(raw, start_s, end_s, step, source=url, gridded=True)


def _iso(ts: float) -> str:
    from fleetscope.analyzers.findings import rfc3339

    return rfc3339(ts) or ""
