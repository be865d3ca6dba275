"""Reads of the ledger tables for people and scripts (`swarm ledger show`), and of the
chain's state as it stood at an earlier block, replayed from the stored events."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from typing import Any

from sqlmodel import Session, col, select

from ledger.errors import SwarmError
from ledger.indexer import KINDS
from ledger.indexer.decode import Log
from ledger.indexer.models import Cursor, Epoch, EventRow, Job, LedgerModel, Provider, SlashRow
from ledger.indexer.projections import JOB_EVENTS, PROVIDER_EVENTS, Projection


def indexed_chains(session: Session) -> list[Cursor]:
    return list(session.exec(select(Cursor).order_by(col(Cursor.chain_id))).all())


def pick_chain(session: Session, chain_id: int | None, database: str) -> Cursor:
    """The chain to show: the one asked for, or the only one the database holds."""
    chains = indexed_chains(session)
    if chain_id is not None:
        for cursor in chains:
            if cursor.chain_id == chain_id:
                return cursor
        raise SwarmError(
            f"The ledger database {database} has nothing indexed for chain {chain_id}; "
            "run `swarm ledger sync` against that chain first."
        )
    if not chains:
        raise SwarmError(
            f"The ledger database {database} has nothing indexed yet; run `swarm ledger sync` first."
        )
    if len(chains) > 1:
        ids = ", ".join(str(c.chain_id) for c in chains)
        raise SwarmError(f"The ledger database {database} holds chains {ids}; choose one with --chain-id.")
    return chains[0]


def rows(session: Session, kind: str, chain_id: int, limit: int) -> Sequence[LedgerModel]:
    """The newest (or, for providers, the largest) `limit` rows of one table."""
    query: Any
    if kind == "providers":
        query = (
            select(Provider)
            .where(Provider.chain_id == chain_id)
            .order_by(col(Provider.stake).desc(), Provider.address)
        )
    elif kind == "jobs":
        query = select(Job).where(Job.chain_id == chain_id).order_by(col(Job.job_id).desc())
    elif kind == "epochs":
        query = select(Epoch).where(Epoch.chain_id == chain_id).order_by(col(Epoch.epoch).desc())
    elif kind == "slashes":
        query = (
            select(SlashRow)
            .where(SlashRow.chain_id == chain_id)
            .order_by(col(SlashRow.block_number).desc(), col(SlashRow.log_index).desc())
        )
    else:
        raise SwarmError(f"Unknown table {kind!r}; choose one of {', '.join(KINDS)}.")
    return session.exec(query.limit(limit)).all()


# ── the chain's state at a block ─────────────────────────────────────────────
def events_through(
    session: Session, chain_id: int, names: Collection[str], block: int, after: int | None = None
) -> Iterator[EventRow]:
    """The stored events named `names` in blocks (after, block], in chain order."""
    query = select(EventRow).where(
        col(EventRow.chain_id) == chain_id,
        col(EventRow.name).in_(sorted(names)),
        col(EventRow.block_number) <= block,
    )
    if after is not None:
        query = query.where(EventRow.block_number > after)
    return iter(session.exec(query.order_by(col(EventRow.block_number), col(EventRow.log_index))).all())


def providers_at(session: Session, chain_id: int, block: int) -> list[Provider]:
    """Every provider as StakingVault saw it at the end of `block`, in address order.

    The same projection the indexer keeps `providers` with, run over the events up to `block`
    only, so the answer does not change as the ledger indexes later blocks.
    """
    projection = Projection(chain_id)
    projection.apply_all(_logs(events_through(session, chain_id, PROVIDER_EVENTS, block)))
    return [Provider(**row) for _, row in sorted(projection.providers.items())]


def jobs_at(session: Session, chain_id: int, job_ids: Collection[int], block: int) -> dict[int, Job]:
    """The jobs `job_ids` as JobMarket saw them at the end of `block` (those posted by then)."""
    if not job_ids:
        return {}
    rows = session.exec(
        select(EventRow)
        .where(
            EventRow.chain_id == chain_id,
            col(EventRow.job_id).in_(sorted(job_ids)),
            col(EventRow.name).in_(sorted(JOB_EVENTS)),
            EventRow.block_number <= block,
        )
        .order_by(col(EventRow.block_number), col(EventRow.log_index))
    ).all()
    projection = Projection(chain_id)
    projection.apply_all(_logs(rows))
    return {job_id: Job(**row) for job_id, row in projection.jobs.items()}


def _logs(rows: Iterator[EventRow] | Sequence[EventRow]) -> Iterator[Log]:
    for r in rows:
        yield Log(
            r.block_number, r.block_hash, r.tx_hash, r.tx_index, r.log_index, r.contract, r.name, r.args
        )
