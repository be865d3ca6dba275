"""Transactions: local nonces that recover when another client used the key, and receipts."""

from __future__ import annotations

from anvil import dev_account
from ledger.client import Swarm
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
