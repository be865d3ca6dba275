"""Paying for served requests (docs/architecture.md §12): the buyer's receipts and
vouchers, signed and checked fast, and the escrow's calls.

A buyer deposits SWARM for a provider once. Each request carries a `Receipt` the buyer signed
(EIP-712: provider, amount, nonce, timestamp); the provider's site checks it here, off chain, and
aggregates receipts into a `Voucher` the buyer signs, whose `cumulative` only grows. The escrow
pays the provider `cumulative − redeemed` in one transaction, however many requests it covers.

Signing and checking use libsecp256k1 (coincurve) on a digest packed by hand, so one core checks
tens of thousands of receipts a second (bench/serving.py); the key's side, `DigestSigner` and
`recover`, is `ledger.keys`'s."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from sha3 import keccak_256 as _keccak_256

from ledger.errors import InvalidInput
from ledger.keys import SECP256K1_HALF_N, SIGNATURE_BYTES, DigestSigner, InvalidSignature, recover
from ledger.permit import Allowance, prepare_spend
from ledger.units import parse_address

if TYPE_CHECKING:
    from ledger.client import Swarm
    from ledger.tx import Sender, TxReceipt

CONTRACT = "ServingEscrow"
DOMAIN_NAME = "SwarmServing"
DOMAIN_VERSION = "1"
MAX_UINT128 = 2**128 - 1
MAX_UINT64 = 2**64 - 1
MAX_NONCE = 2**256 - 1


def keccak(data: bytes) -> bytes:
    return _keccak_256(data).digest()


RECEIPT_TYPEHASH = keccak(b"Receipt(address provider,uint128 amount,uint256 nonce,uint64 timestamp)")
VOUCHER_TYPEHASH = keccak(b"Voucher(address buyer,address provider,uint128 cumulative)")
_DOMAIN_TYPEHASH = keccak(
    b"EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)")


def _word(value: int) -> bytes:
    return value.to_bytes(32, "big")


def _address_word(address: str) -> bytes:
    return bytes(12) + bytes.fromhex(address[2:])


@dataclass(frozen=True)
class Domain:
    """The EIP-712 domain of receipts and vouchers: one ServingEscrow on one chain."""

    chain_id: int
    escrow: str

    @cached_property
    def separator(self) -> bytes:
        return keccak(_DOMAIN_TYPEHASH + keccak(DOMAIN_NAME.encode()) + keccak(DOMAIN_VERSION.encode())
                      + _word(self.chain_id) + _address_word(self.escrow))

    def digest(self, struct_hash: bytes) -> bytes:
        return keccak(b"\x19\x01" + self.separator + struct_hash)


@dataclass(frozen=True)
class Receipt:
    """A buyer's word that it owes `provider` up to `amount` wei for one request. `buyer` is who
    says it signed (the header carries it, so a site checks the signature against a key it knows);
    only the signature makes it so."""

    provider: str
    amount: int
    nonce: int
    timestamp: int
    signature: bytes
    buyer: str = ""

    def digest(self, domain: Domain) -> bytes:
        return receipt_digest(domain, self.provider, self.amount, self.nonce, self.timestamp)

    def header(self) -> str:
        """The receipt as a request carries it (`Swarm-Receipt`): buyer, amount, nonce, timestamp and
        signature, the provider being the site's."""
        return f"{self.buyer}.{self.amount}.{self.nonce:x}.{self.timestamp}.{self.signature.hex()}"

    @classmethod
    def from_header(cls, text: str, provider: str) -> Receipt:
        """Reads a `Swarm-Receipt` header for `provider`; a malformed one raises InvalidInput."""
        parts = text.split(".")
        try:
            if len(parts) != 5 or len(text) > 360 or len(parts[0]) != 42 or parts[0][:2] != "0x":
                raise ValueError
            amount, nonce, timestamp = int(parts[1], 10), int(parts[2], 16), int(parts[3], 10)
            signature = bytes.fromhex(parts[4])
        except ValueError:
            raise InvalidInput(
                "the Swarm-Receipt header is not BUYER.AMOUNT.NONCE.TIMESTAMP.SIGNATURE (an address, "
                "decimal, hex, decimal, 65 bytes of hex); sign the receipt with `swarm serve call` or "
                "ServingClient.call."
            ) from None
        receipt = cls(provider, amount, nonce, timestamp, signature, parts[0])
        _check_receipt_fields(receipt)
        return receipt


