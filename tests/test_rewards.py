"""Epoch settlement on a real anvil: a report signed by 3 of 4 Python keys (EIP-712),
finalized after the challenge window, claimed for two epochs with one proof; the stake of a
provider whose slash a report defers held until the next report may arrive."""

from __future__ import annotations

import pytest

from anvil import RpcClient, dev_account
from ledger import rewards, stake
from ledger.client import Swarm
from ledger.deploy import devnet_committee_keys
from ledger.errors import TransactionFailed
from ledger.merkle import RewardTree
from ledger.reports import Slash, reason_bytes
from ledger.units import ONE

A, B = dev_account(1).address, dev_account(2).address


def _register(swarm: Swarm, *indices: int) -> None:
    """Claims are kept in the vault's provider record: a claimant is a registered provider."""
    for i in indices:
        stake.register(swarm, swarm.sender(dev_account(i).key), bytes([i]) * 32, 1)


def _settle(
    swarm: Swarm, rpc: RpcClient, epoch: int, cumulative: dict[str, int], total: int, slashes=(), deferred=()
) -> RewardTree:
    tree = RewardTree.build(cumulative)
    report = rewards.build_report(swarm, epoch, tree, total, slashes, deferred=deferred)
    signatures = rewards.sign(swarm, report, devnet_committee_keys()[:3])
    keeper = swarm.sender(dev_account(9).key)
    receipt = rewards.submit_epoch(swarm, keeper, report, slashes, signatures, deferred)
    (submitted,) = swarm.events(receipt, "EpochSubmitted")
    assert submitted.args["epoch"] == epoch and submitted.args["rewardsRoot"] == tree.root
    window = swarm.distributor.functions.challengeWindow().call()
    with pytest.raises(TransactionFailed, match="ChallengeWindowOpen"):
        rewards.finalize_epoch(swarm, keeper, slashes)
    rpc.increase_time(window)
    (finalized,) = swarm.events(rewards.finalize_epoch(swarm, keeper, slashes), "EpochFinalized")
    assert finalized.args["epoch"] == epoch
    return tree


def test_report_signed_by_three_of_four_keys_is_finalized_and_claimed(swarm: Swarm, rpc: RpcClient) -> None:
    _register(swarm, 1, 2)
    tree = _settle(swarm, rpc, 1, {A: 100 * ONE, B: 50 * ONE}, 150 * ONE)
    assert swarm.distributor.functions.rewardsRoot().call() == tree.root
    assert swarm.distributor.functions.lastFinalizedEpoch().call() == 1

    before = swarm.balance_of(B)
    claimer = swarm.sender(dev_account(2).key)
    receipt = rewards.claim(swarm, claimer, B, 50 * ONE, tree.proof(B))
    (claimed,) = swarm.events(receipt, "Claimed")
    assert claimed.args == {"provider": B, "amount": 50 * ONE, "cumulative": 50 * ONE}
    assert swarm.balance_of(B) == before + 50 * ONE


def test_one_proof_claims_two_epochs_and_a_repeat_pays_nothing(swarm: Swarm, rpc: RpcClient) -> None:
    _register(swarm, 1, 2)
    _settle(swarm, rpc, 1, {A: 100 * ONE, B: 50 * ONE}, 150 * ONE)
    tree2 = _settle(swarm, rpc, 2, {A: 250 * ONE, B: 120 * ONE}, 220 * ONE)
    pool_before = swarm.balance_of(swarm.distributor.address)
    a_before = swarm.balance_of(A)

    keeper = swarm.sender(dev_account(9).key)  # anyone may claim for a provider; tokens go to it
    rewards.claim(swarm, keeper, A, 250 * ONE, tree2.proof(A))
    assert swarm.balance_of(A) == a_before + 250 * ONE
    assert swarm.balance_of(swarm.distributor.address) == pool_before - 250 * ONE
    assert swarm.distributor.functions.claimed(A).call() == 250 * ONE
    with pytest.raises(
        TransactionFailed, match=rf"ClaimNotIncreasing\(provider={A}, cumulative={250 * ONE}, "
    ):
        rewards.claim(swarm, keeper, A, 250 * ONE, tree2.proof(A))
    assert swarm.balance_of(A) == a_before + 250 * ONE


def test_report_with_two_signatures_is_refused(swarm: Swarm) -> None:
    tree = RewardTree.build({A: 1 * ONE})
    report = rewards.build_report(swarm, 1, tree, 1 * ONE, [])
    signatures = rewards.sign(swarm, report, devnet_committee_keys()[:2])
    with pytest.raises(TransactionFailed, match=r"NotEnoughSignatures\(given=2, threshold=3\)"):
        rewards.submit_epoch(swarm, swarm.sender(dev_account(9).key), report, [], signatures)
    assert rewards.pending_report(swarm) is None


