"""A connection to one EVM chain over JSON-RPC."""

from __future__ import annotations

from dataclasses import dataclass

import requests
from web3 import Web3
from web3.exceptions import ProviderConnectionError, Web3RPCError

from anvil.rpc import DEVNET_CHAIN_IDS
from ledger.errors import ChainUnavailable, SwarmError

RPC_TIMEOUT = 30


@dataclass(frozen=True)
class Chain:
    w3: Web3
    url: str
    chain_id: int

    @property
    def is_devnet(self) -> bool:
        return self.chain_id in DEVNET_CHAIN_IDS

    def timestamp(self) -> int:
        return int(self.w3.eth.get_block("latest")["timestamp"])


def connect(url: str, expected_chain_id: int | None = None) -> Chain:
    """Connects to `url`, checking that a node answers and has the expected chain id."""
    w3 = Web3(Web3.HTTPProvider(url, request_kwargs={"timeout": RPC_TIMEOUT}))
    try:
        chain_id = int(w3.eth.chain_id)
    except (requests.exceptions.RequestException, ProviderConnectionError, OSError) as exc:
        raise ChainUnavailable(
            f"No chain answers at {url}. Start the local one with `swarm chain up`, "
            "or point SWARM_RPC_URL at a running node."
        ) from exc
    except Web3RPCError as exc:
        raise ChainUnavailable(f"The node at {url} refused eth_chainId ({exc}); check SWARM_RPC_URL.") from exc
    if expected_chain_id is not None and chain_id != expected_chain_id:
        raise SwarmError(
            f"The chain at {url} has chain id {chain_id}, not {expected_chain_id}; "
            "point SWARM_RPC_URL at the intended chain or pass the right --chain-id."
        )
    return Chain(w3=w3, url=url, chain_id=chain_id)
