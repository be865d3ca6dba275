"""The JSON-RPC client's errors (anvil/rpc.py) and the devnet's, in Swarm's one family of errors
(`core.errors`). Each message names the problem and the fix.

They are defined in the lowest package of the chain's side because the one JSON-RPC client lives
here (a devnet is asked whether it answers before any ledger exists) and anvil must not import
the ledger; `ledger.errors` re-exports them beside its own.
"""

from __future__ import annotations

from typing import Any

from core.errors import SwarmError, Unavailable


class ChainUnavailable(Unavailable):
    """No JSON-RPC node answers at the configured URL, or what answers is not one."""


class RpcError(SwarmError):
    """The node refused a request: a JSON-RPC error (a revert among them), or an HTTP refusal."""

    status = 502  # the node behind the caller refused

    def __init__(self, url: str, method: str, error: dict[str, Any]) -> None:
        self.url = url
        self.method = method
        self.code = error.get("code")
        self.message = str(error.get("message", error))
        self.data = error.get("data")
        super().__init__(
            f"The node at {url} refused {method} ({self.message.rstrip('.')}); "
            "check its arguments, and that SWARM_RPC_URL names a node that serves it."
        )

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


class AnvilError(SwarmError):
    """The local anvil could not be started, reached or stopped."""
