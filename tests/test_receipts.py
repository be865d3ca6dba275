"""A site's receipt book against a real anvil's escrow: each request's receipt is checked (fresh,
unseen, signed, paying the price, covered by the buyer's deposit on top of all it owes, within the
site's cap), charged, claimed, aggregated into a voucher the buyer signs and redeemed, with every
wei accounted for; a forged, replayed, underfunded or expired receipt is refused with a status and
one sentence, and a book opened again after a crash keeps what it took."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anvil import dev_account
from core.errors import Refused
from ledger import serving
from ledger.client import Swarm
from ledger.keys import DigestSigner
from ledger.serving import Voucher
from provider.receipts import RECEIPT_TTL_S, ReceiptBook, VoucherDue

BUYER, PROVIDER, OTHER = dev_account(4), dev_account(1), dev_account(5)
PRICE = 1_000


def _book(swarm: Swarm, path: Path, cap: int = 10**18) -> ReceiptBook:
    return ReceiptBook(path, serving.domain_of(swarm), PROVIDER.address, cap,
                       lambda buyer: serving.account(swarm, buyer, PROVIDER.address))


def _receipt(swarm: Swarm, key: bytes = BUYER.key, amount: int = PRICE, **fields) -> str:
    return serving.sign_receipt(DigestSigner(key), serving.domain_of(swarm), PROVIDER.address, amount,
                                **fields).header()


def _aggregate(swarm: Swarm, book: ReceiptBook, key: bytes = BUYER.key) -> Voucher | None:
    """What the buyer's client does: take the claim, sign its cumulative, hand the voucher back."""
    claim = book.claim(DigestSigner(key).address)
    if not claim.receipts:
        return None
    voucher = serving.sign_voucher(DigestSigner(key), book.domain, PROVIDER.address, claim.cumulative)
    book.aggregate(voucher, [nonce for nonce, _ in claim.receipts])
    return voucher


def _refused(status: int, match: str, call, *args, **kwargs) -> Refused:
    with pytest.raises(Refused, match=match) as caught:
        call(*args, **kwargs)
    assert caught.value.status == status
    return caught.value


def test_requests_paid_by_receipts_are_redeemed_once_to_the_wei(swarm: Swarm, tmp_path: Path) -> None:
    serving.deposit(swarm, swarm.sender(BUYER.key), PROVIDER.address, 10**9)
    book = _book(swarm, tmp_path / "receipts.db")
    tickets = [book.accept(_receipt(swarm, amount=PRICE + i), "lease-1", PRICE) for i in range(300)]
    for i, ticket in enumerate(tickets):
        assert ticket.buyer == BUYER.address
        book.charge(ticket, PRICE if i % 3 else 10**12)  # never more than the receipt's amount
    charged = sum(PRICE if i % 3 else PRICE + i for i in range(300))
    assert book.owed(BUYER.address) == {"receipts": charged, "voucher": 0}
    voucher = _aggregate(swarm, book)
    assert voucher is not None and voucher.cumulative == charged
    assert book.owed(BUYER.address) == {"receipts": 0, "voucher": charged}
    assert book.claim(BUYER.address).receipts == ()

    start = swarm.balance_of(PROVIDER.address)
    [(latest, redeemed)] = book.vouchers()
    assert (latest, redeemed) == (voucher, 0)
    serving.redeem(swarm, swarm.sender(PROVIDER.key), latest)
    book.redeemed(BUYER.address, serving.account(swarm, BUYER.address, PROVIDER.address).redeemed)
    assert swarm.balance_of(PROVIDER.address) == start + charged
    assert book.owed(BUYER.address) == {"receipts": 0, "voucher": 0}

    # More requests: the next voucher adds only their charges.
    for _ in range(5):
        book.charge(book.accept(_receipt(swarm), "lease-1", PRICE), PRICE)
    assert getattr(_aggregate(swarm, book), "cumulative", None) == charged + 5 * PRICE


