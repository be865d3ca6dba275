"""A job's lease (`/v1/leases/{job_id}`): the matcher starts and stops it, the matcher or the
job's buyer reads its status, its log and its result; each request signed, and served only as
the chain allows (`provider.auth`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import PlainTextResponse

from core.errors import Refused
from provider.api.deps import Body, LeaseCaller, LeaseSignedBy, LeaseSite, lease_caller
from wire.request import body_hash

router = APIRouter(prefix="/v1/leases/{job_id}")


@dataclass(frozen=True)
class LeaseOrder:
    """What a lease starts from: the job's spec as posted (its keccak is the chain's spec hash),
    and the spec of the job whose result it builds on, for a `job:<id>` model."""

    spec: bytes
    prior: bytes | None


def lease_order(body: Body) -> LeaseOrder:
    try:
        raw = json.loads(body)
        prior = raw["prior"].encode() if raw.get("prior") is not None else None
        return LeaseOrder(raw["spec"].encode(), prior)
    except (ValueError, KeyError, TypeError, AttributeError):
        raise Refused(400, 'A lease starts from a JSON body {"spec": "...", "prior": "..." or '
                           "null}.") from None


Order = Annotated[LeaseOrder, Depends(lease_order)]


def starter(request: Request, job_id: int, body: Body, order: Order) -> LeaseCaller:
    """The matcher, starting the lease of a job the chain assigned here, with the spec it pins."""
    return lease_caller(request, "lease.start", job_id, body, spec_hash=body_hash(order.spec))


Starter = Annotated[LeaseCaller, Depends(starter)]
Reader = Annotated[LeaseCaller, Depends(LeaseSignedBy("lease.status"))]
LogReader = Annotated[LeaseCaller, Depends(LeaseSignedBy("lease.logs"))]
ResultReader = Annotated[LeaseCaller, Depends(LeaseSignedBy("lease.result"))]
Stopper = Annotated[LeaseCaller, Depends(LeaseSignedBy("lease.stop"))]


@router.post("")
def start(job_id: int, order: Order, caller: Starter, site: LeaseSite) -> dict[str, Any]:
    """Starts the job's lease, once: starting it again returns the lease that exists."""
    return site.start(caller.job, job_id, order.spec, order.prior).as_dict()


@router.get("")
def status(job_id: int, caller: Reader, site: LeaseSite) -> dict[str, Any]:
    return site.status(caller.job, job_id).as_dict()


@router.get("/logs", response_model=None)
def logs(job_id: int, caller: LogReader, site: LeaseSite,
         offset: int | None = None) -> dict[str, Any] | PlainTextResponse:
    """The last of what the lease printed, as text; with `?offset=N`, for a follower, what it
    printed from byte N on, as JSON (`Agent.log_since`)."""
    if offset is not None:
        return site.log_since(caller.job, job_id, offset)
    return PlainTextResponse(site.logs(caller.job, job_id))


@router.get("/result")
def result(job_id: int, caller: ResultReader, site: LeaseSite) -> dict[str, Any]:
    """The succeeded lease's status, with the provider's signature over its result."""
    status = site.status(caller.job, job_id)
    if status.state != "succeeded":
        raise Refused(409, f"Job {job_id}'s lease is {status.state}; it has no result.")
    return status.as_dict()


@router.post("/stop")
def stop(job_id: int, caller: Stopper, site: LeaseSite) -> dict[str, Any]:
    return site.stop(caller.job, job_id).as_dict()
