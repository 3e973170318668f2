"""GPU alerts: XIDs by class, lost or missing GPUs, recovery actions, memory, PCIe, NVLink, throttling."""

from __future__ import annotations

from fleetscope import contract as c
from fleetscope import hardware as hw
from fleetscope import queries
from fleetscope.alerts import names
from fleetscope.alerts.config import Thresholds
from fleetscope.alerts.model import Alert, Case, Fire, Group
from fleetscope.alerts.testdata import HOST, gpu, gpu_labels, num
from fleetscope.xids import XID_APPLICATION, XID_DRAIN, XID_WATCH, promql_regex

_GPU_DESC = "GPU {{ $labels.gpu }} ({{ $labels.UUID }}) on {{ $labels.Hostname }}"
_GPU_ID = (c.NODE_LABEL, "gpu", "UUID")


def xid_event(xids: frozenset[int], window: str) -> str:
    """An XID of the class counted in ``window``: a counter increase, or a series that just appeared.

    The exporter creates a per-XID series when the XID first happens (value 1), so ``increase``
    alone would miss the first one: it needs two samples.
    """
    sel = f'{c.GPU_XID_ERRORS_TOTAL}{{xid=~"{promql_regex(xids)}"}}'
    return f"increase({sel}[{window}]) > 0 or ({sel} unless {sel} offset {window})"


def _xid_alert(
    name: str, cls: str, xids: frozenset[int], severity: str, summary: str, what: str, cfg: Thresholds
) -> Alert:
    one = min(xids)
    other = min(XID_APPLICATION if cls != "application" else XID_WATCH)
    labels = {**gpu_labels(), "xid": str(one)}
    return Alert(
        name=name,
        expr=xid_event(xids, cfg.event_window),
        severity=severity,
        summary=summary,
        description=f"{_GPU_DESC} logged XID {{{{ $labels.xid }}}} ({cls} class: {what}); "
        f'{{{{ printf "%.0f" $value }}}} in the last {cfg.event_window}.',
        cases=(
            Case(
                "first occurrence fires at once",
                (gpu(c.GPU_XID_ERRORS_TOTAL, "_ _ _ 1 1", xid=str(one)),),
                "4m",
                (Fire(labels, 1),),
            ),
            Case(
                "a repeat fires",
                (gpu(c.GPU_XID_ERRORS_TOTAL, "1x12 2 2", xid=str(one)),),
                "13m",
                (Fire(labels, 1),),
            ),
            Case(
                "an old one and another class do not fire",
                (
                    gpu(c.GPU_XID_ERRORS_TOTAL, "1x20", xid=str(one)),
                    gpu(
                        c.GPU_XID_ERRORS_TOTAL,
                        "_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ 1 1 1 1",
                        gpu="1",
                        xid=str(other),
                    ),
                ),
                "20m",
            ),
        ),
    )


def _bit_set(metric: str, bits: tuple[int, ...]) -> str:
    """``metric`` where any of ``bits`` is set (PromQL has no bitwise operators)."""
    tests = " or ".join(f"floor({metric} / {b}) % 2 == 1" for b in bits)
    return f"{metric} and ({tests})"


