"""The market's first phase of each pass (docs/architecture.md §5): which jobs are open, the
market's record of each (a new one for a job first seen), each record brought in line with what
the chain has already done, and what each lease's program reported since the last pass.
"""

from __future__ import annotations

import logging
import math
import time
from typing import TYPE_CHECKING, Any

from sqlmodel import Session, col, select

from ledger.indexer.models import Job
from market.records import FINAL_STATES, MarketJob, MarketState, add_new
from market.spec import JobSpec
from market.tick import Tick

if TYPE_CHECKING:
    from market.service import MarketService

OPEN = ("posted", "assigned", "completed", "disputed")
# The chain's final statuses and the market state each becomes.
FINAL = {
    "settled": MarketState.SETTLED,
    "failed": MarketState.FAILED,
    "cancelled": MarketState.CANCELLED,
    "reclaimed": MarketState.RECLAIMED,
}
PROGRESS_KEPT = 500  # reports a market job keeps: the latest

log = logging.getLogger(__name__)


def open_jobs(market: MarketService, session: Session) -> dict[int, Job]:
    """Open jobs on chain, and jobs the service still holds a non-final record of, detached."""
    rows = session.exec(
        select(Job).where(col(Job.chain_id) == market.chain_id, col(Job.status).in_(OPEN))
    ).all()
    found = {j.job_id: j for j in rows}
    pending = session.exec(select(MarketJob.job_id).where(
        col(MarketJob.chain_id) == market.chain_id, col(MarketJob.state).not_in(FINAL_STATES))).all()
    missing = [i for i in pending if i not in found]
    if missing:
        for j in session.exec(
            select(Job).where(col(Job.chain_id) == market.chain_id, col(Job.job_id).in_(missing))
        ):
            found[j.job_id] = j
    # Detached, the rows are the pass's view of the chain (see `Tick`): the indexer's rows move
    # only with the chain's events, so a transaction the chain later loses (a devnet restarted
    # from older state) is then seen lost.
    for job in found.values():
        session.expunge(job)
    return dict(sorted(found.items()))


def load_records(market: MarketService, session: Session, jobs: dict[int, Job]) -> dict[int, MarketJob]:
    """The market's record of each job; a job seen for the first time gets one, queued."""
    ids = list(jobs)
    held = {r.job_id: r for r in session.exec(select(MarketJob).where(
        col(MarketJob.chain_id) == market.chain_id, col(MarketJob.job_id).in_(ids)))} if ids else {}
    for job_id, job in jobs.items():
        if job_id not in held:
            spec = market.spec(job.spec_hash)
            replicas = spec.replicas if isinstance(spec, JobSpec) else 1
            now = time.time()
            record = MarketJob(
                chain_id=market.chain_id,
                job_id=job_id,
                group_id=_group_of(market, session, job, replicas),
                replicas=replicas,
                state=MarketState.QUEUED,
                created_at=now,
                updated_at=now,
            )
            add_new(session, record, "seen posted on chain")
            log.info("job %s: %s: seen posted on chain", job_id, record.state)
            held[job_id] = record
    session.commit()
    return held


def _group_of(market: MarketService, session: Session, job: Job, replicas: int) -> int:
    """The first job of `job`'s replica group: same buyer and spec hash, in job-id order."""
    if replicas == 1:
        return job.job_id
    ids = session.exec(select(Job.job_id).where(
        Job.chain_id == market.chain_id, Job.buyer == job.buyer, Job.spec_hash == job.spec_hash,
    ).order_by(col(Job.job_id))).all()
    index = list(ids).index(job.job_id)
    return ids[index - index % replicas]


def observe(t: Tick) -> None:
    """Brings every record in line with what the chain has already done."""
    for job in t.jobs.values():
        record = t.records[job.job_id]
        status = job.status
        if status in FINAL:
            if record.state not in FINAL_STATES:
                t.move(record, FINAL[status], f"{status} on chain", provider=job.provider)
                t.report.count(FINAL[status].value)
        elif status == "completed" and record.state != MarketState.COMPLETED:
            record.result_hash = record.result_hash or job.result_hash
            t.move(record, MarketState.COMPLETED, "completed on chain", provider=job.provider)
        elif status == "disputed" and record.state != MarketState.DISPUTED:
            t.move(record, MarketState.DISPUTED, "disputed on chain", provider=job.provider)
        elif status == "assigned":
            _observe_assigned(t, job, record)
        elif status == "posted" and record.state != MarketState.QUEUED:
            record.provider, record.result_hash = None, None
            t.move(record, MarketState.QUEUED, "the chain shows it posted again; it is matched once more")


def _observe_assigned(t: Tick, job: Job, record: MarketJob) -> None:
    """A job the chain shows assigned: to another provider, a run that was lost, or assigned again."""
    run = t.market.runs.get(job.job_id)
    if record.provider != job.provider:
        record.provider, record.price_per_unit = job.provider, job.price_per_unit
        if record.state in (MarketState.RUNNING, MarketState.RAN) and run is None:
            record.result_hash = None
        t.move(record, MarketState.ASSIGNED, "assigned on chain", provider=job.provider)
    elif record.state == MarketState.RUNNING and run is None:
        t.move(record, MarketState.ASSIGNED,
               "its run was interrupted; it runs again from its last checkpoint", provider=job.provider)
    elif record.state == MarketState.QUEUED:
        t.move(record, MarketState.ASSIGNED, "assigned on chain", provider=job.provider)
    elif record.state in (MarketState.COMPLETED, MarketState.DISPUTED) or record.state in FINAL_STATES:
        # The chain no longer shows what followed (a devnet restarted from an older state).
        back = MarketState.RAN if record.result_hash and record.result_dir else MarketState.ASSIGNED
        t.move(record, back, f"the chain shows it assigned again; {back} once more", provider=job.provider)


def progress(t: Tick) -> None:
    """Records what each run's program reported since the last pass."""
    changed = False
    for job_id, run in t.market.runs.items():
        fresh = run.take_reports()
        record = t.records.get(job_id)
        if fresh and record is not None:
            keep_progress(record, fresh)
            t.session.add(record)
            changed = True
    if changed:
        t.session.commit()


def keep_progress(record: MarketJob, fresh: list[dict]) -> None:
    """Appends a run's fresh reports to its record's progress, keeping the latest PROGRESS_KEPT."""
    record.progress = jsonable([*(record.progress or []), *fresh][-PROGRESS_KEPT:])


def jsonable(value: Any) -> Any:
    """Metrics as plain JSON (NaN and infinities become None)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)
