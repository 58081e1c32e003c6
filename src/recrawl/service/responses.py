"""How the service writes answers and refusals.

:class:`JSONResponse` writes every JSON answer (orjson: NaN and infinities as
null, as the CLI prints them). :func:`install_error_handlers` maps errors to
HTTP statuses in one place: a :class:`recrawl.Error` by its kind, a request
that did not validate to 422 with one ``{"field", "error"}`` per field. Any
other exception is a bug and a 500, never a 4xx that hides it.

======================================  ======
error                                   status
======================================  ======
:class:`~recrawl.NotFound`              404
:class:`~recrawl.InvalidDocument`       400
:class:`~recrawl.StoreFull`             507
:class:`~recrawl.StoreError`            503
another :class:`~recrawl.Error`         422
(invalid observation, config, hint...)
======================================  ======
"""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response

from recrawl._exceptions import Error, InvalidDocument, NotFound, StoreError, StoreFull

__all__ = ["JSONResponse", "install_error_handlers", "status_of"]


class JSONResponse(Response):
    """JSON via orjson (NaN and infinities become null)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)


_STATUS: tuple[tuple[type[Error], int], ...] = (
    (NotFound, 404),
    (InvalidDocument, 400),
    (StoreFull, 507),
    (StoreError, 503),
)


def status_of(exc: Error) -> int:
    """The HTTP status of a recrawl error (see the module's table)."""
    for kind, status in _STATUS:
        if isinstance(exc, kind):
            return status
    return 422


def install_error_handlers(app: FastAPI) -> None:
    """Answer :class:`recrawl.Error` and validation errors as the module says."""

    @app.exception_handler(Error)
    async def _recrawl_error(request: Request, exc: Error) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=status_of(exc))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"field": None, "error": f"body is not valid JSON ({e.get('ctx', {}).get('error')})"}
            if e["type"] == "json_invalid"
            else {
                "field": ".".join(str(p) for p in e["loc"] if p != "body") or None,
                "error": e["msg"],
            }
            for e in exc.errors()
        ]
        return JSONResponse({"detail": errors}, status_code=422)
