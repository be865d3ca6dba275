"""The market's leases (docs/architecture.md §5): an assigned job's lease is started on its
provider's site and followed on a thread of the service's pool (`market.sites.follow_lease`),
holding the provider's capacity until it ends; its outcome is handled here, on the loop's thread,
where all transactions are sent:
  - done: the record keeps the result and the provider's signature over (jobId, resultHash,
    units), to be completed with exactly those (`market.settle`);
  - the provider's site stopped answering, or lost the lease's node too often: the job is
    reassigned to another provider (the escrow stays; the oracle counts the abandonment, and
    `fault_slash_bps` can slash at once — once per job, and only before its deadline, as the
    market allows), or failed with a full refund when no other provider can take it;
  - the job failed by its own doing: charged the units its lease held; the job is otherwise
    at fault (a checkpoint it names is missing, say): failed, refunded, no one slashed; the
    deadline passed: failed and refunded.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field, replace

from compute.errors import InvalidJob, JobTimedOut, ProviderFault
from ledger import jobs as chain_jobs
from ledger.indexer.models import Job, Provider
from market.assign import offers_for
from market.matcher import match
from market.observe import jsonable, keep_progress
from market.offers import Capacity, job_needs, job_request
from market.records import FINAL_STATES, MarketJob, MarketState
from market.settle import charge, fail
from market.sites import ChargedFailure, LeaseFailed, LeaseResult, follow_lease
from market.spec import JobSpec, SpecError
from market.tick import Tick
from wire.client import SiteAddress

log = logging.getLogger(__name__)


@dataclass
class LeaseRun:
    """A lease under way, as its follower thread hands it on."""

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


def start(t: Tick) -> None:
    """Starts the lease of every assigned job that has none under way."""
    for job_id, record in t.records.items():
        job = t.jobs[job_id]
        if record.state != MarketState.ASSIGNED or job.status != "assigned" or job_id in t.market.runs:
            continue
        spec = t.market.spec(job.spec_hash)
        if isinstance(spec, SpecError):
            fail(t, record, "invalid-job", 0, str(spec))
            continue
        provider = job.provider or ""  # an assigned job names its provider
        row = t.session.get(Provider, (t.market.chain_id, provider))
        address = t.market.sites.address(provider, row.spec_hash) if row is not None else None
        if address is None:
            provider_lost(t, job, record,
                          f"provider {job.provider} registered no site to run job {job_id} on.")
            continue
        _start_one(t, job, record, spec, address)


def _start_one(t: Tick, job: Job, record: MarketJob, spec: JobSpec, address: SiteAddress) -> None:
    market = t.market
    body = market.spec_body(job.spec_hash)
    # A job built on another's result: the site checks that result itself, from its spec.
    prior = t.session.get(Job, (market.chain_id, spec.prior_job)) if spec.prior_job is not None else None
    run = LeaseRun(job.job_id, job.provider or "", job_needs(spec), Future())
    run.future = market.pool.submit(follow_lease, market.sites.client(address), job.job_id, body,
                                    market.spec_body(prior.spec_hash) if prior else None, market.halt,
                                    progress=run.reported)
    run.future.add_done_callback(lambda _: market.wake.set())
    market.runs[job.job_id] = run
    record.attempts += 1
    t.move(record, MarketState.RUNNING, f"lease {record.attempts} started on {job.provider}'s site")
    t.report.count("started")


def collect(t: Tick) -> None:
    """Handles every lease that ended since the last pass."""
    for job_id, run in list(t.market.runs.items()):
        if not run.future.done():
            continue
        del t.market.runs[job_id]
        record, job = t.records.get(job_id), t.jobs.get(job_id)
        fresh = run.take_reports()  # its last, handed on as it ended
        if fresh and record is not None:
            keep_progress(record, fresh)
        if record is None or job is None or record.state != MarketState.RUNNING \
                or job.provider != run.provider:
            continue  # the job moved on without this run (failed at its deadline, say)
        _collect_one(t, job, record, run)


def _collect_one(t: Tick, job: Job, record: MarketJob, run: LeaseRun) -> None:
    error = run.future.exception()
    if error is None:
        result: LeaseResult = run.future.result()
        record.result_hash, record.result_signature = result.result_hash, result.signature
        record.outputs_hash = result.outputs_hash
        record.units, record.unit = result.units, result.unit
        record.result_dir, record.metrics = result.result_dir, jsonable(result.metrics)
        record.error = None
        t.move(record, MarketState.RAN,
               f"ran for {result.units:g} {result.unit}; signed by {result.provider}")
        t.report.count("ran")
    elif isinstance(error, ProviderFault):
        provider_lost(t, job, record, str(error))
    elif isinstance(error, ChargedFailure):
        record.log_tail = error.log_tail
        charge(t, record, error)
    elif isinstance(error, InvalidJob):
        record.log_tail = error.log_tail if isinstance(error, LeaseFailed) else None
        fail(t, record, "invalid-job", 0, str(error))
    elif isinstance(error, JobTimedOut):
        fail(t, record, "deadline", 0, str(error))
    else:  # not the site's, the job's or the deadline's doing: the market's own, for its operator
        log.warning("job %s: following its lease failed: %s: %s", job.job_id, type(error).__name__, error)
        fail(t, record, "run-error", 0, f"{type(error).__name__}: {error}")


def provider_lost(t: Tick, job: Job, record: MarketJob, error: str) -> None:
    """Reassigns the job to the best other provider, or fails it with a full refund."""
    lost = job.provider
    record.lost_providers = sorted({*record.lost_providers, lost})
    record.error = error
    spec = t.market.spec(job.spec_hash)
    siblings = {r.provider for r in t.records.values() if r.group_id == record.group_id
                and r.job_id != record.job_id and r.provider and r.state not in FINAL_STATES}
    assignment = None
    if isinstance(spec, JobSpec) and t.market.swarm.chain.timestamp() < job.deadline:
        request = replace(job_request(job.job_id, spec, replicas=1),
                          max_price_per_unit=job.max_price_per_unit)
        result = match([request], offers_for(t, exclude={*record.lost_providers, *siblings}))
        assignment = result.assignments[0] if result.assignments else None
    slash_bps = _fault_slash(t, job)
    if assignment is None:
        fail(t, record, "provider-lost", slash_bps, f"{error} No other provider can take it, so the buyer is "
             "refunded.")
        return
    receipt = t.market.send(chain_jobs.reassign_job, job.job_id, assignment.provider,
                            assignment.price_per_unit, "provider-lost", slash_bps)
    if receipt is None:
        return
    record.provider, record.price_per_unit = assignment.provider, assignment.price_per_unit
    job.provider, job.price_per_unit = assignment.provider, assignment.price_per_unit
    t.move(record, MarketState.ASSIGNED, f"reassigned from {lost}: its nodes are gone", receipt,
           provider=assignment.provider)
    t.report.count("reassigned")


def _fault_slash(t: Tick, job: Job) -> int:
    """The slash for a lost provider: none once the job's one matcher slash is spent, or past its
    deadline."""
    market = t.market
    if market.config.fault_slash_bps == 0 or market.swarm.chain.timestamp() >= job.deadline:
        return 0  # the transaction lands after this block, so at the deadline it is already too late
    if chain_jobs.job_info(market.swarm, job.job_id).slashed:
        return 0
    return market.config.fault_slash_bps
