"""The exposition reader the tests share: names as written, labels parsed, one sample or a failure."""

from __future__ import annotations

import pytest

from tests.support.exposition import matching, samples, series, value

TEXT = """\
# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy (in mJ).
# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",modelName="NVIDIA H100 80GB HBM3"} 1.5e+06
# TYPE fleetscope_collector_errors_total counter
fleetscope_collector_errors_total{collector="efa",reason="a \\"quoted\\" \\\\ reason"} 2
# TYPE fleetscope_gpu_up gauge
fleetscope_gpu_up{gpu="0"} 1.0
fleetscope_gpu_up{gpu="1"} 0.0
"""


def test_counter_names_stay_as_written() -> None:
    names = [name for name, _labels, _v in samples(TEXT)]
    assert names == [
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",  # the parser alone would call it ..._total
        "fleetscope_collector_errors_total",
        "fleetscope_gpu_up",
        "fleetscope_gpu_up",
    ]
    assert value(TEXT.encode(), "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", gpu="0") == 1.5e6


def test_labels_are_unescaped_and_matched_as_a_subset() -> None:
    assert value(TEXT, "fleetscope_collector_errors_total", reason='a "quoted" \\ reason') == 2
    assert [labels["gpu"] for _n, labels, _v in matching(TEXT, "fleetscope_gpu_up")] == ["0", "1"]
    assert series(TEXT)[("fleetscope_gpu_up", (("gpu", "1"),))] == 0


def test_value_wants_exactly_one_sample() -> None:
    with pytest.raises(AssertionError, match="expected one sample"):
        value(TEXT, "fleetscope_gpu_up")
    with pytest.raises(AssertionError, match="expected one sample"):
        value(TEXT, "fleetscope_gpu_up", gpu="7")


def test_a_series_written_twice_fails() -> None:
    with pytest.raises(AssertionError, match="written twice"):
        series('# TYPE a gauge\na{x="1"} 1\na{x="1"} 2\n')
