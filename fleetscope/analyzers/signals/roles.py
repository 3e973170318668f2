"""Role peers: for every rank, the ranks of its job that do the same work (docs/analyzers.md#role-peers).

Structure repeats on every data-parallel replica; a fault does not. With the layout reported
(``training_info``'s ``pipeline_stage`` and ``data_parallel_rank`` on every rank of the job), a
rank's role peers are the ranks of the *other* replicas at its position: the same pipeline stage
and the same tensor-, context- and expert-parallel rank. A pipeline stage's extra layers, the last
stage's loss, rank 0's host work show on every replica's rank of that role (or on rank 0's host
phases only, which this signal never judges); a slow GPU, or a slow node, shows on its own ranks.

Without the layout the role groups are the peer groups :mod:`~fleetscope.analyzers.signals.slowness`
inferred from that repetition (blocks of ranks on more than one node; a block on one node of a
multi-node job is a node, not a stage), and ``inferred`` says so for the findings' evidence.

Only ranks on *other* nodes are counted as a rank's role peers: a node's ranks share its faults
(power, cooling, host, the tensor-parallel all-reduce inside the node), so a node's ranks are judged
together against the other nodes' (in a job on one node, every other rank of its role counts).
Computed once per analysis and kept by :class:`~fleetscope.analyzers.signals.window_signals.Signals`.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from fleetscope import contract as c
from fleetscope.analyzers.features import Features
from fleetscope.window.frames import row_codes

#: Fewest role peers on other nodes a rank needs to be judged against them: with one, a pair
#: cannot say which of the two is the odd one.
MIN_ROLE_PEERS = 2
#: Layout labels that place a rank inside its replica (all but ``data_parallel_rank``).
POSITION_LABELS = (
    c.PIPELINE_STAGE_LABEL,
    c.TENSOR_PARALLEL_RANK_LABEL,
    c.CONTEXT_PARALLEL_RANK_LABEL,
    c.EXPERT_PARALLEL_RANK_LABEL,
)


@dataclass(frozen=True)
class RolePeers:
    """Per rank column: its role group (-1: none), its node (a code) and whether the role was inferred."""

    role: np.ndarray
    node: np.ndarray
    inferred: np.ndarray

    def _others(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """(ranks of one role on one node, their role peers on the other nodes), each as column indices."""
        out = []
        for g in np.unique(self.role[self.role >= 0]):
            members = np.nonzero(self.role == g)[0]
            for u in np.unique(self.node[members]):
                here = members[self.node[members] == u]
                out.append((here, members[self.node[members] != u]))
        return out

    def count(self) -> np.ndarray:
        """Per rank: how many role peers it has on other nodes."""
        n = np.zeros(len(self.role), dtype=int)
        for here, others in self._others():
            n[here] = len(others)
        return n

    def slower_than_all(self, x: np.ndarray, margin: float) -> np.ndarray:
        """Per grid time and rank (T x ranks): ``x`` (a slowness ratio, higher is slower) above every
        role peer's on another node by at least ``margin``, with at least :data:`MIN_ROLE_PEERS` of
        them, save the nodes of a second fault: up to a quarter of the other nodes may be as slow
        (structure repeats on every replica; two bad GPUs of one role must not hide each other).

        Per role group and grid time, each node's highest value; the rank must beat the (k+1)-th
        highest of the other nodes' (k = a quarter of them), i.e. the (k+2)-th of all where its own
        node is among the k+1 highest.
        """
        out = np.zeros(x.shape, dtype=bool)
        T = x.shape[0]
        rows = np.arange(T)[:, None]
        for g in np.unique(self.role[self.role >= 0]):
            members = np.nonzero(self.role == g)[0]
            uniq, inv = np.unique(self.node[members], return_inverse=True)
            order = np.argsort(inv, kind="stable")
            starts = np.searchsorted(inv[order], np.arange(len(uniq)))
            xm = x[:, members]
            ok = np.isfinite(xm)
            node_max = np.maximum.reduceat(np.where(ok, xm, -np.inf)[:, order], starts, axis=1)  # T x nodes
            node_n = np.add.reduceat(ok[:, order].astype(np.int64), starts, axis=1)
            seen = (node_n > 0).sum(axis=1)  # nodes with a value
            k = np.maximum(seen - 1, 0) // 4
            desc = -np.sort(-node_max, axis=1)
            pad = np.hstack([desc, np.full((T, 2), -np.inf)])
            kth = pad[rows[:, 0], k][:, None]
            kth1 = pad[rows[:, 0], k + 1][:, None]
            ref = np.where(node_max[:, inv] >= kth, kth1, kth)
            peer_n = node_n.sum(axis=1, keepdims=True) - node_n[:, inv]
            enough = (len(members) - np.bincount(inv)[inv]) >= MIN_ROLE_PEERS
            out[:, members] = enough[None, :] & (peer_n >= MIN_ROLE_PEERS) & ok & (xm >= ref + margin)
        return out

    def slower_than(self, x: np.ndarray, k: int, a: int, b: int, margin: float) -> int:
        """How many of rank ``k``'s role peers on other nodes are slower than it by ``margin`` less,
        in their median over grid times a..b (the evidence's count)."""
        for here, others in self._others():
            if k in here:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    own = np.nanmedian(x[a : b + 1, k])
                    theirs = np.nanmedian(x[a : b + 1, others], axis=0)
                return int(np.sum(np.isfinite(theirs) & (theirs + margin <= own)))
        return 0

    def ratio(self, x: np.ndarray, k: int, a: int, b: int) -> float:
        """Rank ``k``'s ``x`` over grid times a..b against the median of its role peers on other nodes
        (the median over time of the per-time ratio; NaN without peers)."""
        for here, others in self._others():
            if k in here and len(others):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    return float(np.nanmedian(x[a : b + 1, k] / np.nanmedian(x[a : b + 1, others], axis=1)))
        return float("nan")


def layout_positions(feat: Features) -> dict[tuple[str, str], tuple[str, ...]]:
    """(job_id, rank) -> its position in its replica, for ranks that report their data-parallel rank."""
    f = feat.frames.get(c.TRAINING_INFO)
    cols = f.labels.columns if len(f) else ()
    if c.DATA_PARALLEL_RANK_LABEL not in cols or c.PIPELINE_STAGE_LABEL not in cols:
        return {}
    keys = [k for k in POSITION_LABELS if k in cols]
    out: dict[tuple[str, str], tuple[str, ...]] = {}
    for row in zip(
        f.column("job_id"),
        f.column("rank"),
        f.column(c.DATA_PARALLEL_RANK_LABEL),
        *(f.column(k) for k in keys),
        strict=True,
    ):
        job, rank, dp, *pos = (str(v) for v in row)
        if dp != "" and pos[0] != "":
            out[(job, rank)] = tuple(pos)
    return out


def role_peers(feat: Features, groups: np.ndarray) -> RolePeers:
    """Every rank's role group: its position across replicas where its job reports the layout, else
    its peer group ``groups`` (inferred). :attr:`Signals.role_peers` keeps it per analysis."""
    r = feat.ranks
    n = len(groups)
    if not n:
        return RolePeers(np.zeros(0, dtype=int), np.zeros(0, dtype=int), np.zeros(0, dtype=bool))
    jobs = r.keys["job_id"].to_numpy().astype(str)
    ranks = r.keys["rank"].to_numpy().astype(str)
    node, _ = row_codes([r.keys[c.NODE_LABEL].to_numpy(dtype=object)])
    node = np.asarray(node).copy()
    pos = layout_positions(feat)
    role = np.full(n, -1)
    inferred = np.zeros(n, dtype=bool)
    next_id = int(groups.max()) + 1 if n else 0
    for job in feat.jobs:
        cols = np.nonzero(jobs == job)[0]
        if len(set(node[cols].tolist())) == 1:  # a job on one node: its ranks share no node fault apart
            node[cols] = int(node.max()) + 1 + np.arange(len(cols))
        places = [pos.get((job, ranks[k])) for k in cols]
        if pos and None not in places:
            ids: dict[tuple[str, ...], int] = {}
            for k, p in zip(cols, places, strict=True):
                assert p is not None
                role[k] = ids.setdefault(p, next_id + len(ids))
            next_id += len(ids)
        else:
            role[cols] = groups[cols]
            inferred[cols] = True
    return RolePeers(role, node, inferred)
