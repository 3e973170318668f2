"""Training alerts: a stalled job, MFU or tokens/s below the job's own baseline, a slow rank."""

from __future__ import annotations

from fleetscope import contract as c
from fleetscope.alerts import hang, names
from fleetscope.alerts.config import Thresholds
from fleetscope.alerts.model import Alert, Case, Fire, Group, InputSeries
from fleetscope.alerts.testdata import H100_BF16_PEAK, JOB, gpu, num, rank, rank_labels

_PEAK = H100_BF16_PEAK
_JOB = "Job {{ $labels.job_id }}"


def rank_compute_vs_median(selector: str = "") -> str:
    """Each rank's compute time over its job's median rank (1 = typical); ``selector`` like
    ``{job_id="1"}``."""
    series = f"{names.RANK_COMPUTE}{selector}"
    return f"{series} / on (job_id) group_left () quantile by (job_id) (0.5, {series})"


def _two_regimes(per_min_before: float, minutes_before: int, per_min_after: float, minutes_after: int) -> str:
    """A counter growing at one rate, then at another (promtool expanding notation)."""
    at_switch = per_min_before * minutes_before
    return (
        f"0+{per_min_before:.6g}x{minutes_before} "
        f"{at_switch + per_min_after:.10g}+{per_min_after:.6g}x{minutes_after - 1}"
    )


