"""Reads of the ledger tables for people and scripts (`swarm ledger show`)."""

from __future__ import annotations

from collections.abc import Sequence

from sqlmodel import Session, col, select

from ledger.errors import SwarmError
from ledger.indexer import KINDS
from ledger.indexer.models import Cursor, Epoch, Job, LedgerModel, Provider, SlashRow



def indexed_chains(session: Session) -> list[Cursor]:
    return list(session.exec(select(Cursor).order_by(Cursor.chain_id)).all())


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
