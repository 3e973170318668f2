"""``write_samples`` (samples gathered outside the model, e.g. by the demo's fallback) lays a file out
exactly as the simulator's own recordings are laid out."""

from __future__ import annotations

import gzip
from pathlib import Path

from fleetscope.simulate.record import simulate, write_openmetrics, write_samples
from fleetscope.simulate.spec import FaultSpec, ScenarioSpec


def test_the_same_samples_give_the_same_bytes_either_way(tmp_path: Path) -> None:
    spec = ScenarioSpec(nodes=2, duration_s=300, faults=[FaultSpec(kind="gpu_lost", at_s=120, node=1, gpu=3)])
    rec = simulate(spec)
    samples = {
        name: {
            tuple(zip(rec.labels[name], key, strict=True)): (t.tolist(), v.tolist())
            for key, (t, v) in rec.series_of(name).items()
        }
        for name in rec.metric_names()
    }
    write_openmetrics(rec, tmp_path / "model.om")
    write_samples(samples, tmp_path / "samples.om")
    model = (tmp_path / "model.om").read_bytes()
    assert b"# TYPE fleetscope_gpu_xid_errors counter\n" in model
    assert (tmp_path / "samples.om").read_bytes() == model


def test_gzip_by_suffix_and_an_empty_series_is_left_out(tmp_path: Path) -> None:
    samples = {
        "DCGM_FI_DEV_GPU_TEMP": {(("Hostname", "node-0"), ("gpu", "0")): ([1.0, 2.5], [40.0, 41.25])},
        "DCGM_FI_DEV_SM_CLOCK": {},
    }
    write_samples(samples, tmp_path / "r.om.gz")
    text = gzip.decompress((tmp_path / "r.om.gz").read_bytes()).decode()
    assert text.startswith("# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n# HELP DCGM_FI_DEV_GPU_TEMP ")
    assert 'DCGM_FI_DEV_GPU_TEMP{Hostname="node-0",gpu="0"} 40 1\n' in text
    assert 'DCGM_FI_DEV_GPU_TEMP{Hostname="node-0",gpu="0"} 41.25 2.5\n' in text
    assert "SM_CLOCK" not in text
    assert text.endswith("# EOF\n")
