// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// @notice Builds, in memory, a Merkle tree whose leaves and pair hashing match
/// OpenZeppelin's StandardMerkleTree for `(address, uint256)` leaves: a leaf is
/// `keccak256(bytes.concat(keccak256(abi.encode(account, amount))))` and every inner
/// node is the keccak of its two children in ascending order. Levels are built
/// left to right; an odd last node is carried up unchanged. Any such layout verifies
/// with OpenZeppelin's {MerkleProof}.
library MerkleBuilder {
    error EmptyTree();
    error IndexOutOfRange(uint256 index, uint256 length);
    error LengthMismatch(uint256 accounts, uint256 amounts);

    /// @dev The StandardMerkleTree leaf of `(account, amount)`.
    function leaf(address account, uint256 amount) internal pure returns (bytes32) {
        return keccak256(bytes.concat(keccak256(abi.encode(account, amount))));
    }

    /// @dev The leaves of `(accounts[i], amounts[i])`, in order.
    function leaves(address[] memory accounts, uint256[] memory amounts) internal pure returns (bytes32[] memory out) {
        if (accounts.length != amounts.length) revert LengthMismatch(accounts.length, amounts.length);
        out = new bytes32[](accounts.length);
        for (uint256 i; i < accounts.length; ++i) {
            out[i] = leaf(accounts[i], amounts[i]);
        }
    }

    /// @dev OpenZeppelin's commutative pair hash.
    function hashPair(bytes32 a, bytes32 b) internal pure returns (bytes32) {
        return a < b ? keccak256(abi.encodePacked(a, b)) : keccak256(abi.encodePacked(b, a));
    }

    /// @dev The root over `nodes` (left unchanged).
    function root(bytes32[] memory nodes) internal pure returns (bytes32) {
        if (nodes.length == 0) revert EmptyTree();
        bytes32[] memory level = _copy(nodes);
        for (uint256 n = level.length; n > 1; n = (n + 1) / 2) {
            _climb(level, n);
        }
        return level[0];
    }

    /// @dev The proof of `nodes[index]` against {root}`(nodes)`, from the leaf up.
    function proof(bytes32[] memory nodes, uint256 index) internal pure returns (bytes32[] memory path) {
        if (index >= nodes.length) revert IndexOutOfRange(index, nodes.length);
        bytes32[] memory level = _copy(nodes);
        path = new bytes32[](256);
        uint256 depth;
        for (uint256 n = level.length; n > 1; n = (n + 1) / 2) {
            uint256 sibling = index ^ 1;
            if (sibling < n) path[depth++] = level[sibling]; // else carried up alone
            _climb(level, n);
            index /= 2;
        }
        assembly ("memory-safe") {
            mstore(path, depth)
        }
    }

    /// @dev Replaces the first `(n + 1) / 2` entries of `level` with the next level up.
    function _climb(bytes32[] memory level, uint256 n) private pure {
        for (uint256 i; i < n / 2; ++i) {
            level[i] = hashPair(level[2 * i], level[2 * i + 1]);
        }
        if (n % 2 == 1) level[n / 2] = level[n - 1];
    }

    function _copy(bytes32[] memory nodes) private pure returns (bytes32[] memory out) {
        out = new bytes32[](nodes.length);
        for (uint256 i; i < nodes.length; ++i) {
            out[i] = nodes[i];
        }
    }
}
