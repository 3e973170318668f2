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


def _series(rec, metric: str, pod: str) -> tuple[np.ndarray, np.ndarray]:
    """(times, values) of one replica's series of ``metric`` (summed over its other labels)."""
    i = rec.labels[metric].index("pod")
    found = [(t, v) for k, (t, v) in rec.series_of(metric).items() if k[i] == pod]
    assert found, (metric, pod)
    return found[0][0], np.sum([v for _, v in found], axis=0)


def _gpu_util(rec, host: str) -> np.ndarray:
    labels = rec.labels[c.DCGM_FI_DEV_GPU_UTIL]
    h, g = labels.index(c.NODE_LABEL), labels.index("gpu")
    series = rec.series_of(c.DCGM_FI_DEV_GPU_UTIL).items()
    return np.array(next(v for k, (_t, v) in series if k[h] == host and k[g] == "0"))


POD1 = "vllm-llama-3-1-70b-instruct-1"
HOST1 = "ip-10-1-0-11"


@pytest.mark.parametrize(("kind", "util"), [("engine_wedged", 0.0), ("tp_hang", 100.0)])
def test_a_wedged_engine_freezes_with_requests_in_flight(kind: str, util: float) -> None:
    """From the onset (tick 40) every series of the replica stands at its last value, requests
    running among them; its GPUs fall idle (stopped) or spin (hung all-reduce); its peers serve on,
    and its HTTP layer counts the streams its clients give up on as 2xx."""
    rec = simulate(_spec(FaultSpec(kind=kind, at_s=600, node=1, gpu=0)))
    for metric in (
        c.VLLM_NUM_REQUESTS_RUNNING,
        c.VLLM_GENERATION_TOKENS,
        c.VLLM_REQUEST_SUCCESS,
        c.VLLM_INTER_TOKEN_LATENCY.observations,
        c.VLLM_TIME_TO_FIRST_TOKEN.bucket,
    ):
        _t, v = _series(rec, metric, POD1)
        assert len(v) == 121, metric  # present all along: the pod answers /metrics
        assert np.all(v[41:] == v[41]), metric
        _t, peer = _series(rec, metric, "vllm-llama-3-1-70b-instruct-2")
        if metric != c.VLLM_NUM_REQUESTS_RUNNING:
            assert peer[-1] > peer[41], metric
    assert _series(rec, c.VLLM_NUM_REQUESTS_RUNNING, POD1)[1][60] > 5
    assert np.all(_gpu_util(rec, HOST1)[42:] == util)
    assert _gpu_util(rec, "ip-10-1-0-12")[60] > 50
    tensor = rec.series_of(c.DCGM_FI_PROF_PIPE_TENSOR_ACTIVE)
    labels = rec.labels[c.DCGM_FI_PROF_PIPE_TENSOR_ACTIVE]
    hung = [v for k, (_t, v) in tensor.items() if k[labels.index(c.NODE_LABEL)] == HOST1]
    assert all(np.all(v[42:] == 0) for v in hung)  # no compute, spinning or not
    _t, ok = _series(rec, c.VLLM_HTTP_REQUESTS, POD1)
    assert ok[-1] - ok[41] > 1000


def test_http_errors_answer_every_request_5xx_and_the_engine_sees_none() -> None:
    rec = simulate(_spec(FaultSpec(kind="http_errors", at_s=600, node=1, gpu=0)))
    labels = rec.labels[c.VLLM_HTTP_REQUESTS]
    assert "model_name" not in labels
    st, pod = labels.index("status"), labels.index("pod")
    by = {(k[pod], k[st]): (t, v) for k, (t, v) in rec.series_of(c.VLLM_HTTP_REQUESTS).items()}
    # The 5xx series exists from the first 5xx on, and only on the failing replica.
    assert {p for p, s in by if s == "5xx"} == {POD1}
    t5, errors = by[(POD1, "5xx")]
    assert t5[0] >= 1796032800.0 + 600
    _t, peer_ok = by[("vllm-llama-3-1-70b-instruct-2", "2xx")]
    rate = (errors[-1] - errors[0]) / (t5[-1] - t5[0])
    peer = (peer_ok[-1] - peer_ok[41]) / (1800 - 615)
    assert 0.8 * peer < rate < 1.2 * peer  # its full share of the traffic
    ok = by[(POD1, "2xx")][1]
    assert ok[-1] - ok[43] == 0  # nothing answered well once the engine has drained
    gen = _series(rec, c.VLLM_GENERATION_TOKENS, POD1)[1]
    assert gen[-1] == gen[43] and _series(rec, c.VLLM_NUM_REQUESTS_RUNNING, POD1)[1][60] == 0
    assert _gpu_util(rec, HOST1)[60] == 0


