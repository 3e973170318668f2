"""The derived signals of one window: built once per analysis, each member computed on first read.

:func:`~fleetscope.analyzers.core.analyze` builds one :class:`Signals` from the window's
:class:`~fleetscope.analyzers.features.Features` and hands it to every detector; the report keeps it,
so the job summaries, the HTML report and the service read the same numbers the detectors judged
without computing them again. A member is computed the first time anyone reads it and kept: the
order the detectors run in never changes a value.

A new signal that more than one place reads: one module beside this one that computes it from
``Features`` (and imports no detector), and one cached member here.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from fleetscope.analyzers.features import Features
from fleetscope.analyzers.signals.hardware import gpu_throttle_evidence
from fleetscope.analyzers.signals.mfu import job_mfu
from fleetscope.analyzers.signals.network import NetTrouble, node_network_trouble
from fleetscope.analyzers.signals.ranks import rank_ids, rank_scores
from fleetscope.analyzers.signals.roles import RolePeers, role_peers
from fleetscope.analyzers.signals.serving import ServingSignals, serving_signals
from fleetscope.analyzers.signals.slowness import Slowness, slowness

#: A job's (MFU or tokens/s per grid time, unit, pause mask): see :func:`~.mfu.job_mfu`.
JobMfu = tuple[np.ndarray, str, np.ndarray]
#: Per rank and grid time: (compute seconds per step, slowness score, largest modified z).
RankScores = tuple[np.ndarray, np.ndarray, np.ndarray]


class Signals:
    """Every derived signal of one window (read-only for its readers: they share the arrays)."""

    def __init__(self, features: Features) -> None:
        #: The window's aligned series every signal is computed from.
        self.features = features
        self._job_mfu: dict[str, JobMfu] = {}

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
    def network_trouble(self) -> NetTrouble:
        """Node -> (per-time degraded flag, evidence) of nodes whose EFA devices misbehave."""
        return node_network_trouble(self.features)

    @cached_property
    def serving(self) -> ServingSignals:
        """The serving replicas' latency, throughput and cache signals."""
        return serving_signals(self.features.frames, self.features.rate_window_steps)

    def job_mfu(self, job: str) -> JobMfu:
        """The job's MFU (or tokens/s) per grid time while it trains, its unit and its pause mask."""
        if job not in self._job_mfu:
            self._job_mfu[job] = job_mfu(self.features, job)
        return self._job_mfu[job]
