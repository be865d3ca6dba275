"""Deploy: five live contracts administered by a timelock, roles granted by their constructors,
funded dev accounts, and a second deploy that changes nothing."""

from __future__ import annotations

import json

import pytest

from anvil import AnvilConfig, AnvilNode, dev_account, dev_accounts
from anvil.node import free_port
from ledger import governance
from ledger.chain import Chain
from ledger.client import Swarm
from ledger.deploy import (
    DEVNET_ACCOUNT_FUNDING,
    DEVNET_REWARD_POOL,
    DEVNET_THRESHOLD,
    DEVNET_TREASURY_INDEX,
    Deployment,
    DeployParams,
    deploy,
    error_decoder,
)
from ledger.errors import SwarmError, TransactionFailed
from ledger.governance import NO_PREDECESSOR, admin_call, schedule
from ledger.tx import Sender
from ledger.units import ONE

ZERO = "0x" + "00" * 20


def test_deploy_writes_live_addresses_for_the_chain(swarm: Swarm, swarm_home) -> None:
    path = Deployment.path(swarm_home, swarm.chain.chain_id)
    saved = json.loads(path.read_text())
    assert path.name == "31337.json"
    assert set(saved["addresses"]) == {
        "SwarmTimelock", "SwarmToken", "StakingVault", "RewardDistributor", "JobMarket", "ServingEscrow"
    }
    for address in saved["addresses"].values():
        assert len(swarm.chain.w3.eth.get_code(address)) > 0


def test_deploy_wires_roles_between_contracts(swarm: Swarm) -> None:
    vault, market, distributor = swarm.vault.functions, swarm.market.functions, swarm.distributor.functions
    deployer = swarm.deployment.deployer
    slasher = vault.SLASHER_ROLE().call()
    assert vault.hasRole(slasher, swarm.distributor.address).call()
    assert vault.hasRole(slasher, swarm.market.address).call()
    assert not vault.hasRole(slasher, deployer).call()
    assert market.hasRole(market.MATCHER_ROLE().call(), deployer).call()
    assert market.hasRole(market.ARBITER_ROLE().call(), deployer).call()
    assert distributor.hasRole(distributor.GUARDIAN_ROLE().call(), deployer).call()
    assert distributor.threshold().call() == DEVNET_THRESHOLD
    assert len(distributor.signers().call()) == 4
    assert swarm.market.functions.vault().call() == swarm.vault.address


def test_the_timelock_administers_every_contract_and_the_deployer_only_proposes(swarm: Swarm) -> None:
    deployer = swarm.deployment.deployer
    timelock = swarm.contract("SwarmTimelock").functions
    timelock_address = swarm.deployment.addresses["SwarmTimelock"]
    for name in ("SwarmToken", "StakingVault", "RewardDistributor", "JobMarket"):
        contract = swarm.contract(name).functions
        assert contract.defaultAdmin().call() == timelock_address, name
        assert not contract.hasRole(bytes(32), deployer).call(), name
    for name in ("StakingVault", "RewardDistributor", "JobMarket"):  # the guardian pauses at once
        contract = swarm.contract(name).functions
        assert contract.hasRole(contract.PAUSER_ROLE().call(), deployer).call(), name
    token = swarm.token.functions
    assert token.hasRole(token.MINTER_ROLE().call(), timelock_address).call()
    assert not token.hasRole(token.MINTER_ROLE().call(), deployer).call()
    assert timelock.hasRole(timelock.PROPOSER_ROLE().call(), deployer).call()
    assert timelock.hasRole(timelock.EXECUTOR_ROLE().call(), ZERO).call(), "anyone executes a ready operation"
    assert not timelock.hasRole(bytes(32), deployer).call(), "the timelock administers itself"
    assert timelock.getMinDelay().call() == 0, "a devnet's changes take effect at once"


def test_the_devnet_treasury_is_neither_the_deployer_nor_a_funded_account(swarm: Swarm) -> None:
    treasury = dev_account(DEVNET_TREASURY_INDEX).address
    assert swarm.vault.functions.treasury().call() == treasury == swarm.market.functions.treasury().call()
    assert treasury not in {a.address for a in dev_accounts()}
    assert swarm.deployment.params["treasury"] == treasury
    assert swarm.deployment.params["guardian"] == swarm.deployment.deployer


