"""The contract's inference names against /metrics pages of each engine (tests/fixtures/inference,
SOURCE.md says where each page comes from): every name the contract lists for an engine and version
is on its page, parsed by prometheus_client's own parser, with the contract's type and labels."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fleetscope import contract as c
from fleetscope.analyzers.features import SERVING_METRICS

PAGES = Path(__file__).resolve().parents[1] / "fixtures" / "inference"

#: page -> (the contract's series for that engine and version, label keys the version adds)
CASES: dict[str, tuple[tuple[c.Metric, ...], tuple[str, ...]]] = {
    "vllm-v0.metrics.txt": (c.VLLM_V0_SERIES, ()),
    "vllm-v0-0.4.3.recorded.metrics.txt": (c.VLLM_V0_SERIES, ()),
    "vllm-v1.metrics.txt": (c.VLLM_V1_SERIES, c.VLLM_V1_EXTRA_LABELS),
    "vllm-v1-0.32.0.recorded.metrics.txt": (c.VLLM_V1_SERIES, c.VLLM_V1_EXTRA_LABELS),
    "tgi.metrics.txt": (c.TGI_SERIES, ()),
    "triton-trtllm-23.11.metrics.txt": (c.TRITON_SERIES, ()),
}


def families_of(text: str) -> dict[str, tuple[str, list[tuple[str, dict[str, str]]]]]:
    """Family name -> (type, [(sample name, labels)]) of a /metrics page, by prometheus_client's parser."""
    return {
        f.name: (f.type, [(s.name, s.labels) for s in f.samples])
        for f in text_string_to_metric_families(text)
    }


def _families(page: str) -> dict[str, tuple[str, list[tuple[str, dict[str, str]]]]]:
    return families_of((PAGES / page).read_text())


def _written(text: str, name: str) -> bool:
    """The page has a sample line of exactly this series name."""
    return any(line.startswith((f"{name}{{", f"{name} ")) for line in text.splitlines())


def _family_name(metric: c.Metric) -> str:
    """prometheus_client names a counter's family without its ``_total``."""
    return metric.name.removesuffix("_total") if metric.type == "counter" else metric.name


def check_contract_names(page: str, text: str, series: tuple[c.Metric, ...], extra: tuple[str, ...]) -> None:
    """Every series of ``series`` is on the page ``text`` (named ``page`` in failures) as the engine
    writes it, with the contract's type and label keys plus ``extra`` on every sample."""
    families = families_of(text)
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
        assert _written(text, metric.bucket if isinstance(metric, c.Histogram) else metric), metric
        for _, labels in samples:
            assert wanted <= set(labels), f"{page}: {metric} lacks {sorted(wanted - set(labels))}"


@pytest.mark.parametrize("page", sorted(CASES))
def test_every_contract_name_is_on_the_page(page: str) -> None:
    check_contract_names(page, (PAGES / page).read_text(), *CASES[page])


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


# --------------------------------------------------------------------------------------------
# Recorded pages: /metrics of real servers (SOURCE.md: where each was recorded, version, licence).
# They are checked for every series fleetscope's generated dashboards, rules and serving detector
# read, under that name or its documented V0/V1 alias, and for the contract's types and labels on
# every contract family the page holds.
# --------------------------------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]
#: Generated artifacts that may read the engines' series (``fleetscope generate`` writes them).
READERS = (*sorted((REPO / "dashboards").glob("*.json")), *sorted((REPO / "alerts").glob("*.rules.yml")))
ENGINE_ORIGINS = ("vllm", "tgi", "triton")

#: recorded page -> (engine, series of the contract the page's version serves, series fleetscope
#: reads that the page lacks with the reason). Every other series fleetscope reads of that engine
#: must be on the page, under its name or its alias.
RECORDED: dict[str, tuple[str, tuple[c.Metric, ...], dict[c.Metric, str]]] = {
    "vllm-v0-0.4.3.recorded.metrics.txt": (
        "vllm",
        c.VLLM_V0_SERIES,
        {
            c.VLLM_HTTP_REQUESTS: "no http_* series on this 0.4.3 page (vllm-project/vllm#17406: V0 without "
            "them)"
        },
    ),
    "vllm-v1-0.32.0.recorded.metrics.txt": ("vllm", c.VLLM_V1_SERIES, {}),
    "tgi-3.recorded.metrics.txt": ("tgi", (), {}),
    "triton-trtllm-23.11.metrics.txt": ("triton", c.TRITON_SERIES, {}),
}


