"""Bad input gets one clear sentence, exit code 1, and nothing half-done on chain."""

from __future__ import annotations

import json

import pytest

from anvil import dev_account
from anvil.node import free_port
from ledger import jobs, stake
from ledger.client import Swarm
from ledger.deploy import Deployment
from ledger.errors import InvalidInput
from ledger.permit import Allowance
from ledger.units import ONE
from tests.conftest import one_line_error

PROVIDER = dev_account(1)


def _nothing_sent(swarm: Swarm, address: str, nonce: int, block: int) -> bool:
    w3 = swarm.chain.w3
    return w3.eth.get_transaction_count(address) == nonce and w3.eth.block_number == block


@pytest.fixture
def registered(swarm: Swarm):
    p = swarm.sender(PROVIDER.key)
    stake.register(swarm, p, b"\x01" * 32, 1)
    return p


def _marks(swarm: Swarm, address: str) -> tuple[int, int]:
    return swarm.chain.w3.eth.get_transaction_count(address), swarm.chain.w3.eth.block_number


@pytest.mark.parametrize(
    ("action", "message"),
    [
        (lambda s, p: stake.stake(s, p, 0), "stake amount must be greater than zero, got 0."),
        (lambda s, p: stake.request_unstake(s, p, 0), "unstake amount must be greater than zero, got 0."),
        (lambda s, p: stake.register(s, p, b"\x01" * 32, 0), "gpus must be a whole number from 1 to"),
        (
            lambda s, p: stake.stake(s, p, 2_000_000 * ONE),
            "holds 1,000,000 SWARM, less than the 2,000,000 SWARM to stake",
        ),
        (lambda s, p: stake.stake(s, p, 10 * ONE, Allowance.APPROVED), "allows the contract at 0x"),
        (
            lambda s, p: jobs.post_job(s, p, b"\x02" * 32, 0, 10, s.chain.timestamp() + 60),
            "max price per unit must be greater than zero",
        ),
        (
            lambda s, p: jobs.post_job(s, p, b"\x02" * 32, ONE, 0, s.chain.timestamp() + 60),
            "max units must be a whole number",
        ),
        (
            lambda s, p: jobs.post_job(s, p, b"\x02" * 32, ONE, 10, s.chain.timestamp()),
            "is not after the chain's current time",
        ),
        (
            lambda s, p: jobs.post_job(s, p, b"\x02" * 32, 10**6 * ONE, 10, s.chain.timestamp() + 60),
            "less than the 10,000,000 SWARM to escrow for this job",
        ),
        (
            lambda s, p: jobs.assign_job(s, p, 1, "0x1234", ONE),
            "provider address '0x1234' is not an Ethereum address",
        ),
    ],
    ids=[
        "zero-stake",
        "zero-unstake",
        "zero-gpus",
        "stake-above-balance",
        "no-allowance",
        "zero-price",
        "zero-units",
        "past-deadline",
        "escrow-above-balance",
        "malformed-address",
    ],
)
def test_bad_input_is_refused_before_anything_is_sent(swarm: Swarm, registered, action, message) -> None:
    nonce, block = _marks(swarm, registered.address)
    with pytest.raises(InvalidInput) as refused:
        action(swarm, registered)
    assert message in str(refused.value)
    assert "\n" not in str(refused.value)
    assert _nothing_sent(swarm, registered.address, nonce, block)


def test_a_call_that_would_revert_is_not_sent(swarm: Swarm, registered) -> None:
    nonce, block = _marks(swarm, registered.address)
    with pytest.raises(Exception, match="NothingToWithdraw"):
        stake.withdraw(swarm, registered)
    assert _nothing_sent(swarm, registered.address, nonce, block)


# ── the command line ────────────────────────────────────────────────────────

def test_cli_malformed_address(cli) -> None:
    text = one_line_error(cli("token", "balance", "0xnot-an-address"))
    assert "'0xnot-an-address' is not an Ethereum address" in text


def test_cli_bad_checksum(cli) -> None:
    bad = "0x70997970c51812dc3a010c7d01b50e0d17dc79C8"
    assert "bad checksum" in one_line_error(cli("token", "balance", bad))


def test_cli_malformed_gpu_uuid_registers_nothing(cli, swarm: Swarm) -> None:
    sender = dev_account(4).address
    nonce, block = _marks(swarm, sender)
    text = one_line_error(cli("provider", "register", "--gpu-model", "H100", "--gpus", "1", "--vram-gb", "80",
                              "--gpu-uuid", "gpu0", "--account", "4"))
    assert "GPU UUID 'gpu0' is not one NVML gives; copy it from `nvidia-smi -L`" in text
    assert _nothing_sent(swarm, sender, nonce, block)


def test_cli_zero_amount_sends_nothing(cli, swarm: Swarm) -> None:
    sender = dev_account(3).address
    nonce, block = _marks(swarm, sender)
    text = one_line_error(cli("token", "transfer", dev_account(4).address, "0", "--account", "3"))
    assert "amount must be greater than zero" in text
    assert _nothing_sent(swarm, sender, nonce, block)


def test_cli_amount_above_balance_sends_nothing(cli, swarm: Swarm) -> None:
    sender = dev_account(3).address
    nonce, block = _marks(swarm, sender)
    text = one_line_error(cli("token", "transfer", dev_account(4).address, "5000000", "--account", "3"))
    assert "less than the 5,000,000 SWARM to send" in text
    assert _nothing_sent(swarm, sender, nonce, block)


