"""Every committee member computes the same epoch: a report's chain inputs are the events up
to its `to_block`, so a member who indexes later, further, or into another database (SQLite
or PostgreSQL) recomputes the same root, slashes and emission, and signs it.

These tests need no Ray cluster: the oracle's own measurements (probe samples, challenge
results) are written to the ledger database as its collector writes them; everything else is
real transactions on the session's anvil.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine
from sqlmodel import Session, select

from anvil import RpcClient, dev_account
from compute.reference import cpu_reference_gflops
from ledger import jobs, stake
from ledger import rewards as chain_rewards
from ledger.client import Swarm
from ledger.db import open_ledger
from ledger.deploy import DEVNET_COMMITTEE_INDICES, devnet_committee_keys
from ledger.errors import SwarmError
from ledger.reports import deferred_hash
from ledger.specs import store_spec
from market.migrations import MARKET
from market.records import MarketJob
from oracle.config import load_config
from oracle.epoch import EpochRunner
from oracle.migrations import ORACLE
from oracle.records import CanaryRecord, ChallengeRecord, OracleEpoch, ProbeSample, ProviderScore
from tests.conftest import grant_role, one_line_error, provider_signature

ONE = 10**18
STAKE = 2_000 * ONE
PRICE = 10**15
A, B, C = (dev_account(i).address for i in (1, 2, 3))


@pytest.fixture
def open_runner(swarm: Swarm, swarm_home: Path) -> Iterator:
    """Makes an oracle runner on its own ledger database, as a committee member's process would."""
    engines: list[Engine] = []

    def make(url: str) -> EpochRunner:
        engine = open_ledger(url, MARKET, ORACLE)
        engines.append(engine)
        return EpochRunner(swarm, engine, swarm_home, load_config(), swarm.sender(dev_account(0).key),
                           devnet_committee_keys(), epoch_length_s=1.0)

    yield make
    for engine in engines:
        engine.dispose()


def register(swarm: Swarm, home: Path, provider: int, amount: int = STAKE, model: str = "cpu") -> None:
    sender = swarm.sender(dev_account(provider).key)
    stake.register(swarm, sender, store_spec(home, {"gpu_model": model, "gpus": 1, "vram_gb": 1}), 1)
    stake.stake(swarm, sender, amount)


def measure(engines: list[Engine], chain_id: int, providers: list[str], start: float,
            bad_checksum: tuple[str, ...] = (), swapped: tuple[str, ...] = ()) -> float:
    """Three answered probes per provider from `start` on, a challenge each at the CPU reference,
    and a round of canaries to a serving lease of each (mismatched for `swapped`), in every
    database given; returns the time after them, where the epoch may end."""
    reference = cpu_reference_gflops()
    for engine in engines:
        with Session(engine) as session:
            for k in range(3):
                session.add_all(ProbeSample(chain_id=chain_id, provider=p, at=start + k + 1, ok=True,
                                            latency_s=0.01) for p in providers)
            session.add_all(ChallengeRecord(
                chain_id=chain_id, provider=p, at=start + 3.5, declared_model="cpu", seed=1,
                proof_ok=p not in bad_checksum, measured_gflops=reference, reference_gflops=reference,
                ratio=1.0, device="cpu") for p in providers)
            session.add_all(CanaryRecord(
                chain_id=chain_id, provider=p, at=start + 3.6, lease="serve-1", task="predict", model="mlp",
                seed=2, requests=4, matched=0 if p in swapped else 4,
                outcome="mismatched" if p in swapped else "matched") for p in providers)
            session.commit()
    return start + 4.0


def run_job(swarm: Swarm, provider: str, result: bytes = b"\x55" * 32) -> int:
    """A job posted, assigned to `provider` and completed; returns its id."""
    buyer, matcher = swarm.sender(dev_account(5).key), swarm.sender(dev_account(0).key)
    job_id, _ = jobs.post_job(swarm, buyer, b"\x01" * 32, PRICE, 100, swarm.chain.timestamp() + 3_600)
    jobs.assign_job(swarm, matcher, job_id, provider, PRICE)
    jobs.complete_job(swarm, matcher, job_id, result, 10, provider_signature(swarm, job_id, result, 10))
    return job_id


