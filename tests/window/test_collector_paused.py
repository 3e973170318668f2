"""The cyclic garbage collector is off while a recording is read and spooled, and back as it was
after (issue 32: its passes over the reader's long-lived containers were 0.1 s of a 64-node hour),
whatever the nesting, the threads or the errors."""

from __future__ import annotations

import gc
import gzip
import threading

import pytest

from fleetscope.errors import FleetscopeError
from fleetscope.window import memory
from fleetscope.window import openmetrics as om
from fleetscope.window.archive import spool
from fleetscope.window.memory import collector_paused

T0 = 1796032800


def _recording(gpus: int = 4, samples: int = 40) -> bytes:
    out = ["# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"]
    for g in range(gpus):
        head = f'DCGM_FI_DEV_GPU_TEMP{{gpu="{g}",Hostname="node-0"}}'
        out += [f"{head} {40 + t % 7} {T0 + 15 * t}\n" for t in range(samples)]
    return "".join([*out, "# EOF\n"]).encode()


@pytest.fixture
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_nested_pauses_turn_it_back_on_after_the_outermost(collector_on):
    with collector_paused():
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off(collector_on):
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()


def test_an_error_in_the_block_turns_it_back_on(collector_on):
    with pytest.raises(ValueError), collector_paused():
        raise ValueError("boom")
    assert gc.isenabled() and memory._pauses == 0


def test_overlapping_pauses_on_two_threads_end_with_it_on(collector_on):
    # A on, B on, A off, B off: B's end, not A's, turns it back on.
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, bool] = {}

    def a() -> None:
        with collector_paused():
            a_in.set()
            b_in.wait(10)
        a_out.set()

    def b() -> None:
        a_in.wait(10)
        with collector_paused():
            b_in.set()
            a_out.wait(10)
            seen["after A ended"] = gc.isenabled()

    threads = [threading.Thread(target=a), threading.Thread(target=b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == {"after A ended": False}
    assert gc.isenabled()


def _collector_seen_in(monkeypatch, owner, name: str) -> list[bool]:
    """Whether the collector was on at each call of ``owner.name`` from now on."""
    seen: list[bool] = []
    original = getattr(owner, name)

    def watched(*args, **kwargs):
        seen.append(gc.isenabled())
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, watched)
    return seen


def _gzipped(tmp_path):
    path = tmp_path / "r.om.gz"
    path.write_bytes(gzip.compress(_recording()))
    return path


def test_a_recording_is_read_and_gridded_with_the_collector_off(tmp_path, monkeypatch, collector_on):
    fed = _collector_seen_in(monkeypatch, om._Reader, "feed")
    gridded = _collector_seen_in(monkeypatch, om, "frames_from_raw")
    frames = om.load_recording(_gzipped(tmp_path))
    assert len(frames.metrics["DCGM_FI_DEV_GPU_TEMP"].labels) == 4
    assert fed and not any(fed) and gridded == [False]
    assert gc.isenabled()


def test_a_recording_that_fails_to_read_leaves_it_on(tmp_path, collector_on):
    path = tmp_path / "r.om"
    path.write_bytes(_recording().replace(b"# EOF\n", b""))
    with pytest.raises(FleetscopeError, match="truncated"):
        om.load_recording(path)
    assert gc.isenabled()


def test_a_recording_is_spooled_with_the_collector_off(tmp_path, monkeypatch, collector_on):
    written = _collector_seen_in(monkeypatch, spool, "write_families")
    spooled = spool.spool_recording(_gzipped(tmp_path), tmp_path / "w.spool", None)
    assert written == [False] and spooled.path.exists()
    assert gc.isenabled()
