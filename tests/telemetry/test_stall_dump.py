"""TrainingMonitor asks PyTorch for a Flight Recorder dump (its dump pipe) when steps stop."""

from __future__ import annotations

import os
import time

import pytest

from fleetscope.telemetry.monitor import TrainingMonitor
from fleetscope.telemetry.stall_dump import pipe_path, poke


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def fifo(tmp_path):
    """PyTorch's side: ``<stem><rank>.pipe`` made with mkfifo and opened read-only, non-blocking."""
    stem = str(tmp_path / "fr_pipe_")
    path = stem + "3.pipe"
    os.mkfifo(path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    yield stem, fd
    os.close(fd)


def read_all(fd: int) -> bytes:
    try:
        return os.read(fd, 128)
    except BlockingIOError:
        return b""


def monitor(tmp_path, stem: str, clock: Clock, **kw) -> TrainingMonitor:
    env = {"TORCH_NCCL_DEBUG_INFO_PIPE_FILE": stem}
    return TrainingMonitor("job", 3, 3, 3, directory=tmp_path, env=env, clock=clock, **kw)


def test_pipe_name_is_pytorchs():
    assert pipe_path({"TORCH_NCCL_DEBUG_INFO_PIPE_FILE": "/tmp/p_"}, 12) == "/tmp/p_12.pipe"
    assert pipe_path({}, 12) is None


def test_one_dump_per_stall_none_in_a_pause(tmp_path, fifo):
    stem, fd = fifo
    clock = Clock()
    m = monitor(tmp_path, stem, clock, start=False, stall_dump_after=60.0)
    dumper = m.stall_dumper
    assert dumper is not None
    assert not dumper.check()  # before the first step: a first step may compile for minutes
    m.record_step(1.0)
    clock.now += 59
    assert not dumper.check() and read_all(fd) == b""
    with m.checkpoint():
        clock.now += 600  # a long save is no stall
        assert not dumper.check()
    clock.now += 30
    assert not dumper.check()  # 30 s since the save ended
    clock.now += 31
    assert dumper.check() and read_all(fd) == b"1"
    clock.now += 300
    assert not dumper.check() and read_all(fd) == b""  # once per stall
    m.record_step(1.0)
    clock.now += 61
    assert dumper.check() and read_all(fd) == b"1"  # the next stall gets its own
    m.close()


def test_the_watchdog_thread_fires_while_the_loop_is_stuck(tmp_path, fifo):
    """The training thread is blocked (no call into the monitor at all): the thread still asks."""
    stem, fd = fifo
    m = monitor(tmp_path, stem, time.time, stall_dump_after=0.4)  # type: ignore[arg-type]
    m.record_step(0.1)
    got = b""
    deadline = time.monotonic() + 10
    while not got and time.monotonic() < deadline:
        got = read_all(fd)
        time.sleep(0.05)
    m.close()
    assert got == b"1"


@pytest.mark.parametrize("kind", ["missing", "regular", "no_reader"])
def test_poke_never_blocks_and_never_creates(tmp_path, kind):
    path = tmp_path / "p_0.pipe"
    if kind == "regular":
        path.write_bytes(b"")
    elif kind == "no_reader":
        os.mkfifo(path)
    start = time.monotonic()
    why = poke(str(path))
    assert time.monotonic() - start < 1.0
    assert why is not None
    if kind == "regular":
        assert path.read_bytes() == b""
    if kind == "missing":
        assert not path.exists()


def test_off_without_the_pipe_variable(tmp_path):
    m = TrainingMonitor("job", 0, 0, 0, directory=tmp_path, env={}, start=False, stall_dump_after=5.0)
    assert m.stall_dumper is None
    m2 = TrainingMonitor("job", 0, 0, 0, directory=tmp_path, env={"TORCH_NCCL_DEBUG_INFO_PIPE_FILE": "/x"},
                         start=False)  # fmt: skip
    assert m2.stall_dumper is None  # opt-in
    env = {"TORCH_NCCL_DEBUG_INFO_PIPE_FILE": "/x", "FLEETSCOPE_STALL_DUMP_AFTER": "90"}
    m3 = TrainingMonitor("job", 0, 0, 0, directory=tmp_path, env=env, start=False)
    assert m3.stall_dumper is not None and m3.stall_dumper.after_s == 90.0
