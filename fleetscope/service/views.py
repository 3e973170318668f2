"""What the handlers serve, derived once per analysis, and the JSON answers built from it.

:class:`View` turns one :class:`~fleetscope.analyzers.report.Report` into the API's plain dicts
(sorted, with non-finite numbers as null) and caches each answer's serialized body; :class:`Live`
is an app's link to its verdict store, handing out the current snapshot with its view (rebuilt only
when the store's version changes) and the ``/metrics`` body (rendered once per state).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fastapi.responses import Response

from fleetscope import strictjson
from fleetscope.analyzers.findings import Finding
from fleetscope.analyzers.report import JobSummary, Report, goodput_to_dict
from fleetscope.service.live import LiveResult
from fleetscope.service.metrics import render_snapshot
from fleetscope.service.settings import ServiceSettings
from fleetscope.service.state import VerdictSnapshot, VerdictStore
from fleetscope.times import rfc3339


def natural(text: str) -> list:
    """Sort key putting ``node-2`` before ``node-10``."""
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text)]


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(float(x)) else float(x)


def dumps(obj: Any) -> str:
    """Compact strict JSON: a non-finite number is null, with a note (fleetscope.strictjson)."""
    return strictjson.dumps(obj, separators=(",", ":"))


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(dumps(body), status_code=status, media_type="application/json", headers=headers)


class View:
    """Everything the handlers serve, derived once per analysis (keyed on the store's version)."""

    def __init__(self, result: LiveResult) -> None:
        self.result = result
        self.analysis = analysis = result.report
        self.window = {"start": rfc3339(analysis.start), "end": rfc3339(analysis.end)}
        self.findings = sorted(analysis.findings, key=lambda f: (f.start, f.kind, f.node or ""))
        self.finding_dicts = [f.to_dict() for f in self.findings]
        self.nodes = _nodes(analysis, self.findings)
        self.counts = {s: 0 for s in ("healthy", "degraded", "failing")}
        for n in self.nodes:
            self.counts[n["state"]] = self.counts.get(n["state"], 0) + 1
        self.goodput = {job: goodput_to_dict(a) for job, a in analysis.goodput.items()}
        self.jobs = {
            j.job_id: _job(j, result.jobs.get(j.job_id), self.goodput.get(j.job_id))
            for j in analysis.jobs.values()
        }
        self.models = _models(result.models, self.findings, self.finding_dicts)
        self.scores = _scores(analysis)
        self.open_findings = sum(1 for f in self.findings if f.end is None)
        self._window_json = dumps(self.window)
        self._parts: dict[Any, bytes] = {}

    def answer(self, snap: VerdictSnapshot, key: Any, members: Callable[[], dict]) -> Response:
        """``{"status": ..., "window": ..., **members()}``; the members are serialized once per
        analysis under ``key`` (None: not cached); only the freshness block is built per request."""
        part = self._parts.get(key) if key is not None else None
        if part is None:
            part = dumps(members())[1:-1].encode()
            if key is not None:
                self._parts[key] = part
        body = b'{"status":' + dumps(snap.status()).encode() + b',"window":' + self._window_json.encode()
        return Response(body + b"," + part + b"}", media_type="application/json")


def _job(j: JobSummary, live: Mapping[str, Any] | None, goodput: dict[str, Any] | None) -> dict[str, Any]:
    """A job's summary with its state (fleetscope.service.summaries; "unknown" without one)."""
    live = live or {}
    return {
        "job_id": j.job_id,
        "ranks": int(j.ranks),
        "nodes": list(j.nodes),
        "mfu": _finite(j.mfu),
        "tokens_per_second": _finite(j.tokens_per_second),
        "step_seconds": _finite(j.step_seconds),
        "stragglers": [int(r) for r in j.stragglers],
        "state": live.get("state", "unknown"),
        "since": live.get("since"),
        "last_step": live.get("last_step"),
        "mfu_now": _finite(live["mfu"]) if "mfu" in live else _finite(j.mfu),
        "mfu_reason": live.get("mfu_reason"),
        "last_mfu_at": live.get("last_mfu_at"),
        "hang": live.get("hang"),
        "goodput_ratio": goodput["goodput_ratio"] if goodput else None,
    }


def _models(
    models: Sequence[Mapping[str, Any]], findings: list[Finding], dicts: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Served models with the open findings that name them (in their evidence) or their replicas."""
    out = []
    for m in models:
        names = {r["replica"] for r in m["replicas"]}
        mine = [
            d
            for f, d in zip(findings, dicts, strict=True)
            if f.end is None and (f.evidence.get("model") == m["model"] or f.evidence.get("replica") in names)
        ]
        out.append({**m, "findings": mine})
    return out


def _nodes(analysis: Report, findings: list[Finding]) -> list[dict[str, Any]]:
    """Every node in natural order, with its GPUs (natural order too) and its open findings."""
    open_by_node: dict[str, int] = {}
    for f in findings:
        if f.end is None and f.node:
            open_by_node[f.node] = open_by_node.get(f.node, 0) + 1
    return [
        {
            "node": v.node,
            "state": v.state,
            "reasons": list(v.reasons),
            "gpus": [
                {"gpu": str(g), "state": s}
                for g, s in sorted(v.gpus.items(), key=lambda i: natural(str(i[0])))
            ],
            "open_findings": open_by_node.get(v.node, 0),
        }
        for v in sorted(analysis.nodes.values(), key=lambda v: natural(v.node))
    ]


def _scores(analysis: Report) -> dict[str, list[dict]]:
    """job -> its ranks' finite straggler scores, by rank."""
    scores: dict[str, list[dict]] = {}
    for s in analysis.straggler_scores:
        score = _finite(s.score)
        if score is not None:
            scores.setdefault(s.job_id, []).append(
                {"rank": int(s.rank), "node": s.node, "gpu": str(s.gpu), "score": score}
            )
    for rows in scores.values():
        rows.sort(key=lambda r: r["rank"])
    return scores


class Live:
    """One app's reading side of the verdict store (handlers run on one event loop: no lock)."""

    def __init__(self, store: VerdictStore, settings: ServiceSettings) -> None:
        self.store = store
        self.settings = settings
        self._version = -1
        self._view: View | None = None
        self._metrics_key: tuple | None = None
        self._metrics_body = b""

    def read(self) -> tuple[VerdictSnapshot, View | None]:
        """The store's snapshot now, and its view (None before the first analysis)."""
        snap = self.store.snapshot()
        if snap.result is None:
            return snap, None
        if self._version != snap.version:
            self._view = View(snap.result)
            self._version = snap.version
        return snap, self._view

    def unavailable(self, snap: VerdictSnapshot) -> Response:
        """503 with a Retry-After of one interval: no analysis has succeeded yet."""
        return json_response(
            {"detail": "no analysis yet", "status": snap.status()},
            status=503,
            headers={"Retry-After": str(max(1, int(self.settings.interval)))},
        )

    def metrics(self) -> bytes:
        """The verdict series in the Prometheus text format, rendered once per store state."""
        snap = self.store.snapshot()
        key = (snap.version, snap.stale, snap.error is None, snap.attempted_at, snap.duration)
        if self._metrics_key != key:
            self._metrics_body = render_snapshot(snap)
            self._metrics_key = key
        return self._metrics_body


def shard_status(shard: tuple[int, int] | None, owned: Mapping[str, int] | None) -> dict[str, Any] | None:
    """``/api/v1/status``'s ``shard`` block: this replica's share (its counts from the last analysis,
    ``owned``: :attr:`LiveResult.shard <fleetscope.service.live.LiveResult.shard>`)."""
    if shard is None:
        return None
    index, count = shard
    owned = owned or {}
    keys = (
        "jobs", "models", "nodes", "fetch_nodes", "bound", "split_jobs", "fleet_jobs", "fleet_models",
        "fleet_nodes", "discovery",
    )  # fmt: skip
    out: dict[str, Any] = {"index": index, "count": count, **{k: owned.get(k) for k in keys}}
    text = f"shard {index} of {count}"
    if owned:
        text += (
            f", owning {owned['jobs']} of {owned['fleet_jobs']} jobs / "
            f"{owned['nodes']} of {owned['fleet_nodes']} nodes"
        )
    out["text"] = text
    return out
