"""Anvil's public development accounts, derived from its well-known test mnemonic.

These keys are published with Foundry and fund every anvil chain; they are safe to use
only on a devnet and are never accepted elsewhere (see ledger.keys).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

DEV_MNEMONIC = "test test test test test test test test test test test junk"
DEV_ACCOUNT_COUNT = 10

# The addresses of the ten funded accounts, as Foundry publishes them: a command that only
# names an account (`swarm token balance --account 3`) need not load the key derivation.
DEV_ADDRESSES = (
    "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266",
    "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
    "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC",
    "0x90F79bf6EB2c4f870365E785982E1f101E93b906",
    "0x15d34AAf54267DB7D7c367839AAf71A00a2C6A65",
    "0x9965507D1a55bcC2695C58ba16FB37d819B0A4dc",
    "0x976EA74026E726554dB657fA54763abd0C3a0aa9",
    "0x14dC79964da2C08b23698B3D3cc7Ca32193d9955",
    "0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f",
    "0xa0Ee7A142d267C1f36714E4a8F75612F20a79720",
)


@dataclass(frozen=True)
class DevAccount:
    index: int
    address: str
    key: bytes  # a public devnet key; still never printed

    def __repr__(self) -> str:  # keep the key out of logs and tracebacks
        return f"DevAccount(index={self.index}, address={self.address})"


def dev_address(index: int) -> str:
    """The address of dev account `index`, without deriving its key for the first ten."""
    if 0 <= index < len(DEV_ADDRESSES):
        return DEV_ADDRESSES[index]
    return dev_account(index).address


@cache
def dev_account(index: int) -> DevAccount:
    """Anvil's dev account `index` (m/44'/60'/0'/0/index of the test mnemonic)."""
    if index < 0:
        raise ValueError(f"dev account index must be >= 0, got {index}")
    from eth_account import Account

    Account.enable_unaudited_hdwallet_features()
    acct = Account.from_mnemonic(DEV_MNEMONIC, account_path=f"m/44'/60'/0'/0/{index}")
    return DevAccount(index=index, address=acct.address, key=bytes(acct.key))


def dev_accounts(count: int = DEV_ACCOUNT_COUNT) -> list[DevAccount]:
    """The first `count` dev accounts, the ones anvil funds with ether."""
    return [dev_account(i) for i in range(count)]
