"""Recording rules: the training, network, storage and GPU-count series alerts and dashboards read.

Each rule is computed from raw series only (never from another recording rule), so
``promtool tsdb create-blocks-from rules`` can backfill all of them from recorded data.
"""

from __future__ import annotations

from fleetscope import contract as c
from fleetscope import queries
from fleetscope.alerts import goodput, inference, names
from fleetscope.alerts.config import Thresholds
from fleetscope.alerts.model import Case, Fire, Group, InputSeries, Recording
from fleetscope.alerts.testdata import (
    H100_BF16_PEAK,
    HOST,
    JOB,
    efa,
    efa_labels,
    gpu,
    lustre,
    lustre_labels,
    rank,
    rank_labels,
)

_PEAK = H100_BF16_PEAK


def _peak(gpu_index: str) -> tuple[InputSeries, InputSeries]:
    return (
        gpu(c.GPU_PEAK_FLOPS, f"{_PEAK:.0f}x10", gpu=gpu_index, dtype="bf16"),
        gpu(c.GPU_PEAK_FLOPS, f"{2 * _PEAK:.0f}x10", gpu=gpu_index, dtype="fp8"),
    )


def _flops(r: int, mfu: float) -> InputSeries:
    """A rank's model-FLOPs counter growing at ``mfu`` of the H100 bf16 peak."""
    return rank(c.TRAINING_MODEL_FLOPS, f"0+{mfu * _PEAK * 60:.0f}x10", r)


