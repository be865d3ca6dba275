"""The market service end to end: a real anvil, real provider sites each with its own Ray
cluster, a real ledger database.

Providers A (a site of two nodes), B and C (one node each) from tests/sites.py register
their sites and stake on chain; buyers post specs; the service matches, assigns, starts
leases on the sites, completes the jobs with the providers' signed results and settles
them, and the test checks every balance to the wei.
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import Session, col, select

from anvil import RpcClient, dev_account
from compute.checkpoints import registered_checkpoint
from ledger import jobs as chain_jobs
from ledger import stake
from ledger.client import Swarm
from ledger.db import open_ledger
from ledger.errors import SwarmError
from ledger.indexer.models import EventRow
from ledger.jobs import JobStatus, job_info
from ledger.specs import store_spec
from market.migrations import MARKET
from market.records import MarketJob, MarketTransition
from market.service import MarketConfig, MarketService
from market.spec import validate_spec
from market.storage import DEFAULT_OUTPUT, pin
from oracle.migrations import ORACLE
from provider.authority import ChainAuthority
from tests.programs import program_spec as buyer_program
from tests.sites import PROVIDER_A, PROVIDER_B, PROVIDER_C, SiteNetwork

ONE = 10**18
MILLI = 10**15
BUYER = 5
# Asking prices, wei per CPU-second: A is the cheapest, then B, then C.
PRICES = {PROVIDER_A: MILLI // 2, PROVIDER_B: MILLI * 8 // 10, PROVIDER_C: MILLI}
# A job killed just after its first checkpoint: five epochs (seconds each) still to run.
KILLABLE = {"samples": 2048, "epochs": 6, "batch_size": 16}


def train_spec(**over: Any) -> dict:
    spec: dict[str, Any] = {
        "kind": "train", "model": "mlp", "dataset": "synthetic-classification",
        "resources": {"workers": 1, "cpus_per_worker": 1},
        "max_price_per_unit": "0.001", "max_units": 600, "deadline": "1h", "seed": 3,
        "params": {"samples": 256, "epochs": 2, "batch_size": 64},
    }
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(spec.get(key), dict):
            spec[key] = spec[key] | value
        else:
            spec[key] = value
    return spec


def program_spec(home: Path, code: str, **over) -> dict:
    """A buyer's own program (no training): fast to run, its outputs what the code writes, to the
    buyer's storage in `home`."""
    return (
        buyer_program(home / "buyer-storage", code, memory_gb=0, deadline="1h")
        | {"max_price_per_unit": "0.001"}
        | over
    )


DETERMINISTIC = (
    "import os, pathlib, time\n"
    "print('ran at', time.time())\n"  # its log differs from run to run, its outputs do not
    "pathlib.Path(os.environ['SWARM_OUTPUT_DIR'], 'sum.txt').write_text(str(sum(range(10 ** 6))))\n"
)
RANDOM = ("import os, pathlib\n"
          "pathlib.Path(os.environ['SWARM_OUTPUT_DIR'], 'noise.bin').write_bytes(os.urandom(16))\n")
SLOW = "import time\ntime.sleep(10)\n" + DETERMINISTIC


def post(swarm: Swarm, home: Path, spec: dict, buyer: int = BUYER, now: float | None = None) -> list[int]:
    """What `swarm job post` does: validate, give a built-in job the buyer's default output
    (`home`/results), store the spec, escrow one job per replica."""
    parsed = validate_spec(spec, now=now if now is not None else swarm.chain.timestamp())
    parsed = pin(parsed, home, default_output=str(home / DEFAULT_OUTPUT))
    digest = store_spec(home, parsed.canonical())
    sender = swarm.sender(dev_account(buyer).key)
    return [chain_jobs.post_job(swarm, sender, digest, parsed.max_price_per_unit, parsed.max_units,
                                parsed.deadline)[0] for _ in range(parsed.replicas)]


