"""Escrowed jobs on a real anvil: posted, assigned, completed and paid; cancelled;
reclaimed after the deadline — balances and events to the wei."""

from __future__ import annotations

import pytest

from anvil import RpcClient, dev_account
from ledger import jobs, stake
from ledger.client import Swarm
from ledger.errors import TransactionFailed
from ledger.jobs import JobStatus
from ledger.units import ONE

SPEC = b"\x33" * 32
PRICE, UNITS = 2 * ONE, 100


@pytest.fixture
def parties(swarm: Swarm):
    provider = swarm.sender(dev_account(1).key)
    stake.register(swarm, provider, b"\x44" * 32, 1)
    stake.stake(swarm, provider, 1_000 * ONE)
    return provider, swarm.sender(dev_account(4).key), swarm.sender(dev_account(0).key)


def test_job_posted_assigned_completed_and_paid(swarm: Swarm, rpc: RpcClient, parties) -> None:
    provider, buyer, matcher = parties
    treasury = swarm.market.functions.treasury().call()
    buyer0, provider0, treasury0 = (swarm.balance_of(a) for a in (buyer.address, provider.address, treasury))

    job_id, receipt = jobs.post_job(swarm, buyer, SPEC, PRICE, UNITS, swarm.chain.timestamp() + 3_600)
    (posted,) = swarm.events(receipt, "JobPosted")
    assert posted.args["escrow"] == PRICE * UNITS and posted.args["buyer"] == buyer.address
    assert swarm.balance_of(swarm.market.address) == PRICE * UNITS

    (assigned,) = swarm.events(jobs.assign_job(swarm, matcher, job_id, provider.address, 3 * ONE // 2), "JobAssigned")
    assert assigned.args["provider"] == provider.address
    result = b"\x55" * 32
    (completed,) = swarm.events(jobs.complete_job(swarm, matcher, job_id, result, 60), "JobCompleted")
    assert completed.args["unitsUsed"] == 60 and completed.args["resultHash"] == result

    with pytest.raises(TransactionFailed, match="DisputeWindowOpen"):
        jobs.settle_job(swarm, matcher, job_id)
    rpc.increase_time(swarm.market.functions.disputeWindow().call())
    (settled,) = swarm.events(jobs.settle_job(swarm, matcher, job_id), "JobSettled")

    payment = 60 * (3 * ONE // 2)
    fee = payment * swarm.market.functions.feeBps().call() // 10_000
    refund = PRICE * UNITS - payment
    assert settled.args == {"jobId": job_id, "provider": provider.address, "payment": payment - fee,
                            "fee": fee, "refund": refund}
    assert swarm.balance_of(provider.address) == provider0 + payment - fee
    assert swarm.balance_of(treasury) == treasury0 + fee
    assert swarm.balance_of(buyer.address) == buyer0 - payment
    assert swarm.balance_of(swarm.market.address) == 0
    assert jobs.job_info(swarm, job_id).status is JobStatus.SETTLED


def test_cancelled_job_refunds_in_full(swarm: Swarm, parties) -> None:
    _, buyer, _ = parties
    before = swarm.balance_of(buyer.address)
    job_id, _ = jobs.post_job(swarm, buyer, SPEC, PRICE, UNITS, swarm.chain.timestamp() + 3_600)
    assert swarm.balance_of(buyer.address) == before - PRICE * UNITS
    (cancelled,) = swarm.events(jobs.cancel_job(swarm, buyer, job_id), "JobCancelled")
    assert cancelled.args == {"jobId": job_id, "refund": PRICE * UNITS}
    assert swarm.balance_of(buyer.address) == before
    assert jobs.job_info(swarm, job_id).status is JobStatus.CANCELLED
    assert swarm.market.functions.totalEscrowed().call() == 0


def test_job_reclaimed_by_the_buyer_after_its_deadline(swarm: Swarm, rpc: RpcClient, parties) -> None:
    provider, buyer, matcher = parties
    before = swarm.balance_of(buyer.address)
    deadline = swarm.chain.timestamp() + 600
    job_id, _ = jobs.post_job(swarm, buyer, SPEC, PRICE, UNITS, deadline)
    jobs.assign_job(swarm, matcher, job_id, provider.address, PRICE)
    with pytest.raises(TransactionFailed, match=rf"DeadlineNotReached\(jobId={job_id}, deadline={deadline}\)"):
        jobs.reclaim_expired(swarm, buyer, job_id)
    rpc.increase_time(601)
    (reclaimed,) = swarm.events(jobs.reclaim_expired(swarm, buyer, job_id), "JobReclaimed")
    assert reclaimed.args["refund"] == PRICE * UNITS
    assert swarm.balance_of(buyer.address) == before
    assert jobs.job_info(swarm, job_id).status is JobStatus.RECLAIMED


def test_failed_job_refunds_the_buyer_and_slashes_the_provider_at_fault(swarm: Swarm, parties) -> None:
    provider, buyer, matcher = parties
    before = swarm.balance_of(buyer.address)
    job_id, _ = jobs.post_job(swarm, buyer, SPEC, PRICE, UNITS, swarm.chain.timestamp() + 3_600)
    jobs.assign_job(swarm, matcher, job_id, provider.address, PRICE)
    receipt = jobs.fail_job(swarm, matcher, job_id, "abandoned", slash_bps=1_000)
    (failed,) = swarm.events(receipt, "JobFailed")
    assert failed.args["refund"] == PRICE * UNITS
    assert swarm.balance_of(buyer.address) == before
    assert stake.provider_info(swarm, provider.address).stake == 900 * ONE


def test_assigning_an_unstaked_provider_is_refused_and_leaves_the_job_posted(swarm: Swarm, parties) -> None:
    _, buyer, matcher = parties
    stranger = dev_account(6).address
    job_id, _ = jobs.post_job(swarm, buyer, SPEC, PRICE, UNITS, swarm.chain.timestamp() + 3_600)
    with pytest.raises(TransactionFailed, match=rf"NotRegistered\(provider={stranger}\)"):
        jobs.assign_job(swarm, matcher, job_id, stranger, PRICE)
    assert jobs.job_info(swarm, job_id).status is JobStatus.POSTED
