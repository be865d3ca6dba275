"""The ledger's tables: raw events and block hashes, the cursor, current state
(providers, jobs, epochs), append-only history (stakes, slashes, claims), reward trees.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from ledger.indexer.types import Uint256

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TABLES = (
    "events",
    "blocks",
    "cursor",
    "providers",
    "stakes",
    "jobs",
    "epochs",
    "slashes",
    "claims",
    "rewards",
)


def _json() -> sa.types.TypeEngine:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def _chain() -> sa.Column:
    return sa.Column("chain_id", sa.BigInteger(), nullable=False)


def _position() -> list[sa.Column]:
    """A log's place on the chain: the key of every row that one log adds."""
    return [
        _chain(),
        sa.Column("block_number", sa.BigInteger(), nullable=False),
        sa.Column("log_index", sa.Integer(), nullable=False),
        sa.Column("tx_hash", sa.String(66), nullable=False),
    ]


def _hash(name: str, nullable: bool = False) -> sa.Column:
    return sa.Column(name, sa.String(66), nullable=nullable)


def _address(name: str, nullable: bool = False) -> sa.Column:
    return sa.Column(name, sa.String(42), nullable=nullable)


def _u256(name: str) -> sa.Column:
    return sa.Column(name, Uint256(), nullable=False)


def _pk(table: str, *columns: str) -> sa.PrimaryKeyConstraint:
    return sa.PrimaryKeyConstraint(*columns, name=op.f(f"pk_{table}"))


def _index(table: str, *columns: str) -> None:
    op.create_index(op.f(f"ix_{table}_{'_'.join(columns)}"), table, list(columns))


def upgrade() -> None:
    op.create_table(
        "events",
        _chain(),
        sa.Column("block_number", sa.BigInteger(), nullable=False),
        sa.Column("log_index", sa.Integer(), nullable=False),
        _hash("block_hash"),
        _hash("tx_hash"),
        sa.Column("tx_index", sa.Integer(), nullable=False),
        sa.Column("contract", sa.String(32), nullable=False),
        sa.Column("name", sa.String(40), nullable=False),
        sa.Column("args", _json(), nullable=False),
        _address("provider", nullable=True),
        sa.Column("job_id", sa.BigInteger(), nullable=True),
        sa.Column("epoch", sa.BigInteger(), nullable=True),
        _pk("events", "chain_id", "block_number", "log_index"),
    )
    _index("events", "chain_id", "provider")
    _index("events", "chain_id", "job_id")
    _index("events", "chain_id", "epoch")

    op.create_table(
        "blocks",
        _chain(),
        sa.Column("number", sa.BigInteger(), nullable=False),
        _hash("hash"),
        _pk("blocks", "chain_id", "number"),
    )
    op.create_table(
        "cursor",
        _chain(),
        sa.Column("contracts", sa.String(200), nullable=False),
        sa.Column("start_block", sa.BigInteger(), nullable=False),
        sa.Column("block_number", sa.BigInteger(), nullable=False),
        _hash("block_hash"),
        sa.Column("updated_at", sa.Float(), nullable=False),
        _pk("cursor", "chain_id"),
    )
    op.create_table(
        "providers",
        _chain(),
        _address("address"),
        _hash("spec_hash"),
        sa.Column("gpus", sa.BigInteger(), nullable=False),
        _u256("stake"),
        _u256("unbonding"),
        _u256("release_time"),
        _u256("jailed_until"),
        sa.Column("tombstoned", sa.Boolean(), nullable=False),
        _u256("slashed_total"),
        sa.Column("registered_block", sa.BigInteger(), nullable=False),
        sa.Column("updated_block", sa.BigInteger(), nullable=False),
        _pk("providers", "chain_id", "address"),
    )
    op.create_table(
        "stakes",
        *_position(),
        _address("provider"),
        sa.Column("kind", sa.String(16), nullable=False),
        _u256("amount"),
        _u256("stake"),
        _u256("unbonding"),
        _pk("stakes", "chain_id", "block_number", "log_index"),
    )
    _index("stakes", "chain_id", "provider", "block_number")

    op.create_table(
        "jobs",
        _chain(),
        sa.Column("job_id", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        _address("buyer"),
        _hash("spec_hash"),
        _u256("max_price_per_unit"),
        _u256("max_units"),
        _u256("escrow"),
        _u256("deadline"),
        _address("provider", nullable=True),
        _u256("price_per_unit"),
        _u256("units_used"),
        _hash("result_hash", nullable=True),
        _u256("dispute_end"),
        _u256("payment"),
        _u256("fee"),
        _u256("refund"),
        _hash("fail_reason", nullable=True),
        sa.Column("posted_block", sa.BigInteger(), nullable=False),
        sa.Column("updated_block", sa.BigInteger(), nullable=False),
        _pk("jobs", "chain_id", "job_id"),
    )
    op.create_table(
        "epochs",
        _chain(),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        _hash("rewards_root"),
        _u256("total_rewards"),
        _hash("slashes_hash"),
        _u256("finalizable_at"),
        sa.Column("slash_count", sa.Integer(), nullable=False),
        _address("vetoed_by", nullable=True),
        sa.Column("submitted_block", sa.BigInteger(), nullable=False),
        sa.Column("finalized_block", sa.BigInteger(), nullable=True),
        _pk("epochs", "chain_id", "epoch"),
    )
    op.create_table(
        "slashes",
        *_position(),
        _address("provider"),
        _hash("reason"),
        sa.Column("bps", sa.Integer(), nullable=False),
        _u256("from_stake"),
        _u256("from_unbonding"),
        _u256("amount"),
        _u256("to_treasury"),
        _hash("evidence_hash"),
        sa.Column("epoch", sa.BigInteger(), nullable=True),
        sa.Column("job_id", sa.BigInteger(), nullable=True),
        _pk("slashes", "chain_id", "block_number", "log_index"),
    )
    _index("slashes", "chain_id", "provider")

    op.create_table(
        "claims",
        *_position(),
        _address("provider"),
        _u256("amount"),
        _u256("cumulative"),
        _pk("claims", "chain_id", "block_number", "log_index"),
    )
    _index("claims", "chain_id", "provider")

    op.create_table(
        "rewards",
        _chain(),
        _hash("rewards_root"),
        _address("provider"),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        _u256("cumulative"),
        sa.Column("proof", _json(), nullable=False),
        _pk("rewards", "chain_id", "rewards_root", "provider"),
    )
    _index("rewards", "chain_id", "provider")


def downgrade() -> None:
    for table in reversed(TABLES):
        op.drop_table(table)
