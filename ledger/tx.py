"""Sending transactions: one sender per key, local nonces, gas estimation, receipts,
retries of transient RPC errors, and reverts decoded into sentences."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from eth_account import Account
from eth_account.signers.local import LocalAccount
from hexbytes import HexBytes
from web3.contract.contract import ContractConstructor, ContractFunction
from web3.exceptions import ContractLogicError, TimeExhausted, Web3RPCError

from ledger.chain import Chain, with_retries
from ledger.errors import ErrorDecoder, SwarmError, TransactionFailed

GAS_MARGIN = 1.2  # estimates are exact for the simulated state; leave room for drift
RECEIPT_TIMEOUT = 120


@dataclass(frozen=True)
class Receipt:
    tx_hash: str
    block_number: int
    gas_used: int
    logs: list[Any]
    contract_address: str | None
    raw: Any


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

    def simulate(self, fn: ContractFunction) -> Any:
        """Runs the call without sending it; a revert raises TransactionFailed."""
        try:
            return with_retries(lambda: fn.call({"from": self.address}), self.chain.url)
        except ContractLogicError as exc:
            raise self._failure(fn, exc) from None

    def send(self, fn: ContractFunction | ContractConstructor, value: int = 0) -> Receipt:
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
                tx_hash = self._sign_and_send(fn, tx)
            return self._wait(fn, HexBytes(tx_hash))
        except TransactionFailed:
            raise
        except Exception:
            # The node went away or lost what it had (a devnet restarted from older state):
            # the next transaction reads the nonce afresh instead of trusting the local count.
            self._nonce = None
            raise

    # ── internals ────────────────────────────────────────────────────────────
    def _sign_and_send(self, fn: ContractFunction | ContractConstructor, tx: dict[str, Any]) -> HexBytes:
        """Sends with the local nonce; resyncs once if another client used it meanwhile.

        A raw transaction re-sent after a dropped connection is recognised ("already
        known") rather than sent twice: its hash is the same.
        """
        for attempt in range(2):
            tx["nonce"] = self._next_nonce()
            signed = self._account.sign_transaction(fn.build_transaction(tx))
            try:
                with_retries(lambda: self.chain.w3.eth.send_raw_transaction(signed.raw_transaction), self.chain.url)
            except Web3RPCError as exc:
                message = _rpc_message(exc).lower()
                if "already known" in message or "already imported" in message:
                    pass  # our own earlier attempt reached the node
                elif "nonce too low" in message and attempt == 0:
                    self._nonce = None
                    continue
                else:
                    self._nonce = None
                    raise SwarmError(f"The node refused {_name(fn)}: {_rpc_message(exc)}.") from exc
            self._nonce = tx["nonce"] + 1
            return HexBytes(signed.hash)
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

    def _wait(self, fn: ContractFunction | ContractConstructor, tx_hash: HexBytes) -> Receipt:
        try:
            receipt = with_retries(
                lambda: self.chain.w3.eth.wait_for_transaction_receipt(tx_hash, timeout=RECEIPT_TIMEOUT),
                self.chain.url,
            )
        except TimeExhausted as exc:
            raise SwarmError(
                f"{_name(fn)} ({tx_hash.to_0x_hex()}) was sent but not mined within {RECEIPT_TIMEOUT} s; "
                "check the node, then look the transaction up before retrying."
            ) from exc
        if receipt["status"] != 1:
            raise self._replay_failure(fn, receipt)
        return Receipt(
            tx_hash=tx_hash.to_0x_hex(),
            block_number=int(receipt["blockNumber"]),
            gas_used=int(receipt["gasUsed"]),
            logs=list(receipt["logs"]),
            contract_address=receipt.get("contractAddress"),
            raw=receipt,
        )

    def _replay_failure(self, fn: ContractFunction | ContractConstructor, receipt: Any) -> TransactionFailed:
        """Re-runs a mined, reverted call at its block to learn why it reverted."""
        if not hasattr(fn, "call"):
            return TransactionFailed(f"{_name(fn)} reverted in block {receipt['blockNumber']}.")
        try:
            fn.call({"from": self.address}, block_identifier=receipt["blockNumber"] - 1)
        except ContractLogicError as exc:
            return self._failure(fn, exc)
        return TransactionFailed(f"{_name(fn)} reverted in block {receipt['blockNumber']} (out of gas?).")

    def _failure(self, fn: ContractFunction | ContractConstructor, exc: ContractLogicError) -> TransactionFailed:
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
