"""Inference replica: one serving replica (or a few) beside the GPUs it runs on.

Pick the model (``model``, vLLM's ``model_name``) and then the replica (``replica``, chained on the
model): a pod name where the serving series carry Kubernetes pod labels, else the target's
``instance`` (``host:port`` on Slurm and EC2). Its requests, tokens, TTFT and inter-token latency,
queue and KV cache sit above its GPUs' utilisation, memory, power, clocks and XIDs (joined as
``fleetscope.queries.replica_gpus`` joins a replica to its GPUs: on the pod's attribution labels,
else on the node of ``host:port``), and the tokens each GPU and each watt yield.
"""

from __future__ import annotations

import grafanalib.core as g

from fleetscope import contract as c
from fleetscope import queries
from fleetscope.alerts.config import Thresholds
from fleetscope.dashboards.common import dashboard, label_var, stat, table, timeseries
from fleetscope.dashboards.inference_fleet import VLLM, query_var, replica_gpus, replicas_count

UID = "fleetscope-inference-replica"
W = "$__rate_interval"
_POD = c.K8S_POD_JOIN_LABELS[-1]
#: The chosen replicas, as a pod (Kubernetes) or, for series without a pod, as a target.
BY_POD = f'{VLLM}, {_POD}=~"$replica"'
BY_TARGET = f'{VLLM}, {_POD}="", {c.INSTANCE_LABEL}=~"$replica"'
#: Each replica of the chosen models seen over the range, named by its pod, else by its target.
_REPLICA = (
    f"label_replace(label_replace(last_over_time({c.VLLM_NUM_REQUESTS_RUNNING}{{{VLLM}}}[$__range]), "
    f'"replica", "$1", "{c.INSTANCE_LABEL}", "(.*)"), "replica", "$1", "{_POD}", "(.+)")'
)


def model_var() -> g.Template:
    """vLLM's served models (this dashboard shows vLLM engines); same name as the fleet's variable,
    so the dashboard links carry the choice over."""
    return label_var("model", c.VLLM_NUM_REQUESTS_RUNNING, "model_name", multi=True, title="Model")


def replica_var() -> g.Template:
    """The replicas of the chosen models over the dashboard's range: pod, else instance. Multi-select
    to compare a few; no All (the fleet dashboard is the all-replicas view)."""
    expr = f"group by (replica) ({_REPLICA})"
    return query_var("replica", "Replica", expr, "replica", multi=True, include_all=False)


def on_replica(metric: str) -> str:
    """The series of ``metric`` from the chosen replicas."""
    return f"({metric}{{{BY_POD}}} or {metric}{{{BY_TARGET}}})"


def rate_on_replica(metric: str) -> str:
    """``rate(metric)`` of the chosen replicas."""
    return f"(rate({metric}{{{BY_POD}}}[{W}]) or rate({metric}{{{BY_TARGET}}}[{W}]))"


def gpus_of(gpu_metric: str) -> str:
    """``gpu_metric`` of the chosen replicas' GPUs, with ``model_name``."""
    return replica_gpus(
        gpu_metric, pod_matchers=BY_POD, node_matchers=f'{VLLM}, {c.INSTANCE_LABEL}=~"$replica"'
    )


