"""Parse NCCL RAS reports (``ncclras``): the JSON of ``-f json`` (NCCL >= 2.28.7), the text
report of any release, monitor-mode events, and files of successive polls with their times.

Standard library only: the node exporter's live RAS collector imports this module, so it stays
free of pandas and of the window layer. The client protocol (docs/hang.md#nccl-ras): connect to
``NCCL_RAS_ADDR`` (default ``localhost:28028``), send ``CLIENT PROTOCOL 2``, expect ``SERVER
PROTOCOL 2``, then ``TIMEOUT <s>``, ``SET FORMAT json`` and ``STATUS`` (or ``VERBOSE STATUS``);
the reply is one report (:data:`CLIENT_HANDSHAKE`, :func:`status_request`).

Real data is not always valid: NCCL 2.28.9 leaves out the comma before ``"status"`` in
``missing_ranks[]``; :func:`repair_json` puts it back (only when the text does not parse as is).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fleetscope.hang.safe_pickle import UnsafePickle, read_bounded

#: The RAS client protocol version fleetscope speaks (NCCL's NCCL_RAS_CLIENT_PROTOCOL).
RAS_PROTOCOL = 2
#: NCCL's default RAS listen port and address (``NCCL_RAS_ADDR``).
DEFAULT_RAS_PORT = 28028
DEFAULT_RAS_ADDR = f"localhost:{DEFAULT_RAS_PORT}"
CLIENT_HANDSHAKE = f"CLIENT PROTOCOL {RAS_PROTOCOL}\n"
SERVER_HANDSHAKE = f"SERVER PROTOCOL {RAS_PROTOCOL}"
#: Largest report read (a 100k-rank job's JSON is tens of MB).
MAX_REPORT_BYTES = 256 * 1024 * 1024
#: ``collective_counts`` keys (NCCL's op names) -> the op names Flight Recorder uses.
OP_NAMES: dict[str, str] = {
    "Broadcast": "nccl:broadcast",
    "Reduce": "nccl:reduce",
    "AllGather": "nccl:all_gather",
    "ReduceScatter": "nccl:reduce_scatter",
    "AllReduce": "nccl:all_reduce",
}
#: ncclResult_t values (nccl.h): what ``async_error`` / ``init_state`` hold.
NCCL_RESULTS: dict[int, str] = {
    0: "ncclSuccess",
    1: "ncclUnhandledCudaError",
    2: "ncclSystemError",
    3: "ncclInternalError",
    4: "ncclInvalidArgument",
    5: "ncclInvalidUsage",
    6: "ncclRemoteError",
    7: "ncclInProgress",
}
#: ``init_state`` values that are no error: ncclSuccess, and ncclInProgress (still initialising).
INIT_STATES_OK = (0, 7)


def status_request(verbose: bool = False, timeout_s: int = 5) -> str:
    """The lines a client sends after the handshake for one JSON report."""
    return f"TIMEOUT {timeout_s}\nSET FORMAT json\n{'VERBOSE STATUS' if verbose else 'STATUS'}\n"


class RasParseError(ValueError):
    """The text is not a RAS report fleetscope can read."""


@dataclass
class RasRank:
    """One rank of a communicator, as RAS saw it."""

    rank: int
    host: str | None = None
    pid: int | None = None
    cuda_dev: int | None = None
    nvml_dev: int | None = None
    init_state: int = 0
    async_error: int = 0
    abort_flag: bool = False
    finalize_called: bool = False
    destroy_flag: bool = False
    #: NCCL op name -> collectives launched (``collOpCount``); empty in a text report
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def flagged(self) -> bool:
        """An error flag is set: ``async_error``, ``abort_flag`` or an ``init_state`` that is an error."""
        return bool(self.async_error or self.abort_flag or self.init_state not in INIT_STATES_OK)


@dataclass
class RasMissing:
    """A rank RAS could not get data from (``missing_ranks[]``, or a text INCOMPLETE/DEAD line)."""

    rank: int | None
    host: str | None = None
    pid: int | None = None
    cuda_dev: int | None = None
    nvml_dev: int | None = None
    unresponsive: bool = True
    considered_dead: bool = False


def rank_gpu(r: RasRank | RasMissing) -> int | None:
    """The GPU of a rank as RAS gives it: ``nvml_dev``, else ``cuda_dev``."""
    return r.nvml_dev if r.nvml_dev is not None else r.cuda_dev


@dataclass
class CountGroup:
    """Text report: ``N ranks have launched up to operation K`` and the ranks it lists under it."""

    op: str | None
    count: int
    n: int
    ranks: list[RasRank] = field(default_factory=list)


@dataclass
class RasComm:
    """One communicator: its ranks (JSON) or its text findings (text)."""

    hash: str
    secondary_hash: str = ""
    size: int | None = None
    ranks: list[RasRank] = field(default_factory=list)
    missing: list[RasMissing] = field(default_factory=list)
    #: text report only: the op-count groups of a MISMATCH, and ``N ranks have status S`` lines
    count_groups: list[CountGroup] = field(default_factory=list)
    status_groups: list[tuple[str, int, list[RasRank]]] = field(default_factory=list)
    #: text name ``#<group>-<comm>``
    label: str = ""

    @property
    def key(self) -> str:
        return f"{self.hash}:{self.secondary_hash}"


@dataclass
class RasReport:
    """One RAS report (one poll)."""

    source: str
    format: str
    time: float | None = None
    nccl_version: str | None = None
    comms: list[RasComm] = field(default_factory=list)
    #: job-level processes RAS considers dead or could not reach (text DEAD/INCOMPLETE, monitor events)
    dead: list[RasMissing] = field(default_factory=list)
    timeouts: int = 0
    notes: list[str] = field(default_factory=list)


def _int(v: object) -> int | None:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        try:
            return int(v, 0)
        except ValueError:
            return None
    return None


def _str(v: object) -> str | None:
    return None if v is None else str(v)


def parse_time(v: object) -> float | None:
    """A report's time: Unix seconds, RFC 3339, or NCCL's ``YYYY-MM-DD HH:MM:SS`` (read as UTC:
    only differences between polls matter)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    if not isinstance(v, str) or not v.strip():
        return None
    s = v.strip()
    try:
        return float(s)
    except ValueError:
        pass
    try:
        t = datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return t.timestamp()


