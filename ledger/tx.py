"""Sending transactions: one sender per key, local nonces, gas estimation, receipts,
retries of transient RPC errors, and reverts decoded into sentences."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from functools import partial
from typing import Any

from eth_account import Account
from eth_account.signers.local import LocalAccount
from hexbytes import HexBytes
from web3.contract.contract import ContractConstructor, ContractFunction
from web3.exceptions import ContractLogicError, TransactionNotFound, Web3RPCError

from ledger.chain import Chain, with_retries
from ledger.errors import ErrorDecoder, SwarmError, TransactionFailed
from ledger.keys import DigestSigner

GAS_MARGIN = 1.2  # estimates are exact for the simulated state; leave room for drift
RECEIPT_TIMEOUT = 120
RECEIPT_POLL_S = 0.1  # the first looks for a receipt; they slow to RECEIPT_POLL_MAX_S
RECEIPT_POLL_MAX_S = 0.5
LOST_CHECK_S = 2.0  # how often a pending transaction is looked up to see that the node still has it


@dataclass(frozen=True)
class TxReceipt:
    tx_hash: str
    block_number: int
    gas_used: int
    logs: list[Any]
    contract_address: str | None
    raw: Any


@dataclass(frozen=True)
class _Signed:
    hash: HexBytes
    raw: bytes
    nonce: int


class Sender:
    """Signs and sends transactions from one key, keeping its nonce locally."""

    def __init__(self, chain: Chain, key: bytes, decoder: ErrorDecoder) -> None:
        self._account: LocalAccount = Account.from_key(key)
        self.chain = chain
        self.decoder = decoder
        self._nonce: int | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:  # never show the key
        return f"Sender({self.address})"

    @property
    def address(self) -> str:
        return self._account.address

    def sign_typed_data(self, full_message: dict) -> bytes:
        """Signs EIP-712 typed data (permits, epoch reports) with this key."""
        return bytes(self._account.sign_typed_data(full_message=full_message).signature)

    def digest_signer(self) -> DigestSigner:
        """This key as a fast signer of raw digests: serving's receipts and vouchers."""
        return DigestSigner(bytes(self._account.key))

    def simulate(self, fn: ContractFunction) -> Any:
        """Runs the call without sending it; a revert raises TransactionFailed."""
        try:
            return with_retries(lambda: fn.call({"from": self.address}), self.chain.url)
        except ContractLogicError as exc:
            raise self._failure(fn, exc) from None

    def send(self, fn: ContractFunction | ContractConstructor, value: int = 0) -> TxReceipt:
        """Estimates, signs and sends `fn`, then waits for its receipt.

        A call that would revert is refused before anything is sent.
        """
        try:
            with self._lock:
                tx: dict[str, Any] = {"from": self.address, "value": value, "chainId": self.chain.chain_id}
                try:
                    gas = with_retries(lambda: fn.estimate_gas(tx), self.chain.url)
                except ContractLogicError as exc:
                    raise self._failure(fn, exc) from None
                tx.update(self._fees())
                tx["gas"] = int(gas * GAS_MARGIN) + 10_000
                signed = self._sign_and_send(fn, tx)
            return self._wait(fn, signed)
        except TransactionFailed:
            raise
        except Exception:
            # The node went away or lost what it had (a devnet restarted from older state):
            # the next transaction reads the nonce afresh instead of trusting the local count.
            self._nonce = None
            raise

    # ── internals ────────────────────────────────────────────────────────────
    def _sign_and_send(self, fn: ContractFunction | ContractConstructor, tx: dict[str, Any]) -> _Signed:
        """Sends with the local nonce; resyncs once if another client used it meanwhile.

        A raw transaction re-sent after a dropped connection is recognised ("already
        known") rather than sent twice: its hash is the same.
        """
        for attempt in range(2):
            tx["nonce"] = self._next_nonce()
            signed = self._account.sign_transaction(fn.build_transaction(tx))
            raw = signed.raw_transaction
            try:
                with_retries(partial(self.chain.w3.eth.send_raw_transaction, raw), self.chain.url)
            except Web3RPCError as exc:
                message = _rpc_message(exc).lower()
                if _already_known(exc):
                    pass  # our own earlier attempt reached the node
                elif "nonce too low" in message and attempt == 0:
                    self._nonce = None
                    continue
                else:
                    self._nonce = None
                    raise SwarmError(f"The node refused {_name(fn)}: {_rpc_message(exc)}.") from exc
            self._nonce = tx["nonce"] + 1
            return _Signed(HexBytes(signed.hash), bytes(signed.raw_transaction), tx["nonce"])
        raise AssertionError("unreachable")

    def _next_nonce(self) -> int:
        if self._nonce is None:
            self._nonce = with_retries(
                lambda: self.chain.w3.eth.get_transaction_count(self.address, "pending"), self.chain.url
            )
        return self._nonce

    def _fees(self) -> dict[str, int]:
        block = with_retries(lambda: self.chain.w3.eth.get_block("latest"), self.chain.url)
        base = int(block.get("baseFeePerGas", 0) or 0)
        if not base:
            return {"gasPrice": with_retries(lambda: self.chain.w3.eth.gas_price, self.chain.url)}
        tip = 1_000_000_000
        return {"maxFeePerGas": 2 * base + tip, "maxPriorityFeePerGas": tip}

    def _wait(self, fn: ContractFunction | ContractConstructor, signed: _Signed) -> TxReceipt:
        """Waits for the receipt. A transaction the node no longer has (a node restarted, a pool
        that evicted it) is sent again as signed, the same hash; one whose nonce the chain has
        used meanwhile, or that earlier transactions the node lost must precede, fails at once
        rather than at the timeout."""
        eth = self.chain.w3.eth
        start = time.monotonic()
        poll, checked = RECEIPT_POLL_S, start
        while True:
            try:
                receipt = with_retries(lambda: eth.get_transaction_receipt(signed.hash), self.chain.url)
                break
            except TransactionNotFound:
                pass
            now = time.monotonic()
            if now - start > RECEIPT_TIMEOUT:
                raise SwarmError(
                    f"{_name(fn)} ({signed.hash.to_0x_hex()}) was sent but not mined within "
                    f"{RECEIPT_TIMEOUT} s; "
                    "check the node, then look the transaction up before retrying."
                )
            if now - checked >= LOST_CHECK_S:
                checked = now
                self._resend_if_lost(fn, signed)
            time.sleep(poll)
            poll = min(RECEIPT_POLL_MAX_S, poll * 1.5)
        if receipt["status"] != 1:
            raise self._replay_failure(fn, receipt)
        return TxReceipt(
            tx_hash=signed.hash.to_0x_hex(),
            block_number=int(receipt["blockNumber"]),
            gas_used=int(receipt["gasUsed"]),
            logs=list(receipt["logs"]),
            contract_address=receipt.get("contractAddress"),
            raw=receipt,
        )

    def _resend_if_lost(self, fn: ContractFunction | ContractConstructor, signed: _Signed) -> None:
        """Sends the transaction again if the node no longer has it and its nonce is the next
        the chain expects; fails if the chain has moved past that nonce, or if the node lost
        this key's earlier transactions (the transaction, held or sent again, would wait
        behind them for ever)."""
        eth = self.chain.w3.eth
        try:
            held = with_retries(lambda: eth.get_transaction(signed.hash), self.chain.url)
        except TransactionNotFound:
            held = None
        if held is not None:
            ready = with_retries(lambda: eth.get_transaction_count(self.address, "pending"), self.chain.url)
            if held.get("blockNumber") is not None or ready > signed.nonce:
                return  # mined, or in the pool in its turn
        expected = with_retries(lambda: eth.get_transaction_count(self.address, "latest"), self.chain.url)
        if held is None:
            try:  # mined since the last look: the next look finds its receipt
                with_retries(lambda: eth.get_transaction_receipt(signed.hash), self.chain.url)
                return
            except TransactionNotFound:
                pass
        if held is not None or expected < signed.nonce:
            self._nonce = None
            raise SwarmError(
                f"{_name(fn)} ({signed.hash.to_0x_hex()}) comes after transactions of {self.address} "
                f"that the node no longer has (it expects nonce {expected}, not {signed.nonce}: a node "
                "restarted from older state?); check the chain before sending it again."
            )
        if expected > signed.nonce:
            self._nonce = None
            raise SwarmError(
                f"The node lost {_name(fn)} ({signed.hash.to_0x_hex()}) and another transaction of "
                "this key has taken its nonce; check the chain before sending it again."
            )
        try:
            with_retries(lambda: eth.send_raw_transaction(signed.raw), self.chain.url)
        except Web3RPCError as exc:
            if not _already_known(exc):
                self._nonce = None
                raise SwarmError(
                    f"The node lost {_name(fn)} ({signed.hash.to_0x_hex()}) and refused it again: "
                    f"{_rpc_message(exc)}."
                ) from exc

    def _replay_failure(self, fn: ContractFunction | ContractConstructor, receipt: Any) -> TransactionFailed:
        """Re-runs a mined, reverted call at its block to learn why it reverted."""
        if not hasattr(fn, "call"):
            return TransactionFailed(f"{_name(fn)} reverted in block {receipt['blockNumber']}.")
        try:
            fn.call({"from": self.address}, block_identifier=receipt["blockNumber"] - 1)
        except ContractLogicError as exc:
            return self._failure(fn, exc)
        return TransactionFailed(f"{_name(fn)} reverted in block {receipt['blockNumber']} (out of gas?).")

    def _failure(
        self, fn: ContractFunction | ContractConstructor, exc: ContractLogicError
    ) -> TransactionFailed:
        data = exc.data if isinstance(exc.data, str) else None
        decoded = self.decoder.decode(bytes.fromhex(data[2:])) if data and data.startswith("0x") else None
        if decoded is not None:
            return TransactionFailed(f"{_name(fn)}: {decoded.sentence()}", decoded)
        return TransactionFailed(f"{_name(fn)} reverted: {exc.message or exc}.")


def _name(fn: ContractFunction | ContractConstructor) -> str:
    return getattr(fn, "fn_name", None) or "deploy"


def _rpc_message(exc: Web3RPCError) -> str:
    message = exc.rpc_response.get("error", {}).get("message") if exc.rpc_response else None
    return message or str(exc)


def _already_known(exc: Web3RPCError) -> bool:
    """The node has this very transaction already: our own earlier send reached it."""
    message = _rpc_message(exc).lower()
    return "already known" in message or "already imported" in message
