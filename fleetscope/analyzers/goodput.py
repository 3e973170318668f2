"""The goodput account: where each job's GPU-hours went in the window, and who cost them.

The whole is the job's GPUs x time over the window (its ranks on the grid; while the job is down,
the allocation it held before). It is split into :data:`~fleetscope.analyzers.report.GOODPUT_CATEGORIES`:

* ``checkpoint``: save time (``training_checkpoint_save_seconds_total``, else the ``checkpoint``
  phase) and load time on restart (``training_checkpoint_load_seconds_total``);
* ``eval``: the ``eval`` phase (evaluation the job reported);
* ``stall`` and ``recovery``: the time no step completes and no phase counts (a *gap*). A gap in
  which the job stops (every rank's series gone, a counter reset, the global step going back, the
  restart attempt going up) is a failure: the time from the last step to the abort is ``stall``
  (the hang), from the abort to the first step after the restart ``recovery`` (requeue, startup,
  communicator setup). A gap without a restart is a ``stall`` (a pause the job did not report
  too); the job's first start is recovery;
* ``rework``: steps recomputed after resuming from an older checkpoint (from the new run's resume
  point S0 up to the highest step S1 reached before: the step time until S1 is reached again;
  without the global step, the steps since the last checkpoint began before the failure);

The library books a pause's seconds when it ends; that time is moved back onto the grid
intervals it was spent in (:func:`_backfill`), so a pause longer than a scrape is booked once.
* ``slowdown``: while a straggler or MFU-drop finding of the job is open, the step time above the
  job's baseline step (the median step of the rest of the window);
* ``productive``: the rest of the step time; ``idle``: what no counter explains.

Step, phase and checkpoint time come from counters (exact, whatever the grid); only the edges of a
gap are estimated from the grid (half a step of a stopped series). Every badput line names the
finding it is attributed to. See docs/analyzers.md#goodput.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from fleetscope import contract as c
from fleetscope.analyzers.checkpoint_advice import advise
from fleetscope.analyzers.config import DetectorConfig
from fleetscope.analyzers.features import Features
from fleetscope.analyzers.findings import Finding
from fleetscope.analyzers.job_trace import JobTrace
from fleetscope.analyzers.report import GOODPUT_CATEGORIES, BadputItem, GoodputAccount
from fleetscope.analyzers.signals.window_signals import Signals
from fleetscope.window.frames import iter_runs

#: The series the account reads besides the detectors' (the loaders fetch them too).
GOODPUT_METRICS: tuple[str, ...] = (
    c.TRAINING_GLOBAL_STEP,
    c.TRAINING_CHECKPOINT_SAVES,
    c.TRAINING_CHECKPOINT_SAVE_SECONDS,
    c.TRAINING_CHECKPOINT_LOAD_SECONDS,
    c.TRAINING_CHECKPOINT_LAST_SUCCESS_TIMESTAMP,
    c.TRAINING_RESTART_ATTEMPT,
    c.TRAINING_RESUMED_FROM_STEP,
)
#: A rank absent for at most this many grid steps missed scrapes; it still holds its GPU.
BRIDGE_STEPS = 3
#: Slowness findings whose open time counts as slowdown, most specific first.
SLOW_KINDS: tuple[str, ...] = ("straggler", "failing_node", "mfu_drop")
#: Findings that explain a stall or a restart, most specific first.
FAIL_KINDS: tuple[str, ...] = ("failing_node", "job_hang")


@dataclass
class _Gap:
    a: int  # first interval of the gap
    b: int  # last interval of the gap
    gpu_s: float = 0.0  # its GPU-seconds, the edges of the busy runs around it included
    restart: bool = False
    stall: float = 0.0
    recovery: float = 0.0
    rework: float = 0.0
    #: A save or an evaluation still in progress at the window's end (booked when it ends).
    pause: float = 0.0
    pause_kind: str = ""


def _bridge(present: np.ndarray, k: int) -> np.ndarray:
    """Fill each column's interior absences of at most ``k`` grid steps (missed scrapes), or while
    other ranks of the job report (an exporter gap: the rank runs on, unseen)."""
    out = present.copy()
    others = present.sum(axis=1)
    for j in range(present.shape[1]):
        col = present[:, j]
        seen = np.nonzero(col)[0]
        if seen.size < 2:
            continue
        for a, b in iter_runs(~col):
            if a > seen[0] and b < seen[-1] and (b - a + 1 <= k or (others[a : b + 1] > 0).all()):
                out[a : b + 1, j] = True
    return out


def finding_label(f: Finding) -> str:
    """How a badput line names its finding: ``XID 79 on node X gpu 3``, ``straggler thermal_throttle ...``."""
    xid = next((k for k in f.evidence if k.startswith("XID ")), None)
    what = f"{xid} ({f.cause})" if xid else f"{f.kind} {f.cause}"
    where = f" on {f.node}" if f.node else f" of job {f.job_id}" if f.job_id else ""
    gpu = f" gpu {f.gpu}" if f.gpu is not None else ""
    return f"{what}{where}{gpu}"


def goodput_accounts(signals: Signals, findings: Sequence[Finding]) -> dict[str, GoodputAccount]:
    """The goodput account of every job of the window (jobs without a rank on the grid: none),
    each with its checkpoint advice."""
    feat = signals.features
    traces = {job: JobTrace.of(feat, signals.job_columns(job)) for job in feat.jobs}
    return accounts_of(traces, findings, feat.times, feat.step, window_nodes(feat), feat.config)


def window_nodes(feat: Features) -> set[str]:
    """The nodes of the window (any GPU or rank series): the advice's node-hours."""
    return {str(n) for n in feat.gpus.keys[c.NODE_LABEL]} | {str(n) for n in feat.ranks.keys[c.NODE_LABEL]}


