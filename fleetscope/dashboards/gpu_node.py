"""GPU node detail: every GPU of one node, from utilization to XIDs, memory errors, PCIe and NVLink."""

from __future__ import annotations

import grafanalib.core as g

from fleetscope import contract as c
from fleetscope import hardware, queries
from fleetscope.alerts.config import Thresholds
from fleetscope.dashboards.common import HOST, dashboard, hostname_var, sel, state_timeline, table, timeseries

UID = "fleetscope-gpu-node"
W = "$__rate_interval"


def build(cfg: Thresholds) -> g.Dashboard:
    def s(metric: str) -> str:
        return sel(metric, **HOST)

    gpu_legend = "GPU {{gpu}}"
    nvlink = (
        c.DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL,
        c.DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL,
        c.DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL,
        c.DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL,
    )
    nvlink_errors = queries.sum_of_counters(nvlink, W, ("gpu",), matchers=s(""))
    rows = [
        ("Health", [
            state_timeline("GPU answering", s(c.GPU_UP), gpu_legend, {1: ("up", "green"), 0: ("lost", "red")}),  # noqa: E501
            state_timeline("Recovery action", s(c.DCGM_FI_DEV_GPU_RECOVERY_ACTION), gpu_legend,
                           {k: (v, "green" if k == 0 else "red") for k, v in hardware.RECOVERY_ACTIONS.items()},  # noqa: E501
                           "What the driver asks for (NVML recovery action)."),
            table("XIDs since exporter start", f"sum by (gpu, xid) ({s(c.GPU_XID_ERRORS_TOTAL)})", "short",
                  "XID codes per GPU; the class decides the action (docs/runbooks.md).", no_value="no XIDs"),
        ]),
        ("Load", [
            timeseries("GPU utilization", [(s(c.DCGM_FI_DEV_GPU_UTIL), gpu_legend)], "percent", min_value=0,
                       max_value=100),
            timeseries("Tensor pipe active", [(s(c.DCGM_FI_PROF_PIPE_TENSOR_ACTIVE), gpu_legend)], "percentunit",  # noqa: E501
                       min_value=0, max_value=1),
            timeseries("Framebuffer used", [(s(c.DCGM_FI_DEV_FB_USED), gpu_legend)], "mbytes", min_value=0),
        ]),
        ("Clocks, heat and power", [
            timeseries("SM clock", [(s(c.DCGM_FI_DEV_SM_CLOCK), gpu_legend)], "rotmhz"),
            timeseries("GPU temperature", [(s(c.DCGM_FI_DEV_GPU_TEMP), gpu_legend)], "celsius"),
            timeseries("Power", [(s(c.DCGM_FI_DEV_POWER_USAGE), gpu_legend)], "watt", min_value=0),
            timeseries("Time throttled", [
                (f"rate({s(c.DCGM_FI_DEV_THERMAL_VIOLATION)}[{W}]) / 1e9", "GPU {{gpu}} thermal"),
                (f"rate({s(c.DCGM_FI_DEV_POWER_VIOLATION)}[{W}]) / 1e9", "GPU {{gpu}} power"),
            ], "percentunit", "Share of time the clocks were held down, from NVML's violation counters.",
                min_value=0),
        ]),
        ("Memory errors", [
            timeseries("Uncorrectable ECC errors", [(f"increase({s(c.DCGM_FI_DEV_ECC_DBE_VOL_TOTAL)}[{W}])",
                                                     gpu_legend)], "short", min_value=0),
            timeseries("Correctable ECC errors", [(f"increase({s(c.DCGM_FI_DEV_ECC_SBE_VOL_TOTAL)}[{W}])",
                                                   gpu_legend)], "short", min_value=0),
            timeseries("Row remap pending / failed", [
                (s(c.DCGM_FI_DEV_ROW_REMAP_PENDING), "GPU {{gpu}} pending"),
                (s(c.DCGM_FI_DEV_ROW_REMAP_FAILURE), "GPU {{gpu}} failed"),
            ], "short", min_value=0),
        ]),
        ("PCIe and NVLink", [
            timeseries("PCIe link", [
                (s(c.DCGM_FI_DEV_PCIE_LINK_WIDTH), "GPU {{gpu}} width"),
                (s(c.DCGM_FI_DEV_PCIE_LINK_GEN), "GPU {{gpu}} gen"),
            ], "short", "Lanes and generation; a lower width is a fault, a lower gen at idle is power "
                        "saving."),
            timeseries("PCIe replays", [(f"rate({s(c.DCGM_FI_DEV_PCIE_REPLAY_COUNTER)}[{W}])", gpu_legend)], "ops",  # noqa: E501
                       min_value=0),
            timeseries("NVLink errors", [(nvlink_errors, gpu_legend)], "ops", "CRC, replay and recovery "
                                                                              "errors.",
                       min_value=0),
            timeseries("NVLink traffic", [
                (s(c.DCGM_FI_PROF_NVLINK_TX_BYTES), "GPU {{gpu}} tx"),
                (s(c.DCGM_FI_PROF_NVLINK_RX_BYTES), "GPU {{gpu}} rx"),
            ], "Bps", min_value=0),
        ]),
    ]  # fmt: skip
    return dashboard(UID, "fleetscope / GPU node", "Every GPU of one node.", [hostname_var(c.GPU_UP)], rows)
