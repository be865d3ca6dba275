"""Serving, end to end: a buyer deposits once, deploys a model on a provider's site (Ray Serve in
the lease's sandbox), calls it a thousand times paying with receipts, signs the site's claim, and
the site redeems once, with every wei accounted for; forged, replayed, underfunded and expired
receipts, malformed bodies and calls after the lease's end are refused and charged nothing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from anvil import AnvilNode, RpcClient, dev_account
from anvil.node import free_port
from compute import dataplane
from compute.serve_order import ServeOrder
from compute.serving import load_predictor
from core.errors import Refused
from ledger import serving, stake
from ledger.chain import Chain
from ledger.client import Swarm
from ledger.deploy import DeployResult
from ledger.keys import DigestSigner
from ledger.specs import store_spec
from ledger.units import ONE
from tests.sites import served, stop_served
from wire.client import SiteAddress, pinned_request
from wire.serving import ServingClient

PROVIDER, BUYER, POOR, STRANGER = dev_account(1), dev_account(4), dev_account(5), dev_account(6)
PRICE = 10**15  # 0.001 SWARM a request
CALLS = 1_000


@pytest.fixture(scope="module")
def site(chain: Chain, deployed: DeployResult, rpc: RpcClient, anvil_node: AnvilNode, swarm_home: Path,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """A staked provider serving its site, redeeming vouchers every 2 s whatever they add, and
    stopping a serving lease no one has called for 20 s."""
    snapshot = rpc.snapshot()
    swarm = Swarm(chain, deployed.deployment)
    sender = swarm.sender(PROVIDER.key)
    stake.register(swarm, sender, b"\x12" * 32, 1)
    stake.stake(swarm, sender, 1_000 * ONE)
    home = tmp_path_factory.mktemp("serving-provider")
    shutil.copytree(swarm_home / "deployments", home / "deployments")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")} | {
        "SWARM_HOME": str(home), "SWARM_RPC_URL": anvil_node.config.url}
    process = subprocess.Popen([sys.executable, "-m", "scripts.cli", "provider", "serve", "--account", "1",
                                "--port", str(port), "--num-cpus", "2", "--serving-cap", "0.5",
                                "--redeem-least", "1000", "--redeem-every", "2", "--serving-idle", "20",
                                "--json"],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    answer = served(process)
    # The provider declares its site, as `swarm provider register` does: buyers find it on chain.
    buyer_home = tmp_path_factory.mktemp("serving-buyer")
    shutil.copytree(swarm_home / "deployments", buyer_home / "deployments")
    declared = store_spec(buyer_home, {"gpu_model": "cpu", "gpus": 1, "vram_gb": 1, "site_url": answer["url"],
                                       "site_fingerprint": answer["fingerprint"]})
    stake.update_spec(swarm, sender, declared, 1)
    yield {"swarm": swarm, "home": home, "address": SiteAddress(PROVIDER.address, answer["url"],
                                                                answer["fingerprint"]),
           "buyer_home": buyer_home, "rpc_url": anvil_node.config.url}
    stop_served(process)
    rpc.revert(snapshot)


def _order(ends_in: float = 240, **over) -> ServeOrder:
    fields = {"task": "predict", "model": "mlp", "replicas": 1, "min_replicas": 1,
              "replica_cpus": 1.0, "replica_gpus": 0.0, "memory_gb": 1.0, "max_batch_size": 16,
              "max_batch_wait_s": 0.005, "max_tokens": 16, "ends_at": int(time.time() + ends_in),
              "price_per_request": PRICE, "price_per_token": 0, "seed": 7}
    return ServeOrder.parse(fields | over)


def test_a_buyer_deploys_calls_a_thousand_times_and_the_provider_is_paid_once_to_the_wei(site) -> None:
    swarm: Swarm = site["swarm"]
    buyer = swarm.sender(BUYER.key)
    client = ServingClient(swarm, buyer, site["buyer_home"], site["address"])
    with pytest.raises(Refused, match="no spendable deposit") as refused:
        client.deploy(_order())  # no deposit yet
    assert refused.value.status == 402
    serving.deposit(swarm, buyer, PROVIDER.address, 10 * ONE)
    deposit_tx = 1
    info = client.deploy(_order())
    lease = info["lease"]
    assert info["price_per_request"] == str(PRICE) and info["buyer"] == BUYER.address
    client.wait_serving(lease)

    provider_start = swarm.balance_of(PROVIDER.address)
    rows = [[((i * 7 + j) % 13) / 13.0 for j in range(16)] for i in range(CALLS)]
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda row: client.call(lease, {"input": row}), rows))
    assert all(a.status == 200 and a.charged == PRICE for a in answers), answers[:3]
    # The lease serves the model the buyer named: the same answers as the model built here.
    local = load_predictor(_order().params(""), seed=7)
    for row, answer in zip(rows[:50], answers[:50], strict=True):
        expected = local([row])[0]["output"]
        assert answer.body["output"] == pytest.approx(expected, rel=1e-4, abs=1e-5)

    # The cap (0.5 SWARM = 500 calls) made the client sign vouchers as it went; sign the rest.
    client.aggregate()
    last = client.journal.last_voucher(PROVIDER.address)
    assert last is not None and last.cumulative == CALLS * PRICE
    deadline = time.monotonic() + 30  # the site redeems within its 2 s period
    while serving.account(swarm, BUYER.address, PROVIDER.address).redeemed < CALLS * PRICE:
        assert time.monotonic() < deadline, "the site did not redeem the buyer's voucher"
        time.sleep(0.5)
    account = serving.account(swarm, BUYER.address, PROVIDER.address)
    assert account.redeemed == CALLS * PRICE
    assert account.balance == 10 * ONE - CALLS * PRICE
    assert swarm.balance_of(PROVIDER.address) == provider_start + CALLS * PRICE
    redemptions = _redemptions(swarm, BUYER.address)
    assert sum(paid for _, paid in redemptions) == CALLS * PRICE
    print(f"{CALLS} requests, {deposit_tx + len(redemptions)} transactions "
          f"({len(redemptions)} redemptions)")

    # The buyer stops the lease: later calls are refused and cost nothing.
    client.stop(lease)
    after = client.call(lease, {"input": rows[0]})
    assert after.status == 410 and after.charged == 0


def test_bad_receipts_and_bodies_are_refused_and_cost_nothing(site) -> None:
    swarm: Swarm = site["swarm"]
    buyer = swarm.sender(BUYER.key)
    client = ServingClient(swarm, buyer, site["buyer_home"], site["address"])
    serving.deposit(swarm, buyer, PROVIDER.address, ONE)
    lease = client.deploy(_order(ends_in=240))["lease"]
    client.wait_serving(lease)
    site["idle"] = lease  # called no more after this test: the site stops it (the module's last test)
    path = f"/v1/serving/{lease}/predict"
    body = b'{"input": [' + b",".join([b"0.5"] * 16) + b"]}"
    domain = serving.domain_of(swarm)

    def send(header: str | None, payload: bytes = body) -> tuple[int, str]:
        headers = {"Content-Type": "application/json"} | ({"Swarm-Receipt": header} if header else {})
        status, answer, _ = pinned_request(site["address"], "POST", path, payload, headers)
        return status, answer.decode()

    def journaled(amount: int = PRICE, **fields) -> str:
        """A receipt of the buyer's, kept in its journal as its own client keeps what it signs."""
        receipt = serving.sign_receipt(DigestSigner(BUYER.key), domain, PROVIDER.address, amount, **fields)
        client.journal.signed(receipt)
        return receipt.header()

    good = journaled()
    assert send(good)[0] == 200
    status, text = send(good)
    assert status == 409 and "used already" in text
    stranger = serving.sign_receipt(DigestSigner(STRANGER.key), domain, PROVIDER.address, PRICE)
    status, text = send(stranger.header())
    assert status == 402 and "can spend 0 wei" in text
    assert send(journaled(timestamp=int(time.time()) - 3_600))[0] == 402  # expired
    assert send(journaled(PRICE - 1))[0] == 402  # under the price
    assert send(None)[0] == 402
    serving.deposit(swarm, swarm.sender(POOR.key), PROVIDER.address, 2 * PRICE)
    beyond = serving.sign_receipt(DigestSigner(POOR.key), domain, PROVIDER.address, 3 * PRICE)
    status, text = send(beyond.header())
    assert status == 402 and "deposit more" in text
    for malformed in (b"not json", b'{"input": [1, 2]}', b'{"wrong": 1}'):
        status, text = send(journaled(), malformed)
        assert status == 400 and "error" in text
    before = client.journal.last_voucher(PROVIDER.address)
    voucher = client.aggregate()
    assert voucher is not None
    assert voucher.cumulative == (before.cumulative if before else 0) + PRICE, \
        "one call was served; nothing else is charged"