def job_traces(
    signals: Signals, own_start: float, before: dict[str, JobTrace] | None = None
) -> dict[str, JobTrace]:
    """One chunk of a streamed window: each job's trace over the chunk's own grid times
    (``before``: the chunks' before, whose last counter values it continues)."""
    feat = signals.features
    before = before or {}
    return {job: JobTrace.of(feat, signals.job_columns(job), own_start, before.get(job)) for job in feat.jobs}


def accounts_of(
    traces: dict[str, JobTrace],
    findings: Sequence[Finding],
    times: np.ndarray,
    step: float,
    nodes: set[str],
    config: DetectorConfig,
) -> dict[str, GoodputAccount]:
    """The accounts (with advice) of the jobs of ``traces`` over the window's grid ``times``, read
    against the window's ``findings``; ``nodes``: the window's nodes (the advice's node-hours)."""
    out = {}
    node_hours = len(nodes) * float(times[-1] - times[0]) / 3600.0
    jobs = []
    for job, trace in traces.items():
        j = _Job(trace.on_grid(times, step), step, config)
        acct = job_account(config, findings, job, j)
        if acct is not None:
            jobs.append((job, j, acct))
    failures = len(infra_failures(findings, [cause for _, j, _ in jobs for _, cause in j.restart_causes]))
    for job, j, acct in jobs:
        save_s, saves, current = _checkpoints(j)
        if save_s is not None:
            acct.advice = advise(
                save_s,
                saves,
                len(j.nodes),
                acct.gpus,
                failures,
                node_hours,
                current,
                config.failure_prior_node_days,
            )
        out[job] = acct
    return out


def infra_failures(findings: Sequence[Finding], restart_causes: Sequence[Finding | None]) -> list[Finding]:
    """The window's infrastructure failures, one finding each: every critical ``failing_node``
    finding (one per broken node, whether or not a job restarted on it), and every ``job_hang``
    that a job's restart followed (its collectives stuck with the GPUs spinning: the fabric or a
    GPU, though no node could be named). A restart without either (user code, OOM, a NaN loss, an
    operator: the processes exited with every node's exporter up) is no failure of the hardware."""
    out: dict[int, Finding] = {
        id(f): f for f in findings if f.kind == "failing_node" and f.severity == "critical"
    }
    for f in restart_causes:
        if f is not None and f.kind in FAIL_KINDS and f.severity == "critical":
            out.setdefault(id(f), f)
    return sorted(out.values(), key=lambda f: (f.start, f.node or ""))


