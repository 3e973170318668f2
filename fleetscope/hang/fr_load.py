"""Read a directory of PyTorch Flight Recorder dumps, one file per rank, into plain records.

Any file prefix (``_dump_<rank>``, ``nccl_trace_rank_<rank>``, ``<prefix><rank>.json``): the rank
is the number the file name ends with. Pickles go through :mod:`.safe_pickle` (no global, size
bound); the JSON dump (``_dump_nccl_trace_json``) through :mod:`json`. Format versions "2.4" ..
"2.9" differ in optional keys (``pg_status``, ``p2p_seq_id``, ``is_p2p``, ``nccl_version``), which
are read where present. A file that cannot be used is one line in ``problems`` naming it; the
other ranks are still read.
"""

from __future__ import annotations

import functools
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetscope.hang.safe_pickle import MAX_PICKLE_BYTES, UnsafePickle, loads_plain, read_bounded

#: A dump file name: any prefix, the rank, an optional extension.
_NAME = re.compile(r"^(?P<prefix>.*?)(?P<rank>\d+)(?P<ext>\.(?:json|pkl|pickle))?$")
#: Most ranks read from one directory (a 100k-GPU job).
MAX_RANKS = 131072
#: Longest string field kept, most items of a sizes/dtypes list (tensor lists of one op).
_MAX_TEXT, _MAX_ITEMS = 256, 64
#: Profiling names of point-to-point ops: ``nccl:send 0->1``, ``nccl:recv 1<-0`` (group ranks).
_SEND = re.compile(r"send\s+(\d+)\s*->\s*(\d+)")
_RECV = re.compile(r"recv\s+(\d+)\s*<-\s*(\d+)")


class DumpError(ValueError):
    """The file is not a usable Flight Recorder dump."""


@dataclass(frozen=True)
class Entry:
    """One ring-buffer entry of one rank."""

    record_id: int
    group: str
    seq: int
    is_p2p: bool
    op: str
    state: str
    peer: int | None = None
    input_sizes: str = ""
    output_sizes: str = ""
    dtypes: str = ""
    time_created_ns: int = 0

    @property
    def completed(self) -> bool:
        return self.state == "completed"


@dataclass
class GroupStatus:
    """``pg_status`` of one group on one rank: the last enqueued and completed sequence numbers."""

    enqueued: int
    completed: int


@dataclass
class RankDump:
    """What one rank's dump says, keyed by the process group's global name (``pg_config`` key)."""

    rank: int
    path: str
    version: str
    #: group name -> description (``desc``)
    descs: dict[str, str] = field(default_factory=dict)
    #: group name -> its global ranks (None: not given)
    members: dict[str, list[int]] = field(default_factory=dict)
    status: dict[str, GroupStatus] = field(default_factory=dict)
    entries: list[Entry] = field(default_factory=list)
    nccl_version: str | None = None


@dataclass
class DumpSet:
    """The readable dumps of one directory by rank, and one line per file that was not."""

    directory: str
    dumps: dict[int, RankDump] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    #: ranks whose file exists but could not be used
    unreadable: set[int] = field(default_factory=set)


def _int(v: object, default: int | None = None) -> int | None:
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, float) and v == v:
        return int(v)
    if isinstance(v, str):
        try:
            return int(v.strip())
        except ValueError:
            return default
    return default


@functools.lru_cache(maxsize=4096)
def _ranks_text(v: str) -> tuple[int, ...] | None:
    """Every rank's dump repeats the world group's ranks: parse each distinct string once."""
    out = _ranks([x for x in re.split(r"[\s,\[\]()]+", v) if x])
    return None if out is None else tuple(out)


def _ranks(v: object) -> list[int] | None:
    """``pg_config`` ranks: a list, or its repr as a string (``"[0, 1, 2]"``)."""
    if isinstance(v, str):
        parsed = _ranks_text(v)
        return None if parsed is None else list(parsed)
    if isinstance(v, (list, tuple)):
        out = [_int(x) for x in v]
        if all(x is not None for x in out):
            return [int(x) for x in out if x is not None]
    return None


def _text(v: object) -> str:
    """A string field; a number as its digits; anything else (a container) is not text."""
    if isinstance(v, str):
        return v[:_MAX_TEXT]
    return str(v) if isinstance(v, (int, float)) else ""


