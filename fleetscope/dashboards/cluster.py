"""Cluster overview: every node's, GPU's and Neuron device's health at a glance, jobs, MFU and active
alerts (GPU and Trainium/Inferentia nodes side by side)."""

from __future__ import annotations

import grafanalib.core as g

from fleetscope import contract as c
from fleetscope.alerts import names
from fleetscope.alerts.config import Thresholds
from fleetscope.alerts.stack import PROMETHEUS_UP
from fleetscope.dashboards.common import dashboard, stat, state_timeline, table, timeseries

#: Prometheus' own series of active alerts (not a contract metric).
ALERTS = "ALERTS"
_FIRING = f'{ALERTS}{{alertstate="firing", alertname=~"Fleetscope.*"}}'

UID = "fleetscope-cluster"


def build(cfg: Thresholds) -> g.Dashboard:
    n = c.NODE_LABEL
    health = c.NODE_HEALTH
    node_state = (
        f'2 * max by ({n}) ({health}{{state="failing"}})'
        f' + on ({n}) max by ({n}) ({health}{{state="degraded"}})'
    )
    rows = [
        (None, [
            stat("Nodes failing", f'count({health}{{state="failing"}} == 1)', "short",
                 "Nodes the live service judges failing: drain them.", [(None, "green"), (1, "red")]),
            stat("Nodes degraded", f'count({health}{{state="degraded"}} == 1)', "short",
                 "Nodes that work but slow or endanger their jobs.", [(None, "green"), (1, "orange")]),
            stat("GPUs lost", f"count({c.GPU_UP} == 0)", "short",
                 "GPUs that stopped answering NVML (lost, fallen off the bus).", [(None, "green"), (1, "red")]),  # noqa: E501
            stat("GPUs", f"count({c.GPU_UP})", "short", "GPUs the exporters enumerate."),
            stat("Neuron devices", f"sum({c.NEURON_DEVICES})", "short",
                 "Trainium/Inferentia devices the neuron collectors list (beside the GPUs)."),
            stat("Jobs training", f"count(count by (job_id) ({c.TRAINING_STEPS}))", "short",
                 "Jobs with live rank files."),
            stat("Alerts firing", f"count({_FIRING})", "short", "fleetscope alerts firing now.",
                 [(None, "green"), (1, "orange")]),
        ]),
        (None, [
            state_timeline("Node health", node_state, "{{Hostname}}",
                           {0: ("healthy", "green"), 1: ("degraded", "orange"), 2: ("failing", "red")},
                           "The live service's verdict per node."),
            state_timeline("GPUs answering", f"min by ({n}, gpu) ({c.GPU_UP})", "{{Hostname}} GPU {{gpu}}",
                           {1: ("up", "green"), 0: ("lost", "red")}, "fleetscope_gpu_up per GPU."),
        ]),
        (None, [
            table("Firing alerts", _FIRING, "short", "What to do: follow each alert's runbook_url.",
                  hide=("__name__", "alertstate", "instance", "job"), no_value="no alerts firing"),
        ]),
        ("Training", [
            timeseries("MFU by job", [(names.JOB_MFU, "{{job_id}}")], "percentunit",
                       "Model FLOP/s over the summed bf16 peak of the job's GPUs.", min_value=0),
            timeseries("Tokens/s by job", [(names.JOB_TOKENS, "{{job_id}}")], "short", min_value=0),
            timeseries("Straggler scores (top 10)", [(f"topk(10, {c.STRAGGLER_SCORE})",
                                                      "job {{job_id}} rank {{rank}} ({{Hostname}})")], "short",  # noqa: E501
                       "Own compute time over the peer median; 1 is normal."),
        ]),
        ("Fleet", [
            timeseries("GPU utilization by node", [(f"avg by ({n}) ({c.DCGM_FI_DEV_GPU_UTIL})", "{{Hostname}}")],  # noqa: E501
                       "percent", min_value=0, max_value=100),
            timeseries("NeuronCore utilization by node",
                       [(f"avg by ({n}) ({c.NEURONCORE_UTILIZATION})", "{{Hostname}}")], "percentunit",
                       "Trainium/Inferentia nodes, beside the GPU nodes above.", min_value=0, max_value=1),
            timeseries("GPU power by node", [(f"sum by ({n}) ({c.DCGM_FI_DEV_POWER_USAGE})", "{{Hostname}}")],
                       "watt", min_value=0),
            timeseries("Open findings", [(f"sum by (kind, severity) ({c.FINDINGS})", "{{kind}} ({{severity}})")],  # noqa: E501
                       "short", min_value=0),
            timeseries("fleetscope targets up", [(f"sum by (job) ({PROMETHEUS_UP}{{{cfg.job_selector}}})",
                                                  "{{job}}")], "short", min_value=0),
        ]),
    ]  # fmt: skip
    return dashboard(
        UID,
        "fleetscope / Cluster overview",
        "Health of every node and GPU, training jobs, MFU and firing alerts.",
        [],
        rows,
    )
