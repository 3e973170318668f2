"""Shared pieces of the fleetscope dashboards: datasource reference, variables, panel factories.

Every panel and target points at the ``datasource`` variable through a modern datasource reference,
and every panel states its unit, so the dashboards import into any Grafana with a Prometheus
datasource (compose, kube-prometheus-stack, Amazon Managed Grafana) without editing.
"""

from __future__ import annotations

from typing import Any

import attr
import grafanalib.core as g

from fleetscope import contract

DATASOURCE: dict[str, str] = {"type": "prometheus", "uid": "${datasource}"}

#: Panel height in grid units.
HEIGHT = 8


def sel(metric: str, **matchers: str) -> str:
    """``metric{k=~"v",...}``: regex matchers, so multi-value variables and "All" (.*) both work."""
    if not matchers:
        return str(metric)
    inner = ", ".join(f'{k}=~"{v}"' for k, v in matchers.items())
    return f"{metric}{{{inner}}}"


HOST = {contract.NODE_LABEL: "$Hostname"}
JOB = {"job_id": "$job_id"}


def datasource_var() -> g.Template:
    return g.Template(name="datasource", label="Data source", type="datasource", query="prometheus")


def label_var(name: str, metric: str, label: str, *, multi: bool = False, title: str = "") -> g.Template:
    """A query variable over the values of ``label`` on ``metric`` (``label_values(metric, label)``)."""
    return g.Template(
        name=name,
        label=title or name,
        query=f"label_values({metric}, {label})",
        dataSource=DATASOURCE,
        refresh=2,  # on time range change: nodes and jobs come and go
        includeAll=multi,
        multi=multi,
        allValue=".*" if multi else None,
        sort=1,
    )


def hostname_var(metric: str, multi: bool = False) -> g.Template:
    return label_var(contract.NODE_LABEL, metric, contract.NODE_LABEL, multi=multi, title="Node")


def job_var() -> g.Template:
    return label_var("job_id", contract.TRAINING_STEPS, "job_id", title="Job")


def target(
    expr: str, legend: str = "", ref: str = "A", instant: bool = False, table: bool = False
) -> g.Target:
    return g.Target(
        expr=expr,
        legendFormat=legend,
        refId=ref,
        instant=instant,
        format="table" if table else "time_series",
        datasource=DATASOURCE,
        intervalFactor=1,
    )


def _targets(queries: list[tuple[str, str]], instant: bool = False, table: bool = False) -> list[g.Target]:
    return [
        target(expr, legend, chr(ord("A") + i), instant=instant, table=table)
        for i, (expr, legend) in enumerate(queries)
    ]


def timeseries(
    title: str,
    queries: list[tuple[str, str]],
    unit: str,
    description: str = "",
    stacked: bool = False,
    min_value: float | None = None,
    max_value: float | None = None,
    **extra: Any,
) -> g.TimeSeries:
    """A time series panel; ``queries`` are (expr, legend) pairs."""
    return g.TimeSeries(
        title=title,
        description=description,
        dataSource=DATASOURCE,
        targets=_targets(queries),
        unit=unit,
        maxDataPoints=None,
        stacking={"mode": "normal", "group": "A"} if stacked else {},
        fillOpacity=30 if stacked else 10,
        legendDisplayMode="table",
        legendPlacement="right",
        legendCalcs=["lastNotNull", "max"],
        tooltipMode="multi",
        valueMin=min_value,
        valueMax=max_value,
        **extra,
    )


def stat(
    title: str,
    expr: str,
    unit: str,
    description: str = "",
    thresholds: list[tuple[float | None, str]] | None = None,
    no_value: str = "0",
) -> g.Stat:
    """A single-value panel; ``no_value`` is what an empty result shows (a count of nothing is 0)."""
    steps = [{"color": color, "value": value} for value, color in (thresholds or [(None, "green")])]
    return g.Stat(
        title=title,
        description=description,
        dataSource=DATASOURCE,
        targets=[target(expr, instant=True)],
        format=unit,
        noValue=no_value,
        reduceCalc="lastNotNull",
        graphMode="none",
        colorMode="background",
        thresholds=steps,
    )


def table(
    title: str,
    expr: str,
    unit: str,
    description: str = "",
    hide: tuple[str, ...] = (),
    no_value: str = "none",
) -> g.Table:
    """An instant table; ``hide`` names columns (labels) not worth showing; ``no_value`` replaces
    Grafana's "No data" when nothing matches (no XIDs, no alerts: good news, not a broken panel)."""
    transformations = [
        {"id": "organize", "options": {"excludeByName": {"Time": True, **{h: True for h in hide}}}}
    ]
    return g.Table(
        title=title,
        description=description,
        dataSource=DATASOURCE,
        targets=[target(expr, instant=True, table=True)],
        unit=unit,
        transformations=transformations,
        filterable=True,
        extraJson={"fieldConfig": {"defaults": {"noValue": no_value}}},
    )


def state_timeline(
    title: str, expr: str, legend: str, mappings: dict[int, tuple[str, str]], description: str = ""
) -> g.StateTimeline:
    """States over time; ``mappings`` maps a value to (text, color). Unit ``none``: values are codes."""
    value_map = {
        "type": "value",
        "options": {
            str(v): {"text": text, "color": color, "index": i}
            for i, (v, (text, color)) in enumerate(mappings.items())
        },
    }
    return g.StateTimeline(
        title=title,
        description=description,
        dataSource=DATASOURCE,
        targets=[target(expr, legend)],
        mappings=[value_map],
        extraJson={"fieldConfig": {"defaults": {"unit": "none"}}},
        maxDataPoints=None,
    )


def layout(rows: list[tuple[str | None, list[g.Panel]]], height: int = HEIGHT) -> list[g.Panel]:
    """Place panels left to right in rows of equal width; a row title adds a row header."""
    panels: list[g.Panel] = []
    y = 0
    for title, row in rows:
        if title:
            panels.append(g.RowPanel(title=title, gridPos=g.GridPos(h=1, w=24, x=0, y=y)))
            y += 1
        width = 24 // len(row)
        h = 4 if all(isinstance(p, g.Stat) for p in row) else height
        for i, panel in enumerate(row):
            panels.append(_place(panel, g.GridPos(h=h, w=width, x=i * width, y=y)))
        y += h
    return panels


def _place(panel: g.Panel, pos: g.GridPos) -> g.Panel:
    return attr.evolve(panel, gridPos=pos)


def dashboard(uid: str, title: str, description: str, variables: list[g.Template], rows: list) -> g.Dashboard:
    return g.Dashboard(
        title=title,
        uid=uid,
        description=description,
        tags=["fleetscope"],
        timezone="utc",
        refresh="30s",
        time=g.Time("now-3h", "now"),
        graphTooltip=1,  # shared crosshair
        editable=False,
        templating=g.Templating(list=[datasource_var(), *variables]),
        # A drop-down of the other fleetscope dashboards, keeping the time range and variables.
        links=[
            {
                "type": "dashboards",
                "tags": ["fleetscope"],
                "asDropdown": True,
                "title": "fleetscope",
                "includeVars": True,
                "keepTime": True,
                "icon": "external link",
                "targetBlank": False,
            }
        ],
        panels=layout(rows),
    ).auto_panel_ids()
