"""Neuron evidence in the analyzers: failing nodes from uncorrectable ECC, hardware execution errors
and vanished devices; slow nodes from execution latency; one finding per node."""

from __future__ import annotations

import numpy as np

from fleetscope import contract as c
from fleetscope.analyzers.config import DEFAULT
from fleetscope.analyzers.core import analyze
from fleetscope.analyzers.detectors import DETECTORS
from fleetscope.analyzers.detectors.failing_node import FailingNodeDetector
from fleetscope.analyzers.detectors.neuron import NeuronDetector
from fleetscope.window.frames import Frames, RawSeries, build_frames

STEP = 15.0
START = 1_767_225_600.0
T = 240  # one hour
NODES = [f"trn2-{i}" for i in range(4)]


class Window:
    """Four healthy trn2 nodes: 16 devices, steady p50 latency, counters that never move."""

    def __init__(self) -> None:
        self.times = START + STEP * np.arange(T)
        self.devices = {n: np.full(T, 16.0) for n in NODES}
        self.latency = {n: np.full(T, 0.040) for n in NODES}
        self.ecc = {n: np.zeros(T) for n in NODES}  # uncorrected, device 3
        self.hw_errors = {n: np.zeros(T) for n in NODES}
        #: Per node and grid time: its exporter answers (False: the node is down).
        self.up = {n: np.ones(T, dtype=bool) for n in NODES}
        #: Per node and grid time: a training job's two ranks there run (None: no training job).
        self.ranks: dict[str, np.ndarray] | None = None

    def tick(self, minute: float) -> int:
        return int(minute * 60 / STEP)

    def frames(self) -> Frames:
        raw: dict[str, list[RawSeries]] = {}

        def put(metric: str, labels: dict[str, str], v: np.ndarray) -> None:
            v = np.where(self.up[labels[c.NODE_LABEL]], v.astype(float), np.nan)
            raw.setdefault(metric, []).append(RawSeries(labels, self.times.copy(), v))

        for k, (n, alive) in enumerate((self.ranks or {}).items()):
            for local in range(2):
                lab = {"job_id": "llama", "rank": str(2 * k + local), "local_rank": str(local)}
                lab.update({c.NODE_LABEL: n, "gpu": str(local)})
                steps = np.cumsum(np.where(alive, 3.0, 0.0))
                put(c.TRAINING_STEPS, lab, np.where(alive, steps, np.nan))
                put(c.TRAINING_STEP_SECONDS, lab, np.where(alive, steps * 5.0, np.nan))
        for n in NODES:
            inst = {c.NODE_LABEL: n, "instance_type": "trn2.48xlarge", "instance_id": f"i-{n}"}
            rt = {**inst, "runtime_tag": "llama-0"}
            put(c.NEURON_DEVICES, {c.NODE_LABEL: n}, self.devices[n])
            put(c.NEURON_EXECUTION_LATENCY, {**rt, "percentile": "p50"}, self.latency[n])
            put(c.NEURON_EXECUTION_LATENCY, {**rt, "percentile": "p99"}, self.latency[n] * 1.2)
            ecc = {**inst, "neuron_device_index": "3"}
            put(c.NEURON_HW_ECC_EVENTS, {**ecc, "event_type": "mem_ecc_uncorrected"}, np.cumsum(self.ecc[n]))
            put(c.NEURON_HW_ECC_EVENTS, {**ecc, "event_type": "mem_ecc_corrected"}, np.arange(T) * 2.0)
            put(c.NEURON_EXECUTION_ERRORS, {**rt, "error_type": "hardware"}, np.cumsum(self.hw_errors[n]))
            put(c.NEURON_EXECUTION_ERRORS, {**rt, "error_type": "numerical"}, np.arange(T) * 1.0)
        return build_frames(
            raw, float(self.times[0]), float(self.times[-1]), STEP, source="hand-built", gridded=True
        )


def test_the_detector_runs_right_after_the_failing_node_detector() -> None:
    kinds = [type(d) for d in DETECTORS]
    assert kinds.index(NeuronDetector) == kinds.index(FailingNodeDetector) + 1


def test_a_healthy_window_has_no_finding() -> None:
    """Corrected ECC events and numerical (model) errors are no hardware fault."""
    assert analyze(Window().frames()).findings == []


def test_an_uncorrectable_ecc_event_makes_one_failing_node() -> None:
    w = Window()
    w.ecc["trn2-2"][w.tick(30)] = 1
    w.hw_errors["trn2-2"][w.tick(30)] = 2  # the runtime fails the execution: same incident
    report = analyze(w.frames())
    failing = [f for f in report.findings if f.kind == "failing_node"]
    assert [(f.node, f.cause, f.severity) for f in failing] == [("trn2-2", "ecc_uncorrectable", "critical")]
    f = failing[0]
    assert f.start == w.times[w.tick(30)]
    assert "neuron_device_3" in f.evidence and "execution_errors" in f.evidence
    assert report.nodes["trn2-2"].state == "failing"


