"""Every threshold of the generated rules, in one object, with the reason for each number.

Change a value here, run ``fleetscope generate``, and commit the regenerated rule files; the
promtool unit tests are generated from the same object, so they follow. Numbers marked "judgment"
are starting points chosen for this project, not published limits; tune them on your fleet.

docs/design.md#thresholds puts every number here beside the detector's number for the same thing
(``DetectorConfig``) with the reason they differ; ``tests/alerts/test_thresholds.py`` fails when
that table and this object disagree, so change both together.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetscope.defaults import SERVICE_PORT


@dataclass(frozen=True)
class Thresholds:
    # ---- where the runbooks live ---------------------------------------------------------------
    #: Base of every ``runbook_url``; the alert's anchor in docs/runbooks.md is appended. The live
    #: service serves the runbooks itself at ``/runbooks`` (clusters are often air-gapped), so the
    #: default is the service's default address; ``fleetscope generate --runbook-base-url`` (the
    #: chart's ``runbookBaseUrl``, compose's ``RUNBOOK_BASE_URL``) points it at yours.
    runbook_url_base: str = f"http://127.0.0.1:{SERVICE_PORT}/runbooks"

    # ---- selectors -----------------------------------------------------------------------------
    #: Label matcher for fleetscope's scrape jobs (node exporters and the live service). The compose
    #: stack names them fleetscope-exporter, fleetscope-nodes and fleetscope-service; the Helm chart's
    #: ServiceMonitor job contains "fleetscope" too.
    job_selector: str = 'job=~".*fleetscope.*"'

    # ---- rate windows --------------------------------------------------------------------------
    #: Window of every rate() in the recording rules: at least 4 scrapes at a 60 s interval, the
    #: window the prometheus.io naming examples (``rate5m``) use.
    rate_window: str = "5m"
    #: Window in which a new counter increase (XID, ECC, EFA events) counts as "now".
    event_window: str = "10m"

    # ---- GPU -----------------------------------------------------------------------------------
    #: Application XIDs (13, 31, 43, ...) are the job's fault once; NVIDIA's WORKFLOW_XID_13/31 say
    #: a repeat on the same GPU points at the hardware. 3 in a day is that repeat (judgment).
    xid_application_repeat_count: int = 3
    xid_application_repeat_window: str = "1d"
    #: How far back "the width/generation this GPU had" and "the GPUs this node had" look.
    gpu_history_window: str = "1d"
    #: PCIe link generation drops at idle (power saving), so a lower generation only counts while
    #: the GPU is busy: GPU utilization above this percent.
    pcie_gen_busy_util_percent: float = 10.0
    #: PCIe replays per second. DCGM's PCIe health watch counts replays as the first sign of a bad
    #: riser or slot; a healthy link replays close to never, so a sustained 0.1/s (6 a minute) is a
    #: link to reseat (judgment).
    pcie_replay_rate_per_second: float = 0.1
    #: NVLink CRC (flit + data), replay and recovery errors per second, summed. Healthy links count
    #: none for days; a sustained 1/s slows NCCL all-reduce measurably (judgment).
    nvlink_error_rate_per_second: float = 1.0
    #: Thermal throttling must last this long before it is "sustained": short HW slowdowns at load
    #: changes are normal.
    thermal_throttle_for: str = "10m"
    #: A power brake (0x80) is asserted by the chassis/PSU, never by the GPU's own policy, so it
    #: counts sooner.
    power_brake_for: str = "5m"

    # ---- network (EFA) -------------------------------------------------------------------------
    #: SRD sprays packets over many paths and retransmits a few as a matter of course (parts per
    #: million on a healthy device); a sustained retransmit ratio above 0.5% of transmitted packets
    #: means a lossy or congested path (judgment). The same number as the detector's
    #: ``retrans_ratio``: one physical quantity, one line (docs/design.md#thresholds).
    efa_retrans_ratio: float = 0.005
    #: Below this many transmitted packets per second the ratio is noise (an idle device).
    efa_min_tx_pkts_per_second: float = 100.0
    #: Each retrans_timeout_event is an SRD path change after a timeout; a few per window happen on
    #: any busy fabric, more than this in ``event_window`` is a path going bad (judgment).
    efa_retrans_timeouts_per_window: float = 3.0
    #: A device counts as "carrying traffic" above this many transmitted bytes per second. A node
    #: whose busiest EFA device is above it while another device sends nothing has lost a device
    #: from NCCL's rings (1 MB/s is far below any collective's traffic and above keep-alives).
    efa_busy_tx_bytes_per_second: float = 1e6

    # ---- storage (FSx for Lustre) --------------------------------------------------------------
    #: Throughput capacity of the file system in bytes/s. FSx for Lustre's is storage capacity
    #: (TiB) times the per-unit throughput you chose (125, 250, 500 or 1000 MB/s/TiB); the default
    #: is a 4.8 TiB PERSISTENT_2 file system at 250 MB/s/TiB. Clients cannot read it, so set yours.
    fsx_throughput_capacity_bytes_per_second: float = 1.2e9
    #: "At its limit": the clients' summed read+write rate above this share of the capacity.
    fsx_throughput_limit_ratio: float = 0.9
    #: Mean metadata operation latency (open, close, getattr, ...). FSx serves these in well under a
    #: millisecond when healthy; 20 ms mean makes checkpoints and data-loader startup crawl
    #: (judgment).
    lustre_metadata_latency_seconds: float = 0.02
    #: Below this many metadata operations per second the mean latency is noise.
    lustre_metadata_min_ops_per_second: float = 1.0

    # ---- training ------------------------------------------------------------------------------
    #: A job is stalled when its last step is older than this many of its usual step times ...
    stall_step_multiple: float = 10.0
    #: ... but never sooner than this: a checkpoint or evaluation pause is not a stall, and 10
    #: minutes is PyTorch's default NCCL watchdog timeout, after which a hung job is surely dead.
    #: The detector's ``stall_s`` (60 s) is lower on purpose: it only localises after the fact
    #: (docs/design.md#thresholds).
    stall_min_seconds: float = 600.0
    #: "Usual" means the median over this window.
    baseline_window: str = "6h"
    #: A RAS op-count skew (or an unresponsive rank) unchanged this long is a hang: a minute of no
    #: progress is far beyond any collective's time, RAS itself declares a silent peer dead after
    #: 60 s (NCCL ras.rst), and a page within 2 minutes beats the 10-minute watchdog.
    collective_hang_frozen_window: str = "1m"
    #: MFU below its own median by more than this fraction. Greyhound verifies a slow-down at a 10%
    #: change and the OSDI'25 what-if study calls S > 1.1 a straggling job; Llama 3 saw only 1-2%
    #: diurnal swing (sources: docs/design.md#mfu-drops). Higher than the detector's ``mfu_drop``
    #: because PromQL cannot mask checkpoint dips (docs/design.md#thresholds).
    mfu_drop_ratio: float = 0.10
    #: Tokens/s drop. Tokens/s moves with MFU, but also when a job changes sequence length or batch
    #: size; a bigger step avoids paging on such a deliberate change (judgment).
    tokens_drop_ratio: float = 0.20
    #: A rank whose compute time is this many times its peers' median. Greyhound's clique test
    #: uses 1.2x the peer median; the detector cuts at 1.07 because it also requires a robust
    #: z-score, which PromQL cannot compute (docs/design.md#stragglers).
    rank_compute_ratio: float = 1.2
    #: The live service's straggler score above which the rank counts as a straggler (same 1.2x).
    straggler_score: float = 1.2

    # ---- checkpoints and goodput ---------------------------------------------------------------
    #: A running job whose newest successful checkpoint is older than this: a crash now loses it
    #: all. Large jobs checkpoint every 30-60 minutes; 2 h leaves room for one missed or slow save
    #: (judgment; docs/design.md#thresholds).
    checkpoint_max_age_seconds: float = 7200.0
    #: GPU-hours a job would lose if one of its nodes failed now (checkpoint age x GPUs). 512 is
    #: 256 GPUs two hours after a save: a larger job should save more often than the age alert
    #: asks (judgment).
    checkpoint_exposure_gpu_hours: float = 512.0
    #: A save is "slowing" when the last ``checkpoint_slow_window``'s mean save time exceeds this
    #: many times the ``checkpoint_baseline_window``'s: the same save taking twice as long points at
    #: the file system (full, degraded, throttled), not the job (judgment).
    checkpoint_slowdown_ratio: float = 2.0
    checkpoint_slow_window: str = "1h"
    checkpoint_baseline_window: str = "1d"
    #: ... and only above this many seconds per save: 5 s becoming 12 s costs nothing worth a page.
    checkpoint_slow_min_seconds: float = 60.0

    # ---- inference: SLOs of serving replicas (docs/inference.md#slos) ---------------------------
    #: Time to first token a request must beat: 99% of requests under 2.5 s. The threshold must be a
    #: bucket bound of vLLM's TTFT histogram (..., 1, 2.5, 5, ... s; 2 s is none), since the SLI is
    #: ``1 - bucket{le} / count``. An interactive chat SLO (judgment; tune per model).
    inference_ttft_seconds: float = 2.5
    inference_ttft_objective: float = 0.99
    #: Inter-token latency each generated token must beat: 99% of gaps under 100 ms (10 tokens/s
    #: per stream, faster than people read), a bound of vLLM's ITL/TPOT buckets (judgment).
    inference_itl_seconds: float = 0.1
    inference_itl_objective: float = 0.99
    #: Share of requests that must not fail (HTTP 5xx on vLLM's OpenAI routes, TGI/Triton failures):
    #: 99.9%, the availability SLO of the SRE workbook's examples (judgment).
    inference_error_objective: float = 0.999
    #: Multiwindow, multi-burn-rate alerts (Google SRE workbook, "Alerting on SLOs", ch. 5): page
    #: when the error budget burns 14.4 times too fast over 1 h and 5 min (2% of a 30-day budget
    #: in an hour) or 6 times over 6 h and 30 min (5% in 6 hours); ticket at 1 times over 3 d and
    #: 6 h (10% in 3 days). The short window makes the alert stop soon after the burn stops.
    slo_page_fast_burn: float = 14.4
    slo_page_fast_long_window: str = "1h"
    slo_page_fast_short_window: str = "5m"
    slo_page_slow_burn: float = 6.0
    slo_page_slow_long_window: str = "6h"
    slo_page_slow_short_window: str = "30m"
    slo_ticket_burn: float = 1.0
    slo_ticket_long_window: str = "3d"
    slo_ticket_short_window: str = "6h"
    #: A vLLM engine's KV cache is saturated above this usage while it preempts faster than
    #: ``inference_preemptions_per_second``: requests are recomputed and first tokens slow down.
    #: The same numbers as the detector's ``kv_full`` and ``preempt_per_s`` (docs/design.md#thresholds).
    inference_kv_cache_full_ratio: float = 0.85
    inference_preemptions_per_second: float = 0.05
    #: A replica's queue is growing when at least this many requests wait and the count rose over
    #: ``inference_queue_growth_window``: arrivals outrun service (judgment: 10 waiting is a few
    #: seconds of queueing at a replica's usual rate, not a burst the batch absorbs at once).
    inference_queue_min_waiting: float = 10.0
    inference_queue_growth_window: str = "15m"
    #: A serving target that reported engine series within this window and is now down is a
    #: replica down (one that scaled in leaves service discovery and no ``up`` series).
    inference_replica_lookback: str = "1h"
    #: A replica is wedged when requests ran in it throughout this window and it generated no token
    #: and finished no request: a decode iteration takes tens of milliseconds and a prefill chunk
    #: well under a second, so 90 s without one token while requests run is an engine that stopped,
    #: not a slow one; 90 s holds two samples of a 60 s scrape and six of a 15 s one
    #: (docs/design.md#wedged-replicas).
    inference_wedge_window: str = "90s"
    #: A replica's HTTP 5xx share stands out when it is at least this (50 times the 0.1% error
    #: budget of ``inference_error_objective``) and more than ``inference_replica_5xx_peer_factor``
    #: times its peers' (the scrape job's) share over ``inference_replica_5xx_window``: errors one
    #: replica makes and its peers do not are the replica's, not the model's (which the error SLO
    #: alerts page on).
    inference_replica_5xx_share: float = 0.05
    inference_replica_5xx_peer_factor: float = 2.0
    inference_replica_5xx_window: str = "2m"

    # ---- the stack itself ----------------------------------------------------------------------
    #: Scrape duration above which the exporter is "too slow": half of Prometheus' default 10 s
    #: scrape timeout, so there is time to act before scrapes start failing.
    scrape_duration_seconds: float = 5.0


THRESHOLDS = Thresholds()
