"""The local devnet: start, stop and report anvil; persistent state; dev accounts; snapshots; and,
as the lowest package, the one JSON-RPC client (`anvil.rpc`) and the root of the errors a user can
act on (`anvil.errors`), which the ledger builds on."""

from anvil import keyfile
from anvil.accounts import DEV_MNEMONIC, DevAccount, dev_account, dev_accounts, dev_address
from anvil.errors import AnvilError
from anvil.node import AnvilConfig, AnvilNode, AnvilStatus
from anvil.rpc import DEVNET_CHAIN_IDS, JsonRpc, RpcClient

__all__ = [
    "DEVNET_CHAIN_IDS",
    "DEV_MNEMONIC",
    "AnvilConfig",
    "AnvilError",
    "AnvilNode",
    "AnvilStatus",
    "DevAccount",
    "JsonRpc",
    "RpcClient",
    "dev_account",
    "dev_accounts",
    "dev_address",
]

keyfile.install()  # before anything loads eth_account (anvil.accounts loads it when first asked)
