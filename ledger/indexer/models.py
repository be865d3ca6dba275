"""The ledger database: raw events, the current state they add up to, and the cursor.

Every row carries its chain id, so one database can follow several chains. Amounts
and chain times are `Uint256` (exact on SQLite and PostgreSQL); hashes and bytes32
values are 0x-prefixed hex; addresses are checksummed.

Which rows a reorg touches: `events`, `blocks`, `stakes`, `slashes` and `claims` are
append-only by block and are cut at the fork; `providers`, `jobs` and `epochs` are the
current state of one entity each and are recomputed from the events that remain.
`rewards` comes from the oracle, keyed by the root it proves, and is never cut.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, BigInteger, Index, MetaData
from sqlalchemy.dialects.postgresql import JSONB
from sqlmodel import Field, SQLModel

from ledger.indexer.types import Uint256

# A JSON column: JSONB on PostgreSQL (queryable, exact numbers), JSON text on SQLite.
Json = JSON().with_variant(JSONB(), "postgresql")

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "pk": "pk_%(table_name)s",
}


class LedgerModel(SQLModel):
    """The ledger's tables live in their own metadata, so other packages' tables stay out of its
    migrations."""

    metadata = MetaData(naming_convention=NAMING)


metadata = LedgerModel.metadata


def _u256(default: int | None = 0, **kw: Any) -> Any:
    return Field(default=default, sa_type=Uint256, **kw)


def _big(**kw: Any) -> Any:
    return Field(sa_type=BigInteger, **kw)


class EventRow(LedgerModel, table=True):
    """One log of a Swarm contract, decoded. Its position is its key: a replay cannot duplicate it."""

    __tablename__ = "events"
    __table_args__ = (
        Index(None, "chain_id", "provider"),
        Index(None, "chain_id", "job_id"),
        Index(None, "chain_id", "epoch"),
    )

    chain_id: int = _big(primary_key=True)
    block_number: int = _big(primary_key=True)
    log_index: int = Field(primary_key=True)
    block_hash: str = Field(max_length=66)
    tx_hash: str = Field(max_length=66)
    tx_index: int
    contract: str = Field(max_length=32)
    name: str = Field(max_length=40)
    args: dict = Field(sa_type=Json)
    # The keys a reader (and a reorg) looks events up by.
    provider: str | None = Field(default=None, max_length=42)
    job_id: int | None = _big(default=None)
    epoch: int | None = _big(default=None)


class BlockRow(LedgerModel, table=True):
    """The hash of every indexed block that had events, and of the cursor's block."""

    __tablename__ = "blocks"

    chain_id: int = _big(primary_key=True)
    number: int = _big(primary_key=True)
    hash: str = Field(max_length=66)


class Cursor(LedgerModel, table=True):
    """How far one chain is indexed: everything up to `block_number` is in the tables."""

    __tablename__ = "cursor"

    chain_id: int = _big(primary_key=True)
    contracts: str = Field(max_length=200)  # the deployment indexed: vault,market,distributor
    start_block: int = _big()
    block_number: int = _big()
    block_hash: str = Field(max_length=66)
    updated_at: float = 0.0


class Provider(LedgerModel, table=True):
    """A provider as StakingVault sees it now."""

    __tablename__ = "providers"

    chain_id: int = _big(primary_key=True)
    address: str = Field(primary_key=True, max_length=42)
    spec_hash: str = Field(max_length=66)
    gpus: int = _big()
    stake: int = _u256()
    unbonding: int = _u256()
    release_time: int = _u256()  # when `unbonding` may be withdrawn
    jailed_until: int = _u256()  # 0: not jailed
    tombstoned: bool = False
    slashed_total: int = _u256()
    registered_block: int = _big()
    updated_block: int = _big()


class StakeChange(LedgerModel, table=True):
    """One change to a provider's stake, with the stake and unbonding after it."""

    __tablename__ = "stakes"
    __table_args__ = (Index(None, "chain_id", "provider", "block_number"),)

    chain_id: int = _big(primary_key=True)
    block_number: int = _big(primary_key=True)
    log_index: int = Field(primary_key=True)
    tx_hash: str = Field(max_length=66)
    provider: str = Field(max_length=42)
    kind: str = Field(max_length=16)  # stake | unstake | withdraw | slash
    amount: int = _u256()
    stake: int = _u256()
    unbonding: int = _u256()


