"""The node agent: one process per node serving the contract's series on ``/metrics``.

Nothing here imports pandas, FastAPI or grafanalib (a test checks it).
"""
