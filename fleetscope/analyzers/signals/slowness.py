"""How much slower each rank is than its peers, wherever in the step its slowness shows.

Why not just compute time. In synchronous training every rank waits for the slowest at each
collective, and host-side phase timers put that wait wherever the host first blocks
(docs/design.md#where-the-wait-shows): in backward when gradient hooks overlap the all-reduce, at the
optimizer step when the collective sits there, or nowhere when the job syncs CUDA around its phases.
So a slow rank may show *more* forward+backward time than its peers (synced timers), or *less*
backward time (its peers wait in backward while it computes). Four views of a rank against the
median of its peer group cover the cases; a rank is as slow as the largest of them:

* ``compute``: forward+backward seconds per step / peer median (synced timers);
* ``forward``: forward seconds per step / peer median -- forward never holds a gradient collective
  in data-parallel training, so a slow GPU shows here whatever the timers do;
* ``data``: data-loading seconds per step above the peers', as a share of the step (input pipeline);
* ``host``: optimizer-phase seconds above the peers' (host-side work, CPU contention), as a share;
* ``less_wait``: backward or optimizer seconds *below* the peers', as a share of the step -- the
  rank everybody waits for is the one that waits least;
* ``busy``: the rank's GPU's tensor-pipe activity / peer median -- where the wait hides in every
  phase (FSDP's per-layer collectives spread it over forward and backward alike), the slow GPU is
  still the one that stays busy while its peers wait (DCGM profiling metrics, when served).

Peers. Ranks are compared within their peer group: the job, split by pipeline stage. Stages come
from ``training_info``'s ``pipeline_stage`` label when the job reports its layout; otherwise they are
inferred: ranks whose compute level differs as a block from the window's start (the last stage
computes the loss, the first the embedding; docs/design.md#pipeline-structure) form their own
group. A block must hold at least :data:`MIN_GROUP` ranks on more than one node (structure repeats on
every data-parallel replica, a fault does not) or the job's last rank (the last stage's loss), so one
GPU, or one node's ranks, slow from the start is still an outlier of the group it joins.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from fleetscope import contract as c
from fleetscope.analyzers.features import Features
from fleetscope.analyzers.nanstats import first_part_median, nanmedian, rolling_nanmedian

#: Fewest ranks an inferred structural block may have (a lone odd rank is an outlier, not structure).
MIN_GROUP = 4
#: Relative gap in the ranks' early compute level that separates two inferred structural blocks.
#: Healthy GPUs of one model spread by a few percent (Sinha et al., SC'22); stages differ by 10%+.
STRUCTURE_GAP = 0.06


@dataclass
class Slowness:
    """Per rank (column) and grid time (row): each view of slowness, and its robust z-score."""

    groups: np.ndarray  # peer-group id per rank
    step_s: np.ndarray  # wall seconds per step
    compute: np.ndarray  # ratio to the group median
    forward: np.ndarray  # ratio
    data: np.ndarray  # share of the step above the median
    host: np.ndarray  # share
    less_wait: np.ndarray  # share
    busy: np.ndarray  # ratio
    z: dict[str, np.ndarray]
    structure_inferred: bool
    #: Per timer view (compute, forward, less_wait): the standard error of its window median, from
    #: the spread of the rank's own grid steps (steps whose work varies, variable sequence lengths,
    #: make a median of a few of them noisy; docs/design.md#persistence).
    noise: dict[str, np.ndarray] = field(default_factory=dict)

    def score(self) -> np.ndarray:
        """One number per rank and time: 1 + the largest view of slowness (1.0 = like its peers)."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            stack = np.stack(
                [self.compute - 1, self.forward - 1, self.data, self.host, self.less_wait, self.busy - 1],
                axis=0,
            )
            allnan = np.isnan(stack).all(axis=0)
            best = np.nanmax(np.where(np.isnan(stack), -np.inf, stack), axis=0)
        return np.where(allnan, np.nan, 1.0 + best)


