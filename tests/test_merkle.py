"""The Python reward tree matches OpenZeppelin's StandardMerkleTree, leaf for leaf."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

from eth_utils import to_checksum_address
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.merkle import RewardTree, checksum_addresses, verify

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


def test_every_proof_of_a_random_1000_leaf_tree_verifies_and_matches_openzeppelin() -> None:
    rng = random.Random(1000)
    values = {to_checksum_address(f"0x{rng.getrandbits(160):040x}"): rng.getrandbits(rng.choice((8, 70, 256)))
              for _ in range(1000)}
    tree = RewardTree.build(values)
    proofs = tree.proofs()
    assert set(proofs) == set(values)
    theirs = _openzeppelin(values)
    assert "0x" + tree.root.hex() == theirs["root"]
    for provider, cumulative in values.items():
        assert proofs[provider] == tree.proof(provider)
        assert ["0x" + p.hex() for p in proofs[provider]] == theirs["proofs"][provider]
        assert verify(tree.root, provider, cumulative, proofs[provider])


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(min_size=20, max_size=20), min_size=1, max_size=30),
       st.sampled_from([str.lower, str.upper, lambda a: a]))
def test_addresses_are_checksummed_in_a_batch_as_eth_utils_does(raw: list[bytes], case) -> None:
    addresses = ["0x" + case(to_checksum_address(b)[2:]) for b in raw]
    assert checksum_addresses(addresses) == [to_checksum_address(a) for a in addresses]


def test_a_provider_is_found_by_any_spelling_of_its_address() -> None:
    provider = to_checksum_address("0x" + "ab" * 20)
    tree = RewardTree.build({provider.lower(): 5})
    assert list(tree.values) == [provider]
    assert tree.proof(provider.lower()) == tree.proof(provider) == []
    assert verify(tree.root, provider.upper().replace("0X", "0x"), 5, [])
