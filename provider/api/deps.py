"""What the site's routes depend on, each a type a route names and FastAPI hands over: the
parts the site runs, a request's body within its bound, and the caller the chain lets send it.

A site keeps its parts on its app (`SiteParts`). A route names the part it serves (`LeaseSite`,
`Serving`, `Mesh`) and is given it, or its caller gets 404 from a site that runs no such part.
`Body` is the request's bytes, refused with 413 past MAX_BODY_BYTES before the rest is read.
`SignedBy(action)` and `LeaseSignedBy(action)` are the caller of a signed request: headers
`Swarm-Nonce`, `Swarm-Expires` and `Swarm-Signature` over the action, the site, the job, the
keccak of the body, the nonce and the expiry (`wire.request.SiteRequest`), which the site's
`Authorizer` lets through by the chain's rules (`provider.auth`) before anything runs, or
refuses with a status and one sentence.
"""

# No `from __future__ import annotations`: FastAPI reads a dependency's annotations as objects,
# and those of a callable instance's `__call__` it cannot resolve from strings.

from dataclasses import dataclass
from typing import Annotated, Protocol

from fastapi import Depends, Request
from starlette.types import Receive

from core.errors import Refused
from provider.agent import Agent
from provider.auth import JobView
from provider.mesh import HeadMesh
from provider.serving import MAX_BODY_BYTES, ServingLeases
from wire.request import SiteRequest, body_hash


class Authorizer(Protocol):
    """The signer of a request this site may serve now, and for a lease's request what the chain
    says of its job; raises `Refused` otherwise (`provider.site.ChainAuthorizer`). `spec_hash` is
    the keccak of the spec a lease's start brings, which the chain must pin for the job."""

    def __call__(self, request: SiteRequest, signature: bytes, spec_hash: bytes | None,
                 /) -> tuple[str, JobView | None]: ...


@dataclass(frozen=True)
class SiteParts:
    """What a site's API serves (docs/architecture.md §4). The routes of a part the site does not
    run answer 404: a site deployed before the serving escrow serves no models, one served without
    `--mesh-endpoint` runs no mesh, and a head may serve its mesh alone (`tests/test_mesh.py`)."""

    provider: str
    chain_id: int
    market: str
    agent: Agent | None = None  # its leases and the oracle's measurements, served to whom `authorize` lets
    authorize: Authorizer | None = None
    mesh: HeadMesh | None = None
    serving: ServingLeases | None = None


@dataclass(frozen=True)
class Caller:
    """Who sent a request the chain lets through."""

    signer: str


@dataclass(frozen=True)
class LeaseCaller:
    """Who sent a lease's request the chain lets through (the matcher, or the job's buyer), and
    what the chain says of the job."""

    signer: str
    job: JobView


def site_parts(request: Request) -> SiteParts:
    parts: SiteParts = request.app.state.parts
    return parts


def lease_site(request: Request) -> Agent:
    site = site_parts(request).agent
    if site is None:
        raise Refused(404, "This site runs no leases; it serves its mesh alone.")
    return site


def serving_leases(request: Request) -> ServingLeases:
    serving = site_parts(request).serving
    if serving is None:
        raise Refused(404, "This site serves no models.")
    return serving


def head_mesh(request: Request) -> HeadMesh:
    mesh = site_parts(request).mesh
    if mesh is None:
        raise Refused(404, "This site runs no mesh; serve it with --mesh-endpoint HOST:PORT.")
    return mesh


async def read_body(receive: Receive, limit: int) -> bytes:
    """An ASGI request's body; past `limit` bytes, a 413 before the rest is read."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Refused(400, "The caller went away before its request's body arrived.")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise Refused(413, f"The body is over {limit} bytes.")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def request_body(request: Request) -> bytes:
    return await read_body(request.receive, MAX_BODY_BYTES)


Parts = Annotated[SiteParts, Depends(site_parts)]
LeaseSite = Annotated[Agent, Depends(lease_site)]
Serving = Annotated[ServingLeases, Depends(serving_leases)]
Mesh = Annotated[HeadMesh, Depends(head_mesh)]
Body = Annotated[bytes, Depends(request_body)]


def authorized(request: Request, action: str, job_id: int, body: bytes,
               spec_hash: bytes | None = None) -> tuple[str, JobView | None]:
    """The signer of `request` (`action` about job `job_id`, with `body`) and, for a lease's
    request, what the chain says of the job, if the site's `Authorizer` lets it through; `Refused`
    otherwise. It asks the chain: called from a dependency FastAPI runs in its thread pool."""
    parts = site_parts(request)
    if parts.authorize is None:
        raise Refused(404, "This site runs no leases; it serves its mesh alone.")
    try:
        nonce = int(request.headers["swarm-nonce"])
        expires = int(request.headers["swarm-expires"])
        signature = bytes.fromhex(request.headers["swarm-signature"].removeprefix("0x"))
    except (KeyError, ValueError):
        raise Refused(401, "The request is not signed: send Swarm-Nonce, Swarm-Expires and "
                           "Swarm-Signature.") from None
    signed = SiteRequest(action, parts.provider, job_id, body_hash(body), nonce, expires)
    return parts.authorize(signed, signature, spec_hash)


def lease_caller(request: Request, action: str, job_id: int, body: bytes,
                 spec_hash: bytes | None = None) -> LeaseCaller:
    """`authorized`, for a lease's request: the job must be one the chain holds."""
    signer, job = authorized(request, action, job_id, body, spec_hash)
    if job is None:  # authorize read it a moment before: the chain moved under it
        raise Refused(404, f"Job {job_id} does not exist on chain.")
    return LeaseCaller(signer, job)


@dataclass(frozen=True)
class SignedBy:
    """A route's dependency: the caller of a request about no job (the oracle's, a serving
    deploy), whom the chain lets `action`."""

    action: str

    def __call__(self, request: Request, body: Body) -> Caller:
        signer, _ = authorized(request, self.action, 0, body)
        return Caller(signer)


@dataclass(frozen=True)
class LeaseSignedBy:
    """A route's dependency: the caller of a request about the lease of the path's `{job_id}`,
    whom the chain lets `action`, with what the chain says of the job."""

    action: str

    def __call__(self, request: Request, job_id: int, body: Body) -> LeaseCaller:
        return lease_caller(request, self.action, job_id, body)
