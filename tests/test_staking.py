"""Providers on a real anvil: register, stake, unbond, withdraw; slashing through the role;
reverts as readable sentences."""

from __future__ import annotations

import pytest

from anvil import RpcClient, dev_account
from ledger import stake
from ledger.client import Swarm
from ledger.errors import InvalidInput, TransactionFailed
from ledger.reports import reason_bytes
from ledger.specs import spec_hash
from ledger.stake import HardwareSpec
from ledger.units import ONE
from tests.conftest import grant_role

PROVIDER = 1
SPEC = b"\x42" * 32


def _provider(swarm: Swarm, index: int = PROVIDER):
    return swarm.sender(dev_account(index).key)


def test_register_stake_unbond_and_withdraw_move_tokens_exactly(swarm: Swarm, rpc: RpcClient) -> None:
    p = _provider(swarm)
    start_balance = swarm.balance_of(p.address)
    vault_before = swarm.balance_of(swarm.vault.address)

    receipt = stake.register(swarm, p, SPEC, 4)
    (registered,) = swarm.events(receipt, "Registered")
    assert registered.args == {"provider": p.address, "specHash": SPEC, "gpus": 4}

    receipt = stake.stake(swarm, p, 6_000 * ONE)
    (staked,) = swarm.events(receipt, "Staked")
    assert staked.args["amount"] == staked.args["newStake"] == 6_000 * ONE
    info = stake.provider_info(swarm, p.address)
    assert (info.stake, info.min_stake) == (6_000 * ONE, 4_000 * ONE)
    assert swarm.vault.functions.isEligible(p.address).call()
    assert swarm.balance_of(p.address) == start_balance - 6_000 * ONE
    assert swarm.balance_of(swarm.vault.address) == vault_before + 6_000 * ONE

    receipt = stake.request_unstake(swarm, p, 2_500 * ONE)
    (requested,) = swarm.events(receipt, "UnstakeRequested")
    period = swarm.vault.functions.unbondingPeriod().call()
    assert requested.args["releaseTime"] == swarm.chain.timestamp() + period
    info = stake.provider_info(swarm, p.address)
    assert (info.stake, info.unbonding) == (3_500 * ONE, 2_500 * ONE)

    with pytest.raises(TransactionFailed, match=r"StillUnbonding\(releaseTime=\d+, now_=\d+\)"):
        stake.withdraw(swarm, p)

    rpc.increase_time(period)
    receipt = stake.withdraw(swarm, p)
    (withdrawn,) = swarm.events(receipt, "Withdrawn")
    assert withdrawn.args["amount"] == 2_500 * ONE
    assert swarm.balance_of(p.address) == start_balance - 3_500 * ONE
    assert stake.provider_info(swarm, p.address).unbonding == 0


def test_slash_through_the_role_pays_treasury_and_burns_the_rest(swarm: Swarm) -> None:
    p = _provider(swarm)
    stake.register(swarm, p, SPEC, 2)
    stake.stake(swarm, p, 10_000 * ONE)
    stake.request_unstake(swarm, p, 2_000 * ONE)

    admin = swarm.sender(dev_account(0).key)
    vault = swarm.vault.functions
    grant_role(swarm, "StakingVault", "SLASHER_ROLE", admin.address)
    treasury = vault.treasury().call()
    treasury_before = swarm.balance_of(treasury)
    supply_before = swarm.token.functions.totalSupply().call()

    receipt = stake.slash(swarm, admin, p.address, 1_000, "downtime", b"\x07" * 32)
    (slashed,) = swarm.events(receipt, "Slashed")
    # 10% of 8,000 active and of 2,000 unbonding.
    assert slashed.args["fromStake"] == 800 * ONE
    assert slashed.args["fromUnbonding"] == 200 * ONE
    assert slashed.args["reason"] == reason_bytes("downtime")
    info = stake.provider_info(swarm, p.address)
    assert (info.stake, info.unbonding) == (7_200 * ONE, 1_800 * ONE)
    share = vault.treasuryShareBps().call()
    to_treasury = 1_000 * ONE * share // 10_000
    assert swarm.balance_of(treasury) == treasury_before + to_treasury
    assert swarm.token.functions.totalSupply().call() == supply_before - (1_000 * ONE - to_treasury)


