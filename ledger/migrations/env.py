"""Alembic's entry point, for every owner's line of revisions (`ledger.db.Schema`): `ledger.db`
hands it an open connection, the line's scripts and version table, and, only when a comparison
with the models is asked for (`alembic_config(..., compare=True)`), the owner's metadata.

The revisions write every table out in full, so an upgrade loads no model. A comparison sees
the owner's tables alone: the database holds every owner's, each with its own version table."""

from __future__ import annotations

from typing import Any

from alembic import context

config = context.config
metadata = config.attributes.get("metadata")


def _owned(name: str | None, kind: str, _parents: Any) -> bool:
    return kind != "table" or (metadata is not None and name in metadata.tables)


context.configure(
    connection=config.attributes["connection"],
    target_metadata=metadata,
    version_table=config.get_main_option("version_table"),
    include_name=_owned,
    render_as_batch=True,  # SQLite alters tables by copying them
    compare_type=True,
)
with context.begin_transaction():
    context.run_migrations()
