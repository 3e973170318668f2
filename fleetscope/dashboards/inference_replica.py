"""Inference replica: the serving replicas on one node beside the GPUs they run on.

Pick the node (``Hostname``); the replicas are the serving targets whose ``instance`` host is that
node (Slurm, EC2) or whose pod holds one of its GPUs (Kubernetes: the GPU series' pod attribution).
Their requests, tokens, TTFT and inter-token latency, queue and KV cache sit above the GPUs'
utilisation, memory, power, clocks and XIDs (joined as ``fleetscope.queries`` joins a replica to its
GPUs), and the tokens each GPU and each watt yield.
"""

from __future__ import annotations

import grafanalib.core as g

from fleetscope import contract as c
from fleetscope.alerts.config import Thresholds
from fleetscope.dashboards.common import HOST, dashboard, hostname_var, sel, stat, table, timeseries
from fleetscope.dashboards.inference_fleet import replica_gpus

UID = "fleetscope-inference-replica"
W = "$__rate_interval"
_NODE = f'{c.NODE_LABEL}=~"$Hostname"'
#: The node's pods that hold a GPU (Kubernetes attribution on the DCGM series).
_PODS = f'group by (namespace, pod) ({c.DCGM_FI_DEV_GPU_UTIL}{{{_NODE}, pod!=""}})'
#: ``instance`` is ``<node>:<port>`` on Slurm and EC2 (a regex that does not start with the variable,
#: so Grafana's multi-value syntax and the dashboard tests read it as one).
_INSTANCE = f'{c.INSTANCE_LABEL}=~"(?:$Hostname)(?::[0-9]+)?"'


def on_node(metric: str) -> str:
    """The series of ``metric`` from the serving replicas on the chosen node."""
    return f"({metric}{{{_INSTANCE}}} or ({metric} and on (namespace, pod) {_PODS}))"


def rate_on_node(metric: str) -> str:
    """``rate(metric)`` of the serving replicas on the chosen node."""
    return f"(rate({metric}{{{_INSTANCE}}}[{W}]) or (rate({metric}[{W}]) and on (namespace, pod) {_PODS}))"


