"""The market service's state: its view of each job and the transitions it made. The first of
the market's line; numbered, like 0006 and 0010, on the one line that built every table of the
ledger database before each owner kept its own (ledger.db.SINGLE_LINE), where it followed 0002.

Revision ID: 0003
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from ledger.indexer.types import Uint256

revision = "0003"
down_revision = None
branch_labels = None
depends_on = None


def _json() -> sa.types.TypeEngine:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "market_jobs",
        sa.Column("chain_id", sa.BigInteger(), nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=False),
        sa.Column("group_id", sa.BigInteger(), nullable=False),
        sa.Column("replicas", sa.Integer(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("provider", sa.String(42), nullable=True),
        sa.Column("price_per_unit", Uint256(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("lost_providers", _json(), nullable=False),
        sa.Column("result_hash", sa.String(66), nullable=True),
        sa.Column("units", sa.Float(), nullable=False),
        sa.Column("unit", sa.String(16), nullable=True),
        sa.Column("result_dir", sa.String(), nullable=True),
        sa.Column("metrics", _json(), nullable=False),
        sa.Column("error", sa.String(), nullable=True),
        sa.Column("explanation", sa.String(), nullable=True),
        sa.Column("evidence", _json(), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("chain_id", "job_id", name=op.f("pk_market_jobs")),
    )
    op.create_index(op.f("ix_market_jobs_chain_id_state"), "market_jobs", ["chain_id", "state"])
    op.create_index(op.f("ix_market_jobs_chain_id_group_id"), "market_jobs", ["chain_id", "group_id"])
    op.create_table(
        "market_transitions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("chain_id", sa.BigInteger(), nullable=False),
        sa.Column("job_id", sa.BigInteger(), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("from_state", sa.String(16), nullable=True),
        sa.Column("to_state", sa.String(16), nullable=False),
        sa.Column("provider", sa.String(42), nullable=True),
        sa.Column("detail", sa.String(), nullable=False),
        sa.Column("tx_hash", sa.String(66), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_market_transitions")),
    )
    op.create_index(
        op.f("ix_market_transitions_chain_id_job_id"), "market_transitions", ["chain_id", "job_id"]
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_market_transitions_chain_id_job_id"), table_name="market_transitions")
    op.drop_table("market_transitions")
    op.drop_index(op.f("ix_market_jobs_chain_id_group_id"), table_name="market_jobs")
    op.drop_index(op.f("ix_market_jobs_chain_id_state"), table_name="market_jobs")
    op.drop_table("market_jobs")
