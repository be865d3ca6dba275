"""Buyers' jobs in escrow — JobMarket calls: post, cancel, reclaim, assign, reassign,
complete, fail, dispute, settle."""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING

from ledger.client import Swarm
from ledger.errors import InvalidInput
from ledger.permit import Allowance, prepare_spend
from ledger.reports import reason_bytes
from ledger.results import JobTerms
from ledger.units import format_amount, parse_address

if TYPE_CHECKING:
    from ledger.tx import Sender, TxReceipt

MAX_UINT64 = 2**64 - 1
MAX_UINT128 = 2**128 - 1


class JobStatus(IntEnum):
    """JobMarket.Status, in the contract's order."""

    NONE = 0
    POSTED = 1
    ASSIGNED = 2
    COMPLETED = 3
    DISPUTED = 4
    SETTLED = 5
    FAILED = 6
    CANCELLED = 7
    RECLAIMED = 8


@dataclass(frozen=True)
class JobInfo:
    job_id: int
    buyer: str
    deadline: int
    status: JobStatus
    max_price_per_unit: int
    max_units: int
    provider: str
    dispute_end: int
    fee_bps: int  # the protocol fee agreed at assignment
    slashed: bool  # the matcher has slashed a provider of this job (it may do so once)
    price_per_unit: int
    units_used: int
    result_hash: bytes

    @property
    def escrow(self) -> int:
        return self.max_price_per_unit * self.max_units

    @property
    def terms(self) -> JobTerms:
        """What its provider signs a result or a failure under: the job, the provider, the price."""
        return JobTerms(self.job_id, self.provider, self.price_per_unit)


def job_info(swarm: Swarm, job_id: int) -> JobInfo:
    j = swarm.read("JobMarket", "getJob", job_id)
    return JobInfo(
        job_id,
        j[0],
        j[1],
        JobStatus(j[2]),
        j[3],
        j[4],
        j[5],
        j[6],
        j[7],
        bool(j[8]),
        j[9],
        j[10],
        bytes(j[11]),
    )


def post_job(
    swarm: Swarm,
    sender: Sender,
    spec_hash: bytes,
    max_price_per_unit: int,
    max_units: int,
    deadline: int,
    allowance: Allowance = Allowance.PERMIT,
) -> tuple[int, TxReceipt]:
    """Escrows `max_price_per_unit × max_units` and posts the job; returns its id."""
    if len(spec_hash) != 32:
        raise InvalidInput("spec hash must be 32 bytes (a keccak256 of the job spec).")
    if not 0 < max_price_per_unit <= MAX_UINT128:
        raise InvalidInput(f"max price per unit must be greater than zero, got {max_price_per_unit}.")
    if not 0 < max_units <= MAX_UINT64:
        raise InvalidInput(f"max units must be a whole number from 1 to {MAX_UINT64}, got {max_units}.")
    floor = int(swarm.read("JobMarket", "minPricePerUnit"))
    if max_price_per_unit < floor:
        raise InvalidInput(
            f"max price per unit {max_price_per_unit} wei is under the market's floor of {floor} wei per "
            "unit; offer at least that."
        )
    now = swarm.chain.timestamp()
    if deadline <= now:
        raise InvalidInput(
            f"deadline {deadline} is not after the chain's current time {now}; choose a later one."
        )
    longest = int(swarm.read("JobMarket", "maxJobDuration"))
    if deadline > now + longest:
        raise InvalidInput(
            f"deadline {deadline} is more than the market's longest job of {longest} s after the chain's "
            f"current time {now}; choose one at most {longest // 86_400} days ahead."
        )
    escrow = max_price_per_unit * max_units
    if escrow > MAX_UINT128:
        raise InvalidInput("price × units is too large to escrow; lower the price or the units.")
    permit = prepare_spend(swarm, sender, swarm.market.address, escrow, "escrow for this job", allowance)
    market = swarm.market.functions
    if permit is None:
        fn = market.postJob(spec_hash, max_price_per_unit, max_units, deadline)
    else:
        fn = market.postJobWithPermit(
            spec_hash, max_price_per_unit, max_units, deadline, permit.deadline, permit.v, permit.r, permit.s
        )
    receipt = sender.send(fn)
    (posted,) = swarm.events(receipt, "JobPosted")
    return int(posted.args["jobId"]), receipt


