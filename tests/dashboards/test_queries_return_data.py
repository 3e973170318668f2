"""Every PromQL expression of every dashboard panel, template variable and rule: it parses, reads
only names the contract (or our recording rules, or Prometheus itself) defines, and returns data
from a real Prometheus loaded with a recorded window (tests/fixtures/recorded/all_series.om.gz).

A panel that would show "No data" fails here. Prometheus is started once for the module: the
recording is backfilled with ``promtool tsdb create-blocks-from openmetrics``, then the recording
rules are backfilled from it with ``promtool tsdb create-blocks-from rules`` (backfilled data is
never evaluated by rules on its own), and Prometheus restarts on both.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from fleetscope import contract
from fleetscope.alerts import names
from fleetscope.alerts.stack import PROMETHEUS_SCRAPE_DURATION, PROMETHEUS_UP
from fleetscope.dashboards.cluster import ALERTS
from tests.dashboards.promql_names import series_names
from tests.fixtures.inference.rules_series import MODEL
from tests.support.prom import Prometheus, backfill_openmetrics, backfill_rules

pytestmark = [pytest.mark.server]

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "recorded" / "all_series.om.gz"

_spec = importlib.util.spec_from_file_location(
    "make_rules_fixture", ROOT / "tests/fixtures/make_rules_fixture.py"
)
assert _spec and _spec.loader
fx = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fx)

#: Names an expression may read besides the contract's metrics: the recording rules fleetscope
#: defines, and the series Prometheus itself writes (``up`` and ``scrape_duration_seconds`` per
#: target, ``ALERTS`` for active alerts).
ALLOWED = (
    set(contract.METRICS)
    | set(names.RECORDING_RULE_NAMES)
    | {PROMETHEUS_UP, PROMETHEUS_SCRAPE_DURATION, ALERTS}
)

#: Dashboard variables as Grafana would substitute them for the fixture's worst node, main job,
#: served model and the replica on the worst node.
VARIABLES = {
    "$__rate_interval": "5m",
    "$__range": "1h",
    "$Hostname": fx.A,
    "$job_id": "4711",
    "$model": MODEL,
    "$replica": f"{fx.A}:8000",
}


@dataclass(frozen=True)
class Expr:
    where: str
    expr: str
    instant: bool

    def substituted(self) -> str:
        out = self.expr
        for var, value in VARIABLES.items():
            out = out.replace(var, value)
        # "$1" is label_replace's capture reference, not a Grafana variable (none is named by digits).
        assert not re.search(r"\$(?![0-9])", out), f"{self.where}: unsubstituted variable in {out}"
        return out


def _panels(panels: list[dict]) -> list[dict]:
    out = []
    for panel in panels:
        out.append(panel)
        out += _panels(panel.get("panels", []))
    return out


def variable_expr(query: str) -> str:
    """The PromQL behind a query variable: its values exist when this returns series."""
    if query.startswith("query_result("):
        return query.removeprefix("query_result(").removesuffix(")")
    # label_values(metric, label)
    inner = query.removeprefix("label_values(").removesuffix(")")
    metric, label = (s.strip() for s in inner.split(","))
    return f"count by ({label}) ({metric})"


def dashboard_exprs() -> list[Expr]:
    exprs = []
    for path in sorted((ROOT / "dashboards").glob("*.json")):
        board = json.loads(path.read_text())
        for var in board["templating"]["list"]:
            if var["type"] == "query":
                exprs.append(Expr(f"{path.name} variable {var['name']}", variable_expr(var["query"]), True))
        for panel in _panels(board["panels"]):
            for target in panel.get("targets", []):
                where = f"{path.name} panel {panel['title']!r} {target['refId']}"
                exprs.append(Expr(where, target["expr"], bool(target.get("instant"))))
    return exprs


def rule_exprs() -> list[Expr]:
    exprs = []
    for path in sorted((ROOT / "alerts").glob("*.rules.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                name = rule.get("alert") or rule["record"]
                exprs.append(Expr(f"{path.name} {name}", rule["expr"], True))
    return exprs


EXPRS = dashboard_exprs() + rule_exprs()


def test_every_dashboard_and_rule_file_was_collected() -> None:
    assert len([e for e in EXPRS if e.where.startswith("fleetscope-")]) >= 40
    assert {e.where.split()[0] for e in EXPRS} >= {
        "cluster.json",
        "gpu-node.json",
        "efa.json",
        "fsx.json",
        "training.json",
    }


@pytest.mark.parametrize("case", EXPRS, ids=[e.where for e in EXPRS])
def test_reads_only_defined_names(case: Expr) -> None:
    read = series_names(case.substituted())
    assert read, f"{case.where}: reads no series at all: {case.expr}"
    assert read <= ALLOWED, f"{case.where}: reads names outside the contract: {sorted(read - ALLOWED)}"


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory):
    work = tmp_path_factory.mktemp("prom")
    om = work / "all_series.om"
    om.write_bytes(gzip.decompress(FIXTURE.read_bytes()))
    data = work / "data"
    backfill_openmetrics(om, data)
    with Prometheus(work / "raw", data_dir=data) as raw:
        backfill_rules(raw.url, ROOT / "alerts/fleetscope-recording.rules.yml", fx.T0, fx.T_END, data)
    with Prometheus(work / "full", data_dir=data) as full:
        yield full


def test_fixture_is_what_the_generator_writes() -> None:
    # Compare the text, not the gzip bytes: another zlib may compress the same text differently.
    fresh = gzip.decompress(fx.render())
    assert fresh == gzip.decompress(FIXTURE.read_bytes()), "run: python tests/fixtures/make_rules_fixture.py"


def test_recording_rules_were_backfilled(prom: Prometheus) -> None:
    for record in names.RECORDING_RULE_NAMES:
        assert prom.query(record, fx.T_END), f"{record} has no backfilled samples"


def test_the_check_can_fail(prom: Prometheus) -> None:
    """A query for something the fixture lacks is empty, so "returns data" below means something."""
    assert prom.query(f'{contract.GPU_UP}{{Hostname="no-such-node"}}', fx.T_END) == []


@pytest.mark.parametrize("case", EXPRS, ids=[e.where for e in EXPRS])
def test_returns_data(prom: Prometheus, case: Expr) -> None:
    expr = case.substituted()
    # A time series panel runs a range query over the dashboard's window, as Grafana does.
    result = prom.query(expr, fx.T_END) if case.instant else prom.query_range(expr, fx.T0 + 600, fx.T_END, 60)
    assert result, f"{case.where} shows No data: {expr}"
