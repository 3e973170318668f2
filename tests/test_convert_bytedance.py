"""scripts/convert_bytedance_traces.py on a tiny hand-made trace in the study's format: the recording
it writes is what ``fleetscope analyze`` reads, with the counters the trace implies."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from fleetscope import contract as c
from tests.support.analysis import analyze_file

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "convert_bytedance_traces.py"


def _script():
    spec = importlib.util.spec_from_file_location("convert_bytedance_traces", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclass looks its module up
    spec.loader.exec_module(mod)
    return mod


def _trace(raw: Path) -> None:
    """dp 2 x pp 2 x tp 2: two sampled steps of 2 s; worker (dp 1, stage 0) computes twice as long."""
    rows = []
    for step in (10, 20):
        for dp in (0, 1):
            for stage in (0, 1):
                slow = 2.0 if (dp, stage) == (1, 0) else 1.0
                for mb in (0, 1):
                    rows.append((dp, stage, step, "forward-compute", 0.1 * mb, 0.2 * slow, mb))
                    rows.append((dp, stage, step, "backward-compute", 1.0 + 0.1 * mb, 0.4 * slow, mb))
                rows.append((dp, stage, step, "optimizer", 1.9, 0.1, 0))
    d = pd.DataFrame(rows, columns=["dp_rank", "stage", "step", "optype", "start_ts", "duration", "mb_id"])
    d["rank"] = d["stage"] * 4 + d["dp_rank"] * 2
    d["start_ts"] = d["start_ts"].astype("float32")
    d["duration"] = d["duration"].astype("float32")
    d.to_parquet(raw / "trace-XX.parquet")
    (raw / "meta-XX.yaml").write_text("dp_size: 2\npp_size: 2\ntp_size: 2\ndsp_size: 1\nworld_size: 8\n")


def test_converter_writes_the_metric_contract(tmp_path: Path, capsys) -> None:
    _trace(tmp_path)
    out = tmp_path / "out"
    assert _script().main([str(tmp_path), "--out", str(out), "--traces", "XX", "--minutes", "10"]) == 0
    bare, layout = out / "trace-XX.om.gz", out / "trace-XX-layout.om.gz"
    assert bare.is_file() and layout.is_file()
    report = analyze_file(layout)
    feat = report.features
    assert feat is not None
    keys = feat.ranks.keys
    assert sorted(keys["rank"].astype(int)) == list(range(8))  # tensor-parallel copies written
    assert set(keys[c.NODE_LABEL]) == {"bd-xx-node-00"}
    # 2 s per step (the last operation ends at 1.9 + 0.1 s), 10 minutes: 300 steps per rank.
    assert np.nansum(feat.ranks.steps, axis=0).max() == 300
    fwd = np.nansum(feat.ranks.phases["forward"], axis=0)
    slow = [k for k in range(8) if fwd[k] > 1.5 * np.median(fwd)]
    assert sorted(int(keys["rank"].iloc[k]) for k in slow) == [2, 3]  # dp 1, stage 0, both tp ranks
    info = feat.frames.get(c.TRAINING_INFO)
    assert set(info.labels[c.PIPELINE_STAGE_LABEL]) == {"0", "1"}
    assert not len(analyze_file(bare).features.frames.get(c.TRAINING_INFO))  # type: ignore[union-attr]


def test_converter_bad_input_is_one_line(tmp_path: Path, capsys) -> None:
    mod = _script()
    assert mod.main([str(tmp_path / "nowhere"), "--traces", "AR"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "trace-AR.parquet" in err
    (tmp_path / "trace-AR.parquet").write_text("not parquet")
    (tmp_path / "meta-AR.yaml").write_text("dp_size: 1\n")
    assert mod.main([str(tmp_path), "--traces", "AR", "--out", str(tmp_path / "o")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot be read" in err
