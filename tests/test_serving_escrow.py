"""The serving escrow on a real anvil, through ledger.serving: the digests Python packs by hand are
the contract's, receipts and vouchers signed fast are what a wallet signs, a deposit is redeemed
by vouchers for what each adds, a thaw leaves what the buyer signed redeemable, and forged,
stale or malformed signatures are refused, on chain and off."""

from __future__ import annotations

import pytest
from eth_account import Account
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from anvil import dev_account
from ledger import serving
from ledger.client import Swarm
from ledger.eip712 import domain, typed_message
from ledger.errors import InvalidInput, TransactionFailed
from ledger.keys import DigestSigner, InvalidSignature, recover
from ledger.serving import Domain, Receipt, Voucher
from ledger.units import ONE

BUYER, PROVIDER, STRANGER = dev_account(4), dev_account(1), dev_account(6)


def _domain(swarm: Swarm) -> Domain:
    return serving.domain_of(swarm)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(amount=st.integers(1, 2**128 - 1), nonce=st.integers(0, 2**256 - 1),
       timestamp=st.integers(0, 2**64 - 1), cumulative=st.integers(1, 2**128 - 1))
def test_the_packed_digests_are_the_contracts_and_a_wallets(swarm: Swarm, amount: int, nonce: int,
                                                             timestamp: int, cumulative: int) -> None:
    d = _domain(swarm)
    assert serving.receipt_digest(d, PROVIDER.address, amount, nonce, timestamp) == bytes(
        swarm.read("ServingEscrow", "receiptDigest", PROVIDER.address, amount, nonce, timestamp))
    assert serving.voucher_digest(d, BUYER.address, PROVIDER.address, cumulative) == bytes(
        swarm.read("ServingEscrow", "voucherDigest", BUYER.address, PROVIDER.address, cumulative))
    # What the fast signer makes is what eth-account's typed-data signing makes.
    typed = typed_message(
        "Receipt",
        [("provider", "address"), ("amount", "uint128"), ("nonce", "uint256"), ("timestamp", "uint64")],
        domain("SwarmServing", "1", d.chain_id, d.escrow),
        {"provider": PROVIDER.address, "amount": amount, "nonce": nonce, "timestamp": timestamp})
    wallet = bytes(Account.from_key(BUYER.key).sign_typed_data(full_message=typed).signature)
    receipt = serving.sign_receipt(DigestSigner(BUYER.key), d, PROVIDER.address, amount, nonce, timestamp)
    assert receipt.signature == wallet
    assert serving.receipt_signer(d, receipt) == BUYER.address
    assert Receipt.from_header(receipt.header(), PROVIDER.address) == receipt


