"""Alembic's entry point. `ledger.db.migrate` hands it an open connection; run by hand
(`alembic -x url=...`), it opens SWARM_DB_URL itself.

The migrations build every table of the ledger database, written out in full, so an upgrade
needs no model. The models are compared with the schema only by hand (`alembic check`,
`revision --autogenerate`): then the tables the market and the oracle own (market/records.py,
oracle/records.py) join the ledger's on the one metadata. An upgrade from `ledger.db` imports
neither package, which stand above the ledger."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from ledger.indexer.models import metadata

config = context.config
VERSION_TABLE = config.get_main_option("version_table") or "ledger_alembic_version"


def _run(connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        render_as_batch=True,  # SQLite alters tables by copying them
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    import os

    import market.records  # noqa: F401 -- their tables join the ledger's metadata
    import oracle.records  # noqa: F401

    url = context.get_x_argument(as_dictionary=True).get("url") or os.environ["SWARM_DB_URL"]
    with create_engine(url).begin() as opened:
        _run(opened)
