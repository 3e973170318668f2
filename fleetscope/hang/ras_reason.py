"""Which ranks a hung job waits for, from NCCL RAS reports (docs/hang.md#nccl-ras).

Per communicator of the latest report:

* ranks in ``missing_ranks`` (and processes RAS calls dead): RAS gets no answer from them; dead
  when RAS says so (60 s without an answer), else unresponsive;
* ranks with an error flag (``async_error``, ``abort_flag``, an ``init_state`` that is an error);
* per op type, the ranks whose ``collective_counts`` are *behind* the most advanced rank: they
  never launched the collective the others are blocked in (not the ranks ahead, which RAS's own
  text prints, NVIDIA/nccl#1911);
* all counts equal and unchanged across polls: every rank launched the collective and none
  completed it, which RAS cannot see into (NVIDIA/nccl#1730): said so, no rank guessed.

A skew in one report is normal (collectives outpace the query), so one report gives *suspects*;
a skew frozen across polls at least ``confirm_s`` apart is a confirmed hang (ras.rst).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fleetscope.hang.model import Confidence, Hang, RankRef, Reason
from fleetscope.hang.ras_parse import (
    INIT_STATES_OK,
    NCCL_RESULTS,
    OP_NAMES,
    CountGroup,
    RasComm,
    RasMissing,
    RasRank,
    RasReport,
    rank_gpu,
)

#: Default time a skew must stay frozen to be confirmed (``--confirm``): RAS declares a silent
#: peer dead after 60 s (ras.rst), and a minute of no progress is far beyond a collective's time.
DEFAULT_CONFIRM_S = 60.0


def rank_ref(r: RasRank | RasMissing) -> RankRef:
    """A rank RAS names, with its host, process and GPU."""
    dev = rank_gpu(r)
    return RankRef(rank=r.rank, host=r.host, pid=r.pid, gpu=None if dev is None else str(dev))


def _op(name: str | None) -> str:
    return OP_NAMES.get(name or "", f"nccl:{name}" if name else "nccl:collective")


@dataclass
class _Timeline:
    """The polls in time order and how long a property held up to the latest one."""

    reports: list[RasReport]

    @property
    def latest(self) -> RasReport:
        return self.reports[-1]

    def held_for(self, still: Callable[[RasReport], bool]) -> float | None:
        """Seconds ``still`` has held, from the earliest poll of the unbroken run that ends at
        the latest poll (None: the polls carry no times, or only one poll)."""
        first = self.latest
        for rep in reversed(self.reports[:-1]):
            if not still(rep):
                break
            first = rep
        if first is self.latest or first.time is None or self.latest.time is None:
            return None
        return self.latest.time - first.time


def _comm(rep: RasReport, comm: RasComm) -> RasComm | None:
    return next((c for c in rep.comms if c.key == comm.key and c.label == comm.label), None)


def _counts(comm: RasComm, op: str) -> dict[int, int]:
    return {r.rank: r.counts[op] for r in comm.ranks if op in r.counts}


def _confirm(held: float | None, confirm_s: float) -> tuple[bool, str]:
    if held is None:
        return False, "one report: a suspect until the same state is seen in a later poll"
    if held >= confirm_s:
        return True, f"unchanged for {held:.0f} s over the polls (>= {confirm_s:.0f} s)"
    return False, f"unchanged for {held:.0f} s so far (< {confirm_s:.0f} s to confirm)"


def _name(comm: RasComm) -> str:
    return f"{comm.label} ({comm.hash})" if comm.label else comm.hash


def _hang(comm: RasComm | None, op: str, seq: int | None, who: list[RankRef], reason: Reason,
          confirmed: bool, confidence: Confidence, evidence: list[str]) -> Hang:  # fmt: skip
    return Hang(
        group="job" if comm is None else _name(comm),
        op=op,
        seq=seq,
        waiting_for=who,
        reason=reason,
        confirmed=confirmed,
        confidence=confidence,
        evidence=evidence,
        source="nccl_ras",
    )


def _flags(r: RasRank) -> list[str]:
    """A rank's error flags, in words (empty: none)."""
    bits = []
    if r.async_error:
        bits.append(f"async_error={r.async_error} ({NCCL_RESULTS.get(r.async_error, '?')})")
    if r.abort_flag:
        bits.append("abort_flag")
    if r.init_state not in INIT_STATES_OK:
        bits.append(f"init_state={r.init_state} ({NCCL_RESULTS.get(r.init_state, '?')})")
    return bits


