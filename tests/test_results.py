"""A job's result is its provider's word, on a real anvil: the digest Python builds is the
market's, a result the provider signed completes the job, and one it did not sign — signed
by the matcher, over other units, at another price or for another provider — is refused with
BadResultSignature."""

from __future__ import annotations

import pytest
from eth_account import Account

from anvil import dev_account
from ledger import jobs, stake
from ledger.client import Swarm
from ledger.errors import InvalidInput, TransactionFailed
from ledger.jobs import JobStatus
from ledger.results import JobTerms, result_digest, result_signer, result_typed_data, sign_result
from ledger.units import ONE

PROVIDER, MATCHER, BUYER = dev_account(1), dev_account(0), dev_account(4)
RESULT = b"\x55" * 32
PRICE, UNITS, USED = 2 * ONE, 100, 60


@pytest.fixture
def assigned(swarm: Swarm) -> int:
    """A job assigned to dev account 1 by the matcher (dev account 0); returns its id."""
    provider = swarm.sender(PROVIDER.key)
    stake.register(swarm, provider, b"\x44" * 32, 1)
    stake.stake(swarm, provider, 1_000 * ONE)
    buyer = swarm.sender(BUYER.key)
    job_id, _ = jobs.post_job(swarm, buyer, b"\x33" * 32, PRICE, UNITS, swarm.chain.timestamp() + 3_600)
    jobs.assign_job(swarm, swarm.sender(MATCHER.key), job_id, PROVIDER.address, PRICE)
    return job_id


def _sign(swarm: Swarm, key: bytes, job_id: int, units: int = USED, price: int = PRICE,
          provider: str = PROVIDER.address) -> bytes:
    terms = JobTerms(job_id, provider, price)
    return sign_result(key, swarm.chain.chain_id, swarm.market.address, terms, RESULT, units)


def test_the_python_digest_is_the_markets_and_signing_it_is_signing_the_typed_data(
        swarm: Swarm, assigned: int) -> None:
    chain_id, market = swarm.chain.chain_id, swarm.market.address
    unassigned = JobTerms(2**64, "0x" + "00" * 20, 0)  # the market digests the job as it holds it
    cases = ((jobs.job_info(swarm, assigned).terms, RESULT, USED), (unassigned, bytes(32), 0),
             (JobTerms(assigned, PROVIDER.address, PRICE), b"\xff" * 32, 2**64 - 1))
    for terms, result, units in cases:
        on_chain = swarm.read("JobMarket", "resultDigest", terms.job_id, result, units)
        assert result_digest(chain_id, market, terms, result, units) == bytes(on_chain)
        typed = result_typed_data(chain_id, market, terms, result, units)
        by_wallet = Account.from_key(PROVIDER.key).sign_typed_data(full_message=typed).signature
        assert sign_result(PROVIDER.key, chain_id, market, terms, result, units) == bytes(by_wallet)


def test_a_result_signed_by_its_provider_completes_the_job(swarm: Swarm, assigned: int) -> None:
    signature = _sign(swarm, PROVIDER.key, assigned)
    terms = JobTerms(assigned, PROVIDER.address, PRICE)
    assert result_signer(signature, swarm.chain.chain_id, swarm.market.address, terms, RESULT, USED) == (
        PROVIDER.address
    )
    receipt = jobs.complete_job(swarm, swarm.sender(MATCHER.key), assigned, RESULT, USED, signature)
    (completed,) = swarm.events(receipt, "JobCompleted")
    assert completed.args["resultHash"] == RESULT and completed.args["unitsUsed"] == USED
    info = jobs.job_info(swarm, assigned)
    assert (info.status, info.result_hash, info.units_used) == (JobStatus.COMPLETED, RESULT, USED)


@pytest.mark.parametrize(
    "forgery",
    [
        pytest.param(lambda swarm, job_id: (USED, _sign(swarm, MATCHER.key, job_id)), id="by-the-matcher"),
        pytest.param(lambda swarm, job_id: (USED + 1, _sign(swarm, PROVIDER.key, job_id)), id="other-units"),
        pytest.param(lambda swarm, job_id: (USED, _sign(swarm, PROVIDER.key, job_id, price=PRICE // 2)),
                     id="another-price"),
        pytest.param(lambda swarm, job_id: (USED, _sign(swarm, PROVIDER.key, job_id, provider=BUYER.address)),
                     id="for-another-provider"),
    ],
)
def test_a_result_its_provider_did_not_sign_is_refused(swarm: Swarm, assigned: int, forgery) -> None:
    units, signature = forgery(swarm, assigned)
    with pytest.raises(TransactionFailed) as refused:
        jobs.complete_job(swarm, swarm.sender(MATCHER.key), assigned, RESULT, units, signature)
    revert = refused.value.revert
    assert revert is not None and (revert.name, revert.args) == ("BadResultSignature", {"jobId": assigned})
    assert f"the result of job {assigned} is not signed by its provider" in str(refused.value)
    assert jobs.job_info(swarm, assigned).status is JobStatus.ASSIGNED


def test_a_result_hash_that_is_not_32_bytes_is_refused_before_signing() -> None:
    with pytest.raises(InvalidInput, match="result hash must be 32 bytes"):
        result_typed_data(31337, MATCHER.address, JobTerms(1, PROVIDER.address, PRICE), b"\x55" * 31, USED)