def _shape(v: object) -> str:
    """Sizes (a list of lists of ints) or dtypes (a list of strings) as a short canonical text.
    Anything else -- another type, too long -- is ``"?"``: a pickle can share one list many times
    over (a few bytes that would print as gigabytes), so nothing unbounded is ever printed."""
    if not isinstance(v, (list, tuple)) or len(v) > _MAX_ITEMS:
        return "?"
    parts = []
    for x in v:
        if isinstance(x, str):
            parts.append(json.dumps(x[:_MAX_TEXT]))
        elif isinstance(x, (list, tuple)) and len(x) <= _MAX_ITEMS and all(isinstance(i, int) for i in x):
            parts.append("[" + ", ".join(str(int(i)) for i in x) + "]")
        else:
            return "?"
    return "[" + ", ".join(parts) + "]"


def _peer(op: str, members: list[int] | None) -> int | None:
    """The global rank a send/recv talks to (its group-local rank mapped through the members)."""
    m = _SEND.search(op)
    local = int(m.group(2)) if m else None
    if local is None and (m := _RECV.search(op)):
        local = int(m.group(2))
    if local is None:
        return None
    if members is None:
        return local
    return members[local] if 0 <= local < len(members) else None


def _entry(raw: dict[str, Any], members: dict[str, list[int]], descs: dict[str, str]) -> Entry | None:
    pg = raw.get("process_group")
    if isinstance(pg, (list, tuple)) and pg:
        name, desc = _text(pg[0]), _text(pg[1]) if len(pg) > 1 else ""
    elif isinstance(pg, str):
        name, desc = pg, ""
    else:
        return None
    descs.setdefault(name, desc)
    op = _text(raw.get("profiling_name"))
    p2p = raw.get("is_p2p")
    is_p2p = bool(p2p) if isinstance(p2p, bool) else bool(_SEND.search(op) or _RECV.search(op))
    seq = _int(raw.get("p2p_seq_id")) if is_p2p else None
    if seq is None:
        seq = _int(raw.get("collective_seq_id"), _int(raw.get("seq_id")))
    if seq is None:
        return None
    dtypes = raw.get("input_dtypes")
    return Entry(
        record_id=_int(raw.get("record_id"), 0) or 0,
        group=name,
        seq=seq,
        is_p2p=is_p2p,
        op=op,
        state=_text(raw.get("state")) or "scheduled",
        peer=_peer(op, members.get(name)) if is_p2p else None,
        input_sizes=_shape(raw.get("input_sizes")),
        output_sizes=_shape(raw.get("output_sizes")),
        dtypes=_shape(dtypes),
        time_created_ns=_int(raw.get("time_created_ns"), 0) or 0,
    )


def _status_names(
    status: dict[Any, Any], config_names: list[str], entry_pairs: dict[str, str]
) -> dict[str, str]:
    """``pg_status`` key -> group name. Keys are the rank's local pg ids; entries pair some of them
    with a name. Both count groups in creation order (local ids per rank, default names per job),
    so where the names are numbers and the two sets have the same size, the sorted orders pair the
    rest -- used only if every pair the entries show agrees. Other names (hashed, user-given) are
    paired only through entries: a group without one has no status on that rank."""
    keys = [str(k) for k in status]
    if set(keys) <= set(config_names) and all(k == v for k, v in entry_pairs.items() if k in keys):
        return {k: k for k in keys}
    out = dict(entry_pairs)

    def num(s: str) -> tuple[int, str]:
        n = _int(s)
        return (n if n is not None else 1 << 62, s)

    numeric = all(_int(k) is not None for k in [*keys, *config_names])  # default names: a counter
    if numeric and len(keys) == len(config_names):
        by_order = dict(zip(sorted(keys, key=num), sorted(config_names, key=num), strict=True))
        if all(by_order.get(k) == v for k, v in entry_pairs.items()):
            out = by_order
    return {k: v for k, v in out.items() if k in keys}


def parse_dump(obj: object, rank: int, path: str) -> RankDump:
    """A loaded dump (pickle or JSON) as a :class:`RankDump`; :class:`DumpError` if it is not one."""
    if not isinstance(obj, dict):
        raise DumpError(f"holds a {type(obj).__name__}, not a Flight Recorder dump (a dict)")
    if "entries" not in obj and "pg_config" not in obj:
        raise DumpError("has neither 'entries' nor 'pg_config': not a Flight Recorder dump")
    out = RankDump(rank=rank, path=path, version=_text(obj.get("version")) or "?")
    nv = obj.get("nccl_version")
    out.nccl_version = None if nv is None else _text(nv)
    _read_config(obj.get("pg_config"), out)
    raw_entries = obj.get("entries") or []
    if not isinstance(raw_entries, list):
        raise DumpError(f"'entries' is a {type(raw_entries).__name__}, not a list")
    pairs: dict[str, str] = {}
    for raw in raw_entries:
        e = _entry(raw, out.members, out.descs) if isinstance(raw, dict) else None
        if e is None:
            continue
        out.entries.append(e)
        if raw.get("pg_id") is not None:
            pairs[str(raw["pg_id"])] = e.group
    out.entries.sort(key=lambda e: e.record_id)
    _read_status(obj.get("pg_status"), pairs, out)
    return out


