"""A synthetic Prometheus HTTP API for a simulated fleet of any size (benchmarks and tests).

The simulator's model (:mod:`fleetscope.simulate`) is a time-stepped state machine: a node's
samples at time t come from every tick before t (counters, checkpoints, restarts, the random
stream shared by all nodes), so one node cannot be computed on its own at an arbitrary time. So
a **tile** of T nodes is simulated once over the whole time range (:class:`Tile`), and fleet node
``i`` is tile node ``i % T`` in copy ``k = i // T``, with its identity renamed (:class:`Fleet`):
``Hostname`` (and ``instance``) become ``node_name(i)``, ``job_id`` gets the suffix ``-k`` (copy
0 keeps the tile's names), a GPU's ``UUID`` a new one hashed from the tile's and the copy. Values
are the tile's: every copy of a node reports the same samples. Memory is the tile's samples (one
matrix per metric) plus the fleet's layout (host names are computed, not stored); nothing grows
per copy. Served models (``model_name``) are not renamed: a tile of the inference family would
make every copy's replicas one model.

The server (:class:`SyntheticPrometheus`, a threaded ``http.server``) answers ``/api/v1/query``,
``/api/v1/query_range`` and ``/api/v1/series`` (GET or form POST, like Prometheus), plus
``/api/v1/status/buildinfo`` and ``/-/ready``, in Prometheus' JSON layout: ``matrix`` results
sorted by labels, timestamps as seconds with milliseconds, values as strings (Go's shortest
formatting), 400 ``bad_data`` for anything outside the PromQL subset of
:mod:`tests.support.promql_subset`. Semantics are Prometheus 2.x's (the version the tests run):
range selectors and the 5-minute lookback are closed intervals ``[t - d, t]``,
``last_over_time`` keeps ``__name__``, aggregations keep only their ``by`` labels.

Evaluation works on the tile: a selector picks tile series (its non-identity matchers tested
once per tile series) and, per tile node, the copies selected by its ``Hostname`` matchers (a
``=~`` of literals is looked up name by name, so a shard's 500-node matcher costs O(its nodes));
each tile series' points are computed and formatted once per query and reused by every copy.

``/synthetic/stats`` (GET) returns what was answered so far: queries by endpoint, samples
answered (points in the answers), samples scanned (raw samples the selectors covered, what a
real Prometheus reads from its TSDB: this server does not pay for them, it evaluates each tile
series once for all its copies), answer bytes, its CPU seconds and peak RSS; ``?reset=1``
zeroes them. ``scan_ns`` and ``scan_series_ns`` (``--scan-ns``, ``--scan-series-ns``) make it
pay for them as a real store does: that many CPU nanoseconds per sample and per series read but
not answered (the samples an aggregation such as the service's discovery folds away);
docs/benchmarks.md gives the figures measured on a real Prometheus.

Run alone: ``python -m tests.support.synthetic_prom --fleet-nodes 4096 --tile-nodes 128`` prints
one JSON line with its URL once it serves, and serves until its standard input ends (its parent,
the benchmark, exited) or it is interrupted.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import resource
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import numpy as np

from fleetscope import contract as c
from fleetscope.simulate.spec import ScenarioSpec, node_name
from tests.support.promql_subset import (
    Aggregate,
    Expr,
    LastOverTime,
    Matcher,
    PromQLError,
    Selector,
    parse,
    selector_of,
)

JOB_LABEL = "job_id"
UUID_LABEL = "UUID"
INSTANCE_LABEL = "instance"
#: Labels whose values name a node's identity: renamed per copy.
RENAMED = frozenset((c.NODE_LABEL, JOB_LABEL, UUID_LABEL, INSTANCE_LABEL))
#: Prometheus' default ``--query.lookback-delta``, for bare vector selectors.
LOOKBACK_MS = 300_000
#: Prometheus refuses range queries of more points per series.
MAX_POINTS = 11_000
#: Functions that keep ``__name__`` (Prometheus 2.x).
KEEPS_NAME = frozenset(("last_over_time",))

Pairs = tuple[tuple[str, str], ...]
#: One answered series: its labels, their JSON, its points' JSON (``[t,"v"],...``), their count.
Row = tuple[Pairs, str, str, int]
_POINT = '[{},"{}"]'


# ---------------------------------------------------------------------- formatting (Prometheus')
def format_value(v: float) -> str:
    """A sample value as Prometheus writes it (Go ``strconv`` shortest, ``'f'`` between 1e-6 and
    1e21, ``'e'`` outside; ``NaN``, ``+Inf``, ``-Inf``)."""
    if v != v:
        return "NaN"
    if v in (math.inf, -math.inf):
        return "+Inf" if v > 0 else "-Inf"
    a = abs(v)
    if a == 0 or 1e-6 <= a < 1e21:
        r = repr(v)
        if "e" in r:
            return np.format_float_positional(v, unique=True, trim="-")
        return r[:-2] if r.endswith(".0") else r
    return repr(v)  # Python's and Go's shortest exponent forms agree (1e-07, 1.5e+21)


def format_time(ms: int) -> str:
    """A timestamp as Prometheus writes it: seconds, and ``.ddd`` when there are milliseconds."""
    sign, ms = ("-", -ms) if ms < 0 else ("", ms)
    s, frac = divmod(ms, 1000)
    return f"{sign}{s}.{frac:03d}" if frac else f"{sign}{s}"


def _labels_json(pairs: Pairs) -> str:
    return "{" + ",".join(f"{_quote(n)}:{_quote(v)}" for n, v in pairs) + "}"


_quote = json.encoder.encode_basestring  # type: ignore[attr-defined]


# ---------------------------------------------------------------------- the tile
@dataclass
class TileSeries:
    name: str
    pairs: Pairs  # sorted by label name, without __name__, no empty values
    node: int | None  # tile node index (None: no Hostname)
    row: int  # its row in its metric's matrix (:attr:`Tile.matrix`)


@dataclass
class Tile:
    """Every series of a simulated ``spec`` (T nodes) over its whole duration: per metric one
    matrix of values (series x the tile's sample times, NaN where a series has no sample)."""

    nodes: int
    times: np.ndarray  # int64 ms, increasing: every time the model was sampled
    series: list[TileSeries]
    matrix: dict[str, np.ndarray]
    by_metric: dict[str, list[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for i, s in enumerate(self.series):
            self.by_metric.setdefault(s.name, []).append(i)

    @classmethod
    def simulate(cls, spec: ScenarioSpec) -> Tile:
        from fleetscope.simulate.record import simulate

        rec = simulate(spec)
        hosts = {node_name(i): i for i in range(spec.nodes)}
        times = np.round(np.asarray(rec.times, float) * 1000).astype(np.int64)
        out: list[TileSeries] = []
        matrix: dict[str, np.ndarray] = {}
        for name in rec.metric_names():
            label_names = rec.labels[name]
            rows = [(key, tv) for key, tv in rec.series_of(name).items() if len(tv[0])]
            if not rows:
                continue
            m = matrix[name] = np.full((len(rows), len(times)), np.nan)
            for r, (key, (t, v)) in enumerate(rows):
                m[r, np.searchsorted(times, np.round(np.asarray(t, float) * 1000).astype(np.int64))] = v
                pairs = tuple(sorted((k, x) for k, x in zip(label_names, key, strict=True) if x != ""))
                host = dict(pairs).get(c.NODE_LABEL)
                out.append(TileSeries(name, pairs, hosts.get(host) if host else None, r))
        return cls(spec.nodes, times, out, matrix)

    def with_recording(self, record: str, expr: str, interval_s: float) -> Tile:
        """The tile and the series of a recording rule (``record: expr``) as a store that
        evaluates it every ``interval_s`` from the tile's first sample holds them (each a value at
        the evaluation times where ``expr`` had one). The evaluation times must be sample times
        (a tile sampled every 15 s, a rule every 15, 30 or 60 s). Renamed per copy like any tile
        series, so every copy's recorded rows are its own, as the rule evaluated over the fleet's
        series gives them."""
        step = round(interval_s * 1000)
        start, end = int(self.times[0]), int(self.times[-1])
        grid = np.arange(start, end + 1, step, dtype=np.int64)
        if not np.isin(grid, self.times).all():
            raise ValueError(f"a rule every {interval_s:g} s is not evaluated at the tile's sample times")
        answer = Evaluator(Fleet(self, self.nodes)).evaluate(parse(expr), start, end, step)
        hosts = {node_name(i): i for i in range(self.nodes)}
        m = np.full((len(answer.series), len(self.times)), np.nan)
        added = []
        for r, (pairs, _, text, _) in enumerate(answer.series):
            points = json.loads(f"[{text}]")
            at = np.searchsorted(self.times, np.round(np.array([p[0] for p in points], float) * 1000))
            m[r, at] = [float(p[1]) for p in points]
            host = dict(pairs).get(c.NODE_LABEL)
            added.append(
                TileSeries(
                    record,
                    tuple(p for p in pairs if p[0] != "__name__"),
                    hosts.get(host) if host else None,
                    r,
                )
            )
        return Tile(self.nodes, self.times, [*self.series, *added], {**self.matrix, record: m})

    def samples(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Series ``i``'s sample times (ms) and values."""
        s = self.series[i]
        row = self.matrix[s.name][s.row]
        ok = ~np.isnan(row)
        return self.times[ok], row[ok]

    def families(self) -> Iterator[tuple[str, Iterator[tuple[Pairs, np.ndarray, np.ndarray]]]]:
        """The tile as the exposition writer reads it (times in seconds)."""
        for name, ids in self.by_metric.items():
            yield name, ((self.series[i].pairs, *_seconds(self.samples(i))) for i in ids)


def _seconds(tv: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    return tv[0] / 1000.0, tv[1]


# ---------------------------------------------------------------------- the fleet
_HOST = re.compile(r"ip-10-1-(\d+)-(\d+)")


def node_index(host: str) -> int | None:
    """The index of a ``node_name`` (None when ``host`` is not one)."""
    m = _HOST.fullmatch(host)
    if m is None:
        return None
    i = int(m.group(1)) * 200 + int(m.group(2)) - 10
    return i if i >= 0 and node_name(i) == host else None


class Fleet:
    """``nodes`` nodes made of copies of ``tile`` (module docstring)."""

    def __init__(self, tile: Tile, nodes: int) -> None:
        if nodes < 1:
            raise ValueError("a fleet needs at least one node")
        self.tile, self.nodes, self.T = tile, nodes, tile.nodes
        self._tile_host = {node_name(t): t for t in range(self.T)}

    def copies_of(self, t: int) -> int:
        """How many copies of tile node ``t`` the fleet holds."""
        return max(0, (self.nodes - t + self.T - 1) // self.T)

    def families(self) -> Iterator[tuple[str, Iterator[tuple[Pairs, np.ndarray, np.ndarray]]]]:
        """Every series of the fleet, renamed, as the exposition writer reads them (times in
        seconds): what a real Prometheus is backfilled with to check the synthetic one."""
        tile = self.tile
        for name, ids in tile.by_metric.items():
            yield (
                name,
                (
                    (self.renamed(tile.series[i].pairs, k), *_seconds(tile.samples(i)))
                    for i in ids
                    for k in (
                        range(1)
                        if tile.series[i].node is None
                        else range(self.copies_of(tile.series[i].node))
                    )
                ),
            )

    # -- renaming
    def rename(self, label: str, value: str, k: int) -> str:
        if k == 0 or label not in RENAMED:
            return value
        if label == c.NODE_LABEL:
            t = self._tile_host.get(value)
            return value if t is None else node_name(k * self.T + t)
        if label == INSTANCE_LABEL:
            host, sep, port = value.rpartition(":")
            t = self._tile_host.get(host) if sep else None
            return value if t is None else f"{node_name(k * self.T + t)}:{port}"
        if label == JOB_LABEL:
            return f"{value}-{k}"
        h = hashlib.sha1(f"{value}/{k}".encode()).hexdigest()  # UUID: a fresh one per copy
        return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"

    def renamer(self, pairs: Pairs):
        """A function of copy ``k`` giving ``pairs`` renamed and their JSON: the JSON is written
        once and only the renamed values are replaced in it per copy."""
        text0 = _labels_json(pairs)
        spots = [(j, n, v, f"{_quote(n)}:{_quote(v)}") for j, (n, v) in enumerate(pairs) if n in RENAMED]

        def at(k: int) -> tuple[Pairs, str]:
            if k == 0 or not spots:
                return pairs, text0
            out, text = list(pairs), text0
            for j, n, v, old in spots:
                new = self.rename(n, v, k)
                out[j] = (n, new)
                text = text.replace(old, f"{_quote(n)}:{_quote(new)}", 1)
            return tuple(out), text

        return at

    def renamed(self, pairs: Pairs, k: int) -> Pairs:
        if k == 0:
            return pairs
        return tuple((n, self.rename(n, v, k)) for n, v in pairs)

    # -- selection
    def selection(self, host_matchers: list[Matcher]) -> tuple[dict[int, range | set[int]], bool]:
        """Per tile node, the copies the ``Hostname`` matchers select; and whether series without
        a Hostname pass them."""
        nodeless = all(m.matches("") for m in host_matchers)
        if not host_matchers:
            return {t: range(self.copies_of(t)) for t in range(self.T) if self.copies_of(t)}, True
        first = next(
            (m for m in host_matchers if m.op == "=" or (m.op == "=~" and m.literals is not None)), None
        )
        if first is not None:
            names: Iterable[str] = [first.value] if first.op == "=" else first.literals or ()
            candidates: Iterable[int] = (
                i for h in names if (i := node_index(h)) is not None and i < self.nodes
            )
        else:
            candidates = range(self.nodes)  # a real regex or a negative matcher: every node tested
        out: dict[int, set[int]] = {}
        for i in candidates:
            host = node_name(i)
            if all(m.matches(host) for m in host_matchers):
                out.setdefault(i % self.T, set()).add(i // self.T)
        return dict(out), nodeless


@dataclass
class Answer:
    """One evaluated query: its series (:data:`Row`, sorted by labels), samples scanned."""

    series: list[Row]
    scanned: int
    #: Series the selector read (over all copies).
    series_read: int = 0


class Evaluator:
    """Evaluates a parsed query over a :class:`Fleet` on a grid of millisecond times."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet

    def evaluate(self, expr: Expr, start_ms: int, end_ms: int, step_ms: int) -> Answer:
        grid = np.arange(start_ms, end_ms + 1, step_ms, dtype=np.int64)
        times = [format_time(int(x)) for x in grid]
        sel = selector_of(expr)
        range_ms = expr_range(expr)
        keep_name = not isinstance(_strip_aggregates(expr), LastOverTime) or "last_over_time" in KEEPS_NAME
        picked, copies, scanned, read = self._select(sel, int(grid[0]) - range_ms, int(grid[-1]))
        fleet, tile = self.fleet, self.fleet.tile
        values, integral = self._values(picked, grid, range_ms)

        def value_of(i: int) -> np.ndarray:
            return values[i]

        def points(v: np.ndarray, whole: bool = False) -> tuple[str, int]:
            fmt = _int_text if whole else format_value
            pts = [_POINT.format(times[j], fmt(x)) for j, x in enumerate(v.tolist()) if x == x]
            return ",".join(pts), len(pts)

        out: list[Row] = []
        if not isinstance(expr, Aggregate):
            for i in picked:
                s = tile.series[i]
                text, n = points(values[i], integral[s.name])
                if not n:
                    continue
                pairs = (("__name__", s.name), *s.pairs) if keep_name else s.pairs
                at = fleet.renamer(tuple(sorted(pairs)))
                for k in copies(i):
                    out.append((*at(k), text, n))
        else:
            out = self._aggregate(expr, picked, copies, value_of, points)
        out.sort(key=lambda row: row[0])
        return Answer(out, scanned, read)

    def _aggregate(self, expr: Aggregate, picked, copies, value_of, points) -> list[Row]:
        if isinstance(expr.inner, Aggregate):
            raise PromQLError("nested aggregations are outside the synthetic subset")
        fleet = self.fleet
        groups = self._groups(expr.by, picked)
        reduce, combine = _AGGREGATORS[expr.op]
        memo: dict[tuple[Pairs, tuple], np.ndarray] = {}
        texts: dict[tuple[Pairs, tuple], tuple[str, int]] = {}
        merged: dict[Pairs, np.ndarray] = {}
        out: list[Row] = []
        for key, by_node in groups.items():
            dependent = any(n in RENAMED for n, _ in key)
            at = fleet.renamer(key)
            per_copy: dict[int, list[int | None]] = {}
            for node, ids in by_node.items():
                for k in copies(ids[0]):
                    per_copy.setdefault(k, []).append(node)
            for k, nodes in per_copy.items():
                mk = (key, tuple(sorted(nodes, key=lambda n: -1 if n is None else n)))
                part = memo.get(mk)
                if part is None:
                    part = memo[mk] = reduce([value_of(i) for n in nodes for i in by_node[n]])
                if dependent:
                    text = texts.get(mk)
                    if text is None:
                        text = texts[mk] = points(part)
                    if text[1]:
                        out.append((*at(k), *text))
                else:
                    merged[key] = part if key not in merged else combine(merged[key], part)
        for key, part in merged.items():
            text, n = points(part)
            if n:
                out.append((key, _labels_json(key), text, n))
        return out

    def _groups(
        self, by_labels: tuple[str, ...], picked: list[int]
    ) -> dict[Pairs, dict[int | None, list[int]]]:
        """The tile's aggregation groups: their ``by`` labels -> tile node -> member series."""
        tile, by = self.fleet.tile, set(by_labels)
        groups: dict[Pairs, dict[int | None, list[int]]] = {}
        for i in picked:
            s = tile.series[i]
            key = tuple(p for p in s.pairs if p[0] in by) + (
                (("__name__", s.name),) if "__name__" in by else ()
            )
            groups.setdefault(tuple(sorted(key)), {}).setdefault(s.node, []).append(i)
        return groups

    def _values(
        self, picked: list[int], grid: np.ndarray, range_ms: int
    ) -> tuple[dict[int, np.ndarray], dict[str, bool]]:
        """Each picked series' value at every grid time (the last sample in ``[t - range, t]``,
        NaN: none), computed a metric at a time on its matrix; and per metric whether every
        value is a whole number (formatted as one)."""
        tile = self.fleet.tile
        by_metric: dict[str, list[int]] = {}
        for i in picked:
            by_metric.setdefault(tile.series[i].name, []).append(i)
        hi = np.searchsorted(tile.times, grid, side="right") - 1
        lo = np.searchsorted(tile.times, grid - range_ms, side="left")
        width = int((hi - lo).max(initial=-1)) + 1
        values: dict[int, np.ndarray] = {}
        integral: dict[str, bool] = {}
        for name, ids in by_metric.items():
            m = tile.matrix[name][[tile.series[i].row for i in ids]]
            out = np.full((len(ids), len(grid)), np.nan)
            for d in range(width):
                idx = hi - d
                ok = idx >= lo
                if not ok.any():
                    continue
                cand = m[:, np.maximum(idx, 0)]
                take = np.isnan(out) & ok[None, :]
                out[take] = cand[take]
            finite = out[~np.isnan(out)]
            integral[name] = bool(
                np.all(np.abs(finite) < 1e15)
                and np.array_equal(finite, np.floor(finite))
                and not np.signbit(finite).any()
            )
            for r, i in enumerate(ids):
                values[i] = out[r]
        return values, integral

    def _select(self, sel: Selector, first_ms: int, last_ms: int):
        """The tile series the selector picks, a function giving the copies of each, and the raw
        samples they hold in [first_ms, last_ms] over all copies."""
        tile, fleet = self.fleet.tile, self.fleet
        names = [m for m in sel.matchers if m.label == "__name__"]
        hosts = [m for m in sel.matchers if m.label == c.NODE_LABEL]
        renamed = [m for m in sel.matchers if m.label in RENAMED and m.label != c.NODE_LABEL]
        other = [m for m in sel.matchers if m.label not in RENAMED and m.label != "__name__"]
        exact = next((m for m in names if m.op == "=" or (m.op == "=~" and m.literals is not None)), None)
        if exact is not None:
            metrics = [exact.value] if exact.op == "=" else sorted(exact.literals or ())
        else:
            metrics = list(tile.by_metric)
        metrics = [n for n in metrics if n in tile.by_metric and all(m.matches(n) for m in names)]
        chosen, nodeless = fleet.selection(hosts)
        picked: list[int] = []
        scanned = read = 0
        lo, hi = np.searchsorted(tile.times, first_ms, "left"), np.searchsorted(tile.times, last_ms, "right")
        for name in metrics:
            held = (~np.isnan(tile.matrix[name][:, lo:hi])).sum(axis=1)
            for i in tile.by_metric[name]:
                s = tile.series[i]
                if s.node is not None and s.node not in chosen:
                    continue
                if s.node is None and not nodeless:
                    continue
                labels = dict(s.pairs)
                if not all(m.matches(labels.get(m.label, "")) for m in other):
                    continue
                picked.append(i)
                n = 1 if s.node is None else len(chosen[s.node])
                scanned += int(held[s.row]) * n
                read += n

        def copies(i: int) -> Iterable[int]:
            s = tile.series[i]
            ks: Iterable[int] = (0,) if s.node is None else chosen[s.node]
            if renamed:
                labels = dict(s.pairs)
                ks = [
                    k
                    for k in ks
                    if all(m.matches(fleet.rename(m.label, labels.get(m.label, ""), k)) for m in renamed)
                ]
            return sorted(ks) if isinstance(ks, set) else ks

        if renamed:
            picked = [i for i in picked if copies(i)]
        return picked, copies, scanned, read

    def series(self, sel: Selector, first_ms: int, last_ms: int) -> list[Pairs]:
        """``/api/v1/series``: the label sets (with ``__name__``) holding a sample in the range."""
        picked, copies, *_ = self._select(sel, first_ms, last_ms)
        out = []
        tile = self.fleet.tile
        for i in picked:
            s = tile.series[i]
            t, _ = tile.samples(i)
            if not ((t >= first_ms) & (t <= last_ms)).any():
                continue
            pairs = tuple(sorted((("__name__", s.name), *s.pairs)))
            out.extend(self.fleet.renamed(pairs, k) for k in copies(i))
        out.sort()
        return out


def _strip_aggregates(expr: Expr) -> Expr:
    while isinstance(expr, Aggregate):
        expr = expr.inner
    return expr


def expr_range(expr: Expr) -> int:
    inner = _strip_aggregates(expr)
    return inner.range_ms if isinstance(inner, LastOverTime) else LOOKBACK_MS


def _int_text(x: float) -> str:
    return str(int(x))


def _stack(vs: list[np.ndarray]) -> np.ndarray:
    return np.vstack(vs)


def _nan_reduce(fn):
    def reduce(vs: list[np.ndarray]) -> np.ndarray:
        a = _stack(vs)
        present = ~np.isnan(a)
        with np.errstate(all="ignore"):
            r = fn(np.where(present, a, _IDENTITY[fn]), axis=0)
        return np.where(present.any(axis=0), r, np.nan)

    return reduce


_IDENTITY = {np.max: -np.inf, np.min: np.inf, np.sum: 0.0}


def _count(vs: list[np.ndarray]) -> np.ndarray:
    n = (~np.isnan(_stack(vs))).sum(axis=0).astype(float)
    return np.where(n > 0, n, np.nan)


def _group(vs: list[np.ndarray]) -> np.ndarray:
    return np.where((~np.isnan(_stack(vs))).any(axis=0), 1.0, np.nan)


def _nan_combine(fn):
    def combine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.where(np.isnan(a), b, np.where(np.isnan(b), a, fn(a, b)))

    return combine


_AGGREGATORS = {
    "max": (_nan_reduce(np.max), _nan_combine(np.maximum)),
    "min": (_nan_reduce(np.min), _nan_combine(np.minimum)),
    "sum": (_nan_reduce(np.sum), _nan_combine(np.add)),
    "count": (_count, _nan_combine(np.add)),
    "group": (_group, _nan_combine(np.maximum)),
}


# ---------------------------------------------------------------------- the HTTP API
@dataclass
class Stats:
    """What the server has answered (``/synthetic/stats``)."""

    queries: dict[str, int] = field(default_factory=dict)
    samples_answered: int = 0
    samples_scanned: int = 0
    series_scanned: int = 0
    series_answered: int = 0
    bytes_answered: int = 0
    #: CPU seconds this process spent since the last reset (answering, and nothing else runs here).
    cpu_from: float = field(default_factory=time.process_time)
    #: The same counts by the query's outermost operation (``group``, ``max``, ``last_over_time``,
    #: ``selector``): the service's discovery is its ``group`` query.
    by_kind: dict[str, dict[str, int]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(
        self,
        endpoint: str,
        samples: int,
        scanned: int,
        series: int,
        nbytes: int,
        kind: str = "",
        series_read: int = 0,
    ) -> None:
        with self.lock:
            self.queries[endpoint] = self.queries.get(endpoint, 0) + 1
            self.samples_answered += samples
            self.samples_scanned += scanned
            self.series_scanned += series_read
            self.series_answered += series
            self.bytes_answered += nbytes
            if kind:
                k = self.by_kind.setdefault(kind, dict.fromkeys(_KIND_FIELDS, 0))
                for f, v in zip(
                    _KIND_FIELDS, (1, samples, scanned, nbytes, series_read, series), strict=True
                ):
                    k[f] += v

    def snapshot(self, reset: bool = False) -> dict:
        with self.lock:
            doc = {
                "queries": dict(self.queries),
                "samples_answered": self.samples_answered,
                "samples_scanned": self.samples_scanned,
                "series_scanned": self.series_scanned,
                "series_answered": self.series_answered,
                "bytes_answered": self.bytes_answered,
                "by_kind": {k: dict(v) for k, v in self.by_kind.items()},
                "cpu_s": round(time.process_time() - self.cpu_from, 3),
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
            }
            if reset:
                self.queries, self.samples_answered, self.samples_scanned, self.by_kind = {}, 0, 0, {}
                self.series_answered = self.bytes_answered = self.series_scanned = 0
                self.cpu_from = time.process_time()
        return doc


_KIND_FIELDS = (
    "queries",
    "samples_answered",
    "samples_scanned",
    "bytes_answered",
    "series_scanned",
    "series_answered",
)


def kind_of(expr: Expr) -> str:
    """The outermost operation of a query (:attr:`Stats.by_kind`)."""
    if isinstance(expr, Aggregate):
        return expr.op
    return "last_over_time" if isinstance(expr, LastOverTime) else "selector"


class BadData(Exception):
    """A request Prometheus answers with 400 ``bad_data``."""


def parse_time_param(text: str) -> int:
    """A ``time``/``start``/``end`` parameter (seconds or RFC 3339) in milliseconds."""
    try:
        return round(float(text) * 1000)
    except ValueError:
        pass
    try:
        return round(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        raise BadData(f'cannot parse "{text}" to a valid timestamp') from None


def parse_step_param(text: str) -> int:
    try:
        ms = round(float(text) * 1000)
    except ValueError:
        try:
            from tests.support.promql_subset import parse_duration

            ms = parse_duration(text)
        except PromQLError:
            raise BadData(f'cannot parse "{text}" to a valid duration') from None
    if ms <= 0:
        raise BadData(
            "zero or negative query resolution step widths are not accepted. Try a positive integer"
        )
    return ms


class SyntheticPrometheus:
    """``SyntheticPrometheus(fleet).start()`` serves the fleet on ``url`` until :meth:`stop`."""

    def __init__(
        self,
        fleet: Fleet,
        host: str = "127.0.0.1",
        port: int = 0,
        scan_ns: float = 0.0,
        scan_series_ns: float = 0.0,
    ) -> None:
        self.fleet, self.evaluator, self.stats = fleet, Evaluator(fleet), Stats()
        self.scan_ns, self.scan_series_ns = scan_ns, scan_series_ns
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                self._answer(parts.path, parse_qs(parts.query))

            def do_POST(self) -> None:
                parts = urlsplit(self.path)
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n).decode("utf-8", "replace") if n else ""
                params = parse_qs(parts.query)
                for k, v in parse_qs(body).items():
                    params.setdefault(k, []).extend(v)
                self._answer(parts.path, params)

            def _answer(self, path: str, params: dict[str, list[str]]) -> None:
                status, body = server.handle(path, params)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> SyntheticPrometheus:
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="synthetic-prom", daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> SyntheticPrometheus:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the API
    def handle(self, path: str, params: dict[str, list[str]]) -> tuple[int, bytes]:
        one = {k: v[-1] for k, v in params.items() if v}
        try:
            if path == "/api/v1/query_range":
                return 200, self._query_range(one)
            if path == "/api/v1/query":
                return 200, self._query(one)
            if path == "/api/v1/series":
                return 200, self._series(params, one)
            if path == "/api/v1/status/buildinfo":
                return 200, _success({"version": "2.42.0-synthetic", "revision": "synthetic"})
            if path == "/synthetic/stats":
                return 200, json.dumps(self.stats.snapshot(reset=one.get("reset") == "1")).encode()
            if path in ("/-/ready", "/-/healthy"):
                return 200, b"Prometheus Server is Ready.\n"
            return 404, b'{"status":"error","errorType":"not_found","error":"not found"}'
        except (BadData, PromQLError) as exc:
            doc = {"status": "error", "errorType": "bad_data", "error": str(exc)}
            return 400, json.dumps(doc).encode()

    def _expr(self, one: dict[str, str]) -> Expr:
        if "query" not in one:
            raise BadData("1:1: parse error: no expression found in input")
        return parse(one["query"])

    def _charge(self, ans: Answer) -> None:
        """Spend ``scan_ns`` of CPU per sample and ``scan_series_ns`` per series that a real store
        reads but does not answer (what an aggregation folds away), which this server's
        evaluation of a tile series once for all copies does not pay for. What it answers it
        pays for itself."""
        samples = max(0, ans.scanned - sum(row[3] for row in ans.series))
        series = max(0, ans.series_read - len(ans.series))
        cost = samples * self.scan_ns + series * self.scan_series_ns
        if cost <= 0:
            return
        until = time.thread_time() + cost * 1e-9
        while time.thread_time() < until:
            pass

    def _query_range(self, one: dict[str, str]) -> bytes:
        for p in ("start", "end", "step"):
            if p not in one:
                raise BadData(f'invalid parameter "{p}": missing')
        start, end, step = (
            parse_time_param(one["start"]),
            parse_time_param(one["end"]),
            parse_step_param(one["step"]),
        )
        if end < start:
            raise BadData('invalid parameter "end": end timestamp must not be before start time')
        if (end - start) // step + 1 > MAX_POINTS:
            raise BadData(
                "exceeded maximum resolution of 11,000 points per timeseries. "
                "Try decreasing the query resolution (?step=XX)"
            )
        expr = self._expr(one)
        ans = self.evaluator.evaluate(expr, start, end, step)
        self._charge(ans)
        body = (
            '{"status":"success","data":{"resultType":"matrix","result":['
            + ",".join(f'{{"metric":{labels},"values":[{text}]}}' for _, labels, text, _ in ans.series)
            + "]}}"
        ).encode()
        samples = sum(n for *_, n in ans.series)
        self.stats.add(
            "query_range", samples, ans.scanned, len(ans.series), len(body), kind_of(expr), ans.series_read
        )
        return body

    def _query(self, one: dict[str, str]) -> bytes:
        at = parse_time_param(one["time"]) if "time" in one else round(datetime.now().timestamp() * 1000)
        expr = self._expr(one)
        ans = self.evaluator.evaluate(expr, at, at, 1000)
        self._charge(ans)
        body = (
            '{"status":"success","data":{"resultType":"vector","result":['
            + ",".join(f'{{"metric":{labels},"value":{text}}}' for _, labels, text, _ in ans.series)
            + "]}}"
        ).encode()
        self.stats.add(
            "query", len(ans.series), ans.scanned, len(ans.series), len(body), kind_of(expr), ans.series_read
        )
        return body

    def _series(self, params: dict[str, list[str]], one: dict[str, str]) -> bytes:
        matches = params.get("match[]") or []
        if not matches:
            raise BadData("no match[] parameter provided")
        first = parse_time_param(one["start"]) if "start" in one else -(2**62)
        last = parse_time_param(one["end"]) if "end" in one else 2**62
        found: set[Pairs] = set()
        for text in matches:
            expr = parse(text)
            if not isinstance(expr, Selector):
                raise BadData(f'invalid parameter "match[]": {text} is not a vector selector')
            found.update(self.evaluator.series(expr, first, last))
        rows = sorted(found)
        body = _success([dict(p) for p in rows])
        self.stats.add("series", 0, 0, len(rows), len(body))
        return body


def _success(data: object) -> bytes:
    return json.dumps({"status": "success", "data": data}, separators=(",", ":")).encode()


# ---------------------------------------------------------------------- the benchmark's fleet
def bench_tile_spec(
    tile_nodes: int,
    job_nodes: int,
    start: float,
    seconds: float,
    seed: int = 1,
    name: str = "realistic_synthetic_tile",
) -> ScenarioSpec:
    """The fleet of :mod:`benchmarks.bench_shards` (its synthetic tile, and its backfilled fleet):
    jobs of ``job_nodes`` nodes, the last ``job_nodes`` nodes job-less, a GPU throttling in the
    first job a third of the way in."""
    from fleetscope.simulate.spec import FaultSpec, JobSpec

    jobs = [
        JobSpec(f"job-{j}", nodes=job_nodes, first_node=j * job_nodes)
        for j in range(tile_nodes // job_nodes - 1)
    ]
    return ScenarioSpec(
        name=name,
        nodes=tile_nodes,
        duration_s=seconds,
        start=start,
        seed=seed,
        jobs=jobs,
        faults=[FaultSpec(kind="thermal_throttle", at_s=seconds / 3, node=3, gpu=1, slowdown=0.3)],
    )


#: How often a store evaluates the generated recording group (compose's and the chart's
#: Prometheus: the global ``evaluation_interval``).
RULE_INTERVAL_S = 15.0


def with_discovery_rule(tile: Tile, interval_s: float = RULE_INTERVAL_S) -> Tile:
    """``tile`` with the series of the discovery's recording rule (the generated recording group's
    ``Hostname_job_id_model_name:fleetscope_identity:group1m``), as Prometheus records them."""
    from fleetscope.alerts.recording import discovery

    rule = discovery()
    return tile.with_recording(rule.record, rule.expr, interval_s)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Serve a synthetic Prometheus for a simulated fleet.")
    p.add_argument("--fleet-nodes", type=int, required=True)
    p.add_argument("--tile-nodes", type=int, default=128)
    p.add_argument("--job-nodes", type=int, default=32)
    p.add_argument("--start", type=float, default=ScenarioSpec().start)
    p.add_argument("--seconds", type=float, default=1980.0)
    p.add_argument("--port", type=int, default=0)
    p.add_argument(
        "--scan-ns", type=float, default=0.0, help="CPU ns spent per sample read but not answered (0: none)"
    )
    p.add_argument(
        "--scan-series-ns", type=float, default=0.0, help="CPU ns spent per series read but not answered"
    )
    p.add_argument(
        "--no-discovery-rule",
        action="store_true",
        help="leave out the recording rule of the sharded service's discovery (a store without it)",
    )
    args = p.parse_args(argv)
    spec = bench_tile_spec(args.tile_nodes, args.job_nodes, args.start, args.seconds)
    tile = Tile.simulate(spec)
    if not args.no_discovery_rule:
        tile = with_discovery_rule(tile)
    server = SyntheticPrometheus(
        Fleet(tile, args.fleet_nodes),
        port=args.port,
        scan_ns=args.scan_ns,
        scan_series_ns=args.scan_series_ns,
    ).start()
    print(json.dumps({"url": server.url, "tile_series": len(tile.series)}), flush=True)
    try:
        sys.stdin.read()  # until the parent closes it, or dies
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
