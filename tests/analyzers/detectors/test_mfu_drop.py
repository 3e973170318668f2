"""MFU drops measure lost throughput while training: a pause is not a drop, a slower job is."""

from __future__ import annotations

import numpy as np

from fleetscope.analyzers.core import analyze
from tests.analyzers.detectors.frames_builder import Cluster


def mfu_drops(cl: Cluster) -> list:
    return [f for f in analyze(cl.frames()).findings if f.kind == "mfu_drop"]


def test_a_three_minute_pause_in_steady_training_is_no_mfu_drop():
    cl = Cluster()
    cl.stop_stepping(cl.between(30, 33), util=0.0)
    report = analyze(cl.frames())
    assert [f for f in report.findings if f.kind == "mfu_drop"] == []
    # The job's throughput is still measured (tokens/s, no FLOPs here) and is its steady level.
    expected = 16 * 5 * 8192 / 15.0
    assert report.jobs["job-a"].tokens_per_second == round(expected, 1)


def test_a_sustained_throughput_loss_is_an_mfu_drop():
    # The control: the same job losing 20% of its steps for 15 minutes is a drop.
    cl = Cluster()
    slow = cl.between(30, 45)
    for r in cl.ranks:
        r.steps[slow] = 4.0
        for v in r.phases.values():
            v[slow] *= 0.8
    found = mfu_drops(cl)
    assert len(found) == 1, found
    assert cl.times[cl.tick(29)] <= found[0].start <= cl.times[cl.tick(33)]
    assert 0.75 <= found[0].score <= 0.85


def test_a_job_whose_step_is_longer_than_the_grid_step_trains_steadily():
    # A 40 s step on a 15 s grid: most grid steps complete no step, yet the job trains at full speed.
    cl = Cluster()
    pattern = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]  # 3 steps per 120 s
    for r in cl.ranks:
        per = [pattern[i % len(pattern)] for i in range(len(r.steps))]
        r.steps[:] = per
        for name, v in r.phases.items():
            v[:] = [p * 40.0 * (0.7 if name == "backward" else 0.1) for p in per]
    report = analyze(cl.frames())
    assert [f for f in report.findings if f.kind in ("mfu_drop", "job_hang")] == []
    # And the throughput is measured over most of the window, not masked away as pauses.
    assert report.signals is not None
    series, _unit, paused = report.signals.job_mfu("job-a")
    assert paused.mean() < 0.2 and np.isfinite(series).mean() > 0.7


def _long_steps(cl: Cluster, ticks: list[int], extra_s: float) -> None:
    """In each of ``ticks`` one step of every rank takes ``extra_s`` longer (a host pause inside the
    step: Python GC, a logging flush), so that grid step completes one step fewer."""
    for r in cl.ranks:
        for t in ticks:
            per = {ph: v[t] / r.steps[t] for ph, v in r.phases.items()}
            r.steps[t] -= 1
            for ph, v in r.phases.items():
                v[t] = per[ph] * r.steps[t]
            r.phases["forward"][t] += extra_s


def test_a_cluster_of_long_steps_is_no_mfu_drop():
    # A third of the grid steps for four minutes each lose a step to a 3 s host pause: 7% less
    # throughput there, but the typical step is as fast as before and the ranks are stepping all
    # the time. That is what a small job meets when GC pauses cluster by chance.
    cl = Cluster()
    ticks = [cl.tick(30) + k for k in range(0, 16, 3)]
    _long_steps(cl, ticks, 3.0)
    assert mfu_drops(cl) == []


def test_every_step_longer_is_an_mfu_drop_with_no_explanation():
    # The control: the same loss spread over every step (each step 7.5% slower, the ranks still
    # stepping all the time) is a drop, cause unknown.
    cl = Cluster()
    slow = cl.between(30, 45)
    for r in cl.ranks:
        r.steps[slow] = 5 / 1.075
    found = mfu_drops(cl)
    assert [(f.cause, f.job_id) for f in found] == [("unknown", "job-a")], found


def test_a_chunk_inside_a_slower_stretch_measures_from_the_carried_baseline():
    # A streamed window: the chunk opens inside the drop, so its own steps hold no baseline to
    # compare the typical step with; the level carried from the chunk before is the baseline.
    from fleetscope.window.frames import slice_frames

    cl = Cluster(minutes=90)
    for r in cl.ranks:
        r.steps[cl.between(30)] = 5 / 1.1
    frames = cl.frames()
    before = analyze(slice_frames(frames, frames.start, cl.times[cl.tick(29)])).carry
    inside = slice_frames(frames, cl.times[cl.tick(40)], frames.end)
    assert [f for f in analyze(inside).findings if f.kind == "mfu_drop"] == []  # alone: its level
    found = [f for f in analyze(inside, carry=before).findings if f.kind == "mfu_drop"]
    assert [(f.cause, f.job_id) for f in found] == [("unknown", "job-a")], found
