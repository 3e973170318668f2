"""One replica's share of the fleet: ``fleetscope serve --shard K/N``.

Every cycle a shard asks the store once which jobs, served models and nodes the window holds (one
``group by`` query over the minutes since the last cycle, :class:`Discovery`), and owns:

* each **job**, with every node its ranks ran on in the window;
* each **served model** (vLLM's ``model_name``), with the nodes of its replicas;
* each **job-less node** (no rank, no replica in the window);

whose stable hash (the first 8 bytes of SHA-256 of ``job:<id>``, ``model:<name>`` or
``node:<Hostname>``, modulo N; never Python's salted ``hash()``) is K. Jobs and models that share
nodes in the window (a node that ran two jobs one after the other) are one unit, owned by the hash
of its first job (else its first model), so every series belongs to exactly one shard and every
detector sees all the peers it compares. The shard then asks the store only for its nodes' series
(a ``Hostname=~"..."`` matcher on every query); series without a ``Hostname`` (an FSx file system,
a replica scraped without it) go to shard 0.

The detectors compare a node with the other GPUs of its node, a rank with its job's ranks, a
replica with its model's replicas: nothing across units, so the union of the shards' findings is
one process's on the same data. The share is computed afresh every cycle from the store alone,
so a shard that restarts (its Kubernetes restart is the failover) owns what it owned before: it
loses nothing and duplicates nothing. No membership protocol: N is configuration, K the pod
ordinal of a StatefulSet.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field

from fleetscope import contract as c
from fleetscope.errors import FleetscopeError
from fleetscope.window.frames import lookback_seconds
from fleetscope.window.sources import PrometheusSource

#: The most shards: a replica per 4 nodes of a 16,384-node fleet is already far past any use (a
#: shard of a 2,048-node fleet's eighth takes 9.7 s a cycle, docs/large-fleets.md).
MAX_SHARDS = 4096
#: The environment variable the Helm chart sets to the StatefulSet's replica count.
SHARDS_ENV = "FLEETSCOPE_SHARDS"
JOB_LABEL = "job_id"
MODEL_LABEL = "model_name"


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (0-based)."""

    index: int
    count: int

    def owns(self, key: str) -> bool:
        return owner(key, self.count) == self.index

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def owner(key: str, count: int) -> int:
    """The shard of ``key`` among ``count``: SHA-256, the same in every process and release."""
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big") % count


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
    """What one shard owns in one window, and how large the whole fleet is."""

    shard: Shard
    jobs: tuple[str, ...]
    models: tuple[str, ...]
    nodes: tuple[str, ...]
    fleet_jobs: int
    fleet_models: int
    fleet_nodes: int

    def summary(self) -> dict:
        """Plain data for the page and ``/api/v1/status``."""
        return {
            "index": self.shard.index,
            "count": self.shard.count,
            "jobs": len(self.jobs),
            "models": len(self.models),
            "nodes": len(self.nodes),
            "fleet_jobs": self.fleet_jobs,
            "fleet_models": self.fleet_models,
            "fleet_nodes": self.fleet_nodes,
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


def _regex_literal(text: str) -> str:
    """``text`` as an RE2 literal."""
    return re.sub(r"([\\.+*?()|\[\]{}^$-])", r"\\\1", text)


def _promql_string(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def share_of(rows: Iterable[dict[str, str]], shard: Shard) -> Share:
    """The share of ``shard`` from the discovery rows (``Hostname``, ``job_id``, ``model_name``)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for row in rows:
        units = [
            f"{kind}:{v}"
            for kind, label in (("node", c.NODE_LABEL), ("job", JOB_LABEL), ("model", MODEL_LABEL))
            if (v := row.get(label, ""))
        ]
        for u in units:
            find(u)
        for u in units[1:]:
            a, b = find(units[0]), find(u)
            if a != b:
                parent[max(a, b)] = min(a, b)
    groups: dict[str, list[str]] = {}
    for u in parent:
        groups.setdefault(find(u), []).append(u)
    jobs: list[str] = []
    models: list[str] = []
    nodes: list[str] = []
    fleet = {"job": 0, "model": 0, "node": 0}
    for members in groups.values():
        by_kind: dict[str, list[str]] = {"job": [], "model": [], "node": []}
        for u in members:
            kind, _, name = u.partition(":")
            by_kind[kind].append(name)
            fleet[kind] += 1
        # A unit is named by its first job, else its first model, else its (only) node.
        kind = next(k for k in ("job", "model", "node") if by_kind[k])
        if shard.owns(f"{kind}:{min(by_kind[kind])}"):
            jobs += by_kind["job"]
            models += by_kind["model"]
            nodes += by_kind["node"]
    return Share(
        shard,
        tuple(sorted(jobs)),
        tuple(sorted(models)),
        tuple(sorted(nodes)),
        fleet["job"],
        fleet["model"],
        fleet["node"],
    )


#: Resolution of the discovery query: each point says which (node, job, model) had a sample in the
#: minute before it.
DISCOVERY_STEP_S = 60.0


def discovery_query(metrics: Iterable[str], step_s: float = DISCOVERY_STEP_S) -> str:
    """The one query a cycle asks before its share's series: which (node, job, model) the window holds."""
    names = "|".join(sorted(set(metrics)))
    labels = ", ".join((c.NODE_LABEL, JOB_LABEL, MODEL_LABEL))
    return f'group by ({labels}) (last_over_time({{__name__=~"{names}"}}[{math.ceil(step_s)}s]))'


Row = tuple[tuple[str, str], ...]


@dataclass
class Discovery:
    """The (node, job, model) rows of the window, kept between cycles like the sliding window's
    tables: a cycle asks only for the minutes since the last one (and a margin for late samples),
    a range query at :data:`DISCOVERY_STEP_S` whose every point covers the minute before it, so each
    sample is read once and no evaluation holds more than a minute of them (under Prometheus'
    ``--query.max-samples`` at 100k GPUs). A row leaves when its last sample leaves the window."""

    margin_s: float = 120.0
    seen: dict[Row, float] = field(default_factory=dict)
    until: float | None = None

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
            series = client.query_range(discovery_query(source.metrics, d), a, b, d)
        except BaseException:
            self.seen, self.until = {}, None
            raise
        finally:
            client.close()
        for labels, times, _ in series:
            key = tuple(sorted((k, v) for k, v in labels.items() if v))
            if len(times):
                self.seen[key] = max(self.seen.get(key, -math.inf), float(times.max()))
        self.seen = {k: t for k, t in self.seen.items() if t >= first}
        self.until = b
        return [dict(k) for k in self.seen]
