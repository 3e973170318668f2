"""Telemetry never raises into training and never writes a non-finite value (issue 26, item 16):
finite inputs that overflow a running total, ints beyond float range to every public call, and
checkpoint directories walked off the training thread."""

from __future__ import annotations

import logging
import math
import threading
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetscope import contract
from fleetscope.telemetry import sizes
from fleetscope.telemetry.sizes import wait_for_sizes
from tests.telemetry.test_checkpoints import monitor, rank_file

HUGE = 10**400  # no float holds it: float(HUGE) raises OverflowError


def test_tokens_times_flops_per_token_that_overflow_are_refused_not_inf(tmp_path: Path) -> None:
    m = monitor(tmp_path, flops_per_token=1e10)
    m.record_step(1.0, tokens=1e300)  # 1e310 FLOPs: beyond float range
    m.record_step(1.0, tokens=1e308)
    m.record_step(1.0, tokens=1e308)  # the token total would overflow
    got = rank_file(m)  # parsed strictly: a non-finite counter would be refused
    assert all(math.isfinite(v) for v in got.values())
    assert got[(contract.TRAINING_STEPS, ())] == 3
    assert got[(contract.TRAINING_TOKENS, ())] == 1e308 + 1e300
    assert m.rejected_inputs["flops"] >= 2 and m.rejected_inputs["tokens"] == 1


def test_the_overflow_warning_is_whole(tmp_path: Path, caplog) -> None:
    """It was cut at 40 characters, mid-word: "ignoring tokens='a value that overflows its running tota"
    and said "not a finite non-negative number" of a finite one (issue 36, item 8)."""
    m = monitor(tmp_path)
    with caplog.at_level(logging.WARNING, logger="fleetscope.telemetry"):
        m.record_step(1.0, tokens=1e308)
        m.record_step(1.0, tokens=1e308)
    (line,) = [r.getMessage() for r in caplog.records if "ignoring tokens" in r.getMessage()]
    assert "ignoring tokens (a value that would make its running total infinite); later ones" in line
    with caplog.at_level(logging.WARNING, logger="fleetscope.telemetry"):
        m.record_step(1.0, flops=-1.0)  # a value of the caller's: shown, cut to 40 characters
    messages = [r.getMessage() for r in caplog.records]
    assert any("ignoring flops=-1.0 (not a finite non-negative number)" in text for text in messages)


def test_ints_beyond_float_range_never_raise_from_any_public_call(tmp_path: Path) -> None:
    m = monitor(tmp_path)
    m.record_step(HUGE, tokens=HUGE, flops=HUGE, global_step=HUGE)
    m.end_step(tokens=HUGE)
    m.begin_step()
    m.end_step(tokens=HUGE, flops=HUGE, global_step=HUGE)
    with m.step(tokens=HUGE) as s:
        s.flops = HUGE
    m.record_checkpoint_save(HUGE, step=HUGE, nbytes=HUGE)
    with m.checkpoint(step=HUGE, nbytes=HUGE):
        pass
    m.checkpoint_loaded(step=HUGE, seconds=HUGE)
    m.restart(HUGE)
    m.set_global_step(HUGE)
    m.add_phase_time("forward", HUGE)
    m.set_loss(HUGE)
    got = rank_file(m)
    assert all(math.isfinite(v) for v in got.values())
    assert got[(contract.TRAINING_STEPS, ())] == 3
    assert sum(m.rejected_inputs.values()) >= 12


def test_a_checkpoint_directory_is_walked_off_the_training_thread(tmp_path: Path, monkeypatch) -> None:
    walked_on: list[str] = []
    real = sizes.checkpoint_size

    def spy(path):
        walked_on.append(threading.current_thread().name)
        return real(path)

    monkeypatch.setattr(sizes, "checkpoint_size", spy)
    m = monitor(tmp_path)
    shards = tmp_path / "ckpt"
    shards.mkdir()
    with m.checkpoint(step=3, path=shards):
        (shards / "a.pt").write_bytes(b"x" * 700)
    assert wait_for_sizes(5)
    assert walked_on == ["fleetscope-checkpoint-size"]
    assert rank_file(m)[(contract.TRAINING_CHECKPOINT_SAVE_BYTES, ())] == 700


_numbers = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(10**500), max_value=10**500),
    st.sampled_from([1e308, 1.7e308, HUGE, -HUGE, 0]),
)


@settings(
    max_examples=120,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    st.lists(
        st.tuples(st.sampled_from(["step", "save", "load", "phase", "global", "restart"]), _numbers),
        max_size=12,
    )
)
def test_any_numbers_leave_every_written_value_finite(tmp_path: Path, calls) -> None:
    m = monitor(tmp_path, flops_per_token=6e9)
    actions = {
        "step": lambda x: m.record_step(x, tokens=x, global_step=x),
        "save": lambda x: m.record_checkpoint_save(x, step=x, nbytes=x),
        "load": lambda x: m.checkpoint_loaded(step=x, seconds=x),
        "phase": lambda x: m.add_phase_time("forward", x),
        "global": lambda x: m.set_global_step(x),
        "restart": lambda x: m.restart(x),
    }
    for call, x in calls:
        actions[call](x)
    got = rank_file(m)
    assert all(math.isfinite(v) for v in got.values())
    m.close()
