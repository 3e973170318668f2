"""Alerts on the monitoring stack itself: exporters down, collectors failing, scrapes too slow."""

from __future__ import annotations

from fleetscope import contract as c
from fleetscope.alerts.config import Thresholds
from fleetscope.alerts.model import Alert, Case, Fire, Group, InputSeries
from fleetscope.alerts.testdata import HOST, num, target

#: Series Prometheus itself writes for every scrape target (not part of fleetscope's contract).
PROMETHEUS_UP = "up"
PROMETHEUS_SCRAPE_DURATION = "scrape_duration_seconds"


def group(cfg: Thresholds) -> Group:
    sel = cfg.job_selector
    exporter = target()
    collector = {"collector": "efa", **exporter}
    alerts = (
        Alert(
            name="FleetscopeExporterDown",
            expr=f"{PROMETHEUS_UP}{{{sel}}} == 0",
            for_="5m",
            severity="warning",
            summary="Prometheus cannot scrape a fleetscope target.",
            description="Prometheus has failed to scrape {{ $labels.instance }} (job {{ $labels.job }}) for "
            "5m: the node's GPUs, network and training ranks are unwatched.",
            cases=(
                Case("down", (InputSeries(PROMETHEUS_UP, exporter, "1 0x7"),), "7m", (Fire(exporter, 0),)),
                Case("up", (InputSeries(PROMETHEUS_UP, exporter, "1x7"),), "7m"),
                Case(
                    "another job's target",
                    (InputSeries(PROMETHEUS_UP, target("node", f"{HOST}:9100"), "0x7"),),
                    "7m",
                ),
            ),
        ),
        Alert(
            name="FleetscopeCollectorFailing",
            expr=f"{c.COLLECTOR_SUCCESS} == 0",
            for_="15m",
            severity="warning",
            summary="A fleetscope collector keeps failing.",
            description="Collector {{ $labels.collector }} of the exporter at {{ $labels.instance }} has "
            "failed every scrape for 15m; the other collectors still report.",
            cases=(
                Case(
                    "failing",
                    (InputSeries(c.COLLECTOR_SUCCESS, collector, "0x20"),),
                    "20m",
                    (Fire(collector, 0),),
                ),
                Case("recovered", (InputSeries(c.COLLECTOR_SUCCESS, collector, "0x10 1x10"),), "20m"),
            ),
        ),
        Alert(
            name="FleetscopeExporterScrapeSlow",
            expr=f"{PROMETHEUS_SCRAPE_DURATION}{{{sel}}} > {num(cfg.scrape_duration_seconds)}",
            for_="15m",
            severity="warning",
            summary="Scraping a fleetscope exporter takes too long.",
            description='Scraping {{ $labels.instance }} takes {{ printf "%.1f" $value }} s, more than half '
            "the default 10 s scrape timeout; fleetscope_collector_duration_seconds shows which collector.",
            cases=(
                Case(
                    "7 s",
                    (InputSeries(PROMETHEUS_SCRAPE_DURATION, exporter, "7x20"),),
                    "20m",
                    (Fire(exporter, 7),),
                ),
                Case("0.2 s", (InputSeries(PROMETHEUS_SCRAPE_DURATION, exporter, "0.2x20"),), "20m"),
            ),
        ),
    )
    return Group("stack", alerts)
