"""Inference rules: SLOs of serving replicas as multiwindow, multi-burn-rate alerts, and saturation.

Recording rules (:func:`recordings`, in the ``recording`` group so they are backfilled with the
others; names in ``fleetscope.alerts.names``), each from raw series only: per served model, the
share of requests whose time to first token exceeded the SLO threshold, of inter-token gaps longer
than theirs, and of failed requests, over every window the burn-rate alerts read (5m, 30m, 1h, 6h,
3d). The expressions are ``fleetscope.queries``' (vLLM V0 and V1 spellings, TGI and Triton errors).

Alerts (:func:`group`), following the Google SRE workbook's "Alerting on SLOs" (ch. 5): for each
SLO a page when the error budget burns ``slo_page_fast_burn`` (14.4) times too fast over 1 h and
5 min or ``slo_page_slow_burn`` (6) times over 6 h and 30 min, and a ticket at 1 times over 3 d and
6 h; the alert's value is the long window's burn rate. Beside them: a KV cache full while the
engine preempts, a queue that keeps growing, and a serving target that went down.
"""

from __future__ import annotations

from collections.abc import Callable

from fleetscope import contract as c
from fleetscope import queries
from fleetscope.alerts import names
from fleetscope.alerts.config import Thresholds
from fleetscope.alerts.model import Alert, Case, Fire, Group, InputSeries, Recording
from fleetscope.alerts.testdata import HOST, num

MODEL = "meta-llama/Llama-3.1-70B-Instruct"
_TARGET = {c.INSTANCE_LABEL: f"{HOST}:8000", "job": "vllm"}
#: The labels of a vLLM V1 engine's series as Prometheus stores them.
_ENGINE = {"model_name": MODEL, "engine": "0", **_TARGET}
#: The labels of a recorded SLI.
_SLI = {c.INFERENCE_MODEL_LABEL: MODEL, c.INFERENCE_SERVER_LABEL: "vllm"}
_MODEL = "Model {{ $labels.model }}"
_REPLICA = "The vLLM engine of {{ $labels.model_name }} at {{ $labels.instance }}"


# ---- SLI expressions (the dashboards read the recorded names) --------------------------------
def ttft_slow(cfg: Thresholds, window: str) -> str:
    """Share of requests of each model whose first token came later than the SLO threshold."""
    return (
        f"max by ({c.INFERENCE_MODEL_LABEL}, {c.INFERENCE_SERVER_LABEL}) "
        f"({queries.vllm_ttft_slow_ratio(cfg.inference_ttft_seconds, window)})"
    )


def itl_slow(cfg: Thresholds, window: str) -> str:
    """Share of inter-token gaps of each model longer than the SLO threshold (V0 or V1 names)."""
    return (
        f"max by ({c.INFERENCE_MODEL_LABEL}, {c.INFERENCE_SERVER_LABEL}) "
        f"({queries.vllm_itl_slow_ratio(cfg.inference_itl_seconds, window)})"
    )


def errors(cfg: Thresholds, window: str) -> str:
    """Share of failed requests of each model (all engines)."""
    return queries.model_error_ratio(window)


def replica_node() -> str:
    """One series per vLLM target with its node's ``Hostname`` (the host part of ``instance``)."""
    keep = f"{c.NODE_LABEL}, {c.INSTANCE_LABEL}, job, model_name"
    return f"group by ({keep}) ({queries.instance_hostname(c.VLLM_NUM_REQUESTS_RUNNING)})"


def kv_cache_usage() -> str:
    """KV-cache use (0-1) of each vLLM engine, V1 or V0 spelling."""
    return queries.vllm_kv_cache_usage()


# ---- promtool input series ---------------------------------------------------------------------
def _engine(metric: str, values: str, **extra: str) -> InputSeries:
    return InputSeries(metric, {**_ENGINE, **extra}, values)