def test_the_market_and_distributor_limits_are_the_deployments(swarm: Swarm) -> None:
    params = DeployParams.devnet()
    market, distributor = swarm.market.functions, swarm.distributor.functions
    assert market.minPricePerUnit().call() == params.min_price_per_unit
    assert market.maxJobDuration().call() == params.max_job_duration == 30 * 86_400
    assert market.minDisputeBond().call() == params.min_dispute_bond
    assert distributor.maxReportLag().call() == params.max_report_lag
    assert params.challenge_window + params.max_report_lag <= params.unbonding_period
    production = DeployParams(committee=params.committee, threshold=params.threshold)
    assert production.timelock_delay > (
        production.unbonding_period + production.challenge_window + production.max_report_lag
    ), "off a devnet every change waits out an unbonding and a report's way to the chain"


@pytest.mark.parametrize(("change", "refusal"), [
    ({"treasury": None}, "pass --treasury"),
    ({"treasury": dev_account(0).address}, "is the deployer"),
    ({"timelock_delay": 14 * 86_400}, "pass --timelock-delay of more than 1468800 s"),
    ({"max_report_lag": 14 * 86_400}, "lower max_report_lag to at most 1123200 s"),
    ({}, "needs a key of its own"),
    ({"min_dispute_bond": 11 * ONE}, "pass --min-dispute-bond of at most 10"),
    ({"min_price_per_unit": 2 * 10**15}, "pass --min-price-per-unit of at most 0.001"),
    ({"matcher": dev_account(5).address, "arbiter": dev_account(5).address,
      "guardian": dev_account(6).address},
     r"One key \(0x[0-9a-fA-F]+\) would be the matcher and the arbiter"),
], ids=["no-treasury", "deployer-as-treasury", "delay-within-unbonding", "reporting-beyond-unbonding",
        "deployer-holds-every-role", "bond-floor-above-its-ceiling", "price-floor-above-its-ceiling",
        "matcher-as-arbiter"])
def test_a_production_deployment_with_unsafe_parameters_is_refused_before_anything_is_sent(
        swarm: Swarm, tmp_path, change, refusal) -> None:
    """Off a devnet the timelock must outlast an unbonding and a report's way to the chain, and the
    treasury must be given and be no key of the deployer's."""
    production = Chain(swarm.chain.url, 1)  # a chain id that is no devnet's, on the same node
    params = DeployParams(committee=tuple(a.address for a in dev_accounts()[1:4]), threshold=2,
                          treasury=dev_account(DEVNET_TREASURY_INDEX).address)
    deployer = swarm.sender(dev_account(0).key)
    nonce = swarm.chain.w3.eth.get_transaction_count(deployer.address)
    with pytest.raises(SwarmError, match=refusal) as refused:
        deploy(production, deployer, tmp_path, DeployParams(**{**params.__dict__, **change}))
    assert "\n" not in str(refused.value)
    assert swarm.chain.w3.eth.get_transaction_count(deployer.address) == nonce


def test_deploy_funds_the_ten_dev_accounts_and_the_reward_pool(swarm: Swarm) -> None:
    deployer = swarm.deployment.deployer
    for account in dev_accounts():
        if account.address != deployer:
            assert swarm.balance_of(account.address) == DEVNET_ACCOUNT_FUNDING
    assert swarm.balance_of(dev_account(DEVNET_TREASURY_INDEX).address) == 0
    assert swarm.balance_of(deployer) > DEVNET_ACCOUNT_FUNDING
    assert swarm.balance_of(swarm.distributor.address) == DEVNET_REWARD_POOL
    assert swarm.distributor.functions.totalFunded().call() == DEVNET_REWARD_POOL


