"""The :class:`~fleetscope.window.sources.Source` protocol: one door picks a source, every caller
reads it through the protocol alone, a shard's source is a new one, and a window is checked once."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import fleetscope
from fleetscope.errors import FleetscopeError
from fleetscope.simulate.record import write_scenario
from fleetscope.simulate.spec import ScenarioSpec
from fleetscope.window.prometheus import PrometheusAccess, PrometheusClient
from fleetscope.window.sources import (
    ArchiveSource,
    PrometheusSource,
    RecordingSource,
    Span,
    SpoolSource,
    open_source,
)

ROOT = Path(fleetscope.__file__).parent
IMPLEMENTATIONS = {"RecordingSource", "ArchiveSource", "SpoolSource", "PrometheusSource"}


def test_no_caller_branches_on_a_source_class() -> None:
    """Outside the window layer, nothing asks which source it holds (``isinstance``): what differs
    between sources is the protocol's to say."""
    found = []
    for path in ROOT.rglob("*.py"):
        if path.is_relative_to(ROOT / "window"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "isinstance":
                names = {n.id if isinstance(n, ast.Name) else getattr(n, "attr", "") for n in ast.walk(node)}
                if names & IMPLEMENTATIONS:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []


def test_one_door_picks_the_source_from_the_argument(tmp_path: Path) -> None:
    out, _ = write_scenario(ScenarioSpec(name="door", nodes=1, seed=1, duration_s=120), tmp_path / "d.om")
    recording = open_source(out)
    assert isinstance(recording, RecordingSource) and recording.span() is None
    spooled = recording.for_chunks(lambda: tmp_path)  # read a time span at a time: spooled
    assert isinstance(spooled, SpoolSource) and spooled.for_chunks(lambda: tmp_path) is spooled
    archive = recording.to_archive(tmp_path / "d.data")
    assert isinstance(open_source(archive.path), ArchiveSource)  # by its magic bytes, not its name
    # The recording's length from its head, the archive's from its footer, the spool's from what
    # it keeps: the same window.
    assert recording.seconds() == pytest.approx(archive.seconds(), abs=15.0)
    assert spooled.seconds() == archive.seconds() and spooled.span() == archive.span()
    access = PrometheusAccess("http://127.0.0.1:9", timeout=5.0)
    prom = open_source(None, access, ["up"])
    assert isinstance(prom, PrometheusSource) and prom.access is access
    with pytest.raises(FleetscopeError, match="give --input FILE or --prometheus URL"):
        open_source(None, None)


def test_a_restricted_source_is_new_and_shares_the_sliding_window() -> None:
    base = PrometheusSource(PrometheusAccess("http://127.0.0.1:9"), ["up"], sliding=True, refetch_s=60.0)
    window = base._sliding(15.0)
    narrowed = base.restrict('Hostname=~"a"')
    assert narrowed is not base and base.matcher == "" and narrowed.matcher == 'Hostname=~"a"'
    assert narrowed.access is base.access and narrowed.refetch_s == 60.0
    assert narrowed.window is window  # what is held between cycles stays held


def test_the_access_value_builds_the_client() -> None:
    access = PrometheusAccess("http://prom:9090/", 7.0, None, {"X-Scope-OrgID": "a"}, 1 << 20)
    client = access.client()
    try:
        assert isinstance(client, PrometheusClient)
        assert (client.url, client.timeout, client.headers, client.max_answer_bytes) == (
            "http://prom:9090",
            7.0,
            {"X-Scope-OrgID": "a"},
            1 << 20,
        )
    finally:
        client.close()
    with pytest.raises(AttributeError):
        access.url = "http://elsewhere"  # type: ignore[misc]  # frozen


def test_a_window_is_checked_once() -> None:
    assert Span.of(10.0, 20.0, 5.0) == Span(10.0, 20.0, 5.0)
    with pytest.raises(FleetscopeError, match="ends before it starts"):
        Span.of(20.0, 10.0, 5.0)
    with pytest.raises(FleetscopeError, match="--step must be positive"):
        Span.of(10.0, 20.0, 0.0)
    with pytest.raises(FleetscopeError, match="ends before it starts"):
        PrometheusSource(PrometheusAccess("http://127.0.0.1:9"), ["up"]).span(20.0, 10.0)
