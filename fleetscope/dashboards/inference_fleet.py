"""Inference fleet: every served model at a glance (requests/s, errors, TTFT and inter-token latency
percentiles, tokens/s in and out, queue, KV cache, preemptions, SLO burn) and what its GPUs yield
(tokens per second per GPU and per watt).

vLLM's renamed series are read as ``new or old`` (V0 and V1 servers in one fleet); errors and
requests/s cover TGI and Triton too. Each line is a model (``model``/``model_name``) or a replica
(``instance``). A data-parallel pod's engines (vLLM's ``engine`` label) are one replica: counted
once, its KV cache its fullest engine's.
"""

from __future__ import annotations

import grafanalib.core as g

from fleetscope import contract as c
from fleetscope import queries
from fleetscope.alerts import names
from fleetscope.alerts.config import Thresholds
from fleetscope.dashboards.common import DATASOURCE, dashboard, stat, timeseries

UID = "fleetscope-inference-fleet"
W = "$__rate_interval"
MODEL = "model_name"
QUANTILES = (0.5, 0.95, 0.99)


def replicas_count(running: str) -> str:
    """How many replicas (pods or targets, not engines) report ``running``."""
    return f"count({queries.vllm_per_replica(running, 'group')})"


#: Template variable matchers: vLLM names the model ``model_name``, TGI (at scrape) and Triton
#: ``model``, as do the recorded SLIs.
VLLM = f'{MODEL}=~"$model"'
ENGINE = f'{c.INFERENCE_MODEL_LABEL}=~"$model"'


def on(metric: str, matchers: str = VLLM) -> str:
    """``metric{matchers}``: the chosen models' series."""
    return f"{metric}{{{matchers}}}"


def model_var() -> g.Template:
    """The served models of every engine (multi-select, All): vLLM's ``model_name`` and TGI's and
    Triton's ``model``, as one ``model`` label over the dashboard's range."""
    rng = "$__range"
    vllm = (
        f"label_replace(group by ({MODEL}) (last_over_time({c.VLLM_NUM_REQUESTS_RUNNING}[{rng}])), "
        f'"model", "$1", "{MODEL}", "(.*)")'
    )
    tgi = f"group by (model) (last_over_time({c.TGI_QUEUE_SIZE}[{rng}]))"
    triton = f"group by (model) (last_over_time({c.TRITON_PENDING_REQUEST_COUNT}[{rng}]))"
    return query_var("model", "Model", f"group by (model) ({vllm} or {tgi} or {triton})", "model", multi=True)


def query_var(
    name: str, title: str, expr: str, label: str, *, multi: bool, include_all: bool = True
) -> g.Template:
    """A variable over the values of ``label`` in the series ``expr`` returns (``query_result`` with
    a regex: label_values takes one metric and one label, a model or replica needs several)."""
    return g.Template(
        name=name,
        label=title,
        query=f"query_result({expr})",
        regex=f'/{label}="([^"]+)"/',
        dataSource=DATASOURCE,
        refresh=2,  # on time range change: models and replicas come and go
        includeAll=multi and include_all,
        multi=multi,
        allValue=".*" if multi and include_all else None,
        sort=1,
    )


def ttft_quantile(q: float, by: tuple[str, ...] = (MODEL,)) -> str:
    return queries.histogram_quantile_by(q, on(c.VLLM_TIME_TO_FIRST_TOKEN.bucket), W, by)


def itl_quantile(q: float, by: tuple[str, ...] = (MODEL,), rate: str = "") -> str:
    """Inter-token latency quantile over V1's and V0's histogram, whichever a server exports."""
    new, old = on(c.VLLM_INTER_TOKEN_LATENCY.bucket), on(c.VLLM_TIME_PER_OUTPUT_TOKEN.bucket)
    rates = rate or f"rate({new}[{W}]) or rate({old}[{W}])"
    return f"histogram_quantile({q}, sum by ({', '.join((*by, 'le'))}) ({rates}))"


def recorded_nodes(matchers: str) -> str:
    """The recorded ``instance:inference_replica_node:group`` (each vLLM target with its node)."""
    return on(names.INFERENCE_REPLICA_NODE, matchers) if matchers else names.INFERENCE_REPLICA_NODE


