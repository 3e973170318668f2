"""Evaluation and checkpoint time: counted in their phases, never in a step's time or count."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fleetscope import contract
from fleetscope.telemetry import TrainingMonitor


def monitor(tmp_path: Path) -> TrainingMonitor:
    return TrainingMonitor(job_id="j", directory=tmp_path, start=False, env={})


def test_pause_phases_are_the_contracts() -> None:
    assert set(contract.PAUSE_PHASES) == {"eval", "checkpoint"}
    assert set(contract.PAUSE_PHASES) <= set(contract.TRAINING_PHASES)


def test_pauses_between_steps_are_phase_time_only(tmp_path: Path) -> None:
    m = monitor(tmp_path)
    with m.step(tokens=10):
        time.sleep(0.01)
    last = m.snapshot().last_step_timestamp
    with m.evaluation():
        time.sleep(0.05)
    with m.checkpoint():
        time.sleep(0.03)
    snap = m.snapshot()
    assert snap.steps == 1 and snap.global_step == 1 and snap.last_step_timestamp == last
    assert snap.phase_seconds["eval"] >= 0.05 and snap.phase_seconds["checkpoint"] >= 0.03
    assert set(snap.phase_seconds) == {"eval", "checkpoint"}


def test_a_pause_inside_a_step_is_taken_out_of_the_step(tmp_path: Path) -> None:
    m = monitor(tmp_path)
    with m.step(tokens=10):
        with m.phase("forward"):
            time.sleep(0.02)
        with m.phase("eval"):  # the same as monitor.evaluation()
            time.sleep(0.2)
    m.begin_step()
    time.sleep(0.02)
    t0 = time.perf_counter()
    time.sleep(0.2)
    saved = time.perf_counter() - t0
    m.add_phase_time("checkpoint", saved)  # a callback that timed a save itself
    m.end_step(tokens=10)
    snap = m.snapshot()
    assert snap.steps == 2
    assert snap.phase_seconds["eval"] >= 0.2 and snap.phase_seconds["checkpoint"] == saved
    assert 0.04 <= snap.step_seconds < 0.2  # the two 20 ms of work, neither 200 ms pause


def test_nested_pauses_are_subtracted_once(tmp_path: Path) -> None:
    m = monitor(tmp_path)
    with m.step():
        time.sleep(0.02)
        with m.evaluation():
            time.sleep(0.15)
            with m.checkpoint():  # e.g. a best-model save at the end of validation
                time.sleep(0.15)
    snap = m.snapshot()
    assert snap.phase_seconds["eval"] >= 0.3 and snap.phase_seconds["checkpoint"] >= 0.15
    assert 0.02 <= snap.step_seconds < 0.3  # subtracted once: not 0.02 - 0.45 clamped to 0


def test_an_exception_in_the_pause_reaches_the_caller_and_its_time_still_counts(tmp_path: Path) -> None:
    m = monitor(tmp_path)
    with pytest.raises(OSError, match="disk full"), m.checkpoint():
        time.sleep(0.01)
        raise OSError("disk full")
    with m.step(), m.checkpoint():
        time.sleep(0.1)
    snap = m.snapshot()
    assert snap.phase_seconds["checkpoint"] >= 0.11 and snap.steps == 1
    assert snap.step_seconds < 0.1  # the failed save's depth was unwound: the next one is subtracted


def test_a_failing_synchronize_never_raises_from_a_pause(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    m = monitor(tmp_path)

    def broken_sync() -> None:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    m._sync = broken_sync  # what cuda_sync=True installs, failing
    with m.evaluation():
        pass
    with m.evaluation():
        pass
    assert "eval" in m.snapshot().phase_seconds
    assert caplog.text.count("synchronize") == 1  # logged once


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_virtual_clock_drives_the_monitor_and_pauses_count_when_they_end(tmp_path: Path) -> None:
    clock = FakeClock(1_800_000_000.0)
    m = TrainingMonitor(job_id="j", directory=tmp_path, start=False, env={}, clock=clock)
    assert m.snapshot().phase_seconds == {"eval": 0.0, "checkpoint": 0.0}  # there from the start
    clock.now += 30.0  # startup
    with m.step(tokens=8):
        clock.now += 4.0
    snap = m.snapshot()
    assert snap.step_seconds == 4.0 and snap.startup_seconds == 34.0
    assert snap.last_step_timestamp == 1_800_000_034.0
    with m.checkpoint(step=1, nbytes=10) as save:
        clock.now += 100.0
        assert m.snapshot().phase_seconds["checkpoint"] == 0.0  # not yet: booked at the end
    snap = m.snapshot()
    assert save.seconds == 100.0 and snap.phase_seconds["checkpoint"] == 100.0
    assert snap.checkpoint_save_seconds == 100.0 and snap.checkpoint_last_success_timestamp == clock.now
    with m.step():
        clock.now += 1.0
        with m.evaluation():
            clock.now += 60.0
        clock.now += 3.0
    snap = m.snapshot()
    assert snap.step_seconds == 8.0 and snap.phase_seconds["eval"] == 60.0 and snap.steps == 2