def test_forged_replayed_expired_and_underpaid_receipts_are_refused(swarm: Swarm, tmp_path: Path) -> None:
    serving.deposit(swarm, swarm.sender(BUYER.key), PROVIDER.address, 10**9)
    book = _book(swarm, tmp_path / "receipts.db")
    header = _receipt(swarm)
    book.accept(header, "lease-1", PRICE)
    _refused(409, "used already", book.accept, header, "lease-1", PRICE)
    _refused(402, "no Swarm-Receipt", book.accept, None, "lease-1", PRICE)
    _refused(400, "Swarm-Receipt header", book.accept, "1.2.3", "lease-1", PRICE)
    _refused(402, "expired", book.accept, _receipt(swarm, timestamp=int(time.time()) - RECEIPT_TTL_S - 5),
             "lease-1", PRICE)
    _refused(402, "ahead of the site's clock", book.accept,
             _receipt(swarm, timestamp=int(time.time()) + 3_600), "lease-1", PRICE)
    _refused(402, "less than this lease's price", book.accept, _receipt(swarm, amount=PRICE - 1), "lease-1",
             PRICE)
    # A receipt whose signature is the buyer's over other terms recovers another key: that key has no deposit.
    buyer, amount, nonce, timestamp, signature = _receipt(swarm).split(".")
    altered = ".".join((buyer, str(int(amount) * 2), nonce, timestamp, signature))
    _refused(401, "not signed by the buyer it names", book.accept, altered, "lease-1", PRICE)
    _refused(401, "not valid", book.accept, ".".join((buyer, amount, nonce, timestamp, "00" * 64 + "1b")),
             "lease-1", PRICE)
    # Signed by another key and said to be the buyer's: refused, whether or not the buyer's key is known.
    forged = _receipt(swarm, OTHER.key).split(".")
    _refused(401, "not signed by the buyer it names", book.accept, ".".join((buyer, *forged[1:])), "lease-1",
             PRICE)
    # Signed for another provider by the buyer's own key: not a receipt for this site.
    elsewhere = serving.sign_receipt(DigestSigner(BUYER.key), book.domain, OTHER.address, PRICE).header()
    _refused(401, "not signed by the buyer it names", book.accept, elsewhere, "lease-1", PRICE)
    # A key with no deposit signs its own receipt: it is the buyer, and it has nothing to spend.
    _refused(402, "can spend 0 wei", book.accept, _receipt(swarm, OTHER.key), "lease-1", PRICE)
    assert book.owed(BUYER.address)["receipts"] == PRICE  # only the one good receipt


def test_a_deposit_covers_what_is_owed_in_receipts_and_vouchers_and_a_thaw_stops_new_spending(
        swarm: Swarm, tmp_path: Path) -> None:
    buyer = swarm.sender(BUYER.key)
    serving.deposit(swarm, buyer, PROVIDER.address, 5 * PRICE)
    book = _book(swarm, tmp_path / "receipts.db")
    for _ in range(3):
        book.charge(book.accept(_receipt(swarm), "lease-1", PRICE), PRICE)
    _aggregate(swarm, book)  # 3 owed in a voucher not yet redeemed
    book.accept(_receipt(swarm), "lease-1", PRICE)
    book.accept(_receipt(swarm), "lease-1", PRICE)  # 5: the whole deposit
    _refused(402, "can spend 5000 wei, less than the 6000", book.accept, _receipt(swarm), "lease-1", PRICE)
    serving.deposit(swarm, buyer, PROVIDER.address, 2 * PRICE)  # seen at once: the book reads again
    book.accept(_receipt(swarm), "lease-1", PRICE)
    serving.thaw(swarm, buyer, PROVIDER.address, 7 * PRICE)
    book.redeemed(BUYER.address, 0)  # forgets its view of the account, as a redemption does
    _refused(402, "can spend 0 wei", book.accept, _receipt(swarm), "lease-1", PRICE)


