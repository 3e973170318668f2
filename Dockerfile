# The fleetscope image: one image for the node exporter (`fleetscope exporter`), the live analysis
# service (`fleetscope serve`) and the simulated cluster (`fleetscope simulate --live`).
#
#   docker build -t fleetscope:0.1.0 .
#
# Python packages are pinned by requirements/constraints.txt, the same file CI installs from.
# NVML (libnvidia-ml.so) is not in the image: on a GPU host the NVIDIA Container Toolkit mounts the
# host driver's copy into the container (see compose/docker-compose.gpu.yml).
FROM python:3.11.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/fleetscope
COPY pyproject.toml README.md ./
COPY requirements/constraints.txt requirements/constraints.txt
COPY fleetscope/ fleetscope/
# The exporter needs only the base dependencies (+ k8s for pod attribution, aws for the FSx
# CloudWatch collector); the service and the analyzers need the analyze and service extras.
# torch is never installed into the image (it is a test-only dependency).
RUN pip install -c requirements/constraints.txt '.[service,analyze,k8s,aws]'

# nobody:nogroup (exists in the Debian base image). The exporter reads /sys and /proc world-readable files; /dev/kmsg needs root or
# CAP_SYSLOG, which the GPU overlay grants explicitly.
USER 65534:65534
EXPOSE 9401 9410
ENTRYPOINT ["fleetscope"]
CMD ["exporter"]
