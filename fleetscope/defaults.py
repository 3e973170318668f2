"""Default ports, addresses and limits shared by the CLI, the deployment files and the docs."""

#: The node exporter (dcgm-exporter has 9400, node_exporter 9100; we sit beside both).
EXPORTER_PORT = 9401
#: The live analysis service (``fleetscope serve``).
SERVICE_PORT = 9410
#: First port of the simulator's virtual nodes (``fleetscope simulate --live``).
SIMULATOR_BASE_PORT = 9500
#: Largest Prometheus answer read (decoded bytes), by default: 256 MiB (``--max-answer-bytes``).
MAX_ANSWER_BYTES = 256 * 1024 * 1024