def _checkpoints(j: _Job) -> tuple[float | None, int, float | None]:
    """(mean save seconds, saves seen, median wall time between save starts) of the job."""
    runs = [(a, b) for a, b in iter_runs(j.save > 0)]
    whole = [(a, b) for a, b in runs if a > j.first + 1 and b < j.last]
    if not runs:
        return None, 0, None
    use = whole or runs
    mean = float(
        np.mean([j.save[a : b + 1].sum() / max(float(np.mean(j.g[a : b + 1])), 1.0) for a, b in use])
    )
    starts = [j.t[a] for a, _ in runs]
    current = float(np.median(np.diff(starts))) if len(starts) > 1 else None
    return mean, len(runs), current


def _mine(f: Finding, job: str, nodes: set[str]) -> bool:
    return f.job_id == job or (f.job_id is None and f.node in nodes)


class _Job:
    """The per-interval counters of one job; interval ``i`` is grid time ``t[i-1]`` to ``t[i]``."""

    def __init__(self, trace: JobTrace, step: float, config: DetectorConfig) -> None:
        """``trace``: the job's counters on the window's grid (:class:`JobTrace`)."""
        self.config = config
        self.trace = trace
        self.t = trace.t
        self.step = step
        present = trace.present
        self.raw_g = present.sum(axis=1)
        #: Grid steps between samples (1 unless the grid is finer than the scrape interval).
        self.spacing = _sample_spacing(trace.steps > 0)
        g = _bridge(present, BRIDGE_STEPS * self.spacing).sum(axis=1).astype(float)
        seen = np.nonzero(g > 0)[0]
        self.first, self.last = (int(seen[0]), int(seen[-1])) if seen.size else (0, -1)
        #: The job is down: no rank on the grid for at least a sample's spacing (on a grid finer
        #: than the scrape interval every rank is absent between its samples: not down then).
        self.down = np.zeros(len(self.t), dtype=bool)
        for a, b in iter_runs(self.raw_g == 0):
            if b - a + 1 >= self.spacing:
                self.down[a : b + 1] = True
        self.g = _hold(g, self.down, self.first, self.last)
        self.nodes = set(trace.nodes)
        #: Each restart gap with the finding that explains it (None: no infrastructure cause).
        self.restart_causes: list[tuple[_Gap, Finding | None]] = []
        self.steps = trace.steps.copy()
        self.job_steps = trace.job_steps.copy()
        self.train = trace.train.copy()
        self.ck_telemetry = trace.ck_telemetry
        self.save = np.maximum(trace.ck_phase, trace.save_inc) if self.ck_telemetry else trace.ck_phase.copy()
        self.load = trace.load_inc.copy()
        self.ev = trace.ev.copy()
        self.gstep = None if np.isnan(trace.gstep).all() else trace.gstep
        self.resumed = None if np.isnan(trace.resumed).all() else trace.resumed
        self.attempt = None if np.isnan(trace.attempt).all() else trace.attempt
        #: The job's first start is in the window: no rank before its first grid time, or its
        #: ranks' step counters still at 0 there (the processes had just started).
        self.started_in_window = self.first > 0 or not bool(trace.stepped_raw[self.first])
        iv = np.zeros(len(self.t), dtype=bool)
        iv[self.first + 1 : self.last + 1] = True
        self.iv = iv
        self.whole = np.where(iv, self.g * self.step, 0.0)
        for name in ("train", "save", "load", "ev", "steps", "job_steps"):
            setattr(self, name, np.where(iv, getattr(self, name), 0.0))
        paused = self.save + self.load + self.ev
        busy = (self.steps > 0) | (paused > 0)
        rem = self.whole - self.train - paused
        self.rem = _backfill(rem, busy, paused, self.first)

    def step_time(self) -> float:
        """The median wall time of one step over the intervals that complete steps."""
        ok = self.steps > 0
        return float(np.median(self.train[ok] / self.steps[ok])) if ok.any() else self.step

    def resets(self) -> np.ndarray:
        """Per grid time: did the job restart there (a step counter or the global step fell, a new
        rank series began, the restart attempt went up)."""
        out = self.trace.falls.copy()
        # A rank series that begins after the job has stepped (before: its nodes' first scrapes,
        # at their own offsets, as the job starts).
        stepped = np.nonzero(self.steps > 0)[0]
        since = int(stepped[0]) if stepped.size else len(self.t)
        born = np.rint((np.array(list(self.trace.born.values())) - self.t[0]) / self.step).astype(int)
        for i in born[(born > self.first) & (born > since)]:
            out[i] = True
        return out