def _per_step(x: np.ndarray, steps: np.ndarray, w: int) -> np.ndarray:
    """Seconds per step: the median over the last ``w`` grid steps of each grid step's own average.

    A median, not a window's total over its steps: one garbage-collection pause or one slow batch
    makes one grid step slow, and a mean over the window would carry it for the window's whole
    length; a median needs most of the window slow (docs/design.md#persistence).
    """
    with np.errstate(all="ignore"):
        per = np.where(np.nan_to_num(steps) >= 1, x / steps, np.nan)
    T = per.shape[0]
    if T == 0 or per.shape[1] == 0:
        return per
    pad = np.vstack([np.full((w - 1, per.shape[1]), np.nan), per])
    win = np.lib.stride_tricks.sliding_window_view(pad, w, axis=0)  # T x R x w
    return np.where(_window_count(win) >= max(2, min(w // 2, 4)), rolling_nanmedian(win), np.nan)[:T]


def _grid_per_step(x: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Each grid step's own seconds per step (NaN where no step completed)."""
    with np.errstate(all="ignore"):
        return np.where(np.nan_to_num(steps) >= 1, x / steps, np.nan)


def _median_error(x: np.ndarray, w: int) -> np.ndarray:
    """The standard error of the median of the last ``w`` grid steps of ``x``: 1.2533 x 1.4826 x
    their MAD / sqrt(n) (a median's error is sqrt(pi/2) times a mean's; the MAD estimates sigma)."""
    if x.shape[0] == 0 or x.shape[1] == 0:
        return np.full(x.shape, np.nan)
    pad = np.vstack([np.full((w - 1, x.shape[1]), np.nan), x])
    win = np.lib.stride_tricks.sliding_window_view(pad, w, axis=0)
    med = rolling_nanmedian(win)
    mad = rolling_nanmedian(np.abs(win - med[..., None]))
    with np.errstate(all="ignore"):
        return 1.2533 * 1.4826 * mad / np.sqrt(_window_count(win))


def _window_count(win: np.ndarray) -> np.ndarray:
    return np.sum(~np.isnan(win), axis=2)


def _robust(x: np.ndarray, floor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(x - row median, modified z-score) within one group, the MAD floored at ``floor``."""
    med = nanmedian(x, 1, keepdims=True)
    with np.errstate(all="ignore"):
        mad = nanmedian(np.abs(x - med), 1, keepdims=True)
        mad = np.maximum(mad, floor)
        return x - med, 0.6745 * (x - med) / mad


def layout_stage(feat: Features) -> dict[tuple[str, str], str]:
    """(job_id, rank) -> pipeline stage, from ``training_info`` where the job reports its layout."""
    f = feat.frames.get(c.TRAINING_INFO)
    if not len(f) or "pipeline_stage" not in f.labels.columns:
        return {}
    out: dict[tuple[str, str], str] = {}
    for job, rank, stage in zip(
        f.column("job_id"), f.column("rank"), f.column("pipeline_stage"), strict=True
    ):
        if str(stage) != "":
            out[(str(job), str(rank))] = str(stage)
    return out


def infer_blocks(
    level: np.ndarray, nodes: np.ndarray | None = None, ranks: np.ndarray | None = None
) -> np.ndarray:
    """Structural blocks of ranks by their early compute level (one id per rank, -1 = no level).

    ``nodes`` and ``ranks``: each rank's node and rank number. Structure repeats on every
    data-parallel replica, and a job's replicas sit on different nodes, so a block spanning nodes
    can be a pipeline stage. A block all on one node is a node's ranks slow from the start (a fault)
    and stays in the group it joins, unless it holds the job's last rank: in Megatron's rank order
    the last stage holds the highest ranks, and it alone does much more work (the output layer and
    the loss over the vocabulary; the first stage's embedding lookup is cheap). In a job on one
    node a block of 2 ranks may stand (a small job's last stage).
    """
    ids = np.full(level.shape, -1)
    ok = np.nonzero(np.isfinite(level) & (level > 0))[0]
    one_node = nodes is not None and len(set(nodes[ok].tolist())) == 1
    smallest = 2 if one_node else MIN_GROUP
    if ok.size < 2 * smallest:
        ids[ok] = 0
        return ids
    last = int(ok[np.argmax(ranks[ok])]) if ranks is not None else -1

    def stands(b: list[int]) -> bool:
        if nodes is None:
            return len(b) >= MIN_GROUP
        return len(b) >= smallest and (one_node or len(set(nodes[b].tolist())) > 1 or last in b)

    order = ok[np.argsort(level[ok])]
    vals = level[order]
    cuts = [0]
    for i in range(1, len(vals)):
        if vals[i] / vals[i - 1] - 1 >= STRUCTURE_GAP:
            cuts.append(i)
    cuts.append(len(vals))
    # Merge blocks that cannot be structure into their nearest neighbour.
    blocks = [list(order[cuts[i] : cuts[i + 1]]) for i in range(len(cuts) - 1)]
    merged = True
    while merged and len(blocks) > 1:
        merged = False
        for i, b in enumerate(blocks):
            if not stands(b):
                j = i - 1 if i == len(blocks) - 1 else i + 1
                if 0 < i < len(blocks) - 1:
                    left = level[blocks[i - 1][-1]]
                    right = level[blocks[i + 1][0]]
                    j = i - 1 if level[b[0]] / left < right / level[b[-1]] else i + 1
                lo, hi = min(i, j), max(i, j)
                blocks[lo : hi + 1] = [sorted(blocks[lo] + blocks[hi], key=lambda k: level[k])]
                merged = True
                break
    for g, b in enumerate(blocks):
        ids[b] = g
    return ids


def _early_level(x: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Each rank's median over the first third of its valid history (NaN without one)."""
    return first_part_median(x[:, cols], 3) if len(cols) else np.full(0, np.nan)


def _groups(feat: Features, views: Sequence[np.ndarray]) -> tuple[np.ndarray, bool]:
    """Peer group per rank: the job split by pipeline stage, reported or inferred.

    Inferred from the first of ``views`` (compute, forward, busy) in which the ranks' early levels
    fall into more than one block: where the timers put the pipeline's bubbles and waits decides
    which view shows a stage's different work (with the wait absorbed in forward and backward,
    forward+backward is equal on every stage while forward alone is not).
    """
    r = feat.ranks
    n = views[0].shape[1]
    groups = np.full(n, -1)
    if not n:
        return groups, False
    jobs = r.keys["job_id"].to_numpy().astype(str)
    ranks = r.keys["rank"].to_numpy().astype(str)
    nodes = r.keys[c.NODE_LABEL].to_numpy().astype(str)
    rank_no = np.array([int(x) if x.lstrip("-").isdigit() else -1 for x in ranks])
    stages = layout_stage(feat)
    inferred = False
    next_id = 0
    for job in feat.jobs:
        cols = np.nonzero(jobs == job)[0]
        have = {stages.get((job, ranks[k])) for k in cols}
        if stages and None not in have:
            keys = {s: i for i, s in enumerate(sorted(have, key=str))}
            for k in cols:
                groups[k] = next_id + keys[stages[(job, ranks[k])]]
            next_id += len(keys)
            continue
        blocks = np.zeros(len(cols), dtype=int)
        for x in views:
            b = infer_blocks(_early_level(x, cols), nodes[cols], rank_no[cols])
            if len(set(b.tolist()) - {-1}) > 1:
                blocks, inferred = np.where(b < 0, 0, b), True
                break
        groups[cols] = next_id + blocks
        next_id += int(blocks.max()) + 1
    return groups, inferred


def window_steps(feat: Features) -> int:
    """Grid steps per slowness window: ``rate_window_s``, widened to hold about eight training steps.

    A job whose step is longer than the grid step completes none in most grid steps; its window
    must still hold enough steps for a median (a 40 s step on a 15 s grid: 22 grid steps).
    """
    r = feat.ranks
    steps = np.nansum(np.nan_to_num(r.steps), axis=0)
    secs = np.nansum(np.nan_to_num(r.step_seconds), axis=0)
    good = (steps > 0) & (secs > 0)
    if not good.any():
        return feat.rate_window_steps
    typical = float(np.median(secs[good] / steps[good]))
    return max(feat.rate_window_steps, int(np.ceil(8 * typical / feat.step)))


def _rank_tensor(feat: Features, w: int) -> np.ndarray:
    """Each rank's GPU's tensor-pipe activity, the median over the slowness window (NaN: not served)."""
    r = feat.ranks
    gs = feat.gpus
    T, n = len(feat.times), r.steps.shape[1]
    out = np.full((T, n), np.nan)
    if not gs.tensor.size or not np.isfinite(gs.tensor).any():
        return out
    for k, (node, gpu) in enumerate(
        zip(r.keys[c.NODE_LABEL].astype(str), r.keys["gpu"].astype(str), strict=True)
    ):
        j = gs.col(node, gpu)
        if j is not None:  # only while the rank trains: in a pause every GPU idles alike
            out[:, k] = np.where(np.nan_to_num(r.steps[:, k]) > 0, gs.tensor[:, j], np.nan)
    ones = np.ones_like(out)
    return _per_step(out, ones, w)


def slowness(feat: Features) -> Slowness:
    """Every view of every rank's slowness against its peer group, on the window's grid (the
    straggler detector and the scores both read it: :attr:`Signals.slowness` keeps it per window)."""
    r = feat.ranks
    T = len(feat.times)
    n = r.steps.shape[1] if r.steps.size else 0
    nan = np.full((T, n), np.nan)
    if not n:
        empty = np.zeros((T, 0))
        return Slowness(np.zeros(0, dtype=int), empty, empty, empty, empty, empty, empty, empty, {}, False)
    w = window_steps(feat)
    ph = {p: _per_step(v, r.steps, w) for p, v in r.phases.items()}
    zero = np.zeros((T, n))
    fwd = ph.get("forward", nan)
    bwd = ph.get("backward", nan)
    data = ph.get("data", zero)
    opt = ph.get("optimizer", zero)
    compute = fwd + bwd
    step_s = _per_step(r.step_seconds, r.steps, w)
    tensor = _rank_tensor(feat, w)
    groups, inferred = _groups(feat, (compute, fwd, tensor))
    out = {k: np.full((T, n), np.nan) for k in ("compute", "forward", "data", "host", "less_wait", "busy")}
    z = {k: np.full((T, n), np.nan) for k in out}
    noise = {k: np.full((T, n), np.nan) for k in ("compute", "forward", "less_wait")}
    grid = {
        p: _grid_per_step(r.phases[p], r.steps) for p in ("forward", "backward", "optimizer") if p in r.phases
    }
    grid_step = _grid_per_step(r.step_seconds, r.steps)
    floor_ratio = feat.config.mad_floor
    for g in np.unique(groups):
        cols = groups == g
        if cols.sum() < 3:
            continue
        step_med = nanmedian(
            np.where(np.isnan(step_s[:, cols]), compute[:, cols], step_s[:, cols]), 1, keepdims=True
        )
        with np.errstate(all="ignore"):
            for key, x in (("compute", compute), ("forward", fwd), ("busy", tensor)):
                med = nanmedian(x[:, cols], 1, keepdims=True)
                dev, zz = _robust(x[:, cols], floor_ratio * np.abs(med))
                out[key][:, cols] = 1 + dev / med
                z[key][:, cols] = zz
            floor = floor_ratio * np.abs(step_med)
            dd, zd = _robust(data[:, cols], floor)
            out["data"][:, cols], z["data"][:, cols] = dd / step_med, zd
            do, zo = _robust(opt[:, cols], floor)
            out["host"][:, cols], z["host"][:, cols] = do / step_med, zo
            db, zb = _robust(bwd[:, cols], floor)
            lw = np.fmax(-db, -do) / step_med
            out["less_wait"][:, cols] = lw
            z["less_wait"][:, cols] = np.fmax(-zb, -zo)
            if "forward" in grid and "backward" in grid:
                gf, gb = grid["forward"][:, cols], grid["backward"][:, cols]
                go = grid["optimizer"][:, cols] if "optimizer" in grid else np.zeros_like(gf)
                for key, gx in (("compute", gf + gb), ("forward", gf)):
                    noise[key][:, cols] = _median_error(gx / nanmedian(gx, 1, keepdims=True), w)
                gs = grid_step[:, cols]
                gstep = nanmedian(np.where(np.isnan(gs), gf + gb, gs), 1, keepdims=True)
                # A grid step whose step seconds did not move (every rank's sample missing there)
                # has no wait share: NaN, which the window's median skips, not an infinite noise.
                gstep = np.where(gstep > 0, gstep, np.nan)
                glw = (
                    np.fmax(nanmedian(gb, 1, keepdims=True) - gb, nanmedian(go, 1, keepdims=True) - go)
                    / gstep
                )
                noise["less_wait"][:, cols] = _median_error(glw, w)
    return Slowness(
        groups,
        step_s,
        out["compute"],
        out["forward"],
        out["data"],
        out["host"],
        out["less_wait"],
        out["busy"],
        z,
        inferred,
        noise,
    )
