"""The inference detector's rules on small hand-built windows: four replicas of one model, 15 s grid."""

from __future__ import annotations

import numpy as np

from fleetscope import contract as c
from fleetscope import hardware
from fleetscope.analyzers.config import DEFAULT
from fleetscope.analyzers.detectors.inference import InferenceDetector
from fleetscope.analyzers.features import build_features
from fleetscope.analyzers.findings import Finding
from fleetscope.analyzers.signals.serving import histogram_quantile
from fleetscope.analyzers.signals.window_signals import Signals
from fleetscope.window.frames import RawSeries, build_frames

STEP, T, START = 15.0, 120, 1_767_225_600.0
MODEL = "llama"


class Fleet:
    """Four one-node replicas (pods r0..r3, two GPUs each); arrays are per grid step, edit and build."""

    def __init__(self, n: int = 4) -> None:
        self.n = n
        self.itl = np.full((T, n), 0.020)  # mean inter-token latency, s
        self.tokens = np.full((T, n), 3000.0)  # tokens per grid step
        self.prompt = np.full((T, n), 1000.0)  # prompt tokens per request
        self.running = np.full((T, n), 60.0)
        self.waiting = np.zeros((T, n))
        self.kv = np.full((T, n), 0.3)
        self.preempt = np.zeros((T, n))  # preemptions per grid step
        self.reasons = np.zeros((T, n))
        self.clock = np.full((T, n), 1980.0)
        rng = np.random.default_rng(0)
        self.itl *= 1 + rng.normal(0, 0.01, (T, n))

    def frames(self):
        times = START + STEP * np.arange(T)
        raw: dict[str, list[RawSeries]] = {}

        def add(name: str, labels: dict[str, str], v: np.ndarray) -> None:
            raw.setdefault(name, []).append(RawSeries(labels, times, np.asarray(v, dtype=float)))

        for r in range(self.n):
            lab = {"model_name": MODEL, "pod": f"r{r}", "namespace": "ns", c.NODE_LABEL: f"n{r}"}
            add(c.VLLM_NUM_REQUESTS_RUNNING, lab, self.running[:, r])
            add(c.VLLM_NUM_REQUESTS_WAITING, lab, self.waiting[:, r])
            add(c.VLLM_KV_CACHE_USAGE, lab, self.kv[:, r])
            add(c.VLLM_NUM_PREEMPTIONS, lab, np.cumsum(self.preempt[:, r]))
            add(c.VLLM_GENERATION_TOKENS, lab, np.cumsum(self.tokens[:, r]))
            req = self.tokens[:, r] / 200
            add(c.VLLM_REQUEST_SUCCESS, {**lab, "finished_reason": "stop"}, np.cumsum(req))
            add(c.VLLM_PROMPT_TOKENS, lab, np.cumsum(req * self.prompt[:, r]))
            h = c.VLLM_INTER_TOKEN_LATENCY
            add(h.sum, lab, np.cumsum(self.tokens[:, r] * self.itl[:, r]))
            add(h.observations, lab, np.cumsum(self.tokens[:, r]))
            for g in ("0", "1"):
                glab = {c.NODE_LABEL: f"n{r}", "gpu": g, "pod": f"r{r}", "namespace": "ns"}
                add(c.DCGM_FI_DEV_SM_CLOCK, glab, self.clock[:, r] if g == "1" else np.full(T, 1980.0))
                add(c.DCGM_FI_DEV_CLOCKS_EVENT_REASONS, glab, self.reasons[:, r] if g == "1" else np.zeros(T))
                add(c.DCGM_FI_DEV_GPU_UTIL, glab, np.full(T, 90.0))
        return build_frames(raw, times[0], times[-1], STEP)

    def detect(self, prior: list[Finding] | None = None) -> list[Finding]:
        return (
            InferenceDetector().detect(Signals(build_features(self.frames(), DEFAULT)), prior or []).findings
        )


def test_healthy_fleet_and_diurnal_load_give_nothing():
    f = Fleet()
    load = 0.5 + 0.5 * np.sin(np.linspace(0, np.pi, T))[:, None]
    f.running *= load
    f.itl *= 0.8 + 0.4 * load  # every replica slows together at the peak: peers, not a fault
    assert f.detect() == []


def test_throttled_gpu_makes_a_slow_replica_with_its_cause():
    f = Fleet()
    f.itl[40:, 2] *= 1.12
    f.reasons[40:, 2] = hardware.CLOCK_EVENT_HW_THERMAL
    f.clock[40:, 2] = 1700
    (finding,) = f.detect()
    assert (finding.kind, finding.cause, finding.node, finding.gpu) == (
        "slow_replica",
        "thermal_throttle",
        "n2",
        "1",
    )
    assert finding.evidence["replica"] == "r2" and finding.evidence["model"] == MODEL
    # The same 12% without hardware evidence is within what batch sizes explain: nothing.
    f.reasons[:] = 0
    assert f.detect() == []


def test_long_prompts_explain_a_slow_replica_without_hardware():
    f = Fleet()
    f.itl[40:, 1] *= 1.4
    f.prompt[40:, 1] *= 2.0
    assert f.detect() == []
    f.prompt[40:, 1] /= 2.0  # the same slowness with its peers' prompts: slow, cause unknown
    (finding,) = f.detect()
    assert (finding.kind, finding.cause, finding.node) == ("slow_replica", "unknown", "n1")


def test_kv_pressure_on_one_replica_and_capacity_on_all():
    f = Fleet()
    f.kv[40:, 3], f.waiting[40:, 3], f.preempt[40:, 3] = 0.97, 50, 10
    (finding,) = f.detect()
    assert (finding.kind, finding.cause, finding.node, finding.gpu) == (
        "slow_replica",
        "kv_cache_pressure",
        "n3",
        None,
    )
    f.kv[40:80], f.waiting[40:80], f.preempt[40:80] = 0.97, 300, 10  # every replica saturated
    kinds = [(x.kind, x.node, x.job_id) for x in f.detect()]
    assert kinds.count(("capacity", None, None)) == 1 and all(k == "capacity" for k, _, _ in kinds[:1])
    cap = next(x for x in f.detect() if x.kind == "capacity")
    assert cap.evidence["model"] == MODEL and "scale out" in cap.action and "drain nothing" in cap.action


def test_failing_gpu_makes_a_failing_replica():
    f = Fleet()
    lost = Finding(
        kind="failing_node",
        severity="critical",
        node="n0",
        gpu="1",
        start=START + 600,
        cause="gpu_lost",
        action="drain",
        evidence={"XID 79": "1"},
    )
    (finding,) = f.detect([lost])
    assert (finding.kind, finding.cause, finding.node, finding.gpu) == (
        "failing_replica",
        "gpu_lost",
        "n0",
        "1",
    )
    assert finding.severity == "critical" and finding.evidence["replica"] == "r0"


def test_histogram_quantile_interpolates_like_promql():
    bounds = np.array([0.01, 0.025, 0.05, np.inf])
    cum = np.array([[0.0, 50.0, 100.0, 100.0], [0.0, 0.0, 0.0, 10.0]])
    q = histogram_quantile(0.95, bounds, cum)
    assert abs(q[0] - (0.025 + 0.025 * 0.9)) < 1e-9  # 95th of 100 is 45/50 into (0.025, 0.05]
    assert q[1] == 0.05  # in the +Inf bucket: the highest finite bound
