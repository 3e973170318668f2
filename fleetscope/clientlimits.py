"""Limits per client address, so no client without credentials can starve the others.

A shared cap alone (the exporter's 64 connections, ``serve``'s 256, the web config's one
``rate_limit`` bucket) lets one address take all of it: 200 clients trickling a header line every
5 s held the exporter's 64 slots, 300 idle connections held ``serve``'s, 4 unauthenticated flooders
emptied the one bucket before authentication. Each address here gets its own share:
:class:`ClientSlots` counts its open connections, :class:`ClientBuckets` gives it its own token
bucket. Both are bounded in the addresses they remember.

Standard library only: the node agent imports this.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Callable
from typing import Protocol

#: Client addresses a :class:`ClientBuckets` remembers; the least recently seen is forgotten first.
MAX_CLIENTS = 4096


def per_client_share(total: int) -> int:
    """Connections one address may hold of ``total``: a quarter (a Prometheus HA pair, a person
    with curl and a spare), at least one."""
    return max(1, total // 4)


class ClientSlots:
    """Open connections per client address, at most ``per_client`` each. Thread-safe."""

    def __init__(self, per_client: int) -> None:
        self.per_client = per_client
        self._open: Counter[str] = Counter()
        self._lock = threading.Lock()

    def acquire(self, client: str) -> bool:
        with self._lock:
            if self._open[client] >= self.per_client:
                return False
            self._open[client] += 1
            return True

    def release(self, client: str) -> None:
        with self._lock:
            self._open[client] -= 1
            if self._open[client] <= 0:
                del self._open[client]

    def open(self, client: str) -> int:
        with self._lock:
            return self._open.get(client, 0)


class Limiter(Protocol):
    def allow(self) -> bool: ...


class ClientBuckets:
    """One rate limiter per client address (made by ``make``), for the :data:`MAX_CLIENTS` most
    recently seen addresses. Thread-safe."""

    def __init__(self, make: Callable[[], Limiter], max_clients: int = MAX_CLIENTS) -> None:
        self.make = make
        self.max_clients = max_clients
        self._buckets: OrderedDict[str, Limiter] = OrderedDict()
        self._lock = threading.Lock()

    def allow(self, client: str) -> bool:
        with self._lock:
            bucket = self._buckets.get(client)
            if bucket is None:
                bucket = self._buckets[client] = self.make()
                if len(self._buckets) > self.max_clients:
                    self._buckets.popitem(last=False)
            else:
                self._buckets.move_to_end(client)
        return bucket.allow()
