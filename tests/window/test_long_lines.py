"""A recording's line length is bounded (issue 26, item 17): a 1 GB single-line recording took
5.4 GB before its error; now it is refused once a line passes ``MAX_LINE_BYTES``, in one line."""

from __future__ import annotations

import gzip
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetscope.cli import main
from fleetscope.errors import FleetscopeError
from fleetscope.window import openmetrics as om
from tests.support.analysis import load_file

T0 = 1_796_000_000
FUZZ = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


def _recording(job: str) -> bytes:
    lines = ["# TYPE fleetscope_gpu_up gauge"]
    lines += [
        f'fleetscope_gpu_up{{node="n{n}",gpu="0",job="{job}"}} 1 {T0 + 15 * i}'
        for i in range(30)
        for n in range(2)
    ]
    return ("\n".join(lines) + "\n# EOF\n").encode()


@pytest.mark.parametrize("gz", [False, True])
def test_a_single_endless_line_is_refused_early_in_bounded_memory(tmp_path, capsys, gz):
    path = tmp_path / ("line.om.gz" if gz else "line.om")
    block = b"x" * (1 << 20)
    with gzip.open(path, "wb", compresslevel=1) if gz else path.open("wb") as fh:
        for _ in range(256 if gz else 48):  # 256 MiB (gzip, 250 KB on disk) or 48 MiB without a newline
            fh.write(block)
    tracemalloc.start()
    try:
        rc = main(["analyze", "--input", str(path), "--format", "json"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    err = capsys.readouterr().err.strip()
    assert rc == 1 and len(err.splitlines()) == 1 and f"over {om.MAX_LINE_BYTES:,} bytes long" in err, err
    assert peak < 8 * om.CHUNK_BYTES, peak  # the chunks in flight, not the line's size (nor 5x it)


@settings(FUZZ)
@given(length=st.integers(min_value=1, max_value=12_000), chunk=st.sampled_from([512, 1000, 4096]))
def test_a_long_label_line_loads_below_the_limit_and_is_one_error_above(tmp_path, length, chunk):
    limit = 6000
    path = tmp_path / "r.om"
    path.write_bytes(_recording("j" * length))
    line = max(len(x) for x in path.read_bytes().split(b"\n")) + 1
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(om, "CHUNK_BYTES", chunk)
        mp.setattr(om, "MAX_LINE_BYTES", limit)
        try:
            frames = load_file(path)
        except FleetscopeError as exc:
            assert line > limit - chunk and "bytes long" in str(exc) and "\n" not in str(exc), (line, exc)
        else:
            assert line <= limit + chunk and frames.has("fleetscope_gpu_up"), line


def test_the_limit_is_far_above_any_real_line():
    assert om.MAX_LINE_BYTES >= 1 << 20 and Path(om.__file__).exists()
