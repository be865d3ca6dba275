"""Deploy: four live contracts, wired roles, funded dev accounts, and a second deploy
that changes nothing."""

from __future__ import annotations

import json

from anvil import dev_accounts
from ledger.client import Swarm
from ledger.deploy import DEVNET_ACCOUNT_FUNDING, DEVNET_REWARD_POOL, DEVNET_THRESHOLD, Deployment, deploy
from ledger.tx import Sender


def test_deploy_writes_live_addresses_for_the_chain(swarm: Swarm, swarm_home) -> None:
    path = Deployment.path(swarm_home, swarm.chain.chain_id)
    saved = json.loads(path.read_text())
    assert path.name == "31337.json"
    assert set(saved["addresses"]) == {"SwarmToken", "StakingVault", "RewardDistributor", "JobMarket"}
    for address in saved["addresses"].values():
        assert len(swarm.chain.w3.eth.get_code(address)) > 0


def test_deploy_wires_roles_between_contracts(swarm: Swarm) -> None:
    vault, market, distributor = swarm.vault.functions, swarm.market.functions, swarm.distributor.functions
    slasher = vault.SLASHER_ROLE().call()
    assert vault.hasRole(slasher, swarm.distributor.address).call()
    assert vault.hasRole(slasher, swarm.market.address).call()
    assert market.hasRole(market.MATCHER_ROLE().call(), swarm.deployment.deployer).call()
    assert distributor.threshold().call() == DEVNET_THRESHOLD
    assert len(distributor.signers().call()) == 4
    assert swarm.market.functions.vault().call() == swarm.vault.address


def test_deploy_funds_the_ten_dev_accounts_and_the_reward_pool(swarm: Swarm) -> None:
    deployer = swarm.deployment.deployer
    for account in dev_accounts():
        if account.address != deployer:
            assert swarm.balance_of(account.address) == DEVNET_ACCOUNT_FUNDING
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
