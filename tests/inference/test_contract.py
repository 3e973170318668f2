"""The contract's inference names against /metrics pages of each engine (tests/fixtures/inference,
SOURCE.md says where each page comes from): every name the contract lists for an engine and version
is on its page, parsed by prometheus_client's own parser, with the contract's type and labels."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fleetscope import contract as c

PAGES = Path(__file__).resolve().parents[1] / "fixtures" / "inference"

#: page -> (the contract's series for that engine and version, label keys the version adds)
CASES: dict[str, tuple[tuple[c.Metric, ...], tuple[str, ...]]] = {
    "vllm-v0.metrics.txt": (c.VLLM_V0_SERIES, ()),
    "vllm-v1.metrics.txt": (c.VLLM_V1_SERIES, c.VLLM_V1_EXTRA_LABELS),
    "tgi.metrics.txt": (c.TGI_SERIES, ()),
    "triton-trtllm-23.11.metrics.txt": (c.TRITON_SERIES, ()),
}


def _families(page: str) -> dict[str, tuple[str, list[tuple[str, dict[str, str]]]]]:
    text = (PAGES / page).read_text()
    return {
        f.name: (f.type, [(s.name, s.labels) for s in f.samples])
        for f in text_string_to_metric_families(text)
    }


def _written(page: str, name: str) -> bool:
    """The page has a sample line of exactly this series name."""
    lines = (PAGES / page).read_text().splitlines()
    return any(line.startswith((f"{name}{{", f"{name} ")) for line in lines)


def _family_name(metric: c.Metric) -> str:
    """prometheus_client names a counter's family without its ``_total``."""
    return metric.name.removesuffix("_total") if metric.type == "counter" else metric.name


@pytest.mark.parametrize("page", sorted(CASES))
def test_every_contract_name_is_on_the_page(page: str) -> None:
    series, extra = CASES[page]
    families = _families(page)
    for metric in series:
        name = _family_name(metric)
        assert name in families, f"{page}: {metric} missing"
        kind, samples = families[name]
        assert kind == metric.type, f"{page}: {metric} is a {kind}, the contract says {metric.type}"
        wanted = set(metric.labels) | set(extra)
        sample_names = {s for s, _ in samples}
        if isinstance(metric, c.Histogram):
            assert {metric.bucket, metric.sum, metric.observations} <= sample_names, f"{page}: {metric}"
            assert all("le" in labels for s, labels in samples if s == metric.bucket)
        else:
            # The parser gives every counter sample a ``_total``; the raw page says what the engine wrote.
            parsed = metric.name if metric.type != "counter" else name + "_total"
            assert parsed in sample_names, f"{page}: no sample named {metric}"
        assert _written(page, metric.bucket if isinstance(metric, c.Histogram) else metric), metric
        for _, labels in samples:
            assert wanted <= set(labels), f"{page}: {metric} lacks {sorted(wanted - set(labels))}"


def test_the_check_can_fail() -> None:
    """V1 renamed series are not on the V0 page (and back), so presence means something."""
    v0, v1 = _families("vllm-v0.metrics.txt"), _families("vllm-v1.metrics.txt")
    for old, new in c.VLLM_RENAMES:
        assert _family_name(old) in v0 and _family_name(new) not in v0
        assert _family_name(new) in v1 and _family_name(old) not in v1


def test_histogram_series_are_contract_names() -> None:
    for metric in c.METRICS.values():
        if isinstance(metric, c.Histogram):
            for series in (metric.bucket, metric.sum, metric.observations):
                assert c.METRICS[series] is series
            assert "le" in metric.bucket.labels