def test_past_the_cap_the_buyer_signs_a_voucher_first(swarm: Swarm, tmp_path: Path) -> None:
    serving.deposit(swarm, swarm.sender(BUYER.key), PROVIDER.address, 10**9)
    book = _book(swarm, tmp_path / "receipts.db", cap=4 * PRICE)
    for _ in range(4):
        book.charge(book.accept(_receipt(swarm), "lease-1", PRICE), PRICE)
    due = _refused(402, "cap of 4000", book.accept, _receipt(swarm), "lease-1", PRICE)
    assert isinstance(due, VoucherDue) and due.due
    _aggregate(swarm, book)
    book.accept(_receipt(swarm), "lease-1", PRICE)


def test_a_voucher_must_add_exactly_the_claimed_charges_and_be_the_buyers(swarm: Swarm,
                                                                          tmp_path: Path) -> None:
    serving.deposit(swarm, swarm.sender(BUYER.key), PROVIDER.address, 10**9)
    book = _book(swarm, tmp_path / "receipts.db")
    served = [book.accept(_receipt(swarm), "lease-1", PRICE) for _ in range(3)]
    in_flight = book.accept(_receipt(swarm), "lease-1", PRICE)  # not charged yet: not claimed
    for ticket in served:
        book.charge(ticket, PRICE)
    claim = book.claim(BUYER.address)
    assert {n for n, _ in claim.receipts} == {t.nonce for t in served} and claim.cumulative == 3 * PRICE
    nonces = [n for n, _ in claim.receipts]
    signer = DigestSigner(BUYER.key)
    greedy = serving.sign_voucher(signer, book.domain, PROVIDER.address, 4 * PRICE)
    _refused(409, "not the previous voucher's plus", book.aggregate, greedy, nonces)
    unclaimed = serving.sign_voucher(signer, book.domain, PROVIDER.address, 4 * PRICE)
    _refused(409, "no charge for", book.aggregate, unclaimed, [*nonces, in_flight.nonce])
    by_other = serving.sign_voucher(DigestSigner(OTHER.key), book.domain, PROVIDER.address, 3 * PRICE)
    forged = Voucher(BUYER.address, PROVIDER.address, 3 * PRICE, by_other.signature)
    _refused(401, "not signed by its buyer", book.aggregate, forged, nonces)
    wrong_site = serving.sign_voucher(signer, book.domain, OTHER.address, 3 * PRICE)
    _refused(400, "not this site's", book.aggregate, wrong_site, nonces)
    good = serving.sign_voucher(signer, book.domain, PROVIDER.address, 3 * PRICE)
    assert book.aggregate(good, nonces) == 3 * PRICE
    assert book.aggregate(good, nonces) == 3 * PRICE  # sent twice: it stands
    _refused(409, "no charge for", book.aggregate,
             serving.sign_voucher(signer, book.domain, PROVIDER.address, 6 * PRICE), nonces)  # nothing twice


def test_a_book_opened_again_keeps_every_receipt_and_voucher(swarm: Swarm, tmp_path: Path) -> None:
    serving.deposit(swarm, swarm.sender(BUYER.key), PROVIDER.address, 10**9)
    path = tmp_path / "receipts.db"
    book = _book(swarm, path)
    header = _receipt(swarm)
    book.charge(book.accept(header, "lease-1", PRICE), PRICE)
    voucher = _aggregate(swarm, book)
    assert voucher is not None
    book.charge(book.accept(_receipt(swarm), "lease-1", PRICE), PRICE)
    in_flight = _receipt(swarm)
    book.accept(in_flight, "lease-1", PRICE)  # its request was running when the site died
    del book  # no close: as a killed process leaves it

    again = _book(swarm, path)
    _refused(409, "used already", again.accept, header, "lease-1", PRICE)
    assert again.vouchers() == [(voucher, 0)]
    assert again.owed(BUYER.address) == {"receipts": PRICE, "voucher": PRICE}
    assert again.claim(BUYER.address).cumulative == 2 * PRICE  # the one served since; not the one in flight
    # The request in flight was never answered nor charged: its receipt may pay for it once, now.
    again.charge(again.accept(in_flight, "lease-1", PRICE), PRICE)
    assert again.owed(BUYER.address) == {"receipts": 2 * PRICE, "voucher": PRICE}