def _redemptions(swarm: Swarm, buyer: str) -> list[tuple[int, int]]:
    """(block, paid) of every Redeemed event of `buyer`."""
    escrow = swarm.contract("ServingEscrow")
    logs = escrow.events.Redeemed().get_logs(from_block=0, argument_filters={"buyer": buyer})
    return [(log["blockNumber"], int(log["args"]["paid"])) for log in logs]


def test_a_text_model_pinned_by_its_digest_is_served_through_the_command_line_and_paid_per_token(
        site, tmp_path: Path) -> None:
    from compute import hf
    from compute.serving import Generator

    corpus = ["the cat sat on the mat", "a dog ran in the park", "the sun is warm and bright"]
    checkpoint = hf.make_tiny(tmp_path / "tiny-lm", corpus, classes=0, seed=3, causal=True)
    for path in (checkpoint, *checkpoint.rglob("*")):  # a local checkpoint every user of the site may read
        path.chmod(0o755 if path.is_dir() else 0o644)
    per_token = 10**14
    spec = tmp_path / "serve.yaml"
    spec.write_text(f"task: generate\nmodel: {checkpoint}\nprice: {{per_token: '0.0001'}}\nduration: 4m\n"
                    "max_tokens: 8\nreplica_cpus: 1\nmemory_gb: 1\n")
    env = os.environ | {"SWARM_HOME": str(site["buyer_home"]), "SWARM_RPC_URL": site["rpc_url"]}

    def swarm_cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "scripts.cli", *args, "--account", "4", "--json"],
                              env=env, capture_output=True, text=True, timeout=300, check=False)

    bad = tmp_path / "bad.yaml"
    bad.write_text("task: generate\nmodel: mlp\nprice: {per_token: '0.0001'}\n")
    refused = swarm_cli("serve", "deploy", str(bad), "--provider", PROVIDER.address)
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1 and "Traceback" not in refused.stderr
    assert "checkpoint" in refused.stderr
    assert swarm_cli("serve", "deposit", PROVIDER.address, "1").returncode == 0
    deployed = swarm_cli("serve", "deploy", str(spec), "--provider", PROVIDER.address)
    assert deployed.returncode == 0, deployed.stderr
    info = json.loads(deployed.stdout)
    assert info["state"] == "serving" and info["sha256"] == dataplane.digest(str(checkpoint))
    lease = info["lease"]

    called = swarm_cli("serve", "call", lease, "--provider", PROVIDER.address, "--input",
                       '{"prompt": "the cat sat", "max_tokens": 5}')
    assert called.returncode == 0, called.stderr
    answer = json.loads(called.stdout)
    tokens = answer["answer"]["usage"]["completion_tokens"]
    assert answer["answer"]["object"] == "text_completion" and 1 <= tokens <= 5
    assert int(answer["charged"]) == tokens * per_token, "paid for the tokens generated, not for max_tokens"
    generator = Generator(str(checkpoint), 8)
    local = generator([generator.check({"prompt": "the cat sat", "max_tokens": 5})])
    assert answer["answer"]["choices"][0]["text"] == local[0]["text"], "the model the buyer pinned answered"

    too_many = swarm_cli("serve", "call", lease, "--provider", PROVIDER.address, "--input",
                         '{"prompt": "the cat", "max_tokens": 99}')
    assert too_many.returncode == 1 and "max_tokens" in too_many.stderr and "Traceback" not in too_many.stderr
    status = swarm_cli("serve", "status", lease, "--provider", PROVIDER.address)
    assert json.loads(status.stdout)["price_per_token"] == str(per_token)
    stopped = swarm_cli("serve", "stop", lease, "--provider", PROVIDER.address)
    assert stopped.returncode == 0, stopped.stderr
    after = swarm_cli("serve", "call", lease, "--provider", PROVIDER.address, "--input", '"the cat"')
    assert after.returncode == 1 and "410" in after.stderr