# A value's end (digit, quote, brace, bracket, true/false/null) then a newline, then a key:
# the comma NCCL 2.28.9 leaves out. Valid JSON never has this (a raw newline cannot be in a string).
_MISSING_COMMA = re.compile(r'(?<=[0-9"}\]el])([ \t]*\r?\n\s*)(?=")')


def repair_json(text: str) -> str:
    """Put back the commas NCCL 2.28.9 leaves out between a value and the next key."""
    return _MISSING_COMMA.sub(r",\1", text)


def _rank(raw: dict[str, Any]) -> RasRank:
    st = raw.get("status") if isinstance(raw.get("status"), dict) else {}
    assert isinstance(st, dict)
    counts_raw = raw.get("collective_counts")
    counts = {}
    if isinstance(counts_raw, dict):
        for k, v in counts_raw.items():
            n = _int(v)
            if n is not None:
                counts[str(k)] = n
    return RasRank(
        rank=_int(raw.get("rank")) if _int(raw.get("rank")) is not None else -1,  # type: ignore[arg-type]
        host=_str(raw.get("host")),
        pid=_int(raw.get("pid")),
        cuda_dev=_int(raw.get("cuda_dev")),
        nvml_dev=_int(raw.get("nvml_dev")),
        init_state=_int(st.get("init_state")) or 0,
        async_error=_int(st.get("async_error")) or 0,
        abort_flag=bool(st.get("abort_flag")),
        finalize_called=bool(st.get("finalize_called")),
        destroy_flag=bool(st.get("destroy_flag")),
        counts=counts,
    )