@pytest.fixture
def providers(swarm: Swarm, swarm_home: Path, site_network: SiteNetwork) -> dict[str, int]:
    """A, B and C registered with their sites, one declared GPU, their prices, and the minimum stake."""
    stakes = {}
    for index, address in ((1, PROVIDER_A), (2, PROVIDER_B), (3, PROVIDER_C)):
        sender = swarm.sender(dev_account(index).key)
        spec = site_network.site_spec(address, price_per_unit=str(PRICES[address]))
        stake.register(swarm, sender, store_spec(swarm_home, spec), 1)
        stake.stake(swarm, sender, 1_000 * ONE)
        stakes[address] = 1_000 * ONE
    return stakes


@pytest.fixture
def ledger_engine(tmp_path: Path):
    engine = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}", MARKET, ORACLE)
    yield engine
    engine.dispose()


@pytest.fixture
def service(
    swarm: Swarm, swarm_home: Path, ledger_engine, providers, caplog: pytest.LogCaptureFixture,
) -> Iterator[MarketService]:
    caplog.set_level(logging.INFO, logger="market")  # each job's moves, in the report of a test that fails
    config = MarketConfig(interval_s=0.2, fault_slash_bps=100)
    market = MarketService(swarm, swarm.sender(dev_account(0).key), ledger_engine, swarm_home, config)
    yield market
    market.close(wait=True)


def record(engine, job_id: int) -> MarketJob:
    with Session(engine) as session:
        return session.exec(select(MarketJob).where(MarketJob.job_id == job_id)).one()


