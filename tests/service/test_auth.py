"""The optional bearer token: every endpoint but /healthz needs it; files and environment."""

from __future__ import annotations

import base64

import pytest

from fleetscope.errors import FleetscopeError
from fleetscope.service.auth import TOKEN_ENV, load_token

TOKEN = "s3cret-t0ken"
PROTECTED = [
    "/",
    "/static/app.js",
    "/static/style.css",
    "/readyz",
    "/metrics",
    "/openapi.json",
    "/api/v1/status",
    "/api/v1/findings",
    "/api/v1/nodes",
    "/api/v1/jobs",
    "/api/v1/jobs/4711",
    "/api/v1/models",
    "/api/v1/plan",
    "/does-not-exist",
]


@pytest.mark.parametrize("path", PROTECTED)
def test_missing_or_wrong_token_is_refused_everywhere_but_healthz(make_client, path):
    client = make_client(token=TOKEN)
    for headers in (
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Bearer {TOKEN}x"},
        {"Authorization": f"Bearer {TOKEN[:-1]}"},
        {"Authorization": TOKEN},
        {"Authorization": f"Token {TOKEN}"},
        {"Authorization": "Basic !!!notbase64"},
        {"Authorization": "Basic " + base64.b64encode(b"admin:wrong").decode()},
        {"Authorization": "Basic " + base64.b64encode(TOKEN.encode()).decode()},  # no colon
    ):
        r = client.get(path, headers=headers)
        assert r.status_code == 401, (path, headers, r.status_code)
        assert r.json() == {"detail": "missing or wrong bearer token"}
        challenges = r.headers.get_list("www-authenticate")
        assert 'Bearer realm="fleetscope"' in challenges
        assert any(c.startswith("Basic ") for c in challenges)


@pytest.mark.parametrize("path", PROTECTED)
def test_right_token_opens_every_endpoint(make_client, path):
    client = make_client(token=TOKEN)
    r = client.get(path, headers={"Authorization": f"Bearer {TOKEN}"})
    assert r.status_code == (404 if path == "/does-not-exist" else 200), path
    # A browser sends the token as the Basic password (any user name).
    basic = base64.b64encode(f"me:{TOKEN}".encode()).decode()
    assert client.get(path, headers={"Authorization": f"Basic {basic}"}).status_code == r.status_code


def test_healthz_stays_open_and_no_token_means_open(make_client):
    assert make_client(token=TOKEN).get("/healthz").status_code == 200
    assert make_client().get("/api/v1/nodes").status_code == 200


def test_openapi_declares_the_bearer_scheme_only_when_a_token_is_set(make_client):
    schema = (
        make_client(token=TOKEN).get("/openapi.json", headers={"Authorization": f"Bearer {TOKEN}"}).json()
    )
    assert schema["components"]["securitySchemes"]["bearer"] == {"type": "http", "scheme": "bearer"}
    assert schema["paths"]["/healthz"]["get"]["security"] == []
    assert "401" in schema["paths"]["/api/v1/findings"]["get"]["responses"]
    assert "securitySchemes" not in make_client().get("/openapi.json").json().get("components", {})


def test_token_from_file_wins_over_environment(tmp_path):
    f = tmp_path / "token"
    f.write_text(TOKEN + "\n")
    assert load_token(f, {TOKEN_ENV: "other"}) == TOKEN
    assert load_token(None, {TOKEN_ENV: " envtok "}) == "envtok"
    assert load_token(None, {}) is None
    assert load_token(None, {TOKEN_ENV: "  "}) is None


@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "cannot read --token-file"), (b"\n  \n", "is empty"), (b"\xff\xfe", "not UTF-8")],
)
def test_bad_token_file_is_a_clear_error(tmp_path, content, message):
    f = tmp_path / "token"
    if content is not None:
        f.write_bytes(content)
    with pytest.raises(FleetscopeError, match=message):
        load_token(f, {})