def _hold(g: np.ndarray, down: np.ndarray, first: int, last: int) -> np.ndarray:
    """The job's GPUs per grid time (``g``: with missed scrapes bridged), held while it is
    ``down`` (it waits for its allocation).

    The held count is the most GPUs the job had since it was last down. It also fills the grid
    times before it went down in which it had fewer: a crashed node's ranks vanish at the crash
    while the others hang until the abort, and nodes scraped at different offsets vanish one
    after the other; the allocation is whole until the job is down.
    """
    g = g.copy()
    since = first
    for a, b in iter_runs(down[: last + 1]):
        if a <= first:
            continue
        held = float(g[since:a].max())
        g[a : b + 1] = held
        i = a - 1
        while i > since and g[i] < held:
            g[i] = held
            i -= 1
        since = b + 1
    return g


def _backfill(rem: np.ndarray, busy: np.ndarray, paused: np.ndarray, first: int) -> np.ndarray:
    """The time no counter explains, per interval (``rem``), with counted time moved back to
    the intervals it was spent in.

    The library books a pause (a save, a load, an evaluation: ``paused``) when it ends: a pause
    longer than the grid step shows as intervals without any counter, then one interval whose
    counters hold more time than it has. That excess goes back, interval by interval, until what
    the earlier intervals left unexplained has taken it: the pause is booked once, where it
    happened. The step time of a scrape (on a grid finer than the scrape interval, or counters a
    little ahead of the grid) goes back only over the idle intervals just before it.
    """
    out = rem.copy()
    for p in range(first + 2, len(out)):  # step time: over the idle run just before, no further
        if out[p] >= 0 or not busy[p]:
            continue
        need = min(-out[p], max(-(out[p] + paused[p]), 0.0))
        i = p - 1
        while need > 0 and i > first and not busy[i]:
            take = min(max(out[i], 0.0), need)
            out[i] -= take
            out[p] += take
            need -= take
            i -= 1
    carry = 0.0
    for i in range(len(out) - 1, first, -1):  # pause time: as far back as it takes
        v = out[i] - carry
        if v >= 0 or i == first + 1:
            out[i], carry = v, 0.0
            continue
        movable = min(-v, paused[i] + carry)
        out[i], carry = v + movable, movable
    return out


def _gaps(j: _Job) -> tuple[list[_Gap], float]:
    """The gaps (no step, no phase) of the job, each with its GPU-seconds and its split, and the
    GPU-seconds of the busy runs' edges that belong to no gap (a step begun before the window or
    still running at its end: productive)."""
    busy = (j.steps > 0) | (j.save + j.load + j.ev > 0)
    idle = j.iv & ~busy
    spacing = j.spacing
    gaps = [_Gap(a, b) for a, b in iter_runs(idle) if b - a + 1 >= spacing or a == j.first + 1 or b >= j.last]
    for a, b in iter_runs(idle):
        if b - a + 1 < spacing and a != j.first + 1 and b < j.last:
            busy[a : b + 1] = True  # between two samples on a grid finer than the scrapes
    edges = 0.0
    tstep = j.step_time()
    resets = j.resets()
    runs = list(iter_runs(j.iv & busy))
    for p, q in runs:
        total = float(j.rem[p : q + 1].sum())
        before = next((g for g in gaps if g.b == p - 1), None)
        after = next((g for g in gaps if g.a == q + 1), None)
        head = 0.0
        if before is None and after is None:
            edges += total
        elif after is None:
            edges += total - min(max(float(j.rem[p]) - j.g[p] * tstep / 2, 0.0), max(total, 0.0))
        if before is not None:
            head = min(max(float(j.rem[p]) - j.g[p] * tstep / 2, 0.0), max(total, 0.0))
            before.gpu_s += head
        if after is not None:
            after.gpu_s += total - head
            after.stall = total - head  # provisional: the run's tail, the step the gap lost
    for g in gaps:
        g.gpu_s += float(j.rem[g.a : g.b + 1].sum())
        _split(j, g, resets)
    return gaps, edges


