"""`swarm job …` end to end on a real anvil: escrow moved to the wei, replicas, cancel,
reclaim and dispute with their refusals, status and list from the ledger, a result
verified against its on-chain hash — and malformed specs that never reach the chain."""

from __future__ import annotations

import copy
import hashlib
import io
import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlmodel import Session

from anvil import AnvilNode, RpcClient, dev_account
from compute.manifest import record_hash, result_hash, result_record
from ledger import jobs, stake
from ledger.client import Swarm
from ledger.db import migrate, open_engine, session
from ledger.errors import SwarmError
from ledger.indexer.models import Job
from ledger.jobs import JobStatus
from ledger.specs import load_spec as load_stored_spec
from ledger.units import ONE
from market.migrations import MARKET
from market.records import MarketJob, MarketTransition
from market.spec import SpecError, job_namespace
from scripts.cli import cli as swarm_cli
from tests.conftest import one_line_error, provider_signature
from tests.object_store import S3Store

B = 5  # the buyer's dev account
BUYER = dev_account(B).address
OTHER = 6  # someone who is not the buyer
EXAMPLE = yaml.safe_load((Path(__file__).resolve().parents[1] / "examples" / "train.yaml").read_text())
ESCROW = ONE // 1_000 * 3_600  # examples/train.yaml: 0.001 SWARM × 3600 units


@pytest.fixture
def db(tmp_path: Path) -> dict[str, str]:
    """A ledger database of the test's own, so no test sees another's (reverted) chain."""
    return {"SWARM_DB_URL": f"sqlite:///{tmp_path / 'ledger.db'}"}


@pytest.fixture
def job(cli, db):
    """Runs `swarm job …` against the session chain with the test's ledger."""
    return lambda *args, env=None: cli("job", *args, env=db | (env or {}))


def _json(result) -> Any:
    assert result.code == 0, result.stderr
    return json.loads(result.stdout)


def _now(swarm: Swarm) -> int:
    """Later of the chain's and the wall clock's time: a spec's deadline must pass both checks."""
    return max(swarm.chain.timestamp(), int(time.time()))


def _spec_file(tmp_path: Path, swarm: Swarm, name: str = "job.yaml", **changes: Any) -> Path:
    spec = copy.deepcopy(EXAMPLE) | {"deadline": _now(swarm) + 3_600} | changes
    path = tmp_path / name
    path.write_text(json.dumps(spec) if name.endswith(".json") else yaml.safe_dump(spec))
    return path


def _post(job, spec: Path, account: int = B) -> dict:
    return _json(job("post", str(spec), "--account", str(account), "--json"))


def _marks(swarm: Swarm, address: str = BUYER) -> tuple[int, int, int]:
    w3 = swarm.chain.w3
    return w3.eth.get_transaction_count(address), swarm.balance_of(address), w3.eth.block_number


@pytest.fixture
def provider(swarm: Swarm):
    """Dev account 1, registered and staked, so the matcher (dev account 0) can assign it work."""
    p = swarm.sender(dev_account(1).key)
    stake.register(swarm, p, b"\x44" * 32, 1)
    stake.stake(swarm, p, 1_000 * ONE)
    return p


