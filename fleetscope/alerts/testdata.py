"""Label sets and input series for the rules' promtool test cases (realistic dcgm-exporter labels)."""

from __future__ import annotations

from fleetscope import contract, hardware
from fleetscope.alerts.model import InputSeries, Labels

HOST = "ip-10-1-0-11"
PEER = "ip-10-1-0-12"
JOB = "4711"
MODEL = "NVIDIA H100 80GB HBM3"


def _bf16_peak(model_name: str) -> float:
    peak = hardware.peak_flops(model_name)
    if peak is None:
        raise ValueError(f"hardware.PEAK_FLOPS_TABLE has no entry for {model_name!r}")
    return peak["bf16"]


H100_BF16_PEAK = _bf16_peak(MODEL)  # the test GPUs' dense bf16 peak FLOP/s, from the exporter's table


def num(value: float) -> str:
    """A float as PromQL writes it: ``0.9`` not ``0.9000000000000001``, ``1e+06`` as ``1e+06``."""
    return f"{value:.12g}"


def gpu_labels(gpu: str = "0", host: str = HOST) -> Labels:
    """The full label set of one GPU series, in dcgm-exporter's order."""
    i = int(gpu)
    return {
        "gpu": gpu,
        "UUID": f"GPU-5f0b6a1e-0000-4000-8000-{host[-2:]}00000000{i:02d}",
        "pci_bus_id": f"00000000:{0x53 + 16 * i:02X}:00.0",
        "device": f"nvidia{gpu}",
        "modelName": MODEL,
        contract.NODE_LABEL: host,
        "DCGM_FI_DRIVER_VERSION": "550.90.07",
    }


def gpu(metric: str, values: str, gpu: str = "0", host: str = HOST, **extra: str) -> InputSeries:
    return InputSeries(metric, {**gpu_labels(gpu, host), **extra}, values)


def efa_labels(device: str = "rdmap16s27", host: str = HOST, port: str = "1") -> Labels:
    return {contract.NODE_LABEL: host, "device": device, "port": port}


def efa(metric: str, values: str, device: str = "rdmap16s27", host: str = HOST) -> InputSeries:
    return InputSeries(metric, efa_labels(device, host), values)


def lustre_labels(host: str = HOST) -> Labels:
    return {contract.NODE_LABEL: host, "fs": "fsx", "mount": "/fsx"}


def lustre(metric: str, values: str, host: str = HOST, **extra: str) -> InputSeries:
    return InputSeries(metric, {**lustre_labels(host), **extra}, values)


def rank_labels(rank: int, job: str = JOB) -> Labels:
    """Training labels of a rank: 8 ranks per node, rank r on GPU r % 8."""
    host = HOST if rank < 8 else PEER
    return {
        "job_id": job,
        "rank": str(rank),
        "local_rank": str(rank % 8),
        contract.NODE_LABEL: host,
        "gpu": str(rank % 8),
    }


def rank(metric: str, values: str, r: int, job: str = JOB, **extra: str) -> InputSeries:
    return InputSeries(metric, {**rank_labels(r, job), **extra}, values)


def target(job: str = "fleetscope-exporter", instance: str = f"{HOST}:9401") -> Labels:
    return {"instance": instance, "job": job}
