"""Property-based requests generated from the app's own OpenAPI schema (schemathesis, in-process
ASGI): no server error, every answer conforms to the schema, invalid input is refused."""

from __future__ import annotations

import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, settings

from fleetscope.service.app import ServiceSettings, create_app
from tests.service.support import ScriptedAnalyze, make_analysis

# Without a token: the token is tested in test_auth; here every generated request reaches a handler.
# The app is built at collection time, minutes before these tests run in the full suite: a long
# stale_after keeps its verdicts fresh, so /readyz answers 200 (staleness is tested in test_resilience).
_analysis = make_analysis(n_nodes=6, failing=("node-2",), degraded=("node-5",))
_FRESH = 7 * 86400.0
_app = create_app(ServiceSettings(run_analysis=False, stale_after=_FRESH), ScriptedAnalyze(_analysis))
assert _app.state.runner.run_once()

schema = schemathesis.openapi.from_asgi("/openapi.json", _app)


@schema.parametrize()
@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_schema(case):
    response = case.call_and_validate()
    assert response.status_code < 500


def test_schema_covers_the_api():
    paths = set(schema.raw_schema["paths"])
    assert {
        "/healthz",
        "/readyz",
        "/metrics",
        "/api/v1/findings",
        "/api/v1/nodes",
        "/api/v1/jobs",
        "/api/v1/jobs/{job_id}",
        "/api/v1/models",
        "/api/v1/plan",
        "/api/v1/status",
    } <= paths


def test_unknown_query_parameters_are_refused():
    client = TestClient(_app)
    r = client.get("/api/v1/findings?nodes=node-1")
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "nodes"]
    assert client.get("/api/v1/nodes?x=1").status_code == 422
    assert client.get("/?job=4711").status_code == 200
    assert client.get("/?job=$(x)").status_code == 200  # a label value like any (the page sets text only)
    assert client.get("/?job=a%01b").status_code == 422


# The same with the bearer token required: the schema declares it, schemathesis sends it, and also
# checks that the API refuses requests without it.
TOKEN = "schemathesis-token"
_token_app = create_app(
    ServiceSettings(run_analysis=False, token=TOKEN, stale_after=_FRESH), ScriptedAnalyze(_analysis)
)
assert _token_app.state.runner.run_once()
token_schema = schemathesis.openapi.from_asgi(
    "/openapi.json", _token_app, headers={"Authorization": f"Bearer {TOKEN}"}
)


@token_schema.auth()
class _Bearer:
    def get(self, case, ctx):
        return TOKEN

    def set(self, case, data, ctx):
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}


@token_schema.parametrize()
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
def test_api_with_token_conforms_to_its_schema(case):
    response = case.call_and_validate()
    assert response.status_code < 500
    if (case.headers or {}).get("Authorization") == f"Bearer {TOKEN}":
        assert response.status_code != 401
    elif case.path != "/healthz":
        assert response.status_code == 401
