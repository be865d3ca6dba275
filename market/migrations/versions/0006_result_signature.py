"""The provider's signature over a job's result, which completeJob requires.

Revision ID: 0006
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("market_jobs") as batch:
        batch.add_column(sa.Column("result_signature", sa.String(length=132), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("market_jobs") as batch:
        batch.drop_column("result_signature")