def group(cfg: Thresholds) -> Group:
    w = cfg.event_window
    ew = cfg.rate_window
    hist = cfg.gpu_history_window
    recovery = ", ".join(f"{k} {v.replace('_', ' ')}" for k, v in hw.RECOVERY_ACTIONS.items() if k)
    width, gen = c.DCGM_FI_DEV_PCIE_LINK_WIDTH, c.DCGM_FI_DEV_PCIE_LINK_GEN
    reasons = c.DCGM_FI_DEV_CLOCKS_EVENT_REASONS
    either_reasons = queries.clock_event_reasons()
    thermal_bits = (hw.CLOCK_EVENT_HW_SLOWDOWN, hw.CLOCK_EVENT_SW_THERMAL, hw.CLOCK_EVENT_HW_THERMAL)
    nvlink = (
        c.DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL,
        c.DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL,
        c.DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL,
        c.DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL,
    )
    g0 = gpu_labels()
    ids = {k: g0[k] for k in _GPU_ID}

    def degraded(metric: str) -> str:
        return (
            f"{metric} < max_over_time({metric}[{hist}])"
            f" or {metric} < on ({c.NODE_LABEL}) group_left () max by ({c.NODE_LABEL}) ({metric})"
        )

    alerts = [
        _xid_alert(
            "FleetscopeGpuXidDrain",
            "drain",
            XID_DRAIN,
            "critical",
            "A GPU logged a hardware XID: drain its node.",
            "hardware or driver fault, drain the node, then reset, reboot or replace",
            cfg,
        ),
        _xid_alert(
            "FleetscopeGpuXidWatch",
            "watch",
            XID_WATCH,
            "warning",
            "A GPU logged an XID that predicts failure: plan maintenance.",
            "memory remap, contained error or rising SBE rate, reset or service at the next window",
            cfg,
        ),
        _xid_alert(
            "FleetscopeGpuXidApplication",
            "application",
            XID_APPLICATION,
            "info",
            "A job hit an application XID on a GPU.",
            "the application faulted, restart the job, the GPU stays in service",
            cfg,
        ),
        Alert(
            name="FleetscopeGpuXidApplicationRepeated",
            expr=(
                f'{c.GPU_XID_ERRORS_TOTAL}{{xid=~"{promql_regex(XID_APPLICATION)}"}}'
                f' - {c.GPU_XID_ERRORS_TOTAL}{{xid=~"{promql_regex(XID_APPLICATION)}"}}'
                f" offset {cfg.xid_application_repeat_window} >= {cfg.xid_application_repeat_count}"
                f' or ({c.GPU_XID_ERRORS_TOTAL}{{xid=~"{promql_regex(XID_APPLICATION)}"}}'
                f" >= {cfg.xid_application_repeat_count}"
                f' unless {c.GPU_XID_ERRORS_TOTAL}{{xid=~"{promql_regex(XID_APPLICATION)}"}}'
                f" offset {cfg.xid_application_repeat_window})"
            ),
            severity="warning",
            summary="An application XID keeps coming back on the same GPU: suspect the hardware.",
            description=f"{_GPU_DESC} logged application XID {{{{ $labels.xid }}}} "
            f'{{{{ printf "%.0f" $value }}}} times in {cfg.xid_application_repeat_window}; '
            "a repeat on one GPU across jobs points at the GPU, not the code.",
            cases=(
                Case(
                    "three in a day",
                    (gpu(c.GPU_XID_ERRORS_TOTAL, "_ 1 1 2 2 3 3", xid="13"),),
                    "6m",
                    (Fire({**g0, "xid": "13"}, 3),),
                ),
                Case(
                    "once is the job's fault", (gpu(c.GPU_XID_ERRORS_TOTAL, "_ 1 1 1 1 1 1", xid="13"),), "6m"
                ),
            ),
        ),
        Alert(
            name="FleetscopeGpuLost",
            expr=f"{c.GPU_UP} == 0",
            for_="1m",
            severity="critical",
            summary="A GPU stopped answering NVML (lost or fallen off the bus).",
            description=f"{_GPU_DESC} does not answer NVML: GpuIsLost, a timeout or fallen off the bus.",
            cases=(
                Case("lost for 2m", (gpu(c.GPU_UP, "1 1 0 0 0"),), "4m", (Fire(g0, 0),)),
                Case("answering", (gpu(c.GPU_UP, "1x4"),), "4m"),
            ),
        ),
        Alert(
            name="FleetscopeGpuRecoveryActionRequired",
            expr=f"{c.DCGM_FI_DEV_GPU_RECOVERY_ACTION} > 0",
            severity="critical",
            summary="The driver asks for a GPU recovery action.",
            description=f'{_GPU_DESC} asks for recovery action {{{{ printf "%.0f" $value }}}} ({recovery}).',
            cases=(
                Case(
                    "node reboot required",
                    (gpu(c.DCGM_FI_DEV_GPU_RECOVERY_ACTION, "0 0 2 2"),),
                    "3m",
                    (Fire(g0, 2),),
                ),
                Case("none", (gpu(c.DCGM_FI_DEV_GPU_RECOVERY_ACTION, "0x3"),), "3m"),
            ),
        ),
        Alert(
            name="FleetscopeGpuUncorrectableEccErrors",
            expr=f"increase({c.DCGM_FI_DEV_ECC_DBE_VOL_TOTAL}[{w}]) > 0",
            severity="critical",
            summary="A GPU had uncorrectable (double-bit) ECC errors.",
            description=f'{_GPU_DESC} counted {{{{ printf "%.0f" $value }}}} uncorrectable ECC errors '
            f"in {w}.",
            cases=(
                Case("two DBEs", (gpu(c.DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, "0x10 2 2"),), "12m", (Fire(g0, 2),)),
                Case("no new DBE", (gpu(c.DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, "3x12"),), "12m"),
            ),
        ),
        Alert(
            name="FleetscopeGpuRowRemapFailure",
            expr=f"{c.DCGM_FI_DEV_ROW_REMAP_FAILURE} == 1",
            severity="critical",
            summary="A GPU failed to remap a memory row: it needs replacing.",
            description=f"{_GPU_DESC} could not remap a failing HBM row (no spare rows left).",
            cases=(
                Case("failed", (gpu(c.DCGM_FI_DEV_ROW_REMAP_FAILURE, "0 1 1"),), "2m", (Fire(g0, 1),)),
                Case("fine", (gpu(c.DCGM_FI_DEV_ROW_REMAP_FAILURE, "0 0 0"),), "2m"),
            ),
        ),
        Alert(
            name="FleetscopeGpuRowRemapPending",
            expr=f"{c.DCGM_FI_DEV_ROW_REMAP_PENDING} == 1",
            for_="10m",
            severity="warning",
            summary="A GPU has a memory row remap pending: reset it when its job allows.",
            description=f"{_GPU_DESC} has a row remap pending; it takes effect at the next GPU reset.",
            cases=(
                Case(
                    "pending for 10m", (gpu(c.DCGM_FI_DEV_ROW_REMAP_PENDING, "1x12"),), "11m", (Fire(g0, 1),)
                ),
                Case("pending only briefly", (gpu(c.DCGM_FI_DEV_ROW_REMAP_PENDING, "1 1 1 0x9"),), "11m"),
            ),
        ),
        Alert(
            name="FleetscopeGpuPcieLinkWidthDegraded",
            expr=degraded(width),
            for_="5m",
            severity="warning",
            summary="A GPU's PCIe link runs narrower than before or than its peers.",
            description=f'{_GPU_DESC} runs its PCIe link at x{{{{ printf "%.0f" $value }}}}, narrower '
            f"than in the last {hist} or than the node's other GPUs.",
            cases=(
                Case(
                    "x16 to x8", (gpu(width, "16 16 8x7"), gpu(width, "16x9", gpu="1")), "8m", (Fire(g0, 8),)
                ),
                Case("steady x16", (gpu(width, "16x9"), gpu(width, "16x9", gpu="1")), "8m"),
            ),
        ),
        Alert(
            name="FleetscopeGpuPcieLinkGenDegraded",
            expr=(
                f"({degraded(gen)}) and on ({c.NODE_LABEL}, gpu)"
                f" {c.DCGM_FI_DEV_GPU_UTIL} > {num(cfg.pcie_gen_busy_util_percent)}"
            ),
            for_="5m",
            severity="warning",
            summary="A busy GPU's PCIe link runs at a lower generation than before or than its peers.",
            description=f'{_GPU_DESC} runs PCIe gen {{{{ printf "%.0f" $value }}}} while busy, lower than '
            f"in the last {hist} or than the node's other GPUs.",
            cases=(
                Case(
                    "gen5 to gen3 under load",
                    (gpu(gen, "5 5 3x7"), gpu(c.DCGM_FI_DEV_GPU_UTIL, "90x9")),
                    "8m",
                    (Fire(g0, 3),),
                ),
                Case(
                    "lower gen at idle is power saving",
                    (gpu(gen, "5 5 1x7"), gpu(c.DCGM_FI_DEV_GPU_UTIL, "0x9")),
                    "8m",
                ),
            ),
        ),
        Alert(
            name="FleetscopeGpuPcieReplays",
            expr=f"rate({c.DCGM_FI_DEV_PCIE_REPLAY_COUNTER}[{ew}]) > {num(cfg.pcie_replay_rate_per_second)}",
            for_="10m",
            severity="warning",
            summary="A GPU's PCIe link keeps replaying packets.",
            description=f'{_GPU_DESC} replays {{{{ printf "%.2f" $value }}}} PCIe packets per second.',
            cases=(
                Case(
                    "30 replays a minute",
                    (gpu(c.DCGM_FI_DEV_PCIE_REPLAY_COUNTER, "0+30x20"),),
                    "20m",
                    (Fire(g0, 0.5),),
                ),
                Case("a few", (gpu(c.DCGM_FI_DEV_PCIE_REPLAY_COUNTER, "0+1x20"),), "20m"),
            ),
        ),
        Alert(
            name="FleetscopeGpuNvlinkErrors",
            expr=f"{queries.sum_of_counters(nvlink, ew, _GPU_ID)} > {num(cfg.nvlink_error_rate_per_second)}",
            for_="10m",
            severity="warning",
            summary="A GPU's NVLinks count errors (CRC, replay or recovery).",
            description=f'{_GPU_DESC} counts {{{{ printf "%.2f" $value }}}} NVLink errors per second.',
            cases=(
                Case(
                    "CRC and replay errors",
                    (gpu(nvlink[0], "0+60x20"), gpu(nvlink[2], "0+120x20")),
                    "20m",
                    (Fire(ids, 3),),
                ),
                Case("quiet links", (gpu(nvlink[0], "0x20"), gpu(nvlink[3], "0+6x20")), "20m"),
            ),
        ),
        Alert(
            name="FleetscopeGpuThermalThrottling",
            expr=_bit_set(either_reasons, thermal_bits),
            for_=cfg.thermal_throttle_for,
            severity="warning",
            summary="A GPU is throttling its clocks for heat.",
            description=f"{_GPU_DESC} has been throttling for heat for {cfg.thermal_throttle_for} "
            f'(clock event reasons {{{{ printf "%.0f" $value }}}}: 8 HW slowdown, 32 SW thermal, 64 HW '
            "thermal).",
            cases=(
                Case("HW thermal slowdown", (gpu(reasons, "0 72x12"),), "12m", (Fire(g0, 72),)),
                Case(
                    "older dcgm-exporter name",
                    (gpu(c.DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, "0 72x12"),),
                    "12m",
                    (Fire(g0, 72),),
                ),
                Case("idle and power cap only", (gpu(reasons, "1x5 4x8"),), "12m"),
            ),
        ),
        Alert(
            name="FleetscopeGpuPowerBrake",
            expr=_bit_set(either_reasons, (hw.CLOCK_EVENT_HW_POWER_BRAKE,)),
            for_=cfg.power_brake_for,
            severity="warning",
            summary="A GPU's clocks are held down by the hardware power brake.",
            description=f"{_GPU_DESC} has had the HW power brake asserted for {cfg.power_brake_for} "
            '(clock event reasons {{ printf "%.0f" $value }}); the chassis or PSU is pulling it.',
            cases=(
                Case("power brake", (gpu(reasons, "0 136x8"),), "7m", (Fire(g0, 136),)),
                Case(
                    "older dcgm-exporter name",
                    (gpu(c.DCGM_FI_DEV_CLOCK_THROTTLE_REASONS, "0 136x8"),),
                    "7m",
                    (Fire(g0, 136),),
                ),
                Case("SW power cap is normal", (gpu(reasons, "4x8"),), "7m"),
            ),
        ),
        Alert(
            name="FleetscopeGpuMissing",
            expr=f"{names.NODE_GPU_COUNT} < max_over_time({names.NODE_GPU_COUNT}[{hist}])",
            for_="5m",
            severity="critical",
            summary="A node enumerates fewer GPUs than it had.",
            description='{{ $labels.Hostname }} enumerates {{ printf "%.0f" $value }} GPUs, fewer than '
            f"in the last {hist}.",
            cases=(
                Case(
                    "GPU 1 vanished",
                    (gpu(c.GPU_UP, "1x14"), gpu(c.GPU_UP, "1 1 1 _x11", gpu="1")),
                    "14m",
                    (Fire({c.NODE_LABEL: HOST}, 1),),
                ),
                Case("all there", (gpu(c.GPU_UP, "1x12"), gpu(c.GPU_UP, "1x12", gpu="1")), "12m"),
            ),
        ),
    ]
    return Group("gpu", tuple(alerts))


__all__ = ["group", "xid_event"]