def _complete(swarm: Swarm, job_id: int, provider_address: str, result: bytes = b"\x55" * 32,
              units: int = 600) -> None:
    matcher = swarm.sender(dev_account(0).key)
    jobs.assign_job(swarm, matcher, job_id, provider_address, ONE // 2_000)
    jobs.complete_job(swarm, matcher, job_id, result, units, provider_signature(swarm, job_id, result, units))


# ── post ─────────────────────────────────────────────────────────────────────

def test_post_moves_the_escrow_to_the_market_and_records_the_spec(
    job, swarm: Swarm, tmp_path: Path, swarm_home: Path
) -> None:
    buyer0, market0 = swarm.balance_of(BUYER), swarm.balance_of(swarm.market.address)
    posted = _post(job, _spec_file(tmp_path, swarm))

    assert (posted["replicas"], int(posted["escrow_wei"]), posted["buyer"]) == (1, ESCROW, BUYER)
    assert swarm.balance_of(BUYER) == buyer0 - ESCROW
    assert swarm.balance_of(swarm.market.address) == market0 + ESCROW
    (job_id,) = posted["job_ids"]
    info = jobs.job_info(swarm, job_id)
    assert (info.status, info.buyer, info.escrow, info.max_units) == (JobStatus.POSTED, BUYER, ESCROW, 3_600)

    stored = load_stored_spec(swarm_home, bytes.fromhex(posted["spec_hash"][2:]))
    assert stored["kind"] == "train" and stored["max_price_per_unit"] == "0.001"
    assert stored["output"] == str(swarm_home / "results"), (
        "a built-in job without an output gets the buyer's"
    )
    status = _json(job("status", str(job_id), "--json"))  # syncs the ledger
    assert status["spec_hash"] == posted["spec_hash"]
    assert status["spec"]["resources"]["workers"] == 2 and status["status"] == "posted"


def test_the_ledger_holds_the_posted_spec_hash(job, swarm: Swarm, tmp_path: Path, db) -> None:
    posted = _post(job, _spec_file(tmp_path, swarm))
    _json(job("list", "--all", "--json"))  # syncs
    engine = open_engine(db["SWARM_DB_URL"])
    with Session(engine) as s:
        row = s.get(Job, (swarm.chain.chain_id, posted["job_ids"][0]))
        assert row is not None
        assert (row.spec_hash, row.buyer, row.escrow) == (posted["spec_hash"], BUYER, ESCROW)
    engine.dispose()


def test_replicas_post_one_job_each_with_the_full_escrow(job, swarm: Swarm, tmp_path: Path) -> None:
    buyer0 = swarm.balance_of(BUYER)
    posted = _post(job, _spec_file(tmp_path, swarm, replicas=2))
    first, second = posted["job_ids"]
    assert second == first + 1 and len(posted["tx"]) == 2
    assert int(posted["escrow_wei"]) == 2 * ESCROW and int(posted["escrow_per_job_wei"]) == ESCROW
    assert swarm.balance_of(BUYER) == buyer0 - 2 * ESCROW
    listed = _json(job("list", "--account", str(B), "--json"))["jobs"]
    assert [j["job_id"] for j in listed] == [second, first]
    assert {j["spec_hash"] for j in listed} == {posted["spec_hash"]}


def test_post_that_escrows_more_than_the_balance_is_refused(job, swarm: Swarm, tmp_path: Path) -> None:
    marks = _marks(swarm)
    text = one_line_error(job("post", str(_spec_file(tmp_path, swarm, max_price_per_unit="100", replicas=3)),
                              "--account", str(B)))
    assert "less than the 1,080,000 SWARM this job escrows" in text and "× 3 replicas" in text
    assert _marks(swarm) == marks


def test_post_with_a_deadline_the_chain_has_passed_is_refused(job, swarm: Swarm, rpc: RpcClient,
                                                              tmp_path: Path) -> None:
    spec = _spec_file(tmp_path, swarm)  # an hour from now by the wall clock
    rpc.increase_time(7_200)
    marks = _marks(swarm)
    assert "is not after the chain's current time" in one_line_error(
        job("post", str(spec), "--account", str(B))
    )
    assert _marks(swarm) == marks


def test_a_deadline_given_as_a_duration_counts_from_the_chains_clock_when_it_runs_ahead(
        job, swarm: Swarm, rpc: RpcClient, tmp_path: Path) -> None:
    """After `swarm demo` a devnet's clock runs ahead of the wall clock: `deadline: 1h` still
    means an hour from what the chain calls now, so the job has its hour."""
    spec = _spec_file(tmp_path, swarm, deadline="1h")
    rpc.increase_time(7_200)
    rpc.mine()
    (job_id,) = _post(job, spec)["job_ids"]
    left = jobs.job_info(swarm, job_id).deadline - swarm.chain.timestamp()
    assert 3_500 <= left <= 3_600, left


def test_a_failed_replica_cancels_those_already_posted(
    swarm: Swarm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, anvil_node: AnvilNode, swarm_home: Path, db
) -> None:
    """The buyer's tokens leave between the replicas (really, on chain): replica 2 fails, replica 1 is
    refunded."""
    import ledger.jobs
    import market.buyer

    real_post, calls = ledger.jobs.post_job, []

    def drained_after_the_first(sw, sender, *args):
        calls.append(1)
        if len(calls) == 2:
            sender.send(
                sw.token.functions.transfer(dev_account(OTHER).address, sw.balance_of(sender.address))
            )
        return real_post(sw, sender, *args)

    # as market.buyer sends each replica
    monkeypatch.setattr(market.buyer, "post_job", drained_after_the_first)
    first = int(swarm.market.functions.nextJobId().call())
    buyer0, other0 = swarm.balance_of(BUYER), swarm.balance_of(dev_account(OTHER).address)
    done = _in_process(["job", "post", str(_spec_file(tmp_path, swarm, replicas=3)), "--account", str(B)],
                       anvil_node, swarm_home, db)
    assert isinstance(done.exception, SwarmError) and done.exit_code == 1
    message = str(done.exception)
    assert (
        "Posting replica 2 of 3 failed" in message and f"cancelled job {first}, refunded in full" in message
    )
    assert "\n" not in message
    assert jobs.job_info(swarm, first).status is JobStatus.CANCELLED
    assert int(swarm.market.functions.nextJobId().call()) == first + 1
    # all it held after the first escrow went away; that one came back
    assert swarm.balance_of(BUYER) == ESCROW
    assert swarm.balance_of(dev_account(OTHER).address) == other0 + buyer0 - ESCROW
    assert swarm.market.functions.totalEscrowed().call() == 0


# ── cancel, reclaim, dispute ─────────────────────────────────────────────────

def test_cancel_refunds_in_full(job, swarm: Swarm, tmp_path: Path) -> None:
    buyer0 = swarm.balance_of(BUYER)
    (job_id,) = _post(job, _spec_file(tmp_path, swarm))["job_ids"]
    cancelled = _json(job("cancel", str(job_id), "--account", str(B), "--json"))
    assert int(cancelled["refund_wei"]) == ESCROW
    assert swarm.balance_of(BUYER) == buyer0
    assert jobs.job_info(swarm, job_id).status is JobStatus.CANCELLED
    again = one_line_error(job("cancel", str(job_id), "--account", str(B)))
    assert f"Job {job_id} is cancelled; only a posted job" in again
    assert "has no result; it is cancelled and will not get one" in one_line_error(job("result", str(job_id)))


def test_cancel_by_someone_else_is_refused_and_nothing_changes(job, swarm: Swarm, tmp_path: Path) -> None:
    (job_id,) = _post(job, _spec_file(tmp_path, swarm))["job_ids"]
    other = dev_account(OTHER).address
    marks, other_marks = _marks(swarm), _marks(swarm, other)
    text = one_line_error(job("cancel", str(job_id), "--account", str(OTHER)))
    assert f"Only the buyer of job {job_id}, {BUYER}, may cancel it; you are {other}." in text
    assert (_marks(swarm), _marks(swarm, other)) == (marks, other_marks)
    assert jobs.job_info(swarm, job_id).status is JobStatus.POSTED


def test_cancel_of_an_assigned_job_points_to_reclaim(job, swarm: Swarm, tmp_path: Path, provider) -> None:
    (job_id,) = _post(job, _spec_file(tmp_path, swarm))["job_ids"]
    jobs.assign_job(swarm, swarm.sender(dev_account(0).key), job_id, provider.address, ONE // 2_000)
    text = one_line_error(job("cancel", str(job_id), "--account", str(B)))
    assert f"Job {job_id} is assigned" in text and f"`swarm job reclaim {job_id}` refunds it" in text


def test_reclaim_waits_for_the_deadline_then_refunds_the_buyer(
    job, swarm: Swarm, rpc: RpcClient, tmp_path: Path, provider
) -> None:
    buyer0 = swarm.balance_of(BUYER)
    deadline = _now(swarm) + 600
    (job_id,) = _post(job, _spec_file(tmp_path, swarm, deadline=deadline))["job_ids"]
    jobs.assign_job(swarm, swarm.sender(dev_account(0).key), job_id, provider.address, ONE // 2_000)
    marks = _marks(swarm, dev_account(OTHER).address)
    early = one_line_error(job("reclaim", str(job_id), "--account", str(OTHER)))
    assert f"Job {job_id} is assigned and its deadline" in early and "away; reclaim it after that" in early
    assert _marks(swarm, dev_account(OTHER).address) == marks

    rpc.increase_time(deadline - swarm.chain.timestamp() + 1)
    reclaimed = _json(job("reclaim", str(job_id), "--account", str(OTHER), "--json"))  # anyone may send it
    assert int(reclaimed["refund_wei"]) == ESCROW and reclaimed["buyer"] == BUYER
    assert swarm.balance_of(BUYER) == buyer0
    assert jobs.job_info(swarm, job_id).status is JobStatus.RECLAIMED
    again = one_line_error(job("reclaim", str(job_id), "--account", str(B)))
    assert f"Job {job_id} is reclaimed; only a posted or assigned job past its deadline" in again


def test_dispute_of_a_completed_job_and_after_its_window(
    job, swarm: Swarm, rpc: RpcClient, tmp_path: Path, provider
) -> None:
    first, second = _post(job, _spec_file(tmp_path, swarm, replicas=2))["job_ids"]
    for job_id in (first, second):
        _complete(swarm, job_id, provider.address)

    not_buyer = one_line_error(job("dispute", str(first), "--account", str(OTHER)))
    assert f"Only the buyer of job {first}" in not_buyer and "may dispute it" in not_buyer
    bond = swarm.market.functions.bondFor(first).call()
    before = swarm.balance_of(BUYER)
    disputed = _json(job("dispute", str(first), "--account", str(B), "--json"))
    assert disputed == disputed | {"job_id": first, "status": "disputed", "by": BUYER, "bond_wei": str(bond)}
    assert bond > 0 and swarm.balance_of(BUYER) == before - bond  # approved and posted in the one command
    assert jobs.job_info(swarm, first).status is JobStatus.DISPUTED
    assert "is disputed; only a completed job can be disputed" in one_line_error(
        job("dispute", str(first), "--account", str(B)))

    rpc.increase_time(swarm.market.functions.disputeWindow().call() + 1)
    marks = _marks(swarm)
    late = one_line_error(job("dispute", str(second), "--account", str(B)))
    assert f"The dispute window of job {second} closed at" in late
    assert _marks(swarm) == marks
    assert jobs.job_info(swarm, second).status is JobStatus.COMPLETED
    under_arbitration = one_line_error(job("reclaim", str(first), "--account", str(B)))
    assert "awaits the arbiter until" in under_arbitration

    rpc.increase_time(swarm.market.functions.ARBITRATION_PERIOD().call() + 1)
    split = _json(job("reclaim", str(first), "--account", str(OTHER), "--json"))  # anyone may settle it
    assert split == split | {
        "job_id": first,
        "status": "settled",
        "buyer": BUYER,
        "bond_refund_wei": str(bond),
    }
    assert jobs.job_info(swarm, first).status is JobStatus.SETTLED


def test_a_dispute_the_buyer_cannot_bond_is_refused_in_one_line(
    job, swarm: Swarm, tmp_path: Path, provider
) -> None:
    (job_id,) = _post(job, _spec_file(tmp_path, swarm))["job_ids"]
    _complete(swarm, job_id, provider.address)
    buyer = swarm.sender(dev_account(B).key)
    buyer.send(swarm.token.functions.transfer(dev_account(OTHER).address, swarm.balance_of(BUYER)))
    marks = _marks(swarm)
    refused = one_line_error(job("dispute", str(job_id), "--account", str(B)))
    assert f"Disputing job {job_id} takes a bond of" in refused and "fund the account first" in refused
    assert _marks(swarm) == marks
    assert jobs.job_info(swarm, job_id).status is JobStatus.COMPLETED


def test_a_job_that_does_not_exist_is_one_line(job, swarm: Swarm) -> None:
    for verb in ("status", "cancel", "reclaim", "dispute", "result"):
        args = (verb, "424242") + (("--account", str(B)) if verb in ("cancel", "reclaim", "dispute") else ())
        assert "Job 424242 does not exist on chain" in one_line_error(job(*args))


# ── status and list ──────────────────────────────────────────────────────────

def test_status_shows_the_chain_the_spec_and_the_market_record(
    job, swarm: Swarm, tmp_path: Path, db, provider
) -> None:
    (job_id,) = _post(job, _spec_file(tmp_path, swarm))["job_ids"]
    _complete(swarm, job_id, provider.address)
    _market_row(swarm, db, job_id, tmp_path / "nowhere", "0x" + "55" * 32, state="completed")

    status = _json(job("status", str(job_id), "--json"))
    assert (status["status"], status["provider"], status["units_used"]) == (
        "completed",
        provider.address,
        600,
    )
    assert status["result_hash"] == "0x" + "55" * 32 and status["dispute_end"] is not None
    assert status["market"]["state"] == "completed" and status["market"]["metrics"]["accuracy"] == 0.875
    assert [t["to"] for t in status["transitions"]] == ["queued", "assigned", "running", "completed"]

    human = job("status", str(job_id))
    assert human.code == 0, human.stderr
    for text in (f"Job {job_id}", "completed", "mlp", "synthetic-classification", "History", "running"):
        assert text in human.stdout


def test_list_shows_jobs_newest_first_with_filters(job, swarm: Swarm, tmp_path: Path, provider) -> None:
    (mine,) = _post(job, _spec_file(tmp_path, swarm))["job_ids"]
    (theirs,) = _post(job, _spec_file(tmp_path, swarm), account=OTHER)["job_ids"]
    jobs.assign_job(swarm, swarm.sender(dev_account(0).key), theirs, provider.address, ONE // 2_000)

    everyone = _json(job("list", "--all", "--json"))["jobs"]
    assert [j["job_id"] for j in everyone][:2] == [theirs, mine]
    assert [j["job_id"] for j in _json(job("list", "--buyer", BUYER, "--json"))["jobs"]] == [mine]
    assigned = _json(job("list", "--all", "--status", "assigned", "--json"))["jobs"]
    assert [(j["job_id"], j["provider"]) for j in assigned] == [(theirs, provider.address)]
    assert len(_json(job("list", "--all", "--limit", "1", "--json"))["jobs"]) == 1

    human = job("list", "--account", str(B))
    assert human.code == 0 and str(mine) in human.stdout and "posted" in human.stdout
    assert "only one of" in one_line_error(job("list", "--all", "--buyer", BUYER))


def test_an_address_in_a_table_stays_whole_on_a_narrow_terminal() -> None:
    from rich.console import Console

    from scripts.common import table

    address = dev_account(1).address
    narrow = Console(width=60, file=io.StringIO(), record=True)
    narrow.print(table("Jobs", ["job", "provider", "why"], [[7, address, "a reason that takes room " * 4]]))
    assert address in narrow.export_text()


# ── result ───────────────────────────────────────────────────────────────────

def _market_row(swarm: Swarm, db: dict[str, str], job_id: int, result_dir: Path, digest: str,
                state: str = "completed") -> None:
    """What the market service writes when a run finishes: its row and its transitions."""
    engine = open_engine(db["SWARM_DB_URL"])
    migrate(engine, MARKET)
    now = time.time()
    chain_id = swarm.chain.chain_id
    with session(engine) as s:
        s.add(MarketJob(chain_id=chain_id, job_id=job_id, group_id=job_id, state=state,
                        provider=dev_account(1).address, attempts=1, result_hash=digest, units=599.2,
                        unit="cpu-s", result_dir=str(result_dir), metrics={"loss": 0.3125, "accuracy": 0.875},
                        created_at=now, updated_at=now))
        for i, (a, b) in enumerate([(None, "queued"), ("queued", "assigned"), ("assigned", "running"),
                                    ("running", state)]):
            s.add(MarketTransition(chain_id=chain_id, job_id=job_id, at=now + i, from_state=a, to_state=b,
                                   provider=None if b == "queued" else dev_account(1).address))
    engine.dispose()


def _result_dir(root: Path) -> Path:
    outputs = root / "outputs"
    (outputs / "checkpoint").mkdir(parents=True)
    (outputs / "metrics.json").write_text('{"loss": 0.3125, "accuracy": 0.875}')
    (outputs / "checkpoint" / "model.pt").write_bytes(bytes(range(256)) * 8)
    (root / "log.txt").write_text("bookkeeping, not hashed")
    return root


def test_result_is_verified_against_the_on_chain_hash_and_a_tampered_file_is_refused(
    job, swarm: Swarm, tmp_path: Path, db, provider, swarm_home: Path
) -> None:
    output = tmp_path / "my-results"
    (job_id,) = _post(job, _spec_file(tmp_path, swarm, output=str(output)))["job_ids"]
    assert f"Job {job_id} has no result yet; it is posted." in one_line_error(job("result", str(job_id)))
    # Where the site writes it: the spec's output, under the job's compute id.
    result_dir = _result_dir(output / f"{job_namespace(swarm.chain.chain_id, swarm.market.address)}{job_id}")
    digest = result_hash(result_dir)  # as the provider's runner computes it, writing manifest.json
    _complete(swarm, job_id, provider.address, bytes.fromhex(digest[2:]))
    _market_row(swarm, db, job_id, result_dir, digest)

    done = _json(job("result", str(job_id), "--json"))
    assert done == done | {"verified": True, "result_hash": digest, "result_dir": str(result_dir),
                           "units_used": 600, "metrics": {"loss": 0.3125, "accuracy": 0.875}}
    human = job("result", str(job_id))
    assert human.code == 0 and "Verified" in human.stdout and "0.875" in human.stdout
    manifest = (result_dir / "manifest.json").read_bytes()

    (result_dir / "outputs" / "checkpoint" / "model.pt").write_bytes(b"not the model")
    text = one_line_error(job("result", str(job_id)))
    assert (
        f"The result of job {job_id} in {result_dir} does not match its on-chain result hash {digest}" in text
    )
    assert "outputs/checkpoint/model.pt" in text and "do not trust it" in text
    # the provider's manifest is kept as evidence
    assert (result_dir / "manifest.json").read_bytes() == manifest

    shutil.rmtree(result_dir)
    assert "is missing; it cannot be verified" in one_line_error(job("result", str(job_id)))


def test_a_download_into_a_directory_that_is_not_empty_is_refused_and_nothing_there_is_lost_or_mixed_in(
    job, swarm: Swarm, tmp_path: Path, db, provider
) -> None:
    output = tmp_path / "my-results"
    (job_id,) = _post(job, _spec_file(tmp_path, swarm, output=str(output)))["job_ids"]
    result_dir = _result_dir(output / f"{job_namespace(swarm.chain.chain_id, swarm.market.address)}{job_id}")
    digest = result_hash(result_dir)
    _complete(swarm, job_id, provider.address, bytes.fromhex(digest[2:]))
    _market_row(swarm, db, job_id, result_dir, digest)

    # A file left from an earlier download: mixed in, it would make the provider look guilty.
    stale = tmp_path / "downloads"
    (stale / "outputs").mkdir(parents=True)
    (stale / "outputs" / "old.bin").write_bytes(b"from an earlier job")
    text = one_line_error(job("result", str(job_id), "--download", str(stale)))
    assert f"{stale} is not empty, so the result of job {job_id} would mix with the files there" in text
    assert "give --download a new or empty directory" in text and "do not trust it" not in text
    assert sorted(p.relative_to(stale).as_posix() for p in stale.rglob("*")) == ["outputs", "outputs/old.bin"]
    assert (stale / "outputs" / "old.bin").read_bytes() == b"from an earlier job"

    empty = tmp_path / "empty"
    empty.mkdir()
    done = _json(job("result", str(job_id), "--download", str(empty), "--json"))
    assert done["verified"] is True and done["result_dir"] == str(empty)
    assert (empty / "outputs" / "checkpoint" / "model.pt").read_bytes() == bytes(range(256)) * 8
    again = _json(job("result", str(job_id), "--download", str(empty), "--json"))  # holds it already: kept
    assert again["verified"] is True and again["result_dir"] == str(empty)

    # A result that does not verify leaves nothing where it was to go, and names where it came from.
    (result_dir / "outputs" / "metrics.json").write_text("{}")
    broken = tmp_path / "broken"
    text = one_line_error(job("result", str(job_id), "--download", str(broken)))
    assert f"The result of job {job_id} in {result_dir} does not match its on-chain result hash" in text
    assert digest in text and "outputs/metrics.json" in text
    assert not broken.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".download")) == []  # no staging left


# ── logs ─────────────────────────────────────────────────────────────────────

def test_a_jobs_log_is_read_from_its_result_checked_against_the_chain_and_its_failure_shown_in_status(
    job, swarm: Swarm, tmp_path: Path, db, provider
) -> None:
    """`swarm job logs` reads the log a site kept beside the result, through the result's record
    that the chain's resultHash covers; a log changed afterwards is refused in one sentence; a
    failed job's last lines are in `swarm job status`."""
    output = tmp_path / "my-results"
    (job_id,) = _post(job, _spec_file(tmp_path, swarm, output=str(output)))["job_ids"]
    assert (f"Job {job_id} is posted and no provider has run it, so it has printed nothing"
            in one_line_error(job("logs", str(job_id), "--account", str(B))))
    result_dir = _result_dir(output / f"{job_namespace(swarm.chain.chain_id, swarm.market.address)}{job_id}")
    log = b"epoch 1 loss 0.5\nepoch 2 loss 0.3125\n"
    (result_dir / "log").write_bytes(log)
    record = result_record(result_hash(result_dir), log)  # as the site stores a lease's result
    (result_dir / "result.json").write_bytes(record)
    digest = record_hash(record)
    _complete(swarm, job_id, provider.address, bytes.fromhex(digest[2:]))
    _market_row(swarm, db, job_id, result_dir, digest)

    assert _json(job("result", str(job_id), "--json"))["verified"] is True, "the record stands for both"
    shown = job("logs", str(job_id), "--account", str(B))
    assert shown.code == 0 and shown.stdout == log.decode()
    assert "covered by its on-chain result hash" in shown.stderr
    read = _json(job("logs", str(job_id), "--account", str(B), "--json"))
    assert read == read | {"verified": True, "log": log.decode()}

    (result_dir / "log").write_bytes(log.replace(b"0.3125", b"0.0001"))
    text = one_line_error(job("logs", str(job_id), "--account", str(B)))
    assert f"The log of job {job_id} in {result_dir} is not the one its on-chain result hash covers" in text
    assert "do not trust it" in one_line_error(job("result", str(job_id)))

    (failed,) = _post(job, _spec_file(tmp_path, swarm, output=str(output)))["job_ids"]
    tail = 'Traceback (most recent call last):\n  File "main.py", line 3\nKeyError: "[\'x4\'] not in index"\n'
    _market_row(swarm, db, failed, result_dir, digest, state="failed")
    engine = open_engine(db["SWARM_DB_URL"])
    with session(engine) as s:
        row = s.get(MarketJob, (swarm.chain.chain_id, failed))
        assert row is not None
        row.log_tail, row.progress = tail, [{"at": 1.0, "metrics": {"step": 3, "loss": 0.25}}]
        s.add(row)
    engine.dispose()
    status = job("status", str(failed))
    assert status.code == 0 and "The last lines its lease printed" in status.stdout
    assert "KeyError: \"['x4'] not in index\"" in status.stdout and "swarm job logs" in status.stdout
    assert "step 3, loss 0.25" in status.stdout
    market = _json(job("status", str(failed), "--json"))["market"]
    assert market["log_tail"] == tail and market["latest_report"]["metrics"] == {"step": 3, "loss": 0.25}


# ── malformed specs never reach the chain ────────────────────────────────────

def _in_process(args: list[str], node: AnvilNode, home: Path, db: dict[str, str]):
    """`swarm …` inside this process: the same command, read from the same environment, without the start-
    up."""
    env = {
        "SWARM_HOME": str(home),
        "SWARM_RPC_URL": node.config.url,
        "SWARM_ANVIL_PORT": str(node.config.port),
    }
    return CliRunner().invoke(swarm_cli, args, env=env | db)


def _unknown_name(known: set[str]) -> st.SearchStrategy[str]:
    return st.text("abcdefghijklmnopqrstuvwxyz_", min_size=3, max_size=12).filter(
        lambda s: s[0] != "_" and s not in known)


TOP = {"kind", "model", "dataset", "resources", "max_price_per_unit", "max_units", "deadline",
       "min_provider_score", "priority", "replicas", "seed", "params"}
RESOURCES = {"workers", "gpus_per_worker", "gpu_model", "vram_gb_per_worker", "cpus_per_worker", "memory_gb"}
TRAIN_PARAMS = {"samples", "epochs", "batch_size", "lr", "precision", "max_failures", "model", "dataset"}


def _set(path: str, value: Any):
    """A corruption: `path` (dotted) set to `value`; the field the error must name is `path`."""
    def corrupt(spec: dict) -> str:
        *parents, leaf = path.split(".")
        node = spec
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
        return path
    return corrupt


def _drop(field: str):
    def corrupt(spec: dict) -> str:
        del spec[field]
        return field
    return corrupt


CORRUPTIONS = st.one_of(
    st.sampled_from(["bake", "Train", "", 3, None, ["train"]]).map(lambda v: _set("kind", v)),
    st.one_of(st.integers(), st.just(""), st.just(["mlp"]), st.just("resnet")).map(
        lambda v: _set("model", v)
    ),
    st.sampled_from(["", 7, ["x"]]).map(lambda v: _set("dataset", v)),
    st.one_of(st.integers(max_value=0), st.sampled_from(["2", 1.5, True, None])).map(
        lambda v: _set("resources.workers", v)
    ),
    st.integers(max_value=-1).map(lambda v: _set("resources.gpus_per_worker", v)),
    st.sampled_from(["H100", "Voodoo5", 3]).map(lambda v: _set("resources.gpu_model", v)),
    st.floats(max_value=0, allow_nan=False, allow_infinity=False).map(
        lambda v: _set("resources.cpus_per_worker", v)
    ),
    st.one_of(
        st.sampled_from(
            ["free", "-1", "0", "1e-30", "nan", "inf", "0.0000000000000000001", "1.5.0", True, None, [1]]
        ),
        st.integers(max_value=0),
    ).map(lambda v: _set("max_price_per_unit", v)),
    st.one_of(st.integers(max_value=0), st.sampled_from(["10", 2.5])).map(lambda v: _set("max_units", v)),
    st.one_of(
        st.sampled_from(
            ["yesterday", "-5m", "2020-01-01T00:00:00Z", "2026-12-01T12:00:00", "soon", True, 1.5e9, None]
        ),
        st.integers(min_value=0, max_value=1_600_000_000),
    ).map(lambda v: _set("deadline", v)),
    st.one_of(st.floats(min_value=1.01, max_value=1e6), st.floats(max_value=-0.01, min_value=-1e6)).map(
        lambda v: _set("min_provider_score", v)
    ),
    st.one_of(st.integers(min_value=11), st.integers(max_value=-1)).map(lambda v: _set("priority", v)),
    st.one_of(st.integers(min_value=4, max_value=10**6), st.integers(max_value=0)).map(
        lambda v: _set("replicas", v)
    ),
    st.integers(max_value=-1).map(lambda v: _set("seed", v)),
    st.sampled_from(["x", 3, ["epochs"]]).map(lambda v: _set("params", v)),
    st.sampled_from([[1], "big"]).map(lambda v: _set("resources", v)),
    _unknown_name(TOP).map(lambda name: _set(name, 1)),
    _unknown_name(RESOURCES).map(lambda name: _set(f"resources.{name}", 1)),
    _unknown_name(TRAIN_PARAMS).map(lambda name: _set(f"params.{name}", 1)),
    st.one_of(st.integers(max_value=0), st.just("five")).map(lambda v: _set("params.epochs", v)),
    st.sampled_from(["fast", -0.5, 0]).map(lambda v: _set("params.lr", v)),
    st.sampled_from(
        ["kind", "model", "dataset", "resources", "max_price_per_unit", "max_units", "deadline"]
    ).map(_drop),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(corrupt=CORRUPTIONS, as_json=st.booleans())
def test_malformed_specs_are_refused_naming_the_field_and_nothing_is_sent(
    swarm: Swarm, anvil_node: AnvilNode, swarm_home: Path, tmp_path: Path, db, corrupt, as_json: bool
) -> None:
    spec = copy.deepcopy(EXAMPLE) | {"deadline": "24h"}
    field = corrupt(spec)
    path = tmp_path / ("bad.json" if as_json else "bad.yaml")
    path.write_text(json.dumps(spec) if as_json else yaml.safe_dump(spec))
    marks = _marks(swarm)

    done = _in_process(["job", "post", str(path), "--account", str(B)], anvil_node, swarm_home, db)

    assert done.exit_code == 1 and isinstance(done.exception, SpecError), (done.output, done.exception)
    message = str(done.exception)
    assert done.exception.field == field and f"spec field {field} " in message, message
    assert "\n" not in message and message.endswith(".")
    assert _marks(swarm) == marks


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"resources": {"workers": -2}},
            "spec field resources.workers must be an integer of at least 1 (got -2).",
        ),
        ({"colour": "blue"}, "spec field colour is not allowed; known fields are kind, model"),
        (
            {"max_price_per_unit": "cheap"},
            "spec field max_price_per_unit must be a token amount greater than 0",
        ),
        ({"params": {"epochs": 5, "momentum": 0.9}}, "spec field params.momentum is not a train parameter"),
    ],
    ids=["negative-workers", "unknown-field", "bad-price", "unknown-param"],
)
def test_a_bad_spec_exits_1_with_one_line_and_sends_nothing(
    job, swarm: Swarm, tmp_path: Path, changes: dict, message: str
) -> None:
    marks = _marks(swarm)
    assert message in one_line_error(
        job("post", str(_spec_file(tmp_path, swarm, **changes)), "--account", str(B))
    )
    assert _marks(swarm) == marks


