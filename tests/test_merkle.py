"""The Python reward tree matches OpenZeppelin's StandardMerkleTree, leaf for leaf."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from eth_utils import to_checksum_address
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.merkle import RewardTree, verify

REPO = Path(__file__).resolve().parents[1]
OZ_TREE = """
const {StandardMerkleTree} = require('@openzeppelin/merkle-tree');
const values = JSON.parse(require('fs').readFileSync(0, 'utf8'));
const tree = StandardMerkleTree.of(values, ['address', 'uint256']);
const proofs = {};
for (const [i, v] of tree.entries()) proofs[v[0]] = tree.getProof(i);
console.log(JSON.stringify({root: tree.root, proofs}));
"""

addresses = st.binary(min_size=20, max_size=20).map(lambda b: to_checksum_address(b))
leaves = st.dictionaries(addresses, st.integers(min_value=0, max_value=2**256 - 1), min_size=1, max_size=40)


def _openzeppelin(values: dict[str, int]) -> dict:
    done = subprocess.run(
        ["node", "-e", OZ_TREE], input=json.dumps([[a, str(c)] for a, c in values.items()]),
        capture_output=True, text=True, cwd=REPO, check=True,
    )
    return json.loads(done.stdout)


@settings(max_examples=25, deadline=None)
@given(leaves)
def test_root_and_every_proof_match_openzeppelin(values: dict[str, int]) -> None:
    ours = RewardTree.build(values)
    theirs = _openzeppelin(values)
    assert "0x" + ours.root.hex() == theirs["root"]
    for provider, cumulative in values.items():
        proof = ours.proof(provider)
        assert ["0x" + p.hex() for p in proof] == theirs["proofs"][provider]
        assert verify(ours.root, provider, cumulative, proof)


@settings(max_examples=50, deadline=None)
@given(leaves, st.integers(min_value=1, max_value=2**64))
def test_a_proof_does_not_verify_another_amount(values: dict[str, int], bump: int) -> None:
    tree = RewardTree.build(values)
    provider, cumulative = next(iter(values.items()))
    assert not verify(tree.root, provider, (cumulative + bump) % 2**256, tree.proof(provider))
