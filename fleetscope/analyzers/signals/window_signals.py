"""The derived signals of one window: built once per analysis, each member computed on first read.

:func:`~fleetscope.analyzers.core.analyze` builds one :class:`Signals` from the window's
:class:`~fleetscope.analyzers.features.Features` and hands it to every detector; the report keeps it,
so the job summaries, the HTML report and the service read the same numbers the detectors judged
without computing them again. A member is computed the first time anyone reads it and kept: the
order the detectors run in never changes a value.

This is the only door to the signals for the detectors, the reports and the service: the modules
beside it compute, this class caches. A new signal that more than one place reads: one function in a
module beside this one that computes it from ``Features`` (and imports no detector; what it builds on,
such as a job's columns, it takes as arguments from here), and one cached member here. Members that
take arguments (a job, a span of grid times) keep one value per argument. The arrays they return are
shared: read-only (the per-job masks are marked so; copy before changing one).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Set
from functools import cached_property
from typing import Any, TypeVar

import numpy as np

from fleetscope import contract as c
from fleetscope.analyzers.features import Features
from fleetscope.analyzers.signals import jobs
from fleetscope.analyzers.signals.gpu_errors import GpuErrors, gpu_errors
from fleetscope.analyzers.signals.hardware import gpu_throttle_evidence
from fleetscope.analyzers.signals.mfu import job_mfu, training_mask
from fleetscope.analyzers.signals.network import NetTrouble, node_network_trouble
from fleetscope.analyzers.signals.ranks import rank_ids, rank_scores
from fleetscope.analyzers.signals.ras import RasHang, has_ras, ras_hangs
from fleetscope.analyzers.signals.roles import RolePeers, role_peers
from fleetscope.analyzers.signals.serving import (
    Replica,
    ServingSignals,
    replica_buckets,
    serving_replicas,
    serving_signals,
)
from fleetscope.analyzers.signals.slowness import Slowness, slowness

#: A job's (MFU or tokens/s per grid time, unit, pause mask): see :func:`~.mfu.job_mfu`.
JobMfu = tuple[np.ndarray, str, np.ndarray]
#: Per rank and grid time: (compute seconds per step, slowness score, largest modified z).
RankScores = tuple[np.ndarray, np.ndarray, np.ndarray]
T = TypeVar("T")


def _read_only(x: np.ndarray) -> np.ndarray:
    x.flags.writeable = False
    return x


class Signals:
    """Every derived signal of one window (read-only for its readers: they share the arrays)."""

    def __init__(self, features: Features) -> None:
        #: The window's aligned series every signal is computed from.
        self.features = features
        self._kept: dict[tuple[Hashable, ...], Any] = {}

    def _once(self, key: tuple[Hashable, ...], compute: Callable[[], T]) -> T:
        """The value kept under ``key``, computed by ``compute`` the first time it is asked for."""
        if key not in self._kept:
            self._kept[key] = compute()
        value: T = self._kept[key]
        return value

    @cached_property
    def slowness(self) -> Slowness:
        """Every view of every rank's slowness against its peer group."""
        return slowness(self.features)

    @cached_property
    def role_peers(self) -> RolePeers:
        """Every rank's role group (the ranks doing the same work on other replicas)."""
        return role_peers(self.features, self.slowness.groups)

    @cached_property
    def rank_ids(self) -> list[tuple[str, ...]]:
        """Each rank column's (job_id, rank, Hostname, gpu) as strings."""
        return rank_ids(self.features)

    @cached_property
    def rank_scores(self) -> RankScores:
        """Per rank and grid time: compute seconds per step, slowness score, largest modified z."""
        return rank_scores(self.features, self.slowness)

    @cached_property
    def gpu_throttle(self) -> np.ndarray:
        """Per grid time and GPU column: the hardware says the GPU runs slower than it could."""
        return gpu_throttle_evidence(self.features)

    @cached_property
    def gpu_errors(self) -> GpuErrors:
        """Per grid time and GPU column: PCIe replay and corrected-ECC rates, and where they are
        evidence against that GPU alone."""
        return gpu_errors(self.features)

    @cached_property
    def network_trouble(self) -> NetTrouble:
        """Node -> (per-time degraded flag, evidence) of nodes whose EFA devices misbehave."""
        return node_network_trouble(self.features)

    @cached_property
    def serving_replicas(self) -> list[Replica]:
        """The serving replicas: the columns of :attr:`serving` and of :meth:`replica_buckets`."""
        return serving_replicas(self.features.frames)

    @cached_property
    def serving(self) -> ServingSignals:
        """The serving replicas' latency, throughput and cache signals (their histograms' buckets
        gathered through :meth:`replica_buckets`, kept for the other readers of them)."""
        return serving_signals(
            self.features.frames,
            self.features.rate_window_steps,
            replicas=self.serving_replicas,
            buckets=self.replica_buckets,
        )

    def replica_buckets(self, hist: c.Histogram) -> tuple[np.ndarray, list[float]]:
        """A serving histogram's cumulative bucket counts per grid time, replica (the columns of
        :attr:`serving`) and bucket, and the buckets' upper bounds."""
        return self._once(
            ("replica_buckets", hist.bucket),
            lambda: replica_buckets(self.features.frames, hist, self.serving_replicas),
        )

    def job_mfu(self, job: str) -> JobMfu:
        """The job's MFU (or tokens/s) per grid time while it trains, its unit and its pause mask."""
        return self._once(
            ("job_mfu", job),
            lambda: job_mfu(self.features, self.job_columns(job), self.stepping(job), self.training(job)),
        )

    def training(self, job: str) -> np.ndarray:
        """Per grid time: the job was training (not paused, stalled or hung) through this grid step."""
        return self._once(
            ("training", job),
            lambda: _read_only(training_mask(self.features, self.job_columns(job), self.stepping(job))),
        )

    def job_columns(self, job: str | None) -> np.ndarray:
        """Boolean mask of the rank columns of ``job`` (every rank when None)."""
        return self._once(("job_columns", job), lambda: _read_only(jobs.job_columns(self.features, job)))

    def stepping(self, job: str | None = None) -> np.ndarray:
        """Per grid time: did any rank of ``job`` (of any job when None) complete a step in it."""
        return self._once(
            ("stepping", job), lambda: _read_only(jobs.stepping(self.features, self.job_columns(job)))
        )

    def job_stalls(self, job: str | None = None, min_s: float | None = None) -> list[tuple[int, int]]:
        """(first, last) grid indices of periods where ranks of ``job`` report but none completes a
        step (``job`` None: no rank of any job steps), ``min_s`` long at least (default ``stall_s``)."""
        feat = self.features
        least = feat.config.stall_s if min_s is None else min_s
        return self._once(
            ("job_stalls", job, least),
            lambda: jobs.job_stalls(feat, self.job_columns(job), self.stepping(job), least),
        )

    def ras_hangs(self, job: str) -> list[RasHang]:
        """The collective hangs the job's NCCL RAS series show (:mod:`.ras`); none without them."""
        feat = self.features

        def build() -> list[RasHang]:
            if not has_ras(feat.frames, job):
                return []
            k = max(1, round(feat.config.ras_confirm_s / feat.step))
            return ras_hangs(feat.frames, job, k, self.stepping(job))

        return self._once(("ras_hangs", job), build)

    def job_states(self, job: str) -> jobs.JobStates:
        """The job's state at every grid time (running, stalled since, down), from its step counters
        and series: the one account the page, the API and the reports show (:func:`~.jobs.job_states`)."""
        return self._once(
            ("job_states", job),
            lambda: jobs.job_states(self.features, self.job_columns(job), self.stepping(job)),
        )

    def job_nodes(self, job: str) -> frozenset[str]:
        """The nodes the ranks of ``job`` ran on in the window."""
        return self._once(("job_nodes", job), lambda: jobs.job_nodes(self.features, self.job_columns(job)))

    def gpu_busy(self, nodes: Set[str], a: int, b: int) -> float | None:
        """Median GPU utilisation (percent) of the nodes' GPUs over grid times [a, b]; None without
        GPU data."""
        key = frozenset(nodes)
        return self._once(("gpu_busy", key, a, b), lambda: jobs.gpu_busy(self.features, key, a, b))
