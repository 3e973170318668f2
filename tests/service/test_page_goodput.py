"""The page's goodput section in headless Chromium against the app served by uvicorn: the stacked
bar, the effective-training-time ratio, the top badput lines with their findings and the checkpoint
advice, all as /api/v1/jobs/{job}/goodput serves them; a job without an account says so."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest
from PIL import Image

from fleetscope.analyzers.goodput import finding_label
from fleetscope.analyzers.report import BadputItem, CheckpointAdvice, GoodputAccount, Report
from fleetscope.service.app import ServiceSettings, create_app
from tests.service.support import ScriptedAnalyze, chromium, close, make_analysis
from tests.service.test_page import serving
from tests.support.prom import http_get

pytestmark = [pytest.mark.browser]

#: style.css's colours of two categories (the screenshot is sampled in their segments).
PRODUCTIVE = (0x2E, 0x7D, 0x32)
REWORK = (0xC6, 0x28, 0x28)


def _with_account() -> Report:
    """The service tests' cluster with a goodput account of job 4711 (32 GPUs, 30 minutes): an
    XID 79 on node-2 cost stall, recovery and rework, the straggler slowdown, and saves checkpoint."""
    a = make_analysis()
    xid, strag = a.findings[0], a.findings[1]
    xid.evidence["XID 79"] = "GPU 3 fell off the bus"
    gpus, span = 32.0, a.end - a.start
    h = 3600.0
    parts = {
        "productive": 11.0 * h,
        "checkpoint": 0.9 * h,
        "recovery": 1.2 * h,
        "rework": 1.5 * h,
        "stall": 0.6 * h,
        "eval": 0.0,
        "slowdown": 0.5 * h,
    }
    parts["idle"] = gpus * span - sum(parts.values())
    whole = gpus * span
    t = a.start
    items = [
        BadputItem("rework", 1.5 * h, t + 900, t + 1200, finding_label(xid), "XID 79 rework"),
        BadputItem("recovery", 1.2 * h, t + 700, t + 900, finding_label(xid), "XID 79 recovery"),
        BadputItem("checkpoint", 0.9 * h, text="checkpoint saves cost 0.90 GPU-hours"),
        BadputItem("stall", 0.6 * h, t + 600, t + 700, finding_label(xid), "XID 79 stall"),
        BadputItem("slowdown", 0.5 * h, t + 300, a.end, finding_label(strag), "straggler slowdown"),
        BadputItem("stall", 0.01 * h, t + 100, t + 115, None, "a stall no finding explains"),
    ]
    advice = CheckpointAdvice(
        save_s=45.0,
        saves=3,
        nodes=4,
        failures=1,
        node_hours=2.0,
        failures_per_node_hour=0.5,
        prior=False,
        mtbf_s=1800.0,
        young_s=402.0,
        daly_s=380.0,
        recommended_s=380.0,
        current_s=600.0,
        waste_current=0.19,
        waste_recommended=0.17,
        gain_gpu_hours_per_day=15.4,
    )
    a.goodput["4711"] = GoodputAccount(
        job_id="4711",
        start=a.start,
        end=a.end,
        gpus=gpus,
        whole_gpu_seconds=whole,
        gpu_seconds=parts,
        effective_training_ratio=(parts["productive"] + parts["slowdown"]) / whole,
        goodput_ratio=parts["productive"] / whole,
        baseline_step_s=1.9,
        restarts=1,
        inputs={"checkpoint_telemetry": True, "global_step": True},
        items=items,
        advice=advice,
    )
    return a


class _Goodput(HTMLParser):
    """The goodput section of a DOM dump: bar segments, legend items, badput rows (their cells)."""

    def __init__(self) -> None:
        super().__init__()
        self.section: dict[str, str] = {}
        self.segments: dict[str, dict[str, str]] = {}
        self.rows: list[list[str]] = []
        self.text: dict[str, str] = {}
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = {k: v or "" for k, v in attrs}
        if a.get("id") == "goodput":
            self.section = a
        if "gp" in a.get("class", "").split():
            self.segments[a["data-category"]] = a
        if a.get("id") in ("goodput-summary", "checkpoint-advice"):
            self._in = a["id"]
        if tag == "tr" and self._in == "badput-body":
            self.rows.append([])
        if a.get("id") == "badput-body":
            self._in = "badput-body"
        if tag == "td" and self._in == "badput-body" and self.rows:
            self.rows[-1].append("")  # a cell, empty or not

    def handle_endtag(self, tag: str) -> None:
        if tag == "p" or tag == "tbody":
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._in == "badput-body" and self.rows and self.rows[-1]:
            self.rows[-1][-1] += data
        elif self._in in ("goodput-summary", "checkpoint-advice"):
            self.text[self._in] = self.text.get(self._in, "") + data


def test_goodput_section_shows_the_account(tmp_path: Path):
    scripted = ScriptedAnalyze(_with_account())
    app = create_app(ServiceSettings(run_analysis=False), scripted)
    assert app.state.runner.run_once()
    shot = tmp_path / "goodput.png"
    with serving(app) as hostport:
        status, raw = http_get(f"http://{hostport}/api/v1/jobs/4711/goodput")
        assert status == 200
        g = json.loads(raw)["goodput"]
        url = f"http://{hostport}/?job=4711"
        dom = chromium(url, tmp_path, "--dump-dom").stdout.decode()
        chromium(url, tmp_path, f"--screenshot={shot}", "--window-size=1200,1300")
        scripted.result = make_analysis()  # the next analysis has no account for the job
        assert app.state.runner.run_once()
        bare = chromium(url, tmp_path, "--dump-dom").stdout.decode()
    page = _Goodput()
    page.feed(dom)
    assert page.section["data-job"] == "4711"
    assert float(page.section["data-effective"]) == g["effective_training_ratio"] == round(11.5 / 16, 4)
    # One segment per non-empty category, as wide as its share of the whole.
    assert sorted(page.segments) == sorted(k for k, v in g["gpu_hours"].items() if v > 0)
    assert "eval" not in page.segments
    for cat, seg in page.segments.items():
        assert float(seg["data-gpu-hours"]) == g["gpu_hours"][cat]
        width = float(seg["style"].split("width:")[1].split("%")[0])
        assert abs(width - 100 * g["gpu_hours"][cat] / g["whole_gpu_hours"]) < 0.01
        assert seg["title"].startswith(f"{cat}: {g['gpu_hours'][cat]:.2f} GPU-hours")
    summary = page.text["goodput-summary"]
    assert "16.00 GPU-hours on 32 GPUs" in summary and "effective training time 71.9%" in summary
    assert "goodput 68.8%" in summary and "1 restart(s)" in summary
    # The top five badput lines, largest first, each with the finding that caused it.
    assert [r[0] for r in page.rows] == [b["category"] for b in g["badput"][:5]]
    assert page.rows[0][1:3] == ["1.50", "9.4%"] and page.rows[0][4] == "XID 79 (gpu_lost) on node-2 gpu 3"
    assert page.rows[2][4] == "no finding" and page.rows[4][4] == "straggler thermal_throttle on node-1 gpu 5"
    assert "a stall no finding explains" not in dom  # the sixth line is left out
    adv = page.text["checkpoint-advice"]
    assert "save every 6.3 min (now 10 min; a save takes 45 s, MTBF 0.5 h from 1 failure(s)" in adv
    assert "expected waste 19.0% → 17.0%" in adv and "saves 15.4 GPU-hours/day" in adv
    # The screenshot shows the bar: productive (green) on the left, rework (red) after checkpoint.
    img = Image.open(shot).convert("RGB")
    rect = json.loads(_rect(dom))
    x0, y0, w = rect
    assert close(img.getpixel((x0 + 5, y0 + 10)), PRODUCTIVE)
    first = 100 * (g["gpu_hours"]["productive"] + g["gpu_hours"]["checkpoint"] + g["gpu_hours"]["recovery"])
    rework_mid = x0 + w * (first + 50 * g["gpu_hours"]["rework"]) / 100 / g["whole_gpu_hours"]
    assert close(img.getpixel((int(rework_mid), y0 + 10)), REWORK)
    # Without an account the section says so and draws nothing.
    none = _Goodput()
    none.feed(bare)
    assert not none.segments and not none.rows
    assert "No goodput account for job 4711 in the window." in none.text["goodput-summary"]


def _rect(dom: str) -> str:
    """The bar's ``data-rect`` (left, top, width in page pixels), which app.js writes."""
    i = dom.index('id="goodput-bar"')
    tag = dom[dom.rindex("<", 0, i) : dom.index(">", i)]
    return "[" + tag.split('data-rect="')[1].split('"')[0] + "]"
