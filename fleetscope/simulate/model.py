"""A virtual synchronous-training cluster, advanced tick by tick, with injected faults.

The model is honest about data-parallel training:

* every rank computes its forward/backward pass at its own GPU's speed (GPUs differ by a few
  percent and carry noise), then all ranks meet in the gradient all-reduce, so the **step time is
  set by the slowest rank**; the others wait, and their waiting shows as lower tensor activity and
  power (the wait is counted in the ``optimizer`` phase, where the collective sits, never in
  forward/backward, as a telemetry library that syncs CUDA around its phases reports it);
* periodic checkpoints pause every rank and burst Lustre writes;
* a fault changes only what its physics would change (see :meth:`ClusterModel._fault_effects`).

Each :meth:`ClusterModel.tick` advances the model by ``dt`` seconds and :meth:`ClusterModel.series`
returns the current value of every series, grouped by metric, exactly as the node exporters would
serve them. The recorder (``record.py``) and the live servers (``live.py``) share this one model.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np

from fleetscope import contract as c
from fleetscope import hardware, xids
from fleetscope.simulate import ranks as _ranks
from fleetscope.simulate.spec import FaultSpec, ScenarioSpec, node_name

# Nominal per-step phase times in seconds (a dense ~70B model on H100s, DP across nodes).
COMPUTE_S = 3.0  # forward + backward
DATA_S = 0.12
COMM_S = 0.55  # exposed all-reduce
OPT_S = 0.25
STEP_NOMINAL_S = COMPUTE_S + DATA_S + COMM_S + OPT_S
#: A healthy job's actual step: the slowest of many GPUs and the noisiest data fetch set the pace.
STEP_TYPICAL_S = 4.3
#: MFU of a healthy job (typical H100 BF16: 35-45%, docs/design.md#mfu-and-peak-flops).
NOMINAL_MFU = 0.40
TOKENS_PER_STEP = 4 * 4096  # per rank: micro-batches x sequence length
#: Bytes per EFA packet the simulator counts: packets = bytes / this, for sent and resent alike.
EFA_PACKET_BYTES = 8800
MAX_SM_CLOCK = 1980.0
RESTART_WARMUP_S = 60.0
#: Checkpoint bytes a node writes per second of a checkpoint (its Lustre write burst).
CKPT_BYTES_PER_NODE_S = 2.5e9
BUS_IDS = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")


def _uuid(seed: int, node: int, gpu: int) -> str:
    h = hashlib.sha1(f"{seed}-{node}-{gpu}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


@dataclass
class SimSeries:
    """The current values of one metric: label names, one label tuple per series, one value each.

    ``keys`` is the same list object as long as the set of series is unchanged, so a recorder can
    cache by identity. A NaN value means the series has no sample now (absent).
    """

    labels: tuple[str, ...]
    keys: list[tuple[str, ...]]
    values: np.ndarray


class ClusterModel:
    """The state of every GPU, EFA device, Lustre mount and rank of one job.

    :func:`fleetscope.simulate.families.cluster_model` builds the model of a spec's family: for a
    realistic spec (any family but ``classic``) a subclass, such as
    :class:`fleetscope.simulate.jobs.RealisticModel`, which shares this class's hardware state and
    series but runs its own jobs; a classic spec runs this class unchanged, seed for seed. This
    module imports no family (the families import it).

    Its one job's training series come from one real
    :class:`~fleetscope.telemetry.monitor.TrainingMonitor` per rank on the model's clock
    (:mod:`fleetscope.simulate.ranks`): the model decides what each rank does, the monitors what
    is reported, with the library's counter rules.
    """

    def __new__(cls, spec: ScenarioSpec, scrape_labels: bool = True) -> ClusterModel:
        if cls is ClusterModel and spec.realistic:
            raise TypeError(
                f"a {spec.family} spec's model is built by fleetscope.simulate.families.cluster_model"
            )
        return super().__new__(cls)

    def __init__(self, spec: ScenarioSpec, scrape_labels: bool = True) -> None:
        self.spec = spec
        self.rng = np.random.default_rng(spec.seed)
        self.scrape_labels = scrape_labels
        n_spare = sum(1 for f in spec.faults if f.restart == "replace" and _stops_job(f.kind))
        self.n_nodes = spec.nodes + n_spare
        self.gpn = spec.gpus_per_node
        G = self.n_nodes * self.gpn
        self.G = G
        self.t = spec.start
        self.elapsed = 0.0
        self.hostnames = [node_name(i) for i in range(self.n_nodes)]
        self.node_present = np.array([i < spec.nodes for i in range(self.n_nodes)])
        self.slot_node = np.arange(G) // self.gpn
        self.slot_gpu = np.arange(G) % self.gpn
        # GPUs differ by a few percent (silicon lottery, cooling position): compute-time factor.
        self.speed = np.clip(1.0 + self.rng.normal(0.0, 0.012, G), 0.97, 1.04)
        self.base_temp = 52 + self.rng.normal(0, 3, G)
        self.uuid = [
            _uuid(spec.seed, int(n), int(g)) for n, g in zip(self.slot_node, self.slot_gpu, strict=True)
        ]
        # A GPU model missing from the contract's table gets no peak series (never a guess); the
        # job still does the work of an H100-class GPU.
        self.peak = hardware.peak_flops(spec.model_name) or {}
        self.flops_per_step = NOMINAL_MFU * self.peak.get("bf16", 0.9895e15) * STEP_NOMINAL_S
        # Per-GPU accumulators.
        z = np.zeros(G)
        self.energy_mj = self.rng.uniform(1e9, 5e9, G)
        self.pcie_replay = np.floor(self.rng.uniform(0, 20, G))
        self.power_violation = z.copy()
        self.thermal_violation = z.copy()
        self.sbe = np.floor(self.rng.uniform(0, 3, G))
        self.dbe = z.copy()
        self.corr_rows = np.floor(self.rng.uniform(0, 2, G))
        self.uncorr_rows = z.copy()
        self.remap_failure = z.copy()
        self.remap_pending = z.copy()
        self.recovery = z.copy()
        self.gpu_lost = np.zeros(G, dtype=bool)
        self.pcie_width = np.full(G, 16.0)
        self.last_xid = z.copy()
        self.xid_counts: dict[tuple[int, int], float] = {}  # (slot, xid) -> count
        # Per-slot rank assignment (-1: not in the job) and per-rank accumulators.
        self.rank_of = np.where(self.slot_node < spec.nodes, np.arange(G), -1)
        self.job_running = True
        # Both on the scenario clock (``elapsed``), which a live cluster may run faster than time.
        self.stall_until: float | None = None
        self.warmup_until = 20.0
        self.pending_restart: FaultSpec | None = None
        self.r_dead = np.zeros(G, dtype=bool)  # this rank's process is gone (series dropped)
        self.r_epoch = 0
        #: The ranks' monitors (by rank), their clock and the run's restart attempt.
        self.clock = _ranks.VirtualClock(self.t)
        self.r_mons: list = []
        self.r_slot = np.zeros(0, dtype=int)  # the slot of each rank
        self.attempt = 0
        #: The checkpoint every live rank is inside: its ``with monitor.checkpoint()`` blocks, the
        #: monitors' time it began and its end on the scenario clock.
        self.ck_open: list = []
        self.ck_began = 0.0
        self.ck_end = 0.0
        self.ck_k = 0  # the last checkpoint begun (the k-th, every checkpoint_every_s)
        self._tick_at = (self.t, self.elapsed, 1.0)
        self.global_step = 0.0
        self.step_acc = 0.0
        self.tokens_total_job = 0.0
        # Per-node EFA devices and Lustre.
        E = spec.efa_per_node
        self.E = E
        self.efa_names = [f"rdmap{79 + 16 * i}s0" for i in range(E)]
        self.efa = {name: np.zeros((self.n_nodes, E)) for name in _EFA_COUNTERS}
        self.efa_lifespan = self.rng.uniform(1e5, 1e6, (self.n_nodes, 1)) * np.ones((1, E))
        self.lustre_read = self.rng.uniform(1e11, 1e12, self.n_nodes)
        self.lustre_write = self.rng.uniform(1e11, 1e12, self.n_nodes)
        self.lustre_ops = {op: self.rng.uniform(1e4, 1e5, self.n_nodes) for op in _LUSTRE_OPS}
        self.lustre_op_seconds = {op: self.rng.uniform(10, 100, self.n_nodes) for op in _LUSTRE_OPS}
        # The current gauges, filled by tick().
        self.g: dict[str, np.ndarray] = {}
        self._fired: set[int] = set()
        self._key_cache: dict[str, tuple[object, list]] = {}
        self._init_jobs()
        self.tick(0.0)

    def _init_jobs(self) -> None:
        """Set up the jobs before the first tick: the classic model's one job starts its run."""
        self._start_run()

    # ------------------------------------------------------------------ ranks
    def _start_run(self) -> None:
        """The job's processes start (now on the monitors' clock): one TrainingMonitor per rank.

        A restarted run's monitors carry the restart attempt and go on from the job's global step
        (the classic job resumes where it stopped); the old run's monitors are closed.
        """
        _ranks.close(self.r_mons)
        self.r_mons = []
        self.ck_open = []
        self.r_dead = np.zeros(self.G, dtype=bool)
        self.r_epoch += 1
        in_job = np.nonzero(self.rank_of >= 0)[0]
        self.r_slot = in_job[np.argsort(self.rank_of[in_job], kind="stable")]
        if not self.spec.training_telemetry:
            return
        self.r_mons = _ranks.spawn(
            self.clock,
            self.spec.job_id,
            [int(self.rank_of[s]) for s in self.r_slot],
            [int(self.slot_gpu[s]) for s in self.r_slot],
            self.attempt,
            None,
        )
        if self.global_step:
            _ranks.each(
                self.r_mons, np.arange(len(self.r_mons)), lambda m: m.set_global_step(int(self.global_step))
            )

    def _clock_at(self, x: float) -> float:
        """The monitors' time (Unix seconds on the model's clock) at scenario time ``x`` of this tick."""
        t0, e0, rate = self._tick_at
        return t0 + (x - e0) * rate

    def _checkpoints(self, running: bool) -> float:
        """Checkpoints begin and end as due in this tick: every live rank's monitor is inside a
        ``checkpoint()`` block from the start to the end of each (so its seconds reach the counters at
        the end, as the library books them). Returns the monitors' time of this tick's last step."""
        spec = self.spec
        e0, e1 = self._tick_at[1], self.elapsed
        if self.ck_open and self.ck_end <= e1:
            self._end_checkpoint(max(self.ck_end, e0))
        every, length = spec.checkpoint_every_s, spec.checkpoint_s
        if running and e1 > e0 and every > 0 and length > 0:
            k = max(1, math.floor(e0 / every))
            while k * every < e1:
                lo, hi = k * every, k * every + length
                if hi > e0 and k > self.ck_k and not self.ck_open:
                    self.ck_k = k
                    self._begin_checkpoint(max(lo, e0), hi)
                    if hi <= e1:
                        self._end_checkpoint(hi)
                k += 1
        return self.ck_began if self.ck_open else self.t

    def _begin_checkpoint(self, x: float, end: float) -> None:
        self.clock.now = self.ck_began = self._clock_at(x)
        self.ck_end = end
        step = int(self.global_step)
        nbytes = CKPT_BYTES_PER_NODE_S * self.spec.checkpoint_s / self.gpn
        self.ck_open = [self.r_mons[i].checkpoint(step=step, nbytes=nbytes) for i in self._live_ranks()]
        for ctx in self.ck_open:
            ctx.__enter__()

    def _end_checkpoint(self, x: float) -> None:
        self.clock.now = self._clock_at(x)
        for ctx in self.ck_open:
            ctx.__exit__(None, None, None)
        self.ck_open = []

    def _live_ranks(self) -> np.ndarray:
        """Positions (ranks) in ``r_mons`` of the ranks whose processes live."""
        if not self.r_mons:
            return np.zeros(0, dtype=int)
        return np.nonzero(~self.r_dead[self.r_slot])[0]

    # ------------------------------------------------------------------ faults
    def _active(self, f: FaultSpec) -> bool:
        rel = self.elapsed
        end = math.inf if f.duration_s is None else f.at_s + f.duration_s
        return f.at_s <= rel < end

    def _slot(self, f: FaultSpec) -> int:
        return f.node * self.gpn + f.gpu

    def _fire_once(self, i: int, f: FaultSpec) -> None:
        """Events that happen at a fault's onset (XIDs, ECC counts, the job crashing)."""
        s = self._slot(f)
        if f.kind == "gpu_lost":
            self._xid(s, 79)
            self.gpu_lost[s] = True
            self._crash_job(f, s)
        elif f.kind == "ecc_uncorrectable":
            self._xid(s, 48)
            self._xid(s, 63)
            self.dbe[s] += 2
            self.uncorr_rows[s] += 1
            self.remap_pending[s] = 1
            self.recovery[s] = 1
            self._crash_job(f, s)
        elif f.kind == "row_remap_failure":
            self._xid(s, 64)
            self.remap_failure[s] = 1
            self.recovery[s] = 4
            self._crash_job(f, s)
        elif f.kind == "pcie_width_drop":
            self.pcie_width[s] = 8.0

    def _xid(self, slot: int, xid: int) -> None:
        self.xid_counts[(slot, xid)] = self.xid_counts.get((slot, xid), 0.0) + 1
        self.last_xid[slot] = xid

    def _crash_job(self, f: FaultSpec, slot: int) -> None:
        """The rank on the faulty GPU dies; the others hang in NCCL until the job is restarted."""
        r = self.rank_of[slot]
        if r >= 0:
            self.r_dead[slot] = True
            if self.r_mons:
                self.r_mons[r].close()
        self.ck_open = []  # the hung ranks never leave a checkpoint in progress
        self.job_running = False
        self.stall_until = self.elapsed + f.stall_s
        self.pending_restart = f

    def _restart_job(self) -> None:
        f = self.pending_restart
        assert f is not None
        bad = f.node
        in_job = self.rank_of >= 0
        nodes = sorted({int(n) for n in self.slot_node[in_job]} - {bad})
        if f.restart == "replace":
            spare = next(i for i in range(self.spec.nodes, self.n_nodes) if not self.node_present[i])
            self.node_present[spare] = True
            nodes = sorted(nodes + [spare])
        self.rank_of = np.full(self.G, -1)
        for order, n in enumerate(nodes):
            for g in range(self.gpn):
                self.rank_of[n * self.gpn + g] = order * self.gpn + g
        self.attempt += 1
        self.clock.now = self._clock_at(self.stall_until if self.stall_until is not None else self.elapsed)
        self._start_run()
        self.job_running = True
        self.stall_until = None
        self.pending_restart = None
        self.warmup_until = self.elapsed + RESTART_WARMUP_S

    def _count_soft_errors(self, dt: float) -> None:
        """Healthy background counts of a tick: a rare corrected ECC error, PCIe replays (many on a
        narrowed link). Every model draws them at the same point of its tick."""
        if dt > 0:
            G = self.G
            self.sbe += self.rng.random(G) < 0.002
            self.pcie_replay += np.where(
                self.pcie_width < 16, self.rng.poisson(40 * dt / 15, G), self.rng.random(G) < 0.01
            )

    def _fault_effects(self) -> dict[str, np.ndarray | float]:
        """Per-GPU and job-wide multipliers of the faults active now."""
        G = self.G
        slow = np.ones(G)
        clock = np.full(G, MAX_SM_CLOCK)
        reasons = np.zeros(G)
        temp_add = np.zeros(G)
        power_cap = np.full(G, 700.0)
        thermal_frac = np.zeros(G)
        power_frac = np.zeros(G)
        # net/data: seconds added to every step's collective / data fetch.
        eff: dict[str, np.ndarray | float] = {"net": 0.0, "data": 0.0, "lustre_read": 1.0}
        bad_efa: list[tuple[int, int, float]] = []
        for i, f in enumerate(self.spec.faults):
            if not self._active(f):
                continue
            if i not in self._fired:
                self._fired.add(i)
                self._fire_once(i, f)
            s = self._slot(f)
            if f.kind == "thermal_throttle":
                slow[s] = 1 + f.slowdown
                clock[s] = MAX_SM_CLOCK / (1 + f.slowdown * 1.1)
                reasons[s] = hardware.CLOCK_EVENT_HW_THERMAL | hardware.CLOCK_EVENT_SW_THERMAL
                temp_add[s] = 20
                thermal_frac[s] = 0.9
            elif f.kind == "power_brake":
                slow[s] = 1 + f.slowdown
                clock[s] = MAX_SM_CLOCK / (1 + f.slowdown * 1.15)
                reasons[s] = hardware.CLOCK_EVENT_HW_POWER_BRAKE | hardware.CLOCK_EVENT_HW_SLOWDOWN
                power_cap[s] = 330.0
                power_frac[s] = 0.95
            elif f.kind == "pcie_width_drop":
                slow[s] = 1.005  # host-device copies are a small share of an LLM step
            elif f.kind == "efa_degraded":
                # The degraded link slows every collective the job runs.
                eff["net"] = f.slowdown * STEP_TYPICAL_S
                bad_efa.append((f.node, f.device, f.slowdown))
            elif f.kind == "data_stall":
                eff["data"] = f.slowdown * STEP_TYPICAL_S
                eff["lustre_read"] = 0.08
        eff.update(
            slow=slow,
            clock=clock,
            reasons=reasons,
            temp_add=temp_add,
            power_cap=power_cap,
            thermal_frac=thermal_frac,
            power_frac=power_frac,
        )
        eff["bad_efa"] = bad_efa  # type: ignore[assignment]
        return eff

    # ------------------------------------------------------------------ one tick
    def tick(self, dt: float, scenario_dt: float | None = None) -> None:
        """Advance the model by ``dt`` seconds (0: compute the gauges only).

        ``scenario_dt`` (default ``dt``) advances the scenario's clock (fault onsets, stalls,
        checkpoints) by a different amount: a live cluster at ``--speed 10`` reaches its faults ten
        times sooner while its counters still grow at real-time rates.
        """
        rng = self.rng
        G = self.G
        sdt = dt if scenario_dt is None else scenario_dt
        self._tick_at = (self.t, self.elapsed, dt / sdt if sdt > 0 else 0.0)
        self.t += dt
        self.elapsed += sdt
        eff = self._fault_effects()
        if self.stall_until is not None and self.elapsed >= self.stall_until:
            self._restart_job()
        in_job = (self.rank_of >= 0) & ~self.r_dead
        present = self.node_present[self.slot_node]
        # Checkpoint share of this tick (checkpoints start every checkpoint_every_s after start).
        ck = 0.0
        if sdt > 0 and self.spec.checkpoint_every_s > 0:
            ck = (
                _overlap_periodic(
                    self.elapsed - sdt, self.elapsed, self.spec.checkpoint_every_s, self.spec.checkpoint_s
                )
                / sdt
            )
        running = self.job_running and self.elapsed >= self.warmup_until
        # Per-rank step phases.
        noise = 1 + rng.normal(0, 0.006, G)
        # Transient hiccups (GC pauses, a slow batch) on a random rank: not a straggler.
        if dt > 0 and rng.random() < 0.15:
            noise[rng.integers(0, G)] *= 1.3
        compute = COMPUTE_S * self.speed * eff["slow"] * noise
        data = DATA_S * (1 + np.abs(rng.normal(0, 0.08, G))) + float(eff["data"])
        comm = COMM_S * (1 + rng.normal(0, 0.01)) + float(eff["net"])
        step = float(np.max((compute + data)[in_job])) + comm + OPT_S if in_job.any() else STEP_NOMINAL_S
        train_s = dt * (1 - ck) if running else 0.0
        prev = math.floor(self.step_acc)
        self.step_acc += train_s / step
        done = float(math.floor(self.step_acc) - prev)
        if self.r_mons:
            self._commit_steps(int(done), step, compute, data, self._checkpoints(running))
        self.global_step += done
        # GPU activity: busy share of the tick, per GPU.
        busy = np.where(in_job & running, compute / step * (1 - ck), 0.0)
        hung = in_job & (not self.job_running)
        tensor = np.clip(0.58 * busy * (1 + rng.normal(0, 0.02, G)), 0, 1)
        util = np.where(in_job & running, 100.0 * (1 - 0.7 * ck), np.where(hung, 100.0, 0.0))
        power = 85 + 615 * (0.22 * (util / 100) + 0.78 * busy)
        power = np.minimum(power * (1 + rng.normal(0, 0.015, G)), eff["power_cap"])
        temp = self.base_temp + 0.025 * (power - 85) + eff["temp_add"] + rng.normal(0, 0.5, G)
        clock = np.where(util > 0, eff["clock"], 345.0)
        reasons = np.asarray(eff["reasons"]).copy()
        # Healthy noise: a short SW power cap now and then (not a fault).
        sw_cap = (rng.random(G) < 0.01) & (util > 0)
        reasons = np.where(sw_cap & (reasons == 0), hardware.CLOCK_EVENT_SW_POWER_CAP, reasons)
        clock = np.where(sw_cap, clock - rng.uniform(30, 120, G), clock)
        clock = np.where(util > 0, np.round(clock / 15) * 15, clock)
        self.energy_mj += power * dt * 1000
        self.thermal_violation += eff["thermal_frac"] * dt * 1e9
        self.power_violation += eff["power_frac"] * dt * 1e9
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
            "sm_active": np.clip(busy * 0.92, 0, 1),
            "gr_active": util / 100 * 0.98,
            "dram": np.clip(busy * 0.45, 0, 1),
            "fb_used": np.where(in_job, 71500.0, 0.0),
            "reasons": reasons,
            "nvlink_bw": busy * 150000.0,
        }
        self.present = present
        # EFA: traffic follows steps; retransmits on a degraded device.
        if dt > 0:
            node_steps = np.zeros(self.n_nodes)
            np.add.at(node_steps, self.slot_node, in_job * done)
            per_dev = node_steps[:, None] / self.gpn * 2.4e9 / self.E * np.ones((1, self.E))
            per_dev *= 1 + rng.normal(0, 0.02, per_dev.shape)
            pkts = per_dev / EFA_PACKET_BYTES
            base = self.node_present[:, None].astype(float)
            self.efa["tx_bytes"] += per_dev * base
            self.efa["rx_bytes"] += per_dev * base
            self.efa["tx_pkts"] += pkts * base
            self.efa["rx_pkts"] += pkts * base
            self.efa["rdma_write_bytes"] += per_dev * 0.9 * base
            self.efa["rdma_read_bytes"] += per_dev * 0.05 * base
            self.efa["rdma_write_wrs"] += pkts / 4 * base
            self.efa["rdma_read_wrs"] += pkts / 80 * base
            self.efa["send_bytes"] += 2e4 * dt * base
            self.efa["recv_bytes"] += 2e4 * dt * base
            self.efa["send_wrs"] += 20 * dt * base
            self.efa["recv_wrs"] += 20 * dt * base
            self.efa["retrans_pkts"] += rng.poisson(np.maximum(pkts * 2e-6, 0)) * base
            for node, dev, sev in eff["bad_efa"]:  # type: ignore[union-attr]
                p = pkts[node, dev] + 2e5 * dt / 15
                self.efa["retrans_pkts"][node, dev] += p * (0.03 + 0.1 * sev)
                self.efa["retrans_bytes"][node, dev] += p * (0.03 + 0.1 * sev) * EFA_PACKET_BYTES
                self.efa["retrans_timeout_events"][node, dev] += rng.poisson(3 * dt / 15)
                self.efa["impaired_remote_conn_events"][node, dev] += rng.poisson(2 * dt / 15)
                self.efa["unresponsive_remote_events"][node, dev] += rng.poisson(0.3 * dt / 15)
            self.efa["retrans_bytes"] += 0
            self.efa_lifespan += dt
            # Lustre: reads follow the data loader, writes burst at checkpoints.
            read_rate = 2.2e8 * float(eff["lustre_read"]) * (node_steps > 0 if running else 0)
            self.lustre_read += read_rate * dt * self.node_present * (1 + rng.normal(0, 0.05, self.n_nodes))
            wr = (CKPT_BYTES_PER_NODE_S * dt * ck if running else 0.0) + 1e5 * dt
            self.lustre_write += wr * self.node_present
            for op, rate in _LUSTRE_OPS.items():
                k = rate * dt * (1 + (30 * ck if op in ("open", "close", "create") else 0))
                self.lustre_ops[op] += k * self.node_present
                self.lustre_op_seconds[op] += k * 2e-4 * self.node_present

    def _commit_steps(self, n: int, step: float, compute: np.ndarray, data: np.ndarray, at: float) -> None:
        """Every live rank completes ``n`` steps of ``step`` seconds (at the monitors' time ``at``):
        its monitor counts each step's phases, then the step."""
        if n <= 0:
            return
        live = self._live_ranks()
        sl = self.r_slot
        phases = {
            "data": data[sl],
            "forward": compute[sl] / 3,
            "backward": compute[sl] * 2 / 3,
            "optimizer": step - compute[sl] - data[sl],
        }
        self.clock.now = at
        for _ in range(n):
            _ranks.commit_step(self.r_mons, live, step, phases, TOKENS_PER_STEP, self.flops_per_step)

    # ------------------------------------------------------------------ series
    def _gpu_key(self, s: int) -> tuple[str, ...]:
        n, g = int(self.slot_node[s]), int(self.slot_gpu[s])
        key = (
            str(g),
            self.uuid[s],
            f"00000000:{BUS_IDS[g % 8]}:00.0",
            f"nvidia{g}",
            self.spec.model_name,
            self.hostnames[n],
            "590.48.01",
        )
        return key + self._scrape(n)

    def _scrape(self, n: int) -> tuple[str, ...]:
        return ("fleetscope", f"{self.hostnames[n]}:9401") if self.scrape_labels else ()

    def _scrape_names(self) -> tuple[str, ...]:
        return ("job", "instance") if self.scrape_labels else ()

    def _cached(self, name: str, version: object, build) -> list:
        hit = self._key_cache.get(name)
        if hit is not None and hit[0] == version:
            return hit[1]
        keys = build()
        self._key_cache[name] = (version, keys)
        return keys

    def series(self) -> dict[str, SimSeries]:
        """Every series with a sample now, by metric name."""
        out: dict[str, SimSeries] = {}
        sl = self._scrape_names()
        gl = c.GPU_LABELS + sl
        present_slots = np.nonzero(self.present)[0]
        alive = present_slots[~self.gpu_lost[present_slots]]
        pver = (tuple(present_slots), tuple(alive))
        all_keys = self._cached("gpu_all", pver, lambda: [self._gpu_key(int(s)) for s in present_slots])
        alive_keys = self._cached("gpu_alive", pver, lambda: [self._gpu_key(int(s)) for s in alive])
        g = self.g

        def gpu(metric: str, values: np.ndarray) -> None:
            out[metric] = SimSeries(gl, alive_keys, np.asarray(values, dtype=float)[alive])

        gpu(c.DCGM_FI_DEV_GPU_UTIL, np.round(g["util"]))
        gpu(c.DCGM_FI_DEV_MEM_COPY_UTIL, np.round(g["mem_util"]))
        gpu(c.DCGM_FI_DEV_SM_CLOCK, g["clock"])
        gpu(c.DCGM_FI_DEV_MEM_CLOCK, g["mem_clock"])
        gpu(c.DCGM_FI_DEV_GPU_TEMP, np.round(g["temp"]))
        gpu(c.DCGM_FI_DEV_MEMORY_TEMP, np.round(g["mem_temp"]))
        gpu(c.DCGM_FI_DEV_POWER_USAGE, np.round(g["power"], 3))
        gpu(c.DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, np.floor(self.energy_mj))
        gpu(c.DCGM_FI_DEV_FB_USED, g["fb_used"] + 512)
        gpu(c.DCGM_FI_DEV_FB_FREE, 81559 - 512 - g["fb_used"])
        gpu(c.DCGM_FI_DEV_PCIE_REPLAY_COUNTER, self.pcie_replay)
        gpu(c.DCGM_FI_DEV_PCIE_LINK_GEN, np.full(self.G, 5.0))
        gpu(c.DCGM_FI_DEV_PCIE_LINK_WIDTH, self.pcie_width)
        gpu(c.DCGM_FI_DEV_CLOCKS_EVENT_REASONS, g["reasons"])
        gpu(c.DCGM_FI_DEV_POWER_VIOLATION, np.floor(self.power_violation))
        gpu(c.DCGM_FI_DEV_THERMAL_VIOLATION, np.floor(self.thermal_violation))
        gpu(c.DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, self.sbe)
        gpu(c.DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, self.dbe)
        gpu(c.DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS, self.corr_rows)
        gpu(c.DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS, self.uncorr_rows)
        gpu(c.DCGM_FI_DEV_ROW_REMAP_FAILURE, self.remap_failure)
        gpu(c.DCGM_FI_DEV_ROW_REMAP_PENDING, self.remap_pending)
        gpu(c.DCGM_FI_DEV_GPU_RECOVERY_ACTION, self.recovery)
        gpu(c.DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, np.round(g["nvlink_bw"]))
        gpu(c.DCGM_FI_PROF_GR_ENGINE_ACTIVE, np.round(g["gr_active"], 4))
        gpu(c.DCGM_FI_PROF_SM_ACTIVE, np.round(g["sm_active"], 4))
        gpu(c.DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, np.round(g["tensor"], 4))
        gpu(c.DCGM_FI_PROF_DRAM_ACTIVE, np.round(g["dram"], 4))
        # XID gauge (dcgm-exporter compat): value = last XID, with err_code/err_msg labels.
        xl = gl + ("err_code", "err_msg")
        xver = (pver, tuple(self.last_xid[alive]))
        xkeys = self._cached(
            "xid_gauge",
            xver,
            lambda: [
                self._gpu_key(int(s))
                + (
                    str(int(self.last_xid[s])),
                    xids.message(int(self.last_xid[s])) if self.last_xid[s] else "",
                )
                for s in alive
            ],
        )
        out[c.DCGM_FI_DEV_XID_ERRORS] = SimSeries(xl, xkeys, self.last_xid[alive].astype(float))
        out[c.GPU_UP] = SimSeries(gl, all_keys, (~self.gpu_lost[present_slots]).astype(float))
        pl = gl + ("dtype",)
        pkeys = self._cached("peak", pver, lambda: [k + (d,) for k in alive_keys for d in sorted(self.peak)])
        pvals = np.array([self.peak[d] for _ in alive for d in sorted(self.peak)], dtype=float)
        out[c.GPU_PEAK_FLOPS] = SimSeries(pl, pkeys, pvals)
        xc = sorted((s, x) for (s, x) in self.xid_counts if self.present[s])
        xtl = gl + ("xid",)
        xtkeys = self._cached(
            "xid_total", (pver, tuple(xc)), lambda: [self._gpu_key(s) + (str(x),) for s, x in xc]
        )
        out[c.GPU_XID_ERRORS_TOTAL] = SimSeries(
            xtl, xtkeys, np.array([self.xid_counts[k] for k in xc], dtype=float)
        )
        self._training_series(out)
        self._node_series(out)
        return out

    def _training_series(self, out: dict[str, SimSeries]) -> None:
        """Every live rank's training series: its monitor's samples, as the exporter serves them."""
        if not self.spec.training_telemetry:
            return
        tl = c.TRAINING_LABELS + self._scrape_names()
        slots = np.nonzero((self.rank_of >= 0) & ~self.r_dead & self.present)[0]
        ver = (self.r_epoch, tuple(slots))

        def key(s: int) -> tuple[str, ...]:
            n = int(self.slot_node[s])
            return (
                self.spec.job_id,
                str(int(self.rank_of[s])),
                str(int(self.slot_gpu[s])),
                self.hostnames[n],
                str(int(self.slot_gpu[s])),
            ) + self._scrape(n)

        keys = self._cached("train", ver, lambda: [key(int(s)) for s in slots])
        mons = [self.r_mons[r] for r in self.rank_of[slots].tolist()]
        loss = 2.1 + 6 * math.exp(-self.global_step / 3000)
        for m, value in zip(
            mons, np.round(loss + self.rng.normal(0, 0.02, len(slots)), 4).tolist(), strict=True
        ):
            m.set_loss(value)
        for name, (extra, rows, values) in _ranks.samples(mons, keys).items():
            cached = self._cached(f"train:{name}", rows, lambda rows=rows: rows)
            out[name] = SimSeries(tl + extra, cached, values)

    def _node_series(self, out: dict[str, SimSeries]) -> None:
        sl = self._scrape_names()
        nodes = np.nonzero(self.node_present)[0]
        ver = tuple(nodes)
        el = c.EFA_LABELS + sl
        ekeys = self._cached(
            "efa",
            ver,
            lambda: [
                (self.hostnames[n], d, "1") + self._scrape(int(n)) for n in nodes for d in self.efa_names
            ],
        )
        for name in _EFA_COUNTERS:
            out[c.efa_metric_name(name)] = SimSeries(el, ekeys, np.floor(self.efa[name][nodes].ravel()))
        out[c.EFA_LIFESPAN] = SimSeries(el, ekeys, np.floor(self.efa_lifespan[nodes].ravel()))
        ll = c.LUSTRE_LABELS + sl
        lkeys = self._cached(
            "lustre", ver, lambda: [(self.hostnames[n], "fsx", "/fsx") + self._scrape(int(n)) for n in nodes]
        )
        out[c.LUSTRE_CLIENT_READ_BYTES] = SimSeries(ll, lkeys, np.floor(self.lustre_read[nodes]))
        out[c.LUSTRE_CLIENT_WRITE_BYTES] = SimSeries(ll, lkeys, np.floor(self.lustre_write[nodes]))
        ol = ll + ("operation",)
        okeys = self._cached("lustre_ops", ver, lambda: [k + (op,) for op in _LUSTRE_OPS for k in lkeys])
        out[c.LUSTRE_CLIENT_OPERATIONS] = SimSeries(
            ol, okeys, np.concatenate([np.floor(self.lustre_ops[op][nodes]) for op in _LUSTRE_OPS])
        )
        out[c.LUSTRE_CLIENT_OPERATION_SECONDS] = SimSeries(
            ol, okeys, np.concatenate([np.round(self.lustre_op_seconds[op][nodes], 6) for op in _LUSTRE_OPS])
        )
        hl = (c.NODE_LABEL, *sl)
        hkeys = self._cached(
            "healthy", ver, lambda: [(self.hostnames[n], *self._scrape(int(n))) for n in nodes]
        )
        out[c.LUSTRE_CLIENT_HEALTHY] = SimSeries(hl, hkeys, np.ones(len(nodes)))
        cl = ("collector", c.NODE_LABEL, *sl)
        ckeys = self._cached(
            "collector",
            ver,
            lambda: [(col, self.hostnames[n], *self._scrape(int(n))) for col in _COLLECTORS for n in nodes],
        )
        out[c.COLLECTOR_SUCCESS] = SimSeries(cl, ckeys, np.ones(len(ckeys)))


def _stops_job(kind: str) -> bool:
    """Faults after which a ``replace`` restart brings a spare node (hang and node_drain: realistic)."""
    return kind in ("gpu_lost", "ecc_uncorrectable", "row_remap_failure", "hang", "node_drain")


def _overlap_periodic(a: float, b: float, every: float, length: float) -> float:
    """Seconds of [a, b) inside the windows [k*every, k*every+length), k >= 1."""
    total = 0.0
    k = max(1, math.floor(a / every))
    while k * every < b:
        lo, hi = k * every, k * every + length
        total += max(0.0, min(b, hi) - max(a, lo))
        k += 1
    return total


#: The EFA port counters the model serves: the contract's, less the responder-side byte counters of
#: newer drivers (a recording as from an older driver, which the EFA collector also meets).
_EFA_COUNTERS = tuple(
    n for n in c.EFA_PORT_COUNTERS if n not in ("rdma_read_resp_bytes", "rdma_write_recv_bytes")
)
_LUSTRE_OPS = {"open": 2.0, "close": 2.0, "getattr": 10.0, "read": 150.0, "write": 5.0, "create": 0.1}
_COLLECTORS = ("gpu", "xid", "efa", "lustre", "training")
