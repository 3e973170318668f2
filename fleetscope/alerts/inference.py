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
engine preempts, a queue that keeps growing, a serving target that went down, a replica with
requests in flight and no progress (wedged: :func:`wedged`), and a replica whose HTTP 5xx share
stands out against its peers' (:func:`replica_errors`). A data-parallel pod's engines (vLLM's
``engine`` label) are one replica: its queue is their sum, its KV cache the fullest, its progress
any engine's. The wedge and error alerts name the replica's node by its name
(``queries.replica_node_of``), never by a pod's IP.
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
#: The labels of a replica (a pod's engines summed) as the per-replica alerts keep them.
_POD_TARGET = {"model_name": MODEL, **_TARGET}
#: A data-parallel pod on Kubernetes: its target is the pod's IP, its GPUs name the node.
_POD_IP = "10.5.137.115"
_POD = {"namespace": "serve", "pod": "llama-0", c.INSTANCE_LABEL: f"{_POD_IP}:8000", "job": "serve/vllm"}
_NODE = "ip-10-1-0-12"
_ENGINE_LABEL = c.VLLM_ENGINE_LABEL


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
    """KV-cache use (0-1) of each vLLM replica, V1 or V0 spelling: its fullest engine."""
    return queries.vllm_per_replica(queries.vllm_kv_cache_usage())


def wedged(cfg: Thresholds) -> str:
    """Replicas (a pod's engines together) that had requests running throughout the wedge window
    and generated no token and finished no request in it; the value is the requests in flight."""
    w, e = cfg.inference_wedge_window, _ENGINE_LABEL
    in_flight = f"sum without ({e}) (min_over_time({c.VLLM_NUM_REQUESTS_RUNNING}[{w}])) > 0"
    # ``== 0`` and not ``unless ... > 0``: a counter with one sample in the window (a pod that just
    # started) has no increase at all, and must not read as one that stopped.
    tokens = f"sum without ({e}) (increase({c.VLLM_GENERATION_TOKENS}[{w}])) == 0"
    finished = f"sum without ({e}, finished_reason) (increase({c.VLLM_REQUEST_SUCCESS}[{w}])) == 0"
    return queries.replica_named(f"{in_flight} and {tokens} and {finished}")


def replica_errors(cfg: Thresholds) -> str:
    """Replicas whose share of HTTP 5xx on the OpenAI routes is at least the threshold and more
    than the peer factor times their peers' (the other targets of the scrape job); the value is the
    replica's share in percent."""
    w = cfg.inference_replica_5xx_window
    http, per = c.VLLM_HTTP_REQUESTS, "handler, method, status"
    routes = 'handler=~"/v1/.*"'

    def rate(status: str = "") -> str:
        return f"rate({http}{{{routes}{status}}}[{w}])"

    five = ', status="5xx"'
    mine_err = f"sum without ({per}) ({rate(five)})"
    mine_all = f"sum without ({per}) ({rate()})"
    job_err = f"sum by (job) ({rate(five)})"
    job_all = f"sum by (job) ({rate()})"
    share = f"({mine_err} / ({mine_all} > 0))"
    peers = (
        f"(({job_err} - on (job) group_right () {mine_err}) / "
        f"(({job_all} - on (job) group_right () {mine_all}) > 0))"
    )
    factor, least = num(cfg.inference_replica_5xx_peer_factor), num(cfg.inference_replica_5xx_share * 100)
    return queries.replica_named(f"100 * {share} >= {least} and {share} > {factor} * {peers}")


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


# Wedge cases: 15 s samples (a usual scrape), 42 of them; the engine stops at 5 minutes (sample 20).
_WEDGE_AT = "7m"  # two minutes after the stop


def _wedge_case(name: str, series: tuple[InputSeries, ...], *fires: Fire) -> Case:
    """A wedge case: evaluated at :data:`_WEDGE_AT` over 15 s samples."""
    return Case(name, series, _WEDGE_AT, fires, interval="15s")


def _v1(metric: str, values: str, where: dict[str, str] | None = None, **extra: str) -> InputSeries:
    """A vLLM V1 engine's series (engine 0 unless ``extra`` says) of a target (``_TARGET``) or a pod."""
    return InputSeries(
        metric, {"model_name": MODEL, _ENGINE_LABEL: "0", **(where or _TARGET), **extra}, values
    )


