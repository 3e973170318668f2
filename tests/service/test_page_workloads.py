"""The page serves both workloads, in headless Chromium against the app served by uvicorn: a jobs
view (a stalled job looks stalled: its state, since when, MFU unknown with the reason, its last
level and when), a serving view (per model: replicas, SLO burn, TTFT/ITL, the replica a finding
names), findings with their evidence visible and a link to their runbook section, and relative
times with the absolute time on hover."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pytest
from PIL import Image

from fleetscope.analyzers.findings import Finding
from fleetscope.analyzers.report import NodeVerdict, Report
from fleetscope.service.app import ServiceSettings, create_app
from fleetscope.service.live import LiveResult
from fleetscope.times import rfc3339
from tests.service.support import COLOURS, ScriptedAnalyze, chromium, close, make_analysis
from tests.service.test_page import serving

RUNBOOKS = (Path(__file__).resolve().parents[2] / "docs" / "runbooks.md").read_text()


class _Page(HTMLParser):
    """Elements by id (their attributes), rows of the jobs/findings/replica tables with their text,
    and every link and title."""

    def __init__(self) -> None:
        super().__init__()
        self.ids: dict[str, dict[str, str]] = {}
        self.rows: dict[str, list[dict]] = {"jobs-body": [], "findings-body": [], "replicas": []}
        self.links: list[dict[str, str]] = []
        self.times: list[dict[str, str]] = []
        self.bars: list[str] = []
        self._stack: list[str] = []
        self._row: dict | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = {k: v or "" for k, v in attrs}
        if "id" in a:
            self.ids[a["id"]] = a
            if a["id"] in ("jobs-body", "findings-body"):
                self._stack.append(a["id"])
        if tag == "table" and "replicas" in a.get("class", "").split():
            self._stack.append("replicas")
        if tag == "tr" and self._stack:
            self._row = {"attrs": a, "text": ""}
            self.rows[self._stack[-1]].append(self._row)
        if tag == "a":
            self.links.append(a)
        if "time" in a.get("class", "").split():
            self.times.append(a)
        if tag == "rect":
            self.bars.append(a.get("class", ""))

    def handle_endtag(self, tag: str) -> None:
        if tag in ("tbody", "table") and self._stack:
            self._stack.pop()

    def handle_data(self, data: str) -> None:
        if self._row is not None:
            self._row["text"] += data + " "


def _load(tmp_path: Path, analysis: Report | LiveResult, path: str = "/") -> tuple[_Page, str]:
    app = create_app(ServiceSettings(run_analysis=False), ScriptedAnalyze(analysis))
    assert app.state.runner.run_once()
    with serving(app) as hostport:
        dom = chromium(f"http://{hostport}{path}", tmp_path, "--dump-dom").stdout.decode()
    page = _Page()
    page.feed(dom)
    return page, dom


def _stalled_training() -> LiveResult:
    a = make_analysis()
    stalled_at = a.end - 480  # 8 minutes before the window's end
    a.findings.append(
        Finding(
            kind="job_hang",
            severity="critical",
            node=None,
            job_id="4711",
            start=stalled_at,
            cause="gpu_vanish",
            evidence={"last_step": rfc3339(stalled_at) or "", "ranks_reporting": "32"},
            action="find the node that stopped the job, drain it, restart from the last checkpoint",
        )
    )
    jobs = {
        "jobs": {
            "4711": {
                "state": "stalled",
                "since": rfc3339(stalled_at),
                "last_step": rfc3339(stalled_at),
                "mfu": None,
                "mfu_reason": "no step completes while the job is stalled",
                "last_mfu": 0.386,
                "last_mfu_at": rfc3339(stalled_at - 30),
            }
        }
    }
    a.jobs["4711"].mfu = 0.386
    return LiveResult(a, jobs=jobs["jobs"])


@pytest.mark.browser
def test_a_stalled_job_looks_stalled_with_why_its_mfu_is_unknown(tmp_path: Path):
    page, dom = _load(tmp_path, _stalled_training())
    assert "hidden" not in page.ids["jobs"] and "hidden" in page.ids["serving"]
    (row,) = page.rows["jobs-body"]
    assert row["attrs"]["data-state"] == "stalled" and "job-stalled" in row["attrs"]["class"].split()
    text = " ".join(row["text"].split())
    assert "stalled since 8 min ago" in text
    assert "n/a (no step completes while the job is stalled)" in text
    assert "last 38.6 % 9 min ago" in text  # the last level measured, and when: not as the current one
    assert "38.6 %" not in text.split("n/a")[0]  # nothing before the n/a reads as a current MFU
    assert "n/a (no steps)" in text  # step time of a job that does not step
    # The banner says it too, and the straggler chart is drawn as stopped (grey bars, a note).
    assert "job 4711 stalled" in dom[dom.index('id="summary"') : dom.index('id="freshness"')]
    assert page.bars and all("stopped" in b.split() for b in page.bars)
    assert "the job is stalled since" in dom
    # Relative times carry the absolute one on hover.
    stamps = {t["data-time"]: t["title"] for t in page.times}
    since = rfc3339(_stalled_training().report.end - 480) or ""
    assert stamps[since] == since.replace("T", " ").replace("Z", " UTC")


@pytest.mark.browser
def test_a_hang_named_by_nccl_ras_shows_its_culprit_on_the_job_row(tmp_path: Path):
    result = _stalled_training()
    result.jobs["4711"]["hang"] = {
        "reason": "not_launched", "waiting_for": "rank 1403 (node ip-10-1-0-12, GPU 3)",
        "node": "ip-10-1-0-12", "gpu": "3", "rank": 1403, "since": result.jobs["4711"]["since"],
        "drain": False,
    }  # fmt: skip
    page, _ = _load(tmp_path, result)
    (row,) = page.rows["jobs-body"]
    text = " ".join(row["text"].split())
    assert "hang (not launched): waits for rank 1403 (node ip-10-1-0-12, GPU 3)" in text


@pytest.mark.browser
def test_the_stalled_badge_is_painted_in_the_degraded_colour(tmp_path: Path):
    app = create_app(ServiceSettings(run_analysis=False), ScriptedAnalyze(_stalled_training()))
    assert app.state.runner.run_once()
    shot = tmp_path / "jobs.png"
    with serving(app) as hostport:
        dom = chromium(f"http://{hostport}/", tmp_path, "--dump-dom").stdout.decode()
        chromium(f"http://{hostport}/", tmp_path, f"--screenshot={shot}")
    i = dom.index("badge badge-stalled")
    tag = dom[dom.rindex("<", 0, i) : dom.index(">", i)]
    x, y, _, h = (int(v) for v in tag.split('data-rect="')[1].split('"')[0].split(","))
    with Image.open(shot) as img:
        rgb = img.convert("RGB")
    # the badge's middle, left of its text: only its background is painted there
    assert close(rgb.getpixel((x + 3, y + h // 2)), COLOURS["degraded"]), rgb.getpixel((x + 3, y + h // 2))


@pytest.mark.browser
def test_findings_show_their_evidence_and_link_their_runbook_section(tmp_path: Path):
    page, _ = _load(tmp_path, _stalled_training())
    rows = {r["attrs"]["data-kind"]: " ".join(r["text"].split()) for r in page.rows["findings-body"]}
    assert set(rows) == {"failing_node", "straggler", "job_hang"}
    # evidence as text in the row, not only in a tooltip
    assert "fleetscope_gpu_up: 1 -> 0" in rows["failing_node"] and "xid: 79" in rows["failing_node"]
    # a time inside the evidence reads as relative, with the absolute time on hover
    assert "last_step: 8 min ago" in rows["job_hang"]
    assert "DCGM_FI_DEV_SM_CLOCK: 1980 -> 1410 MHz" in rows["straggler"]
    assert "node-2 GPU 3" in rows["failing_node"] and "rank 5" in rows["straggler"]
    assert rows["failing_node"].startswith("20 min ago")  # started 600 s into the 1800 s window
    links = {a["href"].rsplit("#", 1)[1]: a for a in page.links if "runbook" in a.get("class", "")}
    assert set(links) == set(rows)
    for kind, a in links.items():
        assert a["href"] == f"runbooks#{kind}"  # the service's own /runbooks (tests/service/test_runbooks.py)
        assert f"\n### {kind}\n" in RUNBOOKS, f"docs/runbooks.md has no section for {kind}"


def test_every_finding_kind_has_a_runbook_section():
    from fleetscope.contract import FINDING_KINDS

    for kind in FINDING_KINDS:
        assert f"\n### {kind}\n" in RUNBOOKS, kind


def _serving_fleet() -> LiveResult:
    a = Report(start=1_796_000_000.0, end=1_796_001_800.0)
    for i in range(1, 5):
        gpus = {str(g): "healthy" for g in range(8)}
        if i == 2:
            gpus["3"] = "failing"
        a.nodes[f"node-{i}"] = NodeVerdict(f"node-{i}", "failing" if i == 2 else "healthy", [], gpus)
    a.findings.append(
        Finding(
            kind="failing_replica",
            severity="critical",
            node="node-2",
            gpu="3",
            start=a.start + 900,
            cause="gpu_lost",
            evidence={
                "model": "llama-70b",
                "replica": "vllm-llama-2",
                "xid": "79",
                "replica_series": "stopped at 2026-11-30T10:15:30Z",
            },
            action="reschedule the replica elsewhere and drain the node",
        )
    )

    def replica(i: int, up: bool) -> dict:
        return {
            "replica": f"vllm-llama-{i}",
            "node": f"node-{i}",
            "serving": up,
            "ttft_p95_s": 0.23 + 0.01 * i,
            "itl_mean_s": 0.014,
            "itl_p95_s": 0.024,
            "requests_per_s": 2.1 if up else 0.0,
            "kv_cache": 0.05,
        }

    slo = {"threshold_s": 2.5, "objective": 0.99, "state": "burning", "burn_short": 7.5, "burn_window": 6.4}
    ok = {"threshold_s": 0.1, "objective": 0.99, "state": "ok", "burn_short": 0.0, "burn_window": 0.0}
    live = {
        "jobs": {},
        "models": [
            {
                "model": "llama-70b",
                "replicas": [replica(i, i != 2) for i in range(1, 5)],
                "serving": 3,
                "ttft_p95_s": 0.27,
                "itl_mean_s": 0.014,
                "slo": {"ttft": slo, "itl": ok},
            }
        ],
    }
    return LiveResult(a, models=live["models"])


@pytest.mark.browser
def test_serving_fleet_shows_models_replicas_slos_and_the_named_replica(tmp_path: Path):
    page, dom = _load(tmp_path, _serving_fleet())
    # no training job: no empty straggler chart, no "No job in the window"
    for section in ("jobs", "stragglers", "goodput"):
        assert "hidden" in page.ids[section], section
    assert "hidden" not in page.ids["serving"] and "No job in the window" not in dom
    assert "llama-70b · 3 of 4 replicas serving" in dom
    assert 'data-state="burning"' in dom and "burning · burn 7.5x (5 min)" in dom
    replicas = {r["attrs"]["data-replica"]: r for r in page.rows["replicas"] if "data-replica" in r["attrs"]}
    assert len(replicas) == 4
    named = replicas["vllm-llama-2"]
    assert "named" in named["attrs"]["class"].split() and "down" in named["attrs"]["class"].split()
    assert "failing_replica" in named["text"] and "not serving" in named["text"]
    assert "named" not in replicas["vllm-llama-1"]["attrs"]["class"].split()
    # TTFT p95 240 ms, ITL 14 ms, 2.10 requests/s, KV cache 5.0%
    assert " ".join(replicas["vllm-llama-1"]["text"].split()).split() == [
        "vllm-llama-1",
        "node-1",
        "serving",
        "240",
        "ms",
        "14",
        "ms",
        "24",
        "ms",
        "2.10",
        "5.0%",
    ]
    (finding,) = page.rows["findings-body"]
    text = " ".join(finding["text"].split())
    assert "replica vllm-llama-2 (llama-70b)" in text and "xid: 79" in text


def test_models_api_lists_the_findings_that_name_them(tmp_path: Path):
    import json

    from tests.support.prom import http_get

    app = create_app(ServiceSettings(run_analysis=False), ScriptedAnalyze(_serving_fleet()))
    assert app.state.runner.run_once()
    with serving(app) as hostport:
        status, body = http_get(f"http://{hostport}/api/v1/models")
    assert status == 200
    (model,) = json.loads(body)["models"]
    assert model["serving"] == 3 and [f["kind"] for f in model["findings"]] == ["failing_replica"]
    assert model["slo"]["ttft"]["state"] == "burning"


def _wedged_fleet() -> LiveResult:
    """The serving fleet with replica 3 wedged (its engine stopped, 23 requests in it) too."""
    live = _serving_fleet()
    a = live.report
    a.findings.append(
        Finding(
            kind="failing_replica",
            severity="critical",
            node="node-3",
            start=a.start + 1200,
            cause="engine_wedged",
            evidence={
                "model": "llama-70b",
                "replica": "vllm-llama-3",
                "diagnosis": "engine stopped: its GPUs idle while requests wait in it",
                "requests_in_flight": "23 running",
                "frozen": "vllm:generation_tokens_total and vllm:request_success_total unchanged since "
                + (rfc3339(a.start + 1185) or ""),
                "gpu_utilisation": "0% (peers 81%)",
            },
            action="take the replica out of the load balancer and restart it",
        )
    )
    (model,) = live.models
    replicas = [dict(r) for r in model["replicas"]]
    replicas[2]["stalled_s"] = 600.0
    errors = {"threshold_s": None, "objective": 0.999, "state": "ok", "burn_short": 0.0, "burn_window": 0.0}
    wedged = {**model, "replicas": replicas, "slo": {**model["slo"], "errors": errors}}
    return LiveResult(a, models=[wedged])


@pytest.mark.browser
def test_a_wedged_replica_shows_as_wedged_with_its_evidence(tmp_path: Path):
    page, dom = _load(tmp_path, _wedged_fleet())
    replicas = [r for r in page.rows["replicas"] if r["attrs"].get("data-replica") == "vllm-llama-3"]
    row, evidence = replicas  # its row, and the evidence row under it
    assert "down" in row["attrs"]["class"].split()  # alive, but not serving
    text = " ".join(row["text"].split())
    assert text.startswith("vllm-llama-3 node-3 wedged (engine stopped)"), text
    ev = " ".join(evidence["text"].split())
    assert "requests in flight: 23 running" in ev and "gpu utilisation: 0% (peers 81%)" in ev, ev
    assert "frozen: vllm:generation_tokens_total" in ev
    assert "Errors SLO" in dom