def _missing_hang(tl: _Timeline, comm: RasComm, confirm_s: float) -> Hang:
    ids = {m.rank for m in comm.missing}
    held = tl.held_for(lambda r: (c := _comm(r, comm)) is not None and ids <= {m.rank for m in c.missing})
    dead = any(m.considered_dead for m in comm.missing)
    ok, why = _confirm(held, confirm_s)
    states = ", ".join(
        f"rank {m.rank}: {'considered dead' if m.considered_dead else 'unresponsive'}" for m in comm.missing
    )
    size = comm.size or "?"
    ev = [f"RAS has no data from {len(comm.missing)} of {size} ranks ({states})"]
    ev.append("RAS declares a silent peer dead after 60 s" if dead else why)
    who = [rank_ref(m) for m in comm.missing]
    return _hang(comm, "nccl:collective", None, who, "dead", dead or ok, "high" if dead else "medium", ev)


def _flag_hang(tl: _Timeline, comm: RasComm, flagged: list[RasRank], confirm_s: float) -> Hang:
    ids = {r.rank for r in flagged}
    held = tl.held_for(
        lambda rep: (c := _comm(rep, comm)) is not None and ids <= {r.rank for r in c.ranks if r.flagged}
    )
    ok, why = _confirm(held, confirm_s)
    ev = [f"rank {r.rank}: {', '.join(_flags(r))}" for r in flagged]
    return _hang(
        comm, "nccl:collective", None, [rank_ref(r) for r in flagged], "unknown", ok, "medium", [*ev, why]
    )


def _skew_hangs(tl: _Timeline, comm: RasComm, confirm_s: float) -> list[Hang]:
    out = []
    for op in sorted({op for r in comm.ranks for op in r.counts}):
        counts = _counts(comm, op)
        if len(counts) < 2 or max(counts.values()) == min(counts.values()):
            continue
        top, low = max(counts.values()), min(counts.values())
        behind = [r for r in comm.ranks if counts.get(r.rank, top) < top]

        def frozen(rep: RasReport, op: str = op, counts: dict[int, int] = counts) -> bool:
            c = _comm(rep, comm)
            return c is not None and _counts(c, op) == counts

        ok, why = _confirm(tl.held_for(frozen), confirm_s)
        at = ", ".join(f"{r.rank} at #{counts[r.rank]}" for r in behind[:16])
        n_ahead = len(counts) - len(behind)
        ev = [f"{op}: {n_ahead} rank(s) launched up to #{top}; rank(s) {at} never launched #{low + 1}"]
        who = [rank_ref(r) for r in behind]
        out.append(
            _hang(comm, _op(op), low + 1, who, "not_launched", ok, "high" if ok else "medium", [*ev, why])
        )
    return out


def _frozen_hang(tl: _Timeline, comm: RasComm, confirm_s: float) -> Hang | None:
    """Every count equal and unmoved for ``confirm_s``: launched everywhere, completed nowhere
    (or no collective issued): a suspect that names no rank."""
    ops = sorted({op for r in comm.ranks for op in r.counts})
    now = {op: _counts(comm, op) for op in ops}
    if len(tl.reports) < 2 or not any(v for counts in now.values() for v in counts.values()):
        return None
    held = tl.held_for(
        lambda rep: (c := _comm(rep, comm)) is not None and {op: _counts(c, op) for op in ops} == now
    )
    if held is None or held < confirm_s:
        return None
    op = max(ops, key=lambda o: max(now[o].values(), default=0))
    n = max(now[op].values(), default=0)
    ev = [
        f"every rank launched {op} #{n} and no count moved for {held:.0f} s: either that collective "
        "never completed (RAS counts launches, not completions: NVIDIA/nccl#1730) or the job issued no "
        "collective in that time; RAS cannot tell which rank -- read Flight Recorder dumps or the "
        "nodes' hardware evidence"
    ]
    return _hang(comm, _op(op), n, [], "launched_not_completed", False, "low", ev)


def _json_comm(tl: _Timeline, comm: RasComm, confirm_s: float) -> tuple[list[Hang], list[str]]:
    hangs: list[Hang] = []
    if comm.missing:
        hangs.append(_missing_hang(tl, comm, confirm_s))
    flagged = [r for r in comm.ranks if r.flagged]
    if flagged:
        hangs.append(_flag_hang(tl, comm, flagged, confirm_s))
    skew = _skew_hangs(tl, comm, confirm_s)
    hangs.extend(skew)
    if not hangs and (frozen := _frozen_hang(tl, comm, confirm_s)) is not None:
        hangs.append(frozen)
    return hangs, []


