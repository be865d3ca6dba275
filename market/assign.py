"""Which provider takes each queued job (docs/architecture.md §5): the glue between the market's
records and the matcher (`market.matcher`). Queued jobs are grouped by replica group and matched
against offers (`market.offers`) less what the leases under way and the assigned jobs hold; each
match is assigned on chain, and a job nothing can take keeps the explanation why.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Set as AbstractSet
from dataclasses import replace

from sqlmodel import select

from ledger import jobs as chain_jobs
from ledger.indexer.models import Job, Provider
from market.matcher import Assignment, JobRequest, ProviderOffer, match
from market.offers import Capacity, build_offers, job_needs, job_request
from market.records import MarketState
from market.spec import JobSpec, SpecError, borrowing_refused
from market.tick import Tick

log = logging.getLogger(__name__)

def assign(t: Tick) -> None:
    """Matches every queued group whose members are all posted, and assigns the matches on chain."""
    groups: dict[int, list[int]] = {}
    for job_id, record in t.records.items():
        job = t.jobs[job_id]
        if record.state == MarketState.QUEUED and job.status == "posted" and t.now <= job.deadline:
            groups.setdefault(record.group_id, []).append(job_id)
    requests = []
    for group_id, members in groups.items():
        if (request := _request(t, group_id, members)) is not None:
            requests.append(request)
    if not requests:
        t.session.commit()  # the explanations of specs that cannot be read
        return
    offers = offers_for(t)
    t.report.unpriced = sum(1 for o in offers if o.stake_ok and not o.priced)
    result = match(requests, offers)
    by_group: dict[int, list[Assignment]] = {}
    for a in result.assignments:
        by_group.setdefault(a.job_id, []).append(a)
    for group_id, assignments in by_group.items():
        for job_id, a in zip(sorted(groups[group_id]), assignments, strict=True):
            _assign_one(t, job_id, a)
    for group_id, explanation in result.unmatched.items():
        _explain(t, groups[group_id], explanation.text)
    t.session.commit()  # the explanations, in one write


def _request(t: Tick, group_id: int, members: list[int]) -> JobRequest | None:
    """What a queued group asks of the matcher; None (with the reason recorded where there is one)
    when it cannot be matched now."""
    job = t.jobs[members[0]]
    spec = t.market.spec(job.spec_hash)
    if isinstance(spec, SpecError):
        _explain(t, members, str(spec))
        return None
    if (why := _borrowing_refused(t, job, spec)) is not None:
        _explain(t, members, f"The job cannot run: {why}; cancel it for a full refund.")
        return None
    if len(members) < t.records[members[0]].replicas:
        return None  # the rest of the group is not posted (or not yet seen)
    request = job_request(group_id, spec, replicas=len(members))
    return replace(request, max_price_per_unit=min(t.jobs[m].max_price_per_unit for m in members))


def _assign_one(t: Tick, job_id: int, a: Assignment) -> None:
    receipt = t.market.send(chain_jobs.assign_job, job_id, a.provider, a.price_per_unit)
    if receipt is None:
        return
    record = t.records[job_id]
    record.provider, record.price_per_unit, record.explanation = a.provider, a.price_per_unit, None
    t.jobs[job_id].status, t.jobs[job_id].provider = "assigned", a.provider
    t.move(record, MarketState.ASSIGNED, f"matched at {a.price_per_unit} wei per unit", receipt,
           provider=a.provider)
    t.report.count("assigned")


def _borrowing_refused(t: Tick, job: Job, spec: JobSpec) -> str | None:
    """Why the job may not build on the result it names: another buyer's, not published."""
    if spec.prior_job is None:
        return None
    prior = t.session.get(Job, (job.chain_id, spec.prior_job))
    return borrowing_refused(spec, job.buyer, prior.buyer if prior else None,
                             t.market.spec(prior.spec_hash) if prior else None)


def _explain(t: Tick, members: list[int], text: str) -> None:
    """Keeps why a group found no provider on each member's record (written with the pass's next
    commit) and in the report."""
    for job_id in members:
        t.report.unmatched[job_id] = text
        record = t.records[job_id]
        if record.explanation != text:
            log.info("%s", text)  # it names the job
            record.explanation = text
            record.updated_at = time.time()
            t.session.add(record)


def offers_for(t: Tick, exclude: AbstractSet[str] = frozenset()) -> list[ProviderOffer]:
    """Every staked provider's offer, less the capacity its leases under way and the jobs assigned
    to it but not yet started hold; providers in `exclude` are left out."""
    market = t.market
    busy: dict[str, Capacity] = {}
    for run in market.runs.values():
        busy[run.provider] = busy.get(run.provider, Capacity()) + run.needs
    for record in t.records.values():
        if record.state == MarketState.ASSIGNED and record.job_id not in market.runs and record.provider:
            spec = market.spec(t.jobs[record.job_id].spec_hash)
            if isinstance(spec, JobSpec):
                busy[record.provider] = busy.get(record.provider, Capacity()) + job_needs(spec)
    min_stake = int(market.swarm.vault.functions.minStakePerGpu().call())
    providers = t.session.exec(select(Provider).where(Provider.chain_id == market.chain_id)).all()
    capacity = market.sites.capacities((p.address, p.spec_hash) for p in providers
                                       if p.address not in exclude and p.stake > 0)
    floor = int(market.swarm.market.functions.minPricePerUnit().call())
    return build_offers(t.session, market.chain_id, market.home, min_stake, capacity, busy,
                        market.config.default_price_per_unit, market.config.newcomer, exclude, floor)