def replica_gpus(
    gpu_metric: str, gpu_matchers: str = "", pod_matchers: str = VLLM, node_matchers: str = VLLM
) -> str:
    """A DCGM series of the GPUs serving replicas run on (with ``model_name``), as
    ``queries.replica_gpus`` joins them: pods' GPUs on (namespace, pod), the rest on the node of
    ``host:port`` targets through the recorded ``instance:inference_replica_node:group``.
    ``gpu_matchers`` narrow the GPUs, ``pod_matchers`` and ``node_matchers`` the replicas."""
    return queries.replica_gpus(gpu_metric, gpu_matchers, pod_matchers, node_matchers, recorded_nodes)


def model_requests_rate() -> str:
    """Finished requests per second of each chosen model, every engine (``queries.model_requests_rate``
    without its label_replace: vLLM's lines carry ``model_name``, TGI's and Triton's ``model``)."""
    vllm = f"sum by ({MODEL}) (rate({on(c.VLLM_REQUEST_SUCCESS)}[{W}]))"
    tgi = f"sum by (model) (rate({on(c.TGI_REQUEST_COUNT, ENGINE)}[{W}]))"
    triton = (
        f"sum by (model) (rate({on(c.TRITON_REQUEST_SUCCESS, ENGINE)}[{W}])"
        f" + ignoring (reason) rate({on(c.TRITON_REQUEST_FAILURE, ENGINE)}[{W}]))"
    )
    return f"{vllm} or {tgi} or {triton}"


def tokens_per_gpu(by: str = MODEL) -> str:
    gen = f"sum by ({by}) (rate({on(c.VLLM_GENERATION_TOKENS)}[{W}]))"
    gpus = f"count by ({by}) ({replica_gpus(c.DCGM_FI_DEV_GPU_UTIL)})"
    return f"{gen} / on ({by}) {gpus}"


def tokens_per_joule(by: str = MODEL) -> str:
    gen = f"sum by ({by}) (rate({on(c.VLLM_GENERATION_TOKENS)}[{W}]))"
    watts = f"sum by ({by}) ({replica_gpus(c.DCGM_FI_DEV_POWER_USAGE)})"
    return f"{gen} / on ({by}) ({watts} > 0)"


