"""An epoch's chain inputs, read as the chain stood at the epoch's last block (docs/architecture.md §6).

Every figure here comes from the indexed events of blocks up to the epoch's `to_block` (and,
where it is counted per epoch, after its `from_block`), never from the ledger's current-state
rows, so a committee member who indexes the chain later, further, or into another database
computes the same report. The oracle's own measurements (probe samples and challenges) are
keyed by the epoch's time window instead, and are read in `oracle.epoch`. The one row of the
market's read here, a replica group's evidence, is read through a view of the market's table of
its own (`MARKET_JOBS`): the market owns it (market/records.py), and the two packages meet only in
the database.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from sqlalchemy import BigInteger, column, func, table
from sqlmodel import Session, col, select

from ledger.indexer.models import EventRow, Json, Provider
from ledger.indexer.projections import bytes32_text
from ledger.indexer.queries import events_through, jobs_at, providers_at

# Job failures that are the provider's doing (the market's failJob/reassignJob reasons).
PROVIDER_FAULTS = ("provider-lost",)

# The market's jobs as the oracle reads them: a read-only view of the columns it needs.
MARKET_JOBS = table("market_jobs", column("chain_id", BigInteger), column("job_id", BigInteger),
                    column("group_id", BigInteger), column("evidence", Json))


@dataclass(frozen=True)
class Blocks:
    """The chain blocks an epoch covers: those after `after`, up to and including `through`."""

    after: int
    through: int


@dataclass(frozen=True)
class JobRecord:
    """Each provider's job outcomes, by address."""

    successes: Counter[str]  # jobs settled to it, over its history up to the epoch's last block
    failures: Counter[str]  # jobs it failed or lost through its own fault, likewise
    abandoned: Counter[str]  # of those failures, the ones within the epoch's blocks


def staked_providers(session: Session, chain_id: int, blocks: Blocks) -> list[Provider]:
    """Providers with active stake at the epoch's last block, in address order."""
    return [p for p in providers_at(session, chain_id, blocks.through) if p.stake > 0]


def job_record(session: Session, chain_id: int, blocks: Blocks) -> JobRecord:
    """Settlements, and failures and reassignments charged to the provider, up to the epoch's last block."""
    successes: Counter[str] = Counter()
    failures: Counter[str] = Counter()
    abandoned: Counter[str] = Counter()
    names = ("JobSettled", "JobFailed", "JobReassigned")
    for event in events_through(session, chain_id, names, blocks.through):
        args = event.args
        if event.name == "JobSettled":
            successes[args["provider"]] += 1
            continue
        if bytes32_text(args["reason"]) not in PROVIDER_FAULTS:
            continue
        loser = args["from"] if event.name == "JobReassigned" else args["provider"]
        failures[loser] += 1
        if event.block_number > blocks.after:
            abandoned[loser] += 1
    return JobRecord(successes, failures, abandoned)


def unstaking(session: Session, chain_id: int, blocks: Blocks) -> set[str]:
    """Providers that asked to unstake within the epoch's blocks (their loyalty starts again)."""
    events = events_through(session, chain_id, ("UnstakeRequested",), blocks.through, after=blocks.after)
    return {e.args["provider"] for e in events}


def units_completed(session: Session, chain_id: int, blocks: Blocks) -> int:
    """Units the market's jobs reported done within the epoch's blocks."""
    events = events_through(session, chain_id, ("JobCompleted",), blocks.through, after=blocks.after)
    return sum(int(e.args["unitsUsed"]) for e in events)


def replication_losers(session: Session, chain_id: int, blocks: Blocks) -> list[str]:
    """Providers outvoted by a strict majority of their job's replicas, in groups disputed this epoch.

    A replica group belongs to the epoch whose blocks hold the first JobDisputed event of any of
    its jobs, so it is counted once, in the same epoch by every member. Which jobs form a group
    is the market's evidence record; who ran each and what it answered is the chain's. Two
    replicas that disagree have no majority: the arbiter decides, with the evidence.
    """
    disputed = {e.job_id for e in events_through(session, chain_id, ("JobDisputed",), blocks.through,
                                                 after=blocks.after)}
    if not disputed:
        return []
    groups: dict[int, list[int]] = {}
    market = MARKET_JOBS.c
    for group_id, evidence in session.exec(select(market.group_id, market.evidence).where(
            market.chain_id == chain_id, market.job_id.in_(sorted(disputed)), market.evidence.is_not(None))):
        if evidence:
            groups.setdefault(group_id, sorted(int(job_id) for job_id in evidence))
    losers = []
    for members in groups.values():
        if _first_dispute(session, chain_id, members, blocks.through) <= blocks.after:
            continue  # an earlier epoch counted this group
        jobs = jobs_at(session, chain_id, members, blocks.through)
        answers = [(j.provider, j.result_hash) for j in jobs.values() if j.result_hash and j.provider]
        votes = Counter(result for _, result in answers)
        if not votes:
            continue
        winner, count = votes.most_common(1)[0]
        if count * 2 > len(members):
            losers += sorted(provider for provider, result in answers if result != winner)
    return losers


def _first_dispute(session: Session, chain_id: int, job_ids: list[int], through: int) -> int:
    first = session.exec(
        select(func.min(EventRow.block_number)).where(
            col(EventRow.chain_id) == chain_id,
            col(EventRow.name) == "JobDisputed",
            col(EventRow.job_id).in_(job_ids),
            EventRow.block_number <= through,
        )
    ).one()
    return int(first)
