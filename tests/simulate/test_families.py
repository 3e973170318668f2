"""The realistic model's physics, family by family, and the ground truth it writes."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from fleetscope import contract as c
from fleetscope import hardware
from fleetscope.errors import FleetscopeError
from fleetscope.simulate.record import ground_truth, simulate, write_openmetrics
from fleetscope.simulate.spec import FaultSpec, JobSpec, ScenarioSpec, node_name


def _spec(**kw) -> ScenarioSpec:
    base = dict(name="t", family="realistic", nodes=2, duration_s=1200, seed=7, scrape_miss=0.0)
    base.update(kw)
    return ScenarioSpec(**base)


def _last(rec, metric: str, **match: str) -> dict[tuple, float]:
    """label tuple -> last value of every series of ``metric`` whose labels match ``match``."""
    labels = rec.labels[metric]
    out = {}
    for key, (_t, v) in rec.series_of(metric).items():
        d = dict(zip(labels, key, strict=True))
        if all(d.get(k) == x for k, x in match.items()) and len(v):
            out[key] = float(v[-1])
    return out


def _by(rec, metric: str, label: str, **match: str) -> dict[str, float]:
    i = rec.labels[metric].index(label)
    return {k[i]: v for k, v in _last(rec, metric, **match).items()}


def _at(rec, metric: str, t: float, **match: str) -> dict[str, float]:
    """Hostname/gpu -> value of ``metric`` at scenario time ``t`` (the sample at or before it)."""
    labels = rec.labels[metric]
    out = {}
    for key, (ts, v) in rec.series_of(metric).items():
        d = dict(zip(labels, key, strict=True))
        if not all(d.get(k) == x for k, x in match.items()):
            continue
        j = np.searchsorted(ts, t, side="right") - 1
        if j >= 0:
            out[f"{d[c.NODE_LABEL]}/{d.get('gpu', d.get('device', ''))}"] = float(v[j])
    return out


def test_classic_recording_is_pinned_and_comes_from_real_monitors(tmp_path):
    """A spec without a family runs the classic model: its recording is deterministic, pinned byte
    for byte (hardware series as before, training series from one real TrainingMonitor per rank)."""
    spec = ScenarioSpec(
        name="healthy_2n",
        nodes=2,
        duration_s=600,
        seed=3,
        faults=[FaultSpec(kind="thermal_throttle", at_s=300, node=1, gpu=2)],
    )
    assert spec.family == "classic" and not spec.realistic
    rec = simulate(spec)
    assert c.TRAINING_RESTART_ATTEMPT in rec.metric_names()  # a series only the library writes
    write_openmetrics(rec, tmp_path / "a.om")
    digest = hashlib.sha1((tmp_path / "a.om").read_bytes()).hexdigest()
    assert digest == "347a3cc667b97ef54bcea1f0f18065ef117d2d12"
    assert ScenarioSpec(name="hang_8n_s1").family == "hang"
    assert ScenarioSpec(name="multi_fault_8n").family == "classic"


def test_classic_training_counters_are_what_the_monitor_writes():
    """The classic model's checkpoints are the library's pauses: the checkpoint phase holds during
    one and jumps by its length at its end, no step's seconds include it; a restart starts new
    monitors (attempt 1) whose counters begin at 0, and the lost rank's series are gone meanwhile."""
    spec = ScenarioSpec(
        name="c",
        nodes=2,
        duration_s=1800,
        seed=3,
        checkpoint_every_s=600,
        checkpoint_s=45,
        faults=[FaultSpec(kind="gpu_lost", at_s=1300, node=1, gpu=2, stall_s=240)],
    )
    rec = simulate(spec)
    t0 = spec.start

    def rank0(metric: str, **match: str) -> dict[float, float]:
        ((ts, v),) = [
            tv
            for key, tv in rec.series_of(metric).items()
            if (d := dict(zip(rec.labels[metric], key, strict=True))).get("rank") == "0"
            and all(d.get(k) == x for k, x in match.items())
        ]
        return dict(zip((ts - t0).tolist(), v.tolist(), strict=True))

    ck = rank0(c.TRAINING_PHASE_SECONDS, phase="checkpoint")
    assert [ck[t] for t in (585.0, 600.0, 615.0, 630.0)] == [0.0] * 4  # held during the save
    assert ck[645.0] == 45.0 and ck[1230.0] == 45.0 and ck[1245.0] == 90.0
    saves = rank0(c.TRAINING_CHECKPOINT_SAVES, result="success")
    assert saves[630.0] == 0 and saves[645.0] == 1 and saves[1245.0] == 2
    secs = rank0(c.TRAINING_STEP_SECONDS)
    assert secs[600.0] == secs[615.0] == secs[630.0] == secs[645.0] > 0  # no step during the save
    steps = rank0(c.TRAINING_STEPS)
    for t in (645.0, 1290.0):  # a step's seconds are its phases' seconds, never the checkpoint's
        work = sum(
            rank0(c.TRAINING_PHASE_SECONDS, phase=p)[t] for p in ("data", "forward", "backward", "optimizer")
        )
        assert secs[t] == pytest.approx(work, rel=1e-6) and steps[t] > 0
    last = rank0(c.TRAINING_LAST_STEP_TIMESTAMP)
    assert last[630.0] == last[600.0] <= t0 + 600.0  # the last step before the save began
    attempt = rank0(c.TRAINING_RESTART_ATTEMPT)
    assert attempt[1530.0] == 0 and attempt[1545.0] == 1 and attempt[1800.0] == 1
    assert steps[1530.0] > 100 and steps[1545.0] == 0 and secs[1545.0] == 0 and ck[1545.0] == 0
    assert 0 < steps[1800.0] < steps[1530.0]
    gstep = rank0(c.TRAINING_GLOBAL_STEP)
    assert gstep[1800.0] == gstep[1530.0] + steps[1800.0]  # the job goes on from its global step
    lost = [
        ts - t0
        for key, (ts, _v) in rec.series_of(c.TRAINING_STEPS).items()
        if dict(zip(rec.labels[c.TRAINING_STEPS], key, strict=True))["rank"] == "10"
    ]
    assert len(lost) == 1 and lost[0][-1] < 1300.0 + 15  # its process died with its GPU


