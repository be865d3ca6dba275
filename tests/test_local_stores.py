"""The local SQLite stores that hold money and replay state, each with a schema version
(core.local_store): the site's nonce book, its receipt book and vouchers, the buyer's journal.

A store at any earlier version, the files Swarm wrote before stores had versions among them, is
upgraded in order and in one transaction, and keeps its rows: a nonce used before is still
refused, a receipt charged before is still owed, a journal still checks the claims it signed for.
A store newer than the code, or one that is not what Swarm wrote, is refused in one sentence and
left as it is."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anvil import dev_account
from core.errors import Refused, UserError
from core.local_store import StoreSchema, open_store
from ledger import serving
from ledger.serving import Account, DigestSigner, Domain, Voucher
from provider.auth import NonceBook
from provider.receipts import ReceiptBook
from wire.serving import ClaimRefused, Journal

pytestmark = pytest.mark.light

BUYER, PROVIDER = dev_account(4), dev_account(1)
DOMAIN = Domain(31337, "0x" + "11" * 20)
NOW = 1_800_000_000
EXAMPLES = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

# What each store's file held before stores had schema versions (user_version 0), as Swarm wrote it.
UNVERSIONED = {
    "nonces": """CREATE TABLE IF NOT EXISTS nonces (signer TEXT, nonce TEXT, expires_at INTEGER,
        PRIMARY KEY (signer, nonce))""",
    "receipts": """
        CREATE TABLE IF NOT EXISTS receipts (
            buyer TEXT NOT NULL,
            nonce TEXT NOT NULL,
            amount TEXT NOT NULL,
            timestamp INTEGER NOT NULL,
            lease TEXT NOT NULL,
            charge TEXT NOT NULL,     -- what its request cost: written once the answer is ready
            aggregated INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (buyer, nonce)
        );
        CREATE INDEX IF NOT EXISTS receipts_open ON receipts (buyer, aggregated);
        CREATE TABLE IF NOT EXISTS vouchers (
            buyer TEXT PRIMARY KEY,
            cumulative TEXT NOT NULL,
            signature BLOB NOT NULL,
            redeemed TEXT NOT NULL DEFAULT '0'   -- what the escrow paid of it, as last seen
        );""",
    "journal": """
        CREATE TABLE IF NOT EXISTS receipts (
            provider TEXT NOT NULL,
            nonce TEXT NOT NULL,
            amount TEXT NOT NULL,
            timestamp INTEGER NOT NULL,
            aggregated INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (provider, nonce)
        );
        CREATE TABLE IF NOT EXISTS vouchers (
            provider TEXT PRIMARY KEY,
            cumulative TEXT NOT NULL,
            signature BLOB NOT NULL
        );
        CREATE TABLE IF NOT EXISTS proposed (  -- a voucher signed and sent, the site's answer not yet seen
            provider TEXT PRIMARY KEY,
            cumulative TEXT NOT NULL,
            signature BLOB NOT NULL,
            nonces TEXT NOT NULL               -- the receipts it pays, hex, comma-separated
        );""",
}
SCHEMAS = {"nonces": NonceBook.SCHEMA, "receipts": ReceiptBook.SCHEMA, "journal": Journal.SCHEMA}


def at_version(path: Path, store: str, version: int, rows: Callable[[sqlite3.Connection], object]) -> None:
    """`store`'s file at `version` (0: as Swarm wrote it before versions), with `rows` written in it."""
    if version == 0:
        db = sqlite3.connect(path)
        db.executescript(UNVERSIONED[store])
    else:
        db = open_store(path, StoreSchema(SCHEMAS[store].versions[:version]))
    with db:
        rows(db)
    db.close()


def user_version(path: Path) -> int:
    db = sqlite3.connect(path)
    try:
        return int(db.execute("PRAGMA user_version").fetchone()[0])
    finally:
        db.close()


def every_row(path: Path) -> dict[str, list[tuple]]:
    db = sqlite3.connect(path)
    try:
        tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {table: sorted(db.execute(f"SELECT * FROM {table}").fetchall()) for table in tables}
    finally:
        db.close()


