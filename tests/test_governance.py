"""Admin changes go through the deployment's timelock, on real anvils: the deployer's key cannot
change a parameter itself, a scheduled change waits out the timelock's delay before anyone may
execute it, and `swarm chain admin` schedules, shows, executes and cancels with one-sentence errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace

import pytest

from anvil import AnvilConfig, AnvilNode, RpcClient, dev_account
from anvil.node import free_port
from ledger import governance
from ledger.chain import connect
from ledger.client import Swarm
from ledger.deploy import DeployParams, deploy, error_decoder
from ledger.errors import SwarmError, TransactionFailed
from ledger.governance import OperationState
from ledger.tx import Sender
from tests.conftest import one_line_error

DELAY = 600  # longer than the devnet's unbonding (300 s) plus its challenge window and report lag (270 s)
PROPOSER, STRANGER = dev_account(0), dev_account(7)


@pytest.fixture(scope="module")
def delayed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """A deployment of its own whose timelock delays every change by DELAY, on an anvil of its own
    (whose clock the tests move on)."""
    home = tmp_path_factory.mktemp("timelocked-home")
    node = AnvilNode(AnvilConfig(home=home, port=free_port()))
    node.start()
    chain = connect(node.config.url)
    params = replace(DeployParams.devnet(), timelock_delay=DELAY)
    result = deploy(chain, Sender(chain, PROPOSER.key, error_decoder()), home, params)
    yield {"swarm": Swarm(chain, result.deployment), "rpc": node.rpc, "home": home, "url": node.config.url,
           "port": node.config.port}
    node.stop()


@pytest.fixture
def timelocked(delayed: dict) -> Iterator[dict]:
    snapshot = delayed["rpc"].snapshot()
    yield delayed | {"swarm": Swarm(delayed["swarm"].chain, delayed["swarm"].deployment)}
    delayed["rpc"].revert(snapshot)


def _later(rpc: RpcClient, seconds: int) -> None:
    rpc.increase_time(seconds)
    rpc.mine()


def test_the_deployers_key_cannot_change_a_parameter_itself(swarm: Swarm) -> None:
    deployer = swarm.sender(PROPOSER.key)
    with pytest.raises(TransactionFailed) as refused:
        deployer.send(swarm.vault.functions.setUnbondingPeriod(600))
    revert = refused.value.revert
    assert revert is not None and revert.name == "AccessControlUnauthorizedAccount"
    assert revert.args == {"account": deployer.address, "neededRole": bytes(32)}


def test_on_a_devnet_a_change_is_scheduled_and_executed_at_once(swarm: Swarm) -> None:
    proposer = swarm.sender(PROPOSER.key)
    call = governance.admin_call(swarm, "RewardDistributor", "setMaxReportLag", 200)
    scheduled = governance.schedule(swarm, proposer, call)
    assert scheduled.state is OperationState.READY and scheduled.id == call.operation_id
    assert scheduled.id == bytes(swarm.read(governance.TIMELOCK, "hashOperation", call.target, 0, call.data,
                                            bytes(32), call.salt))
    governance.execute(swarm, swarm.sender(STRANGER.key), call)  # anyone executes a ready operation
    assert swarm.distributor.functions.maxReportLag().call() == 200
    assert governance.operation(swarm, call.operation_id).state is OperationState.DONE


def test_a_change_waits_out_the_delay_then_anyone_executes_it(timelocked: dict) -> None:
    swarm, rpc = timelocked["swarm"], timelocked["rpc"]
    call = governance.admin_call(swarm, "StakingVault", "setUnbondingPeriod", 900)
    scheduled = governance.schedule(swarm, swarm.sender(PROPOSER.key), call)
    assert scheduled.state is OperationState.WAITING
    assert scheduled.ready_at >= swarm.chain.timestamp() + DELAY - 1
    anyone = swarm.sender(STRANGER.key)

    with pytest.raises(SwarmError, match=r"is not ready: it may be executed from .*, \d+ s from now\.$"):
        governance.execute(swarm, anyone, call)
    timelock = swarm.contract(governance.TIMELOCK).functions
    # The contract refuses it too.
    with pytest.raises(TransactionFailed, match="TimelockUnexpectedOperationState"):
        anyone.send(timelock.execute(call.target, 0, call.data, bytes(32), call.salt))
    _later(rpc, DELAY // 2)
    with pytest.raises(SwarmError, match="is not ready"):
        governance.execute(swarm, anyone, call)
    assert swarm.vault.functions.unbondingPeriod().call() == 300

    _later(rpc, DELAY // 2)
    governance.execute(swarm, anyone, call)
    assert swarm.vault.functions.unbondingPeriod().call() == 900
    with pytest.raises(SwarmError, match="executed already"):
        governance.execute(swarm, anyone, call)


def test_a_scheduled_change_can_be_cancelled_by_a_proposer_only(timelocked: dict) -> None:
    swarm, rpc = timelocked["swarm"], timelocked["rpc"]
    call = governance.admin_call(swarm, "JobMarket", "setJobLimits", 86_400, 10**13)
    governance.schedule(swarm, swarm.sender(PROPOSER.key), call)
    with pytest.raises(TransactionFailed, match="AccessControlUnauthorizedAccount"):
        governance.cancel(swarm, swarm.sender(STRANGER.key), call.operation_id)
    governance.cancel(swarm, swarm.sender(PROPOSER.key), call.operation_id)
    _later(rpc, DELAY + 1)
    with pytest.raises(SwarmError, match="is cancelled; there is nothing to execute"):
        governance.execute(swarm, swarm.sender(STRANGER.key), call)
    assert swarm.market.functions.maxJobDuration().call() == 30 * 86_400


def test_a_change_the_contract_would_refuse_is_refused_before_it_is_scheduled(timelocked: dict) -> None:
    swarm = timelocked["swarm"]
    unbonding = swarm.vault.functions.unbondingPeriod().call()
    window = swarm.distributor.functions.challengeWindow().call()
    call = governance.admin_call(swarm, "RewardDistributor", "setMaxReportLag", unbonding - window + 1)
    with pytest.raises(TransactionFailed, match="ReportingLongerThanUnbonding") as refused:
        governance.schedule(swarm, swarm.sender(PROPOSER.key), call)
    assert "would fail as the admin now" in str(refused.value)
    assert governance.operations(swarm) == []


# ── the command line ──────────────────────────────────────────────────────────────────
def _env(timelocked: dict) -> dict[str, str]:
    return {"SWARM_HOME": str(timelocked["home"]), "SWARM_RPC_URL": timelocked["url"],
            "SWARM_ANVIL_PORT": str(timelocked["port"])}


def test_the_cli_schedules_shows_and_executes_a_change_once_ready(cli, timelocked: dict) -> None:
    swarm, env = timelocked["swarm"], _env(timelocked)
    done = cli("chain", "admin", "schedule", "StakingVault", "grantRole", "SLASHER_ROLE", STRANGER.address,
               "--json", env=env)
    assert done.code == 0, done.stderr
    scheduled = json.loads(done.stdout)
    assert scheduled["state"] == "waiting" and scheduled["ready_at"] >= swarm.chain.timestamp() + DELAY - 1
    role = swarm.vault.functions.SLASHER_ROLE().call()
    assert scheduled["call"] == f"StakingVault.grantRole(0x{role.hex()}, {STRANGER.address})"
    human = cli("chain", "admin", "status", env=env)
    assert human.code == 0 and scheduled["id"] in human.stdout and "waiting" in human.stdout

    early = one_line_error(cli("chain", "admin", "execute", scheduled["id"], env=env))
    assert "is not ready: it may be executed from" in early
    _later(timelocked["rpc"], DELAY + 1)
    executed = cli("chain", "admin", "execute", scheduled["id"], "--account", "7", env=env)
    assert executed.code == 0, executed.stderr
    assert "Executed StakingVault.grantRole" in executed.stdout
    assert swarm.vault.functions.hasRole(swarm.vault.functions.SLASHER_ROLE().call(), STRANGER.address).call()
    shown = json.loads(cli("chain", "admin", "status", scheduled["id"], "--json", env=env).stdout)
    assert shown["delay_s"] == DELAY and shown["operations"][0]["state"] == "done"
    reporting = swarm.contract("RewardDistributor").functions
    assert shown["exit_bound_s"] == (swarm.vault.functions.unbondingPeriod().call()
                                     + reporting.challengeWindow().call() + reporting.maxReportLag().call())
    assert shown["bound_to_vault"] is False, "a devnet's timelock is left unbound"
    assert "is not bound to the vault" in human.stdout


@pytest.mark.parametrize(("args", "says"), [
    (["schedule", "Treasury", "setFee", "1"], "'Treasury' is not a contract of this deployment"),
    (["schedule", "StakingVault", "setNothing"], "StakingVault has no function 'setNothing'"),
    (["schedule", "StakingVault", "unbondingPeriod"], "only reads; there is nothing to schedule"),
    (["schedule", "StakingVault", "setUnbondingPeriod"], "takes the arguments of setUnbondingPeriod(uint64)"),
    (["schedule", "StakingVault", "setUnbondingPeriod", "two weeks"], "is not a whole number"),
    (["schedule", "StakingVault", "grantRole", "MAYOR_ROLE", STRANGER.address], "has no role MAYOR_ROLE"),
    (["schedule", "RewardDistributor", "setMaxReportLag", "290"], "ReportingLongerThanUnbonding"),
    (["schedule", "StakingVault", "setUnbondingPeriod", "900", "--salt", "0x12"], "--salt '0x12' is not 0x"),
    (["execute", "0x1234"], "Operation id '0x1234' is not 0x followed by 64 hex digits"),
    (["execute", "0x" + "ab" * 32], "is not scheduled on this deployment's timelock"),
    (["cancel", "0x" + "ab" * 32], "only a scheduled, unexecuted operation can be cancelled"),
])
def test_bad_admin_input_is_one_sentence_and_exit_code_1(cli, timelocked: dict, args: list[str],
                                                         says: str) -> None:
    assert says in one_line_error(cli("chain", "admin", *args, env=_env(timelocked)))
