"""A minimal JSON-RPC client for anvil's own methods (snapshots, time, mining, reorgs)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from anvil.errors import AnvilError

# Chain ids on which Swarm treats the chain as a disposable devnet.
DEVNET_CHAIN_IDS = frozenset({31337})


def post_json_rpc(url: str, request_id: int, method: str, params: Any, timeout: float) -> Any:
    """One JSON-RPC request over HTTP: the decoded reply. Transport and JSON errors propagate."""
    body = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": list(params)})
    request = urllib.request.Request(url, data=body.encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


class RpcClient:
    """Talks JSON-RPC to one node; used for devnet helpers, not for transactions."""

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        self.url = url
        self.timeout = timeout
        self._next_id = 0

    def call(self, method: str, *params: Any) -> Any:
        self._next_id += 1
        try:
            reply = post_json_rpc(self.url, self._next_id, method, params, self.timeout)
        except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
            raise AnvilError(
                f"No chain answers at {self.url}. Start one with `swarm chain up` or set SWARM_RPC_URL."
            ) from exc
        if "error" in reply:
            raise AnvilError(f"{method} failed at {self.url}: {reply['error'].get('message', reply['error'])}")
        return reply["result"]

    def is_up(self) -> bool:
        try:
            self.call("eth_chainId")
        except AnvilError:
            return False
        return True

    def chain_id(self) -> int:
        return int(self.call("eth_chainId"), 16)

    def block_number(self) -> int:
        return int(self.call("eth_blockNumber"), 16)

    # ── devnet helpers: snapshots, time, mining ──────────────────────────────

    def snapshot(self) -> str:
        """Takes an EVM snapshot; `revert(id)` restores it (and consumes it)."""
        return self.call("evm_snapshot")

    def revert(self, snapshot_id: str) -> None:
        if not self.call("evm_revert", snapshot_id):
            raise AnvilError(f"snapshot {snapshot_id} could not be restored (already used?)")

    def increase_time(self, seconds: int) -> None:
        """Moves the chain clock forward and mines a block at the new time."""
        self.call("evm_increaseTime", int(seconds))
        self.call("evm_mine")

    def mine(self, blocks: int = 1) -> None:
        self.call("anvil_mine", hex(blocks))

    def latest_timestamp(self) -> int:
        return int(self.call("eth_getBlockByNumber", "latest", False)["timestamp"], 16)
