"""What wraps every request: the security headers, the bearer token (and its place in the OpenAPI
document), and the refusal of unknown query parameters."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response

from fleetscope.service.auth import OPEN_PATHS, BearerTokenMiddleware

SECURITY_HEADERS = [
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        b"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    (b"cache-control", b"no-store"),
]


class SecurityHeaders:
    """Adds the security headers to every answer (pure ASGI: cheap); a header the app already set
    is replaced, never doubled."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                own = {k for k, _ in SECURITY_HEADERS}
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in own]
                message["headers"] = kept + SECURITY_HEADERS
            await send(message)

        await self.app(scope, receive, send_with_headers)


async def reject_unknown_query(request: Request) -> None:
    """An unknown query parameter is an error (a typo like ``?nodes=`` must not silently match all).

    An app-wide dependency rather than a middleware: it needs the matched route's parameters.
    """
    if not request.url.query:
        return
    route = request.scope.get("route")
    allowed = {p.alias for p in route.dependant.query_params} if route is not None else set()
    unknown = sorted(set(request.query_params) - allowed)
    if unknown:
        raise RequestValidationError(
            [
                {
                    "loc": ["query", name],
                    "msg": "unknown query parameter",
                    "type": "extra_forbidden",
                    "input": None,
                }
                for name in unknown
            ]
        )


#: Characters of a refused value repeated in a 422 (FastAPI echoes the whole value: a 60 KB job id
#: came back whole).
ECHO_CHARS = 200


def _short(value: object) -> object:
    if isinstance(value, str) and len(value) > ECHO_CHARS:
        return f"{value[:ECHO_CHARS]}... ({len(value):,} characters)"
    return value


async def short_validation_error(request: Request, exc: Exception) -> Response:
    """FastAPI's 422 for a refused parameter, with every value it repeats cut to :data:`ECHO_CHARS`."""
    errors = exc.errors() if isinstance(exc, RequestValidationError) else []
    detail = []
    for error in errors:
        item = {k: v for k, v in error.items() if k not in ("input", "ctx", "url")}
        item["input"] = _short(error.get("input"))
        if isinstance(error.get("ctx"), dict):
            item["ctx"] = {k: _short(str(v)) for k, v in error["ctx"].items()}
        detail.append(item)
    return JSONResponse(jsonable_encoder({"detail": detail}), status_code=422)


def add_middleware(app: FastAPI, token: str | None) -> None:
    """With a token, the token check (so a 401 is answered before any route runs) and the bearer
    scheme in the OpenAPI document; the security headers outermost, so every answer carries them,
    the token check's 401 included. (The middleware added last is the outermost.)"""
    app.add_exception_handler(RequestValidationError, short_validation_error)
    if token:
        _declare_bearer(app)
        app.add_middleware(BearerTokenMiddleware, token=token)
    app.add_middleware(SecurityHeaders)


def _declare_bearer(app: FastAPI) -> None:
    """Say in the OpenAPI schema that every operation but the open ones needs the bearer token."""

    def openapi() -> dict:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title, version=app.version, description=app.description, routes=app.routes
            )
            schema.setdefault("components", {})["securitySchemes"] = {
                "bearer": {"type": "http", "scheme": "bearer"}
            }
            schema["security"] = [{"bearer": []}]
            for path, ops in schema["paths"].items():
                for op in ops.values():
                    if path in OPEN_PATHS:
                        op["security"] = []
                    else:
                        op.setdefault("responses", {})["401"] = {"description": "missing or wrong token"}
            app.openapi_schema = schema
        return app.openapi_schema

    # FastAPI's documented way to extend the schema is to replace app.openapi; mypy forbids
    # assigning to a method, so the one ignore here.
    app.openapi = openapi  # type: ignore[method-assign]
