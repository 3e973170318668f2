"""Analyzers: load series (Prometheus API or a recorded file) and turn them into findings."""
