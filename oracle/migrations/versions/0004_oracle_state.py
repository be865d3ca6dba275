"""The oracle's state: probe samples, challenge results, epochs and per-provider scores. The first
of the oracle's line; numbered, like the rest up to 0011, on the one line that built every table
of the ledger database before each owner kept its own (ledger.db.SINGLE_LINE), where it followed
0003.

Revision ID: 0004
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from ledger.indexer.types import Uint256

revision = "0004"
down_revision = None
branch_labels = None
depends_on = None


def _json() -> sa.types.TypeEngine:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "probe_samples",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("chain_id", sa.BigInteger(), nullable=False),
        sa.Column("provider", sa.String(42), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("ok", sa.Boolean(), nullable=False),
        sa.Column("latency_s", sa.Float(), nullable=False),
        sa.Column("node_id", sa.String(64), nullable=True),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_probe_samples")),
    )
    op.create_index(op.f("ix_probe_samples_chain_id_at"), "probe_samples", ["chain_id", "at"])
    op.create_table(
        "challenge_results",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("chain_id", sa.BigInteger(), nullable=False),
        sa.Column("provider", sa.String(42), nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.Column("declared_model", sa.String(32), nullable=False),
        sa.Column("seed", sa.BigInteger(), nullable=False),
        sa.Column("checksum_ok", sa.Boolean(), nullable=False),
        sa.Column("measured_gflops", sa.Float(), nullable=False),
        sa.Column("reference_gflops", sa.Float(), nullable=False),
        sa.Column("ratio", sa.Float(), nullable=False),
        sa.Column("device", sa.String(16), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("reason", sa.String(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_challenge_results")),
    )
    op.create_index(op.f("ix_challenge_results_chain_id_at"), "challenge_results", ["chain_id", "at"])
    op.create_table(
        "oracle_epochs",
        sa.Column("chain_id", sa.BigInteger(), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("window_start", sa.Float(), nullable=False),
        sa.Column("window_end", sa.Float(), nullable=False),
        sa.Column("from_block", sa.BigInteger(), nullable=False),
        sa.Column("to_block", sa.BigInteger(), nullable=False),
        sa.Column("utilization", sa.Float(), nullable=False),
        sa.Column("emission_wei", Uint256(), nullable=False),
        sa.Column("rewards_root", sa.String(66), nullable=False),
        sa.Column("slashes", _json(), nullable=False),
        sa.Column("signatures", _json(), nullable=False),
        sa.Column("submit_tx", sa.String(66), nullable=True),
        sa.Column("finalize_tx", sa.String(66), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("chain_id", "epoch", name=op.f("pk_oracle_epochs")),
    )
    op.create_table(
        "provider_scores",
        sa.Column("chain_id", sa.BigInteger(), nullable=False),
        sa.Column("epoch", sa.BigInteger(), nullable=False),
        sa.Column("provider", sa.String(42), nullable=False),
        sa.Column("samples", sa.Integer(), nullable=False),
        sa.Column("uptime", sa.Float(), nullable=False),
        sa.Column("measured_gflops", sa.Float(), nullable=True),
        sa.Column("performance", sa.Float(), nullable=False),
        sa.Column("reliability", sa.Float(), nullable=False),
        sa.Column("loyalty", sa.Float(), nullable=False),
        sa.Column("epochs_staked", sa.Integer(), nullable=False),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("eligible", sa.Boolean(), nullable=False),
        sa.Column("reward_wei", Uint256(), nullable=False),
        sa.Column("cumulative_wei", Uint256(), nullable=False),
        sa.Column("note", sa.String(), nullable=False),
        sa.PrimaryKeyConstraint("chain_id", "epoch", "provider", name=op.f("pk_provider_scores")),
    )
    op.create_index(op.f("ix_provider_scores_chain_id_provider"), "provider_scores", ["chain_id", "provider"])


def downgrade() -> None:
    op.drop_index(op.f("ix_provider_scores_chain_id_provider"), table_name="provider_scores")
    op.drop_table("provider_scores")
    op.drop_table("oracle_epochs")
    op.drop_index(op.f("ix_challenge_results_chain_id_at"), table_name="challenge_results")
    op.drop_table("challenge_results")
    op.drop_index(op.f("ix_probe_samples_chain_id_at"), table_name="probe_samples")
    op.drop_table("probe_samples")
