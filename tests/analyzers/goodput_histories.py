"""Job histories written by the real training library on a fake clock, with their true account.

A :class:`History` drives one :class:`~fleetscope.telemetry.monitor.TrainingMonitor` per rank of a
job through a script (steps, blocking and async saves, reported and unreported evaluations,
failures with a hang, the abort, a requeue, a startup and a checkpoint load), and scrapes each
node as an exporter would: at its own offset, every 15-30 s with jitter, missing some scrapes. The
samples are what the writer puts in a rank file (:func:`~fleetscope.telemetry.writer.rank_samples`)
with the exporter's node label; the true account is kept by construction, in GPU-seconds per
category, clipped to the window the recording spans. Nothing here comes from the simulator.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fleetscope import contract as c
from fleetscope.analyzers.report import GOODPUT_CATEGORIES
from fleetscope.simulate.record import write_samples
from fleetscope.simulate.spec import DEFAULT_START, node_name
from fleetscope.telemetry.monitor import TrainingMonitor
from fleetscope.telemetry.writer import rank_samples

PHASES = {"data": 0.08, "forward": 0.3, "backward": 0.5, "optimizer": 0.12}


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class History:
    """One job of ``nodes`` x ``gpn`` ranks; ``step_s`` a healthy step; the window starts at
    ``window_start`` seconds after the history's own start (runs may begin before it)."""

    nodes: int = 8
    gpn: int = 8
    step_s: float = 4.0
    seed: int = 1
    window_start: float = 0.0
    scrape: tuple[float, float] = (15.0, 30.0)
    jitter_s: float = 2.0
    miss: float = 0.01
    pipeline_stages: int = 1
    job_id: str = "4711"
    t: float = 0.0
    gstep: int = 0
    high: int = 0
    saved_step: int | None = None
    attempt: int = 0
    #: Scrape each node's GPU exporter too (DCGM utilisation and SM clock per GPU): a crashed
    #: node's exporter stops answering with it; a failed user process leaves it up (GPUs idle).
    exporter: bool = False
    #: The Unix time of the history's own start (a recording to backfill into a Prometheus starts
    #: shortly before now).
    origin: float = DEFAULT_START
    #: series name -> its label pairs -> ([t], [v])
    samples: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)
        self.clock = Clock(self.origin)
        self.mons: dict[int, TrainingMonitor] = {}
        self.next_scrape = [
            float(self.rng.uniform(0, self.scrape[1])) for _ in range(self.nodes)
        ]  # each node's exporter is scraped at its own offset
        self.interval = [float(self.rng.uniform(*self.scrape)) for _ in range(self.nodes)]
        self.first_scrape: float | None = None
        self.last_scrape = 0.0
        self._book: list[tuple[str, float, float, int]] = []
        #: Nodes whose exporter does not answer (crashed, until they rejoin at the next run).
        self.dead: set[int] = set()
        #: Every GPU spins (a step, or NCCL collectives waiting in a hang) while a process holds it.
        self.busy = True
        self._start_run()

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpn

    # ---- time -----------------------------------------------------------------------------
    def _advance(self, to: float) -> None:
        """Run the scrapes due before ``to``, then set the clock to ``to``."""
        while True:
            n = int(np.argmin(self.next_scrape))
            at = self.next_scrape[n]
            if at > to:
                break
            self.next_scrape[n] = (
                at + self.interval[n] + float(self.rng.uniform(-self.jitter_s, self.jitter_s))
            )
            if at >= self.window_start and self.rng.random() >= self.miss:
                self._scrape(n, at)
        self.t = to
        self.clock.now = self.origin + to

    def _scrape(self, node: int, at: float) -> None:
        if node in self.dead:
            return
        if self.first_scrape is None:
            self.first_scrape = at
        self.last_scrape = max(self.last_scrape, at)
        if self.exporter:
            for gpu in range(self.gpn):
                held = self.busy and (node * self.gpn + gpu) in self.mons
                base = (("gpu", str(gpu)), (c.NODE_LABEL, node_name(node)))
                for metric, value in (
                    (c.DCGM_FI_DEV_GPU_UTIL, 100.0 if held else 0.0),
                    (c.DCGM_FI_DEV_SM_CLOCK, 1980.0 if held else 345.0),
                ):
                    ts, vs = self.samples.setdefault(metric.name, {}).setdefault(base, ([], []))
                    ts.append(self.origin + at)
                    vs.append(value)
        for rank in range(node * self.gpn, (node + 1) * self.gpn):
            m = self.mons.get(rank)
            if m is None:
                continue
            base = (
                ("job_id", self.job_id), ("rank", str(rank)), ("local_rank", str(rank % self.gpn)),
                ("gpu", str(rank % self.gpn)), (c.NODE_LABEL, node_name(node)),
            )  # fmt: skip
            for metric, extra, value in rank_samples(m.snapshot(), "palm"):
                ts, vs = self.samples.setdefault(metric.name, {}).setdefault(base + extra, ([], []))
                ts.append(self.origin + at)
                vs.append(float(value))

    def _book_time(self, category: str, seconds: float, gpus: int | None = None) -> None:
        self._book.append((category, self.t, self.t + seconds, self.gpus if gpus is None else gpus))

    # ---- what the job does -----------------------------------------------------------------
    def _start_run(self) -> None:
        """Every rank's process starts now (a monitor each, its rank file served from now)."""
        for rank in range(self.gpus):
            layout = None
            if self.pipeline_stages > 1:
                per = self.gpus // self.pipeline_stages
                layout = {
                    "pipeline_stage": rank // per,
                    "data_parallel_rank": (rank % per) // self.gpn,
                    "tensor_parallel_rank": rank % self.gpn,
                }
            self.mons[rank] = TrainingMonitor(
                self.job_id,
                rank,
                local_rank=rank % self.gpn,
                gpu=rank % self.gpn,
                directory="/nonexistent",
                layout=layout,
                restart_attempt=self.attempt,
                start=False,
                env={},
                clock=self.clock,
            )

    def steps(self, n: int, slow: float = 1.0) -> History:
        for _ in range(n):
            secs = self.step_s * slow * float(1 + self.rng.normal(0, 0.01))
            self._book_time("productive" if self.gstep >= self.high else "rework", secs)
            self._advance(self.t + secs)
            for m in self.mons.values():
                for p, share in PHASES.items():
                    m.add_phase_time(p, secs * share)
                m.record_step(secs, tokens=4096)
            self.gstep += 1
            self.high = max(self.high, self.gstep)
        return self

    def run_for(self, seconds: float) -> History:
        return self.steps(max(1, round(seconds / self.step_s)))

    def save(self, blocking_s: float) -> History:
        """A checkpoint save; its blocking part (an async save's is short) is a pause."""
        ctxs = [m.checkpoint(step=self.gstep, nbytes=1e9) for m in self.mons.values()]
        for ctx in ctxs:
            ctx.__enter__()
        self._book_time("checkpoint", blocking_s)
        self._advance(self.t + blocking_s)
        for ctx in ctxs:
            ctx.__exit__(None, None, None)
        self.saved_step = self.gstep
        return self

    def evaluate(self, seconds: float, reported: bool = True) -> History:
        """An evaluation; one the job does not report is, to the account, a stall."""
        ctxs = [m.evaluation() for m in self.mons.values()] if reported else []
        for ctx in ctxs:
            ctx.__enter__()
        self._book_time("eval" if reported else "stall", seconds)
        self._advance(self.t + seconds)
        for ctx in ctxs:
            ctx.__exit__(None, None, None)
        return self

    def fail(
        self,
        hang_s: float,
        down_s: float = 90.0,
        startup_s: float = 40.0,
        load_s: float = 20.0,
        node: int | None = None,
    ) -> History:
        """A failure: the job hangs ``hang_s`` (every rank blocked; a crashed ``node``'s ranks
        are gone at once, and its exporter with them), the watchdog aborts it, the scheduler
        requeues it after ``down_s`` (the crashed node rebooted), the new run starts up for
        ``startup_s`` and loads the last checkpoint in ``load_s``. Without ``node`` and ``hang_s``
        0 the processes themselves failed (user code, OOM, a NaN loss): every rank exits at once,
        every exporter stays up with its GPUs idle."""
        if node is not None:
            self.dead.add(node)
            for rank in range(node * self.gpn, (node + 1) * self.gpn):
                self.mons.pop(rank).close()
        self._book_time("stall", hang_s)
        self._advance(self.t + hang_s)
        for m in self.mons.values():
            m.close()
        self.mons = {}
        self._book_time("recovery", down_s + startup_s)
        self._advance(self.t + down_s)
        self.dead.clear()
        self.attempt += 1
        self._start_run()
        self._advance(self.t + startup_s)
        resume = self.saved_step or 0
        if self.saved_step is not None:
            self._book_time("checkpoint", load_s)
            self._advance(self.t + load_s)
            for m in self.mons.values():
                m.checkpoint_loaded(resume, load_s)
        self.gstep = resume
        return self

    # ---- the result ------------------------------------------------------------------------
    def write(self, path: Path) -> None:
        """Write the recording (OpenMetrics, every sample with its scrape's timestamp)."""
        self._advance(self.t + 1e-6)
        samples = {
            name: {labels: (np.asarray(t), np.asarray(v)) for labels, (t, v) in series.items()}
            for name, series in self.samples.items()
        }
        write_samples(samples, path)

    def truth(self, start: float, end: float) -> dict[str, float]:
        """The true account (category -> GPU-seconds) between Unix times ``start`` and ``end``."""
        lo, hi = start - self.origin, end - self.origin
        out = dict.fromkeys(GOODPUT_CATEGORIES, 0.0)
        for cat, a, b, g in self._book:
            out[cat] += max(0.0, min(b, hi) - max(a, lo)) * g
        return out
