"""One NCCL RAS report as bounded series (docs/metrics.md#nccl_ras): the collector and the simulator
both build their series here, so a simulated hang reads exactly as a real one.

Per communicator: its size, its missing, dead and flagged ranks, and per op (``collective_counts``
key) the fewest and most collectives any rank launched and how many ranks are behind the most
advanced one; by name, at most :data:`~fleetscope.contract.NCCL_RAS_MAX_NAMED_RANKS` ranks, the
furthest behind and the missing ones, with their host and GPU as RAS gives them. A job has many
communicators (a 4,096-rank job with tensor parallelism 8 has 512 of them), so only the most
telling ``max_communicators`` are served: those with missing or flagged ranks first, then those
with a skew, then the largest; the order is stable, so a healthy job's series do not churn.

A skew in one report is normal (collectives outpace the query); a skew that stays frozen across
scrapes is a hang. That judgement is the alert's and the detector's (docs/hang.md#live), not this
module's: it only reports what RAS saw.

Standard library only (the node agent).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fleetscope import contract as c
from fleetscope.hang.ras_parse import OP_NAMES, CountGroup, RasComm, RasMissing, RasRank, RasReport, rank_gpu
from fleetscope.labels import cap

#: The ``op`` label of a text report from before NCCL 2.26, whose counts are not broken down by op.
ANY_OP = "any"
#: Communicators served per job by default (``--collector.nccl_ras.max-communicators``).
DEFAULT_MAX_COMMUNICATORS = 16

Labels = tuple[str, ...]


@dataclass
class RasSeries:
    """Rows of one job's RAS series: metric -> [(label values after ``Hostname, job_id``, value)]."""

    rows: dict[c.Metric, list[tuple[Labels, float]]] = field(default_factory=dict)
    #: label values cut to :data:`~fleetscope.labels.MAX_LABEL_CHARS` (a hostile report)
    cut: int = 0

    def add(self, metric: c.Metric, labels: Labels, value: float) -> None:
        self.rows.setdefault(metric, []).append((labels, float(value)))


def _text(value: object, out: RasSeries) -> str:
    text, was_cut = cap("" if value is None else str(value))
    out.cut += was_cut
    return text


def _who(r: RasRank | RasMissing, out: RasSeries) -> Labels:
    gpu = rank_gpu(r)
    rank = "" if r.rank is None or r.rank < 0 else str(r.rank)
    return (rank, _text(r.host, out), "" if gpu is None else str(gpu))


@dataclass
class _Op:
    """What one op of one communicator shows: (min, max, ranks behind, [(rank, behind by)])."""

    low: int
    high: int
    n_behind: int
    named: list[tuple[RasRank, int]]


def _json_ops(comm: RasComm) -> dict[str, _Op]:
    ops: dict[str, _Op] = {}
    for op in OP_NAMES:  # NCCL's five names only: a report cannot invent label values
        counts = [(r, r.counts[op]) for r in comm.ranks if op in r.counts]
        if not counts or not any(n for _, n in counts):
            continue
        high = max(n for _, n in counts)
        behind = sorted(((r, high - n) for r, n in counts if n < high), key=lambda x: (-x[1], x[0].rank))
        low = min(n for _, n in counts)
        ops[op] = _Op(low, high, len(behind), behind[: c.NCCL_RAS_MAX_NAMED_RANKS])
    return ops


def _text_ops(comm: RasComm) -> dict[str, _Op]:
    """A text report (NCCL < 2.28.7) gives op-count groups; it lists a group's ranks only when the
    group is a small outlier, so the ranks named are those it listed."""
    groups: dict[str, list[CountGroup]] = {}
    for g in comm.count_groups:
        op = g.op if g.op in OP_NAMES else ANY_OP if g.op is None else None
        if op is not None:
            groups.setdefault(op, []).append(g)
    ops: dict[str, _Op] = {}
    for op, gs in groups.items():
        high = max(g.count for g in gs)
        behind = [g for g in gs if g.count < high]
        pairs = [(r, high - g.count) for g in behind for r in g.ranks]
        named = sorted(pairs, key=lambda x: (-x[1], x[0].rank))
        ops[op] = _Op(
            min(g.count for g in gs), high, sum(g.n for g in behind), named[: c.NCCL_RAS_MAX_NAMED_RANKS]
        )
    return ops