def _sample_spacing(busy: np.ndarray) -> int:
    """Grid steps between the job's counter updates while it runs: 1 on a grid no finer than
    the scrape interval; on a finer one (``serve --step 5`` of 15 s scrapes) the idle grid times
    between two samples are no gap."""
    idx = np.nonzero(busy)[0]
    if idx.size < 3:
        return 1
    return max(1, int(np.median(np.diff(idx))))


def _split(j: _Job, g: _Gap, resets: np.ndarray) -> None:
    """Split a gap into stall (last step to the abort) and recovery (abort to the first step)."""
    tail = g.stall
    g.stall = 0.0
    leading = g.a == j.first + 1
    absent = [i for i in range(g.a, g.b + 1) if j.down[i]]
    reset = [i for i in range(g.a, min(g.b + 2, len(j.t))) if resets[i]]
    g.restart = bool(absent or reset)
    total = max(g.gpu_s, 0.0)
    if leading and not tail:
        g.recovery = total  # the job's start: startup until its first step
        return
    if not g.restart and g.b >= j.last:
        start = float(j.t[g.a - 1])
        due = [
            (off, kind)
            for kind, counter in (("checkpoint", j.save), ("eval", j.ev))
            if (off := _due(j, counter, start)) is not None
        ]
        if due:
            g.pause, g.pause_kind = total, min(due)[1]
            return
    if not g.restart:
        # No step and no counter, no restart: a stall, whether the job hung for a while, or paused
        # (an evaluation, a blocking checkpoint) without reporting it; a reported pause's time is
        # already taken out of the gap (_backfill).
        g.stall = total
        return
    gprev = j.g[g.a - 1] if g.a > 0 else j.g[g.a]
    last_step = j.t[g.a - 1] - (tail / gprev if gprev else 0.0)
    # A stopped series stays on the grid one step more: it stopped ~1.5 steps before it went.
    abort = j.t[absent[0]] - 1.5 * j.step if absent else j.t[reset[0] - 1]
    g.stall = min(max(gprev * (abort - last_step), 0.0), total)
    g.recovery = total - g.stall


def _due(j: _Job, counter: np.ndarray, start: float) -> float | None:
    """How far from ``start`` a pause of the job's regular kind (saves, evaluations: ``counter``)
    was due to begin (None: not due then). The window's last gap is then that pause in progress,
    which the library books only when it ends. The period is the median spacing of the pauses
    seen, or, after one pause of a job that started in the window, its time since the start."""
    idx = np.nonzero(counter > 0)[0]
    if not len(idx):
        return None
    starts = j.t[idx] - counter[idx] / np.maximum(j.g[idx], 1.0)
    if len(idx) > 1:
        period = float(np.median(np.diff(starts)))
    elif j.started_in_window:
        period = float(starts[0] - j.t[j.first])
    else:
        return None
    off = abs(start - (starts[-1] + period))
    return off if off <= 2 * j.step + 0.1 * period else None


def _rework(j: _Job, g: _Gap, per: np.ndarray, stop: int | None = None) -> float:
    """Steps recomputed after the restart gap ``g`` (up to grid time ``stop``, the next restart);
    their GPU-seconds go into ``g.rework`` and, per interval, into ``per``.

    The resume point is the new run's (``training_resumed_from_step`` once the run steps, else its
    global step less the steps of its first interval): the gauge holds for a process's life, so
    values from before the restart are the failed run's own resume point, not this one.
    """
    nxt = g.b + 1
    if nxt >= len(j.t) or not j.iv[nxt]:
        return 0.0
    stop = len(j.t) if stop is None else stop
    lost = 0.0
    if j.gstep is not None and np.isfinite(j.gstep[: g.a]).any():
        s1 = float(np.nanmax(j.gstep[: g.b + 1][np.isfinite(j.gstep[: g.b + 1])]))
        end = min(nxt + 4, stop, len(j.t))
        resumed = j.resumed[nxt:end] if j.resumed is not None else None
        steps = [i for i in range(nxt, end) if j.job_steps[i] > 0 and np.isfinite(j.gstep[i])]
        fresh = j.gstep[nxt:end][np.isfinite(j.gstep[nxt:end])]
        if resumed is not None and np.isfinite(resumed).any():
            s0 = float(resumed[np.isfinite(resumed)][0])
        elif steps:
            s0 = float(j.gstep[steps[0]]) - float(j.job_steps[steps[0]])
        elif fresh.size:  # the new run's global step before its first step (0: a fresh start)
            s0 = float(fresh[0])
        else:
            s0 = s1
        lost = max(s1 - s0, 0.0)
    else:
        ck = [i for i in range(j.first + 1, g.a) if j.save[i] > 0]
        if ck:
            u = ck[-1]
            while u - 1 in ck:
                u -= 1
            lost = float(j.job_steps[u + 1 : g.a].sum())
    need = lost
    i = nxt
    while need > 1e-9 and i < stop and j.iv[i]:
        n = j.steps[i] / j.g[i] if j.g[i] else 0.0  # the mean rank's steps, as ``train`` sums them
        if n > 0:
            frac = min(1.0, need / n)
            per[i] += frac * j.train[i]
            g.rework += frac * j.train[i]
            need -= frac * n
        i += 1
    return lost


