"""The window layer: where the analyzers' data comes from, and the one grid it is put on.

Below the analyzers, above the base modules (contract, times, errors): nothing here imports
``fleetscope.analyzers``, the service or a CLI module.

* :mod:`.frames`, :mod:`.grid`, :mod:`.samples`: the frames (time x series arrays on one grid),
  the grid rule, the step and phase of a recording's grid, the typical sample spacing, the checks
  of a window and of a grid's size;
* :mod:`.openmetrics`: the recorded OpenMetrics reader;
* :mod:`.prometheus`: the Prometheus HTTP client (SigV4, whole-request deadline, answer limit,
  decoding) and the range fetch; :mod:`.sliding`: the service's window kept between cycles;
* :mod:`.archive`: the Parquet archive's format, writer and reader;
* :mod:`.sources`: the :class:`~fleetscope.window.sources.Source` protocol and its three
  implementations, chosen once by :func:`~fleetscope.window.sources.open_source`.
"""
