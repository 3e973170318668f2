"""Per-replica signals of inference servers (vLLM), built from the frames once per analysis.

A **replica** is one serving process: its ``pod`` (and ``namespace``) on Kubernetes, else its
``Hostname`` and scrape ``instance`` (host:port). Several engine cores of one replica (vLLM's
``engine`` label) are summed. A replica's GPUs are the GPU series that carry its pod as attribution
labels (dcgm-exporter's Kubernetes mapping), else every GPU of its node.

Latencies come from the histograms as PromQL's ``histogram_quantile`` reads them: the buckets'
increase over the rate window, a linear interpolation inside the bucket that holds the quantile.
The mean inter-token latency (``_sum`` / ``_count`` increase) is the decode-speed signal: it moves
continuously, where a p95 read from vLLM's coarse buckets jumps from one bound to the next.

Progress, not liveness: per grid step, whether the replica had work in flight (requests running at
both ends of the step, or requests its HTTP layer answered while the engine made nothing) and its
generated-token and finished-request counters stood still (:func:`stalled_steps`). The HTTP layer
(``http_requests_total``, vLLM's API server; no ``model_name``) is joined to the replica on its pod,
else on its target. A replica's node is the ``Hostname`` of the GPUs attributed to its pod
(dcgm-exporter's Kubernetes mapping): a pod's own ``instance`` is its IP, never a node's name.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from fleetscope import contract as c
from fleetscope.analyzers.features import ITL_NAMES, KV_NAMES
from fleetscope.window.frames import Frames, increase_steps, rolling_sum

#: The API server routes whose answers count as the replica's requests (vLLM's OpenAI server).
HTTP_ROUTES = "/v1/"

REPLICA_KEY = ("model_name", "namespace", "pod", c.NODE_LABEL, c.INSTANCE_LABEL)


@dataclass(frozen=True)
class Replica:
    model: str
    namespace: str
    pod: str
    node: str
    instance: str

    @property
    def name(self) -> str:
        """How a person names it: the pod, else host:port."""
        return self.pod or self.instance or self.node

    @property
    def host(self) -> str:
        """The node it runs on: ``Hostname``, else the host part of ``instance``."""
        return self.node or self.instance.rsplit(":", 1)[0]


@dataclass
class ServingSignals:
    """One column per replica, one row per grid time (NaN where the replica has no data)."""

    replicas: list[Replica]
    present: np.ndarray  # bool: the engine serves its series
    running: np.ndarray
    waiting: np.ndarray
    kv: np.ndarray  # KV-cache usage, 0-1
    preempt_rate: np.ndarray  # preemptions per second over the rate window
    gen_rate: np.ndarray  # generated tokens per second
    request_rate: np.ndarray  # finished requests per second
    prompt_per_request: np.ndarray  # prompt tokens per finished request
    itl_mean: np.ndarray  # seconds
    itl_p95: np.ndarray
    ttft_p95: np.ndarray
    gpus: list[list[tuple[str, str]]] = field(default_factory=list)  # (Hostname, gpu) per replica
    #: The node each replica runs on, by name: its pod's GPUs' ``Hostname``, else :attr:`Replica.host`.
    nodes: list[str] = field(default_factory=list)
    #: Per grid step: generated tokens and finished requests (increments; NaN without a sample).
    tokens: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    finished: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    #: Per grid step: requests the HTTP layer answered on the OpenAI routes, all and 5xx
    #: (increments; NaN where the server exposes no ``http_requests_total``).
    http_all: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    http_5xx: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    #: Per grid time: grid steps in a row, up to this one, with work in flight and no progress.
    stalled: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=int))
    #: The replica's p99 inter-token latency, its last value where the window had gaps (a stalled
    #: engine observes nothing, so its own recent latency is the one before the stall).
    itl_p99_last: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))

    def models(self) -> dict[str, np.ndarray]:
        """Model -> boolean mask of its replica columns."""
        names = np.array([r.model for r in self.replicas], dtype=object)
        return {m: names == m for m in dict.fromkeys(names.tolist())}


@contextmanager
def _quiet() -> Iterator[None]:
    """All-NaN slices and empty windows are expected here: no RuntimeWarning for them."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def _first(frames: Frames, names: tuple[str, ...]) -> str | None:
    return next((n for n in names if frames.has(n)), None)


