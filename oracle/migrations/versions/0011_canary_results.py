"""The oracle's canary requests to serving leases: one row per lease checked, with the seed its
bodies came from and the lease's answers, so a committee member can check the verdict.

Revision ID: 0011
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from ledger.indexer.types import Uint256

revision = "0011"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "canary_results",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("chain_id", sa.BigInteger(), nullable=False),
        sa.Column("provider", sa.String(42), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("lease", sa.String(64), nullable=False),
        sa.Column("task", sa.String(16), nullable=False),
        sa.Column("model", sa.String(), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("model_seed", sa.BigInteger(), nullable=False),
        sa.Column("max_tokens", sa.Integer(), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("requests", sa.Integer(), nullable=False),
        sa.Column("matched", sa.Integer(), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(), nullable=False),
        sa.Column("answers", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=False),
        sa.Column("paid_wei", Uint256(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_canary_results")),
    )
    op.create_index(op.f("ix_canary_results_chain_id_at"), "canary_results", ["chain_id", "at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_canary_results_chain_id_at"), table_name="canary_results")
    op.drop_table("canary_results")
