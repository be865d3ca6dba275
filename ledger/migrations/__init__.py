"""Alembic migrations of the ledger database; run them with `ledger.db.migrate(engine)`."""