def _missing(raw: dict[str, Any]) -> RasMissing:
    st = raw.get("status") if isinstance(raw.get("status"), dict) else {}
    assert isinstance(st, dict)
    return RasMissing(
        rank=_int(raw.get("rank")),
        host=_str(raw.get("host")),
        pid=_int(raw.get("pid")),
        cuda_dev=_int(raw.get("cuda_dev")),
        nvml_dev=_int(raw.get("nvml_dev")),
        unresponsive=bool(st.get("unresponsive", True)),
        considered_dead=bool(st.get("considered_dead", False)),
    )


def _devs(v: object) -> int | None:
    return _int(v[0]) if isinstance(v, list) and v else _int(v)


def report_from_json(obj: object, source: str, time: float | None = None) -> RasReport:
    """One parsed JSON object: a status report, a monitor event, or ``{"time": T, "report": {...}}``."""
    if not isinstance(obj, dict):
        raise RasParseError(f"holds a JSON {type(obj).__name__}, not a RAS report object")
    if "report" in obj and isinstance(obj["report"], (dict, str)):
        t = parse_time(obj.get("time", obj.get("timestamp")))
        inner = obj["report"]
        if isinstance(inner, str):
            rep = parse_text(inner, source)
            rep.time = t if t is not None else rep.time
            return rep
        return report_from_json(inner, source, t)
    if "event" in obj and "communicators" not in obj:
        rep = RasReport(source=source, format="monitor", time=time or parse_time(obj.get("timestamp")))
        peer = obj.get("peer") if isinstance(obj.get("peer"), dict) else {}
        assert isinstance(peer, dict)
        ev = str(obj.get("event"))
        if ev in ("PEER_DEAD", "PEER_TIMEOUT_DEAD", "PEER_UNRESPONSIVE", "PEER_DISCONNECTED"):
            rep.dead.append(
                RasMissing(
                    rank=None,
                    host=_str(peer.get("host")),
                    pid=_int(peer.get("pid")),
                    cuda_dev=_devs(peer.get("cuda_devs")),
                    nvml_dev=_devs(peer.get("nvml_devs")),
                    considered_dead=ev.endswith("DEAD"),
                )
            )
        return rep
    comms = obj.get("communicators")
    if not isinstance(comms, list):
        raise RasParseError("has no 'communicators' list: not an ncclras -f json report")
    rep = RasReport(
        source=source,
        format="json",
        time=time if time is not None else parse_time(obj.get("timestamp")),
        nccl_version=_str(obj.get("nccl_version")),
    )
    ras = obj.get("ras")
    if isinstance(ras, dict):
        rep.timeouts = _int(ras.get("timeouts_count")) or 0
    for c in comms:
        if not isinstance(c, dict):
            continue
        comm = RasComm(
            hash=str(c.get("hash", "?")),
            secondary_hash=str(c.get("secondary_hash", "")),
            size=_int(c.get("size")),
        )
        comm.ranks = [_rank(r) for r in c.get("ranks") or [] if isinstance(r, dict)]
        comm.missing = [_missing(r) for r in c.get("missing_ranks") or [] if isinstance(r, dict)]
        rep.comms.append(comm)
    return rep


# ---- text report ------------------------------------------------------------------------------
_COMM = re.compile(r"^#(\d+)-(\d+)\s+\(([0-9a-fA-Fx]+)\)\s+(\w+)")
_DIFF_COUNTS = re.compile(r"different\s+(?:(\w+)\s+)?(?:collective\s+)?operation counts")
_LAUNCHED = re.compile(r"^(\d+)\s+ranks?\s+ha(?:s|ve)\s+launched up to operation\s+(\d+)")
_STATUS = re.compile(r"^(\d+)\s+ranks?\s+ha(?:s|ve)\s+status\s+(\w+)")
_RANK_LINE = re.compile(r"^Rank\s+(\d+)\s+--\s+GPU\s+(\d+)\s+managed by process\s+(\d+)\s+on node\s+(\S+)")
_MISSING_RANKS = re.compile(r"^The missing ranks?:\s*(.*)$")
_PROCESS = re.compile(r"Process\s+(\d+)\s+on node\s+(\S+?)\s+managing GPUs?\s+(\d+)")
_TABLE_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\S+)\s+(\d+)\s+(\d+)\s+([A-Z]+)\s+([A-Z]+)\s*$")
_TIMEOUTS = re.compile(r"Encountered\s+(\d+)\s+communication timeouts?")
_VERSION = re.compile(r"NCCL version\s+(\S+)")
_MONITOR = re.compile(r"^\s*\[([^\]]+)\]\s+(PEER_\w+):\s*(.*)$")


