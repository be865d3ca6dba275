"""What buyers owe a site for served requests (docs/architecture.md §12): their receipts, checked
and kept, aggregated into vouchers they sign, and redeemed.

Every request to a serving lease carries a receipt (`ledger.serving.Receipt`). The book accepts
it only if its signature recovers to a buyer, it is fresh (its timestamp within RECEIPT_TTL_S
of the site's clock), its nonce is unseen, its amount covers the lease's price, and the buyer's
spendable deposit (the escrow's balance less what is thawing) covers it on top of everything
the buyer already owes the site: the latest voucher not yet redeemed, and every receipt not yet
aggregated. What the site may be owed in receipts alone is capped (`cap`): past it, the buyer
must sign a voucher first (402, "voucher due").

A receipt is checked before its request is forwarded and held in memory while the request
runs (its nonce seen, its amount counted as owed); it is written with its charge (what the
request cost: the price, or its tokens at the price per token, never more than the receipt's
amount) once the answer is ready, before the answer is sent. A request the site failed is
charged nothing and not written; its nonce stays seen while the site runs. A site killed
mid-request forgets that request's receipt, whose answer never reached the buyer either: it
was not served, and is not charged. Receipts are checked by a `ReceiptVerifier` (the buyer's
key recovered once, then verified against). The buyer then asks for a claim (`claim`): the
previous voucher and every charged receipt since, and signs a voucher for the previous
cumulative plus their charges, which the book checks and keeps (`aggregate`). A redeemer
sends the latest voucher of each buyer to the escrow.

The book is SQLite in WAL mode: a site killed at any moment keeps every receipt it charged and
every voucher it was given, so nothing answered goes unpaid and nothing is charged twice. Its
schema is versioned (`ReceiptBook.SCHEMA`, core.local_store): a book an earlier Swarm wrote is upgraded in one
transaction when the site opens it, and one a newer Swarm wrote is refused.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from core.errors import Refused
from core.local_store import StoreSchema, open_store
from ledger.errors import InvalidInput
from ledger.keys import InvalidSignature
from ledger.serving import Account, Domain, Receipt, ReceiptVerifier, Voucher, check_voucher

RECEIPT_TTL_S = 120  # a receipt older than this, by its own timestamp, is expired
CLOCK_SKEW_S = 30  # one dated further ahead than this is refused too
ACCOUNT_FRESH_S = 2.0  # how long the escrow's word on a buyer's deposit is trusted before it is read again
CLAIM_LIMIT = 10_000  # receipts in one claim; a buyer signs again for the rest


class VoucherDue(Refused):
    """A request refused until the buyer signs a voucher for what it owes (HTTP 402): the site
    answers with Swarm-Voucher-Due, and the buyer's client aggregates and calls again."""

    due = True

    def __init__(self, message: str) -> None:
        super().__init__(402, message)


@dataclass(frozen=True)
class Ticket:
    """A receipt the book accepted for one request."""

    buyer: str
    nonce: int
    amount: int
    timestamp: int = 0
    lease: str = ""


@dataclass(frozen=True)
class Claim:
    """What the site asks a buyer to sign: the previous voucher's cumulative (0 for none) plus the
    charges of `receipts` (nonce, charge)."""

    buyer: str
    previous: int
    receipts: tuple[tuple[int, int], ...]

    @property
    def cumulative(self) -> int:
        return self.previous + sum(charge for _, charge in self.receipts)

    def as_dict(self) -> dict[str, object]:
        return {"buyer": self.buyer, "previous": str(self.previous), "cumulative": str(self.cumulative),
                "receipts": [[f"{nonce:x}", str(charge)] for nonce, charge in self.receipts]}