def _per_replica(
    frames: Frames, name: str | None, index: dict[Replica, int], how: str, extra: tuple[str, ...] = ()
) -> tuple[np.ndarray, list[tuple[str, ...]]]:
    """(T x R[ x extra values]) array of one metric by replica; the extra label values found."""
    T, R = len(frames.times), len(index)
    if name is None or not frames.has(name):
        return np.full((T, R, 1) if extra else (T, R), np.nan), []
    lab, vals = frames.get(name).group(REPLICA_KEY + extra, how)
    rows = [tuple(str(x) for x in r) for r in lab.itertuples(index=False, name=None)]
    values = sorted({r[len(REPLICA_KEY) :] for r in rows}, key=lambda v: tuple(_le_key(x) for x in v))
    out = np.full((T, R, max(len(values), 1)) if extra else (T, R), np.nan)
    vidx = {v: i for i, v in enumerate(values)}
    for j, r in enumerate(rows):
        k = index.get(Replica(*r[: len(REPLICA_KEY)]))
        if k is None:
            continue
        if extra:
            out[:, k, vidx[r[len(REPLICA_KEY) :]]] = vals[:, j]
        else:
            out[:, k] = vals[:, j]
    return out, values


def _le_key(x: str) -> float:
    try:
        return float(x)
    except ValueError:
        return float("inf") if x == "+Inf" else 0.0


def replica_buckets(
    frames: Frames, hist: c.Histogram, replicas: list[Replica]
) -> tuple[np.ndarray, list[float]]:
    """A histogram's cumulative bucket counts per grid time, replica (in the order of ``replicas``) and
    bucket (engine cores summed), and the buckets' upper bounds (``le``, ``+Inf`` as infinity)."""
    index = {rep: i for i, rep in enumerate(replicas)}
    cum, les = _per_replica(frames, hist.bucket, index, "sum", ("le",))
    return cum, [_le_key(v[0]) for v in les]


def _window(x: np.ndarray, w: int) -> np.ndarray:
    """Increase of counters over the last ``w`` grid steps (any shape with time first)."""
    shape = x.shape
    flat = x.reshape(shape[0], -1)
    return rolling_sum(increase_steps(flat), w).reshape(shape)


def histogram_quantile(q: float, bounds: np.ndarray, cum: np.ndarray) -> np.ndarray:
    """PromQL's ``histogram_quantile`` over the last axis of cumulative counts ``cum``.

    ``bounds`` are the upper bounds (``+Inf`` last); NaN where there are no observations. A quantile
    in the ``+Inf`` bucket is the highest finite bound, as in PromQL.
    """
    total = cum[..., -1]
    with _quiet(), np.errstate(all="ignore"):
        rank = q * total
        above = cum >= rank[..., None]
        b = np.argmax(above, axis=-1)
        lower = np.where(b > 0, bounds[np.maximum(b - 1, 0)], 0.0)
        upper = bounds[b]
        c_lo = np.where(b > 0, np.take_along_axis(cum, np.maximum(b - 1, 0)[..., None], -1)[..., 0], 0.0)
        c_hi = np.take_along_axis(cum, b[..., None], -1)[..., 0]
        frac = np.where(c_hi > c_lo, (rank - c_lo) / (c_hi - c_lo), 1.0)
        finite_top = bounds[np.isfinite(bounds)][-1] if np.isfinite(bounds).any() else np.nan
        out = np.where(np.isinf(upper), finite_top, lower + (upper - lower) * frac)
        return np.where(total > 0, out, np.nan)


#: A histogram's cumulative bucket counts per grid time, replica and bucket, and the buckets' upper
#: bounds (:func:`replica_buckets`), as a caller keeps them.
Buckets = Callable[[c.Histogram], tuple[np.ndarray, list[float]]]


def _quantiles_of(
    frames: Frames, hist: c.Histogram | None, buckets: Buckets, replicas: int, w: int, *qs: float
) -> list[np.ndarray]:
    """The quantiles ``qs`` of ``hist`` per grid time and replica (its buckets' increase over the
    last ``w`` grid steps, computed once for all of them)."""
    T = len(frames.times)
    if hist is None:
        return [np.full((T, replicas), np.nan) for _ in qs]
    cum, les = buckets(hist)
    if not les:
        return [np.full((T, replicas), np.nan) for _ in qs]
    bounds = np.array(les)
    inc = _window(cum, w)
    top = inc[..., -1]
    # Buckets are cumulative; a bucket missing from one scrape must not make them decrease.
    inc = np.maximum.accumulate(np.nan_to_num(inc), axis=2)
    return [np.where(np.isnan(top), np.nan, histogram_quantile(q, bounds, inc)) for q in qs]