def test_hardware_execution_errors_alone_make_a_failing_node() -> None:
    w = Window()
    w.hw_errors["trn2-1"][w.tick(20)] = 1
    failing = [f for f in analyze(w.frames()).findings if f.kind == "failing_node"]
    assert [(f.node, f.cause) for f in failing] == [("trn2-1", "hardware_error")]


def test_a_vanished_device_makes_a_failing_node() -> None:
    w = Window()
    w.devices["trn2-3"][w.tick(40) :] = 15
    failing = [f for f in analyze(w.frames()).findings if f.kind == "failing_node"]
    assert [(f.node, f.cause) for f in failing] == [("trn2-3", "device_missing")]
    assert "15 Neuron devices" in failing[0].evidence["neuron_devices"]


def _crash(w: Window, node: str, minute: float, abort_s: float = 45.0) -> None:
    """``node`` goes down at ``minute`` (its exporter and ranks gone); the job's other ranks hang
    in a collective until the watchdog aborts them ``abort_s`` later."""
    w.ranks = {n: np.ones(T, dtype=bool) for n in NODES}
    w.up[node][w.tick(minute) :] = False
    for n in NODES:
        w.ranks[n][w.tick(minute + (0 if n == node else abort_s / 60)) :] = False


def test_a_trainium_node_that_goes_down_with_its_job_is_a_failing_node() -> None:
    w = Window()
    _crash(w, "trn2-2", 30)
    failing = [f for f in analyze(w.frames()).findings if f.kind == "failing_node"]
    assert [(f.node, f.cause, f.severity) for f in failing] == [("trn2-2", "node_down", "critical")]
    assert failing[0].start == w.times[w.tick(30)]


def test_neuron_evidence_says_why_a_node_went_down() -> None:
    w = Window()
    w.ecc["trn2-2"][w.tick(29)] = 1
    _crash(w, "trn2-2", 30)
    failing = [f for f in analyze(w.frames()).findings if f.kind == "failing_node"]
    assert [(f.node, f.cause) for f in failing] == [("trn2-2", "ecc_uncorrectable")]


def test_slower_executions_on_one_node_make_a_node_level_straggler() -> None:
    w = Window()
    w.latency["trn2-1"][w.tick(20) :] = 0.040 * 1.3
    stragglers = [f for f in analyze(w.frames()).findings if f.kind == "straggler"]
    assert [(f.node, f.gpu, f.cause) for f in stragglers] == [("trn2-1", None, "slow_execution")]
    assert stragglers[0].score is not None and abs(stragglers[0].score - 1.3) < 0.01
    assert stragglers[0].start == w.times[w.tick(20)]


def test_a_little_slower_is_no_straggler() -> None:
    w = Window()
    w.latency["trn2-1"][w.tick(20) :] = 0.040 * (DEFAULT.neuron_latency_ratio - 0.05)
    assert analyze(w.frames()).findings == []


def test_a_slow_node_that_then_fails_is_one_incident() -> None:
    w = Window()
    w.latency["trn2-0"][w.tick(10) :] = 0.060
    w.ecc["trn2-0"][w.tick(25)] = 1
    findings = analyze(w.frames()).findings
    assert [(f.kind, f.node) for f in findings] == [("failing_node", "trn2-0")]


def test_the_simulated_trainium2_node_serves_neuron_series_not_gpu_series() -> None:
    from fleetscope.simulate.families import cluster_model
    from fleetscope.simulate.spec import ScenarioSpec

    spec = ScenarioSpec(
        name="neuron_t",
        nodes=2,
        gpus_per_node=8,
        tensor_parallel=8,
        duration_s=300,
        faults=[{"kind": "neuron_device_lost", "at_s": 30, "node": 1, "gpu": 5}],
    )
    model = cluster_model(spec, scrape_labels=False)
    for _ in range(6):
        model.tick(15.0)
    series = model.series()
    assert c.DCGM_FI_DEV_GPU_UTIL not in series and c.GPU_UP not in series
    devices = dict(
        zip([k[0] for k in series[c.NEURON_DEVICES].keys], series[c.NEURON_DEVICES].values, strict=True)
    )
    assert devices == {"ip-10-1-0-10": 2, "ip-10-1-0-11": 1}
    cores = series[c.NEURONCORE_UTILIZATION]
    keys = list(c.NEURONCORE_UTILIZATION.labels)
    on_node1 = sorted(
        int(k[keys.index("neuroncore")]) for k in cores.keys if k[keys.index(c.NODE_LABEL)] == "ip-10-1-0-11"
    )
    assert on_node1 == [0, 1, 2, 3]  # the device of cores 4-7 is gone
    peak = series[c.GPU_PEAK_FLOPS]
    assert set(peak.values) == {667e12 / 4, 1299e12 / 4}