@pytest.mark.parametrize("site_took_it", [True, False], ids=["site-took-it", "site-never-saw-it"])
def test_a_buyer_killed_while_sending_a_voucher_signs_the_next_claim_and_pays_nothing_twice(
        swarm: Swarm, tmp_path: Path, site_took_it: bool) -> None:
    from wire.serving import Journal

    serving.deposit(swarm, swarm.sender(BUYER.key), PROVIDER.address, 10**9)
    book, signer = _book(swarm, tmp_path / "receipts.db"), DigestSigner(BUYER.key)
    journal = Journal(tmp_path / "journal.db")

    def call() -> None:  # as ServingClient.call: the receipt in the journal before it is sent
        receipt = serving.sign_receipt(signer, book.domain, PROVIDER.address, PRICE)
        journal.signed(receipt)
        book.charge(book.accept(receipt.header(), "lease-1", PRICE), PRICE)

    def aggregate(killed: bool = False) -> Voucher:  # as ServingClient._aggregate
        claim = book.claim(BUYER.address)
        nonces = [nonce for nonce, _ in claim.receipts]
        cumulative = journal.check_claim(PROVIDER.address, claim.previous, list(claim.receipts))
        voucher = serving.sign_voucher(signer, book.domain, PROVIDER.address, cumulative)
        journal.propose(voucher, nonces)
        if killed and not site_took_it:
            return voucher  # killed before the voucher left
        book.aggregate(voucher, nonces)
        if not killed:
            journal.aggregated(voucher, nonces)
        return voucher  # killed: the site took it, the journal never heard back

    for _ in range(3):
        call()
    aggregate(killed=True)
    journal = Journal(tmp_path / "journal.db")  # the buyer started again
    for _ in range(2):
        call()
    voucher = aggregate()
    assert voucher.cumulative == 5 * PRICE, "each receipt paid once, whichever way the kill fell"
    last = journal.last_voucher(PROVIDER.address)
    assert last is not None and last.cumulative == 5 * PRICE
    assert book.vouchers() == [(voucher, 0)]
    serving.redeem(swarm, swarm.sender(PROVIDER.key), voucher)
    assert serving.account(swarm, BUYER.address, PROVIDER.address).redeemed == 5 * PRICE


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(st.sampled_from(["request", "serve", "fail", "aggregate"]),
                                st.integers(PRICE, 3 * PRICE)), min_size=1, max_size=40),
       deposit=st.integers(PRICE, 20 * PRICE))
def test_whatever_happens_the_buyer_never_owes_more_than_its_deposit(
        swarm: Swarm, tmp_path_factory, steps, deposit: int) -> None:
    snapshot = swarm.chain.w3.provider.make_request("evm_snapshot", [])["result"]
    swarm = Swarm(swarm.chain, swarm.deployment)  # its senders' nonces as the chain has them now
    try:
        serving.deposit(swarm, swarm.sender(BUYER.key), PROVIDER.address, deposit)
        book = _book(swarm, tmp_path_factory.mktemp("book") / "receipts.db", cap=6 * PRICE)
        open_tickets, charged = [], 0
        for action, amount in steps:
            if action == "request":
                try:
                    open_tickets.append(book.accept(_receipt(swarm, amount=amount), "lease-1", PRICE))
                except Refused as exc:
                    assert exc.status == 402
            elif action in ("serve", "fail") and open_tickets:
                ticket = open_tickets.pop(0)
                charged += book.charge(ticket, ticket.amount if action == "serve" else 0)
            elif action == "aggregate":
                _aggregate(swarm, book)
            owed = book.owed(BUYER.address)
            assert owed["receipts"] + owed["voucher"] <= deposit
            assert owed["receipts"] <= 6 * PRICE
        _aggregate(swarm, book)
        in_flight = sum(t.amount for t in open_tickets)  # counted until their requests end
        assert book.owed(BUYER.address) == {"receipts": in_flight, "voucher": charged}
    finally:
        swarm.chain.w3.provider.make_request("evm_revert", [snapshot])


