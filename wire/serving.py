"""A buyer's client of a site's serving (docs/architecture.md §12): deploy a model on a provider's
site, call it paying each request with a signed receipt, and sign the vouchers the site claims.
Buyers use it through `swarm serve` (market.serving reads their specs), the oracle for its
canaries.

A buyer deposits SWARM for a provider in the serving escrow once (`ledger.serving.deposit`),
then deploys (`ServingClient.deploy`, a signed site request) and calls. Each call carries a
fresh receipt for the lease's price (for a text model, its price per token times the call's
`max_tokens`), written to the buyer's journal before it is sent. When the site asks for a
voucher (HTTP 402 with Swarm-Voucher-Due) or whenever the buyer chooses (`aggregate`), the
client takes the site's claim, checks every receipt in it against its journal (signed by this
buyer, for this provider, not aggregated before, charged no more than its amount) and that the
claim starts from the last voucher the buyer signed, then signs the new cumulative voucher.
The journal (SQLite in SWARM_HOME) outlives the process, so a buyer killed mid-stream checks
the site's next claim as well as it would have: nothing is paid that it did not sign for, and
nothing twice."""

from __future__ import annotations

import collections
import http.client
import json
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compute.serve_order import ServeOrder
from core.errors import Refused
from core.local_store import StoreSchema, open_store
from ledger import serving
from ledger.client import Swarm
from ledger.errors import InvalidInput, SwarmError
from ledger.keys import DigestSigner
from ledger.serving import Domain, Receipt, Voucher
from ledger.tx import Sender
from wire.client import SiteAddress, SiteClient, SiteUnreachable, pinned_request
from wire.tls import check_peer, pinned_context

CALL_TIMEOUT_S = 120.0


class ClaimRefused(SwarmError):
    """A site's claim the buyer will not sign: it names a receipt the buyer did not sign, charges
    more than a receipt's amount, counts one twice, or starts from another voucher."""


@dataclass(frozen=True)
class Answer:
    """One call's answer: the lease's status and body, and what the call cost."""

    status: int
    body: Any
    charged: int