def lose_job(swarm: Swarm, provider: str, to: str) -> None:
    """A job posted to `provider`, whose nodes vanished, and moved to `to`."""
    buyer, matcher = swarm.sender(dev_account(5).key), swarm.sender(dev_account(0).key)
    job_id, _ = jobs.post_job(swarm, buyer, b"\x02" * 32, PRICE, 100, swarm.chain.timestamp() + 3_600)
    jobs.assign_job(swarm, matcher, job_id, provider, PRICE)
    jobs.reassign_job(swarm, matcher, job_id, to, PRICE, "provider-lost")


def settle_after_window(swarm: Swarm, rpc: RpcClient, job_ids: list[int]) -> None:
    rpc.increase_time(swarm.market.functions.disputeWindow().call() + 1)
    rpc.mine()
    for job_id in job_ids:
        jobs.settle_job(swarm, swarm.sender(dev_account(0).key), job_id)


def aggregate(runner: EpochRunner, now: float) -> OracleEpoch:
    runner.indexer.sync()
    with Session(runner.engine) as session:
        record = runner.aggregate(session, now)
        assert record is not None
        session.refresh(record)
        session.expunge(record)
        return record


def score(session: Session, chain_id: int, epoch: int, provider: str) -> ProviderScore:
    """The provider's stored score of the epoch, which the epoch's aggregation must have written."""
    row = session.get(ProviderScore, (chain_id, epoch, provider))
    assert row is not None, f"no score of {provider} in epoch {epoch}"
    return row


def move_the_ledger_on(swarm: Swarm, swarm_home: Path, rpc: RpcClient) -> None:
    """Everything that may happen on chain between an epoch's end and a member's signature."""
    admin = swarm.sender(dev_account(0).key)
    register(swarm, swarm_home, 3)  # a new provider
    stake.stake(swarm, swarm.sender(dev_account(1).key), 500 * ONE)  # more stake
    grant_role(swarm, "StakingVault", "SLASHER_ROLE", admin.address)
    stake.slash(swarm, admin, B, 1_000, "fraud", b"\x07" * 32)
    done = [run_job(swarm, A), run_job(swarm, B)]
    lose_job(swarm, B, A)
    buyer, matcher = swarm.sender(dev_account(5).key), swarm.sender(dev_account(0).key)
    failed, _ = jobs.post_job(swarm, buyer, b"\x03" * 32, PRICE, 100, swarm.chain.timestamp() + 3_600)
    jobs.assign_job(swarm, matcher, failed, A, PRICE)
    jobs.fail_job(swarm, matcher, failed, "provider-lost")
    settle_after_window(swarm, rpc, done)
    stake.request_unstake(swarm, swarm.sender(dev_account(2).key), 100 * ONE)


def test_a_member_recomputes_and_signs_the_same_root_after_the_ledger_moved_on(
    swarm: Swarm, swarm_home: Path, rpc: RpcClient, open_runner, tmp_path: Path,
) -> None:
    register(swarm, swarm_home, 1)
    register(swarm, swarm_home, 2)
    settle_after_window(swarm, rpc, [run_job(swarm, A)])
    lose_job(swarm, B, A)  # abandonment: the report carries a slash
    runner = open_runner(f"sqlite:///{tmp_path / 'ledger.db'}")
    end = measure([runner.engine], swarm.chain.chain_id, [A, B], time.time())
    record = aggregate(runner, end)
    assert [s["provider"] for s in record.slashes] == [B] and record.emission_wei > 0

    move_the_ledger_on(swarm, swarm_home, rpc)
    assert runner.indexer.sync().cursor > record.to_block

    with Session(runner.engine) as session:
        stored = session.get(OracleEpoch, (swarm.chain.chain_id, record.epoch))
        runner.verify(session, stored)  # raises on a different root, slashes or emission
        assert all(runner.sign_as(session, stored, key) for key in devnet_committee_keys()[:runner.threshold])
    assert runner.run().state == "submitted"
    pending = chain_rewards.pending_report(swarm)
    assert pending is not None and pending.rewards_root.hex() == record.rewards_root[2:]