def _order(comm: RasComm, ops: dict[str, _Op]) -> tuple[int, int, int, str]:
    trouble = bool(comm.missing) or any(r.flagged for r in comm.ranks)
    skew = any(o.n_behind for o in ops.values())
    return (-int(trouble), -int(skew), -(comm.size or len(comm.ranks)), comm.key)


def _comm_labels(report: RasReport) -> dict[str, str]:
    """Communicator key -> its ``comm`` label: the hash, or ``hash/secondary`` where hashes repeat."""
    seen: dict[str, int] = {}
    for comm in report.comms:
        seen[comm.hash] = seen.get(comm.hash, 0) + 1
    return {
        comm.key: comm.hash if seen[comm.hash] == 1 else f"{comm.hash}/{comm.secondary_hash or comm.label}"
        for comm in report.comms
    }


def report_series(report: RasReport, max_communicators: int = DEFAULT_MAX_COMMUNICATORS) -> RasSeries:
    """The series of one report (labels after ``Hostname, job_id``; ``nccl_ras_up`` is the caller's)."""
    out = RasSeries()
    out.add(c.NCCL_RAS_COMMUNICATORS, (), len(report.comms))
    names = _comm_labels(report)
    dead = {(d.host, d.pid) for d in report.dead if d.considered_dead}
    chosen = sorted(
        ((comm, _json_ops(comm) if comm.ranks else _text_ops(comm)) for comm in report.comms),
        key=lambda x: _order(*x),
    )[:max_communicators]
    for comm, ops in chosen:
        cl = (_text(names[comm.key], out),)
        size = comm.size if comm.size is not None else len(comm.ranks) + len(comm.missing)
        if not size and comm.count_groups:  # a text report without its table: the groups add up
            ops_seen = {g.op for g in comm.count_groups}
            size = max(sum(g.n for g in comm.count_groups if g.op == op) for op in ops_seen)
        out.add(c.NCCL_RAS_COMM_RANKS, cl, size)
        out.add(c.NCCL_RAS_COMM_MISSING_RANKS, cl, len(comm.missing))
        is_dead = [m.considered_dead or (m.host, m.pid) in dead for m in comm.missing]
        out.add(c.NCCL_RAS_COMM_DEAD_RANKS, cl, sum(is_dead))
        out.add(c.NCCL_RAS_COMM_ERROR_RANKS, cl, sum(r.flagged for r in comm.ranks))
        pairs = zip(comm.missing, is_dead, strict=True)
        missing = sorted(pairs, key=lambda x: (x[0].rank is None, x[0].rank or 0))
        for m, d in missing[: c.NCCL_RAS_MAX_NAMED_RANKS]:
            out.add(c.NCCL_RAS_RANK_MISSING, cl + _who(m, out), 2 if d else 1)
        for op, o in ops.items():
            ol = cl + (op,)
            out.add(c.NCCL_RAS_COLLECTIVES_MIN, ol, o.low)
            out.add(c.NCCL_RAS_COLLECTIVES_MAX, ol, o.high)
            out.add(c.NCCL_RAS_RANKS_BEHIND, ol, o.n_behind)
            for r, by in o.named:
                out.add(c.NCCL_RAS_RANK_BEHIND, ol + _who(r, out), by)
    _dedupe(out)
    return out


def _dedupe(out: RasSeries) -> None:
    """Keep the first of rows with equal labels (a hostile report can repeat a rank or host)."""
    for metric, rows in out.rows.items():
        seen: set[Labels] = set()
        kept = []
        for labels, value in rows:
            if labels not in seen:
                seen.add(labels)
                kept.append((labels, value))
        out.rows[metric] = kept


def series_bound(max_communicators: int = DEFAULT_MAX_COMMUNICATORS) -> int:
    """Most series one job's report can give (:func:`report_series`), whatever the job's size."""
    per_op = 3 + c.NCCL_RAS_MAX_NAMED_RANKS
    per_comm = 4 + c.NCCL_RAS_MAX_NAMED_RANKS + len(OP_NAMES) * per_op
    return 1 + max_communicators * per_comm
