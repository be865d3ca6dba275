"""Anvil's public development accounts, derived from its well-known test mnemonic.

These keys are published with Foundry and fund every anvil chain; they are safe to use
only on a devnet and are never accepted elsewhere (see ledger.keys).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from eth_account import Account

DEV_MNEMONIC = "test test test test test test test test test test test junk"
DEV_ACCOUNT_COUNT = 10

Account.enable_unaudited_hdwallet_features()


@dataclass(frozen=True)
class DevAccount:
    index: int
    address: str
    key: bytes  # a public devnet key; still never printed

    def __repr__(self) -> str:  # keep the key out of logs and tracebacks
        return f"DevAccount(index={self.index}, address={self.address})"


@cache
def dev_account(index: int) -> DevAccount:
    """Anvil's dev account `index` (m/44'/60'/0'/0/index of the test mnemonic)."""
    if index < 0:
        raise ValueError(f"dev account index must be >= 0, got {index}")
    acct = Account.from_mnemonic(DEV_MNEMONIC, account_path=f"m/44'/60'/0'/0/{index}")
    return DevAccount(index=index, address=acct.address, key=bytes(acct.key))


def dev_accounts(count: int = DEV_ACCOUNT_COUNT) -> list[DevAccount]:
    """The first `count` dev accounts, the ones anvil funds with ether."""
    return [dev_account(i) for i in range(count)]
