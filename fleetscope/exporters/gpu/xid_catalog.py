"""Short descriptions of XID codes, for the ``err_msg`` label of ``DCGM_FI_DEV_XID_ERRORS``.

Written from NVIDIA's XID catalog (see shared/research/gpu-metrics.md section 4). The operational
class of an XID (drain / watch / application) lives in :mod:`fleetscope.contract`
(:func:`fleetscope.contract.xid_class`); :func:`describe` combines both for rules and analyzers.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetscope import contract

XID_MESSAGES: dict[int, str] = {
    8: "GPU stopped processing (push buffer error)",
    11: "Invalid or corrupted push buffer stream",
    13: "Graphics Engine Exception",
    25: "Invalid or corrupted push buffer stream",
    31: "GPU memory page fault",
    32: "Invalid or corrupted push buffer stream (PBDMA)",
    43: "GPU stopped processing (application fault, GPU healthy)",
    45: "Preemptive cleanup, due to previous errors",
    46: "GPU stopped processing (timeout)",
    48: "Double Bit ECC Error",
    54: "Auxiliary power is not connected to the GPU board",
    61: "Internal micro-controller breakpoint/warning",
    62: "Internal micro-controller halt",
    63: "GPU memory remapping event (ECC page retirement or row remap)",
    64: "GPU memory remapping failure",
    68: "Video processor exception",
    69: "Graphics Engine class error",
    74: "NVLink Error",
    79: "GPU has fallen off the bus",
    80: "Corrupted data sent to GPU",
    92: "High single-bit ECC error rate",
    94: "Contained memory error",
    95: "Uncontained memory error",
    109: "Context Switch Timeout Error",
    110: "Security Fault Error",
    119: "GSP RPC Timeout",
    120: "GSP Error",
    121: "C2C Link corrected error",
    136: "Link Training Failed",
    137: "NVLink privilege error (illegal peer-to-peer access)",
    140: "Unrecovered ECC error escape",
    143: "GPU initialization failure",
    144: "NVLink SAW error",
    145: "NVLink RLW error",
    146: "NVLink TLW error",
    147: "NVLink TREX error",
    148: "NVLink NVLPW_CTRL error",
    149: "NVLink NETIR error",
    150: "NVLink MSE error",
    151: "Key rotation error (confidential computing)",
    154: "GPU recovery action changed",
    155: "NVLink software-defined error",
    156: "Resource retirement event",
    157: "Resource retirement failure",
    158: "GPU fatal timeout",
}


def message(xid: int) -> str:
    """The ``err_msg`` text of an XID; unknown codes get a generic text, never an empty label."""
    return XID_MESSAGES.get(xid, f"XID {xid} (see NVIDIA XID catalog)")


@dataclass(frozen=True)
class XidInfo:
    code: int
    message: str
    klass: contract.XidClass

    @property
    def drain(self) -> bool:
        return self.klass == "drain"


def describe(xid: int) -> XidInfo:
    """Message and operational class of an XID, for rules and analyzers."""
    return XidInfo(xid, message(xid), contract.xid_class(xid))