# The provider's own server, put where the lease's model listens: it answers every call with another
# model's output (the same MLP from another seed), as a site that swaps the buyer's model would.
SWAPPED_MODEL = r'''
import asyncio, json, os, sys
from compute.runners.params import Scope, ServeParams
from compute.serving import load_predictor
path, seed = sys.argv[1], int(sys.argv[2])
model = load_predictor(ServeParams.parse({"model": "mlp", "ends_at": 1.0}, Scope("swap", "serve")), seed)
async def answer(reader, writer):
    while True:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            break
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        [out] = model([model.check(json.loads(await reader.readexactly(length)))])
        body = json.dumps({"model": "mlp", "output": out["output"]}).encode()
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
                     % len(body) + body)
        await writer.drain()
    writer.close()
async def main():
    os.unlink(path)
    server = await asyncio.start_unix_server(answer, path)
    print("listening", flush=True)
    await server.serve_forever()
asyncio.run(main())
'''


def test_the_oracles_canaries_pass_an_honest_lease_and_tombstone_a_provider_that_swaps_the_model(
        site, rpc: RpcClient, tmp_path: Path) -> None:
    from dataclasses import replace

    from sqlmodel import Session, select

    from ledger.db import open_ledger
    from ledger.deploy import devnet_committee_keys
    from market.migrations import MARKET
    from oracle.canaries import recheck
    from oracle.config import load_config
    from oracle.migrations import ORACLE
    from oracle.records import CanaryRecord, OracleEpoch
    from oracle.service import OracleService
    from oracle.service import schedule as make_schedule

    swarm: Swarm = site["swarm"]
    client = ServingClient(swarm, swarm.sender(BUYER.key), site["buyer_home"], site["address"])
    serving.deposit(swarm, swarm.sender(BUYER.key), PROVIDER.address, ONE)
    honest, swapped = (client.deploy(_order(replica_cpus=0.5))["lease"] for _ in range(2))
    for lease in (honest, swapped):
        client.wait_serving(lease)
    [socket] = site["home"].rglob(f"leases/{swapped}/work/serve.sock")
    swap = subprocess.Popen([sys.executable, "-c", SWAPPED_MODEL, str(socket), "8"], stdout=subprocess.PIPE,
                            text=True, cwd=Path(__file__).resolve().parents[1])
    engine = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}", ORACLE, MARKET)
    try:
        assert swap.stdout is not None and swap.stdout.readline().strip() == "listening"
        config = load_config()
        oracle_key = dev_account(0)
        timing = replace(make_schedule(config, devnet=True, epoch_length_s=1.0), probe_timeout_s=8.0)
        service = OracleService(swarm, engine, site["buyer_home"], config, swarm.sender(oracle_key.key),
                                devnet_committee_keys(), timing)
        before = (swarm.balance_of(PROVIDER.address),
                  serving.account(swarm, BUYER.address, PROVIDER.address))
        service.probe()
        service.canary()
        with Session(engine) as session:
            records = {r.lease: r for r in session.exec(select(CanaryRecord))}
        assert records[honest].outcome == "matched" and records[honest].matched == config.canary.requests
        assert records[swapped].outcome == "mismatched" and records[swapped].matched == 0, records[swapped]
        # The oracle paid for its calls like a buyer: a deposit of its own, a receipt a call.
        paid = sum(r.paid_wei for r in records.values())
        assert paid == 2 * config.canary.requests * PRICE
        # A committee member draws the bodies again from the seed and checks the recorded answers itself.
        assert recheck(records[honest], tmp_path)[0] and not recheck(records[swapped], tmp_path)[0]

        time.sleep(1.0)  # the epoch is at least its length
        outcome = service.epoch()
        assert outcome is not None and outcome.state == "submitted", outcome
        rpc.increase_time(swarm.distributor.functions.challengeWindow().call() + 1)
        rpc.mine()
        finalized = service.epoch()
        assert finalized is not None and finalized.state == "finalized"
        with Session(engine) as session:
            epoch = session.get(OracleEpoch, (swarm.chain.chain_id, outcome.epoch))
        assert epoch is not None
        [slash] = [s for s in epoch.slashes if s["provider"] == PROVIDER.address]
        assert slash["row"] == "fraud" and slash["tombstone"] and "canary" in slash["detail"], slash
        assert stake.provider_info(swarm, PROVIDER.address).tombstoned
        # The oracle signed the site's claim for its calls: the site redeems it, honest answers or not.
        deadline = time.monotonic() + 30
        while serving.account(swarm, oracle_key.address, PROVIDER.address).redeemed < paid:
            assert time.monotonic() < deadline, "the site did not redeem the oracle's voucher"
            time.sleep(0.5)
        account = serving.account(swarm, oracle_key.address, PROVIDER.address)
        assert account.redeemed == paid and account.balance == config.canary.deposit - paid
        buyer_paid = serving.account(swarm, BUYER.address, PROVIDER.address).redeemed - before[1].redeemed
        assert swarm.balance_of(PROVIDER.address) == before[0] + paid + buyer_paid

    finally:
        swap.kill()
        engine.dispose()


def test_a_lease_no_one_calls_is_stopped_and_its_replicas_given_back(site) -> None:
    """The bad receipts' lease, called by no one since (more than the site's 20 s by the time this
    last test runs), or, run alone, a lease of its own called once."""
    swarm: Swarm = site["swarm"]
    client = ServingClient(swarm, swarm.sender(BUYER.key), site["buyer_home"], site["address"])
    lease = site.get("idle")
    if lease is None:
        serving.deposit(swarm, swarm.sender(BUYER.key), PROVIDER.address, ONE)
        lease = client.deploy(_order())["lease"]
        client.wait_serving(lease)
        assert client.call(lease, {"input": [0.5] * 16}).status == 200
    deadline = time.monotonic() + 60
    while client.info(lease)["stopped"] is None:
        assert time.monotonic() < deadline, "the site did not stop a lease no one called"
        time.sleep(1.0)
    info = client.info(lease)
    assert info["stopped"] == "no call for 20 s" and info["state"] == "ended"
    assert info["ends_at"] > time.time(), "stopped before its end, for want of calls"
    after = client.call(lease, {"input": [0.5] * 16})
    assert after.status == 410 and "no call for 20 s" in after.body["error"] and after.charged == 0