def serving_replicas(frames: Frames) -> list[Replica]:
    """The window's serving replicas, in the order of every per-replica array."""
    seen: dict[Replica, None] = {}
    for name in (c.VLLM_NUM_REQUESTS_RUNNING, c.VLLM_GENERATION_TOKENS):
        if frames.has(name):
            lab, _ = frames.get(name).group(REPLICA_KEY)
            for r in lab.itertuples(index=False, name=None):
                seen[Replica(*(str(x) for x in r))] = None
    return list(seen)


def _replica_gpus(frames: Frames, replicas: list[Replica]) -> list[list[tuple[str, str]]]:
    """Each replica's GPUs: those whose series carry its pod, else every GPU of its node."""
    by_pod: dict[tuple[str, str], list[tuple[str, str]]] = {}
    by_node: dict[str, list[tuple[str, str]]] = {}
    for name in (c.GPU_UP, c.DCGM_FI_DEV_SM_CLOCK):
        m = frames.get(name)
        for node, gpu, ns, pod in zip(
            m.column(c.NODE_LABEL), m.column("gpu"), m.column("namespace"), m.column("pod"), strict=True
        ):
            key = (str(node), str(gpu))
            if pod and key not in by_pod.setdefault((str(ns), str(pod)), []):
                by_pod[(str(ns), str(pod))].append(key)
            if key not in by_node.setdefault(str(node), []):
                by_node[str(node)].append(key)
    out = []
    for r in replicas:
        gpus = by_pod.get((r.namespace, r.pod)) if r.pod else None
        out.append(sorted(gpus or by_node.get(r.host, []), key=lambda k: (k[0], len(k[1]), k[1])))
    return out


def _replica_nodes(frames: Frames, replicas: list[Replica]) -> list[str]:
    """Each replica's node by name: the ``Hostname`` of the GPUs attributed to its pod, else
    :attr:`Replica.host` (its own ``Hostname``, else the host part of its ``instance``)."""
    by_pod: dict[tuple[str, str], str] = {}
    for name in (c.GPU_UP, c.DCGM_FI_DEV_SM_CLOCK, c.DCGM_FI_DEV_GPU_UTIL):
        if not frames.has(name):
            continue
        m = frames.get(name)
        for node, ns, pod in zip(m.column(c.NODE_LABEL), m.column("namespace"), m.column("pod"), strict=True):
            if pod and node:
                by_pod.setdefault((str(ns), str(pod)), str(node))
    return [by_pod.get((r.namespace, r.pod), r.host) if r.pod else r.host for r in replicas]


def _http_per_replica(frames: Frames, replicas: list[Replica]) -> tuple[np.ndarray, np.ndarray]:
    """Per grid step and replica: requests answered on the OpenAI routes, all and 5xx (increments;
    NaN where the replica's server exposes no ``http_requests_total``)."""
    T, R = len(frames.times), len(replicas)
    total, errors = np.full((T, R), np.nan), np.full((T, R), np.nan)
    if not R or not frames.has(c.VLLM_HTTP_REQUESTS):
        return total, errors
    m = frames.get(c.VLLM_HTTP_REQUESTS)
    by_pod = {(r.namespace, r.pod): k for k, r in enumerate(replicas) if r.pod}
    by_target = {r.instance: k for k, r in enumerate(replicas) if not r.pod and r.instance}
    inc = increase_steps(m.values)
    cols = zip(
        m.column("namespace"), m.column("pod"), m.column(c.INSTANCE_LABEL), m.column("handler"),
        m.column("status"), strict=True,
    )  # fmt: skip
    for j, (ns, pod, instance, handler, status) in enumerate(cols):
        if not str(handler).startswith(HTTP_ROUTES):
            continue
        k = by_pod.get((str(ns), str(pod))) if pod else by_target.get(str(instance))
        if k is None:
            continue
        for out in (total, errors) if status == "5xx" else (total,):
            out[:, k] = np.where(np.isnan(inc[:, j]), out[:, k], np.nan_to_num(out[:, k]) + inc[:, j])
    # A replica whose 5xx series does not exist yet has had no 5xx (the instrumentator creates it
    # at the first one): 0 wherever its HTTP layer answered.
    errors = np.where(np.isnan(errors) & ~np.isnan(total), 0.0, errors)
    return total, errors


