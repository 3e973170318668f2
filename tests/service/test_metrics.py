"""/metrics: the verdict series of the contract, parsed back and checked by promtool."""

from __future__ import annotations

from fleetscope import contract
from fleetscope.errors import FleetscopeError
from tests.support.exposition import series
from tests.support.prom import promtool


def test_verdict_metrics_follow_the_contract(make_client, scripted):
    a = scripted.result
    a.findings[0].end = None
    client = make_client()
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    got = series(r.text)
    node = contract.NODE_LABEL
    health = contract.NODE_HEALTH.name
    assert got[(health, ((node, "node-2"), ("state", "failing")))] == 1
    assert got[(health, ((node, "node-2"), ("state", "healthy")))] == 0
    assert got[(health, ((node, "node-1"), ("state", "healthy")))] == 1
    assert sum(v for (n, _), v in got.items() if n == health) == 4  # one state per node
    key = (
        contract.STRAGGLER_SCORE.name,
        (("Hostname", "node-1"), ("gpu", "5"), ("job_id", "4711"), ("rank", "5")),
    )
    assert got[key] == 1.31
    findings = contract.FINDINGS.name
    assert got[(findings, (("kind", "failing_node"), ("severity", "critical")))] == 1
    assert got[(findings, (("kind", "straggler"), ("severity", "warning")))] == 1
    assert got[(findings, (("kind", "mfu_drop"), ("severity", "critical")))] == 0  # present, zero
    assert got[(contract.SERVICE_ANALYSIS_SUCCESS.name, ())] == 1
    assert got[(contract.SERVICE_VERDICTS_STALE.name, ())] == 0
    assert got[(contract.SERVICE_LAST_ANALYSIS.name, ())] > 1.7e9
    res = promtool("check", "metrics", input=r.content)
    assert res.returncode == 0, res.stdout.decode() + res.stderr.decode()


def test_closed_findings_are_not_counted(make_client, scripted):
    scripted.result.findings[0].end = scripted.result.start + 900
    got = series(make_client().get("/metrics").text)
    assert got[(contract.FINDINGS.name, (("kind", "failing_node"), ("severity", "critical")))] == 0


def test_before_the_first_analysis_and_during_an_outage(make_client, scripted):
    client = make_client(analyzed=False)
    got = series(client.get("/metrics").text)
    assert not any(n == contract.NODE_HEALTH.name for n, _ in got)
    assert got[(contract.SERVICE_VERDICTS_STALE.name, ())] == 1
    assert (contract.SERVICE_ANALYSIS_SUCCESS.name, ()) not in got  # nothing attempted yet
    client.app.state.runner.run_once()
    scripted.error = FleetscopeError("Prometheus is down")
    client.app.state.runner.run_once()
    got = series(client.get("/metrics").text)
    assert got[(contract.SERVICE_ANALYSIS_SUCCESS.name, ())] == 0
    assert got[(contract.SERVICE_VERDICTS_STALE.name, ())] == 1
    # The last verdicts stay exported while stale.
    assert got[(contract.NODE_HEALTH.name, (("Hostname", "node-2"), ("state", "failing")))] == 1