def _slowdown(
    j: _Job, findings: Sequence[Finding], job: str, rework: np.ndarray
) -> tuple[float | None, list[tuple[Finding, float, float, float]]]:
    """The job's baseline step time and, per slowness finding, (finding, GPU-seconds over the
    baseline, first, last grid time it counted)."""
    mid = j.t - j.step / 2
    owner = np.full(len(j.t), -1)
    slow = [
        f
        for k in SLOW_KINDS
        for f in findings
        if f.kind == k and f.severity != "info" and _mine(f, job, j.nodes)
    ]
    for n, f in reversed(list(enumerate(slow))):  # the most specific finding owns an interval
        end = j.t[-1] + j.step if f.end is None else f.end
        owner[(mid >= f.start) & (mid <= end) & j.iv] = n
    clean = j.iv & (j.steps > 0) & (owner < 0) & (rework == 0)
    per_step = np.where(j.steps > 0, j.train / np.maximum(j.steps, 1e-9), np.nan)
    if clean.sum() >= 5:
        base = float(np.median(per_step[clean]))
    elif (j.steps > 0).any():
        base = float(np.percentile(per_step[j.steps > 0], 25))
    else:
        return None, []
    out = []
    for n, f in enumerate(slow):
        sel = (owner == n) & (rework == 0)
        if not sel.any():
            continue
        lost = float((j.train[sel] - j.steps[sel] * base).sum())
        idx = np.nonzero(sel)[0]
        if lost > 0:
            out.append((f, lost, float(j.t[idx[0] - 1]), float(j.t[idx[-1]])))
    return base, out


def _cause(gap: _Gap, j: _Job, findings: Sequence[Finding], job: str, lookback: float) -> Finding | None:
    """The finding that explains a gap: a failing node or a hang that began around it."""
    lo, hi = j.t[max(gap.a - 1, 0)] - lookback, j.t[min(gap.b + 1, len(j.t) - 1)]
    for kind in FAIL_KINDS:
        hits = [
            f
            for f in findings
            if f.kind == kind and f.severity != "info" and _mine(f, job, j.nodes) and lo <= f.start <= hi
        ]
        if hits:
            return min(hits, key=lambda f: (f.severity != "critical", f.start))
    return None