def test_a_missing_spec_file_is_one_line(job, tmp_path: Path) -> None:
    text = one_line_error(job("post", str(tmp_path / "nope.yaml"), "--account", str(B)))
    assert f"spec file {tmp_path / 'nope.yaml'} cannot be read" in text


# ── the same operations from Python ──────────────────────────────────────────

def test_the_python_api_posts_follows_and_cancels_a_job_in_a_few_lines(
    swarm: Swarm, swarm_home: Path, anvil_node: AnvilNode, db, tmp_path: Path
) -> None:
    from ledger.config import Settings
    from market.buyer import Buyer

    settings = Settings.from_env({"SWARM_HOME": str(swarm_home), "SWARM_RPC_URL": anvil_node.config.url})
    buyer = Buyer.open(account=B, settings=settings, db_url=db["SWARM_DB_URL"])
    before = swarm.balance_of(BUYER)
    posted = buyer.post(_spec_file(tmp_path, swarm))
    (job_id,) = posted.job_ids
    assert swarm.balance_of(BUYER) == before - ESCROW == before - posted.escrow_wei
    report = buyer.status(job_id)
    assert report.spec is not None
    assert (
        report.status == "posted" and report.spec_hash == posted.spec_hash and report.spec["kind"] == "train"
    )
    with pytest.raises(SwarmError, match=f"Job {job_id} has no result yet; it is posted"):
        buyer.result(job_id)

    refund = buyer.cancel(job_id)
    assert refund.refund_wei == ESCROW and swarm.balance_of(BUYER) == before
    assert buyer.wait(job_id, timeout_s=5).status is JobStatus.CANCELLED
    with pytest.raises(SwarmError, match="only a posted job"):
        buyer.cancel(job_id)
    reader = Buyer.open(settings=settings, db_url=db["SWARM_DB_URL"])  # no key: it reads, and refuses to sign
    assert reader.status(job_id).status == "cancelled"
    with pytest.raises(SwarmError, match="reads only"):
        reader.post(_spec_file(tmp_path, swarm, name="again.yaml"))


