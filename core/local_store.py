"""A local SQLite store with a schema version: the site's nonce book, its receipt book and
vouchers, and the buyer's journal, which hold money and replay state on one machine's disk.

A store's schema is a list of versions (`StoreSchema`): the first builds version 1, each later
one upgrades the version before it. The file records its version in `PRAGMA user_version`, and
`open_store` brings it to the newest in one transaction, so a file is at one version or the next,
never between. A file an earlier Swarm wrote carries no version (0) but already holds version
1's tables: version 1's statements say IF NOT EXISTS, and its tables are first held to version
1's columns, so a file that is not what Swarm wrote is refused, never silently taken. A file at a
version newer than this Swarm knows is refused too: an older Swarm would misread it.

Here, below every package and with nothing but the standard library, since the site's stores
(provider/) and the buyer's (wire/) both need it, and neither is the other's."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from core.errors import UserError

UNREADABLE = {sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT}  # not a database, or a damaged one
# held by another process past the timeout, or a file that cannot be opened or written
UNWRITABLE = {sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY,
              sqlite3.SQLITE_PERM, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL}


@dataclass(frozen=True)
class StoreSchema:
    """A store's tables, version by version: `versions[0]` builds version 1 (with IF NOT EXISTS,
    so a file an earlier Swarm wrote, holding them already, is taken as it is), and each later
    entry upgrades the version before it by one. Each version is its SQL statements, in order;
    a version, once shipped, never changes."""

    versions: tuple[tuple[str, ...], ...]

    @property
    def latest(self) -> int:
        return len(self.versions)


def open_store(path: Path, schema: StoreSchema, *, wal: bool = False) -> sqlite3.Connection:
    """The store at `path` (created if missing), its schema brought to `schema.latest`; in
    autocommit mode, shareable across threads, since each store runs its own transactions. `wal`:
    write-ahead logging with a checkpoint's durability, for a store written on every request."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        try:
            if wal:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")  # a killed process loses nothing committed
            if _version(db, path, schema) != schema.latest:
                _upgrade(db, path, schema)
        except BaseException:
            db.close()
            raise
    except sqlite3.Error as exc:
        code = exc.sqlite_errorcode & 0xFF if isinstance(exc.sqlite_errorcode, int) else None
        if code in UNREADABLE:
            raise UserError(f"{path} is not a store this Swarm can read ({exc}); restore it from a backup, "
                            "or move it aside to start an empty one.") from None
        if code in UNWRITABLE:
            raise UserError(f"{path} cannot be opened ({exc}); check that it is a file Swarm may write, "
                            "and that no other process holds it.") from None
        raise  # a statement of ours that SQLite refuses: a bug
    return db


def _version(db: sqlite3.Connection, path: Path, schema: StoreSchema) -> int:
    found = int(db.execute("PRAGMA user_version").fetchone()[0])
    if found > schema.latest:
        raise UserError(f"{path} is at schema version {found}, newer than this Swarm reads "
                        f"({schema.latest}); upgrade Swarm.")
    return found


def _upgrade(db: sqlite3.Connection, path: Path, schema: StoreSchema) -> None:
    """Every version after the file's, in one transaction (a second process opening the store
    meanwhile waits, then finds it upgraded)."""
    db.execute("BEGIN IMMEDIATE")  # the write lock, taken before the version is read again
    try:
        found = _version(db, path, schema)
        if found == 0:
            _check_unversioned(db, path, schema)
        for statements in schema.versions[found:]:
            for statement in statements:
                db.execute(statement)
        db.execute(f"PRAGMA user_version = {schema.latest:d}")
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


def _check_unversioned(db: sqlite3.Connection, path: Path, schema: StoreSchema) -> None:
    """A file with no version is new, or an earlier Swarm's at version 1: each of version 1's
    tables it already holds must have version 1's columns."""
    expected = sqlite3.connect(":memory:")
    try:
        for statement in schema.versions[0]:
            expected.execute(statement)
        found = _tables(db)
        for table, columns in _tables(expected).items():
            held = found.get(table)
            if held is not None and held != columns:
                raise UserError(
                    f"{path} has no schema version, and its table {table} has the columns "
                    f"{', '.join(held)}, not {', '.join(columns)}: it is not what Swarm wrote; restore "
                    "it from a backup, or move it aside to start an empty one.")
    finally:
        expected.close()


def _tables(db: sqlite3.Connection) -> dict[str, list[str]]:
    """Each table's columns, in order."""
    names = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    return {name: [row[1] for row in db.execute("SELECT * FROM pragma_table_info(?)", (name,))]
            for name in names}
