"""Serving under kill -9: a buyer streams calls to a model on a provider's site, paying with
receipts; the buyer is killed mid-stream and started again, then the site (its agent and its Ray
cluster at once, as a machine that dies) and started again at its own address, where it serves
the lease again. Then the buyer signs what it owes, thaws the rest and takes it back, and the
test audits every wei: what the buyer deposited is what the provider was paid plus what the buyer
withdrew, the provider was paid exactly the charges the site's book holds, each for a receipt the
buyer signed and no more than it, each once, and the buyer paid for the answers it received, and
at most for the calls each kill cut off between the site's charge and the buyer's reading.

`make test` runs one seed (SWARM_FAULT_SEEDS, as tests/faults/test_faults.py); a seed draws when
each kill falls.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from anvil import AnvilNode, RpcClient, dev_account
from anvil.node import free_port
from compute import cluster
from compute.node import RayHome
from compute.serve_order import ServeOrder
from ledger import serving, stake
from ledger.chain import Chain
from ledger.client import Swarm
from ledger.deploy import DeployResult
from ledger.specs import store_spec
from ledger.units import ONE
from provider.lease.plan import LeasePlan
from tests.faults.test_faults import SEEDS
from tests.sites import served, stop_served
from wire.client import SiteAddress
from wire.serving import ServingClient

PROVIDER, BUYER = dev_account(7), dev_account(8)
PRICE = 10**15
DEPOSIT = 5 * ONE
THREADS = 4
START_TIMEOUT_S = 180
PROJECT = Path(__file__).resolve().parents[2]

# The buyer, as a process of its own: THREADS threads calling the lease until `stop` appears, each
# call's status and charge appended to `calls` as it is read.
STREAM = r'''
import json, sys, threading, time
from pathlib import Path
from wire.serving import ServingClient
from wire.client import SiteAddress
from scripts.common import open_swarm
url, fingerprint, provider, lease, calls, stop, threads = sys.argv[1:8]
swarm = open_swarm()
client = ServingClient(swarm, swarm.sender(bytes.fromhex(sys.argv[8])), Path(sys.argv[9]),
                       SiteAddress(provider, url, fingerprint))
lock = threading.Lock()
out = open(calls, "a")
def stream(index):
    row = [((index * 5 + j) % 11) / 11.0 for j in range(16)]
    while not Path(stop).exists():
        try:
            answer = client.call(lease, {"input": row})
            seen = {"status": answer.status, "charged": answer.charged, "at": time.time()}
        except Exception as exc:
            seen = {"status": 0, "charged": 0, "at": time.time(), "error": type(exc).__name__}
            time.sleep(0.2)
        with lock:
            out.write(json.dumps(seen) + "\n")
            out.flush()
workers = [threading.Thread(target=stream, args=(i,)) for i in range(int(threads))]
for w in workers:
    w.start()
print("streaming", flush=True)
for w in workers:
    w.join()
'''


@pytest.fixture
def network(chain: Chain, deployed: DeployResult, rpc: RpcClient, anvil_node: AnvilNode, swarm_home: Path,
            tmp_path: Path) -> Iterator[dict]:
    snapshot = rpc.snapshot()
    swarm = Swarm(chain, deployed.deployment)
    sender = swarm.sender(PROVIDER.key)
    stake.register(swarm, sender, b"\x13" * 32, 1)
    stake.stake(swarm, sender, 1_000 * ONE)
    homes = {name: tmp_path / name for name in ("site", "buyer")}
    for home in homes.values():
        shutil.copytree(swarm_home / "deployments", home / "deployments")
    state = {"swarm": swarm, "homes": homes, "port": free_port(), "rpc_url": anvil_node.config.url}
    try:
        yield state
    finally:
        if state.get("site") is not None:
            stop_served(state["site"])
        rpc.revert(snapshot)


def _serve(state: dict) -> dict:
    """`swarm provider serve` in the site's home at its port; the same URL and certificate each time."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")} | {
        "SWARM_HOME": str(state["homes"]["site"]), "SWARM_RPC_URL": state["rpc_url"]}
    process = subprocess.Popen(
        [sys.executable, "-m", "scripts.cli", "provider", "serve", "--account", "7", "--port",
         str(state["port"]), "--num-cpus", "2", "--redeem-least", "1000", "--redeem-every", "2",
         "--serving-cap", "0.02", "--json"],
        env=env, stdout=subprocess.PIPE, stderr=(state["homes"]["site"] / "serve.log").open("a"), text=True,
        start_new_session=True, cwd=PROJECT)
    state["site"] = process
    return served(process, state["homes"]["site"] / "serve.log")


def _kill_site(state: dict) -> None:
    """The site's machine dies: its agent and its Ray cluster, at once."""
    os.killpg(state["site"].pid, signal.SIGKILL)
    state["site"].wait(timeout=30)
    state["site"] = None
    cluster.stop(RayHome.of(state["homes"]["site"]))


def _stream(state: dict, address: SiteAddress, lease: str, calls: Path, stop: Path) -> subprocess.Popen:
    env = os.environ | {"SWARM_HOME": str(state["homes"]["buyer"]), "SWARM_RPC_URL": state["rpc_url"]}
    process = subprocess.Popen(
        [sys.executable, "-c", STREAM, address.url, address.fingerprint, PROVIDER.address, lease, str(calls),
         str(stop), str(THREADS), BUYER.key.hex(), str(state["homes"]["buyer"])],
        env=env, stdout=subprocess.PIPE, text=True, start_new_session=True, cwd=PROJECT)
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "streaming"
    return process


