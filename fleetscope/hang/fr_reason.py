"""Which ranks a hung job waits for, from its Flight Recorder dumps (docs/hang.md#flight-recorder).

1. Per process group (its global name), each rank's progress: the last sequence number it
   enqueued and completed (``pg_status``, else its entries), and its pending entries. Ranks'
   ring buffers are aligned by (group, sequence number), never by position or record id, so
   buffers that start at different records, or hold only active entries, compare alike.
2. Per pending entry of rank r (group G, sequence s), the state of the peers (every other
   member; for send/recv the peer): ``completed`` s, ``launched`` it, ``not_launched`` it, or
   ``unknown`` (no usable dump). If a peer completed s and r did not, r is stuck on its own
   (launched, not completed). Otherwise r *waits for* the peers that did not launch s, the ones
   with no data, and the ones whose op disagrees with the majority (op, dtype, sizes); if every
   peer launched s and none completed it, r waits for all of them (they are stuck with r).
3. Across groups: a rank that blocks one group makes every group it shares with peers look
   stuck, so most "missing ranks" are consequences. The wait-for edges form a graph; the
   *origins* are its terminal strongly connected components (nothing they wait for is outside
   them) that someone waits for. Only those are reported; each with the group and collective
   most of its waiters are blocked in (earliest first), the waiters and groups as evidence.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Literal

from fleetscope.hang.fr_load import DumpSet, Entry, RankDump
from fleetscope.hang.model import Confidence, Hang, RankRef, Reason

PeerState = Literal["completed", "launched", "not_launched", "unknown"]
#: Ops whose input sizes legitimately differ across ranks (variable splits, point-to-point).
_SIZES_VARY = ("all_to_all", "alltoall", "coalesced", "send", "recv", "gather", "scatter")
#: Most waiters named in one line of evidence.
_MAX_NAMED = 16


@dataclass
class _Wait:
    """An edge of the wait-for graph: ``waiter`` is blocked in (group, seq, op) on ``on``."""

    waiter: int
    on: int
    group: str
    seq: int
    op: str
    why: PeerState | Literal["mismatch"]
    time_ns: int


@dataclass
class _Graph:
    edges: dict[int, set[int]] = field(default_factory=lambda: defaultdict(set))
    waits: list[_Wait] = field(default_factory=list)
    #: rank -> lines saying it is stuck on its own (peers completed what it did not)
    stuck_alone: dict[int, list[str]] = field(default_factory=lambda: defaultdict(list))
    #: rank -> lines saying its op disagrees with its peers'
    mismatched: dict[int, list[str]] = field(default_factory=lambda: defaultdict(list))
    #: (group, p2p, seq) -> the negative id of the node standing for that op
    ops: dict[tuple[str, bool, int], int] = field(default_factory=dict)

    def op_node(self, key: tuple[str, bool, int], members: list[int]) -> int:
        """The node of an op every member launched and none completed (ids below 0 are ops)."""
        node = self.ops.get(key)
        if node is None:
            node = self.ops[key] = -1 - len(self.ops)
        self.edges[node].update(members)
        return node


def _fmt(ranks: set[int] | list[int]) -> str:
    r = sorted(ranks)
    head = ", ".join(map(str, r[:_MAX_NAMED]))
    return head + (f" and {len(r) - _MAX_NAMED} more" if len(r) > _MAX_NAMED else "")


class _View:
    """Lookups over a dump set: group members, descriptions, and each rank's progress per group."""

    def __init__(self, ds: DumpSet) -> None:
        self.ds = ds
        self.members: dict[str, list[int]] = {}
        self.descs: dict[str, str] = {}
        seen: dict[str, set[int]] = defaultdict(set)
        for d in ds.dumps.values():
            for g, ms in d.members.items():
                self.members.setdefault(g, ms)
            for g, desc in d.descs.items():
                if desc:
                    self.descs.setdefault(g, desc)
            for g in set(d.members) | set(d.status) | {e.group for e in d.entries}:
                seen[g].add(d.rank)
        for g, ranks in seen.items():
            self.members.setdefault(g, sorted(ranks))
        # (rank, group, is_p2p) -> entries by seq
        self.by_seq: dict[tuple[int, str, bool], dict[int, Entry]] = defaultdict(dict)
        for d in ds.dumps.values():
            for e in d.entries:
                self.by_seq[(d.rank, e.group, e.is_p2p)][e.seq] = e

    def name(self, group: str) -> str:
        desc = self.descs.get(group, "")
        return f"{group}:{desc}" if desc else group

    def state(self, rank: int, group: str, p2p: bool, seq: int) -> PeerState:
        """Where ``rank`` stands on (group, seq) of this kind (collective or point-to-point)."""
        d: RankDump | None = self.ds.dumps.get(rank)
        if d is None:
            return "unknown"
        mine = self.by_seq.get((rank, group, p2p))
        if mine:
            e = mine.get(seq)
            if e is not None:
                return "completed" if e.completed else "launched"
            lo, hi = min(mine), max(mine)
            if seq < lo:
                return "completed"  # before its buffer's window: one stream per group completes in order
            if seq < hi:
                return "completed"  # an active-only dump leaves out what completed
            st = d.status.get(group)
            if st is not None and st.enqueued >= seq:
                return "completed" if st.completed >= seq else "launched"
            return "not_launched"
        st = d.status.get(group)
        if st is None:
            return "unknown"
        if st.completed >= seq:
            return "completed"
        return "launched" if st.enqueued >= seq else "not_launched"


