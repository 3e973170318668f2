"""The FastAPI app of the live service: JSON API, web page, ``/metrics``, health and readiness.

``create_app(settings, analyze=...)`` takes the analysis as a function ``analyze(start, end) ->
Analysis`` so tests (and the demo) can drive it with real :class:`Analysis` objects and no
Prometheus. The API is read-only (GET only); every input is validated by FastAPI before a handler
sees it, and no input reaches a file name or a shell: the page's three files are read once at start
from the package and served from memory by fixed routes.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST
from pydantic import BeforeValidator

from fleetscope import __version__
from fleetscope.analyzers.api import Analysis
from fleetscope.analyzers.findings import Finding, rfc3339
from fleetscope.service import schemas
from fleetscope.service.auth import OPEN_PATHS, BearerTokenMiddleware
from fleetscope.service.metrics import render_snapshot
from fleetscope.service.plan import DEFAULT_MAX_FRACTION, plan_from_analysis
from fleetscope.service.runner import AnalysisRunner, AnalyzeFn
from fleetscope.service.state import Snapshot, VerdictStore

NODE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,252}$"
JOB_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
KIND_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"

_STATIC = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
}
_SECURITY_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        b"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    (b"cache-control", b"no-store"),
]


@dataclass
class ServiceSettings:
    prometheus: str = ""
    interval: float = 30.0
    window: float = 1800.0
    #: Verdicts older than this count as stale even if no cycle failed (default: 3 intervals + 10 s).
    stale_after: float | None = None
    token: str | None = None
    scheduler: Literal["slurm", "kubernetes"] = "slurm"
    max_fraction: float = DEFAULT_MAX_FRACTION
    #: Start the background loop with the app (tests drive ``runner.run_once()`` themselves).
    run_analysis: bool = True

    @property
    def staleness_limit(self) -> float:
        return self.stale_after if self.stale_after is not None else 3 * self.interval + 10


def _natural(text: str) -> list:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text)]


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(float(x)) else float(x)


def _finding(f: Finding) -> dict[str, Any]:
    d = f.to_dict()
    d["score"] = _finite(d["score"])
    d["rank"] = None if f.rank is None else int(f.rank)
    d["gpu"] = None if f.gpu is None else str(f.gpu)
    return d


class _View:
    """Everything the handlers serve, derived once per analysis (keyed on the store's version)."""

    def __init__(self, analysis: Analysis) -> None:
        self.analysis = analysis
        self.window = {"start": rfc3339(analysis.start), "end": rfc3339(analysis.end)}
        self.findings = sorted(analysis.findings, key=lambda f: (f.start, f.kind, f.node or ""))
        self.finding_dicts = [_finding(f) for f in self.findings]
        open_by_node: dict[str, int] = {}
        for f in self.findings:
            if f.end is None and f.node:
                open_by_node[f.node] = open_by_node.get(f.node, 0) + 1
        self.nodes = [
            {
                "node": v.node,
                "state": v.state,
                "reasons": list(v.reasons),
                "gpus": [
                    {"gpu": str(g), "state": s}
                    for g, s in sorted(v.gpus.items(), key=lambda i: _natural(str(i[0])))
                ],
                "open_findings": open_by_node.get(v.node, 0),
            }
            for v in sorted(analysis.nodes.values(), key=lambda v: _natural(v.node))
        ]
        self.counts = {s: 0 for s in ("healthy", "degraded", "failing")}
        for n in self.nodes:
            self.counts[n["state"]] = self.counts.get(n["state"], 0) + 1
        self.jobs = {
            j.job_id: {
                "job_id": j.job_id,
                "ranks": int(j.ranks),
                "nodes": list(j.nodes),
                "mfu": _finite(j.mfu),
                "tokens_per_second": _finite(j.tokens_per_second),
                "step_seconds": _finite(j.step_seconds),
                "stragglers": [int(r) for r in j.stragglers],
            }
            for j in analysis.jobs.values()
        }
        self.scores: dict[str, list[dict]] = {}
        for s in analysis.straggler_scores:
            score = _finite(s.score)
            if score is not None:
                self.scores.setdefault(s.job_id, []).append(
                    {"rank": int(s.rank), "node": s.node, "gpu": str(s.gpu), "score": score}
                )
        for rows in self.scores.values():
            rows.sort(key=lambda r: r["rank"])
        self.open_findings = sum(1 for f in self.findings if f.end is None)
        self._window_json = _dumps(self.window)
        self._parts: dict[Any, bytes] = {}

    def answer(self, snap: Snapshot, key: Any, members: Callable[[], dict]) -> Response:
        """``{"status": ..., "window": ..., **members()}``; the members are serialized once per
        analysis under ``key`` (None: not cached); only the freshness block is built per request."""
        part = self._parts.get(key) if key is not None else None
        if part is None:
            part = _dumps(members())[1:-1].encode()
            if key is not None:
                self._parts[key] = part
        body = b'{"status":' + _dumps(snap.status()).encode() + b',"window":' + self._window_json.encode()
        return Response(body + b"," + part + b"}", media_type="application/json")


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), allow_nan=False)


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(
        _dumps(body),
        status_code=status,
        media_type="application/json",
        headers=headers,
    )


