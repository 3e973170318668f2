"""The realistic model: training jobs as production clusters run them, healthy look-alikes and faults.

It shares :class:`~fleetscope.simulate.model.ClusterModel`'s hardware (GPUs, EFA devices, Lustre
mounts, their counters and series) and replaces the one idealised job with jobs simulated step by
step:

* **host-side timers** (no CUDA sync): every rank's step time is the same; the fast ranks' wait for
  the slowest shows in their ``backward`` time (gradient hooks overlap the all-reduce) or at the
  ``optimizer`` step (``wait_phase``), so a slow rank shows *less* wait than its peers;
* **per-step jitter** (``jitter``), a few % spread between GPUs (``gpu_spread``), GC pauses on a
  random rank, missing scrapes;
* **pipeline parallelism**: stages differ in compute from the first step (the last computes the
  output layer and the loss, the first the embedding), all ranks in lock-step, bubbles;
* **pauses**: blocking checkpoints (longer when the shared file system is saturated), periodic
  evaluation (GPU util 30-60%, low tensor activity, little EFA traffic), reported in phase ``eval``
  or in no phase at all;
* **hangs**: every rank blocked in a collective, GPUs at ~100% util (NCCL kernels spin), until the
  watchdog aborts and the job restarts (or ends);
* **membership**: scheduler drains and replacements, exporter gaps, several jobs on one cluster;
* **checkpoints and restarts** as the telemetry library reports them: saves (count by result,
  seconds, bytes, the last success's time and step), a restarted run's attempt number, the step it
  resumed from, its checkpoint load (the end of its warmup, after the communicators are built) and
  its startup time. These series only add to the others: nothing else changes when they are read.

Time runs on the scenario clock (``elapsed``); a step that a tick does not finish completes in a
later one, so counters move in whole steps as a real rank file does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from fleetscope import contract as c
from fleetscope import hardware
from fleetscope.errors import FleetscopeError
from fleetscope.exporters.ras_series import report_series
from fleetscope.simulate import ranks as _ranks
from fleetscope.simulate import ras as _ras
from fleetscope.simulate.model import (
    COMM_S,
    COMPUTE_S,
    DATA_S,
    EFA_PACKET_BYTES,
    MAX_SM_CLOCK,
    OPT_S,
    TOKENS_PER_STEP,
    ClusterModel,
    SimSeries,
)
from fleetscope.simulate.spec import FaultSpec, JobSpec, ScenarioSpec, check_no_inference_faults
from fleetscope.telemetry.monitor import TrainingMonitor

EVAL = "eval"
#: Phases the realistic model reports (``eval`` whether or not the contract lists it yet).
REALISTIC_PHASES: tuple[str, ...] = tuple(dict.fromkeys((*c.TRAINING_PHASES, "checkpoint", EVAL)))
LAYOUT = (
    getattr(c, "PIPELINE_STAGE_LABEL", "pipeline_stage"),
    getattr(c, "DATA_PARALLEL_RANK_LABEL", "data_parallel_rank"),
    getattr(c, "TENSOR_PARALLEL_RANK_LABEL", "tensor_parallel_rank"),
)
#: PCIe replays a marginal link logs in a step it slows (the flaky_gpu fault; a healthy link logs
#: about one in a hundred scrapes).
FLAKY_REPLAYS_PER_SLOW_STEP = 30.0
#: The expert that turns hot next (moe_imbalance): this many experts along, so the hot spot moves
#: to another expert-parallel rank (and, with one expert group per node, another local GPU).
MOE_HOT_STRIDE = 3
WARMUP_S = 60.0  # a (re)started job loads its checkpoint and builds NCCL communicators
REQUEUE_S = 90.0  # scheduler requeue and container start after an abort
CKPT_BYTES_PER_S = 2.5e9  # per node, on a healthy FSx for Lustre file system
STEP_BYTES = 2.4e9  # EFA bytes per node per step (gradient all-reduce, DP across nodes)
#: A restart's checkpoint load, as a share of a healthy save (reads are faster than writes), at
#: most half the warmup; it is the warmup's last part and counts as checkpoint time in the truth.
LOAD_SHARE = 0.4
ALWAYS = math.inf
#: Where a job's GPU-seconds go (the true account the analyzers' goodput account is scored against).
GOODPUT_CATEGORIES: tuple[str, ...] = (
    "productive",
    "checkpoint",
    "recovery",
    "rework",
    "stall",
    "eval",
    "slowdown",
    "idle",
)
#: Fault kinds of the GPUs themselves (the rest act on the network, data path, CPU or file system).
_GPU_FAULTS = frozenset(
    {"thermal_throttle", "power_brake", "psu_brake", "silent_slowdown", "pcie_width_drop"}
)
#: Faults and look-alikes that act on single steps or on the job's work, not on a device.
_STEP_FAULTS = frozenset({"moe_imbalance", "flaky_gpu", "random_slow_steps"})


def _on(f: FaultSpec, t: float) -> bool:
    """Whether fault ``f`` is acting at scenario time ``t`` (on/off faults: in an on period)."""
    end = ALWAYS if f.duration_s is None else f.at_s + f.duration_s
    if not f.at_s <= t < end:
        return False
    return f.period_s is None or (t - f.at_s) % f.period_s < (f.on_s or 0)


@dataclass
class Job:
    """One training job: its ranks (GPU slots in rank order), layout and progress."""

    index: int
    spec: JobSpec
    nodes: list[int]
    slots: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))
    stage: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))
    dp_rank: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))
    tp_rank: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))
    #: Expert-parallel rank (Megatron: consecutive data-parallel ranks form an expert group).
    ep_rank: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=int))
    stage_factor: np.ndarray = field(default_factory=lambda: np.ones(0))
    state: str = "run"  # run | hang | down | ended
    jt: float = 0.0  # scenario time simulated so far
    pause: tuple[str, float] | None = ("warmup", 20.0)
    pending: dict | None = None  # the step in progress
    hang: FaultSpec | None = None
    abort_at: float = ALWAYS
    down_until: float = ALWAYS
    restart_after: tuple[FaultSpec, str] | None = None
    next_ckpt: float = ALWAYS
    next_eval: float = ALWAYS
    global_step: float = 0.0
    ckpt_step: float = 0.0
    epoch: int = 0
    events: list[tuple[float, FaultSpec]] = field(default_factory=list)
    t0: float = 4.3  # healthy step time (s), set at start
    ck_len: float = 45.0  # length of the checkpoint in progress
    #: The true goodput account: category (:data:`GOODPUT_CATEGORIES`) -> GPU-seconds so far.
    goodput: dict[str, float] = field(default_factory=lambda: dict.fromkeys(GOODPUT_CATEGORIES, 0.0))
    pending_gs: float = 0.0  # GPU-seconds of the step in progress (classified when it completes)
    high_step: float = 0.0  # the highest global step reached (steps below it after a resume: rework)
    saved: bool = False  # a save has succeeded (a restart loads it; else it starts afresh)
    attempt: int = 0  # training_restart_attempt of the current run
    started: float = 0.0  # scenario time the current run's processes started
    load: tuple[float, float] | None = None  # (start, end) of the current run's checkpoint load
    #: The current run's ranks (one TrainingMonitor each, by rank; started lazily at ``started``).
    mons: list[TrainingMonitor] = field(default_factory=list)
    spawned: bool = False
    #: The pause every live rank is inside (``with monitor.checkpoint()`` / ``evaluation()``).
    open: list = field(default_factory=list)
    #: All-reduces each rank of the current run launched in completed steps (NCCL RAS), and the
    #: scenario time the current hang began.
    launched: int = 0
    hang_at: float = 0.0

    @property
    def world(self) -> int:
        return len(self.slots)


class RealisticModel(ClusterModel):
    """Jobs, pauses, hangs and membership changes over :class:`ClusterModel`'s hardware."""

    PHASES = REALISTIC_PHASES

    def _init_jobs(self) -> None:
        spec = self.spec
        G = self.G
        rng = self.rng
        self.speed = np.clip(1.0 + rng.normal(0.0, spec.gpu_spread, G), 1 - 3 * spec.gpu_spread, 1.04)
        self.job_of = np.full(G, -1)
        self.rank_of = np.full(G, -1)
        self.r_alive = np.zeros(G, dtype=bool)
        self.vanished = np.zeros(G, dtype=bool)
        self.stuck = np.zeros(G, dtype=bool)  # the rank stuck in host code during a host hang
        self.acc: dict[str, np.ndarray] = {}
        self.missing_nodes: set[int] = set()
        #: The monitors' clock: the Unix time of the call the simulator makes into them.
        self.clock = _ranks.VirtualClock(self.t)
        self._mask_cache: dict[tuple, np.ndarray] = {}
        #: Random numbers of the issue-37 faults (per-step slowness, replays), apart from ``rng`` so
        #: every earlier scenario draws exactly what it drew before.
        self.step_rng = np.random.default_rng([spec.seed, 37])
        #: RAS's own draws (which rank a query catches one collective ahead): apart from the
        #: model's generator, so turning RAS on changes no other series.
        self._ras_rng = np.random.default_rng([spec.seed, 31])
        jspecs = spec.jobs or [
            JobSpec(
                job_id=spec.job_id,
                pipeline_stages=spec.pipeline_stages,
                tensor_parallel=spec.tensor_parallel,
                expert_parallel=spec.expert_parallel,
                mfu=spec.mfu,
            )
        ]
        self.jobs: list[Job] = []
        for i, js in enumerate(jspecs):
            n = js.nodes or spec.nodes
            job = Job(i, js, list(range(js.first_node, js.first_node + n)))
            job.next_ckpt = spec.checkpoint_every_s if spec.checkpoint_every_s > 0 else ALWAYS
            job.next_eval = (
                spec.eval_every_s * (0.9 + 0.2 * rng.random()) if spec.eval_every_s > 0 else ALWAYS
            )
            self._layout(job)
            job.t0 = self._nominal_step(job)
            self.jobs.append(job)
            self._spawn(job)
        for f in spec.faults:
            if f.kind in ("hang", "node_drain"):
                target = self._job_at(f.node)
                if target is None:
                    raise FleetscopeError(f"{f.kind} on node {f.node}, which runs no job")
                target.events.append((f.at_s + (f.lead_s if f.kind == "hang" else 0.0), f))
        for job in self.jobs:
            job.events.sort(key=lambda e: e[0])
        self._fired: set[int] = set()

    # ------------------------------------------------------------------ layout
    def _layout(self, job: Job) -> None:
        """Assign ranks Megatron-style: tensor-parallel fastest, then data-parallel, then stage."""
        js = job.spec
        slots = np.array([n * self.gpn + g for n in job.nodes for g in range(self.gpn)], dtype=int)
        tp = max(1, min(js.tensor_parallel, len(slots)))
        pp = max(1, js.pipeline_stages)
        dp = len(slots) // (tp * pp)
        if dp < 1:
            raise FleetscopeError(f"job {js.job_id}: {len(slots)} GPUs cannot hold tp {tp} x pp {pp}")
        slots = slots[: dp * tp * pp]  # a shrunk job leaves the GPUs of an incomplete replica idle
        r = np.arange(len(slots))
        job.slots = slots
        job.tp_rank = r % tp
        job.dp_rank = (r // tp) % dp
        job.stage = r // (tp * dp)
        job.ep_rank = job.dp_rank % max(1, js.expert_parallel)
        f = np.ones(len(slots))
        if pp > 1:
            f[job.stage == pp - 1] += js.last_stage_extra
            f[job.stage == 0] += js.first_stage_extra
        job.stage_factor = f
        self.job_of[np.isin(self.job_of, [job.index])] = -1
        self.rank_of[self.job_of == -1] = -1
        self.job_of[slots] = job.index
        self.rank_of[slots] = r
        self.r_alive[slots] = True
        self._reset_job_counters(job)

    def _reset_job_counters(self, job: Job) -> None:
        """The job's ranks are laid out anew: its processes (monitors) start at its next run."""
        _ranks.close(job.mons)
        job.mons = []
        job.open = []
        job.spawned = False
        job.epoch += 1

    def _at(self, jt: float) -> None:
        """Set the monitors' clock to scenario time ``jt`` (a Unix time on the model's clock)."""
        self.clock.now = self.t - (self.elapsed - jt)

    def _live(self, job: Job) -> np.ndarray:
        """Positions (ranks) of the job's ranks whose processes live."""
        return np.nonzero(self.r_alive[job.slots])[0]

    def _spawn(self, job: Job) -> None:
        """The run's processes start (at ``job.started``): one TrainingMonitor per rank, whose rank
        file the exporter serves from then on."""
        self._at(job.started)
        sl = job.slots
        layouts = None
        if self.spec.emit_layout:
            layouts = [
                dict(zip(LAYOUT, (int(job.stage[r]), int(job.dp_rank[r]), int(job.tp_rank[r])), strict=True))
                for r in range(len(sl))
            ]
            if job.spec.expert_parallel > 1:
                for r, lay in enumerate(layouts):
                    lay[c.EXPERT_PARALLEL_RANK_LABEL] = int(job.ep_rank[r])
        job.mons = _ranks.spawn(
            self.clock,
            job.spec.job_id,
            list(range(len(sl))),
            [int(self.slot_gpu[s]) for s in sl],
            job.attempt,
            layouts,
        )
        job.spawned = True
        job.launched = 0  # new processes, new communicators

    def _job_at(self, node: int) -> Job | None:
        for job in self.jobs:
            if node in job.nodes and job.state != "ended":
                return job
        return None

    # ------------------------------------------------------------------ one step
    def _step(self, job: Job, eff: dict, rng: np.random.Generator, gc: bool = True) -> dict:
        """Phase times of one step on every rank of ``job``: what each rank's host timers report."""
        spec, js = self.spec, job.spec
        sl = job.slots
        n = len(sl)
        k = js.step_scale
        S, M = max(1, js.pipeline_stages), max(1, js.microbatches)
        comp = COMPUTE_S * k * self.speed[sl] * eff["slow"][sl] * job.stage_factor
        comp = comp * np.clip(1 + rng.normal(0, spec.jitter, n), 0.9, 1.2)
        faulty = self._slow_steps(job, eff)
        comp = comp * eff["work"][sl] * faulty
        data = DATA_S * k * (1 + np.abs(rng.normal(0, 0.08, n))) + eff["data_add"][sl] * job.t0
        opt = OPT_S * k * np.clip(1 + rng.normal(0, 0.03, n), 0.9, 1.2) + eff["opt_add"][sl] * job.t0
        comm = (
            COMM_S * k * (1 + abs(rng.normal(0, spec.jitter)))
            + (eff["net_add"].get(job.index, 0.0) + eff["fabric_add"].get(job.index, 0.0)) * job.t0
        )
        host = np.zeros(n)
        if gc and spec.gc_every_s > 0 and rng.random() < job.t0 / spec.gc_every_s:
            host[rng.integers(0, n)] = spec.gc_s * (0.5 + rng.random())
        T = _lockstep(comp, data, host, opt, comm, S, M)
        # A pipeline stage idles in the bubbles: the slowest stage's compute span less its own.
        pp_idle = np.zeros(n) if S == 1 else float(np.max(comp)) * (M + S - 1) / M - comp
        wait = np.maximum(T - comm - data - host - comp - opt - pp_idle, 0.0)
        share = job.stage / (S - 1) if S > 1 else np.zeros(n)
        ph = {
            "data": data,
            "forward": comp / 3 + host + pp_idle * share,
            "backward": comp * 2 / 3 + pp_idle * (1 - share),
            "optimizer": opt.copy(),
        }
        ph["backward" if spec.wait_phase == "backward" else "optimizer"] += comm + wait
        out = {"T": T, "phases": ph, "busy": comp / T}
        if (eff["work"][sl] != 1).any():
            # The job's own imbalance (MoE) slows its steps too: what a fault costs is the time over
            # this same step without the fault, not over the balanced job's step.
            ref = _lockstep(
                comp / (eff["slow"][sl] * faulty),
                data - eff["data_add"][sl] * job.t0,
                host,
                opt - eff["opt_add"][sl] * job.t0,
                comm - eff["net_add"].get(job.index, 0.0) * job.t0,
                S,
                M,
            )
            out["T_ref"] = ref
        return out

    def _slow_steps(self, job: Job, eff: dict) -> np.ndarray:
        """This step's compute factors of the one-step-in-N faults of ``job``: a flaky GPU (its PCIe
        replay counter logs the step's retries) or a random rank (look-alike)."""
        out = np.ones(job.world)
        for j, slot, extra, p, replays in eff["step_slow"]:
            if j != job.index or self.step_rng.random() >= p:
                continue
            if slot < 0:
                out[self.step_rng.integers(0, job.world)] *= 1 + extra
                continue
            where = np.nonzero(job.slots == slot)[0]
            out[where] *= 1 + extra
            if replays and where.size:
                self.pcie_replay[slot] += self.step_rng.poisson(FLAKY_REPLAYS_PER_SLOW_STEP)
        return out

    def _nominal_step(self, job: Job) -> float:
        """The healthy step time of ``job`` (mean of simulated fault-free steps, own RNG)."""
        rng = np.random.default_rng([self.spec.seed, 7, job.index])
        eff = self._quiet_effects()
        return float(np.mean([self._step(job, eff, rng, gc=False)["T"] for _ in range(40)]))

    # ------------------------------------------------------------------ faults
    def _quiet_effects(self) -> dict:
        G = self.G
        return {
            "slow": np.ones(G),
            "clock": np.full(G, MAX_SM_CLOCK),
            "reasons": np.zeros(G),
            "temp_add": np.zeros(G),
            "power_cap": np.full(G, 700.0),
            "thermal_frac": np.zeros(G),
            "power_frac": np.zeros(G),
            "data_add": np.zeros(G),
            "opt_add": np.zeros(G),
            "net_add": {},
            "fabric_add": {},
            "bad_efa": [],
            # Workload imbalance (moe_imbalance): compute factors that are the job's, not a fault's.
            "work": np.ones(G),
            # (job index, slot or -1 for a random rank, extra compute, probability, PCIe replays).
            "step_slow": [],
            # (node, device, share of received packets dropped, the job's nodes) / (nodes, share).
            "rx_drops": [],
            "congestion": [],
            "read_latency": np.ones(self.n_nodes),
            "fsx": 1.0,
        }

    def _effects(self, t: float) -> dict:
        """What the faults acting at scenario time ``t`` change (per GPU slot, node or job)."""
        eff = self._quiet_effects()
        for i, f in enumerate(self.spec.faults):
            if f.kind == "hang" and f.cause == "efa":
                self._efa_hang_precursor(eff, f, t)
            if not _on(f, t):
                continue
            if f.kind in _STEP_FAULTS:
                self._step_fault(eff, i, f, t)
            elif f.kind in _GPU_FAULTS:
                self._gpu_fault(eff, f)
            else:
                self._io_fault(eff, f)
        return eff

    def _step_fault(self, eff: dict, i: int, f: FaultSpec, t: float) -> None:
        """A fault (or look-alike) of the job's steps rather than of a device: MoE load imbalance,
        a flaky GPU, random slow steps."""
        job = self._job_at(f.node)
        if job is None:
            return
        if f.kind == "flaky_gpu":
            eff["step_slow"].append((job.index, f.node * self.gpn + f.gpu, f.slowdown, 1 / f.one_in, True))
        elif f.kind == "random_slow_steps":
            eff["step_slow"].append((job.index, -1, f.slowdown, 1 / f.one_in, False))
        elif f.kind == "moe_imbalance":
            eff["work"][self._moe_hot(job, i, f, t)] *= 1 + f.slowdown

    def _moe_hot(self, job: Job, i: int, f: FaultSpec, t: float) -> np.ndarray:
        """The slots of the hot expert's GPUs at scenario time ``t``: the expert-parallel rank that
        holds it, in the expert groups whose batches route to it (``spread`` of them, at least two).
        Every ``move_every_s`` the token distribution has drifted: another expert is hot (
        :data:`MOE_HOT_STRIDE` along) in another draw of groups."""
        ep = max(1, job.spec.expert_parallel)
        period = int((t - f.at_s) // f.move_every_s)
        expert = (f.gpu + MOE_HOT_STRIDE * period) % ep
        group = job.dp_rank // ep
        n_groups = int(group.max()) + 1 if group.size else 0
        k = min(n_groups, max(2, round(f.spread * n_groups)))
        pick = np.random.default_rng([self.spec.seed, 37, i, period]).choice(n_groups, k, replace=False)
        return job.slots[np.isin(group, pick) & (job.ep_rank == expert)]

    def _efa_hang_precursor(self, eff: dict, f: FaultSpec, t: float) -> None:
        """An EFA-caused hang: its device retransmits from ``at_s`` while the job runs or hangs."""
        if f.at_s <= t and (f.duration_s is None or t < f.at_s + f.duration_s):
            job = self._job_at(f.node)
            if job is not None and job.state in ("run", "hang") and f.node in job.nodes:
                eff["bad_efa"].append((f.node, f.device, 0.3, True))

    def _gpu_fault(self, eff: dict, f: FaultSpec) -> None:
        """A fault of the GPU (or, for ``psu_brake``, of every GPU of its node)."""
        s = f.node * self.gpn + f.gpu
        node = slice(f.node * self.gpn, (f.node + 1) * self.gpn)
        if f.kind == "thermal_throttle":
            eff["slow"][s] = 1 + f.slowdown
            eff["clock"][s] = MAX_SM_CLOCK / (1 + f.slowdown * 1.1)
            eff["reasons"][s] = hardware.CLOCK_EVENT_HW_THERMAL | hardware.CLOCK_EVENT_SW_THERMAL
            eff["temp_add"][s] = 12 + 40 * f.slowdown
            eff["thermal_frac"][s] = 0.9
        elif f.kind in ("power_brake", "psu_brake"):
            where = node if f.kind == "psu_brake" else s
            eff["slow"][where] = 1 + f.slowdown
            eff["clock"][where] = MAX_SM_CLOCK / (1 + f.slowdown * 1.15)
            eff["reasons"][where] = hardware.CLOCK_EVENT_HW_POWER_BRAKE | hardware.CLOCK_EVENT_HW_SLOWDOWN
            eff["power_cap"][where] = 700.0 / (1 + 2 * f.slowdown)
            eff["power_frac"][where] = 0.95
        elif f.kind == "silent_slowdown":
            eff["slow"][s] = 1 + f.slowdown
        elif f.kind == "pcie_width_drop":
            eff["slow"][s] = 1.005

    def _io_fault(self, eff: dict, f: FaultSpec) -> None:
        """A fault of the network, the data path, the host CPU or the file system."""
        node = slice(f.node * self.gpn, (f.node + 1) * self.gpn)
        if f.kind == "efa_degraded":
            job = self._job_at(f.node)
            if job is not None:
                eff["net_add"][job.index] = eff["net_add"].get(job.index, 0.0) + f.slowdown
            eff["bad_efa"].append((f.node, f.device, f.slowdown, False))
        elif f.kind == "data_slow":
            eff["data_add"][node] += f.slowdown
            eff["read_latency"][f.node] = 1 + 20 * f.slowdown
        elif f.kind == "cpu_contention":
            eff["opt_add"][node] += 0.8 * f.slowdown
            eff["data_add"][node] += 0.2 * f.slowdown
            eff["slow"][node] *= 1.01  # kernel launches wait for the CPU too
        elif f.kind == "data_stall":
            job = self._job_at(f.node)
            if job is not None:
                eff["data_add"][job.slots] += f.slowdown
            eff["read_latency"][:] = 1 + 10 * f.slowdown
        elif f.kind == "fsx_saturation":
            eff["fsx"] = max(1.0, f.slowdown)
        elif f.kind in ("efa_rx_drops", "efa_congestion"):
            # Dropped or congested packets are sent again (SRD retransmits): every collective slows.
            job = self._job_at(f.node)
            if job is None:
                return
            # Congestion of the shared fabric slows the job without a fault of its own (the truth's
            # account books it as productive time, as it books an imbalance of experts).
            add = eff["net_add" if f.kind == "efa_rx_drops" else "fabric_add"]
            add[job.index] = add.get(job.index, 0.0) + f.slowdown
            if f.kind == "efa_rx_drops":
                eff["rx_drops"].append((f.node, f.device, f.packet_share, list(job.nodes)))
            else:
                eff["congestion"].append((list(job.nodes), f.packet_share))

    def _events(self, t0: float, t1: float) -> None:
        """Hardware-only onsets in [t0, t1) (the jobs' own events run in :meth:`_advance`)."""
        for i, f in enumerate(self.spec.faults):
            if i in self._fired or not f.at_s < t1:
                continue
            self._fired.add(i)
            if f.kind == "pcie_width_drop":
                self.pcie_width[f.node * self.gpn + f.gpu] = 8.0

    def _apply(self, job: Job, f: FaultSpec) -> None:
        """A job event at its time: a hang begins (and its hardware cause), or the node drains."""
        s = f.node * self.gpn + f.gpu
        if job.state != "run":
            return
        if f.kind == "node_drain":
            self._stop(job)
            job.down_until = job.jt + f.stall_s
            job.restart_after = (f, f.restart)
            return
        job.state = "hang"
        job.hang = f
        job.goodput["stall"] += job.pending_gs  # the step in progress never completes
        job.pending_gs = 0.0
        job.pending = None
        job.pause = None
        job.open = []  # a pause in progress never ends
        job.abort_at = job.jt + f.stall_s
        job.hang_at = job.jt
        if f.cause == "xid79":
            self._xid(s, 79)
            self.gpu_lost[s] = True
            self.r_alive[s] = False  # the rank on it dies with CUDA errors
        elif f.cause == "gpu_vanish":
            self.vanished[s] = True
        elif f.cause == "host":
            self.stuck[s] = True

    def _stop(self, job: Job) -> None:
        """The job's processes exit: their rank files (training series) go, the GPUs idle."""
        job.state = "down"
        job.goodput["recovery"] += job.pending_gs
        job.pending_gs = 0.0
        job.pending = None
        job.pause = None
        self.r_alive[job.slots] = False
        _ranks.close(job.mons)
        job.mons = []
        job.open = []

    def _restart(self, job: Job, f: FaultSpec, mode: str) -> None:
        nodes = list(job.nodes)
        if mode in ("shrink", "replace") and f.node in nodes:
            nodes.remove(f.node)
        if mode == "replace":
            spare = next(i for i in range(self.spec.nodes, self.n_nodes) if not self.node_present[i])
            self.node_present[spare] = True
            nodes.append(spare)
            self.node_present[f.node] = False  # the scheduler hands the old host back
        if mode == "end":
            job.state = "ended"
            self.job_of[job.slots] = -1
            return
        self.stuck[job.slots] = False
        job.nodes = sorted(nodes)
        self._layout(job)
        job.state = "run"
        job.hang = None
        job.abort_at = ALWAYS
        job.down_until = ALWAYS
        job.global_step = job.ckpt_step  # resumes from the last checkpoint
        job.pause = ("warmup", job.jt + WARMUP_S)
        job.attempt += 1
        job.started = job.jt
        load_s = min(LOAD_SHARE * self.spec.checkpoint_s, WARMUP_S / 2)
        job.load = (job.jt + WARMUP_S - load_s, job.jt + WARMUP_S) if job.saved else None
        self._spawn(job)

    # ------------------------------------------------------------------ one tick
    def tick(self, dt: float, scenario_dt: float | None = None) -> None:
        sdt = dt if scenario_dt is None else scenario_dt
        t0 = self.elapsed
        self.t += dt
        self.elapsed += sdt
        t1 = self.elapsed
        eff = self._effects(t0)
        self._events(t0, t1 if sdt > 0 else t0 + 1e-9)
        G = self.G
        z = np.zeros(G)
        self.acc = {m: z.copy() for m in ("train", "busy", "checkpoint", "eval", "warmup", "hang")}
        self.acc_steps = z.copy()  # steps' worth of traffic per slot in this tick
        self.acc_ck_bytes = np.zeros(self.n_nodes)
        for job in self.jobs:
            self._advance(job, eff, t1)
        self._gauges(eff, dt, sdt)

    def _advance(self, job: Job, eff: dict, t1: float) -> None:
        """Run ``job`` up to scenario time ``t1``: steps, pauses, the hang, the abort, the restart."""
        while job.jt < t1 - 1e-9 and job.state != "ended":
            if job.events and job.events[0][0] <= job.jt + 1e-9:
                self._apply(job, job.events.pop(0)[1])
                continue
            limit = min(t1, job.events[0][0]) if job.events else t1
            if job.state == "down":
                self._advance_down(job, limit)
            elif job.state == "hang":
                self._advance_hang(job, limit)
            elif job.pause is not None:
                self._advance_pause(job, job.pause, limit)
            else:
                self._advance_run(job, eff, limit)

    def _advance_down(self, job: Job, limit: float) -> None:
        """A stopped job: it restarts once its requeue (or drain) time is over."""
        if job.down_until <= job.jt:
            assert job.restart_after is not None, "a stopped job knows how it restarts"
            f, mode = job.restart_after
            self._restart(job, f, mode)
            return
        end = min(job.down_until, limit)
        job.goodput["recovery"] += (end - job.jt) * job.world  # the allocation waits for the requeue
        job.jt = end

    def _advance_hang(self, job: Job, limit: float) -> None:
        """A hung job: its GPUs spin until the NCCL watchdog aborts every rank."""
        if job.abort_at <= job.jt:
            self._stop(job)
            job.down_until = job.jt + REQUEUE_S
            assert job.hang is not None
            job.restart_after = (job.hang, "same" if job.hang.cause == "host" else job.hang.restart)
            return
        piece = min(job.abort_at, limit) - job.jt
        self.acc["hang"][job.slots] += piece
        job.goodput["stall"] += piece * job.world
        job.jt += piece

    def _advance_pause(self, job: Job, pause: tuple[str, float], limit: float) -> None:
        """A pause (warmup, checkpoint, evaluation) up to its end or ``limit``."""
        sl = job.slots
        kind, end = pause
        piece = min(end, limit) - job.jt
        self.acc[kind][sl] += piece
        loading = 0.0
        if kind == "warmup" and job.load is not None:  # the restart's checkpoint load
            loading = max(0.0, min(job.jt + piece, job.load[1]) - max(job.jt, job.load[0]))
            job.goodput["checkpoint"] += loading * job.world
        # An evaluation the job does not report is, to the account, time no counter explains.
        unreported = kind == EVAL and not self.spec.eval_phase
        job.goodput["recovery" if kind == "warmup" else "stall" if unreported else kind] += (
            piece - loading
        ) * job.world
        if kind == "checkpoint":
            self.acc_ck_bytes[job.nodes] += piece * CKPT_BYTES_PER_S * self.spec.checkpoint_s / job.ck_len
        job.jt += piece
        if job.jt >= end - 1e-9:
            job.pause = None
            self._at(job.jt)
            for ctx in job.open:  # the library books the pause when it ends
                ctx.__exit__(None, None, None)
            job.open = []
            if kind == "checkpoint":
                self._saved(job)
            elif kind == "warmup" and job.load is not None:
                load_s = job.load[1] - job.load[0]
                resumed = int(job.ckpt_step)
                _ranks.each(job.mons, self._live(job), lambda m: m.checkpoint_loaded(resumed, load_s))
                job.load = None

    def _saved(self, job: Job) -> None:
        """A save completed (its ranks counted it when their ``checkpoint()`` blocks ended)."""
        job.ckpt_step = job.global_step  # what a restart resumes from
        job.saved = True

    def _advance_run(self, job: Job, eff: dict, limit: float) -> None:
        """A running job: a checkpoint or evaluation begins when due, else (part of) a step."""
        acc = self.acc
        sl = job.slots
        if job.pending is None:
            if job.jt >= job.next_ckpt:
                job.ck_len = self.spec.checkpoint_s * eff["fsx"] * (0.9 + 0.2 * self.rng.random())
                job.pause = ("checkpoint", job.jt + job.ck_len)
                job.next_ckpt += self.spec.checkpoint_every_s
                nbytes = CKPT_BYTES_PER_S * self.spec.checkpoint_s * len(job.nodes) / job.world
                saved = int(job.global_step)
                self._enter(job, lambda m: m.checkpoint(step=saved, nbytes=nbytes))
                return
            if job.jt >= job.next_eval:
                job.pause = (EVAL, job.jt + self.spec.eval_s * (0.85 + 0.3 * self.rng.random()))
                job.next_eval += self.spec.eval_every_s
                if self.spec.eval_phase:
                    self._enter(job, lambda m: m.evaluation())
                return
            step = self._step(job, eff, self.rng)
            step["start"], step["end"] = job.jt, job.jt + step["T"]
            step["slowed"] = _slowed(eff, job)
            job.pending = step
        step = job.pending
        end = min(step["end"], limit)
        piece = end - job.jt
        acc["train"][sl] += piece
        job.pending_gs += piece * job.world
        acc["busy"][sl] += piece * step["busy"]
        self.acc_steps[sl] += piece / step["T"]
        job.jt = end
        if end >= step["end"] - 1e-9:
            self._commit(job, step)
            job.pending = None

    def _enter(self, job: Job, pause) -> None:
        """Every live rank enters a pause (a ``with`` block of its monitor) now."""
        self._at(job.jt)
        job.open = [pause(job.mons[i]) for i in self._live(job).tolist()]
        for ctx in job.open:
            ctx.__enter__()

    def _commit(self, job: Job, step: dict) -> None:
        """Every live rank completes the step: its monitor counts its phases and the step."""
        flops = job.spec.mfu * self.peak.get("bf16", 0.9895e15) * job.t0
        self._at(step["end"])
        _ranks.commit_step(
            job.mons, self._live(job), step["T"], step["phases"], TOKENS_PER_STEP * job.spec.step_scale, flops
        )
        self._account_step(job, step)
        job.global_step += 1
        job.launched += _ras.COLLECTIVES_PER_STEP

    def _account_step(self, job: Job, step: dict) -> None:
        """The true account of a completed step: rework below the high-water mark, else productive
        time plus, while a fault slows the job, the time over the job's healthy step."""
        gs, job.pending_gs = job.pending_gs, 0.0
        if job.global_step < job.high_step:
            job.goodput["rework"] += gs
            return
        job.high_step = job.global_step + 1
        ref = step.get("T_ref", job.t0)
        slow = max(0.0, (step["T"] - ref) * job.world) if step["slowed"] else 0.0
        slow = min(slow, gs)
        job.goodput["slowdown"] += slow
        job.goodput["productive"] += gs - slow

    def goodput_truth(self) -> dict[str, dict[str, float]]:
        """Job id -> category -> GPU-seconds so far (a step in progress counts as productive)."""
        out = {}
        for job in self.jobs:
            acct = dict(job.goodput)
            acct["productive"] += job.pending_gs
            out[job.spec.job_id] = {k: round(v, 3) for k, v in acct.items()}
        return out

    # ------------------------------------------------------------------ gauges and counters
    def _gauges(self, eff: dict, dt: float, sdt: float) -> None:
        rng = self.rng
        G = self.G
        span = sdt if sdt > 0 else 1.0
        a = {k: v / span for k, v in self.acc.items()}
        in_job = self.job_of >= 0
        hang = np.where(self.stuck, 0.0, a["hang"])
        busy = a["busy"]
        util = 100 * (0.99 * a["train"] + hang) + 45 * a["eval"] + 22 * a["checkpoint"] + 12 * a["warmup"]
        util = np.clip(util * (1 + rng.normal(0, 0.01, G)), 0, 100)
        active = busy + 0.3 * a["eval"] + 0.12 * hang + 0.05 * a["checkpoint"]
        tensor = np.clip((0.58 * busy + 0.12 * a["eval"]) * (1 + rng.normal(0, 0.02, G)), 0, 1)
        power = 70 + 630 * (0.22 * util / 100 + 0.78 * active)
        power = np.minimum(power * (1 + rng.normal(0, 0.015, G)), eff["power_cap"])
        temp = self.base_temp + 0.025 * (power - 85) + eff["temp_add"] * (util > 5) + rng.normal(0, 0.5, G)
        clock = np.where(util > 0.5, eff["clock"], 345.0)
        reasons = np.where(util > 0.5, eff["reasons"], hardware.CLOCK_EVENT_GPU_IDLE)
        sw_cap = (rng.random(G) < 0.01) & (util > 50) & (reasons == 0)
        reasons = np.where(sw_cap, hardware.CLOCK_EVENT_SW_POWER_CAP, reasons)
        clock = np.where(sw_cap, clock - rng.uniform(30, 120, G), clock)
        clock = np.where(util > 0.5, np.round(clock / 15) * 15, clock)
        self.energy_mj += power * dt * 1000
        working = util > 5
        self.thermal_violation += eff["thermal_frac"] * working * dt * 1e9
        self.power_violation += eff["power_frac"] * working * dt * 1e9
        self._count_soft_errors(dt)
        self.g = {
            "util": util,
            "mem_util": util * 0.35,
            "clock": clock,
            "mem_clock": np.full(G, 2619.0),
            "temp": temp,
            "mem_temp": temp + 6,
            "power": power,
            "tensor": tensor,
            "sm_active": np.clip(0.92 * active, 0, 1),
            "gr_active": util / 100 * 0.98,
            "dram": np.clip(0.45 * busy + 0.1 * a["eval"], 0, 1),
            "fb_used": np.where(in_job | (a["hang"] > 0), 71500.0, 0.0),
            "reasons": reasons,
            "nvlink_bw": busy * 150000.0,
        }
        self.present = self.node_present[self.slot_node] & ~self.vanished
        if dt > 0:
            self._network_and_storage(eff, dt, span)
        self.missing_nodes = self._missing(dt)

    def _network_and_storage(self, eff: dict, dt: float, span: float) -> None:
        rng = self.rng
        N, E = self.n_nodes, self.E
        scale = np.zeros(self.G)
        for job in self.jobs:
            scale[job.slots] = job.spec.step_scale
        node_steps = np.zeros(N)
        np.add.at(node_steps, self.slot_node, self.acc_steps * scale / self.gpn)
        node_eval = np.zeros(N)
        np.add.at(node_eval, self.slot_node, self.acc["eval"] / span / self.gpn)
        per_dev = (node_steps * STEP_BYTES + node_eval * 2e6 * dt)[:, None] / E * np.ones((1, E))
        per_dev *= 1 + rng.normal(0, 0.02, per_dev.shape)
        base = self.node_present[:, None].astype(float)
        pkts = per_dev / EFA_PACKET_BYTES
        for name, v in (
            ("tx_bytes", per_dev),
            ("rx_bytes", per_dev),
            ("tx_pkts", pkts),
            ("rx_pkts", pkts),
            ("rdma_write_bytes", per_dev * 0.9),
            ("rdma_read_bytes", per_dev * 0.05),
            ("rdma_write_wrs", pkts / 4),
            ("rdma_read_wrs", pkts / 80),
        ):
            self.efa[name] += v * base
        for name in ("send_bytes", "recv_bytes"):
            self.efa[name] += 2e4 * dt * base
        for name in ("send_wrs", "recv_wrs"):
            self.efa[name] += 20 * dt * base
        self.efa["retrans_pkts"] += rng.poisson(np.maximum(pkts * 2e-6, 0)) * base
        for node, dev, sev, precursor in eff["bad_efa"]:
            p = pkts[node, dev] + 2e5 * dt / 15
            self.efa["retrans_pkts"][node, dev] += p * (0.03 + 0.1 * sev)
            self.efa["retrans_bytes"][node, dev] += p * (0.03 + 0.1 * sev) * EFA_PACKET_BYTES
            burst = 4.0 if precursor else 1.0
            self.efa["retrans_timeout_events"][node, dev] += rng.poisson(3 * burst * dt / 15)
            self.efa["impaired_remote_conn_events"][node, dev] += rng.poisson(2 * burst * dt / 15)
            self.efa["unresponsive_remote_events"][node, dev] += rng.poisson(0.3 * burst * dt / 15)
        self._receive_side(eff, pkts)
        self.efa_lifespan += dt
        present = self.node_present.astype(float)
        reads = node_steps * 2.2e8 * 4.3 + node_eval * 2e7 * dt
        self.lustre_read += reads * present * (1 + rng.normal(0, 0.05, N))
        self.lustre_write += (self.acc_ck_bytes + 1e5 * dt) * present
        ck_share = np.zeros(N)
        np.add.at(ck_share, self.slot_node, self.acc["checkpoint"] / span / self.gpn)
        for op, rate in _LUSTRE_OPS.items():
            k: np.ndarray | float = (
                rate * dt * (1 + (30 * ck_share if op in ("open", "close", "create") else 0))
            )
            lat: np.ndarray | float = 2e-4 * (eff["read_latency"] if op == "read" else 1.0)
            lat = lat * (eff["fsx"] if op in ("write", "open", "create", "close") else 1.0)
            self.lustre_ops[op] += k * present
            self.lustre_op_seconds[op] += k * lat * present

    def _receive_side(self, eff: dict, pkts: np.ndarray) -> None:
        """Receive drops and congestion (issue 37). A device that drops a share of what it receives
        counts it in ``rx_drops``; its senders (the same rail, device index, on the job's other
        nodes: NCCL's rings and trees pair rails) retransmit it, each a ``1 / (nodes - 1)`` part, so
        no sender's own ratio stands out. Congestion makes every device retransmit a little and
        drops nothing on receive."""
        for node, dev, share, nodes in eff["rx_drops"]:
            dropped = pkts[node, dev] * share
            self.efa["rx_drops"][node, dev] += dropped
            senders = [n for n in nodes if n != node and self.node_present[n]]
            if senders:
                each = dropped / len(senders)
                self.efa["retrans_pkts"][senders, dev] += each
                self.efa["retrans_bytes"][senders, dev] += each * EFA_PACKET_BYTES
        for nodes, share in eff["congestion"]:
            here = [n for n in nodes if self.node_present[n]]
            self.efa["retrans_pkts"][here] += pkts[here] * share
            self.efa["retrans_bytes"][here] += pkts[here] * share * EFA_PACKET_BYTES

    def _missing(self, dt: float) -> set[int]:
        """Nodes whose scrape is missing now: an exporter gap, or a random missed scrape."""
        out = {f.node for f in self.spec.faults if f.kind == "scrape_gap" and _on(f, self.elapsed)}
        if dt > 0 and self.spec.scrape_miss > 0:
            out |= {int(n) for n in np.nonzero(self.rng.random(self.n_nodes) < self.spec.scrape_miss)[0]}
        return out

    # ------------------------------------------------------------------ series
    def series(self) -> dict[str, SimSeries]:
        out = super().series()
        if self.spec.nccl_ras:
            self._ras_series(out)
        if not self.missing_nodes:
            return out
        hosts = frozenset(self.hostnames[n] for n in self.missing_nodes)
        for s in out.values():
            if c.NODE_LABEL not in s.labels or not s.keys:
                continue
            ck = (id(s.keys), hosts)
            mask = self._mask_cache.get(ck)
            if mask is None:
                i = s.labels.index(c.NODE_LABEL)
                mask = np.array([k[i] in hosts for k in s.keys])
                if len(self._mask_cache) > 4096:
                    self._mask_cache.clear()
                self._mask_cache[ck] = mask
            if mask.any():
                s.values = np.where(mask, np.nan, np.asarray(s.values, dtype=float))
        return out

    def _training_series(self, out: dict[str, SimSeries]) -> None:
        """Every live rank's training series: its monitor's samples, as the exporter serves them."""
        if not self.spec.training_telemetry:
            return
        tl = c.TRAINING_LABELS + self._scrape_names()
        slots = np.nonzero((self.job_of >= 0) & self.r_alive & self.node_present[self.slot_node])[0]
        jobs = self.jobs
        slots = np.array([s for s in slots if jobs[self.job_of[s]].spawned], dtype=int)
        ver = (tuple(j.epoch for j in jobs), tuple(slots))

        def key(s: int) -> tuple[str, ...]:
            n = int(self.slot_node[s])
            return (
                jobs[self.job_of[s]].spec.job_id,
                str(int(self.rank_of[s])),
                str(int(self.slot_gpu[s])),
                self.hostnames[n],
                str(int(self.slot_gpu[s])),
            ) + self._scrape(n)

        keys = self._cached("train", ver, lambda: [key(int(s)) for s in slots])
        mons = [jobs[self.job_of[s]].mons[self.rank_of[s]] for s in slots]
        gstep = np.array([jobs[j].global_step for j in self.job_of[slots]], dtype=float)
        loss = 2.1 + 6 * np.exp(-gstep / 3000) + self.rng.normal(0, 0.02, len(slots))
        for m, value in zip(mons, np.round(loss, 4).tolist(), strict=True):
            m.set_loss(value)
        for name, (extra, rows, values) in _ranks.samples(mons, keys).items():
            cached = self._cached(f"train:{name}", rows, lambda rows=rows: rows)
            out[name] = SimSeries(tl + extra, cached, values)

    def _ras_series(self, out: dict[str, SimSeries]) -> None:
        """Each live job's NCCL RAS series, from its rank 0's node (:mod:`fleetscope.simulate.ras`)."""
        rows: dict[c.Metric, tuple[list[tuple[str, ...]], list[float]]] = {}
        rng = self._ras_rng
        for job in self.jobs:
            if job.state not in ("run", "hang") or not job.spawned or not len(job.slots):
                continue
            sl = job.slots
            ranks = [(self.hostnames[int(self.slot_node[s])], int(self.slot_gpu[s])) for s in sl]
            culprit = None
            if job.hang is not None:
                hit = np.nonzero(sl == job.hang.node * self.gpn + job.hang.gpu)[0]
                culprit = int(hit[0]) if len(hit) else None
            report = _ras.job_report(
                ranks, job.launched, job.state, rng, paused=job.pause is not None,
                cause=None if job.hang is None else job.hang.cause, culprit=culprit,
                hung_for=job.jt - job.hang_at,
            )  # fmt: skip
            head = (ranks[0][0], job.spec.job_id)
            tail = self._scrape(int(self.slot_node[sl[0]]))
            series = report_series(report)
            series.add(c.NCCL_RAS_UP, (), 1.0)
            for metric, values in series.rows.items():
                keys, vals = rows.setdefault(metric, ([], []))
                for labels, value in values:
                    keys.append(head + labels + tail)
                    vals.append(value)
        for metric, (keys, vals) in rows.items():
            out[metric.name] = SimSeries(
                metric.labels + self._scrape_names(), keys, np.asarray(vals, dtype=float)
            )


_LUSTRE_OPS = {"open": 2.0, "close": 2.0, "getattr": 10.0, "read": 150.0, "write": 5.0, "create": 0.1}


def _lockstep(
    comp: np.ndarray, data: np.ndarray, host: np.ndarray, opt: np.ndarray, comm: float, S: int, M: int
) -> float:
    """The step time of ranks in lock-step (every rank waits for the slowest; pipeline stages with
    their bubbles): :meth:`RealisticModel._step`'s, and its fault-free reference."""
    if S == 1:
        return float(np.max(data + host + comp + opt)) + comm
    return float(np.max(data + host)) + float(np.max(comp)) * (M + S - 1) / M + comm + float(np.max(opt))


def _slowed(eff: dict, job: Job) -> bool:
    """Whether a fault acting now slows ``job``'s steps (its GPUs, data path, host CPU or network)."""
    sl = job.slots
    return bool(
        (eff["slow"][sl] > 1.0).any()
        or (eff["data_add"][sl] > 0).any()
        or (eff["opt_add"][sl] > 0).any()
        or eff["net_add"].get(job.index, 0.0) > 0
        or any(j == job.index and slot >= 0 for j, slot, *_ in eff["step_slow"])  # a flaky GPU
    )


def check_training_spec(spec: ScenarioSpec) -> None:
    """The training family injects every fault but the inference family's; a load imbalance of
    experts needs a job with experts (``expert_parallel`` of 2 or more)."""
    check_no_inference_faults(spec)
    for f in spec.faults:
        if f.kind != "moe_imbalance":
            continue
        on = spec.job_on(f.node)
        ep = spec.expert_parallel if on is None else on.expert_parallel
        if ep < 2:
            raise FleetscopeError("moe_imbalance needs a job with expert_parallel of 2 or more")
