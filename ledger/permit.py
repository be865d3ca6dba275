"""EIP-2612 permits for SwarmToken, so staking and posting a job take one transaction."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from ledger.client import Swarm
from ledger.eip712 import domain, typed_message
from ledger.errors import InvalidInput
from ledger.units import format_amount

if TYPE_CHECKING:
    from ledger.tx import Sender

PERMIT_LIFETIME = 3_600  # seconds a signed permit stays valid


@dataclass(frozen=True)
class Permit:
    value: int
    deadline: int
    v: int
    r: bytes
    s: bytes


def sign_permit(swarm: Swarm, owner: Sender, spender: str, value: int) -> Permit:
    """`owner` allows `spender` to pull `value` tokens, signed off-chain."""
    token = swarm.deployment.addresses["SwarmToken"]
    deadline = swarm.chain.timestamp() + PERMIT_LIFETIME
    typed = typed_message(
        "Permit",
        [("owner", "address"), ("spender", "address"), ("value", "uint256"), ("nonce", "uint256"),
         ("deadline", "uint256")],
        domain(swarm.read("SwarmToken", "name"), "1", swarm.chain.chain_id, token),
        {
            "owner": owner.address,
            "spender": spender,
            "value": value,
            "nonce": swarm.read("SwarmToken", "nonces", owner.address),
            "deadline": deadline,
        },
    )
    signature = owner.sign_typed_data(typed)
    return Permit(value=value, deadline=deadline, r=signature[:32], s=signature[32:64], v=signature[64])


class Allowance(Enum):
    """How a contract gets to pull a user's tokens."""

    PERMIT = "permit"  # sign an EIP-2612 permit; the spend is one transaction
    APPROVED = "approved"  # use an allowance the user granted beforehand


def prepare_spend(
    swarm: Swarm, owner: Sender, spender: str, amount: int, purpose: str, mode: Allowance
) -> Permit | None:
    """Checks that `owner` can pay `amount` to `spender` before anything is sent.

    Returns the permit to send along, or None when an existing allowance covers it.
    """
    balance = swarm.balance_of(owner.address)
    if balance < amount:
        raise InvalidInput(
            f"{owner.address} holds {format_amount(balance)}, less than the {format_amount(amount)} to "
            f"{purpose}; "
            "lower the amount or fund the account."
        )
    if mode is Allowance.PERMIT:
        return sign_permit(swarm, owner, spender, amount)
    allowance = int(swarm.read("SwarmToken", "allowance", owner.address, spender))
    if allowance < amount:
        raise InvalidInput(
            f"{owner.address} allows the contract at {spender} to spend {format_amount(allowance)}, "
            f"less than the {format_amount(amount)} to {purpose}; approve more first, or use a permit."
        )
    return None
