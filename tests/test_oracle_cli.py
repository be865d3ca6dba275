"""`swarm oracle …` through the real command line: one epoch on demand (`close`), the schedule, the
per-provider report, a committee member signing on its own, and bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sqlmodel import Session, select

from anvil import RpcClient, dev_account
from ledger import stake
from ledger.client import Swarm
from ledger.db import open_ledger
from ledger.specs import store_spec
from market.migrations import MARKET
from oracle.migrations import ORACLE
from oracle.records import OracleEpoch, ProbeSample
from tests.conftest import one_line_error
from tests.sites import PROVIDER_A, PROVIDER_B, SiteNetwork

ONE = 10**18


@pytest.fixture
def staked(swarm: Swarm, swarm_home: Path, site_network: SiteNetwork) -> None:
    for index in (1, 2):
        sender = swarm.sender(dev_account(index).key)
        spec = site_network.site_spec(sender.address, gpu_model="cpu", vram_gb=1)
        stake.register(swarm, sender, store_spec(swarm_home, spec), 1)
        stake.stake(swarm, sender, 1_500 * ONE)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {"SWARM_DB_URL": f"sqlite:///{tmp_path / 'ledger.db'}"}


def test_one_epoch_on_demand_is_shown_per_provider_and_its_rewards_claimed(
    cli, cli_process, staked, env: dict[str, str], swarm: Swarm, rpc: RpcClient,
) -> None:
    done = cli_process("oracle", "close", "--probes", "2", "--json", env=env)  # Ray in its own process
    assert done.code == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["epoch"] == 1 and report["state"] == "submitted"
    rewards = {p["provider"]: int(p["reward_wei"]) for p in report["providers"]}
    assert set(rewards) == {PROVIDER_A, PROVIDER_B}
    assert sum(rewards.values()) == int(report["emission_wei"]) > 0

    probed = _probe_count(env)
    refused = cli_process("oracle", "close", env=env)  # epoch 1 is still in its challenge window
    assert ("Epoch 1 is still in its challenge window; run `swarm oracle close` again once it ends, "
            "or pass --wait") in one_line_error(refused)
    assert _probe_count(env) == probed  # refused before any site was asked anything

    rpc.increase_time(swarm.distributor.functions.challengeWindow().call() + 1)
    rpc.mine()
    done = cli_process("oracle", "close", "--probes", "1", "--json", env=env)
    assert done.code == 0, done.stderr
    assert json.loads(done.stdout)["epoch"] == 2
    assert swarm.distributor.functions.lastFinalizedEpoch().call() == 1

    shown = cli("oracle", "show", "1", env=env)
    assert shown.code == 0, shown.stderr
    assert "Epoch 1 (finalized)" in shown.stdout and PROVIDER_A in shown.stdout and "100%" in shown.stdout

    before = swarm.balance_of(PROVIDER_A)
    claimed = cli("provider", "claim", "--account", "1", env=env)
    assert claimed.code == 0, claimed.stderr
    assert swarm.balance_of(PROVIDER_A) - before == rewards[PROVIDER_A]


def test_the_scheduled_oracle_closes_and_finalizes_epochs_until_stopped(
    staked, env: dict[str, str], swarm: Swarm, swarm_home: Path, rpc: RpcClient, anvil_node, tmp_path: Path,
) -> None:
    full = os.environ | env | {"SWARM_HOME": str(swarm_home), "SWARM_RPC_URL": anvil_node.config.url}
    log = open(tmp_path / "oracle.log", "w")  # noqa: SIM115 -- closed in the finally below
    # -v: the epoch's steps in its log, for the message of a wait that fails
    process = subprocess.Popen(
        [sys.executable, "-m", "scripts.cli", "-v", "oracle", "run", "--epoch-length", "3"],
        env=full, stdout=log, stderr=subprocess.STDOUT,
    )
    engine = open_ledger(env["SWARM_DB_URL"], MARKET, ORACLE)
    try:
        _wait(lambda: _state(engine, 1) == "submitted", 90, process, tmp_path)
        rpc.increase_time(swarm.distributor.functions.challengeWindow().call() + 1)
        rpc.mine()
        _wait(lambda: _state(engine, 1) == "finalized", 60, process, tmp_path)
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
    finally:
        if process.poll() is None:
            process.kill()
        log.close()
    with Session(engine) as session:
        probes = session.exec(select(ProbeSample)).all()
    engine.dispose()
    assert swarm.distributor.functions.lastFinalizedEpoch().call() == 1
    assert {p.provider for p in probes} == {PROVIDER_A, PROVIDER_B} and len(probes) >= 4


def test_a_committee_member_signs_with_its_own_keystore(
    cli, staked, env: dict[str, str], swarm_home: Path, swarm: Swarm,
) -> None:
    from ledger.deploy import DEVNET_COMMITTEE_INDICES
    member = dev_account(DEVNET_COMMITTEE_INDICES[0])
    keys_dir = swarm_home / "keys"
    before = set(keys_dir.iterdir()) if keys_dir.exists() else set()
    try:
        _sign_as_member(cli, env, swarm_home, swarm, member)
    finally:  # the session's other tests expect the keystores they made, no more
        for path in set(keys_dir.iterdir()) - before if keys_dir.exists() else ():
            path.unlink()


def _sign_as_member(cli, env: dict[str, str], swarm_home: Path, swarm: Swarm, member) -> None:
    imported = cli("keys", "import", "--name", "member", env=env | {"SWARM_KEY_PASSWORD": "pw"},
                   input=member.key.hex() + "\n")
    assert imported.code == 0, imported.stderr
    engine = open_ledger(env["SWARM_DB_URL"], MARKET, ORACLE)
    try:
        from oracle.config import load_config
        from oracle.epoch import EpochRunner

        runner = EpochRunner(swarm, engine, swarm_home, load_config(), swarm.sender(dev_account(0).key), [],
                             epoch_length_s=0.001)
        from oracle.collector import Collector, site_clients

        sites = site_clients(
            engine,
            swarm.chain.chain_id,
            swarm_home,
            swarm.sender(member.key).sign_typed_data,
            swarm.market.address,
        )
        Collector(engine, swarm.chain.chain_id, sites, 8.0, 64, 2).probe([PROVIDER_A, PROVIDER_B])
        time.sleep(0.01)
        runner.indexer.sync()
        with Session(engine) as session:
            record = runner.aggregate(session, time.time())
            assert record is not None
            number = record.epoch
    finally:
        engine.dispose()
    signed = cli("oracle", "sign", str(number), "--key", "member", "--json",
                 env=env | {"SWARM_KEY_PASSWORD": "pw"})
    assert signed.code == 0, signed.stderr
    assert json.loads(signed.stdout) == {"epoch": number, "signed": True, "signatures": 1, "threshold": 3}
    again = cli(
        "oracle", "sign", str(number), "--key", "member", "--json", env=env | {"SWARM_KEY_PASSWORD": "pw"}
    )
    assert json.loads(again.stdout)["signed"] is False


def test_bad_input_gets_one_sentence(cli, cli_process, env: dict[str, str], tmp_path: Path) -> None:
    assert "no oracle record of epoch 99" in one_line_error(cli("oracle", "show", "99", env=env))
    bad = tmp_path / "oracle.toml"
    bad.write_text("[slashing.downtime]\nbps = 20000\n")
    text = one_line_error(cli_process("oracle", "close", "--config", str(bad), env=env))
    assert "slashing.downtime.bps" in text
    assert "nobody" in one_line_error(cli("oracle", "sign", "5", "--key", "nobody", env=env))


def _probe_count(env: dict[str, str]) -> int:
    engine = open_ledger(env["SWARM_DB_URL"], MARKET, ORACLE)
    try:
        with Session(engine) as session:
            return len(session.exec(select(ProbeSample)).all())
    finally:
        engine.dispose()


def _state(engine, epoch: int) -> str | None:
    with Session(engine) as session:
        found = session.exec(select(OracleEpoch).where(OracleEpoch.epoch == epoch)).first()
        return found.state if found else None


def _wait(check, timeout: float, process: subprocess.Popen, tmp_path: Path) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return
        assert process.poll() is None, (tmp_path / "oracle.log").read_text()
        time.sleep(0.5)
    raise AssertionError((tmp_path / "oracle.log").read_text()[-3000:])


def test_the_reward_pool_is_funded_from_a_signer(cli, swarm: Swarm) -> None:
    before = swarm.distributor.functions.totalFunded().call()
    done = cli("oracle", "fund", "250.5", "--account", "4", "--json")
    assert done.code == 0, done.stderr
    assert swarm.distributor.functions.totalFunded().call() - before == 250_500_000_000_000_000_000
    assert "greater than zero" in one_line_error(cli("oracle", "fund", "0", "--account", "4"))
