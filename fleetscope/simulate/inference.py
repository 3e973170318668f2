"""The inference model: a fleet of vLLM replicas serving one model, over the cluster's GPUs.

It shares :class:`~fleetscope.simulate.model.ClusterModel`'s hardware (GPUs, their counters and
series, EFA and Lustre) and replaces the training job with replicas of a vLLM engine, each on
``gpus_per_replica`` GPUs of one node (tensor parallel), behind a load balancer that spreads the
requests evenly over the replicas that are up. The physics, per replica, as a fluid queue advanced
in sub-steps of at most one second:

* requests arrive at a rate that follows a **daily pattern compressed into the scenario** (night,
  morning rise, midday peak, evening fall), with Poisson noise; prompt and output lengths are
  log-normal (median 800 and 200 tokens);
* **continuous batching**: a waiting request is admitted while the KV cache has room for it and
  fewer than ``MAX_NUM_SEQS`` run; each engine iteration (one token for every running request) takes
  ``ITER_BASE_S + ITER_PER_SEQ_S x running + ITER_PER_KV_TOKEN_S x cached tokens`` (decode is
  memory-bandwidth bound), stretched by the prefill work sharing the GPUs (chunked prefill) and by
  the slowest GPU of the replica (tensor parallel: every layer waits for every shard);
* **TTFT** = time waiting in the queue (Little's law) + prefill of the prompt + one iteration, so it
  grows with prompt length and queueing; **inter-token latency** = the iteration time, so it grows
  with the batch; the histograms are exported as vLLM does (cumulative ``_bucket{le}`` counters,
  ``_sum``, ``_count``) with vLLM's bucket bounds;
* when the KV cache is full, running sequences are **preempted** (recomputed later) and requests
  queue.

Faults: ``thermal_throttle`` / ``power_brake`` (one GPU slower with its clock-event bits: the whole
replica slows), ``gpu_lost`` (XID 79: the replica's engine dies and its share moves to the others),
``kv_pressure`` (the replica's KV cache holds ``1 - slowdown`` of its usual tokens: preemptions and
queueing there only), ``traffic_surge`` (every replica receives ``1 + slowdown`` times the traffic:
queues grow and KV caches fill everywhere). Healthy look-alikes: the daily pattern itself and
``long_prompts`` (one replica gets ``1 + slowdown`` times longer prompts: slower first tokens, a
fuller cache, slightly slower decoding, no fault).

Alive but wedged (the pod is Ready, ``/metrics`` answers, nothing comes out): ``engine_wedged`` (the
engine core stops, a SIGSTOP or a deadlocked scheduler: every vLLM series of the replica freezes at
its last value, ``num_requests_running`` above 0 included, and its GPUs fall to 0 % utilisation
with their memory still held), ``tp_hang`` (an all-reduce of the tensor-parallel group hangs: the
same freeze, but the GPUs spin at 100 % utilisation with almost no compute) and ``http_errors`` (the
API server answers every request with a 5xx before it reaches the engine: ``http_requests_total``
with ``status="5xx"`` rises at the replica's full request rate, the engine's own counters stand
still). The router keeps sending a wedged replica its share; a request stuck there ends when the
client gives up, and the instrumentator counts the closed stream as 2xx. Their healthy look-alikes:
``router_starved`` (the router stops sending one replica requests: it drains and idles, nothing in
flight) and ``rolling_restart`` (every replica in turn is down for ``stall_s`` and comes back as a
new pod with its counters from 0), beside ``traffic_surge`` (saturated, but progressing).

Every replica's API server exposes ``http_requests_total`` by ``status`` class, as vLLM's does
(prometheus-fastapi-instrumentator): a ``2xx`` series for every answered request, a ``5xx``
series from the first error on.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fleetscope import contract as c
from fleetscope.errors import FleetscopeError
from fleetscope.simulate.model import ClusterModel, SimSeries
from fleetscope.simulate.spec import INFERENCE_FAULT_KINDS, FaultSpec, ScenarioSpec
from fleetscope.simulate.truth import realistic_truth

# vLLM V1's series names, from the contract.
TTFT = c.VLLM_TIME_TO_FIRST_TOKEN
ITL = c.VLLM_INTER_TOKEN_LATENCY
E2E = c.VLLM_E2E_REQUEST_LATENCY
RUNNING = c.VLLM_NUM_REQUESTS_RUNNING
WAITING = c.VLLM_NUM_REQUESTS_WAITING
KV_USAGE = c.VLLM_KV_CACHE_USAGE
PREEMPTIONS = c.VLLM_NUM_PREEMPTIONS
PROMPT_TOKENS = c.VLLM_PROMPT_TOKENS
GENERATION_TOKENS = c.VLLM_GENERATION_TOKENS
REQUEST_SUCCESS = c.VLLM_REQUEST_SUCCESS

#: vLLM's histogram bucket bounds (seconds), +Inf last.
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
    math.inf,
)
ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    math.inf,
)
E2E_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
    math.inf,
)

# One replica of a 70B-class model on 8 H100s (tensor parallel); fewer GPUs scale the capacity.
ITER_BASE_S = 0.012  # one decode iteration with an empty batch (weights streamed from HBM once)
ITER_PER_SEQ_S = 0.00012  # per running sequence
ITER_PER_KV_TOKEN_S = 1.5e-8  # per cached token (attention reads the KV cache)
PREFILL_TOKENS_PER_S = 40000.0
KV_CAPACITY_TOKENS = 350000.0
MAX_NUM_SEQS = 256
PROMPT_MEDIAN, PROMPT_SIGMA = 800.0, 0.9
OUTPUT_MEDIAN, OUTPUT_SIGMA = 200.0, 0.7
#: Requests per second per 8-GPU replica at the daily peak (about 60% of what it can serve).
PEAK_RPS = 12.0
NAMESPACE = "inference"
SUB_S = 1.0
#: The route every simulated request takes (vLLM's OpenAI server).
HTTP_ROUTE = ("/v1/chat/completions", "POST")
#: Seconds between one replica of a rolling restart coming back and the next going down
#: (readiness: the Deployment's ``maxUnavailable: 1`` waits for the new pod).
RESTART_GAP_S = 30.0
#: Faults that stop a replica's engine with its pod still serving ``/metrics``.
WEDGES = frozenset({"engine_wedged", "tp_hang"})


def _lognormal_mean(median: float, sigma: float) -> float:
    return median * math.exp(sigma * sigma / 2)


def _norm_cdf(x: np.ndarray) -> np.ndarray:
    """Standard normal CDF (Abramowitz-Stegun 7.1.26, error < 1.5e-7)."""
    z = np.abs(x) / math.sqrt(2)
    t = 1 / (1 + 0.3275911 * z)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = 1 - poly * np.exp(-z * z)
    return 0.5 * (1 + np.sign(x) * erf)


def _lognormal_cdf(bounds: np.ndarray, medians: np.ndarray, sigma: float) -> np.ndarray:
    """Mean over ``medians`` of the log-normal CDF at every bound: a mixture's share below each."""
    with np.errstate(divide="ignore"):
        x = (np.log(bounds[None, :]) - np.log(np.maximum(medians[:, None], 1e-9))) / sigma
    return _norm_cdf(x).mean(axis=0)


