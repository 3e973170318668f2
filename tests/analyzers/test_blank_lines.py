"""Empty lines in a recording (issue 36, item 8): 300 MB of newlines gave no answer in 200 s, each
line parsed on its own. A run of them is now counted at once: the answer (one line) comes fast,
and the series and line numbers are those of the same file without them."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from fleetscope.errors import FleetscopeError
from fleetscope.simulate.record import write_scenario
from fleetscope.simulate.spec import ScenarioSpec
from fleetscope.window.openmetrics import read_openmetrics


def test_a_recording_of_only_newlines_is_one_quick_error(tmp_path: Path) -> None:
    path = tmp_path / "newlines.om"
    path.write_bytes(b"\n" * (16 << 20))  # 16.8 M empty lines: ~60 s of CPU one at a time
    cpu = time.process_time()
    with pytest.raises(FleetscopeError, match="no '# EOF'"):
        read_openmetrics(path)
    assert time.process_time() - cpu < 15


def test_empty_lines_between_samples_change_nothing(tmp_path: Path) -> None:
    rec, _ = write_scenario(ScenarioSpec(name="blank", nodes=1, duration_s=600, seed=2), tmp_path / "r.om")
    lines = rec.read_bytes().splitlines(keepends=True)
    padded = tmp_path / "padded.om"
    # runs of 0 to 3 empty lines after every line but the last (# EOF)
    padded.write_bytes(b"".join(line + b"\n" * (k % 4) for k, line in enumerate(lines[:-1])) + lines[-1])
    raw, *bounds = read_openmetrics(rec)
    raw2, *bounds2 = read_openmetrics(padded)
    assert bounds == bounds2 and raw.keys() == raw2.keys()
    for name, series in raw.items():
        for a, b in zip(series, raw2[name], strict=True):
            assert a.labels == b.labels and np.array_equal(a.values, b.values, equal_nan=True)
    # a bad line after empty lines is reported at its own line number
    bad = tmp_path / "bad.om"
    bad.write_bytes(lines[0] + lines[1] + b"\n" * 1000 + b"not a sample line at all x y z\n" + lines[-1])
    with pytest.raises(FleetscopeError, match=r"line 1003\b"):
        read_openmetrics(bad)
