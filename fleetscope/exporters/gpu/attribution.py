"""Which job uses which GPU: Kubernetes pods and Slurm jobs.

* Kubernetes: the kubelet's pod-resources API (``v1.PodResourcesLister/List``, gRPC over the unix
  socket ``/var/lib/kubelet/pod-resources/kubelet.sock``) says which pod and container hold which
  device ids (GPU or MIG UUIDs). grpcio (extra ``fleetscope[k8s]``) is imported only when
  ``--collector.gpu.kubernetes`` is on; the messages are decoded here with a few lines of protobuf
  wire-format code, so no generated stubs or protobuf runtime are needed.
* Slurm: a prolog writes one file per GPU index (``<gpu>`` or ``<gpu>.<gpu_instance>`` for MIG) into
  ``--collector.gpu.hpc-job-mapping-dir``, one job id a line (dcgm-exporter's convention; see
  deploy/slurm/). Without a file, ``--collector.gpu.slurm-cgroup`` looks at the processes NVML
  reports on the GPU and finds ``job_<id>`` in ``<procfs>/<pid>/cgroup``.

Each GPU gets a list of attribution label sets; several jobs or pods sharing a GPU give several
sets, and the collector repeats the GPU's series once per set (as dcgm-exporter does).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from fleetscope.exporters import safe_read

if TYPE_CHECKING:
    import grpc

log = logging.getLogger("fleetscope.exporters.gpu.attribution")

POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
LIST_METHOD = "/v1.PodResourcesLister/List"
DEFAULT_RESOURCE_NAMES = ("nvidia.com/gpu",)
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"

Labels = dict[str, str]


# -- protobuf wire format (just what pod-resources needs) -----------------------------------------
def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def proto_fields(buf: bytes) -> Iterator[tuple[int, int, bytes | int]]:
    """Yield ``(field number, wire type, value)``; length-delimited values are bytes."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            yield number, wire, value
        elif wire == 2:
            length, pos = _varint(buf, pos)
            if pos + length > len(buf):
                raise ValueError("truncated field")
            yield number, wire, buf[pos : pos + length]
            pos += length
        elif wire == 1:
            yield number, wire, int.from_bytes(buf[pos : pos + 8], "little")
            pos += 8
        elif wire == 5:
            yield number, wire, int.from_bytes(buf[pos : pos + 4], "little")
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")


def _strings(buf: bytes, number: int) -> list[str]:
    return [v.decode() for v in _messages(buf, number)]


def _messages(buf: bytes, number: int) -> list[bytes]:
    # Wire type 2 (length-delimited) is the only one whose value is bytes.
    return [v for n, _, v in proto_fields(buf) if n == number and isinstance(v, bytes)]


def parse_list_response(buf: bytes, resource_names: tuple[str, ...]) -> dict[str, list[Labels]]:
    """``ListPodResourcesResponse`` -> device id -> [{pod, namespace, container}].

    PodResources{1 name, 2 namespace, 3 containers}; ContainerResources{1 name, 2 devices};
    ContainerDevices{1 resource_name, 2 device_ids}.
    """
    out: dict[str, list[Labels]] = {}
    for pod in _messages(buf, 1):
        pod_name = next(iter(_strings(pod, 1)), "")
        namespace = next(iter(_strings(pod, 2)), "")
        for container in _messages(pod, 3):
            container_name = next(iter(_strings(container, 1)), "")
            for devices in _messages(container, 2):
                resource = next(iter(_strings(devices, 1)), "")
                if resource not in resource_names and not resource.startswith(MIG_RESOURCE_PREFIX):
                    continue
                for device_id in _strings(devices, 2):
                    # EKS-style shared ids carry a "::N" replica suffix.
                    device_id = device_id.split("::", 1)[0]
                    out.setdefault(device_id, []).append(
                        {"pod": pod_name, "namespace": namespace, "container": container_name}
                    )
    return out


