"""Challenge results keep the node's own account of its time — the rounds and the commitment,
apart, as it sent them with its root (the oracle still judges only its own clock) — and the
shape the oracle asked for: its size, rounds and stride (a GPU's is timed to its model).

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

TIMES = ("node_rounds_s", "node_commit_s")
SHAPE = ("challenge_size", "challenge_rounds", "challenge_stride")


def upgrade() -> None:
    with op.batch_alter_table("challenge_results") as batch:
        for column in TIMES:
            batch.add_column(sa.Column(column, sa.Float(), nullable=False, server_default="0"))
        for column in SHAPE:
            batch.add_column(sa.Column(column, sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("challenge_results") as batch:
        for column in reversed(TIMES + SHAPE):
            batch.drop_column(column)
