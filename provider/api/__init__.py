"""A provider's site over HTTPS (docs/architecture.md §4): the agent's API, a router per area.

    info      GET /v1/info                      anyone: whose site, which deployment, what it has
    leases    /v1/leases/{job_id}[/…]           the matcher, or the job's buyer
    oracle    /v1/probe, /v1/challenge/…        a member of the oracle committee
    serving   /v1/serving[/…]                   buyers with a deposit; a model's calls in front
                                                of the app (`calls.ServingCalls`)
    mesh      /v1/mesh/…                        the site's own machines, with its join secret

A route is a small typed function; what it needs it names by type and FastAPI hands it over
(`deps`): the site's parts, the request's body within its bound, and the caller, whose
signature the chain's rules (`provider.auth`) let through before anything runs. An error is
answered by its class (`errors`): a refusal its status and one sentence, a caller's bad input
400, a site not ready 503, a bug 500 with its traceback in the site's log only.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.types import ASGIApp

from provider.api import info, leases, mesh, oracle, serving
from provider.api.calls import ServingCalls
from provider.api.deps import Authorizer, SiteParts
from provider.api.errors import answer_errors
from provider.api.server import listen, serve

__all__ = ["Authorizer", "ServingCalls", "SiteParts", "listen", "make_app", "serve"]


def make_app(parts: SiteParts) -> ASGIApp:
    """The site's API over `parts`: each area's routes, a part the site does not run answering
    404; with serving leases, a model's calls taken in front of the app (`ServingCalls`)."""
    app = FastAPI(title="Swarm site", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.parts = parts
    answer_errors(app)
    for area in (info, leases, oracle, serving, mesh):
        app.include_router(area.router)
    return app if parts.serving is None else ServingCalls(app, parts.serving)
