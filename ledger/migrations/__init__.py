"""The Alembic environment every owner's migrations run in (env.py, script.py.mako), and the
ledger's own line of revisions (versions/): its indexer's tables. The market's and the oracle's
lines live in their packages (market/migrations, oracle/migrations); run them all with
`ledger.db.migrate(engine, *owners)`."""
