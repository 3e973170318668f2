"""Which shard owns each node, job and served model: a bounded, deterministic placement.

Every shard computes the same placement from the same discovery rows (``Hostname``, ``job_id``,
``model_name``; :mod:`fleetscope.service.shard`), so no shard talks to another. The placement has
three guarantees:

* **Exactly one owner.** Every node is placed on one shard, its *node owner*; every job and model
  has one *owner*.
* **No share is unbounded.** No shard is given more than :func:`bound` nodes, ``ceil(F / N *``
  :data:`SLACK` ``)`` of a fleet of F nodes over N shards, whatever the jobs look like: a
  fleet-wide job (an NCCL test or a health check with a rank on every node) or a chain of small
  jobs (job churn: a node that ran two jobs one after the other in the window) cannot pull the
  fleet onto one replica. The older scheme (every set of jobs sharing a node was one unit, hashed
  to a shard) had no bound: on 8 nodes, two 4-node jobs and one job with a rank on each node gave
  one shard 8 nodes and the other none.
* **Stable.** A unit goes to the shard its key hashes to while that shard has room, so a job that
  starts or ends moves only what it displaces, not the whole fleet (a shard whose nodes change
  re-reads its window).

How. Jobs and models that share a node are joined into one *unit* (in sorted key order), as long as
the unit stays within the fair share ``ceil(F / N)``; a job or model larger than the bound is no
unit, one that would make its unit larger than the fair share is a unit of its own nodes that no
unit holds yet. Units are then placed largest first, each on the first shard from its
hash (``owner(<first key>)``, then the next shards in turn) that has room under the fair share
``ceil(F / N)``, else under the bound. A unit that fits nowhere, the nodes of the jobs and models
larger than the bound, and then the job-less nodes are placed node by node: a unit's or a big job's
nodes fill the shards from its own hash on (so it is cut into few, large slices), a job-less node
goes to the first shard with room from the hash of ``node:<Hostname>``. Placing one node always
succeeds: N shards of the bound hold more than F nodes.

A job or model whose nodes all landed on one shard is whole there: that shard owns it and sees every
peer the detectors compare. One whose nodes landed on several shards is **split**: each shard
analyzes its *slice* (its ranks or replicas on the shard's nodes, compared with the slice's peers),
and its owner is the shard holding most of its nodes (a tie: the first from its hash), whose slice
gives its job-level verdicts. A job or model seen on no node (a replica scraped without
``Hostname``) is shard 0's, which fetches the series without one. A shard thus fetches exactly the
nodes it owns: the shards' fetches are disjoint, and all of them together ask the store what one
process asks.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from fleetscope import contract as c

JOB_LABEL = c.JOB_LABEL
MODEL_LABEL = c.SERVED_MODEL_LABEL

#: How far above its fair share (``ceil(F / N)``) a shard's nodes may go. The room above the fair
#: share is what lets whole jobs land on the shard their id hashes to (stable ownership, whole
#: peer groups) instead of being cut at a fair-share line; 25 % bounds the largest shard's cycle
#: at 1.25 times the even split's, while a shard's cycle grows with its nodes (docs/large-fleets.md).
SLACK = 1.25


def owner(key: str, count: int) -> int:
    """The shard of ``key`` among ``count``: SHA-256, the same in every process and release."""
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big") % count


def bound(fleet_nodes: int, count: int) -> int:
    """The most nodes one shard is given: ``ceil(fleet_nodes / count * SLACK)`` (at least 1)."""
    return max(1, math.ceil(fleet_nodes / count * SLACK - 1e-9))


@dataclass(frozen=True)
class Placement:
    """Every node's, job's and model's shard among ``count``, and the jobs and models split."""

    count: int
    #: The most nodes a shard holds (:func:`bound`).
    bound: int
    #: Hostname -> its node owner.
    nodes: Mapping[str, int]
    #: Job id -> its owner.
    jobs: Mapping[str, int]
    #: Served model -> its owner.
    models: Mapping[str, int]
    #: Jobs and models whose nodes lie on more than one shard.
    split_jobs: frozenset[str]
    split_models: frozenset[str]

    def load(self, index: int) -> int:
        """How many nodes shard ``index`` holds."""
        return sum(1 for s in self.nodes.values() if s == index)


def place(rows: Iterable[Mapping[str, str]], count: int) -> Placement:
    """The placement of the discovery rows' nodes, jobs and models on ``count`` shards (module
    docstring). Deterministic: the same rows in any order give the same placement."""
    entity_nodes, all_nodes = _entities(rows)
    limit = bound(len(all_nodes), count)
    fair = max(1, math.ceil(len(all_nodes) / count))
    packer = _Packer(count, fair, limit)
    # Largest first (they need the emptiest shards), then by key: the same order in every shard.
    for key, members in sorted(_units(entity_nodes, limit, fair), key=lambda u: (-len(u[1]), u[0])):
        if not packer.place_whole(members, owner(key, count)):
            packer.spill(members, owner(key, count))
    for key, members in sorted(entity_nodes.items(), key=lambda e: (-len(e[1]), e[0])):
        if len(members) > limit:
            packer.spill(members, owner(key, count))
    for node in sorted(all_nodes):
        if node not in packer.shard_of:
            packer.spill((node,), owner(f"node:{node}", count))
    owners, split = _owners(entity_nodes, packer.shard_of, count)
    return Placement(
        count,
        limit,
        packer.shard_of,
        owners["job"],
        owners["model"],
        frozenset(split["job"]),
        frozenset(split["model"]),
    )