_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?([Zz]|[+-]\d{2}:\d{2})?$")


def _rfc3339_only(value: object) -> object:
    """Pydantic would also take Unix seconds for a datetime; the schema says RFC 3339, so hold to it."""
    if not isinstance(value, str) or not _RFC3339.match(value):
        raise ValueError("expected an RFC 3339 time such as 2026-11-30T10:00:00Z")
    return value


RFC3339Time = Annotated[datetime, BeforeValidator(_rfc3339_only)]


def _since_seconds(since: datetime | None) -> float | None:
    if since is None:
        return None
    if since.tzinfo is None:
        since = since.replace(tzinfo=UTC)
    return since.timestamp()


async def _reject_unknown_query(request: Request) -> None:
    """An unknown query parameter is an error (a typo like ``?nodes=`` must not silently match all)."""
    if not request.url.query:
        return
    route = request.scope.get("route")
    allowed = {p.alias for p in route.dependant.query_params} if route is not None else set()
    unknown = sorted(set(request.query_params) - allowed)
    if unknown:
        raise RequestValidationError(
            [
                {
                    "loc": ["query", name],
                    "msg": "unknown query parameter",
                    "type": "extra_forbidden",
                    "input": None,
                }
                for name in unknown
            ]
        )


class _SecurityHeaders:
    """Adds the security headers to every answer (pure ASGI: cheap)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + _SECURITY_HEADERS
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _load_static() -> dict[str, bytes]:
    base = resources.files("fleetscope.service") / "static"
    return {name: (base / name).read_bytes() for name in _STATIC}


def create_app(settings: ServiceSettings, analyze: AnalyzeFn, store: VerdictStore | None = None) -> FastAPI:
    store = store or VerdictStore(settings.staleness_limit)
    runner = AnalysisRunner(store, analyze, settings.interval, settings.window)
    static = _load_static()
    cache: dict[str, Any] = {"version": -1, "view": None}
    metrics_cache: dict[str, Any] = {}

    def view(snap: Snapshot) -> _View | None:
        if snap.analysis is None:
            return None
        if cache["version"] != snap.version:
            cache["view"] = _View(snap.analysis)
            cache["version"] = snap.version
        return cache["view"]

    def unavailable(snap: Snapshot) -> Response:
        return _json(
            {"detail": "no analysis yet", "status": snap.status()},
            status=503,
            headers={"Retry-After": str(max(1, int(settings.interval)))},
        )

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if settings.run_analysis:
            runner.start()
        try:
            yield
        finally:
            runner.stop()

    app = FastAPI(
        title="fleetscope",
        version=__version__,
        description="Live verdicts of the fleetscope analyzers (read-only).",
        docs_url=None,  # Swagger UI loads from a CDN; the service must work offline.
        redoc_url=None,
        lifespan=lifespan,
        dependencies=[Depends(_reject_unknown_query)],
    )
    app.state.store = store
    app.state.runner = runner
    app.state.settings = settings
    no_data = {503: {"model": schemas.Unavailable, "description": "no analysis yet"}}

    # --- page ------------------------------------------------------------------------------
    def static_response(name: str) -> Response:
        return Response(static[name], media_type=_STATIC[name])

    # Handlers are ``async``: they only read memory, and a sync handler would cost a thread hop.
    @app.get("/", include_in_schema=False)
    async def index(job: Annotated[str | None, Query(pattern=JOB_PATTERN)] = None) -> Response:
        """The page; ``?job=`` (read by the page's script) chooses the job of the straggler chart."""
        return static_response("index.html")

    @app.get("/static/app.js", include_in_schema=False)
    async def app_js() -> Response:
        return static_response("app.js")

    @app.get("/static/style.css", include_in_schema=False)
    async def style_css() -> Response:
        return static_response("style.css")

    # --- health ----------------------------------------------------------------------------
    @app.get("/healthz", response_model=schemas.Health, tags=["health"])
    async def healthz() -> Response:
        """Liveness: the process answers. Open even when a token is configured."""
        return _json({"status": "ok"})

    @app.get(
        "/readyz",
        response_model=schemas.Freshness,
        responses={503: {"model": schemas.Freshness, "description": "not ready"}},
        tags=["health"],
    )
    async def readyz() -> Response:
        """Ready after the first successful analysis, and not while the verdicts are stale."""
        snap = store.snapshot()
        return _json(snap.status(), status=200 if snap.ready else 503)

    # --- API -------------------------------------------------------------------------------
    @app.get("/api/v1/status", response_model=schemas.StatusResponse, tags=["api"])
    async def status() -> Response:
        snap = store.snapshot()
        v = view(snap)
        return _json(
            {
                "status": snap.status(),
                "window": v.window if v else {"start": None, "end": None},
                "prometheus": settings.prometheus,
                "interval_seconds": settings.interval,
                "window_seconds": settings.window,
                "nodes": len(v.nodes) if v else 0,
                "open_findings": v.open_findings if v else 0,
            }
        )

    @app.get("/api/v1/findings", response_model=schemas.FindingsResponse, responses=no_data, tags=["api"])
    async def findings(
        kind: Annotated[
            str | None, Query(pattern=KIND_PATTERN, description="failing_node, straggler, mfu_drop, ...")
        ] = None,
        node: Annotated[str | None, Query(pattern=NODE_PATTERN, description="Hostname")] = None,
        job_id: Annotated[str | None, Query(pattern=JOB_PATTERN)] = None,
        since: Annotated[
            RFC3339Time | None, Query(description="only findings open at or after this time (RFC 3339)")
        ] = None,
    ) -> Response:
        """The findings of the latest analysis, oldest first."""
        snap = store.snapshot()
        v = view(snap)
        if v is None:
            return unavailable(snap)
        if kind is None and node is None and job_id is None and since is None:
            return v.answer(snap, "findings", lambda: {"findings": v.finding_dicts})
        t = _since_seconds(since)
        rows = [
            d
            for f, d in zip(v.findings, v.finding_dicts, strict=True)
            if (kind is None or f.kind == kind)
            and (node is None or f.node == node)
            and (job_id is None or f.job_id == job_id)
            and (t is None or f.end is None or f.end >= t)
        ]
        return v.answer(snap, None, lambda: {"findings": rows})

    @app.get("/api/v1/nodes", response_model=schemas.NodesResponse, responses=no_data, tags=["api"])
    async def nodes() -> Response:
        """Every node seen in the window: its state, why, and its GPUs' states."""
        snap = store.snapshot()
        v = view(snap)
        if v is None:
            return unavailable(snap)
        return v.answer(snap, "nodes", lambda: {"counts": v.counts, "nodes": v.nodes})

    @app.get("/api/v1/jobs", response_model=schemas.JobsResponse, responses=no_data, tags=["api"])
    async def jobs() -> Response:
        snap = store.snapshot()
        v = view(snap)
        if v is None:
            return unavailable(snap)
        return v.answer(snap, "jobs", lambda: {"jobs": [v.jobs[k] for k in sorted(v.jobs, key=_natural)]})

    @app.get(
        "/api/v1/jobs/{job_id}",
        response_model=schemas.JobResponse,
        responses={**no_data, 404: {"model": schemas.Problem, "description": "unknown job"}},
        tags=["api"],
    )
    async def job(job_id: Annotated[str, Path(pattern=JOB_PATTERN)]) -> Response:
        """One job: MFU, tokens/s, step time, straggler ranks and every rank's score."""
        snap = store.snapshot()
        v = view(snap)
        if v is None:
            return unavailable(snap)
        summary = v.jobs.get(job_id)
        if summary is None:
            return _json({"detail": "unknown job"}, status=404)
        return v.answer(
            snap,
            ("job", job_id),
            lambda: {
                "job": summary,
                "scores": v.scores.get(job_id, []),
                "findings": [
                    d for f, d in zip(v.findings, v.finding_dicts, strict=True) if f.job_id == job_id
                ],
            },
        )

    @app.get("/api/v1/plan", response_model=schemas.PlanResponse, responses=no_data, tags=["api"])
    async def plan(
        scheduler: Annotated[Literal["slurm", "kubernetes"] | None, Query()] = None,
    ) -> Response:
        """The drain plan for the current failing nodes (printed, never run by the service)."""
        snap = store.snapshot()
        v = view(snap)
        if v is None:
            return unavailable(snap)
        chosen = scheduler or settings.scheduler

        def body() -> dict:
            p = plan_from_analysis(v.analysis, chosen, settings.max_fraction)
            return {"plan": p.to_dict(), "script": p.script()}

        return v.answer(snap, ("plan", chosen), body)

    @app.get(
        "/metrics",
        tags=["metrics"],
        response_class=Response,
        responses={200: {"content": {"text/plain": {}}}},
    )
    async def metrics() -> Response:
        """The verdict series of the contract, in the Prometheus text format (rendered once per state)."""
        snap = store.snapshot()
        key = (snap.version, snap.stale, snap.error is None, snap.attempted_at, snap.duration)
        if metrics_cache.get("key") != key:
            metrics_cache["body"] = render_snapshot(snap)
            metrics_cache["key"] = key
        return Response(metrics_cache["body"], media_type=CONTENT_TYPE_LATEST)

    if settings.token:
        _declare_bearer(app)
    app.add_middleware(_SecurityHeaders)
    if settings.token:
        app.add_middleware(BearerTokenMiddleware, token=settings.token)
    return app


def _declare_bearer(app: FastAPI) -> None:
    """Say in the OpenAPI schema that every operation but the open ones needs the bearer token."""

    def openapi() -> dict:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title, version=app.version, description=app.description, routes=app.routes
            )
            schema.setdefault("components", {})["securitySchemes"] = {
                "bearer": {"type": "http", "scheme": "bearer"}
            }
            schema["security"] = [{"bearer": []}]
            for path, ops in schema["paths"].items():
                for op in ops.values():
                    if path in OPEN_PATHS:
                        op["security"] = []
                    else:
                        op.setdefault("responses", {})["401"] = {"description": "missing or wrong token"}
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
