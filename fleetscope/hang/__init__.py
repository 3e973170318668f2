"""Hang root cause: which ranks a hung collective waits for (``fleetscope hang``, docs/hang.md).

Inputs are files from the job's machines: PyTorch Flight Recorder dumps (:mod:`.fr_load`, read
through :mod:`.safe_pickle`) and NCCL RAS reports (:mod:`.ras_parse`). :mod:`.fr_reason` and
:mod:`.ras_reason` decide, :mod:`.model` is the result and its JSON contract, :mod:`.render`
prints it, :mod:`.analysis` ties them together.

The package imports only the standard library and fleetscope's base modules (no pandas, no
window layer), so the node agent can reuse :mod:`.ras_parse`; the join to Prometheus evidence
lives in :mod:`fleetscope.analyzers.hang_join`.
"""