class _TextParser:
    """Line by line over a text report; each line kind has its handler."""

    def __init__(self, source: str) -> None:
        self.rep = RasReport(source=source, format="text")
        self.ranks_per_comm: dict[int, int] = {}
        self.comm: RasComm | None = None
        self.job_state = ""
        self.op: str | None = None
        self.last: CountGroup | tuple[str, int, list[RasRank]] | None = None

    def line(self, raw: str) -> None:
        line = raw.strip()
        if not line or set(line) <= {"="}:
            return
        if (m := _VERSION.search(line)) and self.rep.nccl_version is None:
            self.rep.nccl_version = m.group(1)
        if m := _MONITOR.match(raw):
            self._monitor(m)
        elif self.comm is None and (m := _TABLE_ROW.match(raw)):
            self.ranks_per_comm[int(m.group(1))] = int(m.group(5))
        elif line in ("Errors", "Warnings"):
            self.comm, self.job_state = None, ""
        elif m := _COMM.match(line):
            self.comm = RasComm(hash=m.group(3), label=f"#{m.group(1)}-{m.group(2)}")
            self.comm.size = self.ranks_per_comm.get(int(m.group(1)))
            self.rep.comms.append(self.comm)
            self.op, self.last = None, None
        elif self.comm is None:
            self._job(line)
        else:
            self._comm(line, self.comm)

    def _monitor(self, m: re.Match[str]) -> None:
        p = _PROCESS.search(m.group(3))
        if p is None:
            return
        self.rep.time = self.rep.time or parse_time(m.group(1))
        if m.group(2) in ("PEER_DEAD", "PEER_TIMEOUT_DEAD", "PEER_UNRESPONSIVE"):
            dead = m.group(2).endswith("DEAD")
            self.rep.dead.append(RasMissing(None, p.group(2), int(p.group(1)), nvml_dev=int(p.group(3)),
                                            considered_dead=dead))  # fmt: skip

    def _job(self, line: str) -> None:
        if line in ("DEAD", "INCOMPLETE", "TIMEOUT", "ERROR"):
            self.job_state = line
        elif (m := _PROCESS.search(line)) and self.job_state in ("DEAD", "INCOMPLETE"):
            dead = self.job_state == "DEAD"
            self.rep.dead.append(RasMissing(None, m.group(2), int(m.group(1)), nvml_dev=int(m.group(3)),
                                            considered_dead=dead))  # fmt: skip
        elif m := _TIMEOUTS.search(line):
            self.rep.timeouts += int(m.group(1))

    def _comm(self, line: str, comm: RasComm) -> None:
        if m := _DIFF_COUNTS.search(line):
            self.op = m.group(1) if m.group(1) and m.group(1) != "collective" else None
        elif m := _LAUNCHED.match(line):
            self.last = CountGroup(self.op, int(m.group(2)), int(m.group(1)))
            comm.count_groups.append(self.last)
        elif m := _STATUS.match(line):
            self.last = (m.group(2), int(m.group(1)), [])
            comm.status_groups.append(self.last)
        elif m := _RANK_LINE.match(line):
            r = RasRank(int(m.group(1)), host=m.group(4), pid=int(m.group(3)), nvml_dev=int(m.group(2)))
            if isinstance(self.last, CountGroup):
                self.last.ranks.append(r)
            elif isinstance(self.last, tuple):
                self.last[2].append(r)
        elif m := _MISSING_RANKS.match(line):
            comm.missing.extend(RasMissing(int(t)) for t in re.split(r"[\s,]+", m.group(1)) if t.isdigit())


