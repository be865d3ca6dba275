"""The ledger indexer: Swarm's contract events in block ranges into SQL tables,
reorg-safe and resumable; and the reward trees the oracle stores beside them."""

from ledger.indexer.rewards import NotIndexed, RewardLeaf, reward_leaf, store_reward_tree
from ledger.indexer.sync import Indexer, RangeDone, SyncReport

__all__ = [
    "Indexer",
    "NotIndexed",
    "RangeDone",
    "RewardLeaf",
    "SyncReport",
    "reward_leaf",
    "store_reward_tree",
]
