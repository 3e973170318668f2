"""One replica's share of the fleet: ``fleetscope serve --shard K/N``.

Every cycle a shard asks the store once which nodes, jobs and served models the window holds (one
``group by`` over a few *identity* series, :data:`IDENTITY_METRICS`, for the minutes since the last
cycle, :class:`Discovery`), places them on the N shards (:mod:`fleetscope.service.placement`: every
node, job and model on exactly one shard, no shard above its bound of ``ceil(F / N * 1.25)``
nodes), and asks the store only for the series of the nodes placed on it (a ``Hostname=~"..."``
matcher on every query); series without a ``Hostname`` (an FSx file system, a replica scraped
without it) go to shard 0.

Discovery reads identity series only: one per exporter family the analyzers read, each a series
per GPU, port, rank or replica, so its cost grows with the fleet's nodes, ranks and replicas, not
with its series (the analyzers load some 70 metrics; every one of them carries the node, job and
model labels one of these carries for the same node). A node with only some exporters (a
Trainium node, an idle node, a node whose GPU collector fails) is still found.

The detectors compare a GPU with the other GPUs of its node, a rank with its job's ranks, a
replica with its model's replicas. A job or model placed whole on one shard is analyzed there as
one process would; one larger than a shard's bound (a fleet-wide NCCL test) is *split*: each shard
analyzes its slice, and reports only what it owns (:meth:`Share.report`): node, GPU and rank
verdicts by the node's owner, job-level verdicts, job states and models by the owner of the job or
model. So the union of the shards' findings is one process's wherever nothing is split. The share
is computed afresh every cycle from the store alone, so a shard that restarts (its Kubernetes
restart is the failover) owns what it owned before: it loses nothing and duplicates nothing. No
membership protocol: N is configuration, K the pod ordinal of a StatefulSet.
"""

from __future__ import annotations

import math
import os
import re
import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fleetscope import contract as c
from fleetscope import queries
from fleetscope.alerts import names
from fleetscope.errors import FleetscopeError
from fleetscope.queries import IDENTITY_METRICS
from fleetscope.service.placement import Placement, place
from fleetscope.window.frames import lookback_seconds
from fleetscope.window.sources import PrometheusSource

if TYPE_CHECKING:
    from fleetscope.analyzers.findings import Finding
    from fleetscope.analyzers.report import Report
    from fleetscope.window.prometheus import PrometheusClient

#: The most shards: a replica per 4 nodes of a 16,384-node fleet is already far past any use (a
#: shard of a 2,048-node fleet's eighth takes 9.7 s a cycle, docs/large-fleets.md).
MAX_SHARDS = 4096
#: The environment variable the Helm chart sets to the StatefulSet's replica count.
SHARDS_ENV = "FLEETSCOPE_SHARDS"


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (0-based)."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str, shards: str | None = None, hostname: str | None = None) -> Shard:
    """``K/N``, or ``auto``: K from the host name's ``-K`` suffix (a StatefulSet pod's ordinal) and N
    from ``shards`` (``--shards``, else ``$FLEETSCOPE_SHARDS``). Raises a usage error (exit 2)."""
    text = text.strip()
    if text == "auto":
        host = hostname if hostname is not None else (os.environ.get("HOSTNAME") or socket.gethostname())
        m = re.fullmatch(r".*-(\d+)", host)
        if not m:
            raise _usage(f"--shard auto: host name {host!r} does not end in -<ordinal> (a StatefulSet pod's)")
        count_text = shards if shards is not None else os.environ.get(SHARDS_ENV)
        if not count_text:
            raise _usage(f"--shard auto needs --shards N or ${SHARDS_ENV}")
        index_text = m.group(1)
    else:
        m = re.fullmatch(r"(\d+)/(\d+)", text)
        if not m:
            raise _usage(f"invalid --shard {text!r}: expected K/N (0 <= K < N) or auto")
        index_text, count_text = m.groups()
    count_text = count_text.strip()
    if not count_text.isdigit() or len(count_text) > 9 or not 1 <= int(count_text) <= MAX_SHARDS:
        raise _usage(
            f"invalid shard count {count_text[:40]!r}: expected a whole number from 1 to {MAX_SHARDS}"
        )
    if len(index_text) > 9:
        raise _usage(f"invalid shard {index_text[:40]!r}: K must be below N ({count_text})")
    index, count = int(index_text), int(count_text)
    if index >= count:
        raise _usage(f"invalid shard {index}/{count}: K must be below N (shards 0 to {count - 1})")
    return Shard(index, count)


def _usage(message: str) -> FleetscopeError:
    return FleetscopeError(message, exit_code=2)


