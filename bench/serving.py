"""Serving paid by receipts: what receipts cost a call, what batching buys, how fast a site
checks receipts, what a redemption costs, and how many requests one transaction pays for.

Run: make bench-serving   (or .venv/bin/python bench/serving.py --seconds 10 --runs 3)

  verify    receipts checked a second on one core: the signature recovered from a receipt's
            header (`ledger.serving`), and the whole of `ReceiptBook.accept` (freshness, nonce,
            coverage, cap, the SQLite write) with its `charge`, on a real chain's deposit.
  latency   one client calling one lease, sequentially: through the site (HTTPS, the receipt
            signed and journaled by the client, checked, kept and charged by the site, the call
            forwarded) against the same Ray Serve deployment called directly on the lease's Unix
            socket, the two taking turns call by call; p50 and p99 of each, and their difference.
            On a deployment that answers each call at once (max_batch_size 1: a batch's wait adds
            the same to both paths, and only noise to their difference), then on the batched one.
  clients   calls a second through the site at 1, 16 and 64 concurrent clients (threads, each
            with its own kept-alive connection and its own receipts).
  batching  calls a second at 64 clients, the lease batching (max_batch_size 32) and not (1).
  gas       a redemption's receipt on anvil: for a voucher covering one call and one covering
            every call of the run (the same gas whatever it pays for).
  per_tx    `--long S`: calls for S seconds (600 for the issue's figure) with the site redeeming
            every 60 s; calls served per on-chain transaction (the deposit and the redemptions).

Everything runs on this machine: anvil, one site of one node, the clients. Medians of `--runs`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from anvil import dev_account
from bench.sites import staked_sites

RESULTS = Path(__file__).resolve().parent / "results" / "serving.json"
PROVIDER, BUYER = dev_account(1), dev_account(4)
PRICE = 10**12
ROW = [0.25] * 16


def order(batch: int, seconds: float):
    from compute.serve_order import ServeOrder

    return ServeOrder.parse({"max_batch_size": batch, "max_batch_wait_s": 0.01, "max_tokens": 16,
                             "ends_at": int(time.time() + seconds), "price_per_request": PRICE, "seed": 1})


def bench_verify(swarm, home: Path, count: int = 20_000) -> dict:
    from ledger import serving
    from ledger.keys import DigestSigner
    from ledger.serving import Receipt, ReceiptVerifier
    from provider.receipts import ReceiptBook

    os.sched_setaffinity(0, {0})  # one core
    try:
        domain = serving.domain_of(swarm)
        signer = DigestSigner(BUYER.key)
        headers = [serving.sign_receipt(signer, domain, PROVIDER.address, PRICE).header()
                   for _ in range(count)]
        verifier = ReceiptVerifier(domain, PROVIDER.address)
        began = time.perf_counter()
        for header in headers:
            verifier.signer(Receipt.from_header(header, PROVIDER.address))
        recover_rate = count / (time.perf_counter() - began)
        with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
            book = ReceiptBook(Path(tmp) / "receipts.db", domain, PROVIDER.address, 10**30,
                               lambda buyer: serving.account(swarm, buyer, PROVIDER.address))
            book.accept(serving.sign_receipt(signer, domain, PROVIDER.address, PRICE).header(), "l", PRICE)
            began = time.perf_counter()
            for header in headers:
                book.charge(book.accept(header, "l", PRICE), PRICE)
            accept_rate = count / (time.perf_counter() - began)
            book.close()
    finally:
        os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
    return {"receipts": count, "verified_per_s": round(recover_rate), "accepted_and_charged_per_s":
            round(accept_rate)}


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def latencies(socket: Path, client, lease: str, calls: int) -> tuple[list[float], list[float]]:
    """Seconds of each call made directly on the lease's socket and through the site, taking turns
    call by call, so both meet the machine in the same state."""
    import http.client
    import socket as sockets

    class Unix(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = sockets.socket(sockets.AF_UNIX)
            self.sock.connect(str(socket))

    connection = Unix("lease")
    body = json.dumps({"input": ROW}).encode()
    direct, through = [], []
    for _ in range(calls):
        began = time.perf_counter()
        connection.request("POST", "/predict", body=body, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        response.read()
        assert response.status == 200
        direct.append(time.perf_counter() - began)
        began = time.perf_counter()
        answer = client.call(lease, {"input": ROW})
        assert answer.status == 200, answer
        through.append(time.perf_counter() - began)
    return direct, through


def latency_runs(site, client, lease: str, runs: int, calls: int) -> list[dict]:
    """`runs` latency runs of `calls` each on `lease`: p50 and p99 direct and through the site, and
    their differences."""
    socket = Path(site.home) / "site" / "leases" / lease / "work" / "serve.sock"
    latency = []
    for _ in range(runs):
        direct, through = latencies(socket, client, lease, calls)
        latency.append({
            "direct_p50_ms": round(1e3 * percentile(direct, 50), 3),
            "direct_p99_ms": round(1e3 * percentile(direct, 99), 3),
            "site_p50_ms": round(1e3 * percentile(through, 50), 3),
            "site_p99_ms": round(1e3 * percentile(through, 99), 3)})
        latency[-1]["added_p50_ms"] = round(latency[-1]["site_p50_ms"] - latency[-1]["direct_p50_ms"], 3)
        latency[-1]["added_p99_ms"] = round(latency[-1]["site_p99_ms"] - latency[-1]["direct_p99_ms"], 3)
        print("latency", latency[-1], flush=True)
    return latency


def throughput(client, lease: str, clients: int, seconds: float) -> float:
    done = [0] * clients
    stop = time.monotonic() + seconds

    def run(i: int) -> None:
        while time.monotonic() < stop:
            answer = client.call(lease, {"input": ROW})
            assert answer.status == 200, answer
            done[i] += 1

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(done) / (time.monotonic() - began)


def deployed(client, batch: int, seconds: float) -> str:
    lease = client.deploy(order(batch, seconds))["lease"]
    client.wait_serving(lease)
    for _ in range(50):  # warm: the replica's first batches, the connections
        client.call(lease, {"input": ROW})
    return lease


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--calls", type=int, default=500, help="sequential calls per latency run")
    parser.add_argument("--long", type=float, default=0.0, help="seconds of the per-transaction run")
    parser.add_argument("--only-long", action="store_true",
                        help="run only the per-transaction run, keeping the other figures of the last run")
    parser.add_argument("--only-latency", action="store_true",
                        help="run only the latency runs, keeping the other figures of the last run")
    args = parser.parse_args()

    from ledger import serving
    from market.sites import site_address
    from wire.serving import ServingClient

    results: dict = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    with staked_sites({1: 1}) as (swarm, home, sites):
        site = sites[0]
        buyer = swarm.sender(BUYER.key)
        serving.deposit(swarm, buyer, PROVIDER.address, 1_000 * 10**18)
        address = site_address(home, site.provider, "0x" + swarm.read("StakingVault", "providerInfo",
                                                                        site.provider)[7].hex())
        assert address is not None
        client = ServingClient(swarm, buyer, home / "buyer", address)
        if args.only_long:
            results["per_tx"] = bench_per_tx(swarm, client, args.long)
            print("per_tx", results["per_tx"], flush=True)
            results["summary"] = summary(results)
            RESULTS.write_text(json.dumps(results, indent=2))
            return
        if not args.only_latency:
            results["verify"] = [bench_verify(swarm, home) for _ in range(args.runs)]
            print("verify", results["verify"], flush=True)

        # Latency on a deployment that answers each call at once (max_batch_size 1): a batch's wait
        # would add the same to both paths, and only noise to their difference; the batched one's
        # figures follow, as `latency_batched`.
        single = deployed(client, 1, 3_600)
        results["latency"] = latency_runs(site, client, single, args.runs, args.calls)
        client.stop(single)
        lease = deployed(client, 32, 3_600)
        results["latency_batched"] = latency_runs(site, client, lease, args.runs, args.calls)
        if args.only_latency:
            results["summary"] = summary(results)
            RESULTS.write_text(json.dumps(results, indent=2))
            print(json.dumps(results["summary"], indent=2))
            return
        results["clients"] = {str(n): [round(throughput(client, lease, n, args.seconds), 1)
                                       for _ in range(args.runs)] for n in (1, 16, 64)}
        print("clients", results["clients"], flush=True)
        batched = [round(throughput(client, lease, 64, args.seconds), 1) for _ in range(args.runs)]
        client.stop(lease)
        client.aggregate()
        single = deployed(client, 1, 3_600)
        unbatched = [round(throughput(client, single, 64, args.seconds), 1) for _ in range(args.runs)]
        client.stop(single)
        results["batching"] = {"batched_64": batched, "unbatched_64": unbatched}
        print("batching", results["batching"], flush=True)

        results["gas"] = bench_gas(swarm, client)
        print("gas", results["gas"], flush=True)
        if args.long:
            results["per_tx"] = bench_per_tx(swarm, client, args.long)
            print("per_tx", results["per_tx"], flush=True)
    results["summary"] = summary(results)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2))
    print(json.dumps(results["summary"], indent=2))


def bench_gas(swarm, client) -> dict:
    """Receipt gas of redeeming a voucher worth one call, then one worth every call made so far."""
    from ledger import serving

    provider = swarm.sender(PROVIDER.key)
    client.aggregate()
    last = client.journal.last_voucher(PROVIDER.address)
    assert last is not None
    state = serving.account(swarm, BUYER.address, PROVIDER.address)
    many = serving.sign_voucher(client.signer, client.domain, PROVIDER.address, last.cumulative)
    one = serving.sign_voucher(client.signer, client.domain, PROVIDER.address, state.redeemed + PRICE)
    receipts = []
    for voucher in (one, many):
        if voucher.cumulative > serving.account(swarm, BUYER.address, PROVIDER.address).redeemed:
            receipts.append((voucher.cumulative, serving.redeem(swarm, provider, voucher).gas_used))
    return {"one_call_gas": receipts[0][1], "many_calls_gas": receipts[-1][1],
            "many_calls": (receipts[-1][0] - state.redeemed) // PRICE - 1}


def bench_per_tx(swarm, client, seconds: float) -> dict:
    """Calls for `seconds` from 16 clients while the site redeems what it is owed (every 60 s at the
    most, as --redeem-every says); the transactions are the deposit and every redemption."""
    from ledger import serving

    lease = deployed(client, 32, seconds + 120)
    escrow = swarm.contract("ServingEscrow")
    start_block = swarm.chain.w3.eth.block_number
    calls = throughput(client, lease, 16, seconds) * seconds
    client.stop(lease)
    last = client.aggregate()
    redeemed = serving.account(swarm, BUYER.address, PROVIDER.address).redeemed
    if last is not None and last.cumulative > redeemed:
        serving.redeem(swarm, swarm.sender(PROVIDER.key), last)  # as the site would on its next round
    logs = escrow.events.Redeemed().get_logs(from_block=start_block,
                                             argument_filters={"buyer": BUYER.address})
    transactions = 1 + len(logs)  # a deposit, and the redemptions
    return {"seconds": seconds, "calls": round(calls), "redemptions": len(logs),
            "calls_per_transaction": round(calls / transactions)}


def summary(results: dict) -> dict:
    out: dict = {}
    if "verify" in results:
        out["verified_per_s"] = statistics.median(r["verified_per_s"] for r in results["verify"])
        out["accepted_per_s"] = statistics.median(r["accepted_and_charged_per_s"] for r in results["verify"])
    if "latency" in results:
        for key in results["latency"][0]:
            out[key] = statistics.median(r[key] for r in results["latency"])
    if "latency_batched" in results:
        out["batched"] = {key: statistics.median(r[key] for r in results["latency_batched"])
                          for key in results["latency_batched"][0]}
    if "clients" in results:
        out["calls_per_s"] = {n: statistics.median(v) for n, v in results["clients"].items()}
    if "batching" in results:
        out["batching"] = {k: statistics.median(v) for k, v in results["batching"].items()}
    for key in ("gas", "per_tx"):
        if key in results:
            out[key] = results[key]
    return out


if __name__ == "__main__":
    main()