def build(cfg: Thresholds) -> g.Dashboard:
    rep = "{{model_name}} @ {{instance}}"
    by = f"model_name, {c.INSTANCE_LABEL}"
    gpu = "GPU {{gpu}} ({{model_name}})"
    ttft, itl_new, itl_old = (
        c.VLLM_TIME_TO_FIRST_TOKEN.bucket,
        c.VLLM_INTER_TOKEN_LATENCY.bucket,
        c.VLLM_TIME_PER_OUTPUT_TOKEN.bucket,
    )

    def quantile(q: float, rates: str) -> str:
        return f"histogram_quantile({q}, sum by ({by}, le) ({rates}))"

    itl_rates = f"{rate_on_node(itl_new)} or {rate_on_node(itl_old)}"
    kv = f"({on_node(c.VLLM_KV_CACHE_USAGE)} or {on_node(c.VLLM_GPU_CACHE_USAGE)})"
    gen = f"sum by (model_name) ({rate_on_node(c.VLLM_GENERATION_TOKENS)})"
    gpus = replica_gpus(c.DCGM_FI_DEV_GPU_UTIL, _NODE)
    watts = replica_gpus(c.DCGM_FI_DEV_POWER_USAGE, _NODE)
    rows = [
        (None, [
            stat("Replicas on this node", f"count({on_node(c.VLLM_NUM_REQUESTS_RUNNING)})", "short", no_value="0"),
            stat("Requests running", f"sum({on_node(c.VLLM_NUM_REQUESTS_RUNNING)})", "short", no_value="-"),
            stat("Requests waiting", f"sum({on_node(c.VLLM_NUM_REQUESTS_WAITING)})", "short", no_value="-"),
            stat("KV-cache use (max)", f"max({kv})", "percentunit", "Fullest engine on this node.",
                 [(None, "green"), (cfg.inference_kv_cache_full_ratio, "red")], no_value="-"),
            stat("Serving GPUs", f"count({gpus})", "short", "GPUs of this node a replica runs on.", no_value="0"),
        ]),
        ("Replicas", [
            timeseries("Requests/s", [(f"sum by ({by}) ({rate_on_node(c.VLLM_REQUEST_SUCCESS)})", rep)], "reqps",
                       "Finished requests per second (every finished_reason).", min_value=0),
            timeseries("Tokens/s in and out", [
                (f"sum by ({by}) ({rate_on_node(c.VLLM_PROMPT_TOKENS)})", f"{rep} in"),
                (f"sum by ({by}) ({rate_on_node(c.VLLM_GENERATION_TOKENS)})", f"{rep} out"),
            ], "short", min_value=0),
            timeseries("Time to first token", [(quantile(q, rate_on_node(ttft)), f"{rep} p{round(q * 100)}")
                                               for q in (0.5, 0.95, 0.99)], "s",
                       f"The SLO threshold is {cfg.inference_ttft_seconds:g} s.", min_value=0),
            timeseries("Inter-token latency", [(quantile(q, itl_rates), f"{rep} p{round(q * 100)}")
                                               for q in (0.5, 0.95, 0.99)], "s",
                       f"The SLO threshold is {cfg.inference_itl_seconds * 1000:g} ms; one throttled GPU slows "
                       "the whole tensor-parallel replica.", min_value=0),
        ]),
        ("Queue and KV cache", [
            timeseries("Running and waiting", [
                (f"sum by ({by}) ({on_node(c.VLLM_NUM_REQUESTS_RUNNING)})", f"{rep} running"),
                (f"sum by ({by}) ({on_node(c.VLLM_NUM_REQUESTS_WAITING)})", f"{rep} waiting"),
            ], "short", min_value=0),
            timeseries("KV-cache use", [(kv, rep)], "percentunit", min_value=0, max_value=1),
            timeseries("Preemptions/s", [(f"sum by ({by}) ({rate_on_node(c.VLLM_NUM_PREEMPTIONS)})", rep)],
                       "short", "Sequences evicted from a full KV cache.", min_value=0),
        ]),
        ("The replicas' GPUs", [
            timeseries("GPU utilisation", [(gpus, gpu)], "percent", min_value=0, max_value=100),
            timeseries("GPU memory used", [(replica_gpus(c.DCGM_FI_DEV_FB_USED, _NODE), gpu)], "decmbytes",
                       "Framebuffer used: vLLM pre-allocates its KV cache, so this is flat while it serves.",
                       min_value=0),
            timeseries("GPU power", [(watts, gpu)], "watt", min_value=0),
            timeseries("SM clock", [(replica_gpus(c.DCGM_FI_DEV_SM_CLOCK, _NODE), gpu)], "hertz",
                       "A clock below its peers' is throttling (see the GPU node dashboard's reasons).",
                       min_value=0),
        ]),
        ("Efficiency and errors", [
            timeseries("Generated tokens/s per GPU", [(f"{gen} / on (model_name) count by (model_name) ({gpus})",
                                                       "{{model_name}}")], "short", min_value=0),
            timeseries("Generated tokens per joule", [
                (f"{gen} / on (model_name) (sum by (model_name) ({watts}) > 0)", "{{model_name}}"),
            ], "short", "Output tokens per second over the serving GPUs' power (W).", min_value=0),
            table("XIDs on the replicas' GPUs (last hour)",
                  f"sum by (gpu, xid, model_name) (increase({sel(c.GPU_XID_ERRORS_TOTAL, **HOST)}[1h]) * on "
                  f"({c.NODE_LABEL}, gpu) group_left (model_name) group by ({c.NODE_LABEL}, gpu, model_name) ({gpus})) > 0",
                  "short", "XIDs of a GPU a replica runs on: a drain-class one (79, 48, 94, 95) kills its engine.",
                  no_value="none"),
        ]),
    ]  # fmt: skip
    return dashboard(
        UID,
        "fleetscope / Inference replica",
        "The serving replicas on one node beside their GPUs.",
        [hostname_var(c.DCGM_FI_DEV_GPU_UTIL)],
        rows,
    )
