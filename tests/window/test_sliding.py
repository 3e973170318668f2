"""The service's sliding window: fetched a little at a time, the same frames and findings as loading
the whole (step-aligned) window every cycle, on a real Prometheus holding a recording in which a
GPU is lost, its node replaced (new series mid-window) and another GPU throttles."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from fleetscope.analyzers.core import LOADED, analyze
from fleetscope.errors import FleetscopeError
from fleetscope.service.live import LiveAnalysis
from fleetscope.simulate.record import write_scenario
from fleetscope.simulate.spec import FaultSpec, ScenarioSpec
from fleetscope.window import prometheus as lp
from fleetscope.window import sliding as sw
from fleetscope.window.frames import Frames, MetricFrame
from fleetscope.window.sources import PrometheusSource
from tests.support.findings import assert_same_findings
from tests.support.prom import Prometheus, backfill_openmetrics

pytestmark = [pytest.mark.server]

WINDOW = 900.0
STEP = 15.0


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sliding")
    spec = ScenarioSpec(
        name="sliding",
        nodes=4,
        duration_s=2400,
        seed=21,
        faults=[
            FaultSpec(kind="gpu_lost", at_s=1500, node=2, gpu=5, restart="replace"),
            FaultSpec(kind="thermal_throttle", at_s=700, node=0, gpu=1, slowdown=0.3),
        ],
    )
    out, _ = write_scenario(spec, tmp / "s.om")
    backfill_openmetrics(out, tmp / "data")
    with Prometheus(tmp / "p", data_dir=tmp / "data") as p:
        yield p, spec.start, spec.start + spec.duration_s


def _sorted(frame: MetricFrame) -> tuple[list[tuple], np.ndarray]:
    rows = [tuple(sorted((k, v) for k, v in r.items() if v != "")) for r in frame.labels.to_dict("records")]
    order = sorted(range(len(rows)), key=rows.__getitem__)
    return [rows[i] for i in order], frame.values[:, order]


def _same_frames(a: Frames, b: Frames) -> None:
    """Equal up to the order of the series (a sliding window lists the series it held first)."""
    assert np.array_equal(a.times, b.times)
    assert sorted(a.metrics) == sorted(b.metrics)
    for name, fa in a.metrics.items():
        ka, va = _sorted(fa)
        kb, vb = _sorted(b.metrics[name])
        assert ka == kb, name
        assert np.array_equal(va, vb, equal_nan=True), name


def _whole(url: str, grid: np.ndarray) -> Frames:
    return lp.load_prometheus(lp.PrometheusAccess(url), float(grid[0]), float(grid[-1]), STEP, LOADED)


def test_aligned_grid_is_whole_steps_and_keeps_the_windows_length() -> None:
    g = sw.aligned_grid(1000.0 + 7.3, 1900.0 + 7.3, 15.0)
    assert g[-1] == 1920.0 and g[0] == 1020.0 and len(g) == 61  # the end moves forward: data up to it is in
    assert sw.aligned_grid(1005.0, 1905.0, 15.0)[-1] == 1905.0  # an aligned end stays
    assert np.all(np.mod(g, 15.0) == 0)


def test_sliding_cycles_fetch_only_the_new_part_and_give_the_whole_windows_frames(prom) -> None:
    p, start, end = prom
    window = sw.SlidingWindow(lp.PrometheusAccess(p.url), STEP, LOADED)
    # A cycle every 30 s, then one every 7 s (ends between grid times), across the node replacement.
    ends = [start + 1400 + 30 * i for i in range(12)] + [start + 1765 + 7 * i for i in range(4)]
    assert ends[-1] <= end
    for n, e in enumerate(ends):
        frames = window.load(e - WINDOW, e)
        grid = frames.times
        assert grid[-1] - STEP < e <= grid[-1] and len(grid) == WINDOW / STEP + 1
        if n:
            # what was held is reused: only the re-fetch margin and the new grid times are asked for
            assert window.fetched_from is not None
            assert grid[-1] - window.fetched_from <= sw.DEFAULT_REFETCH_S + (e - ends[n - 1]) + STEP
            assert window.fetched_from > grid[0]
        else:
            assert window.fetched_from == grid[0]
        _same_frames(frames, _whole(p.url, grid))
    node = "ip-10-1-0-12"
    labels = frames.get(lp.c.GPU_UP).labels
    assert node in set(labels[lp.c.NODE_LABEL]), "the replaced node's new series joined the window"


def test_a_jump_backwards_or_past_what_is_held_loads_the_whole_window_and_a_failed_cycle_keeps_it(
    prom, monkeypatch
) -> None:
    p, start, _ = prom
    window = sw.SlidingWindow(lp.PrometheusAccess(p.url), STEP, LOADED)
    e = start + 2000
    window.load(e - WINDOW, e)
    for jump in (-60.0, WINDOW):  # backwards; past everything held
        e += jump
        frames = window.load(e - WINDOW, e)
        assert window.fetched_from == frames.times[0]
        _same_frames(frames, _whole(p.url, frames.times))
    # a shorter window inside what is held, ending before it: loaded whole, not an empty fetch
    frames = window.load(e - WINDOW, e - 400)
    assert np.array_equal(frames.times, sw.aligned_grid(e - WINDOW, e - 400, STEP))
    assert window.fetched_from == frames.times[0] and frames.has(lp.c.GPU_UP)
    _same_frames(frames, _whole(p.url, frames.times))

    def down(*args, **kwargs):
        raise FleetscopeError("Prometheus is down")

    monkeypatch.setattr(sw, "fetch_grid_series", down)
    held_grid = window.grid
    with pytest.raises(FleetscopeError, match="down"):
        window.load(e - WINDOW + 30, e + 30)
    assert window.grid is held_grid and window.held  # the failure kept the window (it threw it away before)
    monkeypatch.undo()
    frames = window.load(e - WINDOW + 30, e + 30)
    assert window.fetched_from > frames.times[0]  # only what it lacks
    _same_frames(frames, _whole(p.url, frames.times))


def test_the_service_path_gives_the_findings_of_the_whole_window(prom) -> None:
    p, start, _ = prom
    source = PrometheusSource(lp.PrometheusAccess(p.url), LOADED, sliding=True)
    service = LiveAnalysis(source, None, STEP)
    held = []
    for e in (start + 1800 + 30 * i for i in range(4)):
        sliding = service(e - WINDOW, e).report
        held.append(source.window)
        grid = sw.aligned_grid(e - WINDOW, e, STEP)
        whole = analyze(_whole(p.url, grid))
        assert sliding.start == whole.start and sliding.end == whole.end
        assert_same_findings(whole.document(), sliding.document())
        assert {n: v.state for n, v in sliding.nodes.items()} == {n: v.state for n, v in whole.nodes.items()}
    kinds = {(f.kind, f.node) for f in sliding.findings}
    assert ("failing_node", "ip-10-1-0-12") in kinds
    assert held[0] is not None and all(w is held[0] for w in held), (
        "one window per source, kept between cycles"
    )
    assert held[0].fetched_from is not None and held[0].fetched_from > e - WINDOW, (
        "only what is new was fetched"
    )
    assert pickle.loads(pickle.dumps(service)).source.access.url == p.url, (
        "the service's child process can hold it"
    )


def test_the_refetch_margin_is_what_is_fetched_again(prom) -> None:
    p, start, _ = prom
    e = start + 1800
    for margin in (0.0, 300.0):
        source = PrometheusSource(lp.PrometheusAccess(p.url), LOADED, sliding=True, refetch_s=margin)
        source.load(e - WINDOW, e, STEP)
        source.load(e - WINDOW + 30, e + 30, STEP)
        window = source.window
        assert window is not None and window.refetch_s == margin
        held_end = sw.aligned_grid(e - WINDOW, e, STEP)[-1]
        # everything after the held end less the margin (at least two steps) is asked for again
        assert window.fetched_from == held_end - max(margin, 2 * STEP) + STEP
