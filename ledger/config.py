"""Swarm's configuration, read once from the environment (docs/architecture.md §1)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ledger.errors import SwarmError

DEFAULT_ANVIL_PORT = 8545
DB_FILE = "ledger.db"


@dataclass(frozen=True)
class Settings:
    home: Path  # SWARM_HOME: state, deployments, the ledger database
    rpc_url: str  # SWARM_RPC_URL: any EVM JSON-RPC endpoint
    anvil_port: int  # SWARM_ANVIL_PORT: where `swarm chain up` serves the local devnet
    rpc_url_is_default: bool  # True when rpc_url points at the local anvil by default

    @property
    def deployments_dir(self) -> Path:
        return self.home / "deployments"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        home = Path(env.get("SWARM_HOME", ".swarm")).expanduser().resolve()
        port_text = env.get("SWARM_ANVIL_PORT", str(DEFAULT_ANVIL_PORT))
        try:
            port = int(port_text)
        except ValueError:
            port = -1
        if not 0 < port < 65536:
            raise SwarmError(
                f"SWARM_ANVIL_PORT={port_text!r} is not a TCP port; set it to a number from 1 to 65535."
            )
        rpc_url = env.get("SWARM_RPC_URL")
        return cls(
            home=home,
            rpc_url=rpc_url or f"http://127.0.0.1:{port}",
            anvil_port=port,
            rpc_url_is_default=not rpc_url,
        )


def database_url(home: Path, env: Mapping[str, str] | None = None) -> str:
    """SWARM_DB_URL, or the SQLite file in SWARM_HOME."""
    env = os.environ if env is None else env
    return env.get("SWARM_DB_URL") or f"sqlite:///{home / DB_FILE}"
