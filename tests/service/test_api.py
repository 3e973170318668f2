"""The JSON API, the page and its files, read-only behaviour and input validation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fleetscope.times import rfc3339
from tests.service.support import make_analysis


def test_before_first_analysis_data_endpoints_answer_503_and_readyz_is_not_ready(make_client):
    client = make_client(analyzed=False)
    assert client.get("/healthz").json() == {"status": "ok"}
    r = client.get("/readyz")
    assert r.status_code == 503 and r.json()["ready"] is False
    for path in ("/api/v1/findings", "/api/v1/nodes", "/api/v1/jobs", "/api/v1/jobs/4711", "/api/v1/plan"):
        r = client.get(path)
        assert r.status_code == 503, path
        assert r.json()["detail"] == "no analysis yet"
        assert int(r.headers["retry-after"]) >= 1
    assert client.get("/api/v1/status").json()["status"]["ready"] is False


def test_nodes_list_every_node_state_reason_and_gpus_in_natural_order(make_client, scripted):
    scripted.result = make_analysis(n_nodes=11, failing=("node-2",), degraded=("node-10",))
    body = make_client().get("/api/v1/nodes").json()
    assert [n["node"] for n in body["nodes"]] == [f"node-{i}" for i in range(1, 12)]
    by_name = {n["node"]: n for n in body["nodes"]}
    assert by_name["node-2"]["state"] == "failing"
    assert by_name["node-2"]["reasons"] == ["GPU 3 fell off the bus (XID 79)"]
    assert by_name["node-2"]["open_findings"] == 1
    assert {g["gpu"]: g["state"] for g in by_name["node-2"]["gpus"]}["3"] == "failing"
    assert [g["gpu"] for g in by_name["node-1"]["gpus"]] == [str(i) for i in range(8)]
    assert by_name["node-10"]["state"] == "degraded"
    assert body["counts"] == {"healthy": 9, "degraded": 1, "failing": 1}
    assert body["status"]["ready"] is True and body["status"]["stale"] is False


def test_findings_have_the_design_shape_and_filters_work(make_client, scripted):
    a = scripted.result
    client = make_client()
    all_ = client.get("/api/v1/findings").json()
    assert all_["window"] == {"start": rfc3339(a.start), "end": rfc3339(a.end)}
    assert [f["kind"] for f in all_["findings"]] == ["straggler", "failing_node"]  # oldest first
    straggler = all_["findings"][0]
    assert straggler == {
        "kind": "straggler",
        "severity": "warning",
        "node": "node-1",
        "gpu": "5",
        "rank": 5,
        "job_id": "4711",
        "start": rfc3339(a.start + 300),
        "end": None,
        "score": 1.31,
        "cause": "thermal_throttle",
        "evidence": {"DCGM_FI_DEV_SM_CLOCK": "1980 -> 1410 MHz"},
        "action": "drain after the job's next checkpoint",
    }
    assert [f["node"] for f in client.get("/api/v1/findings?kind=failing_node").json()["findings"]] == [
        "node-2"
    ]
    assert [f["kind"] for f in client.get("/api/v1/findings?node=node-1").json()["findings"]] == ["straggler"]
    assert len(client.get("/api/v1/findings?job_id=4711").json()["findings"]) == 1
    assert client.get("/api/v1/findings?job_id=999").json()["findings"] == []


def test_since_keeps_open_findings_and_those_that_ended_after_it(make_client, scripted):
    a = scripted.result
    a.findings[0].end = a.start + 900  # the failing_node finding closed 15 min into the window
    client = make_client()
    before = rfc3339(a.start + 800)
    after = rfc3339(a.start + 1000)
    assert len(client.get("/api/v1/findings", params={"since": before}).json()["findings"]) == 2
    kinds = [f["kind"] for f in client.get("/api/v1/findings", params={"since": after}).json()["findings"]]
    assert kinds == ["straggler"]
    # The same instant as an offset, with a fraction and a space.
    local = (datetime.fromtimestamp(a.start + 1000, tz=UTC) + timedelta(hours=2)).strftime(
        "%Y-%m-%d %H:%M:%S.5+02:00"
    )
    kinds = [f["kind"] for f in client.get("/api/v1/findings", params={"since": local}).json()["findings"]]
    assert kinds == ["straggler"]


def test_since_without_a_zone_is_refused_with_one_line(make_client, scripted):
    """A zoneless time would be read in some machine's local zone and shift every finding by hours."""
    client = make_client()
    when = rfc3339(scripted.result.start + 1000).rstrip("Z")
    r = client.get("/api/v1/findings", params={"since": when})
    assert r.status_code == 422, r.text
    messages = [e["msg"] for e in r.json()["detail"]]
    assert len(messages) == 1 and "has no time zone" in messages[0] and "\n" not in messages[0], messages
    r = client.get("/api/v1/findings", params={"since": str(scripted.result.start)})  # Unix seconds
    assert r.status_code == 422, r.text