class Job(LedgerModel, table=True):
    """A buyer's job as JobMarket sees it now."""

    __tablename__ = "jobs"
    __table_args__ = (Index(None, "chain_id", "status"), Index(None, "chain_id", "provider"))  # revision 0002

    chain_id: int = _big(primary_key=True)
    job_id: int = _big(primary_key=True)
    status: str = Field(
        max_length=16
    )  # posted assigned completed disputed settled failed cancelled reclaimed
    buyer: str = Field(max_length=42)
    spec_hash: str = Field(max_length=66)
    max_price_per_unit: int = _u256()
    max_units: int = _u256()
    escrow: int = _u256()
    deadline: int = _u256()
    provider: str | None = Field(default=None, max_length=42)
    price_per_unit: int = _u256()
    units_used: int = _u256()
    result_hash: str | None = Field(default=None, max_length=66)
    dispute_end: int = _u256()
    payment: int = _u256()  # to the provider, after the fee
    fee: int = _u256()
    refund: int = _u256()
    fail_reason: str | None = Field(default=None, max_length=66)
    posted_block: int = _big()
    updated_block: int = _big()


class Epoch(LedgerModel, table=True):
    """An epoch report: submitted, vetoed or finalized."""

    __tablename__ = "epochs"

    chain_id: int = _big(primary_key=True)
    epoch: int = _big(primary_key=True)
    status: str = Field(max_length=16)  # submitted | vetoed | finalized
    rewards_root: str = Field(max_length=66)
    total_rewards: int = _u256()
    slashes_hash: str = Field(max_length=66)
    finalizable_at: int = _u256()
    slash_count: int = 0  # slashes the report orders
    vetoed_by: str | None = Field(default=None, max_length=42)
    submitted_block: int = _big()
    finalized_block: int | None = _big(default=None)


class SlashRow(LedgerModel, table=True):
    """A slash StakingVault applied, with the epoch or job that ordered it."""

    __tablename__ = "slashes"
    __table_args__ = (Index(None, "chain_id", "provider"),)

    chain_id: int = _big(primary_key=True)
    block_number: int = _big(primary_key=True)
    log_index: int = Field(primary_key=True)
    tx_hash: str = Field(max_length=66)
    provider: str = Field(max_length=42)
    reason: str = Field(max_length=66)
    bps: int
    from_stake: int = _u256()
    from_unbonding: int = _u256()
    amount: int = _u256()
    to_treasury: int = _u256()
    evidence_hash: str = Field(max_length=66)
    epoch: int | None = _big(default=None)  # set when an epoch's finalization applied it
    job_id: int | None = _big(default=None)  # set when a failed, disputed or reassigned job caused it


class ClaimRow(LedgerModel, table=True):
    """A reward claim paid by RewardDistributor."""

    __tablename__ = "claims"
    __table_args__ = (Index(None, "chain_id", "provider"),)

    chain_id: int = _big(primary_key=True)
    block_number: int = _big(primary_key=True)
    log_index: int = Field(primary_key=True)
    tx_hash: str = Field(max_length=66)
    provider: str = Field(max_length=42)
    amount: int = _u256()
    cumulative: int = _u256()


class RewardRow(LedgerModel, table=True):
    """One leaf of a reward tree the oracle built: a provider's cumulative earnings and its proof."""

    __tablename__ = "rewards"
    __table_args__ = (Index(None, "chain_id", "provider"),)

    chain_id: int = _big(primary_key=True)
    rewards_root: str = Field(primary_key=True, max_length=66)
    provider: str = Field(primary_key=True, max_length=42)
    epoch: int = _big()
    cumulative: int = _u256()
    proof: list = Field(sa_type=Json)  # hex sibling hashes, leaf to root


TABLES = (EventRow, BlockRow, Cursor, Provider, StakeChange, Job, Epoch, SlashRow, ClaimRow, RewardRow)