def daily_load(frac: float) -> float:
    """Share of the daily peak at ``frac`` of the (compressed) day: night 30%, peak at 0.55."""
    return 0.3 + 0.7 * math.exp(-(((frac - 0.55) / 0.22) ** 2))


class InferenceModel(ClusterModel):
    """vLLM replicas over :class:`ClusterModel`'s hardware: see the module docstring."""

    def _init_jobs(self) -> None:
        spec = self.spec
        per = spec.gpus_per_replica or spec.gpus_per_node
        self.gpr = per
        self.replica_slots: list[np.ndarray] = []
        self.replica_node: list[int] = []
        self.pod_of: dict[int, str] = {}
        short = spec.served_model.split("/")[-1].lower().replace(".", "-")
        self.pods: list[str] = []
        for n in range(spec.nodes):
            for k in range(spec.gpus_per_node // per):
                r = len(self.pods)
                slots = np.arange(n * self.gpn + k * per, n * self.gpn + (k + 1) * per)
                pod = f"vllm-{short}-{r}"
                self.pods.append(pod)
                self.replica_slots.append(slots)
                self.replica_node.append(n)
                for s in slots:
                    self.pod_of[int(s)] = pod
        R = len(self.pods)
        self.R = R
        scale = per / 8
        self.kv_cap = np.full(R, KV_CAPACITY_TOKENS * scale)
        self.prefill_tps = PREFILL_TOKENS_PER_S * scale
        self.running = np.zeros(R)
        self.waiting = np.zeros(R)
        self.up = np.ones(R, dtype=bool)
        self.c_prompt = np.floor(self.rng.uniform(1e6, 1e7, R))
        self.c_gen = np.floor(self.rng.uniform(1e6, 1e7, R))
        self.c_preempt = np.zeros(R)
        self.c_success = {reason: np.zeros(R) for reason in ("stop", "length")}
        self.hist = {
            name: (np.asarray(bounds), np.zeros((R, len(bounds))), np.zeros(R))
            for name, bounds in ((TTFT, TTFT_BUCKETS), (ITL, ITL_BUCKETS), (E2E, E2E_BUCKETS))
        }
        self.rank_of = np.full(self.G, -1)
        self.job_running = False
        self.last_iter = np.full(R, ITER_BASE_S)
        self.kv_usage = np.zeros(R)
        self._attr_cache: dict[str, tuple[list, tuple[object, ...], list]] = {}
        self.base_pods = list(self.pods)
        self.restarts = np.zeros(R, dtype=int)
        self.restarting = np.zeros(R, dtype=bool)
        #: The API server's answered requests by status class (created at the first of each).
        self.c_http = {status: np.zeros(R) for status in ("2xx", "5xx")}
        #: Per replica, what its GPUs do: 0 serving as the batch says, 1 idle (engine up, nothing to
        #: run), 2 stopped (engine stopped, memory held), 3 spinning (hung collective).
        self.gpu_state = np.zeros(R, dtype=int)

    # ------------------------------------------------------------------ faults
    def _replica_of(self, f: FaultSpec) -> int:
        """The replica on the fault's GPU (replica 0 when none runs there)."""
        slot = self._slot(f)
        return next((r for r, slots in enumerate(self.replica_slots) if slot in slots), 0)

    def _inference_effects(self) -> dict[str, np.ndarray | float]:
        """Per-replica multipliers of the serving faults active now (the GPU ones are the base's)."""
        R = self.R
        eff: dict[str, np.ndarray | float] = {
            "traffic": 1.0,
            "prompt": np.ones(R),
            "kv": np.ones(R),
            "wedged": np.zeros(R, dtype=bool),
            "spin": np.zeros(R, dtype=bool),
            "errors": np.zeros(R, dtype=bool),
            "starved": np.zeros(R, dtype=bool),
            "restarting": np.zeros(R, dtype=bool),
        }
        for f in self.spec.faults:
            if not self._active(f):
                continue
            r = self._replica_of(f)
            if f.kind == "traffic_surge":
                eff["traffic"] = float(eff["traffic"]) * (1 + f.slowdown)
            elif f.kind == "long_prompts":
                eff["prompt"][r] *= 1 + f.slowdown  # type: ignore[index]
            elif f.kind == "kv_pressure":
                eff["kv"][r] *= max(0.02, 1 - f.slowdown)  # type: ignore[index]
            elif f.kind in WEDGES:
                eff["wedged"][r] = True  # type: ignore[index]
                eff["spin"][r] = eff["spin"][r] or f.kind == "tp_hang"  # type: ignore[index]
            elif f.kind == "http_errors":
                eff["errors"][r] = True  # type: ignore[index]
            elif f.kind == "router_starved":
                eff["starved"][r] = True  # type: ignore[index]
            elif f.kind == "rolling_restart":
                cycle = f.stall_s + RESTART_GAP_S
                k, at = divmod(self.elapsed - f.at_s, cycle)
                if k < self.R and at < f.stall_s:
                    eff["restarting"][int(k)] = True  # type: ignore[index]
        return eff

    def _restart(self, restarting: np.ndarray) -> None:
        """Replicas going down (their pod deleted: no series, its GPUs attributed to no pod) and
        coming back as a new pod, its counters and histograms from 0."""
        for r in np.nonzero(restarting & ~self.restarting)[0]:
            for slot in self.replica_slots[r]:
                self.pod_of[int(slot)] = ""
        for r in np.nonzero(self.restarting & ~restarting)[0]:
            self.restarts[r] += 1
            pod = f"{self.base_pods[r]}-r{self.restarts[r]}"
            self.pods[r] = pod
            for slot in self.replica_slots[r]:
                self.pod_of[int(slot)] = pod
            for counter in (self.c_prompt, self.c_gen, self.c_preempt, *self.c_success.values()):
                counter[r] = 0.0
            for counter in self.c_http.values():
                counter[r] = 0.0
            for _, buckets, total in self.hist.values():
                buckets[r] = 0.0
                total[r] = 0.0
        self.running = np.where(restarting, 0.0, self.running)
        self.waiting = np.where(restarting, 0.0, self.waiting)
        self.restarting = restarting

    def _fire_once(self, i: int, f: FaultSpec) -> None:
        super()._fire_once(i, f)
        if f.kind == "gpu_lost":
            self.up[self._replica_of(f)] = False  # the engine dies with its GPU; the pod cannot restart

    def _crash_job(self, f: FaultSpec, slot: int) -> None:
        """No training job to crash (the replica's own failure is in :meth:`_fire_once`)."""

    # ------------------------------------------------------------------ one tick
    def tick(self, dt: float, scenario_dt: float | None = None) -> None:
        sdt = dt if scenario_dt is None else scenario_dt
        self.t += dt
        self.elapsed += sdt
        eff = self._fault_effects()
        ieff = self._inference_effects()
        slow = np.array([float(np.max(eff["slow"][s])) for s in self.replica_slots])  # type: ignore[index]
        self.present = self.node_present[self.slot_node]
        if ieff["restarting"].any() or self.restarting.any():  # type: ignore[union-attr]
            self._restart(ieff["restarting"])  # type: ignore[arg-type]
        busy = np.zeros(self.R)
        if dt > 0:
            busy = self._serve(dt, sdt, slow, ieff)
        self._gauges(eff, dt, busy)

    def _serve(self, dt: float, sdt: float, slow: np.ndarray, ieff: dict) -> np.ndarray:
        """Advance every replica's queue by ``dt``; returns each replica's busy share."""
        rng = self.rng
        R = self.R
        day = max(self.spec.day_s or self.spec.duration_s, 1.0)
        frac = (self.elapsed % day) / day
        up = self.up & ~ieff["restarting"]
        # The load balancer spreads the whole fleet's traffic over the replicas that are up (and
        # that it has not stopped sending to); a wedged replica is Ready, so it gets its share.
        routed = up & ~ieff["starved"]
        n_up = max(int(routed.sum()), 1)
        total = PEAK_RPS * self.gpr / 8 * R * daily_load(frac) * float(ieff["traffic"])
        lam = np.where(routed, total / n_up, 0.0)
        arrivals = rng.poisson(lam * dt).astype(float)
        # What reaches the engine (not what the API server refused) and whether the engine runs.
        runs = up & ~ieff["wedged"]
        fed = runs & ~ieff["errors"]
        p_med = PROMPT_MEDIAN * ieff["prompt"]
        p_mean = _lognormal_mean(1.0, PROMPT_SIGMA) * p_med
        o_mean = _lognormal_mean(OUTPUT_MEDIAN, OUTPUT_SIGMA)
        kv_seq = p_mean + o_mean / 2
        cap = self.kv_cap * ieff["kv"]
        n_sub = max(1, math.ceil(dt / SUB_S))
        h = dt / n_sub
        gen = np.zeros(R)
        done = np.zeros(R)
        admitted = np.zeros(R)
        preempt = np.zeros(R)
        wait_s = np.zeros(R)
        iter_s = np.zeros(R)
        for _ in range(n_sub):
            self.waiting += arrivals / n_sub * fed
            room_kv = np.maximum(0.0, (0.97 * cap - self.running * kv_seq) / kv_seq)
            room = np.minimum(room_kv, MAX_NUM_SEQS - self.running)
            admit = np.minimum(self.waiting, np.minimum(room, self.prefill_tps * h / p_mean))
            admit = np.maximum(admit, 0.0) * runs
            self.waiting -= admit
            self.running += admit
            admitted += admit
            usage = self.running * kv_seq / cap
            prefill_share = np.minimum(admit * p_mean / (self.prefill_tps * h), 0.9)
            t_iter = ITER_BASE_S + ITER_PER_SEQ_S * self.running + ITER_PER_KV_TOKEN_S * self.running * kv_seq
            t_iter = t_iter * slow * (1 + 0.35 * prefill_share)
            g = np.where(runs, self.running * h / t_iter, 0.0)
            d = np.minimum(g / o_mean, self.running)
            self.running -= d
            # A full cache preempts sequences as they grow (vLLM recomputes them later).
            pre = np.where(usage > 0.94, d * 0.5 * (usage - 0.94) / 0.06, 0.0)
            pre = np.minimum(pre, self.running)
            self.running -= pre
            self.waiting += pre
            preempt += pre
            gen += g
            done += d
            served = np.maximum(d + pre, 1e-6) / h
            wait_s += np.where(self.waiting > 0, self.waiting / np.maximum(served, admit / h + 1e-6), 0.0) * d
            iter_s += t_iter * g
        self.running = np.where(up, self.running, 0.0)
        self.waiting = np.where(up, self.waiting, 0.0)
        self.kv_usage = self.running * kv_seq / cap
        with np.errstate(all="ignore"):
            mean_wait = np.where(done > 0, wait_s / np.maximum(done, 1e-9), 0.0)
            mean_iter = np.where(gen > 0, iter_s / np.maximum(gen, 1e-9), self.last_iter)
        self.last_iter = mean_iter
        self.c_prompt += np.floor(admitted * p_mean + preempt * p_mean * 0.5)
        self.c_gen += np.floor(gen)
        self.c_preempt += np.floor(preempt + rng.random(R) * (preempt > 0))
        n_done = np.floor(done + rng.random(R))
        stop = np.floor(n_done * 0.85 + rng.random(R))
        self.c_success["stop"] += np.minimum(stop, n_done)
        self.c_success["length"] += n_done - np.minimum(stop, n_done)
        for r in np.nonzero(up & (n_done > 0))[0]:
            self._observe(int(r), n_done[r], gen[r], mean_wait[r], mean_iter[r], p_med[r], slow[r])
        # The API server answers what the engine finished; a refused request at once (5xx); a
        # request stuck in a wedged engine when its client gives up (a closed stream: 2xx).
        self.c_http["2xx"] += np.where(ieff["wedged"], arrivals, n_done) * up
        self.c_http["5xx"] += np.where(ieff["errors"] & runs, arrivals, 0.0)
        # A stopped engine leaves its GPUs at 0 % and a hung collective spins them; an engine with
        # nothing to run (starved, refusing at the door) idles them. Other replicas as before.
        quiet = (ieff["starved"] | ieff["errors"]) & (self.running < 0.5)
        state = np.select([ieff["wedged"] & ieff["spin"], ieff["wedged"], quiet], [3, 2, 1], 0)
        self.gpu_state = state * up
        return np.where(up, np.clip(0.35 + 0.6 * self.running / 120, 0, 1), 0.0)

    def _observe(
        self, r: int, n: float, tokens: float, wait: float, it: float, p_med: float, slow: float
    ) -> None:
        """Add one tick's requests and tokens to replica ``r``'s latency histograms."""
        rng = self.rng
        k = 48
        prompts = p_med * np.exp(rng.normal(0, PROMPT_SIGMA, k))
        ttft = wait * rng.exponential(1.0, k) + prompts / self.prefill_tps * slow + it
        outs = OUTPUT_MEDIAN * np.exp(rng.normal(0, OUTPUT_SIGMA, k))
        e2e = ttft + outs * it
        it_med = it * (1 + rng.normal(0, 0.01))
        for name, samples, sigma, count in (
            (TTFT, ttft, 0.15, n),
            (E2E, e2e, 0.1, n),
            (ITL, np.array([it_med]), 0.25, tokens),
        ):
            bounds, buckets, total = self.hist[name]
            buckets[r] += count * _lognormal_cdf(bounds, samples, sigma)
            mean = float(np.mean(samples)) * math.exp(sigma * sigma / 2)
            total[r] += count * mean

    def _gauges(self, eff: dict, dt: float, busy_r: np.ndarray) -> None:
        """GPU activity follows each replica's batch; the slow GPU's clock and bits are the base's."""
        rng = self.rng
        G = self.G
        busy = np.zeros(G)
        state = np.zeros(G, dtype=int)
        for r, slots in enumerate(self.replica_slots):
            busy[slots] = busy_r[r]
            state[slots] = self.gpu_state[r]
        loaded = (busy > 0) & ~self.gpu_lost  # the engine holds its weights and KV cache in memory
        busy = np.where(self.gpu_lost | (state > 0), 0.0, busy)
        util = np.where(busy > 0, np.clip(100 * (0.6 + 0.4 * busy), 0, 100), 0.0)
        # A kernel spinning on a flag that never flips: the GPU is never idle (100 %), a few SMs
        # are busy, the tensor cores and HBM are not (power a little above idle).
        spin = state == 3
        util = np.where(spin, 100.0, util)
        busy = np.where(spin, 0.12, busy)
        power = 85 + 615 * (0.2 * util / 100 + 0.6 * busy)
        power = np.minimum(power * (1 + rng.normal(0, 0.015, G)), eff["power_cap"])
        temp = self.base_temp + 0.025 * (power - 85) + eff["temp_add"] + rng.normal(0, 0.5, G)
        clock = np.where(util > 0, eff["clock"], 345.0)
        clock = np.where(util > 0, np.round(clock / 15) * 15, clock)
        reasons = np.asarray(eff["reasons"]).copy()
        if dt > 0:
            self.energy_mj += power * dt * 1000
            self.thermal_violation += eff["thermal_frac"] * dt * 1e9
            self.power_violation += eff["power_frac"] * dt * 1e9
            self.pcie_replay += rng.random(G) < 0.01
            self.efa_lifespan += dt
        fb = np.where(loaded | spin, 74000.0, 0.0)
        tensor = np.clip(0.3 * busy * (1 + rng.normal(0, 0.02, G)), 0, 1)
        self.g = {
            "util": util,
            "mem_util": np.where(spin, 0.0, util * 0.6),
            "clock": clock,
            "mem_clock": np.full(G, 2619.0),
            "temp": temp,
            "mem_temp": temp + 6,
            "power": power,
            "tensor": np.where(spin, 0.0, tensor),
            "sm_active": np.clip(busy * 0.8, 0, 1),
            "gr_active": util / 100 * 0.98,
            "dram": np.where(spin, 0.005, np.clip(busy * 0.7, 0, 1)),
            "fb_used": fb,
            "reasons": reasons,
            "nvlink_bw": busy * 90000.0,
        }

    # ------------------------------------------------------------------ series
    def series(self) -> dict[str, SimSeries]:
        out = super().series()
        attr = ("pod", "namespace", "container")
        node_i = c.GPU_LABELS.index(c.NODE_LABEL)
        now = (*self.pods, *self.restarting.tolist())  # the pods' attribution, for every GPU series
        for name, s in list(out.items()):
            if s.labels[: len(c.GPU_LABELS)] != c.GPU_LABELS:
                continue
            hit = self._attr_cache.get(name)
            if hit is None or hit[0] is not s.keys or hit[1] != now:
                pods = [self.pod_of.get(self._slot_at(k[node_i], k[0]), "") for k in s.keys]
                keys = [k + (p, NAMESPACE, "vllm") for k, p in zip(s.keys, pods, strict=True)]
                hit = (s.keys, now, keys)
                self._attr_cache[name] = hit
            keys = hit[2]
            out[name] = SimSeries(s.labels + attr, keys, s.values)
        return out

    def _slot_at(self, host: str, gpu: str) -> int:
        return self.hostnames.index(host) * self.gpn + int(gpu)

    def _training_series(self, out: dict[str, SimSeries]) -> None:
        """The vLLM engines' own series, one set per replica that is up (a dead engine serves none)."""
        sl = self._scrape_names()
        rl = (*c.VLLM_LABELS, *c.VLLM_V1_EXTRA_LABELS, c.NODE_LABEL, "pod", "namespace") + sl
        live = [
            r
            for r in range(self.R)
            if self.up[r] and not self.restarting[r] and self.node_present[self.replica_node[r]]
        ]
        ver = (tuple(live), tuple(self.pods))

        def key(r: int) -> tuple[str, ...]:
            n = self.replica_node[r]
            return (self.spec.served_model, "0", self.hostnames[n], self.pods[r], NAMESPACE) + self._scrape(n)

        keys = self._cached("vllm", ver, lambda: [key(r) for r in live])
        idx = np.array(live, dtype=int)
        out[RUNNING] = SimSeries(rl, keys, np.round(self.running[idx]))
        out[WAITING] = SimSeries(rl, keys, np.round(self.waiting[idx]))
        out[KV_USAGE] = SimSeries(rl, keys, np.round(np.clip(self.kv_usage[idx], 0, 1), 4))
        out[PREEMPTIONS] = SimSeries(rl, keys, self.c_preempt[idx])
        out[PROMPT_TOKENS] = SimSeries(rl, keys, self.c_prompt[idx])
        out[GENERATION_TOKENS] = SimSeries(rl, keys, self.c_gen[idx])
        fl = rl + ("finished_reason",)
        fkeys = self._cached(
            "vllm_fin", ver, lambda: [k + (reason,) for reason in self.c_success for k in keys]
        )
        out[REQUEST_SUCCESS] = SimSeries(fl, fkeys, np.concatenate([v[idx] for v in self.c_success.values()]))
        for name, (bounds, buckets, total) in self.hist.items():
            bl = rl + ("le",)
            les = [_le(b) for b in bounds]
            bkeys = self._cached(f"{name}_b", ver, lambda les=les: [k + (le,) for le in les for k in keys])
            cum = np.floor(buckets[idx])
            out[f"{name}_bucket"] = SimSeries(bl, bkeys, cum.T.ravel())
            out[f"{name}_sum"] = SimSeries(rl, keys, np.round(total[idx], 3))
            out[f"{name}_count"] = SimSeries(rl, keys, cum[:, -1])
        self._http_series(out, live, ver)

    def _http_series(self, out: dict[str, SimSeries], live: list[int], ver: object) -> None:
        """The API server's ``http_requests_total`` by status class: no ``model_name`` (it is the
        HTTP layer's), the pod's and the scrape's labels; the 5xx series from the first 5xx on."""
        sl = self._scrape_names()
        hl = ("handler", "method", "status", c.NODE_LABEL, "pod", "namespace") + sl
        rows = [
            (r, status)
            for status, counts in self.c_http.items()
            for r in live
            if status == "2xx" or counts[r] > 0
        ]

        def key(r: int, status: str) -> tuple[str, ...]:
            n = self.replica_node[r]
            return (*HTTP_ROUTE, status, self.hostnames[n], self.pods[r], NAMESPACE) + self._scrape(n)

        keys = self._cached("http", (ver, tuple(rows)), lambda: [key(r, st) for r, st in rows])
        values = np.array([self.c_http[st][r] for r, st in rows])
        out[c.VLLM_HTTP_REQUESTS] = SimSeries(hl, keys, values)


def _le(bound: float) -> str:
    """A bucket bound as Prometheus client libraries write it (``+Inf``, ``0.5``, ``10.0``)."""
    return "+Inf" if math.isinf(bound) else repr(float(bound))


#: Inference family: a slow or failing replica names its node (and GPU); a saturated model names
#: neither (``capacity``: scale out, drain nothing). The training detectors' view of the same GPU
#: (a hardware-only straggler, the failing node) is true too, so allowed.
INFERENCE_EXPECT: dict[str, list[tuple[str, str, str, bool]]] = {
    "thermal_throttle": [("slow_replica", "thermal_throttle", "gpu", True), ("straggler", "thermal_throttle", "gpu", False)],  # noqa: E501
    "power_brake": [("slow_replica", "power_brake", "gpu", True), ("straggler", "power_brake", "gpu", False)],
    "gpu_lost": [("failing_replica", "gpu_lost", "gpu", True), ("failing_node", "gpu_lost", "gpu", False)],
    "kv_pressure": [("slow_replica", "kv_cache_pressure", "node", True)],
    "traffic_surge": [("capacity", "saturated", "job", True)],
    "long_prompts": [],
    "engine_wedged": [("failing_replica", "engine_wedged", "node", True)],
    "tp_hang": [("failing_replica", "engine_wedged", "node", True)],
    "http_errors": [("failing_replica", "http_errors", "node", True)],
    "router_starved": [],
    "rolling_restart": [],
}  # fmt: skip
#: Fault kinds the inference family injects.
_INFERENCE_KINDS = frozenset({"thermal_throttle", "power_brake", "gpu_lost", *INFERENCE_FAULT_KINDS})


def inference_truth(spec: ScenarioSpec, goodput: dict[str, dict[str, float]] | None = None) -> dict[str, Any]:
    """The ground truth of an inference-family spec."""
    return realistic_truth(spec, goodput, lambda f: INFERENCE_EXPECT[f.kind])


def check_inference_spec(spec: ScenarioSpec) -> None:
    """The inference family's faults and replica shape."""
    bad = sorted({f.kind for f in spec.faults} - _INFERENCE_KINDS)
    per = spec.gpus_per_replica or spec.gpus_per_node
    if bad or spec.jobs:
        raise FleetscopeError(f"{', '.join(bad) or 'jobs'}: not for the inference family")
    if per < 1 or spec.gpus_per_node % per:
        raise FleetscopeError(f"gpus_per_replica {per} must divide gpus_per_node {spec.gpus_per_node}")
