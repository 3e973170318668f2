"""Facts about the hardware, apart from the metric names that report them.

* The NVML clock-event (throttle) reason bits, the value of ``DCGM_FI_DEV_CLOCKS_EVENT_REASONS``
  (NVML ``nvmlClocksEventReasons``: https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html).
* The GPU recovery actions the driver asks for, the value of ``DCGM_FI_DEV_GPU_RECOVERY_ACTION``
  (NVML field ``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``, ``nvmlDeviceGpuRecoveryAction_t`` in
  https://docs.nvidia.com/deploy/nvml-api/).
* Dense peak FLOP/s per GPU model and dtype (NVIDIA's H100, H200, B200/B300 and A100 datasheets,
  https://www.nvidia.com/en-us/data-center/, SXM/HGX parts, without sparsity), behind
  ``fleetscope_gpu_peak_flops`` and MFU.

XID codes have their own module, :mod:`fleetscope.xids`. Standard library only: the node agent uses
this module.
"""

from __future__ import annotations

import re

# --------------------------------------------------------------------------------------------
# Clock-event (throttle) reasons
# --------------------------------------------------------------------------------------------

#: Clock-event (throttle) reason bits, as NVML defines them.
CLOCK_EVENT_GPU_IDLE = 0x1
CLOCK_EVENT_APPLICATIONS_CLOCKS_SETTING = 0x2
CLOCK_EVENT_SW_POWER_CAP = 0x4
CLOCK_EVENT_HW_SLOWDOWN = 0x8
CLOCK_EVENT_SYNC_BOOST = 0x10
CLOCK_EVENT_SW_THERMAL = 0x20
CLOCK_EVENT_HW_THERMAL = 0x40
CLOCK_EVENT_HW_POWER_BRAKE = 0x80
CLOCK_EVENT_DISPLAY_CLOCK = 0x100

# --------------------------------------------------------------------------------------------
# GPU recovery actions
# --------------------------------------------------------------------------------------------

#: ``DCGM_FI_DEV_GPU_RECOVERY_ACTION`` values.
RECOVERY_ACTIONS: dict[int, str] = {
    0: "none",
    1: "gpu_reset",
    2: "node_reboot",
    3: "drain_p2p",
    4: "drain_and_reset",
}

# --------------------------------------------------------------------------------------------
# Peak FLOP/s
# --------------------------------------------------------------------------------------------

# Peak dense FLOP/s per GPU (SXM/HGX parts). A model that matches no pattern gets no series.
_H100_H200 = {"bf16": 0.9895e15, "fp8": 1.979e15}
PEAK_FLOPS_TABLE: tuple[tuple[str, dict[str, float]], ...] = (
    # NVML names: "NVIDIA H100 80GB HBM3" (SXM5), "NVIDIA H100 SXM5 ...", "NVIDIA H200" (SXM).
    (r"^NVIDIA H100 80GB HBM3$|^NVIDIA H100 SXM", _H100_H200),
    (r"^NVIDIA H200$|^NVIDIA H200 SXM", _H100_H200),
    (r"^NVIDIA B200", {"bf16": 2.25e15, "fp8": 4.5e15, "fp4": 9e15}),
    (r"^NVIDIA B300", {"bf16": 2.25e15, "fp8": 4.5e15, "fp4": 13.5e15}),
    (r"^NVIDIA A100[- ]SXM", {"bf16": 0.312e15}),
)


def peak_flops(model_name: str) -> dict[str, float] | None:
    """Dense peak FLOP/s per dtype for an NVML model name, or None when the model is unknown."""
    for pattern, table in PEAK_FLOPS_TABLE:
        if re.search(pattern, model_name.strip()):
            return dict(table)
    return None
