"""The XID catalog: for each NVIDIA XID code, its class, message, likely cause and operator action.

Source: NVIDIA's XID documentation, https://docs.nvidia.com/deploy/xid-errors/ ("Analyzing Xid
Errors with the Xid Catalog": each XID's description and its resolution buckets, the immediate
action such as ``RESET_GPU``, ``RESTART_BM``, ``WORKFLOW_XID_48``, ``WORKFLOW_NVLINK_ERR``,
``RESTART_APP`` or ``IGNORE``). The classes group the buckets by what an operator of a training
cluster does:

* ``drain``: a hardware, firmware or driver fault (``RESET_GPU``, ``RESTART_BM``, the XID 48 and
  NVLink workflows, ``CHECK_MECHANICALS``, ``RESTART_VM``): the job will fail on this GPU again, so
  the node leaves the job, then is reset, rebooted or repaired.
* ``watch``: not fatal now but predicts failure or asks for a reset at a convenient time (memory
  row remaps, a high single-bit error rate, contained errors, recovery-action changes).
* ``application``: the job faulted (``RESTART_APP``, ``IGNORE``); the GPU stays in service, unless
  the same XID keeps coming back on the same GPU across jobs.
* ``other``: every code not listed here; look it up in NVIDIA's catalog.

The ``message`` is the ``err_msg`` label of ``DCGM_FI_DEV_XID_ERRORS`` (dcgm-exporter's label). The
exporter and the alert rules read this module; the analyzers and the simulator move to it
(``fleetscope.contract`` re-exports the classes until then). Standard library only: the node agent
imports it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

XidClass = Literal["drain", "watch", "application", "other"]
XID_CLASSES: tuple[XidClass, ...] = ("drain", "watch", "application", "other")

CATALOG_URL = "https://docs.nvidia.com/deploy/xid-errors/"


@dataclass(frozen=True)
class Xid:
    """One XID code: ``klass`` (``class`` is a keyword), ``message`` (the ``err_msg`` label),
    ``cause`` (what most likely happened) and ``action`` (what the operator does)."""

    code: int
    klass: XidClass
    message: str
    cause: str
    action: str

    @property
    def drain(self) -> bool:
        return self.klass == "drain"


# Operator actions shared by several codes (NVIDIA's resolution buckets, in operator words).
_RESET_GPU = (
    "drain the node, stop its GPU processes and reset the GPU (nvidia-smi -r); reboot if the XID "
    "returns, replace the GPU if it returns after a reboot"
)
_NVLINK = (
    "drain the node, reset the GPU or reboot, check the links (nvidia-smi nvlink -s); replace the GPU "
    "or baseboard if it returns"
)
_RESTART_APP = "restart the job; the GPU stays in service (suspect it if the XID repeats on it across jobs)"

_ENTRIES: tuple[tuple[int, XidClass, str, str, str], ...] = (
    # --- drain ------------------------------------------------------------------------------
    (46, "drain", "GPU stopped processing (timeout)", "the GPU stopped processing work (GPU or driver hang)",
     _RESET_GPU),
    (48, "drain", "Double Bit ECC Error", "an uncorrectable (double-bit) ECC error in GPU memory",
     "drain the node; reset the GPU (nvidia-smi -r) to retire the failing memory, run dcgmi diag -r 3; "
     "RMA the GPU if uncorrectable errors repeat"),
    (54, "drain", "Auxiliary power is not connected to the GPU board",
     "the GPU board's auxiliary power is not connected", "drain the node and check the GPU's power "
                                                         "connectors"),
    (62, "drain", "Internal micro-controller halt", "the GPU's internal micro-controller halted",
     _RESET_GPU),
    (64, "drain", "GPU memory remapping failure", "the GPU could not remap a failing memory row",
     "drain the node: the GPU could not remap a failing row (often no spare rows left); reset it, run "
     "dcgmi diag -r 3 and RMA the GPU if the failure returns"),
    (74, "drain", "NVLink Error",
     "an NVLink fault on this GPU, or on its peer (a peer's failure also logs XID 74 on this end)", _NVLINK),
    (79, "drain", "GPU has fallen off the bus",
     "the GPU is unreachable over PCIe (hardware, power or thermal fault)",
     "drain the node now (whatever ran on this GPU, job or replica, lost it); power-cycle it, run dcgmi diag "
     "-r 3, RMA the GPU if XID 79 repeats"),
    (95, "drain", "Uncontained memory error",
     "an uncontained memory error (other GPUs may log it too, as a consequence)", _RESET_GPU),
    (109, "drain", "Context Switch Timeout Error", "a context switch timed out (GPU or driver hang)",
     _RESET_GPU),
    (110, "drain", "Security Fault Error", "a security fault in the GPU", _RESET_GPU),
    (119, "drain", "GSP RPC Timeout", "the GPU System Processor (GSP) firmware stopped answering",
     _RESET_GPU),
    (120, "drain", "GSP Error", "the GPU System Processor (GSP) firmware failed", _RESET_GPU),
    (136, "drain", "Link Training Failed", "an NVLink failed link training", _NVLINK),
    (140, "drain", "Unrecovered ECC error escape", "an uncorrectable ECC error escaped containment",
     _RESET_GPU),
    (143, "drain", "GPU initialization failure", "the GPU failed to initialize", _RESET_GPU),
    (144, "drain", "NVLink SAW error", "an NVLink5 SAW fault (the subcode tells fatal from not)", _NVLINK),
    (145, "drain", "NVLink RLW error", "an NVLink5 RLW fault (the subcode tells fatal from not)", _NVLINK),
    (146, "drain", "NVLink TLW error", "an NVLink5 TLW fault (the subcode tells fatal from not)", _NVLINK),
    (147, "drain", "NVLink TREX error", "an NVLink5 TREX fault (the subcode tells fatal from not)", _NVLINK),
    (148, "drain", "NVLink NVLPW_CTRL error", "an NVLink5 NVLPW_CTRL fault (the subcode tells fatal from "
                                              "not)",
     _NVLINK),
    (149, "drain", "NVLink NETIR error", "an NVLink5 NETIR fault (the subcode tells fatal from not)", _NVLINK),  # noqa: E501
    (150, "drain", "NVLink MSE error", "an NVLink5 MSE fault (the subcode tells fatal from not)", _NVLINK),
    (151, "drain", "Key rotation error (confidential computing)",
     "a confidential-computing key rotation failed", "drain the node and restart its VM"),
    (155, "drain", "NVLink software-defined error", "an NVLink software-defined error", _RESET_GPU),
    (156, "drain", "Resource retirement event", "the GPU is retiring a failing resource",
     "drain the node and reset the GPU to complete the retirement"),
    (158, "drain", "GPU fatal timeout", "a fatal GPU timeout", _RESET_GPU),
    # --- watch ------------------------------------------------------------------------------
    (63, "watch", "GPU memory remapping event (ECC page retirement or row remap)",
     "a memory row was remapped after ECC errors (active after the next GPU reset)",
     "reset the GPU when its job allows; replace it if rows keep being remapped"),
    (92, "watch", "High single-bit ECC error rate",
     "many corrected single-bit ECC errors, an early sign of failing memory",
     "watch the error rate and run dcgmi diag -r 3 at the next maintenance window"),
    (94, "watch", "Contained memory error", "a contained memory error: only one application was hit",
     "restart the affected job; reset the GPU when convenient"),
    (121, "watch", "C2C Link corrected error", "a corrected chip-to-chip (C2C) link error",
     "reset the GPU at the next service window"),
    (154, "watch", "GPU recovery action changed", "the driver changed the recovery action it asks for",
     "do the recovery action DCGM_FI_DEV_GPU_RECOVERY_ACTION names (reset the GPU, reboot or drain)"),
    (157, "watch", "Resource retirement failure", "a resource retirement failed: no repair resources left",
     "plan to replace the GPU"),
    # --- application ------------------------------------------------------------------------
    (8, "application", "GPU stopped processing (push buffer error)",
     "the GPU stopped on the application's push buffer", _RESTART_APP),
    (11, "application", "Invalid or corrupted push buffer stream",
     "the application sent an invalid push buffer stream", _RESTART_APP),
    (13, "application", "Graphics Engine Exception",
     "a kernel accessed memory out of bounds or ran an illegal instruction",
     "restart the job; if it repeats on the same GPU across jobs, run dcgmi diag -r 3"),
    (25, "application", "Invalid or corrupted push buffer stream",
     "the application sent an invalid push buffer stream", _RESTART_APP),
    (31, "application", "GPU memory page fault", "a kernel accessed GPU memory it does not own",
     "restart the job; if it repeats on the same GPU across jobs, run dcgmi diag -r 3"),
    (32, "application", "Invalid or corrupted push buffer stream (PBDMA)",
     "a corrupted push buffer on its way to the GPU (the application, or PCIe signal quality)",
     "restart the job; if it repeats, check the GPU's PCIe link (replays, width)"),
    (43, "application", "GPU stopped processing (application fault, GPU healthy)",
     "the application hit a software-induced fault; the GPU stays healthy", _RESTART_APP),
    (45, "application", "Preemptive cleanup, due to previous errors",
     "the driver cleaned up after a killed process or an earlier XID",
     "act on the XIDs logged before it; alone it needs nothing"),
    (69, "application", "Graphics Engine class error", "the application used a graphics engine class wrongly",
     _RESTART_APP),
    (80, "application", "Corrupted data sent to GPU", "corrupted data reached the GPU", _RESTART_APP),
    (137, "application", "NVLink privilege error (illegal peer-to-peer access)",
     "the application made an illegal peer-to-peer access over NVLink",
     "fix the application's peer-to-peer access; the GPU stays in service"),
    # --- other ------------------------------------------------------------------------------
    (61, "other", "Internal micro-controller breakpoint/warning",
     "the GPU's internal micro-controller hit a breakpoint or warning",
     "nothing by itself; act if XID 62 follows"),
    (68, "other", "Video processor exception", "the video decoder or encoder faulted",
     "restart the job if it used video decoding"),
)  # fmt: skip

#: Every XID fleetscope knows, by code.
CATALOG: dict[int, Xid] = {
    code: Xid(code, klass, msg, cause, action) for code, klass, msg, cause, action in _ENTRIES
}
if len(CATALOG) != len(_ENTRIES):
    raise ValueError("an XID is listed twice in fleetscope.xids")


def codes(klass: XidClass) -> frozenset[int]:
    """The catalog's XID codes of one class."""
    return frozenset(x.code for x in CATALOG.values() if x.klass == klass)


