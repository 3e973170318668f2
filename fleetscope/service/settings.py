"""What one service instance is configured with (``fleetscope serve``'s flags, or a test's choice)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fleetscope.service.plan import DEFAULT_MAX_FRACTION


@dataclass
class ServiceSettings:
    prometheus: str = ""
    interval: float = 30.0
    window: float = 1800.0
    #: Verdicts older than this count as stale even if no cycle failed (default: 3 intervals + 10 s).
    stale_after: float | None = None
    token: str | None = None
    scheduler: Literal["slurm", "kubernetes"] = "slurm"
    max_fraction: float = DEFAULT_MAX_FRACTION
    #: (K, N) when this replica analyzes shard K of N (``--shard``); None: the whole fleet.
    shard: tuple[int, int] | None = None
    #: Start the background loop with the app (tests drive ``runner.run_once()`` themselves).
    run_analysis: bool = True

    @property
    def staleness_limit(self) -> float:
        return self.stale_after if self.stale_after is not None else 3 * self.interval + 10