def _engine_run(
    running: str, tokens: str, finished: str, where: dict[str, str] | None = None, engine: str = "0"
) -> tuple[InputSeries, ...]:
    """One engine's requests running, generated tokens and finished requests."""
    return (
        _v1(c.VLLM_NUM_REQUESTS_RUNNING, running, where, engine=engine),
        _v1(c.VLLM_GENERATION_TOKENS, tokens, where, engine=engine),
        _v1(c.VLLM_REQUEST_SUCCESS, finished, where, engine=engine, finished_reason="stop"),
    )


#: An engine serving all along, and one that stops at sample 20 with 20 requests running.
_SERVING = ("12x20 14x21", "0+500x41", "0+2x41")
_STOPPED = ("12x20 20x21", "0+500x20 10000x21", "0+2x20 40x21")


def _pod_gpu(values: str = "0x41") -> InputSeries:
    """The DP pod's GPU as dcgm-exporter reports it: the node's name, the pod attributed."""
    return InputSeries(
        c.DCGM_FI_DEV_GPU_UTIL,
        {c.NODE_LABEL: _NODE, "gpu": "0", "job": "dcgm", "namespace": "serve", "pod": "llama-0"},
        values,
    )


def _http_target(
    instance: str, ok: str, errors: str | None, job: str = "vllm", **pod: str
) -> tuple[InputSeries, ...]:
    """A target's HTTP requests, 2xx and (from the first, when given) 5xx; ``pod``: its pod labels."""
    route = {
        "handler": "/v1/chat/completions",
        "method": "POST",
        c.INSTANCE_LABEL: instance,
        "job": job,
        **pod,
    }
    out = [InputSeries(c.VLLM_HTTP_REQUESTS, {**route, "status": "2xx"}, ok)]
    if errors is not None:
        out.append(InputSeries(c.VLLM_HTTP_REQUESTS, {**route, "status": "5xx"}, errors))
    return tuple(out)