@dataclass(frozen=True)
class Voucher:
    """A buyer's word that it owes `provider` `cumulative` wei in all, since its first deposit."""

    buyer: str
    provider: str
    cumulative: int
    signature: bytes

    def digest(self, domain: Domain) -> bytes:
        return voucher_digest(domain, self.buyer, self.provider, self.cumulative)

    def as_dict(self) -> dict[str, str]:
        return {"buyer": self.buyer, "provider": self.provider, "cumulative": str(self.cumulative),
                "signature": "0x" + self.signature.hex()}

    @classmethod
    def from_dict(cls, data: dict) -> Voucher:
        try:
            voucher = cls(parse_address(data["buyer"], "voucher buyer"),
                          parse_address(data["provider"], "voucher provider"),
                          int(data["cumulative"]), bytes.fromhex(str(data["signature"]).removeprefix("0x")))
        except (KeyError, TypeError, ValueError):
            raise InvalidInput(
                "a voucher is {buyer, provider, cumulative, signature}: two addresses, a decimal amount of "
                "wei and a 65-byte hex signature."
            ) from None
        if not 0 < voucher.cumulative <= MAX_UINT128 or len(voucher.signature) != SIGNATURE_BYTES:
            raise InvalidInput(f"a voucher's cumulative must be from 1 to {MAX_UINT128} wei and its "
                               "signature 65 bytes.")
        return voucher


def receipt_digest(domain: Domain, provider: str, amount: int, nonce: int, timestamp: int) -> bytes:
    """The EIP-712 digest a buyer signs for a receipt (ServingEscrow.receiptDigest)."""
    return domain.digest(keccak(RECEIPT_TYPEHASH + _address_word(provider) + _word(amount) + _word(nonce)
                                + _word(timestamp)))


def voucher_digest(domain: Domain, buyer: str, provider: str, cumulative: int) -> bytes:
    """The EIP-712 digest a buyer signs for a voucher (ServingEscrow.voucherDigest)."""
    return domain.digest(keccak(VOUCHER_TYPEHASH + _address_word(buyer) + _address_word(provider)
                                + _word(cumulative)))


def _check_receipt_fields(receipt: Receipt) -> None:
    if not 0 < receipt.amount <= MAX_UINT128:
        raise InvalidInput(f"a receipt's amount must be from 1 to {MAX_UINT128} wei, got {receipt.amount}.")
    if not 0 <= receipt.nonce <= MAX_NONCE or not 0 <= receipt.timestamp <= MAX_UINT64:
        raise InvalidInput("a receipt's nonce must fit 256 bits and its timestamp 64.")
    if len(receipt.signature) != SIGNATURE_BYTES:
        raise InvalidInput(f"a receipt's signature must be {SIGNATURE_BYTES} bytes, got "
                           f"{len(receipt.signature)}.")


def sign_receipt(signer: DigestSigner, domain: Domain, provider: str, amount: int,
                 nonce: int | None = None, timestamp: int | None = None) -> Receipt:
    """A receipt for one request to `provider`, with a random nonce and the current second."""
    nonce = int.from_bytes(os.urandom(16), "big") if nonce is None else nonce
    timestamp = int(time.time()) if timestamp is None else timestamp
    unsigned = Receipt(provider, amount, nonce, timestamp, bytes(SIGNATURE_BYTES), signer.address)
    _check_receipt_fields(unsigned)
    return Receipt(provider, amount, nonce, timestamp,
                   signer.sign(receipt_digest(domain, provider, amount, nonce, timestamp)), signer.address)