def test_classic_live_speed_counts_checkpoints_on_the_counter_clock():
    """``--live --speed 5``: the scenario clock runs five times faster than the counters', so a
    45 s checkpoint (scenario time) adds 9 s to the checkpoint phase, at its end."""
    from fleetscope.simulate.families import cluster_model

    spec = ScenarioSpec(name="c", nodes=1, duration_s=3600, seed=1, checkpoint_every_s=600, checkpoint_s=45)
    model = cluster_model(spec)
    seen = []
    for _ in range(int(700 / 5)):
        model.tick(1.0, 5.0)
        seen.append((model.elapsed, model.r_mons[0].snapshot().phase_seconds["checkpoint"]))
    before = [v for e, v in seen if e < 645.0 - 1e-6]
    after = [v for e, v in seen if e >= 645.0 - 1e-6]
    assert set(before) == {0.0} and after == pytest.approx([9.0] * len(after))


def test_backward_wait_slow_rank_shows_less_backward_time():
    """Host-side timers without CUDA sync: every rank steps alike; the fast ranks' wait for the
    throttled GPU lands in their backward time, so the slow rank's backward is the lowest."""
    spec = _spec(faults=[FaultSpec(kind="thermal_throttle", at_s=0, node=1, gpu=5, slowdown=0.3)])
    rec = simulate(spec)
    steps = _by(rec, c.TRAINING_STEPS, "rank")
    assert len(set(steps.values())) == 1 and min(steps.values()) > 100
    secs = _by(rec, c.TRAINING_STEP_SECONDS, "rank")
    assert max(secs.values()) - min(secs.values()) < 1e-6
    bwd = _by(rec, c.TRAINING_PHASE_SECONDS, "rank", phase="backward")
    slow = bwd.pop("13")
    assert slow < min(bwd.values()) * 0.97
    fwd = _by(rec, c.TRAINING_PHASE_SECONDS, "rank", phase="forward")
    assert fwd["13"] > max(v for r, v in fwd.items() if r != "13")  # its own compute is slower
    opt = _by(rec, c.TRAINING_PHASE_SECONDS, "rank", phase="optimizer")
    assert max(opt.values()) / min(opt.values()) < 1.2  # the wait is not at the optimizer


def test_optimizer_wait_phase_and_jitter():
    spec = _spec(
        wait_phase="optimizer",
        jitter=0.03,
        faults=[FaultSpec(kind="power_brake", at_s=0, node=0, gpu=1, slowdown=0.3)],
    )
    rec = simulate(spec)
    opt = _by(rec, c.TRAINING_PHASE_SECONDS, "rank", phase="optimizer")
    assert opt.pop("1") < min(opt.values()) * 0.9
    # Jitter: per-step compute varies, so the ranks' forward totals spread by more than rounding.
    fwd = np.array(list(_by(rec, c.TRAINING_PHASE_SECONDS, "rank", phase="forward").values()))
    assert fwd.std() > 0


