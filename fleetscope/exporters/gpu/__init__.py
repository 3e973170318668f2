"""GPU collectors: ``gpu`` (NVML readings under dcgm-exporter's names) and ``xid`` (XID errors)."""
