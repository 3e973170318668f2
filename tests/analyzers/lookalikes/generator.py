"""An independent generator of small recordings that look like real clusters, for red-teaming the analyzers.

It shares nothing with ``fleetscope.simulate``'s models (written beside the detectors, so they share
their assumptions); only the file layout comes from ``fleetscope.simulate.record.write_samples``.
Everything is built from plain numpy arrays, one row per scrape, one column per GPU or rank, and
turned into the exporter's cumulative counters and gauges:

* synchronous data-parallel steps: every rank's own work (data, forward, backward, host optimizer
  work) differs, the collective ends when the slowest arrives, and host-side timers put the wait in
  ``backward`` (DDP) or in ``forward`` and ``backward`` (FSDP all-gathers); counters move in whole
  steps, so a step longer than the scrape interval leaves some scrapes without a step;
* per-interval jitter, per-GPU speed spread, periodic blocking checkpoints counted in the
  ``checkpoint`` phase, each node scraped at its own offset within the interval with a little jitter;
* the things real clusters do that the project's simulator does not: other scrape intervals,
  exporter restarts (counters from 0), HA Prometheus pairs, one collector failing, SW power capping
  all the time, jobs that start or end mid-window, mixed GPU models, node replacement, kernel panics;
  round 3: 5 s scrapes, windows that open inside a hang or after a GPU was lost, dcgm-exporter
  alone (the XID gauge, no fleetscope_gpu_* series), jobs without phase timers or without any
  training telemetry, every series scraped twice by two scrape jobs, very short windows,
  aggressive checkpointing and a warm-up that speeds the job up.

A case is a :class:`Cluster` with jobs and events, plus what the analyzers must and must not report.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fleetscope.simulate.record import write_samples

GPUS = 8
T0 = 1_780_000_000.0  # window start (Unix seconds), a whole minute
MIN = 60.0

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class GpuModel:
    name: str
    sm_clock: float  # MHz at full boost under load
    idle_clock: float
    peak_bf16: float  # dense FLOP/s
    tdp: float  # W


H100 = GpuModel("NVIDIA H100 80GB HBM3", 1980.0, 345.0, 989e12, 700.0)
A100 = GpuModel("NVIDIA A100-SXM4-80GB", 1410.0, 210.0, 312e12, 400.0)


@dataclass
class Segment:
    """One run of a job's processes: counters start from 0 at ``start_s``."""

    start_s: float
    end_s: float
    nodes: list[int]  # node indices, 8 ranks each, in rank order
    step_s: float | None = None  # this run's step (elastic rescaling changes it); None: the job's


@dataclass
class Job:
    job_id: str
    segments: list[Segment]
    step_s: float = 5.0
    fsdp: bool = False  # the fast ranks' wait shows in forward (all-gather) too
    rank0_host_extra: float = 0.0  # share of the step rank 0 spends on extra host work
    ckpt_every_s: float = 600.0
    ckpt_s: float = 40.0
    startup_s: float = 60.0  # loading the checkpoint after a (re)start: no steps
    epoch_at_s: list[float] = field(default_factory=list)  # data phase spikes on every rank
    epoch_spike_s: float = 60.0
    hangs: list[tuple[float, float]] = field(default_factory=list)  # no steps, GPUs spin at 100%
    idle: list[tuple[float, float]] = field(default_factory=list)  # no steps, processes up, GPUs idle
    mfu: float = 0.40
    # --- round 2: parallel layouts and workloads the data-parallel model above does not have ---
    #: Pipeline stages (PP). Nodes are ordered TP (the node's 8 GPUs), then DP, then PP (Megatron's
    #: order), so stage = node position // (nodes / stages) and replica = node position % DP.
    stages: int = 1
    stage_cost: tuple[float, ...] = ()  # compute factor per stage (embedding, loss layer heavier)
    microbatches: int = 12  # 1F1B: pipe time = (m - 1) / m * slowest stage + sum of stages / m
    report_layout: bool = False  # training_info carries pipeline_stage
    #: TP=8 inside a node: every layer all-reduces over the node's GPUs (CUDA-time), so every rank
    #: of the node takes as long as its slowest GPU; only tensor activity says which GPU is busy.
    tp_sync: bool = False
    rank_jitter: float = 0.0  # extra per-step, per-rank compute noise (relative)
    moe_hot: float = 0.0  # MoE: a rank with a hot expert on a step does this much more compute
    #: Checkpoint written by local rank 0 of each node only: the others count a quarter of the save in
    #: ``checkpoint`` and wait the rest in a barrier that their next step's forward absorbs.
    ckpt_local_writers: bool = False
    # --- round 3 ---
    phases: bool = True  # False: the job exports no training_phase_seconds_total (steps, tokens only)