def group(cfg: Thresholds) -> Group:
    base = cfg.baseline_window
    job = {"job_id": JOB}
    keep_mfu = num((1 - cfg.mfu_drop_ratio) * 100)
    keep_tokens = num(1 - cfg.tokens_drop_ratio)
    flops_per_min = 0.4 * _PEAK * 60

    def peak() -> InputSeries:
        # The GPU's peak series carries the GPU labels, joined to the rank on (Hostname, gpu).
        return gpu(c.GPU_PEAK_FLOPS, f"{_PEAK:.0f}x70", gpu="0", dtype="bf16")

    alerts = (
        Alert(
            name="FleetscopeTrainingJobStalled",
            expr=(
                f"time() - max by (job_id) ({c.TRAINING_LAST_STEP_TIMESTAMP}) > "
                f"clamp_min({num(cfg.stall_step_multiple)} * quantile_over_time(0.5, "
                f"{names.JOB_STEP_SECONDS}[{base}]), {num(cfg.stall_min_seconds)})"
            ),
            severity="critical",
            summary="A training job has stopped making steps.",
            description=f'{_JOB} has completed no step for {{{{ printf "%.0f" $value }}}} s, more than '
            f"{num(cfg.stall_step_multiple)} times its usual step time (and at least "
            f"{num(cfg.stall_min_seconds)} s): a hung collective, a dead rank or stuck I/O holds every GPU "
            "of the job.",
            cases=(
                Case(
                    "no step for 15 minutes",
                    tuple(
                        s
                        for r in (0, 1)
                        for s in (
                            rank(c.TRAINING_STEPS, "0+30x10 300x20", r),
                            rank(c.TRAINING_STEP_SECONDS, "0+60x10 600x20", r),
                            rank(c.TRAINING_LAST_STEP_TIMESTAMP, "0+60x10 600x20", r),
                        )
                    ),
                    "25m",
                    (Fire(job, 900),),
                ),
                Case(
                    "stepping every 2 s",
                    (
                        rank(c.TRAINING_STEPS, "0+30x30", 0),
                        rank(c.TRAINING_STEP_SECONDS, "0+60x30", 0),
                        rank(c.TRAINING_LAST_STEP_TIMESTAMP, "0+60x30", 0),
                    ),
                    "25m",
                ),
                Case(
                    "a 5-minute checkpoint pause is not a stall",
                    (
                        rank(c.TRAINING_STEPS, "0+30x10 300x5 330+30x14", 0),
                        rank(c.TRAINING_STEP_SECONDS, "0+60x10 600x5 660+60x14", 0),
                        rank(c.TRAINING_LAST_STEP_TIMESTAMP, "0+60x10 600x5 960+60x14", 0),
                    ),
                    "15m",
                ),
            ),
        ),
        Alert(
            name="FleetscopeTrainingMfuDrop",
            expr=f"{names.JOB_MFU} * 100 < quantile_over_time(0.5, {names.JOB_MFU}[{base}]) * {keep_mfu}",
            for_="15m",
            severity="warning",
            summary="A training job's MFU fell below its own recent baseline.",
            description=f'{_JOB} runs at {{{{ printf "%.1f%%" $value }}}} MFU, more than '
            f"{num(cfg.mfu_drop_ratio * 100)}% below its median of the last {base}: a straggler, throttling, "
            "network or storage trouble slows the whole job.",
            cases=(
                Case(
                    "40% to 20%",
                    (
                        rank(
                            c.TRAINING_MODEL_FLOPS, _two_regimes(flops_per_min, 40, flops_per_min / 2, 26), 0
                        ),
                        peak(),
                    ),
                    "65m",
                    (Fire(job, 20),),
                ),
                Case(
                    "steady 40%",
                    (rank(c.TRAINING_MODEL_FLOPS, f"0+{flops_per_min:.6g}x66", 0), peak()),
                    "65m",
                ),
                Case(
                    "a 5% dip",
                    (
                        rank(
                            c.TRAINING_MODEL_FLOPS,
                            _two_regimes(flops_per_min, 40, flops_per_min * 0.95, 26),
                            0,
                        ),
                        peak(),
                    ),
                    "65m",
                ),
            ),
        ),
        Alert(
            name="FleetscopeTrainingTokensDrop",
            expr=f"{names.JOB_TOKENS} < quantile_over_time(0.5, {names.JOB_TOKENS}[{base}]) * {keep_tokens}",
            for_="15m",
            severity="warning",
            summary="A training job's tokens/s fell well below its own recent baseline.",
            description=f'{_JOB} processes {{{{ printf "%.0f" $value }}}} tokens/s, more than '
            f"{num(cfg.tokens_drop_ratio * 100)}% below its median of the last {base}.",
            cases=(
                Case(
                    "1000 to 500 tokens/s",
                    (rank(c.TRAINING_TOKENS, _two_regimes(60000, 40, 30000, 26), 0),),
                    "65m",
                    (Fire(job, 500),),
                ),
                Case("steady", (rank(c.TRAINING_TOKENS, "0+60000x66", 0),), "65m"),
            ),
        ),
        Alert(
            name="FleetscopeTrainingRankSlow",
            expr=f"{rank_compute_vs_median()} > {num(cfg.rank_compute_ratio)}",
            for_="10m",
            severity="warning",
            summary="A rank computes much slower than its peers and holds the job back.",
            description="Rank {{ $labels.rank }} of job {{ $labels.job_id }} (GPU {{ $labels.gpu }} on "
            '{{ $labels.Hostname }}) spends {{ printf "%.2f" $value }} times its peers\' median compute '
            "time.",
            cases=(
                Case(
                    "rank 2 at 1.4x",
                    (
                        rank(c.TRAINING_PHASE_SECONDS, "0+30x20", 0, phase="forward"),
                        rank(c.TRAINING_PHASE_SECONDS, "0+30x20", 1, phase="forward"),
                        rank(c.TRAINING_PHASE_SECONDS, "0+42x20", 2, phase="forward"),
                    ),
                    "20m",
                    (Fire(rank_labels(2), 1.4),),
                ),
                Case(
                    "within 10%",
                    (
                        rank(c.TRAINING_PHASE_SECONDS, "0+30x20", 0, phase="forward"),
                        rank(c.TRAINING_PHASE_SECONDS, "0+30x20", 1, phase="forward"),
                        rank(c.TRAINING_PHASE_SECONDS, "0+33x20", 2, phase="forward"),
                    ),
                    "20m",
                ),
            ),
        ),
    )
    return Group("training", alerts + hang.alerts(cfg))
