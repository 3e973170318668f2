"""The inference model's physics: queueing, batching, vLLM's histograms, its faults and ground truth."""

from __future__ import annotations

import numpy as np
import pytest

from fleetscope import contract as c
from fleetscope.errors import FleetscopeError
from fleetscope.simulate.record import ground_truth, simulate
from fleetscope.simulate.spec import FaultSpec, ScenarioSpec


def _spec(*faults: FaultSpec, **kw) -> ScenarioSpec:
    return ScenarioSpec(
        name="inference_t", nodes=4, duration_s=1800, seed=5, scrape_miss=0.0, faults=list(faults), **kw
    )


def _per_pod(rec, metric: str) -> dict[str, np.ndarray]:
    i = rec.labels[metric].index("pod")
    return {k[i]: v for k, (_t, v) in rec.series_of(metric).items()}


def _window_mean(rec, hist, a: int, b: int) -> dict[str, float]:
    s, n = _per_pod(rec, hist.sum), _per_pod(rec, hist.observations)
    return {p: (s[p][b] - s[p][a]) / (n[p][b] - n[p][a]) for p in s}


def test_replicas_histograms_and_batching():
    rec = simulate(_spec())
    running = _per_pod(rec, c.VLLM_NUM_REQUESTS_RUNNING)
    assert len(running) == 4
    # Buckets are cumulative in le and in time, +Inf equals _count.
    i = rec.labels[c.VLLM_TIME_TO_FIRST_TOKEN.bucket].index("le")
    last = {
        k[i]: float(v[-1])
        for k, (_t, v) in rec.series_of(c.VLLM_TIME_TO_FIRST_TOKEN.bucket).items()
        if k[rec.labels[c.VLLM_TIME_TO_FIRST_TOKEN.bucket].index("pod")] == "vllm-llama-3-1-70b-instruct-0"
    }
    ordered = [last[le] for le in sorted(last, key=lambda x: float(x.replace("+Inf", "inf")))]
    assert ordered == sorted(ordered)
    assert (
        ordered[-1]
        == _per_pod(rec, c.VLLM_TIME_TO_FIRST_TOKEN.observations)["vllm-llama-3-1-70b-instruct-0"][-1]
    )
    # The daily peak (mid-scenario) runs bigger batches than the night, and decodes slower.
    pod = "vllm-llama-3-1-70b-instruct-0"
    assert running[pod][60] > 2 * running[pod][5]
    night, peak = (
        _window_mean(rec, c.VLLM_INTER_TOKEN_LATENCY, 2, 10),
        _window_mean(rec, c.VLLM_INTER_TOKEN_LATENCY, 60, 68),
    )
    assert peak[pod] > 1.2 * night[pod]
    # GPU series carry their replica's pod (dcgm-exporter's Kubernetes attribution).
    pods = set(_per_pod(rec, c.DCGM_FI_DEV_SM_CLOCK))
    assert pods == set(running)


def test_long_prompts_slow_first_tokens_and_a_surge_fills_every_cache():
    rec = simulate(_spec(FaultSpec(kind="long_prompts", at_s=0, node=1, gpu=0, slowdown=0.8)))
    ttft = _window_mean(rec, c.VLLM_TIME_TO_FIRST_TOKEN, 40, 80)
    slow = ttft.pop("vllm-llama-3-1-70b-instruct-1")
    assert slow > 1.3 * max(ttft.values())
    rec = simulate(_spec(FaultSpec(kind="traffic_surge", at_s=600, node=0, gpu=0, slowdown=1.6)))
    kv = _per_pod(rec, c.VLLM_KV_CACHE_USAGE)
    assert all(v[70] > 0.85 for v in kv.values())
    assert all(v[70] > 100 for v in _per_pod(rec, c.VLLM_NUM_REQUESTS_WAITING).values())
    assert all(v[-1] > 0 for v in _per_pod(rec, c.VLLM_NUM_PREEMPTIONS).values())


def test_throttle_slows_its_replica_and_a_lost_gpu_ends_it():
    rec = simulate(_spec(FaultSpec(kind="thermal_throttle", at_s=600, node=2, gpu=3, slowdown=0.2)))
    itl = _window_mean(rec, c.VLLM_INTER_TOKEN_LATENCY, 50, 70)
    slow = itl.pop("vllm-llama-3-1-70b-instruct-2")
    assert slow > 1.15 * max(itl.values())
    rec = simulate(_spec(FaultSpec(kind="gpu_lost", at_s=600, node=1, gpu=2)))
    times = {k: t for k, (t, _v) in rec.series_of(c.VLLM_NUM_REQUESTS_RUNNING).items()}
    ends = sorted(float(t[-1] - t[0]) for t in times.values())
    assert ends[0] < 620 and ends[1] == 1800  # one replica stops at the fault, the rest serve on
    truth = ground_truth(_spec(FaultSpec(kind="gpu_lost", at_s=600, node=1, gpu=2)))
    kinds = {(e["kind"], e.get("optional", False)) for e in truth["faults"][0]["expected"]}
    assert kinds == {("failing_replica", False), ("failing_node", True)}


def test_inference_faults_stay_in_their_family():
    with pytest.raises(FleetscopeError, match="only for the inference family"):
        ScenarioSpec(name="realistic_x", faults=[FaultSpec(kind="traffic_surge")])
    with pytest.raises(FleetscopeError, match="not for the inference family"):
        ScenarioSpec(name="inference_x", faults=[FaultSpec(kind="data_stall")])
    with pytest.raises(FleetscopeError, match="must divide"):
        ScenarioSpec(name="inference_x", gpus_per_replica=3)
