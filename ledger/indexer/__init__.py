"""The ledger indexer: Swarm's contract events in block ranges into SQL tables,
reorg-safe and resumable; and the reward trees the oracle stores beside them.

The names below load with their module on first use, so reading a table (which needs only
`ledger.indexer.models`) does not import the sync machinery and web3 with it."""

from __future__ import annotations

import importlib
from typing import Any

# What `swarm ledger show` can list, and how many blocks one eth_getLogs range spans.
KINDS = ("providers", "jobs", "epochs", "slashes")
DEFAULT_BATCH_BLOCKS = 2_000

_WHERE = {
    "Indexer": "ledger.indexer.sync",
    "RangeDone": "ledger.indexer.sync",
    "SyncReport": "ledger.indexer.sync",
    "NotIndexed": "ledger.indexer.rewards",
    "RewardLeaf": "ledger.indexer.rewards",
    "reward_leaf": "ledger.indexer.rewards",
    "store_reward_tree": "ledger.indexer.rewards",
}

__all__ = ["DEFAULT_BATCH_BLOCKS", "KINDS", *sorted(_WHERE)]  # noqa: PLE0604 -- names loaded on first use


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
