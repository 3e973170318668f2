"""The addresses the demo prints: only pages that answer with what is installed.

Debian's ``prometheus`` package serves its old web UI under ``/classic/`` (``/alerts`` is a 404
there), upstream's serves ``/alerts``; Debian's ``prometheus-alertmanager`` ships without its web
application (``/`` is a page saying so) but with the HTTP API. Each address is probed before it is
printed, so what the demo prints opens.
"""

from __future__ import annotations

import urllib.error
import urllib.request

#: Debian's Alertmanager answers ``/`` with this instead of its web application.
NO_WEB_UI = "does not include a web"
PROMETHEUS_ALERT_PAGES = ("/alerts", "/classic/alerts")


def fetch_text(url: str, timeout: float = 3.0) -> str | None:
    """The body of a 200 answer, else None."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            if resp.status != 200:
                return None
            return resp.read(65536).decode("utf-8", "replace")
    except (OSError, urllib.error.URLError, ValueError):
        return None


def prometheus_alerts_page(base: str) -> str:
    """The first alerts page of ``base`` that answers (Debian: /classic/alerts); else the base."""
    for path in PROMETHEUS_ALERT_PAGES:
        if fetch_text(base + path) is not None:
            return base + path
    return base + "/"


def alertmanager_lines(base: str, prometheus_alerts: str) -> list[str]:
    """What to print for the Alertmanager: its web UI when installed, else its JSON API, with where the
    same alerts can be seen in a browser."""
    body = fetch_text(base + "/")
    if body is not None and NO_WEB_UI not in body:
        return [f"Alertmanager:  {base}/#/alerts"]
    return [
        f"Alertmanager:  {base}/api/v2/alerts (JSON; this package has no web UI:",
        f"               the same alerts are on {prometheus_alerts}, or: amtool --alertmanager.url={base} "
        "alert)",
    ]
