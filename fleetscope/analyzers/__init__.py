"""Analyzers: turn a window of series (its frames, from :mod:`fleetscope.window`) into findings."""