def sign_voucher(signer: DigestSigner, domain: Domain, provider: str, cumulative: int) -> Voucher:
    if not 0 < cumulative <= MAX_UINT128:
        raise InvalidInput(f"a voucher's cumulative must be from 1 to {MAX_UINT128} wei, got {cumulative}.")
    return Voucher(signer.address, provider, cumulative,
                   signer.sign(voucher_digest(domain, signer.address, provider, cumulative)))


def receipt_signer(domain: Domain, receipt: Receipt) -> str:
    """Who signed `receipt`: the buyer it charges."""
    return recover(receipt.digest(domain), receipt.signature)


class ReceiptVerifier:
    """Checks the receipts of one provider's site in one escrow's domain, as fast as one core
    allows: the digest from prefixes computed once, and the signature verified against the
    public key of the buyer the receipt names, recovered from its first receipt and kept (a
    verification costs less than a recovery, and no address is derived again)."""

    def __init__(self, domain: Domain, provider: str, keep: int = 100_000) -> None:
        from coincurve._libsecp256k1 import ffi, lib
        from coincurve.context import GLOBAL_CONTEXT

        self._ffi, self._lib, self._ctx = ffi, lib, GLOBAL_CONTEXT.ctx
        self._struct_prefix = RECEIPT_TYPEHASH + _address_word(provider)
        self._digest_prefix = b"\x19\x01" + domain.separator
        self._keys: dict[str, tuple[str, object]] = {}  # as named → (checksummed, its public key)
        self._keep = keep

    def digest(self, amount: int, nonce: int, timestamp: int) -> bytes:
        struct = _keccak_256(self._struct_prefix + amount.to_bytes(32, "big") + nonce.to_bytes(32, "big")
                             + timestamp.to_bytes(32, "big")).digest()
        return _keccak_256(self._digest_prefix + struct).digest()

    def signer(self, receipt: Receipt) -> str:
        """The buyer `receipt` names, checksummed, if its signature is that buyer's; InvalidSignature
        otherwise."""
        signature = receipt.signature
        if len(signature) != SIGNATURE_BYTES or signature[64] not in (27, 28) \
                or int.from_bytes(signature[32:64], "big") > SECP256K1_HALF_N:
            raise InvalidSignature("the signature is not 65 bytes of low s ending in 27 or 28.")
        digest = self.digest(receipt.amount, receipt.nonce, receipt.timestamp)
        known = self._keys.get(receipt.buyer)
        if known is None:
            address = recover(digest, signature)
            if address.lower() != receipt.buyer.lower():
                raise InvalidSignature(f"the receipt is not signed by the buyer it names, {receipt.buyer}.")
            self._remember(receipt.buyer, address, digest, signature)
            return address
        parsed = self._ffi.new("secp256k1_ecdsa_signature *")
        if not self._lib.secp256k1_ecdsa_signature_parse_compact(self._ctx, parsed, signature[:64]) \
                or not self._lib.secp256k1_ecdsa_verify(self._ctx, parsed, digest, known[1]):
            raise InvalidSignature(f"the receipt is not signed by the buyer it names, {receipt.buyer}.")
        return known[0]

    def _remember(self, named: str, address: str, digest: bytes, signature: bytes) -> None:
        from coincurve import PublicKey

        if len(self._keys) >= self._keep:
            self._keys.clear()
        public = PublicKey.from_signature_and_message(signature[:64] + bytes([signature[64] - 27]), digest,
                                                      hasher=None)
        self._keys[named] = (address, public.public_key)


def check_voucher(domain: Domain, voucher: Voucher) -> None:
    """Raises InvalidSignature unless the voucher's buyer signed it (an account's key; a contract
    wallet's vouchers are checked by the escrow alone)."""
    if recover(voucher.digest(domain), voucher.signature) != voucher.buyer:
        raise InvalidSignature(f"the voucher is not signed by its buyer {voucher.buyer}.")


