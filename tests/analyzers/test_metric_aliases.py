"""Older exporters' names (``contract.METRIC_ALIASES``): a fleet on an old dcgm-exporter, whose clock
reasons are ``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS``, is analysed as one on a new one (same findings,
same time, the reason bitmask in the evidence), and a fleet halfway through the upgrade has both
kinds of node in one frame."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from fleetscope import contract as c
from fleetscope import queries
from fleetscope.simulate.record import write_scenario
from fleetscope.simulate.spec import FaultSpec, ScenarioSpec
from fleetscope.window.aliases import fold_aliases, with_aliases
from fleetscope.window.frames import Frames, MetricFrame
from tests.support.analysis import analyze_file

NEW, OLD = c.DCGM_FI_DEV_CLOCKS_EVENT_REASONS, c.DCGM_FI_DEV_CLOCK_THROTTLE_REASONS


def test_loaders_ask_for_the_older_name_and_file_it_under_the_new() -> None:
    assert with_aliases([c.DCGM_FI_DEV_GPU_UTIL, NEW]) == (c.DCGM_FI_DEV_GPU_UTIL, NEW, OLD)
    assert with_aliases(None) is None
    frames = Frames(times=np.arange(3.0), step=1.0)
    frames.metrics[NEW] = MetricFrame(pd.DataFrame({"Hostname": ["a", "b"]}), np.full((3, 2), 1.0))
    # node b under both names (an exporter restarted mid-upgrade): the new name's series wins.
    frames.metrics[OLD] = MetricFrame(pd.DataFrame({"Hostname": ["b", "c"]}), np.full((3, 2), 8.0))
    fold_aliases(frames)
    assert OLD not in frames.metrics
    got = frames.get(NEW)
    assert list(got.labels["Hostname"]) == ["a", "b", "c"]
    assert got.values[0].tolist() == [1.0, 1.0, 8.0]
    only_old = Frames(times=np.arange(3.0), step=1.0)
    only_old.metrics[OLD] = MetricFrame(pd.DataFrame({"Hostname": ["c"]}), np.full((3, 1), 8.0))
    assert list(fold_aliases(only_old).metrics) == [NEW]


def test_rules_read_either_name() -> None:
    assert queries.clock_event_reasons() == f"({NEW} or {OLD})"
    assert queries.with_aliases(c.DCGM_FI_DEV_GPU_UTIL) == c.DCGM_FI_DEV_GPU_UTIL


def _finding(doc: dict, kind: str) -> dict:
    (f,) = [f for f in doc["findings"] if f["kind"] == kind and f["cause"] == "thermal_throttle"]
    return f


def test_an_old_exporters_thermal_throttle_reads_as_a_new_ones(tmp_path: Path) -> None:
    spec = ScenarioSpec(
        name="alias",
        nodes=4,
        duration_s=1200,
        seed=3,
        faults=[FaultSpec(kind="thermal_throttle", at_s=300, node=1, gpu=2, slowdown=0.3)],
    )
    new_file, _ = write_scenario(spec, tmp_path / "new.om")
    text = new_file.read_text()
    assert f"{NEW}{{" in text
    old_file = tmp_path / "old.om"
    old_file.write_text(text.replace(NEW, OLD))
    new = {"findings": [f.to_dict() for f in analyze_file(new_file).findings]}
    old = {"findings": [f.to_dict() for f in analyze_file(old_file).findings]}
    assert json.dumps(new, sort_keys=True) == json.dumps(old, sort_keys=True)
    f = _finding(old, "straggler")
    assert NEW in json.dumps(f["evidence"]), "the reason bitmask is in the evidence"