class Journal:
    """Every receipt a buyer signed, per provider, and the last voucher it signed for each; its
    schema versioned (core.local_store), so a journal an earlier Swarm wrote is upgraded when opened
    and one a newer Swarm wrote is refused."""

    SCHEMA = StoreSchema((
        ("""CREATE TABLE IF NOT EXISTS receipts (
            provider TEXT NOT NULL,
            nonce TEXT NOT NULL,
            amount TEXT NOT NULL,
            timestamp INTEGER NOT NULL,
            aggregated INTEGER NOT NULL DEFAULT 0,
            PRIMARY KEY (provider, nonce))""",
         """CREATE TABLE IF NOT EXISTS vouchers (
            provider TEXT PRIMARY KEY,
            cumulative TEXT NOT NULL,
            signature BLOB NOT NULL)""",
         # a voucher signed and sent, the site's answer not yet seen
         """CREATE TABLE IF NOT EXISTS proposed (
            provider TEXT PRIMARY KEY,
            cumulative TEXT NOT NULL,
            signature BLOB NOT NULL,
            nonces TEXT NOT NULL             -- the receipts it pays, hex, comma-separated
         )"""),
    ))

    def __init__(self, path: Path) -> None:
        self._db = open_store(path, self.SCHEMA, wal=True)
        self._lock = threading.Lock()

    @classmethod
    def of(cls, home: Path, domain: Domain, buyer: str) -> Journal:
        return cls(home / "serving" / f"{domain.chain_id}-{domain.escrow.lower()}-{buyer.lower()}.db")

    def signed(self, receipt: Receipt) -> None:
        with self._lock:
            self._db.execute("INSERT INTO receipts (provider, nonce, amount, timestamp) VALUES (?, ?, ?, ?)",
                             (receipt.provider, f"{receipt.nonce:x}", str(receipt.amount), receipt.timestamp))

    def last_voucher(self, provider: str) -> Voucher | None:
        with self._lock:
            row = self._db.execute("SELECT cumulative, signature FROM vouchers WHERE provider = ?",
                                   (provider,)).fetchone()
        return None if row is None else Voucher("", provider, int(row[0]), bytes(row[1]))

    def propose(self, voucher: Voucher, nonces: list[int]) -> None:
        """Keeps a voucher about to be sent, with the receipts it pays, until the site's answer is
        seen: a buyer killed after the site took it learns so from the next claim."""
        with self._lock:
            self._db.execute(
                "INSERT INTO proposed (provider, cumulative, signature, nonces) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (provider) DO UPDATE SET cumulative = excluded.cumulative, "
                "signature = excluded.signature, nonces = excluded.nonces",
                (voucher.provider, str(voucher.cumulative), voucher.signature,
                 ",".join(f"{n:x}" for n in nonces)))

    def check_claim(self, provider: str, previous: int, receipts: list[tuple[int, int]]) -> int:
        """The cumulative to sign for a site's claim, or ClaimRefused. A claim that starts from the
        voucher proposed last shows the site took it: it becomes the last voucher here too; one that
        starts from the voucher before shows it did not: its receipts are claimed again."""
        last = self.last_voucher(provider)
        with self._lock:
            row = self._db.execute("SELECT cumulative, signature, nonces FROM proposed WHERE provider = ?",
                                   (provider,)).fetchone()
        if row is not None:
            if previous == int(row[0]):
                taken = Voucher("", provider, int(row[0]), bytes(row[1]))
                self.aggregated(taken, [int(n, 16) for n in row[2].split(",") if n])
                last = taken
            elif previous == (last.cumulative if last else 0):
                with self._lock:
                    self._db.execute("DELETE FROM proposed WHERE provider = ?", (provider,))
        if previous != (last.cumulative if last else 0):
            signed = last.cumulative if last else 0
            raise ClaimRefused(f"The site's claim starts from a voucher of {previous} wei, but the last this "
                               f"buyer signed for {provider} is {signed} wei; it signs nothing more until "
                               "they agree.")
        if len({nonce for nonce, _ in receipts}) != len(receipts):
            raise ClaimRefused("The site's claim names a receipt twice.")
        total = 0
        with self._lock:
            for nonce, charge in receipts:
                row = self._db.execute(
                    "SELECT amount, aggregated FROM receipts WHERE provider = ? AND nonce = ?",
                    (provider, f"{nonce:x}")).fetchone()
                if row is None:
                    raise ClaimRefused(f"The site's claim names receipt {nonce:x}, which this buyer never "
                                       f"signed for {provider}.")
                if row[1]:
                    raise ClaimRefused(f"The site's claim names receipt {nonce:x}, which a voucher paid "
                                       "already.")
                if not 0 < charge <= int(row[0]):
                    raise ClaimRefused(f"The site's claim charges {charge} wei for receipt {nonce:x}, signed "
                                       f"for {row[0]} wei at most.")
                total += charge
        return previous + total

    def aggregated(self, voucher: Voucher, nonces: list[int]) -> None:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany("UPDATE receipts SET aggregated = 1 WHERE provider = ? AND nonce = ?",
                                     [(voucher.provider, f"{n:x}") for n in nonces])
                self._db.execute(
                    "INSERT INTO vouchers (provider, cumulative, signature) VALUES (?, ?, ?) "
                    "ON CONFLICT (provider) DO UPDATE SET cumulative = excluded.cumulative, "
                    "signature = excluded.signature",
                    (voucher.provider, str(voucher.cumulative), voucher.signature))
                self._db.execute("DELETE FROM proposed WHERE provider = ?", (voucher.provider,))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise


class ReceiptPool:
    """Receipts for a per-request price, signed and journaled ahead by a daemon thread, a few per
    amount: a call takes one that is fresh (signed within FRESH_S, well inside the site's 120 s)
    or signs its own. A receipt signed and never sent is in the journal only; no site claims it."""

    SIZE = 4
    FRESH_S = 60.0

    def __init__(self, sign: weakref.WeakMethod) -> None:
        self._sign = sign  # the client's, held weakly: a pool never keeps its client alive
        self._ready: dict[int, collections.deque[Receipt]] = {}
        self._wanted = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None

    def take(self, amount: int) -> Receipt | None:
        with self._wanted:
            ready = self._ready.setdefault(amount, collections.deque())
            receipt = None
            while ready and receipt is None:
                candidate = ready.popleft()
                if time.time() - candidate.timestamp < self.FRESH_S:
                    receipt = candidate
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._fill, daemon=True, name="swarm-receipts")
                self._thread.start()
            self._wanted.notify()
            return receipt

    def _fill(self) -> None:
        while True:
            with self._wanted:
                while not self._closed and all(len(r) >= self.SIZE for r in self._ready.values()):
                    self._wanted.wait()
                if self._closed:
                    return
                amount = next(a for a, r in self._ready.items() if len(r) < self.SIZE)
            sign = self._sign()
            if sign is None:
                return  # its client is gone
            try:
                receipt = sign(amount)  # outside the lock: the journal's write takes its time
            except Exception:  # noqa: BLE001 -- the calls sign their own meanwhile
                del sign
                time.sleep(1.0)
                continue
            del sign  # not held while waiting: the client may go
            with self._wanted:
                self._ready[amount].append(receipt)

    def close(self) -> None:
        with self._wanted:
            self._closed = True
            self._wanted.notify_all()