def build(cfg: Thresholds) -> g.Dashboard:
    model = "{{model_name}}"
    per_model = "{{model}} ({{server}})"
    replica = "{{model_name}} @ {{instance}}"
    ttft_slo = f"{cfg.inference_ttft_seconds:g} s"
    itl_slo = f"{cfg.inference_itl_seconds * 1000:g} ms"
    short, long = cfg.slo_page_fast_short_window, cfg.slo_page_fast_long_window
    rows = [
        (None, [
            stat("Requests/s", f"sum({model_requests_rate()})", "reqps", "All models, all engines.",
                 no_value="-"),
            stat("Worst error ratio (5m)", f"max({on(names.inference_errors('5m'), ENGINE)})", "percentunit",
                 "Failed requests per request of the worst model.",
                 [(None, "green"), (1 - cfg.inference_error_objective, "red")], no_value="-"),
            stat("Worst TTFT p95", f"max({ttft_quantile(0.95)})", "s", "Time to first token, worst model.",
                 [(None, "green"), (cfg.inference_ttft_seconds, "red")], no_value="-"),
            stat("Replicas serving", replicas_count(on(c.VLLM_NUM_REQUESTS_RUNNING)), "short",
                 "vLLM replicas reporting (a data-parallel pod's engines count once).", no_value="0"),
            stat("Requests waiting", f"sum({on(c.VLLM_NUM_REQUESTS_WAITING)})", "short", no_value="0"),
        ]),
        ("Traffic", [
            timeseries("Requests/s per model", [(model_requests_rate(), "{{model_name}}{{model}}")], "reqps",
                       "Finished requests per second (vLLM, TGI, Triton).", min_value=0),
            timeseries("Tokens/s in and out", [
                (f"sum by ({MODEL}) (rate({on(c.VLLM_PROMPT_TOKENS)}[{W}]))", f"{model} in (prompt)"),
                (f"sum by ({MODEL}) (rate({on(c.VLLM_GENERATION_TOKENS)}[{W}]))", f"{model} out (generated)"),
            ], "short", "Prefill tokens and generated tokens per second.", min_value=0),
            timeseries("Error ratio", [(on(names.inference_errors("5m"), ENGINE), per_model)], "percentunit",
                       "Failed requests per request; the SLO allows "
                       f"{1 - cfg.inference_error_objective:.2%}.",
                       min_value=0),
        ]),
        ("Latency", [
            timeseries("Time to first token", [(ttft_quantile(q), f"{model} p{round(q * 100)}") for q in QUANTILES],  # noqa: E501
                       "s", f"The SLO: {cfg.inference_ttft_objective:.0%} of requests within {ttft_slo}.",
                       min_value=0),
            timeseries("Inter-token latency", [(itl_quantile(q), f"{model} p{round(q * 100)}") for q in QUANTILES],  # noqa: E501
                       "s", f"The SLO: {cfg.inference_itl_objective:.0%} of gaps within {itl_slo} (V1's "
                       "inter_token_latency or V0's time_per_output_token).", min_value=0),
            timeseries("SLO burn rate", [
                (f"{on(names.inference_ttft_slow(long), ENGINE)} / {1 - cfg.inference_ttft_objective:g}", f"TTFT {{{{model}}}} {long}"),  # noqa: E501
                (f"{on(names.inference_ttft_slow(short), ENGINE)} / {1 - cfg.inference_ttft_objective:g}", f"TTFT {{{{model}}}} {short}"),  # noqa: E501
                (f"{on(names.inference_itl_slow(long), ENGINE)} / {1 - cfg.inference_itl_objective:g}", f"ITL {{{{model}}}} {long}"),  # noqa: E501
                (f"{on(names.inference_errors(long), ENGINE)} / {1 - cfg.inference_error_objective:g}", f"errors {{{{model}}}} {long}"),  # noqa: E501
            ], "short", f"1 spends the error budget exactly over the SLO period; the page fires at "
                f"{cfg.slo_page_fast_burn:g} over {long} and {short}.", min_value=0),
        ]),
        ("Queue and KV cache", [
            timeseries("Running and waiting requests", [
                (f"sum by ({MODEL}) ({on(c.VLLM_NUM_REQUESTS_RUNNING)})", f"{model} running"),
                (f"sum by ({MODEL}) ({on(c.VLLM_NUM_REQUESTS_WAITING)})", f"{model} waiting"),
            ], "short", "Running: in the batch; waiting: queued for admission.", min_value=0),
            timeseries("KV-cache use per replica", [(queries.vllm_per_replica(queries.vllm_kv_cache_usage(f"{{{VLLM}}}")), replica)],  # noqa: E501
                       f"The fullest engine of each replica; the KvCacheSaturated alert fires above "
                       f"{cfg.inference_kv_cache_full_ratio:.0%} while the replica preempts.", min_value=0,
                       max_value=1),
            timeseries("Preemptions/s", [
                (f"sum by ({MODEL}, {c.INSTANCE_LABEL}) (rate({on(c.VLLM_NUM_PREEMPTIONS)}[{W}]))", replica),
            ], "short", "Sequences evicted from a full KV cache (recomputed later).", min_value=0),
        ]),
        ("Efficiency", [
            timeseries("Generated tokens/s per GPU", [(tokens_per_gpu(), model)], "short",
                       "Output tokens per second over the GPUs the model's replicas run on.", min_value=0),
            timeseries("Generated tokens per joule", [(tokens_per_joule(), model)], "short",
                       "Output tokens per second over the replicas' GPU power (W): tokens per joule.",
                       min_value=0),
            timeseries("GPU utilisation of serving GPUs", [
                (f"avg by ({MODEL}) ({replica_gpus(c.DCGM_FI_DEV_GPU_UTIL)})", model),
            ], "percent", "Mean over the GPUs the model's replicas run on.", min_value=0, max_value=100),
        ]),
    ]  # fmt: skip
    return dashboard(
        UID,
        "fleetscope / Inference fleet",
        "Every served model: traffic, latency percentiles, queue, KV cache, errors, SLO burn, tokens per "
        "GPU.",
        [model_var()],
        rows,
    )
