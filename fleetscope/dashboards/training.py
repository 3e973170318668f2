"""Training job: per-rank step and compute time, stragglers, MFU, tokens/s, loss, phase breakdown, and
goodput with checkpoints (age, GPU-hours at risk, save time, bandwidth, saves by result)."""

from __future__ import annotations

import grafanalib.core as g

from fleetscope import contract as c
from fleetscope import queries
from fleetscope.alerts import names
from fleetscope.alerts.config import Thresholds
from fleetscope.alerts.training import rank_compute_vs_median
from fleetscope.dashboards.common import JOB, dashboard, job_var, sel, stat, table, timeseries

UID = "fleetscope-training"
W = "$__rate_interval"


def build(cfg: Thresholds) -> g.Dashboard:
    def s(metric: str) -> str:
        return sel(metric, **JOB)

    rank = "rank {{rank}}"
    # The shared per-rank builder, narrowed to the chosen job.
    step_time = f"({queries.rank_step_seconds(W)}) and on (job_id, rank) {s(c.TRAINING_STEPS)}"
    rows = [
        (None, [
            stat("MFU", s(names.JOB_MFU), "percentunit", "Model FLOP/s over the bf16 peak of the job's GPUs.",
                 no_value="-"),
            stat("Tokens/s", s(names.JOB_TOKENS), "short", no_value="-"),
            stat("Global step", f"max({s(c.TRAINING_GLOBAL_STEP)})", "short", no_value="-"),
            stat("Since last step", f"time() - max({s(c.TRAINING_LAST_STEP_TIMESTAMP)})", "s",
                 "A stall shows here first.", [(None, "green"), (cfg.stall_min_seconds, "red")], no_value="-"),  # noqa: E501
            stat("Ranks", f"count({s(c.TRAINING_STEPS)})", "short", no_value="-"),
        ]),
        ("Throughput", [
            timeseries("MFU", [(s(names.JOB_MFU), "job"), (s(names.RANK_MFU), rank)], "percentunit", min_value=0),  # noqa: E501
            timeseries("Tokens/s", [(s(names.JOB_TOKENS), "job")], "short", min_value=0),
            timeseries("Loss", [(f"avg({s(c.TRAINING_LOSS)})", "mean over ranks")], "none"),
        ]),
        ("Ranks", [
            timeseries("Step time per rank", [(step_time, rank)], "s", min_value=0),
            timeseries("Compute time per rank", [(s(names.RANK_COMPUTE), rank)], "percentunit",
                       "Forward + backward seconds per second of wall time.", min_value=0),
            timeseries("Compute time vs peer median", [(rank_compute_vs_median(s("")), rank)], "short",
                       f"1 is typical; the RankSlow alert fires above {cfg.rank_compute_ratio}.", min_value=0),  # noqa: E501
            timeseries("Straggler score (service)", [(s(c.STRAGGLER_SCORE), rank)], "short", min_value=0),
        ]),
        ("Goodput and checkpoints", [
            stat("Goodput", s(names.JOB_GOODPUT), "percentunit",
                 "Share of wall time the ranks spend in completed steps (pauses, stalls and start-up are "
                 "not).",
                 no_value="-"),
            stat("Since last checkpoint", s(names.JOB_CHECKPOINT_AGE), "s",
                 "Since the newest successful save (without one: the ranks' start-up plus step time).",
                 [(None, "green"), (cfg.checkpoint_max_age_seconds, "red")], no_value="-"),
            stat("GPU-hours at risk", s(names.JOB_CHECKPOINT_EXPOSURE), "short",
                 "What a node failure now would lose: checkpoint age times the job's GPUs.",
                 [(None, "green"), (cfg.checkpoint_exposure_gpu_hours, "red")], no_value="-"),
            timeseries("Goodput", [(s(names.JOB_GOODPUT), "job")], "percentunit", min_value=0),
            timeseries("Time since last successful checkpoint", [(s(names.JOB_CHECKPOINT_AGE), "job")], "s",
                       f"The CheckpointOverdue alert fires above {cfg.checkpoint_max_age_seconds:g} s.",
                       min_value=0),
            timeseries("Checkpoint save time", [
                (s(names.JOB_CHECKPOINT_SAVE_SECONDS_1H), f"mean over {cfg.checkpoint_slow_window}"),
                (s(names.JOB_CHECKPOINT_SAVE_SECONDS_1D), f"mean over {cfg.checkpoint_baseline_window}"),
            ], "s", "Seconds per save and rank; the CheckpointSlowing alert compares the two.", min_value=0),
            timeseries("Checkpoint bandwidth", [(s(names.JOB_CHECKPOINT_BANDWIDTH), "job")], "Bps",
                       "Bytes the job saved per second of saving, over the last hour.", min_value=0),
            timeseries("Checkpoint saves", [
                (f"sum by (result) (increase({s(c.TRAINING_CHECKPOINT_SAVES)}[1h]))", "{{result}}"),
            ], "short", "Saves per hour, summed over ranks, by result: a failure is a save tried and lost.",
                min_value=0),
        ]),
        ("Collectives (NCCL RAS)", [
            timeseries("Collective skew per communicator", [
                (f"{s(c.NCCL_RAS_COLLECTIVES_MAX)} - {s(c.NCCL_RAS_COLLECTIVES_MIN)}", "{{comm}} {{op}}"),
            ], "short", "Most minus fewest collectives launched per communicator and op (nccl_ras "
                "collector). A small skew that moves is normal (collectives outpace the query); a flat "
                f"non-zero line for {cfg.collective_hang_frozen_window} is a hang: the CollectiveHang "
                "alerts name the rank.", min_value=0),
            timeseries("Ranks behind", [(s(c.NCCL_RAS_RANKS_BEHIND), "{{comm}} {{op}}"),
                                        (s(c.NCCL_RAS_COMM_MISSING_RANKS), "{{comm}} missing")], "short",
                       "Ranks that launched fewer collectives than the most advanced one, and ranks RAS "
                       "cannot reach.", min_value=0),
            table("Ranks behind (collectives behind)", s(c.NCCL_RAS_RANK_BEHIND), "short",
                  "The ranks furthest behind (at most 8 per communicator and op), with their node (as RAS "
                  "gives it) and GPU.", hide=("__name__", "Hostname", "job_id")),
            table("Ranks missing (1 unresponsive, 2 dead)", s(c.NCCL_RAS_RANK_MISSING), "short",
                  "Ranks RAS gets no data from, with their node and GPU.",
                  hide=("__name__", "Hostname", "job_id")),
        ]),
        ("Phases", [
            timeseries("Phase breakdown (mean over ranks)", [
                (f"avg by (phase) (rate({s(c.TRAINING_PHASE_SECONDS)}[{W}]))", "{{phase}}"),
            ], "percentunit", "Share of wall time per phase: data, forward, backward, optimizer, checkpoint.",
                stacked=True, min_value=0),
            timeseries("Data loading per rank", [
                (f'rate({sel(c.TRAINING_PHASE_SECONDS, phase="data", **JOB)}[{W}])', rank),
            ], "percentunit", "A rank starved by its data loader or by storage.", min_value=0),
        ]),
    ]  # fmt: skip
    return dashboard(UID, "fleetscope / Training job", "One training job, rank by rank.", [job_var()], rows)
