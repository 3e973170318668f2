"""A recording's latency histograms load: a family declared ``# TYPE F histogram`` (what vLLM's own
page and any scrape-to-file recorder write) keeps its ``_bucket``/``_sum``/``_count`` series, and
its inter-token and first-token latencies are those the same data gives when read from a real
Prometheus (the recording backfilled with promtool).

The simulator types each histogram series on its own (``unknown``, docs/design.md#recorded-series),
so the recording here is the simulator's with each histogram's three ``# TYPE`` blocks merged into
one ``histogram`` family, as a real recorder writes it.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from fleetscope import contract as c
from fleetscope.analyzers.features import SERVING_METRICS
from fleetscope.analyzers.signals.serving import serving_signals
from fleetscope.simulate.record import write_scenario
from fleetscope.simulate.spec import ScenarioSpec
from fleetscope.window.openmetrics import load_recording, read_openmetrics
from fleetscope.window.prometheus import PrometheusAccess, load_prometheus
from tests.support.prom import Prometheus, backfill_openmetrics

_HISTOGRAMS = (c.VLLM_TIME_TO_FIRST_TOKEN, c.VLLM_INTER_TOKEN_LATENCY, c.VLLM_E2E_REQUEST_LATENCY)


def _as_histogram_families(text: str) -> str:
    """The simulator's recording with each histogram declared once, as ``# TYPE F histogram``."""
    out = []
    for line in text.splitlines(keepends=True):
        m = re.match(r"# (TYPE|HELP) (\S+?)(_bucket|_sum|_count)( |$)", line)
        if m and any(m.group(2) == h for h in _HISTOGRAMS):
            if m.group(1) == "TYPE" and m.group(3) == "_bucket":
                out.append(f"# TYPE {m.group(2)} histogram\n")
            continue
        out.append(line)
    return "".join(out)


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("hist")
    spec = ScenarioSpec(name="inference_hist", nodes=3, duration_s=900, seed=4, scrape_miss=0.0)
    sim, _ = write_scenario(spec, work / "sim.om")
    out = work / "vllm.om"
    out.write_text(_as_histogram_families(sim.read_text()))
    return out


def test_histogram_families_are_declared_once(recording: Path) -> None:
    text = recording.read_text()
    for h in _HISTOGRAMS:
        assert f"# TYPE {h} histogram\n" in text
        assert f"# TYPE {h.bucket} " not in text
        assert f"\n{h.bucket}{{" in text and f"\n{h.observations}{{" in text


def test_a_histogram_familys_series_are_read(recording: Path) -> None:
    """The reader's family skip keeps what is wanted of a histogram family (it kept only a
    counter's ``_total`` and ``_created``: every vLLM recording lost its latencies)."""
    raw, *_ = read_openmetrics(recording, SERVING_METRICS)
    for h in (c.VLLM_TIME_TO_FIRST_TOKEN, c.VLLM_INTER_TOKEN_LATENCY):
        for series in (h.bucket, h.sum, h.observations):
            assert len(raw.get(series, [])) >= 3, series
    # A family nothing is wanted of is still skipped whole.
    raw, *_ = read_openmetrics(recording, [c.VLLM_NUM_REQUESTS_RUNNING])
    assert set(raw) == {c.VLLM_NUM_REQUESTS_RUNNING}


@pytest.mark.server
def test_recorded_latencies_equal_prometheus(recording: Path, tmp_path: Path) -> None:
    from_file = load_recording(recording, SERVING_METRICS, step=15.0)
    start, end = float(from_file.times[0]), float(from_file.times[-1])
    backfill_openmetrics(recording, tmp_path / "data")
    with Prometheus(tmp_path / "p", data_dir=tmp_path / "data") as prom:
        from_prom = load_prometheus(PrometheusAccess(prom.url), start, end, 15.0, SERVING_METRICS)
    assert np.array_equal(from_file.times, from_prom.times)
    w = 20  # 5 minutes of 15 s steps
    a, b = serving_signals(from_file, w), serving_signals(from_prom, w)
    assert [r.name for r in a.replicas] == [r.name for r in b.replicas] and len(a.replicas) == 3
    for name in ("itl_mean", "itl_p95", "ttft_p95"):
        got, want = getattr(a, name), getattr(b, name)
        tail = got[w + 1 :]
        assert np.isfinite(tail).all(), f"{name}: the recording gave no latency"
        assert np.allclose(got, want, rtol=1e-9, equal_nan=True), name
    # Sane values: tens of milliseconds between tokens, first tokens under ten seconds.
    assert 0.005 < float(np.nanmedian(a.itl_mean)) < 0.2
    assert 0.01 < float(np.nanmedian(a.ttft_p95)) < 10
