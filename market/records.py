"""The market service's tables in the ledger database (docs/architecture.md §3): `market_jobs`
and `market_transitions`. The chain is the authority on a job's escrow; these rows hold what
the chain does not: which run is under way, its result and metrics, why a job found no
provider, replication evidence, and every transition the service made, with its time.

A job's state is a `MarketState`, stored as its string. It moves only as `MARKET_MOVES` allows:
the steps the market takes itself, and the moves that follow what the chain shows. `move` checks
each move against that table before it changes anything, and writes its transition.

The market owns them: their metadata is its own (`metadata`), and its own line of migrations
builds them (market/migrations, run by the ledger's machinery when a process hands it `MARKET`).
The oracle reads a job's replication evidence through a view of its own (oracle/inputs.py), so
the two packages never import each other.
"""

from __future__ import annotations

import time
from enum import StrEnum

from sqlalchemy import BigInteger, Index, MetaData
from sqlmodel import Field, Session, SQLModel

from core.states import Moves
from ledger.indexer.models import NAMING, Json
from ledger.indexer.types import Uint256


class MarketState(StrEnum):
    """The market's view of a job, stored as its value (`market_jobs.state`)."""

    QUEUED = "queued"  # posted on chain, waiting for a provider
    ASSIGNED = "assigned"  # assigned on chain, its lease not started (or to start again)
    RUNNING = "running"  # its lease is under way on the provider's site
    RAN = "ran"  # its lease brought a signed result, not yet on chain
    COMPLETED = "completed"  # completed (or charged) on chain, in its dispute window
    DISPUTED = "disputed"  # waits for the arbiter
    SETTLED = "settled"
    FAILED = "failed"
    CANCELLED = "cancelled"
    EXPIRED = "expired"  # no provider took it by its deadline
    RECLAIMED = "reclaimed"


_S = MarketState
_ALL = frozenset(MarketState)

# The steps the market takes itself, each once the transaction that makes it is mined, or as a
# lease starts and ends. A state with none out of it is final.
_STEPS: dict[MarketState | None, frozenset[MarketState]] = {
    None: frozenset({_S.QUEUED}),  # a job seen posted on chain
    _S.QUEUED: frozenset({_S.ASSIGNED, _S.EXPIRED}),
    _S.ASSIGNED: frozenset({_S.RUNNING, _S.ASSIGNED, _S.FAILED}),  # assigned again: reassigned
    _S.RUNNING: frozenset({_S.RAN, _S.ASSIGNED, _S.COMPLETED, _S.FAILED}),  # completed: charged
    _S.RAN: frozenset({_S.COMPLETED, _S.FAILED}),
    _S.COMPLETED: frozenset({_S.DISPUTED, _S.SETTLED}),
    _S.DISPUTED: frozenset({_S.SETTLED}),  # the arbiter did not rule in time
}
FINAL_STATES = frozenset(s for s in MarketState if not _STEPS.get(s))

# The moves that follow the chain, the authority on escrow, from whatever the record held: what
# others did (the buyer cancelled, the arbiter ruled), what a restarted service had not recorded,
# and what a devnet restarted from an older state no longer shows. Each target state, and the
# states it may be reached from.
_FOLLOWED: dict[MarketState, frozenset[MarketState]] = {
    _S.QUEUED: _ALL - {_S.QUEUED},  # posted again
    _S.ASSIGNED: _ALL,  # assigned on chain, perhaps to another provider
    _S.RAN: FINAL_STATES | {_S.COMPLETED, _S.DISPUTED},  # assigned again, its result still held
    _S.COMPLETED: _ALL - {_S.COMPLETED},
    _S.DISPUTED: _ALL - {_S.DISPUTED},
    # the chain's final statuses, which a record takes unless it is final already
    **{final: _ALL - FINAL_STATES for final in (_S.SETTLED, _S.FAILED, _S.CANCELLED, _S.RECLAIMED)},
}

# From each state (None: a new record), the states it may move to, by either kind of move.
MARKET_MOVES = Moves("job", "market.records.MARKET_MOVES", MarketState, {
    before: _STEPS.get(before, frozenset()) | {
        after for after, sources in _FOLLOWED.items() if before in sources
    }
    for before in (None, *MarketState)
})
MARKET_STATES = tuple(MarketState)


