"""Every threshold the detectors use, in one frozen dataclass, with where each number comes from.

Sources are in docs/design.md (#persistence, #stragglers, #robust-scores, #mfu-drops); every number
beside the alert rules' is in docs/design.md#thresholds, kept equal by tests/alerts/test_thresholds.py.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from fleetscope.errors import FleetscopeError


@dataclass(frozen=True)
class DetectorConfig:
    # --- windows --------------------------------------------------------------------------
    #: Seconds of history behind each rate (compute time per step, MFU). Two minutes hold ~25
    #: steps of a 4-5 s step, enough to average out step-count quantization (about +-4%).
    rate_window_s: float = 120.0
    #: A straggler or a drop must persist this long before it is reported (Minder: abnormal
    #: patterns last > 5 min; Greyhound verifies >= 10 iterations; docs/design.md#persistence).
    persistence_s: float = 180.0

    # --- straggler ------------------------------------------------------------------------
    #: Own compute time / peer median at or above which a rank is slow. What-if analysis calls a
    #: job straggling at S > 1.1 and Greyhound verifies a >= 10% change (docs/design.md#stragglers);
    #: so that a rank 10% slower is reliably caught the cut sits at 1.07, above the 3-4% spread
    #: between healthy GPUs of one model.
    straggler_ratio: float = 1.07
    #: Without hardware evidence a rank must also be this much slower than its own best level in
    #: the window (NVRx's individual score beside its relative one): a rank that differs from its
    #: peers from the first step to the last may be structure or role (a pipeline stage, rank 0's
    #: logging), not a fault that began; with hardware evidence no change is needed ...
    self_change: float = 0.05
    #: ... unless it is slower than every one of its role peers (all but a quarter of the other
    #: nodes: a second fault must not hide the first; the ranks of the other
    #: data-parallel replicas at its place, on other nodes; docs/analyzers.md#role-peers) by this
    #: much (in units of its ratio to the peer median): structure repeats on every replica, a
    #: fault does not, so a GPU slow from the first step is still found. 0.02 is half the healthy
    #: spread of one model's GPUs (Sinha et al., SC'22), well under the 7% a straggler must show.
    role_margin: float = 0.02
    #: ... for at least this share of the grid times its slowness is measured in the window: a
    #: fault that has not changed holds throughout, while a healthy GPU at the slow end of the
    #: spread crosses the line for a few minutes now and then.
    role_persistence: float = 0.5
    #: Without hardware evidence a timer view's excess must also be this many standard errors of
    #: its window median (from the spread of the rank's own grid steps): where the work per step
    #: varies (sequence lengths, ByteDance's trace SE) a run of long batches is not a straggler.
    straggler_noise: float = 3.0
    #: With the GPU's own hardware evidence at the same time (a throttle reason bit, violation time),
    #: a rank this much slower than its peers is a straggler: the hardware explains it, so jitter
    #: cannot (a 5% throttle costs a synchronous job its full 5%; Minder, NSDI'25).
    straggler_ratio_with_hw: float = 1.03
    #: A phase (data loading, host-side optimizer work) longer than the peers' by this share of the
    #: step, or a wait this much shorter (the rank everybody waits for waits least), is a straggler.
    phase_share: float = 0.04
    #: The same share when the GPU's hardware evidence agrees.
    phase_share_with_hw: float = 0.015
    #: Slow periods of one GPU closer than this are one on/off episode series, reported once.
    episode_gap_s: float = 600.0
    #: Modified z-score 0.6745 (x - median) / MAD above which a rank is an outlier
    #: (Iglewicz-Hoaglin, |M| > 3.5; docs/design.md#robust-scores).
    straggler_z: float = 3.5
    #: MAD floor as a fraction of the median, so identical peers do not give infinite z-scores.
    mad_floor: float = 0.005
    #: Hardware-only path: SM clock this far below the busy peers' median is a clock deficit.
    clock_deficit: float = 0.08
    #: Share of a finding's time a throttle reason bit must be set to name it as the cause.
    reason_share: float = 0.3
    #: Violation counters (ns throttled per ns) at or above which throttling is real.
    violation_share: float = 0.1
    #: PCIe replays per minute on one GPU (its peers not sharing them) that name its link as the
    #: cause of its slowness: DCGM's PCIe health watch warns above 8, "the maximum recommended by
    #: RM" (DCGM_LIMIT_MAX_PCIREPLAY_RATE; docs/design.md#link-and-memory-errors).
    pcie_replays_per_min: float = 8.0
    #: Corrected (single-bit) ECC errors per minute on one GPU that name its memory: DCGM's
    #: DCGM_LIMIT_MAX_SBE_RATE (10, provisional there).
    ecc_corrected_per_min: float = 10.0
    #: Strong evidence, confirmed early: a slow period with the GPU's own hardware evidence, or
    #: slower than its peers by at least ``large_slowdown``, is reported once it holds this many
    #: grid steps (two scrape windows); only small slowdowns without evidence wait
    #: ``persistence_s`` (docs/design.md#persistence).
    strong_confirm_steps: int = 2
    #: A slowdown this large (own / peer median, What-if's S > 1.1 twice over) is no jitter.
    large_slowdown: float = 1.2
    #: Slow episodes of one GPU this close are one incident, reported once with its pattern.
    incident_gap_s: float = 1800.0

    # --- network --------------------------------------------------------------------------
    #: Retransmitted / transmitted packets on an EFA device above which the link is degraded
    #: (healthy SRD retransmits are parts per million).
    retrans_ratio: float = 0.005
    #: Packets per second a device must send for its retransmit ratio to mean anything (an idle or
    #: paused device's ratio is noise); the alert's floor.
    efa_min_tx_pps: float = 100.0
    #: Impaired/unresponsive/timeout events per minute that mark a device as degraded.
    efa_events_per_min: float = 1.0
    #: Received packets a device drops (rx_drops / rx_pkts) above which it is the receive-side
    #: culprit, when its drops stand out against the other devices': each drop is one retransmit at
    #: a sender, so the same share as ``retrans_ratio`` costs the same (docs/design.md#receive-side-drops).
    rx_drop_ratio: float = 0.005

    # --- MFU drop -------------------------------------------------------------------------
    #: Relative MFU (or tokens/s) loss against the job's own baseline that counts as a drop. A
    #: 10% step-time slowdown costs 9% MFU; Greyhound's 10% and SuperBench's 5% bracket this.
    mfu_drop: float = 0.06
    #: Minimum length of a drop (and of a baseline segment) in seconds.
    mfu_min_drop_s: float = 180.0
    mfu_min_baseline_s: float = 150.0
    #: Binary segmentation penalty, in units of noise variance x log(n) (BIC-like, docs/design.md#mfu-drops).
    changepoint_penalty: float = 3.0
    #: Data-phase share of the step that grew by this much (absolute) points at data loading.
    data_share_increase: float = 0.04
    #: Communication (optimizer phase) share growth that points at the network.
    comm_share_increase: float = 0.04

    # --- goodput --------------------------------------------------------------------------
    #: Node-days per failure the checkpoint advice assumes when the window saw none: published
    #: fleet rates are one per 264 (Llama 3) and one per 238 (StepFun's fault trace) node-days
    #: (docs/design.md#failure-rates).
    failure_prior_node_days: float = 250.0

    # --- failing node ---------------------------------------------------------------------
    #: The job counts as stalled when no rank steps for this long.
    stall_s: float = 60.0

    #: A job whose ranks report but none steps for this long, with its GPUs busy, is hung. Eval and
    #: checkpoint pauses last minutes but leave the GPUs idle or half busy; PyTorch's NCCL watchdog
    #: aborts a hung collective after 10 minutes by default.
    hang_s: float = 180.0
    #: Median GPU utilisation (percent) of the job's GPUs through a stall that marks it as a spin.
    hang_util: float = 85.0
    #: Without GPU utilisation data a stall is called a hang only after this long.
    hang_no_gpu_data_s: float = 600.0
    #: How far before a hang to look for the hardware that caused it.
    hang_lookback_s: float = 600.0
    #: NCCL RAS: a collective-count skew (or a missing rank) unchanged this long, with no step, is a
    #: hang; RAS itself declares a silent peer dead after 60 s (docs/hang.md#live).
    ras_confirm_s: float = 60.0
    #: A node whose every series is absent this long while its job keeps stepping: monitoring gap.
    gap_s: float = 120.0

    # --- inference (serving replicas of one model are each other's peers) -------------------
    #: Mean inter-token latency over the peer median at or above which a replica is slow when its
    #: GPUs show hardware evidence (a throttle bit, violation time, a narrower PCIe link): tensor
    #: parallelism makes every layer wait for its slowest shard, so the GPU explains a small margin.
    replica_ratio_with_hw: float = 1.05
    #: The same without hardware evidence: healthy replicas of one model differ by up to ~10% with
    #: their batch (the load balancer's shares are never exactly equal), so the margin is large.
    replica_ratio: float = 1.25
    #: Prompts this many times longer than the peers' (per request) make a replica slower by its
    #: workload (prefill and a fuller KV cache slow decoding), not by a fault.
    replica_prompt_ratio: float = 1.3
    #: KV-cache usage (0-1) at which a replica counts as full: vLLM preempts just below 100%, and
    #: above 85% a few long requests fill the rest (judgment).
    kv_full: float = 0.85
    #: Preemptions per second that count as preempting: one every 20 s is already recomputation
    #: users feel as slow first tokens; a stray one on a busy replica is not (judgment).
    preempt_per_s: float = 0.05
    #: Share of a model's replicas saturated at once (requests waiting, KV cache full or
    #: preempting) above which the model needs more replicas, not a drain: more than half.
    saturated_share: float = 0.5
    #: Fewest replicas of a model compared with each other: with two, a median cannot say which
    #: one is the outlier.
    min_replica_peers: int = 3
    #: A replica with work in flight whose generated-token and finished-request counters stand
    #: still this many scrapes (grid steps) in a row at least is wedged: one scrape's worth of no
    #: increase is what a missed scrape bridged by the grid looks like, two are not (never less).
    wedge_min_scrapes: int = 2
    #: ... and at least this many times its own recent p99 inter-token latency: one engine
    #: iteration (one token for every running request) longer than ten of its slowest recent ones
    #: is not a slow batch but a stopped engine; for a replica decoding at 50 ms this is 0.5 s, so
    #: two scrapes decide, and only a replica already taking seconds per token waits longer.
    wedge_itl_factor: float = 10.0
    #: GPU utilisation (percent, median over the stall) under which a wedged replica's engine is
    #: stopped (nothing launched); at or above ``hang_util`` with tensor-core activity under
    #: ``wedge_spin_tensor`` it is a hung collective (a kernel spinning on a peer that never comes).
    wedge_idle_util: float = 10.0
    wedge_spin_tensor: float = 0.05
    #: A replica's HTTP 5xx share (OpenAI routes, over the rate window) at or above this, and above
    #: ``http_error_peer_factor`` times its peers' share, is failing at the front door: 50 times
    #: the error budget of a 99.9% objective; twice the peers' makes it the replica's, not the
    #: model's (the alert rule's numbers, docs/design.md#thresholds).
    http_error_share: float = 0.05
    http_error_peer_factor: float = 2.0
    #: Fewest requests in the rate window a share is judged on: 1 failure in 4 requests says little.
    http_error_min_requests: float = 20.0
    #: How long the share must stand out: a minute (four 15 s scrapes) rules out a burst while a
    #: pod restarts its API server, and keeps the finding within two minutes of the onset.
    http_error_persistence_s: float = 60.0

    # --- Neuron (Trainium / Inferentia) -----------------------------------------------------
    #: p50 execution latency above this multiple of the peer nodes' median is a slow node: a
    #: synchronous step waits for the slowest node, so 15% slower executions cost the job ~15%,
    #: well above the few percent nodes of one instance type differ by (judgment).
    neuron_latency_ratio: float = 1.15

    def with_overrides(self, overrides: dict[str, Any]) -> DetectorConfig:
        names = {f.name for f in fields(self)}
        bad = set(overrides) - names
        if bad:
            raise FleetscopeError(f"unknown detector settings: {', '.join(sorted(bad))}")
        return replace(self, **{k: type(getattr(self, k))(v) for k, v in overrides.items()})


DEFAULT = DetectorConfig()


def load_config(path: str | None) -> DetectorConfig:
    """The detector thresholds: the defaults, with a YAML/JSON file's overrides (``--config``
    of ``analyze``, ``serve``, ``plan`` and ``evaluate``)."""
    if not path:
        return DEFAULT
    try:
        import yaml

        with open(path) as fh:
            data = yaml.safe_load(fh) or {}
    except OSError as exc:
        raise FleetscopeError(f"cannot read --config {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise FleetscopeError(f"--config {path} is not YAML/JSON: {exc}") from None
    if not isinstance(data, dict):
        raise FleetscopeError(f"--config {path} must be a mapping of setting: value")
    return DEFAULT.with_overrides(data)
