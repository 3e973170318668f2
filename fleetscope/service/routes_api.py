"""The JSON API under ``/api/v1``: status, findings, nodes, jobs, served models and the drain plan.

Read-only (GET only). Every answer but ``status`` is 503 until the first analysis succeeds; the
others carry the freshness block and the analysis window, and their bodies are serialized once per
analysis (:meth:`~fleetscope.service.views.View.answer`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import Response

from fleetscope.service import schemas
from fleetscope.service.params import JOB_PATTERN, KIND_PATTERN, NODE_PATTERN, RFC3339Time, since_seconds
from fleetscope.service.plan import plan_from_analysis
from fleetscope.service.routes_page import RUNBOOKS_PATH
from fleetscope.service.views import Live, View, json_response, natural, shard_status

router = APIRouter(prefix="/api/v1", tags=["api"])
NO_DATA: dict[int | str, dict[str, Any]] = {
    503: {"model": schemas.Unavailable, "description": "no analysis yet"}
}


def _live(request: Request) -> Live:
    return request.app.state.live


def _whole(request: Request, key: str, members: Callable[[View], dict]) -> Response:
    """An answer that is the same for every request of one analysis (cached under ``key``)."""
    live = _live(request)
    snap, v = live.read()
    if v is None:
        return live.unavailable(snap)
    return v.answer(snap, key, lambda: members(v))


def _per_job(
    request: Request,
    job_id: str,
    key: str,
    table: Callable[[View], Mapping[str, Any]],
    members: Callable[[View, Any], dict],
) -> Response:
    """An answer about one job, from its entry in ``table`` (404 when it has none), cached under
    ``(key, job_id)``."""
    live = _live(request)
    snap, v = live.read()
    if v is None:
        return live.unavailable(snap)
    entry = table(v).get(job_id)
    if entry is None:
        return json_response({"detail": "unknown job"}, status=404)
    return v.answer(snap, (key, job_id), lambda: members(v, entry))


# Handlers are ``async``: they only read memory, and a sync handler would cost a thread hop.
@router.get("/status", response_model=schemas.StatusResponse)
async def status(request: Request) -> Response:
    live = _live(request)
    snap, v = live.read()
    return json_response(
        {
            "status": snap.status(),
            "window": v.window if v else {"start": None, "end": None},
            "prometheus": live.settings.prometheus,
            "interval_seconds": live.settings.interval,
            "window_seconds": live.settings.window,
            "nodes": len(v.nodes) if v else 0,
            "open_findings": v.open_findings if v else 0,
            "runbooks": RUNBOOKS_PATH.lstrip("/"),  # relative: the page may sit behind a path prefix
            "shard": shard_status(live.settings.shard, v.result.shard if v else None),
        }
    )


@router.get("/findings", response_model=schemas.FindingsResponse, responses=NO_DATA)
async def findings(
    request: Request,
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
    live = _live(request)
    snap, v = live.read()
    if v is None:
        return live.unavailable(snap)
    if kind is None and node is None and job_id is None and since is None:
        return v.answer(snap, "findings", lambda: {"findings": v.finding_dicts})
    t = since_seconds(since)
    rows = [
        d
        for f, d in zip(v.findings, v.finding_dicts, strict=True)
        if (kind is None or f.kind == kind)
        and (node is None or f.node == node)
        and (job_id is None or f.job_id == job_id)
        and (t is None or f.end is None or f.end >= t)
    ]
    return v.answer(snap, None, lambda: {"findings": rows})


@router.get("/nodes", response_model=schemas.NodesResponse, responses=NO_DATA)
async def nodes(request: Request) -> Response:
    """Every node seen in the window: its state, why, and its GPUs' states."""
    return _whole(request, "nodes", lambda v: {"counts": v.counts, "nodes": v.nodes})


@router.get("/jobs", response_model=schemas.JobsResponse, responses=NO_DATA)
async def jobs(request: Request) -> Response:
    return _whole(request, "jobs", lambda v: {"jobs": [v.jobs[k] for k in sorted(v.jobs, key=natural)]})


@router.get("/models", response_model=schemas.ModelsResponse, responses=NO_DATA)
async def models(request: Request) -> Response:
    """Served models: replicas, TTFT and ITL, SLO burn, and the open findings naming them."""
    return _whole(request, "models", lambda v: {"models": v.models})


# The goodput route comes first: a job id may hold a "/", so the job route's path matches
# ".../goodput" too.
@router.get(
    "/jobs/{job_id:path}/goodput",
    response_model=schemas.GoodputResponse,
    responses={**NO_DATA, 404: {"model": schemas.Problem, "description": "unknown job"}},
)
async def job_goodput(request: Request, job_id: Annotated[str, Path(pattern=JOB_PATTERN)]) -> Response:
    """Where the job's GPU-hours went in the window, who cost them, and the checkpoint advice."""
    return _per_job(request, job_id, "goodput", lambda v: v.goodput, lambda v, account: {"goodput": account})


@router.get(
    "/jobs/{job_id:path}",
    response_model=schemas.JobResponse,
    responses={**NO_DATA, 404: {"model": schemas.Problem, "description": "unknown job"}},
)
async def job(request: Request, job_id: Annotated[str, Path(pattern=JOB_PATTERN)]) -> Response:
    """One job: MFU, tokens/s, step time, straggler ranks and every rank's score."""
    return _per_job(
        request,
        job_id,
        "job",
        lambda v: v.jobs,
        lambda v, summary: {
            "job": summary,
            "scores": v.scores.get(job_id, []),
            "findings": [d for f, d in zip(v.findings, v.finding_dicts, strict=True) if f.job_id == job_id],
        },
    )


@router.get("/plan", response_model=schemas.PlanResponse, responses=NO_DATA)
async def plan(
    request: Request,
    scheduler: Annotated[Literal["slurm", "kubernetes"] | None, Query()] = None,
) -> Response:
    """The drain plan for the current failing nodes (printed, never run by the service)."""
    live = _live(request)
    snap, v = live.read()
    if v is None:
        return live.unavailable(snap)
    chosen = scheduler or live.settings.scheduler

    def body() -> dict:
        p = plan_from_analysis(v.analysis, chosen, live.settings.max_fraction)
        return {"plan": p.to_dict(), "script": p.script()}

    return v.answer(snap, ("plan", chosen), body)