def drive(service: MarketService, until: Callable[[], bool], timeout: float = 180.0) -> None:
    """Ticks the service until `until()` holds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        service.tick()
        if until():
            return
        service.wake.wait(0.3)
        service.wake.clear()
    raise AssertionError(f"the market did not get there within {timeout} s")


def in_state(engine, job_id: int, *states: str) -> Callable[[], bool]:
    def check() -> bool:
        with Session(engine) as session:
            found = session.exec(select(MarketJob).where(MarketJob.job_id == job_id)).first()
            return found is not None and found.state in states
    return check


def checkpointed(service: MarketService, job_id: int) -> Callable[[], bool]:
    """Ray Train has registered a checkpoint of the job's run, in the buyer's output."""
    return lambda: (
        registered_checkpoint(service.home / DEFAULT_OUTPUT / f"{service.namespace}{job_id}") is not None
    )


def balances(swarm: Swarm, *addresses: str) -> list[int]:
    return [swarm.balance_of(a) for a in addresses]


def settle_after_window(
    swarm: Swarm, rpc: RpcClient, service: MarketService, engine, job_ids: list[int]
) -> None:
    window = swarm.market.functions.disputeWindow().call()
    rpc.increase_time(window + 1)
    rpc.mine()
    drive(service, lambda: all(in_state(engine, j, "settled")() for j in job_ids))


def test_posted_job_runs_completes_and_pays_provider_and_refunds_buyer(
    swarm: Swarm, swarm_home: Path, service: MarketService, ledger_engine, rpc: RpcClient,
    site_network: SiteNetwork,
) -> None:
    buyer = dev_account(BUYER).address
    treasury = swarm.market.functions.treasury().call()
    before = balances(swarm, buyer, PROVIDER_A, treasury, swarm.market.address)
    (job_id,) = post(swarm, swarm_home, train_spec())
    escrow = MILLI * 600

    drive(service, in_state(ledger_engine, job_id, "completed"))
    info = job_info(swarm, job_id)
    rec = record(ledger_engine, job_id)
    assert info.status == JobStatus.COMPLETED
    assert info.provider == PROVIDER_A, "the cheapest provider per unit of useful work is chosen"
    assert info.price_per_unit == PRICES[PROVIDER_A]
    assert "0x" + info.result_hash.hex() == rec.result_hash
    assert 1 <= info.units_used == min(600, math.ceil(rec.units)), "CPU-seconds, rounded up"
    assert rec.result_dir is not None
    assert rec.metrics["epochs"] == 2 and (Path(rec.result_dir) / "outputs" / "metrics.json").is_file()
    # One worker: the lease trained in its own process, on its provider's node, and started no
    # Ray, no Ray Train controller and no worker actor for it.
    assert rec.metrics["placements"] == [[{"rank": 0, "node_id": None, "provider": PROVIDER_A}]]
    log = (lease_dir(swarm, site_network, PROVIDER_A, job_id) / "log").read_text()
    for sign in ("TrainController", "RayTrainWorker", "Started a local Ray"):
        assert sign not in log, log
    assert [line.split(":")[0] for line in log.splitlines() if line.startswith("epoch ")] == [
        "epoch 1/2", "epoch 2/2"], "each epoch in the job's log"

    settle_after_window(swarm, rpc, service, ledger_engine, [job_id])
    payment = info.units_used * PRICES[PROVIDER_A]
    fee = payment * info.fee_bps // 10_000
    after = balances(swarm, buyer, PROVIDER_A, treasury, swarm.market.address)
    assert after[0] - before[0] == -payment  # the buyer gets back everything not used
    assert after[1] - before[1] == payment - fee
    assert after[2] - before[2] == fee
    assert after[3] == before[3], "nothing is left in escrow"
    assert escrow > payment
    states = [t.to_state for t in _transitions(ledger_engine, job_id)]
    assert states == ["queued", "assigned", "running", "ran", "completed", "settled"]


CRASHES = "import time\ntime.sleep(2)\nprint(1 / 0)\n"


def test_a_job_that_fails_by_its_own_fault_pays_for_what_its_lease_held_and_refunds_the_rest(
    swarm: Swarm, swarm_home: Path, service: MarketService, ledger_engine, rpc: RpcClient, tmp_path: Path,
) -> None:
    buyer = dev_account(BUYER).address
    treasury = swarm.market.functions.treasury().call()
    before = balances(swarm, buyer, PROVIDER_A, treasury, swarm.market.address)
    (job_id,) = post(swarm, swarm_home, program_spec(swarm_home, CRASHES))

    drive(service, in_state(ledger_engine, job_id, "completed"))
    info = job_info(swarm, job_id)
    rec = record(ledger_engine, job_id)
    assert info.status == JobStatus.COMPLETED and info.result_hash == bytes(32), "charged: no result"
    assert info.provider == PROVIDER_A, "the cheapest provider"
    assert 2 <= info.units_used == rec.units <= 30, "the CPU-seconds its lease held, signed by its provider"
    assert rec.error is not None and rec.log_tail is not None
    assert "ZeroDivisionError" in rec.error
    assert "Traceback (most recent call last)" in rec.log_tail and "ZeroDivisionError" in rec.log_tail, (
        "the market keeps its last lines for `swarm job status`")
    from market.buyer import Buyer

    read = Buyer(swarm, swarm.sender(dev_account(BUYER).key), swarm_home,
                 f"sqlite:///{tmp_path / 'ledger.db'}").log(job_id)  # `swarm job logs`
    assert "Traceback (most recent call last)" in read.text and "ZeroDivisionError" in read.text
    assert read.source == f"the site of {PROVIDER_A}" and not read.verified, "no result: no hash covers it"
    details = [t.detail for t in _transitions(ledger_engine, job_id)]
    assert any(d.startswith("job-failed:") and f"Charged {info.units_used}" in d for d in details)

    settle_after_window(swarm, rpc, service, ledger_engine, [job_id])
    payment = info.units_used * info.price_per_unit
    fee = payment * info.fee_bps // 10_000
    after = balances(swarm, buyer, PROVIDER_A, treasury, swarm.market.address)
    assert after[0] - before[0] == -payment, "the buyer is refunded all it did not use"
    assert after[1] - before[1] == payment - fee, "the provider is paid for what ran"
    assert after[2] - before[2] == fee
    assert after[3] == before[3], "nothing is left in escrow"


STREAMS = ("import time\nfor i in range(6):\n    print('step', i, flush=True)\n    time.sleep(1)\n"
           + DETERMINISTIC)


def test_a_buyer_follows_its_jobs_log_as_it_runs_and_reads_it_from_its_result_after(
    swarm: Swarm, swarm_home: Path, service: MarketService, ledger_engine, tmp_path: Path,
) -> None:
    """`swarm job logs --follow`: the lease's output arrives while it runs, from its site, signed
    for by the buyer; once the job has a result, its log comes from the result, checked against the
    chain's resultHash; a stranger's request to the site is refused."""
    import threading

    from market.buyer import Buyer

    db_url = f"sqlite:///{tmp_path / 'ledger.db'}"
    (job_id,) = post(swarm, swarm_home, program_spec(swarm_home, STREAMS))
    buyer = Buyer(swarm, swarm.sender(dev_account(BUYER).key), swarm_home, db_url)
    pieces: list[tuple[float, str]] = []
    follower = threading.Thread(target=lambda: pieces.extend(
        (time.monotonic(), text) for text in buyer.logs(job_id, follow=True, poll_s=0.3)), daemon=True)
    follower.start()
    drive(service, in_state(ledger_engine, job_id, "completed"))
    follower.join(timeout=90)
    assert not follower.is_alive(), "following ends when the job's lease has ended"
    streamed = "".join(text for _, text in pieces)
    steps = [line for line in streamed.splitlines() if line.startswith("step")]
    assert steps == [f"step {i}" for i in range(6)]
    firsts = [at for at, text in pieces if "step 0" in text]
    lasts = [at for at, text in pieces if "step 5" in text]
    assert firsts and lasts and lasts[0] - firsts[0] >= 3, "it came as the program printed it, not at the end"

    kept = buyer.log(job_id)
    assert kept.verified and "step 5" in kept.text and kept.text == buyer.logs(job_id)
    assert "swarm-lease-outcome" not in kept.text and "swarm-lease-outcome" not in streamed
    stranger = Buyer(swarm, swarm.sender(dev_account(BUYER + 1).key), swarm_home, db_url)
    with pytest.raises(SwarmError, match=r"refused .*neither the matcher nor the buyer"):
        list(stranger.logs(job_id, follow=True, poll_s=0.3))


def test_a_completion_the_chain_lost_is_sent_again_and_the_job_settles_once(
    swarm: Swarm, swarm_home: Path, service: MarketService, ledger_engine, rpc: RpcClient,
) -> None:
    (job_id,) = post(swarm, swarm_home, program_spec(swarm_home, DETERMINISTIC))
    drive(service, in_state(ledger_engine, job_id, "ran"))
    older_state = rpc.snapshot()  # the chain as a devnet's state file last saved it
    drive(service, in_state(ledger_engine, job_id, "completed"))
    assert job_info(swarm, job_id).status == JobStatus.COMPLETED
    rpc.revert(older_state)  # the devnet restarts from that file: the completion is gone
    assert job_info(swarm, job_id).status == JobStatus.ASSIGNED

    with pytest.raises(SwarmError, match="no longer has"):  # the pass that finds its key ahead of the chain
        service.tick()
    drive(service, lambda: job_info(swarm, job_id).status == JobStatus.COMPLETED, timeout=60)  # and the next
    settle_after_window(swarm, rpc, service, ledger_engine, [job_id])
    assert job_info(swarm, job_id).status == JobStatus.SETTLED
    states = [t.to_state for t in _transitions(ledger_engine, job_id)]
    assert states == ["queued", "assigned", "running", "ran", "completed", "ran", "completed", "settled"], (
        states
    )


def test_a_job_nothing_can_take_is_explained_and_a_cancel_refunds_it(
    swarm: Swarm, swarm_home: Path, service: MarketService, ledger_engine,
) -> None:
    buyer = dev_account(BUYER).address
    before = swarm.balance_of(buyer)
    (job_id,) = post(swarm, swarm_home, train_spec(min_provider_score=0.9))
    report = service.tick()
    assert "score ruled out the most, 3 of 3 providers" in report.unmatched[job_id]
    assert record(ledger_engine, job_id).explanation == report.unmatched[job_id]
    assert job_info(swarm, job_id).status == JobStatus.POSTED

    chain_jobs.cancel_job(swarm, swarm.sender(dev_account(BUYER).key), job_id)
    drive(service, in_state(ledger_engine, job_id, "cancelled"), timeout=30)
    assert swarm.balance_of(buyer) == before


def test_a_job_past_its_deadline_is_expired_and_the_buyer_refunded(
    swarm: Swarm, swarm_home: Path, service: MarketService, ledger_engine, rpc: RpcClient,
) -> None:
    buyer = dev_account(BUYER).address
    before = swarm.balance_of(buyer)
    (job_id,) = post(swarm, swarm_home, train_spec(max_price_per_unit="0.0001", deadline="10m"))
    report = service.tick()
    assert "price ruled out the most, 3 of 3 providers" in report.unmatched[job_id]
    assert swarm.balance_of(buyer) == before - 10**14 * 600

    rpc.increase_time(11 * 60)
    rpc.mine()
    report = service.tick()
    assert report.counts.get("expired") == 1
    assert job_info(swarm, job_id).status == JobStatus.RECLAIMED
    assert swarm.balance_of(buyer) == before
    assert record(ledger_engine, job_id).state == "expired"


def test_a_provider_whose_site_dies_mid_job_loses_it_to_another_which_completes_it(
    swarm: Swarm, swarm_home: Path, service: MarketService, ledger_engine, rpc: RpcClient,
    site_network: SiteNetwork, providers: dict[str, int],
) -> None:
    # C asks the least for this job, so it gets it; then its site dies.
    sender_c = swarm.sender(dev_account(3).key)
    cheap = site_network.site_spec(PROVIDER_C, price_per_unit=str(MILLI // 10))
    stake.update_spec(swarm, sender_c, store_spec(swarm_home, cheap), 1)
    buyer = dev_account(BUYER).address
    treasury = swarm.market.functions.treasury().call()
    before = balances(swarm, buyer, PROVIDER_A, PROVIDER_C, treasury, swarm.market.address)
    (job_id,) = post(swarm, swarm_home, train_spec(params=KILLABLE))

    drive(service, in_state(ledger_engine, job_id, "running"), timeout=60)
    assert job_info(swarm, job_id).provider == PROVIDER_C
    drive(service, checkpointed(service, job_id), timeout=120)  # killed after a checkpoint: it resumes
    try:
        site_network.kill(PROVIDER_C)
        drive(service, in_state(ledger_engine, job_id, "completed"), timeout=240)
    finally:
        site_network.restart(PROVIDER_C)

    info = job_info(swarm, job_id)
    assert info.provider == PROVIDER_A, "reassigned to the next cheapest provider"
    rec = record(ledger_engine, job_id)
    assert rec.lost_providers == [PROVIDER_C] and rec.attempts == 2
    assert rec.metrics["resumed_from_epoch"] >= 1, "A resumed from C's last checkpoint in the buyer's output"
    details = [t.detail for t in _transitions(ledger_engine, job_id)]
    assert any(d.startswith(f"reassigned from {PROVIDER_C}") for d in details)
    slashed = stake.provider_info(swarm, PROVIDER_C).stake
    assert slashed == providers[PROVIDER_C] * 99 // 100, "C loses 1% for abandoning the job"

    settle_after_window(swarm, rpc, service, ledger_engine, [job_id])
    after = balances(swarm, buyer, PROVIDER_A, PROVIDER_C, treasury, swarm.market.address)
    payment = info.units_used * PRICES[PROVIDER_A]
    fee = payment * info.fee_bps // 10_000
    assert after[1] - before[1] == payment - fee
    assert after[2] == before[2], "C is paid nothing"
    assert after[4] == before[4]
    # The escrow is conserved to the wei: what the buyer paid is what A and the treasury got.
    assert before[0] - after[0] == (after[1] - before[1]) + (
        after[3] - before[3] - _slash_income(swarm, job_id)
    )


def _slash_income(swarm: Swarm, job_id: int) -> int:
    """What the treasury received from slashes during the test (the vault's share of C's slash)."""
    logs = swarm.vault.events.Slashed().get_logs(from_block=0)
    return sum(int(log.args.get("toTreasury", 0)) for log in logs if log.args["provider"] == PROVIDER_C)


def test_replicas_run_on_distinct_providers_and_agreeing_results_complete(
    swarm: Swarm, swarm_home: Path, service: MarketService, ledger_engine,
) -> None:
    first, second = post(swarm, swarm_home, program_spec(swarm_home, DETERMINISTIC, replicas=2))
    drive(service, lambda: all(in_state(ledger_engine, j, "completed")() for j in (first, second)))
    a, b = job_info(swarm, first), job_info(swarm, second)
    assert {a.provider, b.provider} == {PROVIDER_A, PROVIDER_B}, "the two cheapest, distinct providers"
    ra, rb = record(ledger_engine, first), record(ledger_engine, second)
    assert ra.outputs_hash == rb.outputs_hash is not None, "a deterministic program's outputs agree"
    assert a.result_hash != b.result_hash, "each result hash covers its own lease's log, which differ"
    assert ra.group_id == rb.group_id == first
    assert ra.evidence is None


def test_replicas_that_disagree_are_disputed_with_the_evidence(
    swarm: Swarm, swarm_home: Path, service: MarketService, ledger_engine,
) -> None:
    """Each provider signs its own result; results that differ are disputed, not paid."""
    first, second = post(swarm, swarm_home, program_spec(swarm_home, RANDOM, replicas=2))
    drive(service, lambda: all(in_state(ledger_engine, j, "disputed")() for j in (first, second)))
    evidence = record(ledger_engine, first).evidence
    assert evidence is not None and evidence == record(ledger_engine, second).evidence
    assert evidence[str(first)]["result_hash"] != evidence[str(second)]["result_hash"]
    for job_id in (first, second):
        info = job_info(swarm, job_id)
        assert info.status == JobStatus.DISPUTED
        assert "0x" + info.result_hash.hex() == evidence[str(job_id)]["result_hash"], (
            "what its provider signed"
        )
        assert evidence[str(job_id)]["provider"] == info.provider


def test_the_service_killed_mid_job_and_restarted_assigns_and_settles_once(
    swarm: Swarm, swarm_home: Path, ledger_engine, providers, rpc: RpcClient, site_network: SiteNetwork,
    anvil_node, tmp_path: Path,
) -> None:
    (job_id,) = post(swarm, swarm_home, program_spec(swarm_home, SLOW))
    env = os.environ | {
        "SWARM_HOME": str(swarm_home), "SWARM_RPC_URL": anvil_node.config.url,
        "SWARM_DB_URL": str(ledger_engine.url),
    }
    command = [sys.executable, "-m", "scripts.cli", "-v", "market", "run", "--interval", "0.3"]
    log = open(tmp_path / "market.log", "w")  # noqa: SIM115 -- closed in the finally below
    first = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait(in_state(ledger_engine, job_id, "running"), 90)
        time.sleep(2)  # the lease runs on A's site
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        assert record(ledger_engine, job_id).state == "running"

        done = subprocess.run(
            [*command, "--once"], check=False, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert record(ledger_engine, job_id).state == "completed"
        rpc.increase_time(swarm.market.functions.disputeWindow().call() + 1)
        rpc.mine()
        done = subprocess.run(
            [*command, "--once"], check=False, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        if first.poll() is None:
            first.kill()
        log.close()
    assert job_info(swarm, job_id).status == JobStatus.SETTLED
    with Session(ledger_engine) as session:
        names = [e.name for e in session.exec(select(EventRow).where(EventRow.job_id == job_id))]
    assert (
        names.count("JobAssigned") == 1
        and names.count("JobCompleted") == 1
        and names.count("JobSettled") == 1
    )
    rec = record(ledger_engine, job_id)
    assert rec.attempts == 2, "the market followed the lease twice"
    assert any("interrupted" in t.detail for t in _transitions(ledger_engine, job_id))
    lease = lease_dir(swarm, site_network, PROVIDER_A, job_id)
    assert json.loads((lease / "lease.json").read_text())["attempt"] == 1, "the site ran it once"


def lease_dir(swarm: Swarm, site_network: SiteNetwork, provider: str, job_id: int) -> Path:
    """Where the provider's site keeps the lease of job `job_id`."""
    job = ChainAuthority(swarm).job(job_id)
    assert job is not None
    posted_in = job.posted_in.hex()[:16]
    return Path(site_network.sites[provider].home) / "site" / "leases" / f"{job_id}-{posted_in}"


def _wait(check: Callable[[], bool], timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.3)
    raise AssertionError(f"not reached within {timeout} s")


def _transitions(engine, job_id: int) -> list[MarketTransition]:
    with Session(engine) as session:
        return list(session.exec(select(MarketTransition).where(MarketTransition.job_id == job_id)
                                 .order_by(col(MarketTransition.id))))
