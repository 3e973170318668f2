"""Job attribution: kubelet pod-resources (real gRPC on a unix socket, and one that refuses),
Slurm mapping files written by the shipped prolog/epilog, and Slurm cgroups of NVML processes."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from fleetscope import contract as c
from fleetscope.exporters.gpu.attribution import parse_list_response, slurm_job_from_cgroup
from fleetscope.exporters.gpu.collector import GpuCollector
from tests.conftest import ROOT
from tests.exporters.gpu.conftest import NVML_FIXTURES, context, values
from tests.support.collected import samples

H100X8 = str(NVML_FIXTURES / "h100x8.json")
UUID0 = "GPU-00000000-0000-0000-0000-000000000000"
UUID1 = "GPU-00000001-0000-0000-0000-000000000001"


# A plain protobuf encoder, written independently of the decoder under test.
def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes | str) -> bytes:
    data = payload.encode() if isinstance(payload, str) else payload
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _pod(name: str, namespace: str, containers: list[tuple[str, str, list[str]]]) -> bytes:
    body = _field(1, name) + _field(2, namespace)
    for cname, resource, ids in containers:
        devices = _field(1, resource) + b"".join(_field(2, i) for i in ids)
        body += _field(3, _field(1, cname) + _field(2, devices) + _varint(3 << 3 | 0) + _varint(7))
    return _field(1, body)


CANNED = (
    _pod("trainer-0", "ml", [("main", "nvidia.com/gpu", [UUID0, UUID1]), ("sidecar", "cpu", ["x"])])
    + _pod("notebook", "research", [("jupyter", "nvidia.com/gpu", [UUID1 + "::1"])])
    + _pod("web", "default", [("nginx", "example.com/fpga", ["fpga0"])])
)


def test_parse_list_response() -> None:
    mapping = parse_list_response(CANNED, ("nvidia.com/gpu",))
    assert mapping[UUID0] == [{"pod": "trainer-0", "namespace": "ml", "container": "main"}]
    assert [p["pod"] for p in mapping[UUID1]] == ["trainer-0", "notebook"]
    assert "fpga0" not in mapping and "x" not in mapping


@pytest.fixture
def kubelet(tmp_path: Path):
    """A real gRPC server on a unix socket answering v1.PodResourcesLister/List."""
    sock = tmp_path / "kubelet.sock"
    calls: list[bytes] = []

    def list_pods(request: bytes, context: grpc.ServicerContext) -> bytes:
        calls.append(request)
        return CANNED

    handler = grpc.method_handlers_generic_handler(
        "v1.PodResourcesLister", {"List": grpc.unary_unary_rpc_method_handler(list_pods)}
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"unix://{sock}")
    server.start()
    try:
        yield sock, calls
    finally:
        server.stop(grace=None)


def test_pod_labels_from_a_real_grpc_kubelet(kubelet) -> None:
    sock, calls = kubelet
    collector = GpuCollector(
        context(gpu_nvml_replay=H100X8, gpu_kubernetes=True, gpu_pod_resources_socket=str(sock))
    )
    try:
        families = list(collector.collect())
        list(collector.collect())  # within the cache TTL: no second List call
    finally:
        collector.close()
    assert len(calls) == 1
    s = samples(families)
    assert values(s, c.DCGM_FI_DEV_SM_CLOCK, gpu="0", pod="trainer-0", namespace="ml", container="main") == [
        1980
    ]
    # GPU 1 is shared by two pods: one series per pod, as dcgm-exporter does.
    pods = sorted(dict(lbl)["pod"] for (n, lbl) in s if n == c.DCGM_FI_DEV_SM_CLOCK and ("gpu", "1") in lbl)
    assert pods == ["notebook", "trainer-0"]
    # An unallocated GPU keeps its series, without pod labels.
    gpu2 = [dict(lbl) for (n, lbl) in s if n == c.DCGM_FI_DEV_SM_CLOCK and ("gpu", "2") in lbl]
    assert gpu2 and all("pod" not in lbl for lbl in gpu2)
    # Attribution labels come last, in the contract's order.
    fam = next(f for f in families if f.name == c.DCGM_FI_DEV_SM_CLOCK)
    keys = tuple(next(x for x in fam.samples if x.labels.get("pod") == "trainer-0").labels)
    assert keys == c.gpu_label_keys(attribution=("pod", "namespace", "container"))


def test_kubelet_socket_that_refuses(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "kubelet.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))  # the socket file exists, but nothing listens: connection refused
    try:
        collector = GpuCollector(
            context(gpu_nvml_replay=H100X8, gpu_kubernetes=True, gpu_pod_resources_socket=str(path))
        )
        collector.attributor.pods.ttl = 0  # ask on every scrape
        with caplog.at_level(logging.WARNING, logger="fleetscope.exporters.gpu.attribution"):
            for _ in range(3):
                s = samples(collector.collect())
                assert len(values(s, c.DCGM_FI_DEV_SM_CLOCK)) == 8
                assert not any("pod" in dict(lbl) for (_n, lbl) in s)
        collector.close()
    finally:
        dead.close()
    warnings = [r for r in caplog.records if "pod-resources" in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert str(path) in warnings[0].getMessage()


def _run(script: str, tmp_path: Path, **env: str) -> None:
    res = subprocess.run(
        ["bash", str(ROOT / "deploy" / "slurm" / script)],
        env={"PATH": os.environ["PATH"], "FLEETSCOPE_HPC_JOB_MAPPING_DIR": str(tmp_path / "jobs"), **env},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert res.returncode == 0, res.stderr


def test_prolog_epilog_and_the_hpc_job_label(tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    _run("prolog.sh", tmp_path, SLURM_JOB_ID="4711", SLURM_JOB_GPUS="0,1")
    _run("prolog.sh", tmp_path, SLURM_JOB_ID="4712", CUDA_VISIBLE_DEVICES="1")
    _run("prolog.sh", tmp_path, SLURM_JOB_ID="4712", CUDA_VISIBLE_DEVICES="1")  # requeue: no duplicate
    assert (jobs / "0").read_text() == "4711\n" and (jobs / "1").read_text() == "4711\n4712\n"
    collector = GpuCollector(context(gpu_nvml_replay=H100X8, gpu_hpc_job_mapping_dir=str(jobs)))
    try:
        s = samples(collector.collect())
        assert values(s, c.DCGM_FI_DEV_SM_CLOCK, gpu="0", hpc_job="4711") == [1980]
        assert sorted(
            dict(lbl)["hpc_job"] for (n, lbl) in s if n == c.DCGM_FI_DEV_SM_CLOCK and ("gpu", "1") in lbl
        ) == [
            "4711",
            "4712",
        ]
        assert not any("hpc_job" in dict(lbl) for (n, lbl) in s if ("gpu", "2") in lbl)
        _run("epilog.sh", tmp_path, SLURM_JOB_ID="4711")
        assert not (jobs / "0").exists() and (jobs / "1").read_text() == "4712\n"
        s = samples(collector.collect())
        assert not any("hpc_job" in dict(lbl) for (n, lbl) in s if ("gpu", "0") in lbl)
        assert values(s, c.DCGM_FI_DEV_SM_CLOCK, gpu="1", hpc_job="4712") == [1980]
    finally:
        collector.close()


def test_slurm_job_from_the_cgroup_of_gpu_processes(tmp_path: Path) -> None:
    procfs = tmp_path / "proc"
    # The L40S capture lists two ffmpeg processes (pids 20037 and 20038) on its GPU.
    for pid, cgroup in (
        ("20037", "0::/system.slice/slurmstepd.scope/job_90210/step_0/user/task_0\n"),
        ("20038", "12:memory:/slurm/uid_1000/job_90210/step_batch\n"),
    ):
        (procfs / pid).mkdir(parents=True)
        (procfs / pid / "cgroup").write_text(cgroup)
    assert slurm_job_from_cgroup(procfs, 20038) == "90210"
    assert slurm_job_from_cgroup(procfs, 1) is None
    collector = GpuCollector(
        context(procfs=procfs, gpu_nvml_replay=str(NVML_FIXTURES / "l40s.json"), gpu_slurm_cgroup=True)
    )
    try:
        s = samples(collector.collect())
    finally:
        collector.close()
    assert values(s, c.DCGM_FI_DEV_SM_CLOCK, hpc_job="90210") == [2520]
    assert values(s, c.GPU_UP) == [1]


def test_mig_pods_one_series_per_gpu_instance() -> None:
    """H200 MIG capture: GPU instance 2 has two compute instances (MIG-...0 and MIG-...1)."""

    class Kubelet:
        def mapping(self):
            pod = {"pod": "infer-0", "namespace": "serve", "container": "vllm"}
            return {
                "MIG-00000000-0000-0000-0000-000000000000": [pod],
                "MIG-00000001-0000-0000-0000-000000000001": [pod],
                "MIG-00000003-0000-0000-0000-000000000003": [{**pod, "pod": "infer-1"}],
            }

        def close(self) -> None:
            pass

    collector = GpuCollector(context(gpu_nvml_replay=str(NVML_FIXTURES / "h200-mig.json")))
    collector.attributor.pods = Kubelet()  # type: ignore[assignment]
    try:
        s = samples(collector.collect())
    finally:
        collector.close()
    fb = {
        (dict(lbl)["GPU_I_ID"], dict(lbl).get("pod"))
        for (n, lbl) in s
        if n == c.DCGM_FI_DEV_FB_USED and "GPU_I_ID" in dict(lbl)
    }
    assert fb == {("2", "infer-0"), ("3", None), ("9", "infer-1"), ("10", None)}
