"""The market service (docs/architecture.md §5): takes posted jobs from the ledger, matches them to
providers, assigns them on-chain, runs them as leases on the providers' sites, and completes,
fails, reassigns, expires, disputes and settles them. It holds no Ray connection: a site is
reached over HTTPS with requests signed by the matcher's key (`market.sites`).

It is a reconciliation loop. Each `tick` syncs the ledger, then for every open job
compares what the chain says (the authority on escrow) with the service's own record
(`market.records.MarketJob`) and takes the one step that brings them together. Every
step is a transaction whose precondition the contract checks — `assignJob` only from
Posted, `completeJob` only from Assigned, `settleJob` only from Completed — and every
transition is written to `market_transitions` once its transaction is mined. A service
killed at any point therefore resumes from the chain's state: a job it had assigned is
seen assigned and is run again (from its last checkpoint), a job it had completed is seen
completed, and nothing is assigned, paid or refunded twice.

Each lease is followed on a thread of a pool; it holds its provider's capacity until it
ends, and its outcome is handled on the loop's thread, where all transactions are sent:
  - done: the record keeps the result and the provider's signature over (jobId, resultHash,
    units); the job is completed with exactly those, which the contract checks;
  - the provider's site stopped answering, or lost the lease's node too often: the job is
    reassigned to another provider (the escrow stays; the oracle counts the abandonment, and
    `fault_slash_bps` can slash at once — once per job, and only before its deadline, as the
    market allows), or failed with a full refund when no other provider can take it;
  - the job itself is at fault (a checkpoint it names is missing, say): failed, refunded,
    no one slashed; the deadline passed: failed and refunded.
A job still posted at its deadline is expired: its escrow goes back to the buyer. A
dispute the arbiter leaves undecided past its arbitration period is settled half and half.

A replicated job (`replicas: k`) is k on-chain jobs with the same buyer and spec hash,
grouped in job-id order and placed on k distinct providers. Its members are completed
together once each has a result; if their result hashes differ, the service records the
evidence (each provider's hash and outputs) and disputes every member, so the arbiter
decides and no one is paid for a result that another provider contradicts.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import requests
from sqlalchemy.engine import Engine
from sqlalchemy.exc import OperationalError
from sqlmodel import Session, col, select

from compute.errors import InvalidJob, JobTimedOut, ProviderFault
from ledger import jobs as chain_jobs
from ledger.client import Swarm
from ledger.errors import SwarmError, TransactionFailed
from ledger.indexer import Indexer
from ledger.indexer.models import Job, Provider
from ledger.specs import canonical, load_spec
from ledger.tx import Receipt, Sender
from market.matcher import match
from market.offers import Capacity, Newcomer, build_offers, job_needs, job_request
from market.records import FINAL_STATES, MarketJob, MarketTransition
from market.sites import ChargedFailure, LeaseFailed, LeaseResult, Sites, follow_lease
from market.spec import JobSpec, SpecError, borrowing_refused, job_namespace, validate_spec

OPEN = ("posted", "assigned", "completed", "disputed")
# The chain's final statuses and the market state each becomes.
FINAL = {"settled": "settled", "failed": "failed", "cancelled": "cancelled", "reclaimed": "reclaimed"}


@dataclass(frozen=True)
class MarketConfig:
    interval_s: float = 1.0  # between ticks when nothing wakes the loop earlier
    max_running: int = 16  # runs at once (threads; the cluster's capacity is the real limit)
    # An immediate slash for a provider whose nodes vanish mid-job. 0: the oracle's slashing
    # matrix (job abandonment) charges it at the epoch's end, from the chain's events.
    fault_slash_bps: int = 0
    default_price_per_unit: int = 10**15  # 0.001 SWARM per unit, for providers that declared no price
    newcomer: Newcomer = field(default_factory=Newcomer)

    def __post_init__(self) -> None:
        if self.interval_s <= 0:
            raise SwarmError(f"the market's interval must be positive, got {self.interval_s}.")
        if self.max_running < 1:
            raise SwarmError(f"--max-running must be at least 1, got {self.max_running}.")
        if not 0 <= self.fault_slash_bps <= 10_000:
            raise SwarmError(f"the fault slash must be from 0 to 10000 bps, got {self.fault_slash_bps}.")


@dataclass
class TickReport:
    """What one pass did; `unmatched` maps job ids to why no provider took them."""

    counts: dict[str, int] = field(default_factory=dict)
    unmatched: dict[int, str] = field(default_factory=dict)
    running: int = 0
    unpriced: int = 0  # staked providers offered this pass at the market's default price

    def count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1


@dataclass
class _Run:
    job_id: int
    provider: str
    needs: Capacity
    future: Future
    reports: list[dict] = field(default_factory=list)  # handed on by its follower, not yet recorded
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reported(self, fresh: list[dict]) -> None:
        with self.lock:
            self.reports.extend(fresh)

    def take_reports(self) -> list[dict]:
        with self.lock:
            taken, self.reports = self.reports, []
        return taken


PROGRESS_KEPT = 500  # reports a market job keeps: the latest


class MarketService:
    """One market service for one deployment; `sender` must hold MATCHER_ROLE."""

    def __init__(
        self,
        swarm: Swarm,
        sender: Sender,
        engine: Engine,
        home: Path,
        config: MarketConfig = MarketConfig(),
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.swarm = swarm
        self.sender = sender
        self.engine = engine
        self.home = home
        self.config = config
        self.log = log or (lambda line: None)
        self.chain_id = swarm.chain.chain_id
        self.namespace = job_namespace(self.chain_id, swarm.market.address)
        self.indexer = Indexer(swarm, engine, confirmations=0)  # the market acts on the chain's head
        self._pool = ThreadPoolExecutor(max_workers=config.max_running, thread_name_prefix="swarm-lease")
        self.sites = Sites(swarm, sender, home)
        self._halt = threading.Event()  # tells the lease followers the service is closing
        self._runs: dict[int, _Run] = {}
        self._specs: dict[str, JobSpec | SpecError] = {}
        self._arbitration: int | None = None  # JobMarket.ARBITRATION_PERIOD, read once
        self.wake = threading.Event()  # set when a run ends, so the loop handles it at once
        role = swarm.market.functions.MATCHER_ROLE().call()
        if not swarm.market.functions.hasRole(role, sender.address).call():
            raise SwarmError(
                f"{sender.address} does not hold the market's MATCHER_ROLE; run the service with the key "
                "that holds it (granted at deployment or through the timelock; on a devnet, dev account 0)."
            )

    # ── the loop ─────────────────────────────────────────────────────────────
    def run(
        self,
        stop: threading.Event,
        once: bool = False,
        on_tick: Callable[[TickReport], None] | None = None,
    ) -> TickReport:
        """Ticks until `stop` is set; with `once`, until the jobs this pass took have run and completed."""
        while True:
            try:
                report = self.tick()
            except (SwarmError, OSError, requests.RequestException, OperationalError) as exc:
                # The chain or the database stopped answering: the next pass starts over from them.
                self.log(f"pass failed, retrying: {type(exc).__name__}: {exc}")
                report = TickReport()
                if stop.wait(self.config.interval_s):
                    return report
                continue
            if on_tick is not None:
                on_tick(report)
            if (once and not self._runs and not self.wake.is_set()) or stop.is_set():
                self.indexer.sync()  # the ledger shows this pass's own transactions
                return report
            self.wake.wait(self.config.interval_s)
            self.wake.clear()

    def close(self, wait: bool = False) -> None:
        self._halt.set()
        self._pool.shutdown(wait=wait, cancel_futures=True)
        self.sites.close()

    def tick(self) -> TickReport:
        """One pass over every open job; see the module's docstring."""
        report = TickReport()
        self.indexer.sync()
        now = self.swarm.chain.timestamp()
        with Session(self.engine) as session:
            jobs = self._open_jobs(session)
            records = self._records(session, jobs)
            for job in jobs.values():
                self._observe(session, job, records[job.job_id], report)
            # Results are acted on in the tick after the one that records them.
            ready = {job_id for job_id, r in records.items() if r.state == "ran"}
            self._progress(session, records)
            self._collect(session, jobs, records, report)
            self._expire(session, jobs, records, now, report)
            self._match(session, jobs, records, now, report)
            self._start(session, jobs, records, now, report)
            self._complete(session, jobs, records, ready, report)
            self._settle(session, jobs, records, now, report)
        report.running = len(self._runs)
        if report.counts.get("ran"):
            self.wake.set()  # complete them on the next tick, at once
        return report

    # ── reading ──────────────────────────────────────────────────────────────
    def _open_jobs(self, session: Session) -> dict[int, Job]:
        """Open jobs on chain, and jobs the service still holds a non-final record of."""
        rows = session.exec(
            select(Job).where(col(Job.chain_id) == self.chain_id, col(Job.status).in_(OPEN))
        ).all()
        found = {j.job_id: j for j in rows}
        pending = session.exec(select(MarketJob.job_id).where(
            col(MarketJob.chain_id) == self.chain_id, col(MarketJob.state).not_in(FINAL_STATES))).all()
        missing = [i for i in pending if i not in found]
        if missing:
            for j in session.exec(
                select(Job).where(col(Job.chain_id) == self.chain_id, col(Job.job_id).in_(missing))
            ):
                found[j.job_id] = j
        # The tick's view of the chain: what the service sends in it is noted there (a completion,
        # say) but never written to the indexer's rows, which only the chain's events move. A
        # transaction the chain later loses (a devnet restarted from older state) is then seen lost.
        for job in found.values():
            session.expunge(job)
        return dict(sorted(found.items()))

    def _records(self, session: Session, jobs: dict[int, Job]) -> dict[int, MarketJob]:
        ids = list(jobs)
        held = {r.job_id: r for r in session.exec(select(MarketJob).where(
            col(MarketJob.chain_id) == self.chain_id, col(MarketJob.job_id).in_(ids)))} if ids else {}
        for job_id, job in jobs.items():
            if job_id not in held:
                spec = self.spec(job.spec_hash)
                replicas = spec.replicas if isinstance(spec, JobSpec) else 1
                now = time.time()
                record = MarketJob(
                    chain_id=self.chain_id,
                    job_id=job_id,
                    group_id=self._group_of(session, job, replicas),
                    replicas=replicas,
                    state="queued",
                    created_at=now,
                    updated_at=now,
                )
                session.add(record)
                self._log_transition(session, record, None, "queued", "seen posted on chain")
                held[job_id] = record
        session.commit()
        return held

    def _group_of(self, session: Session, job: Job, replicas: int) -> int:
        """The first job of `job`'s replica group: same buyer and spec hash, in job-id order."""
        if replicas == 1:
            return job.job_id
        ids = session.exec(select(Job.job_id).where(
            Job.chain_id == self.chain_id, Job.buyer == job.buyer, Job.spec_hash == job.spec_hash,
        ).order_by(col(Job.job_id))).all()
        index = list(ids).index(job.job_id)
        return ids[index - index % replicas]

    def spec(self, spec_hash: str) -> JobSpec | SpecError:
        """The buyer's spec for a hash, validated as it was when posted (cached)."""
        cached = self._specs.get(spec_hash)
        if cached is None:
            try:
                data = load_spec(self.home, bytes.fromhex(spec_hash.removeprefix("0x")))
                cached = validate_spec(data, now=float(data.get("deadline", 1)) - 1)
            except SpecError as exc:
                cached = exc
            except (SwarmError, ValueError, TypeError, AttributeError):
                cached = SpecError(
                    f"the job spec {spec_hash} is not in {self.home / 'specs'} or is not valid; "
                    "the buyer must post it with `swarm job post`."
                )
            self._specs[spec_hash] = cached
        return cached

    # ── observing the chain ──────────────────────────────────────────────────
    def _observe(self, session: Session, job: Job, record: MarketJob, report: TickReport) -> None:
        """Brings the record in line with what the chain has already done."""
        status = job.status
        if status in FINAL:
            if record.state not in FINAL_STATES:
                self._move(session, record, FINAL[status], f"{status} on chain", provider=job.provider)
                report.count(FINAL[status])
            return
        if status == "completed" and record.state != "completed":
            record.result_hash = record.result_hash or job.result_hash
            self._move(session, record, "completed", "completed on chain", provider=job.provider)
        elif status == "disputed" and record.state != "disputed":
            self._move(session, record, "disputed", "disputed on chain", provider=job.provider)
        elif status == "assigned":
            run = self._runs.get(job.job_id)
            if record.provider != job.provider:
                record.provider, record.price_per_unit = job.provider, job.price_per_unit
                if record.state in ("running", "ran") and run is None:
                    record.result_hash = None
                self._move(session, record, "assigned", "assigned on chain", provider=job.provider)
            elif record.state == "running" and run is None:
                self._move(
                    session,
                    record,
                    "assigned",
                    "its run was interrupted; it runs again from its last checkpoint",
                    provider=job.provider,
                )
            elif record.state == "queued":
                self._move(session, record, "assigned", "assigned on chain", provider=job.provider)
            elif record.state in ("completed", "disputed") or record.state in FINAL_STATES:
                # The chain no longer shows what followed (a devnet restarted from an older state).
                back = "ran" if record.result_hash and record.result_dir else "assigned"
                self._move(session, record, back, f"the chain shows it assigned again; {back} once more",
                           provider=job.provider)
        elif status == "posted" and record.state != "queued":
            record.provider, record.result_hash = None, None
            self._move(session, record, "queued", "the chain shows it posted again; it is matched once more")

    # ── runs under way, runs that ended ──────────────────────────────────────
    def _progress(self, session: Session, records: dict[int, MarketJob]) -> None:
        """Records what each run's program reported since the last pass."""
        changed = False
        for job_id, run in self._runs.items():
            fresh = run.take_reports()
            record = records.get(job_id)
            if fresh and record is not None:
                record.progress = _jsonable([*(record.progress or []), *fresh][-PROGRESS_KEPT:])
                session.add(record)
                changed = True
        if changed:
            session.commit()

    def _collect(self, session: Session, jobs: dict[int, Job], records: dict[int, MarketJob],
                 report: TickReport) -> None:
        for job_id, run in list(self._runs.items()):
            if not run.future.done():
                continue
            del self._runs[job_id]
            record, job = records.get(job_id), jobs.get(job_id)
            fresh = run.take_reports()  # its last, handed on as it ended
            if fresh and record is not None:
                record.progress = _jsonable([*(record.progress or []), *fresh][-PROGRESS_KEPT:])
            if record is None or job is None or record.state != "running" or job.provider != run.provider:
                continue  # the job moved on without this run (failed at its deadline, say)
            error = run.future.exception()
            if error is None:
                result: LeaseResult = run.future.result()
                record.result_hash, record.result_signature = result.result_hash, result.signature
                record.outputs_hash = result.outputs_hash
                record.units, record.unit = result.units, result.unit
                record.result_dir, record.metrics = result.result_dir, _jsonable(result.metrics)
                record.error = None
                self._move(session, record, "ran", f"ran for {result.units:g} {result.unit}; signed by "
                                                   f"{result.provider}")
                report.count("ran")
            elif isinstance(error, ProviderFault):
                self._provider_lost(session, jobs, records, job, record, str(error), report)
            elif isinstance(error, ChargedFailure):
                record.log_tail = error.log_tail
                self._charge(session, jobs, record, error, report)
            elif isinstance(error, InvalidJob):
                record.log_tail = error.log_tail if isinstance(error, LeaseFailed) else None
                self._fail(session, record, "invalid-job", 0, str(error), report)
            elif isinstance(error, JobTimedOut):
                self._fail(session, record, "deadline", 0, str(error), report)
            else:
                self._fail(session, record, "run-error", 0, f"{type(error).__name__}: {error}", report)

    def _provider_lost(self, session: Session, jobs: dict[int, Job], records: dict[int, MarketJob], job: Job,
                       record: MarketJob, error: str, report: TickReport) -> None:
        """Reassigns the job to the best other provider, or fails it with a full refund."""
        lost = job.provider
        record.lost_providers = sorted({*record.lost_providers, lost})
        record.error = error
        spec = self.spec(job.spec_hash)
        siblings = {r.provider for r in records.values() if r.group_id == record.group_id
                    and r.job_id != record.job_id and r.provider and r.state not in FINAL_STATES}
        assignment = None
        if isinstance(spec, JobSpec) and self.swarm.chain.timestamp() < job.deadline:
            request = replace(
                job_request(job.job_id, spec, replicas=1), max_price_per_unit=job.max_price_per_unit
            )
            result = match(
                [request], self._offers(session, records, exclude={*record.lost_providers, *siblings})
            )
            assignment = result.assignments[0] if result.assignments else None
        slash_bps = self._fault_slash(job)
        if assignment is not None:
            receipt = self._send(chain_jobs.reassign_job, job.job_id, assignment.provider,
                                 assignment.price_per_unit, "provider-lost", slash_bps)
            if receipt is None:
                return
            record.provider, record.price_per_unit = assignment.provider, assignment.price_per_unit
            job.provider, job.price_per_unit = assignment.provider, assignment.price_per_unit
            self._move(session, record, "assigned", f"reassigned from {lost}: its nodes are gone", receipt,
                       provider=assignment.provider)
            report.count("reassigned")
        else:
            self._fail(session, record, "provider-lost", slash_bps,
                       f"{error} No other provider can take it, so the buyer is refunded.", report)

    def _fault_slash(self, job: Job) -> int:
        """The slash for a lost provider: none once the job's one matcher slash is spent, or past its
        deadline."""
        if self.config.fault_slash_bps == 0 or self.swarm.chain.timestamp() >= job.deadline:
            return 0  # the transaction lands after this block, so at the deadline it is already too late
        if chain_jobs.job_info(self.swarm, job.job_id).slashed:
            return 0
        return self.config.fault_slash_bps

    def _charge(self, session: Session, jobs: dict[int, Job], record: MarketJob, failure: ChargedFailure,
                report: TickReport) -> None:
        """A job that failed by its own fault is charged the units its lease held, as its provider
        signed them; the rest of the escrow goes back to the buyer when it settles."""
        signature = bytes.fromhex(failure.signature.removeprefix("0x"))
        receipt = self._send(chain_jobs.charge_job, record.job_id, "job-failed", failure.units, signature)
        if receipt is None:
            return
        record.error, record.result_hash = str(failure), None
        record.units, record.unit = failure.units, failure.unit
        jobs[record.job_id].status = "completed"
        self._move(session, record, "completed",
                   f"job-failed: {failure} Charged {failure.units} {failure.unit} its lease held.", receipt)
        report.count("charged")

    def _fail(self, session: Session, record: MarketJob, reason: str, slash_bps: int, error: str,
              report: TickReport) -> None:
        receipt = self._send(chain_jobs.fail_job, record.job_id, reason, slash_bps)
        if receipt is None:
            return
        record.error = error
        self._move(session, record, "failed", f"{reason}: {error}", receipt)
        report.count("failed")

    # ── expiry ───────────────────────────────────────────────────────────────
    def _expire(self, session: Session, jobs: dict[int, Job], records: dict[int, MarketJob], now: int,
                report: TickReport) -> None:
        for job_id, job in jobs.items():
            if now <= job.deadline or records[job_id].state in FINAL_STATES:
                continue
            record = records[job_id]
            if job.status == "posted":
                receipt = self._send(chain_jobs.reclaim_expired, job_id)
                if receipt is not None:
                    self._move(
                        session,
                        record,
                        "expired",
                        "no provider took it by its deadline; the buyer is refunded",
                        receipt,
                    )
                    report.count("expired")
            elif job.status == "assigned":
                self._fail(
                    session, record, "deadline", 0, f"job {job_id} did not finish by its deadline.", report
                )
            elif (
                job.status == "disputed"
                and job.dispute_end
                and now > job.dispute_end + self._arbitration_period()
            ):
                receipt = self._send(chain_jobs.reclaim_expired, job_id)
                if receipt is not None:
                    self._move(session, record, "settled", "the arbiter did not rule in time; the payment is "
                               "split half and half", receipt)
                    report.count("settled")

    def _arbitration_period(self) -> int:
        if self._arbitration is None:
            self._arbitration = int(self.swarm.read("JobMarket", "ARBITRATION_PERIOD"))
        return self._arbitration

    # ── matching ─────────────────────────────────────────────────────────────
    def _match(self, session: Session, jobs: dict[int, Job], records: dict[int, MarketJob], now: int,
               report: TickReport) -> None:
        groups: dict[int, list[int]] = {}
        for job_id, record in records.items():
            if record.state == "queued" and jobs[job_id].status == "posted" and now <= jobs[job_id].deadline:
                groups.setdefault(record.group_id, []).append(job_id)
        requests = []
        for group_id, members in groups.items():
            job = jobs[members[0]]
            spec = self.spec(job.spec_hash)
            if isinstance(spec, SpecError):
                self._explain(session, records, members, str(spec), report)
                continue
            if (why := self._borrowing_refused(session, job, spec)) is not None:
                self._explain(session, records, members, f"The job cannot run: {why}; cancel it for a full "
                                                          "refund.", report)
                continue
            if len(members) < records[members[0]].replicas:
                continue  # the rest of the group is not posted (or not yet seen)
            request = job_request(group_id, spec, replicas=len(members))
            requests.append(replace(request, max_price_per_unit=min(j.max_price_per_unit for j in
                                                                     (jobs[m] for m in members))))
        if not requests:
            session.commit()  # the explanations of specs that cannot be read
            return
        offers = self._offers(session, records)
        report.unpriced = sum(1 for o in offers if o.stake_ok and not o.priced)
        result = match(requests, offers)
        by_group: dict[int, list] = {}
        for a in result.assignments:
            by_group.setdefault(a.job_id, []).append(a)
        for group_id, assignments in by_group.items():
            for job_id, a in zip(sorted(groups[group_id]), assignments):
                receipt = self._send(chain_jobs.assign_job, job_id, a.provider, a.price_per_unit)
                if receipt is None:
                    continue
                record = records[job_id]
                record.provider, record.price_per_unit, record.explanation = (
                    a.provider,
                    a.price_per_unit,
                    None,
                )
                jobs[job_id].status, jobs[job_id].provider = "assigned", a.provider
                self._move(
                    session,
                    record,
                    "assigned",
                    f"matched at {a.price_per_unit} wei per unit",
                    receipt,
                    provider=a.provider,
                )
                report.count("assigned")
        for group_id, explanation in result.unmatched.items():
            self._explain(session, records, groups[group_id], explanation.text, report)
        session.commit()  # the explanations, in one write

    def _borrowing_refused(self, session: Session, job: Job, spec: JobSpec) -> str | None:
        """Why the job may not build on the result it names: another buyer's, not published."""
        if spec.prior_job is None:
            return None
        prior = session.get(Job, (job.chain_id, spec.prior_job))
        return borrowing_refused(spec, job.buyer, prior.buyer if prior else None,
                                 self.spec(prior.spec_hash) if prior else None)

    def _explain(self, session: Session, records: dict[int, MarketJob], members: list[int], text: str,
                 report: TickReport) -> None:
        for job_id in members:
            report.unmatched[job_id] = text
            record = records[job_id]
            if record.explanation != text:
                record.explanation = text
                record.updated_at = time.time()
                session.add(record)

    def _offers(
        self, session: Session, records: dict[int, MarketJob], exclude: AbstractSet[str] = frozenset()
    ):
        busy: dict[str, Capacity] = {}
        for run in self._runs.values():
            busy[run.provider] = busy.get(run.provider, Capacity()) + run.needs
        for record in records.values():  # assigned, not yet started: hold their capacity too
            if record.state == "assigned" and record.job_id not in self._runs and record.provider:
                spec = self.spec(self._spec_hash(session, record.job_id))
                if isinstance(spec, JobSpec):
                    busy[record.provider] = busy.get(record.provider, Capacity()) + job_needs(spec)
        min_stake = int(self.swarm.vault.functions.minStakePerGpu().call())
        providers = session.exec(select(Provider).where(Provider.chain_id == self.chain_id)).all()
        capacity = self.sites.capacities((p.address, p.spec_hash) for p in providers
                                         if p.address not in exclude and p.stake > 0)
        floor = int(self.swarm.market.functions.minPricePerUnit().call())
        return build_offers(session, self.chain_id, self.home, min_stake, capacity, busy,
                            self.config.default_price_per_unit, self.config.newcomer, exclude, floor)

    def _spec_body(self, spec_hash: str) -> bytes:
        """A spec as posted: the bytes whose keccak is the spec hash on chain."""
        return canonical(load_spec(self.home, bytes.fromhex(spec_hash.removeprefix("0x"))))

    def _spec_hash(self, session: Session, job_id: int) -> str:
        job = session.get(Job, (self.chain_id, job_id))
        assert job is not None  # a job the market records is indexed
        return job.spec_hash

    # ── running ──────────────────────────────────────────────────────────────
    def _start(self, session: Session, jobs: dict[int, Job], records: dict[int, MarketJob], now: int,
               report: TickReport) -> None:
        for job_id, record in records.items():
            job = jobs[job_id]
            if record.state != "assigned" or job.status != "assigned" or job_id in self._runs:
                continue
            spec = self.spec(job.spec_hash)
            if isinstance(spec, SpecError):
                self._fail(session, record, "invalid-job", 0, str(spec), report)
                continue
            provider = job.provider or ""  # an assigned job names its provider
            row = session.get(Provider, (self.chain_id, provider))
            address = self.sites.address(provider, row.spec_hash) if row is not None else None
            if address is None:
                self._provider_lost(
                    session,
                    jobs,
                    records,
                    job,
                    record,
                    f"provider {job.provider} registered no site to run job {job_id} on.",
                    report,
                )
                continue
            body = self._spec_body(job.spec_hash)
            # A job built on another's result: the site checks that result itself, from its spec.
            prior = session.get(Job, (self.chain_id, spec.prior_job)) if spec.prior_job is not None else None
            run = _Run(job_id, provider, job_needs(spec), Future())
            run.future = self._pool.submit(follow_lease, self.sites.client(address), job_id, body,
                                           self._spec_body(prior.spec_hash) if prior else None, self._halt,
                                           progress=run.reported)
            run.future.add_done_callback(lambda _: self.wake.set())
            self._runs[job_id] = run
            record.attempts += 1
            self._move(
                session, record, "running", f"lease {record.attempts} started on {job.provider}'s site"
            )
            report.count("started")

    # ── completing, disputing, settling ──────────────────────────────────────
    def _complete(
        self,
        session: Session,
        jobs: dict[int, Job],
        records: dict[int, MarketJob],
        ready: set[int],
        report: TickReport,
    ) -> None:
        groups: dict[int, list[MarketJob]] = {}
        for record in records.values():
            groups.setdefault(record.group_id, []).append(record)
        for members in groups.values():
            ran = [r for r in members if r.state == "ran" and jobs[r.job_id].status == "assigned"]
            if any(r.job_id not in ready for r in ran):
                continue
            waiting = [r for r in members if r.state in ("queued", "assigned", "running")]
            if not ran or waiting:
                continue  # replicas complete together, once every one has a result
            # Replicas agree on their outputs; each result hash covers its own lease's log too.
            hashes = {r.outputs_hash or r.result_hash for r in ran}
            if len(hashes) > 1:
                evidence = {str(r.job_id): {"provider": r.provider, "result_hash": r.result_hash,
                                            "outputs_hash": r.outputs_hash, "result_dir": r.result_dir,
                                            "units": r.units} for r in ran}
                for r in ran:
                    r.evidence = evidence
                    session.add(r)
                session.commit()  # recorded before any completion, so a restart still disputes
            for r in ran:
                units = int(r.units)  # exactly what the provider signed
                signature = bytes.fromhex((r.result_signature or "0x").removeprefix("0x"))
                receipt = self._send(
                    chain_jobs.complete_job,
                    r.job_id,
                    bytes.fromhex((r.result_hash or "0x")[2:]),
                    units,
                    signature,
                )
                if receipt is None:
                    continue
                jobs[r.job_id].status = "completed"
                self._move(session, r, "completed", f"completed with {units} units", receipt)
                report.count("completed")

    def _settle(self, session: Session, jobs: dict[int, Job], records: dict[int, MarketJob], now: int,
                report: TickReport) -> None:
        for job_id, record in records.items():
            job = jobs[job_id]
            if record.state != "completed" or job.status != "completed":
                continue
            if record.evidence and (now < job.dispute_end or job.dispute_end == 0):
                receipt = self._send(chain_jobs.dispute_job, job_id)
                if receipt is not None:
                    hashes = ", ".join(
                        f"{e['provider']}: {e['result_hash']}" for e in record.evidence.values()
                    )
                    self._move(session, record, "disputed", f"replicas disagree ({hashes})", receipt)
                    report.count("disputed")
                continue
            if job.dispute_end and now >= job.dispute_end:
                receipt = self._send(chain_jobs.settle_job, job_id)
                if receipt is not None:
                    self._move(session, record, "settled", "paid out after the dispute window", receipt)
                    report.count("settled")

    # ── plumbing ─────────────────────────────────────────────────────────────
    def _send(self, call: Callable[..., Receipt], *args: Any) -> Receipt | None:
        """Sends one transaction; a refusal (the chain moved on) is logged and read back next tick."""
        try:
            return call(self.swarm, self.sender, *args)
        except TransactionFailed as exc:
            self.log(f"job {args[0]}: {call.__name__} refused: {exc}")
            return None

    def _move(
        self,
        session: Session,
        record: MarketJob,
        state: str,
        detail: str,
        receipt: Receipt | None = None,
        provider: str | None = None,
    ) -> None:
        before = record.state
        record.state = state
        record.updated_at = time.time()
        session.add(record)
        self._log_transition(session, record, before, state, detail, receipt, provider or record.provider)
        session.commit()
        self.log(f"job {record.job_id}: {before} → {state}: {detail}")

    def _log_transition(
        self,
        session: Session,
        record: MarketJob,
        before: str | None,
        after: str,
        detail: str,
        receipt: Receipt | None = None,
        provider: str | None = None,
    ) -> None:
        session.add(MarketTransition(
            chain_id=self.chain_id, job_id=record.job_id, at=time.time(), from_state=before, to_state=after,
            provider=provider, detail=detail, tx_hash=receipt.tx_hash if receipt else None,
        ))


def _jsonable(value: Any) -> Any:
    """Metrics as plain JSON (NaN and infinities become None)."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)
