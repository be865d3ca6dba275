"""One oracle epoch, exactly once (docs/architecture.md §9): aggregate → sign → submit → finalize.

Each step is written to the ledger database (`oracle_epochs`, `provider_scores`) before the
next one starts, and each run first reads the chain, so an oracle killed at any point picks
the epoch up where it stopped:

  aggregated  the scores, rewards, cumulative tree and slashes are stored; a restart signs
              these, never a recomputation over data that has grown since;
  signed      the committee's signatures are stored as each signer gives one; the
              aggregator submits once the threshold is reached;
  submitted   the report waits out the challenge window on chain; a restart that finds its
              digest pending on chain records the submission it had not recorded;
  finalized   rewards may be claimed and the slashes are applied; the reward tree and its
              proofs are in the ledger for `swarm provider claim`.

Each move is checked against `oracle.records.EPOCH_MOVES`: forward one step at a time (a signed
report the chain already shows finalized is recorded so), and back where the chain shows less
than the record (a devnet restarted from an older state): a report recorded submitted or
finalized is recorded submitted again while the chain holds it pending, or else signed, and is
submitted and finalized once more.

The distributor accepts a report only for the epoch after the last finalized one and only
one at a time, and its rewards are cumulative per provider, so a report sent twice is
refused and an epoch can never pay twice.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from eth_utils import keccak
from sqlalchemy import func
from sqlalchemy.engine import Engine
from sqlmodel import Session, col, delete, select

from compute.errors import ComputeError
from compute.reference import REFERENCE_GFLOPS, cpu_reference_gflops, normalize_model
from ledger import rewards as chain_rewards
from ledger.client import Swarm
from ledger.errors import SwarmError, TransactionFailed
from ledger.indexer import Indexer
from ledger.indexer.models import Cursor
from ledger.indexer.queries import providers_at
from ledger.indexer.rewards import store_reward_tree
from ledger.merkle import RewardTree
from ledger.reports import (
    EpochReport,
    Slash,
    deferred_hash,
    reason_bytes,
    sign_report,
    slashes_hash,
    sorted_deferred,
    sorted_slashes,
)
from ledger.tx import Sender
from oracle.collector import declared_model
from oracle.config import OracleConfig
from oracle.inputs import Blocks, job_record, replication_losers, staked_providers, units_completed, unstaking
from oracle.records import (
    EPOCH_MOVES,
    CanaryRecord,
    ChallengeRecord,
    EpochState,
    OracleEpoch,
    ProbeSample,
    ProviderScore,
    move_epoch,
)
from oracle.scoring import EpochInputs, score_epoch
from oracle.slashing import schedule_slashes

# How long a signed report may be submitted, counted from its last block's time: a report
# the committee signed and nobody sent in time is aggregated again, never sent stale.
REPORT_VALID_S = 3 * 86_400
MIN_CHALLENGES = 2  # challenges (this epoch's and the one before's) before speed is judged: see _inputs

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Judged:
    """Each provider's judged challenge, from the record that decides it: its throughput and the
    reference it was judged against, as fp32 GFLOPS, and its recorded ratio (NaN: not judged);
    and whether every proof of the epoch held."""

    gflops: np.ndarray
    reference_gflops: np.ndarray
    ratio: np.ndarray
    challenge_ok: np.ndarray


@dataclass
class EpochOutcome:
    epoch: int
    state: str
    did: list[str] = field(default_factory=list)  # the steps this call took

    def step(self, what: str) -> None:
        self.did.append(what)


class EpochRunner:
    """Builds, signs, submits and finalizes this deployment's epochs.

    `signers` are the committee keys this process holds (all of them on a devnet; one per
    operator elsewhere, with `sign_as` run by each); `sender` pays for submit and finalize.
    """

    def __init__(self, swarm: Swarm, engine: Engine, home: Path, config: OracleConfig, sender: Sender,
                 signers: Sequence[bytes] = (), epoch_length_s: float | None = None,
                 utilization: Callable[[], float] | None = None) -> None:
        # The collector judges CPU nodes' challenges against this machine's measured core, and the
        # epoch needs it to know that "cpu" has a reference: without the measurement, no oracle.
        cpu_reference_gflops()
        self.swarm = swarm
        self.engine = engine
        self.home = home
        self.config = config
        self.sender = sender
        self.signers = list(signers)
        self.chain_id = swarm.chain.chain_id
        self.epoch_length_s = epoch_length_s or config.epoch.length_s
        self.capacity = utilization
        self.indexer = Indexer(swarm, engine, confirmations=0)
        d = swarm.distributor.functions
        self.threshold = int(d.threshold().call())
        self.committee = [a.lower() for a in d.signers().call()]
        self.finalize_period = int(d.FINALIZE_PERIOD().call())  # after its window plus this, a report lapses

    # ── the whole step ───────────────────────────────────────────────────────
    def run(self, now: float | None = None, open_new: bool = True) -> EpochOutcome | None:
        """Moves the open epoch as far as it can go now, or, with none open, opens the next one
        when it is due. One epoch per call: the next opens on the call after this one's end.

        Returns what happened to the epoch it worked on, or None when there was nothing to do.
        """
        now = time.time() if now is None else now
        self.indexer.sync()
        with Session(self.engine) as session:
            self._reconcile(session)
            open_epoch = self._open(session)
            if open_epoch is not None:
                return self._advance(session, open_epoch, now)  # one report at a time
            record = self.aggregate(session, now) if open_new else None
            return None if record is None else self._advance(session, record, now)

    def _reconcile(self, session: Session) -> None:
        """Steps recorded past what the chain shows (a devnet restarted from an older state) are
        taken again: the stored, signed report is submitted and finalized once more."""
        chain_last = int(self.swarm.distributor.functions.lastFinalizedEpoch().call())
        pending = chain_rewards.pending_report(self.swarm)
        ahead = session.exec(select(OracleEpoch).where(
            OracleEpoch.chain_id == self.chain_id, OracleEpoch.epoch > chain_last,
            col(OracleEpoch.state).in_((EpochState.SUBMITTED, EpochState.FINALIZED)))).all()
        for record in ahead:
            if pending is not None and pending.epoch == record.epoch:
                if record.state != EpochState.SUBMITTED:
                    self._move(session, record, EpochState.SUBMITTED)
            else:
                self._move(session, record, EpochState.SIGNED)

    def _open(self, session: Session) -> OracleEpoch | None:
        return session.exec(select(OracleEpoch).where(
            OracleEpoch.chain_id == self.chain_id, OracleEpoch.state != EpochState.FINALIZED,
        ).order_by(col(OracleEpoch.epoch))).first()

    def _advance(self, session: Session, record: OracleEpoch, now: float) -> EpochOutcome:
        outcome = EpochOutcome(record.epoch, record.state)
        if record.state == EpochState.AGGREGATED:
            self._sign(session, record, outcome)
        if record.state == EpochState.SIGNED:
            self._submit(session, record, outcome)
        if record.state == EpochState.SUBMITTED:
            self._finalize(session, record, outcome)
        outcome.state = record.state
        return outcome

    # ── 1. aggregate ─────────────────────────────────────────────────────────
    def aggregate(self, session: Session, now: float) -> OracleEpoch | None:
        """Scores the epoch that ends now and stores its report; None if it is not due yet."""
        self.check_epoch_length()
        last = session.exec(select(OracleEpoch).where(OracleEpoch.chain_id == self.chain_id)
                            .order_by(col(OracleEpoch.epoch).desc())).first()
        chain_last = int(self.swarm.distributor.functions.lastFinalizedEpoch().call())
        epoch = max(chain_last, last.epoch if last else 0) + 1
        start = last.window_end if last else self._first_sample(session, now)
        if now - start < self.epoch_length_s * 0.999:
            return None
        from_block = last.to_block if last else self.swarm.deployment.block_number
        to_block = self.indexer.sync().cursor  # what the ledger holds: later events fall in the next epoch
        computed = self._compute(session, epoch, start, now, from_block, to_block)
        if computed is None:
            return None
        inputs, scores, rows, slashes, tree = computed
        record = OracleEpoch(
            chain_id=self.chain_id, epoch=epoch, state=EpochState.AGGREGATED, window_start=start,
            window_end=now, from_block=from_block, to_block=to_block, utilization=inputs.utilization,
            emission_wei=int(scores.emission_wei), rewards_root="0x" + tree.root.hex(), slashes=slashes,
            cumulative_total=sum(tree.values.values()),
            expires_at=self.swarm.chain.timestamp(to_block) + REPORT_VALID_S,
            signatures=[], created_at=time.time(), updated_at=time.time(),
        )
        EPOCH_MOVES.check(epoch, None, record.state)
        session.exec(delete(ProviderScore).where(col(ProviderScore.chain_id) == self.chain_id,
                                                 col(ProviderScore.epoch) == epoch))
        session.add(record)
        session.add_all(rows)
        session.commit()
        log.info("epoch %s: aggregated %s providers, %s wei to pay, %s slashes", epoch, len(inputs.providers),
                 int(scores.emission_wei), len(slashes))
        return record

    def check_epoch_length(self) -> None:
        """Refuses epochs so long that a provider could misbehave, unstake and withdraw before
        the epoch's report reaches the chain and holds its stake: an epoch, its aggregation and
        its signing must fit in the distributor's maxReportLag, which with the challenge window
        the contracts keep within the unbonding period. Half the lag is the epoch's share."""
        lag = int(self.swarm.distributor.functions.maxReportLag().call())
        if 2 * self.epoch_length_s > lag:
            raise SwarmError(
                f"An epoch of {self.epoch_length_s:g} s is too long for the distributor's maxReportLag of "
                f"{lag} s: its report could reach the chain after the stake it slashes has left. Use epochs "
                f"of at most {lag // 2} s."
            )

    def _compute(self, session: Session, epoch: int, start: float, end: float, from_block: int, to_block: int,
                 utilization: float | None = None):
        """The epoch's scores, score rows, slashes and cumulative tree; None with nothing to report."""
        inputs, previous, extra = self._inputs(session, start, end, from_block, to_block, utilization)
        if not inputs.providers and not previous:
            return None
        scores = score_epoch(inputs, self.config, epoch_length_s=self.epoch_length_s)
        cumulative = dict(previous)
        rows = []
        for i, provider in enumerate(inputs.providers):
            reward = int(scores.reward_wei[i])
            cumulative[provider] = cumulative.get(provider, 0) + reward
            rows.append(ProviderScore(
                chain_id=self.chain_id, epoch=epoch, provider=provider, samples=int(extra["samples"][i]),
                uptime=float(scores.uptime[i]), measured_gflops=_finite(inputs.measured_gflops[i]),
                performance=float(scores.performance[i]), reliability=float(scores.reliability[i]),
                loyalty=float(scores.loyalty[i]), epochs_staked=int(inputs.epochs_staked[i]),
                weight=float(scores.weight[i]), eligible=bool(scores.eligible[i]), reward_wei=reward,
                cumulative_wei=cumulative[provider], note=scores.reasons[i],
            ))
        for provider, amount in previous.items():  # providers gone since keep their leaf to claim with
            if provider not in inputs.providers:
                rows.append(ProviderScore(chain_id=self.chain_id, epoch=epoch, provider=provider,
                                          cumulative_wei=amount, note="not staked this epoch"))
        decided = [_slash_json(s, self._evidence(epoch, s), epoch) for s in scores.slashes]
        slashes = schedule_slashes(self._carried(session, epoch, to_block), decided)
        return inputs, scores, rows, slashes, RewardTree.build(cumulative)

    def _carried(self, session: Session, epoch: int, to_block: int) -> list[dict]:
        """The slashes the previous epoch's report had no room for, but none for a provider
        tombstoned since: a tombstone is the last word on a provider."""
        previous = session.get(OracleEpoch, (self.chain_id, epoch - 1))
        deferred = [] if previous is None else [s for s in previous.slashes if s.get("deferred")]
        if not deferred:
            return []
        tombstoned = {
            p.address.lower() for p in providers_at(session, self.chain_id, to_block) if p.tombstoned
        }
        return [s for s in deferred if s["provider"].lower() not in tombstoned]

    def verify(self, session: Session, record: OracleEpoch) -> None:
        """Recomputes a stored report from the ledger and refuses one this member would not sign.

        The recomputation reads the chain only up to the report's `to_block`, so it must be indexed
        that far; anything indexed since does not count.
        """
        cursor = session.get(Cursor, self.chain_id)
        if cursor is None or cursor.block_number < record.to_block:
            indexed = f"to block {cursor.block_number}" if cursor is not None else "not at all"
            raise SwarmError(
                f"Epoch {record.epoch} runs to block {record.to_block}, further than this member's ledger is "
                f"indexed ({indexed}); sync it (`swarm ledger sync`) and verify again."
            )
        computed = self._compute(
            session,
            record.epoch,
            record.window_start,
            record.window_end,
            record.from_block,
            record.to_block,
            record.utilization,
        )
        if computed is None:
            raise SwarmError(f"Epoch {record.epoch} has nothing to report in this ledger; not signing it.")
        _, scores, _, slashes, tree = computed
        root = "0x" + tree.root.hex()
        if (
            root != record.rewards_root
            or slashes != record.slashes
            or int(scores.emission_wei) != record.emission_wei
        ):
            raise SwarmError(
                f"Epoch {record.epoch}'s stored report (root {record.rewards_root}) differs from this "
                "member's own "
                f"computation from the ledger (root {root}); not signing it."
            )

    def _challenges(self, session: Session, index: dict[str, int], start: float, end: float) -> Judged:
        """Each provider's judged challenge and whether every proof of the epoch held.

        A challenge that lands beside a buyer's lease measures a shared machine, so in each
        precision a provider is judged by the best ratio it showed this epoch and, if it was
        challenged this epoch at all, the one before, once it has answered MIN_CHALLENGES of
        them: hardware that is really slower is slow every time (a late answer counts as 0).
        A GPU is challenged in fp32 and in its tensor-core precision, and is judged by the
        weaker of the two. The ratio is the one each record holds, against the reference the
        aggregator judged it by when it ran: every member that reads the records gets the same
        figures, whatever reference its own machine holds (a CPU's is measured per machine).
        A worker's account of its GPU that contradicts the spec is judged 0 at once. A UUID that
        two providers report is not: the report is the node's own, so a provider could name a
        stranger's GPU to have it slashed. Only this epoch's proofs count (a refuted one is
        proof at once), so one wrong answer is never punished twice."""
        n = len(index)
        now_best: dict[tuple[int, str], ChallengeRecord] = {}
        before_best: dict[tuple[int, str], ChallengeRecord] = {}
        answered: dict[tuple[int, str], int] = {}
        challenge_ok: np.ndarray = np.ones(n, dtype=bool)
        misidentified: np.ndarray = np.zeros(n, dtype=bool)
        for c in session.exec(select(ChallengeRecord).where(
                ChallengeRecord.chain_id == self.chain_id, ChallengeRecord.at > start - (end - start),
                col(ChallengeRecord.at) <= end).order_by(col(ChallengeRecord.at), col(ChallengeRecord.id))):
            if c.provider not in index:
                continue
            i = index[c.provider]
            key = (i, c.precision)
            answered[key] = answered.get(key, 0) + 1
            best = now_best if c.at > start else before_best
            if key not in best or c.ratio > best[key].ratio:  # ties: the earlier record
                best[key] = c
            if c.at > start:
                challenge_ok[i] &= c.proof_ok
                misidentified[i] |= not c.identity_ok
        precisions: dict[int, list[tuple[int, str]]] = {}
        for key in now_best:
            precisions.setdefault(key[0], []).append(key)
        gflops, reference, ratio = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
        for i, keys in precisions.items():
            if all(answered[key] >= MIN_CHALLENGES for key in keys):
                weakest = min((_better(now_best[key], before_best.get(key)) for key in keys),
                              key=lambda c: c.ratio)
                gflops[i], reference[i] = _as_fp32(weakest)
                ratio[i] = weakest.ratio
        gflops[misidentified] = ratio[misidentified] = 0.0
        return Judged(gflops, reference, ratio, challenge_ok)

    def _first_sample(self, session: Session, now: float) -> float:
        first = session.exec(
            select(func.min(ProbeSample.at)).where(ProbeSample.chain_id == self.chain_id)
        ).one()
        return float(first) - 1e-3 if first is not None else now  # the first sample belongs to it

    def _inputs(self, session: Session, start: float, end: float, from_block: int, to_block: int,
                utilization: float | None = None):
        """Everything the scoring needs, one array per provider: the chain's part as of `to_block`
        (oracle.inputs), the oracle's own measurements from the time window (start, end]."""
        chain = self.chain_id
        blocks = Blocks(from_block, to_block)
        staked = staked_providers(session, chain, blocks)
        providers = [p.address for p in staked]
        index = {p: i for i, p in enumerate(providers)}
        n = len(providers)

        samples = session.exec(select(ProbeSample.provider, ProbeSample.ok).where(
            ProbeSample.chain_id == chain, ProbeSample.at > start, ProbeSample.at <= end)).all()
        known = [(index[p], ok) for p, ok in samples if p in index]
        probe_provider = np.fromiter((k for k, _ in known), dtype=np.int32, count=len(known))
        probe_ok = np.fromiter((ok for _, ok in known), dtype=bool, count=len(known))

        judged = self._challenges(session, index, start, end)
        canary_mismatch: np.ndarray = np.zeros(n, dtype=bool)
        for provider in session.exec(select(CanaryRecord.provider).where(
                CanaryRecord.chain_id == chain, CanaryRecord.at > start, CanaryRecord.at <= end,
                CanaryRecord.outcome == "mismatched")):
            if provider in index:  # a serving lease's answers this epoch were not its model's
                canary_mismatch[index[provider]] = True

        jobs = job_record(session, chain, blocks)
        losers = set(replication_losers(session, chain, blocks))
        unstaked = unstaking(session, chain, blocks)

        previous_scores = {}
        last = session.exec(
            select(OracleEpoch)
            .where(OracleEpoch.chain_id == chain, OracleEpoch.window_end <= start)
            .order_by(col(OracleEpoch.epoch).desc())
        ).first()
        if last is not None:
            previous_scores = {s.provider: s for s in session.exec(select(ProviderScore).where(
                ProviderScore.chain_id == chain, ProviderScore.epoch == last.epoch))}
        epochs_staked = np.array([
            0 if p in unstaked else (previous_scores[p].epochs_staked + 1 if p in previous_scores else 0)
            for p in providers], dtype=np.int64)
        previous_perf = np.array([previous_scores[p].performance if p in previous_scores
                                  and previous_scores[p].samples else np.nan for p in providers])
        previous_cumulative = {p: s.cumulative_wei for p, s in previous_scores.items() if s.cumulative_wei}

        inputs = EpochInputs(
            providers=providers,
            stake_wei=[p.stake for p in staked],
            declared_model=[declared_model(self.home, p.spec_hash) for p in staked],
            probe_provider=probe_provider,
            probe_ok=probe_ok,
            measured_gflops=judged.gflops,
            challenge_ok=judged.challenge_ok,
            job_successes=np.array([jobs.successes[p] for p in providers], dtype=np.int64),
            job_failures=np.array([jobs.failures[p] for p in providers], dtype=np.int64),
            abandoned=np.array([jobs.abandoned[p] for p in providers], dtype=np.int64),
            replication_mismatch=np.array([p in losers for p in providers], dtype=bool),
            epochs_staked=epochs_staked,
            jailed=np.array([p.tombstoned or p.jailed_until != 0 for p in staked], dtype=bool),
            tombstoned=np.array([p.tombstoned for p in staked], dtype=bool),
            utilization=utilization
            if utilization is not None
            else self._utilization(session, start, end, blocks),
            previous_performance=previous_perf,
            recorded_ratio=judged.ratio,
            recorded_reference_gflops=judged.reference_gflops,
            canary_mismatch=canary_mismatch,
        )
        extra = {"samples": np.bincount(probe_provider, minlength=n) if n else np.zeros(0, dtype=np.int64)}
        return inputs, previous_cumulative, extra

    def _utilization(self, session: Session, start: float, end: float, blocks: Blocks) -> float:
        """Units the market completed in the epoch's blocks over the devices the cluster offered."""
        if self.capacity is None or end <= start:
            return 0.0
        devices = self.capacity()
        if devices <= 0:
            return 0.0
        return min(1.0, units_completed(session, self.chain_id, blocks) / (devices * (end - start)))

    def _evidence(self, epoch: int, decision) -> str:
        """The slash's evidence hash: keccak of its canonical JSON (kept in the epoch's record)."""
        body = {"epoch": epoch, "provider": decision.provider, "row": decision.row, "detail": decision.detail}
        return "0x" + keccak(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hex()

    # ── 2. sign ──────────────────────────────────────────────────────────────
    def report(self, record: OracleEpoch) -> tuple[EpochReport, list[Slash], list[str]]:
        """The report to sign, with the slashes it orders (sorted by provider) and the providers
        whose slashes it defers to the next epoch and holds meanwhile (sorted): both read from
        the stored record, so every member and every restart builds the same report."""
        slashes = sorted_slashes([_slash(s) for s in record.slashes if not s.get("deferred")])
        deferred = sorted_deferred(
            [s["provider"] for s in record.slashes if s.get("deferred") and s.get("held")]
        )
        report = EpochReport(record.epoch, bytes.fromhex(record.rewards_root[2:]), record.emission_wei,
                             record.cumulative_total, slashes_hash(slashes), deferred_hash(deferred),
                             record.expires_at)
        return report, slashes, deferred

    def sign_as(self, session: Session, record: OracleEpoch, key: bytes) -> bool:
        """One committee member signs the stored report; False if it had signed already."""
        report, _, _ = self.report(record)
        signer, signature = sign_report(report, key, self.chain_id, self.swarm.distributor.address)
        if signer.lower() not in self.committee:
            raise SwarmError(f"{signer} is not on the distributor's committee; it cannot sign epoch reports.")
        if any(s[0].lower() == signer.lower() for s in record.signatures):
            return False
        record.signatures = [*record.signatures, [signer, "0x" + signature.hex()]]
        record.updated_at = time.time()
        session.add(record)
        session.commit()
        return True

    def _sign(self, session: Session, record: OracleEpoch, outcome: EpochOutcome) -> None:
        for key in self.signers:
            if len(record.signatures) >= self.threshold:
                break
            if self.sign_as(session, record, key):
                outcome.step("signed")
        if len(record.signatures) >= self.threshold:
            self._move(session, record, EpochState.SIGNED)

    # ── 3. submit ────────────────────────────────────────────────────────────
    def _submit(self, session: Session, record: OracleEpoch, outcome: EpochOutcome) -> None:
        report, slashes, deferred = self.report(record)
        pending = chain_rewards.pending_report(self.swarm)
        if (
            pending is not None
            and pending.epoch == record.epoch
            and not pending.vetoed
            and pending.rewards_root == report.rewards_root
            and pending.slashes_hash == report.slashes_hash
            and pending.deferred_hash == report.deferred_hash
        ):
            self._move(session, record, EpochState.SUBMITTED)  # sent before a crash, not recorded then
            return
        if int(self.swarm.distributor.functions.lastFinalizedEpoch().call()) >= record.epoch:
            self._move(session, record, EpochState.FINALIZED)
            return
        if self.swarm.chain.timestamp() > record.expires_at:
            self._drop(session, record, "its signed report expired before it was submitted")
            outcome.step("expired")
            return
        ordered = sorted(record.signatures, key=lambda s: int(s[0], 16))[: self.threshold]
        signatures = [bytes.fromhex(s[1][2:]) for s in ordered]
        try:
            receipt = chain_rewards.submit_epoch(
                self.swarm, self.sender, report, slashes, signatures, deferred
            )
        except TransactionFailed as exc:
            log.warning("epoch %s: submit refused: %s", record.epoch, exc)
            return
        record.submit_tx = receipt.tx_hash
        self._move(session, record, EpochState.SUBMITTED)
        outcome.step("submitted")

    # ── 4. finalize ──────────────────────────────────────────────────────────
    def _finalize(self, session: Session, record: OracleEpoch, outcome: EpochOutcome) -> None:
        finalized = int(self.swarm.distributor.functions.lastFinalizedEpoch().call()) >= record.epoch
        if not finalized:
            pending = chain_rewards.pending_report(self.swarm)
            if pending is None or pending.epoch != record.epoch:
                return
            if pending.vetoed:
                self._drop(session, record, "vetoed or discarded on chain")
                outcome.step("vetoed")
                return
            now = self.swarm.chain.timestamp()
            if now < pending.finalizable_at:
                return
            if now > pending.finalizable_at + self.finalize_period:
                self._drop(session, record, "its report lapsed unfinalized")
                outcome.step("lapsed")
                return
            _, slashes, _ = self.report(record)
            try:
                receipt = chain_rewards.finalize_epoch(self.swarm, self.sender, slashes)
            except TransactionFailed as exc:
                log.warning("epoch %s: finalize refused: %s", record.epoch, exc)
                return
            record.finalize_tx = receipt.tx_hash
            outcome.step("finalized")
        cumulative = {s.provider: s.cumulative_wei for s in session.exec(select(ProviderScore).where(
            ProviderScore.chain_id == self.chain_id, ProviderScore.epoch == record.epoch))}
        store_reward_tree(session, self.chain_id, record.epoch, record.rewards_root, cumulative)
        self._move(session, record, EpochState.FINALIZED)
        self.indexer.sync()  # the ledger shows the finalized root, so claims find their proofs

    def _drop(self, session: Session, record: OracleEpoch, why: str) -> None:
        """The report will not settle (vetoed, discarded, expired or lapsed): drop it; the
        epoch is aggregated again next time, its deferred slashes with it."""
        log.warning("epoch %s: %s; it will be aggregated again", record.epoch, why)
        session.exec(delete(ProviderScore).where(col(ProviderScore.chain_id) == self.chain_id,
                                                 col(ProviderScore.epoch) == record.epoch))
        session.delete(record)
        session.commit()

    def _move(self, session: Session, record: OracleEpoch, state: EpochState) -> None:
        """Moves the record as `oracle.records.EPOCH_MOVES` allows, and logs it."""
        move_epoch(session, record, state)
        log.info("epoch %s: %s", record.epoch, state)


def _finite(value: float) -> float | None:
    return None if np.isnan(value) else float(value)


def _slash_json(decision, evidence: str, epoch: int) -> dict:
    return {"provider": decision.provider, "bps": int(decision.bps), "reason": decision.reason,
            "evidence_hash": evidence, "jail_seconds": int(decision.jail_seconds),
            "tombstone": bool(decision.tombstone), "row": decision.row, "detail": decision.detail,
            "decided_epoch": epoch}


def _slash(data: dict) -> Slash:
    return Slash(
        data["provider"],
        data["bps"],
        reason_bytes(data["reason"]),
        bytes.fromhex(data["evidence_hash"][2:]),
        data["jail_seconds"],
        data["tombstone"],
    )


def _better(now: ChallengeRecord, before: ChallengeRecord | None) -> ChallengeRecord:
    """This epoch's best challenge in a precision, or the epoch before's where that one did better."""
    return before if before is not None and before.ratio > now.ratio else now


def _as_fp32(c: ChallengeRecord) -> tuple[float, float]:
    """A challenge's throughput and the reference it was judged against, as fp32 GFLOPS of its
    declared model; NaN for the reference where it recorded none (late, refuted, a model
    without one), with its own figure. An fp32 challenge's are as recorded; a tensor-core
    precision's recorded ratio is turned into fp32 GFLOPS by the GPU model's fp32 reference,
    a datasheet constant that every member holds alike."""
    recorded = c.reference_gflops if c.reference_gflops > 0 else math.nan
    if c.precision == "fp32" or math.isnan(recorded):
        return c.measured_gflops, recorded
    try:
        fp32 = REFERENCE_GFLOPS[normalize_model(c.declared_model)]
    except (ComputeError, KeyError):  # judged in a tensor-core precision, so a GPU: not expected
        return c.measured_gflops, math.nan
    return c.ratio * fp32, fp32