def stalled_steps(
    running: np.ndarray, tokens: np.ndarray, finished: np.ndarray, answered: np.ndarray
) -> np.ndarray:
    """Per grid time and replica: grid steps in a row, up to this one, in which the replica had work
    in flight and made no progress. In flight: requests running at both ends of the step, or
    requests its HTTP layer answered (closed streams) in it. No progress: its generated-token and
    finished-request counters did not advance. A missing sample is no evidence (it ends the run):
    a pod that is gone or new is not a stopped one."""
    T, R = running.shape
    out = np.zeros((T, R), dtype=int)
    if T < 2:
        return out
    busy = (np.nan_to_num(running[1:]) > 0) & (np.nan_to_num(running[:-1]) > 0)
    busy |= np.nan_to_num(answered[1:]) > 0
    still = (tokens[1:] == 0) & (finished[1:] == 0)  # NaN compares False
    stuck = busy & still
    run = np.zeros(R, dtype=int)
    for t in range(1, T):
        run = np.where(stuck[t - 1], run + 1, 0)
        out[t] = run
    return out


def _ffill(x: np.ndarray) -> np.ndarray:
    """Each column's last finite value carried forward (NaN before the first)."""
    out = x.copy()
    for t in range(1, len(out)):
        out[t] = np.where(np.isnan(out[t]), out[t - 1], out[t])
    return out


def serving_signals(
    frames: Frames, w: int, replicas: list[Replica] | None = None, buckets: Buckets | None = None
) -> ServingSignals:
    """Every replica's signals over the window (no replicas: empty arrays). ``replicas``:
    :func:`serving_replicas` of ``frames``, when the caller has them; ``buckets``: the caller's
    :func:`replica_buckets` of them, so a histogram's buckets are gathered once for its quantiles
    here and for whatever else the caller reads of them (the service's SLO burn rates)."""
    if replicas is None:
        replicas = serving_replicas(frames)
    index = {r: i for i, r in enumerate(replicas)}
    if buckets is None:
        known = replicas

        def buckets(hist: c.Histogram) -> tuple[np.ndarray, list[float]]:
            return replica_buckets(frames, hist, known)

    step = frames.step

    def gauge(name: str | None, how: str = "sum") -> np.ndarray:
        return _per_replica(frames, name, index, how)[0]

    def per_s(name: str) -> np.ndarray:
        return _window(gauge(name), w) / (w * step)

    running = gauge(c.VLLM_NUM_REQUESTS_RUNNING)
    itl = _first(frames, tuple(h.observations for h in ITL_NAMES))
    itl_hist = next((h for h in ITL_NAMES if h.observations == itl), None)
    with _quiet(), np.errstate(all="ignore"):
        itl_mean = (
            _window(gauge(itl_hist.sum), w) / _window(gauge(itl_hist.observations), w)
            if itl_hist
            else np.full_like(running, np.nan)
        )
        requests = per_s(c.VLLM_REQUEST_SUCCESS)
        prompt = per_s(c.VLLM_PROMPT_TOKENS)
        prompt_per_request = np.where(requests > 0, prompt / requests, np.nan)
    ttft = c.VLLM_TIME_TO_FIRST_TOKEN if frames.has(c.VLLM_TIME_TO_FIRST_TOKEN.bucket) else None
    tokens = increase_steps(gauge(c.VLLM_GENERATION_TOKENS))
    finished = increase_steps(gauge(c.VLLM_REQUEST_SUCCESS))
    http_all, http_5xx = _http_per_replica(frames, replicas)
    answered_ok = np.nan_to_num(http_all) - np.nan_to_num(http_5xx)
    itl_p95, itl_p99 = _quantiles_of(frames, itl_hist, buckets, len(replicas), w, 0.95, 0.99)
    (ttft_p95,) = _quantiles_of(frames, ttft, buckets, len(replicas), w, 0.95)
    return ServingSignals(
        replicas=replicas,
        present=~np.isnan(running),
        running=running,
        waiting=gauge(c.VLLM_NUM_REQUESTS_WAITING),
        kv=gauge(_first(frames, KV_NAMES), "max"),
        preempt_rate=per_s(c.VLLM_NUM_PREEMPTIONS),
        gen_rate=per_s(c.VLLM_GENERATION_TOKENS),
        request_rate=requests,
        prompt_per_request=prompt_per_request,
        itl_mean=itl_mean,
        itl_p95=itl_p95,
        ttft_p95=ttft_p95,
        gpus=_replica_gpus(frames, replicas),
        nodes=_replica_nodes(frames, replicas),
        tokens=tokens,
        finished=finished,
        http_all=http_all,
        http_5xx=http_5xx,
        stalled=stalled_steps(running, tokens, finished, answered_ok),
        itl_p99_last=_ffill(itl_p99),
    )
