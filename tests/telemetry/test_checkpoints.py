"""Checkpoint saves and loads, restarts, startup time, and inputs refused at the call."""

from __future__ import annotations

import logging
import math
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fleetscope import contract
from fleetscope.exporters.training import parse_rank_file
from fleetscope.telemetry import TrainingMonitor
from fleetscope.telemetry.process import process_start_time, restart_attempt
from fleetscope.telemetry.sizes import wait_for_sizes

ROOT = Path(__file__).resolve().parents[2]


def monitor(tmp_path: Path, **kwargs: object) -> TrainingMonitor:
    return TrainingMonitor(job_id="j", directory=tmp_path, start=False, env=kwargs.pop("env", {}), **kwargs)


def rank_file(m: TrainingMonitor) -> dict[tuple[str, tuple[str, ...]], float]:
    """What the collector would serve of ``m``'s rank file (parsed strictly)."""
    assert m.flush()
    _header, _labels, samples = parse_rank_file(Path(m.writer.path).read_text())
    return {(name, extra): value for name, extra, value in samples}


def test_checkpoint_block_counts_saves_by_result_with_time_bytes_and_step(tmp_path: Path) -> None:
    m = monitor(tmp_path)
    got = rank_file(m)  # before any save: counters at 0, no last-success gauges
    assert got[(contract.TRAINING_CHECKPOINT_SAVES, ("success",))] == 0
    assert got[(contract.TRAINING_CHECKPOINT_SAVES, ("failure",))] == 0
    assert (contract.TRAINING_CHECKPOINT_LAST_SUCCESS_TIMESTAMP, ()) not in got
    for _ in range(3):
        with m.step(tokens=1):
            pass
    with m.checkpoint(nbytes=1000):
        time.sleep(0.02)
    shards = tmp_path / "ckpt"
    shards.mkdir()
    with m.checkpoint(step=7, path=shards) as save:  # a directory of shards is measured after the save
        (shards / "a.pt").write_bytes(b"x" * 300)
        (shards / "b.pt").write_bytes(b"x" * 200)
        assert save.step == 7
    with pytest.raises(OSError), m.checkpoint(nbytes=99):
        time.sleep(0.01)
        raise OSError("disk full")
    assert wait_for_sizes(5)  # the directory is walked on the size thread, not the training thread
    got = rank_file(m)
    assert got[(contract.TRAINING_CHECKPOINT_SAVES, ("success",))] == 2
    assert got[(contract.TRAINING_CHECKPOINT_SAVES, ("failure",))] == 1
    assert got[(contract.TRAINING_CHECKPOINT_SAVE_BYTES, ())] == 1500  # the failed save wrote nothing
    assert got[(contract.TRAINING_CHECKPOINT_LAST_SUCCESS_STEP, ())] == 7
    assert abs(got[(contract.TRAINING_CHECKPOINT_LAST_SUCCESS_TIMESTAMP, ())] - time.time()) < 5
    seconds = got[(contract.TRAINING_CHECKPOINT_SAVE_SECONDS, ())]
    assert seconds >= 0.03  # the failed save's time counts too
    # the same time is the checkpoint pause, taken out of no step
    assert got[(contract.TRAINING_PHASE_SECONDS, ("checkpoint",))] == pytest.approx(seconds)
    assert got[(contract.TRAINING_STEPS, ())] == 3


def test_a_save_defaults_to_the_current_step_and_nested_saves_count_once(tmp_path: Path) -> None:
    m = monitor(tmp_path)
    m.set_global_step(41)
    with m.step():
        pass
    with m.checkpoint(nbytes=10), m.checkpoint(nbytes=5):  # a framework save inside the user's
        pass
    snap = m.snapshot()
    assert snap.checkpoint_saves == {"success": 1, "failure": 0}
    assert snap.checkpoint_last_success_step == 42 and snap.checkpoint_save_bytes == 10
    m.record_checkpoint_save(2.5, success=False)  # a callback that timed a save itself
    snap = m.snapshot()
    assert snap.checkpoint_saves == {"success": 1, "failure": 1} and snap.checkpoint_save_seconds >= 2.5


