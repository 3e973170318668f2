"""The signal layer: derived signals that more than one place reads, each computed once per analysis.

:class:`~fleetscope.analyzers.signals.window_signals.Signals` holds them for one window, each a lazily
computed member; the modules beside it compute one signal each from
:class:`~fleetscope.analyzers.features.Features`. Signals never import a detector; detectors,
reports and the service read a signal's value through ``Signals`` alone (never by calling the
function that computes it), so each is computed once; they may import the types and pure helpers
defined here. ``features`` imports nothing from this package.
"""
