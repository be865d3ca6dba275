"""A connection to one EVM chain over JSON-RPC.

Reads go through the one JSON-RPC client (`rpc`, anvil/rpc.py), light enough for commands that
must answer at once; web3, which transactions and deploys use, is imported the first time `w3` is
asked for."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, TypeVar

from anvil.rpc import DEVNET_CHAIN_IDS, RPC_TIMEOUT, JsonRpc
from ledger.errors import ChainUnavailable, RpcError, SwarmError

TRANSIENT_RETRIES = 3
T = TypeVar("T")

if TYPE_CHECKING:
    from web3 import Web3


@dataclass(frozen=True)
class Chain:
    url: str
    chain_id: int

    @property
    def is_devnet(self) -> bool:
        return self.chain_id in DEVNET_CHAIN_IDS

    @cached_property
    def rpc(self) -> JsonRpc:
        return JsonRpc(self.url)

    @cached_property
    def w3(self) -> Web3:
        from web3 import Web3

        return Web3(Web3.HTTPProvider(self.url, request_kwargs={"timeout": RPC_TIMEOUT}))

    def timestamp(self, block: int | str = "latest") -> int:
        tag = hex(block) if isinstance(block, int) else block
        return int(self.rpc("eth_getBlockByNumber", tag, False)["timestamp"], 16)

    def block_number(self) -> int:
        return int(self.rpc("eth_blockNumber"), 16)

    def code(self, address: str) -> bytes:
        return bytes.fromhex(self.rpc("eth_getCode", address, "latest")[2:])

    def call(self, to: str, data: bytes, block: int | str = "latest") -> bytes:
        """eth_call; a revert raises RpcError, whose `revert_data` holds what the call returned."""
        tag = hex(block) if isinstance(block, int) else block
        return bytes.fromhex(self.rpc("eth_call", {"to": to, "data": "0x" + data.hex()}, tag)[2:])


def connect(url: str, expected_chain_id: int | None = None) -> Chain:
    """Connects to `url`, checking that a node answers and has the expected chain id."""
    try:
        chain_id = int(JsonRpc(url)("eth_chainId"), 16)
    except RpcError as exc:
        raise ChainUnavailable(
            f"The node at {url} refused eth_chainId ({exc.message}); check SWARM_RPC_URL."
        ) from exc
    except (TypeError, ValueError) as exc:
        raise ChainUnavailable(
            f"The node at {url} answered eth_chainId with no chain id; check SWARM_RPC_URL."
        ) from exc
    if expected_chain_id is not None and chain_id != expected_chain_id:
        raise SwarmError(
            f"The chain at {url} has chain id {chain_id}, not {expected_chain_id}; "
            "point SWARM_RPC_URL at the intended chain or pass the right --chain-id."
        )
    return Chain(url=url, chain_id=chain_id)


def with_retries(action: Callable[[], T], url: str, attempts: int = TRANSIENT_RETRIES) -> T:
    """Runs an RPC action, retrying connection drops and timeouts with backoff."""
    import requests

    transient: tuple[type[BaseException], ...] = (
        requests.exceptions.ConnectionError,
        requests.exceptions.Timeout,
    )
    web3_errors = sys.modules.get("web3.exceptions")  # only an action that uses web3 raises its errors
    if web3_errors is not None:
        transient += (web3_errors.ProviderConnectionError,)
    for attempt in range(attempts):
        try:
            return action()
        except transient as exc:
            if attempt == attempts - 1:
                raise ChainUnavailable(
                    f"The chain at {url} stopped answering ({type(exc).__name__}); "
                    "check that the node is running (`swarm chain status`)."
                ) from exc
            time.sleep(0.2 * 2**attempt)
    raise AssertionError("unreachable")