def _fleet_http(failing: tuple[str, str | None]) -> tuple[InputSeries, ...]:
    """Three targets at 600 requests a minute; the first answers as ``failing`` says."""
    return (
        *_http_target(f"{HOST}:8000", *failing),
        *_http_target("ip-10-1-0-12:8000", "0+600x10", None),
        *_http_target("ip-10-1-0-13:8000", "0+600x10", None),
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
    named = {**_POD_TARGET, c.NODE_LABEL: HOST, "replica": f"{HOST}:8000"}
    pod = {"model_name": MODEL, **_POD, c.NODE_LABEL: _NODE, "replica": "llama-0"}
    restarted = {**_POD, "pod": "llama-0-r1"}
    alerts = (
        *_slo_alerts(cfg),
        Alert(
            name="FleetscopeInferenceReplicaWedged",
            expr=wedged(cfg),
            severity="critical",
            summary="A serving replica has requests in flight and makes no progress.",
            description="Replica {{ $labels.replica }} of {{ $labels.model_name }} on node "
            f'{{{{ $labels.Hostname }}}} has had {{{{ printf "%.0f" $value }}}} requests running for '
            f"{cfg.inference_wedge_window} without generating a token or finishing a request: its "
            "engine is stopped or hung (alive, not serving). Take it out of the load balancer and "
            "restart it.",
            cases=(
                _wedge_case(
                    "the engine stopped two minutes ago, 20 requests running",
                    _engine_run(*_STOPPED),
                    Fire(named, 20),
                ),
                _wedge_case(
                    "a data-parallel pod on a pod IP: both engines stopped, one alert on the node's name",
                    (*_engine_run(*_STOPPED, _POD), *_engine_run(*_STOPPED, _POD, engine="1"), _pod_gpu()),
                    Fire(pod, 40),
                ),
                _wedge_case(
                    "a data-parallel pod: one engine still, the other serving",
                    (*_engine_run(*_STOPPED, _POD), *_engine_run(*_SERVING, _POD, engine="1"), _pod_gpu()),
                ),
                _wedge_case(
                    "saturated but progressing: a full batch, a growing queue, tokens out",
                    (
                        *_engine_run("256x41", "0+3000x41", "0+10x41"),
                        _v1(c.VLLM_NUM_REQUESTS_WAITING, "0+10x41"),
                    ),
                ),
                _wedge_case(
                    "starved: the router stopped sending it requests, nothing in flight",
                    _engine_run("12x20 0x21", "0+500x20 10000x21", "0+2x20 40x21"),
                ),
                _wedge_case(
                    "a restart: the old pod's series gone, the new pod's first two samples",
                    (
                        *_engine_run("12x20 _x21", "0+500x20 _x21", "0+2x20 _x21", _POD),
                        *_engine_run("_x26 5 5 _x13", "_x26 0 1500 _x13", "_x26 0 0 _x13", restarted),
                    ),
                ),
                _wedge_case(
                    "a new pod's first sample, requests already running",
                    _engine_run("_x27 5 _x13", "_x27 0 _x13", "_x27 0 _x13", restarted),
                ),
            ),
        ),
        Alert(
            name="FleetscopeInferenceReplicaErrors",
            expr=replica_errors(cfg),
            severity="critical",
            summary="A serving replica fails requests that its peers serve.",
            description="Replica {{ $labels.replica }} on node {{ $labels.Hostname }} answers "
            f'{{{{ printf "%.0f%%" $value }}}} of its requests with an HTTP 5xx over the last '
            f"{cfg.inference_replica_5xx_window}, more than {num(cfg.inference_replica_5xx_peer_factor)} "
            "times the share of the other replicas of its job: the fault is the replica's (its API "
            "server, its engine), not the model's. Take it out of the load balancer and restart it.",
            cases=(
                Case(
                    "every request of one replica of three fails",
                    _fleet_http(("0+0x10", "0+600x10")),
                    "10m",
                    (
                        Fire(
                            {
                                c.INSTANCE_LABEL: f"{HOST}:8000",
                                "job": "vllm",
                                c.NODE_LABEL: HOST,
                                "replica": f"{HOST}:8000",
                            },
                            100,
                        ),
                    ),
                ),
                Case(
                    "a pod on a pod IP: named by its node",
                    (
                        *_http_target(
                            _POD[c.INSTANCE_LABEL],
                            "0+540x10",
                            "0+60x10",
                            _POD["job"],
                            namespace="serve",
                            pod="llama-0",
                        ),
                        *_http_target(
                            "10.5.137.116:8000",
                            "0+600x10",
                            None,
                            _POD["job"],
                            namespace="serve",
                            pod="llama-1",
                        ),
                        _pod_gpu("50x10"),
                    ),
                    "10m",
                    (Fire({**_POD, c.NODE_LABEL: _NODE, "replica": "llama-0"}, 10),),
                ),
                Case(
                    "every replica fails 10%: the model's errors, not one replica's",
                    tuple(
                        s
                        for host in (HOST, "ip-10-1-0-12", "ip-10-1-0-13")
                        for s in _http_target(f"{host}:8000", "0+540x10", "0+60x10")
                    ),
                    "10m",
                ),
                Case("one replica fails 2%", _fleet_http(("0+588x10", "0+12x10")), "10m"),
                Case("no errors", _fleet_http(("0+600x10", None)), "10m"),
            ),
        ),
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
                    (Fire(_POD_TARGET, 95),),
                ),
                Case(
                    "a data-parallel pod: one alert, its fullest engine",
                    (
                        _engine(c.VLLM_KV_CACHE_USAGE, "0.95x20"),
                        _engine(c.VLLM_KV_CACHE_USAGE, "0.6x20", engine="1"),
                        _engine(c.VLLM_NUM_PREEMPTIONS, "0+3x20"),
                        _engine(c.VLLM_NUM_PREEMPTIONS, "0+3x20", engine="1"),
                    ),
                    "20m",
                    (Fire(_POD_TARGET, 95),),
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
                f"(sum without ({_ENGINE_LABEL}) ({waiting}) >= {least}"
                f" and sum without ({_ENGINE_LABEL}) (deriv({waiting}[{grow}])) > 0)"
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
                    "waiting grows by 2 a minute",
                    (_engine(waiting, "0+2x30"),),
                    "30m",
                    (Fire(_POD_TARGET, 60),),
                ),
                Case(
                    "a data-parallel pod's queue split over two engines, 9 each",
                    (_engine(waiting, "0+0.3x30"), _engine(waiting, "0+0.3x30", engine="1")),
                    "30m",
                    (Fire(_POD_TARGET, 18),),
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
