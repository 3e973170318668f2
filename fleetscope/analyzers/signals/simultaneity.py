"""Simultaneity is structure: slowness of one role on several replicas at once is the job's work.

In a mixture-of-experts job the expert that is hot changes as the token distribution drifts;
while it is hot, the GPU that holds it computes longer on every replica whose batches route to it,
at the same time, with no clock, thermal, power or link sign, and the hot spot moves on after
minutes (the imbalance MoE routers' auxiliary load-balancing losses fight: Switch Transformer,
Fedus et al. 2021; Megatron-LM's ``--moe-aux-loss-coeff``). Sequence-length imbalance does the same
to data-parallel replicas (Lin et al., OSDI'25, trace SE). A fault is specific to one GPU or node:
it does not start on the same role of several replicas within the same minutes, and it persists or
recurs where it is.

So a rank's slowness without hardware evidence is **workload** while at least one rank of the same
role on another node is slow at the same time (within a rate window), provided the pattern moves
(the job shows such simultaneous slowness on another role too, in the window) or fades (it ends
before the window does). A role is the rank's place in its replica: its role group where the job
reports its layout (pipeline stage and tensor-, context- and expert-parallel rank,
:mod:`~fleetscope.analyzers.signals.roles`), else its local GPU within its peer group (an expert
group per node puts expert *e* on local GPU *e*). Slowness that stays on one role of a few replicas
for the whole window, never moving, is left to the other rules (two GPUs slow from the first step
must not hide each other), and so is any slowness that outlasts the others' on its own GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fleetscope import contract as c
from fleetscope.analyzers.features import Features
from fleetscope.analyzers.signals.roles import POSITION_LABELS, RolePeers, layout_positions
from fleetscope.analyzers.signals.runs import runs_with_persistence
from fleetscope.window.frames import iter_runs

#: The cause that names such slowness: the straggler detector's job-level info finding, and the MFU
#: drop it explains.
WORKLOAD_CAUSE = "workload_imbalance"


@dataclass(frozen=True)
class Imbalance:
    """One stretch of simultaneous slowness on one role of one job: grid times a..b, the most
    replicas (nodes) slow at once, and the rank columns involved."""

    job: str
    role: str
    a: int
    b: int
    replicas: int
    ranks: tuple[int, ...]


@dataclass(frozen=True)
class Workload:
    """Per grid time and rank column: its slowness then is workload; and the stretches in which a
    rank's slowness lasted long enough to have been a straggler without this rule (the ones worth
    an info finding), per job."""

    mask: np.ndarray
    spans: list[Imbalance]


def workload_slowness(
    feat: Features,
    roles: RolePeers,
    groups: np.ndarray,
    ids: list[tuple[str, ...]],
    slow: np.ndarray,
    hw: np.ndarray,
) -> Workload:
    """Which of ``slow`` (per grid time and rank: slow without hardware evidence, or with it where
    ``hw``) is workload: see the module docstring."""
    T, R = slow.shape
    mask = np.zeros((T, R), dtype=bool)
    if not R:
        return Workload(mask, [])
    w = feat.rate_window_steps
    s = slow & ~hw
    near = _dilate(s, w)
    keys = _role_keys(roles, groups, ids)
    labels = _role_labels(feat, roles, ids)
    raw: list[Imbalance] = []
    for key in dict.fromkeys(keys):
        members = np.array([k for k in range(R) if keys[k] == key])
        node = roles.node[members]
        uniq = np.unique(node)
        if len(uniq) < 2:
            continue
        per_node = np.stack([near[:, members[node == u]].any(axis=1) for u in uniq], axis=1)
        at_once = per_node.sum(axis=1)
        for a, b in iter_runs(at_once >= 2):
            involved = members[s[a : b + 1, members].any(axis=0)]
            if b - a + 1 < feat.persistence_steps or len(involved) < 2:
                continue
            raw.append(Imbalance(key[0], labels[int(members[0])], a, b, int(at_once[a : b + 1].max()),
                                 tuple(int(k) for k in involved)))  # fmt: skip
    spans = []
    for job in dict.fromkeys(sp.job for sp in raw):
        mine = [sp for sp in raw if sp.job == job]
        moves = len({sp.role for sp in mine}) >= 2
        for sp in mine:
            fades = sp.b < T - 1 - w
            if moves or fades:
                mask[sp.a : sp.b + 1, list(sp.ranks)] = True
                if any(
                    runs_with_persistence(s[sp.a : sp.b + 1, k], feat.persistence_steps, bridge=w)
                    for k in sp.ranks
                ):
                    spans.append(sp)
    return Workload(mask, spans)


def _dilate(x: np.ndarray, w: int) -> np.ndarray:
    """``x`` true within ``w`` grid steps either side of a true value (per column)."""
    cs = np.vstack([np.zeros((1, x.shape[1])), np.cumsum(x, axis=0)])
    idx = np.arange(x.shape[0])
    lo = np.maximum(idx - w, 0)
    hi = np.minimum(idx + w + 1, x.shape[0])
    return (cs[hi] - cs[lo]) > 0


def _role_keys(roles: RolePeers, groups: np.ndarray, ids: list[tuple[str, ...]]) -> list[tuple]:
    """Per rank column: (job, role) where the layout names it, else (job, peer group, local GPU)."""
    out: list[tuple] = []
    for k, (job, _rank, _node, gpu) in enumerate(ids):
        if roles.inferred[k] or roles.role[k] < 0:
            out.append((job, "group", int(groups[k]), gpu))
        else:
            out.append((job, "role", int(roles.role[k])))
    return out


def _role_labels(feat: Features, roles: RolePeers, ids: list[tuple[str, ...]]) -> list[str]:
    """Per rank column: its role in words (the expert-parallel rank where the layout has one)."""
    pos = layout_positions(feat)
    info = feat.frames.get(c.TRAINING_INFO)
    cols = [k for k in POSITION_LABELS if len(info) and k in info.labels.columns]
    names = {
        c.PIPELINE_STAGE_LABEL: "pipeline stage",
        c.TENSOR_PARALLEL_RANK_LABEL: "tensor-parallel rank",
        c.CONTEXT_PARALLEL_RANK_LABEL: "context-parallel rank",
        c.EXPERT_PARALLEL_RANK_LABEL: "expert-parallel rank",
    }
    out = []
    for k, (job, rank, _node, gpu) in enumerate(ids):
        p = pos.get((job, rank))
        if roles.inferred[k] or p is None:
            out.append(f"local GPU {gpu}")
            continue
        named = dict(zip(cols, p, strict=False))
        if named.get(c.EXPERT_PARALLEL_RANK_LABEL, "") != "":
            out.append(f"expert-parallel rank {named[c.EXPERT_PARALLEL_RANK_LABEL]} (GPU {gpu})")
        else:
            parts = [f"{names[n]} {v}" for n, v in named.items() if v != ""]
            out.append(", ".join(parts) or f"local GPU {gpu}")
    return out
