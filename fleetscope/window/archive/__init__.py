"""The Parquet incident archive of ``fleetscope record``: its format (:mod:`.format`), its writer
(:mod:`.write`: from a recording or a Prometheus window) and its reader (:mod:`.read`: onto the
analysis grid, a time slice at a time)."""
