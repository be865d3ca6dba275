"""Challenge results keep the node's own account of its time: the rounds and the commitment,
apart, as it sent them with its root (the oracle still judges only its own clock).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

COLUMNS = ("node_rounds_s", "node_commit_s")


def upgrade() -> None:
    with op.batch_alter_table("challenge_results") as batch:
        for column in COLUMNS:
            batch.add_column(sa.Column(column, sa.Float(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("challenge_results") as batch:
        for column in reversed(COLUMNS):
            batch.drop_column(column)
