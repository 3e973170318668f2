"""Facts about the hardware, apart from the metric names that report them.

* The NVML clock-event (throttle) reason bits, the value of ``DCGM_FI_DEV_CLOCKS_EVENT_REASONS``
  (NVML ``nvmlClocksEventReasons``: https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html).
* The GPU recovery actions the driver asks for, the value of ``DCGM_FI_DEV_GPU_RECOVERY_ACTION``
  (NVML field ``NVML_FI_DEV_GET_GPU_RECOVERY_ACTION``, ``nvmlDeviceGpuRecoveryAction_t`` in
  https://docs.nvidia.com/deploy/nvml-api/).
* Dense peak FLOP/s per GPU model and dtype (NVIDIA's H100, H200, B200/B300 and A100 datasheets,
  https://www.nvidia.com/en-us/data-center/, SXM/HGX parts, without sparsity), behind
  ``fleetscope_gpu_peak_flops`` and MFU.
* Dense peak FLOP/s per AWS Neuron device and NeuronCore (Trn1, Trn2, Inf2; AWS's Neuron
  architecture pages), served as ``fleetscope_gpu_peak_flops`` by the neuron collector.

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


# --------------------------------------------------------------------------------------------
# AWS Neuron (Trainium, Inferentia) peak FLOP/s
# --------------------------------------------------------------------------------------------

# Dense (no structured sparsity) peak FLOP/s per Neuron device and per physical NeuronCore, from
# AWS's Neuron architecture pages (https://awsdocs-neuron.readthedocs-hosted.com/en/latest/
# about-neuron/arch/neuron-hardware/): Trainium (Trn1): two NeuronCore-v2, 190 FP16/BF16/cFP8/TF32
# TFLOPS per chip; Inferentia2 (Inf2): two NeuronCore-v2, 190 BF16/FP16/cFP8 TFLOPS per chip;
# Trainium2 (Trn2): eight NeuronCore-v3, 667 BF16/FP16/TF32 and 1,299 FP8 TFLOPS per chip. The
# NeuronCore-v3 page gives 79 BF16 / 158 cFP8 TFLOPS for one core's Tensor Engine alone; the chip
# figure (which AWS's instance pages quote) divided by 8 is used, so per-core MFU adds up to the
# device's.


class NeuronPeak:
    """One Neuron device model: its dense peak per dtype, and its physical NeuronCores."""

    def __init__(self, name: str, per_device: dict[str, float], physical_cores: int) -> None:
        self.name = name
        self.per_device = per_device
        self.physical_cores = physical_cores

    def per_core(self, cores_per_device: int | None = None) -> dict[str, float]:
        """Peak of one NeuronCore as neuron-monitor counts them: with Logical NeuronCore
        Configuration (Trn2's default LNC=2) one logical core is two physical ones, so the peak
        of a core is the device's over ``neuroncore_per_device_count`` of the report."""
        n = cores_per_device if cores_per_device and cores_per_device > 0 else self.physical_cores
        return {dtype: value / n for dtype, value in self.per_device.items()}


_TRN1 = NeuronPeak("trainium", {"bf16": 190e12, "fp8": 190e12}, 2)
_INF2 = NeuronPeak("inferentia2", {"bf16": 190e12, "fp8": 190e12}, 2)
_TRN2 = NeuronPeak("trainium2", {"bf16": 667e12, "fp8": 1299e12}, 8)

#: (pattern on neuron_hardware_info.neuron_device_type, else on the instance type, the model).
NEURON_PEAK_TABLE: tuple[tuple[str, NeuronPeak], ...] = (
    (r"^trainium2$|^trn2", _TRN2),
    (r"^trainium1?$|^trn1", _TRN1),
    (r"^inferentia2$|^inf2", _INF2),
)


def neuron_peak(device_type: str, instance_type: str = "") -> NeuronPeak | None:
    """The Neuron device model of a report (its ``neuron_device_type``, else the EC2 instance
    type), or None when it is unknown (Inf1, or a newer chip this table does not know yet)."""
    for value in (device_type.strip().lower(), instance_type.strip().lower()):
        if not value:
            continue
        for pattern, peak in NEURON_PEAK_TABLE:
            if re.search(pattern, value):
                return peak
    return None
