"""``fleetscope demo``: a simulated GPU training cluster, watched live, on one machine without a GPU.

It starts, each as its own process in a scratch directory:

1. the simulator's virtual nodes (``fleetscope simulate --live``), each serving ``/metrics`` on its
   own port, with one fault injected a minute or two in (``--fault``, ``--fault-at``);
2. a real Prometheus scraping them (file_sd) with the generated alerting rules, sending alerts to
3. a real Alertmanager, when their binaries are installed (Debian: ``prometheus``,
   ``prometheus-alertmanager``);
4. the live analysis service (``fleetscope serve``) reading that Prometheus.

Then it prints the web page's address and every finding and firing alert as it appears, and stops
all of them (children first in reverse order, then the scratch directory) on Ctrl-C, SIGTERM, at
``--duration`` or when one of them dies.

Without a Prometheus binary the service has nothing to read, so the demo says how to install one
and falls back to analyzing the virtual nodes itself: it scrapes them, keeps the samples in an
OpenMetrics recording and runs the same analyzers over it (no web page, no alerts in that mode).

Modules: :mod:`.cli` (arguments and the run, step by step), :mod:`.stack` (starting each of the four
parts), :mod:`.processes` (the child processes and signals), :mod:`.configs` (Prometheus and
Alertmanager configuration), :mod:`.net` (ports and HTTP probes), :mod:`.watcher` (printing findings
and alerts as they appear), :mod:`.direct` (the fallback without Prometheus).
"""
