"""`swarm provider …` end to end on a real anvil, and its table of bad inputs."""

from __future__ import annotations

import json

import pytest

from anvil import AnvilConfig, AnvilNode, RpcClient, dev_account
from anvil.node import free_port
from ledger import jobs, stake
from ledger.client import Swarm
from ledger.deploy import DEVNET_COMMITTEE_INDICES, DEVNET_TREASURY_INDEX
from ledger.units import ONE
from tests.conftest import grant_role, one_line_error

P = 1  # the provider's dev account
ADDRESS = dev_account(P).address


def _json(result) -> dict:
    assert result.code == 0, result.stderr
    return json.loads(result.stdout)


def _register(cli, *extra: str) -> dict:
    return _json(cli("provider", "register", "--gpu-model", "H100", "--gpus", "8", "--vram-gb", "80",
                     "--region", "eu-west", "--account", str(P), "--json", *extra))


def test_register_stores_the_spec_and_sets_the_minimum_stake(cli, swarm: Swarm) -> None:
    done = _register(cli)
    assert done["spec"] == {"gpu_model": "H100", "gpus": 8, "vram_gb": 80, "region": "eu-west"}
    info = stake.provider_info(swarm, ADDRESS)
    assert info.registered and info.gpus == 8
    assert "0x" + info.spec_hash.hex() == done["spec_hash"]
    assert int(done["min_stake_wei"]) == 8 * 1_000 * ONE
    status = _json(cli("provider", "status", "--account", str(P), "--json"))
    assert status["hardware"] == done["spec"] and status["eligible"] is False
    assert done["price_per_unit_wei"] is None and status["price_per_unit_wei"] is None


def test_register_with_an_asking_price_stores_it_in_the_spec_and_status_shows_it(cli, swarm: Swarm) -> None:
    done = _register(cli, "--price", "0.0025")
    price = 25 * ONE // 10_000
    assert done["spec"] == {"gpu_model": "H100", "gpus": 8, "vram_gb": 80, "region": "eu-west",
                            "price_per_unit": str(price)}
    assert done["price_per_unit_wei"] == str(price)
    assert "0x" + stake.provider_info(swarm, ADDRESS).spec_hash.hex() == done["spec_hash"]
    status = _json(cli("provider", "status", ADDRESS, "--json"))
    assert status["hardware"] == done["spec"] and status["price_per_unit_wei"] == str(price)
    human = cli("provider", "status", ADDRESS)
    assert human.code == 0 and "asking price" in human.stdout and "0.0025 SWARM per unit" in human.stdout


def test_update_can_change_only_the_price(cli, swarm: Swarm) -> None:
    first = _register(cli, "--price", "0.002")
    updated = _register(cli, "--price", "0.003", "--update")
    assert updated["spec_hash"] != first["spec_hash"] and updated["price_per_unit_wei"] == str(
        3 * ONE // 1_000
    )
    assert "0x" + stake.provider_info(swarm, ADDRESS).spec_hash.hex() == updated["spec_hash"]


def test_register_again_is_refused_and_update_declares_new_hardware(cli, swarm: Swarm) -> None:
    _register(cli)
    assert "already registered with this hardware" in one_line_error(
        cli(
            "provider",
            "register",
            "--gpu-model",
            "H100",
            "--gpus",
            "8",
            "--vram-gb",
            "80",
            "--region",
            "eu-west",
            "--account",
            str(P),
        )
    )
    assert "pass --update" in one_line_error(
        cli(
            "provider",
            "register",
            "--gpu-model",
            "H100",
            "--gpus",
            "4",
            "--vram-gb",
            "80",
            "--account",
            str(P),
        )
    )
    updated = _json(cli("provider", "register", "--gpu-model", "H100", "--gpus", "4", "--vram-gb", "80",
                        "--account", str(P), "--update", "--json"))
    assert int(updated["min_stake_wei"]) == 4 * 1_000 * ONE
    assert stake.provider_info(swarm, ADDRESS).gpus == 4