def _regimes(*parts: tuple[float, int]) -> str:
    """A counter growing ``per_min`` for ``minutes``, part after part (promtool expanding notation)."""
    out, total = [], 0.0
    for k, (per_min, minutes) in enumerate(parts):
        if k == 0:
            out.append(f"0+{per_min:.10g}x{minutes}")
        else:
            out.append(f"{total + per_min:.10g}+{per_min:.10g}x{minutes - 1}")
        total += per_min * minutes
    return " ".join(out)


def _latency(hist: c.Histogram, le: str, minutes: int, *slow: tuple[float, int]) -> tuple[InputSeries, ...]:
    """A latency histogram's ``le`` bucket and count at 600 observations a minute, of which the
    share ``slow`` (per part of ``(share, minutes)``; the rest of ``minutes`` at 0) were slower."""
    parts = [(share, m) for share, m in slow]
    rest = minutes - sum(m for _, m in parts)
    regimes = [(0.0, rest)] + parts if rest > 0 else parts
    good = _regimes(*((600 * (1 - share), m) for share, m in regimes))
    return (
        _engine(hist.bucket, good, le=le),
        _engine(hist.observations, f"0+600x{minutes}"),
    )


def _ttft(minutes: int, *slow: tuple[float, int]) -> tuple[InputSeries, ...]:
    return _latency(c.VLLM_TIME_TO_FIRST_TOKEN, "2.5", minutes, *slow)


def _itl(minutes: int, *slow: tuple[float, int]) -> tuple[InputSeries, ...]:
    return _latency(c.VLLM_INTER_TOKEN_LATENCY, "0.1", minutes, *slow)


def _http(minutes: int, *failing: tuple[float, int]) -> tuple[InputSeries, ...]:
    """vLLM's HTTP requests (600 a minute) of which the share ``failing`` answered 5xx, and the
    engine series that name the target's model."""
    parts = [(share, m) for share, m in failing]
    rest = minutes - sum(m for _, m in parts)
    regimes = [(0.0, rest)] + parts if rest > 0 else parts
    route = {"handler": "/v1/chat/completions", "method": "POST"}
    return (
        InputSeries(
            c.VLLM_HTTP_REQUESTS,
            {**route, "status": "2xx", **_TARGET},
            _regimes(*((600 * (1 - s), m) for s, m in regimes)),
        ),
        InputSeries(
            c.VLLM_HTTP_REQUESTS,
            {**route, "status": "5xx", **_TARGET},
            _regimes(*((600 * s, m) for s, m in regimes)),
        ),
        _engine(c.VLLM_NUM_REQUESTS_RUNNING, f"40x{minutes}"),
    )


def _minutes(window: str) -> int:
    value, unit = int(window[:-1]), window[-1]
    return value * {"m": 1, "h": 60, "d": 1440}[unit]


# ---- rules -------------------------------------------------------------------------------------
_Slo = tuple[
    str, str, Callable[[Thresholds, str], str], Callable[[str], str], Callable[..., tuple[InputSeries, ...]]
]
_SLOS: tuple[_Slo, ...] = (
    ("Ttft", "time to first token", ttft_slow, names.inference_ttft_slow, _ttft),
    ("Itl", "inter-token latency", itl_slow, names.inference_itl_slow, _itl),
    ("Errors", "error ratio", errors, names.inference_errors, _http),
)  # fmt: skip


def _objective(cfg: Thresholds, key: str) -> float:
    return {
        "Ttft": cfg.inference_ttft_objective,
        "Itl": cfg.inference_itl_objective,
        "Errors": cfg.inference_error_objective,
    }[key]


def _what(cfg: Thresholds, key: str) -> str:
    return {
        "Ttft": f"requests with their first token after {num(cfg.inference_ttft_seconds)} s",
        "Itl": f"inter-token gaps longer than {num(cfg.inference_itl_seconds * 1000)} ms",
        "Errors": "failed requests",
    }[key]