class MarketModel(SQLModel):
    """The market's tables, in a metadata of their own: what its migrations are compared with."""

    metadata = MetaData(naming_convention=NAMING)


metadata = MarketModel.metadata


class MarketJob(MarketModel, table=True):
    """One on-chain job as the market service runs it."""

    __tablename__ = "market_jobs"
    __table_args__ = (Index(None, "chain_id", "state"), Index(None, "chain_id", "group_id"))

    chain_id: int = Field(sa_type=BigInteger, primary_key=True)
    job_id: int = Field(sa_type=BigInteger, primary_key=True)
    group_id: int = Field(sa_type=BigInteger)  # the first job of its replica group (itself if alone)
    replicas: int = 1
    state: str = Field(max_length=16)
    provider: str | None = Field(default=None, max_length=42)
    price_per_unit: int = Field(default=0, sa_type=Uint256)
    attempts: int = 0  # runs started, over every provider
    lost_providers: list = Field(default_factory=list, sa_type=Json)  # providers that lost its nodes
    result_hash: str | None = Field(default=None, max_length=66)
    # the hash of its outputs alone, which the result hash covers with the log: replicas agree on it
    outputs_hash: str | None = Field(default=None, max_length=66)
    # the provider's signature over jobId, hash and units
    result_signature: str | None = Field(default=None, max_length=132)
    units: float = 0.0  # measured units (see compute.accounting); the chain gets them rounded up
    unit: str | None = Field(default=None, max_length=16)
    result_dir: str | None = None
    metrics: dict = Field(default_factory=dict, sa_type=Json)
    error: str | None = None  # the last failure, as a sentence
    log_tail: str | None = None  # the last lines its lease printed, when it failed
    # what its program reported while it ran (`ray.train.report`, rank 0's scalars), oldest first
    progress: list = Field(default_factory=list, sa_type=Json)
    explanation: str | None = None  # why the last matching round found no provider
    evidence: dict | None = Field(default=None, sa_type=Json)  # replicas' results when they disagree
    created_at: float = 0.0
    updated_at: float = 0.0


class MarketTransition(MarketModel, table=True):
    """One state change of a market job, in the order the service made them."""

    __tablename__ = "market_transitions"
    __table_args__ = (Index(None, "chain_id", "job_id"),)

    id: int | None = Field(default=None, primary_key=True)
    chain_id: int = Field(sa_type=BigInteger)
    job_id: int = Field(sa_type=BigInteger)
    at: float
    from_state: str | None = Field(default=None, max_length=16)
    to_state: str = Field(max_length=16)
    provider: str | None = Field(default=None, max_length=42)
    detail: str = ""
    tx_hash: str | None = Field(default=None, max_length=66)


def move(session: Session, record: MarketJob, state: MarketState, detail: str, tx_hash: str | None = None,
         provider: str | None = None) -> None:
    """Moves `record` to `state` and writes the transition, in one commit; a move MARKET_MOVES does
    not name is refused (`core.states.IllegalMove`) before anything changes."""
    before = record.state
    MARKET_MOVES.check(record.job_id, before, state)
    record.state = state
    record.updated_at = time.time()
    session.add(record)
    session.add(_transition(record, before, detail, tx_hash, provider))
    session.commit()


def add_new(session: Session, record: MarketJob, detail: str) -> None:
    """Adds a record the market has just made, with its first transition (the caller commits); a
    first state MARKET_MOVES does not name is refused."""
    MARKET_MOVES.check(record.job_id, None, record.state)
    session.add(record)
    session.add(_transition(record, None, detail))


def _transition(record: MarketJob, before: str | None, detail: str, tx_hash: str | None = None,
                provider: str | None = None) -> MarketTransition:
    return MarketTransition(
        chain_id=record.chain_id, job_id=record.job_id, at=time.time(), from_state=before,
        to_state=record.state, provider=provider, detail=detail, tx_hash=tx_hash,
    )