def test_a_deposit_is_paid_out_by_vouchers_for_what_each_adds(swarm: Swarm) -> None:
    d, buyer = _domain(swarm), swarm.sender(BUYER.key)
    signer, relayer = DigestSigner(BUYER.key), swarm.sender(STRANGER.key)
    serving.deposit(swarm, buyer, PROVIDER.address, 100 * ONE)
    start = swarm.balance_of(PROVIDER.address)
    receipts = [serving.sign_receipt(signer, d, PROVIDER.address, ONE // 1000) for _ in range(2_000)]
    assert len({r.nonce for r in receipts}) == 2_000
    owed = sum(r.amount for r in receipts)
    first = serving.sign_voucher(signer, d, PROVIDER.address, owed)
    serving.check_voucher(d, first)
    receipt = serving.redeem(swarm, relayer, first)  # anyone may send it: the provider is paid
    assert swarm.balance_of(PROVIDER.address) == start + owed
    later = serving.sign_voucher(signer, d, PROVIDER.address, owed + 5 * ONE)
    serving.redeem(swarm, relayer, later)
    assert swarm.balance_of(PROVIDER.address) == start + owed + 5 * ONE
    state = serving.account(swarm, BUYER.address, PROVIDER.address)
    assert (state.balance, state.redeemed) == (100 * ONE - owed - 5 * ONE, owed + 5 * ONE)
    assert receipt.gas_used < 80_000 + 21_000 + 4_000, "one redemption, 2,000 requests"
    with pytest.raises(TransactionFailed, match="VoucherNotAbove"):
        serving.redeem(swarm, relayer, first)  # an older voucher pays nothing
    assert swarm.balance_of(PROVIDER.address) == start + owed + 5 * ONE


def test_forged_vouchers_are_refused_on_chain_and_off(swarm: Swarm) -> None:
    d = _domain(swarm)
    serving.deposit(swarm, swarm.sender(BUYER.key), PROVIDER.address, 10 * ONE)
    by_provider = serving.sign_voucher(DigestSigner(PROVIDER.key), d, PROVIDER.address, ONE)
    forged = Voucher(BUYER.address, PROVIDER.address, ONE, by_provider.signature)
    with pytest.raises(InvalidSignature, match="not signed by its buyer"):
        serving.check_voucher(d, forged)
    with pytest.raises(TransactionFailed, match="InvalidVoucherSignature"):
        serving.redeem(swarm, swarm.sender(PROVIDER.key), forged)
    genuine = serving.sign_voucher(DigestSigner(BUYER.key), d, PROVIDER.address, ONE)
    raised = Voucher(genuine.buyer, genuine.provider, 2 * ONE, genuine.signature)
    with pytest.raises(TransactionFailed, match="InvalidVoucherSignature"):
        serving.redeem(swarm, swarm.sender(PROVIDER.key), raised)
    assert serving.account(swarm, BUYER.address, PROVIDER.address).redeemed == 0


def test_a_thawed_deposit_stays_redeemable_until_the_buyer_withdraws_it(swarm: Swarm, rpc) -> None:
    d, buyer = _domain(swarm), swarm.sender(BUYER.key)
    serving.deposit(swarm, buyer, PROVIDER.address, 10 * ONE)
    signed = serving.sign_voucher(DigestSigner(BUYER.key), d, PROVIDER.address, 4 * ONE)
    serving.thaw(swarm, buyer, PROVIDER.address, 10 * ONE)
    state = serving.account(swarm, BUYER.address, PROVIDER.address)
    assert state.thawing == 10 * ONE and state.spendable == 0
    with pytest.raises(InvalidInput, match="withdraw after that"):
        serving.withdraw(swarm, buyer, PROVIDER.address)
    serving.redeem(swarm, swarm.sender(PROVIDER.key), signed)  # within the thaw
    rpc.increase_time(int(swarm.read("ServingEscrow", "thawPeriod")))
    rpc.mine()
    before = swarm.balance_of(BUYER.address)
    serving.withdraw(swarm, buyer, PROVIDER.address)
    assert swarm.balance_of(BUYER.address) == before + 6 * ONE
    assert serving.account(swarm, BUYER.address, PROVIDER.address).balance == 0


def test_malformed_receipts_and_signatures_get_one_sentence() -> None:
    provider = PROVIDER.address
    buyer = BUYER.address
    for header in ("", "1.2.3", f"{buyer}.x.1.1." + "00" * 65, f"{buyer}.1.zz.1." + "00" * 65,
                   f"{buyer}.1.1.1.abc", "1.1.1." + "00" * 65, f"0x12.1.1.1.{'00' * 65}", "9" * 400):
        with pytest.raises(InvalidInput, match="Swarm-Receipt header"):
            Receipt.from_header(header, provider)
    with pytest.raises(InvalidInput, match="amount must be from 1"):
        Receipt.from_header(f"{buyer}.0.1.1." + "00" * 65, provider)
    with pytest.raises(InvalidInput, match="65 bytes"):
        Receipt.from_header(f"{buyer}.1.1.1." + "00" * 64, provider)
    d = Domain(31337, "0x" + "11" * 20)
    good = serving.sign_receipt(DigestSigner(BUYER.key), d, provider, 5)
    high_s = (2**256 - 1).to_bytes(32, "big")
    for bad in (good.signature[:64] + b"\x05", good.signature[:32] + high_s + good.signature[64:],
                bytes(64) + b"\x1b"):
        with pytest.raises(InvalidSignature):
            recover(good.digest(d), bad)
    with pytest.raises(InvalidInput, match="voucher is"):
        Voucher.from_dict({"buyer": BUYER.address})


def test_every_serving_example_reads_into_an_order_and_bad_specs_get_one_sentence() -> None:
    from pathlib import Path

    import yaml

    from market.serving import order_from_spec

    examples = sorted((Path(__file__).resolve().parent.parent / "examples" / "serving").glob("*.yaml"))
    assert examples
    for path in examples:
        order = order_from_spec(yaml.safe_load(path.read_text()))
        assert order.price > 0 and order.ends_at > 0
    base = {"model": "mlp", "price": {"per_request": "0.001"}}
    refused = (({**base, "colour": 1}, "no field colour"), ({**base, "replicas": 0}, "replicas"),
               ({**base, "price": 3}, "price must be"), ({**base, "model": "gpt-9"}, "model must be"),
               ({**base, "task": "generate"}, "checkpoint"), ({**base, "duration": "soon"}, "duration"),
               ({**base, "price": {"per_token": "1"}}, "per_token is for task generate"))
    for bad, words in refused:
        with pytest.raises(InvalidInput, match=words):
            order_from_spec(bad)
