"""Probe samples keep NVML's telemetry of the node's GPUs: utilization, memory used,
temperature and power.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

COLUMNS = ("gpu_utilization_pct", "gpu_memory_used_mb", "gpu_temperature_c", "gpu_power_w")


def upgrade() -> None:
    with op.batch_alter_table("probe_samples") as batch:
        for column in COLUMNS:
            batch.add_column(sa.Column(column, sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("probe_samples") as batch:
        for column in reversed(COLUMNS):
            batch.drop_column(column)