def test_the_redeemer_redeems_when_a_voucher_adds_enough_when_time_passes_and_at_once_on_a_thaw(
        swarm: Swarm, tmp_path: Path) -> None:
    from provider.serving import Redeemer

    buyer = swarm.sender(BUYER.key)
    serving.deposit(swarm, buyer, PROVIDER.address, 10**9)
    book = _book(swarm, tmp_path / "receipts.db")
    provider = swarm.sender(PROVIDER.key)
    redeemer = Redeemer(book, lambda voucher: serving.redeem(swarm, provider, voucher),
                        lambda who: serving.account(swarm, who, PROVIDER.address), least=5 * PRICE,
                        every_s=3_600)
    start = swarm.balance_of(PROVIDER.address)

    def served(calls: int) -> None:
        for _ in range(calls):
            book.charge(book.accept(_receipt(swarm), "lease-1", PRICE), PRICE)
        _aggregate(swarm, book)

    served(3)
    assert redeemer.once() == [(BUYER.address, 3 * PRICE)], "its first redemption waits for nothing"
    served(2)
    assert redeemer.once() == [], "2 calls add less than `least`, and the last redemption is recent"
    served(3)
    assert redeemer.once() == [(BUYER.address, 5 * PRICE)]
    served(1)
    serving.thaw(swarm, buyer, PROVIDER.address, 10)
    assert redeemer.once() == [(BUYER.address, PRICE)], "a thaw makes it redeem at once"
    assert redeemer.once() == [], "nothing is redeemed twice"
    assert swarm.balance_of(PROVIDER.address) == start + 9 * PRICE
    assert serving.account(swarm, BUYER.address, PROVIDER.address).redeemed == 9 * PRICE


def test_a_provider_redeems_its_sites_vouchers_from_the_command_line(swarm: Swarm, tmp_path: Path, cli,
                                                                     swarm_home: Path) -> None:
    import json
    import shutil

    home = tmp_path / "provider"
    shutil.copytree(swarm_home / "deployments", home / "deployments")
    serving.deposit(swarm, swarm.sender(BUYER.key), PROVIDER.address, 10**9)
    book = _book(swarm, home / "site" / "serving" / "receipts.db")
    for _ in range(4):
        book.charge(book.accept(_receipt(swarm), "lease-1", PRICE), PRICE)
    _aggregate(swarm, book)
    book.close()
    start = swarm.balance_of(PROVIDER.address)
    done = cli("provider", "redeem", "--account", "1", "--json", env={"SWARM_HOME": str(home)})
    assert done.code == 0, done.stderr
    assert json.loads(done.stdout) == {"redeemed": [{"buyer": BUYER.address, "paid": str(4 * PRICE)}]}
    assert swarm.balance_of(PROVIDER.address) == start + 4 * PRICE
    again = cli("provider", "redeem", "--account", "1", "--json", env={"SWARM_HOME": str(home)})
    assert json.loads(again.stdout) == {"redeemed": []}
    nowhere = cli("provider", "redeem", "--account", "1", env={"SWARM_HOME": str(tmp_path / "empty")})
    assert nowhere.code == 1 and "No site's receipts" in nowhere.stderr


def test_the_site_connects_only_to_a_socket_the_lease_left_and_never_through_a_link(tmp_path: Path) -> None:
    import os
    import socket

    from compute.errors import ComputeError
    from provider.serving import _checked

    elsewhere = tmp_path / "elsewhere.sock"  # another lease's, or a socket of the machine's own
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(elsewhere))
    try:
        assert _checked(elsewhere) == elsewhere
        planted = tmp_path / "serve.sock"
        for plant, why in ((lambda: planted.symlink_to(elsewhere), "other than its socket"),
                           (lambda: os.mkfifo(planted), "other than its socket"),
                           (lambda: planted.write_text("x"), "other than its socket"),
                           (lambda: None, "not listening yet")):
            plant()
            with pytest.raises(ComputeError, match=why):
                _checked(planted)
            planted.unlink(missing_ok=True)
    finally:
        listener.close()
