"""The local devnet: start, status, stop, state that survives a restart, and the CLI."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from anvil import AnvilConfig, AnvilError, AnvilNode, dev_account
from anvil.node import free_port
from ledger import stake
from ledger.chain import connect
from ledger.client import Swarm
from ledger.deploy import deploy, error_decoder
from ledger.tx import Sender
from ledger.units import ONE


@pytest.fixture
def node(tmp_path):
    n = AnvilNode(AnvilConfig(home=tmp_path, port=free_port()))
    yield n
    n.stop()


def test_start_is_idempotent_and_status_reports_the_node(node: AnvilNode) -> None:
    first = node.start()
    again = node.start()
    assert first.running and again.running
    assert first.pid == again.pid
    assert first.chain_id == 31337
    assert node.status().url == node.config.url


def test_stop_saves_state_and_reports_stopped(node: AnvilNode) -> None:
    node.start()
    assert node.stop() is True
    status = node.status()
    assert not status.running and status.pid is None
    assert status.state_bytes > 0
    assert node.stop() is False


def test_stake_survives_an_anvil_restart_from_its_state_file(node: AnvilNode, tmp_path) -> None:
    node.start()
    chain = connect(node.config.url)
    result = deploy(chain, Sender(chain, dev_account(0).key, error_decoder()), tmp_path)
    swarm = Swarm(chain, result.deployment)
    provider = swarm.sender(dev_account(1).key)
    stake.register(swarm, provider, b"\x09" * 32, 2)
    stake.stake(swarm, provider, 3_000 * ONE)
    node.stop()

    node.start()
    chain = connect(node.config.url)
    assert deploy(chain, Sender(chain, dev_account(0).key, error_decoder()), tmp_path).created is False
    info = stake.provider_info(Swarm(chain, result.deployment), provider.address)
    assert (info.registered, info.gpus, info.stake) == (True, 2, 3_000 * ONE)


def _whole(path) -> bool:
    """Whether the state file is a complete dump right now: there, and ending its JSON object."""
    with open(path, "rb") as handle:
        size = handle.seek(0, 2)
        if size == 0:
            return False
        handle.seek(size - 1)
        return handle.read(1) == b"}"


def test_a_chain_killed_at_any_moment_starts_again_from_a_whole_state_file(tmp_path) -> None:
    """anvil's own dumps rewrite the state file in place: sampled while a busy chain dumps every
    second, about 2 % of looks found it cut short, and a crash then left a chain that could not
    start (the fault suite saw it). The keeper replaces the file only once the new one is whole."""
    node = AnvilNode(AnvilConfig(home=tmp_path, port=free_port(), state_interval=1))
    node.start()
    try:
        for _ in range(2):  # a megabyte of state, so that a dump takes a while
            node.rpc.mine(300)
        deadline = time.monotonic() + 10
        while not (node.state_file.exists() and node.state_file.stat().st_size > 900_000):
            assert time.monotonic() < deadline, "the keeper dumped no state"
            time.sleep(0.1)
        stop = threading.Event()

        def mine() -> None:  # each dump differs from the one before, so each is written
            while not stop.is_set():
                node.rpc.mine(1)
                time.sleep(0.2)

        miner = threading.Thread(target=mine)
        miner.start()
        # Look until three dumps have replaced the file and ten thousand looks are made, however
        # slow the machine: a dump is seen as the file's inode changing under the same name.
        looks = torn = dumps = 0
        inode = node.state_file.stat().st_ino
        give_up = time.monotonic() + 60
        try:
            while (dumps < 3 or looks < 10_000) and time.monotonic() < give_up:
                looks += 1
                torn += not _whole(node.state_file)
                if looks % 50 == 0 and (now := node.state_file.stat().st_ino) != inode:
                    dumps, inode = dumps + 1, now
        finally:
            stop.set()
            miner.join()
        assert dumps >= 3 and looks >= 10_000, f"only {dumps} dumps and {looks} looks in 60 s"
        assert torn == 0, f"{torn} of {looks} looks found the state file cut short"
        saved = json.loads(node.state_file.read_text())["best_block_number"]
        node.kill()  # a crash, with no dump at the end
        node.start()
        saved = int(saved, 0) if isinstance(saved, str) else saved
        assert node.rpc.block_number() >= saved >= 600
    finally:
        node.stop()


def test_start_on_a_busy_port_names_the_port_and_the_fix(node: AnvilNode, tmp_path) -> None:
    node.start()
    other = AnvilNode(AnvilConfig(home=tmp_path / "other", port=node.config.port))
    with pytest.raises(AnvilError, match=rf"Port {node.config.port} on 127.0.0.1 is already in use.*--port"):
        other.start()


def test_snapshot_and_revert_restore_chain_state(node: AnvilNode) -> None:
    node.start()
    rpc = node.rpc
    before = rpc.block_number()
    snap = rpc.snapshot()
    rpc.mine(5)
    assert rpc.block_number() == before + 5
    rpc.revert(snap)
    assert rpc.block_number() == before


def test_cli_chain_up_status_down(cli, tmp_path) -> None:
    port = str(free_port())
    env = {"SWARM_HOME": str(tmp_path), "SWARM_ANVIL_PORT": port, "SWARM_RPC_URL": f"http://127.0.0.1:{port}"}
    try:
        up = cli("chain", "up", "--json", env=env)
        assert up.code == 0, up.stderr
        assert json.loads(up.stdout)["running"] is True
        deployed = cli("chain", "deploy", "--json", env=env)
        assert deployed.code == 0, deployed.stderr
        assert json.loads(deployed.stdout)["created"] is True
        assert len(json.loads(deployed.stdout)["funded"]) == 9
        status = json.loads(cli("chain", "status", "--json", env=env).stdout)
        assert status["anvil"]["running"] is True
        assert status["deployment"]["addresses"] == json.loads(deployed.stdout)["addresses"]
    finally:
        down = cli("chain", "down", "--json", env=env)
    assert json.loads(down.stdout) == {"stopped": True}
    after = json.loads(cli("chain", "status", "--json", env=env).stdout)
    assert after["anvil"]["running"] is False


def test_the_published_dev_addresses_are_the_ones_the_mnemonic_derives() -> None:
    from anvil.accounts import DEV_ADDRESSES, dev_address

    assert [dev_account(i).address for i in range(len(DEV_ADDRESSES))] == list(DEV_ADDRESSES)
    assert dev_address(42) == dev_account(42).address


def test_a_devnet_port_lies_outside_the_range_other_programs_are_given_and_is_free() -> None:
    import socket

    from anvil.node import EPHEMERAL_RANGE, PORTS_BELOW, PORTS_FROM
    from compute.node import free_port as site_ray_port

    low = int(EPHEMERAL_RANGE.read_text().split()[0])
    ports = {free_port() for _ in range(20)}
    assert all(PORTS_FROM <= p < min(low, PORTS_BELOW) for p in ports), ports
    # nor where a site draws the ports its Ray processes bind seconds later: an anvil killed in
    # that moment would find its port taken when it starts again
    assert all(PORTS_BELOW <= site_ray_port() < low for _ in range(50))
    for port in ports:  # each can be listened on at once
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


SYS_EXIT = {"x86_64": 60, "aarch64": 93}  # the system call that ends one thread, not its process


def test_a_process_whose_first_thread_ended_runs_on_while_another_thread_holds_its_port() -> None:
    """A killed anvil's first thread shows as a zombie while its others still end, and they hold
    its listening socket: counted as gone then, a chain killed and started again on its port
    found the port taken (twice in `make test`). Here a first thread ends on its own while another
    keeps the process's port until the test closes its input."""
    import os
    import subprocess
    import sys

    import psutil

    from anvil.node import _alive, _group_alive, _port_in_use
    from compute.node import _wait_ended

    port = free_port()
    code = (
        "import ctypes, socket, sys, threading\n"
        f"server = socket.create_server(('127.0.0.1', {port}))\n"
        "threading.Thread(target=sys.stdin.read).start()\n"
        f"ctypes.CDLL(None).syscall({SYS_EXIT[os.uname().machine]}, 0)\n"
    )
    process = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        stat = Path(f"/proc/{process.pid}/stat")
        while stat.read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline, "the first thread did not end"
            time.sleep(0.01)
        assert _port_in_use("127.0.0.1", port)  # the other thread still holds it
        assert _alive(process.pid) and _group_alive(process.pid)
        waited = time.monotonic()  # a site's stop (compute.node.stop_session) waits for it too
        _wait_ended([psutil.Process(process.pid)], timeout=0.2)
        assert time.monotonic() - waited >= 0.2 and _port_in_use("127.0.0.1", port)
        assert process.stdin is not None
        process.stdin.close()  # the other thread's read ends, and with it the process
        assert process.wait(timeout=10) == 0
        assert not _alive(process.pid) and not _group_alive(process.pid)
        assert not _port_in_use("127.0.0.1", port)
    finally:
        process.kill()
        process.wait()
