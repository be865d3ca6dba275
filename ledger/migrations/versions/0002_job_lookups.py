"""Indexes for the market's lookups: open jobs by status, a provider's jobs.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(op.f("ix_jobs_chain_id_status"), "jobs", ["chain_id", "status"])
    op.create_index(op.f("ix_jobs_chain_id_provider"), "jobs", ["chain_id", "provider"])


def downgrade() -> None:
    op.drop_index(op.f("ix_jobs_chain_id_provider"), table_name="jobs")
    op.drop_index(op.f("ix_jobs_chain_id_status"), table_name="jobs")
