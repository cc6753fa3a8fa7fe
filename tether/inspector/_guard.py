"""What protects the inspector: the ``Host`` header, the access token and the CSRF token.

The server listens on 127.0.0.1 only, and a request must name it as its host (``127.0.0.1:PORT`` or
``localhost:PORT``): a page of another site that points its own name at 127.0.0.1 (DNS rebinding)
is refused before anything runs. With ``--token``, every request also carries the token, once as
``?token=`` (kept in a cookie for the session) or as the cookie. Every form that changes something
carries the CSRF token of this server's start (a fresh random value), compared in constant time.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Iterable
from http.cookies import SimpleCookie
from urllib.parse import parse_qs, urlencode

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["COOKIE", "Guard", "csrf_ok", "new_csrf_token"]

#: The cookie that keeps the access token for the browser session.
COOKIE = "tether_inspect_token"


def new_csrf_token() -> str:
    """A fresh CSRF token (one per server start)."""
    return secrets.token_urlsafe(32)


def csrf_ok(expected: str, form: dict[str, list[str]]) -> bool:
    """Whether a posted form carries exactly the server's CSRF token."""
    given = form.get("csrf", [""])
    return len(given) == 1 and hmac.compare_digest(given[0].encode(), expected.encode())


class Guard:
    """ASGI middleware: refuse a foreign ``Host`` (400) and, with a token, a request without it (401)."""

    def __init__(self, app: ASGIApp, *, hosts: Iterable[str], token: str | None) -> None:
        self.app = app
        self.hosts = frozenset(h.lower() for h in hosts)
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope) -> Response | None:
        headers = Headers(scope=scope)
        host = headers.get("host", "").lower()
        if host not in self.hosts:
            return PlainTextResponse(
                f"refused: the Host header {host!r} is not this inspector's ({', '.join(sorted(self.hosts))})",
                status_code=400,
            )
        if self.token is None:
            return None
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        given = query.get("token", [None])[0]
        if given is not None and hmac.compare_digest(given.encode(), self.token.encode()):
            # Keep it in a cookie and drop it from the address bar.
            rest = urlencode([(k, v) for k, vs in query.items() if k != "token" for v in vs])
            target = scope["path"] + (f"?{rest}" if rest else "")
            response = RedirectResponse(target, status_code=303)
            response.set_cookie(COOKIE, self.token, httponly=True, samesite="strict")
            return response
        cookie = SimpleCookie(headers.get("cookie", ""))
        kept = cookie[COOKIE].value if COOKIE in cookie else ""
        if kept and hmac.compare_digest(kept.encode(), self.token.encode()):
            return None
        return PlainTextResponse("refused: open the address tether inspect printed (with ?token=)", 401)