def test_register_records_the_site_in_the_spec(cli, swarm: Swarm) -> None:
    fingerprint = "ab" * 32
    done = _register(cli, "--site-url", "https://203.0.113.7:8443", "--site-fingerprint", fingerprint)
    assert (
        done["spec"]["site_url"] == "https://203.0.113.7:8443"
        and done["spec"]["site_fingerprint"] == fingerprint
    )
    assert "0x" + stake.provider_info(swarm, ADDRESS).spec_hash.hex() == done["spec_hash"]
    half = cli("provider", "register", "--gpu-model", "H100", "--gpus", "8", "--vram-gb", "80",
               "--site-url", "https://203.0.113.7:8443", "--account", str(P), "--update")
    assert "needs both its url and its certificate's fingerprint" in one_line_error(half)


def test_serve_names_the_registration_that_fits_and_the_update_it_prints_runs(
        cli, swarm: Swarm, swarm_home, monkeypatch) -> None:
    """`serve` prints how to register its site: a first registration (no --update, which would be
    refused) for a provider not yet registered; for one registered, the --update that keeps the
    hardware it declared, which runs as printed."""
    from scripts.provider import register_command

    monkeypatch.setenv("SWARM_HOME", str(swarm_home))
    url, fingerprint = "https://127.0.0.1:8443", "ab" * 32
    first = register_command(swarm, ADDRESS, url, fingerprint)
    assert first.startswith("swarm provider register --gpu-model ") and "--update" not in first
    assert all(flag in first for flag in ("--gpus", "--vram-gb", f"--site-url {url}"))
    _register(cli, "--price", "0.0025")
    update = register_command(swarm, ADDRESS, url, fingerprint)
    assert update == ("swarm provider register --update --gpu-model H100 --gpus 8 --vram-gb 80 "
                      f"--region eu-west --price 0.0025 --site-url {url} --site-fingerprint {fingerprint}")
    done = _json(cli(*update.split()[1:], "--account", str(P), "--json"))
    assert (done["spec"]["gpu_model"], done["spec"]["price_per_unit"]) == ("H100", str(25 * ONE // 10_000))
    assert done["spec"]["site_url"] == url and done["spec"]["site_fingerprint"] == fingerprint


def test_serve_takes_port_0_for_a_free_port() -> None:
    """docs/cli.md offers `--port 0`, which the site's code takes: the option's parsing does too."""
    from scripts.provider import serve

    assert serve.make_context("serve", ["--port", "0"]).params["port"] == 0
    with pytest.raises(Exception, match="65536 is not in the range 0<=x<=65535"):
        serve.make_context("serve", ["--port", "65536"])


def test_stake_unstake_withdraw_round_trip(cli, swarm: Swarm, rpc: RpcClient) -> None:
    _register(cli)
    wallet = swarm.balance_of(ADDRESS)
    staked = _json(cli("provider", "stake", "9000", "--account", str(P), "--json"))
    assert int(staked["stake_wei"]) == 9_000 * ONE
    assert swarm.balance_of(ADDRESS) == wallet - 9_000 * ONE
    assert _json(cli("provider", "status", "--account", str(P), "--json"))["eligible"] is True

    unbonding = _json(cli("provider", "unstake", "2500.5", "--account", str(P), "--json"))
    assert int(unbonding["unbonding_wei"]) == 25_005 * ONE // 10
    status = _json(cli("provider", "status", ADDRESS, "--json"))
    assert int(status["stake_wei"]) == 9_000 * ONE - 25_005 * ONE // 10
    assert status["unbonding_release"] == stake.provider_info(swarm, ADDRESS).unbonding_end

    rpc.increase_time(swarm.vault.functions.unbondingPeriod().call())
    done = _json(cli("provider", "withdraw", "--account", str(P), "--json"))
    assert int(done["unbonding_wei"]) == 0
    assert swarm.balance_of(ADDRESS) == wallet - 9_000 * ONE + 25_005 * ONE // 10


def test_withdraw_waits_for_the_hold_of_a_job_the_provider_took(cli, swarm: Swarm, rpc: RpcClient) -> None:
    # Taking a job, unstaking everything and leaving before the job could be failed is refused, until
    # the exit bound: the release plus the challenge window and the report lag, past which no hold lasts.
    _register(cli)
    _json(cli("provider", "stake", "8000", "--account", str(P), "--json"))
    buyer, matcher = swarm.sender(dev_account(4).key), swarm.sender(dev_account(0).key)
    deadline = swarm.chain.timestamp() + 10 * swarm.vault.functions.unbondingPeriod().call()
    job_id, _ = jobs.post_job(swarm, buyer, b"\x07" * 32, 10**15, 100, deadline)
    jobs.assign_job(swarm, matcher, job_id, ADDRESS, 10**15)
    _json(cli("provider", "unstake", "8000", "--account", str(P), "--json"))
    rpc.increase_time(swarm.vault.functions.unbondingPeriod().call())

    held = one_line_error(cli("provider", "withdraw", "--account", str(P)))
    assert "is held until" in held and "can still slash it" in held
    assert stake.provider_info(swarm, ADDRESS).unbonding == 8_000 * ONE
    jobs.fail_job(swarm, matcher, job_id, "provider-lost", 1_000)  # the slash still finds the stake
    assert stake.provider_info(swarm, ADDRESS).unbonding == 7_200 * ONE

    info = stake.provider_info(swarm, ADDRESS)
    distributor = swarm.contract("RewardDistributor").functions
    exit_by = info.unbonding_end + distributor.challengeWindow().call() + distributor.maxReportLag().call()
    assert info.held_until == exit_by < deadline + 1, "the job would hold it longer; the vault cuts the hold"
    assert _json(cli("provider", "status", ADDRESS, "--json"))["held_until"] == exit_by
    rpc.increase_time(exit_by - swarm.chain.timestamp())
    wallet = swarm.balance_of(ADDRESS)
    done = _json(cli("provider", "withdraw", "--account", str(P), "--json"))
    assert int(done["unbonding_wei"]) == 0
    assert swarm.balance_of(ADDRESS) == wallet + 7_200 * ONE, "what the slash left, before the job's deadline"


def test_unjail_after_the_jail_time(cli, swarm: Swarm, rpc: RpcClient) -> None:
    _register(cli)
    _json(cli("provider", "stake", "8000", "--account", str(P), "--json"))
    admin = swarm.sender(dev_account(0).key)
    vault = swarm.vault.functions
    grant_role(swarm, "StakingVault", "SLASHER_ROLE", admin.address)
    admin.send(vault.jail(ADDRESS, swarm.chain.timestamp() + 300))
    assert "is jailed until" in one_line_error(cli("provider", "unjail", "--account", str(P)))
    rpc.increase_time(301)
    _json(cli("provider", "unjail", "--account", str(P), "--json"))
    assert vault.isEligible(ADDRESS).call()
    assert "is not jailed" in one_line_error(cli("provider", "unjail", "--account", str(P)))


# ── bad inputs: one sentence, exit 1, nothing sent ───────────────────────────

def _marks(swarm: Swarm) -> tuple[int, int]:
    w3 = swarm.chain.w3
    return w3.eth.get_transaction_count(ADDRESS), w3.eth.block_number


BAD_INPUTS = [
    (("provider", "status", "0x12"), "provider address '0x12' is not an Ethereum address"),
    (("provider", "stake", "2000000", "--account", str(P)), "less than the 2,000,000 SWARM to stake"),
    (("provider", "stake", "0", "--account", str(P)), "amount must be greater than zero"),
    (("provider", "stake", "lots", "--account", str(P)), "is not a number"),
    (("provider", "unstake", "9001", "--account", str(P)), "Cannot unstake 9,001 SWARM"),
    (("provider", "withdraw", "--account", str(P)), "has nothing unbonding"),
    (
        ("provider", "stake", "10", "--account", "12"),
        "--account 12 is not one of anvil's 10 funded dev accounts",
    ),
    (("provider", "stake", "10", "--account", "1", "--key", "mine"), "either --account or --key, not both"),
    (
        (
            "provider",
            "register",
            "--gpu-model",
            "H 100",
            "--gpus",
            "8",
            "--vram-gb",
            "80",
            "--account",
            str(P),
        ),
        "is not a model name",
    ),
    (
        (
            "provider",
            "register",
            "--gpu-model",
            "H100",
            "--gpus",
            "0",
            "--vram-gb",
            "80",
            "--account",
            str(P),
        ),
        "gpus must be from 1 to",
    ),
    (
        (
            "provider",
            "register",
            "--gpu-model",
            "H100",
            "--gpus",
            "8",
            "--vram-gb",
            "80",
            "--price",
            "0",
            "--account",
            str(P),
        ),
        "price per unit must be greater than zero",
    ),
    (
        (
            "provider",
            "register",
            "--gpu-model",
            "H100",
            "--gpus",
            "8",
            "--vram-gb",
            "80",
            "--price",
            "cheap",
            "--account",
            str(P),
        ),
        "price per unit 'cheap' is not a number",
    ),
    (
        (
            "provider",
            "register",
            "--gpu-model",
            "H100",
            "--gpus",
            "8",
            "--vram-gb",
            "80",
            "--price",
            str(2**128),
            "--account",
            str(P),
        ),
        "price per unit must be from 1 to",
    ),
]


@pytest.mark.parametrize(("args", "message"), BAD_INPUTS, ids=[
    "malformed-address", "above-balance", "zero", "not-a-number", "unstake-above-stake", "withdraw-nothing",
    "unknown-account", "account-and-key", "bad-gpu-model", "zero-gpus", "zero-price", "price-not-a-number",
    "price-above-uint128"])
def test_bad_input_is_refused_and_nothing_is_sent(cli, swarm: Swarm, args, message) -> None:
    stake.register(swarm, swarm.sender(dev_account(P).key), b"\x01" * 32, 1)
    stake.stake(swarm, swarm.sender(dev_account(P).key), 9_000 * ONE)
    marks = _marks(swarm)
    assert message in one_line_error(cli(*args))
    assert _marks(swarm) == marks


def test_withdraw_before_unbonding_ends_names_the_release_time(cli, swarm: Swarm) -> None:
    p = swarm.sender(dev_account(P).key)
    stake.register(swarm, p, b"\x01" * 32, 1)
    stake.stake(swarm, p, 2_000 * ONE)
    stake.request_unstake(swarm, p, 500 * ONE)
    marks = _marks(swarm)
    text = one_line_error(cli("provider", "withdraw", "--account", str(P)))
    assert "is still unbonding until" in text and "withdraw after that" in text
    assert _marks(swarm) == marks


def test_rpc_down_is_one_sentence(cli, tmp_path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    text = one_line_error(cli("provider", "stake", "10", "--account", "1", env={"SWARM_RPC_URL": dead}))
    assert f"No chain answers at {dead}" in text


def test_account_is_refused_on_a_chain_that_is_not_a_devnet(cli, tmp_path) -> None:
    node = AnvilNode(AnvilConfig(home=tmp_path, port=free_port(), chain_id=4242))
    node.start()
    try:
        env = {"SWARM_HOME": str(tmp_path), "SWARM_RPC_URL": node.config.url,
               "SWARM_DEPLOYER_KEY": dev_account(0).key.hex()}
        committee = ",".join(dev_account(i).address for i in DEVNET_COMMITTEE_INDICES)
        deploy = ("chain", "deploy", "--committee", committee, "--threshold", "3")
        assert "pass --treasury" in one_line_error(cli(*deploy, env=env))  # off a devnet it is never guessed
        assert "pass --timelock-delay of more than" in one_line_error(
            cli(*deploy, "--treasury", dev_account(DEVNET_TREASURY_INDEX).address, "--timelock-delay", "3600",
                env=env))
        treasury = ("--treasury", dev_account(DEVNET_TREASURY_INDEX).address)
        one_key = one_line_error(cli(*deploy, *treasury, env=env))  # the deployer's key for every role
        assert "needs a key of its own" in one_key
        assert node.rpc.block_number() == 0, "a refused deploy sends nothing"
        roles = ("--matcher", dev_account(6).address, "--arbiter", dev_account(7).address,
                 "--guardian", dev_account(8).address)
        deployed = cli(*deploy, *treasury, *roles, "--json", env=env)
        assert deployed.code == 0, deployed.stderr
        assert json.loads(deployed.stdout)["funded"] == []  # no dev funding off a devnet
        before = node.rpc.block_number()
        text = one_line_error(cli("provider", "stake", "10", "--account", "1", env=env))
        assert "refused on chain 4242, which is not a devnet" in text
        assert node.rpc.block_number() == before
        assert dev_account(0).key.hex() not in deployed.stdout + deployed.stderr
    finally:
        node.stop()


def test_keystore_signed_stake_and_wrong_password(
    cli, swarm: Swarm, swarm_home, tmp_path, rpc: RpcClient
) -> None:
    import shutil

    from ledger.keys import Keystore

    home = tmp_path / "home"
    shutil.copytree(swarm_home / "deployments", home / "deployments")
    info = Keystore(home / "keys", kdf_iterations=1024).create("correct horse", name="prov")
    rpc.call("anvil_setBalance", info.address, hex(10**18))
    funder = swarm.sender(dev_account(0).key)
    funder.send(swarm.token.functions.transfer(info.address, 5_000 * ONE))
    env = {"SWARM_HOME": str(home), "SWARM_KEY_PASSWORD": "correct horse"}

    registered = cli("provider", "register", "--gpu-model", "L4", "--gpus", "1", "--vram-gb", "24",
                     "--key", "prov", "--json", env=env)
    assert registered.code == 0, registered.stderr
    staked = _json(cli("provider", "stake", "1500", "--key", "prov", "--json", env=env))
    assert int(staked["stake_wei"]) == 1_500 * ONE
    assert stake.provider_info(swarm, info.address).stake == 1_500 * ONE

    nonce = swarm.chain.w3.eth.get_transaction_count(info.address)
    wrong = cli("provider", "stake", "10", "--key", "prov", env=env | {"SWARM_KEY_PASSWORD": "wrong"})
    assert "Wrong password for keystore" in one_line_error(wrong)
    assert swarm.chain.w3.eth.get_transaction_count(info.address) == nonce
    unknown = cli("provider", "stake", "10", "--key", "nobody", env=env)
    assert "No keystore for nobody" in one_line_error(unknown)


def test_claim_uses_the_proof_from_the_ledger_and_status_shows_what_is_claimable(
    cli, swarm: Swarm, rpc: RpcClient, tmp_path
) -> None:
    from ledger.db import migrate, open_engine, session
    from ledger.indexer import store_reward_tree
    from ledger.merkle import RewardTree
    from tests.test_rewards import _settle

    db = {"SWARM_DB_URL": f"sqlite:///{tmp_path / 'ledger.db'}"}
    engine = open_engine(db["SWARM_DB_URL"])
    migrate(engine)
    other = dev_account(2).address

    def publish(epoch: int, cumulative: dict[str, int]) -> None:
        with session(engine) as s:
            store_reward_tree(s, swarm.chain.chain_id, epoch, RewardTree.build(cumulative).root, cumulative)
        _settle(swarm, rpc, epoch, cumulative, sum(cumulative.values()) - (0 if epoch == 1 else 150 * ONE))

    stake.register(swarm, swarm.sender(dev_account(P).key), b"\x0c" * 32, 1)  # a claimant is a provider
    never_synced = _json(cli("provider", "status", "--account", str(P), "--json", env=db))
    assert never_synced["claimable_wei"] is None
    publish(1, {ADDRESS: 100 * ONE, other: 50 * ONE})
    assert _json(cli("ledger", "sync", "--json", env=db))["events"] > 0
    assert (
        int(_json(cli("provider", "status", "--account", str(P), "--json", env=db))["claimable_wei"])
        == 100 * ONE
    )

    wallet = swarm.balance_of(ADDRESS)
    _json(cli("provider", "claim", "--account", str(P), "--json", env=db))
    assert swarm.balance_of(ADDRESS) == wallet + 100 * ONE
    assert int(_json(cli("provider", "status", "--account", str(P), "--json", env=db))["claimable_wei"]) == 0
    assert "Nothing to claim" in one_line_error(cli("provider", "claim", "--account", str(P), env=db))

    publish(2, {ADDRESS: 160 * ONE, other: 90 * ONE})  # finalized on chain, ledger not synced yet
    assert "run `swarm ledger sync` and retry" in one_line_error(
        cli("provider", "claim", "--account", str(P), env=db)
    )
    _json(cli("ledger", "sync", "--json", env=db))
    _json(cli("provider", "claim", "--account", str(P), "--json", env=db))
    assert swarm.balance_of(ADDRESS) == wallet + 160 * ONE
    engine.dispose()


def test_a_site_on_a_port_another_program_holds_is_refused_before_its_cluster_starts(
        cli_process, swarm_home, deployed) -> None:
    import socket

    with socket.create_server(("127.0.0.1", free_port())) as held:
        port = held.getsockname()[1]
        text = one_line_error(cli_process("provider", "serve", "--account", "2", "--port", str(port)))
    assert f"cannot listen on 127.0.0.1:{port}" in text and "--port" in text
    assert not (swarm_home / "ray" / "cluster.json").exists(), "no Ray cluster was started for it"
