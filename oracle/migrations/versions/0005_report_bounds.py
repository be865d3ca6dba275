"""An epoch report's cumulative total and expiry, which the committee signs.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from ledger.indexer.types import Uint256

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("oracle_epochs") as batch:
        batch.add_column(sa.Column("cumulative_total", Uint256(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("expires_at", sa.BigInteger(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("oracle_epochs") as batch:
        batch.drop_column("expires_at")
        batch.drop_column("cumulative_total")
