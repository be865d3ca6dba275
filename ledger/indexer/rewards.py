"""Reward trees the oracle built, kept with every provider's proof, and the leaf a
provider claims with: the one under the root RewardDistributor has finalized."""

from __future__ import annotations

from typing import NamedTuple

from sqlalchemy import delete, insert
from sqlmodel import Session, select

from ledger.errors import InvalidInput, SwarmError
from ledger.indexer.models import Cursor, Epoch, RewardRow
from ledger.indexer.store import CHUNK
from ledger.merkle import RewardTree
from ledger.units import parse_address


class NotIndexed(SwarmError):
    """The ledger database has not indexed this chain yet."""


class RewardLeaf(NamedTuple):
    epoch: int
    cumulative: int
    proof: list[bytes]


def _hex(value: bytes | str) -> str:
    return value.lower() if isinstance(value, str) else "0x" + value.hex()


def store_reward_tree(
    session: Session, chain_id: int, epoch: int, rewards_root: bytes | str, cumulative: dict[str, int]
) -> RewardTree:
    """Stores each provider's cumulative earnings and proof under `rewards_root`.

    The tree is rebuilt here and must have that root, so a stored proof always verifies.
    Storing the same root again replaces its rows. Runs in the caller's transaction
    (the caller commits), so the oracle can record it with the rest of its epoch.
    """
    tree = RewardTree.build(cumulative)
    root = _hex(rewards_root)
    if _hex(tree.root) != root:
        raise InvalidInput(
            f"The rewards of epoch {epoch} hash to root {_hex(tree.root)}, not {root}; "
            "store the cumulative amounts the report was built from."
        )
    table = RewardRow.__table__
    session.execute(delete(table).where(table.c.chain_id == chain_id, table.c.rewards_root == root))
    rows = [
        {
            "chain_id": chain_id,
            "rewards_root": root,
            "provider": provider,
            "epoch": epoch,
            "cumulative": amount,
            "proof": [_hex(p) for p in tree.proof(provider)],
        }
        for provider, amount in tree.values.items()
    ]
    for i in range(0, len(rows), CHUNK * 10):
        session.execute(insert(table), rows[i : i + CHUNK * 10])
    return tree


def reward_leaf(session: Session, chain_id: int, provider: str) -> RewardLeaf | None:
    """The provider's leaf under the latest finalized root, or None when there is none to claim with.

    The distributor verifies claims against its latest finalized root only, so an older
    tree's proof would be refused: only the latest finalized epoch (as indexed) counts.
    Raises NotIndexed when the database has never synced this chain.
    """
    address = parse_address(provider, "provider address")
    if session.get(Cursor, chain_id) is None:
        raise NotIndexed(
            f"The ledger database has not indexed chain {chain_id} yet; run `swarm ledger sync` first."
        )
    latest = session.exec(
        select(Epoch)
        .where(Epoch.chain_id == chain_id, Epoch.status == "finalized")
        .order_by(Epoch.epoch.desc())
    ).first()
    if latest is None:
        return None
    row = session.exec(
        select(RewardRow).where(
            RewardRow.chain_id == chain_id,
            RewardRow.rewards_root == latest.rewards_root,
            RewardRow.provider == address,
        )
    ).first()
    if row is None:
        return None
    return RewardLeaf(latest.epoch, row.cumulative, [bytes.fromhex(p[2:]) for p in row.proof])
