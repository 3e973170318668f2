"""Optional bearer-token protection for every endpoint but ``/healthz``.

The token comes from ``--token-file`` or the ``FLEETSCOPE_TOKEN`` environment variable. Clients send
``Authorization: Bearer <token>``. A browser cannot add a header to a page load, so HTTP Basic with
the token as the password (any user name) is accepted too: the browser asks once and then sends the
same credentials with the page's own API calls. Comparison is constant-time.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send

from fleetscope.errors import FleetscopeError

TOKEN_ENV = "FLEETSCOPE_TOKEN"
#: Paths served without a token: liveness only (it reveals nothing about the cluster).
OPEN_PATHS = frozenset({"/healthz"})


def load_token(token_file: str | Path | None, environ: dict[str, str] | None = None) -> str | None:
    """The configured token, or None when the API is open. A file wins over the environment."""
    env = os.environ if environ is None else environ
    if token_file:
        path = Path(token_file)
        try:
            token = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise FleetscopeError(f"cannot read --token-file {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError:
            raise FleetscopeError(f"--token-file {path} is not UTF-8 text") from None
        if not token:
            raise FleetscopeError(f"--token-file {path} is empty")
        return token
    token = env.get(TOKEN_ENV, "").strip()
    return token or None


def _presented_token(header: bytes) -> bytes | None:
    scheme, _, value = header.strip().partition(b" ")
    scheme = scheme.lower()
    value = value.strip()
    if scheme == b"bearer":
        return value
    if scheme == b"basic":
        try:
            decoded = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return None
        _, sep, password = decoded.partition(b":")
        return password if sep else None
    return None


def token_matches(header: bytes | None, token: str) -> bool:
    if not header:
        return False
    presented = _presented_token(header)
    return presented is not None and hmac.compare_digest(presented, token.encode("utf-8"))


class BearerTokenMiddleware:
    """Pure ASGI middleware (cheap: no request object built) guarding every path but OPEN_PATHS."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        header = next((v for k, v in scope["headers"] if k == b"authorization"), None)
        if token_matches(header, self.token):
            await self.app(scope, receive, send)
            return
        body = b'{"detail":"missing or wrong bearer token"}'
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b'Bearer realm="fleetscope"'),
                    (b"www-authenticate", b'Basic realm="fleetscope", charset="UTF-8"'),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
