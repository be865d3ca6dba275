"""A site's serving leases (docs/architecture.md §12): a buyer with a deposit deploys a model
(`POST /v1/serving`, signed) and stops it (signed); anyone lists them and reads one; a buyer
asks for its claim and sends the voucher that pays it, which its own signature authorizes. A
model's calls do not come here: `ServingCalls` takes them in front of the app."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request

from core.errors import Refused
from ledger.errors import InvalidInput
from ledger.serving import Voucher
from ledger.units import parse_address
from provider.api.deps import Body, Caller, Serving, SignedBy, authorized
from provider.serving import NAME_PREFIX

router = APIRouter(prefix="/v1/serving")


def stopper(request: Request, lease: str, body: Body) -> Caller:
    """Anyone, stopping a serving lease: the site stops it for its own buyer only. The request
    names the lease by its number."""
    number = lease.removeprefix(NAME_PREFIX)
    signer, _ = authorized(request, "serve.stop", int(number) if number.isdigit() else 0, body)
    return Caller(signer)


Deployer = Annotated[Caller, Depends(SignedBy("serve.deploy"))]
Stopper = Annotated[Caller, Depends(stopper)]


@router.post("")
def deploy(buyer: Deployer, body: Body, serving: Serving) -> dict[str, Any]:
    """A buyer with a deposit deploys a model: the body is its serving order (`compute.serve_order`)."""
    return serving.deploy(buyer.signer, body)


@router.get("")
def leases(serving: Serving) -> dict[str, Any]:
    """The site's serving leases: what each serves, at what price, until when."""
    return {"leases": serving.leases()}


@router.get("/{lease}")
def info(lease: str, serving: Serving) -> dict[str, Any]:
    return serving.info(lease)


@router.post("/{lease}/stop")
def stop(lease: str, caller: Stopper, serving: Serving) -> dict[str, Any]:
    return serving.stop(caller.signer, lease)


@router.post("/claim")
def claim(body: Body, serving: Serving) -> dict[str, Any]:
    """What the site asks a buyer to sign: its previous voucher and its receipts charged since."""
    try:
        buyer = parse_address(json.loads(body)["buyer"], "buyer")
    except (ValueError, KeyError, TypeError, InvalidInput):
        raise Refused(400, 'A claim\'s body is {"buyer": "0x…"}.') from None
    book = serving.book
    return book.claim(buyer).as_dict() | {"owed": {k: str(v) for k, v in book.owed(buyer).items()}}


@router.post("/voucher")
def voucher(body: Body, serving: Serving) -> dict[str, Any]:
    """A buyer's voucher for a claim: {"voucher": {buyer, provider, cumulative, signature},
    "receipts": [nonce (hex), ...]}."""
    try:
        raw = json.loads(body)
        signed = Voucher.from_dict(raw["voucher"])
        nonces = [int(n, 16) for n in raw["receipts"]]
    except (ValueError, KeyError, TypeError, AttributeError, InvalidInput):
        raise Refused(400, 'A voucher\'s body is {"voucher": {"buyer", "provider", "cumulative", '
                           '"signature"}, "receipts": ["<nonce hex>", ...]}.') from None
    return {"buyer": signed.buyer, "cumulative": str(serving.book.aggregate(signed, nonces))}
