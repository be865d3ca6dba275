"""Escrowed jobs on a real anvil: posted, assigned, completed and paid; cancelled;
reassigned to another provider; reclaimed after the deadline — balances and events to the wei."""

from __future__ import annotations

import pytest

from anvil import RpcClient, dev_account
from ledger import jobs, stake
from ledger.client import Swarm
from ledger.errors import TransactionFailed
from ledger.jobs import JobStatus
from ledger.units import ONE
from tests.conftest import provider_signature

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

    (assigned,) = swarm.events(
        jobs.assign_job(swarm, matcher, job_id, provider.address, 3 * ONE // 2), "JobAssigned"
    )
    assert assigned.args["provider"] == provider.address
    result = b"\x55" * 32
    signature = provider_signature(swarm, job_id, result, 60)
    receipt = jobs.complete_job(swarm, matcher, job_id, result, 60, signature)
    (completed,) = swarm.events(receipt, "JobCompleted")
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
    with pytest.raises(
        TransactionFailed, match=rf"DeadlineNotReached\(jobId={job_id}, deadline={deadline}\)"
    ):
        jobs.reclaim_expired(swarm, buyer, job_id)
    rpc.increase_time(601)
    (reclaimed,) = swarm.events(jobs.reclaim_expired(swarm, buyer, job_id), "JobReclaimed")
    assert reclaimed.args["refund"] == PRICE * UNITS
    assert swarm.balance_of(buyer.address) == before
    assert jobs.job_info(swarm, job_id).status is JobStatus.RECLAIMED


def test_anyone_may_reclaim_an_expired_job_and_the_refund_goes_to_the_buyer(
    swarm: Swarm, rpc: RpcClient, parties
) -> None:
    provider, buyer, matcher = parties
    stranger = swarm.sender(dev_account(6).key)
    buyer0, stranger0 = swarm.balance_of(buyer.address), swarm.balance_of(stranger.address)
    deadline = swarm.chain.timestamp() + 600
    job_id, _ = jobs.post_job(swarm, buyer, SPEC, PRICE, UNITS, deadline)
    jobs.assign_job(swarm, matcher, job_id, provider.address, PRICE)
    rpc.increase_time(601)
    (reclaimed,) = swarm.events(jobs.reclaim_expired(swarm, stranger, job_id), "JobReclaimed")
    assert reclaimed.args == {"jobId": job_id, "refund": PRICE * UNITS}
    assert swarm.balance_of(buyer.address) == buyer0
    assert swarm.balance_of(stranger.address) == stranger0
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


def test_reassigned_job_moves_to_the_new_provider_with_escrow_in_place_and_slashes_the_old_one(
    swarm: Swarm, parties
) -> None:
    provider, buyer, matcher = parties
    successor = swarm.sender(dev_account(2).key)
    stake.register(swarm, successor, b"\x46" * 32, 1)
    stake.stake(swarm, successor, 1_000 * ONE)
    job_id, _ = jobs.post_job(swarm, buyer, SPEC, PRICE, UNITS, swarm.chain.timestamp() + 3_600)
    jobs.assign_job(swarm, matcher, job_id, provider.address, PRICE)
    buyer0, escrowed0 = swarm.balance_of(buyer.address), swarm.market.functions.totalEscrowed().call()

    receipt = jobs.reassign_job(
        swarm, matcher, job_id, successor.address, PRICE // 2, "nodes lost", slash_bps=1_000
    )
    (reassigned,) = swarm.events(receipt, "JobReassigned")
    assert reassigned.args == {"jobId": job_id, "from": provider.address, "to": successor.address,
                               "pricePerUnit": PRICE // 2, "reason": b"nodes lost".ljust(32, b"\0"),
                               "slashBps": 1_000}
    (slashed,) = swarm.events(receipt, "Slashed")
    assert slashed.args["provider"] == provider.address
    assert slashed.args["evidenceHash"] == job_id.to_bytes(32, "big")  # the job is the evidence

    info = jobs.job_info(swarm, job_id)
    assert (info.status, info.provider, info.price_per_unit) == (
        JobStatus.ASSIGNED,
        successor.address,
        PRICE // 2,
    )
    assert swarm.market.functions.totalEscrowed().call() == escrowed0
    assert swarm.balance_of(swarm.market.address) == escrowed0
    assert swarm.balance_of(buyer.address) == buyer0
    assert stake.provider_info(swarm, provider.address).stake == 900 * ONE
    assert stake.provider_info(swarm, successor.address).stake == 1_000 * ONE

    with pytest.raises(
        TransactionFailed, match=rf"SameProvider\(jobId={job_id}, provider={successor.address}\)"
    ):
        jobs.reassign_job(swarm, matcher, job_id, successor.address, PRICE, "again")


def test_assigning_an_unstaked_provider_is_refused_and_leaves_the_job_posted(swarm: Swarm, parties) -> None:
    _, buyer, matcher = parties
    stranger = dev_account(6).address
    job_id, _ = jobs.post_job(swarm, buyer, SPEC, PRICE, UNITS, swarm.chain.timestamp() + 3_600)
    with pytest.raises(TransactionFailed, match=rf"NotRegistered\(provider={stranger}\)"):
        jobs.assign_job(swarm, matcher, job_id, stranger, PRICE)
    assert jobs.job_info(swarm, job_id).status is JobStatus.POSTED


def test_a_second_matcher_slash_of_a_job_is_refused_and_a_slash_free_fail_goes_through(
    swarm: Swarm, parties
) -> None:
    provider, buyer, matcher = parties
    successor = swarm.sender(dev_account(2).key)
    stake.register(swarm, successor, b"\x46" * 32, 1)
    stake.stake(swarm, successor, 1_000 * ONE)
    job_id, _ = jobs.post_job(swarm, buyer, SPEC, PRICE, UNITS, swarm.chain.timestamp() + 3_600)
    jobs.assign_job(swarm, matcher, job_id, provider.address, PRICE)
    assert not jobs.job_info(swarm, job_id).slashed
    jobs.reassign_job(swarm, matcher, job_id, successor.address, PRICE, "nodes lost", slash_bps=1_000)
    assert jobs.job_info(swarm, job_id).slashed

    with pytest.raises(TransactionFailed, match=rf"AlreadySlashed\(jobId={job_id}\).*slash of 0"):
        jobs.fail_job(swarm, matcher, job_id, "abandoned", slash_bps=1_000)
    jobs.fail_job(swarm, matcher, job_id, "abandoned")
    assert stake.provider_info(swarm, successor.address).stake == 1_000 * ONE
    assert jobs.job_info(swarm, job_id).status is JobStatus.FAILED


def _completed(swarm: Swarm, parties, units: int = 60) -> int:
    provider, buyer, matcher = parties
    job_id, _ = jobs.post_job(swarm, buyer, SPEC, PRICE, UNITS, swarm.chain.timestamp() + 3_600)
    jobs.assign_job(swarm, matcher, job_id, provider.address, PRICE)
    result = b"\x55" * 32
    jobs.complete_job(swarm, matcher, job_id, result, units, provider_signature(swarm, job_id, result, units))
    return job_id


def test_a_buyers_dispute_approves_and_posts_the_bond_which_a_rejection_pays_the_provider(
    swarm: Swarm, parties
) -> None:
    provider, buyer, matcher = parties
    job_id = _completed(swarm, parties)
    payment = 60 * PRICE
    bond = -(-payment * swarm.market.functions.disputeBondBps().call() // 10_000)
    assert jobs.dispute_bond(swarm, buyer.address, job_id) == bond > 0
    assert jobs.dispute_bond(swarm, matcher.address, job_id) == 0  # the matcher posts none
    buyer0, provider0 = swarm.balance_of(buyer.address), swarm.balance_of(provider.address)

    (disputed,) = swarm.events(jobs.dispute_job(swarm, buyer, job_id), "JobDisputed")
    assert disputed.args == {"jobId": job_id, "by": buyer.address, "bond": bond}
    assert swarm.balance_of(buyer.address) == buyer0 - bond
    assert swarm.market.functions.totalEscrowed().call() == swarm.balance_of(swarm.market.address)

    jobs.resolve_dispute(swarm, matcher, job_id, buyer_upheld=False)  # the deployer is also the arbiter
    fee = payment * swarm.market.functions.feeBps().call() // 10_000
    assert swarm.balance_of(provider.address) == provider0 + payment - fee + bond
    assert swarm.balance_of(buyer.address) == buyer0 - bond + PRICE * UNITS - payment


def test_a_dispute_of_a_small_payment_posts_at_least_the_markets_minimum_bond(swarm: Swarm, parties) -> None:
    _, buyer, _ = parties
    job_id = _completed(swarm, parties, units=1)  # 2 SWARM paid: 10 % of it is under the floor
    floor = swarm.market.functions.minDisputeBond().call()
    assert -(-PRICE * swarm.market.functions.disputeBondBps().call() // 10_000) < floor == ONE
    assert jobs.dispute_bond(swarm, buyer.address, job_id) == floor
    (disputed,) = swarm.events(jobs.dispute_job(swarm, buyer, job_id), "JobDisputed")
    assert disputed.args["bond"] == floor


def test_a_dispute_the_arbiter_leaves_undecided_is_split_half_and_half_and_its_bond_paid_to_the_provider(
    swarm: Swarm, rpc: RpcClient, parties
) -> None:
    provider, buyer, matcher = parties
    stranger = swarm.sender(dev_account(6).key)
    treasury = swarm.market.functions.treasury().call()
    job_id = _completed(swarm, parties, units=61)
    buyer0, provider0, treasury0 = (swarm.balance_of(a) for a in (buyer.address, provider.address, treasury))
    bond = jobs.dispute_bond(swarm, buyer.address, job_id)
    jobs.dispute_job(swarm, buyer, job_id)
    info = jobs.job_info(swarm, job_id)
    arbitration_end = info.dispute_end + swarm.market.functions.ARBITRATION_PERIOD().call()
    with pytest.raises(TransactionFailed, match="ArbitrationPending"):
        jobs.reclaim_expired(swarm, stranger, job_id)
    rpc.increase_time(arbitration_end - swarm.chain.timestamp() + 1)
    with pytest.raises(TransactionFailed, match="ArbitrationClosed"):
        jobs.resolve_dispute(swarm, matcher, job_id, buyer_upheld=True, slash_bps=1_000)

    receipt = jobs.reclaim_expired(swarm, stranger, job_id)
    half = 61 * PRICE // 2
    fee = half * info.fee_bps // 10_000
    (expired,) = swarm.events(receipt, "DisputeExpired")
    (settled,) = swarm.events(receipt, "JobSettled")
    assert settled.args == {"jobId": job_id, "provider": provider.address, "payment": half - fee, "fee": fee,
                            "refund": PRICE * UNITS - half}
    # A dispute left unanswered is never free: its bond goes to the provider, the other party.
    assert swarm.balance_of(provider.address) == provider0 + half - fee + bond
    assert swarm.balance_of(treasury) == treasury0 + fee
    assert swarm.balance_of(buyer.address) == buyer0 - bond + PRICE * UNITS - half
    assert expired.args["bondRefund"] == bond > 0
    assert jobs.job_info(swarm, job_id).status is JobStatus.SETTLED
    assert swarm.balance_of(swarm.market.address) == swarm.market.functions.totalEscrowed().call()


def test_a_job_that_failed_by_its_own_fault_is_charged_the_units_its_provider_signed(
        swarm: Swarm, rpc: RpcClient, parties) -> None:
    from eth_account import Account
    from eth_account.messages import encode_typed_data

    from ledger.results import failure_digest, failure_typed_data, sign_failure

    provider, buyer, matcher = parties
    treasury = swarm.market.functions.treasury().call()
    buyer0, provider0, treasury0 = (swarm.balance_of(a) for a in (buyer.address, provider.address, treasury))
    job_id, _ = jobs.post_job(swarm, buyer, SPEC, PRICE, UNITS, swarm.chain.timestamp() + 3_600)
    jobs.assign_job(swarm, matcher, job_id, provider.address, PRICE)
    chain_id, market = swarm.chain.chain_id, swarm.market.address
    terms = jobs.job_info(swarm, job_id).terms
    assert (terms.provider, terms.price_per_unit) == (provider.address, PRICE)
    on_chain = swarm.market.functions.failureDigest(job_id, 7).call()
    assert failure_digest(chain_id, market, terms, 7) == on_chain
    typed = encode_typed_data(full_message=failure_typed_data(chain_id, market, terms, 7))
    assert bytes(typed.body) != b"" and Account.recover_message(
        typed, signature=provider.sign_typed_data(failure_typed_data(chain_id, market, terms, 7))
    ) == provider.address, "what the site signs through its sender is what chargeJob checks"

    signed = sign_failure(dev_account(1).key, chain_id, market, terms, 7)
    with pytest.raises(TransactionFailed, match="BadResultSignature"):  # the matcher cannot inflate it
        jobs.charge_job(swarm, matcher, job_id, "job-failed", 8, signed)
    receipt = jobs.charge_job(swarm, matcher, job_id, "job-failed", 7, signed)
    (charged,) = swarm.events(receipt, "JobCharged")
    assert charged.args["unitsUsed"] == 7 and charged.args["provider"] == provider.address
    info = jobs.job_info(swarm, job_id)
    assert info.status is JobStatus.COMPLETED and info.result_hash == bytes(32) and info.units_used == 7

    rpc.increase_time(swarm.market.functions.disputeWindow().call())
    jobs.settle_job(swarm, matcher, job_id)
    payment = 7 * PRICE
    fee = payment * swarm.market.functions.feeBps().call() // 10_000
    assert swarm.balance_of(provider.address) == provider0 + payment - fee
    assert swarm.balance_of(treasury) == treasury0 + fee
    assert swarm.balance_of(buyer.address) == buyer0 - payment, "the rest of the escrow refunded"


def test_a_runner_reads_only_its_own_kinds_parameters() -> None:
    """A job handed to another kind's runner is refused in a sentence, never run with the wrong fields."""
    from compute.errors import InvalidJob
    from compute.jobs import ComputeJob
    from compute.runners.params import TrainParams, TuneParams

    job = ComputeJob.of("job-9", "train", "0x" + "11" * 20)
    assert isinstance(job.params_of(TrainParams), TrainParams)
    with pytest.raises(InvalidJob, match="job job-9 is a train job, not the kind this runner runs"):
        job.params_of(TuneParams)
