"""Per-replica signals of inference servers (vLLM), built from the frames once per analysis.

A **replica** is one serving process: its ``pod`` (and ``namespace``) on Kubernetes, else its
``Hostname`` and scrape ``instance`` (host:port). Several engine cores of one replica (vLLM's
``engine`` label) are summed. A replica's GPUs are the GPU series that carry its pod as attribution
labels (dcgm-exporter's Kubernetes mapping), else every GPU of its node.

Latencies come from the histograms as PromQL's ``histogram_quantile`` reads them: the buckets'
increase over the rate window, a linear interpolation inside the bucket that holds the quantile.
The mean inter-token latency (``_sum`` / ``_count`` increase) is the decode-speed signal: it moves
continuously, where a p95 read from vLLM's coarse buckets jumps from one bound to the next.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from fleetscope import contract as c
from fleetscope.analyzers.features import ITL_NAMES, KV_NAMES
from fleetscope.window.frames import Frames, increase_steps, rolling_sum

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


def _quantile_of(
    frames: Frames, hist: c.Histogram | None, index: dict[Replica, int], w: int, q: float
) -> np.ndarray:
    T, R = len(frames.times), len(index)
    if hist is None:
        return np.full((T, R), np.nan)
    cum, les = _per_replica(frames, hist.bucket, index, "sum", ("le",))
    if not les:
        return np.full((T, R), np.nan)
    bounds = np.array([_le_key(v[0]) for v in les])
    inc = _window(cum, w)
    top = inc[..., -1]
    # Buckets are cumulative; a bucket missing from one scrape must not make them decrease.
    inc = np.maximum.accumulate(np.nan_to_num(inc), axis=2)
    return np.where(np.isnan(top), np.nan, histogram_quantile(q, bounds, inc))


def _replicas(frames: Frames) -> list[Replica]:
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


def serving_signals(frames: Frames, w: int) -> ServingSignals:
    """Every replica's signals over the window (no replicas: empty arrays)."""
    replicas = _replicas(frames)
    index = {r: i for i, r in enumerate(replicas)}
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
        itl_p95=_quantile_of(frames, itl_hist, index, w, 0.95),
        ttft_p95=_quantile_of(frames, ttft, index, w, 0.95),
        gpus=_replica_gpus(frames, replicas),
    )
