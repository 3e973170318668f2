"""A job id the exporter accepts opens in the API and the page (issue 36, item 8): ``team/llama 7b``
was 404 in the API and 422 on the page; a 60 KB id came back whole in the 422."""

from __future__ import annotations

from urllib.parse import quote

from fastapi.testclient import TestClient

from fleetscope.service.app import ServiceSettings, create_app
from tests.service.support import ScriptedAnalyze, make_analysis

JOB = "team/llama 7b"


def _client(job_id: str) -> TestClient:
    app = create_app(ServiceSettings(run_analysis=False), ScriptedAnalyze(make_analysis(job_id=job_id)))
    assert app.state.runner.run_once()
    return TestClient(app)


def test_a_job_id_with_a_slash_and_a_space_opens() -> None:
    client = _client(JOB)
    for path in ("/api/v1/jobs/" + quote(JOB, safe=""), "/api/v1/jobs/team/llama%207b"):
        resp = client.get(path)
        assert resp.status_code == 200, (path, resp.text[:200])
        assert resp.json()["job"]["job_id"] == JOB
    # the goodput route is not taken for a job of that name (this report has no account: 404)
    resp = client.get("/api/v1/jobs/team/llama%207b/goodput")
    assert resp.status_code == 404 and resp.json() == {"detail": "unknown job"}
    assert client.get("/?job=" + quote(JOB)).status_code == 200
    findings = client.get("/api/v1/findings?job_id=" + quote(JOB))
    assert findings.status_code == 200


def test_an_oversized_or_control_character_id_is_refused_without_being_echoed_whole() -> None:
    client = _client("4711")
    for path in ("/api/v1/jobs/" + "x" * 60_000, "/?job=" + "x" * 60_000, "/?job=a%0Ab"):
        resp = client.get(path)
        assert resp.status_code == 422, path
        assert len(resp.content) < 1_000
    assert client.get("/api/v1/jobs/a%0Ab").status_code == 404  # no route's path holds a newline
    detail = client.get("/api/v1/jobs/" + "x" * 60_000).json()["detail"][0]
    assert detail["input"].endswith("... (60,000 characters)")
