"""Goodput and checkpoint rules: where a job's GPU-hours go besides steps, and what a crash would cost.

Recording rules (:func:`recordings`, in the ``recording`` group with the others so they are
backfilled with them; names in ``fleetscope.alerts.names``), each from raw series only: the
step-time goodput, the age of the newest successful checkpoint, the GPU-hours a failure now would
lose, the mean save time over an hour and a day, and the checkpoint write bandwidth.
Alerts (:func:`group`): no successful checkpoint within the budget, saves slowing down
(file-system trouble), and too many GPU-hours at risk. The series come from ``fleetscope.telemetry``
(docs/telemetry.md).
"""

from __future__ import annotations

from fleetscope import contract as c
from fleetscope.alerts import names
from fleetscope.alerts.config import Thresholds
from fleetscope.alerts.model import Alert, Case, Fire, Group, InputSeries, Recording
from fleetscope.alerts.testdata import JOB, num, rank

_JOB = "Job {{ $labels.job_id }}"


# ---- expressions (the dashboards use them too) ----------------------------------------------
def job_goodput(window: str = "5m") -> str:
    """Mean over a job's ranks of the share of wall time spent in completed steps."""
    return f"avg by (job_id) (rate({c.TRAINING_STEP_SECONDS}[{window}]))"


def job_checkpoint_age() -> str:
    """Seconds since a job's newest successful save; for a job without one, its ranks' start-up plus
    step time (a lower bound of the time since it started: pauses and stalls are left out)."""
    startup = f"({c.TRAINING_STARTUP_SECONDS} or {c.TRAINING_STEP_SECONDS} * 0)"
    return (
        f"time() - max by (job_id) ({c.TRAINING_CHECKPOINT_LAST_SUCCESS_TIMESTAMP})"
        f" or max by (job_id) ({c.TRAINING_STEP_SECONDS} + {startup})"
    )


def job_checkpoint_exposure() -> str:
    """GPU-hours lost if a node failed now: checkpoint age in hours times the job's ranks (GPUs)."""
    return f"({job_checkpoint_age()}) / 3600 * count by (job_id) ({c.TRAINING_STEPS})"


def job_save_seconds_mean(window: str) -> str:
    """Mean seconds of one rank's save (successful or not) over ``window``; absent without saves."""
    return (
        f"sum by (job_id) (increase({c.TRAINING_CHECKPOINT_SAVE_SECONDS}[{window}]))"
        f" / (sum by (job_id) (increase({c.TRAINING_CHECKPOINT_SAVES}[{window}])) > 0)"
    )


def job_checkpoint_bandwidth(window: str) -> str:
    """Bytes a job's ranks saved per second of saving (its slowest rank's save time) over ``window``."""
    return (
        f"sum by (job_id) (increase({c.TRAINING_CHECKPOINT_SAVE_BYTES}[{window}]))"
        f" / (max by (job_id) (increase({c.TRAINING_CHECKPOINT_SAVE_SECONDS}[{window}])) > 0)"
    )


def _two_regimes(per_min_before: float, minutes_before: int, per_min_after: float, minutes_after: int) -> str:
    """A counter growing at one rate, then at another (promtool expanding notation)."""
    at_switch = per_min_before * minutes_before
    return (
        f"0+{per_min_before:.6g}x{minutes_before} "
        f"{at_switch + per_min_after:.10g}+{per_min_after:.6g}x{minutes_after - 1}"
    )


def _running(r: int, minutes: int) -> tuple[InputSeries, InputSeries]:
    """A rank stepping the whole time (a step per 2 s) that started up in 2 minutes."""
    return (
        rank(c.TRAINING_STEPS, f"0+30x{minutes}", r),
        rank(c.TRAINING_STEP_SECONDS, f"0+60x{minutes}", r),
    )


def _saved_at(r: int, minute: int, minutes: int) -> InputSeries:
    """The last-success timestamp of a rank that last saved at ``minute`` (Unix time = test time)."""
    return rank(c.TRAINING_CHECKPOINT_LAST_SUCCESS_TIMESTAMP, f"{minute * 60}x{minutes}", r)


def _exposed(ranks: int, minutes: int) -> tuple[InputSeries, ...]:
    """A job of ``ranks`` GPUs stepping for ``minutes`` since its one save at the start (the newest
    save is a max over ranks, so one rank's timestamp stands for all)."""
    steps = tuple(rank(c.TRAINING_STEPS, f"0+30x{minutes}", r) for r in range(ranks))
    return (*steps, _saved_at(0, 0, minutes))


