"""Small hand-built windows for the detector tests: a few ranks and GPUs, every number in plain sight.

A :class:`Cluster` is one synchronous training job on ``nodes`` x ``gpus`` GPUs, one rank per GPU,
sampled on a 15 s grid. Every rank starts healthy: ``steps_per_tick`` steps per grid step, the
phase seconds of :data:`PER_STEP` per step with a little independent jitter, GPUs busy at their
full SM clock. A test changes the per-grid-step arrays of the ranks, GPUs and EFA devices it needs
(one rank's forward time, a GPU's clock and clock-event bits, every rank's step count) and calls
:meth:`Cluster.frames`, which turns them into the counters and gauges the exporter would serve
(cumulative ``training_*_total`` counters, ``DCGM_FI_*`` gauges, ``efa_*_total`` counters) and
puts them on the grid with :func:`fleetscope.window.frames.build_frames`, as the loaders do.

NaN in a per-grid-step array, or False in ``present``, means the series has no sample there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fleetscope import contract as c
from fleetscope.window.frames import Frames, RawSeries, build_frames

STEP = 15.0
#: 2026-01-01T00:00:00Z.
START = 1_767_225_600.0
#: Seconds per training step of each phase on a healthy rank (3 s a step).
PER_STEP: dict[str, float] = {"data": 0.1, "forward": 1.0, "backward": 1.8, "optimizer": 0.1}
CLOCK_MHZ = 1980.0
TOKENS_PER_STEP = 8192.0


@dataclass
class Rank:
    """One rank's per-grid-step increments: steps completed and seconds per phase."""

    job: str
    rank: int
    node: str
    gpu: str
    steps: np.ndarray
    phases: dict[str, np.ndarray]
    present: np.ndarray
    tokens_per_step: float = TOKENS_PER_STEP


@dataclass
class Gpu:
    """One GPU's gauges per grid step."""

    node: str
    gpu: str
    clock: np.ndarray
    util: np.ndarray
    reasons: np.ndarray
    up: np.ndarray
    present: np.ndarray
    #: DCGM_FI_PROF_PIPE_TENSOR_ACTIVE (0-1); None: not served (no DCGM profiling metrics).
    tensor: np.ndarray | None = None


@dataclass
class Efa:
    """One EFA device's per-grid-step counter increments."""

    node: str
    device: str
    tx_pkts: np.ndarray
    retrans_pkts: np.ndarray
    retrans_timeout_events: np.ndarray
    present: np.ndarray


