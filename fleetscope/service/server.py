"""The HTTP server's settings, and the one change to uvicorn's protocol: a request head deadline.

uvicorn closes a keep-alive connection that stays idle ``timeout_keep_alive`` seconds *after an
answer*, but a connection that is opened and then sends nothing, or sends its request head a byte at
a time, is kept until the client goes away. :class:`HeadDeadlineProtocol` closes any connection that
has not sent a whole request head within :data:`KEEP_ALIVE_S` of opening or of its last answer, so
idle or trickling clients hold nothing past it; :data:`MAX_CONNECTIONS` caps the rest, and one
client address holds at most a quarter of them (:func:`~fleetscope.clientlimits.per_client_share`):
its connections past that are answered 503 and closed at once, so 300 idle connections from one
address no longer make every API request 503.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from fleetscope.clientlimits import ClientSlots, per_client_share

#: Seconds a connection may stay without a whole request head (idle keep-alive included).
KEEP_ALIVE_S = 5
#: Connections served at once; past it uvicorn answers 503 instead of queueing without bound.
MAX_CONNECTIONS = 256
_BUSY = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


class HeadDeadlineProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, closing connections that send no whole request head in time."""

    _head_timer: asyncio.TimerHandle | None = None
    #: Open connections per client address, shared by every connection of the process.
    clients = ClientSlots(per_client_share(MAX_CONNECTIONS))
    _counted: str | None = None

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(self.timeout_keep_alive, self._head_timeout)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timeout(self) -> None:
        self._head_timer = None
        if not self.transport.is_closing():
            self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        client = self.client[0] if self.client else ""
        if not self.clients.acquire(client):
            transport.write(_BUSY)
            transport.close()
            return
        self._counted = client
        self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._counted is not None:
            self.clients.release(self._counted)
            self._counted = None
        super().connection_lost(exc)


def server_options() -> dict[str, Any]:
    """uvicorn's settings: quiet, no server header, the head deadline, connections capped."""
    return {
        "http": HeadDeadlineProtocol,
        "log_config": None,
        "log_level": "warning",
        "access_log": False,
        "server_header": False,
        "lifespan": "on",
        "timeout_keep_alive": KEEP_ALIVE_S,
        "limit_concurrency": MAX_CONNECTIONS,
    }