@dataclass
class Cluster:
    """Nodes x 8 GPUs over ``duration_s``, scraped every ``scrape_s``; faults are edits of its arrays."""

    n_nodes: int
    duration_s: float = 40 * MIN
    scrape_s: float = 15.0
    seed: int = 0
    models: list[GpuModel] | None = None  # one per node (default H100)
    node_names: list[str] | None = None
    jobs: list[Job] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        self.t = np.arange(0.0, self.duration_s + 1e-9, self.scrape_s)
        K, N = len(self.t), self.n_nodes
        G = N * GPUS
        self.names = self.node_names or [f"node-{i}" for i in range(N)]
        self.model = self.models or [H100] * N
        self.speed = 1.0 + self.rng.normal(0.0, 0.012, G)  # compute time factor per GPU (few % spread)
        self.slow = np.ones((K, G))  # compute time multiplier (fault)
        self.clock_f = np.ones((K, G))  # SM clock multiplier (fault)
        self.bits = np.zeros((K, G), dtype=np.int64)  # extra clock-event reason bits (fault)
        self.temp_add = np.zeros((K, G))
        self.thermal_viol = np.zeros((K, G))  # share of the interval throttled (thermal violation)
        self.sw_power_cap_all = False
        self.absent: dict[str, np.ndarray] = {
            k: np.zeros((K, N), dtype=bool) for k in ("gpu", "train", "efa", "lustre")
        }
        self.resets: list[tuple[int, float]] = []  # (node, t): the node's exporter restarts
        self.xids: list[tuple[int, int, int, float]] = []  # (node, gpu, xid, t)
        self.gpu_down: list[tuple[int, int, float]] = []
        self.net_extra = np.zeros((K, G))  # own host-visible comm time (share of step) in the optimizer
        self.efa_retrans = np.zeros((K, N))  # extra retransmit ratio per node (a bad NIC)
        self.dbe = np.zeros((K, G))  # DCGM_FI_DEV_ECC_DBE_VOL_TOTAL
        self.remap_pending = np.zeros((K, G))  # DCGM_FI_DEV_ROW_REMAP_PENDING (emitted when any)
        self.correctable_remapped = np.zeros((K, G))
        self._stage_of: dict[tuple[str, int], int] = {}
        self.replicas = 0  # 2: an HA Prometheus pair (label replica a/b); -2: both merged, no label
        self.node_offset = self.rng.uniform(0.0, 0.8 * self.scrape_s, N)
        # --- round 3 ---
        self.power_viol = np.zeros((K, G))  # share of the interval power-braked (power violation)
        self.gpu_absent = np.zeros((K, G), dtype=bool)  # one GPU's series missing (not the node's)
        #: dcgm-exporter alone: the XID is its DCGM_FI_DEV_XID_ERRORS gauge (the last XID, held), and
        #: there is no fleetscope_gpu_* series (no gpu_up, no xid counter, no peak FLOP/s).
        self.dcgm_only = False
        #: Two scrape jobs scrape every exporter: each series twice, with other ``job``/``instance``.
        self.dup_scrape = False

    # ------------------------------------------------------------------ helpers for cases
    def k(self, t_s: float) -> int:
        return int(np.searchsorted(self.t, t_s - 1e-9))

    def gcol(self, node: int, gpu: int) -> int:
        return node * GPUS + gpu

    def vanish(
        self,
        node: int,
        t_from: float,
        t_to: float | None = None,
        what: tuple[str, ...] = ("gpu", "train", "efa", "lustre"),
    ) -> None:
        a, b = self.k(t_from), (len(self.t) if t_to is None else self.k(t_to))
        for w in what:
            self.absent[w][a:b, node] = True

    # ------------------------------------------------------------------ the model
    def build(self) -> dict[str, dict[Labels, tuple[np.ndarray, np.ndarray]]]:
        K, N = len(self.t), self.n_nodes
        G = N * GPUS
        rng = self.rng
        # Per-GPU activity over time: 0 idle, 1 training, 2 checkpoint, 3 hang, 4 startup.
        state = np.zeros((K, G), dtype=np.int8)
        busy = np.zeros((K, G))  # own compute share of the step (tensor activity, power)
        out: dict[str, dict[Labels, tuple[np.ndarray, np.ndarray]]] = {}
        train: list[tuple[Job, int, int, int, dict[str, np.ndarray]]] = []  # job, rank, node, gpu, counters
        for job in self.jobs:
            self._run_job(job, state, busy, train, rng)
        self._gpu_series(out, state, busy, rng)
        self._efa_lustre(out, state, rng)
        for job, rank, node, gpu, cnt in train:
            lab = self._rank_labels(job.job_id, rank, node, gpu)
            m = ~np.isnan(cnt["steps"])
            m &= ~self.absent["train"][:, node]
            for name, key in (
                ("training_steps_total", "steps"),
                ("training_step_seconds_total", "step_s"),
                ("training_tokens_total", "tokens"),
                ("training_model_flops_total", "flops"),
            ):
                self._put(out, name, lab, node, cnt[key], m, counter=True)
            for ph in ("data", "forward", "backward", "optimizer", "checkpoint") if job.phases else ():
                self._put(
                    out,
                    "training_phase_seconds_total",
                    lab + (("phase", ph),),
                    node,
                    cnt[ph],
                    m,
                    counter=True,
                )
            info = lab + (("flops_convention", "megatron"),)
            if job.report_layout:
                info += (("pipeline_stage", str(self._stage_of[(job.job_id, rank)])),)
            self._put(out, "training_info", info, node, np.ones(K), m, counter=False)
        return out

    def _run_job(self, job: Job, state, busy, train, rng) -> None:
        K = len(self.t)
        dt = self.scrape_s
        for seg in job.segments:
            cols = [self.gcol(n, g) for n in seg.nodes for g in range(GPUS)]
            R = len(cols)
            model = self.model[seg.nodes[0]]
            live = (self.t >= seg.start_s) & (self.t < seg.end_s)
            st = np.where(live, 1, 0).astype(np.int8)
            since = self.t - seg.start_s
            st[live & (since < job.startup_s)] = 4
            tr = live & (since >= job.startup_s)
            ck_phase = (since - job.startup_s) % job.ckpt_every_s
            ck = tr & (since - job.startup_s >= job.ckpt_every_s - 1) & (ck_phase < job.ckpt_s)
            st[ck] = 2
            for a, b in job.hangs:
                st[live & (self.t >= a) & (self.t < b)] = 3
            for a, b in job.idle:
                st[live & (self.t >= a) & (self.t < b)] = 5
            # Per-interval own work of every rank (seconds per step).
            S0 = seg.step_s or job.step_s
            n_per = max(1.0, dt / S0)  # steps averaged into one scrape interval
            jit = 0.02 / np.sqrt(n_per)
            common = 1.0 + rng.normal(0.0, jit, (K, 1))
            comp = 0.78 * S0 * self.speed[cols][None, :] * self.slow[:, cols] * common
            comp = comp * (1.0 + rng.normal(0.0, 0.6 * jit, (K, R)))
            data = 0.03 * S0 * (1.0 + 0.15 * rng.standard_normal((K, R)).clip(-2, 2))
            for e in job.epoch_at_s:
                spike = (self.t >= e) & (self.t < e + job.epoch_spike_s)
                data[spike] += 0.8 * S0 * (1.0 + 0.1 * rng.standard_normal((int(spike.sum()), R)))
            opt = np.full((K, R), 0.05 * S0) * (1.0 + 0.05 * rng.standard_normal((K, R)))
            if job.rank0_host_extra:
                opt[:, 0] += job.rank0_host_extra * S0
            stage = np.array([self._stage(job, r, len(seg.nodes)) for r in range(R)])
            gpu_comp, comp = _workload(job, comp, stage, n_per, rng)
            pipe, fwd_pp = self._pipeline(job, comp, stage, len(seg.nodes))
            extra = self.net_extra[:, cols] * S0
            comm = 0.10 * S0
            own = data + pipe + opt + extra
            S = own.max(axis=1, keepdims=True) + comm  # the collective ends when the slowest arrives
            wait = S - own - comm
            wait_pp = pipe - comp
            fwd_share = 0.4 if (job.fsdp or job.moe_hot) else 0.0
            per_step = {
                "data": data,
                "forward": comp / 3 + fwd_pp * wait_pp + fwd_share * (wait + 0.5 * comm),
                "backward": 2 * comp / 3 + (1 - fwd_pp) * wait_pp + (1 - fwd_share) * (wait + 0.5 * comm),
                "optimizer": opt + extra + 0.5 * comm,
            }
            # Progress in whole steps; each node is scraped at its own offset within the interval.
            rate_ = np.where(st == 1, 1.0 / S[:, 0], 0.0)
            prog = np.concatenate([[0.0], np.cumsum(rate_[:-1] * dt)])  # steps done at each scrape
            ckpt_time = np.concatenate([[0.0], np.cumsum((st[:-1] == 2) * dt)])
            ends = _save_ends(st, dt)
            for r in range(R):
                node, gpu = seg.nodes[r // GPUS], r % GPUS
                off = self.node_offset[node] / dt
                p = prog + off * np.concatenate([np.diff(prog), [0.0]])
                steps = np.floor(p + 1e-9)
                inc = np.diff(np.concatenate([[0.0], steps]))
                cnt = {"steps": steps}
                for ph, x in per_step.items():
                    cnt[ph] = np.cumsum(inc * x[:, r])
                cnt["checkpoint"] = ckpt_time.copy()
                if job.ckpt_local_writers and gpu != 0:
                    cnt["checkpoint"] = 0.25 * ckpt_time
                    lump = _barrier_lumps(ends, inc)
                    cnt["forward"] = cnt["forward"] + np.cumsum(lump)
                cnt["step_s"] = np.cumsum(inc * S[:, 0])
                tok = 8192 * 4
                cnt["tokens"] = steps * tok
                cnt["flops"] = np.cumsum(inc * job.mfu * model.peak_bf16 * S0)
                for key in cnt:
                    cnt[key] = np.where(live, cnt[key], np.nan)
                self._stage_of[(job.job_id, r)] = int(stage[r])
                train.append((job, r, node, gpu, cnt))
            for j, c in enumerate(cols):
                state[live, c] = st[live]
                busy[live, c] = (gpu_comp[:, j] / S[:, 0])[live]

    @staticmethod
    def _stage(job: Job, rank: int, n_nodes: int) -> int:
        return (rank // GPUS) // max(1, n_nodes // job.stages)

    @staticmethod
    def _pipeline(
        job: Job, comp: np.ndarray, stage: np.ndarray, n_nodes: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """1F1B pipe time of each rank's replica and the share of its pipeline wait shown in forward.

        A stage waits for the slowest stage of its replica: downstream of it, for gradients
        (backward); upstream, for activations (forward); the slowest stage itself waits only in the
        warm-up bubble, in forward. Without PP the pipe is the rank's own compute and no wait.
        """
        if job.stages <= 1:
            return comp, np.zeros_like(comp)
        K, R = comp.shape
        p, m = job.stages, job.microbatches
        dp = n_nodes // p
        rep_ = (np.arange(R) // GPUS) % dp
        pipe, fwd = np.zeros((K, R)), np.zeros((K, R))
        for d in range(dp):
            cs = np.stack([comp[:, (rep_ == d) & (stage == s)].max(axis=1) for s in range(p)], axis=1)
            t = (m - 1) / m * cs.max(axis=1) + cs.sum(axis=1) / m
            bott = cs.argmax(axis=1)
            for s in range(p):
                sel = (rep_ == d) & (stage == s)
                pipe[:, sel] = t[:, None]
                f = np.where(bott < s, 1.0, np.where(bott > s, 0.0, 1.0))
                fwd[:, sel] = f[:, None]
        return pipe, fwd

    def _gpu_labels(self, node: int, gpu: int) -> Labels:
        m = self.model[node]
        crc = zlib.crc32(self.names[node].encode()) % 10**12
        uuid = f"GPU-{self.seed:04x}{node:04x}-{gpu:04x}-4c1e-9a2b-{crc:012d}"
        return (
            ("gpu", str(gpu)),
            ("UUID", uuid),
            ("pci_bus_id", f"00000000:{0x18 + 0x10 * gpu:02X}:00.0"),
            ("device", f"nvidia{gpu}"),
            ("modelName", m.name),
            ("Hostname", self.names[node]),
            ("DCGM_FI_DRIVER_VERSION", "550.127.05"),
        )

    def _rank_labels(self, job_id: str, rank: int, node: int, gpu: int) -> Labels:
        return (
            ("job_id", job_id),
            ("rank", str(rank)),
            ("local_rank", str(gpu)),
            ("Hostname", self.names[node]),
            ("gpu", str(gpu)),
        )

    def _put(
        self, out, name: str, lab: Labels, node: int, v: np.ndarray, mask: np.ndarray, counter: bool
    ) -> None:
        """Store one series: the node's scrape times, with counter resets at its exporter restarts."""
        v = np.asarray(v, dtype=float).copy()
        mask = mask & ~np.isnan(v)
        if counter:
            for rn, rt in self.resets:
                if rn == node:
                    a = self.k(rt)
                    base = v[a - 1] if a > 0 and not np.isnan(v[a - 1]) else 0.0
                    v[a:] = v[a:] - base
                    mask[a] = False  # the scrape during the restart fails
        if not mask.any():
            return
        t = T0 + self.t + self.node_offset[node] + self._jitter(node)
        series = out.setdefault(name, {})

        def add(key: Labels, tt: np.ndarray, vv: np.ndarray) -> None:
            # A job restart reuses a rank's labels: its new samples continue the same series.
            if key in series:
                tt, vv = np.concatenate([series[key][0], tt]), np.concatenate([series[key][1], vv])
            order = np.argsort(tt, kind="stable")
            series[key] = (tt[order], vv[order])

        if self.replicas == 2:
            for rep, shift in (("a", 0.0), ("b", 1.7)):
                add(lab + (("replica", rep),), t[mask] + shift, v[mask])
        elif self.dup_scrape:
            host = self.names[node]
            for sj, port, shift in (("dcgm", 9400, 0.0), ("gpu-nodes", 9401, 0.9)):
                add(lab + (("job", sj), ("instance", f"{host}:{port}")), t[mask] + shift, v[mask])
        elif self.replicas == -2:
            add(lab, np.concatenate([t[mask], t[mask] + 1.7]), np.concatenate([v[mask], v[mask]]))
        else:
            add(lab, t[mask], v[mask])

    def _jitter(self, node: int) -> np.ndarray:
        if not hasattr(self, "_jit"):
            self._jit = np.round(self.rng.normal(0.0, 0.04, (len(self.t), self.n_nodes)), 3)
        return self._jit[:, node]

    def _gpu_series(self, out, state, busy, rng) -> None:
        K, G = state.shape
        dt = self.scrape_s
        up = np.ones((K, G))
        for n, g, t in self.gpu_down:
            up[self.k(t) :, self.gcol(n, g)] = 0.0
        temp_off = rng.normal(0.0, 3.0, G)
        for c in range(G):
            node, gpu = divmod(c, GPUS)
            m = self.model[node]
            s = state[:, c]
            lab = self._gpu_labels(node, gpu)
            mask = ~self.absent["gpu"][:, node]
            lost = up[:, c] == 0
            training = s == 1
            util = np.select(
                [s == 1, s == 2, s == 3, s == 4],
                [
                    100 - np.abs(rng.normal(0, 1.2, K)),
                    rng.uniform(0, 25, K),
                    100 - np.abs(rng.normal(0, 0.3, K)),
                    rng.uniform(10, 40, K),
                ],
                0.0,
            ).round()
            b = np.where(training, busy[:, c], 0.0)
            power = np.select(
                [s == 1, s == 2, s == 3, s == 4],
                [m.tdp * (0.45 + 0.45 * b), m.tdp * 0.3, m.tdp * 0.42, m.tdp * 0.25],
                m.tdp * 0.11,
            ) * (1 + rng.normal(0, 0.02, K))
            clock = np.where(s == 0, m.idle_clock, m.sm_clock) * self.clock_f[:, c]
            clock = clock * (1 - np.abs(rng.normal(0, 0.003, K)))
            reasons = np.where(s == 0, 0x1, 0).astype(np.int64) | self.bits[:, c]
            pviol = self.power_viol[:, c].copy()
            if self.sw_power_cap_all:
                capped = training
                reasons = np.where(capped, reasons | 0x4, reasons)
                clock = np.where(capped, clock * (0.955 + 0.01 * rng.standard_normal(K)), clock)
                power = np.where(capped, np.minimum(power, m.tdp * 0.99), power)
                pviol = np.where(
                    capped, rng.uniform(0.3, 0.7, K), 0.0
                )  # DCGM counts SW capping as power violation
            else:
                blip = training & (rng.random(K) < 0.01)  # a short SW power cap now and then
                reasons = np.where(blip, reasons | 0x4, reasons)
            clock = np.round(clock)
            temp = (
                32
                + 40 * (util / 100) * (0.6 + 0.4 * b)
                + temp_off[c]
                + self.temp_add[:, c]
                + rng.normal(0, 0.7, K)
            )
            tensor = np.where(training, 0.62 * b * (1 + rng.normal(0, 0.03, K)), 0.0)
            tensor = np.where(s == 2, 0.01, tensor)
            gauges = {
                "DCGM_FI_DEV_SM_CLOCK": clock,
                "DCGM_FI_DEV_GPU_UTIL": util,
                "DCGM_FI_DEV_GPU_TEMP": np.round(temp),
                "DCGM_FI_DEV_POWER_USAGE": np.round(power, 3),
                "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": reasons.astype(float),
                "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": np.round(tensor, 6),
                "DCGM_FI_DEV_PCIE_LINK_WIDTH": np.full(K, 16.0),
                "DCGM_FI_DEV_ROW_REMAP_FAILURE": np.zeros(K),
                "DCGM_FI_DEV_GPU_RECOVERY_ACTION": np.zeros(K),
            }
            mask = mask & ~self.gpu_absent[:, c]
            gmask = mask & ~lost
            for name, v in gauges.items():
                self._put(out, name, lab, node, v, gmask, counter=False)
            self._exporter_own(out, lab, node, gpu, up[:, c], m, mask, gmask)
            # DCGM's violation counters are driver-cumulative (ns); they do not move at exporter restarts.
            for name, share in (
                ("DCGM_FI_DEV_POWER_VIOLATION", pviol),
                ("DCGM_FI_DEV_THERMAL_VIOLATION", self.thermal_viol[:, c]),
            ):
                base = 3.1e12 + 1e9 * c
                v = base + np.concatenate([[0.0], np.cumsum(share[:-1] * dt * 1e9)])
                self._put(out, name, lab, node, np.round(v), gmask, counter=False)
            self._put(out, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", lab, node, self.dbe[:, c], gmask, counter=False)
            self._put(
                out, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", lab, node, np.zeros(K), gmask, counter=False
            )
            if self.remap_pending.any():  # H100 row remapping: pending until the next GPU reset
                self._put(
                    out,
                    "DCGM_FI_DEV_ROW_REMAP_PENDING",
                    lab,
                    node,
                    self.remap_pending[:, c],
                    gmask,
                    counter=False,
                )
                self._put(
                    out,
                    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
                    lab,
                    node,
                    self.correctable_remapped[:, c],
                    gmask,
                    counter=False,
                )
        # XIDs: a series appears at the first occurrence of each code (the exporter's counter).
        for n, g in sorted({(n, g) for n, g, _, _ in self.xids} if not self.dcgm_only else ()):
            for x in sorted({x for nn, gg, x, _ in self.xids if (nn, gg) == (n, g)}):
                v = np.zeros(K)
                for nn, gg, xx, t in self.xids:
                    if (nn, gg, xx) == (n, g, x):
                        v[self.k(t) :] += 1
                lab = self._gpu_labels(n, g) + (("xid", str(x)),)
                first = int(np.nonzero(v > 0)[0][0])
                m = ~self.absent["gpu"][:, n] & (np.arange(K) >= first)
                self._put(out, "fleetscope_gpu_xid_errors_total", lab, n, v, m, counter=True)

    def _exporter_own(self, out, lab: Labels, node: int, gpu: int, up, m: GpuModel, mask, gmask) -> None:
        """fleetscope's own GPU series, or dcgm-exporter's XID gauge (the last XID, held) without them."""
        K = len(self.t)
        if self.dcgm_only:
            xg = np.zeros(K)
            for nn, gg, xx, t in sorted(self.xids, key=lambda e: e[3]):
                if (nn, gg) == (node, gpu):
                    xg[self.k(t) :] = xx
            self._put(out, "DCGM_FI_DEV_XID_ERRORS", lab, node, xg, gmask, counter=False)
            return
        self._put(out, "fleetscope_gpu_up", lab, node, up, mask, counter=False)
        self._put(
            out,
            "fleetscope_gpu_peak_flops",
            lab + (("dtype", "bf16"),),
            node,
            np.full(K, m.peak_bf16),
            mask,
            counter=False,
        )

    def _efa_lustre(self, out, state, rng) -> None:
        K = state.shape[0]
        dt = self.scrape_s
        for n in range(self.n_nodes):
            s = state[:, n * GPUS : (n + 1) * GPUS]
            training = (s == 1).mean(axis=1)
            ckpt = (s == 2).mean(axis=1)
            for d in range(4):
                lab = (("Hostname", self.names[n]), ("device", f"rdmap{79 + 16 * d}s0"), ("port", "1"))
                pps = 180_000 * training * (1 + rng.normal(0, 0.03, K)) + 50
                tx = np.concatenate([[0.0], np.cumsum(pps[:-1] * dt)]) + 7.3e9
                bad = np.concatenate([[0.0], np.cumsum(pps[:-1] * dt * self.efa_retrans[:-1, n])])
                retr = np.floor(tx * 2e-6 + bad)
                if self.efa_retrans.any():  # the bad NIC also drops received packets
                    self._put(
                        out,
                        "efa_rx_drops_total",
                        lab,
                        n,
                        np.floor(0.3 * bad),
                        ~self.absent["efa"][:, n],
                        counter=True,
                    )
                mask = ~self.absent["efa"][:, n]
                self._put(out, "efa_tx_pkts_total", lab, n, np.round(tx), mask, counter=True)
                self._put(out, "efa_retrans_pkts_total", lab, n, retr, mask, counter=True)
                for name in (
                    "efa_retrans_timeout_events_total",
                    "efa_impaired_remote_conn_events_total",
                    "efa_unresponsive_remote_events_total",
                ):
                    self._put(out, name, lab, n, np.zeros(K), mask, counter=True)
            lab = (("Hostname", self.names[n]), ("fs", "fsx"), ("mount", "/fsx"))
            rd = 2.0e8 * training * (1 + rng.normal(0, 0.1, K)).clip(0)
            wr = 1.5e9 * ckpt * (1 + rng.normal(0, 0.1, K)).clip(0) + 1e5
            mask = ~self.absent["lustre"][:, n]
            self._put(
                out,
                "lustre_client_read_bytes_total",
                lab,
                n,
                np.round(np.concatenate([[0.0], np.cumsum(rd[:-1] * dt)]) + 1e12),
                mask,
                counter=True,
            )
            self._put(
                out,
                "lustre_client_write_bytes_total",
                lab,
                n,
                np.round(np.concatenate([[0.0], np.cumsum(wr[:-1] * dt)]) + 4e11),
                mask,
                counter=True,
            )

    def write(self, path: str | Path) -> Path:
        write_samples(self.build(), path)
        return Path(path)


def _workload(
    job: Job, comp: np.ndarray, stage: np.ndarray, n_per: float, rng
) -> tuple[np.ndarray, np.ndarray]:
    """The round-2 workload edits of the compute time: (the GPU's own work, what its timers see)."""
    K, R = comp.shape
    if job.rank_jitter:
        comp = comp * (1.0 + rng.normal(0.0, job.rank_jitter / np.sqrt(n_per), (K, R)))
    if job.moe_hot:  # each step a rank's experts are hot with probability 0.1
        n_steps = max(1, round(n_per))
        comp = comp * (1.0 + job.moe_hot * rng.binomial(n_steps, 0.1, (K, R)) / n_steps)
    if job.stage_cost:
        comp = comp * np.asarray(job.stage_cost)[stage][None, :]
    if not job.tp_sync:
        return comp, comp
    return comp, np.repeat(comp.reshape(K, -1, GPUS).max(axis=2), GPUS, axis=1)


def _save_ends(st: np.ndarray, dt: float) -> list[tuple[int, float]]:
    """(first scrape after a blocking save, the save's seconds) for each save in the state column."""
    ends = []
    for k in range(1, len(st)):
        if st[k - 1] == 2 and st[k] != 2:
            j = k - 1
            while j > 0 and st[j - 1] == 2:
                j -= 1
            ends.append((k, (k - j) * dt))
    return ends


def _barrier_lumps(ends: list[tuple[int, float]], inc: np.ndarray) -> np.ndarray:
    """A non-writer's barrier wait (3/4 of each save), counted in the first step after the save."""
    lump = np.zeros(len(inc))
    for e, length in ends:
        after = np.nonzero((np.arange(len(inc)) >= e) & (inc > 0))[0]
        if len(after):
            lump[after[0]] += 0.75 * length
    return lump


# ---------------------------------------------------------------------- expectations
@dataclass(frozen=True)
class Want:
    """A finding that must appear: ``gpu`` None = any GPU or none, "-" = node-level (gpu null)."""

    kind: str
    node: str | None = None
    gpu: str | None = None
    cause: str | None = None

    def matches(self, f) -> bool:
        if f.kind != self.kind or (self.node is not None and f.node != self.node):
            return False
        if self.gpu == "-":
            if f.gpu is not None:
                return False
        elif self.gpu is not None and f.gpu != self.gpu:
            return False
        return self.cause is None or f.cause == self.cause


@dataclass
class Case:
    name: str
    build: Callable[[], Cluster]
    must: tuple[Want, ...] = ()
    #: Besides the ``must`` findings (and any finding on their nodes of their kind), no finding of
    #: these severities may appear; ``allow`` lists kinds that may (an MFU drop a real fault causes).
    forbid: tuple[str, ...] = ("warning", "critical")
    allow: tuple[str, ...] = ()
    #: One incident, one finding: at most one finding of each ``must`` kind on its node.
    single: bool = False
    #: At least one of these must appear (either finding is right); findings of their kind on their
    #: node are then exempt from ``forbid`` like the ``must`` ones.
    one_of: tuple[Want, ...] = ()
    #: Findings these match are allowed, not required (a fault that may or may not be detectable).
    may: tuple[Want, ...] = ()

    def judge(self, findings) -> list[str]:
        """Problems with the findings (empty: as expected)."""
        problems = []
        for w in self.must:
            if not any(w.matches(f) for f in findings):
                problems.append(f"missing {w}")
            same = [f for f in findings if f.kind == w.kind and (w.node is None or f.node == w.node)]
            if self.single and len(same) > 1:
                problems.append(
                    f"{len(same)} {w.kind} findings on {w.node}, one expected: "
                    + ", ".join(f"gpu={f.gpu} rank={f.rank} cause={f.cause}" for f in same)
                )
        if self.one_of and not any(w.matches(f) for w in self.one_of for f in findings):
            problems.append("missing one of " + ", ".join(str(w) for w in self.one_of))
        for f in findings:
            if f.severity not in self.forbid or f.kind in self.allow:
                continue
            if any(
                f.kind == w.kind and (w.node is None or f.node == w.node) for w in self.must + self.one_of
            ):
                continue
            if any(w.matches(f) for w in self.may):
                continue
            problems.append(
                f"unexpected {f.severity} {f.kind} node={f.node} gpu={f.gpu} rank={f.rank} job={f.job_id} "
                f"cause={f.cause} score={f.score} start=+{(f.start - T0) / 60:.1f}min"
            )
        return problems


# ---------------------------------------------------------------------- the cases
def _one_job(
    n: int, *, step_s: float = 5.0, dur: float = 40 * MIN, scrape: float = 15.0, seed: int = 1, **job
) -> Cluster:
    cl = Cluster(n, duration_s=dur, scrape_s=scrape, seed=seed)
    cl.jobs.append(Job("llm-a", [Segment(0.0, dur + 1, list(range(n)))], step_s=step_s, **job))
    return cl


def _hot_gpu(cl: Cluster, node: int, gpu: int, at: float, slow: float = 0.15, bits: int = 0x40) -> None:
    """One GPU slower from ``at``: HW thermal bit, lower SM clock, warmer, thermal violation counting."""
    a, c = cl.k(at), cl.gcol(node, gpu)
    cl.slow[a:, c] *= 1 + slow
    cl.clock_f[a:, c] *= 1 / (1 + slow)
    cl.bits[a:, c] |= bits
    cl.temp_add[a:, c] += 9
    cl.thermal_viol[a:, c] = 0.6


def _silent_slow(cl: Cluster, node: int, gpu: int, at: float, slow: float = 0.15) -> None:
    a = cl.k(at)
    cl.slow[a:, cl.gcol(node, gpu)] *= 1 + slow


def c01_scrape30() -> Cluster:
    return _one_job(4, scrape=30.0, seed=11)


def c01_scrape60() -> Cluster:
    return _one_job(4, scrape=60.0, dur=45 * MIN, seed=12)


def c01_scrape30_fault() -> Cluster:
    cl = _one_job(4, scrape=30.0, seed=13)
    _hot_gpu(cl, 2, 5, 15 * MIN)
    return cl


def c02_long_steps() -> Cluster:
    return _one_job(4, step_s=40.0, dur=45 * MIN, seed=21)


def c02_long_steps_fault() -> Cluster:
    cl = _one_job(4, step_s=30.0, dur=45 * MIN, seed=22)
    _silent_slow(cl, 1, 3, 15 * MIN, 0.2)
    return cl


def c03_fsdp() -> Cluster:
    return _one_job(4, fsdp=True, seed=31)


def c03_fsdp_fault() -> Cluster:
    cl = _one_job(4, fsdp=True, seed=32)
    _silent_slow(cl, 3, 6, 12 * MIN, 0.15)
    return cl


def c04_rank0_host() -> Cluster:
    return _one_job(4, rank0_host_extra=0.05, seed=41)


def c05_epoch() -> Cluster:
    return _one_job(4, epoch_at_s=[13 * MIN, 29 * MIN], epoch_spike_s=75.0, seed=51)


def c06_exporter_restart() -> Cluster:
    cl = _one_job(4, seed=61)
    cl.resets.append((2, 17 * MIN))
    return cl


def c07_ha_pair() -> Cluster:
    cl = _one_job(4, seed=71)
    cl.replicas = 2
    return cl


def c07_ha_merged() -> Cluster:
    cl = _one_job(4, seed=72)
    cl.replicas = -2
    return cl


def _xid79_restart(cl: Cluster, node: int, gpu: int, at: float) -> None:
    """XID 79 on one GPU: it is lost, its rank vanishes, the job hangs 5 min and restarts without the node."""
    cl.xids.append((node, gpu, 79, at))
    cl.gpu_down.append((node, gpu, at))
    job = cl.jobs[0]
    seg = job.segments[0]
    end = seg.end_s
    seg.end_s = at + 5 * MIN
    job.hangs.append((at, at + 5 * MIN))
    job.segments.append(Segment(at + 6 * MIN, end, [n for n in seg.nodes if n != node]))
    cl.vanish(node, at, at + 6 * MIN, what=("train",))  # the lost GPU's node: ranks die with the GPU


def c07_ha_pair_fault() -> Cluster:
    cl = _one_job(4, seed=73)
    cl.replicas = 2
    _xid79_restart(cl, 1, 4, 18 * MIN)
    return cl


def c08_efa_collector_down() -> Cluster:
    cl = _one_job(4, seed=81)
    cl.vanish(3, 14 * MIN, 24 * MIN, what=("efa",))
    return cl


def c09_app_xids() -> Cluster:
    cl = _one_job(4, seed=91)
    cl.xids += [
        (1, 2, 13, 8 * MIN),
        (1, 2, 13, 8.5 * MIN),
        (2, 0, 31, 15 * MIN),
        (2, 0, 43, 15.2 * MIN),
        (3, 7, 63, 22 * MIN),
    ]
    return cl


def c10_power_cap() -> Cluster:
    cl = _one_job(4, seed=101)
    cl.sw_power_cap_all = True
    a = cl.k(20 * MIN)
    cl.bits[a : a + 3, cl.gcol(1, 1)] |= 0x8  # HW slowdown for 45 s once
    cl.clock_f[a : a + 3, cl.gcol(1, 1)] *= 0.8
    return cl


def c11_start_end() -> Cluster:
    dur = 40 * MIN
    cl = Cluster(6, duration_s=dur, seed=111)
    cl.jobs.append(Job("late", [Segment(10 * MIN, dur + 1, [0, 1, 2])], step_s=5.0))
    cl.jobs.append(Job("early", [Segment(0.0, 35 * MIN, [3, 4, 5])], step_s=6.0))
    return cl


def _mixed(seed: int) -> Cluster:
    dur = 40 * MIN
    cl = Cluster(6, duration_s=dur, seed=seed, models=[H100] * 3 + [A100] * 3)
    cl.jobs.append(Job("h100-job", [Segment(0.0, dur + 1, [0, 1, 2])], step_s=4.0))
    cl.jobs.append(Job("a100-job", [Segment(0.0, dur + 1, [3, 4, 5])], step_s=11.0, mfu=0.5))
    return cl


def c12_mixed() -> Cluster:
    return _mixed(121)


def c12_mixed_fault() -> Cluster:
    cl = _mixed(122)
    _silent_slow(cl, 4, 2, 14 * MIN, 0.15)
    return cl


def c13_node_replaced() -> Cluster:
    dur = 40 * MIN
    names = [f"node-{i}" for i in range(4)] + ["node-9"]
    cl = Cluster(5, duration_s=dur, seed=131, node_names=names)
    cl.jobs.append(
        Job("llm-a", [Segment(0.0, 20 * MIN, [0, 1, 2, 3]), Segment(24 * MIN, dur + 1, [0, 1, 2, 4])])
    )
    cl.vanish(3, 20 * MIN)
    cl.vanish(4, 0.0, 24 * MIN)
    return cl


def c13_node_replaced_linger() -> Cluster:
    """As above, but the surviving ranks' processes take 90 s to exit after node-3 is gone (GPUs idle)."""
    dur = 40 * MIN
    names = [f"node-{i}" for i in range(4)] + ["node-9"]
    cl = Cluster(5, duration_s=dur, seed=132, node_names=names)
    job = Job(
        "llm-a",
        [Segment(0.0, 21.5 * MIN, [0, 1, 2, 3]), Segment(24 * MIN, dur + 1, [0, 1, 2, 4])],
        idle=[(20 * MIN, 21.5 * MIN)],
    )
    cl.jobs.append(job)
    cl.vanish(3, 20 * MIN)
    cl.vanish(4, 0.0, 24 * MIN)
    return cl


def c14_thermal_drift() -> Cluster:
    cl = _one_job(4, seed=141, dur=45 * MIN)
    c = cl.gcol(2, 3)
    t = cl.t
    cl.temp_add[:, c] += 0.5 * t / MIN
    a = cl.k(25 * MIN)
    cl.bits[a:, c] |= 0x20
    drop = np.clip(0.01 * (t - 25 * MIN) / MIN, 0, None)
    cl.clock_f[:, c] *= 1 - drop
    cl.slow[:, c] *= 1 / (1 - drop)
    cl.thermal_viol[a:, c] = 0.5
    return cl


def c15_kernel_panic() -> Cluster:
    dur = 42 * MIN
    cl = Cluster(5, duration_s=dur, seed=151)
    cl.jobs.append(
        Job(
            "llm-a",
            [Segment(0.0, 30 * MIN, [0, 1, 2, 3, 4]), Segment(31 * MIN, dur + 1, [0, 1, 3, 4])],
            hangs=[(20 * MIN, 30 * MIN)],
        )
    )
    cl.vanish(2, 20 * MIN)
    return cl


def c16_tiny_jobs_fault() -> Cluster:
    dur = 40 * MIN
    cl = Cluster(3, duration_s=dur, seed=161)
    cl.jobs.append(Job("two-node", [Segment(0.0, dur + 1, [0, 1])], step_s=5.0))
    cl.jobs.append(Job("one-node", [Segment(0.0, dur + 1, [2])], step_s=3.0))
    _silent_slow(cl, 1, 5, 12 * MIN, 0.2)
    return cl


def c16_tiny_jobs() -> Cluster:
    dur = 40 * MIN
    cl = Cluster(3, duration_s=dur, seed=162)
    cl.jobs.append(Job("two-node", [Segment(0.0, dur + 1, [0, 1])], step_s=5.0))
    cl.jobs.append(Job("one-node", [Segment(0.0, dur + 1, [2])], step_s=3.0))
    return cl


CASES: list[Case] = [
    Case("01_scrape30_healthy", c01_scrape30),
    Case("01_scrape60_healthy", c01_scrape60),
    Case(
        "01_scrape30_hot_gpu",
        c01_scrape30_fault,
        (Want("straggler", "node-2", "5", "thermal_throttle"),),
        allow=("mfu_drop",),
    ),
    Case("02_long_steps_healthy", c02_long_steps),
    Case(
        "02_long_steps_straggler",
        c02_long_steps_fault,
        (Want("straggler", "node-1", "3"),),
        allow=("mfu_drop",),
    ),
    Case("03_fsdp_healthy", c03_fsdp),
    Case("03_fsdp_slow_gpu", c03_fsdp_fault, (Want("straggler", "node-3", "6"),), allow=("mfu_drop",)),
    Case("04_rank0_host_work", c04_rank0_host),
    Case("05_epoch_boundary", c05_epoch),
    Case("06_exporter_restart", c06_exporter_restart),
    Case("07_ha_pair_healthy", c07_ha_pair),
    Case("07_ha_merged_healthy", c07_ha_merged),
    Case("07_ha_pair_xid79", c07_ha_pair_fault, (Want("failing_node", "node-1", "4"),), allow=("mfu_drop",)),
    Case("08_efa_collector_down", c08_efa_collector_down),
    Case("09_application_xids", c09_app_xids),
    Case("10_sw_power_cap_everywhere", c10_power_cap),
    Case("11_job_starts_and_ends", c11_start_end),
    Case("12_mixed_gpu_models", c12_mixed),
    Case(
        "12_mixed_gpu_models_slow_a100",
        c12_mixed_fault,
        (Want("straggler", "node-4", "2"),),
        allow=("mfu_drop",),
    ),
    Case("13_node_replaced", c13_node_replaced),
    Case("13_node_replaced_slow_teardown", c13_node_replaced_linger),
    Case(
        "14_thermal_drift",
        c14_thermal_drift,
        (Want("straggler", "node-2", "3", "thermal_throttle"),),
        allow=("mfu_drop",),
    ),
    Case("15_kernel_panic", c15_kernel_panic, (Want("failing_node", "node-2"),), allow=("mfu_drop",)),
    Case(
        "16_two_node_job_slow_rank",
        c16_tiny_jobs_fault,
        (Want("straggler", "node-1", "5"),),
        allow=("mfu_drop",),
    ),
    Case("16_tiny_jobs_healthy", c16_tiny_jobs),
]


# ---------------------------------------------------------------------- round 2 cases
def _three_d(seed: int, **job) -> Cluster:
    """12 nodes: TP=8 in a node, DP=3, PP=4 (nodes 0-2 stage 0, ..., 9-11 stage 3), 1F1B, 12 microbatches.

    The first stage holds the embedding (+5%), the last the output layer and the loss (+15%), so
    the last stage sets the pipe's pace and the other stages wait for its gradients in backward;
    the last stage itself waits for activations in forward (warm-up bubble).
    """
    cl = Cluster(12, duration_s=30 * MIN, seed=seed)
    cl.jobs.append(
        Job(
            "llm-3d",
            [Segment(0.0, 30 * MIN + 1, list(range(12)))],
            step_s=6.0,
            stages=4,
            stage_cost=(1.05, 1.0, 1.0, 1.15),
            tp_sync=True,
            **job,
        )
    )
    return cl


def r2_3d_healthy() -> Cluster:
    """Healthy 3D job, layout not reported: stages differ by 5-15% and every stage's forward and
    backward hold pipeline waits; the stages must not look like stragglers of each other."""
    return _three_d(201)


def r2_3d_healthy_layout() -> Cluster:
    """The same healthy 3D job reporting ``pipeline_stage``: nothing to report."""
    return _three_d(202, report_layout=True)


def r2_3d_last_stage_hot() -> Cluster:
    """One GPU of the slowest (last) stage, node-10 (replica 1) GPU 3, throttles 10% (HW thermal 0x40).

    TP=8 makes all 8 ranks of node-10 as slow as that GPU (the per-layer all-reduce is CUDA time), its
    replica's other stages wait longer for gradients (backward) and the other replicas wait at the
    DP all-reduce. Only node-10 is at fault, and its hardware names GPU 3: expected one straggler on
    node-10 with cause thermal_throttle (GPU-level or node-level), nothing on the nodes that wait.
    """
    cl = _three_d(203)
    _hot_gpu(cl, 10, 3, 15 * MIN, slow=0.10)
    return cl


def r2_3d_first_stage_hot() -> Cluster:
    """A first-stage GPU, node-1 (replica 1) GPU 6, throttles 15% (HW thermal 0x40) from minute 15.

    Stage 0 then becomes replica 1's slowest stage (1.05 x 1.15 > 1.15), so replica 1's later stages
    (node-4, node-7, node-10) wait for its activations: their *forward* time grows, without any
    fault of theirs. Expected: a thermal_throttle straggler on node-1 and no finding on the nodes
    that wait in forward.
    """
    cl = _three_d(204)
    _hot_gpu(cl, 1, 6, 15 * MIN, slow=0.15)
    return cl


def r2_moe() -> Cluster:
    """MoE with expert parallelism: on each step a rank's experts are hot with probability 0.1 and it
    computes 30% more; the others wait in the all-to-alls (forward and backward). A different rank
    is slow on every step, none persistently: healthy."""
    return _one_job(4, moe_hot=0.3, seed=211)


def r2_elastic() -> Cluster:
    """Elastic scale-up: 4 nodes until minute 20, torchrun restarts every worker and the job runs on
    8 nodes from minute 21 (ranks 32-63 appear, step 5.0 s -> 2.8 s at the same global batch). Nodes
    4-7 idle, reporting, before. Nothing is faulty: at most info findings."""
    cl = Cluster(8, duration_s=40 * MIN, seed=221)
    cl.jobs.append(
        Job(
            "elastic",
            [
                Segment(0.0, 20 * MIN, [0, 1, 2, 3]),
                Segment(21 * MIN, 40 * MIN + 1, list(range(8)), step_s=2.8),
            ],
        )
    )
    return cl


def r2_nccl_timeout() -> Cluster:
    """A collective never completes at minute 10; every GPU spins at 100% for 30 minutes (the job set
    the process-group timeout to 30 min) and the watchdog kills every rank at once at minute 40: the
    series vanish everywhere together and the GPUs go idle. No hardware spoke: one job_hang, and no
    failing_node (ranks that vanish all at once point at no node)."""
    cl = Cluster(4, duration_s=46 * MIN, seed=231)
    cl.jobs.append(Job("llm-a", [Segment(0.0, 40 * MIN, [0, 1, 2, 3])], hangs=[(10 * MIN, 40 * MIN)]))
    return cl


def r2_bad_nic() -> Cluster:
    """node-2's EFA NIC goes bad at minute 12: 2% of its packets retransmitted, receive drops. Its
    ranks' share of the gradient all-reduce takes 8% of the step longer, which host timers count
    in the optimizer (the last bucket's sync before ``step()``), and the other nodes wait that long in
    backward: node-2 waits less and spends longer in 'host' time. Expected ONE finding: a node-level
    straggler on node-2 with cause network (not also a cpu or unknown one per rank)."""
    cl = _one_job(4, seed=241)
    a = cl.k(12 * MIN)
    cl.efa_retrans[a:, 2] = 0.02
    cl.net_extra[a:, 2 * GPUS : 3 * GPUS] = 0.08
    return cl


def r2_xid48_spare() -> Cluster:
    """XID 48 (double-bit ECC) on node-1 GPU 2 at minute 18: the DBE counter and row-remap pending go
    to 1, the job crashes 30 s later (every rank exits) and restarts at minute 22 on the spare node-4
    in node-1's place. Expected: failing_node on node-1 GPU 2; no straggler, no hang (the crash is
    not a spin), no finding on the spare."""
    cl = Cluster(5, duration_s=40 * MIN, seed=251)
    cl.jobs.append(
        Job("llm-a", [Segment(0.0, 18.5 * MIN, [0, 1, 2, 3]), Segment(22 * MIN, 40 * MIN + 1, [0, 2, 3, 4])])
    )
    a, c = cl.k(18 * MIN), cl.gcol(1, 2)
    cl.xids.append((1, 2, 48, 18 * MIN))
    cl.dbe[a:, c] = 1
    cl.remap_pending[a:, c] = 1
    return cl


def r2_row_remap_pending() -> Cluster:
    """node-3 GPU 5 remaps a row for a correctable error at minute 10 (XID 63, row-remap pending 1,
    one correctable remapped row) and trains on at full speed. NVIDIA: reset the GPU at the next
    opportunity. At most a warning, never a critical failing_node."""
    cl = _one_job(4, seed=261)
    a, c = cl.k(10 * MIN), cl.gcol(3, 5)
    cl.xids.append((3, 5, 63, 10 * MIN))
    cl.remap_pending[a:, c] = 1
    cl.correctable_remapped[a:, c] = 1
    return cl


def r2_local_writers() -> Cluster:
    """Checkpoints every 5 min written by local rank 0 of each node: its ``checkpoint`` phase holds
    the whole 45 s save; the other ranks count a quarter and wait the rest in a barrier their next
    step's forward absorbs. Every node alike, a role not a fault: healthy."""
    return _one_job(4, ckpt_local_writers=True, ckpt_every_s=300.0, ckpt_s=45.0, seed=271)


def r2_noisy_small() -> Cluster:
    """Two nodes, 3% per-step compute jitter on every rank (a small, noisy job: variable sequence
    lengths): 16 ranks whose spread is wide but stationary. Healthy."""
    return _one_job(2, rank_jitter=0.03, seed=281)


def r2_intermittent() -> Cluster:
    """node-2 GPU 1 is 15% slower for 6 minutes twice (minutes 8-14 and 24-30), no hardware evidence
    (a noisy neighbour process, a host-side contention that comes and goes). Expected: found
    (one or two straggler findings on node-2 are both fine)."""
    cl = _one_job(4, seed=291)
    c = cl.gcol(2, 1)
    for a, b in ((8 * MIN, 14 * MIN), (24 * MIN, 30 * MIN)):
        cl.slow[cl.k(a) : cl.k(b), c] *= 1.15
    return cl


def r2_slow_degradation() -> Cluster:
    """node-1 GPU 6 degrades slowly: 1% slower every 5 minutes from the start (8% at minute 40), SM
    clock down alike, warming; the SW thermal bit (0x20) is set from minute 20 (4% slow). Expected: a
    thermal_throttle straggler on that GPU (a slow start hides no fault: by the end it is 8% slow)."""
    cl = _one_job(4, seed=301)
    c = cl.gcol(1, 6)
    f = 1 + 0.01 * cl.t / (5 * MIN)
    cl.slow[:, c] *= f
    cl.clock_f[:, c] /= f
    cl.temp_add[:, c] += 10 * cl.t / cl.t[-1]
    cl.bits[cl.k(20 * MIN) :, c] |= 0x20
    return cl


def r2_app_clocks_locked() -> Cluster:
    """An admin left node-3 GPU 0's application clocks locked (``nvidia-smi -lgc``/``-ac``; reason bit
    0x2 set) 10% below its peers from before the window: its compute takes 11% longer from the first
    step, nothing else shows. A careful operator expects a straggler: a 64-GPU synchronous job runs
    at that one GPU's pace, the GPU's own series show why (a clock 10% below every peer's with the
    applications-clocks bit), and the fix is one command (``nvidia-smi -rgc``/``-rac``). It is not a
    role or a pipeline stage: one GPU, not a block. Expected: a straggler on node-3 GPU 0 (any cause)."""
    cl = _one_job(4, seed=311)
    c = cl.gcol(3, 0)
    cl.bits[:, c] |= 0x2
    cl.clock_f[:, c] *= 0.9
    cl.slow[:, c] *= 1 / 0.9
    return cl


def r2_cluster_thermal() -> Cluster:
    """Datacenter cooling fails at minute 18: every GPU of the 6 nodes sets SW thermal (0x20), runs 8%
    slower, warmer, thermal violation 30% of the time, all alike. Nobody is an outlier: no straggler
    (an mfu_drop is right)."""
    cl = _one_job(6, seed=321)
    a = cl.k(18 * MIN)
    cl.bits[a:] |= 0x20
    cl.clock_f[a:] *= 0.92
    cl.slow[a:] *= 1 / 0.92
    cl.temp_add[a:] += 6
    cl.thermal_viol[a:] = 0.3
    return cl


CASES += [
    Case("r2_3d_healthy", r2_3d_healthy),
    Case("r2_3d_healthy_layout", r2_3d_healthy_layout),
    Case(
        "r2_3d_last_stage_hot_gpu",
        r2_3d_last_stage_hot,
        (Want("straggler", "node-10", None, "thermal_throttle"),),
        allow=("mfu_drop",),
        single=True,
    ),
    Case(
        "r2_3d_first_stage_hot_gpu",
        r2_3d_first_stage_hot,
        (Want("straggler", "node-1", None, "thermal_throttle"),),
        allow=("mfu_drop",),
        single=True,
    ),
    Case("r2_moe_hot_experts", r2_moe),
    Case("r2_elastic_scale_up", r2_elastic),
    Case("r2_nccl_timeout_watchdog", r2_nccl_timeout, (Want("job_hang"),)),
    Case(
        "r2_bad_nic",
        r2_bad_nic,
        (Want("straggler", "node-2", "-", "network"),),
        allow=("mfu_drop",),
        single=True,
    ),
    Case(
        "r2_xid48_restart_on_spare",
        r2_xid48_spare,
        (Want("failing_node", "node-1", "2"),),
        allow=("mfu_drop",),
    ),
    Case("r2_row_remap_pending", r2_row_remap_pending, forbid=("critical",)),
    Case("r2_local_rank0_checkpoint_writers", r2_local_writers),
    Case("r2_noisy_two_node_job", r2_noisy_small),
    Case("r2_intermittent_no_hw", r2_intermittent, (Want("straggler", "node-2", "1"),), allow=("mfu_drop",)),
    Case(
        "r2_slow_degradation",
        r2_slow_degradation,
        (Want("straggler", "node-1", "6", "thermal_throttle"),),
        allow=("mfu_drop",),
    ),
    Case(
        "r2_app_clocks_locked", r2_app_clocks_locked, (Want("straggler", "node-3", "0"),), allow=("mfu_drop",)
    ),
    Case("r2_cluster_wide_thermal", r2_cluster_thermal, allow=("mfu_drop",)),
]


# ---------------------------------------------------------------------- round 3 cases
def r3_scrape5() -> Cluster:
    """High-resolution monitoring: 5 s scrapes of a 5 s step, so each scrape sees 0, 1 or 2 steps
    (whole-step counters, each node at its own offset). Per-grid-step phase times are 0 or a full
    step's; the detectors' medians must not turn that quantization into a straggler: healthy."""
    return _one_job(4, scrape=5.0, dur=20 * MIN, seed=401)


def r3_scrape5_hot() -> Cluster:
    """5 s scrapes, node-1 GPU 4 throttles 15% from minute 8 (HW thermal 0x40, lower clock, thermal
    violation): the same fault every other scrape interval finds. Expected: a thermal_throttle
    straggler on that GPU, one finding."""
    cl = _one_job(4, scrape=5.0, dur=20 * MIN, seed=402)
    _hot_gpu(cl, 1, 4, 8 * MIN)
    return cl


def r3_mid_hang() -> Cluster:
    """The recording starts inside a hang: the collective blocked 10 minutes before the window, every
    GPU spins at 100% and no rank steps until minute 8, when the watchdog kills the job; it restarts
    at minute 9 and trains. No hardware spoke. Expected: the stall is reported (job_hang, or a
    failing_node if a node is blamed) and no straggler or other warning: the window shows the ranks
    reporting without progress for 8 minutes, which is all a hang is."""
    dur = 30 * MIN
    cl = Cluster(4, duration_s=dur, seed=411)
    nodes = [0, 1, 2, 3]
    cl.jobs.append(
        Job(
            "llm-a",
            [Segment(-20 * MIN, 8 * MIN, nodes), Segment(9 * MIN, dur + 1, nodes)],
            hangs=[(-10 * MIN, 8 * MIN)],
        )
    )
    return cl


def r3_gpu_lost_before_window() -> Cluster:
    """node-3 GPU 6 fell off the bus before the window: its series never appear. The scheduler
    drained node-3, so the job runs on nodes 0-2 and node-3's 7 remaining GPUs idle, reporting.
    Nothing happens in the window: healthy. In particular no failing_node may be invented (no
    series *stopped*, no XID, no rank vanished) and no membership noise above info."""
    dur = 30 * MIN
    cl = Cluster(4, duration_s=dur, seed=421)
    cl.jobs.append(Job("llm-a", [Segment(0.0, dur + 1, [0, 1, 2])]))
    cl.gpu_absent[:, cl.gcol(3, 6)] = True
    return cl


def r3_dcgm_xid_gauge() -> Cluster:
    """dcgm-exporter alone (no fleetscope_gpu_* series): node-2 GPU 3 reports XID 79 at minute 15 in
    DCGM_FI_DEV_XID_ERRORS (the gauge holds the last XID; every other GPU 0). Its other gauges keep
    coming (the exporter repeats what it last read), so only the XID gauge says what happened; its
    rank dies, the job hangs 5 min and restarts without node-2. Expected: failing_node on node-2
    GPU 3 (a drain-class XID held by the gauge is one of the documented signals)."""
    cl = _one_job(4, seed=431)
    cl.dcgm_only = True
    at = 15 * MIN
    cl.xids.append((2, 3, 79, at))
    job = cl.jobs[0]
    seg = job.segments[0]
    end, seg.end_s = seg.end_s, at + 5 * MIN
    job.hangs.append((at, at + 5 * MIN))
    job.segments.append(Segment(at + 6 * MIN, end, [0, 1, 3]))
    cl.vanish(2, at, at + 6 * MIN, what=("train",))
    return cl


def r3_no_phases_hot() -> Cluster:
    """A job that exports only training_steps_total, tokens, step seconds and FLOPs (no phase timers:
    a trainer without the per-phase hooks). node-3 GPU 2 throttles 15% from minute 12 with HW thermal
    0x40, its SM clock 13% below its peers, thermal violation 60% of the time. Every rank's step
    time is the same (synchronous), so only the GPU series say who: the documented GPU-level path
    (clock >= 8% below the busy GPUs' median while throttle evidence holds) must find it.
    Expected: a thermal_throttle straggler on node-3 GPU 2."""
    cl = _one_job(4, seed=441, phases=False)
    _hot_gpu(cl, 3, 2, 12 * MIN)
    return cl


def _power_brake(cl: Cluster, node: int, gpu: int, at: float, slow: float = 0.15) -> None:
    """HW power brake (0x80, an external power-brake signal: a PSU or the rack's power shelf): the
    GPU's SM clock and speed drop, the power-violation counter runs."""
    a, c = cl.k(at), cl.gcol(node, gpu)
    cl.slow[a:, c] *= 1 + slow
    cl.clock_f[a:, c] *= 1 / (1 + slow)
    cl.bits[a:, c] |= 0x80
    cl.power_viol[a:, c] = 0.6


def r3_gpu_only_power_brake() -> Cluster:
    """No training telemetry at all (GPU series only, the trainer is not instrumented): a 4-node job
    keeps every GPU at 100%; node-1 GPU 7 is power-braked from minute 10 (0x80, clock 13% below its
    peers, power violation 60%). Expected: a GPU-level straggler on node-1 GPU 7, cause power_brake."""
    cl = _one_job(4, seed=451)
    cl.absent["train"][:] = True
    _power_brake(cl, 1, 7, 10 * MIN)
    return cl


def r3_dup_scrape() -> Cluster:
    """Every exporter scraped by two Prometheus scrape jobs (``job``=dcgm on :9400 and gpu-nodes on
    :9401, 0.9 s apart): each series twice with other scrape labels. Healthy."""
    cl = _one_job(4, seed=461)
    cl.dup_scrape = True
    return cl


def r3_dup_scrape_hot() -> Cluster:
    """Duplicate scrape jobs as above, and node-0 GPU 6 throttles 15% from minute 14 (HW thermal).
    Expected: one thermal_throttle straggler on node-0 GPU 6, not two (one per scrape job)."""
    cl = _one_job(4, seed=462)
    cl.dup_scrape = True
    _hot_gpu(cl, 0, 6, 14 * MIN)
    return cl


def r3_short_window() -> Cluster:
    """A 10-minute window (an operator's quick look) with node-2 GPU 1 throttling from minute 3.
    Too short to be sure of much: finding that straggler is fine, missing it is fine, but the
    analysis must not crash and must not invent anything else at warning or critical."""
    cl = _one_job(4, dur=10 * MIN, seed=471)
    _hot_gpu(cl, 2, 1, 3 * MIN)
    return cl


def r3_ckpt_every_2min() -> Cluster:
    """Aggressive checkpointing: a blocking save every 2 minutes that takes ~20 s (two 15 s scrapes),
    counted in the checkpoint phase, GPUs nearly idle during it. A quarter of the time is saving,
    the rest trains at full speed: pauses, not drops. Healthy: no mfu_drop, no hang."""
    return _one_job(4, ckpt_every_s=120.0, ckpt_s=20.0, seed=481)


def r3_warmup_improves() -> Cluster:
    """Step time improves by ~10% over the first 20 minutes on every rank alike (torch.compile and
    autotuning caches warming, the allocator settling), then stays. MFU rises; nothing is wrong.
    Healthy: in particular no mfu_drop measured against the later, faster baseline."""
    cl = _one_job(4, dur=30 * MIN, seed=491)
    ramp = np.clip(cl.t / (20 * MIN), 0.0, 1.0)
    cl.slow *= (1 - 0.13 * ramp)[:, None]
    return cl


CASES += [
    Case("r3_scrape5_healthy", r3_scrape5),
    Case(
        "r3_scrape5_hot_gpu",
        r3_scrape5_hot,
        (Want("straggler", "node-1", "4", "thermal_throttle"),),
        allow=("mfu_drop",),
        single=True,
    ),
    Case("r3_window_starts_mid_hang", r3_mid_hang, one_of=(Want("job_hang"), Want("failing_node"))),
    Case("r3_gpu_lost_before_window", r3_gpu_lost_before_window),
    Case(
        "r3_dcgm_xid_gauge_79",
        r3_dcgm_xid_gauge,
        (Want("failing_node", "node-2", "3"),),
        allow=("mfu_drop",),
    ),
    Case(
        "r3_no_phase_counters_hot_gpu",
        r3_no_phases_hot,
        (Want("straggler", "node-3", "2", "thermal_throttle"),),
        allow=("mfu_drop",),
    ),
    Case(
        "r3_gpu_only_power_brake",
        r3_gpu_only_power_brake,
        (Want("straggler", "node-1", "7", "power_brake"),),
        allow=("mfu_drop",),
    ),
    Case("r3_dup_scrape_jobs_healthy", r3_dup_scrape),
    Case(
        "r3_dup_scrape_jobs_hot_gpu",
        r3_dup_scrape_hot,
        (Want("straggler", "node-0", "6", "thermal_throttle"),),
        allow=("mfu_drop",),
        single=True,
    ),
    Case(
        "r3_short_window_fault_at_3min",
        r3_short_window,
        allow=("mfu_drop",),
        may=(Want("straggler", "node-2", "1"),),
    ),
    Case("r3_checkpoint_every_2min", r3_ckpt_every_2min),
    Case("r3_warmup_step_time_improves", r3_warmup_improves),
]