def _read_config(config: object, out: RankDump) -> None:
    if not isinstance(config, dict):
        return
    for key, cfg in config.items():
        if isinstance(cfg, dict):
            name = _text(cfg.get("name")) or _text(key)
            out.descs[name] = _text(cfg.get("desc"))
            ranks = _ranks(cfg.get("ranks"))
            if ranks is not None:
                out.members[name] = ranks


def _read_status(status: object, pairs: dict[str, str], out: RankDump) -> None:
    if not isinstance(status, dict):
        return
    names = _status_names(status, list(out.descs), pairs)
    for key, st in status.items():
        name = names.get(str(key))
        if name is None or not isinstance(st, dict):
            continue
        enq = _int(st.get("last_enqueued_collective"))
        comp = _int(st.get("last_completed_collective"))
        if enq is not None and comp is not None:
            out.status[name] = GroupStatus(enqueued=enq, completed=comp)


def load_file(path: Path, rank: int, limit: int = MAX_PICKLE_BYTES) -> RankDump:
    """One dump file; :class:`DumpError` (with the reason) if it cannot be used."""
    try:
        data = read_bounded(path, limit)
    except UnsafePickle as exc:
        raise DumpError(str(exc)) from None
    head = data[:64].lstrip()
    if head[:1] in (b"{", b"["):
        try:
            obj: object = json.loads(data)
        except (ValueError, RecursionError) as exc:
            raise DumpError(f"is not valid JSON ({exc})") from None
    else:
        try:
            obj = loads_plain(data)
        except UnsafePickle as exc:
            raise DumpError(str(exc)) from None
    try:
        return parse_dump(obj, rank, str(path))
    except RecursionError:
        raise DumpError("is nested too deeply to be a Flight Recorder dump") from None


def dump_files(directory: Path) -> tuple[dict[int, Path], list[str]]:
    """The dump file of each rank in ``directory``: among the regular files whose name ends in a
    number, the prefix most of them share (other prefixes are noted, not read)."""
    by_prefix: dict[str, dict[int, Path]] = {}
    try:
        names = sorted(os.listdir(directory))
    except OSError as exc:
        raise DumpError(f"cannot list it: {exc.strerror}") from None
    for name in names:
        m = _NAME.match(name)
        if not m:
            continue
        p = directory / name
        try:
            if not stat.S_ISREG(p.lstat().st_mode):
                continue  # a dump pipe (<prefix><rank>.pipe is not matched), a link, a directory
        except OSError:
            continue
        by_prefix.setdefault(m.group("prefix"), {})[int(m.group("rank"))] = p
    if not by_prefix:
        return {}, []
    best = max(by_prefix, key=lambda k: (len(by_prefix[k]), k))
    notes = [
        f"{directory}: ignored {len(files)} file(s) named {prefix!r}<rank> (the dumps are {best!r}<rank>)"
        for prefix, files in sorted(by_prefix.items())
        if prefix != best
    ]
    return by_prefix[best], notes


def load_dir(directory: str | os.PathLike[str], limit: int = MAX_PICKLE_BYTES) -> DumpSet:
    """Every rank's dump in ``directory``; one line in ``problems`` per file that is not usable."""
    d = Path(directory)
    out = DumpSet(directory=str(d))
    try:
        files, notes = dump_files(d)
    except DumpError as exc:
        out.problems.append(f"{d}: {exc}")
        return out
    out.problems.extend(notes)
    if len(files) > MAX_RANKS:
        out.problems.append(
            f"{d}: {len(files)} dump files, more than {MAX_RANKS}; read the first {MAX_RANKS}"
        )
        files = dict(sorted(files.items())[:MAX_RANKS])
    for rank, path in sorted(files.items()):
        try:
            out.dumps[rank] = load_file(path, rank, limit)
        except DumpError as exc:
            out.unreadable.add(rank)
            out.problems.append(f"{path}: rank {rank}'s dump {exc}; read the other ranks without it")
    return out