def parse_text(text: str, source: str) -> RasReport:
    """The text report of ``ncclras`` (any release: the strings of NCCL's client_support.cc)."""
    p = _TextParser(source)
    for raw in text.splitlines():
        p.line(raw)
    rep = p.rep
    empty = not rep.comms and not rep.dead and not p.ranks_per_comm
    if empty and not re.search(r"Job summary|Communicators|RAS|NCCL", text):
        raise RasParseError("is neither a RAS JSON nor a RAS text report")
    _place_dead(rep)
    return rep


def _place_dead(rep: RasReport) -> None:
    """A text report names dead processes by node/GPU and missing ranks by number: where one
    process and one rank are missing, they are the same."""
    missing = [m for c in rep.comms for m in c.missing if m.host is None]
    if len(rep.dead) == 1 and len({m.rank for m in missing}) == 1:
        d = rep.dead[0]
        for m in missing:
            m.host, m.pid, m.nvml_dev, m.considered_dead = d.host, d.pid, d.nvml_dev, d.considered_dead


# ---- files -------------------------------------------------------------------------------------
_POLL_HEADER = re.compile(r"^#\s*poll\s+(\S+)\s*$", re.MULTILINE)


def _json_docs(text: str) -> list[object]:
    """Every JSON value in ``text``: one document, an array, JSON lines or concatenated objects."""
    dec = json.JSONDecoder()
    out: list[object] = []
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n:
            break
        obj, i = dec.raw_decode(text, i)
        out.append(obj)
    return out


def parse_reports(text: str, source: str) -> tuple[list[RasReport], list[str]]:
    """Every report (poll) in one file's text, and notes (a repaired JSON, a bad poll)."""
    notes: list[str] = []
    body = text.lstrip()
    # "[" opens a JSON array, or a monitor-mode text line ("[2025-12-19 13:07:07] PEER_DEAD: ...")
    looks_json = body[:1] == "{" or (body[:1] == "[" and not _MONITOR.match(body.split("\n", 1)[0]))
    if looks_json:
        try:
            docs = _json_docs(body)
        except (ValueError, RecursionError):
            try:
                docs = _json_docs(repair_json(body))
            except (ValueError, RecursionError) as exc:
                raise RasParseError(
                    f"is not valid JSON, even with NCCL 2.28.9's missing commas put back ({exc})"
                ) from None
            notes.append(f"{source}: invalid JSON (NCCL 2.28.9's missing comma in missing_ranks) repaired")
        flat: list[object] = []
        for d in docs:
            flat.extend(d if isinstance(d, list) else [d])
        reports = [report_from_json(d, source) for d in flat]
        return reports, notes
    heads = list(_POLL_HEADER.finditer(text))
    if not heads:
        return [parse_text(text, source)], notes
    reports = []
    for i, h in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        rep = parse_text(text[h.end() : end], source)
        rep.time = parse_time(h.group(1))
        if rep.time is None:
            notes.append(f"{source}: poll header {h.group(0).strip()!r} has no readable time")
        reports.append(rep)
    return reports, notes


def load_reports(path: str | Path, limit: int = MAX_REPORT_BYTES) -> tuple[list[RasReport], list[str]]:
    """The reports of one file (bounded; :class:`RasParseError` with the reason if unusable)."""
    p = Path(path)
    try:
        data = read_bounded(p, limit)
    except UnsafePickle as exc:  # the bounded reader's refusal: too big, not a regular file, unreadable
        raise RasParseError(str(exc)) from None
    if not data.strip():
        raise RasParseError("is empty")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise RasParseError("is not text (a RAS report is UTF-8 JSON or text)") from None
    return parse_reports(text, str(p))