def _signature(e: Entry) -> tuple[str, ...]:
    name = e.op.split(" ")[0]
    if any(k in name for k in _SIZES_VARY):
        return (name, e.dtypes)
    return (name, e.dtypes, e.input_sizes)


def _mismatch(v: _View, group: str, seq: int, p2p: bool, ranks: list[int]) -> tuple[set[int], str]:
    """The ranks whose op at (group, seq) disagrees with the majority's, and what differs."""
    sig: dict[int, tuple[str, ...]] = {}
    for r in ranks:
        e = v.by_seq.get((r, group, p2p), {}).get(seq)
        if e is not None and not p2p:
            sig[r] = _signature(e)
    if len(set(sig.values())) < 2:
        return set(), ""
    counts: dict[tuple[str, ...], int] = defaultdict(int)
    for s in sig.values():
        counts[s] += 1
    top = max(counts.values())
    majority = [s for s, c in counts.items() if c == top]
    if len(majority) > 1:  # no majority: every side is named
        odd = set(sig)
        ref = majority[0]
    else:
        ref = majority[0]
        odd = {r for r, s in sig.items() if s != ref}
    one = sig[min(odd)]
    what = [f"{k} {a} vs {b}" for k, a, b in zip(("op", "dtype", "sizes"), one, ref, strict=False) if a != b]
    return odd, f"{'; '.join(what) or 'op differs'} (of the others)"


class _Builder:
    """The wait-for graph, one pending entry at a time (module docstring, step 2)."""

    def __init__(self, v: _View) -> None:
        self.v = v
        self.g = _Graph()
        self.mism: dict[tuple[str, bool, int], tuple[set[int], str]] = {}
        self.cache: dict[tuple[str, bool, int], dict[int, PeerState]] = {}

    def states(self, rank: int, e: Entry) -> dict[int, PeerState]:
        """The peers' state at the entry's (group, seq): the peer of a send/recv, else every other member."""
        v = self.v
        if e.is_p2p:
            peers = [e.peer] if e.peer is not None else [m for m in v.members.get(e.group, []) if m != rank]
            return {m: v.state(m, e.group, True, e.seq) for m in peers}
        key = (e.group, False, e.seq)  # every member's state there is shared by all ranks pending there
        if key not in self.cache:
            self.cache[key] = {m: v.state(m, e.group, False, e.seq) for m in v.members.get(e.group, [])}
        return {m: s for m, s in self.cache[key].items() if m != rank}

    def entry(self, rank: int, e: Entry) -> None:
        g, v = self.g, self.v
        states = self.states(rank, e)
        label = f"{e.op} #{e.seq} of {v.name(e.group)}"
        done_by = {m for m, s in states.items() if s == "completed"}
        if done_by:
            g.stuck_alone[rank].append(f"{label} pending on rank {rank}; ranks {_fmt(done_by)} completed it")
            return
        key = (e.group, e.is_p2p, e.seq)
        if key not in self.mism:
            self.mism[key] = _mismatch(v, e.group, e.seq, e.is_p2p, [rank, *states])
        odd, what = self.mism[key]
        if rank in odd:
            g.mismatched[rank].append(f"{label}: {what}")
            return
        targets: dict[int, PeerState | Literal["mismatch"]] = {
            m: s for m, s in states.items() if s in ("not_launched", "unknown")
        }
        targets.update({m: "mismatch" for m in odd if m != rank})
        if not targets:
            # all launched, none completed: stuck together. One node for the op, which waits for
            # every member, keeps this O(members) instead of an edge between every pair.
            op_node = g.op_node(key, [rank, *states])
            g.edges[rank].add(op_node)
            g.waits.append(_Wait(rank, op_node, e.group, e.seq, e.op, "launched", e.time_created_ns))
            return
        for m, why in targets.items():
            g.edges[rank].add(m)
            g.waits.append(_Wait(rank, m, e.group, e.seq, e.op, why, e.time_created_ns))