def test_members_on_different_cores_score_cpu_providers_alike_by_the_reference_recorded_with_each_challenge(
    swarm: Swarm, swarm_home: Path, open_runner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each member measures its own core, so their CPU references differ: here the member's is
    1.25× the aggregator's. A is just over the misrepresentation threshold by the reference its
    challenges were judged against (0.55×; 0.44× by the member's), B at 0.9×, and D never
    answers in time: the member still derives the aggregator's scores, weights, rewards and
    slashes, and signs."""
    d = dev_account(4).address
    for i in (1, 2, 3, 4):
        register(swarm, swarm_home, i)
    chain_id = swarm.chain.chain_id

    def core(gflops: float) -> None:
        measurement = tmp_path / f"cpu-reference-{gflops:g}.json"
        measurement.write_text(json.dumps({"gflops": gflops}))
        monkeypatch.setattr("compute.reference.CPU_MEASUREMENT", measurement)

    core(80.0)
    aggregator = open_runner(f"sqlite:///{tmp_path / 'aggregator.db'}")
    core(100.0)
    member = open_runner(f"sqlite:///{tmp_path / 'member.db'}")
    runners = (aggregator, member)
    start = time.time()
    end = measure([r.engine for r in runners], chain_id, [A, B, C, d], start)
    judged_by = 40.0  # the aggregator's reference when the challenges ran: its core's 80 × 0.5
    for runner in runners:  # the aggregator's records, which the member holds too
        with Session(runner.engine) as session:
            for row in session.exec(select(ChallengeRecord)).all():
                session.delete(row)
            session.add_all(
                ChallengeRecord(chain_id=chain_id, provider=p, at=start + 3.5 + k / 10, declared_model="cpu",
                                seed=k, proof_ok=True, measured_gflops=ratio * judged_by,
                                reference_gflops=judged_by, ratio=ratio, device="cpu")
                for p, ratio in ((A, 0.55), (B, 0.9), (C, 1.0)) for k in range(2))
            session.add_all(
                ChallengeRecord(chain_id=chain_id, provider=d, at=start + 3.5 + k / 10, declared_model="cpu",
                                seed=k, proof_ok=True, outcome="late", measured_gflops=0.0,
                                reference_gflops=0.0, ratio=0.0, device="cpu") for k in range(2))
            session.commit()

    core(80.0)
    record = aggregate(aggregator, end)
    core(100.0)  # the member's own core, as `swarm oracle sign` would find it
    member.indexer.sync()
    with Session(member.engine) as session:
        member.verify(session, OracleEpoch(**record.model_dump()))  # raises on any difference
    assert [(s["provider"], s["reason"]) for s in record.slashes] == [(d, "hardware misrepresentation")]
    assert record.slashes[0]["detail"].startswith("It measured 0.0 GFLOPS, 0.00× the reference of its")
    assert record.emission_wei > 0
    mine = aggregate(member, end)
    assert (mine.rewards_root, mine.slashes, mine.emission_wei, mine.cumulative_total) == \
        (record.rewards_root, record.slashes, record.emission_wei, record.cumulative_total)
    scored = []
    for runner in runners:
        with Session(runner.engine) as session:
            rows = [score(session, chain_id, record.epoch, p) for p in (A, B, C, d)]
            scored.append([(r.performance, r.weight, r.reward_wei, r.eligible, r.note) for r in rows])
    assert scored[0] == scored[1]
    assert [performance for performance, *_ in scored[0]] == [0.55, 0.9, 1.0, 0.0]


def test_a_report_names_the_providers_whose_slashes_it_defers_and_the_next_one_slashes_them(
    swarm: Swarm, swarm_home: Path, rpc: RpcClient, open_runner, tmp_path: Path,
) -> None:
    register(swarm, swarm_home, 1)
    register(swarm, swarm_home, 2)
    runner = open_runner(f"sqlite:///{tmp_path / 'ledger.db'}")
    chain_id = swarm.chain.chain_id
    end = measure([runner.engine], chain_id, [A, B], time.time())
    record = aggregate(runner, end)
    # B's slash had no room in this report (as beyond 200 slashes): it waits for the next one.
    waiting = {"provider": B, "bps": 100, "reason": "downtime", "row": "downtime",
               "evidence_hash": "0x" + "11" * 32, "jail_seconds": 0, "tombstone": False, "detail": "down",
               "decided_epoch": record.epoch, "deferred": True, "held": True}
    with Session(runner.engine) as session:
        stored = session.get(OracleEpoch, (chain_id, record.epoch))
        assert stored is not None
        stored.slashes = [*stored.slashes, waiting]
        session.add(stored)
        session.commit()
        report, slashes, deferred = runner.report(stored)
    assert deferred == [B] and B not in {s.provider for s in slashes}
    assert report.deferred_hash == deferred_hash([B])

    assert runner.run(now=end).state == "submitted"
    pending = chain_rewards.pending_report(swarm)
    assert pending is not None and pending.deferred_hash == deferred_hash([B])
    held = stake.provider_info(swarm, B).report_held_until
    assert held > swarm.chain.timestamp(), "B cannot withdraw before its slash lands"
    rpc.increase_time(swarm.distributor.functions.challengeWindow().call() + 1)
    rpc.mine()
    assert runner.run(now=end).state == "finalized"
    assert stake.provider_info(swarm, B).report_held_until == held, "held until the next report may arrive"

    end = measure([runner.engine], chain_id, [A, B], end)
    carried = [s for s in aggregate(runner, end).slashes if s["provider"] == B]
    assert [(s["bps"], s["deferred"], s["decided_epoch"]) for s in carried] == [(100, False, record.epoch)]


def test_members_with_sqlite_and_postgresql_syncing_at_different_times_compute_the_same_report(
    swarm: Swarm, swarm_home: Path, rpc: RpcClient, open_runner, postgres_server, tmp_path: Path,
) -> None:
    for provider in (1, 2, 4):  # 3 registers later, as the ledger moves on
        register(swarm, swarm_home, provider)
    settle_after_window(swarm, rpc, [run_job(swarm, A), run_job(swarm, B)])
    lose_job(swarm, A, B)
    first = open_runner(f"sqlite:///{tmp_path / 'ledger.db'}")
    second = open_runner(postgres_server.create_database())
    end = measure([first.engine, second.engine], swarm.chain.chain_id, [A, B, dev_account(4).address],
                  time.time(), swapped=(B,))
    record = aggregate(first, end)  # the first member indexes, aggregates and signs now
    assert record.emission_wei > 0
    assert {(s["provider"], s["row"]) for s in record.slashes} == {(A, "abandonment"), (B, "fraud")}

    move_the_ledger_on(swarm, swarm_home, rpc)
    second.indexer.sync()  # the second member indexes only now, past the epoch's end
    with Session(second.engine) as session:
        received = OracleEpoch(**record.model_dump())  # the report as the aggregator hands it round
        session.add(received)
        session.commit()
        second.verify(session, received)  # the same root, the same slashes, the same emission
        assert second.sign_as(session, received, devnet_committee_keys()[0])


def test_a_tombstoned_provider_is_not_slashed_again_nor_paid(
    swarm: Swarm, swarm_home: Path, rpc: RpcClient, open_runner, tmp_path: Path,
) -> None:
    register(swarm, swarm_home, 1)
    register(swarm, swarm_home, 2)
    runner = open_runner(f"sqlite:///{tmp_path / 'ledger.db'}")
    chain_id = swarm.chain.chain_id
    end = measure([runner.engine], chain_id, [A, B], time.time(), bad_checksum=(B,))
    assert runner.run(now=end).state == "submitted"
    rpc.increase_time(swarm.distributor.functions.challengeWindow().call() + 1)
    rpc.mine()
    assert runner.run(now=end).state == "finalized"
    assert stake.provider_info(swarm, B).tombstoned

    # B's nodes go on answering challenges wrongly; its tombstone already took what a slash would.
    end = measure([runner.engine], chain_id, [A, B], end, bad_checksum=(B,))
    record = aggregate(runner, end)
    assert record.epoch == 2 and record.slashes == []
    with Session(runner.engine) as session:
        b = score(session, chain_id, 2, B)
    assert b.reward_wei == 0 and not b.eligible and b.note.startswith("tombstoned")


def test_a_disputed_replica_group_is_counted_in_one_epoch_only(
    swarm: Swarm, swarm_home: Path, rpc: RpcClient, open_runner, tmp_path: Path,
) -> None:
    for i in (1, 2, 3):
        register(swarm, swarm_home, i)
    runner = open_runner(f"sqlite:///{tmp_path / 'ledger.db'}")
    chain_id, matcher = swarm.chain.chain_id, swarm.sender(dev_account(0).key)
    start = time.time()
    # A job run by three replicas; C's result disagrees with the other two.
    results = {A: b"\xaa" * 32, B: b"\xaa" * 32, C: b"\xcc" * 32}
    ids = {p: run_job(swarm, p, result) for p, result in results.items()}
    evidence = {str(job_id): {"provider": p, "result_hash": "0x" + results[p].hex()}
                for p, job_id in ids.items()}
    group = min(ids.values())
    with Session(runner.engine) as session:
        session.add_all(MarketJob(chain_id=chain_id, job_id=job_id, group_id=group, replicas=3,
                                  state="disputed", provider=p, evidence=evidence, updated_at=start + 1)
                        for p, job_id in ids.items())
        session.commit()
    for job_id in ids.values():
        jobs.dispute_job(swarm, matcher, job_id)
    end = measure([runner.engine], chain_id, [A, B, C], start)
    first = aggregate(runner, end)
    assert [(s["provider"], s["row"]) for s in first.slashes] == [(C, "fraud")]

    # The arbiter resolves the disputes in the next epoch; the market records it on the jobs.
    for p, job_id in ids.items():
        jobs.resolve_dispute(swarm, matcher, job_id, buyer_upheld=p == C)
    with Session(runner.engine) as session:
        for record in session.exec(select(MarketJob).where(MarketJob.chain_id == chain_id)):
            record.state, record.updated_at = "resolved", end + 1
            session.add(record)
        session.commit()
    end = measure([runner.engine], chain_id, [A, B, C], end)
    second = aggregate(runner, end)
    assert second.epoch == first.epoch + 1 and second.slashes == []


# ── `swarm oracle sign` indexes the epoch's blocks itself ───────────────────────

@pytest.fixture
def member_key(cli, swarm_home: Path) -> Iterator[dict[str, str]]:
    """A committee member's keystore in the session's home, removed afterwards."""
    keys_dir = swarm_home / "keys"
    before = set(keys_dir.iterdir()) if keys_dir.exists() else set()
    env = {"SWARM_KEY_PASSWORD": "pw"}
    member = dev_account(DEVNET_COMMITTEE_INDICES[0])
    imported = cli("keys", "import", "--name", "member", env=env, input=member.key.hex() + "\n")
    assert imported.code == 0, imported.stderr
    yield env
    for path in set(keys_dir.iterdir()) - before if keys_dir.exists() else ():
        path.unlink()


def hand_over(record: OracleEpoch, url: str, chain_id: int, providers: list[str], start: float) -> None:
    """A member's own ledger database: the report to sign and its own measurements, nothing indexed."""
    engine = open_ledger(url, MARKET, ORACLE)
    try:
        measure([engine], chain_id, providers, start)
        with Session(engine) as session:
            session.add(OracleEpoch(**record.model_dump()))
            session.commit()
    finally:
        engine.dispose()


def test_sign_indexes_the_members_ledger_up_to_the_epoch_before_verifying(
    cli, member_key: dict[str, str], swarm: Swarm, swarm_home: Path, rpc: RpcClient, open_runner,
    tmp_path: Path,
) -> None:
    register(swarm, swarm_home, 1)
    register(swarm, swarm_home, 2)
    aggregator = open_runner(f"sqlite:///{tmp_path / 'aggregator.db'}")
    start = time.time()
    record = aggregate(aggregator, measure([aggregator.engine], swarm.chain.chain_id, [A, B], start))
    move_the_ledger_on(swarm, swarm_home, rpc)
    url = f"sqlite:///{tmp_path / 'member.db'}"
    hand_over(record, url, swarm.chain.chain_id, [A, B], start)

    signed = cli("oracle", "sign", str(record.epoch), "--key", "member", "--json",
                 env=member_key | {"SWARM_DB_URL": url})
    assert signed.code == 0, signed.stderr
    assert json.loads(signed.stdout) == {"epoch": record.epoch, "signed": True, "signatures": 1,
                                         "threshold": 3}


def test_sign_refuses_an_epoch_the_chain_has_not_reached(
    cli, member_key: dict[str, str], swarm: Swarm, swarm_home: Path, open_runner, tmp_path: Path,
) -> None:
    register(swarm, swarm_home, 1)
    aggregator = open_runner(f"sqlite:///{tmp_path / 'aggregator.db'}")
    start = time.time()
    record = aggregate(aggregator, measure([aggregator.engine], swarm.chain.chain_id, [A], start))
    ahead = record.to_block + 50
    record.to_block = ahead  # a report from a node further along than this member's
    url = f"sqlite:///{tmp_path / 'member.db'}"
    hand_over(record, url, swarm.chain.chain_id, [A], start)

    text = one_line_error(cli("oracle", "sign", str(record.epoch), "--key", "member",
                              env=member_key | {"SWARM_DB_URL": url}))
    assert f"runs to block {ahead}" in text and "has reached" in text


def test_an_epoch_longer_than_half_the_max_report_lag_is_refused(swarm: Swarm, swarm_home: Path,
                                                                  tmp_path: Path) -> None:
    # Its report could reach the chain after a provider misbehaved, unstaked and withdrew: the
    # distributor's maxReportLag (within the unbonding period, with the challenge window) covers
    # an epoch, its aggregation and its signing only if the epoch takes at most half of it.
    lag = swarm.distributor.functions.maxReportLag().call()
    challenge = swarm.distributor.functions.challengeWindow().call()
    assert challenge + lag <= swarm.vault.functions.unbondingPeriod().call()
    engine = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}", MARKET, ORACLE)
    runner = EpochRunner(swarm, engine, swarm_home, load_config(), swarm.sender(dev_account(0).key),
                         devnet_committee_keys(), epoch_length_s=lag / 2 + 1)
    with Session(engine) as session, \
            pytest.raises(SwarmError, match=rf"too long for the distributor's maxReportLag of {lag} s"):
        runner.aggregate(session, time.time() + lag)
    with Session(engine) as session:
        assert session.exec(select(OracleEpoch)).all() == [], "nothing was aggregated"
    runner.epoch_length_s = lag / 2
    runner.check_epoch_length()
    engine.dispose()


def test_a_provider_challenged_while_busy_is_judged_by_its_best_challenge_of_two_epochs(
    swarm: Swarm, swarm_home: Path, open_runner, tmp_path: Path,
) -> None:
    """A challenge that lands beside a buyer's lease measures a shared machine: A's first
    challenge of the epoch shows its hardware, its last is slowed by a lease; C's only
    challenge this epoch is slowed, but it showed its hardware in the epoch before; D, new, has
    answered one slowed challenge, too few to judge; B is slow every time and is slashed."""
    d = dev_account(4).address
    for i in (1, 2, 3, 4):
        register(swarm, swarm_home, i)
    runner = open_runner(f"sqlite:///{tmp_path / 'ledger.db'}")
    chain_id = swarm.chain.chain_id
    start = time.time()
    end = measure([runner.engine], chain_id, [A, B, C, d], start)  # a challenge each at the reference, then:
    # × the reference, at these seconds from the epoch's start (it runs from `start` to `end`)
    figures = {
        A: ((3.5, 1.0), (3.6, 0.2)),
        B: ((-2.0, 0.3), (3.5, 0.3), (3.6, 0.2)),
        C: ((-2.0, 1.0), (3.5, 0.2)),
        d: ((3.5, 0.2),),
    }
    with Session(runner.engine) as session:
        for row in session.exec(select(ChallengeRecord).where(ChallengeRecord.chain_id == chain_id)).all():
            session.delete(row)
        for provider, taken in figures.items():
            session.add_all(
                ChallengeRecord(
                    chain_id=chain_id,
                    provider=provider,
                    at=start + at,
                    declared_model="cpu",
                    seed=k,
                    proof_ok=True,
                    measured_gflops=ratio * cpu_reference_gflops(),
                    reference_gflops=cpu_reference_gflops(),
                    ratio=ratio,
                    device="cpu",
                )
                for k, (at, ratio) in enumerate(taken)
            )
        session.commit()
    record = aggregate(runner, end)
    assert [(s["provider"], s["reason"]) for s in record.slashes] == [(B, "hardware misrepresentation")]
    with Session(runner.engine) as session:
        a, b, c, new = (score(session, chain_id, record.epoch, p) for p in (A, B, C, d))
    assert a.performance == pytest.approx(1.0) and a.eligible
    assert c.performance == pytest.approx(1.0) and c.eligible
    assert new.performance == pytest.approx(1.0) and new.eligible  # not measured yet
    assert b.performance == pytest.approx(0.3)


def test_a_gpu_is_judged_by_its_weaker_precision_and_naming_a_strangers_gpu_harms_no_one(
    swarm: Swarm, swarm_home: Path, open_runner, tmp_path: Path,
) -> None:
    """The epoch judges a GPU by the weaker of its fp32 and tensor-core ratios: A is at its
    reference in both, B fast in fp32 but slow in bf16 (an RTX 4090 declared as an H100). D's
    worker reports C's GPU UUID, an attempt to have C slashed for one card staked twice: a
    node's account of itself is its own word, so C keeps its score (and so does D, whose
    throughput the oracle timed)."""
    from compute.reference import reference_gflops

    d = dev_account(4).address
    for i in (1, 2, 3, 4):
        register(swarm, swarm_home, i, model="H100")
    runner = open_runner(f"sqlite:///{tmp_path / 'ledger.db'}")
    chain_id = swarm.chain.chain_id
    start = time.time()
    end = measure([runner.engine], chain_id, [A, B, C, d], start)
    ratios = {A: {"fp32": 1.0, "bf16": 1.0}, B: {"fp32": 1.23, "bf16": 0.17}, C: {"fp32": 1.0, "bf16": 1.0},
              d: {"fp32": 1.0, "bf16": 1.0}}
    uuids = {A: "GPU-aaaaaaaa", B: "GPU-bbbbbbbb", C: "GPU-cccccccc", d: "GPU-cccccccc"}
    with Session(runner.engine) as session:
        for row in session.exec(select(ChallengeRecord).where(ChallengeRecord.chain_id == chain_id)).all():
            session.delete(row)
        for provider, by_precision in ratios.items():
            for k in range(2):  # two challenges in each precision: enough to judge
                for precision, ratio in by_precision.items():
                    reference = reference_gflops("H100", precision)
                    session.add(ChallengeRecord(
                        chain_id=chain_id, provider=provider, at=start + 3.5 + k / 10, declared_model="H100",
                        seed=k, proof_ok=True, precision=precision, measured_gflops=ratio * reference,
                        reference_gflops=reference, ratio=ratio, device="cuda", gpu_uuid=uuids[provider]))
        session.commit()
    record = aggregate(runner, end)
    slashed = {s["provider"]: s["reason"] for s in record.slashes}
    assert slashed == {B: "hardware misrepresentation"}
    with Session(runner.engine) as session:
        scores = {p: score(session, chain_id, record.epoch, p) for p in (A, B, C, d)}
    assert scores[A].performance == pytest.approx(1.0) and scores[A].eligible
    assert scores[B].performance == pytest.approx(0.17)  # bf16's ratio, not fp32's 1.23 (capped at 1)
    assert scores[C].performance == pytest.approx(1.0) and scores[C].eligible
    assert scores[d].performance == pytest.approx(1.0)
