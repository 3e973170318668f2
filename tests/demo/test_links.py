"""The addresses the demo prints are probed: an upstream Prometheus' /alerts and Alertmanager's web UI
are printed as they are; where they are missing (Debian's packages: tests/demo/test_demo.py runs
them), what works instead. Here a small HTTP server plays the upstream servers."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler

from fleetscope.demo.links import NO_WEB_UI, alertmanager_lines, prometheus_alerts_page
from tests.support.http import http_server


@contextmanager
def _server(pages: dict[str, str]) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.end_headers()
            self.wfile.write((body or "404 page not found").encode())

        def log_message(self, *args: object) -> None:
            pass

    with http_server(Handler) as hostport:
        yield f"http://{hostport}"


def test_upstream_prometheus_and_alertmanager_pages_are_printed_as_they_are() -> None:
    with _server({"/alerts": "<html>alerts</html>", "/": "<html><div id=app></div></html>"}) as base:
        assert prometheus_alerts_page(base) == base + "/alerts"
        assert alertmanager_lines(base, base + "/alerts") == [f"Alertmanager:  {base}/#/alerts"]


def test_debian_pages_are_replaced_by_what_works() -> None:
    debian_am = f"<p>The Debian package of the alertmanager {NO_WEB_UI} application.</p>"
    with _server({"/classic/alerts": "<html>alerts</html>", "/": debian_am}) as base:
        page = prometheus_alerts_page(base)
        assert page == base + "/classic/alerts"
        lines = alertmanager_lines(base, page)
        assert lines[0] == f"Alertmanager:  {base}/api/v2/alerts (JSON; this package has no web UI:"
        assert f"the same alerts are on {page}" in lines[1] and "amtool" in lines[1]


def test_nothing_answering_falls_back_to_the_base_and_the_api() -> None:
    with _server({}) as base:
        assert prometheus_alerts_page(base) == base + "/"
        assert alertmanager_lines(base, base + "/")[0].startswith(f"Alertmanager:  {base}/api/v2/alerts")