def test_second_deploy_reuses_the_deployment_and_sends_nothing(swarm: Swarm, swarm_home) -> None:
    w3 = swarm.chain.w3
    deployer = swarm.deployment.deployer
    nonce_before, block_before = w3.eth.get_transaction_count(deployer), w3.eth.block_number
    sender = swarm.sender(dev_accounts()[0].key)
    again = deploy(swarm.chain, Sender(swarm.chain, dev_accounts()[0].key, swarm.decoder), swarm_home)
    assert sender.address == deployer
    assert again.created is False
    assert again.deployment.addresses == swarm.deployment.addresses
    assert w3.eth.get_transaction_count(deployer) == nonce_before
    assert w3.eth.block_number == block_before


def test_forced_deploy_makes_new_contracts_and_records_them(swarm: Swarm, swarm_home) -> None:
    old = dict(swarm.deployment.addresses)
    path = Deployment.path(swarm_home, swarm.chain.chain_id)
    saved = path.read_text()
    try:
        fresh = deploy(
            swarm.chain, Sender(swarm.chain, dev_accounts()[0].key, swarm.decoder), swarm_home, force=True
        )
        assert fresh.created is True
        assert set(fresh.deployment.addresses.values()).isdisjoint(old.values())
        assert json.loads(path.read_text())["addresses"] == fresh.deployment.addresses
    finally:
        path.write_text(saved)  # the chain snapshot is reverted; so is the file


def test_a_production_deployment_gives_each_role_its_key_and_binds_the_timelock_to_the_exit_bound(
        tmp_path) -> None:
    """Off a devnet (an anvil with chain id 1): the matcher, the arbiter and the guardian are keys
    of their own, and the timelock refuses, when it runs, a change that brings its delay within
    the time a provider waits to leave, as `swarm chain admin` refuses it before it is sent."""
    node = AnvilNode(AnvilConfig(home=tmp_path / "chain", port=free_port(), chain_id=1))
    node.start()
    try:
        chain = Chain(node.config.url, 1)
        guardian, matcher, arbiter = (dev_account(i).address for i in (6, 7, 8))
        params = DeployParams(committee=tuple(a.address for a in dev_accounts()[1:4]), threshold=2,
                              treasury=dev_account(9).address, guardian=guardian, matcher=matcher,
                              arbiter=arbiter)
        deployer = Sender(chain, dev_account(0).key, error_decoder())
        swarm = Swarm(chain, deploy(chain, deployer, tmp_path / "home", params).deployment)
        market = swarm.contract("JobMarket").functions
        roles = {"matcher": market.MATCHER_ROLE().call(), "arbiter": market.ARBITER_ROLE().call()}
        assert market.hasRole(roles["matcher"], matcher).call()
        assert market.hasRole(roles["arbiter"], arbiter).call()
        assert not any(market.hasRole(role, deployer.address).call() for role in roles.values())
        timelock = swarm.contract("SwarmTimelock").functions
        assert timelock.vault().call() == swarm.deployment.addresses["StakingVault"]
        bound = params.unbonding_period + params.challenge_window + params.max_report_lag
        assert swarm.read("StakingVault", "exitBound") == bound < params.timelock_delay
        assert governance.exit_bound(swarm) == (True, bound)

        longer = admin_call(swarm, "StakingVault", "setUnbondingPeriod", params.timelock_delay)
        nonce = chain.w3.eth.get_transaction_count(deployer.address)
        with pytest.raises(TransactionFailed, match="within the time a provider waits to leave") as refused:
            schedule(swarm, deployer, longer)
        assert "\n" not in str(refused.value)
        assert chain.w3.eth.get_transaction_count(deployer.address) == nonce, "nothing was sent"

        # Scheduled anyway, straight through the contract: the chain refuses it when it runs.
        deployer.send(timelock.schedule(longer.target, 0, longer.data, NO_PREDECESSOR, longer.salt,
                                        params.timelock_delay))
        node.rpc.increase_time(params.timelock_delay + 1)
        node.rpc.mine()
        with pytest.raises(TransactionFailed, match="DelayWithinExitBound"):
            deployer.send(timelock.execute(longer.target, 0, longer.data, NO_PREDECESSOR, longer.salt))
        assert swarm.read("StakingVault", "unbondingPeriod") == params.unbonding_period
    finally:
        node.stop()