# ── the escrow ───────────────────────────────────────────────────────────────


@dataclass(frozen=True)
class Account:
    """What a buyer's deposit for a provider holds, as the escrow says."""

    buyer: str
    provider: str
    balance: int  # held now: redeemable
    redeemed: int  # the cumulative paid to the provider so far
    thawing: int  # the part the buyer will take back at `thaw_ends_at`
    thaw_ends_at: int

    @property
    def spendable(self) -> int:
        """What new requests may still be paid from: the balance less what is thawing."""
        return max(0, self.balance - self.thawing)


def domain_of(swarm: Swarm) -> Domain:
    return Domain(swarm.chain.chain_id, swarm.deployment.addresses[CONTRACT])


def account(swarm: Swarm, buyer: str, provider: str, block: int | str = "latest") -> Account:
    buyer = parse_address(buyer, "buyer address")
    provider = parse_address(provider, "provider address")
    balance, redeemed, thawing, ends = swarm.read(CONTRACT, "accountOf", buyer, provider, block=block)
    return Account(buyer, provider, int(balance), int(redeemed), int(thawing), int(ends))


def deposit(swarm: Swarm, sender: Sender, provider: str, amount: int,
            allowance: Allowance = Allowance.PERMIT) -> TxReceipt:
    """Adds `amount` wei to `sender`'s deposit for `provider`, in one transaction."""
    provider = parse_address(provider, "provider address")
    _positive(amount, "deposit")
    escrow = swarm.contract(CONTRACT)
    permit = prepare_spend(swarm, sender, escrow.address, amount, "deposit", allowance)
    if permit is None:
        return sender.send(escrow.functions.deposit(provider, amount))
    return sender.send(escrow.functions.depositWithPermit(provider, amount, permit.deadline, permit.v,
                                                          permit.r, permit.s))


def thaw(swarm: Swarm, sender: Sender, provider: str, amount: int) -> TxReceipt:
    """Starts the thaw of `amount` of `sender`'s deposit for `provider` (0 cancels a thaw)."""
    provider = parse_address(provider, "provider address")
    held = account(swarm, sender.address, provider).balance
    if not isinstance(amount, int) or not 0 <= amount <= held:
        raise InvalidInput(f"the deposit for {provider} holds {held} wei; thaw from 0 to {held}, "
                           f"got {amount!r}.")
    return sender.send(swarm.contract(CONTRACT).functions.thaw(provider, amount))


def withdraw(swarm: Swarm, sender: Sender, provider: str) -> TxReceipt:
    """Takes back what `sender` thawed for `provider`, once its thaw has ended."""
    provider = parse_address(provider, "provider address")
    state = account(swarm, sender.address, provider)
    if state.thawing == 0:
        raise InvalidInput(f"nothing of the deposit for {provider} is thawing; `swarm serve thaw` first.")
    now = swarm.chain.timestamp()
    if now < state.thaw_ends_at:
        raise InvalidInput(f"the thaw ends at {state.thaw_ends_at} ({state.thaw_ends_at - now} s from now); "
                           "withdraw after that.")
    return sender.send(swarm.contract(CONTRACT).functions.withdraw(provider))


def redeem(swarm: Swarm, sender: Sender, voucher: Voucher) -> TxReceipt:
    """Redeems `voucher`: its provider is paid what it adds to what was redeemed before."""
    fn = swarm.contract(CONTRACT).functions.redeem(voucher.buyer, voucher.provider, voucher.cumulative,
                                                   voucher.signature)
    return sender.send(fn)


def _positive(amount: int, what: str) -> None:
    if isinstance(amount, bool) or not isinstance(amount, int) or not 0 < amount <= MAX_UINT128:
        raise InvalidInput(f"the {what} must be from 1 to {MAX_UINT128} wei, got {amount!r}.")