def group(cfg: Thresholds) -> Group:
    w = cfg.rate_window
    job = {"job_id": rank_labels(0)["job_id"]}
    rules = (
        Recording(
            names.RANK_MFU,
            queries.rank_mfu(w),
            (
                Case(
                    "half the bf16 peak", (_flops(0, 0.5), *_peak("0")), "10m", (Fire(rank_labels(0), 0.5),)
                ),
                Case("GPU model without a peak: no MFU", (_flops(0, 0.5),), "10m"),
            ),
        ),
        Recording(
            names.JOB_MFU,
            queries.job_mfu(w),
            (
                Case(
                    "ranks at 50% and 30%",
                    (_flops(0, 0.5), _flops(1, 0.3), *_peak("0"), *_peak("1")),
                    "10m",
                    (Fire(job, 0.4),),
                ),
                Case("no peak: no MFU", (_flops(0, 0.5),), "10m"),
            ),
        ),
        Recording(
            names.JOB_TOKENS,
            queries.job_tokens_rate(w),
            (
                Case(
                    "two ranks at 1000 tokens/s",
                    (rank(c.TRAINING_TOKENS, "0+60000x10", 0), rank(c.TRAINING_TOKENS, "0+60000x10", 1)),
                    "10m",
                    (Fire(job, 2000),),
                ),
                Case("no training", (gpu(c.GPU_UP, "1x10"),), "10m"),
            ),
        ),
        Recording(
            names.RANK_COMPUTE,
            queries.rank_compute_rate(w),
            (
                Case(
                    "forward 0.25 + backward 0.5 s/s",
                    (
                        rank(c.TRAINING_PHASE_SECONDS, "0+15x10", 0, phase="forward"),
                        rank(c.TRAINING_PHASE_SECONDS, "0+30x10", 0, phase="backward"),
                        rank(c.TRAINING_PHASE_SECONDS, "0+6x10", 0, phase="data"),
                    ),
                    "10m",
                    (Fire(rank_labels(0), 0.75),),
                ),
                Case(
                    "data loading only", (rank(c.TRAINING_PHASE_SECONDS, "0+6x10", 0, phase="data"),), "10m"
                ),
            ),
        ),
        Recording(
            names.JOB_STEP_SECONDS,
            queries.job_step_seconds_mean(w),
            (
                Case(
                    "2 s per step",
                    (
                        rank(c.TRAINING_STEPS, "0+30x10", 0),
                        rank(c.TRAINING_STEP_SECONDS, "0+60x10", 0),
                        rank(c.TRAINING_STEPS, "0+30x10", 1),
                        rank(c.TRAINING_STEP_SECONDS, "0+60x10", 1),
                    ),
                    "10m",
                    (Fire(job, 2),),
                ),
                Case(
                    "no step completes: absent, not NaN",
                    (rank(c.TRAINING_STEPS, "30x10", 0), rank(c.TRAINING_STEP_SECONDS, "60x10", 0)),
                    "10m",
                ),
            ),
        ),
        Recording(
            names.EFA_RETRANS_RATIO,
            queries.efa_retrans_ratio(w),
            (
                Case(
                    "1% retransmitted",
                    (efa(c.EFA_TX_PKTS, "0+65536x10"), efa(c.EFA_RETRANS_PKTS, "0+1024x10")),
                    "10m",
                    (Fire(efa_labels(), 0.015625),),
                ),
                Case(
                    "idle device: absent",
                    (efa(c.EFA_TX_PKTS, "5x10"), efa(c.EFA_RETRANS_PKTS, "0x10")),
                    "10m",
                ),
            ),
        ),
        Recording(
            names.LUSTRE_METADATA_LATENCY,
            queries.lustre_metadata_latency(w),
            (
                Case(
                    "timed opens at 1/64 s, untimed getattrs ignored",
                    (
                        lustre(c.LUSTRE_CLIENT_OPERATIONS, "0+600x10", operation="open"),
                        lustre(c.LUSTRE_CLIENT_OPERATION_SECONDS, "0+9.375x10", operation="open"),
                        lustre(c.LUSTRE_CLIENT_OPERATIONS, "0+6000x10", operation="getattr"),
                        lustre(c.LUSTRE_CLIENT_OPERATIONS, "0+6000x10", operation="read"),
                        lustre(c.LUSTRE_CLIENT_OPERATION_SECONDS, "0+60x10", operation="read"),
                    ),
                    "10m",
                    (Fire(lustre_labels(), 0.015625),),
                ),
                Case(
                    "no metadata operations",
                    (
                        lustre(c.LUSTRE_CLIENT_OPERATIONS, "0x10", operation="open"),
                        lustre(c.LUSTRE_CLIENT_OPERATION_SECONDS, "0x10", operation="open"),
                    ),
                    "10m",
                ),
            ),
        ),
        Recording(
            names.NODE_GPU_COUNT,
            queries.node_gpu_count(),
            (
                Case(
                    "two GPUs, one lost",
                    (gpu(c.GPU_UP, "1x10"), gpu(c.GPU_UP, "0x10", gpu="1")),
                    "10m",
                    (Fire({c.NODE_LABEL: HOST}, 2),),
                ),
                Case("no exporter", (), "10m"),
            ),
        ),
        discovery(),
    )
    return Group("recording", (*rules, *goodput.recordings(cfg), *inference.recordings(cfg)))


def discovery() -> Recording:
    """The sharded service's discovery (fleetscope.service.shard), evaluated once for all its
    replicas: a series per (node, job, served model) that wrote an identity series in the minute
    before."""
    return Recording(
        names.FLEET_IDENTITY,
        queries.fleet_identity("1m"),
        (
            Case(
                "a training node: a row of its own and one with its job",
                (
                    gpu(c.GPU_UP, "1x10"),
                    gpu(c.GPU_UP, "1x10", gpu="1"),
                    rank(c.TRAINING_INFO, "1x10", 0),
                    rank(c.TRAINING_INFO, "1x10", 1),
                ),
                "10m",
                (Fire({c.NODE_LABEL: HOST}, 1), Fire({c.NODE_LABEL: HOST, c.JOB_LABEL: JOB}, 1)),
            ),
            Case(
                "a node silent for over a minute, and a series that is not an identity one",
                (
                    gpu(c.GPU_UP, "1x5 _x5"),
                    rank(c.TRAINING_PHASE_SECONDS, "0+15x10", 0, phase="forward"),
                ),
                "10m",
            ),
        ),
    )
