"""Epoch settlement — RewardDistributor calls: fund, submit, veto, finalize, claim."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ledger.client import Swarm
from ledger.errors import InvalidInput
from ledger.merkle import RewardTree
from ledger.reports import EpochReport, Slash, deferred_hash, order_signatures, sign_report, slashes_hash
from ledger.units import parse_address

if TYPE_CHECKING:
    from ledger.tx import Sender, TxReceipt


@dataclass(frozen=True)
class PendingReport:
    epoch: int
    finalizable_at: int
    vetoed: bool
    report_id: int  # the submission's number, which tags the holds it placed
    rewards_root: bytes
    total_rewards: int
    slashes_hash: bytes
    deferred_hash: bytes


def pending_report(swarm: Swarm) -> PendingReport | None:
    p = swarm.read("RewardDistributor", "pendingReport")
    return None if p[0] == 0 else PendingReport(p[0], p[1], p[2], p[3], bytes(p[4]), p[5], bytes(p[6]),
                                                bytes(p[7]))


def fund(swarm: Swarm, sender: Sender, amount: int) -> TxReceipt:
    """Adds `amount` wei from `sender` to the reward pool (approve, then fund)."""
    if amount <= 0:
        raise InvalidInput(f"funding amount must be greater than zero, got {amount}.")
    balance = swarm.balance_of(sender.address)
    if balance < amount:
        raise InvalidInput(f"{sender.address} holds {balance} wei, less than the {amount} wei to fund.")
    sender.send(swarm.token.functions.approve(swarm.distributor.address, amount))
    return sender.send(swarm.distributor.functions.fund(amount))


def build_report(swarm: Swarm, epoch: int, tree: RewardTree, total_rewards: int, slashes: Sequence[Slash],
                 valid_for_s: int = 86_400, deferred: Sequence[str] = ()) -> EpochReport:
    """The report of `tree`, adding `total_rewards` to what is allocated, ordering `slashes` and
    deferring the slashes of `deferred` (sorted), submittable for `valid_for_s` seconds of chain
    time from now."""
    return EpochReport(epoch, tree.root, total_rewards, sum(tree.values.values()), slashes_hash(slashes),
                       deferred_hash(deferred), swarm.chain.timestamp() + valid_for_s)


def sign(swarm: Swarm, report: EpochReport, keys: Sequence[bytes]) -> list[bytes]:
    """Each key signs on its own; the result is ordered as the contract requires."""
    chain_id, address = swarm.chain.chain_id, swarm.distributor.address
    return order_signatures([sign_report(report, key, chain_id, address) for key in keys])


def submit_epoch(
    swarm: Swarm, sender: Sender, report: EpochReport, slashes: Sequence[Slash], signatures: Sequence[bytes],
    deferred: Sequence[str] = (),
) -> TxReceipt:
    """Submits `report` with the slashes and the deferred providers it was signed with."""
    fn = swarm.distributor.functions.submitEpoch(
        report.as_tuple(), [s.as_tuple() for s in slashes], list(deferred), list(signatures)
    )
    return sender.send(fn)


def veto_epoch(swarm: Swarm, sender: Sender, epoch: int) -> TxReceipt:
    """Vetoes the pending report during its challenge window; `sender` must be the guardian."""
    return sender.send(swarm.distributor.functions.vetoEpoch(epoch))


def discard_epoch(swarm: Swarm, sender: Sender, epoch: int) -> TxReceipt:
    """Clears a pending report left unfinalized past its window and the recovery delay."""
    return sender.send(swarm.distributor.functions.discardEpoch(epoch))


def finalize_epoch(swarm: Swarm, sender: Sender, slashes: Sequence[Slash]) -> TxReceipt:
    return sender.send(swarm.distributor.functions.finalizeEpoch([s.as_tuple() for s in slashes]))


def claim(swarm: Swarm, sender: Sender, provider: str, cumulative: int, proof: Sequence[bytes]) -> TxReceipt:
    provider = parse_address(provider, "provider address")
    return sender.send(swarm.distributor.functions.claim(provider, cumulative, list(proof)))
