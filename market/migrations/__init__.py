"""The market's tables in the ledger database (market/records.py), built and upgraded by a line of
Alembic revisions of their own (versions/), recorded in `market_schema_version`. A process that
reads them hands `MARKET` to the ledger's machinery: `ledger.db.open_ledger(url, MARKET)`.

Its first revisions (0003, 0006, 0010) keep the numbers they had on the one line that built every
table before each owner kept its own: a database that line built starts here from where it stood."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import MetaData

from ledger.db import Schema


def _models() -> MetaData:
    from market.records import metadata  # SQLModel: only a comparison with the database needs the models

    return metadata


MARKET = Schema("market", Path(__file__).resolve().parent / "versions", "0010", _models)