def test_slash_without_the_role_is_refused_with_the_role_named(swarm: Swarm) -> None:
    p = _provider(swarm)
    stake.register(swarm, p, SPEC, 1)
    outsider = swarm.sender(dev_account(5).key)
    slasher_role = swarm.vault.functions.SLASHER_ROLE().call()
    with pytest.raises(TransactionFailed) as failure:
        stake.slash(swarm, outsider, p.address, 100, "fraud", b"\0" * 32)
    revert = failure.value.revert
    assert revert is not None and revert.name == "AccessControlUnauthorizedAccount"
    assert revert.args == {"account": outsider.address, "neededRole": slasher_role}
    assert "AccessControlUnauthorizedAccount(account=" in str(failure.value)


def test_revert_surfaces_as_one_sentence_naming_the_error_and_its_arguments(swarm: Swarm) -> None:
    p = _provider(swarm)
    stake.register(swarm, p, SPEC, 1)
    stake.stake(swarm, p, 1_000 * ONE)
    with pytest.raises(TransactionFailed) as failure:
        stake.request_unstake(swarm, p, 1_001 * ONE)
    message = str(failure.value)
    assert message == (
        "requestUnstake: StakingVault reverted with "
        f"InsufficientStake(stake={1_000 * ONE}, requested={1_001 * ONE}): "
        "unstake at most your active stake (see `swarm provider status`)."
    )
    assert "\n" not in message


def test_unjail_after_serving_time_restores_eligibility(swarm: Swarm, rpc: RpcClient) -> None:
    p = _provider(swarm)
    stake.register(swarm, p, SPEC, 1)
    stake.stake(swarm, p, 1_000 * ONE)
    admin = swarm.sender(dev_account(0).key)
    vault = swarm.vault.functions
    grant_role(swarm, "StakingVault", "SLASHER_ROLE", admin.address)
    until = swarm.chain.timestamp() + 600
    admin.send(vault.jail(p.address, until))
    assert not vault.isEligible(p.address).call()
    with pytest.raises(TransactionFailed, match=rf"ProviderJailed\(provider={p.address}, until={until}\)"):
        stake.unjail(swarm, p)
    rpc.increase_time(601)
    (unjailed,) = swarm.events(stake.unjail(swarm, p), "Unjailed")
    assert unjailed.args["provider"] == p.address
    assert vault.isEligible(p.address).call()


# ── the asking price in the hardware spec ────────────────────────────────────

def test_hardware_spec_holds_the_price_as_a_wei_string_only_when_given() -> None:
    assert HardwareSpec("H100", 8, 80, "eu-west").as_dict() == {
        "gpu_model": "H100", "gpus": 8, "vram_gb": 80, "region": "eu-west"}
    top = HardwareSpec("L4", 1, 24, price_per_unit=2**128 - 1).as_dict()
    assert top == {"gpu_model": "L4", "gpus": 1, "vram_gb": 24, "price_per_unit": str(2**128 - 1)}
    assert spec_hash(HardwareSpec("L4", 1, 24, price_per_unit=1).as_dict()) != spec_hash(
        HardwareSpec("L4", 1, 24).as_dict())


def test_hardware_spec_lists_its_gpus_uuids_only_when_given_and_as_nvml_writes_them() -> None:
    uuids = ("GPU-5bd6a5c2-3f41-2b0e-88b1-3d6f2c1e9a10", "GPU-0f3a8e1d-7c22-4b59-9e5a-1a2b3c4d5e6f")
    assert HardwareSpec("H100", 2, 80, gpu_uuids=uuids).as_dict()["gpu_uuids"] == list(uuids)
    assert "gpu_uuids" not in HardwareSpec("H100", 2, 80).as_dict()
    for bad, says in (((*uuids, "GPU-11111111"), "at most 2 distinct GPU UUIDs"),
                      ((uuids[0], uuids[0]), "at most 2 distinct GPU UUIDs"),
                      (("nvidia0",), "'nvidia0' is not one NVML gives")):
        with pytest.raises(InvalidInput, match=says):
            HardwareSpec("H100", 2, 80, gpu_uuids=bad)


@pytest.mark.parametrize("price", [0, -1, 2**128, True, 1.5, "100"])
def test_hardware_spec_refuses_a_price_that_is_not_a_positive_uint128(price) -> None:
    with pytest.raises(InvalidInput, match="price per unit must be from 1 to"):
        HardwareSpec("H100", 8, 80, price_per_unit=price)


def test_a_priced_spec_registers_under_its_hash(swarm: Swarm) -> None:
    p = _provider(swarm)
    digest = spec_hash(HardwareSpec("H100", 2, 80, price_per_unit=ONE // 500).as_dict())
    (registered,) = swarm.events(stake.register(swarm, p, digest, 2), "Registered")
    assert registered.args["specHash"] == digest
    assert stake.provider_info(swarm, p.address).spec_hash == digest