def cancel_job(swarm: Swarm, sender: Sender, job_id: int) -> TxReceipt:
    return sender.send(swarm.market.functions.cancelJob(job_id))


def reclaim_expired(swarm: Swarm, sender: Sender, job_id: int) -> TxReceipt:
    return sender.send(swarm.market.functions.reclaimExpired(job_id))


def dispute_bond(swarm: Swarm, disputer: str, job_id: int) -> int:
    """The bond `disputer` posts to dispute job `job_id` now (none for the matcher)."""
    if swarm.read("JobMarket", "hasRole", swarm.read("JobMarket", "MATCHER_ROLE"), disputer):
        return 0
    return int(swarm.read("JobMarket", "bondFor", job_id))


def dispute_job(swarm: Swarm, sender: Sender, job_id: int) -> TxReceipt:
    """Disputes a completed job; a buyer first approves the market to take its dispute bond."""
    bond = dispute_bond(swarm, sender.address, job_id)
    if bond > 0:
        _approve_bond(swarm, sender, bond)
    return sender.send(swarm.market.functions.disputeJob(job_id))


def _approve_bond(swarm: Swarm, sender: Sender, bond: int) -> None:
    """Makes sure the market may take `bond` from `sender`, approving it if need be."""
    balance = swarm.balance_of(sender.address)
    if balance < bond:
        raise InvalidInput(
            f"{sender.address} holds {format_amount(balance)}, less than the {format_amount(bond)} dispute "
            "bond; "
            "fund the account before disputing."
        )
    market = swarm.market.address
    if int(swarm.read("SwarmToken", "allowance", sender.address, market)) < bond:
        sender.send(swarm.token.functions.approve(market, bond))


def assign_job(swarm: Swarm, sender: Sender, job_id: int, provider: str, price_per_unit: int) -> TxReceipt:
    provider = parse_address(provider, "provider address")
    return sender.send(swarm.market.functions.assignJob(job_id, provider, price_per_unit))


def reassign_job(
    swarm: Swarm,
    sender: Sender,
    job_id: int,
    provider: str,
    price_per_unit: int,
    reason: str,
    slash_bps: int = 0,
) -> TxReceipt:
    """Moves an assigned job to `provider`, escrow in place; slashes the previous one by `slash_bps`."""
    provider = parse_address(provider, "provider address")
    return sender.send(
        swarm.market.functions.reassignJob(job_id, provider, price_per_unit, reason_bytes(reason), slash_bps)
    )


def complete_job(
    swarm: Swarm, sender: Sender, job_id: int, result_hash: bytes, units_used: int, signature: bytes
) -> TxReceipt:
    """Records the job's result and units with its provider's `signature` over them (see ledger.results)."""
    return sender.send(swarm.market.functions.completeJob(job_id, result_hash, units_used, signature))


def charge_job(
    swarm: Swarm, sender: Sender, job_id: int, reason: str, units: int, signature: bytes
) -> TxReceipt:
    """A job that failed by its own fault, charged the `units` its provider signed its lease held."""
    return sender.send(swarm.market.functions.chargeJob(job_id, reason_bytes(reason), units, signature))


def fail_job(swarm: Swarm, sender: Sender, job_id: int, reason: str, slash_bps: int = 0) -> TxReceipt:
    return sender.send(swarm.market.functions.failJob(job_id, reason_bytes(reason), slash_bps))


def settle_job(swarm: Swarm, sender: Sender, job_id: int) -> TxReceipt:
    return sender.send(swarm.market.functions.settleJob(job_id))


def resolve_dispute(
    swarm: Swarm, sender: Sender, job_id: int, buyer_upheld: bool, slash_bps: int = 0
) -> TxReceipt:
    return sender.send(swarm.market.functions.resolveDispute(job_id, buyer_upheld, slash_bps))
