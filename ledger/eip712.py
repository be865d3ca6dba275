"""EIP-712 typed-data messages, as eth-account signs them."""

from __future__ import annotations

from typing import Any

DOMAIN_TYPE = [
    {"name": "name", "type": "string"},
    {"name": "version", "type": "string"},
    {"name": "chainId", "type": "uint256"},
    {"name": "verifyingContract", "type": "address"},
]


def typed_message(
    primary: str, fields: list[tuple[str, str]], domain: dict[str, Any], message: dict[str, Any]
) -> dict[str, Any]:
    """A full typed-data message: `fields` are the (name, type) pairs of `primary`."""
    return {
        "types": {
            "EIP712Domain": DOMAIN_TYPE,
            primary: [{"name": name, "type": kind} for name, kind in fields],
        },
        "primaryType": primary,
        "domain": domain,
        "message": message,
    }


def domain(name: str, version: str, chain_id: int, verifying_contract: str) -> dict[str, Any]:
    return {"name": name, "version": version, "chainId": chain_id, "verifyingContract": verifying_contract}