def recordings(cfg: Thresholds) -> tuple[Recording, ...]:
    out = []
    for key, _, expr, name, data in _SLOS:
        for w in names.INFERENCE_SLO_WINDOWS:
            # Ten minutes of data: every window's rate covers the same steady share (a rate over a
            # window longer than the data is the rate over the data there is).
            out.append(
                Recording(
                    name(w),
                    expr(cfg, w),
                    (
                        Case("1 in 64 of them", data(10, (0.015625, 10)), "10m", (Fire(_SLI, 0.015625),)),
                        Case("no traffic: absent, not NaN", _IDLE[key](), "10m"),
                    ),
                )
            )
    replica = {c.NODE_LABEL: HOST, **_TARGET, "model_name": MODEL}
    out.append(
        Recording(
            names.INFERENCE_REPLICA_NODE,
            replica_node(),
            (
                Case(
                    "a V1 engine on ip-10-1-0-11:8000",
                    (_engine(c.VLLM_NUM_REQUESTS_RUNNING, "4x10"),),
                    "10m",
                    (Fire(replica, 1),),
                ),
                Case("no serving target", (InputSeries("up", _TARGET, "1x10"),), "10m"),
            ),
        )
    )
    return tuple(out)


def _idle_http() -> tuple[InputSeries, ...]:
    route = {"handler": "/v1/chat/completions", "method": "POST", "status": "2xx", **_TARGET}
    return (InputSeries(c.VLLM_HTTP_REQUESTS, route, "5x10"), _engine(c.VLLM_NUM_REQUESTS_RUNNING, "0x10"))


def _idle_latency(hist: c.Histogram, le: str) -> tuple[InputSeries, ...]:
    return (_engine(hist.bucket, "7x10", le=le), _engine(hist.observations, "7x10"))


#: Input series of a model that serves nothing, per SLO: its SLIs are absent, not NaN.
_IDLE: dict[str, Callable[[], tuple[InputSeries, ...]]] = {
    "Ttft": lambda: _idle_latency(c.VLLM_TIME_TO_FIRST_TOKEN, "2.5"),
    "Itl": lambda: _idle_latency(c.VLLM_INTER_TOKEN_LATENCY, "0.1"),
    "Errors": _idle_http,
}


def _burn(
    cfg: Thresholds, name: Callable[[str], str], budget: float, long: str, short: str, rate: float
) -> str:
    factor = num(rate)
    b = num(budget)
    return f"({name(long)} / {b} > {factor} and {name(short)} / {b} > {factor})"


