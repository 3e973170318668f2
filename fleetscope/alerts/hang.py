"""Collective-hang alerts from NCCL RAS (the ``nccl_ras`` collector): they name the rank, node and GPU.

* **A rank behind, frozen.** A communicator whose ranks launched different numbers of collectives
  of one op is normal for an instant (collectives outpace the query); when the fewest and the most
  launched are both unchanged for ``collective_hang_frozen_window`` (launch counts only grow, so
  "equal to a minute ago" is "unchanged for a minute"), the ranks ahead are blocked in a
  collective that the ranks behind never launched (docs/hang.md#live). The alert fires per rank
  named (at most 8 per communicator and op, the furthest behind). A job whose telemetry shows a
  step in that window is making progress and is left alone (an idle side communicator).
* **A rank missing.** RAS gets no data from the rank: considered dead (RAS waited 60 s already) at
  once, unresponsive when it still is ``collective_hang_frozen_window`` later.
"""

from __future__ import annotations

from fleetscope import contract as c
from fleetscope.alerts.config import Thresholds
from fleetscope.alerts.model import Alert, Case, Fire, InputSeries, Labels
from fleetscope.alerts.testdata import HOST, JOB, rank
from fleetscope.times import parse_duration

_COMM = "0x4e0104c2022fa2f9"
_WHO = (
    "rank {{ $labels.rank }} on node {{ $labels.rank_host }} GPU {{ $labels.rank_gpu }} "
    "(job {{ $labels.job_id }})"
)


_VALUE = '{{ printf "%.0f" $value }}'


def _labels(**extra: str) -> Labels:
    return {c.NODE_LABEL: HOST, "job_id": JOB, "comm": _COMM, **extra}


def _who(r: int) -> Labels:
    return {"rank": str(r), "rank_host": "10.1.0.12", "rank_gpu": str(r % 8)}


def _ras(metric: str, values: str, **extra: str) -> InputSeries:
    return InputSeries(metric, _labels(**extra), values)


def alerts(cfg: Thresholds) -> tuple[Alert, ...]:
    w = cfg.collective_hang_frozen_window
    on_op = "on (Hostname, job_id, comm, op)"
    frozen = " ".join(
        f"and {on_op} ({m} == {m} offset {w})"
        for m in (c.NCCL_RAS_COLLECTIVES_MAX, c.NCCL_RAS_COLLECTIVES_MIN)
    )
    last_step = f"time() - max by (job_id) ({c.TRAINING_LAST_STEP_TIMESTAMP})"
    stepping = f"unless on (job_id) ({last_step} < {int(parse_duration(w))})"
    op = {"op": "AllReduce"}
    missing = c.NCCL_RAS_RANK_MISSING
    behind = _labels(**op, **_who(13))

    def skew(max_values: str, min_values: str) -> tuple[InputSeries, ...]:
        return (
            _ras(c.NCCL_RAS_COLLECTIVES_MAX, max_values, **op),
            _ras(c.NCCL_RAS_COLLECTIVES_MIN, min_values, **op),
            _ras(c.NCCL_RAS_RANK_BEHIND, "1x10", **op, **_who(13)),
        )

    return (
        Alert(
            name="FleetscopeCollectiveHangRankBehind",
            expr=f"{c.NCCL_RAS_RANK_BEHIND} {frozen} {stepping}",
            severity="critical",
            summary="A collective hangs, waiting for a rank that never launched it.",
            description=f"{_WHO} is {_VALUE} {{{{ $labels.op }}}} collective(s) behind the other "
            f"ranks of communicator {{{{ $labels.comm }}}}, and no rank's count moved for {w}: the others "
            "are "
            "blocked in a collective it never launched (its code path diverged, or its host is stuck in "
            "the data loader, the GIL or I/O). Read its stack (py-spy dump) before the watchdog kills the "
            "job.",
            cases=(
                Case("a skew frozen for minutes", skew("1000x10", "999x10"), "3m", (Fire(behind, 1),)),
                Case(
                    "a skew that moves (collectives outpace the query)", skew("1000+10x10", "999+10x10"), "3m"
                ),
                Case(
                    "a frozen skew while the job steps (an idle side communicator)",
                    (*skew("1000x10", "999x10"), rank(c.TRAINING_LAST_STEP_TIMESTAMP, "0+60x10", 0)),
                    "3m",
                ),
            ),
        ),
        Alert(
            name="FleetscopeCollectiveHangRankMissing",
            expr=f"{missing} == 2 or ({missing} and {missing} offset {w})",
            severity="critical",
            summary="A collective hangs: a rank of the job no longer answers.",
            description=f"{_WHO} is missing from communicator {{{{ $labels.comm }}}} "
            f"(RAS state {_VALUE}: 1 unresponsive for " + w + ", 2 considered dead): its process died "
            "or froze, and every collective of its communicators waits for it. Check that node's XIDs, "
            "kernel log and the process.",
            cases=(
                Case(
                    "a rank RAS considers dead",
                    (_ras(c.NCCL_RAS_RANK_MISSING, "2x5", **_who(21)),),
                    "0m",
                    (Fire(_labels(**_who(21)), 2),),
                ),
                Case(
                    "a rank unresponsive for 2 minutes",
                    (_ras(c.NCCL_RAS_RANK_MISSING, "1x5", **_who(21)),),
                    "2m",
                    (Fire(_labels(**_who(21)), 1),),
                ),
                Case(
                    "a rank unresponsive for one scrape",
                    (_ras(c.NCCL_RAS_RANK_MISSING, "_x3 1", **_who(21)),),
                    "3m",
                ),
            ),
        ),
    )
