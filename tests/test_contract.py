"""The contract's metric names are plain strings that keep their metadata through pickling (the
analyzers' findings carry them between processes: ``evaluate --jobs``, the service's analysis child)."""

from __future__ import annotations

import pickle

from fleetscope import contract as c


def test_a_metric_pickles_with_its_metadata() -> None:
    back = pickle.loads(pickle.dumps(c.DCGM_FI_DEV_GPU_TEMP))
    assert back == c.DCGM_FI_DEV_GPU_TEMP and isinstance(back, c.Metric)
    assert (back.type, back.help, back.unit, back.labels, back.origin) == (
        c.DCGM_FI_DEV_GPU_TEMP.type,
        c.DCGM_FI_DEV_GPU_TEMP.help,
        c.DCGM_FI_DEV_GPU_TEMP.unit,
        c.DCGM_FI_DEV_GPU_TEMP.labels,
        c.DCGM_FI_DEV_GPU_TEMP.origin,
    )