def job_account(
    config: DetectorConfig, findings: Sequence[Finding], job: str, j: _Job
) -> GoodputAccount | None:
    """The goodput account of ``job`` (``j``: its counters; None when none of its ranks is on the grid)."""
    if j.last <= j.first:
        return None
    rework = np.zeros(len(j.t))
    gaps, edges = _gaps(j)
    restarts = [g for g in gaps if g.restart]
    lookback = config.hang_lookback_s
    j.restart_causes = [(g, _cause(g, j, findings, job, lookback)) for g in restarts]
    for n, g in enumerate(restarts):
        _rework(j, g, rework, restarts[n + 1].a if n + 1 < len(restarts) else None)
    base, slow = _slowdown(j, findings, job, rework)
    parts = dict.fromkeys(GOODPUT_CATEGORIES, 0.0)
    parts["checkpoint"] = float(j.save.sum() + j.load.sum())
    parts["eval"] = float(j.ev.sum())
    for g in gaps:
        if g.pause_kind:
            parts[g.pause_kind] += g.pause
    parts["stall"] = sum(g.stall for g in gaps)
    parts["recovery"] = sum(g.recovery for g in gaps)
    parts["rework"] = float(rework.sum())
    parts["slowdown"] = sum(x[1] for x in slow)
    parts["productive"] = float(j.train.sum()) - parts["rework"] - parts["slowdown"] + edges
    whole = float(j.whole.sum())
    parts["idle"] = whole - sum(v for k, v in parts.items() if k != "idle")
    if parts["idle"] < 0:  # counters a little ahead of the grid: the steps were productive
        parts["productive"] += parts["idle"]
        parts["idle"] = 0.0
    parts["idle"] = whole - sum(v for k, v in parts.items() if k != "idle")
    items = _items(j, gaps, slow, findings, job)
    useful = parts["productive"] + parts["slowdown"]
    span = float(j.t[j.last] - j.t[j.first])
    return GoodputAccount(
        job_id=job,
        start=float(j.t[j.first]),
        end=float(j.t[j.last]),
        gpus=whole / span if span else 0.0,
        whole_gpu_seconds=whole,
        gpu_seconds=parts,
        effective_training_ratio=useful / whole if whole else 0.0,
        goodput_ratio=parts["productive"] / whole if whole else 0.0,
        baseline_step_s=None if base is None else round(base, 4),
        restarts=len(restarts),
        inputs={"checkpoint_telemetry": j.ck_telemetry, "global_step": j.gstep is not None},
        items=items,
    )


def _items(j: _Job, gaps: list[_Gap], slow: list, findings: Sequence[Finding], job: str) -> list[BadputItem]:
    """Every badput line of the job, attributed to its finding where one explains it."""
    lookback = j.config.hang_lookback_s
    items = []
    for g in gaps:
        f = _cause(g, j, findings, job, lookback)
        label = finding_label(f) if f is not None else None
        who = label or (
            "the job's start"
            if g.a == j.first + 1 and not g.restart
            else "a restart no finding explains"
            if g.restart
            else "a stall no finding explains"
        )
        a, b = float(j.t[g.a - 1]), float(j.t[g.b])
        why = ""
        if g.restart and f is not None and f.kind in FAIL_KINDS and f.severity == "critical":
            why = (
                f"; counted as a failure: {label}"
                if f.kind == "failing_node"
                else "; counted as a failure: a hang (collectives stuck, GPUs spinning), no node named"
            )
        elif g.restart:
            why = (
                "; not counted as a failure: no infrastructure cause (no node went down or broke; user "
                "code, OOM, a NaN loss or an operator restarted it)"
            )
        for cat in ("stall", "recovery", "rework"):
            v = getattr(g, cat)
            if v > 0:
                text = f"{who} cost {v / 3600:.2f} GPU-hours of {cat}" + (why if cat == "recovery" else "")
                items.append(BadputItem(cat, v, a, b, label, text))
        if g.pause > 0:
            what = "a checkpoint save" if g.pause_kind == "checkpoint" else "an evaluation"
            text = f"{what} in progress at the window's end cost {g.pause / 3600:.2f} GPU-hours"
            items.append(BadputItem(g.pause_kind, g.pause, a, b, None, text))
    for f, lost, a, b in slow:
        label = finding_label(f)
        items.append(
            BadputItem("slowdown", lost, a, b, label, f"{label} cost {lost / 3600:.2f} GPU-hours of slowdown")
        )
    ck, ld, ev = float(j.save.sum()), float(j.load.sum()), float(j.ev.sum())
    if ck > 0:
        items.append(BadputItem("checkpoint", ck, text=f"checkpoint saves cost {ck / 3600:.2f} GPU-hours"))
    if ld > 0:
        items.append(BadputItem("checkpoint", ld, text=f"checkpoint loads cost {ld / 3600:.2f} GPU-hours"))
    if ev > 0:
        items.append(BadputItem("eval", ev, text=f"evaluation cost {ev / 3600:.2f} GPU-hours"))
    items.sort(key=lambda x: -x.gpu_seconds)
    return items