@dataclass(frozen=True)
class Share:
    """What one shard owns in one window, and how large the whole fleet is.

    ``nodes`` are the nodes placed on this shard: it fetches them and nothing else (the shards'
    fetches are disjoint), and reports their node, GPU and rank verdicts. ``jobs`` and ``models``
    are those it owns (reports their job-level verdicts, states and summaries), whole or split.
    """

    shard: Shard
    jobs: tuple[str, ...]
    models: tuple[str, ...]
    nodes: tuple[str, ...]
    fleet_jobs: int
    fleet_models: int
    fleet_nodes: int
    #: The most nodes one shard is given (:func:`fleetscope.service.placement.bound`).
    bound: int = 0
    #: The fleet's placement (every shard's; the report's filter reads it).
    placement: Placement | None = field(default=None, repr=False, compare=False)
    #: Where the discovery rows came from (:attr:`Discovery.read`).
    discovery: str = ""

    def summary(self) -> dict:
        """Plain data for the page and ``/api/v1/status``."""
        split = self.placement.split_jobs if self.placement is not None else frozenset()
        return {
            "index": self.shard.index,
            "count": self.shard.count,
            "jobs": len(self.jobs),
            "models": len(self.models),
            "nodes": len(self.nodes),
            # Fetched and owned are the same nodes (disjoint fetches): said apart so a reader
            # need not know it.
            "fetch_nodes": len(self.nodes),
            "bound": self.bound,
            "split_jobs": sum(1 for j in self.jobs if j in split),
            "fleet_jobs": self.fleet_jobs,
            "fleet_models": self.fleet_models,
            "fleet_nodes": self.fleet_nodes,
            "discovery": self.discovery or None,
        }

    def matcher(self) -> str | None:
        """The label matcher of this share's series: its nodes (and, on shard 0, series without
        one); None when it selects nothing."""
        alternatives = [_regex_literal(n) for n in sorted(self.nodes)]
        if self.shard.index == 0:
            alternatives.append("")
        if not alternatives:
            return None
        return f'{c.NODE_LABEL}=~"{_promql_string("|".join(alternatives))}"'

    # ------------------------------------------------------------------ what this shard reports
    def reports(self, node: str | None, job: str | None = None, model: str | None = None) -> bool:
        """Whether a verdict about ``node`` (its GPU, a rank on it), of ``job`` or ``model``, is this
        shard's to report. A job or model placed whole: its owner (it saw every peer, and every
        node the verdict may name). Else the node's owner (a split job's rank, a GPU). Else (a
        split job's job-level verdict) the job's or model's owner. What the placement does not
        know (no placement; a name no identity series carries) stays with whoever found it."""
        p = self.placement
        if p is None:
            return True
        me = self.shard.index
        if job and job in p.jobs and job not in p.split_jobs:
            return p.jobs[job] == me
        if model and model in p.models and model not in p.split_models:
            return p.models[model] == me
        if node and node in p.nodes:
            return p.nodes[node] == me
        if job and job in p.jobs:
            return p.jobs[job] == me
        if model and model in p.models:
            return p.models[model] == me
        return True

    def reports_finding(self, f: Finding) -> bool:
        """:meth:`reports` of a finding (a model's capacity finding names its model in evidence)."""
        return self.reports(f.node, f.job_id, f.evidence.get("model") if f.job_id is None else None)

    def report(self, report: Report) -> Report:
        """``report`` cut to what this shard reports (:meth:`reports`), in place: findings, node
        verdicts, straggler scores, job summaries and goodput accounts."""
        report.findings = [f for f in report.findings if self.reports_finding(f)]
        report.nodes = {n: v for n, v in report.nodes.items() if self.reports(n)}
        report.straggler_scores = [s for s in report.straggler_scores if self.reports(s.node, s.job_id)]
        report.jobs = {j: v for j, v in report.jobs.items() if self.reports(None, j)}
        report.goodput = {j: v for j, v in report.goodput.items() if self.reports(None, j)}
        return report

    def job_states(self, jobs: Mapping[str, Any]) -> dict[str, Any]:
        """The jobs' states this shard reports (its jobs' owner's)."""
        return {j: v for j, v in jobs.items() if self.reports(None, j)}

    def served_models(self, models: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """The served models this shard reports (their owner's)."""
        return [m for m in models if self.reports(None, None, str(m.get("model", "")) or None)]


def _regex_literal(text: str) -> str:
    """``text`` as an RE2 literal."""
    return re.sub(r"([\\.+*?()|\[\]{}^$-])", r"\\\1", text)


def _promql_string(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def share_of(rows: Iterable[Mapping[str, str]], shard: Shard, discovery: str = "") -> Share:
    """The share of ``shard`` from the discovery rows (``Hostname``, ``job_id``, ``model_name``):
    :func:`fleetscope.service.placement.place`, seen from ``shard``. ``discovery`` says where the
    rows came from (:attr:`Discovery.read`)."""
    p = place(rows, shard.count)
    me = shard.index
    return Share(
        shard,
        tuple(sorted(j for j, s in p.jobs.items() if s == me)),
        tuple(sorted(m for m, s in p.models.items() if s == me)),
        tuple(sorted(n for n, s in p.nodes.items() if s == me)),
        len(p.jobs),
        len(p.models),
        len(p.nodes),
        p.bound,
        p,
        discovery,
    )


#: The recording rule that evaluates :func:`discovery_query` once for all shards
#: (``alerts/fleetscope-recording.rules.yml``).
RECORDED_IDENTITY = names.FLEET_IDENTITY

#: Resolution of the discovery query: each point says which (node, job, model) had a sample in the
#: minute before it.
DISCOVERY_STEP_S = 60.0


def discovery_query(metrics: Iterable[str] = IDENTITY_METRICS, step_s: float = DISCOVERY_STEP_S) -> str:
    """Which (node, job, model) the window holds, from the identity series
    (:data:`~fleetscope.queries.IDENTITY_METRICS`): what :data:`RECORDED_IDENTITY` records."""
    return queries.fleet_identity(f"{math.ceil(step_s)}s", tuple(metrics))


def recorded_discovery_query(step_s: float = DISCOVERY_STEP_S) -> str:
    """:func:`discovery_query` read from the recording rule :data:`RECORDED_IDENTITY`."""
    return queries.recorded_fleet_identity(RECORDED_IDENTITY, f"{math.ceil(step_s)}s")


Row = tuple[tuple[str, str], ...]


@dataclass
class Discovery:
    """The (node, job, model) rows of the window, kept between cycles like the sliding window's
    tables: a cycle asks only for the minutes since the last one (and a margin for late samples),
    a range query at :data:`DISCOVERY_STEP_S` whose every point covers the minute before it, so each
    sample is read once and no evaluation holds more than a minute of them (under Prometheus'
    ``--query.max-samples`` at 100k GPUs). A row leaves when its last sample leaves the window.

    The rows are read from the recording rule :data:`RECORDED_IDENTITY` (the generated recording
    group evaluates the same ``group by`` once per evaluation for every shard, so a cycle's
    discovery reads a series per row instead of the identity series: 20 per 8-GPU training node)
    wherever it has them, and from the identity series themselves where it does not: all of the
    range when the store has no such rule (a Prometheus without fleetscope's rules), the minutes
    before its first sample (a rule loaded during the window) and after its last one (a rule
    removed, or evaluation more than a minute behind). ``read`` says which a cycle used.
    """

    margin_s: float = 120.0
    #: Read the recording rule first (False: the identity series only).
    recorded: bool = True
    seen: dict[Row, float] = field(default_factory=dict)
    until: float | None = None
    #: What the last cycle read: "recorded", "raw", or "recorded+raw".
    read: str = ""

    def rows(self, source: PrometheusSource, start: float, end: float, step: float) -> list[dict[str, str]]:
        first = start - lookback_seconds(step) - 2 * step  # the earliest sample the window's grid reads
        last = math.ceil(end / step - 1e-9) * step  # the window's last grid time
        d = DISCOVERY_STEP_S
        if self.until is None or self.until < first or last < self.until - d:
            self.seen, frm = {}, first  # the first cycle, or one that does not line up: all of it
        else:
            frm = max(first, self.until - max(self.margin_s, 2 * d))
        a, b = math.ceil(frm / d) * d, math.ceil(last / d) * d
        client = source.access.client()
        try:
            series = self._ask(client, a, b)
        except BaseException:
            self.seen, self.until = {}, None
            raise
        finally:
            client.close()
        seen = self.seen
        for labels, _, t in series:
            key = tuple(sorted((k, v) for k, v in labels.items() if v))
            if t > seen.get(key, -math.inf):
                seen[key] = t
        self.seen = {k: t for k, t in self.seen.items() if t >= first}
        self.until = b
        return [dict(k) for k in self.seen]

    def _ask(self, client: PrometheusClient, a: float, b: float) -> list[tuple[dict[str, str], float, float]]:
        """Each row over the grid ``a..b`` with the first and last grid time it was seen: the rule's,
        and the identity series' where the rule has no sample (class docstring)."""
        d = DISCOVERY_STEP_S
        raw = discovery_query(IDENTITY_METRICS, d)
        recorded = client.query_range_spans(recorded_discovery_query(d), a, b, d) if self.recorded else []
        if not recorded:
            self.read = "raw"
            return client.query_range_spans(raw, a, b, d)
        out = list(recorded)
        begun, ended = min(first for _, first, _ in recorded), max(last for _, _, last in recorded)
        gaps = [(a, begun - d)] if begun > a else []
        if ended < b - 2 * d:  # one grid point short is the rule's evaluation lag, not a gap
            gaps.append((ended + d, b))
        for lo, hi in gaps:
            out.extend(client.query_range_spans(raw, lo, hi, d))
        self.read = "recorded+raw" if gaps else "recorded"
        return out