def _text_skew(
    tl: _Timeline, comm: RasComm, op: str | None, groups: list[CountGroup], confirm_s: float
) -> Hang:
    top = max(g.count for g in groups)
    low = min(g.count for g in groups)
    behind_groups = [g for g in groups if g.count < top]
    listed = [r for g in behind_groups for r in g.ranks]
    n_behind = sum(g.n for g in behind_groups)
    ev = [f"{g.n} rank(s) launched up to {op or 'collective'} #{g.count}" for g in groups]
    named = [rank_ref(r) for r in listed]
    conf: Confidence = "medium"
    if len(listed) < n_behind:
        ahead = {r.rank for g in groups if g.count == top for r in g.ranks}
        n_ahead = sum(g.n for g in groups if g.count == top)
        if comm.size and len(ahead) == n_ahead and n_ahead + n_behind == comm.size:
            named = [RankRef(r) for r in range(comm.size) if r not in ahead]
            ev.append("RAS listed the ranks ahead (NVIDIA/nccl#1911); the ones behind are the rest")
        else:
            conf = "low"
            ev.append(
                f"RAS listed {len(listed)} of the {n_behind} rank(s) behind (it details only a small "
                "outlier group; `ncclras -v` prints more)"
            )
    sig = [(g.count, g.n) for g in groups]

    def frozen(rep: RasReport) -> bool:
        c = _comm(rep, comm)
        return c is not None and [(g.count, g.n) for g in c.count_groups if g.op == op] == sig

    ok, why = _confirm(tl.held_for(frozen), confirm_s)
    return _hang(comm, _op(op), low + 1, named, "not_launched", ok, conf, [*ev, why])


def _text_comm(tl: _Timeline, comm: RasComm, confirm_s: float) -> tuple[list[Hang], list[str]]:
    hangs: list[Hang] = []
    notes: list[str] = []
    if comm.missing:
        dead = any(m.considered_dead for m in comm.missing)
        ids = ", ".join(str(m.rank) for m in comm.missing)
        ev = [
            f"RAS: missing communicator data from rank(s) {ids}" + (" (its process is dead)" if dead else "")
        ]
        who = [rank_ref(m) for m in comm.missing]
        hangs.append(
            _hang(comm, "nccl:collective", None, who, "dead", dead, "high" if dead else "medium", ev)
        )
    by_op: dict[str | None, list[CountGroup]] = {}
    for g in comm.count_groups:
        by_op.setdefault(g.op, []).append(g)
    hangs.extend(
        _text_skew(tl, comm, op, groups, confirm_s) for op, groups in by_op.items() if len(groups) > 1
    )
    for status, n, ranks in comm.status_groups:
        if status == "ABORT" and ranks:
            ev = [f"{n} rank(s) aborted their communicator"]
            hangs.append(
                _hang(
                    comm,
                    "nccl:collective",
                    None,
                    [rank_ref(r) for r in ranks],
                    "unknown",
                    False,
                    "medium",
                    ev,
                )
            )
    if comm.status_groups and not any(s == "ABORT" for s, _, _ in comm.status_groups):
        mix = ", ".join(f"{n} {s}" for s, n, _ in comm.status_groups)
        notes.append(
            f"{_name(comm)}: ranks in different states ({mix}): a communicator starting or finishing"
        )
    return hangs, notes


def analyze_reports(
    reports: list[RasReport], confirm_s: float = DEFAULT_CONFIRM_S
) -> tuple[list[Hang], list[str]]:
    """Hangs and suspects in a series of RAS polls of one job (the latest poll decides)."""
    if not reports:
        return [], []
    timed = sorted((r for r in reports if r.time is not None), key=lambda r: r.time or 0.0)
    untimed = [r for r in reports if r.time is None]
    status = [r for r in timed + untimed if r.format in ("json", "text")]
    hangs: list[Hang] = []
    notes: list[str] = []
    if status:
        tl = _Timeline(status)
        for comm in tl.latest.comms:
            found, more = (_json_comm if comm.ranks else _text_comm)(tl, comm, confirm_s)
            hangs.extend(found)
            notes.extend(more)
        if tl.latest.timeouts:
            notes.append(f"{tl.latest.source}: RAS met {tl.latest.timeouts} timeout(s) gathering the report")
        for h in hangs:
            h.since = tl.latest.time
    hangs.extend(_dead_processes(reports, hangs))
    return hangs, notes


def _dead_processes(reports: list[RasReport], hangs: list[Hang]) -> list[Hang]:
    """Processes RAS calls dead or unreachable that no communicator hang names already."""
    seen = {(m.host, m.pid) for h in hangs for m in h.waiting_for}
    out = []
    for d in (d for r in reports for d in r.dead):
        if (d.host, d.pid) in seen:
            continue
        seen.add((d.host, d.pid))
        state = "considered dead" if d.considered_dead else "unreachable"
        ev = [f"RAS: process {d.pid} on node {d.host} (GPU {d.nvml_dev}) is {state}"]
        conf: Confidence = "high" if d.considered_dead else "medium"
        out.append(_hang(None, "nccl:collective", None, [rank_ref(d)], "dead", d.considered_dead, conf, ev))
    return out
