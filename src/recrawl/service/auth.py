"""Who may call a route: the write token, the read token, and their order
before the body.

Writes need ``Authorization: Bearer <token>`` with the write token; reads need
the read token or the write token when a read token is configured, and
nothing otherwise. The check runs before a body is read or refused, so a
client without the token gets 401 whatever it sent.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request
from fastapi.params import Depends as DependsParam
from fastapi.responses import Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from recrawl.service.body import refuse_too_large, refuse_undecodable

__all__ = ["Guards", "JSONBodyRoute", "TokenCheck"]

_bearer = HTTPBearer(auto_error=False, description="The write token, or the read token.")
Creds = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def _matches(given: str, token: str | None) -> bool:
    return token is not None and secrets.compare_digest(given.encode(), token.encode())


def _unauthorized(msg: str) -> HTTPException:
    return HTTPException(401, msg, headers={"WWW-Authenticate": "Bearer"})


class TokenCheck:
    """A route's token check, as a dependency: 401 without the right bearer
    token; once it passes, 413 or 415 for a body the middleware left unread
    (:func:`refuse_too_large`, :func:`refuse_undecodable`). The token comes
    first: a 413 or 415 would tell a stranger how bodies are read.

    ``write``: the write token only. Otherwise the read token or the write
    token, or none when no read token is configured (the dashboard at ``/``
    may give it as ``?token=``). Async: checked on the event loop, not in a
    worker thread (it only compares tokens). :class:`JSONBodyRoute` runs it
    before reading the body as well.
    """

    def __init__(self, write_token: str, read_token: str | None, *, write: bool) -> None:
        self.write_token = write_token
        self.read_token = read_token
        self.write = write

    async def __call__(self, request: Request, creds: Creds) -> None:
        if self.write:
            if creds is None:
                raise _unauthorized("missing bearer token")
            if not _matches(creds.credentials, self.write_token):
                raise _unauthorized("wrong token")
        elif self.read_token is not None:
            given = creds.credentials if creds is not None else None
            if given is None and request.url.path == "/":
                given = request.query_params.get("token")
            if given is None:
                raise _unauthorized("missing bearer token")
            if not (_matches(given, self.read_token) or _matches(given, self.write_token)):
                raise _unauthorized("wrong token")
        refuse_too_large(request.scope)
        refuse_undecodable(request.scope)


@dataclass(frozen=True)
class Guards:
    """The dependencies of the routes: ``write`` (the write token) and ``read``."""

    write: DependsParam
    read: DependsParam

    @classmethod
    def of(cls, write_token: str, read_token: str | None) -> Guards:
        return cls(
            write=Depends(TokenCheck(write_token, read_token, write=True)),
            read=Depends(TokenCheck(write_token, read_token, write=False)),
        )


class JSONBodyRoute(APIRoute):
    """A route whose body is read as JSON whatever its ``Content-Type`` says.

    ``curl -d '{...}'`` sends ``application/x-www-form-urlencoded``, which FastAPI
    would otherwise hand to the model as raw bytes (a 422 "valid dictionary"
    error). A body that is not JSON is still a 422 (``body is not valid JSON``).
    Safe for the write routes: they need a bearer token, which a browser never
    sends cross-site without a CORS preflight.

    The route's :class:`TokenCheck` runs before its body is read (FastAPI reads
    a body parameter before it solves the dependencies): without the token a
    client gets 401 whatever it sent, not the 400, 413 or 422 of its body.
    """

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        checks = [d.dependency for d in self.dependencies if isinstance(d.dependency, TokenCheck)]

        async def handle(request: Request) -> Response:
            if checks:
                creds = await _bearer(request)
                for check in checks:
                    await check(request, creds)
            scope = dict(request.scope)
            headers = [(k, v) for k, v in scope.get("headers", ()) if k != b"content-type"]
            scope["headers"] = [*headers, (b"content-type", b"application/json")]
            return await handler(Request(scope, request.receive))

        return handle
