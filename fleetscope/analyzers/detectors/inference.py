"""Inference fleets: slow and failing serving replicas, and models that need more replicas.

Reasoning. A load balancer spreads a model's requests over its replicas, so the replicas of one
model are each other's peers, as the ranks of a training job are: a replica whose decoding is
slower than its peers' (mean inter-token latency, from the histogram's ``_sum``/``_count``) by a
robust margin (ratio to the peer median and a modified z-score, as for stragglers) for the
persistence time is slow. Tensor parallelism makes every layer wait for its slowest shard, so one
throttled GPU slows the whole replica; with the GPU's own evidence (a thermal, power-brake or HW
slowdown clock-event bit, violation time, a narrower PCIe link) a small margin suffices and the
cause is named. Without hardware evidence the margin must be large, and a replica whose prompts
are longer than its peers' is not slow: prefill and a fuller KV cache slow its decoding too, which
is the workload, not a fault.

A replica whose KV cache is full and preempting while it queues requests, when its peers' caches
are not, is slow with cause ``kv_cache_pressure`` (a smaller cache than its peers: a lower
``--gpu-memory-utilization``, another process on its GPUs, or its share of long contexts).

A replica whose GPU fails (a drain-class XID, a lost GPU: the failing-node detector's finding on
one of its GPUs) is ``failing_replica``: its engine dies and its traffic moves to the others.

Progress, not liveness. A replica with work in flight (requests running, or requests its HTTP layer
answers while the engine makes nothing) whose generated-token and finished-request counters stand
still for longer than its own recent p99 inter-token latency allows (``wedge_itl_factor`` times it,
never less than ``wedge_min_scrapes`` scrapes) is ``failing_replica`` with cause ``engine_wedged``:
an engine iteration takes tens of milliseconds, so this is a stopped engine or a hung collective,
not a slow one, whatever ``/health`` and ``up`` say. Its GPUs tell the two apart: idle (0 %) when
the engine stopped launching work, busy (~100 %) with no tensor-core activity when a kernel spins
on a peer that never comes (a tensor-parallel all-reduce hung, as a hung training job's ranks
spin). A replica with nothing in flight (the router starves it), one that still makes tokens however
slowly (saturated), and a restart (the old pod's series absent, the new pod's from 0) are not.

A replica whose HTTP 5xx share on the OpenAI routes is at least ``http_error_share`` and more than
``http_error_peer_factor`` times its peers' (the other replicas of its model) for
``http_error_persistence_s`` is ``failing_replica`` with cause ``http_errors``: errors its peers
behind the same balancer do not make are its own (errors every replica makes are the model's, which
the error SLO counts). Every serving finding names the node by its name (``ServingSignals.nodes``).

When most replicas of a model are saturated at once (requests waiting and the KV cache near full or
preempting), no replica is the problem: the model needs more replicas. That is one ``capacity``
finding for the model (no node, no job), whose action is to scale out, never to drain.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

from fleetscope import contract as c
from fleetscope.analyzers.config import DetectorConfig
from fleetscope.analyzers.detectors.base import Detection, Detector
from fleetscope.analyzers.features import Features, fmt_time, robust_z
from fleetscope.analyzers.findings import Finding
from fleetscope.analyzers.signals.hardware import slowdown_cause
from fleetscope.analyzers.signals.runs import runs_with_persistence
from fleetscope.analyzers.signals.serving import ServingSignals
from fleetscope.analyzers.signals.window_signals import Signals
from fleetscope.window.frames import iter_runs, rolling_sum

# Thresholds (replica_ratio_with_hw, replica_ratio, replica_prompt_ratio, kv_full, preempt_per_s,
# saturated_share, min_replica_peers) are DetectorConfig fields, with the reason for each number.

_SLOW_ACTIONS = {
    "thermal_throttle": "take the replica out of the load balancer and move it off this node; check the "
    "node's fans, airflow and inlet temperature, then run dcgmi diag -r 3",
    "power_brake": "take the replica out of the load balancer and move it off this node; check the node's "
    "PSUs and power feed, then run dcgmi diag -r 3",
    "hw_slowdown": "take the replica out of the load balancer and move it off this node; run dcgmi diag "
    "-r 3 and check the BMC event log",
    "pcie": "move the replica off this node; reseat or replace the GPU's PCIe link",
    "kv_cache_pressure": "compare this replica's vLLM flags (--gpu-memory-utilization, --max-model-len, "
    "--max-num-seqs) and its GPUs' memory (nvidia-smi) with its peers'; route long-context requests evenly",
    "unknown": "compare this replica's engine version, flags and GPUs with a peer's; restart it on another "
    "node if it stays slow",
}
_WEDGED_ACTIONS = {
    "engine stopped": "take the replica out of the load balancer (its /health still answers) and restart "
    "it; read the engine core's last log lines (a deadlocked scheduler, a stopped or crashed engine core) "
    "before they rotate",
    "collective hang": "take the replica out of the load balancer and restart it; a tensor-parallel "
    "all-reduce hangs on a peer GPU or its NVLink: check this node's GPUs (XIDs, NVLink errors, dcgmi "
    "diag -r 3) before the replica returns to it",
    "no progress": "take the replica out of the load balancer and restart it; read the engine's log for "
    "why it stopped",
}
_HTTP_ACTION = (
    "take the replica out of the load balancer and restart it; read its API server's log for the "
    "exception behind the 5xx (its engine client, its engine) and move it if it fails again on this node"
)
_FAILING_ACTION = (
    "the replica's engine lost its GPU: keep it out of the load balancer, reschedule the pod "
    "on another node and drain this one (power-cycle, dcgmi diag -r 3, RMA if it repeats)"
)


def _med(x: np.ndarray, axis: int | None = None) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmedian(x, axis=axis)


def _med1(x: np.ndarray) -> float:
    """The median of every value of ``x`` (NaN when none)."""
    return float(_med(x))


def _fmt_ms(x: float) -> str:
    return f"{x * 1000:.1f} ms" if np.isfinite(x) else "n/a"


def _saturated(s: ServingSignals, cfg: DetectorConfig) -> np.ndarray:
    """Per time and replica: requests wait while the KV cache is full or preempting."""
    return (np.nan_to_num(s.waiting) > 0) & (
        (np.nan_to_num(s.kv) >= cfg.kv_full) | (np.nan_to_num(s.preempt_rate) >= cfg.preempt_per_s)
    )


class InferenceDetector(Detector):
    """Serving replicas slower than their peers or failing, and saturated models: module docstring."""

    name = "inference"
    kinds = ("slow_replica", "failing_replica", "capacity")

    def detect(self, signals: Signals, prior: Sequence[Finding]) -> Detection:
        feat = signals.features
        s = signals.serving
        if not s.replicas:
            return Detection([])
        out: list[Finding] = []
        sat = _saturated(s, feat.config)
        for model, cols in s.models().items():
            crowded = self._capacity(feat, s, model, cols, sat, out)
            if cols.sum() >= feat.config.min_replica_peers:
                self._slow(feat, s, cols, sat, crowded, out, signals.gpu_throttle)
        out += self._failing(feat, s, prior)
        out += self._wedged(feat, s)
        out += self._http_errors(feat, s)
        return Detection(out)

    # ---------------------------------------------------------------- capacity
    def _capacity(
        self,
        feat: Features,
        s: ServingSignals,
        model: str,
        cols: np.ndarray,
        sat: np.ndarray,
        out: list[Finding],
    ) -> np.ndarray:
        """Append the model's capacity findings; returns the times it is saturated fleet-wide."""
        present = s.present[:, cols].sum(axis=1)
        share = np.where(
            present > 0, (sat[:, cols] & s.present[:, cols]).sum(axis=1) / np.maximum(present, 1), 0
        )
        crowded = (share > feat.config.saturated_share) & (present >= 2)
        times = feat.times
        for a, b in runs_with_persistence(crowded, feat.persistence_steps):
            ongoing = b >= len(times) - 3
            seg = slice(a, b + 1)
            ev = {
                "model": model,
                "replicas_saturated": f"{int(np.max((sat[seg][:, cols]).sum(axis=1)))} of "
                f"{int(np.max(present[seg]))}",
                "requests_waiting": f"{np.nanmax(np.nansum(s.waiting[seg][:, cols], axis=1)):.0f} (all "
                "replicas)",
                "kv_cache_usage": f"median {_med(s.kv[seg][:, cols]):.0%}",
                "preemptions": f"{np.nansum(_med(s.preempt_rate[seg][:, cols], axis=0)):.2f}/s per replica",
                "ttft_p95": f"median {_med(s.ttft_p95[seg][:, cols]):.2f} s",
                "confirmed_at": fmt_time(times[min(a + feat.persistence_steps - 1, len(times) - 1)]),
            }
            out.append(
                Finding(
                    kind="capacity",
                    severity="warning",
                    node=None,
                    start=float(times[a]),
                    end=None if ongoing else float(times[b]),
                    cause="saturated",
                    evidence=ev,
                    action=f"scale out {model}: add replicas (or raise the autoscaler's maximum); every "
                    "replica is saturated, none is faulty, so drain nothing",
                )
            )
        return crowded

    # ---------------------------------------------------------------- slow replicas
    def _slow(
        self,
        feat: Features,
        s: ServingSignals,
        cols: np.ndarray,
        sat: np.ndarray,
        crowded: np.ndarray,
        out: list[Finding],
        throttled: np.ndarray,
    ) -> None:
        """Append the slow replicas among ``cols``; ``throttled``: the GPUs' hardware evidence."""
        cfg = feat.config
        idx = np.nonzero(cols)[0]
        itl = s.itl_mean[:, idx]
        ratio, z = robust_z(itl, axis=1, mad_floor=feat.config.mad_floor)
        prompt_ratio, _ = robust_z(s.prompt_per_request[:, idx], axis=1)
        gi = feat.gpus.index
        peers_sat = _med(sat[:, idx].astype(float), axis=1)
        for j, k in enumerate(idx.tolist()):
            gcols = [gi[g] for g in s.gpus[k] if g in gi]
            hw = throttled[:, gcols].any(axis=1) if gcols else np.zeros(len(feat.times), dtype=bool)
            pcie = self._narrow_pcie(feat, gcols)
            hw = hw | pcie
            outlier = np.nan_to_num(z[:, j]) >= feat.config.straggler_z
            r = np.nan_to_num(ratio[:, j])
            workload = np.nan_to_num(prompt_ratio[:, j]) >= cfg.replica_prompt_ratio
            slow = outlier & (
                ((r >= cfg.replica_ratio_with_hw) & hw) | ((r >= cfg.replica_ratio) & ~workload)
            )
            slow &= ~crowded
            kv = sat[:, k] & (peers_sat < 0.5) & ~crowded
            for flag, kind in ((slow, "decode"), (kv & ~slow, "kv")):
                for a, b in runs_with_persistence(flag, feat.persistence_steps):
                    out.append(self._slow_finding(feat, s, k, j, a, b, kind, ratio, gcols, hw))

    @staticmethod
    def _narrow_pcie(feat: Features, gcols: list[int]) -> np.ndarray:
        """Per time: one of the replica's GPUs runs a narrower PCIe link than the widest of the node."""
        w = feat.gpus.pcie_width
        if not gcols or not w.size:
            return np.zeros(len(feat.times), dtype=bool)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            ref = np.nanmax(w[:, gcols])
        return (np.nan_to_num(w[:, gcols], nan=ref) < ref).any(axis=1)

    def _slow_finding(
        self,
        feat: Features,
        s: ServingSignals,
        k: int,
        j: int,
        a: int,
        b: int,
        kind: str,
        ratio: np.ndarray,
        gcols: list[int],
        hw: np.ndarray,
    ) -> Finding:
        rep = s.replicas[k]
        times = feat.times
        seg = slice(a, b + 1)
        cause, gpu, ev = "kv_cache_pressure", None, {}
        if kind == "decode":
            cause = "unknown"
            for g in gcols if hw[seg].any() else []:
                cg, eg = slowdown_cause(feat, g, rep.host, a, b, {})
                if cg != "unknown":
                    cause, gpu, ev = cg, str(feat.gpus.keys.iloc[g]["gpu"]), eg
                    break
        peers = [i for i in range(len(s.replicas)) if i != k and s.replicas[i].model == rep.model]
        ev.update(
            {
                "model": rep.model,
                "replica": rep.name,
                "inter_token_latency": f"{_fmt_ms(_med1(s.itl_mean[seg, k]))} (peers "
                f"{_fmt_ms(_med1(s.itl_mean[seg][:, peers]))})",
                "inter_token_p95": f"{_fmt_ms(_med1(s.itl_p95[seg, k]))} (peers "
                f"{_fmt_ms(_med1(s.itl_p95[seg][:, peers]))})",
                "ttft_p95": f"{_med(s.ttft_p95[seg, k]):.3f} s (peers {_med(s.ttft_p95[seg][:, peers]):.3f} "
                "s)",
                "kv_cache_usage": f"{_med(s.kv[seg, k]):.0%} (peers {_med(s.kv[seg][:, peers]):.0%})",
                "requests_waiting": f"{np.nanmax(s.waiting[seg, k]):.0f} (peers "
                f"{_med(s.waiting[seg][:, peers]):.0f})",
                "preemptions": f"{_med(s.preempt_rate[seg, k]):.2f}/s",
                "gpus": ",".join(g for _, g in s.gpus[k]),
                "confirmed_at": fmt_time(times[min(a + feat.persistence_steps - 1, len(times) - 1)]),
            }
        )
        score = float(_med(ratio[seg, j])) if kind == "decode" else float("nan")
        return Finding(
            kind="slow_replica",
            severity="warning",
            node=s.nodes[k],
            gpu=gpu,
            start=float(times[a]),
            end=None if b >= len(times) - 3 else float(times[b]),
            score=score if np.isfinite(score) else None,
            cause=cause,
            evidence=ev,
            action=_SLOW_ACTIONS.get(cause, _SLOW_ACTIONS["unknown"]),
        )

    # ---------------------------------------------------------------- failing replicas
    def _failing(self, feat: Features, s: ServingSignals, prior: Sequence[Finding]) -> list[Finding]:
        out = []
        for f in prior:
            if f.kind != "failing_node" or f.severity != "critical":
                continue
            for k, rep in enumerate(s.replicas):
                if (f.node, f.gpu) not in s.gpus[k]:
                    continue
                ev = {
                    "model": rep.model,
                    "replica": rep.name,
                    f"{f.cause}": f"from {f.kind} at {fmt_time(f.start)}",
                }
                ev.update({key: v for key, v in f.evidence.items() if key != "confirmed_at"})
                seen = np.nonzero(s.present[:, k])[0]
                if seen.size and seen[-1] < len(feat.times) - 2:
                    ev["replica_series"] = f"stopped at {fmt_time(feat.times[seen[-1] + 1])}"
                ev["confirmed_at"] = f.evidence.get("confirmed_at", fmt_time(f.start))
                out.append(
                    Finding(
                        kind="failing_replica",
                        severity="critical",
                        node=f.node,
                        gpu=f.gpu,
                        start=f.start,
                        cause=f.cause,
                        evidence=ev,
                        action=_FAILING_ACTION,
                    )
                )
        return out

    # ---------------------------------------------------------------- wedged replicas
    @staticmethod
    def wedge_bound(feat: Features, s: ServingSignals) -> np.ndarray:
        """Per grid time and replica: grid steps without progress that make it wedged."""
        cfg = feat.config
        with np.errstate(invalid="ignore"):
            own = np.ceil(cfg.wedge_itl_factor * s.itl_p99_last / feat.step)
        return np.maximum(np.nan_to_num(own, nan=0.0), cfg.wedge_min_scrapes)

    def _wedged(self, feat: Features, s: ServingSignals) -> list[Finding]:
        """Replicas stalled for their bound: module docstring."""
        out = []
        times = feat.times
        bound = self.wedge_bound(feat, s)
        for k in range(len(s.replicas)):
            for a, b in iter_runs(s.stalled[:, k] >= bound[:, k]):
                last_progress = max(a - int(s.stalled[a, k]), 0)
                ev = self._wedge_evidence(feat, s, k, last_progress, a, b, int(bound[a, k]))
                diagnosis = ev["diagnosis"].split(":")[0]
                out.append(
                    Finding(
                        kind="failing_replica",
                        severity="critical",
                        node=s.nodes[k],
                        start=float(times[min(last_progress + 1, a)]),
                        end=None if b >= len(times) - 3 else float(times[b]),
                        cause="engine_wedged",
                        evidence=ev,
                        action=_WEDGED_ACTIONS.get(diagnosis, _WEDGED_ACTIONS["no progress"]),
                    )
                )
        return out

    def _wedge_evidence(
        self, feat: Features, s: ServingSignals, k: int, last: int, a: int, b: int, bound: int
    ) -> dict[str, str]:
        rep = s.replicas[k]
        times = feat.times
        seg = slice(last + 1, b + 1)
        gi = feat.gpus.index
        gcols = [gi[g] for g in s.gpus[k] if g in gi]
        peers = [
            i for i in range(len(s.replicas)) if i != k and s.replicas[i].model == rep.model and s.nodes[i]
        ]
        pcols = [gi[g] for i in peers for g in s.gpus[i] if g in gi and g not in s.gpus[k]]
        util = _med1(feat.gpus.util[seg][:, gcols]) if gcols else float("nan")
        tensor = _med1(feat.gpus.tensor[seg][:, gcols]) if gcols else float("nan")
        cfg = feat.config
        if not np.isfinite(util):
            diagnosis = "no progress: no GPU utilisation data for its GPUs"
        elif util < cfg.wedge_idle_util:
            diagnosis = "engine stopped: its GPUs idle while requests wait in it"
        elif util >= cfg.hang_util and not (np.isfinite(tensor) and tensor >= cfg.wedge_spin_tensor):
            diagnosis = "collective hang: its GPUs busy with no compute (a kernel spinning on a peer)"
            if len(gcols) > 1:
                diagnosis += f", across its {len(gcols)} tensor-parallel GPUs as a hung job's ranks spin"
        else:
            diagnosis = "no progress: its GPUs neither idle nor spinning"
        running = s.running[seg, k]
        itl = s.itl_p99_last[a, k]
        ev = {
            "model": rep.model,
            "replica": rep.name,
            "diagnosis": diagnosis,
            "requests_in_flight": f"{np.nanmax(running):.0f} running"
            if np.isfinite(running).any()
            else "none running; its HTTP layer answers requests",
            "frozen": f"{c.VLLM_GENERATION_TOKENS} and {c.VLLM_REQUEST_SUCCESS} unchanged since "
            f"{fmt_time(times[last])}",
            "stalled_for": f"{(b - last) * feat.step:.0f} s",
            "bound": f"{bound * feat.step:.0f} s ({bound} scrapes; {cfg.wedge_itl_factor:g} x its p99 "
            f"inter-token latency {_fmt_ms(itl)})",
            "gpu_utilisation": f"{util:.0f}% (peers {_med1(feat.gpus.util[seg][:, pcols]):.0f}%)"
            if gcols and pcols
            else (f"{util:.0f}%" if gcols else "n/a"),
            "tensor_active": f"{tensor:.2f}" if np.isfinite(tensor) else "n/a",
            "gpus": ",".join(g for _, g in s.gpus[k]),
            "confirmed_at": fmt_time(times[a]),
        }
        return ev

    # ---------------------------------------------------------------- 5xx at the front door
    def _http_errors(self, feat: Features, s: ServingSignals) -> list[Finding]:
        """Replicas whose 5xx share stands out against their peers': module docstring."""
        cfg = feat.config
        w = feat.rate_window_steps
        total = rolling_sum(s.http_all, w)
        errors = rolling_sum(s.http_5xx, w)
        if not np.isfinite(total).any():
            return []
        persist = max(1, round(cfg.http_error_persistence_s / feat.step))
        out = []
        for _model, cols in s.models().items():
            idx = np.nonzero(cols)[0]
            if len(idx) < 2:
                continue
            t_all, e_all = np.nansum(total[:, idx], axis=1), np.nansum(errors[:, idx], axis=1)
            for k in idx.tolist():
                mine_t, mine_e = np.nan_to_num(total[:, k]), np.nan_to_num(errors[:, k])
                with np.errstate(all="ignore"):
                    share = np.where(mine_t > 0, mine_e / mine_t, np.nan)
                    peer_t = t_all - mine_t
                    peers = np.where(peer_t > 0, (e_all - mine_e) / peer_t, np.nan)
                flag = (
                    (mine_t >= cfg.http_error_min_requests)
                    & (np.nan_to_num(share) >= cfg.http_error_share)
                    & (np.nan_to_num(share) > cfg.http_error_peer_factor * np.nan_to_num(peers))
                    & (peer_t > 0)
                )
                for a, b in runs_with_persistence(flag, persist):
                    out.append(self._http_finding(feat, s, k, a, b, persist, share, peers))
        return out

    def _http_finding(
        self,
        feat: Features,
        s: ServingSignals,
        k: int,
        a: int,
        b: int,
        persist: int,
        share: np.ndarray,
        peers: np.ndarray,
    ) -> Finding:
        rep = s.replicas[k]
        times = feat.times
        seg = slice(a, b + 1)
        confirmed = min(a + persist - 1, len(times) - 1)
        rate = np.nansum(s.http_5xx[seg, k]) / max((b - a + 1) * feat.step, feat.step)
        engine = np.nansum(s.finished[seg, k])
        ev = {
            "model": rep.model,
            "replica": rep.name,
            "http_5xx_share": f"{_med1(share[seg]):.0%} (peers {_med1(peers[seg]):.1%})",
            "http_5xx_rate": f"{rate:.1f}/s",
            "engine_finished": f"{engine:.0f} requests (vllm:request_success_total)",
            "confirmed_at": fmt_time(times[confirmed]),
        }
        return Finding(
            kind="failing_replica",
            severity="critical",
            node=s.nodes[k],
            start=float(times[a]),
            end=None if b >= len(times) - 3 else float(times[b]),
            cause="http_errors",
            evidence=ev,
            action=_HTTP_ACTION,
        )