def test_pipeline_lock_step_with_unequal_stages():
    spec = _spec(family="pipeline", nodes=4, pipeline_stages=4, emit_layout=True, gc_every_s=0)
    rec = simulate(spec)
    steps = _by(rec, c.TRAINING_STEPS, "rank")
    assert len(steps) == 32 and len(set(steps.values())) == 1
    info = rec.series_of(c.TRAINING_INFO)
    labels = rec.labels[c.TRAINING_INFO]
    stage_of = {}
    for key in info:
        d = dict(zip(labels, key, strict=True))
        stage_of[d["rank"]] = int(d[c.PIPELINE_STAGE_LABEL])
        assert d[c.DATA_PARALLEL_RANK_LABEL] == "0" and d[c.TENSOR_PARALLEL_RANK_LABEL] == d["local_rank"]
    assert sorted(set(stage_of.values())) == [0, 1, 2, 3]
    # The last stage computes the loss: busier GPUs (tensor activity) from the first step on.
    tensor = rec.series_of(c.DCGM_FI_PROF_PIPE_TENSOR_ACTIVE)
    mean = {}
    for key, (_t, v) in tensor.items():
        node = key[c.GPU_LABELS.index(c.NODE_LABEL)]
        mean.setdefault(node, []).append(float(np.mean(v[5:])))
    per_stage = [np.mean(mean[node_name(n)]) for n in range(4)]
    assert per_stage[3] > 1.1 * max(per_stage[1:3])
    # Bubbles: the first stage waits in backward, the last in forward.
    fwd = _by(rec, c.TRAINING_PHASE_SECONDS, "rank", phase="forward")
    assert fwd["31"] > 1.5 * fwd["0"]


def test_layout_left_out_and_default_phases():
    rec = simulate(_spec(pipeline_stages=2))
    labels = rec.labels[c.TRAINING_INFO]
    assert c.PIPELINE_STAGE_LABEL not in labels and "flops_convention" in labels
    series = rec.series_of(c.TRAINING_PHASE_SECONDS)
    assert {k[-1] for k in series} == {"data", "forward", "backward", "optimizer", "checkpoint", "eval"}
    # The library's pause phases are there from the start; no evaluation was reported in this job.
    assert all(not v.any() for k, (_t, v) in series.items() if k[-1] == "eval")
    assert any(v[-1] > 0 for k, (_t, v) in series.items() if k[-1] == "checkpoint")


@pytest.mark.parametrize("eval_phase", [True, False])
def test_eval_pauses_stop_steps_and_lower_util(eval_phase):
    spec = _spec(eval_every_s=400, eval_s=120, eval_phase=eval_phase, checkpoint_every_s=0, gc_every_s=0)
    rec = simulate(spec)
    (t, v), *_ = rec.series_of(c.TRAINING_STEPS).values()
    rate = np.diff(v) / np.diff(t)
    paused = rate == 0
    assert 10 <= paused.sum() <= 40  # about 2 x 2 min of 20 min
    (_ut, uv), *_ = rec.series_of(c.DCGM_FI_DEV_GPU_UTIL).values()
    assert 30 <= np.median(uv[1:][paused[: len(uv) - 1]]) <= 60 and np.median(uv[5:]) > 90
    evals = [v[-1] for k, (_t, v) in rec.series_of(c.TRAINING_PHASE_SECONDS).items() if k[-1] == "eval"]
    assert evals and (min(evals) > 0 if eval_phase else max(evals) == 0)


def test_fsx_saturation_slows_every_nodes_checkpoint_alike():
    spec = _spec(
        nodes=3,
        checkpoint_s=30,
        faults=[FaultSpec(kind="fsx_saturation", at_s=590, duration_s=400, slowdown=8)],
    )
    rec = simulate(spec)
    ck = _by(rec, c.TRAINING_PHASE_SECONDS, "rank", phase="checkpoint")
    assert 180 < ck["0"] < 330  # one slow (3-5 min) checkpoint plus the normal ones
    writes = rec.series_of(c.LUSTRE_CLIENT_WRITE_BYTES)
    gained = [
        float(np.interp(900, t - spec.start, v) - np.interp(600, t - spec.start, v))
        for t, v in writes.values()
    ]
    assert min(gained) > 0.7 * max(gained) > 1e10  # all nodes write together


