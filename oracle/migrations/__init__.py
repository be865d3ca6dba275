"""The oracle's tables in the ledger database (oracle/records.py), built and upgraded by a line of
Alembic revisions of their own (versions/), recorded in `oracle_schema_version`. A process that
reads them hands `ORACLE` to the ledger's machinery: `ledger.db.open_ledger(url, ORACLE)`.

Its first revisions (0004, 0005, 0007, 0008, 0009, 0011) keep the numbers they had on the one line
that built every table before each owner kept its own: a database that line built starts here from
where it stood."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import MetaData

from ledger.db import Schema


def _models() -> MetaData:
    from oracle.records import metadata  # SQLModel: only a comparison with the database needs the models

    return metadata


ORACLE = Schema("oracle", Path(__file__).resolve().parent / "versions", "0011", _models)
