"""Inference fleet: every served model at a glance (requests/s, errors, TTFT and inter-token latency
percentiles, tokens/s in and out, queue, KV cache, preemptions, SLO burn) and what its GPUs yield
(tokens per second per GPU and per watt).

vLLM's renamed series are read as ``new or old`` (V0 and V1 servers in one fleet); errors and
requests/s cover TGI and Triton too. Each line is a model (``model``/``model_name``) or a replica
(``instance``).
"""

from __future__ import annotations

import grafanalib.core as g

from fleetscope import contract as c
from fleetscope import queries
from fleetscope.alerts import names
from fleetscope.alerts.config import Thresholds
from fleetscope.dashboards.common import dashboard, stat, timeseries

UID = "fleetscope-inference-fleet"
W = "$__rate_interval"
MODEL = "model_name"
QUANTILES = (0.5, 0.95, 0.99)


def ttft_quantile(q: float, by: tuple[str, ...] = (MODEL,)) -> str:
    return queries.histogram_quantile_by(q, c.VLLM_TIME_TO_FIRST_TOKEN.bucket, W, by)


def itl_quantile(q: float, by: tuple[str, ...] = (MODEL,), rate: str = "") -> str:
    """Inter-token latency quantile over V1's and V0's histogram, whichever a server exports."""
    new, old = c.VLLM_INTER_TOKEN_LATENCY.bucket, c.VLLM_TIME_PER_OUTPUT_TOKEN.bucket
    rates = rate or f"rate({new}[{W}]) or rate({old}[{W}])"
    return f"histogram_quantile({q}, sum by ({', '.join((*by, 'le'))}) ({rates}))"


def replica_gpus(gpu_metric: str, matchers: str = "") -> str:
    """A DCGM series of the GPUs serving replicas run on (with ``model_name``): pods' GPUs joined on
    (namespace, pod) as ``queries.replica_gpus_k8s`` joins them, else the nodes of ``host:port``
    targets joined on Hostname through the recorded ``instance:inference_replica_node:group``. The
    pod side only takes GPUs that carry a pod, so a fleet without pods joins nothing there.
    ``matchers`` like ``Hostname=~"n1"`` narrow the GPUs."""
    inner = ", ".join(m for m in (matchers, 'pod!=""') if m)
    pods = f"{gpu_metric}{{{inner}}}"
    hosts = f"{gpu_metric}{{{matchers}}}" if matchers else gpu_metric
    on_host = (
        f"{hosts} * on ({c.NODE_LABEL}) group_left ({MODEL})"
        f" group by ({c.NODE_LABEL}, {MODEL}) ({names.INFERENCE_REPLICA_NODE})"
    )
    return f"({queries.replica_gpus_k8s(pods)} or {on_host})"


def model_requests_rate() -> str:
    """Finished requests per second of each model, every engine (``queries.model_requests_rate``
    without its label_replace: vLLM's lines carry ``model_name``, TGI's and Triton's ``model``)."""
    vllm = f"sum by ({MODEL}) (rate({c.VLLM_REQUEST_SUCCESS}[{W}]))"
    tgi = f"sum by (model) (rate({c.TGI_REQUEST_COUNT}[{W}]))"
    triton = (
        f"sum by (model) (rate({c.TRITON_REQUEST_SUCCESS}[{W}])"
        f" + ignoring (reason) rate({c.TRITON_REQUEST_FAILURE}[{W}]))"
    )
    return f"{vllm} or {tgi} or {triton}"


def tokens_per_gpu(by: str = MODEL, matchers: str = "") -> str:
    gen = f"sum by ({by}) (rate({c.VLLM_GENERATION_TOKENS}[{W}]))"
    gpus = f"count by ({by}) ({replica_gpus(c.DCGM_FI_DEV_GPU_UTIL, matchers)})"
    return f"{gen} / on ({by}) {gpus}"


