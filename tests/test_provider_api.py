"""`ledger.operator.Provider`, the Python API that `swarm provider` is a face over, on a real
anvil: each operation's outcome on chain, and each refusal sending nothing."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from anvil import AnvilNode, RpcClient, dev_account
from ledger import stake
from ledger.client import Swarm
from ledger.config import Settings
from ledger.errors import InvalidInput, SwarmError
from ledger.operator import Provider
from ledger.specs import load_spec
from ledger.units import ONE
from tests.conftest import grant_role

P = 1  # the provider's dev account
ADDRESS = dev_account(P).address
OTHER = dev_account(2).address


@pytest.fixture
def settings(swarm: Swarm, swarm_home: Path, anvil_node: AnvilNode, tmp_path: Path,
             monkeypatch: pytest.MonkeyPatch) -> Settings:
    """A SWARM_HOME of this test's own: the session's deployment, a fresh spec store and ledger database."""
    home = tmp_path / "home"
    shutil.copytree(swarm_home / "deployments", home / "deployments")
    monkeypatch.delenv("SWARM_DB_URL", raising=False)  # the ledger is $SWARM_HOME/ledger.db
    return Settings.from_env({"SWARM_HOME": str(home), "SWARM_RPC_URL": anvil_node.config.url})


@pytest.fixture
def provider(settings: Settings) -> Provider:
    return Provider.open(account=P, settings=settings)


def _sent_nothing(
    swarm: Swarm, who: str, refused: Callable[[], object], exc: type[SwarmError], message: str
) -> None:
    """`refused()` raises `exc` saying `message` in one sentence, and neither `who` nor anyone sent a
    transaction."""
    w3 = swarm.chain.w3
    before = w3.eth.get_transaction_count(who), w3.eth.block_number
    with pytest.raises(exc, match=message) as raised:
        refused()
    assert len(str(raised.value).splitlines()) == 1
    assert (w3.eth.get_transaction_count(who), w3.eth.block_number) == before


def _ledger_synced(swarm: Swarm, settings: Settings) -> None:
    """The provider's ledger database brought up to the chain's head, as `swarm ledger sync` does."""
    from ledger.config import database_url
    from ledger.db import open_ledger
    from ledger.indexer import Indexer

    engine = open_ledger(database_url(settings.home))
    try:
        Indexer(swarm, engine).sync()
    finally:
        engine.dispose()


# ── register ─────────────────────────────────────────────────────────────────

def test_register_stores_the_spec_on_chain_and_in_the_home_and_sets_the_minimum_stake(
    provider: Provider, swarm: Swarm, settings: Settings
) -> None:
    done = provider.register("H100", gpus=8, vram_gb=80, region="eu-west", price=ONE // 400)
    info = stake.provider_info(swarm, ADDRESS)
    assert info.registered and info.gpus == 8 and "0x" + info.spec_hash.hex() == done.spec_hash
    assert done.provider == ADDRESS and done.min_stake_wei == info.min_stake == 8 * 1_000 * ONE
    assert not done.updated and done.tx.startswith("0x")
    assert load_spec(settings.home, info.spec_hash) == done.spec.as_dict() == {
        "gpu_model": "H100", "gpus": 8, "vram_gb": 80, "region": "eu-west", "price_per_unit": str(ONE // 400)}

    status = provider.status()
    assert status.registered and status.hardware == done.spec.as_dict()
    assert status.price_per_unit_wei == ONE // 400 and status.min_stake_wei == 8 * 1_000 * ONE
    assert status.stake_wei == 0 and not status.eligible


def test_register_again_is_refused_and_update_declares_new_hardware(
    provider: Provider, swarm: Swarm, settings: Settings
) -> None:
    provider.register("H100", gpus=8, vram_gb=80)
    _sent_nothing(swarm, ADDRESS, lambda: provider.register("H100", gpus=8, vram_gb=80), SwarmError,
                  "already registered with this hardware")
    _sent_nothing(swarm, ADDRESS, lambda: provider.register("H100", gpus=4, vram_gb=80), SwarmError,
                  "already registered with other hardware; pass --update")

    updated = provider.register("H100", gpus=4, vram_gb=80, site_url="https://203.0.113.7:8443",
                                site_fingerprint="ab" * 32, update=True)
    info = stake.provider_info(swarm, ADDRESS)
    assert updated.updated and info.gpus == 4 and info.min_stake == updated.min_stake_wei == 4 * 1_000 * ONE
    assert "0x" + info.spec_hash.hex() == updated.spec_hash
    hardware = provider.status().hardware
    assert hardware is not None and hardware["site_url"] == "https://203.0.113.7:8443"

    newcomer = Provider.open(account=2, settings=settings)
    _sent_nothing(swarm, OTHER, lambda: newcomer.register("L4", gpus=1, vram_gb=24, update=True), SwarmError,
                  "is not registered yet")


def test_a_bad_hardware_spec_is_refused_before_anything_is_sent(provider: Provider, swarm: Swarm) -> None:
    _sent_nothing(swarm, ADDRESS, lambda: provider.register("H 100", gpus=8, vram_gb=80), InvalidInput,
                  "is not a model name")
    _sent_nothing(
        swarm,
        ADDRESS,
        lambda: provider.register("H100", gpus=8, vram_gb=80, price=0),
        InvalidInput,
        "price per unit must be from 1 to",
    )
    _sent_nothing(swarm, ADDRESS, lambda: provider.register("H100", 8, 80, site_url="https://203.0.113.7:8443"),
                  InvalidInput, "needs both its url and its certificate's fingerprint")
    _sent_nothing(swarm, ADDRESS, lambda: provider.register("B200", gpus=8, vram_gb=192), InvalidInput,
                  "gpu model 'B200' has no reference throughput, so the oracle could not judge it and "
                  "it would never earn; declare one of H100, H200, A100, L40S, L4, RTX4090, A10, T4, V100, "
                  "or cpu")
    assert not stake.provider_info(swarm, ADDRESS).registered


def test_declare_anew_registers_or_updates_and_stake_to_minimum_tops_the_stake_up(
    provider: Provider, swarm: Swarm
) -> None:
    from ledger.stake import HardwareSpec

    first = provider.declare_anew(HardwareSpec("cpu", 1, 1))
    assert not first.updated and stake.provider_info(swarm, ADDRESS).registered
    topped = provider.stake_to_minimum()
    assert topped is not None and topped.amount_wei == first.min_stake_wei == topped.stake_wei
    assert provider.stake_to_minimum() is None  # the minimum is met: nothing is sent

    moved = provider.declare_anew(HardwareSpec("cpu", 2, 1, site_url="https://203.0.113.7:8443",
                                               site_fingerprint="ab" * 32))
    info = stake.provider_info(swarm, ADDRESS)
    assert moved.updated and "0x" + info.spec_hash.hex() == moved.spec_hash
    assert info.min_stake == 2 * 1_000 * ONE
    topped = provider.stake_to_minimum()
    assert topped is not None and topped.amount_wei == 1_000 * ONE and topped.stake_wei == info.min_stake


# ── stake, unstake, withdraw ─────────────────────────────────────────────────

def test_stake_unstake_withdraw_round_trip_moves_the_tokens(
    provider: Provider, swarm: Swarm, rpc: RpcClient
) -> None:
    provider.register("H100", gpus=8, vram_gb=80)
    wallet = swarm.balance_of(ADDRESS)

    staked = provider.stake(9_000 * ONE)
    assert staked.amount_wei == staked.stake_wei == stake.provider_info(swarm, ADDRESS).stake == 9_000 * ONE
    assert swarm.balance_of(ADDRESS) == wallet - 9_000 * ONE
    assert provider.status().eligible and swarm.vault.functions.isEligible(ADDRESS).call()

    unbonding = provider.unstake(2_500 * ONE)
    info = stake.provider_info(swarm, ADDRESS)
    period = swarm.vault.functions.unbondingPeriod().call()
    assert unbonding.amount_wei == unbonding.unbonding_wei == info.unbonding == 2_500 * ONE
    assert unbonding.stake_wei == info.stake == 6_500 * ONE
    assert unbonding.unbonding_release == info.unbonding_end == swarm.chain.timestamp() + period
    status = provider.status()
    assert status.unbonding_wei == 2_500 * ONE and status.withdrawable_at == info.unbonding_end

    _sent_nothing(
        swarm, ADDRESS, provider.withdraw, SwarmError, r"is still unbonding until .* withdraw after that"
    )
    rpc.increase_time(period)
    withdrawn = provider.withdraw()
    assert withdrawn.amount_wei == 2_500 * ONE and withdrawn.unbonding_wei == 0
    assert provider.status().withdrawable_at is None
    assert swarm.balance_of(ADDRESS) == wallet - 6_500 * ONE
    assert stake.provider_info(swarm, ADDRESS).stake == withdrawn.stake_wei == 6_500 * ONE


def test_withdraw_waits_for_the_hold_of_a_job_the_provider_took(provider: Provider, swarm: Swarm,
                                                                rpc: RpcClient) -> None:
    from ledger import jobs

    provider.register("H100", gpus=8, vram_gb=80)
    provider.stake(8_000 * ONE)
    buyer, matcher = swarm.sender(dev_account(4).key), swarm.sender(dev_account(0).key)
    deadline = swarm.chain.timestamp() + 10 * swarm.vault.functions.unbondingPeriod().call()
    job_id, _ = jobs.post_job(swarm, buyer, b"\x07" * 32, 10**15, 100, deadline)
    jobs.assign_job(swarm, matcher, job_id, ADDRESS, 10**15)
    provider.unstake(8_000 * ONE)
    rpc.increase_time(swarm.vault.functions.unbondingPeriod().call())

    assert provider.status().held_until == stake.provider_info(swarm, ADDRESS).held_until
    _sent_nothing(swarm, ADDRESS, provider.withdraw, SwarmError, "is held until .* can still slash it")
    assert stake.provider_info(swarm, ADDRESS).unbonding == 8_000 * ONE


@pytest.mark.parametrize(
    ("operation", "exc", "message"),
    [
        (lambda p: p.stake(0), InvalidInput, "stake amount must be a positive whole number of wei"),
        (lambda p: p.stake(1.5 * ONE), InvalidInput, "stake amount must be a positive whole number of wei"),
        (lambda p: p.stake(2_000_000 * ONE), InvalidInput, "less than the 2,000,000 SWARM to stake"),
        (
            lambda p: p.unstake(9_001 * ONE),
            InvalidInput,
            "Cannot unstake 9,001 SWARM: .* has 9,000 SWARM staked",
        ),
        (lambda p: p.withdraw(), SwarmError, "has nothing unbonding"),
        (lambda p: p.unjail(), SwarmError, "is not jailed; nothing to do"),
        (lambda p: p.status("0x12"), InvalidInput, "provider address '0x12' is not an Ethereum address"),
    ],
    ids=[
        "zero",
        "float",
        "above-wallet",
        "unstake-above-stake",
        "withdraw-nothing",
        "unjail-free",
        "bad-address",
    ],
)
def test_a_refused_operation_sends_nothing(provider: Provider, swarm: Swarm, operation, exc, message) -> None:
    provider.register("H100", gpus=1, vram_gb=80)
    provider.stake(9_000 * ONE)
    _sent_nothing(swarm, ADDRESS, lambda: operation(provider), exc, message)


def test_an_unregistered_provider_cannot_stake_or_unstake(provider: Provider, swarm: Swarm) -> None:
    for operation in (lambda: provider.stake(10 * ONE), lambda: provider.unstake(10 * ONE), provider.unjail):
        _sent_nothing(swarm, ADDRESS, operation, SwarmError, "is not a registered provider")


# ── jail ─────────────────────────────────────────────────────────────────────

def test_unjail_after_the_jail_time_makes_the_provider_eligible_again(
    provider: Provider, swarm: Swarm, rpc: RpcClient
) -> None:
    provider.register("H100", gpus=8, vram_gb=80)
    provider.stake(8_000 * ONE)
    admin = swarm.sender(dev_account(0).key)
    vault = swarm.vault.functions
    grant_role(swarm, "StakingVault", "SLASHER_ROLE", admin.address)
    until = swarm.chain.timestamp() + 300
    admin.send(vault.jail(ADDRESS, until))
    status = provider.status()
    assert status.jailed and status.jailed_until == until and not status.eligible

    _sent_nothing(swarm, ADDRESS, provider.unjail, SwarmError, "is jailed until .*; unjail after that")
    rpc.increase_time(301)
    unjailed = provider.unjail()
    assert unjailed.stake_wei == 8_000 * ONE and vault.isEligible(ADDRESS).call()
    assert not provider.status().jailed and provider.status().eligible


# ── rewards ──────────────────────────────────────────────────────────────────

def test_claim_pays_the_finalized_rewards_once(
    provider: Provider, swarm: Swarm, rpc: RpcClient, settings: Settings
) -> None:
    from ledger.config import database_url
    from ledger.db import open_ledger, session
    from ledger.indexer import store_reward_tree
    from ledger.merkle import RewardTree
    from tests.test_rewards import _settle

    provider.register("H100", gpus=1, vram_gb=80)  # a claimant is a provider
    assert provider.status().claimable_wei is None  # no ledger yet: unknown, not zero
    _ledger_synced(swarm, settings)
    assert provider.status().claimable_wei == 0
    _sent_nothing(swarm, ADDRESS, provider.claim, SwarmError, "The ledger holds no finalized rewards for")

    earned = {ADDRESS: 100 * ONE, OTHER: 50 * ONE}
    engine = open_ledger(database_url(settings.home))
    with session(engine) as s:
        store_reward_tree(s, swarm.chain.chain_id, 1, RewardTree.build(earned).root, earned)
    engine.dispose()
    _settle(swarm, rpc, 1, earned, sum(earned.values()))
    _ledger_synced(swarm, settings)
    assert provider.status().claimable_wei == 100 * ONE

    wallet = swarm.balance_of(ADDRESS)
    claimed = provider.claim()
    assert (claimed.amount_wei, claimed.cumulative_wei, claimed.epoch) == (100 * ONE, 100 * ONE, 1)
    assert swarm.balance_of(ADDRESS) == wallet + 100 * ONE
    assert swarm.distributor.functions.claimed(ADDRESS).call() == 100 * ONE
    assert provider.status().claimable_wei == 0
    _sent_nothing(
        swarm, ADDRESS, provider.claim, SwarmError, "Nothing to claim: .* has claimed all 100 SWARM"
    )


# ── who signs ────────────────────────────────────────────────────────────────

def test_without_a_key_it_reads_any_provider_and_refuses_to_sign(
    provider: Provider, swarm: Swarm, settings: Settings
) -> None:
    provider.register("H100", gpus=1, vram_gb=80)
    provider.stake(1_500 * ONE)
    reader = Provider.open(settings=settings)
    status = reader.status(ADDRESS)
    assert status.provider == ADDRESS and status.stake_wei == 1_500 * ONE and status.eligible
    assert status.balance_wei == swarm.balance_of(ADDRESS) and status.unbonding_release is None
    assert not reader.status(OTHER).registered
    with pytest.raises(SwarmError, match="reads only"):
        reader.status()
    with pytest.raises(SwarmError, match="reads only"):
        reader.stake(10 * ONE)


def test_a_keystore_signs_and_a_wrong_password_sends_nothing(
    swarm: Swarm, settings: Settings, rpc: RpcClient
) -> None:
    from ledger.keys import Keystore

    info = Keystore(settings.home / "keys", kdf_iterations=1024).create("correct horse", name="prov")
    rpc.call("anvil_setBalance", info.address, hex(10**18))
    swarm.sender(dev_account(0).key).send(swarm.token.functions.transfer(info.address, 5_000 * ONE))

    keyed = Provider.open(key="prov", password="correct horse", settings=settings)
    keyed.register("L4", gpus=1, vram_gb=24)
    assert keyed.stake(1_500 * ONE).stake_wei == stake.provider_info(swarm, info.address).stake == 1_500 * ONE

    _sent_nothing(swarm, info.address, lambda: Provider.open(key="prov", password="wrong", settings=settings),
                  SwarmError, "Wrong password for keystore")
    with pytest.raises(SwarmError, match="either an account or a key, not both"):
        Provider.open(account=P, key="prov", password="correct horse", settings=settings)


# ── the example in docs/cli.md ───────────────────────────────────────────────

def test_the_docs_example_registers_and_stakes_in_a_few_lines(
    swarm: Swarm, settings: Settings, anvil_node: AnvilNode
) -> None:
    import os
    import re
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    guide = (root / "docs" / "cli.md").read_text()
    (example,) = re.findall(r"^## Python API\n.*?^```python\n(.*?)^```", guide, re.DOTALL | re.MULTILINE)
    env = os.environ | {"SWARM_HOME": str(settings.home), "SWARM_RPC_URL": anvil_node.config.url}
    done = subprocess.run([sys.executable, "-c", example], cwd=root, env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[1:] == [str(8_000 * ONE), "True"]
    info = stake.provider_info(swarm, ADDRESS)
    assert info.stake == 8_000 * ONE and info.gpus == 8 and swarm.vault.functions.isEligible(ADDRESS).call()
