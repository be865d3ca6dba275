"""The oracle end to end: real probes and challenges through the providers' sites (one probe
per node), a real ledger database, reports signed by the devnet committee and settled on anvil.

Providers A (a site of two nodes), B and C (one node each) come from tests/sites.py. Every
node is a CPU of this machine, so an honest provider declares `cpu`; what the machine
cannot show — GPUs of different speeds — is written as challenge results for the
fast-versus-slow comparison, and says so.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from sqlmodel import Session, select

from anvil import RpcClient, dev_account
from ledger import rewards as chain_rewards
from ledger import stake
from ledger.client import Swarm
from ledger.db import open_ledger
from ledger.deploy import devnet_committee_keys
from ledger.errors import TransactionFailed
from ledger.indexer.rewards import reward_leaf
from ledger.specs import store_spec
from market.migrations import MARKET
from oracle.config import load_config
from oracle.epoch import MIN_CHALLENGES, EpochRunner
from oracle.migrations import ORACLE
from oracle.records import ChallengeRecord, OracleEpoch, ProbeSample, ProviderScore
from oracle.service import OracleService
from oracle.service import schedule as make_schedule
from tests.conftest import provider_signature
from tests.sites import PROVIDER_A, PROVIDER_B, PROVIDER_C, SiteNetwork

ONE = 10**18
STAKE = 2_000 * ONE


@pytest.fixture
def register(swarm: Swarm, swarm_home: Path, site_network: SiteNetwork):
    """Registers provider `index` with its site and the GPU model it declares, and stakes."""
    def register(index: int, model: str = "cpu") -> None:
        sender = swarm.sender(dev_account(index).key)
        spec = site_network.site_spec(sender.address, gpu_model=model, vram_gb=1)
        stake.register(swarm, sender, store_spec(swarm_home, spec), 1)
        stake.stake(swarm, sender, STAKE)
    return register


@pytest.fixture
def engine(tmp_path: Path):
    engine = open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}", MARKET, ORACLE)
    yield engine
    engine.dispose()


@pytest.fixture
def oracle(swarm: Swarm, swarm_home: Path, engine, site_network: SiteNetwork) -> Iterator[OracleService]:
    config = load_config()
    # A generous probe timeout: a probe's first worker on a busy 2-core machine may take seconds to start.
    schedule = replace(make_schedule(config, devnet=True, epoch_length_s=1.0), probe_timeout_s=8.0)
    service = OracleService(swarm, engine, swarm_home, config, swarm.sender(dev_account(0).key),
                            devnet_committee_keys(), schedule)
    yield service


def close_epoch(service: OracleService, rpc: RpcClient, probes: int = 3, challenge: bool = True,
                finalize: bool = True) -> OracleEpoch:
    """Probes, challenges, then aggregates, signs, submits and (past the window) finalizes one epoch."""
    for _ in range(probes):
        service.probe()
        time.sleep(0.2)
    if challenge:  # enough for this one epoch to judge each provider's speed
        for _ in range(MIN_CHALLENGES):
            service.challenge()
    time.sleep(1.0)  # the epoch is at least epoch_length_s long
    outcome = service.epoch()
    assert outcome is not None and outcome.state == "submitted", outcome
    if finalize:
        window = service.swarm.distributor.functions.challengeWindow().call()
        rpc.increase_time(window + 1)
        rpc.mine()
        outcome = service.epoch()
        assert outcome is not None and outcome.state == "finalized", outcome
    with Session(service.engine) as session:
        record = session.get(OracleEpoch, (service.swarm.chain.chain_id, outcome.epoch))
    assert record is not None
    return record


def scores(service: OracleService, epoch: int) -> dict[str, ProviderScore]:
    with Session(service.engine) as session:
        return {
            s.provider: s for s in session.exec(select(ProviderScore).where(ProviderScore.epoch == epoch))
        }


def test_an_epoch_pays_exactly_its_emission_and_one_proof_claims_several_epochs(
    register, swarm: Swarm, swarm_home: Path, oracle: OracleService, rpc: RpcClient,
) -> None:
    for i in (1, 2, 3):
        register(i)
    first = close_epoch(oracle, rpc)
    paid = scores(oracle, first.epoch)
    assert {p: s.uptime for p, s in paid.items()} == {PROVIDER_A: 1.0, PROVIDER_B: 1.0, PROVIDER_C: 1.0}
    assert sum(s.reward_wei for s in paid.values()) == first.emission_wei > 0
    assert swarm.distributor.functions.lastFinalizedEpoch().call() == first.epoch

    second = close_epoch(oracle, rpc)
    both = scores(oracle, second.epoch)
    assert sum(s.reward_wei for s in both.values()) == second.emission_wei
    for provider in (PROVIDER_A, PROVIDER_B):
        assert both[provider].cumulative_wei == paid[provider].reward_wei + both[provider].reward_wei

    # One claim, with the latest proof, pays both epochs.
    with Session(oracle.engine) as session:
        leaf = reward_leaf(session, swarm.chain.chain_id, PROVIDER_B)
    assert leaf is not None
    before = swarm.balance_of(PROVIDER_B)
    chain_rewards.claim(swarm, swarm.sender(dev_account(2).key), PROVIDER_B, leaf.cumulative,
                        list(leaf.proof))
    assert swarm.balance_of(PROVIDER_B) - before == both[PROVIDER_B].cumulative_wei


def test_a_faster_honest_provider_earns_more_than_a_slower_one(
    register, swarm: Swarm, swarm_home: Path, oracle: OracleService, rpc: RpcClient,
) -> None:
    register(1, model="T4")
    register(2, model="T4")
    oracle.probe()  # the epoch begins
    # This machine has no GPUs: the challenge results of a fast and a slow T4 stand in for them.
    with Session(oracle.engine) as session:
        for provider, gflops in ((PROVIDER_A, 4_000.0), (PROVIDER_B, 2_500.0)):
            for seed in range(MIN_CHALLENGES):
                session.add(
                    ChallengeRecord(
                        chain_id=swarm.chain.chain_id,
                        provider=provider,
                        at=time.time(),
                        declared_model="T4",
                        seed=seed,
                        proof_ok=True,
                        measured_gflops=gflops,
                        reference_gflops=4_050.0,
                        ratio=gflops / 4_050.0,
                        device="cuda",
                        gpus=1,
                    )
                )
        session.commit()
    record = close_epoch(oracle, rpc, challenge=False, finalize=False)
    paid = scores(oracle, record.epoch)
    assert paid[PROVIDER_A].reward_wei > paid[PROVIDER_B].reward_wei > 0
    assert record.slashes == []


def test_a_provider_down_for_most_of_an_epoch_is_slashed_jailed_and_can_unjail_after(
    register,
    swarm: Swarm,
    swarm_home: Path,
    oracle: OracleService,
    rpc: RpcClient,
    site_network: SiteNetwork,
) -> None:
    for i in (1, 2, 3):
        register(i)
    oracle.probe()
    site_network.kill(PROVIDER_C)
    try:
        record = close_epoch(oracle, rpc, probes=4, challenge=False)
    finally:
        site_network.restart(PROVIDER_C)
    c = scores(oracle, record.epoch)[PROVIDER_C]
    assert c.uptime == pytest.approx(1 / 5) and c.reward_wei == 0 and not c.eligible
    (slash,) = record.slashes
    assert slash["provider"] == PROVIDER_C and slash["row"] == "downtime" and slash["jail_seconds"] > 0
    info = stake.provider_info(swarm, PROVIDER_C)
    assert info.stake == STAKE - STAKE * slash["bps"] // 10_000
    assert info.jailed_until > swarm.chain.timestamp()

    sender = swarm.sender(dev_account(3).key)
    with pytest.raises(TransactionFailed, match=r"ProviderJailed|JailNotOver|jail"):
        stake.unjail(swarm, sender)
    rpc.increase_time(slash["jail_seconds"] + 1)
    rpc.mine()
    stake.unjail(swarm, sender)
    assert stake.provider_info(swarm, PROVIDER_C).jailed_until == 0


def test_a_misdeclared_gpu_is_caught_by_its_challenge(
    register, swarm: Swarm, swarm_home: Path, oracle: OracleService, rpc: RpcClient,
) -> None:
    register(1)  # honest: a CPU that says so
    register(2, model="H100")  # a CPU node claiming an H100
    record = close_epoch(oracle, rpc)
    (slash,) = record.slashes
    assert slash["provider"] == PROVIDER_B and slash["row"] == "misrepresentation"
    paid = scores(oracle, record.epoch)
    assert paid[PROVIDER_B].reward_wei == 0 and paid[PROVIDER_A].reward_wei == record.emission_wei
    with Session(oracle.engine) as session:
        challenges = session.exec(select(ChallengeRecord).where(ChallengeRecord.provider == PROVIDER_B)).all()
        honest = session.exec(select(ChallengeRecord).where(ChallengeRecord.provider == PROVIDER_A)).all()
    # The honest CPU's: the configured shape, its node's own account of its time, the rounds and
    # the commitment apart, with each root.
    assert honest and all(c.outcome == "passed" and c.challenge_stride == 1 for c in honest)
    assert all(c.node_rounds_s > 0 and 0 < c.node_commit_s < c.seconds for c in honest)
    # Readied in fp32 and in an H100's bf16, twice each, on a CPU, which the worker's own account
    # says: judged 0 at once, and no seed sent for it to grind at an H100's challenge.
    assert sorted(c.precision for c in challenges) == ["bf16"] * MIN_CHALLENGES + ["fp32"] * MIN_CHALLENGES
    assert all(c.outcome == "misidentified" and c.ratio == 0 and not c.identity_ok for c in challenges)
    assert all(c.challenge_size == 8192 and c.node_rounds_s == 0 for c in challenges)
    assert all(c.reason.startswith("the node ran the challenge without a GPU, where the spec declares H100")
               for c in challenges)
    assert stake.provider_info(swarm, PROVIDER_B).jailed_until > 0


def test_fraud_is_tombstoned(
    register, swarm: Swarm, swarm_home: Path, oracle: OracleService, rpc: RpcClient
) -> None:
    register(1)
    register(2)
    oracle.probe()  # the epoch begins
    # Provider B's node opened a row that is not the one it committed to (the collector's part
    # is tests/test_hostile_challenge.py: a hostile node through a real site).
    with Session(oracle.engine) as session:
        session.add(
            ChallengeRecord(
                chain_id=swarm.chain.chain_id,
                provider=PROVIDER_B,
                at=time.time(),
                declared_model="cpu",
                seed=7,
                proof_ok=False,
                outcome="refuted",
                measured_gflops=0.0,
                reference_gflops=0.0,
                ratio=0.0,
                device="cpu",
                gpus=0,
                reason="proof refuted: row 3 of checkpoint 2 is not the one committed to",
            )
        )
        session.commit()
    record = close_epoch(oracle, rpc, challenge=False)
    (slash,) = record.slashes
    assert slash["provider"] == PROVIDER_B and slash["row"] == "fraud" and slash["tombstone"]
    info = stake.provider_info(swarm, PROVIDER_B)
    assert info.tombstoned and info.stake == STAKE // 2


def test_a_report_with_too_few_or_duplicate_signatures_is_refused(
    register, swarm: Swarm, swarm_home: Path, oracle: OracleService, rpc: RpcClient,
) -> None:
    register(1)
    oracle.probe()
    time.sleep(1.0)
    runner = oracle.runner
    with Session(oracle.engine) as session:
        record = runner.aggregate(session, time.time())
        assert record is not None
        report, slashes, deferred = runner.report(record)
    signed = chain_rewards.sign(swarm, report, devnet_committee_keys())
    submitter = swarm.sender(dev_account(0).key)
    with pytest.raises(TransactionFailed):
        chain_rewards.submit_epoch(swarm, submitter, report, slashes, signed[:2], deferred)  # threshold is 3
    with pytest.raises(TransactionFailed):
        chain_rewards.submit_epoch(swarm, submitter, report, slashes, [signed[0], signed[0], signed[1]],
                                   deferred)
    assert chain_rewards.pending_report(swarm) is None
    chain_rewards.submit_epoch(swarm, submitter, report, slashes, signed[:3], deferred)
    pending = chain_rewards.pending_report(swarm)
    assert pending is not None and pending.epoch == record.epoch


# ── crash points: an oracle killed mid-epoch finishes it once on restart ─────────────

def _restarted(oracle: OracleService) -> EpochRunner:
    """A new runner on the same database and chain, as a restarted process would build."""
    old = oracle.runner
    return EpochRunner(old.swarm, old.engine, old.home, old.config, old.sender, devnet_committee_keys(),
                       epoch_length_s=1.0)


def _finalize(runner: EpochRunner, rpc: RpcClient) -> None:
    rpc.increase_time(runner.swarm.distributor.functions.challengeWindow().call() + 1)
    rpc.mine()
    outcome = runner.run()
    assert outcome is not None and outcome.state == "finalized", outcome


def test_killed_after_aggregating_the_restart_signs_the_stored_report(
    register, swarm: Swarm, swarm_home: Path, oracle: OracleService, rpc: RpcClient,
) -> None:
    register(1)
    oracle.probe()
    time.sleep(1.0)
    with Session(oracle.engine) as session:
        stored = oracle.runner.aggregate(session, time.time())
        assert stored is not None
        root = stored.rewards_root
    oracle.probe()  # more samples arrive before the restart
    runner = _restarted(oracle)
    outcome = runner.run()
    assert outcome is not None and outcome.epoch == stored.epoch and outcome.state == "submitted"
    pending = chain_rewards.pending_report(swarm)
    assert pending is not None and pending.rewards_root.hex() == root[2:], (
        "the stored report, not a new one"
    )
    _finalize(runner, rpc)
    assert swarm.distributor.functions.lastFinalizedEpoch().call() == stored.epoch


def test_killed_after_signing_the_restart_submits_once(
    register, swarm: Swarm, swarm_home: Path, oracle: OracleService, rpc: RpcClient,
) -> None:
    register(1)
    oracle.probe()
    time.sleep(1.0)
    with Session(oracle.engine) as session:
        record = oracle.runner.aggregate(session, time.time())
        assert record is not None
        for key in devnet_committee_keys()[:3]:
            oracle.runner.sign_as(session, record, key)
        record.state = "signed"
        session.add(record)
        session.commit()
        epoch = record.epoch
    runner = _restarted(oracle)
    outcome = runner.run()
    assert outcome is not None and outcome.state == "submitted"
    _finalize(runner, rpc)
    with Session(oracle.engine) as session:
        stored = session.get(OracleEpoch, (swarm.chain.chain_id, epoch))
        assert stored is not None and len(stored.signatures) == 3


def test_killed_after_submitting_before_recording_the_restart_pays_once(
    register, swarm: Swarm, swarm_home: Path, oracle: OracleService, rpc: RpcClient,
) -> None:
    register(1)
    oracle.probe()
    time.sleep(1.0)
    runner = oracle.runner
    with Session(oracle.engine) as session:
        record = runner.aggregate(session, time.time())
        assert record is not None
        for key in devnet_committee_keys()[:3]:
            runner.sign_as(session, record, key)
        report, slashes, deferred = runner.report(record)
        signatures = [bytes.fromhex(s[1][2:]) for s in sorted(record.signatures, key=lambda s: int(s[0], 16))]
        # The submission reaches the chain; the process dies before writing "submitted".
        chain_rewards.submit_epoch(swarm, runner.sender, report, slashes, signatures, deferred)
        assert record.state == "aggregated"
        epoch, emission = record.epoch, record.emission_wei
    restarted = _restarted(oracle)
    outcome = restarted.run()
    assert outcome is not None and outcome.state == "submitted"
    _finalize(restarted, rpc)
    assert swarm.distributor.functions.lastFinalizedEpoch().call() == epoch
    before = swarm.balance_of(PROVIDER_A)
    with Session(oracle.engine) as session:
        leaf = reward_leaf(session, swarm.chain.chain_id, PROVIDER_A)
        epochs = session.exec(select(OracleEpoch).where(OracleEpoch.chain_id == swarm.chain.chain_id)).all()
    assert leaf is not None
    assert [e.epoch for e in epochs] == [epoch], "no second report for the same epoch"
    chain_rewards.claim(swarm, swarm.sender(dev_account(1).key), PROVIDER_A, leaf.cumulative,
                        list(leaf.proof))
    assert swarm.balance_of(PROVIDER_A) - before == emission, "paid once"
    with Session(oracle.engine) as session:
        assert session.exec(select(ProbeSample)).first() is not None


def test_a_job_lost_by_its_provider_is_charged_as_abandonment(
    register, swarm: Swarm, swarm_home: Path, oracle: OracleService, rpc: RpcClient,
) -> None:
    from ledger import jobs

    register(1)
    register(2)
    oracle.probe()  # the epoch begins
    buyer, matcher = swarm.sender(dev_account(5).key), swarm.sender(dev_account(0).key)
    job_id, _ = jobs.post_job(swarm, buyer, b"\x01" * 32, 10**15, 100, swarm.chain.timestamp() + 3_600)
    jobs.assign_job(swarm, matcher, job_id, PROVIDER_A, 10**15)
    jobs.reassign_job(swarm, matcher, job_id, PROVIDER_B, 10**15, "provider-lost")  # A's nodes vanished
    record = close_epoch(oracle, rpc, challenge=False)
    (slash,) = record.slashes
    assert slash["provider"] == PROVIDER_A and slash["row"] == "abandonment" and slash["jail_seconds"] > 0
    assert stake.provider_info(swarm, PROVIDER_A).stake == STAKE - STAKE * slash["bps"] // 10_000
    assert (
        scores(oracle, record.epoch)[PROVIDER_A].reliability
        < scores(oracle, record.epoch)[PROVIDER_B].reliability
    )


def test_a_replica_outvoted_by_the_others_is_tombstoned_for_fraud(
    register, swarm: Swarm, swarm_home: Path, oracle: OracleService, rpc: RpcClient,
) -> None:
    from ledger import jobs
    from market.records import MarketJob

    for i in (1, 2, 3):
        register(i)
    oracle.probe()  # the epoch begins
    # A job run by three replicas, one of which disagrees: the market records the evidence and
    # disputes every replica on chain.
    buyer, matcher = swarm.sender(dev_account(5).key), swarm.sender(dev_account(0).key)
    results = {PROVIDER_A: b"\xaa" * 32, PROVIDER_B: b"\xaa" * 32, PROVIDER_C: b"\xcc" * 32}
    ids = {}
    for provider, result in results.items():
        deadline = swarm.chain.timestamp() + 3_600
        ids[provider], _ = jobs.post_job(swarm, buyer, b"\x01" * 32, 10**15, 100, deadline)
        jobs.assign_job(swarm, matcher, ids[provider], provider, 10**15)
        signature = provider_signature(swarm, ids[provider], result, 10)
        jobs.complete_job(swarm, matcher, ids[provider], result, 10, signature)
    evidence = {str(job_id): {"provider": p, "result_hash": "0x" + results[p].hex()}
                for p, job_id in ids.items()}
    with Session(oracle.engine) as session:
        for provider, job_id in ids.items():
            session.add(MarketJob(chain_id=swarm.chain.chain_id, job_id=job_id, group_id=min(ids.values()),
                                  replicas=3, state="disputed", provider=provider, evidence=evidence,
                                  updated_at=time.time()))
        session.commit()
    for job_id in ids.values():
        jobs.dispute_job(swarm, matcher, job_id)
    record = close_epoch(oracle, rpc, challenge=False)
    (slash,) = record.slashes
    assert slash["provider"] == PROVIDER_C and slash["row"] == "fraud" and slash["tombstone"]
    assert stake.provider_info(swarm, PROVIDER_C).tombstoned
