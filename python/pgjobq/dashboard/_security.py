"""What keeps the dashboard to its owner: where it may listen, Basic auth, security headers, CSRF."""

from __future__ import annotations

import base64
import binascii
import ipaddress
import secrets
from collections.abc import Mapping
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from pgjobq._errors import ConfigurationError

__all__ = [
    "CSRF_COOKIE",
    "CSRF_FIELD",
    "BasicAuth",
    "SecurityHeaders",
    "check_bind",
    "csrf_refusal",
    "is_loopback",
    "new_token",
]

CSRF_COOKIE = "pgjobq_csrf"
CSRF_FIELD = "csrf"

HEADERS: Mapping[str, str] = {
    "content-security-policy": "default-src 'self'; frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
}


def is_loopback(host: str) -> bool:
    """Whether host names this machine only: localhost, or a loopback address (127.0.0.0/8, ::1)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, user: str | None, password: str | None, no_auth: bool) -> None:
    """ConfigurationError unless listening on host is safe: loopback, with a user and password, or no_auth."""
    if not isinstance(host, str) or not host:
        raise ConfigurationError(f"host must be a host name or an address, got {host!r}")
    if (user is None) != (password is None) or user == "" or password == "":
        raise ConfigurationError(
            "the dashboard's user and password go together: give both (--user and --password) or neither"
        )
    if user is not None and ":" in user:
        raise ConfigurationError(f"the dashboard's user must not contain ':', got {user!r}")
    if not is_loopback(host) and user is None and not no_auth:
        raise ConfigurationError(
            f"refusing to serve the dashboard on {host}, which is not a loopback address, without "
            "authentication: give a user and password (--user, --password), or --no-auth if something "
            "else in front of it authenticates"
        )


def new_token() -> str:
    return secrets.token_urlsafe(32)


class BasicAuth:
    """ASGI middleware: every HTTP request must carry the user and password (compared in constant time)."""

    def __init__(self, app: ASGIApp, user: str, password: str) -> None:
        self.app = app
        self.user = user.encode()
        self.password = password.encode()

    def _allowed(self, headers: Headers) -> bool:
        scheme, _, encoded = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            decoded = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError):
            return False
        user, colon, password = decoded.partition(b":")
        # both compared, always, so that timing tells nothing about which one was wrong
        user_ok = secrets.compare_digest(user, self.user)
        password_ok = secrets.compare_digest(password, self.password)
        return bool(colon) and user_ok and password_ok

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._allowed(Headers(scope=scope)):
            await self.app(scope, receive, send)
            return
        response = PlainTextResponse(
            "authentication required\n",
            status_code=401,
            headers={"www-authenticate": 'Basic realm="pgjobq dashboard", charset="UTF-8"', **HEADERS},
        )
        await response(scope, receive, send)


class SecurityHeaders:
    """ASGI middleware: the Content-Security-Policy and friends on every response; pages never cached."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        static = str(scope.get("path", "")).startswith("/static/")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                present = {name.lower() for name, _ in headers}
                for name, value in HEADERS.items():
                    if name.encode() not in present:
                        headers.append((name.encode(), value.encode()))
                if not static and b"cache-control" not in present:
                    headers.append((b"cache-control", b"no-store"))
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _own_host(request: Request) -> str:
    # the host and port only: behind a reverse proxy that ends TLS, the browser's scheme is not ours
    return request.headers.get("host", "").lower()


def csrf_refusal(request: Request, submitted: str | None) -> str | None:
    """Why a POST must be refused as a possible cross-site request forgery, or None to let it through.

    Three checks, all of which must pass: Sec-Fetch-Site, when the browser sends it, is same-origin;
    Origin, when sent, is the dashboard's own; and the form's token equals the cookie's (double
    submit: a page of another site can neither read the cookie nor, SameSite=Strict, have it sent).
    """
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site != "same-origin":
        return f"cross-site request refused (Sec-Fetch-Site: {fetch_site})"
    origin = request.headers.get("origin")
    if origin is not None:
        parts = urlsplit(origin)
        if origin == "null" or parts.netloc.lower() != _own_host(request):
            return "cross-site request refused (Origin is not this dashboard)"
    cookie = request.cookies.get(CSRF_COOKIE)
    if not cookie or not submitted or not secrets.compare_digest(cookie.encode(), submitted.encode()):
        return "request refused: its form token does not match (reload the page and try again)"
    return None
