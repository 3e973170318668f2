"""What the ``nccl_ras`` series say about a job's collectives (docs/hang.md#live).

Per communicator and op the exporter serves the fewest and most collectives any rank launched, how
many ranks are behind, and by name the furthest-behind and the missing ranks. A skew in one sample is
normal (collectives outpace the query); a hang is a skew whose fewest and most launched stay equal
for ``confirm_s`` (launch counts only grow), or a rank RAS considers dead (value 2), or one missing
for ``confirm_s``. All counts equal and frozen is every rank having launched and none completed, or
an idle job: a suspect that RAS cannot name a rank for (NVIDIA/nccl#1730).

Read by the hang detector; nothing here decides what to do about it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fleetscope import contract as c
from fleetscope.window.frames import Frames, MetricFrame

_COMM_KEY = (c.NODE_LABEL, "job_id", c.NCCL_RAS_COMM_LABEL)
_OP_KEY = (*_COMM_KEY, c.NCCL_RAS_OP_LABEL)


@dataclass(frozen=True)
class RasRank:
    """A rank RAS names: its number, its host as RAS gives it, its GPU (``nvml_dev``)."""

    rank: int | None
    host: str
    gpu: str


@dataclass
class RasHang:
    """One collective hang RAS shows for a job."""

    reason: str  # dead | not_launched | launched_not_completed
    #: Grid index where the frozen state began, and where it was confirmed.
    onset: int
    confirmed: int
    comm: str
    op: str | None
    ranks: list[RasRank] = field(default_factory=list)
    detail: str = ""


def _job_frame(frames: Frames, metric: str, job: str) -> MetricFrame | None:
    """The series of ``metric`` that belong to ``job`` (None: the metric has no job label)."""
    f = frames.get(metric)
    if not len(f) or "job_id" not in f.labels:
        return None
    return f.select(job_id=job)


def _key(f: MetricFrame, j: int, key: tuple[str, ...]) -> tuple[str, ...]:
    row = f.labels.iloc[j]
    return tuple(str(row.get(k, "")) for k in key)


def _rank(f: MetricFrame, j: int) -> RasRank:
    """The rank a series names (its ``rank``, ``rank_host`` and ``rank_gpu`` labels)."""
    rank, host, gpu = _key(f, j, ("rank", c.NCCL_RAS_RANK_HOST_LABEL, c.NCCL_RAS_RANK_GPU_LABEL))
    return RasRank(int(rank) if rank.isdigit() else None, host, gpu)


def _rows(frames: Frames, metric: str, job: str, key: tuple[str, ...]) -> dict[tuple[str, ...], np.ndarray]:
    f = _job_frame(frames, metric, job)
    if f is None:
        return {}
    return {_key(f, j, key): f.values[:, j] for j in range(len(f))}


def _who(
    frames: Frames, metric: str, job: str, key: tuple[str, ...], i: int
) -> list[tuple[tuple[str, ...], RasRank, float]]:
    f = _job_frame(frames, metric, job)
    if f is None:
        return []
    return [
        (_key(f, j, key), _rank(f, j), float(f.values[i, j]))
        for j in range(len(f))
        if not np.isnan(f.values[i, j])
    ]


def _frozen_since(x: np.ndarray, i: int) -> int:
    """The first index of the run of equal values ending at ``i`` (NaN gaps inside are skipped)."""
    v = x[i]
    k = i
    for j in range(i - 1, -1, -1):
        if np.isnan(x[j]):
            continue
        if x[j] != v:
            break
        k = j
    return k


def has_ras(frames: Frames, job: str) -> bool:
    """Whether the window holds RAS series of ``job``."""
    return bool(_rows(frames, c.NCCL_RAS_UP, job, ("job_id",)))


def ras_hangs(frames: Frames, job: str, confirm_steps: int, stepping: np.ndarray) -> list[RasHang]:
    """The hangs RAS shows for ``job``, each at the first grid index it is confirmed.

    ``stepping[i]``: the job completed a step at grid index ``i`` (a job that steps is not hung,
    whatever an idle side communicator shows)."""
    k = max(1, confirm_steps)
    T = len(frames.times)
    moving = np.asarray(stepping, dtype=bool) if len(stepping) == T else np.zeros(T, dtype=bool)
    return _frozen(frames, job, k, moving) + _missing(frames, job, k)


def _frozen(frames: Frames, job: str, k: int, moving: np.ndarray) -> list[RasHang]:
    """Per communicator and op, the first time its fewest and most launched held for ``k`` steps."""
    out: list[RasHang] = []
    low = _rows(frames, c.NCCL_RAS_COLLECTIVES_MIN, job, _OP_KEY)
    for key, mx in _rows(frames, c.NCCL_RAS_COLLECTIVES_MAX, job, _OP_KEY).items():
        mn = low.get(key)
        if mn is None:
            continue
        for i in range(k, len(mx)):
            a, b = mx[i], mn[i]
            if np.isnan(a) or np.isnan(b) or not a > 0 or mx[i - k] != a or mn[i - k] != b:
                continue
            if moving[i - k : i + 1].any():
                continue
            onset = max(_frozen_since(mx, i), _frozen_since(mn, i))
            if a > b:
                behind = _who(frames, c.NCCL_RAS_RANK_BEHIND, job, _OP_KEY, i)
                named = [w for kk, w, _ in behind if kk == key]
                detail = (
                    f"{key[3]}: ranks launched up to #{a:.0f}, the named ones only up to #{b:.0f}, frozen"
                )
                out.append(RasHang("not_launched", onset, i, key[2], key[3], named, detail))
            else:
                detail = (
                    f"{key[3]}: every rank launched #{a:.0f} and no count moved: launched everywhere, "
                    "completed nowhere (RAS counts launches, not completions)"
                )
                out.append(RasHang("launched_not_completed", onset, i, key[2], key[3], [], detail))
            break
    return out


def _missing(frames: Frames, job: str, k: int) -> list[RasHang]:
    """Ranks RAS considers dead, or that stayed missing for ``k`` steps."""
    out: list[RasHang] = []
    missing = _job_frame(frames, c.NCCL_RAS_RANK_MISSING, job)
    if missing is None:
        return out
    for j in range(len(missing)):
        x = missing.values[:, j]
        seen = np.nonzero(~np.isnan(x))[0]
        if not seen.size:
            continue
        onset = int(seen[0])
        hit = next((i for i in seen if x[i] >= 2 or (i - onset >= k and not np.isnan(x[i - k]))), None)
        if hit is None:
            continue
        who = _rank(missing, j)
        state = "considered dead by RAS" if x[hit] >= 2 else "unresponsive"
        (comm,) = _key(missing, j, (c.NCCL_RAS_COMM_LABEL,))
        out.append(RasHang("dead", onset, int(hit), comm, None, [who], f"missing from RAS: {state}"))
    return out
