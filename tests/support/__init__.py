"""Helpers the tests share: real Prometheus and promtool, the exporter as a real process."""
