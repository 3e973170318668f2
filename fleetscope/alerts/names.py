"""Names of the recording rules fleetscope generates (``level:metric:operations``).

Import these instead of spelling a recorded series out; the analyzers and the service may read the
same series. Imports only the standard library.
"""

from __future__ import annotations

#: MFU of each rank against its GPU's dense bf16 peak (training labels: job_id, rank, ...).
RANK_MFU = "rank:training_mfu:ratio_rate5m"
#: MFU of each job: all its ranks' model FLOP/s over the summed bf16 peak of their GPUs.
JOB_MFU = "job_id:training_mfu:ratio_rate5m"
#: Tokens per second of each job, summed over its ranks.
JOB_TOKENS = "job_id:training_tokens:rate5m"
#: Compute (forward + backward) seconds per second of each rank.
RANK_COMPUTE = "rank:training_compute_seconds:rate5m"
#: Mean step time of each job (seconds per step), absent while no step completes.
JOB_STEP_SECONDS = "job_id:training_step_seconds:mean5m"
#: SRD retransmitted packets per transmitted packet, per EFA device.
EFA_RETRANS_RATIO = "device:efa_retrans_pkts_per_tx_pkts:ratio_rate5m"
#: Mean latency of Lustre metadata operations per client mount.
LUSTRE_METADATA_LATENCY = "mount:lustre_client_metadata_operation_seconds:mean5m"
#: Number of GPUs each node enumerates (lost ones included).
NODE_GPU_COUNT = "Hostname:fleetscope_gpu_up:count"
#: One series (value 1) per (Hostname, job_id, model_name) that wrote an identity series in the
#: minute before: the sharded service's discovery, evaluated once for all its replicas.
FLEET_IDENTITY = "Hostname_job_id_model_name:fleetscope_identity:group1m"

#: Step-time goodput of each job: the mean over its ranks of the share of wall time spent in
#: completed steps (pauses, stalls and start-up are not). Re-done steps after a restart count.
JOB_GOODPUT = "job_id:training_goodput:ratio_rate5m"
#: Seconds since each job's newest successful checkpoint (for a job with none yet, a lower bound:
#: its ranks' start-up plus step time).
JOB_CHECKPOINT_AGE = "job_id:training_checkpoint_age_seconds:max"
#: GPU-hours lost if a node fails now: the checkpoint age in hours times the job's GPUs (ranks).
JOB_CHECKPOINT_EXPOSURE = "job_id:training_checkpoint_exposure_gpu_hours:max"
#: Mean wall time of one rank's checkpoint save, over the last hour and over the last day.
JOB_CHECKPOINT_SAVE_SECONDS_1H = "job_id:training_checkpoint_save_seconds:mean1h"
JOB_CHECKPOINT_SAVE_SECONDS_1D = "job_id:training_checkpoint_save_seconds:mean1d"
#: Checkpoint write bandwidth of each job over the last hour: bytes its ranks saved per second of
#: saving (the slowest rank's save time: the ranks save at the same time).
JOB_CHECKPOINT_BANDWIDTH = "job_id:training_checkpoint_save_bytes_per_second:ratio1h"

#: Inference SLIs per served model (labels ``model``, ``server``), each over the SLO alerts'
#: windows: the share of requests whose time to first token exceeded the SLO threshold, of
#: inter-token gaps longer than theirs, and of failed requests. Windows as in
#: ``Thresholds.slo_*_window``; change both together (the recording group emits these names).
INFERENCE_SLO_WINDOWS: tuple[str, ...] = ("5m", "30m", "1h", "6h", "3d")


def inference_ttft_slow(window: str) -> str:
    return f"model:inference_ttft_slow:ratio_rate{window}"


def inference_itl_slow(window: str) -> str:
    return f"model:inference_itl_slow:ratio_rate{window}"


def inference_errors(window: str) -> str:
    return f"model:inference_errors:ratio_rate{window}"


#: One series per vLLM serving target (labels instance, job, model_name) with the node it runs on
#: in ``Hostname``, from the host part of ``instance`` (Slurm, EC2 targets ``<node>:<port>``): what
#: dashboards join a replica's GPUs on without a label_replace of their own.
INFERENCE_REPLICA_NODE = "instance:inference_replica_node:group"

INFERENCE_SLIS: tuple[str, ...] = tuple(
    sli(w)
    for sli in (inference_ttft_slow, inference_itl_slow, inference_errors)
    for w in INFERENCE_SLO_WINDOWS
)

RECORDING_RULE_NAMES: tuple[str, ...] = (
    RANK_MFU,
    JOB_MFU,
    JOB_TOKENS,
    RANK_COMPUTE,
    JOB_STEP_SECONDS,
    EFA_RETRANS_RATIO,
    LUSTRE_METADATA_LATENCY,
    NODE_GPU_COUNT,
    FLEET_IDENTITY,
    JOB_GOODPUT,
    JOB_CHECKPOINT_AGE,
    JOB_CHECKPOINT_EXPOSURE,
    JOB_CHECKPOINT_SAVE_SECONDS_1H,
    JOB_CHECKPOINT_SAVE_SECONDS_1D,
    JOB_CHECKPOINT_BANDWIDTH,
    *INFERENCE_SLIS,
    INFERENCE_REPLICA_NODE,
)