def _entities(rows: Iterable[Mapping[str, str]]) -> tuple[dict[str, set[str]], set[str]]:
    """``job:<id>`` and ``model:<name>`` -> their nodes, and every node of the rows."""
    entity_nodes: dict[str, set[str]] = {}
    all_nodes: set[str] = set()
    for row in rows:
        node = row.get(c.NODE_LABEL, "")
        if node:
            all_nodes.add(node)
        for kind, label in (("job", JOB_LABEL), ("model", MODEL_LABEL)):
            if value := row.get(label, ""):
                members = entity_nodes.setdefault(f"{kind}:{value}", set())
                if node:
                    members.add(node)
    return entity_nodes, all_nodes


def _owners(
    entity_nodes: Mapping[str, set[str]], shard_of: Mapping[str, int], count: int
) -> tuple[dict[str, dict[str, int]], dict[str, set[str]]]:
    """Each job's and model's owner (``{"job": {id: shard}, "model": ...}``) and those split."""
    owners: dict[str, dict[str, int]] = {"job": {}, "model": {}}
    split: dict[str, set[str]] = {"job": set(), "model": set()}
    for key, members in entity_nodes.items():
        kind, _, name = key.partition(":")
        first = owner(key, count)
        if not members:  # seen on no node (a replica scraped without Hostname): where its series go
            owners[kind][name] = 0
            continue
        held: dict[int, int] = {}
        for node in members:
            held[shard_of[node]] = held.get(shard_of[node], 0) + 1
        if len(held) > 1:
            split[kind].add(name)
        # Most nodes; a tie goes to the first shard from the key's hash.
        owners[kind][name] = max(held, key=lambda s: (held[s], -((s - first) % count)))
    return owners, split


def _units(entity_nodes: Mapping[str, set[str]], limit: int, join: int) -> list[tuple[str, set[str]]]:
    """Jobs and models joined where they share a node, in sorted key order, while a joined unit
    stays within ``join`` nodes (the fair share: a chain of small jobs is cut into units that fill
    one shard each, not into units of the bound that leave shards empty): ``(the unit's first key,
    its nodes)``, disjoint. A job or model larger than ``limit`` is no unit; one that would make its
    unit larger than ``join`` starts a unit of its nodes no unit holds yet."""
    unit_of: dict[str, int] = {}
    nodes: list[set[str]] = []
    keys: list[str] = []
    for key in sorted(entity_nodes):
        members = entity_nodes[key]
        if not members or len(members) > limit:
            continue
        touched = {unit_of[n] for n in members if n in unit_of}
        free = [n for n in members if n not in unit_of]
        if not touched or len(free) + sum(len(nodes[u]) for u in touched) <= join:
            if not touched:
                keys.append(key)
                nodes.append(set())
                touched = {len(nodes) - 1}
            target = max(touched, key=lambda u: (len(nodes[u]), -u))  # move the smaller ones
            for u in touched - {target}:
                for n in nodes[u]:
                    unit_of[n] = target
                nodes[target] |= nodes[u]
                nodes[u] = set()
                keys[target] = min(keys[target], keys[u])
        elif free:
            keys.append(key)
            nodes.append(set())
            target = len(nodes) - 1
        else:
            continue
        for n in free:
            unit_of[n] = target
        nodes[target].update(free)
    return [(k, n) for k, n in zip(keys, nodes, strict=True) if n]


class _Packer:
    """Shards' node counts while nodes are placed: under the fair share first, then the bound."""

    def __init__(self, count: int, fair: int, limit: int) -> None:
        self.count, self.caps = count, (fair, limit)
        self.loads = [0] * count
        self.shard_of: dict[str, int] = {}

    def place_whole(self, members: set[str], first: int) -> bool:
        """All of ``members`` on the first shard from ``first`` with room for them; False: none."""
        size = len(members)
        for cap in self.caps:
            for i in range(self.count):
                s = (first + i) % self.count
                if self.loads[s] + size <= cap:
                    self._put(sorted(members), s)
                    return True
        return False

    def spill(self, members: Iterable[str], first: int) -> None:
        """The not yet placed of ``members``, in sorted order, filling the shards from ``first`` on."""
        todo = sorted(n for n in members if n not in self.shard_of)
        for cap in self.caps:
            for i in range(self.count):
                if not todo:
                    return
                s = (first + i) % self.count
                room = cap - self.loads[s]
                if room > 0:
                    self._put(todo[:room], s)
                    todo = todo[room:]
        if todo:  # cannot happen: count * limit >= the fleet's nodes
            raise AssertionError(f"{len(todo)} nodes found no shard with room")

    def _put(self, members: list[str], shard: int) -> None:
        for n in members:
            self.shard_of[n] = shard
        self.loads[shard] += len(members)
