"""The sharded service's discovery reads the recording rule where the store has it, and the identity
series where it does not (fast: the synthetic store, in process).

Each case compares the rows with a discovery that reads the identity series only: the rows must be
the same whichever way they were read, and the store must have read a series per row, not the
identity series, wherever the rule covers the range."""

from __future__ import annotations

import numpy as np
import pytest

from fleetscope import contract as c
from fleetscope.analyzers.core import LOADED
from fleetscope.service.shard import RECORDED_IDENTITY, Discovery, recorded_discovery_query
from fleetscope.simulate.spec import JobSpec, ScenarioSpec, node_name
from fleetscope.window.prometheus import PrometheusAccess
from fleetscope.window.sources import PrometheusSource
from tests.support.promql_subset import parse
from tests.support.synthetic_prom import Fleet, SyntheticPrometheus, Tile, with_discovery_rule

SPEC = ScenarioSpec(
    name="realistic_discovery_rule",
    nodes=6,
    gpus_per_node=2,
    efa_per_node=1,
    duration_s=1800,
    seed=11,
    jobs=[JobSpec("alpha", nodes=2, first_node=0, tensor_parallel=2), JobSpec("beta", nodes=2, first_node=2)],
)
FLEET = 14  # two copies of the tile and a partial third
STEP = 15.0
WINDOW = 900.0


@pytest.fixture(scope="module")
def tile() -> Tile:
    return Tile.simulate(SPEC)


def _silence(tile: Tile, metric: str, before_ms: int | None = None, after_ms: int | None = None) -> Tile:
    """``tile`` with ``metric``'s samples before / after a time removed (a copy; the rest shared)."""
    m = tile.matrix[metric].copy()
    if before_ms is not None:
        m[:, tile.times < before_ms] = np.nan
    if after_ms is not None:
        m[:, tile.times > after_ms] = np.nan
    return Tile(tile.nodes, tile.times, tile.series, {**tile.matrix, metric: m})


def _rows(server: SyntheticPrometheus, end: float, recorded: bool = True, held: Discovery | None = None):
    d = held or Discovery(recorded=recorded)
    source = PrometheusSource(PrometheusAccess(server.url), LOADED)
    rows = d.rows(source, end - WINDOW, end, STEP)
    return sorted(tuple(sorted(r.items())) for r in rows), d


def _discovery_series_read(server: SyntheticPrometheus) -> int:
    stats = server.stats.snapshot(reset=True)
    return stats["by_kind"]["group"]["series_scanned"]


def test_the_rule_gives_the_identity_series_rows_reading_a_series_per_row(tile) -> None:
    end = SPEC.start + 1500
    with SyntheticPrometheus(Fleet(with_discovery_rule(tile), FLEET)) as server:
        raw, d0 = _rows(server, end, recorded=False)
        raw_read = _discovery_series_read(server)
        recorded, d1 = _rows(server, end)
        recorded_read = _discovery_series_read(server)
    assert (d0.read, d1.read) == ("raw", "recorded")
    assert recorded == raw
    assert {dict(r)["Hostname"] for r in raw} == {node_name(i) for i in range(FLEET)}
    assert {dict(r).get("job_id") for r in raw} == {None, "alpha", "beta", "alpha-1", "beta-1", "alpha-2"}
    assert recorded_read == len(raw) == FLEET + 10  # a series per row: 14 nodes, 10 of them in a job
    assert raw_read > 3 * recorded_read  # 2 GPUs, an EFA port, a file system and ranks a node


def test_a_store_without_the_rule_is_read_as_before(tile) -> None:
    end = SPEC.start + 1500
    with SyntheticPrometheus(Fleet(tile, FLEET)) as server:
        rows, d = _rows(server, end)
        raw, _ = _rows(server, end, recorded=False)
    assert d.read == "raw" and rows == raw and len(rows) == FLEET + 10  # 10 ranks' nodes


def test_a_rule_loaded_during_the_window_leaves_the_minutes_before_it_to_the_identity_series(tile) -> None:
    """Node 5 (tile node 5, copies 5 and 11) stops writing before the rule's first evaluation: only
    the identity series before the rule still hold it, and the window does."""
    loaded_at = SPEC.start + 1200
    gone = {node_name(5), node_name(11)}
    quiet = tile
    for name, ids in tile.by_metric.items():
        rows = [tile.series[i].row for i in ids if tile.series[i].node == 5]
        if rows:
            m = quiet.matrix[name].copy()
            m[np.ix_(rows, np.flatnonzero(tile.times > (SPEC.start + 900) * 1000))] = np.nan
            quiet = Tile(quiet.nodes, quiet.times, quiet.series, {**quiet.matrix, name: m})
    late = _silence(with_discovery_rule(quiet), RECORDED_IDENTITY, before_ms=int(loaded_at * 1000))
    end = SPEC.start + 1500
    with SyntheticPrometheus(Fleet(late, FLEET)) as server:
        rows, d = _rows(server, end)
        raw, _ = _rows(server, end, recorded=False)
        only_recorded = server.evaluator.evaluate(
            parse(recorded_discovery_query()), int((end - WINDOW) * 1000), int(end * 1000), 60_000
        )
    assert d.read == "recorded+raw"
    assert rows == raw
    assert gone <= {dict(r)["Hostname"] for r in rows}
    assert not gone & {dict(p)["Hostname"] for p, *_ in only_recorded.series}  # the rule alone misses them


def test_a_rule_that_stops_is_followed_by_the_identity_series(tile) -> None:
    """The rule stops (removed, or its evaluation stuck) while the service slides, and the jobs'
    ranks appear after it stopped: the cycles go on finding the fleet, jobs included, from the
    identity series, with the same rows as a fresh discovery."""
    stopped_at, jobs_from = SPEC.start + 1000, SPEC.start + 1150
    late_jobs = tile
    for metric in (c.TRAINING_INFO, c.NCCL_RAS_UP):
        if metric in tile.matrix:
            late_jobs = _silence(late_jobs, metric, before_ms=int(jobs_from * 1000))
    stale = _silence(with_discovery_rule(late_jobs), RECORDED_IDENTITY, after_ms=int(stopped_at * 1000))
    with SyntheticPrometheus(Fleet(stale, FLEET)) as server:
        held = Discovery()
        reads = []
        for end in (SPEC.start + 1020, SPEC.start + 1200, SPEC.start + 1500):
            rows, _ = _rows(server, end, held=held)
            reads.append(held.read)
            assert rows == _rows(server, end, recorded=False)[0]
    assert reads[0] == "recorded" and reads[-1] in ("raw", "recorded+raw")
    assert {dict(r).get("job_id") for r in rows} >= {"alpha", "beta"}
