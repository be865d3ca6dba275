"""Transactions: local nonces that recover when another client used the key, receipts, and
transactions the node lost."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from anvil import RpcClient, dev_account
from ledger.client import Swarm
from ledger.errors import SwarmError
from ledger.tx import Sender
from ledger.units import ONE


def test_sender_resyncs_its_nonce_after_another_client_used_the_key(swarm: Swarm) -> None:
    key = dev_account(7).key
    ours = swarm.sender(key)
    token = swarm.token.functions
    receiver = dev_account(8).address
    before = swarm.balance_of(receiver)
    ours.send(token.transfer(receiver, 1 * ONE))  # our local nonce is now cached
    other = Sender(swarm.chain, key, swarm.decoder)  # a second client with the same key
    other.send(token.transfer(receiver, 2 * ONE))
    receipt = ours.send(token.transfer(receiver, 3 * ONE))
    assert receipt.block_number > 0
    assert swarm.balance_of(receiver) == before + 6 * ONE
    assert swarm.chain.w3.eth.get_transaction_count(ours.address) == ours._nonce


def test_sender_never_shows_its_key(swarm: Swarm) -> None:
    key = dev_account(7).key
    sender = swarm.sender(key)
    assert key.hex() not in repr(sender) and key.hex() not in str(sender)
    assert key.hex() not in repr(dev_account(7))


def _pending_hash(rpc: RpcClient, sender: str) -> str:
    """The hash of `sender`'s transaction waiting in the node's pool, once it is there."""
    for _ in range(100):
        pending = rpc.call("txpool_content")["pending"]
        mine = next((txs for address, txs in pending.items() if address.lower() == sender.lower()), None)
        if mine:
            (tx,) = mine.values()
            return tx["hash"]
        time.sleep(0.05)
    raise AssertionError(f"no transaction of {sender} reached the pool")


def _in_thread(action) -> tuple[threading.Thread, dict]:
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["receipt"] = action()
        except Exception as exc:  # noqa: BLE001 - handed to the test, which asserts on it
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


@pytest.fixture
def manual_mining(rpc: RpcClient) -> Iterator[RpcClient]:
    rpc.call("evm_setAutomine", False)
    yield rpc
    rpc.call("evm_setAutomine", True)


def test_a_transaction_the_node_lost_is_sent_again_and_mined_once(
    swarm: Swarm, manual_mining: RpcClient
) -> None:
    rpc, key, receiver = manual_mining, dev_account(7).key, dev_account(8).address
    sender = swarm.sender(key)
    before, nonce = swarm.balance_of(receiver), swarm.chain.w3.eth.get_transaction_count(sender.address)
    thread, outcome = _in_thread(lambda: sender.send(swarm.token.functions.transfer(receiver, 5 * ONE)))
    lost = _pending_hash(rpc, sender.address)
    rpc.call("anvil_dropTransaction", lost)  # what a node restarted from its last state forgets
    assert rpc.call("eth_getTransactionByHash", lost) is None
    for _ in range(200):  # the sender notices and sends the same signed transaction again
        if rpc.call("eth_getTransactionByHash", lost) is not None:
            break
        time.sleep(0.05)
    rpc.mine()
    thread.join(30)
    assert not thread.is_alive() and "error" not in outcome, outcome
    assert outcome["receipt"].tx_hash == lost
    assert swarm.balance_of(receiver) == before + 5 * ONE  # once
    assert swarm.chain.w3.eth.get_transaction_count(sender.address) == nonce + 1


def test_a_lost_transaction_whose_nonce_was_taken_fails_at_once(
    swarm: Swarm, manual_mining: RpcClient
) -> None:
    rpc, key, receiver = manual_mining, dev_account(7).key, dev_account(8).address
    ours, other = swarm.sender(key), Sender(swarm.chain, key, swarm.decoder)
    before = swarm.balance_of(receiver)
    thread, outcome = _in_thread(lambda: ours.send(swarm.token.functions.transfer(receiver, 5 * ONE)))
    rpc.call("anvil_dropTransaction", _pending_hash(rpc, ours.address))
    other_thread, other_outcome = _in_thread(
        lambda: other.send(swarm.token.functions.transfer(receiver, 2 * ONE))
    )
    _pending_hash(rpc, other.address)
    rpc.mine()
    other_thread.join(30)
    thread.join(30)  # not the receipt timeout: the sender sees the nonce taken
    assert "receipt" in other_outcome
    assert not thread.is_alive() and isinstance(outcome.get("error"), SwarmError)
    assert "lost" in str(outcome["error"]) and "taken its nonce" in str(outcome["error"])
    assert swarm.balance_of(receiver) == before + 2 * ONE  # the lost transfer never happened


def test_a_transaction_behind_lost_ones_of_its_key_fails_at_once(swarm: Swarm, rpc: RpcClient) -> None:
    key, receiver = dev_account(7).key, dev_account(8).address
    sender = swarm.sender(key)
    before = swarm.balance_of(receiver)
    older_state = rpc.snapshot()
    sender.send(swarm.token.functions.transfer(receiver, 1 * ONE))
    rpc.revert(older_state)  # the node forgets the mined transfer; the sender's next nonce is past its own
    try:
        thread, outcome = _in_thread(lambda: sender.send(swarm.token.functions.transfer(receiver, 2 * ONE)))
        thread.join(30)  # not the receipt timeout: the sender sees the gap in front of it
        assert not thread.is_alive() and isinstance(outcome.get("error"), SwarmError)
        assert "no longer has" in str(outcome["error"]) and "restarted from older state" in str(
            outcome["error"]
        )
        assert swarm.balance_of(receiver) == before
        assert sender._nonce is None  # the next send reads the chain's nonce afresh
    finally:
        rpc.call("anvil_dropAllTransactions")  # the held transfer would run once the gap closed