def _receipt_book(path: Path, clock: Callable[[], float] = lambda: NOW) -> ReceiptBook:
    def account(buyer: str) -> Account:
        return Account(buyer, PROVIDER.address, 10**30, 0, 0, 0)

    return ReceiptBook(path, DOMAIN, PROVIDER.address, 10**30, account, clock)


OPEN: dict[str, Callable[[Path], Any]] = {"nonces": NonceBook, "receipts": _receipt_book, "journal": Journal}


# ── the machinery ────────────────────────────────────────────────────────────
def _numbered(latest: int, broken: bool = False) -> StoreSchema:
    """Version 1 makes a log; version n > 1 adds table t<n> and logs n. `broken`: one more version,
    which adds its table and then fails."""
    versions = [("CREATE TABLE IF NOT EXISTS log (version INTEGER)", "INSERT INTO log VALUES (1)")]
    versions += [(f"CREATE TABLE t{n} (n INTEGER)", f"INSERT INTO log VALUES ({n})")
                 for n in range(2, latest + 1)]
    if broken:
        versions.append(("CREATE TABLE late (n INTEGER)", "INSERT INTO missing VALUES (1)"))
    return StoreSchema(tuple(versions))


@EXAMPLES
@given(latest=st.integers(1, 6), data=st.data())
def test_a_store_at_any_earlier_version_takes_every_later_one_once_and_in_order(
    tmp_path_factory: pytest.TempPathFactory, latest: int, data: st.DataObject
) -> None:
    start = data.draw(st.integers(0, latest), "start")
    path = tmp_path_factory.mktemp("store") / "store.db"
    if start:
        open_store(path, StoreSchema(_numbered(latest).versions[:start])).close()
    db = open_store(path, _numbered(latest))
    try:
        logged = [version for (version,) in db.execute("SELECT version FROM log ORDER BY rowid")]
        assert logged == list(range(1, latest + 1))
    finally:
        db.close()
    assert user_version(path) == latest
    again = every_row(path)
    open_store(path, _numbered(latest)).close()  # at the latest: nothing runs
    assert every_row(path) == again


def test_an_upgrade_that_fails_leaves_the_store_at_its_version_with_nothing_of_it_done(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.db"
    open_store(path, _numbered(2)).close()
    before = every_row(path)
    # a version SQLite refuses is a bug of ours: it keeps its traceback
    with pytest.raises(sqlite3.OperationalError, match="no such table: missing"):
        open_store(path, _numbered(4, broken=True))
    assert user_version(path) == 2
    assert every_row(path) == before  # neither t3, t4 nor late


def test_stores_opened_at_once_upgrade_once(tmp_path: Path) -> None:
    path, opened, errors = tmp_path / "store.db", [], []
    start = threading.Barrier(4)

    def open_it() -> None:
        start.wait()
        try:
            opened.append(open_store(path, _numbered(5)))
        except BaseException as exc:  # noqa: BLE001 -- reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for db in opened:
        db.close()
    assert errors == [] and len(opened) == 4
    assert every_row(path)["log"] == [(1,), (2,), (3,), (4,), (5,)]


@pytest.mark.parametrize("store", sorted(SCHEMAS))
def test_a_store_newer_than_this_swarm_is_refused_in_one_sentence_and_left_as_it_is(
    store: str, tmp_path: Path
) -> None:
    path = tmp_path / f"{store}.db"
    latest = SCHEMAS[store].latest
    at_version(path, store, latest, lambda db: db.execute(f"PRAGMA user_version = {latest + 1}"))
    before = every_row(path)
    with pytest.raises(UserError) as refused:
        OPEN[store](path)
    assert str(refused.value) == (f"{path} is at schema version {latest + 1}, newer than this Swarm reads "
                                  f"({latest}); upgrade Swarm.")
    assert (user_version(path), every_row(path)) == (latest + 1, before)


@pytest.mark.parametrize("store", sorted(SCHEMAS))
def test_an_unversioned_file_whose_tables_are_not_swarms_is_refused(store: str, tmp_path: Path) -> None:
    path = tmp_path / f"{store}.db"
    table = "nonces" if store == "nonces" else "receipts"
    db = sqlite3.connect(path)
    db.execute(f"CREATE TABLE {table} (who TEXT, what TEXT)")
    db.close()
    with pytest.raises(UserError, match=rf"^{path} has no schema version, and its table {table} has the "
                                        r"columns who, what, not .*: it is not what Swarm wrote; restore it"):
        OPEN[store](path)
    assert (user_version(path), every_row(path)) == (0, {table: []})


def test_a_file_that_is_not_a_database_is_refused_in_one_sentence(tmp_path: Path) -> None:
    path = tmp_path / "receipts.db"
    path.write_bytes(b"not a database " * 400)
    with pytest.raises(UserError, match=rf"^{path} is not a store this Swarm can read \(file is not a "
                                        r"database\); restore it from a backup, or move it aside"):
        _receipt_book(path)
    assert path.read_bytes() == b"not a database " * 400


def test_a_new_store_is_created_at_the_latest_version(tmp_path: Path) -> None:
    for store, schema in SCHEMAS.items():
        path = tmp_path / f"{store}.db"
        opened = OPEN[store](path)
        assert user_version(path) == schema.latest
        del opened


# ── the site's nonce book ────────────────────────────────────────────────────
@EXAMPLES
@given(version=st.integers(0, NonceBook.SCHEMA.latest - 1),
       used=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2**256 - 1), st.integers(-600, 600)),
                     max_size=20, unique_by=lambda u: (u[0], u[1])))