def test_job_has_mfu_tokens_stragglers_and_every_rank_score(make_client):
    client = make_client()
    body = client.get("/api/v1/jobs/4711").json()
    assert body["job"]["mfu"] == 0.41 and body["job"]["tokens_per_second"] == 123456.0
    assert body["job"]["stragglers"] == [5]
    assert [s["rank"] for s in body["scores"]] == list(range(32))
    assert body["scores"][5] == {"rank": 5, "node": "node-1", "gpu": "5", "score": 1.31}
    assert [f["kind"] for f in body["findings"]] == ["straggler"]
    assert client.get("/api/v1/jobs").json()["jobs"][0]["job_id"] == "4711"
    r = client.get("/api/v1/jobs/nope")
    assert r.status_code == 404 and r.json() == {"detail": "unknown job"}


def test_non_finite_numbers_never_break_the_json(make_client, scripted):
    scripted.result.jobs["4711"].mfu = float("nan")
    scripted.result.straggler_scores[0].score = float("inf")
    body = make_client().get("/api/v1/jobs/4711").json()
    assert body["job"]["mfu"] is None
    assert 0 not in [s["rank"] for s in body["scores"]]


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/findings?kind=Robert'); DROP TABLE",
        "/api/v1/findings?node=../../etc/passwd",
        "/api/v1/findings?node=" + "a" * 300,
        "/api/v1/findings?since=yesterday",
        # a job id is any label value the exporter serves (`$(reboot)` included: nothing runs it),
        # at most 256 characters, no control character
        "/api/v1/findings?job_id=a%00b",
        "/api/v1/findings?job_id=" + "j" * 300,
        "/api/v1/jobs/..%2F..%2Fetc",
        "/api/v1/jobs/%20rm%20-rf",
        "/api/v1/plan?scheduler=bash",
    ],
)
def test_bad_inputs_are_rejected_before_any_handler(make_client, path):
    r = make_client().get(path)
    assert r.status_code in (404, 422), (path, r.status_code, r.text)


def test_api_is_read_only(make_client):
    client = make_client()
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        for path in ("/api/v1/findings", "/api/v1/nodes", "/api/v1/plan", "/metrics", "/"):
            assert client.request(method, path).status_code == 405, (method, path)


def test_page_and_its_files_are_served_with_security_headers_and_no_cdn(make_client):
    client = make_client()
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'id="grid"' in page.text and "static/app.js" in page.text
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "default-src 'none'" in csp
    assert page.headers["x-content-type-options"] == "nosniff"
    js = client.get("/static/app.js")
    css = client.get("/static/style.css")
    assert js.headers["content-type"].startswith("text/javascript") and "api/v1/nodes" in js.text
    assert ".state-failing" in css.text
    for text in (page.text, js.text, css.text):
        assert "http://" not in text.replace("http://www.w3.org/2000/svg", "") and "https://" not in text
    assert "innerHTML" not in js.text  # data is written with textContent only
    # No other file is reachable, whatever the path says.
    for path in ("/static/../app.py", "/static/index.html/..", "/static/app.py", "/docs", "/redoc"):
        assert client.get(path).status_code == 404, path


def test_plan_endpoint_prints_commands_for_failing_nodes(make_client, scripted):
    scripted.result = make_analysis(n_nodes=10, failing=("node-2",))
    client = make_client()
    plan = client.get("/api/v1/plan").json()
    assert plan["plan"]["limit"] == 1
    assert plan["plan"]["drain"][0]["argv"] == [
        [
            "scontrol",
            "update",
            "NodeName=node-2",
            "State=DRAIN",
            "Reason=fleetscope: gpu_lost gpu 3 since " + rfc3339(scripted.result.start + 600),
        ]
    ]
    assert "scontrol update NodeName=node-2 State=DRAIN 'Reason=fleetscope: gpu_lost" in plan["script"]
    k8s = client.get("/api/v1/plan?scheduler=kubernetes").json()["plan"]["drain"][0]["commands"]
    assert k8s == [
        "kubectl cordon node-2",
        "kubectl taint nodes node-2 fleetscope.io/failing=gpu_lost:NoSchedule --overwrite",
    ]


def test_status_reports_the_configuration(make_client):
    body = make_client(interval=7, window=600, prometheus="http://prom:9090").get("/api/v1/status").json()
    assert body["interval_seconds"] == 7 and body["window_seconds"] == 600
    assert body["prometheus"] == "http://prom:9090" and body["nodes"] == 4 and body["open_findings"] == 2
