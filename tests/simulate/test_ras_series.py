"""The simulator's NCCL RAS series (``nccl_ras: true``), judged by the real generated alert rules.

Each hang cause is simulated, its RAS and training series sampled once a minute, and ``promtool
test rules`` runs the committed rule file over them: the alert that names the culprit (rank, node
and GPU) must fire within 2 minutes of the hang's onset, and no RAS alert may fire before it, while
the healthy job shows its small moving skew.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from fleetscope import contract as c
from fleetscope.alerts import render
from fleetscope.alerts.config import THRESHOLDS
from fleetscope.simulate.families import cluster_model
from fleetscope.simulate.spec import ScenarioSpec
from tests.support.prom import promtool

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "alerts" / "fleetscope-training.rules.yml"
ONSET_MIN = 8
MINUTES = 14
NODE, GPU = 1, 4  # the hang's GPU: rank 12 of the 16-rank job, on ip-10-1-0-11


def simulate(cause: str) -> tuple[dict[tuple[str, tuple[tuple[str, str], ...]], list[float | None]], object]:
    spec = ScenarioSpec.from_dict({
        "family": "hang", "nodes": 2, "seed": 7, "duration_s": MINUTES * 60, "nccl_ras": True,
        "checkpoint_every_s": 0, "gc_every_s": 0, "scrape_miss": 0,
        "faults": [{"kind": "hang", "cause": cause, "at_s": ONSET_MIN * 60, "stall_s": 3600,
                    "node": NODE, "gpu": GPU, "restart": "same"}],
    })  # fmt: skip
    model = cluster_model(spec, scrape_labels=False)
    series: dict[tuple[str, tuple[tuple[str, str], ...]], list[float | None]] = {}
    wanted = [m for m in c.metrics_by_origin("nccl_ras")] + [c.TRAINING_LAST_STEP_TIMESTAMP]
    for minute in range(MINUTES + 1):
        if minute:
            model.tick(60.0)
        start = model.t - model.elapsed  # promtool's clock starts at 0: scenario seconds
        now = model.series()
        for metric in wanted:
            s = now.get(metric.name)
            if s is None:
                continue
            for key, value in zip(s.keys, np.asarray(s.values, dtype=float), strict=True):
                if np.isnan(value):
                    continue
                if metric == c.TRAINING_LAST_STEP_TIMESTAMP:
                    value = value - start
                labels = tuple(zip(s.labels, key, strict=True))
                series.setdefault((metric.name, labels), [None] * (MINUTES + 1))[minute] = float(value)
    return series, model


def promtool_case(tmp_path: Path, cause: str, alertname: str, fires: list[dict]) -> str:
    series, _ = simulate(cause)
    inputs = []
    for (name, labels), values in series.items():
        inner = ",".join(f'{k}="{v}"' for k, v in labels)
        # A series a scrape no longer has is stale at once in Prometheus (not for the 5-minute
        # lookback): promtool's ``stale`` says so.
        text = [
            f"{v:.10g}" if v is not None else "stale" if i and values[i - 1] is not None else "_"
            for i, v in enumerate(values)
        ]
        inputs.append({"series": f"{name}{{{inner}}}", "values": " ".join(text)})
    tests = [
        {"eval_time": f"{m}m", "alertname": alertname, "exp_alerts": []} for m in range(ONSET_MIN + 1)
    ] + [{"eval_time": f"{ONSET_MIN + 2}m", "alertname": alertname, "exp_alerts": fires}]
    doc = {"rule_files": [str(RULES)], "evaluation_interval": "1m",
           "tests": [{"interval": "1m", "input_series": inputs, "alert_rule_test": tests}]}  # fmt: skip
    path = tmp_path / f"{cause}.test.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    res = promtool("test", "rules", str(path))
    return res.stdout.decode() + res.stderr.decode()


def ras_labels(**extra: str) -> dict[str, str]:
    return {c.NODE_LABEL: "ip-10-1-0-10", "job_id": "4711", "comm": "0x5157ad0c0e11a001", **extra}


def culprit() -> dict[str, str]:
    return {"rank": "12", "rank_host": "ip-10-1-0-11", "rank_gpu": str(GPU)}


@pytest.mark.parametrize(
    ("cause", "alertname", "labels", "value"),
    [
        # a rank stuck on its host never launches the collective the others wait in
        ("host", "FleetscopeCollectiveHangRankBehind", ras_labels(op="AllReduce", **culprit()), "1"),
        # the rank on the failed GPU dies: RAS stops hearing from it, and calls it dead after 60 s
        ("xid79", "FleetscopeCollectiveHangRankMissing", ras_labels(**culprit()), "2"),
    ],
)
def test_hang_named_within_two_minutes(tmp_path, cause, alertname, labels, value):
    alert = next(a for a in render.all_alerts() if a.name == alertname)
    fire = {
        "exp_labels": {**labels, "severity": "critical"},
        "exp_annotations": alert.annotations(THRESHOLDS, labels, float(value)),
    }
    assert "rank 12 on node ip-10-1-0-11 GPU 4" in fire["exp_annotations"]["description"]
    out = promtool_case(tmp_path, cause, alertname, [fire])
    assert "SUCCESS" in out, out


@pytest.mark.parametrize("cause", ["efa", "gpu_vanish"])
def test_launched_not_completed_is_not_a_ras_alert(tmp_path, cause):
    """Every rank launched, none completed: RAS shows equal frozen counts and cannot name a rank
    (NVIDIA/nccl#1730), so neither RAS alert fires; the job-stall alert and the hardware series
    (EFA, XID) speak for it."""
    for alertname in ("FleetscopeCollectiveHangRankBehind", "FleetscopeCollectiveHangRankMissing"):
        out = promtool_case(tmp_path, cause, alertname, [])
        assert "SUCCESS" in out, out
    series, _ = simulate(cause)
    top = next(v for (n, _), v in series.items() if n == c.NCCL_RAS_COLLECTIVES_MAX)
    low = next(v for (n, _), v in series.items() if n == c.NCCL_RAS_COLLECTIVES_MIN)
    assert top[ONSET_MIN + 1 :] == low[ONSET_MIN + 1 :]  # equal and frozen after the onset
    assert len(set(top[ONSET_MIN + 1 :])) == 1


def test_healthy_skew_moves():
    """Before the hang the job steps: the most launched grows every minute and the skew is small."""
    series, _ = simulate("host")
    top = next(v for (n, _), v in series.items() if n == c.NCCL_RAS_COLLECTIVES_MAX)
    low = next(v for (n, _), v in series.items() if n == c.NCCL_RAS_COLLECTIVES_MIN)
    running = range(2, ONSET_MIN)  # past the warmup
    assert all(top[m + 1] > top[m] for m in running)  # type: ignore[operator]
    assert all(0 <= top[m] - low[m] <= 1 for m in running)  # type: ignore[operator]