#: Drain the node (hardware, firmware or driver fault).
XID_DRAIN: frozenset[int] = codes("drain")
#: Watch the GPU, reset or service it at a convenient time.
XID_WATCH: frozenset[int] = codes("watch")
#: The application faulted; the GPU stays in service.
XID_APPLICATION: frozenset[int] = codes("application")


def describe(xid: int) -> Xid:
    """Everything known about an XID; a code not in the catalog is ``other`` with generic texts."""
    known = CATALOG.get(xid)
    if known is not None:
        return known
    return Xid(
        xid,
        "other",
        f"XID {xid} (see NVIDIA XID catalog)",
        "not in fleetscope's XID catalog",
        f"look XID {xid} up in NVIDIA's XID catalog ({CATALOG_URL})",
    )


def xid_class(xid: int) -> XidClass:
    """The operational class of an XID: drain the node, watch it, blame the application, or other."""
    return describe(xid).klass


def message(xid: int) -> str:
    """The ``err_msg`` text of an XID; unknown codes get a generic text, never an empty label."""
    return describe(xid).message


#: Finding causes more specific than ``xid_<code>``: they name what broke.
_FINDING_CAUSES: dict[int, str] = {79: "gpu_lost", 48: "ecc_uncorrectable", 64: "row_remap_failure"}


def finding_cause(xid: int) -> str:
    """The ``cause`` of a finding raised by this XID: ``gpu_lost`` (79), ``ecc_uncorrectable`` (48),
    ``row_remap_failure`` (64), else ``xid_<code>``."""
    return _FINDING_CAUSES.get(xid, f"xid_{xid}")


def promql_regex(xids: Iterable[int]) -> str:
    """A PromQL regex alternation matching the given XID codes exactly, e.g. ``"46|48|79"``."""
    return "|".join(str(v) for v in sorted(set(xids)))
