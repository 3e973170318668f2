"""The metric contract: every series name, label key and class that ties fleetscope together.

This module is the single source of truth for the names (listed in docs/metrics.md; the decisions
behind them and their sources are in docs/design.md). The exporters, the telemetry library, the
simulator, the analyzers, the alert rules and the dashboards import their names from here; a name
spelled out anywhere else is a bug.

It imports nothing but the standard library so that the node agent and the training library can use
it without pulling anything heavy.

Each metric is a :class:`Metric`, a ``str`` subclass, so it drops straight into PromQL f-strings
(``f"rate({EFA_TX_PKTS}[5m])"``) while carrying its type, unit, labels and help text.
"""

from __future__ import annotations

import re
from typing import Literal

MetricType = Literal["gauge", "counter", "histogram"]


class Metric(str):
    """A series name with its contract metadata.

    ``labels`` lists the label keys every series of this metric carries (besides the attribution
    labels that may follow on GPU series); ``unit`` is a short human unit; ``origin`` names the
    component that produces it.
    """

    type: MetricType
    help: str
    unit: str
    labels: tuple[str, ...]
    origin: str

    def __new__(
        cls,
        name: str,
        type: MetricType,
        help: str,
        unit: str = "",
        labels: tuple[str, ...] = (),
        origin: str = "",
    ) -> Metric:
        obj = super().__new__(cls, name)
        obj.type = type
        obj.help = help
        obj.unit = unit
        obj.labels = labels
        obj.origin = origin
        return obj

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        # str's own pickling would call __new__ with the name alone (findings cross process
        # boundaries in ``evaluate --jobs``).
        return (Metric, (str(self), self.type, self.help, self.unit, self.labels, self.origin))

    @property
    def name(self) -> str:
        return str(self)


#: Every metric defined in this module, by name. Filled by :func:`_m`.
METRICS: dict[str, Metric] = {}


def _m(
    name: str,
    type: MetricType,
    help: str,
    unit: str = "",
    labels: tuple[str, ...] = (),
    origin: str = "",
) -> Metric:
    if name in METRICS:
        raise ValueError(f"metric {name} defined twice")
    metric = Metric(name, type, help, unit, labels, origin)
    METRICS[name] = metric
    return metric


# --------------------------------------------------------------------------------------------
# Node identity
# --------------------------------------------------------------------------------------------

#: dcgm-exporter's node label. Configurable in the exporter (``--node.label-name``); every
#: series of the node exporter carries it, and joins across collectors use it, never ``instance``.
NODE_LABEL = "Hostname"
#: The training job's label (telemetry, NCCL RAS, Slurm/Kubernetes attribution).
JOB_LABEL = "job_id"
#: vLLM's served-model label.
SERVED_MODEL_LABEL = "model_name"

# --------------------------------------------------------------------------------------------
# GPU: names, units and label keys of NVIDIA dcgm-exporter
# --------------------------------------------------------------------------------------------

#: GPU label keys in dcgm-exporter's order. MIG devices insert :data:`GPU_MIG_LABELS` after
#: ``modelName``; attribution labels (:data:`GPU_ATTRIBUTION_LABELS`) follow where known.
GPU_LABELS: tuple[str, ...] = (
    "gpu",
    "UUID",
    "pci_bus_id",
    "device",
    "modelName",
    NODE_LABEL,
    "DCGM_FI_DRIVER_VERSION",
)
GPU_MIG_LABELS: tuple[str, ...] = ("GPU_I_PROFILE", "GPU_I_ID")
GPU_ATTRIBUTION_LABELS: tuple[str, ...] = ("pod", "namespace", "container", "hpc_job")


def gpu_label_keys(mig: bool = False, attribution: tuple[str, ...] = ()) -> tuple[str, ...]:
    """Label keys of one GPU series, in dcgm-exporter's order."""
    base = GPU_LABELS[:5] + (GPU_MIG_LABELS if mig else ()) + GPU_LABELS[5:]
    return base + tuple(k for k in GPU_ATTRIBUTION_LABELS if k in attribution)


def _gpu(name: str, type: MetricType, help: str, unit: str) -> Metric:
    return _m(name, type, help, unit, GPU_LABELS, "gpu")