def test_a_starved_replica_drains_and_idles() -> None:
    rec = simulate(_spec(FaultSpec(kind="router_starved", at_s=600, node=1, gpu=0)))
    running = _series(rec, c.VLLM_NUM_REQUESTS_RUNNING, POD1)[1]
    assert running[38] > 5 and np.all(running[44:] == 0)
    assert _gpu_util(rec, HOST1)[60] == 0
    peer = _series(rec, c.VLLM_NUM_REQUESTS_RUNNING, "vllm-llama-3-1-70b-instruct-2")[1]
    assert peer[60] > running[38]  # its share went to the others


def test_a_rolling_restart_brings_every_replica_back_as_a_new_pod() -> None:
    rec = simulate(_spec(FaultSpec(kind="rolling_restart", at_s=300, stall_s=120)))
    pods = _per_pod(rec, c.VLLM_NUM_REQUESTS_RUNNING)
    assert set(pods) == {f"vllm-llama-3-1-70b-instruct-{r}{gen}" for r in range(4) for gen in ("", "-r1")}
    for r in range(4):
        t_old, _ = _series(rec, c.VLLM_NUM_REQUESTS_RUNNING, f"vllm-llama-3-1-70b-instruct-{r}")
        t_new, gen = _series(rec, c.VLLM_GENERATION_TOKENS, f"vllm-llama-3-1-70b-instruct-{r}-r1")
        down = t_new[0] - t_old[-1]
        assert 120 <= down <= 150, down  # absent while the new pod starts
        assert gen[0] < 1e5 < gen[-1]  # its counters start again from 0
    # One replica at a time: the four restarts follow one another.
    starts = sorted(float(_series(rec, c.VLLM_NUM_REQUESTS_RUNNING, p)[0][0]) for p in pods if "-r1" in p)
    assert np.all(np.diff(starts) >= 150)


@pytest.mark.parametrize(
    "kind", ["engine_wedged", "tp_hang", "http_errors", "router_starved", "rolling_restart"]
)
def test_the_demo_takes_the_serving_faults(kind: str) -> None:
    """``fleetscope demo --workload inference --fault KIND`` accepts each; training refuses them."""
    import argparse

    from fleetscope.demo.cli import _check_fault, add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--workload", "inference", "--fault", kind])
    _check_fault(args)
    assert args.fault == kind
    with pytest.raises(FleetscopeError, match=f"--fault {kind} is not simulated for --workload training"):
        _check_fault(parser.parse_args(["--fault", kind]))


def test_the_serving_faults_have_their_ground_truth() -> None:
    truth = ground_truth(
        _spec(
            FaultSpec(kind="engine_wedged", at_s=600, node=1, gpu=0),
            FaultSpec(kind="tp_hang", at_s=600, node=2, gpu=0),
            FaultSpec(kind="http_errors", at_s=600, node=3, gpu=0),
            FaultSpec(kind="router_starved", at_s=600, node=0, gpu=0),
        )
    )
    got = [
        (f["kind"], [(e["kind"], e["cause"], e["node"], e.get("gpu")) for e in f["expected"]])
        for f in truth["faults"]
    ]
    assert got == [
        ("engine_wedged", [("failing_replica", "engine_wedged", "ip-10-1-0-11", None)]),
        ("tp_hang", [("failing_replica", "engine_wedged", "ip-10-1-0-12", None)]),
        ("http_errors", [("failing_replica", "http_errors", "ip-10-1-0-13", None)]),
        ("router_starved", []),
    ]