class ServingClient:
    """One buyer's serving with one provider's site."""

    def __init__(self, swarm: Swarm, sender: Sender, home: Path, site: SiteAddress) -> None:
        self.swarm = swarm
        self.sender = sender
        self.site = site
        self.domain = serving.domain_of(swarm)
        self.signer: DigestSigner = sender.digest_signer()
        self.journal = Journal.of(home, self.domain, sender.address)
        self.client = SiteClient(site, sender.sign_typed_data, swarm.chain.chain_id, swarm.market.address)
        self._local = threading.local()
        self._aggregating = threading.Lock()  # one claim at a time: two would name the same receipts
        self._prices: dict[str, tuple[int, int, int]] = {}  # lease → (per request, per token, max tokens)
        # Receipts signed and journaled ahead of the calls they pay for, per amount, by a thread of
        # their own: a call takes one instead of signing on its way out (ReceiptPool).
        # The pool holds this client weakly: a client no one holds is collected with its connections,
        # and its pool's thread ends.
        self._pool = ReceiptPool(weakref.WeakMethod(self._signed))
        weakref.finalize(self, self._pool.close)

    @property
    def provider(self) -> str:
        return self.site.provider

    # ── the lease ────────────────────────────────────────────────────────────
    def deploy(self, order: ServeOrder) -> dict[str, Any]:
        return self.client._call("POST", "/v1/serving", "serve.deploy", 0, order.to_json())

    def leases(self) -> list[dict[str, Any]]:
        """The site's serving leases (public): what each serves, at what price, until when."""
        status, payload = self._request("GET", "/v1/serving", b"", {})
        listed = self._json(status, payload)
        leases = listed.get("leases") if isinstance(listed, dict) else None
        if not isinstance(leases, list):
            raise Refused(502, f"The site of {self.provider} did not list its serving leases.")
        return leases

    def info(self, lease: str) -> dict[str, Any]:
        status, payload = self._request("GET", f"/v1/serving/{lease}", b"", {})
        return self._json(status, payload)

    def stop(self, lease: str) -> dict[str, Any]:
        number = int(lease.removeprefix("serve-")) if lease.removeprefix("serve-").isdigit() else 0
        return self.client._call("POST", f"/v1/serving/{lease}/stop", "serve.stop", number)

    def wait_serving(self, lease: str, timeout_s: float = 180.0) -> dict[str, Any]:
        """The lease's info once it serves; SwarmError if it failed or did not start in time."""
        deadline = time.monotonic() + timeout_s
        while True:
            info = self.info(lease)
            if info["state"] == "serving":
                return info
            if info["state"] in ("ended", "failed"):
                raise SwarmError(f"Serving lease {lease} is {info['state']}; it never served.")
            if time.monotonic() > deadline:
                raise SwarmError(f"Serving lease {lease} was still {info['state']} after {timeout_s:.0f} s.")
            time.sleep(0.5)

    # ── calls ────────────────────────────────────────────────────────────────
    def call(self, lease: str, body: dict[str, Any]) -> Answer:
        """One call, paid with a fresh receipt; if the site asks for a voucher first, the client
        signs the site's claim (checked against the journal) and calls again."""
        route, amount = self._terms(lease, body)
        for attempt in range(2):
            receipt = self._pool.take(amount) if route == "predict" else None
            receipt = receipt or self._signed(amount)
            status, payload, headers = self._send(f"/v1/serving/{lease}/{route}", json.dumps(body).encode(),
                                                  receipt)
            charged = int(headers.get("swarm-charged", "0") or 0)
            if status == 402 and headers.get("swarm-voucher-due") and attempt == 0:
                self.aggregate()
                continue
            try:
                parsed = json.loads(payload)
            except ValueError:
                parsed = payload.decode(errors="replace")
            return Answer(status, parsed, charged)
        raise AssertionError("unreachable")

    def _signed(self, amount: int) -> Receipt:
        """A fresh receipt for `amount`, in the journal before anyone may send it."""
        receipt = serving.sign_receipt(self.signer, self.domain, self.provider, amount)
        self.journal.signed(receipt)
        return receipt

    def close(self) -> None:
        """Stops signing receipts ahead (those signed and not sent are never claimed)."""
        self._pool.close()

    def _terms(self, lease: str, body: dict[str, Any]) -> tuple[str, int]:
        if lease not in self._prices:
            info = self.info(lease)
            self._prices[lease] = (int(info["price_per_request"]), int(info["price_per_token"]),
                                   int(info["max_tokens"]))
        per_request, per_token, _cap = self._prices[lease]
        if per_request:
            return "predict", per_request
        tokens = body.get("max_tokens", 16)
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 1:
            raise InvalidInput(f"max_tokens must be a whole number of at least 1, got {tokens!r}.")
        return "v1/completions", per_token * tokens

    def _send(self, path: str, body: bytes, receipt: Receipt) -> tuple[int, bytes, dict[str, str]]:
        """One call on this thread's kept-alive connection (made again once if the site closed it)."""
        headers = {"Content-Type": "application/json", "Swarm-Receipt": receipt.header()}
        for attempt in range(2):
            connection = self._connection()
            try:
                connection.request("POST", path, body=body, headers=headers)
                response = connection.getresponse()
                payload = response.read()
                return response.status, payload, {k.lower(): v for k, v in response.getheaders()}
            except (OSError, http.client.HTTPException) as exc:
                connection.close()
                self._local.connection = None
                if attempt == 1:
                    raise SiteUnreachable(f"The site of {self.provider} at {self.site.url} did not answer "
                                          f"({type(exc).__name__}).") from exc
        raise AssertionError("unreachable")

    def _connection(self) -> http.client.HTTPSConnection:
        connection = getattr(self._local, "connection", None)
        if connection is None:
            host, _, port = self.site.url.removeprefix("https://").rstrip("/").rpartition(":")
            connection = http.client.HTTPSConnection(host, int(port), context=pinned_context(),
                                                     timeout=CALL_TIMEOUT_S)
            connection.connect()
            check_peer(connection.sock, self.site.fingerprint)
            self._local.connection = connection
        return connection

    # ── vouchers ─────────────────────────────────────────────────────────────
    def aggregate(self) -> Voucher | None:
        """Signs vouchers for the site's claims, each once checked, until it claims nothing more;
        the last voucher, or None when nothing was claimed."""
        last = None
        with self._aggregating:
            while (voucher := self._aggregate()) is not None:
                last = voucher
        return last

    def _aggregate(self) -> Voucher | None:
        status, payload = self._request("POST", "/v1/serving/claim",
                                        json.dumps({"buyer": self.sender.address}).encode(), {})
        claim = self._json(status, payload)
        receipts = [(int(n, 16), int(c)) for n, c in claim["receipts"]]
        if not receipts:
            return None
        cumulative = self.journal.check_claim(self.provider, int(claim["previous"]), receipts)
        voucher = serving.sign_voucher(self.signer, self.domain, self.provider, cumulative)
        nonces = [f"{n:x}" for n, _ in receipts]
        body = json.dumps({"voucher": voucher.as_dict(), "receipts": nonces}).encode()
        self.journal.propose(voucher, [n for n, _ in receipts])  # before it is sent, as a receipt is
        self._json(*self._request("POST", "/v1/serving/voucher", body, {}))
        self.journal.aggregated(voucher, [n for n, _ in receipts])
        return voucher

    def _request(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        status, payload, _ = pinned_request(self.site, method, path, body,
                                            headers | {"Content-Type": "application/json"})
        return status, payload

    def _json(self, status: int, payload: bytes) -> Any:
        try:
            answer = json.loads(payload)
        except ValueError:
            answer = None
        if status != 200:
            message = answer.get("error") if isinstance(answer, dict) else None
            raise Refused(status, message or f"HTTP {status}")
        return answer
