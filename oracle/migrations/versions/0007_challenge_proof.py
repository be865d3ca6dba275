"""Challenges checked as proofs and timed by the oracle: `checksum_ok` becomes `proof_ok`,
with the challenge's outcome, precision and the seconds the oracle measured, and the GPU's
identity as the node gave it.

Revision ID: 0007
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("challenge_results") as batch:
        batch.alter_column(
            "checksum_ok", new_column_name="proof_ok", existing_type=sa.Boolean(), existing_nullable=False
        )
        batch.add_column(sa.Column("outcome", sa.String(16), nullable=False, server_default="passed"))
        batch.add_column(sa.Column("precision", sa.String(8), nullable=False, server_default="fp32"))
        batch.add_column(sa.Column("seconds", sa.Float(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("identity_ok", sa.Boolean(), nullable=False, server_default=sa.true()))
        batch.add_column(sa.Column("gpu_name", sa.String(96), nullable=False, server_default=""))
        batch.add_column(sa.Column("gpu_uuid", sa.String(96), nullable=False, server_default=""))
        batch.add_column(sa.Column("gpu_memory_mb", sa.Float(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("vram_touched_mb", sa.Float(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("challenge_results") as batch:
        for column in ("vram_touched_mb", "gpu_memory_mb", "gpu_uuid", "gpu_name", "identity_ok", "seconds",
                       "precision", "outcome"):
            batch.drop_column(column)
        batch.alter_column("proof_ok", new_column_name="checksum_ok", existing_type=sa.Boolean(),
                           existing_nullable=False)