def tokens_per_joule(by: str = MODEL, matchers: str = "") -> str:
    gen = f"sum by ({by}) (rate({c.VLLM_GENERATION_TOKENS}[{W}]))"
    watts = f"sum by ({by}) ({replica_gpus(c.DCGM_FI_DEV_POWER_USAGE, matchers)})"
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
            stat("Worst error ratio (5m)", f"max({names.inference_errors('5m')})", "percentunit",
                 "Failed requests per request of the worst model.",
                 [(None, "green"), (1 - cfg.inference_error_objective, "red")], no_value="-"),
            stat("Worst TTFT p95", f"max({ttft_quantile(0.95)})", "s", "Time to first token, worst model.",
                 [(None, "green"), (cfg.inference_ttft_seconds, "red")], no_value="-"),
            stat("Replicas serving", f"count({c.VLLM_NUM_REQUESTS_RUNNING})", "short", "vLLM engines reporting.",
                 no_value="0"),
            stat("Requests waiting", f"sum({c.VLLM_NUM_REQUESTS_WAITING})", "short", no_value="0"),
        ]),
        ("Traffic", [
            timeseries("Requests/s per model", [(model_requests_rate(), "{{model_name}}{{model}}")], "reqps",
                       "Finished requests per second (vLLM, TGI, Triton).", min_value=0),
            timeseries("Tokens/s in and out", [
                (f"sum by ({MODEL}) (rate({c.VLLM_PROMPT_TOKENS}[{W}]))", f"{model} in (prompt)"),
                (f"sum by ({MODEL}) (rate({c.VLLM_GENERATION_TOKENS}[{W}]))", f"{model} out (generated)"),
            ], "short", "Prefill tokens and generated tokens per second.", min_value=0),
            timeseries("Error ratio", [(names.inference_errors("5m"), per_model)], "percentunit",
                       f"Failed requests per request; the SLO allows {1 - cfg.inference_error_objective:.2%}.",
                       min_value=0),
        ]),
        ("Latency", [
            timeseries("Time to first token", [(ttft_quantile(q), f"{model} p{round(q * 100)}") for q in QUANTILES],
                       "s", f"The SLO: {cfg.inference_ttft_objective:.0%} of requests within {ttft_slo}.",
                       min_value=0),
            timeseries("Inter-token latency", [(itl_quantile(q), f"{model} p{round(q * 100)}") for q in QUANTILES],
                       "s", f"The SLO: {cfg.inference_itl_objective:.0%} of gaps within {itl_slo} (V1's "
                       "inter_token_latency or V0's time_per_output_token).", min_value=0),
            timeseries("SLO burn rate", [
                (f"{names.inference_ttft_slow(long)} / {1 - cfg.inference_ttft_objective:g}", f"TTFT {{{{model}}}} {long}"),
                (f"{names.inference_ttft_slow(short)} / {1 - cfg.inference_ttft_objective:g}", f"TTFT {{{{model}}}} {short}"),
                (f"{names.inference_itl_slow(long)} / {1 - cfg.inference_itl_objective:g}", f"ITL {{{{model}}}} {long}"),
                (f"{names.inference_errors(long)} / {1 - cfg.inference_error_objective:g}", f"errors {{{{model}}}} {long}"),
            ], "short", f"1 spends the error budget exactly over the SLO period; the page fires at "
                f"{cfg.slo_page_fast_burn:g} over {long} and {short}.", min_value=0),
        ]),
        ("Queue and KV cache", [
            timeseries("Running and waiting requests", [
                (f"sum by ({MODEL}) ({c.VLLM_NUM_REQUESTS_RUNNING})", f"{model} running"),
                (f"sum by ({MODEL}) ({c.VLLM_NUM_REQUESTS_WAITING})", f"{model} waiting"),
            ], "short", "Running: in the batch; waiting: queued for admission.", min_value=0),
            timeseries("KV-cache use per replica", [(queries.vllm_kv_cache_usage(), replica)], "percentunit",
                       f"The KvCacheSaturated alert fires above {cfg.inference_kv_cache_full_ratio:.0%} while "
                       "the engine preempts.", min_value=0, max_value=1),
            timeseries("Preemptions/s", [
                (f"sum by ({MODEL}, {c.INSTANCE_LABEL}) (rate({c.VLLM_NUM_PREEMPTIONS}[{W}]))", replica),
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
        "Every served model: traffic, latency percentiles, queue, KV cache, errors, SLO burn, tokens per GPU.",
        [],
        rows,
    )
