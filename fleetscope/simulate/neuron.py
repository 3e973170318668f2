"""A Trainium2 cluster in the simulator: the ``neuron`` family.

Each node is a trn2.48xlarge as neuron-monitor reports it: 16 Trainium2 devices of 4 logical
NeuronCores (LNC=2), one training rank per logical core, so a spec's ``gpus_per_node`` is the
node's NeuronCores (64 for the real shape; a multiple of 4). The jobs, pauses, hangs, EFA and
Lustre are the realistic model's; the GPU series are replaced by the neuron collector's
(``neuroncore_utilization_ratio``, ``hardware_ecc_events_total``, ``execution_*``,
``fleetscope_neuron_devices``, ``neuron_hardware_info`` and the per-core peak FLOP/s as
``fleetscope_gpu_peak_flops``), with the names and labels the exporter serves.

Faults of the family (beside ``efa_degraded`` and the realistic model's others):

* ``neuron_ecc``: the device holding core ``gpu`` of ``node`` counts an uncorrectable DRAM ECC
  event, the Neuron Runtime fails the execution (a ``hardware`` execution error), the rank dies
  and the job hangs until it is restarted (``stall_s``, ``restart``), as after a GPU's XID 48;
* ``neuron_device_lost``: that device falls off the bus: the node lists one device fewer, its
  cores' series stop, their ranks die, and the job hangs and restarts as above;
* ``neuron_slow``: every core of ``node`` runs ``slowdown`` slower (a device held at a lower
  clock): the job's steps wait for it and the node's execution latency rises.

:data:`NEURON_EXPECT` is each fault's ground truth (:func:`neuron_truth`); :func:`check_neuron_spec` its
spec rules. Registered in ``fleetscope/simulate/families.py``; no other family imports this module.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from fleetscope import contract as c
from fleetscope import hardware
from fleetscope.errors import FleetscopeError
from fleetscope.simulate.jobs import Job, RealisticModel
from fleetscope.simulate.model import SimSeries
from fleetscope.simulate.spec import (
    CORES_PER_DEVICE,
    NEURON_FAULT_KINDS,
    NEURON_SHARED_KINDS,
    FaultSpec,
    ScenarioSpec,
    check_no_inference_faults,
)
from fleetscope.simulate.truth import realistic_truth

DEVICE_TYPE = "trainium2"
#: HBM of one Trainium2 device (neuron_hardware_info.neuron_device_memory_size).
DEVICE_MEMORY_BYTES = 96 << 30
INSTANCE_TYPE = "trn2.48xlarge"
#: p50 latency of one execution (one compiled graph) of a healthy core, in seconds.
LATENCY_S = 0.040
_HANG_EXTRA = [("job_hang", "hang", "job", False), ("mfu_drop", "hang", "job", False)]
#: Per fault kind: (finding kind, cause, scope, required), as ``fleetscope.simulate.truth.EXPECT``.
NEURON_EXPECT: dict[str, list[tuple[str, str, str, bool]]] = {
    "neuron_ecc": [("failing_node", "ecc_uncorrectable", "gpu", True), *_HANG_EXTRA],
    "neuron_device_lost": [("failing_node", "device_missing", "gpu", True), *_HANG_EXTRA],
    "neuron_slow": [
        ("straggler", "slow_execution", "node", True),
        ("straggler", "unknown", "node", False),
        ("straggler", "unknown", "gpu", False),
        ("mfu_drop", "straggler", "job", False),
    ],
    "efa_degraded": [("straggler", "network", "node", True), ("mfu_drop", "network", "job", False)],
    "data_slow": [("straggler", "data_loading", "node", True), ("mfu_drop", "data_loading", "job", False)],
    "node_drain": [("membership_change", "node_drain", "node", False)],
    "scrape_gap": [("monitoring_gap", "scrape_gap", "node", False)],
}


class NeuronModel(RealisticModel):
    """The realistic model's jobs on Trainium2 nodes: see the module docstring."""

    def _init_jobs(self) -> None:
        super()._init_jobs()
        n, d = self.n_nodes, self.gpn // CORES_PER_DEVICE
        self.devices = d
        self.peak = hardware.neuron_peak(DEVICE_TYPE).per_core(CORES_PER_DEVICE)  # type: ignore[union-attr]
        self.ecc = {e: np.zeros((n, d)) for e in c.NEURON_ECC_EVENT_TYPES}
        self.device_lost = np.zeros((n, d), dtype=bool)
        self.hw_errors = np.zeros(n)
        self.executions = {s: np.zeros(n) for s in c.NEURON_EXECUTION_STATUSES}
        self.latency = np.full(n, np.nan)
        self.core_util = np.zeros(self.G)
        for f in self.spec.faults:
            if f.kind in ("neuron_ecc", "neuron_device_lost"):
                job = self._job_at(f.node)
                if job is None:
                    raise FleetscopeError(f"{f.kind} on node {f.node}, which runs no job")
                job.events.append((f.at_s, f))
        for job in self.jobs:
            job.events.sort(key=lambda e: e[0])

    # ------------------------------------------------------------------ faults
    def _apply(self, job: Job, f: FaultSpec) -> None:
        if f.kind not in ("neuron_ecc", "neuron_device_lost"):
            super()._apply(job, f)
            return
        if job.state != "run":
            return
        # The job hangs in its collectives like after any lost rank (no GPU-side cause).
        super()._apply(job, dataclasses.replace(f, kind="hang", cause="efa"))
        job.hang = f
        dev = f.gpu // CORES_PER_DEVICE
        cores = slice(
            f.node * self.gpn + dev * CORES_PER_DEVICE, f.node * self.gpn + (dev + 1) * CORES_PER_DEVICE
        )
        self.hw_errors[f.node] += 1
        if f.kind == "neuron_ecc":
            self.ecc["mem_ecc_uncorrected"][f.node, dev] += 1
            self.r_alive[f.node * self.gpn + f.gpu] = False
        else:
            self.device_lost[f.node, dev] = True
            self.vanished[cores] = True
            self.r_alive[cores] = False

    def _io_fault(self, eff: dict, f: FaultSpec) -> None:
        if f.kind == "neuron_slow":
            eff["slow"][f.node * self.gpn : (f.node + 1) * self.gpn] = 1 + f.slowdown
            return
        super()._io_fault(eff, f)

    # ------------------------------------------------------------------ gauges
    def _gauges(self, eff: dict, dt: float, sdt: float) -> None:
        super()._gauges(eff, dt, sdt)
        span = sdt if sdt > 0 else 1.0
        train = self.acc["train"] / span
        self.core_util = np.clip(0.99 * train + self.acc["hang"] / span, 0, 1)
        node_train = np.zeros(self.n_nodes)
        np.add.at(node_train, self.slot_node, train / self.gpn)
        slow = np.zeros(self.n_nodes)
        np.add.at(slow, self.slot_node, eff["slow"] / self.gpn)
        noise = 1 + self.rng.normal(0, 0.01, self.n_nodes)
        self.latency = np.where(node_train > 0.05, LATENCY_S * slow * noise, np.nan)
        if dt > 0:
            done = node_train * dt / LATENCY_S
            self.executions["completed"] += np.floor(done)
            self.ecc["mem_ecc_corrected"] += self.rng.random((self.n_nodes, self.devices)) < 0.001

    # ------------------------------------------------------------------ series
    def series(self) -> dict[str, SimSeries]:
        out = {k: v for k, v in super().series().items() if k not in _GPU_NAMES}
        self._neuron_series(out)
        if self.missing_nodes:
            hosts = {self.hostnames[n] for n in self.missing_nodes}
            for name in _NEURON_NAMES:
                s = out.get(name)
                if s is not None and s.keys:
                    i = s.labels.index(c.NODE_LABEL)
                    mask = np.array([k[i] in hosts for k in s.keys])
                    s.values = np.where(mask, np.nan, s.values)
        return out

    def _instance(self, n: int) -> tuple[str, ...]:
        return ("", f"i-0{n:016x}", INSTANCE_TYPE, "us-east-2b", "us-east-2", "subnet-112233ee")

    def _neuron_series(self, out: dict[str, SimSeries]) -> None:
        sl = self._scrape_names()
        nodes = [n for n in range(self.n_nodes) if self.node_present[n]]
        ver = tuple(nodes)
        node_keys = self._cached(
            "n_node", ver, lambda: [(self.hostnames[n], *self._scrape(n)) for n in nodes]
        )
        out[c.NEURON_DEVICES] = SimSeries(
            (c.NODE_LABEL, *sl),
            node_keys,
            np.array([self.devices - self.device_lost[n].sum() for n in nodes], float),
        )
        self._core_series(out, nodes, sl)
        self._device_series(out, nodes, sl)
        self._runtime_series(out, nodes, sl)

    def _core_series(self, out: dict[str, SimSeries], nodes: list[int], sl: tuple[str, ...]) -> None:
        slots = [s for n in nodes for s in range(n * self.gpn, (n + 1) * self.gpn) if not self.vanished[s]]
        ver = tuple(slots)

        def core_key(s: int) -> tuple[str, ...]:
            n, core = int(self.slot_node[s]), int(self.slot_gpu[s])
            return (
                *self._instance(n),
                "train",
                self.hostnames[n],
                str(core),
                str(core // CORES_PER_DEVICE),
                "",
                "",
                "",
                "",
                *self._scrape(n),
            )

        keys = self._cached("n_core", ver, lambda: [core_key(s) for s in slots])
        out[c.NEURONCORE_UTILIZATION] = SimSeries(
            c.NEURON_CORE_LABELS + sl, keys, np.round(self.core_util[slots], 4)
        )

        def peak_key(s: int, dtype: str) -> tuple[str, ...]:
            n, core = int(self.slot_node[s]), int(self.slot_gpu[s])
            return (
                str(core),
                "",
                "",
                f"neuron{core // CORES_PER_DEVICE}",
                f"{DEVICE_TYPE} NeuronCore",
                self.hostnames[n],
                "",
                dtype,
                *self._scrape(n),
            )

        dtypes = sorted(self.peak)
        pkeys = self._cached("n_peak", ver, lambda: [peak_key(s, d) for d in dtypes for s in slots])
        values = np.concatenate([np.full(len(slots), self.peak[d]) for d in dtypes]) if slots else np.zeros(0)
        out[c.GPU_PEAK_FLOPS] = SimSeries(c.GPU_PEAK_FLOPS.labels + sl, pkeys, values)

    def _device_series(self, out: dict[str, SimSeries], nodes: list[int], sl: tuple[str, ...]) -> None:
        rows = [(n, d) for n in nodes for d in range(self.devices) if not self.device_lost[n, d]]
        ver = tuple(rows)
        events = c.NEURON_ECC_EVENT_TYPES

        def key(n: int, d: int, e: str) -> tuple[str, ...]:
            return (*self._instance(n), self.hostnames[n], str(d), e, *self._scrape(n))

        keys = self._cached("n_ecc", ver, lambda: [key(n, d, e) for e in events for n, d in rows])
        values = np.concatenate([np.array([self.ecc[e][n, d] for n, d in rows]) for e in events])
        out[c.NEURON_HW_ECC_EVENTS] = SimSeries(c.NEURON_HW_ECC_EVENTS.labels + sl, keys, values)
        hw_keys = self._cached(
            "n_hw",
            tuple(nodes),
            lambda: [
                (
                    *self._instance(n),
                    self.hostnames[n],
                    str(self.devices),
                    str(CORES_PER_DEVICE),
                    DEVICE_TYPE,
                    "v3d",
                    str(DEVICE_MEMORY_BYTES),
                    *self._scrape(n),
                )
                for n in nodes
            ],
        )
        out[c.NEURON_HARDWARE_INFO] = SimSeries(
            c.NEURON_HARDWARE_INFO.labels + sl, hw_keys, np.ones(len(nodes))
        )

    def _runtime_series(self, out: dict[str, SimSeries], nodes: list[int], sl: tuple[str, ...]) -> None:
        def base(n: int) -> tuple[str, ...]:
            return (*self._instance(n), "train", self.hostnames[n])

        ver = tuple(nodes)
        err_keys = self._cached(
            "n_err",
            ver,
            lambda: [(*base(n), e, *self._scrape(n)) for e in c.NEURON_ERROR_TYPES for n in nodes],
        )
        errs = np.concatenate(
            [self.hw_errors[nodes] if e == "hardware" else np.zeros(len(nodes)) for e in c.NEURON_ERROR_TYPES]
        )
        out[c.NEURON_EXECUTION_ERRORS] = SimSeries(c.NEURON_EXECUTION_ERRORS.labels + sl, err_keys, errs)
        st_keys = self._cached(
            "n_st",
            ver,
            lambda: [(*base(n), s, *self._scrape(n)) for s in c.NEURON_EXECUTION_STATUSES for n in nodes],
        )
        status = np.concatenate([self.executions[s][nodes] for s in c.NEURON_EXECUTION_STATUSES])
        out[c.NEURON_EXECUTION_STATUS] = SimSeries(c.NEURON_EXECUTION_STATUS.labels + sl, st_keys, status)
        lat_keys = self._cached(
            "n_lat", ver, lambda: [(*base(n), p, *self._scrape(n)) for p in ("p50", "p99") for n in nodes]
        )
        lat = np.concatenate([np.round(self.latency[nodes] * k, 6) for k in (1.0, 1.15)])
        out[c.NEURON_EXECUTION_LATENCY] = SimSeries(c.NEURON_EXECUTION_LATENCY.labels + sl, lat_keys, lat)


#: The GPU collector's series, which a Trainium node does not have.
_GPU_NAMES = frozenset(m for m in c.metrics_by_origin("gpu") if m != c.GPU_PEAK_FLOPS)
_NEURON_NAMES = (
    c.NEURON_DEVICES,
    c.NEURONCORE_UTILIZATION,
    c.GPU_PEAK_FLOPS,
    c.NEURON_HW_ECC_EVENTS,
    c.NEURON_HARDWARE_INFO,
    c.NEURON_EXECUTION_ERRORS,
    c.NEURON_EXECUTION_STATUS,
    c.NEURON_EXECUTION_LATENCY,
)


def neuron_truth(spec: ScenarioSpec, goodput: dict[str, dict[str, float]] | None = None) -> dict[str, Any]:
    """The ground truth of a neuron-family spec (:data:`NEURON_EXPECT`)."""
    return realistic_truth(spec, goodput, lambda f: NEURON_EXPECT[f.kind])


def check_neuron_spec(spec: ScenarioSpec) -> None:
    """The neuron family's own rules: whole Trainium2 devices, its faults and the shared ones."""
    check_no_inference_faults(spec)
    if spec.gpus_per_node % CORES_PER_DEVICE:
        raise FleetscopeError(f"neuron: gpus_per_node (NeuronCores) must be a multiple of {CORES_PER_DEVICE}")
    bad = sorted({f.kind for f in spec.faults} - set(NEURON_FAULT_KINDS) - NEURON_SHARED_KINDS)
    if bad:
        raise FleetscopeError(f"{', '.join(bad)}: not for the neuron family")
