"""How the site answers a request it cannot serve: `{"error": one sentence}`, with the status the
error's class carries (`core.errors`).

A `SwarmError` is answered with its class's status and its sentence: a caller's bad input
(`UserError`, `InvalidJob`) 400, a refusal (`Refused`) its own status, a site or party not
ready (`Unavailable`) 503, a party that broke its promise (`Fault`) 500. The site's own chain
node is the site's business: its errors keep their status, and the caller gets a sentence
without the node's address (which may hold a key), the detail going to this module's log. A
request the API cannot read (a path's job id that is not a number) is 400, a route it does not
have 404 or 405. Anything else is a bug of the site's: 500 and a sentence that tells nothing
of it, its traceback in the site's log (this module's logger), never in the answer.
"""

from __future__ import annotations

import json
import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.errors import SwarmError
from ledger.errors import ChainUnavailable, RpcError

log = logging.getLogger(__name__)


def answer(exc: SwarmError) -> tuple[int, str]:
    """The status and the sentence `exc` is answered with."""
    if isinstance(exc, ChainUnavailable):
        log.info("the site's chain node did not answer: %s", exc)
        return exc.status, "The site cannot reach its chain node now; ask again shortly."
    if isinstance(exc, RpcError):
        log.info("the site's chain node refused %s: %s", exc.method, exc)
        return exc.status, (f"The site's chain node refused its {exc.method}; the site's operator's log "
                            "has why.")
    return exc.status, str(exc)


def failed(path: str) -> tuple[int, str]:
    """A bug's status and sentence; its traceback logged (call it while handling the exception)."""
    log.exception("the site failed to serve %s", path)
    return 500, f"The site failed to serve {path}; its operator's log has the details."


def body(sentence: str) -> bytes:
    return json.dumps({"error": sentence}).encode()


def answer_errors(app: FastAPI) -> None:
    """Makes `app` answer every error as this module says."""
    app.exception_handler(SwarmError)(_swarm_error)
    app.exception_handler(RequestValidationError)(_unreadable)
    app.exception_handler(HTTPException)(_no_route)
    app.add_middleware(AnswerBugs)


async def _swarm_error(_request: Request, exc: SwarmError) -> JSONResponse:
    status, sentence = answer(exc)
    return JSONResponse({"error": sentence}, status_code=status)


async def _unreadable(_request: Request, exc: RequestValidationError) -> JSONResponse:
    first = exc.errors()[0] if exc.errors() else {}
    where = " ".join(str(part) for part in first.get("loc", ()))
    return JSONResponse({"error": f"The request's {where or 'input'} is not valid: "
                                  f"{str(first.get('msg', 'unreadable')).rstrip('.')}."}, status_code=400)


async def _no_route(request: Request, exc: HTTPException) -> JSONResponse:
    return JSONResponse({"error": f"The site has no {request.method} {request.url.path} ({exc.detail})."},
                        status_code=exc.status_code, headers=exc.headers)


class AnswerBugs:
    """ASGI middleware: an exception no handler answered is a bug, answered `failed`. Starlette's
    own last resort would raise it again after answering, for the server to log a second time."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception:
            status, sentence = failed(scope["path"])
            if started:  # too late for an answer of its own: the connection ends
                raise
            await JSONResponse({"error": sentence}, status_code=status)(scope, receive, send)