def test_hang_keeps_gpus_busy_and_steps_flat_until_the_watchdog():
    spec = _spec(
        nodes=2,
        duration_s=1800,
        faults=[
            FaultSpec(
                kind="hang", cause="efa", at_s=300, lead_s=90, stall_s=600, node=1, device=2, restart="same"
            )
        ],
    )
    rec = simulate(spec)
    s0 = spec.start
    steps = _at(rec, c.TRAINING_STEPS, s0 + 420, rank="0")
    later = _at(rec, c.TRAINING_STEPS, s0 + 960, rank="0")
    assert steps and steps == later  # no progress during the hang
    util = _at(rec, c.DCGM_FI_DEV_GPU_UTIL, s0 + 700)
    assert min(util.values()) >= 95
    power = _at(rec, c.DCGM_FI_DEV_POWER_USAGE, s0 + 700)
    assert max(power.values()) < 450
    ev = _at(rec, c.EFA_RETRANS_TIMEOUT_EVENTS, s0 + 385)
    before = _at(rec, c.EFA_RETRANS_TIMEOUT_EVENTS, s0 + 290)
    rising = {k for k in ev if ev[k] > before.get(k, 0)}
    assert rising == {f"{node_name(1)}/rdmap111s0"}  # on the culprit's device, before the hang
    # The watchdog aborts at 990 s; the job restarts, counters from zero, the step from a checkpoint.
    key = f"{node_name(0)}/0"
    assert 0 < _at(rec, c.TRAINING_STEPS, s0 + 1200, rank="0")[key] < steps[key]
    hung_at = _at(rec, c.TRAINING_GLOBAL_STEP, s0 + 420, rank="0")[key]
    assert _at(rec, c.TRAINING_GLOBAL_STEP, s0 + 1200, rank="0")[key] < hung_at  # from its checkpoint
    for t, _v in rec.series_of(c.TRAINING_STEPS).values():  # aborted: no rank files until the restart
        assert not np.any((t > s0 + 1000) & (t < s0 + 1075))
    (fault,) = ground_truth(spec)["faults"]
    assert next((e["kind"], e.get("optional", False)) for e in fault["expected"]) == ("failing_node", False)


def test_host_hang_blames_the_job_and_idles_the_stuck_gpu():
    spec = _spec(faults=[FaultSpec(kind="hang", cause="host", at_s=300, stall_s=600, node=0, gpu=4)])
    rec = simulate(spec)
    util = _at(rec, c.DCGM_FI_DEV_GPU_UTIL, spec.start + 600)
    assert util.pop(f"{node_name(0)}/4") < 10 and min(util.values()) >= 95
    (fault,) = ground_truth(spec)["faults"]
    (exp,) = [e for e in fault["expected"] if not e.get("optional")]
    assert exp == {"kind": "job_hang", "cause": "hang", "node": None, "gpu": None, "single": True}


def test_xid79_and_vanished_gpu():
    spec = _spec(
        faults=[FaultSpec(kind="hang", cause="xid79", at_s=300, stall_s=600, node=1, gpu=2, restart="shrink")]
    )
    rec = simulate(spec)
    up = _at(rec, c.GPU_UP, spec.start + 400)
    assert up[f"{node_name(1)}/2"] == 0
    spec = _spec(
        faults=[
            FaultSpec(kind="hang", cause="gpu_vanish", at_s=300, stall_s=600, node=1, gpu=2, restart="shrink")
        ]
    )
    rec = simulate(spec)
    (t, _v) = rec.series_of(c.DCGM_FI_DEV_GPU_UTIL)[
        next(k for k in rec.series_of(c.DCGM_FI_DEV_GPU_UTIL) if k[5] == node_name(1) and k[0] == "2")
    ]
    assert t[-1] - spec.start <= 300
    assert c.GPU_UP in rec.metric_names()
    assert not [
        k
        for k in rec.series_of(c.GPU_UP)
        if k[5] == node_name(1) and k[0] == "2" and rec.series_of(c.GPU_UP)[k][0][-1] > spec.start + 300
    ]


