"""The building blocks of fleetscope's rules: alerts, recording rules and their promtool test cases.

Every rule carries its own test cases (at least one that fires or records, one that must not), so
the generated ``alerts/tests/*.test.yml`` cover every rule by construction. The expected
annotations are rendered here from the same templates Prometheus renders, with a deliberately tiny
renderer: only ``{{ $labels.NAME }}`` and ``{{ printf "%.Nf" $value }}`` may appear in a template.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fleetscope.alerts.config import Thresholds

Labels = dict[str, str]

#: Resolution at which recording-rule tests compare values (2**-20, exact in binary).
_RESOLUTION = 2.0**-20

_TEMPLATE = re.compile(r"\{\{\s*(.*?)\s*\}\}")
_LABEL_REF = re.compile(r"^\$labels\.([A-Za-z_][A-Za-z0-9_]*)$")
_PRINTF_VALUE = re.compile(r'^printf\s+"(%\.\d+f)(%%)?"\s+\$value$')


def render_template(template: str, labels: Labels, value: float) -> str:
    """Render an annotation the way Prometheus would, for the two forms fleetscope uses."""

    def one(match: re.Match[str]) -> str:
        inner = match.group(1)
        if m := _LABEL_REF.match(inner):
            return labels[m.group(1)]
        if m := _PRINTF_VALUE.match(inner):
            return (m.group(1) % value) + ("%" if m.group(2) else "")
        raise ValueError(f"unsupported template action {{{{ {inner} }}}} in {template!r}")

    return _TEMPLATE.sub(one, template)


def selector(metric: str, labels: Labels) -> str:
    """``metric{a="1",b="2"}`` with labels in the given order."""
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{metric}{{{inner}}}"


@dataclass(frozen=True)
class InputSeries:
    """One promtool input series: a selector and values in promtool's expanding notation."""

    metric: str
    labels: Labels
    values: str

    def to_yaml(self) -> dict[str, str]:
        return {"series": selector(self.metric, self.labels), "values": self.values}


@dataclass(frozen=True)
class Fire:
    """An alert expected at the case's eval time, with the labels and value it must carry."""

    labels: Labels
    value: float


@dataclass(frozen=True)
class Case:
    """One promtool test group for one rule. ``fires`` empty means: must not fire (or record)."""

    name: str
    series: tuple[InputSeries, ...]
    eval_time: str
    fires: tuple[Fire, ...] = ()
    #: promtool's time between the input series' samples (a scrape interval).
    interval: str = "1m"


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    severity: str
    summary: str
    description: str
    cases: tuple[Case, ...]
    for_: str = ""

    @property
    def anchor(self) -> str:
        """The runbook section anchor (GitHub lower-cases headings)."""
        return self.name.lower()

    def runbook_url(self, cfg: Thresholds) -> str:
        return f"{cfg.runbook_url_base}#{self.anchor}"

    def annotations(
        self, cfg: Thresholds, labels: Labels | None = None, value: float | None = None
    ) -> Labels:
        """The annotation templates, or (with labels and value) their rendered expectation."""
        summary, description = self.summary, self.description
        if labels is not None and value is not None:
            summary = render_template(summary, labels, value)
            description = render_template(description, labels, value)
        return {"summary": summary, "description": description, "runbook_url": self.runbook_url(cfg)}

    def to_rule(self, cfg: Thresholds) -> dict:
        rule: dict = {"alert": self.name, "expr": self.expr}
        if self.for_:
            rule["for"] = self.for_
        rule["labels"] = {"severity": self.severity}
        rule["annotations"] = self.annotations(cfg)
        return rule

    def to_tests(self, cfg: Thresholds) -> list[dict]:
        groups = []
        for case in self.cases:
            exp = [
                {
                    "exp_labels": {**fire.labels, "severity": self.severity},
                    "exp_annotations": self.annotations(cfg, fire.labels, fire.value),
                }
                for fire in case.fires
            ]
            groups.append(
                {
                    "name": f"{self.name}: {case.name}",
                    "interval": case.interval,
                    "input_series": [s.to_yaml() for s in case.series],
                    "alert_rule_test": [
                        {"eval_time": case.eval_time, "alertname": self.name, "exp_alerts": exp}
                    ],
                }
            )
        return groups


@dataclass(frozen=True)
class Recording:
    record: str
    expr: str
    cases: tuple[Case, ...]

    def to_rule(self, cfg: Thresholds) -> dict:
        return {"record": self.record, "expr": self.expr}

    def to_tests(self, cfg: Thresholds) -> list[dict]:
        groups = []
        # rate() extrapolation leaves float noise (0.5000000000000001) and promtool compares exactly,
        # so the test rounds to a power of two, which both sides represent exactly.
        expr = f"round({self.record}, {_RESOLUTION!r})"
        for case in self.cases:
            samples = [
                {"labels": selector("", f.labels), "value": round(f.value / _RESOLUTION) * _RESOLUTION}
                for f in case.fires
            ]
            groups.append(
                {
                    "name": f"{self.record}: {case.name}",
                    "interval": case.interval,
                    "input_series": [s.to_yaml() for s in case.series],
                    "promql_expr_test": [{"expr": expr, "eval_time": case.eval_time, "exp_samples": samples}],
                }
            )
        return groups


Rule = Alert | Recording


@dataclass(frozen=True)
class Group:
    """One rule group; ``area`` names its file (``alerts/fleetscope-<area>.rules.yml``)."""

    area: str
    rules: tuple[Rule, ...]
    doc: str = ""
    interval: str = ""
    tags: tuple[str, ...] = field(default_factory=tuple)

    @property
    def name(self) -> str:
        return f"fleetscope-{self.area}"

    def to_yaml(self, cfg: Thresholds) -> dict:
        group: dict = {"name": self.name}
        if self.interval:
            group["interval"] = self.interval
        group["rules"] = [r.to_rule(cfg) for r in self.rules]
        return group

    def alerts(self) -> list[Alert]:
        return [r for r in self.rules if isinstance(r, Alert)]

    def recordings(self) -> list[Recording]:
        return [r for r in self.rules if isinstance(r, Recording)]
