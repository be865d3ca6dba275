"""JSON-RPC to an EVM node over plain HTTP: the light client behind reads (`eth_call`,
balances, code, blocks), with no web3 to import."""

from __future__ import annotations

import urllib.error
from typing import Any

from anvil.rpc import post_json_rpc
from ledger.errors import ChainUnavailable, SwarmError

RPC_TIMEOUT = 30


class RpcError(SwarmError):
    """The node answered a request with a JSON-RPC error."""

    def __init__(self, method: str, error: dict) -> None:
        self.method = method
        self.code = error.get("code")
        self.message = str(error.get("message", error))
        self.data = error.get("data")
        super().__init__(f"{method} failed: {self.message}")

    @property
    def revert_data(self) -> bytes | None:
        """The bytes a reverted call returned (a custom error, Error(string), Panic), if any."""
        data = self.data
        if isinstance(data, dict):  # some nodes nest it: {"data": "0x…"}
            data = data.get("data")
        if isinstance(data, str) and data.startswith("0x"):
            try:
                return bytes.fromhex(data[2:])
            except ValueError:
                return None
        return None


class JsonRpc:
    """Requests to one node; a node that does not answer raises ChainUnavailable."""

    def __init__(self, url: str, timeout: float = RPC_TIMEOUT) -> None:
        self.url = url
        self.timeout = timeout
        self._next_id = 0

    def __call__(self, method: str, *params: Any) -> Any:
        self._next_id += 1
        try:
            reply = post_json_rpc(self.url, self._next_id, method, params, self.timeout)
        except urllib.error.HTTPError as exc:
            raise ChainUnavailable(
                f"The node at {self.url} answered {method} with HTTP {exc.code}; check SWARM_RPC_URL."
            ) from exc
        except (urllib.error.URLError, OSError) as exc:
            raise ChainUnavailable(
                f"No chain answers at {self.url}. Start the local one with `swarm chain up`, "
                "or point SWARM_RPC_URL at a running node."
            ) from exc
        except ValueError as exc:
            raise ChainUnavailable(f"The node at {self.url} sent something that is not JSON-RPC; check SWARM_RPC_URL.") from exc
        if not isinstance(reply, dict):
            raise ChainUnavailable(f"The node at {self.url} sent something that is not JSON-RPC; check SWARM_RPC_URL.")
        if reply.get("error") is not None:
            error = reply["error"] if isinstance(reply["error"], dict) else {"message": reply["error"]}
            raise RpcError(method, error)
        return reply.get("result")