DCGM_FI_DEV_GPU_UTIL = _gpu("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "percent")
DCGM_FI_DEV_MEM_COPY_UTIL = _gpu(
    "DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", "percent"
)
DCGM_FI_DEV_SM_CLOCK = _gpu("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", "MHz")
DCGM_FI_DEV_MEM_CLOCK = _gpu("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", "MHz")
DCGM_FI_DEV_GPU_TEMP = _gpu("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "celsius")
DCGM_FI_DEV_MEMORY_TEMP = _gpu("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", "celsius")
DCGM_FI_DEV_POWER_USAGE = _gpu("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "watts")
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION = _gpu(
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "counter",
    "Total energy consumption since boot (in mJ).",
    "mJ",
)
DCGM_FI_DEV_FB_USED = _gpu("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", "MiB")
DCGM_FI_DEV_FB_FREE = _gpu("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", "MiB")
DCGM_FI_DEV_FB_RESERVED = _gpu(
    "DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).", "MiB"
)
DCGM_FI_DEV_PCIE_REPLAY_COUNTER = _gpu(
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", "retries"
)
DCGM_FI_DEV_PCIE_LINK_GEN = _gpu(
    "DCGM_FI_DEV_PCIE_LINK_GEN", "gauge", "Current PCIe link generation.", "generation"
)
DCGM_FI_DEV_PCIE_LINK_WIDTH = _gpu(
    "DCGM_FI_DEV_PCIE_LINK_WIDTH", "gauge", "Current PCIe link width (lanes).", "lanes"
)
# nvmlDeviceGetPcieThroughput: KB/s over NVML's last 20 ms sample. dcgm-exporter's CSV lists these
# as counters, but the value is a rate (as NVLINK_BANDWIDTH_TOTAL): typed gauge here, never rate()d.
DCGM_FI_DEV_PCIE_TX_THROUGHPUT = _gpu(
    "DCGM_FI_DEV_PCIE_TX_THROUGHPUT",
    "gauge",
    "PCIe TX throughput over NVML's last 20 ms sample (in KB/s; a rate, do not rate()).",
    "KB/s",
)
DCGM_FI_DEV_PCIE_RX_THROUGHPUT = _gpu(
    "DCGM_FI_DEV_PCIE_RX_THROUGHPUT",
    "gauge",
    "PCIe RX throughput over NVML's last 20 ms sample (in KB/s; a rate, do not rate()).",
    "KB/s",
)
DCGM_FI_DEV_ENC_UTIL = _gpu("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", "percent")
DCGM_FI_DEV_DEC_UTIL = _gpu("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", "percent")
DCGM_FI_DEV_CLOCKS_EVENT_REASONS = _gpu(
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
    "gauge",
    "Current clock event (throttle) reasons, NVML bitmask.",
    "bitmask",
)
#: Older dcgm-exporter releases' name for DCGM field 112, from before NVML's "clocks throttle
#: reasons" became "clocks event reasons" (same field id, same bitmask; docs/design.md). Read as an
#: alias: :data:`METRIC_ALIASES`.
DCGM_FI_DEV_CLOCK_THROTTLE_REASONS = _gpu(
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
    "gauge",
    "Current clock throttle reasons, NVML bitmask (older dcgm-exporter name of "
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS).",
    "bitmask",
)
DCGM_FI_DEV_POWER_VIOLATION = _gpu(
    "DCGM_FI_DEV_POWER_VIOLATION",
    "counter",
    "Throttling duration due to power constraints (in ns).",
    "ns",
)
DCGM_FI_DEV_THERMAL_VIOLATION = _gpu(
    "DCGM_FI_DEV_THERMAL_VIOLATION",
    "counter",
    "Throttling duration due to thermal constraints (in ns).",
    "ns",
)
DCGM_FI_DEV_XID_ERRORS = _gpu(
    "DCGM_FI_DEV_XID_ERRORS",
    "gauge",
    "Value of the last XID error encountered (labels err_code, err_msg).",
    "xid",
)
DCGM_FI_DEV_ECC_SBE_VOL_TOTAL = _gpu(
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "counter",
    "Total number of single-bit volatile ECC errors.",
    "errors",
)
DCGM_FI_DEV_ECC_DBE_VOL_TOTAL = _gpu(
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
    "counter",
    "Total number of double-bit volatile ECC errors.",
    "errors",
)
DCGM_FI_DEV_ECC_SBE_AGG_TOTAL = _gpu(
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
    "counter",
    "Total number of single-bit persistent ECC errors.",
    "errors",
)
DCGM_FI_DEV_ECC_DBE_AGG_TOTAL = _gpu(
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
    "counter",
    "Total number of double-bit persistent ECC errors.",
    "errors",
)
DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS = _gpu(
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "counter",
    "Number of remapped rows for correctable errors.",
    "rows",
)
DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS = _gpu(
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "counter",
    "Number of remapped rows for uncorrectable errors.",
    "rows",
)
DCGM_FI_DEV_ROW_REMAP_FAILURE = _gpu(
    "DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed.", "bool"
)
DCGM_FI_DEV_ROW_REMAP_PENDING = _gpu(
    "DCGM_FI_DEV_ROW_REMAP_PENDING", "gauge", "Whether a row remap is pending (reset needed).", "bool"
)
DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL = _gpu(
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    "counter",
    "Total number of NVLink flow-control CRC errors.",
    "errors",
)
DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL = _gpu(
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    "counter",
    "Total number of NVLink data CRC errors.",
    "errors",
)
DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL = _gpu(
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    "counter",
    "Total number of NVLink retries.",
    "errors",
)
DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL = _gpu(
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
    "counter",
    "Total number of NVLink recovery errors.",
    "errors",
)
DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL = _gpu(
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "gauge",
    "NVLink bandwidth over all links (about MB/s, a rate as DCGM computes it; do not rate()).",
    "MB/s",
)
DCGM_FI_DEV_GPU_RECOVERY_ACTION = _gpu(
    "DCGM_FI_DEV_GPU_RECOVERY_ACTION",
    "gauge",
    "Recovery action the driver asks for: 0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, "
    "4 drain and reset.",
    "enum",
)
DCGM_FI_PROF_GR_ENGINE_ACTIVE = _gpu(
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active.", "ratio"
)
DCGM_FI_PROF_SM_ACTIVE = _gpu(
    "DCGM_FI_PROF_SM_ACTIVE",
    "gauge",
    "The ratio of cycles an SM has at least 1 warp assigned.",
    "ratio",
)
DCGM_FI_PROF_SM_OCCUPANCY = _gpu(
    "DCGM_FI_PROF_SM_OCCUPANCY", "gauge", "The ratio of number of warps resident on an SM.", "ratio"
)
DCGM_FI_PROF_PIPE_TENSOR_ACTIVE = _gpu(
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "gauge",
    "Ratio of cycles the tensor (HMMA) pipe is active.",
    "ratio",
)
DCGM_FI_PROF_DRAM_ACTIVE = _gpu(
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "gauge",
    "Ratio of cycles the device memory interface is active sending or receiving data.",
    "ratio",
)
DCGM_FI_PROF_PIPE_FP16_ACTIVE = _gpu(
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE", "gauge", "Ratio of cycles the fp16 pipes are active.", "ratio"
)
DCGM_FI_PROF_PIPE_FP32_ACTIVE = _gpu(
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE", "gauge", "Ratio of cycles the fp32 pipes are active.", "ratio"
)
DCGM_FI_PROF_PIPE_FP64_ACTIVE = _gpu(
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE", "gauge", "Ratio of cycles the fp64 pipes are active.", "ratio"
)
DCGM_FI_PROF_PCIE_TX_BYTES = _gpu(
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "gauge",
    "The rate of data transmitted over the PCIe bus, headers and payload, in bytes per second.",
    "bytes/s",
)
DCGM_FI_PROF_PCIE_RX_BYTES = _gpu(
    "DCGM_FI_PROF_PCIE_RX_BYTES",
    "gauge",
    "The rate of data received over the PCIe bus, headers and payload, in bytes per second.",
    "bytes/s",
)
DCGM_FI_PROF_NVLINK_TX_BYTES = _gpu(
    "DCGM_FI_PROF_NVLINK_TX_BYTES",
    "gauge",
    "The rate of data transmitted over NVLink, in bytes per second.",
    "bytes/s",
)
DCGM_FI_PROF_NVLINK_RX_BYTES = _gpu(
    "DCGM_FI_PROF_NVLINK_RX_BYTES",
    "gauge",
    "The rate of data received over NVLink, in bytes per second.",
    "bytes/s",
)
GPU_UP = _gpu(
    "fleetscope_gpu_up",
    "gauge",
    "1 if the GPU answers NVML, 0 if it is lost (GpuIsLost, timeout, fallen off the bus).",
    "bool",
)
GPU_XID_ERRORS_TOTAL = _m(
    "fleetscope_gpu_xid_errors_total",
    "counter",
    "XID errors seen on this GPU since the exporter started (NVML events and /dev/kmsg).",
    "errors",
    GPU_LABELS + ("xid",),
    "gpu",
)
GPU_PEAK_FLOPS = _m(
    "fleetscope_gpu_peak_flops",
    "gauge",
    "Dense peak FLOP/s of this GPU model, per dtype (from fleetscope's model table).",
    "FLOP/s",
    GPU_LABELS + ("dtype",),
    "gpu",
)

# Hardware facts (clock-event reason bits, recovery actions, peak FLOP/s) live in
# fleetscope.hardware, the XID catalog and classes in fleetscope.xids: they are not metric names.


# --------------------------------------------------------------------------------------------
# Network: efa collector
# --------------------------------------------------------------------------------------------

EFA_LABELS: tuple[str, ...] = (NODE_LABEL, "device", "port")

#: Port-level hw_counters an EFA device may expose (older drivers lack the SRD ones).
EFA_PORT_COUNTERS: tuple[str, ...] = (
    "tx_bytes",
    "tx_pkts",
    "rx_bytes",
    "rx_pkts",
    "rx_drops",
    "send_bytes",
    "send_wrs",
    "recv_bytes",
    "recv_wrs",
    "rdma_read_bytes",
    "rdma_read_wrs",
    "rdma_read_wr_err",
    "rdma_read_resp_bytes",
    "rdma_write_bytes",
    "rdma_write_wrs",
    "rdma_write_wr_err",
    "rdma_write_recv_bytes",
    "retrans_bytes",
    "retrans_pkts",
    "retrans_timeout_events",
    "unresponsive_remote_events",
    "impaired_remote_conn_events",
)
#: Device-level hw_counters (exported with ``port=""``).
EFA_DEVICE_COUNTERS: tuple[str, ...] = (
    "alloc_pd_err",
    "alloc_ucontext_err",
    "cmds_err",
    "completed_cmds",
    "create_ah_err",
    "create_cq_err",
    "create_qp_err",
    "keep_alive_rcvd",
    "mmap_err",
    "no_completion_cmds",
    "reg_mr_err",
    "submitted_cmds",
)


def efa_metric_name(counter: str) -> str:
    """The exported name of an EFA hw counter: the kernel's name kept verbatim."""
    return f"efa_{counter}_total"


for _c in dict.fromkeys(EFA_PORT_COUNTERS + EFA_DEVICE_COUNTERS):
    _m(efa_metric_name(_c), "counter", f"EFA hw counter {_c}.", "", EFA_LABELS, "efa")

EFA_TX_BYTES = METRICS["efa_tx_bytes_total"]
EFA_RX_BYTES = METRICS["efa_rx_bytes_total"]
EFA_TX_PKTS = METRICS["efa_tx_pkts_total"]
EFA_RX_PKTS = METRICS["efa_rx_pkts_total"]
EFA_RX_DROPS = METRICS["efa_rx_drops_total"]
EFA_RETRANS_PKTS = METRICS["efa_retrans_pkts_total"]
EFA_RETRANS_BYTES = METRICS["efa_retrans_bytes_total"]
EFA_RETRANS_TIMEOUT_EVENTS = METRICS["efa_retrans_timeout_events_total"]
EFA_UNRESPONSIVE_REMOTE_EVENTS = METRICS["efa_unresponsive_remote_events_total"]
EFA_IMPAIRED_REMOTE_CONN_EVENTS = METRICS["efa_impaired_remote_conn_events_total"]
EFA_RDMA_READ_WR_ERR = METRICS["efa_rdma_read_wr_err_total"]
EFA_RDMA_WRITE_WR_ERR = METRICS["efa_rdma_write_wr_err_total"]
EFA_RDMA_READ_BYTES = METRICS["efa_rdma_read_bytes_total"]
EFA_RDMA_WRITE_BYTES = METRICS["efa_rdma_write_bytes_total"]
EFA_LIFESPAN = _m(
    "efa_lifespan_seconds",
    "gauge",
    "EFA hw counters lifespan (sysfs `lifespan`).",
    "s",
    EFA_LABELS,
    "efa",
)

# --------------------------------------------------------------------------------------------
# Storage: lustre collector (FSx for Lustre client) and optional CloudWatch source
# --------------------------------------------------------------------------------------------

LUSTRE_LABELS: tuple[str, ...] = (NODE_LABEL, "fs", "mount")
LUSTRE_CLIENT_READ_BYTES = _m(
    "lustre_client_read_bytes_total",
    "counter",
    "Bytes read by this Lustre client (llite stats).",
    "bytes",
    LUSTRE_LABELS,
    "lustre",
)
LUSTRE_CLIENT_WRITE_BYTES = _m(
    "lustre_client_write_bytes_total",
    "counter",
    "Bytes written by this Lustre client (llite stats).",
    "bytes",
    LUSTRE_LABELS,
    "lustre",
)
LUSTRE_CLIENT_OPERATIONS = _m(
    "lustre_client_operations_total",
    "counter",
    "Operations by type (llite stats).",
    "ops",
    LUSTRE_LABELS + ("operation",),
    "lustre",
)
LUSTRE_CLIENT_OPERATION_SECONDS = _m(
    "lustre_client_operation_seconds_total",
    "counter",
    "Time spent in operations by type, where the stats carry usecs.",
    "s",
    LUSTRE_LABELS + ("operation",),
    "lustre",
)
LUSTRE_CLIENT_HEALTHY = _m(
    "lustre_client_healthy",
    "gauge",
    "1 if Lustre health_check says healthy, else 0.",
    "bool",
    (NODE_LABEL,),
    "lustre",
)

#: llite metadata operations (the ones whose latency matters at checkpoint and startup).
LUSTRE_METADATA_OPERATIONS: tuple[str, ...] = (
    "open", "close", "getattr", "setattr", "mkdir", "rmdir", "unlink", "rename", "create",
    "statfs", "getxattr", "setxattr", "listxattr", "removexattr", "inode_permission",
)  # fmt: skip

FSX_LABELS: tuple[str, ...] = ("FileSystemId",)


def fsx_metric_name(cloudwatch_metric: str) -> str:
    """``DataReadBytes`` -> ``fsx_data_read_bytes``: the gauge name of a CloudWatch AWS/FSx metric."""
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", cloudwatch_metric)
    return "fsx_" + snake.lower()


# --------------------------------------------------------------------------------------------
# Training: training collector, fed by fleetscope.telemetry
# --------------------------------------------------------------------------------------------

TRAINING_LABELS: tuple[str, ...] = (JOB_LABEL, "rank", "local_rank", NODE_LABEL, "gpu")
#: ``eval``: evaluation/validation loops; ``checkpoint``: saving a checkpoint.
TRAINING_PHASES: tuple[str, ...] = ("data", "forward", "backward", "optimizer", "checkpoint", "eval")
#: Phases whose time is "compute time" (straggler comparison, docs/design.md#peers).
COMPUTE_PHASES: tuple[str, ...] = ("forward", "backward")
#: All-rank pauses planned by the job: their time is counted in
#: ``training_phase_seconds_total{phase}``, never in a step's time, and no step ends during them.
PAUSE_PHASES: tuple[str, ...] = ("eval", "checkpoint")

# Parallel layout of a rank, on ``training_info`` (empty, hence absent in Prometheus, when unknown).
#: Pipeline-parallel stage (0 = the first stage, which embeds the tokens).
PIPELINE_STAGE_LABEL = "pipeline_stage"
#: Rank within the data-parallel group (replicas of the same model shard).
DATA_PARALLEL_RANK_LABEL = "data_parallel_rank"
#: Rank within the tensor-parallel group (shards of the same layers).
TENSOR_PARALLEL_RANK_LABEL = "tensor_parallel_rank"
#: Rank within the context-parallel group (slices of the same sequence).
CONTEXT_PARALLEL_RANK_LABEL = "context_parallel_rank"
#: Rank within the expert-parallel group (holders of different MoE experts).
EXPERT_PARALLEL_RANK_LABEL = "expert_parallel_rank"
#: Every layout label key, in the order ``training_info`` carries them. Ranks that share all but
#: one of them do the same work; ranks on different pipeline stages or expert groups need not.
LAYOUT_LABELS: tuple[str, ...] = (
    PIPELINE_STAGE_LABEL,
    DATA_PARALLEL_RANK_LABEL,
    TENSOR_PARALLEL_RANK_LABEL,
    CONTEXT_PARALLEL_RANK_LABEL,
    EXPERT_PARALLEL_RANK_LABEL,
)


def _training(name: str, type: MetricType, help: str, unit: str, extra: tuple[str, ...] = ()) -> Metric:
    return _m(name, type, help, unit, TRAINING_LABELS + extra, "training")


TRAINING_STEPS = _training(
    "training_steps_total", "counter", "Optimizer steps completed by this rank.", "steps"
)
TRAINING_STEP_SECONDS = _training("training_step_seconds_total", "counter", "Wall time of those steps.", "s")
TRAINING_PHASE_SECONDS = _training(
    "training_phase_seconds_total", "counter", "Time per phase of the step.", "s", ("phase",)
)
TRAINING_TOKENS = _training("training_tokens_total", "counter", "Tokens processed by this rank.", "tokens")
TRAINING_MODEL_FLOPS = _training(
    "training_model_flops_total", "counter", "Model FLOPs of this rank's steps.", "FLOP"
)
TRAINING_LOSS = _training("training_loss", "gauge", "Last loss.", "")
TRAINING_GLOBAL_STEP = _training("training_global_step", "gauge", "Global step number.", "step")
TRAINING_LAST_STEP_TIMESTAMP = _training(
    "training_last_step_timestamp_seconds",
    "gauge",
    "Unix time the last step ended (stall detection).",
    "s",
)

TRAINING_INFO = _training(
    "training_info",
    "gauge",
    "Always 1; flops_convention says how training_model_flops_total is counted (palm, megatron, custom);"
    " pipeline_stage and the *_parallel_rank labels give the rank's parallel layout (absent when unknown).",
    "",
    ("flops_convention", *LAYOUT_LABELS),
)

# Checkpoints and restarts: where a job's GPU-hours went besides steps (docs/design.md#goodput).
#: Label key of ``training_checkpoint_saves_total``: ``success`` or ``failure``.
CHECKPOINT_RESULT_LABEL = "result"
CHECKPOINT_RESULTS: tuple[str, ...] = ("success", "failure")

TRAINING_CHECKPOINT_SAVES = _training(
    "training_checkpoint_saves_total",
    "counter",
    "Checkpoint saves this rank took part in, by result (success, failure).",
    "saves",
    (CHECKPOINT_RESULT_LABEL,),
)
TRAINING_CHECKPOINT_SAVE_SECONDS = _training(
    "training_checkpoint_save_seconds_total",
    "counter",
    "Wall time spent saving checkpoints, successful or not.",
    "s",
)
TRAINING_CHECKPOINT_SAVE_BYTES = _training(
    "training_checkpoint_save_bytes_total",
    "counter",
    "Bytes of checkpoint this rank wrote (successful saves whose size is known).",
    "bytes",
)
TRAINING_CHECKPOINT_LAST_SUCCESS_TIMESTAMP = _training(
    "training_checkpoint_last_success_timestamp_seconds",
    "gauge",
    "Unix time the last successful checkpoint save ended (absent before the first).",
    "s",
)
TRAINING_CHECKPOINT_LAST_SUCCESS_STEP = _training(
    "training_checkpoint_last_success_step",
    "gauge",
    "Global step saved by the last successful checkpoint (absent before the first).",
    "step",
)
TRAINING_CHECKPOINT_LOADS = _training(
    "training_checkpoint_loads_total", "counter", "Checkpoint loads (resumes) by this rank.", "loads"
)
TRAINING_CHECKPOINT_LOAD_SECONDS = _training(
    "training_checkpoint_load_seconds_total", "counter", "Wall time spent loading checkpoints.", "s"
)
TRAINING_RESTART_ATTEMPT = _training(
    "training_restart_attempt",
    "gauge",
    "Restart attempt of this run: 0 for the first run, +1 per restart (TORCHELASTIC_RESTART_COUNT,"
    " SLURM_RESTART_COUNT, or given).",
    "attempt",
)
TRAINING_RESUMED_FROM_STEP = _training(
    "training_resumed_from_step",
    "gauge",
    "Global step this run resumed from (absent for a fresh start).",
    "step",
)
TRAINING_STARTUP_SECONDS = _training(
    "training_startup_seconds",
    "gauge",
    "Process start to the first completed step of this run (absent until that step).",
    "s",
)

#: Default directory shared between training processes and the exporter.
TRAINING_DIR_DEFAULT = "/run/fleetscope/training"

# --------------------------------------------------------------------------------------------
# Collective hangs: nccl_ras collector (NCCL RAS, one query per job answers for every rank)
# --------------------------------------------------------------------------------------------

#: The communicator: its RAS ``hash`` (16 hex digits), ``hash/secondary_hash`` where two share one.
NCCL_RAS_COMM_LABEL = "comm"
#: NCCL's op name in ``collective_counts`` (``AllReduce``, ``AllGather``, ...); ``any`` in a text
#: report from before NCCL 2.26, which counts all collectives together.
NCCL_RAS_OP_LABEL = "op"
#: A named rank's host as RAS reports it (its bootstrap address or name) and its GPU (``nvml_dev``,
#: the NVML index, the ``gpu`` label of that node's GPU series).
NCCL_RAS_RANK_HOST_LABEL = "rank_host"
NCCL_RAS_RANK_GPU_LABEL = "rank_gpu"
NCCL_RAS_JOB_LABELS: tuple[str, ...] = (NODE_LABEL, JOB_LABEL)
NCCL_RAS_COMM_LABELS: tuple[str, ...] = NCCL_RAS_JOB_LABELS + (NCCL_RAS_COMM_LABEL,)
NCCL_RAS_OP_LABELS: tuple[str, ...] = NCCL_RAS_COMM_LABELS + (NCCL_RAS_OP_LABEL,)
NCCL_RAS_RANK_LABELS: tuple[str, ...] = ("rank", NCCL_RAS_RANK_HOST_LABEL, NCCL_RAS_RANK_GPU_LABEL)
#: Ranks a communicator's series name at most (the furthest behind, the missing): the cardinality
#: of the RAS series does not grow with the job.
NCCL_RAS_MAX_NAMED_RANKS = 8


def _ras(name: str, type: MetricType, help: str, unit: str, labels: tuple[str, ...]) -> Metric:
    return _m(name, type, help, unit, labels, "nccl_ras")


NCCL_RAS_UP = _ras(
    "nccl_ras_up",
    "gauge",
    "1 if the job's RAS answered the last query with a report, else 0 (served by the asking node).",
    "bool",
    NCCL_RAS_JOB_LABELS,
)
NCCL_RAS_COMMUNICATORS = _ras(
    "nccl_ras_communicators",
    "gauge",
    "Communicators in the job's RAS report (the per-communicator series cover the most telling ones).",
    "communicators",
    NCCL_RAS_JOB_LABELS,
)
NCCL_RAS_COMM_RANKS = _ras(
    "nccl_ras_communicator_ranks",
    "gauge",
    "Ranks in the communicator (its size).",
    "ranks",
    NCCL_RAS_COMM_LABELS,
)
NCCL_RAS_COMM_MISSING_RANKS = _ras(
    "nccl_ras_communicator_missing_ranks",
    "gauge",
    "Ranks of the communicator RAS got no data from (unresponsive or dead processes).",
    "ranks",
    NCCL_RAS_COMM_LABELS,
)
NCCL_RAS_COMM_DEAD_RANKS = _ras(
    "nccl_ras_communicator_dead_ranks",
    "gauge",
    "Missing ranks RAS considers dead (no answer for 60 s).",
    "ranks",
    NCCL_RAS_COMM_LABELS,
)
NCCL_RAS_COMM_ERROR_RANKS = _ras(
    "nccl_ras_communicator_error_ranks",
    "gauge",
    "Ranks with an error flag (async_error, abort_flag, an init_state that is an error).",
    "ranks",
    NCCL_RAS_COMM_LABELS,
)
NCCL_RAS_COLLECTIVES_MIN = _ras(
    "nccl_ras_collectives_launched_min",
    "gauge",
    "Fewest collectives of this op any rank of the communicator has launched (collOpCount).",
    "collectives",
    NCCL_RAS_OP_LABELS,
)
NCCL_RAS_COLLECTIVES_MAX = _ras(
    "nccl_ras_collectives_launched_max",
    "gauge",
    "Most collectives of this op any rank of the communicator has launched (collOpCount).",
    "collectives",
    NCCL_RAS_OP_LABELS,
)
NCCL_RAS_RANKS_BEHIND = _ras(
    "nccl_ras_ranks_behind",
    "gauge",
    "Ranks of the communicator that launched fewer collectives of this op than the most advanced one.",
    "ranks",
    NCCL_RAS_OP_LABELS,
)
NCCL_RAS_RANK_BEHIND = _ras(
    "nccl_ras_rank_behind_collectives",
    "gauge",
    "How many collectives of this op the rank is behind the most advanced rank (the furthest behind,"
    " at most 8 per communicator and op).",
    "collectives",
    NCCL_RAS_OP_LABELS + NCCL_RAS_RANK_LABELS,
)
NCCL_RAS_RANK_MISSING = _ras(
    "nccl_ras_rank_missing",
    "gauge",
    "A rank RAS got no data from: 1 unresponsive, 2 considered dead (at most 8 per communicator).",
    "state",
    NCCL_RAS_COMM_LABELS + NCCL_RAS_RANK_LABELS,
)

# --------------------------------------------------------------------------------------------
# AWS Trainium and Inferentia: neuron collector (neuron-monitor reports)
# --------------------------------------------------------------------------------------------

# Names, units and label keys of AWS's own Prometheus companion script, neuron-monitor-prometheus.py
# (aws-neuron-tools; docs/neuron.md says where each comes from), so AWS's Neuron dashboards keep
# working. fleetscope adds the node label, the Neuron device of each core and, where the exporter
# knows them, the pod or Slurm job (:data:`NEURON_ATTRIBUTION_LABELS`).

#: EC2 labels the script puts on every series (from the report's ``instance_info``).
NEURON_INSTANCE_LABELS: tuple[str, ...] = (
    "instance_name",
    "instance_id",
    "instance_type",
    "availability_zone",
    "region",
    "subnet_id",
)
#: Who holds a core or device: Kubernetes (the report's ``neuron_k8s_info``) or Slurm (mapping files).
NEURON_ATTRIBUTION_LABELS: tuple[str, ...] = ("pod", "namespace", "container", "hpc_job")
#: Labels of a Neuron application's series (``runtime_tag``: its NEURON_PROCESS_TAG, else its pid).
NEURON_RUNTIME_LABELS: tuple[str, ...] = NEURON_INSTANCE_LABELS + ("runtime_tag", NODE_LABEL)
#: Labels of a NeuronCore's series: the core index as neuron-monitor numbers it (logical cores when
#: Logical NeuronCore Configuration groups physical ones) and the Neuron device that holds it.
NEURON_CORE_LABELS: tuple[str, ...] = (
    NEURON_RUNTIME_LABELS + ("neuroncore", "neuron_device") + NEURON_ATTRIBUTION_LABELS
)
#: Labels of a Neuron device's hardware counters (system-wide, no runtime): the hardware alone, so
#: a counter never freezes or doubles when the device changes hands; who holds the device is on
#: :data:`NEURON_DEVICE_INFO` (joined on these labels, as dcgm-exporter's pod mapping for GPUs).
NEURON_DEVICE_LABELS: tuple[str, ...] = NEURON_INSTANCE_LABELS + (NODE_LABEL, "neuron_device_index")
#: Labels of the instance-wide series (system memory and vCPU).
NEURON_SYSTEM_LABELS: tuple[str, ...] = NEURON_INSTANCE_LABELS + (NODE_LABEL,)

#: The per-core device memory categories of ``memory_used.usage_breakdown.neuroncore_memory_usage``.
NEURON_CORE_MEMORY_KINDS: tuple[str, ...] = (
    "constants",
    "model_code",
    "model_shared_scratchpad",
    "runtime_memory",
    "tensors",
)
#: ``execution_stats.error_summary`` keys (the user guide's list).
NEURON_ERROR_TYPES: tuple[str, ...] = ("generic", "numerical", "transient", "model", "runtime", "hardware")
#: ``execution_stats.execution_summary`` keys; every one but ``completed`` is a failed execution.
NEURON_EXECUTION_STATUSES: tuple[str, ...] = (
    "completed",
    "completed_with_err",
    "completed_with_num_err",
    "timed_out",
    "incorrect_input",
    "failed_to_queue",
)
#: ``neuron_hw_counters`` ECC event types, ``event_type`` of :data:`NEURON_HW_ECC_EVENTS`.
NEURON_ECC_EVENT_TYPES: tuple[str, ...] = (
    "mem_ecc_corrected",
    "mem_ecc_uncorrected",
    "sram_ecc_corrected",
    "sram_ecc_uncorrected",
)
#: The uncorrectable ones: data was lost on the device, the job's results can no longer be trusted.
NEURON_ECC_UNCORRECTED: tuple[str, ...] = ("mem_ecc_uncorrected", "sram_ecc_uncorrected")
#: Error types that point at the hardware rather than the model or the job's input.
NEURON_HARDWARE_ERROR_TYPES: tuple[str, ...] = ("hardware",)


def _neuron(name: str, type: MetricType, help: str, unit: str, labels: tuple[str, ...]) -> Metric:
    return _m(name, type, help, unit, labels, "neuron")


NEURONCORE_UTILIZATION = _neuron(
    "neuroncore_utilization_ratio",
    "gauge",
    "NeuronCore utilization ratio (0-1) during the report period.",
    "ratio",
    NEURON_CORE_LABELS,
)
NEURON_RUNTIME_MEMORY_USED = _neuron(
    "neuron_runtime_memory_used_bytes",
    "gauge",
    "Memory used by the Neuron application, on the host or on the Neuron devices (memory_location).",
    "bytes",
    NEURON_RUNTIME_LABELS + ("memory_location",),
)


def neuroncore_memory_metric_name(kind: str) -> str:
    """``neuroncore_memory_usage_<kind>``: device memory one NeuronCore uses for one category."""
    return f"neuroncore_memory_usage_{kind}"


for _kind in NEURON_CORE_MEMORY_KINDS:
    _neuron(
        neuroncore_memory_metric_name(_kind),
        "gauge",
        f"NeuronCore memory utilization for {_kind} (bytes).",
        "bytes",
        NEURON_CORE_LABELS,
    )
NEURONCORE_MEMORY_TENSORS = METRICS[neuroncore_memory_metric_name("tensors")]

NEURON_EXECUTION_ERRORS = _neuron(
    "execution_errors_total",
    "counter",
    "Execution errors of the Neuron application, by error_type.",
    "errors",
    NEURON_RUNTIME_LABELS + ("error_type",),
)
NEURON_EXECUTION_STATUS = _neuron(
    "execution_status_total",
    "counter",
    "Executions of the Neuron application, by outcome (status_type).",
    "executions",
    NEURON_RUNTIME_LABELS + ("status_type",),
)
NEURON_EXECUTION_LATENCY = _neuron(
    "execution_latency_seconds",
    "gauge",
    "Execution latency percentiles (p0 ... p100) over the report period, as the Neuron Runtime measures it.",
    "s",
    NEURON_RUNTIME_LABELS + ("percentile",),
)
NEURON_RUNTIME_VCPU_USAGE = _neuron(
    "neuron_runtime_vcpu_usage_ratio",
    "gauge",
    "vCPU utilization ratio of the Neuron application (usage_type).",
    "ratio",
    NEURON_RUNTIME_LABELS + ("usage_type",),
)
NEURON_HW_ECC_EVENTS = _neuron(
    "hardware_ecc_events_total",
    "counter",
    "ECC events of a Neuron device's DRAM (mem_*) and SRAM (sram_*), corrected or uncorrected (event_type).",
    "events",
    NEURON_DEVICE_LABELS + ("event_type",),
)
NEURON_SYSTEM_VCPU_COUNT = _neuron(
    "system_vcpu_count", "gauge", "vCPUs of the instance.", "vcpus", NEURON_SYSTEM_LABELS
)
NEURON_SYSTEM_VCPU_USAGE = _neuron(
    "system_vcpu_usage_ratio",
    "gauge",
    "System CPU utilization ratio (usage_type user or system).",
    "ratio",
    NEURON_SYSTEM_LABELS + ("usage_type",),
)
NEURON_SYSTEM_MEMORY_TOTAL = _neuron(
    "system_memory_total_bytes", "gauge", "Host memory size.", "bytes", NEURON_SYSTEM_LABELS
)
NEURON_SYSTEM_MEMORY_USED = _neuron(
    "system_memory_used_bytes", "gauge", "Host memory in use.", "bytes", NEURON_SYSTEM_LABELS
)
NEURON_SYSTEM_SWAP_TOTAL = _neuron(
    "system_swap_total_bytes", "gauge", "Host swap size.", "bytes", NEURON_SYSTEM_LABELS
)
NEURON_SYSTEM_SWAP_USED = _neuron(
    "system_swap_used_bytes", "gauge", "Host swap in use.", "bytes", NEURON_SYSTEM_LABELS
)
NEURON_INSTANCE_INFO = _neuron(
    "instance_info",
    "gauge",
    "EC2 instance information; the value is always 1.",
    "",
    NEURON_INSTANCE_LABELS + (NODE_LABEL,),
)
NEURON_HARDWARE_INFO = _neuron(
    "neuron_hardware_info",
    "gauge",
    "Neuron hardware information; the value is always 1.",
    "",
    NEURON_INSTANCE_LABELS
    + (
        NODE_LABEL,
        "neuron_device_count",
        "neuroncore_per_device_count",
        "neuron_device_type",
        "neuroncore_version",
        "neuron_device_memory_size",
    ),
)
# fleetscope's own Neuron series: who holds each device, the supervisor's health and the device
# count a rule can compare.
NEURON_DEVICE_INFO = _neuron(
    "fleetscope_neuron_device_info",
    "gauge",
    "Who holds a Neuron device (pod, namespace, container, Slurm hpc_job; empty when unknown), one per "
    "device the latest report lists; the value is always 1. Join the device's counters on "
    "(Hostname, neuron_device_index).",
    "",
    NEURON_DEVICE_LABELS + NEURON_ATTRIBUTION_LABELS,
)
NEURON_DEVICES = _neuron(
    "fleetscope_neuron_devices",
    "gauge",
    "Neuron devices the latest report lists (neuron_hw_counters, else neuron_hardware_info).",
    "devices",
    (NODE_LABEL,),
)
NEURON_MONITOR_LAST_REPORT = _neuron(
    "fleetscope_neuron_monitor_last_report_timestamp_seconds",
    "gauge",
    "Unix time the latest good neuron-monitor report was read (absent before the first).",
    "s",
    (NODE_LABEL,),
)
NEURON_MONITOR_RESTARTS = _neuron(
    "fleetscope_neuron_monitor_restarts_total",
    "counter",
    "Times the supervised neuron-monitor was restarted (it exited, hung or printed garbage).",
    "restarts",
    (NODE_LABEL, "reason"),
)
#: Why the supervisor restarted neuron-monitor (``reason`` of :data:`NEURON_MONITOR_RESTARTS`).
NEURON_RESTART_REASONS: tuple[str, ...] = ("exited", "hung", "garbage")
# Peak FLOP/s of a NeuronCore is served as fleetscope_gpu_peak_flops (gpu = the NeuronCore index),
# so the MFU recording rules and detectors work unchanged on Trainium (docs/neuron.md#mfu).

# --------------------------------------------------------------------------------------------
# Exporter self-metrics
# --------------------------------------------------------------------------------------------

COLLECTOR_SUCCESS = _m(
    "fleetscope_collector_success",
    "gauge",
    "1 if the collector's last scrape succeeded, else 0.",
    "bool",
    ("collector",),
    "exporter",
)
COLLECTOR_DURATION = _m(
    "fleetscope_collector_duration_seconds",
    "gauge",
    "How long the collector took on this scrape.",
    "s",
    ("collector",),
    "exporter",
)
EXPORTER_BUILD_INFO = _m(
    "fleetscope_exporter_build_info",
    "gauge",
    "Build information; the value is always 1.",
    "",
    ("version",),
    "exporter",
)

# --------------------------------------------------------------------------------------------
# Analyzer verdicts (the live service's /metrics)
# --------------------------------------------------------------------------------------------

NODE_STATES: tuple[str, ...] = ("healthy", "degraded", "failing")
NODE_HEALTH = _m(
    "fleetscope_node_health",
    "gauge",
    "1 for the node's current state, 0 for the others.",
    "bool",
    (NODE_LABEL, "state"),
    "service",
)
STRAGGLER_SCORE = _m(
    "fleetscope_straggler_score",
    "gauge",
    "Own compute time divided by the peer median (1 = normal).",
    "ratio",
    ("job_id", "rank", NODE_LABEL, "gpu"),
    "service",
)
FINDINGS = _m(
    "fleetscope_findings",
    "gauge",
    "Open findings by kind and severity.",
    "findings",
    ("kind", "severity"),
    "service",
)

FINDING_KINDS: tuple[str, ...] = (
    "failing_node", "straggler", "mfu_drop", "job_hang", "monitoring_gap", "membership_change",
    "slow_replica", "failing_replica", "capacity",
)  # fmt: skip
#: Kinds that are informational only (severity ``info``): never a node verdict, never paged.
INFO_FINDING_KINDS: tuple[str, ...] = ("monitoring_gap", "membership_change")
SEVERITIES: tuple[str, ...] = ("info", "warning", "critical")

# The live service's own health, beside its verdicts (so a rule can tell stale verdicts apart).
SERVICE_ANALYSIS_SUCCESS = _m(
    "fleetscope_service_analysis_success",
    "gauge",
    "1 if the last analysis cycle succeeded, 0 if it failed (Prometheus down, slow or erroring).",
    "bool",
    (),
    "service",
)
SERVICE_LAST_ANALYSIS = _m(
    "fleetscope_service_last_analysis_timestamp_seconds",
    "gauge",
    "Unix time the verdicts were last computed successfully (absent before the first analysis).",
    "s",
    (),
    "service",
)
SERVICE_ANALYSIS_DURATION = _m(
    "fleetscope_service_analysis_duration_seconds",
    "gauge",
    "Wall time of the last analysis cycle.",
    "s",
    (),
    "service",
)
SERVICE_VERDICTS_STALE = _m(
    "fleetscope_service_verdicts_stale",
    "gauge",
    "1 when the verdicts served are older than the staleness limit or the last cycle failed.",
    "bool",
    (),
    "service",
)


#: The same quantity under an older exporter's name: the new name -> its older names. Loaders read the
#: older name where the new one is absent and file it under the new one (``window/aliases.py``);
#: rules and dashboards read ``new or old`` (``queries``). vLLM's V0/V1 renames are
#: :data:`VLLM_RENAMES` (read by the serving signals themselves).
METRIC_ALIASES: dict[str, tuple[str, ...]] = {
    DCGM_FI_DEV_CLOCKS_EVENT_REASONS: (DCGM_FI_DEV_CLOCK_THROTTLE_REASONS,),
}


def metrics_by_origin(origin: str) -> list[Metric]:
    """All contract metrics produced by one component (``gpu``, ``efa``, ``training``, ...)."""
    return [m for m in METRICS.values() if m.origin == origin]


COLLECTOR_ERRORS = _m(
    "fleetscope_collector_errors_total",
    "counter",
    "Inputs a collector skipped (unreadable or unparsable files, rejected rank files, ...).",
    "errors",
    ("collector", "reason"),
    "exporter",
)


_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def re_label_name(name: str) -> bool:
    """True for a valid Prometheus label name."""
    return bool(_LABEL_NAME.match(name)) and not name.startswith("__")


# --------------------------------------------------------------------------------------------
# INFERENCE: serving engines' own series (vLLM, TGI, Triton / TensorRT-LLM), names as they spell them
# --------------------------------------------------------------------------------------------
# fleetscope does not export these: the engines serve them on their own /metrics and Prometheus
# scrapes them beside the node exporter. The names, types and labels are each engine's, copied from
# its source and docs (docs/inference.md lists the versions); tests/inference checks them against
# recorded /metrics pages. A histogram is one :class:`Metric` of type ``histogram`` (the family) plus
# its ``_bucket``/``_sum``/``_count`` series, which are what PromQL reads.

#: Engines fleetscope understands; the value of :data:`INFERENCE_SERVER_LABEL` on normalised series.
INFERENCE_ENGINES: tuple[str, ...] = ("vllm", "tgi", "triton")
#: Label the inference recording rules put on every SLI: which engine the series came from.
INFERENCE_SERVER_LABEL = "server"
#: Label the inference recording rules and dashboards group by: the served model. vLLM calls it
#: ``model_name``, Triton ``model``; TGI has none (one model per server), so its scrape config adds
#: ``model`` (a relabelling from a pod label or a static target label, docs/inference.md).
INFERENCE_MODEL_LABEL = "model"
#: Prometheus' target label ``host:port``; on Slurm/EC2 its host part is the node's Hostname.
INSTANCE_LABEL = "instance"
#: Kubernetes target labels Prometheus (Operator PodMonitor/ServiceMonitor or kubernetes_sd
#: relabelling) puts on a serving pod's series; dcgm-style GPU series carry the same keys as
#: attribution labels (:data:`GPU_ATTRIBUTION_LABELS`), so a replica joins its GPUs on them.
K8S_POD_JOIN_LABELS: tuple[str, ...] = ("namespace", "pod")

HISTOGRAM_SUFFIXES: tuple[str, ...] = ("_bucket", "_sum", "_count")


class Histogram(Metric):
    """A histogram family; ``bucket``, ``sum`` and ``observations`` are its ``_bucket``, ``_sum`` and
    ``_count`` series (also in :data:`METRICS`)."""

    bucket: Metric
    sum: Metric
    observations: Metric


def _histogram(name: str, help: str, unit: str, labels: tuple[str, ...], origin: str) -> Histogram:
    if name in METRICS:
        raise ValueError(f"metric {name} defined twice")
    family = Histogram(name, "histogram", help, unit, labels, origin)
    METRICS[name] = family
    family.bucket = _m(
        f"{name}_bucket", "counter", f"Cumulative buckets of {name}.", "", labels + ("le",), origin
    )
    family.sum = _m(f"{name}_sum", "counter", f"Sum of the observations of {name}.", unit, labels, origin)
    family.observations = _m(
        f"{name}_count", "counter", f"Number of observations of {name}.", "", labels, origin
    )
    return family


# vLLM. V0 engine: vllm/engine/metrics.py (v0.4 .. v0.10; the V0 engine is gone from v0.11). V1
# engine: vllm/v1/metrics/loggers.py (default from v0.8). prometheus_client adds ``_total`` to
# counters. Every series carries ``model_name``; V1 adds ``engine`` (the engine-core index).
VLLM_LABELS: tuple[str, ...] = (SERVED_MODEL_LABEL,)
#: The V1 engine-core index: a data-parallel pod has several engines, one replica.
VLLM_ENGINE_LABEL = "engine"
#: Label keys the V1 engine adds to every series.
VLLM_V1_EXTRA_LABELS: tuple[str, ...] = (VLLM_ENGINE_LABEL,)
#: Values of ``finished_reason`` on ``vllm:request_success_total`` (V1 FinishReason; V0 the same
#: first three strings; ``error`` and ``repetition`` are on the page of vLLM 0.32.0, recorded in
#: tests/fixtures/inference). ``abort`` counts client disconnects too, so it is no error signal;
#: HTTP 5xx is.
VLLM_FINISHED_REASONS: tuple[str, ...] = ("stop", "length", "abort", "error", "repetition")


def _vllm(name: str, type: MetricType, help: str, unit: str = "", extra: tuple[str, ...] = ()) -> Metric:
    return _m(name, type, help, unit, VLLM_LABELS + extra, "vllm")


def _vllm_hist(name: str, help: str, unit: str) -> Histogram:
    return _histogram(name, help, unit, VLLM_LABELS, "vllm")


VLLM_NUM_REQUESTS_RUNNING = _vllm(
    "vllm:num_requests_running", "gauge", "Requests in model execution batches (V0, V1).", "requests"
)
VLLM_NUM_REQUESTS_WAITING = _vllm(
    "vllm:num_requests_waiting", "gauge", "Requests waiting to be processed (V0, V1).", "requests"
)
VLLM_NUM_REQUESTS_SWAPPED = _vllm(
    "vllm:num_requests_swapped", "gauge", "Requests swapped to CPU (V0 only).", "requests"
)
#: V0 and V1 up to v0.10 (V1 deprecated it in 0.9 for :data:`VLLM_KV_CACHE_USAGE`, later hidden).
VLLM_GPU_CACHE_USAGE = _vllm(
    "vllm:gpu_cache_usage_perc",
    "gauge",
    "GPU KV-cache usage, 1 = 100% (V0; V1 until its rename to vllm:kv_cache_usage_perc).",
    "ratio",
)
#: V1 from v0.9 (the rename of :data:`VLLM_GPU_CACHE_USAGE`). Queries read ``kv or gpu``.
VLLM_KV_CACHE_USAGE = _vllm(
    "vllm:kv_cache_usage_perc", "gauge", "KV-cache usage, 1 = 100% (V1 from v0.9).", "ratio"
)
VLLM_CPU_CACHE_USAGE = _vllm(
    "vllm:cpu_cache_usage_perc", "gauge", "CPU (swap) KV-cache usage, 1 = 100% (V0 only).", "ratio"
)
VLLM_NUM_PREEMPTIONS = _vllm(
    "vllm:num_preemptions_total",
    "counter",
    "Requests preempted by the engine (KV cache full), cumulative (V0, V1).",
    "preemptions",
)
VLLM_PROMPT_TOKENS = _vllm(
    "vllm:prompt_tokens_total", "counter", "Prefill (prompt) tokens processed (V0, V1).", "tokens"
)
VLLM_GENERATION_TOKENS = _vllm(
    "vllm:generation_tokens_total", "counter", "Generation (output) tokens processed (V0, V1).", "tokens"
)
VLLM_REQUEST_SUCCESS = _vllm(
    "vllm:request_success_total",
    "counter",
    "Finished requests by finished_reason (stop, length, abort) (V0, V1).",
    "requests",
    ("finished_reason",),
)
VLLM_PREFIX_CACHE_QUERIES = _vllm(
    "vllm:prefix_cache_queries_total", "counter", "Prefix-cache queries in tokens (V1 from v0.9).", "tokens"
)
VLLM_PREFIX_CACHE_HITS = _vllm(
    "vllm:prefix_cache_hits_total", "counter", "Prefix-cache hits in tokens (V1 from v0.9).", "tokens"
)
VLLM_TIME_TO_FIRST_TOKEN = _vllm_hist(
    "vllm:time_to_first_token_seconds", "Time to first token (V0, V1).", "s"
)
#: V0, and V1 until v0.12 (deprecated in 0.11 for :data:`VLLM_INTER_TOKEN_LATENCY`, removed in 0.13).
VLLM_TIME_PER_OUTPUT_TOKEN = _vllm_hist(
    "vllm:time_per_output_token_seconds",
    "Time between output tokens (V0; V1 until v0.12, renamed vllm:inter_token_latency_seconds).",
    "s",
)
VLLM_INTER_TOKEN_LATENCY = _vllm_hist(
    "vllm:inter_token_latency_seconds", "Inter-token latency (V1 from v0.11).", "s"
)
VLLM_E2E_REQUEST_LATENCY = _vllm_hist(
    "vllm:e2e_request_latency_seconds", "End-to-end request latency (V0, V1).", "s"
)
VLLM_REQUEST_QUEUE_TIME = _vllm_hist(
    "vllm:request_queue_time_seconds", "Time a request spent WAITING (V0 from v0.7, V1).", "s"
)
VLLM_REQUEST_PROMPT_TOKENS = _vllm_hist(
    "vllm:request_prompt_tokens", "Prompt tokens per request (V0, V1).", "tokens"
)
VLLM_REQUEST_GENERATION_TOKENS = _vllm_hist(
    "vllm:request_generation_tokens", "Generated tokens per request (V0, V1).", "tokens"
)
#: vLLM's OpenAI server instruments its FastAPI app (prometheus-fastapi-instrumentator): requests
#: by ``handler``, ``method`` and ``status`` class (``2xx``, ``4xx``, ``5xx``). No ``model_name``.
VLLM_HTTP_REQUESTS = _m(
    "http_requests_total",
    "counter",
    "HTTP requests of vLLM's OpenAI-compatible server by handler, method and status class.",
    "requests",
    ("handler", "method", "status"),
    "vllm",
)

#: Series each vLLM engine generation serves (what the recorded pages are checked against).
VLLM_V0_SERIES: tuple[Metric, ...] = (
    VLLM_NUM_REQUESTS_RUNNING, VLLM_NUM_REQUESTS_WAITING, VLLM_NUM_REQUESTS_SWAPPED,
    VLLM_GPU_CACHE_USAGE, VLLM_CPU_CACHE_USAGE, VLLM_NUM_PREEMPTIONS, VLLM_PROMPT_TOKENS,
    VLLM_GENERATION_TOKENS, VLLM_REQUEST_SUCCESS, VLLM_TIME_TO_FIRST_TOKEN,
    VLLM_TIME_PER_OUTPUT_TOKEN, VLLM_E2E_REQUEST_LATENCY, VLLM_REQUEST_PROMPT_TOKENS,
    VLLM_REQUEST_GENERATION_TOKENS,
)  # fmt: skip
VLLM_V1_SERIES: tuple[Metric, ...] = (
    VLLM_NUM_REQUESTS_RUNNING, VLLM_NUM_REQUESTS_WAITING, VLLM_KV_CACHE_USAGE,
    VLLM_NUM_PREEMPTIONS, VLLM_PROMPT_TOKENS, VLLM_GENERATION_TOKENS, VLLM_REQUEST_SUCCESS,
    VLLM_PREFIX_CACHE_QUERIES, VLLM_PREFIX_CACHE_HITS, VLLM_TIME_TO_FIRST_TOKEN,
    VLLM_INTER_TOKEN_LATENCY, VLLM_E2E_REQUEST_LATENCY, VLLM_REQUEST_QUEUE_TIME,
    VLLM_REQUEST_PROMPT_TOKENS, VLLM_REQUEST_GENERATION_TOKENS,
)  # fmt: skip
#: The same quantity under its V0 (and early V1) name and its V1 name: queries read ``new or old``.
VLLM_RENAMES: tuple[tuple[Metric, Metric], ...] = (
    (VLLM_GPU_CACHE_USAGE, VLLM_KV_CACHE_USAGE),
    (VLLM_TIME_PER_OUTPUT_TOKEN, VLLM_INTER_TOKEN_LATENCY),
)

# Hugging Face text-generation-inference (TGI): router/src (Rust ``metrics`` crate with
# metrics-exporter-prometheus), listed in docs/source/reference/metrics.md (v2.x). Counters keep
# their names (no ``_total``); durations are histograms in seconds. No model label (one model per
# server): the scrape adds ``model``.


def _tgi(name: str, type: MetricType, help: str, unit: str = "", labels: tuple[str, ...] = ()) -> Metric:
    return _m(name, type, help, unit, labels, "tgi")


def _tgi_hist(name: str, help: str, unit: str, labels: tuple[str, ...] = ()) -> Histogram:
    return _histogram(name, help, unit, labels, "tgi")


TGI_REQUEST_COUNT = _tgi("tgi_request_count", "counter", "Requests received.", "requests")
TGI_REQUEST_SUCCESS = _tgi("tgi_request_success", "counter", "Requests answered successfully.", "requests")
#: ``err``: validation, generation, overloaded, incomplete_generation, ... (the router's error kinds).
TGI_REQUEST_FAILURE = _tgi(
    "tgi_request_failure", "counter", "Failed requests by error kind (err).", "requests", ("err",)
)
TGI_QUEUE_SIZE = _tgi("tgi_queue_size", "gauge", "Requests waiting in the router's queue.", "requests")
TGI_BATCH_CURRENT_SIZE = _tgi("tgi_batch_current_size", "gauge", "Requests in the current batch.", "requests")
TGI_BATCH_CURRENT_MAX_TOKENS = _tgi(
    "tgi_batch_current_max_tokens", "gauge", "Maximum tokens of the current batch.", "tokens"
)
TGI_REQUEST_DURATION = _tgi_hist("tgi_request_duration", "End-to-end request latency.", "s")
TGI_REQUEST_QUEUE_DURATION = _tgi_hist("tgi_request_queue_duration", "Time a request spent queued.", "s")
TGI_REQUEST_INFERENCE_DURATION = _tgi_hist(
    "tgi_request_inference_duration", "Time a request spent in inference.", "s"
)
TGI_REQUEST_MEAN_TIME_PER_TOKEN_DURATION = _tgi_hist(
    "tgi_request_mean_time_per_token_duration", "Mean time per generated token of each request.", "s"
)
TGI_REQUEST_INPUT_LENGTH = _tgi_hist("tgi_request_input_length", "Input tokens per request.", "tokens")
TGI_REQUEST_GENERATED_TOKENS = _tgi_hist(
    "tgi_request_generated_tokens", "Generated tokens per request.", "tokens"
)
TGI_BATCH_FORWARD_DURATION = _tgi_hist(
    "tgi_batch_forward_duration", "Batch forward time by method (prefill, decode).", "s", ("method",)
)
TGI_SERIES: tuple[Metric, ...] = (
    TGI_REQUEST_COUNT, TGI_REQUEST_SUCCESS, TGI_QUEUE_SIZE, TGI_BATCH_CURRENT_SIZE,
    TGI_BATCH_CURRENT_MAX_TOKENS, TGI_REQUEST_DURATION, TGI_REQUEST_QUEUE_DURATION,
    TGI_REQUEST_INFERENCE_DURATION, TGI_REQUEST_MEAN_TIME_PER_TOKEN_DURATION,
    TGI_REQUEST_INPUT_LENGTH, TGI_REQUEST_GENERATED_TOKENS, TGI_BATCH_FORWARD_DURATION,
)  # fmt: skip

# NVIDIA Triton Inference Server: docs/user_guide/metrics.md of triton-inference-server/server
# (the nv_inference_* families since r20.x; durations are cumulative microsecond counters, no
# histograms unless enabled). Per model and version: labels ``model``, ``version``.
TRITON_LABELS: tuple[str, ...] = ("model", "version")


def _triton(name: str, type: MetricType, help: str, unit: str = "", extra: tuple[str, ...] = ()) -> Metric:
    return _m(name, type, help, unit, TRITON_LABELS + extra, "triton")


TRITON_REQUEST_SUCCESS = _triton(
    "nv_inference_request_success", "counter", "Successful inference requests.", "requests"
)
#: Newer releases add ``reason`` (REJECTED, CANCELED, BACKEND, OTHER); sum it away.
TRITON_REQUEST_FAILURE = _triton(
    "nv_inference_request_failure", "counter", "Failed inference requests.", "requests"
)
TRITON_INFERENCE_COUNT = _triton(
    "nv_inference_count", "counter", "Inferences performed (a batch of n counts n).", "inferences"
)
TRITON_EXEC_COUNT = _triton(
    "nv_inference_exec_count",
    "counter",
    "Model executions (inference count / exec count = batch size).",
    "executions",
)
TRITON_REQUEST_DURATION_US = _triton(
    "nv_inference_request_duration_us", "counter", "Cumulative end-to-end request time.", "us"
)
TRITON_QUEUE_DURATION_US = _triton(
    "nv_inference_queue_duration_us", "counter", "Cumulative time requests waited in the queue.", "us"
)
TRITON_COMPUTE_INPUT_DURATION_US = _triton(
    "nv_inference_compute_input_duration_us", "counter", "Cumulative input processing time.", "us"
)
TRITON_COMPUTE_INFER_DURATION_US = _triton(
    "nv_inference_compute_infer_duration_us", "counter", "Cumulative model execution time.", "us"
)
TRITON_COMPUTE_OUTPUT_DURATION_US = _triton(
    "nv_inference_compute_output_duration_us", "counter", "Cumulative output processing time.", "us"
)
TRITON_PENDING_REQUEST_COUNT = _triton(
    "nv_inference_pending_request_count", "gauge", "Requests received and not yet executing.", "requests"
)
#: Triton's own GPU gauges (per ``gpu_uuid``); fleetscope joins DCGM series instead.
TRITON_GPU_UTILIZATION = _m(
    "nv_gpu_utilization",
    "gauge",
    "GPU utilization rate (0.0 - 1.0), Triton's view.",
    "ratio",
    ("gpu_uuid",),
    "triton",
)
#: TensorRT-LLM backend gauges (tensorrtllm_backend README, Triton 23.11+): KV-cache blocks by
#: ``kv_cache_block_type`` (max, free, used, tokens_per) and requests by ``request_type`` (active,
#: max, scheduled, context).
TRTLLM_KV_CACHE_BLOCK_STATISTICS = _triton(
    "nv_trt_llm_kv_cache_block_statistics",
    "gauge",
    "TRT LLM KV cache block metrics.",
    "blocks",
    ("kv_cache_block_type",),
)
TRTLLM_REQUEST_STATISTICS = _triton(
    "nv_trt_llm_request_statistics", "gauge", "TRT LLM request metrics.", "requests", ("request_type",)
)
#: What the recorded Triton page (TensorRT-LLM backend, GPU metrics off) is checked against.
TRITON_SERIES: tuple[Metric, ...] = (
    TRITON_REQUEST_SUCCESS, TRITON_REQUEST_FAILURE, TRITON_INFERENCE_COUNT, TRITON_EXEC_COUNT,
    TRITON_REQUEST_DURATION_US, TRITON_QUEUE_DURATION_US, TRITON_COMPUTE_INPUT_DURATION_US,
    TRITON_COMPUTE_INFER_DURATION_US, TRITON_COMPUTE_OUTPUT_DURATION_US,
    TRITON_PENDING_REQUEST_COUNT, TRTLLM_KV_CACHE_BLOCK_STATISTICS, TRTLLM_REQUEST_STATISTICS,
)  # fmt: skip
