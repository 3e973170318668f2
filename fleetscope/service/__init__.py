"""The live analysis service: runs the analyzers over a sliding window of Prometheus data and serves
the verdicts as a JSON API, a web page, Prometheus metrics and drain plans.

Modules: :mod:`.state` (the verdict store), :mod:`.runner` (the background analysis loop),
:mod:`.app` (the FastAPI app, wired from :mod:`.settings`, :mod:`.views`, :mod:`.params`,
:mod:`.middleware` and the handlers in ``routes_*``), :mod:`.metrics` (``/metrics``), :mod:`.auth`
(bearer token), :mod:`.plan` (drain plans), :mod:`.cli` (``fleetscope serve``), :mod:`.plan_cli`
(``fleetscope plan``).
"""
