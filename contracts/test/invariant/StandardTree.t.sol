// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {Test} from "forge-std/Test.sol";
import {MerkleProof} from "@openzeppelin/contracts/utils/cryptography/MerkleProof.sol";

import {StandardTree} from "./StandardTree.sol";

/// @notice The invariant harness's tree builder reproduces a tree dumped by
/// OpenZeppelin's merkle-tree package (StandardMerkleTree.of(values, ["address", "uint256"])).
contract StandardTreeTest is Test {
    address internal constant ACCOUNT = 0x80d628ff4AC2aFf620C3474663F1e559234bbE0c;

    function _dumpedLeaves() private pure returns (bytes32[] memory leaves) {
        leaves = new bytes32[](3);
        for (uint256 i; i < 3; ++i) {
            leaves[i] = StandardTree.leaf(ACCOUNT, i);
        }
    }

    function test_NodesMatchAStandardMerkleTreeDump() public pure {
        bytes32[] memory tree = StandardTree.nodes(_dumpedLeaves());
        assertEq(tree.length, 5);
        assertEq(tree[0], 0x0fecce441c7468f17e3fe4a5f211b77a15b27c9ab3d33317df385dfbe5487034);
        assertEq(tree[1], 0x636ab2686ee3036244cf3d6b5574e051e4b20a3577b008975dbcca6dde2897d2);
        assertEq(tree[2], 0xd90245da324d7908326a3d56a9659741551a4603c397bf4dd373976bd85660e7);
        assertEq(tree[3], 0x36fb17c97ec80bb961ff0adff1af4a2a34847ecc40653c162e327117a76e3ec9);
        assertEq(tree[4], 0x1867c4ebd455913e429523a5c2d4b3a79f58068b5a25af911956245ed03a659d);
        // The dump's treeIndex of values 0, 1 and 2.
        assertEq(tree[4], StandardTree.leaf(ACCOUNT, 0));
        assertEq(tree[3], StandardTree.leaf(ACCOUNT, 1));
        assertEq(tree[2], StandardTree.leaf(ACCOUNT, 2));
    }

    function testFuzz_ProofsVerifyAgainstTheRoot(uint256 n, uint256 seed) public pure {
        n = bound(n, 1, 9);
        address[] memory accounts = new address[](n);
        uint256[] memory amounts = new uint256[](n);
        for (uint256 i; i < n; ++i) {
            accounts[i] = address(uint160(uint256(keccak256(abi.encode(seed, i)))));
            amounts[i] = uint256(keccak256(abi.encode(seed, i, "amount"))) % 1e24;
        }
        bytes32[] memory leaves = StandardTree.leaves(accounts, amounts);
        bytes32 root = StandardTree.root(leaves);
        for (uint256 i; i < n; ++i) {
            bytes32[] memory proof = StandardTree.proof(leaves, i);
            assertTrue(MerkleProof.verify(proof, root, leaves[i]));
            assertFalse(MerkleProof.verify(proof, root, StandardTree.leaf(accounts[i], amounts[i] + 1)));
        }
    }
}
