"""Canonical PromQL expressions built from the contract's names.

The recording rules, the dashboards, the analyzers and the tests use these builders, so one
expression (MFU, tokens/s, compute time, retransmit ratio, ...) is written once. Each section is a
plain function returning a PromQL string; keep them free of dashboard variables unless the
function says so.
"""

from __future__ import annotations

from fleetscope import contract  # noqa: F401 - the sections below build on it