class ReceiptBook:
    """One site's receipts and vouchers, for its provider, in one escrow's domain."""

    SCHEMA = StoreSchema((
        ("""CREATE TABLE IF NOT EXISTS receipts (
            buyer TEXT NOT NULL,
            nonce TEXT NOT NULL,
            amount TEXT NOT NULL,
            timestamp INTEGER NOT NULL,
            lease TEXT NOT NULL,
            charge TEXT NOT NULL,     -- what its request cost: written once the answer is ready
            aggregated INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (buyer, nonce))""",
         "CREATE INDEX IF NOT EXISTS receipts_open ON receipts (buyer, aggregated)",
         """CREATE TABLE IF NOT EXISTS vouchers (
            buyer TEXT PRIMARY KEY,
            cumulative TEXT NOT NULL,
            signature BLOB NOT NULL,
            redeemed TEXT NOT NULL DEFAULT '0'   -- what the escrow paid of it, as last seen
         )"""),
    ))

    def __init__(self, path: Path, domain: Domain, provider: str, cap: int,
                 accounts: Callable[[str], Account], clock: Callable[[], float] = time.time) -> None:
        self.domain = domain
        self.provider = provider
        self.cap = cap
        self._accounts = accounts
        self._clock = clock
        self._seen_accounts: dict[str, tuple[float, Account]] = {}
        self._pending_by_buyer: dict[str, int] = {}
        self._verifier = ReceiptVerifier(domain, provider)
        self._db = open_store(path, self.SCHEMA, wal=True)
        self._lock = threading.Lock()
        # (buyer, nonce) → timestamp of every receipt still fresh enough to be presented again
        horizon = int(clock()) - RECEIPT_TTL_S - CLOCK_SKEW_S
        self._seen: dict[tuple[str, int], int] = {
            (buyer, int(nonce, 16)): timestamp for buyer, nonce, timestamp in self._db.execute(
                "SELECT buyer, nonce, timestamp FROM receipts WHERE timestamp >= ?", (horizon,))}
        self._since_forgotten = 0
        self._vouchers: dict[str, tuple[int, bytes, int] | None] = {}  # as `_voucher` reads them

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # ── a request ────────────────────────────────────────────────────────────
    def accept(self, header: str | None, lease: str, price: int) -> Ticket:
        """Takes the receipt of one request to `lease`, whose least charge is `price`; Refused says
        why not."""
        if not header:
            raise Refused(402, "The request carries no Swarm-Receipt; sign one per request for this "
                               "provider (`swarm serve call` and Buyer.call do).")
        try:
            receipt = Receipt.from_header(header, self.provider)
        except InvalidInput as exc:
            raise Refused(400, str(exc)) from None
        now = self._clock()
        if receipt.timestamp < now - RECEIPT_TTL_S:
            raise Refused(402, f"The receipt is expired: signed at {receipt.timestamp}, more than "
                               f"{RECEIPT_TTL_S} s ago; sign a fresh one.")
        if receipt.timestamp > now + CLOCK_SKEW_S:
            raise Refused(402, f"The receipt is dated {receipt.timestamp}, ahead of the site's clock by more "
                               f"than {CLOCK_SKEW_S} s; check the buyer's clock.")
        if receipt.amount < price:
            raise Refused(402, f"The receipt pays {receipt.amount} wei, less than this lease's price of "
                               f"{price} wei a request; sign one for at least the price.")
        try:
            buyer = self._verifier.signer(receipt)
        except InvalidSignature as exc:
            raise Refused(401, f"The receipt's signature is not valid ({exc}); sign it with the buyer's "
                               "key.") from None
        key = (buyer, receipt.nonce)
        account = self._account(buyer, fresh=False)
        for attempt in range(2):
            with self._lock:  # checked and counted at once: two requests never spend the same wei
                if key in self._seen:
                    raise Refused(409, f"The receipt with nonce {receipt.nonce:x} was used already; sign a "
                                       "new one for each request.")
                pending = self._pending(buyer)
                if pending + receipt.amount > self.cap:
                    raise VoucherDue(f"Buyer {buyer} owes this site {pending} wei in receipts not yet in a "
                                     "voucher, and this one would take it past the site's cap of "
                                     f"{self.cap}; sign a voucher for them first (POST /v1/serving/claim, "
                                     "then /v1/serving/voucher).")
                owed = self._voucher_unredeemed(buyer) + pending + receipt.amount
                if owed <= account.spendable:
                    self._seen[key] = receipt.timestamp
                    self._pending_by_buyer[buyer] = pending + receipt.amount
                    self._forget_old(now)
                    return Ticket(buyer, receipt.nonce, receipt.amount, receipt.timestamp, lease)
            if attempt == 0:
                account = self._account(buyer, fresh=True)  # a deposit made a moment ago counts
        raise Refused(402, f"Buyer {buyer}'s deposit for this provider can spend {account.spendable} wei, "
                           f"less than the {owed} wei it would owe with this request; deposit more "
                           "(`swarm serve deposit`).")

    def charge(self, ticket: Ticket, amount: int) -> int:
        """Records what the ticket's request cost: at most the receipt's amount (0: the site failed
        it). Returns the charge."""
        charge = max(0, min(amount, ticket.amount))
        with self._lock:
            written = charge > 0 and self._db.execute(
                "INSERT OR IGNORE INTO receipts (buyer, nonce, amount, timestamp, lease, charge) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (ticket.buyer, f"{ticket.nonce:x}", str(ticket.amount), ticket.timestamp, ticket.lease,
                 str(charge))).rowcount == 1
            if ticket.buyer in self._pending_by_buyer and (written or charge == 0):
                self._pending_by_buyer[ticket.buyer] -= ticket.amount - charge
        return charge

    # ── aggregation ──────────────────────────────────────────────────────────
    def claim(self, buyer: str) -> Claim:
        """The receipts of `buyer` charged and not yet in a voucher, with the previous voucher."""
        with self._lock:
            rows = self._db.execute(
                "SELECT nonce, charge FROM receipts WHERE buyer = ? AND aggregated = 0 "
                "AND charge IS NOT NULL AND charge != '0' ORDER BY rowid LIMIT ?",
                (buyer, CLAIM_LIMIT)).fetchall()
            previous = self._voucher(buyer)
        return Claim(buyer, previous[0] if previous else 0, tuple((int(n, 16), int(c)) for n, c in rows))

    def aggregate(self, voucher: Voucher, nonces: Iterable[int]) -> int:
        """Keeps `voucher` as its buyer's latest, if it is the buyer's, for this provider, and adds
        to the previous voucher exactly the charges of `nonces` (receipts charged, not yet
        aggregated); marks them aggregated. The same voucher again is accepted as it stands.
        Returns its cumulative."""
        if voucher.provider != self.provider:
            raise Refused(400, f"The voucher is for provider {voucher.provider}, not this site's "
                               f"{self.provider}.")
        try:
            check_voucher(self.domain, voucher)
        except InvalidSignature as exc:
            raise Refused(401, str(exc)) from None
        keys = [f"{n:x}" for n in set(nonces)]
        with self._lock:
            previous = self._voucher(voucher.buyer)
            if previous is not None and (previous[0], previous[1]) == (voucher.cumulative, voucher.signature):
                return voucher.cumulative  # sent twice: it stands
            charges = self._charges(voucher.buyer, keys)
            if len(charges) != len(keys):
                raise Refused(409, "The voucher names receipts this site has no charge for, or aggregated "
                                   "already; ask for a new claim.")
            expected = (previous[0] if previous else 0) + sum(charges)
            if voucher.cumulative != expected:
                raise Refused(409, f"The voucher's cumulative {voucher.cumulative} is not the previous "
                                   f"voucher's plus its receipts' charges ({expected}); ask for a new claim.")
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for start in range(0, len(keys), 500):
                    chunk = keys[start:start + 500]
                    marks = ",".join("?" * len(chunk))
                    self._db.execute(
                        f"UPDATE receipts SET aggregated = 1 WHERE buyer = ? AND nonce IN ({marks})",
                        (voucher.buyer, *chunk))
                self._db.execute(
                    "INSERT INTO vouchers (buyer, cumulative, signature) VALUES (?, ?, ?) "
                    "ON CONFLICT (buyer) DO UPDATE SET cumulative = excluded.cumulative, "
                    "signature = excluded.signature",
                    (voucher.buyer, str(voucher.cumulative), voucher.signature))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            redeemed = previous[2] if previous else 0
            self._vouchers[voucher.buyer] = (voucher.cumulative, voucher.signature, redeemed)
            if voucher.buyer in self._pending_by_buyer:
                self._pending_by_buyer[voucher.buyer] -= sum(charges)
        return voucher.cumulative

    # ── redemption ───────────────────────────────────────────────────────────
    def vouchers(self) -> list[tuple[Voucher, int]]:
        """Every buyer's latest voucher and what the escrow paid of it, as last recorded."""
        with self._lock:
            rows = self._db.execute("SELECT buyer, cumulative, signature, redeemed FROM vouchers").fetchall()
        return [(Voucher(buyer, self.provider, int(cumulative), bytes(signature)), int(redeemed))
                for buyer, cumulative, signature, redeemed in rows]

    def redeemed(self, buyer: str, amount: int) -> None:
        """Records what the escrow has paid for `buyer` so far (its `redeemed`)."""
        with self._lock:
            self._db.execute("UPDATE vouchers SET redeemed = ? WHERE buyer = ?", (str(amount), buyer))
            kept = self._vouchers.get(buyer)
            if kept is not None:
                self._vouchers[buyer] = (kept[0], kept[1], amount)
        self._seen_accounts.pop(buyer, None)

    def owed(self, buyer: str) -> dict[str, int]:
        """What `buyer` owes the site: in receipts not yet aggregated (charged, and in flight), and in
        its latest voucher not yet redeemed."""
        with self._lock:
            return {"receipts": self._pending(buyer), "voucher": self._voucher_unredeemed(buyer)}

    def prune(self) -> int:
        """Forgets aggregated receipts too old to be presented again."""
        horizon = int(self._clock()) - RECEIPT_TTL_S - CLOCK_SKEW_S
        with self._lock:
            return self._db.execute("DELETE FROM receipts WHERE timestamp < ? AND aggregated = 1",
                                    (horizon,)).rowcount

    # ── inside the lock ──────────────────────────────────────────────────────
    def _pending(self, buyer: str) -> int:
        """Receipts not yet aggregated: at their charge once charged, at their amount while in flight
        (kept in memory; the charged ones read from the table once per buyer)."""
        pending = self._pending_by_buyer.get(buyer)
        if pending is None:
            rows = self._db.execute("SELECT charge FROM receipts WHERE buyer = ? AND aggregated = 0",
                                    (buyer,)).fetchall()
            pending = sum(int(charge) for (charge,) in rows)
            self._pending_by_buyer[buyer] = pending
        return pending

    def _forget_old(self, now: float) -> None:
        """Every 10,000 receipts, forgets the nonces of those too old to be presented again."""
        self._since_forgotten += 1
        if self._since_forgotten < 10_000:
            return
        self._since_forgotten = 0
        horizon = now - RECEIPT_TTL_S - CLOCK_SKEW_S
        self._seen = {key: stamp for key, stamp in self._seen.items() if stamp >= horizon}

    def _voucher(self, buyer: str) -> tuple[int, bytes, int] | None:
        """The buyer's latest voucher (cumulative, signature, redeemed), read once and then kept as
        this book writes it: every call asks."""
        if buyer not in self._vouchers:
            row = self._db.execute("SELECT cumulative, signature, redeemed FROM vouchers WHERE buyer = ?",
                                   (buyer,)).fetchone()
            self._vouchers[buyer] = (int(row[0]), bytes(row[1]), int(row[2])) if row else None
        return self._vouchers[buyer]

    def _voucher_unredeemed(self, buyer: str) -> int:
        voucher = self._voucher(buyer)
        if voucher is None:
            return 0
        account = self._seen_accounts.get(buyer)
        redeemed = max(voucher[2], account[1].redeemed if account else 0)
        return max(0, voucher[0] - redeemed)

    def _charges(self, buyer: str, keys: list[str]) -> list[int]:
        found: list[int] = []
        for start in range(0, len(keys), 500):
            chunk = keys[start:start + 500]
            found += [int(c) for (c,) in self._db.execute(
                f"SELECT charge FROM receipts WHERE buyer = ? AND aggregated = 0 AND charge IS NOT NULL "
                f"AND charge != '0' AND nonce IN ({','.join('?' * len(chunk))})", (buyer, *chunk))]
        return found

    def _account(self, buyer: str, fresh: bool) -> Account:
        seen = self._seen_accounts.get(buyer)
        now = time.monotonic()
        if fresh or seen is None or now - seen[0] > ACCOUNT_FRESH_S:
            seen = (now, self._accounts(buyer))
            self._seen_accounts[buyer] = seen
        return seen[1]
