"""Neuron node detail: every NeuronCore and Neuron device of one Trainium or Inferentia node.

The queries use the names of AWS's neuron-monitor-prometheus.py (docs/neuron.md), so the same
panels work on the neuron collector's series and, filtered by host, on that script's.
"""

from __future__ import annotations

import grafanalib.core as g

from fleetscope import contract as c
from fleetscope.alerts.config import Thresholds
from fleetscope.dashboards.common import HOST, dashboard, hostname_var, sel, stat, table, timeseries

UID = "fleetscope-neuron-node"
W = "$__rate_interval"


def build(cfg: Thresholds) -> g.Dashboard:
    def s(metric: str, **extra: str) -> str:
        return sel(metric, **HOST, **extra)

    core = "core {{neuroncore}} (device {{neuron_device}})"
    uncorrected = "|".join(c.NEURON_ECC_UNCORRECTED)
    corrected = "|".join(t for t in c.NEURON_ECC_EVENT_TYPES if t not in c.NEURON_ECC_UNCORRECTED)
    ecc = c.NEURON_HW_ECC_EVENTS
    rows = [
        ("Health", [
            stat("Neuron devices", s(c.NEURON_DEVICES), "short",
                 "Devices the latest neuron-monitor report lists; fewer than before is a vanished device."),
            stat("Uncorrectable ECC (1h)",
                 f"sum(increase({s(ecc, event_type=uncorrected)}[1h]))", "short",
                 "DRAM and SRAM events the device could not correct: drain the node.",
                 [(None, "green"), (1, "red")]),
            stat("Hardware execution errors (1h)",
                 f"sum(increase({s(c.NEURON_EXECUTION_ERRORS, error_type='hardware')}[1h]))", "short",
                 "Executions the Neuron Runtime failed for a hardware fault.", [(None, "green"), (1, "red")]),
            stat("neuron-monitor restarts (1h)", f"sum(increase({s(c.NEURON_MONITOR_RESTARTS)}[1h]))", "short",  # noqa: E501
                 "The exporter restarted neuron-monitor (it exited, hung or printed garbage).",
                 [(None, "green"), (1, "orange")]),
            table("Hardware", s(c.NEURON_HARDWARE_INFO), "short", "neuron_hardware_info of the latest "
                                                                  "report.",
                  hide=("__name__", "Value", "instance", "job")),
        ]),
        ("NeuronCores", [
            timeseries("NeuronCore utilization", [(s(c.NEURONCORE_UTILIZATION), core)], "percentunit",
                       min_value=0, max_value=1),
            timeseries("Device memory by core (tensors)", [(s(c.NEURONCORE_MEMORY_TENSORS), core)], "bytes",
                       min_value=0),
            timeseries("Runtime memory", [(s(c.NEURON_RUNTIME_MEMORY_USED), "{{runtime_tag}} "
                                                                            "{{memory_location}}")],
                       "bytes", min_value=0),
        ]),
        ("Executions", [
            timeseries("Executions by outcome", [("sum by (status_type) "
                                                  f"(rate({s(c.NEURON_EXECUTION_STATUS)}[{W}]))",
                                                  "{{status_type}}")], "ops", min_value=0),
            timeseries("Execution errors by type", [("sum by (error_type) "
                                                     f"(rate({s(c.NEURON_EXECUTION_ERRORS)}[{W}]))",
                                                     "{{error_type}}")], "ops", min_value=0),
            timeseries("Execution latency", [(s(c.NEURON_EXECUTION_LATENCY, percentile="p50|p99"),
                                              "{{runtime_tag}} {{percentile}}")], "s", min_value=0),
        ]),
        ("Memory errors", [
            timeseries("Uncorrectable ECC events", [("sum by (neuron_device_index) "
                                                     f"(increase({s(ecc, event_type=uncorrected)}[{W}]))",
                                                     "device {{neuron_device_index}}")], "short", min_value=0),  # noqa: E501
            timeseries("Corrected ECC events", [("sum by (neuron_device_index) "
                                                 f"(increase({s(ecc, event_type=corrected)}[{W}]))",
                                                 "device {{neuron_device_index}}")], "short", min_value=0),
        ]),
        ("Host", [
            timeseries("vCPU usage", [(s(c.NEURON_SYSTEM_VCPU_USAGE), "{{usage_type}}")], "percentunit",
                       min_value=0, max_value=1),
            timeseries("Host memory used", [(f"{s(c.NEURON_SYSTEM_MEMORY_USED)} / "
                                             f"{s(c.NEURON_SYSTEM_MEMORY_TOTAL)}",
                                             "used")], "percentunit", min_value=0, max_value=1),
        ]),
    ]  # fmt: skip
    return dashboard(
        UID,
        "fleetscope / Neuron node",
        "Every NeuronCore and Neuron device of one Trainium or Inferentia node.",
        [hostname_var(c.NEURON_DEVICES)],
        rows,
    )