class PodResourcesClient:
    """Calls ``List`` on the kubelet socket with a deadline; caches the answer for ``ttl`` seconds."""

    def __init__(
        self,
        socket_path: str = POD_RESOURCES_SOCKET,
        resource_names: tuple[str, ...] = DEFAULT_RESOURCE_NAMES,
        timeout: float = 2.0,
        ttl: float = 10.0,
    ) -> None:
        self.socket_path = socket_path
        self.resource_names = resource_names
        self.timeout = timeout
        self.ttl = ttl
        self._mapping: dict[str, list[Labels]] = {}
        self._fetched_at: float | None = None
        self._warned = False
        self._channel: grpc.Channel | None = None
        self._lock = threading.Lock()

    def _call(self) -> bytes:
        try:
            import grpc  # the k8s extra; imported only when Kubernetes attribution is on
        except ImportError:
            raise RuntimeError("grpcio is not installed (pip install 'fleetscope[k8s]')") from None

        if self._channel is None:
            self._channel = grpc.insecure_channel(f"unix://{self.socket_path}")
        stub = self._channel.unary_unary(
            LIST_METHOD, request_serializer=lambda b: b, response_deserializer=lambda b: b
        )
        return stub(b"", timeout=self.timeout)

    def mapping(self) -> dict[str, list[Labels]]:
        """Device id -> pods; the last good answer while the kubelet does not answer."""
        with self._lock:
            now = time.monotonic()
            if self._fetched_at is not None and now - self._fetched_at < self.ttl:
                return self._mapping
            self._fetched_at = now
            try:
                self._mapping = parse_list_response(self._call(), self.resource_names)
                if self._warned:
                    log.info("kubelet pod-resources at %s answers again", self.socket_path)
                self._warned = False
            except Exception as exc:  # noqa: BLE001 - any failure: series keep coming without pod labels
                if not self._warned:
                    log.warning(
                        "kubelet pod-resources %s: %s; GPU series carry no pod labels until it answers",
                        self.socket_path,
                        _short(exc),
                    )
                    self._warned = True
                self._mapping = {}
            return self._mapping

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None


def _short(exc: BaseException) -> str:
    details = getattr(exc, "details", None)
    if callable(details):
        try:
            return str(details())
        except Exception:  # noqa: BLE001
            pass
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


#: Bytes read of a cgroup file or a job mapping file (a few lines each).
_SMALL_FILE = 64 * 1024
_JOB_IN_CGROUP = re.compile(r"/job_(\d+)(?:/|$)")


def slurm_job_from_cgroup(procfs: Path, pid: int) -> str | None:
    """The Slurm job id in ``<procfs>/<pid>/cgroup`` (``.../job_<id>/...``), or None."""
    try:
        content = safe_read.read_text(procfs / str(pid) / "cgroup", _SMALL_FILE)
    except OSError:
        return None
    for line in content.splitlines():
        m = _JOB_IN_CGROUP.search(line.rsplit(":", 1)[-1])
        if m:
            return m.group(1)
    return None


def jobs_from_mapping_dir(directory: Path, name: str) -> list[str] | None:
    """Job ids in ``<dir>/<name>`` (one a line), or None when there is no such file."""
    try:
        # Written by the Slurm prolog, but the directory may be writable by others: never block on
        # a FIFO there, never read more than a job list needs.
        content = safe_read.read_text(directory / name, _SMALL_FILE)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        log.debug("hpc job mapping %s/%s unreadable: %s", directory, name, exc)
        return None
    return [line.strip() for line in content.splitlines() if line.strip()]


class Attributor:
    """Combines the enabled sources into label sets per GPU (or MIG device)."""

    def __init__(
        self,
        procfs: Path,
        pods: PodResourcesClient | None = None,
        mapping_dir: Path | None = None,
        slurm_cgroup: bool = False,
    ) -> None:
        self.procfs = procfs
        self.pods = pods
        self.mapping_dir = mapping_dir
        self.slurm_cgroup = slurm_cgroup
        self._pod_map: dict[str, list[Labels]] = {}

    @property
    def wants_processes(self) -> bool:
        return self.slurm_cgroup

    def refresh(self) -> None:
        """Once per scrape: fetch (or reuse) the kubelet's answer."""
        self._pod_map = self.pods.mapping() if self.pods is not None else {}

    def labels(
        self,
        gpu_index: int,
        uuid: str,
        gpu_instance_id: int | None = None,
        mig_uuids: list[str] | None = None,
        pids: list[int] | None = None,
    ) -> list[Labels]:
        pods: list[Labels] = []
        if self._pod_map:
            for mig_uuid in mig_uuids or ():
                pods += self._pod_map.get(mig_uuid, [])
            if mig_uuids is None:
                pods = self._pod_map.get(uuid, []) or self._pod_map.get(str(gpu_index), [])
        jobs: list[str] = []
        if self.mapping_dir is not None:
            name = str(gpu_index) if gpu_instance_id is None else f"{gpu_index}.{gpu_instance_id}"
            found = jobs_from_mapping_dir(self.mapping_dir, name)
            if found is None and gpu_instance_id is not None:
                found = jobs_from_mapping_dir(self.mapping_dir, str(gpu_index))
            jobs = found or []
        if not jobs and self.slurm_cgroup and pids:
            jobs = sorted({j for p in pids if (j := slurm_job_from_cgroup(self.procfs, p))})
        sets: list[Labels] = [dict(p) for p in pods] or [{}]
        if jobs:
            sets = [{**s, "hpc_job": j} for s in sets for j in jobs]
        if len(sets) > 1:  # one pod may hold two MIG devices of one GPU instance: one series set
            sets = list({tuple(s.items()): s for s in sets}.values())
        return sets

    def close(self) -> None:
        if self.pods is not None:
            self.pods.close()