def _slo_alerts(cfg: Thresholds) -> list[Alert]:
    alerts = []
    for key, title, _, name, data in _SLOS:
        objective = _objective(cfg, key)
        budget = 1 - objective
        what = _what(cfg, key)
        page_fast = _burn(
            cfg,
            name,
            budget,
            cfg.slo_page_fast_long_window,
            cfg.slo_page_fast_short_window,
            cfg.slo_page_fast_burn,
        )
        page_slow = _burn(
            cfg,
            name,
            budget,
            cfg.slo_page_slow_long_window,
            cfg.slo_page_slow_short_window,
            cfg.slo_page_slow_burn,
        )
        page = f"{page_fast} or {page_slow}"
        ticket = _burn(
            cfg, name, budget, cfg.slo_ticket_long_window, cfg.slo_ticket_short_window, cfg.slo_ticket_burn
        )
        slo = f"{num(objective * 100)}% of them must not be {what}"
        # The share of slow (or failing) requests that burns the budget at a given rate. A rate over
        # a window longer than the data is the rate over the data there is, so ten steady minutes
        # stand for every window.
        fast = budget * cfg.slo_page_fast_burn * 1.25
        slow_only = budget * (cfg.slo_page_slow_burn + cfg.slo_page_fast_burn) / 2
        # 100 times the budget for 5 minutes, then 35 clean ones: the long windows still burn (12.5x
        # over the 40 minutes there are), the short ones do not, so the page has cleared.
        spike = min(1.0, budget * 100)
        ticket_share = budget * 3
        alerts += [
            Alert(
                name=f"FleetscopeInference{key}BudgetBurn",
                expr=page,
                severity="critical",
                summary=f"A served model burns its {title} error budget fast.",
                description=f"{_MODEL} ({{{{ $labels.server }}}}) burns its {title} SLO budget "
                f'{{{{ printf "%.1f" $value }}}} times '
                f"faster than sustainable ({slo}): at {num(cfg.slo_page_fast_burn)}x over "
                f"{cfg.slo_page_fast_long_window} or {num(cfg.slo_page_slow_burn)}x over "
                f"{cfg.slo_page_slow_long_window} the month's budget is gone in days.",
                cases=(
                    Case(
                        f"{num(fast * 100)}%: the 1h/5m pair",
                        data(10, (fast, 10)),
                        "10m",
                        (Fire(_SLI, fast / budget),),
                    ),
                    Case(
                        f"{num(slow_only * 100)}%: only the 6h/30m pair",
                        data(10, (slow_only, 10)),
                        "10m",
                        (Fire(_SLI, slow_only / budget),),
                    ),
                    Case(
                        f"{num(spike * 100)}% for 5 minutes, 35 minutes ago: cleared",
                        data(40, (spike, 5), (0.0, 35)),
                        "40m",
                    ),
                    Case(f"{num(budget * 100)}%: on budget", data(10, (budget, 10)), "10m"),
                ),
            ),
            Alert(
                name=f"FleetscopeInference{key}BudgetBurnSlow",
                expr=ticket,
                severity="warning",
                summary=f"A served model spends its {title} error budget faster than it lasts.",
                description=f"{_MODEL} ({{{{ $labels.server }}}}) has burnt its {title} SLO budget "
                f'{{{{ printf "%.1f" $value }}}} '
                f"times the sustainable rate over {cfg.slo_ticket_long_window} ({slo}).",
                cases=(
                    Case(
                        f"{num(ticket_share * 100)}%",
                        data(10, (ticket_share, 10)),
                        "10m",
                        (Fire(_SLI, ticket_share / budget),),
                    ),
                    Case(f"{num(budget * 50)}%: within budget", data(10, (budget / 2, 10)), "10m"),
                ),
            ),
        ]
    return alerts


