"""Alerts on the live service's verdicts (failing/degraded nodes, stragglers) and on their freshness."""

from __future__ import annotations

from fleetscope import contract as c
from fleetscope.alerts.config import Thresholds
from fleetscope.alerts.model import Alert, Case, Fire, Group, InputSeries
from fleetscope.alerts.testdata import HOST, JOB, num, target


def _health(state: str, values: str) -> InputSeries:
    return InputSeries(c.NODE_HEALTH, {c.NODE_LABEL: HOST, "state": state}, values)


def group(cfg: Thresholds) -> Group:
    straggler = {"job_id": JOB, "rank": "13", c.NODE_LABEL: HOST, "gpu": "5"}
    service = target("fleetscope-service", "service:9410")
    alerts = (
        Alert(
            name="FleetscopeNodeFailing",
            expr=f'{c.NODE_HEALTH}{{state="failing"}} == 1',
            for_="1m",
            severity="critical",
            summary="The fleetscope service judges a node failing: drain it.",
            description="fleetscope's analysis judges {{ $labels.Hostname }} failing; its findings say "
            "which GPU and why (fleetscope analyze, or the service's web page).",
            cases=(
                Case(
                    "failing",
                    (_health("failing", "0 0 1 1 1"), _health("healthy", "1 1 0 0 0")),
                    "4m",
                    (Fire({c.NODE_LABEL: HOST, "state": "failing"}, 1),),
                ),
                Case("healthy", (_health("failing", "0x4"), _health("healthy", "1x4")), "4m"),
            ),
        ),
        Alert(
            name="FleetscopeNodeDegraded",
            expr=f'{c.NODE_HEALTH}{{state="degraded"}} == 1',
            for_="15m",
            severity="warning",
            summary="The fleetscope service judges a node degraded.",
            description="fleetscope's analysis has judged {{ $labels.Hostname }} degraded for 15m: it still "
            "works but slows or endangers its jobs.",
            cases=(
                Case(
                    "degraded for 20m",
                    (_health("degraded", "1x20"),),
                    "20m",
                    (Fire({c.NODE_LABEL: HOST, "state": "degraded"}, 1),),
                ),
                Case("degraded briefly", (_health("degraded", "1x5 0x15"),), "20m"),
            ),
        ),
        Alert(
            name="FleetscopeStraggler",
            expr=f"{c.STRAGGLER_SCORE} > {num(cfg.straggler_score)}",
            for_="10m",
            severity="warning",
            summary="The fleetscope service found a straggling rank.",
            description="Rank {{ $labels.rank }} of job {{ $labels.job_id }} (GPU {{ $labels.gpu }} on "
            '{{ $labels.Hostname }}) has a straggler score of {{ printf "%.2f" $value }} (own compute time '
            "over the peer median).",
            cases=(
                Case(
                    "score 1.31",
                    (InputSeries(c.STRAGGLER_SCORE, straggler, "1.31x12"),),
                    "12m",
                    (Fire(straggler, 1.31),),
                ),
                Case("score 1.05", (InputSeries(c.STRAGGLER_SCORE, straggler, "1.05x12"),), "12m"),
            ),
        ),
        Alert(
            name="FleetscopeServiceVerdictsStale",
            expr=f"{c.SERVICE_VERDICTS_STALE} == 1",
            for_="10m",
            severity="warning",
            summary="The fleetscope service serves stale verdicts.",
            description="The fleetscope service at {{ $labels.instance }} has not completed an analysis "
            "recently: node health and straggler verdicts are stale and their alerts may be wrong.",
            cases=(
                Case(
                    "stale",
                    (InputSeries(c.SERVICE_VERDICTS_STALE, service, "1x12"),),
                    "12m",
                    (Fire(service, 1),),
                ),
                Case("fresh", (InputSeries(c.SERVICE_VERDICTS_STALE, service, "0x12"),), "12m"),
            ),
        ),
    )
    return Group("verdicts", alerts)