def test_report_with_a_duplicated_signature_is_refused(swarm: Swarm) -> None:
    tree = RewardTree.build({A: 1 * ONE})
    report = rewards.build_report(swarm, 1, tree, 1 * ONE, [])
    signatures = rewards.sign(swarm, report, devnet_committee_keys()[:2])
    with pytest.raises(TransactionFailed, match="SignersNotAscending"):
        rewards.submit_epoch(
            swarm, swarm.sender(dev_account(9).key), report, [], signatures + signatures[-1:]
        )


def test_slashes_in_a_report_apply_at_finalization(swarm: Swarm, rpc: RpcClient) -> None:
    provider = swarm.sender(dev_account(3).key)
    stake.register(swarm, provider, b"\x01" * 32, 1)
    stake.stake(swarm, provider, 2_000 * ONE)
    slash = Slash(provider.address, 500, reason_bytes("downtime"), b"\x02" * 32, jail_seconds=3_600)
    _settle(swarm, rpc, 1, {A: 1 * ONE}, 1 * ONE, [slash])
    info = stake.provider_info(swarm, provider.address)
    assert info.stake == 1_900 * ONE
    assert info.jailed_until == swarm.chain.timestamp() + 3_600


def test_guardian_veto_blocks_finalization(swarm: Swarm, rpc: RpcClient) -> None:
    tree = RewardTree.build({A: 5 * ONE})
    report = rewards.build_report(swarm, 1, tree, 5 * ONE, [])
    keeper = swarm.sender(dev_account(9).key)
    rewards.submit_epoch(swarm, keeper, report, [], rewards.sign(swarm, report, devnet_committee_keys()[1:]))
    guardian = swarm.sender(dev_account(0).key)
    (vetoed,) = swarm.events(rewards.veto_epoch(swarm, guardian, 1), "EpochVetoed")
    assert vetoed.args["epoch"] == 1
    rpc.increase_time(swarm.distributor.functions.challengeWindow().call())
    with pytest.raises(TransactionFailed, match=r"NoPendingReport\(\)"):
        rewards.finalize_epoch(swarm, keeper, [])
    assert swarm.distributor.functions.lastFinalizedEpoch().call() == 0


def test_a_slash_with_no_penalty_is_refused(swarm: Swarm) -> None:
    empty = Slash(A, 0, reason_bytes("downtime"), b"\x02" * 32)
    assert not empty.has_penalty
    report = rewards.build_report(swarm, 1, RewardTree.build({A: 1 * ONE}), 1 * ONE, [empty])
    signatures = rewards.sign(swarm, report, devnet_committee_keys()[:3])
    with pytest.raises(TransactionFailed, match=rf"EmptySlash\(index=0, provider={A}\)"):
        rewards.submit_epoch(swarm, swarm.sender(dev_account(9).key), report, [empty], signatures)


def test_a_provider_whose_slash_is_deferred_is_held_until_the_next_report_may_arrive(
        swarm: Swarm, rpc: RpcClient) -> None:
    provider = swarm.sender(dev_account(3).key)
    stake.register(swarm, provider, b"\x01" * 32, 1)
    stake.stake(swarm, provider, 2_000 * ONE)
    stake.request_unstake(swarm, provider, 500 * ONE)
    distributor = swarm.distributor.functions
    _settle(swarm, rpc, 1, {A: 1 * ONE}, 1 * ONE, deferred=[provider.address])
    finalized = distributor.lastFinalizedReportId().call()
    assert finalized == distributor.reportCount().call() and distributor.isHoldLive(finalized, True).call()

    info = stake.provider_info(swarm, provider.address)
    assert info.held_until > info.unbonding_end, "the next report may come after the unbonding ends"
    rpc.increase_time(info.unbonding_end - swarm.chain.timestamp() + 1)
    with pytest.raises(TransactionFailed, match="StakeOnHold"):
        stake.withdraw(swarm, provider)

    # The next report applies the deferred slash; the hold ends with it.
    slash = Slash(provider.address, 500, reason_bytes("downtime"), b"\x02" * 32)
    _settle(swarm, rpc, 2, {A: 2 * ONE}, 1 * ONE, [slash])
    assert not distributor.isHoldLive(finalized, True).call()
    assert stake.provider_info(swarm, provider.address).unbonding == 475 * ONE
    stake.withdraw(swarm, provider)
