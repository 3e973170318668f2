"""One hang analysis over the paths given: Flight Recorder dump directories and RAS report files.

Each directory is one job's dump set (:mod:`.fr_load`, :mod:`.fr_reason`); every RAS file is a
poll (or a file of polls) of the same job, read as one timeline (:mod:`.ras_parse`,
:mod:`.ras_reason`). Where RAS knows a rank's node, process and GPU (the largest communicator,
whose ranks are the job's ranks when it is the world group), the Flight Recorder culprits get them.
"""

from __future__ import annotations

import os
from pathlib import Path

from fleetscope.errors import FleetscopeError
from fleetscope.hang.fr_load import load_dir
from fleetscope.hang.fr_reason import analyze_dumps
from fleetscope.hang.model import REASONS, Hang, HangResult, RankRef
from fleetscope.hang.ras_parse import RasMissing, RasParseError, RasRank, RasReport, load_reports
from fleetscope.hang.ras_reason import DEFAULT_CONFIRM_S, analyze_reports, rank_ref


def _ras_places(reports: list[RasReport]) -> dict[int, RankRef]:
    """Rank -> where it runs, from the latest report's largest communicator (the world group)."""
    for rep in reversed(reports):
        comms = [c for c in rep.comms if c.ranks or c.missing]
        if not comms:
            continue
        world = max(comms, key=lambda c: (c.size or 0, len(c.ranks) + len(c.missing)))
        out: dict[int, RankRef] = {}
        members: list[RasRank | RasMissing] = [*world.ranks, *world.missing]
        for r in members:
            if r.rank is not None and r.rank >= 0:
                out[r.rank] = rank_ref(r)
        return out
    return {}


def _read_dir(p: Path, result: HangResult) -> bool:
    ds = load_dir(p)
    result.notes.extend(ds.problems)
    result.inputs["flight_recorder"].append(
        {
            "path": str(p),
            "ranks": sorted(ds.dumps),
            "unreadable": sorted(ds.unreadable),
            "versions": sorted({d.version for d in ds.dumps.values()}),
        }
    )
    hangs, notes = analyze_dumps(ds)
    result.hangs.extend(hangs)
    result.notes.extend(notes)
    return bool(ds.dumps)


def _read_ras(p: Path, result: HangResult, reports: list[RasReport]) -> bool:
    if not os.path.exists(p):
        result.notes.append(f"{p}: no such file or directory")
        return False
    try:
        reps, notes = load_reports(p)
    except RasParseError as exc:
        result.notes.append(f"{p}: {exc}; not used")
        return False
    reports.extend(reps)
    result.notes.extend(notes)
    result.inputs["nccl_ras"].append(
        {
            "path": str(p),
            "polls": len(reps),
            "formats": sorted({r.format for r in reps}),
            "nccl_versions": sorted({r.nccl_version for r in reps if r.nccl_version}),
        }
    )
    return True


def _merge_ras(result: HangResult, ras_hangs: list[Hang]) -> None:
    """RAS's "launched everywhere, completed nowhere" names no rank; dumps that name one replace it."""
    named = result.culprits()
    for h in ras_hangs:
        if named and h.reason == "launched_not_completed" and not h.waiting_for:
            result.notes.append(
                f"RAS: {h.op} #{h.seq} of {h.group} launched everywhere, completed nowhere; "
                "the Flight Recorder dumps name the ranks"
            )
            continue
        result.hangs.append(h)


def _place(result: HangResult, places: dict[int, RankRef]) -> None:
    for h in result.hangs:
        for r in h.waiting_for:
            where = places.get(r.rank) if r.rank is not None else None
            if where is not None:
                r.host = r.host or where.host
                r.pid = r.pid if r.pid is not None else where.pid
                r.gpu = r.gpu if r.gpu is not None else where.gpu


def analyze_paths(paths: list[str], confirm_s: float = DEFAULT_CONFIRM_S) -> HangResult:
    """Read every path (a dump directory or a RAS file) and decide; FleetscopeError if none is usable."""
    result = HangResult(inputs={"flight_recorder": [], "nccl_ras": [], "confirm_s": confirm_s})
    reports: list[RasReport] = []
    usable = 0
    for path in paths:
        p = Path(path)
        usable += _read_dir(p, result) if p.is_dir() else _read_ras(p, result, reports)
    if not usable:
        why = "; ".join(result.notes) if result.notes else "give dump directories or RAS files"
        raise FleetscopeError(f"no usable input: {why}")
    ras_hangs, ras_notes = analyze_reports(reports, confirm_s)
    result.notes.extend(ras_notes)
    _merge_ras(result, ras_hangs)
    _place(result, _ras_places(reports))
    result.hangs.sort(key=lambda h: (not h.confirmed, REASONS.index(h.reason), h.group, h.seq or 0))
    return result