@dataclass
class Cluster:
    """One job on ``nodes`` x ``gpus`` GPUs over ``minutes`` (see the module docstring)."""

    nodes: int = 2
    gpus: int = 8
    minutes: float = 60.0
    job: str = "job-a"
    steps_per_tick: float = 5.0
    jitter: float = 0.01
    seed: int = 0
    efa: bool = False
    ranks: list[Rank] = field(init=False)
    gpu_list: list[Gpu] = field(init=False)
    efa_list: list[Efa] = field(init=False)
    #: (job, rank) -> pipeline stage, written on ``training_info`` when set.
    layout: dict[tuple[str, int], int] = field(default_factory=dict)
    #: Further series of one GPU, served as given: (metric, labels, value per grid step; NaN: none).
    extra: list[tuple[str, dict[str, str], np.ndarray]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.times = START + STEP * np.arange(round(self.minutes * 60 / STEP) + 1)
        rng = np.random.default_rng(self.seed)
        T = len(self.times)
        self.ranks, self.gpu_list, self.efa_list = [], [], []
        for n in range(self.nodes):
            node = self.node(n)
            for g in range(self.gpus):
                steps = np.full(T, self.steps_per_tick)
                phases = {
                    ph: steps * s * (1 + self.jitter * rng.standard_normal(T)) for ph, s in PER_STEP.items()
                }
                self.ranks.append(
                    Rank(self.job, n * self.gpus + g, node, str(g), steps, phases, np.ones(T, dtype=bool))
                )
                self.gpu_list.append(
                    Gpu(
                        node,
                        str(g),
                        np.full(T, CLOCK_MHZ),
                        np.full(T, 100.0),
                        np.zeros(T),
                        np.ones(T),
                        np.ones(T, dtype=bool),
                    )
                )
            if self.efa:
                self.efa_list.append(
                    Efa(
                        node,
                        "rdmap16s27",
                        np.full(T, 2e6),
                        np.full(T, 10.0),
                        np.zeros(T),
                        np.ones(T, dtype=bool),
                    )
                )

    # ------------------------------------------------------------------ addressing
    @staticmethod
    def node(n: int) -> str:
        return f"node-{n}"

    def tick(self, minute: float) -> int:
        """The grid index of ``minute`` into the window."""
        return round(minute * 60 / STEP)

    def between(self, m0: float, m1: float | None = None) -> np.ndarray:
        """Boolean per grid time: from minute ``m0`` (inclusive) to ``m1`` (exclusive; None = the end)."""
        i = np.arange(len(self.times))
        return (i >= self.tick(m0)) & (i < (len(self.times) if m1 is None else self.tick(m1)))

    def rank(self, k: int) -> Rank:
        return self.ranks[k]

    def gpu(self, n: int, g: int) -> Gpu:
        return self.gpu_list[n * self.gpus + g]

    # ------------------------------------------------------------------ common changes
    def stop_stepping(self, when: np.ndarray, util: float | None = None, eval_s: float = 0.0) -> None:
        """No rank completes a step in ``when``; the ranks still report. ``eval_s``: eval seconds per tick."""
        for r in self.ranks:
            r.steps[when] = 0.0
            for v in r.phases.values():
                v[when] = 0.0
            if eval_s:
                r.phases.setdefault("eval", np.zeros(len(self.times)))[when] = eval_s
        if util is not None:
            for g in self.gpu_list:
                g.util[when] = util

    def absent(self, node: int, when: np.ndarray) -> None:
        """Every series of ``node`` (GPU and training) has no sample in ``when`` (an unscraped exporter)."""
        for r in self.ranks:
            if r.node == self.node(node):
                r.present[when] = False
        for g in self.gpu_list:
            if g.node == self.node(node):
                g.present[when] = False
        for e in self.efa_list:
            if e.node == self.node(node):
                e.present[when] = False

    def gpu_series(self, name: str, n: int, g: int, values: np.ndarray, **labels: str) -> None:
        """Serve ``values`` (per grid step, NaN: no sample) as series ``name`` of GPU ``g`` on node ``n``."""
        gpu = self.gpu(n, g)
        lab = {"gpu": gpu.gpu, "UUID": f"GPU-{gpu.node}-{gpu.gpu}", c.NODE_LABEL: gpu.node, **labels}
        self.extra.append((name, lab, np.asarray(values, dtype=float)))

    # ------------------------------------------------------------------ frames
    def frames(self) -> Frames:
        raw: dict[str, list[RawSeries]] = {}

        def put(name: str, labels: dict[str, str], values: np.ndarray, present: np.ndarray) -> None:
            v = np.where(present & np.isfinite(values), values, np.nan)
            raw.setdefault(name, []).append(RawSeries(labels, self.times.copy(), v))

        def counter(name: str, labels: dict[str, str], inc: np.ndarray, present: np.ndarray) -> None:
            # A counter keeps counting while unscraped: the next sample holds the whole gap.
            put(name, labels, 1000.0 + np.cumsum(np.nan_to_num(inc)), present)

        for r in self.ranks:
            lab = {
                "job_id": r.job,
                "rank": str(r.rank),
                "local_rank": r.gpu,
                c.NODE_LABEL: r.node,
                "gpu": r.gpu,
            }
            counter(c.TRAINING_STEPS, lab, r.steps, r.present)
            for ph, v in r.phases.items():
                counter(c.TRAINING_PHASE_SECONDS, {**lab, "phase": ph}, v, r.present)
            wall = sum(v for ph, v in r.phases.items() if ph not in c.PAUSE_PHASES)
            counter(c.TRAINING_STEP_SECONDS, lab, wall, r.present)
            counter(c.TRAINING_TOKENS, lab, r.steps * r.tokens_per_step, r.present)
            info = dict(lab, flops_convention="palm")
            if (r.job, r.rank) in self.layout:
                info[c.PIPELINE_STAGE_LABEL] = str(self.layout[(r.job, r.rank)])
            put(c.TRAINING_INFO, info, np.ones(len(self.times)), r.present)
        for g in self.gpu_list:
            lab = {
                "gpu": g.gpu,
                "UUID": f"GPU-{g.node}-{g.gpu}",
                "modelName": "NVIDIA H100 80GB HBM3",
                c.NODE_LABEL: g.node,
            }
            put(c.DCGM_FI_DEV_SM_CLOCK, lab, g.clock, g.present)
            put(c.DCGM_FI_DEV_GPU_UTIL, lab, g.util, g.present)
            put(c.DCGM_FI_DEV_CLOCKS_EVENT_REASONS, lab, g.reasons, g.present)
            put(c.GPU_UP, lab, g.up, g.present)
            if g.tensor is not None:
                put(c.DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, lab, g.tensor, g.present)
        for name, lab, values in self.extra:
            put(name, lab, values, np.ones(len(self.times), dtype=bool))
        for e in self.efa_list:
            lab = {c.NODE_LABEL: e.node, "device": e.device, "port": "1"}
            counter(c.EFA_TX_PKTS, lab, e.tx_pkts, e.present)
            counter(c.EFA_RETRANS_PKTS, lab, e.retrans_pkts, e.present)
            counter(c.EFA_RETRANS_TIMEOUT_EVENTS, lab, e.retrans_timeout_events, e.present)
        return build_frames(
            raw, float(self.times[0]), float(self.times[-1]), STEP, source="hand-built", gridded=True
        )