def _answered_since(calls: Path, since: float) -> int:
    lines = calls.read_text().splitlines() if calls.exists() else []
    return sum(1 for line in lines if (c := json.loads(line))["status"] == 200 and c["at"] > since)


def _wait_answers(calls: Path, since: float, count: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while _answered_since(calls, since) < count:
        assert time.monotonic() < deadline, f"fewer than {count} answers within {timeout_s:.0f} s"
        time.sleep(0.2)


@pytest.mark.parametrize("seed", SEEDS)
def test_killing_the_buyer_and_the_site_mid_stream_loses_nothing_and_pays_nothing_twice(
        network: dict, rpc: RpcClient, tmp_path: Path, seed: int) -> None:
    draw = random.Random(seed)
    swarm: Swarm = network["swarm"]
    answer = _serve(network)
    address = SiteAddress(PROVIDER.address, answer["url"], answer["fingerprint"])
    declared = store_spec(network["homes"]["buyer"], {"gpu_model": "cpu", "gpus": 1, "vram_gb": 1,
                                                      "site_url": address.url,
                                                      "site_fingerprint": address.fingerprint})
    stake.update_spec(swarm, swarm.sender(PROVIDER.key), declared, 1)
    buyer = swarm.sender(BUYER.key)
    start = {"provider": swarm.balance_of(PROVIDER.address), "buyer": swarm.balance_of(BUYER.address)}
    serving.deposit(swarm, buyer, PROVIDER.address, DEPOSIT)
    client = ServingClient(swarm, buyer, network["homes"]["buyer"], address)
    order = ServeOrder.parse({"max_batch_size": 16, "max_batch_wait_s": 0.005, "max_tokens": 16,
                              "ends_at": int(time.time() + 900), "price_per_request": PRICE, "seed": 5})
    lease = client.deploy(order)["lease"]
    client.wait_serving(lease)

    calls, stop = tmp_path / "calls.jsonl", tmp_path / "stop"
    began = time.time()
    stream = _stream(network, address, lease, calls, stop)
    _wait_answers(calls, began, 20, 60)
    time.sleep(draw.uniform(0.0, 2.0))
    os.killpg(stream.pid, signal.SIGKILL)  # the buyer, mid-call, mid-claim or mid-voucher
    stream.wait(timeout=30)
    again = time.time()
    stream = _stream(network, address, lease, calls, stop)
    _wait_answers(calls, again, 20, 60)
    time.sleep(draw.uniform(0.0, 2.0))
    _kill_site(network)  # the site, with requests in flight
    time.sleep(draw.uniform(0.5, 3.0))
    back = time.time()
    assert _serve(network)["url"] == address.url
    _wait_answers(calls, back, 20, START_TIMEOUT_S)  # the site served the lease again, the buyer kept on
    [directory] = network["homes"]["site"].rglob(f"leases/{lease}")
    assert LeasePlan.read(directory).attempt == 2, "the site started the lease its dead cluster ran again"
    stop.touch()
    assert stream.wait(timeout=60) == 0

    # The buyer signs what it owes, the site redeems it, the buyer takes back the rest.
    client = ServingClient(swarm, swarm.sender(BUYER.key), network["homes"]["buyer"], address)
    last = client.aggregate() or client.journal.last_voucher(PROVIDER.address)
    assert last is not None
    deadline = time.monotonic() + 30
    while serving.account(swarm, BUYER.address, PROVIDER.address).redeemed < last.cumulative:
        assert time.monotonic() < deadline, "the site did not redeem the buyer's last voucher"
        time.sleep(0.5)
    account = serving.account(swarm, BUYER.address, PROVIDER.address)
    serving.thaw(swarm, swarm.sender(BUYER.key), PROVIDER.address, account.balance)
    rpc.increase_time(swarm.contract(serving.CONTRACT).functions.thawPeriod().call() + 1)
    rpc.mine()
    serving.withdraw(swarm, swarm.sender(BUYER.key), PROVIDER.address)

    # The audit, to the wei.
    final = serving.account(swarm, BUYER.address, PROVIDER.address)
    withdrawn = swarm.balance_of(BUYER.address) - (start["buyer"] - DEPOSIT)
    paid = swarm.balance_of(PROVIDER.address) - start["provider"]
    assert final.balance == 0 and final.thawing == 0
    assert paid == final.redeemed == last.cumulative
    assert paid + withdrawn == DEPOSIT, "every wei deposited was paid or taken back"
    book = sqlite3.connect(next(network["homes"]["site"].rglob("serving/receipts.db")))
    charged = book.execute("SELECT nonce, amount, charge, aggregated FROM receipts WHERE buyer = ?",
                           (BUYER.address,)).fetchall()
    [journal_path] = network["homes"]["buyer"].glob("serving/*.db")
    journal = sqlite3.connect(journal_path)
    signed = dict(journal.execute("SELECT nonce, amount FROM receipts WHERE provider = ?",
                                  (PROVIDER.address,)))
    assert all(aggregated for *_, aggregated in charged), "every charged receipt is in the voucher redeemed"
    assert sum(int(charge) for _, _, charge, _ in charged) == paid, "the provider was paid its book, once"
    assert all(nonce in signed and int(charge) <= int(signed[nonce]) == int(amount)
               for nonce, amount, charge, _ in charged), "each charge is for a receipt the buyer signed"
    seen = [json.loads(line) for line in calls.read_text().splitlines()]
    answered = sum(c["charged"] for c in seen if c["status"] == 200)
    assert all(c["charged"] == 0 for c in seen if c["status"] != 200), "a refused call costs nothing"
    assert answered <= paid <= answered + 2 * THREADS * PRICE, (answered, paid)
    assert sum(1 for c in seen if c["status"] == 200) >= 60