def _read_by_fleetscope() -> set[c.Metric]:
    """Engine series named in the generated dashboards and rules, and read by the serving detector."""
    text = "\n".join(path.read_text() for path in READERS)
    tokens = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", text))
    named = {c.METRICS[t] for t in tokens if t in c.METRICS and c.METRICS[t].origin in ENGINE_ORIGINS}
    return named | {c.METRICS[name] for name in SERVING_METRICS}


def _aliases(metric: c.Metric) -> set[str]:
    """The metric and the other name of a V0/V1 rename (histogram series follow their family)."""
    names = {str(metric)}
    for old, new in c.VLLM_RENAMES:
        for a, b in ((old, new), (new, old)):
            if metric == a:
                names.add(str(b))
            if isinstance(a, c.Histogram) and isinstance(b, c.Histogram):
                for sa, sb in zip(
                    (a.bucket, a.sum, a.observations), (b.bucket, b.sum, b.observations), strict=True
                ):
                    if metric == sa:
                        names.add(str(sb))
    return names


def samples_of(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Series name -> (labels, value) of every sample, names as the engine wrote them."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    written = {line.split("{")[0].split(" ")[0] for line in text.splitlines()}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            # prometheus_client reports counters as ``_total``; keep the name the page wrote.
            name = s.name if s.name in written else s.name.removesuffix("_total")
            out.setdefault(name, []).append((s.labels, s.value))
    return out


def _samples(page: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    return samples_of((PAGES / page).read_text())


def test_fleetscope_reads_engine_series() -> None:
    """The scan finds what the dashboards and rules read (it is no empty set by accident)."""
    read = _read_by_fleetscope()
    for metric in (
        c.VLLM_NUM_REQUESTS_RUNNING,
        c.VLLM_KV_CACHE_USAGE,
        c.VLLM_GPU_CACHE_USAGE,
        c.VLLM_TIME_TO_FIRST_TOKEN.bucket,
        c.TGI_QUEUE_SIZE,
        c.TRITON_REQUEST_FAILURE,
    ):
        assert metric in read, metric


def check_serves_what_fleetscope_reads(
    page: str, text: str, engine: str, lacking: dict[c.Metric, str]
) -> None:
    """Every ``engine`` series fleetscope's dashboards, rules and detector read is on the page
    ``text`` under its name or its V0/V1 alias, finite and non-negative, but those of ``lacking``."""
    samples = samples_of(text)
    read = sorted(m for m in _read_by_fleetscope() if m.origin == engine)
    assert read, f"fleetscope reads no {engine} series"
    for metric in read:
        if metric in lacking:
            assert not _aliases(metric) & set(samples), f"{page}: {metric} is on the page now"
            continue
        found = _aliases(metric) & set(samples)
        assert found, f"{page}: {metric} (or its alias) missing"
        for name in found:
            for labels, value in samples[name]:
                assert math.isfinite(value) and value >= 0, f"{page}: {name}{labels} = {value}"


@pytest.mark.parametrize("page", sorted(RECORDED))
def test_recorded_page_serves_what_fleetscope_reads(page: str) -> None:
    engine, _, lacking = RECORDED[page]
    check_serves_what_fleetscope_reads(page, (PAGES / page).read_text(), engine, lacking)


@pytest.mark.parametrize("page", sorted(RECORDED))
def test_recorded_page_matches_the_contract(page: str) -> None:
    """Every contract family of the engine on the page has the contract's type and label keys;
    the version's series (where the page is whole) are all there."""
    engine, series, _ = RECORDED[page]
    families = _families(page)
    extra = (
        c.VLLM_V1_EXTRA_LABELS
        if any(c.VLLM_V1_EXTRA_LABELS[0] in lbl for _, v in families.values() for _, lbl in v)
        else ()
    )
    mine = [
        m for m in c.METRICS.values() if m.origin == engine and m.type in ("counter", "gauge", "histogram")
    ]
    checked = 0
    for metric in mine:
        name = _family_name(metric)
        if name not in families:  # a histogram's _bucket/_sum/_count are no families
            continue
        kind, found = families[name]
        assert kind == metric.type, f"{page}: {metric} is a {kind}, the contract says {metric.type}"
        # V1's engine label is on the engine's series, not on the HTTP server's http_requests_total.
        wanted = set(metric.labels) | (set(extra) if metric.name.startswith("vllm:") else set())
        for _, labels in found:
            assert wanted <= set(labels) | {"le"}, f"{page}: {metric} {labels}"
        checked += 1
    assert checked, f"{page}: no contract family of {engine}"
    for metric in series:
        assert _family_name(metric) in families, f"{page}: {metric} missing"


@pytest.mark.parametrize("page", sorted(RECORDED))
def test_recorded_histograms_are_cumulative(page: str) -> None:
    """Buckets never fall as ``le`` grows and the ``+Inf`` bucket equals ``_count``."""
    for family in text_string_to_metric_families((PAGES / page).read_text()):
        if family.type != "histogram":
            continue
        series: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
        counts: dict[tuple[tuple[str, str], ...], float] = {}
        for s in family.samples:
            key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
            if s.name.endswith("_bucket"):
                series.setdefault(key, []).append((float(s.labels["le"]), s.value))
            elif s.name.endswith("_count"):
                counts[key] = s.value
        for key, buckets in series.items():
            values = [v for _, v in sorted(buckets)]
            assert values == sorted(values), f"{page}: {family.name}{dict(key)}"
            assert max(buckets)[0] == math.inf and values[-1] == counts[key], f"{page}: {family.name}"


def test_the_recorded_v0_page_needs_the_aliases() -> None:
    """On the 0.4.3 page the V1 names are absent: only the documented V0 alias makes them pass."""
    samples = _samples("vllm-v0-0.4.3.recorded.metrics.txt")
    for old, new in c.VLLM_RENAMES:
        if isinstance(old, c.Histogram) and isinstance(new, c.Histogram):
            old, new = old.bucket, new.bucket
        assert str(new) not in samples and str(old) in samples
        assert str(old) in _aliases(new)
    assert str(c.VLLM_TIME_PER_OUTPUT_TOKEN.bucket) in _aliases(c.VLLM_INTER_TOKEN_LATENCY.bucket)


def test_the_recorded_v1_page_has_the_new_names_only() -> None:
    """vLLM 0.32 (V1) serves the renamed series and neither old name (TPOT left in 0.13), every
    contract series with ``engine``; fleetscope reads it through the ``new`` side of ``new or old``."""
    samples = _samples("vllm-v1-0.32.0.recorded.metrics.txt")
    for old, new in c.VLLM_RENAMES:
        if isinstance(old, c.Histogram) and isinstance(new, c.Histogram):
            old, new = old.bucket, new.bucket
        assert str(new) in samples and str(old) not in samples
    engine_series = [m for m in c.METRICS.values() if m.origin == "vllm" and m.name.startswith("vllm:")]
    on_page = [m for m in engine_series if str(m) in samples]
    assert len(on_page) >= len(c.VLLM_V1_SERIES)
    for metric in on_page:
        assert all(labels.get("engine") == "0" for labels, _ in samples[str(metric)]), metric


def test_the_contract_knows_every_finished_reason_of_the_recorded_pages() -> None:
    for page in ("vllm-v0-0.4.3.recorded.metrics.txt", "vllm-v1-0.32.0.recorded.metrics.txt"):
        reasons = {labels["finished_reason"] for labels, _ in _samples(page)[str(c.VLLM_REQUEST_SUCCESS)]}
        assert reasons and reasons <= set(c.VLLM_FINISHED_REASONS), (page, reasons)