def build(cfg: Thresholds) -> g.Dashboard:
    rep = "{{model_name}} @ {{instance}} {{pod}}"
    by = f"model_name, {c.INSTANCE_LABEL}, {_POD}"
    gpu = "{{Hostname}} GPU {{gpu}} ({{model_name}})"
    ttft, itl_new, itl_old = (
        c.VLLM_TIME_TO_FIRST_TOKEN.bucket,
        c.VLLM_INTER_TOKEN_LATENCY.bucket,
        c.VLLM_TIME_PER_OUTPUT_TOKEN.bucket,
    )

    def quantile(q: float, rates: str) -> str:
        return f"histogram_quantile({q}, sum by ({by}, le) ({rates}))"

    itl_rates = f"{rate_on_replica(itl_new)} or {rate_on_replica(itl_old)}"
    kv_either = f"({on_replica(c.VLLM_KV_CACHE_USAGE)} or {on_replica(c.VLLM_GPU_CACHE_USAGE)})"
    kv = queries.vllm_per_replica(kv_either)
    gen = f"sum by (model_name) ({rate_on_replica(c.VLLM_GENERATION_TOKENS)})"
    gpus = gpus_of(c.DCGM_FI_DEV_GPU_UTIL)
    watts = gpus_of(c.DCGM_FI_DEV_POWER_USAGE)
    rows = [
        (None, [
            stat("Replicas", replicas_count(on_replica(c.VLLM_NUM_REQUESTS_RUNNING)), "short",
                 "Pods or targets (a data-parallel pod's engines count once).", no_value="0"),
            stat("Requests running", f"sum({on_replica(c.VLLM_NUM_REQUESTS_RUNNING)})", "short", no_value="-"),  # noqa: E501
            stat("Requests waiting", f"sum({on_replica(c.VLLM_NUM_REQUESTS_WAITING)})", "short", no_value="-"),  # noqa: E501
            stat("KV-cache use (max)", f"max({kv})", "percentunit", "Fullest engine of the chosen replicas.",
                 [(None, "green"), (cfg.inference_kv_cache_full_ratio, "red")], no_value="-"),
            stat("Serving GPUs", f"count({gpus})", "short", "GPUs the chosen replicas run on.", no_value="0"),
        ]),
        ("Replicas", [
            timeseries("Requests/s", [(f"sum by ({by}) ({rate_on_replica(c.VLLM_REQUEST_SUCCESS)})", rep)], "reqps",  # noqa: E501
                       "Finished requests per second (every finished_reason).", min_value=0),
            timeseries("Tokens/s in and out", [
                (f"sum by ({by}) ({rate_on_replica(c.VLLM_PROMPT_TOKENS)})", f"{rep} in"),
                (f"sum by ({by}) ({rate_on_replica(c.VLLM_GENERATION_TOKENS)})", f"{rep} out"),
            ], "short", min_value=0),
            timeseries("Time to first token", [(quantile(q, rate_on_replica(ttft)), f"{rep} p{round(q * 100)}")  # noqa: E501
                                               for q in (0.5, 0.95, 0.99)], "s",
                       f"The SLO threshold is {cfg.inference_ttft_seconds:g} s.", min_value=0),
            timeseries("Inter-token latency", [(quantile(q, itl_rates), f"{rep} p{round(q * 100)}")
                                               for q in (0.5, 0.95, 0.99)], "s",
                       f"The SLO threshold is {cfg.inference_itl_seconds * 1000:g} ms; one throttled GPU "
                       "slows the whole tensor-parallel replica.", min_value=0),
        ]),
        ("Queue and KV cache", [
            timeseries("Running and waiting", [
                (f"sum by ({by}) ({on_replica(c.VLLM_NUM_REQUESTS_RUNNING)})", f"{rep} running"),
                (f"sum by ({by}) ({on_replica(c.VLLM_NUM_REQUESTS_WAITING)})", f"{rep} waiting"),
            ], "short", min_value=0),
            timeseries("KV-cache use", [(kv, rep)], "percentunit", "The fullest engine of each replica.",
                       min_value=0, max_value=1),
            timeseries("Preemptions/s", [(f"sum by ({by}) ({rate_on_replica(c.VLLM_NUM_PREEMPTIONS)})", rep)],
                       "short", "Sequences evicted from a full KV cache.", min_value=0),
        ]),
        ("The replicas' GPUs", [
            timeseries("GPU utilisation", [(gpus, gpu)], "percent", min_value=0, max_value=100),
            timeseries("GPU memory used", [(gpus_of(c.DCGM_FI_DEV_FB_USED), gpu)], "decmbytes",
                       "Framebuffer used: vLLM pre-allocates its KV cache, so this is flat while it serves.",
                       min_value=0),
            timeseries("GPU power", [(watts, gpu)], "watt", min_value=0),
            timeseries("SM clock", [(gpus_of(c.DCGM_FI_DEV_SM_CLOCK), gpu)], "hertz",
                       "A clock below its peers' is throttling (see the GPU node dashboard's reasons).",
                       min_value=0),
        ]),
        ("Efficiency and errors", [
            timeseries("Generated tokens/s per GPU", [(f"{gen} / on (model_name) count by (model_name) "
                                                       f"({gpus})",
                                                       "{{model_name}}")], "short", min_value=0),
            timeseries("Generated tokens per joule", [
                (f"{gen} / on (model_name) (sum by (model_name) ({watts}) > 0)", "{{model_name}}"),
            ], "short", "Output tokens per second over the serving GPUs' power (W).", min_value=0),
            table("XIDs on the replicas' GPUs (last hour)",
                  f"sum by ({c.NODE_LABEL}, gpu, xid, model_name) (increase({c.GPU_XID_ERRORS_TOTAL}[1h]) * "
                  f"on ({c.NODE_LABEL}, gpu) group_left (model_name) group by ({c.NODE_LABEL}, gpu, "
                  f"model_name) ({gpus})) > 0",
                  "short", "XIDs of a GPU a replica runs on: a drain-class one (79, 48, 94, 95) kills its "
                           "engine.",
                  no_value="none"),
        ]),
    ]  # fmt: skip
    return dashboard(
        UID,
        "fleetscope / Inference replica",
        "One serving replica (pod or target) beside its GPUs.",
        [model_var(), replica_var()],
        rows,
    )