def _saves(
    r: int, seconds_per_save: tuple[float, float], minutes: tuple[int, int]
) -> tuple[InputSeries, ...]:
    """One save an hour per rank, each taking ``seconds_per_save[0]`` then ``[1]`` (per-minute rates)."""
    (before, after), (m_before, m_after) = seconds_per_save, minutes
    return (
        rank(
            c.TRAINING_CHECKPOINT_SAVES, _two_regimes(1 / 60, m_before, 1 / 60, m_after), r, result="success"
        ),
        rank(c.TRAINING_CHECKPOINT_SAVES, f"0x{m_before + m_after}", r, result="failure"),
        rank(c.TRAINING_CHECKPOINT_SAVE_SECONDS, _two_regimes(before / 60, m_before, after / 60, m_after), r),
    )


def recordings(cfg: Thresholds) -> tuple[Recording, ...]:
    job = {"job_id": JOB}
    return (
        Recording(
            names.JOB_GOODPUT,
            job_goodput(cfg.rate_window),
            (
                Case(
                    "ranks in steps 75% and 50% of the time",
                    (
                        rank(c.TRAINING_STEP_SECONDS, "0+45x10", 0),
                        rank(c.TRAINING_STEP_SECONDS, "0+30x10", 1),
                    ),
                    "10m",
                    (Fire(job, 0.625),),
                ),
                Case("no training", (rank(c.TRAINING_STEPS, "0x10", 0),), "10m"),
            ),
        ),
        Recording(
            names.JOB_CHECKPOINT_AGE,
            job_checkpoint_age(),
            (
                Case(
                    "the newest of two ranks' saves, 30 minutes ago",
                    (_saved_at(0, 30, 60), _saved_at(1, 25, 60)),
                    "60m",
                    (Fire(job, 1800),),
                ),
                Case(
                    "no save yet: start-up plus step time",
                    (
                        rank(c.TRAINING_STEP_SECONDS, "0+50x60", 0),
                        rank(c.TRAINING_STARTUP_SECONDS, "120x60", 0),
                        rank(c.TRAINING_STEP_SECONDS, "0+40x60", 1),
                    ),
                    "60m",
                    (Fire(job, 3120),),
                ),
                Case("no training", (rank(c.TRAINING_RESTART_ATTEMPT, "0x10", 0),), "10m"),
            ),
        ),
        Recording(
            names.JOB_CHECKPOINT_EXPOSURE,
            job_checkpoint_exposure(),
            (
                Case(
                    "two GPUs, 10 minutes after the save",
                    (*_running(0, 20), *_running(1, 20), _saved_at(0, 10, 20), _saved_at(1, 10, 20)),
                    "20m",
                    (Fire(job, 2 * 600 / 3600),),
                ),
                Case("no training", (rank(c.TRAINING_RESTART_ATTEMPT, "0x10", 0),), "10m"),
            ),
        ),
        Recording(
            names.JOB_CHECKPOINT_SAVE_SECONDS_1H,
            job_save_seconds_mean("1h"),
            (
                Case(
                    "20 s per save",
                    (
                        rank(c.TRAINING_CHECKPOINT_SAVES, "0+1x10", 0, result="success"),
                        rank(c.TRAINING_CHECKPOINT_SAVES, "0x10", 0, result="failure"),
                        rank(c.TRAINING_CHECKPOINT_SAVE_SECONDS, "0+20x10", 0),
                    ),
                    "10m",
                    (Fire(job, 20),),
                ),
                Case(
                    "no save in the hour",
                    (
                        rank(c.TRAINING_CHECKPOINT_SAVES, "0x10", 0, result="success"),
                        rank(c.TRAINING_CHECKPOINT_SAVE_SECONDS, "0x10", 0),
                    ),
                    "10m",
                ),
            ),
        ),
        Recording(
            names.JOB_CHECKPOINT_SAVE_SECONDS_1D,
            job_save_seconds_mean("1d"),
            (
                Case(
                    "40 s per save",
                    (
                        rank(c.TRAINING_CHECKPOINT_SAVES, "0+1x60", 0, result="success"),
                        rank(c.TRAINING_CHECKPOINT_SAVE_SECONDS, "0+40x60", 0),
                    ),
                    "60m",
                    (Fire(job, 40),),
                ),
                Case("no saves", (rank(c.TRAINING_CHECKPOINT_SAVE_SECONDS, "0x10", 0),), "10m"),
            ),
        ),
        Recording(
            names.JOB_CHECKPOINT_BANDWIDTH,
            job_checkpoint_bandwidth("1h"),
            (
                Case(
                    "rank 0 writes 1 GB per 20 s save, rank 1 waits as long",
                    (
                        rank(c.TRAINING_CHECKPOINT_SAVE_BYTES, "0+1e9x10", 0),
                        rank(c.TRAINING_CHECKPOINT_SAVE_BYTES, "0x10", 1),
                        rank(c.TRAINING_CHECKPOINT_SAVE_SECONDS, "0+20x10", 0),
                        rank(c.TRAINING_CHECKPOINT_SAVE_SECONDS, "0+20x10", 1),
                    ),
                    "10m",
                    (Fire(job, 5e7),),
                ),
                Case("no saves", (rank(c.TRAINING_CHECKPOINT_SAVE_BYTES, "0x10", 0),), "10m"),
            ),
        ),
    )