# ── a buyer's own program: post uploads and pins, result downloads and verifies ────────

def test_a_program_posted_from_local_files_is_pinned_in_the_buyers_s3_and_its_result_verified_from_there(
    job, swarm: Swarm, tmp_path: Path, db, provider, s3_store: S3Store, bucket: str, swarm_home: Path
) -> None:
    from compute import dataplane
    from market.spec import job_namespace

    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "main.py").write_text("print('hello')\n")
    (tmp_path / "table.csv").write_text("x,y\n1,2\n")
    spec: dict[str, Any] = {
        "kind": "ray",
        "code": "code",
        "inputs": {"table": "table.csv"},
        "output": s3_store.uri(f"{bucket}/runs"),
        "resources": {"workers": 1},
        "max_price_per_unit": "0.001",
        "max_units": 100,
        "deadline": _now(swarm) + 3_600,
        "params": {"entrypoint": "python main.py"},
    }
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(spec))
    # the buyer's keys to their own store, in the environment as the AWS tools read them
    keys = s3_store.environment

    posted = _json(job("post", str(tmp_path / "job.yaml"), "--account", str(B), "--json"))
    (job_id,) = posted["job_ids"]
    stored = load_stored_spec(swarm_home, bytes.fromhex(posted["spec_hash"][2:]))
    code, table = stored["code"], stored["inputs"]["table"]
    assert code["uri"].startswith(f"s3://{bucket}/runs/uploads/code/{code['sha256']}.tar")
    assert dataplane.digest(table["uri"]) == table["sha256"] == hashlib.sha256(b"x,y\n1,2\n").hexdigest()

    # What the provider's site does when the lease ends: the outputs and their manifest to the output.
    produced = _result_dir(tmp_path / "produced")
    digest = result_hash(produced)
    where = dataplane.join(
        spec["output"], job_namespace(swarm.chain.chain_id, swarm.market.address) + str(job_id)
    )
    dataplane.upload(produced / "outputs", dataplane.join(where, "outputs"))
    dataplane.upload(produced / "manifest.json", dataplane.join(where, "manifest.json"))
    _complete(swarm, job_id, provider.address, bytes.fromhex(digest[2:]), units=40)

    fetched = tmp_path / "fetched"
    done = _json(job("result", str(job_id), "--download", str(fetched), "--json"))
    assert done == done | {"verified": True, "result_hash": digest, "result_dir": str(fetched)}
    assert (fetched / "outputs" / "checkpoint" / "model.pt").read_bytes() == bytes(range(256)) * 8
    assert keys["AWS_SECRET_ACCESS_KEY"] not in json.dumps(done)
    # The program's own metrics.json, read from the verified outputs (no market record holds any).
    assert done["metrics"] == {"loss": 0.3125, "accuracy": 0.875}

    fs, path = dataplane.filesystem(dataplane.join(where, "outputs/metrics.json"))
    fs.open_output_stream(path).close()  # emptied in the store
    text = one_line_error(job("result", str(job_id), "--download", str(tmp_path / "again")))
    assert "does not match its on-chain result hash" in text and "outputs/metrics.json" in text