def test_checkpoint_load_sets_resumed_from_step_and_the_global_step(tmp_path: Path) -> None:
    m = monitor(tmp_path)
    assert (contract.TRAINING_RESUMED_FROM_STEP, ()) not in rank_file(m)  # a fresh start
    m.checkpoint_loaded(step=1200, seconds=4.5)
    with m.step():
        pass
    got = rank_file(m)
    assert got[(contract.TRAINING_RESUMED_FROM_STEP, ())] == 1200
    assert got[(contract.TRAINING_GLOBAL_STEP, ())] == 1201
    assert got[(contract.TRAINING_CHECKPOINT_LOADS, ())] == 1
    assert got[(contract.TRAINING_CHECKPOINT_LOAD_SECONDS, ())] == 4.5


def test_restart_attempt_comes_from_the_launcher_or_is_given(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert restart_attempt({}) == 0
    assert restart_attempt({"TORCHELASTIC_RESTART_COUNT": "2", "SLURM_RESTART_COUNT": "5"}) == 2
    assert restart_attempt({"SLURM_RESTART_COUNT": "5"}) == 5
    with caplog.at_level(logging.WARNING, "fleetscope.telemetry"):
        assert restart_attempt({"SLURM_RESTART_COUNT": "x"}) == 0
    assert "SLURM_RESTART_COUNT" in caplog.text
    m = monitor(tmp_path, env={"TORCHELASTIC_RESTART_COUNT": "3"})
    assert rank_file(m)[(contract.TRAINING_RESTART_ATTEMPT, ())] == 3
    m.restart(4)
    assert m.snapshot().restart_attempt == 4
    assert monitor(tmp_path, restart_attempt=1).snapshot().restart_attempt == 1
    assert monitor(tmp_path).snapshot().restart_attempt == 0


def test_startup_seconds_run_from_the_process_start_to_the_first_step(tmp_path: Path) -> None:
    """A process that spends 0.5 s before its monitor exists: the startup time covers that too."""
    code = textwrap.dedent(
        """
        import sys, time
        time.sleep(0.5)
        from fleetscope.telemetry import TrainingMonitor
        m = TrainingMonitor(job_id="j", directory=sys.argv[1], start=False, env={})
        before = m.snapshot().startup_seconds
        time.sleep(0.2)
        with m.step():
            pass
        first = m.snapshot().startup_seconds
        with m.step():
            pass
        print(before, first, m.snapshot().startup_seconds)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    before, first, later = out.stdout.split()
    assert before == "None"
    assert 0.7 <= float(first) < 30 and later == first  # set once, by the first step
    assert process_start_time() <= time.time()


def test_bad_inputs_are_refused_at_the_call_and_never_poison_the_rank_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    m = monitor(tmp_path, flops_per_token=2.0)
    with caplog.at_level(logging.WARNING, "fleetscope.telemetry"):
        m.record_step(0.5, tokens=10)
        m.record_step(0.5, tokens=math.nan)
        m.record_step(0.5, tokens=-3)
        m.record_step(-1.0, tokens=10)
        m.record_step(0.5, tokens=10, flops=math.inf)
        m.record_step(0.5, tokens="many")  # type: ignore[arg-type]
        m.record_step(0.5, tokens=math.nan)
        m.add_phase_time("forward", math.nan)
        m.record_checkpoint_save(math.nan, nbytes=-1)
        m.set_global_step(-5)
    got = rank_file(m)  # parses: every counter finite and non-negative
    assert got[(contract.TRAINING_STEPS, ())] == 7  # the steps happened; only their bad numbers are not
    assert got[(contract.TRAINING_TOKENS, ())] == 10 + 10 + 10
    assert got[(contract.TRAINING_MODEL_FLOPS, ())] == 20 + 20
    assert got[(contract.TRAINING_STEP_SECONDS, ())] == 0.5 * 6
    assert got[(contract.TRAINING_GLOBAL_STEP, ())] == 7
    assert (contract.TRAINING_PHASE_SECONDS, ("forward",)) not in got
    assert got[(contract.TRAINING_CHECKPOINT_SAVE_SECONDS, ())] == 0
    assert m.rejected_inputs == {
        "tokens": 4,
        "seconds": 1,
        "flops": 1,
        "phase seconds": 1,
        "checkpoint seconds": 1,
        "checkpoint nbytes": 1,
        "global_step": 1,
    }
    refusals = [r for r in caplog.records if "ignoring" in r.getMessage()]
    assert len(refusals) == 7  # once per kind, not once per call
    with m.step(tokens=5):  # later steps count normally
        pass
    assert rank_file(m)[(contract.TRAINING_TOKENS, ())] == 35
