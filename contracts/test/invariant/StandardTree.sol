// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// @notice An in-memory copy of OpenZeppelin's StandardMerkleTree (`@openzeppelin/merkle-tree`,
/// format "standard-v1") for `(address, uint256)` leaves, node for node: leaves are
/// double-hashed, sorted ascending by hash and laid out from the end of a
/// `2n - 1` array; node `i` is the sorted-pair hash of nodes `2i + 1` and `2i + 2`.
library StandardTree {
    error EmptyTree();
    error LeafNotInTree(bytes32 leaf);

    /// @dev The StandardMerkleTree leaf of `(account, amount)`.
    function leaf(address account, uint256 amount) internal pure returns (bytes32) {
        return keccak256(bytes.concat(keccak256(abi.encode(account, amount))));
    }

    /// @dev The leaves of `(accounts[i], amounts[i])`, in the order given.
    function leaves(address[] memory accounts, uint256[] memory amounts) internal pure returns (bytes32[] memory out) {
        out = new bytes32[](accounts.length);
        for (uint256 i; i < accounts.length; ++i) {
            out[i] = leaf(accounts[i], amounts[i]);
        }
    }

    /// @dev OpenZeppelin's commutative pair hash.
    function hashPair(bytes32 a, bytes32 b) internal pure returns (bytes32) {
        return a < b ? keccak256(abi.encodePacked(a, b)) : keccak256(abi.encodePacked(b, a));
    }

    /// @dev Every node of the tree over `hashedLeaves`, root first.
    function nodes(bytes32[] memory hashedLeaves) internal pure returns (bytes32[] memory tree) {
        uint256 n = hashedLeaves.length;
        if (n == 0) revert EmptyTree();
        bytes32[] memory sorted = _sorted(hashedLeaves);
        tree = new bytes32[](2 * n - 1);
        for (uint256 i; i < n; ++i) {
            tree[tree.length - 1 - i] = sorted[i];
        }
        for (uint256 i = n - 1; i > 0; --i) {
            tree[i - 1] = hashPair(tree[2 * i - 1], tree[2 * i]);
        }
    }

    function root(bytes32[] memory hashedLeaves) internal pure returns (bytes32) {
        return nodes(hashedLeaves)[0];
    }

    /// @dev The proof of `hashedLeaves[index]`, leaf to root, as `getProof` returns it.
    function proof(bytes32[] memory hashedLeaves, uint256 index) internal pure returns (bytes32[] memory path) {
        bytes32[] memory tree = nodes(hashedLeaves);
        uint256 k = _position(tree, hashedLeaves.length, hashedLeaves[index]);
        uint256 depth;
        for (uint256 j = k; j > 0; j = (j - 1) / 2) {
            ++depth;
        }
        path = new bytes32[](depth);
        for (uint256 d; d < depth; ++d) {
            path[d] = tree[k % 2 == 1 ? k + 1 : k - 1];
            k = (k - 1) / 2;
        }
    }

    function _position(bytes32[] memory tree, uint256 n, bytes32 target) private pure returns (uint256) {
        for (uint256 k = tree.length - n; k < tree.length; ++k) {
            if (tree[k] == target) return k;
        }
        revert LeafNotInTree(target);
    }

    function _sorted(bytes32[] memory values) private pure returns (bytes32[] memory out) {
        out = new bytes32[](values.length);
        for (uint256 i; i < values.length; ++i) {
            bytes32 v = values[i];
            uint256 j = i;
            for (; j > 0 && out[j - 1] > v; --j) {
                out[j] = out[j - 1];
            }
            out[j] = v;
        }
    }
}
