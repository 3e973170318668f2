"""The signal layer: derived signals that more than one place reads, each computed once per analysis.

:class:`~fleetscope.analyzers.signals.window_signals.Signals` holds them for one window, each a lazily
computed member; the modules beside it compute one signal each from
:class:`~fleetscope.analyzers.features.Features`. Signals never import a detector; detectors,
reports and the service read signals. This package's ``__init__`` imports nothing, so
``features`` can import :data:`~fleetscope.analyzers.signals.serving.SERVING_METRICS` without a loop.
"""