def test_scrape_gap_and_drain():
    spec = _spec(nodes=3, faults=[FaultSpec(kind="scrape_gap", at_s=300, duration_s=300, node=2)])
    rec = simulate(spec)
    for name in (c.DCGM_FI_DEV_GPU_UTIL, c.TRAINING_STEPS, c.EFA_TX_BYTES, c.LUSTRE_CLIENT_READ_BYTES):
        i = rec.labels[name].index(c.NODE_LABEL)
        for key, (t, _v) in rec.series_of(name).items():
            rel = t - spec.start
            gap = (rel > 300) & (rel < 600)
            assert (key[i] == node_name(2)) == (not gap.any()), (name, key)
    steps = _at(rec, c.TRAINING_STEPS, spec.start + 600, rank="0")
    assert (
        next(iter(steps.values()))
        > _at(rec, c.TRAINING_STEPS, spec.start + 300, rank="0")[f"{node_name(0)}/0"]
    )
    spec = _spec(
        nodes=2,
        duration_s=1500,
        faults=[FaultSpec(kind="node_drain", at_s=700, node=1, stall_s=200, restart="replace")],
    )
    rec = simulate(spec)
    hosts = {k[3] for k in rec.series_of(c.TRAINING_STEPS)}
    assert node_name(2) in hosts  # the spare joined
    gstep = rec.series_of(c.TRAINING_GLOBAL_STEP)
    (t, v) = next(tv for k, tv in gstep.items() if k[3] == node_name(0) and k[1] == "0")
    assert np.any(np.diff(v) < 0)  # resumed from the last checkpoint
    assert not ground_truth(spec)["faults"][0]["expected"][0].get("single")


def test_several_jobs_fault_stays_in_its_job():
    spec = _spec(
        family="multi_job",
        nodes=4,
        jobs=[
            JobSpec(job_id="a", nodes=2),
            JobSpec(job_id="b", nodes=2, first_node=2, step_scale=0.5, mfu=0.3),
        ],
        faults=[FaultSpec(kind="thermal_throttle", at_s=0, node=3, gpu=0, slowdown=0.4)],
    )
    rec = simulate(spec)
    steps = _by(rec, c.TRAINING_STEPS, "job_id")
    assert set(steps) == {"a", "b"}
    healthy = simulate(_spec(family="multi_job", nodes=4, jobs=spec.jobs))
    same = _by(healthy, c.TRAINING_STEPS, "job_id")
    assert steps["a"] == pytest.approx(same["a"], rel=0.02) and steps["b"] < same["b"] * 0.85
    (fault,) = ground_truth(spec)["faults"]
    assert {e.get("job_id") for e in fault["expected"]} == {"b"}


def test_intermittent_throttle_shows_hardware_evidence_only_when_on():
    spec = _spec(
        faults=[
            FaultSpec(kind="thermal_throttle", at_s=0, period_s=300, on_s=120, node=0, gpu=3, slowdown=0.15)
        ]
    )
    rec = simulate(spec)
    key = next(
        k for k in rec.series_of(c.DCGM_FI_DEV_CLOCKS_EVENT_REASONS) if k[5] == node_name(0) and k[0] == "3"
    )
    t, v = rec.series_of(c.DCGM_FI_DEV_CLOCKS_EVENT_REASONS)[key]
    phase = (t - spec.start - 15) % 300  # a sample describes the tick before it
    on = (v.astype(int) & hardware.CLOCK_EVENT_HW_THERMAL) > 0
    assert on[(phase < 100) & (t > spec.start + 30)].all() and not on[(phase > 140) & (phase < 280)].any()


def test_node_level_truth_and_spec_checks(tmp_path):
    spec = _spec(family="node_level", faults=[FaultSpec(kind="psu_brake", at_s=100, node=1, slowdown=0.2)])
    (fault,) = ground_truth(spec)["faults"]
    req = [e for e in fault["expected"] if not e.get("optional")]
    assert req == [
        {
            "kind": "straggler",
            "cause": "power_brake",
            "node": node_name(1),
            "gpu": None,
            "node_level": True,
            "single": True,
        }
    ]
    rec = simulate(spec)
    reasons = _at(rec, c.DCGM_FI_DEV_CLOCKS_EVENT_REASONS, spec.start + 600)
    braked = {k for k, v in reasons.items() if int(v) & hardware.CLOCK_EVENT_HW_POWER_BRAKE}
    assert braked == {f"{node_name(1)}/{g}" for g in range(8)}
    assert json.loads(json.dumps(ground_truth(spec)))["family"] == "node_level"
    with pytest.raises(FleetscopeError, match="only for a realistic family"):
        ScenarioSpec(name="x", faults=[FaultSpec(kind="cpu_contention")])
    with pytest.raises(FleetscopeError, match="unknown family"):
        ScenarioSpec(name="x", family="nope")
    with pytest.raises(FleetscopeError, match="wait_phase"):
        ScenarioSpec(name="x", family="pauses", wait_phase="forward")
