"""The market service's tables in the ledger database (docs/architecture.md §3): `market_jobs`
and `market_transitions`. The chain is the authority on a job's escrow; these rows hold what
the chain does not: which run is under way, its result and metrics, why a job found no
provider, replication evidence, and every transition the service made, with its time.

The market owns them: their metadata is its own (`metadata`), and its own line of migrations
builds them (market/migrations, run by the ledger's machinery when a process hands it `MARKET`).
The oracle reads a job's replication evidence through a view of its own (oracle/inputs.py), so
the two packages never import each other.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Index, MetaData
from sqlmodel import Field, SQLModel

from ledger.indexer.models import NAMING, Json
from ledger.indexer.types import Uint256

# The market's view of a job; `settled`, `failed`, `cancelled`, `expired` and
# `reclaimed` are final, `disputed` waits for the arbiter.
MARKET_STATES = (
    "queued", "assigned", "running", "ran", "completed", "disputed",
    "settled", "failed", "cancelled", "expired", "reclaimed",
)
FINAL_STATES = frozenset({"settled", "failed", "cancelled", "expired", "reclaimed"})


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
