"""Reward trees the oracle built, kept with every provider's proof, and the leaf a
provider claims with: the one under the root RewardDistributor has finalized."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, NamedTuple

from ledger.errors import InvalidInput, SwarmError
from ledger.reader import Reader, SqlAlchemyReader, SqliteReader
from ledger.units import parse_address

if TYPE_CHECKING:
    from sqlmodel import Session

    from ledger.merkle import RewardTree


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
    from sqlalchemy import delete, insert

    # The ORM and numpy: `swarm provider status` reads a leaf (`reward_leaf`) with plain SQL, loading neither.
    from ledger.indexer.models import RewardRow
    from ledger.indexer.store import CHUNK
    from ledger.merkle import RewardTree

    tree = RewardTree.build(cumulative)
    root = _hex(rewards_root)
    if _hex(tree.root) != root:
        raise InvalidInput(
            f"The rewards of epoch {epoch} hash to root {_hex(tree.root)}, not {root}; "
            "store the cumulative amounts the report was built from."
        )
    table = RewardRow.__table__  # type: ignore[attr-defined]
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


def reward_leaf(db: Reader | Session, chain_id: int, provider: str) -> RewardLeaf | None:
    """The provider's leaf under the latest finalized root, or None when there is none to claim with.

    The distributor verifies claims against its latest finalized root only, so an older
    tree's proof would be refused: only the latest finalized epoch (as indexed) counts.
    Raises NotIndexed when the database has never synced this chain. Plain SQL through a
    ledger.reader (a Session is wrapped in one), so `swarm provider status` needs no ORM.
    """
    reader = db if isinstance(db, (SqliteReader, SqlAlchemyReader)) else SqlAlchemyReader(db)
    address = parse_address(provider, "provider address")
    if reader.one(_INDEXED, chain=chain_id) is None:
        raise NotIndexed(
            f"The ledger database has not indexed chain {chain_id} yet; run `swarm ledger sync` first."
        )
    latest = reader.one(_LATEST_FINALIZED, chain=chain_id)
    if latest is None:
        return None
    epoch, root = latest
    row = reader.one(_LEAF, chain=chain_id, root=root, provider=address)
    if row is None:
        return None
    cumulative, proof = row
    proof = json.loads(proof) if isinstance(proof, str) else proof  # JSON text on SQLite, JSONB on PostgreSQL
    return RewardLeaf(int(epoch), int(cumulative), [bytes.fromhex(p[2:]) for p in proof])


_INDEXED = "SELECT 1 FROM cursor WHERE chain_id = :chain"
_LATEST_FINALIZED = (
    "SELECT epoch, rewards_root FROM epochs WHERE chain_id = :chain AND status = 'finalized' "
    "ORDER BY epoch DESC LIMIT 1"
)
_LEAF = ("SELECT cumulative, proof FROM rewards "
         "WHERE chain_id = :chain AND rewards_root = :root AND provider = :provider")
