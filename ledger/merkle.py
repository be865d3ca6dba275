"""OpenZeppelin StandardMerkleTree over (address provider, uint256 cumulative) leaves.

Same leaf encoding, leaf order, tree layout and proofs as @openzeppelin/merkle-tree, so
any standard tool verifies the roots Swarm publishes: leaf =
keccak256(bytes.concat(keccak256(abi.encode(provider, cumulative)))), pairs hashed sorted.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from eth_abi import encode as abi_encode
from eth_utils import keccak, to_checksum_address


def leaf_hash(provider: str, cumulative: int) -> bytes:
    return keccak(keccak(abi_encode(["address", "uint256"], [provider, cumulative])))


def hash_pair(a: bytes, b: bytes) -> bytes:
    return keccak(a + b) if a < b else keccak(b + a)


@dataclass(frozen=True)
class RewardTree:
    """A built tree: its root, and a proof for every provider."""

    tree: list[bytes]  # array layout: node i has children 2i+1 and 2i+2; leaves at the end
    index: dict[str, int]  # provider → position of its leaf in `tree`
    values: dict[str, int]  # provider → cumulative

    @classmethod
    def build(cls, cumulative: dict[str, int] | Iterable[tuple[str, int]]) -> RewardTree:
        items = list(cumulative.items()) if isinstance(cumulative, dict) else list(cumulative)
        if not items:
            raise ValueError("a reward tree needs at least one leaf")
        values = {to_checksum_address(p): int(c) for p, c in items}
        if len(values) != len(items):
            raise ValueError("each provider may appear once in a reward tree")
        leaves = sorted((leaf_hash(p, c), p) for p, c in values.items())
        n = len(leaves)
        tree: list[bytes] = [b""] * (2 * n - 1)
        index: dict[str, int] = {}
        for i, (leaf, provider) in enumerate(leaves):
            position = len(tree) - 1 - i
            tree[position] = leaf
            index[provider] = position
        for i in range(len(tree) - 1 - n, -1, -1):
            tree[i] = hash_pair(tree[2 * i + 1], tree[2 * i + 2])
        return cls(tree=tree, index=index, values=values)

    @property
    def root(self) -> bytes:
        return self.tree[0]

    def proof(self, provider: str) -> list[bytes]:
        i = self.index[to_checksum_address(provider)]
        proof = []
        while i > 0:
            sibling = i + 1 if i % 2 == 1 else i - 1
            proof.append(self.tree[sibling])
            i = (i - 1) // 2
        return proof


def verify(root: bytes, provider: str, cumulative: int, proof: list[bytes]) -> bool:
    node = leaf_hash(to_checksum_address(provider), cumulative)
    for sibling in proof:
        node = hash_pair(node, sibling)
    return node == root