def _build(v: _View) -> _Graph:
    b = _Builder(v)
    for rank, d in sorted(v.ds.dumps.items()):
        firsts: dict[tuple[str, bool], Entry] = {}
        for e in d.entries:
            if not e.completed:
                firsts.setdefault((e.group, e.is_p2p), e)
        for e in firsts.values():
            b.entry(rank, e)
    g = b.g
    # A rank whose peers completed what it did not is broken where it stands (its GPU or link):
    # what it waits for elsewhere is explained by that, so it waits for nothing.
    for rank in g.stuck_alone:
        g.edges.pop(rank, None)
    g.waits = [w for w in g.waits if w.waiter not in g.stuck_alone]
    return g


def _sccs(nodes: set[int], edges: dict[int, set[int]]) -> list[set[int]]:
    """Strongly connected components (iterative Tarjan)."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on: set[int] = set()
    stack: list[int] = []
    out: list[set[int]] = []
    counter = 0
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(edges.get(nxt, ())))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp: set[int] = set()
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.add(x)
                    if x == node:
                        break
                out.append(comp)
    return out


def _why_single(
    rank: int, g: _Graph, ds: DumpSet, waits: list[_Wait], label: str
) -> tuple[Reason, Confidence, list[str]]:
    if rank not in ds.dumps:
        why = "its dump could not be read" if rank in ds.unreadable else "it left no dump"
        return "unknown", "medium", [f"rank {rank}: {why}; the others wait for it"]
    if g.mismatched.get(rank):
        return "mismatch", "high", g.mismatched[rank][:3]
    if g.stuck_alone.get(rank):
        return "launched_not_completed", "high", g.stuck_alone[rank][:3]
    if any(w.why == "not_launched" for w in waits):
        d = ds.dumps[rank]
        pending = sum(1 for e in d.entries if not e.completed)
        tail = "it has nothing pending" if pending == 0 else f"it has {pending} other op(s) pending"
        return "not_launched", "high", [f"rank {rank} never launched {label}; {tail}"]
    return "unknown", "low", [f"rank {rank}: the others wait for it; its own dump shows no cause"]


def analyze_dumps(ds: DumpSet) -> tuple[list[Hang], list[str]]:
    """The hangs a dump set proves (origins only) and notes on what it could not decide."""
    v = _View(ds)
    g = _build(v)
    notes: list[str] = []
    nodes = set(ds.dumps) | set(g.edges) | {m for targets in g.edges.values() for m in targets}
    comps = _sccs(nodes, g.edges)
    comp_of = {r: i for i, c in enumerate(comps) for r in c}
    waited_on = {w.on for w in g.waits if comp_of[w.waiter] != comp_of[w.on]}
    origins: list[set[int]] = []
    for c in comps:
        leaves = any(m not in c for r in c for m in g.edges.get(r, ()))
        if leaves or not any(r >= 0 for r in c):
            continue
        if c & waited_on or any(g.stuck_alone.get(r) or g.mismatched.get(r) for r in c) or len(c) > 1:
            origins.append(c)
    hangs: dict[tuple[str, int, str, str], Hang] = {}
    for c in sorted(origins, key=min):
        heads = [min(c)] if len(c) == 1 else _heads(c, g)
        for rank in heads:
            _add_single(rank, g, v, hangs)
        if not heads:
            hangs.update(_together(c, g, v))
    if not ds.dumps:
        notes.append(f"{ds.directory}: no usable Flight Recorder dump")
    elif not g.waits and not hangs:
        pending = sum(1 for d in ds.dumps.values() for e in d.entries if not e.completed)
        notes.append(
            f"{ds.directory}: {len(ds.dumps)} rank(s), {pending} pending op(s), no rank waits for another"
        )
    return sorted(hangs.values(), key=lambda h: (h.group, h.seq or 0)), notes


def _add_single(rank: int, g: _Graph, v: _View, hangs: dict[tuple[str, int, str, str], Hang]) -> None:
    """The hang of one origin rank, merged into the hang of the same (group, seq, op, reason)."""
    ds = v.ds
    waits = [w for w in g.waits if w.on == rank and w.waiter != rank]
    if waits:
        key = _where(waits)
    else:
        own = next((e for e in ds.dumps[rank].entries if not e.completed), None)
        key = (own.group, own.seq, own.op) if own else ("?", -1, "?")
    group, seq, op = key
    reason, conf, ev = _why_single(rank, g, ds, waits, f"{op} #{seq} of {v.name(group)}")
    waiters = {w.waiter for w in waits if (w.group, w.seq, w.op) == key}
    groups = sorted({v.name(w.group) for w in waits})
    if waiters:
        ev.append(f"ranks {_fmt(waiters)} wait for rank {rank} in {op} #{seq} of {v.name(group)}")
    if len(groups) > 1:
        ev.append(f"rank {rank} blocks {len(groups)} groups: {', '.join(groups[:8])}")
    times = [w.time_ns for w in waits if (w.group, w.seq, w.op) == key and w.time_ns > 0]
    if not times and rank in ds.dumps:
        times = [e.time_created_ns for e in ds.dumps[rank].entries if not e.completed and e.time_created_ns]
    since = min(times) / 1e9 if times else None
    h = hangs.get((group, seq, op, reason))
    if h is None:
        hangs[(group, seq, op, reason)] = Hang(
            group=v.name(group),
            op=op,
            seq=seq,
            waiting_for=[RankRef(rank)],
            reason=reason,
            confirmed=True,
            confidence=conf,
            evidence=ev,
            source="flight_recorder",
            since=since,
        )
        return
    h.waiting_for.append(RankRef(rank))
    h.evidence.extend(e for e in ev if e not in h.evidence)
    if conf != h.confidence:
        h.confidence = "medium"
    if since is not None:
        h.since = since if h.since is None else min(h.since, since)


def _heads(c: set[int], g: _Graph) -> list[int]:
    """In a set of ranks stuck together: the ones the others wait for by name (not launched, no
    dump, mismatch) while they themselves only wait in ops every member launched. They are the
    origins; the op they share with the others is stuck because of them."""
    named = {w.on for w in g.waits if w.waiter in c and w.on in c and w.on >= 0 and w.why != "launched"}
    return sorted(r for r in named if all(w.why == "launched" for w in g.waits if w.waiter == r))


def _where(waits: list[_Wait]) -> tuple[str, int, str]:
    """The (group, seq, op) most waiters are blocked in on this rank; ties: the earliest created."""
    by: dict[tuple[str, int, str], set[int]] = defaultdict(set)
    first: dict[tuple[str, int, str], int] = {}
    named = [w for w in waits if w.why not in ("launched", "completed")]
    for w in named or waits:  # waits by name first; only ops everyone launched: those
        k = (w.group, w.seq, w.op)
        by[k].add(w.waiter)
        first[k] = min(first.get(k, w.time_ns), w.time_ns)
    return min(by, key=lambda k: (-len(by[k]), first[k], k))


def _together(c: set[int], g: _Graph, v: _View) -> dict[tuple[str, int, str, str], Hang]:
    """A terminal set of ranks that wait only for each other."""
    inner = [w for w in g.waits if w.waiter in c and w.on in c]
    c = {r for r in c if r >= 0}
    key = _where(inner) if inner else ("?", -1, "?")
    group, seq, op = key
    if any(w.why in ("not_launched", "mismatch") for w in inner):
        reason: Reason = "mismatch"
        conf: Confidence = "medium"
        ev = [
            f"ranks {_fmt(c)} wait for each other in different groups or ops (order mismatch): "
            + "; ".join(
                sorted({f"{w.waiter}->{w.on} in {w.op} #{w.seq} of {v.name(w.group)}" for w in inner})[:6]
            )
        ]
        named = [RankRef(r) for r in sorted(c)]
    else:
        reason, conf = "launched_not_completed", "low"
        ev = [
            f"ranks {_fmt(c)} all launched {op} #{seq} of {v.name(group)} and none completed it: "
            "the dumps cannot tell which one is stuck (look at hardware evidence)"
        ]
        named = []
    return {
        (group, seq, op, reason): Hang(
            group=v.name(group),
            op=op,
            seq=seq,
            waiting_for=named,
            reason=reason,
            confirmed=True,
            confidence=conf,
            evidence=ev,
            source="flight_recorder",
        )
    }
