"""The page's summaries, computed from real analyses of simulated recordings: a job hung at the
window's end is stalled since the hang with its MFU unknown and why; a young job's MFU waits for its
rate window and says so; a served model lists its replicas, the one whose GPU was lost not serving,
and its SLOs' burn as the alerts read them."""

from __future__ import annotations

from pathlib import Path

from fleetscope.service.live import LiveResult, live_result
from fleetscope.simulate.record import write_scenario
from fleetscope.simulate.spec import FaultSpec, ScenarioSpec, node_name
from fleetscope.times import parse_rfc3339
from tests.support.analysis import analyze_file


def _analyzed(spec: ScenarioSpec, tmp_path: Path) -> LiveResult:
    out, _ = write_scenario(spec, tmp_path / f"{spec.name}.om")
    return live_result(analyze_file(out))


def test_a_job_hung_at_the_window_end_is_stalled_since_the_hang(tmp_path: Path):
    spec = ScenarioSpec(
        name="hang_t",
        family="hang",
        nodes=4,
        seed=122,
        duration_s=1200,
        faults=[FaultSpec(kind="hang", cause="xid79", at_s=700, stall_s=900, node=2, gpu=6)],
    )
    result = _analyzed(spec, tmp_path)
    (job,) = result.jobs.values()
    assert job["state"] == "stalled", job
    since = parse_rfc3339(job["since"]) or 0.0
    assert abs(since - (spec.start + 700)) <= 120, job  # within a couple of grid steps of the hang
    assert job["mfu"] is None and job["mfu_reason"] == "no step completes while the job is stalled"
    assert 0.1 < job["last_mfu"] < 0.9 and (parse_rfc3339(job["last_mfu_at"]) or 0.0) <= since + 60
    assert result.models == []


def test_a_young_job_says_its_mfu_waits_for_the_rate_window(tmp_path: Path):
    result = _analyzed(ScenarioSpec(name="young", nodes=2, seed=3, duration_s=105), tmp_path)
    (job,) = result.jobs.values()
    assert job["state"] == "running" and job["mfu"] is None
    assert job["mfu_reason"] == "measured over 2 min of steps once the job has run that long"


def test_a_served_model_lists_its_replicas_and_slos(tmp_path: Path):
    spec = ScenarioSpec(
        name="inference_t",
        family="inference",
        nodes=4,
        gpus_per_replica=4,
        seed=203,
        duration_s=1200,
        faults=[FaultSpec(kind="gpu_lost", at_s=700, node=2, gpu=5)],
    )
    result = _analyzed(spec, tmp_path)
    assert result.jobs == {}
    (model,) = result.models
    assert len(model["replicas"]) == 8 and model["serving"] == 7
    (down,) = [r for r in model["replicas"] if not r["serving"]]
    assert down["node"] == node_name(2)
    named = {f.evidence.get("replica") for f in result.report.findings if f.kind == "failing_replica"}
    assert named == {down["replica"]}
    for r in model["replicas"]:
        assert 0 < r["ttft_p95_s"] < 2.5 and 0 < r["itl_mean_s"] < 0.1, r
    for name in ("ttft", "itl"):
        slo = model["slo"][name]
        assert slo["state"] == "ok" and slo["burn_short"] is not None and slo["burn_short"] < 1, slo


def test_a_wedged_replica_is_shown_stalled_and_front_door_errors_spend_the_error_budget(tmp_path: Path):
    """The page's view of issue 38's faults: the wedged replica has had work in flight without
    progress since the wedge (named on its node); a replica answering every request 5xx burns the
    model's error budget as the generated error SLO counts it."""
    base = {"family": "inference", "nodes": 4, "seed": 41, "duration_s": 1200}
    wedged = _analyzed(
        ScenarioSpec(
            name="inference_w", faults=[FaultSpec(kind="engine_wedged", at_s=700, node=1, gpu=0)], **base
        ),
        tmp_path,
    )
    (model,) = wedged.models
    stalled = [r for r in model["replicas"] if r["stalled_s"]]
    assert [(r["replica"], r["node"]) for r in stalled] == [("vllm-llama-3-1-70b-instruct-1", node_name(1))]
    assert 480 <= stalled[0]["stalled_s"] <= 520  # since the wedge, 500 s before the end
    assert model["slo"]["errors"]["state"] == "ok"
    errors = _analyzed(
        ScenarioSpec(
            name="inference_e", faults=[FaultSpec(kind="http_errors", at_s=700, node=1, gpu=0)], **base
        ),
        tmp_path,
    )
    (model,) = errors.models
    slo = model["slo"]["errors"]
    assert slo["state"] == "fast burn" and slo["burn_short"] > 100, slo  # a quarter of requests fail
    assert slo["objective"] == 0.999 and slo["threshold_s"] is None
    assert all(r["stalled_s"] is None for r in model["replicas"])


def test_a_hang_named_by_nccl_ras_shows_its_culprit_on_the_job_row(tmp_path: Path):
    """With RAS series the job's row says why it hangs and whom the collective waits for; a dead
    rank's node is one the plan drains, a rank that never launched the collective is not."""
    rows = {}
    for cause in ("host", "xid79"):
        spec = ScenarioSpec(
            name=f"hang_{cause}", family="hang", nodes=4, seed=7, duration_s=1200, nccl_ras=True,
            faults=[FaultSpec(kind="hang", cause=cause, at_s=700, stall_s=900, node=1, gpu=4)],
        )  # fmt: skip
        (rows[cause],) = _analyzed(spec, tmp_path).jobs.values()
    host, dead = rows["host"]["hang"], rows["xid79"]["hang"]
    where = f"rank 12 (node {node_name(1)}, GPU 4)"
    assert (host["reason"], host["waiting_for"], host["rank"], host["drain"]) == (
        "not_launched",
        where,
        12,
        False,
    )
    assert (dead["reason"], dead["waiting_for"], dead["node"], dead["drain"]) == (
        "dead",
        where,
        node_name(1),
        True,
    )
    assert rows["host"]["state"] == rows["xid79"]["state"] == "stalled"


def test_a_histograms_buckets_are_gathered_once_for_its_quantiles_and_its_slo(tmp_path: Path, monkeypatch):
    """The replicas' latency quantiles and the SLO burn rates read the same buckets: gathered per
    replica once an analysis, not once for each."""
    from fleetscope.analyzers.signals import serving

    gathered: list[str] = []
    real = serving._per_replica

    def counted(frames, name, *args, **kwargs):
        if name is not None and name.endswith("_bucket"):
            gathered.append(name)
        return real(frames, name, *args, **kwargs)

    monkeypatch.setattr(serving, "_per_replica", counted)
    spec = ScenarioSpec(
        name="inference_b", family="inference", nodes=2, gpus_per_replica=4, seed=5, duration_s=900
    )
    (model,) = _analyzed(spec, tmp_path).models
    assert model["slo"]["ttft"]["burn_short"] is not None and model["slo"]["itl"]["burn_short"] is not None
    assert sorted(gathered) == sorted(set(gathered)) and len(gathered) >= 2, gathered