def test_cli_not_a_number(cli) -> None:
    assert "is not a number" in one_line_error(
        cli("token", "transfer", dev_account(4).address, "ten", "--account", "3")
    )


def test_cli_transfer_moves_tokens(cli, swarm: Swarm) -> None:
    before = swarm.balance_of(dev_account(4).address)
    done = cli("token", "transfer", dev_account(4).address, "12.5", "--account", "3", "--json")
    assert done.code == 0, done.stderr
    assert json.loads(done.stdout)["amount_wei"] == str(125 * ONE // 10)
    assert swarm.balance_of(dev_account(4).address) == before + 125 * ONE // 10


def test_cli_wrong_chain_id_deploys_nothing(cli, swarm: Swarm, swarm_home) -> None:
    block = swarm.chain.w3.eth.block_number
    text = one_line_error(cli("chain", "deploy", "--chain-id", "1"))
    assert "has chain id 31337, not 1" in text
    assert swarm.chain.w3.eth.block_number == block
    assert not Deployment.path(swarm_home, 1).exists()


def test_cli_anvil_not_running(cli, tmp_path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    env = {"SWARM_RPC_URL": dead, "SWARM_HOME": str(tmp_path)}
    for args in (("chain", "deploy"), ("token", "balance", "--account", "1")):
        text = one_line_error(cli(*args, env=env))
        assert f"No chain answers at {dead}" in text and "swarm chain up" in text
    assert not (tmp_path / "deployments").exists()


def test_cli_not_deployed_says_how_to_deploy(cli, tmp_path) -> None:
    text = one_line_error(cli("token", "balance", "--account", "1", env={"SWARM_HOME": str(tmp_path)}))
    assert "run `swarm chain deploy` first" in text


def test_cli_usage_error_exits_2(cli) -> None:
    assert cli("chain", "deploy", "--chain-id", "seven").code == 2


def test_cli_unknown_gpu_model_is_refused_naming_the_known_ones_and_registers_nothing(
    cli, swarm: Swarm
) -> None:
    sender = dev_account(4).address
    nonce, block = _marks(swarm, sender)
    text = one_line_error(cli("provider", "register", "--gpu-model", "B200", "--gpus", "8",
                              "--vram-gb", "192", "--account", "4"))
    assert "gpu model 'B200' has no reference throughput" in text and "would never earn" in text
    assert "declare one of H100, H200, A100, L40S, L4, RTX4090, A10, T4, V100, or cpu" in text
    assert _nothing_sent(swarm, sender, nonce, block)
    assert not stake.provider_info(swarm, sender).registered


@pytest.fixture(scope="module")
def other_chain(tmp_path_factory: pytest.TempPathFactory):
    """An anvil whose chain id (4242) is not a devnet's, so only SWARM_DEPLOYER_KEY may deploy."""
    from anvil import AnvilConfig, AnvilNode

    home = tmp_path_factory.mktemp("other-chain")
    node = AnvilNode(AnvilConfig(home=home, port=free_port(), chain_id=4242))
    node.start()
    yield node
    node.stop()


@pytest.mark.parametrize("key", ["0x1234", "ab" * 33, "0x" + "00" * 32, "not a key"],
                         ids=["too-short", "too-long", "zero", "not-hex"])
def test_cli_deployer_key_of_the_wrong_shape_is_one_sentence_and_deploys_nothing(
    cli, other_chain, tmp_path, key: str
) -> None:
    from ledger.deploy import DEVNET_COMMITTEE_INDICES

    committee = ",".join(dev_account(i).address for i in DEVNET_COMMITTEE_INDICES)
    env = {"SWARM_HOME": str(tmp_path), "SWARM_RPC_URL": other_chain.config.url, "SWARM_DEPLOYER_KEY": key}
    block = other_chain.rpc.block_number()
    done = cli("chain", "deploy", "--committee", committee, "--threshold", "3", env=env)
    text = one_line_error(done)
    assert "SWARM_DEPLOYER_KEY is" in text and "set it to the deployer's private key" in text
    assert ("not 64 hex digits" in text) != ("outside the secp256k1 range" in text)
    assert key.removeprefix("0x") not in done.stdout + done.stderr  # the key is never echoed
    assert other_chain.rpc.block_number() == block
    assert not Deployment.path(tmp_path, 4242).exists()


def test_every_error_a_package_raises_for_its_user_is_one_the_command_lines_boundary_shows() -> None:
    """Each of these is a sentence for a user to act on, never a traceback: the boundary in
    scripts/cli.py catches their families, so whichever command they escape from exits 1."""
    from compute.dataplane import DataPlaneError, DigestMismatch
    from compute.proof import ProofError
    from ledger.errors import RpcError
    from provider.lease.inputs import InputError
    from scripts.cli import USER_ERRORS
    from wire.client import BadAnswer, SiteUnreachable

    for error in (
        DataPlaneError,
        DigestMismatch,
        ProofError,
        RpcError,
        BadAnswer,
        SiteUnreachable,
        InputError,
    ):
        assert issubclass(error, USER_ERRORS), error


def test_a_swarm_home_that_cannot_be_written_is_one_sentence_naming_the_path(cli, tmp_path) -> None:
    """An OSError at the command line's boundary (here SWARM_HOME inside a file) is the user's to fix."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    home = blocker / "home"
    env = {"SWARM_HOME": str(home), "SWARM_KEY_PASSWORD": "pw"}
    text = one_line_error(cli("keys", "new", "--name", "buyer", env=env))
    assert str(blocker) in text and "not a directory" in text and "SWARM_HOME" in text
    assert not home.exists()