def test_a_nonce_book_of_an_earlier_version_still_refuses_every_nonce_used_before(
    tmp_path_factory: pytest.TempPathFactory, version: int, used: list[tuple[int, int, int]]
) -> None:
    signers = [dev_account(i).address for i in range(4)]
    path = tmp_path_factory.mktemp("nonces") / "nonces.db"
    at_version(path, "nonces", version, lambda db: db.executemany(
        "INSERT INTO nonces VALUES (?, ?, ?)",
        [(signers[signer].lower(), str(nonce), NOW + ttl) for signer, nonce, ttl in used]))
    book = NonceBook(path)
    try:
        for signer, nonce, ttl in used:
            assert book.use(signers[signer], nonce, NOW + 600, NOW) is (ttl < 0), "used, until it expires"
        assert book.use(signers[0], 2**256, NOW + 60, NOW)  # never used
    finally:
        book.close()
    db = sqlite3.connect(path)
    plan = " ".join(row[-1] for row in db.execute(
        "EXPLAIN QUERY PLAN DELETE FROM nonces WHERE expires_at < ?", (NOW,)))
    db.close()
    assert user_version(path) == NonceBook.SCHEMA.latest
    assert "nonces_expiry" in plan, "version 2: expired nonces are found by their expiry"


# ── the site's receipt book ──────────────────────────────────────────────────
@EXAMPLES
@given(charges=st.lists(st.tuples(st.integers(1, 10**24), st.booleans()), min_size=1, max_size=20),
       voucher=st.one_of(st.none(), st.tuples(st.integers(1, 10**24), st.integers(0, 10**24))))
