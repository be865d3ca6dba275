"""The local devnet: start, stop and report anvil; persistent state; dev accounts; snapshots."""

from anvil.accounts import DEV_MNEMONIC, DevAccount, dev_account, dev_accounts, dev_address
from anvil.errors import AnvilError
from anvil.node import AnvilConfig, AnvilNode, AnvilStatus
from anvil.rpc import DEVNET_CHAIN_IDS, RpcClient

__all__ = [
    "DEV_MNEMONIC",
    "DEVNET_CHAIN_IDS",
    "AnvilConfig",
    "AnvilError",
    "AnvilNode",
    "AnvilStatus",
    "DevAccount",
    "RpcClient",
    "dev_account",
    "dev_accounts",
    "dev_address",
]
