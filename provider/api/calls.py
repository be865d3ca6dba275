"""A model's calls, served in front of the site's FastAPI app (docs/architecture.md §12)."""

from __future__ import annotations

import re

from starlette.types import ASGIApp, Receive, Scope, Send

from core.errors import SwarmError
from provider.api.deps import read_body
from provider.api.errors import answer, body, failed
from provider.serving import MAX_BODY_BYTES, ServingLeases

_CALL = re.compile(r"/v1/serving/([A-Za-z0-9_-]{1,64})/(predict|v1/completions)")


class ServingCalls:
    """The site's app with a model's calls taken straight to `ServingLeases.forward`: the one path
    buyers call thousands of times a second, past FastAPI's routing and middleware (half the time
    a call spent in the site, measured: BENCHMARKS.md). Its errors are answered as the app's
    (`provider.api.errors`): a `SwarmError` with its class's status and sentence, anything else
    500 with the details in the log. Every other request goes to the app."""

    def __init__(self, app: ASGIApp, serving: ServingLeases) -> None:
        self.app = app
        self.serving = serving

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = _CALL.fullmatch(scope["path"]) if scope["type"] == "http" and scope["method"] == "POST" \
            else None
        if match is None:
            await self.app(scope, receive, send)
            return
        lease, route = match.groups()
        headers: dict[str, str] = {}
        try:
            request = await read_body(receive, MAX_BODY_BYTES)
            receipt = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"swarm-receipt"), None)
            status, answered, headers = await self.serving.forward(lease, route, request, receipt)
        except SwarmError as exc:
            status, sentence = answer(exc)
            answered = body(sentence)
        except Exception:  # noqa: BLE001 -- a bug: logged by `failed`, the caller gets one sentence
            status, sentence = failed(scope["path"])
            answered = body(sentence)
        await send({"type": "http.response.start", "status": status, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(answered)).encode()),
            *((k.lower().encode(), v.encode()) for k, v in headers.items())]})
        await send({"type": "http.response.body", "body": answered})