def group(cfg: Thresholds) -> Group:
    """The alerts. They compute from raw series as the recording rules do, rather than reading them:
    a rule in another group sees a recorded value one evaluation late."""
    job = {"job_id": JOB}
    slow, base = cfg.checkpoint_slow_window, cfg.checkpoint_baseline_window
    max_age = cfg.checkpoint_max_age_seconds
    over = int(max_age // 60) + 30  # minutes: half an hour past the budget
    # the exposure cases: enough ranks and hours to cross the budget (and a job far under it)
    ranks = 64
    exposed_minutes = int(cfg.checkpoint_exposure_gpu_hours / ranks * 60) + 60
    mean_slow = cfg.checkpoint_slow_min_seconds * 2.5
    alerts = (
        Alert(
            name="FleetscopeTrainingCheckpointOverdue",
            expr=f"({job_checkpoint_age()}) > {num(max_age)}",
            severity="warning",
            summary="A training job has no recent successful checkpoint.",
            description=f'{_JOB} last saved a checkpoint successfully {{{{ printf "%.0f" $value }}}} s ago'
            f" (or has run that long without one), over the {num(max_age)} s budget: a failure now loses"
            " all that work. Saves failing, hung or switched off.",
            cases=(
                Case(
                    "saved once, at the start",
                    (*_running(0, over), _saved_at(0, 0, over)),
                    f"{over}m",
                    (Fire(job, over * 60),),
                ),
                Case(
                    "never saved",
                    (*_running(0, over), rank(c.TRAINING_STARTUP_SECONDS, f"120x{over}", 0)),
                    f"{over}m",
                    (Fire(job, over * 60 + 120),),
                ),
                Case(
                    "saving every 30 minutes",
                    (
                        *_running(0, over),
                        rank(
                            c.TRAINING_CHECKPOINT_LAST_SUCCESS_TIMESTAMP,
                            " ".join(f"{m * 60}x29" for m in range(0, over, 30)),
                            0,
                        ),
                    ),
                    f"{over}m",
                ),
            ),
        ),
        Alert(
            name="FleetscopeTrainingCheckpointSlowing",
            expr=(
                f"({job_save_seconds_mean(slow)})"
                f" > {num(cfg.checkpoint_slowdown_ratio)} * ({job_save_seconds_mean(base)})"
                f" and ({job_save_seconds_mean(slow)}) > {num(cfg.checkpoint_slow_min_seconds)}"
            ),
            severity="warning",
            summary="A training job's checkpoint saves take much longer than they did today.",
            description=f'{_JOB} took {{{{ printf "%.0f" $value }}}} s per checkpoint save over the last'
            f" {slow}, over {num(cfg.checkpoint_slowdown_ratio)} times its mean of the last {base}: the"
            " checkpoint file system is full, degraded or throttled.",
            cases=(
                # A job 3 hours old: its baseline is all it has (promtool steps are minutes; a day
                # of them would take seconds of CPU per case).
                Case(
                    f"{num(mean_slow / 10)} s for two hours, then {num(mean_slow)} s per save",
                    _saves(0, (mean_slow / 10, mean_slow), (120, 60)),
                    "3h",
                    (Fire(job, mean_slow),),
                ),
                Case("steady save time", _saves(0, (mean_slow, mean_slow), (120, 60)), "3h"),
                Case(
                    "more than doubled, but still short",
                    _saves(
                        0,
                        (cfg.checkpoint_slow_min_seconds / 10, cfg.checkpoint_slow_min_seconds * 0.9),
                        (120, 60),
                    ),
                    "3h",
                ),
            ),
        ),
        Alert(
            name="FleetscopeTrainingCheckpointExposure",
            expr=f"{job_checkpoint_exposure()} > {num(cfg.checkpoint_exposure_gpu_hours)}",
            severity="warning",
            summary="A node failure now would cost a training job many GPU-hours.",
            description=f'{_JOB} has {{{{ printf "%.0f" $value }}}} GPU-hours of work since its last'
            f" successful checkpoint (age times GPUs), over {num(cfg.checkpoint_exposure_gpu_hours)}:"
            " a failure of any of its nodes now loses them all. Checkpoint more often.",
            cases=(
                Case(
                    f"{ranks} GPUs, {exposed_minutes} minutes after the save",
                    _exposed(ranks, exposed_minutes),
                    f"{exposed_minutes}m",
                    (Fire(job, exposed_minutes / 60 * ranks),),
                ),
                Case("2 GPUs as long", _exposed(2, exposed_minutes), f"{exposed_minutes}m"),
            ),
        ),
    )
    return Group("goodput", alerts)