def group(cfg: Thresholds) -> Group:
    w = cfg.rate_window
    kv_pct = num(cfg.inference_kv_cache_full_ratio * 100)
    on = f"{c.INSTANCE_LABEL}, job, model_name"
    preempting = (
        f"sum by ({on}) (rate({c.VLLM_NUM_PREEMPTIONS}[{w}])) > {num(cfg.inference_preemptions_per_second)}"
    )
    waiting, tgi_queue = c.VLLM_NUM_REQUESTS_WAITING, c.TGI_QUEUE_SIZE
    grow, least = cfg.inference_queue_growth_window, num(cfg.inference_queue_min_waiting)
    look = cfg.inference_replica_lookback
    served = " or ".join(
        f"max_over_time({m}[{look}])"
        for m in (c.VLLM_NUM_REQUESTS_RUNNING, c.TGI_QUEUE_SIZE, c.TRITON_PENDING_REQUEST_COUNT)
    )
    engine = dict(_ENGINE)
    alerts = (
        *_slo_alerts(cfg),
        Alert(
            name="FleetscopeInferenceKvCacheSaturated",
            expr=f"{kv_cache_usage()} * 100 >= {kv_pct} and on ({on}) {preempting}",
            for_="10m",
            severity="warning",
            summary="A vLLM engine's KV cache is full and it preempts requests.",
            description=f'{_REPLICA} uses {{{{ printf "%.0f%%" $value }}}} of its KV cache and preempts '
            f"more than {num(cfg.inference_preemptions_per_second)} requests/s: preempted requests are "
            "recomputed, first tokens slow down. Compare its flags and GPUs' memory with its peers', or add "
            "replicas if all are full.",
            cases=(
                Case(
                    "95% full, preempting 0.1/s",
                    (_engine(c.VLLM_KV_CACHE_USAGE, "0.95x20"), _engine(c.VLLM_NUM_PREEMPTIONS, "0+6x20")),
                    "20m",
                    (Fire(engine, 95),),
                ),
                Case(
                    "V0's name: 90% full, preempting 0.2/s",
                    (
                        InputSeries(c.VLLM_GPU_CACHE_USAGE, {"model_name": MODEL, **_TARGET}, "0.9x20"),
                        InputSeries(c.VLLM_NUM_PREEMPTIONS, {"model_name": MODEL, **_TARGET}, "0+12x20"),
                    ),
                    "20m",
                    (Fire({"model_name": MODEL, **_TARGET}, 90),),
                ),
                Case(
                    "full but not preempting",
                    (_engine(c.VLLM_KV_CACHE_USAGE, "0.95x20"), _engine(c.VLLM_NUM_PREEMPTIONS, "3x20")),
                    "20m",
                ),
                Case(
                    "preempting at 60%",
                    (_engine(c.VLLM_KV_CACHE_USAGE, "0.6x20"), _engine(c.VLLM_NUM_PREEMPTIONS, "0+6x20")),
                    "20m",
                ),
            ),
        ),
        Alert(
            name="FleetscopeInferenceQueueGrowing",
            expr=(
                f"({waiting} >= {least} and deriv({waiting}[{grow}]) > 0)"
                f" or ({tgi_queue} >= {least} and deriv({tgi_queue}[{grow}]) > 0)"
            ),
            for_="10m",
            severity="warning",
            summary="Requests pile up in a serving replica's queue.",
            description="The serving target {{ $labels.instance }} has "
            f'{{{{ printf "%.0f" $value }}}} requests waiting and the queue grew over the last {grow}: '
            "requests arrive faster than it serves them (a slow replica, an unfair load balancer, or too few "
            "replicas).",
            cases=(
                Case(
                    "waiting grows by 2 a minute", (_engine(waiting, "0+2x30"),), "30m", (Fire(engine, 60),)
                ),
                Case("a steady queue of 40", (_engine(waiting, "40x30"),), "30m"),
                Case("growing but short", (_engine(waiting, "0+0.2x30"),), "30m"),
            ),
        ),
        Alert(
            name="FleetscopeInferenceReplicaDown",
            expr=f"up == 0 and on ({c.INSTANCE_LABEL}, job) group by ({c.INSTANCE_LABEL}, job) ({served})",
            for_="5m",
            severity="warning",
            summary="A serving replica is down.",
            description="The serving target {{ $labels.instance }} (job {{ $labels.job }}) reported engine "
            "series "
            f"in the last {look} and cannot be scraped now: its share of the traffic moves to the other "
            "replicas.",
            cases=(
                Case(
                    "vLLM target down for 10 minutes",
                    (InputSeries("up", _TARGET, "1x10 0x10"), _engine(c.VLLM_NUM_REQUESTS_RUNNING, "4x10")),
                    "20m",
                    (Fire(_TARGET, 0),),
                ),
                Case(
                    "an exporter is down, no replica",
                    (
                        InputSeries(
                            "up", {c.INSTANCE_LABEL: f"{HOST}:9401", "job": "fleetscope-nodes"}, "0x20"
                        ),
                    ),
                    "20m",
                ),
                Case(
                    "serving",
                    (InputSeries("up", _TARGET, "1x20"), _engine(c.VLLM_NUM_REQUESTS_RUNNING, "4x20")),
                    "20m",
                ),
            ),
        ),
    )
    return Group("inference", alerts)
