"""A market job keeps what its lease showed: the last lines of its log when it failed, what its
program reported while it ran (each `ray.train.report`), and the hash of its outputs alone,
which replicas are compared by (the result hash covers the log too).

Revision ID: 0010
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0010"
down_revision = "0006"
branch_labels = None
depends_on = None


def _json() -> sa.types.TypeEngine:
    return sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("market_jobs") as batch:
        batch.add_column(sa.Column("outputs_hash", sa.String(66), nullable=True))
        batch.add_column(sa.Column("log_tail", sa.String(), nullable=True))
        batch.add_column(sa.Column("progress", _json(), nullable=False, server_default="[]"))


def downgrade() -> None:
    with op.batch_alter_table("market_jobs") as batch:
        for column in ("progress", "log_tail", "outputs_hash"):
            batch.drop_column(column)