def test_a_receipt_book_of_an_earlier_version_still_owes_every_charged_receipt(
    tmp_path_factory: pytest.TempPathFactory, charges: list[tuple[int, bool]],
    voucher: tuple[int, int] | None,
) -> None:
    """Version 0, as the site wrote it: its charged receipts, claimed, aggregated or not, and the
    buyer's latest voucher with what the escrow paid of it; a fresh receipt's nonce stays seen."""
    buyer = DigestSigner(BUYER.key)
    fresh = serving.sign_receipt(buyer, DOMAIN, PROVIDER.address, 10**25, nonce=1, timestamp=NOW - 5)
    rows = [(buyer.address, f"{nonce:x}", str(10**25), NOW - 5 if nonce == 1 else NOW - 3600, "lease-1",
             str(charge), int(aggregated)) for nonce, (charge, aggregated) in enumerate(charges, start=1)]
    signed = serving.sign_voucher(buyer, DOMAIN, PROVIDER.address, voucher[0]) if voucher else None

    def write(db: sqlite3.Connection) -> None:
        db.executemany("INSERT INTO receipts VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
        if signed is not None and voucher is not None:
            db.execute("INSERT INTO vouchers VALUES (?, ?, ?, ?)",
                       (buyer.address, str(signed.cumulative), signed.signature, str(voucher[1])))

    path = tmp_path_factory.mktemp("receipts") / "receipts.db"
    at_version(path, "receipts", 0, write)
    book = _receipt_book(path)
    try:
        open_charges = [(nonce, charge) for nonce, (charge, aggregated) in enumerate(charges, start=1)
                        if not aggregated]
        claim = book.claim(buyer.address)
        assert list(claim.receipts) == open_charges
        assert claim.previous == (voucher[0] if voucher else 0)
        assert book.owed(buyer.address) == {"receipts": sum(c for _, c in open_charges),
                                            "voucher": max(0, voucher[0] - voucher[1]) if voucher else 0}
        assert book.vouchers() == ([(signed, voucher[1])] if signed is not None and voucher else [])
        with pytest.raises(Refused, match="was used already") as replayed:
            book.accept(fresh.header(), "lease-1", 1)
        assert replayed.value.status == 409
        if open_charges:
            paid = serving.sign_voucher(buyer, DOMAIN, PROVIDER.address, claim.cumulative)
            assert book.aggregate(paid, [nonce for nonce, _ in open_charges]) == claim.cumulative
            assert book.owed(buyer.address)["receipts"] == 0
    finally:
        book.close()
    assert user_version(path) == ReceiptBook.SCHEMA.latest


# ── the buyer's journal ──────────────────────────────────────────────────────
@EXAMPLES
@given(receipts=st.lists(st.tuples(st.integers(1, 10**24), st.booleans()), min_size=1, max_size=20),
       previous=st.integers(0, 10**24))
def test_a_journal_of_an_earlier_version_still_checks_a_claim_against_the_receipts_it_signed(
    tmp_path_factory: pytest.TempPathFactory, receipts: list[tuple[int, bool]], previous: int,
) -> None:
    provider = PROVIDER.address
    signature = bytes(65)

    def write(db: sqlite3.Connection) -> None:
        db.executemany("INSERT INTO receipts VALUES (?, ?, ?, ?, ?)",
                       [(provider, f"{nonce:x}", str(amount), NOW, int(aggregated))
                        for nonce, (amount, aggregated) in enumerate(receipts, start=1)])
        if previous:
            db.execute("INSERT INTO vouchers VALUES (?, ?, ?)", (provider, str(previous), signature))

    path = tmp_path_factory.mktemp("journal") / "journal.db"
    at_version(path, "journal", 0, write)
    journal = Journal(path)
    expected = Voucher("", provider, previous, signature) if previous else None
    assert journal.last_voucher(provider) == expected
    unpaid = [(nonce, amount) for nonce, (amount, aggregated) in enumerate(receipts, start=1)
              if not aggregated]
    assert journal.check_claim(provider, previous, unpaid) == previous + sum(a for _, a in unpaid)
    with pytest.raises(ClaimRefused, match="which this buyer never signed"):
        journal.check_claim(provider, previous, [(len(receipts) + 1, 1)])
    if len(unpaid) < len(receipts):
        paid = next(n for n, (_, aggregated) in enumerate(receipts, start=1) if aggregated)
        with pytest.raises(ClaimRefused, match="which a voucher paid already"):
            journal.check_claim(provider, previous, [(paid, 1)])
    if unpaid:
        nonce, amount = unpaid[0]
        with pytest.raises(ClaimRefused, match=r"signed for .* wei at most"):
            journal.check_claim(provider, previous, [(nonce, amount + 1)])
    assert user_version(path) == Journal.SCHEMA.latest


def test_stores_keep_working_once_upgraded(tmp_path: Path) -> None:
    """What an upgraded store writes, it reads back when opened again."""
    path = tmp_path / "nonces.db"
    at_version(path, "nonces", 0, lambda db: None)
    book = NonceBook(path)
    assert book.use(BUYER.address, 7, int(time.time()) + 60, int(time.time()))
    book.close()
    again = NonceBook(path)
    try:
        assert not again.use(BUYER.address, 7, int(time.time()) + 60, int(time.time()))
    finally:
        again.close()
