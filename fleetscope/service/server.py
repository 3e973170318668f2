"""The HTTP server's settings, and the one change to uvicorn's protocol: a request head deadline.

uvicorn closes a keep-alive connection that stays idle ``timeout_keep_alive`` seconds *after an
answer*, but a connection that is opened and then sends nothing, or sends its request head a byte at
a time, is kept until the client goes away. :class:`HeadDeadlineProtocol` closes any connection that
has not sent a whole request head within :data:`KEEP_ALIVE_S` of opening or of its last answer, so
idle or trickling clients hold nothing past it; :data:`MAX_CONNECTIONS` caps the rest, and one
client address holds at most a quarter of them (:func:`~fleetscope.clientlimits.per_client_share`):
its connections past that are answered 503 and closed at once, so 300 idle connections from one
address no longer make every API request 503.

Four addresses would still hold four quarters, so connections are also admitted in two pools
(:class:`~fleetscope.clientlimits.Admission`): every connection starts in the open pool of
:data:`MAX_CONNECTIONS`; when it is full, a newcomer takes the place of the connection that has
waited longest for a request head (idle or trickling), and only when every one has a request being
answered is it refused. With a token configured, a request that carries it moves its connection to
a second pool of the same size, which no unauthenticated connection can fill, and is never answered
uvicorn's "concurrency limit" 503 because of the open pool.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from fleetscope.clientlimits import Admission, ClientSlots, per_client_share
from fleetscope.service.auth import token_matches

#: Seconds a connection may stay without a whole request head (idle keep-alive included).
KEEP_ALIVE_S = 5
#: Connections of the open pool, and of the authenticated pool; uvicorn's own limit (a backstop)
#: is both together.
MAX_CONNECTIONS = 256
_BUSY = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"


class HeadDeadlineProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, closing connections that send no whole request head in time."""

    _head_timer: asyncio.TimerHandle | None = None
    #: Open connections per client address, shared by every connection of the process.
    clients = ClientSlots(per_client_share(MAX_CONNECTIONS))
    #: The open and authenticated pools, shared by every connection of the process.
    admission = Admission(MAX_CONNECTIONS, MAX_CONNECTIONS)
    #: The bearer token (see :mod:`fleetscope.service.auth`); None when the API is open.
    token: str | None = None
    _counted: str | None = None
    _admitted = False

    def _cut(self) -> None:
        if not self.transport.is_closing():
            self.transport.close()

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
        if not self.admission.admit(self, self._cut):
            transport.write(_BUSY)
            transport.close()
            return
        self._admitted = True
        self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        header = next((v for k, v in self.headers if k == b"authorization"), None)
        authenticated = self.token is not None and token_matches(header, self.token)
        limit = self.limit_concurrency
        if not self.admission.head_received(self, authenticated):
            self.limit_concurrency = 0  # uvicorn answers 503 (cut meanwhile, or the pool is full)
        elif authenticated:
            self.limit_concurrency = None  # the open pool's connections do not count against it
        try:
            super().on_headers_complete()
        finally:
            self.limit_concurrency = limit

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()
            self.admission.answered(self, self._cut)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._admitted:
            self.admission.release(self)
            self._admitted = False
        if self._counted is not None:
            self.clients.release(self._counted)
            self._counted = None
        super().connection_lost(exc)


def server_options(token: str | None = None) -> dict[str, Any]:
    """uvicorn's settings: quiet, no server header, the head deadline, connections capped; with a
    token, requests that carry it admitted from their own pool."""
    protocol: type[HeadDeadlineProtocol] = HeadDeadlineProtocol
    if token is not None:

        class TokenHeadDeadlineProtocol(HeadDeadlineProtocol):
            pass

        TokenHeadDeadlineProtocol.token = token
        protocol = TokenHeadDeadlineProtocol
    return {
        "http": protocol,
        "log_config": None,
        "log_level": "warning",
        "access_log": False,
        "server_header": False,
        "lifespan": "on",
        "timeout_keep_alive": KEEP_ALIVE_S,
        "limit_concurrency": 2 * MAX_CONNECTIONS,
    }
