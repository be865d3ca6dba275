// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {Vm} from "forge-std/Vm.sol";

/// @notice A provider's signature over a job's result, as a provider site makes it: the
/// EIP-712 digest is built here from the standard, not asked of the market, so a test that
/// signs with it also checks the market's {JobMarket.resultDigest}.
library JobResults {
    Vm private constant VM = Vm(address(uint160(uint256(keccak256("hevm cheat code")))));

    bytes32 internal constant DOMAIN_TYPEHASH =
        keccak256("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)");
    bytes32 internal constant JOB_RESULT_TYPEHASH =
        keccak256("JobResult(uint256 jobId,bytes32 resultHash,uint64 units)");

    /// @dev The digest of `JobResult(jobId, resultHash, units)` in the domain of `market`
    /// ("SwarmJobMarket", version "1", this chain).
    function digest(address market, uint256 jobId, bytes32 resultHash, uint64 units) internal view returns (bytes32) {
        bytes32 domainSeparator =
            keccak256(abi.encode(DOMAIN_TYPEHASH, keccak256("SwarmJobMarket"), keccak256("1"), block.chainid, market));
        bytes32 structHash = keccak256(abi.encode(JOB_RESULT_TYPEHASH, jobId, resultHash, units));
        return keccak256(abi.encodePacked("\x19\x01", domainSeparator, structHash));
    }

    bytes32 internal constant JOB_FAILURE_TYPEHASH = keccak256("JobFailure(uint256 jobId,uint64 units)");

    /// @dev The digest of `JobFailure(jobId, units)` in the domain of `market`: a provider's word
    /// that its lease of the job failed by the job's own fault after holding `units` units.
    function failureDigest(address market, uint256 jobId, uint64 units) internal view returns (bytes32) {
        bytes32 domainSeparator =
            keccak256(abi.encode(DOMAIN_TYPEHASH, keccak256("SwarmJobMarket"), keccak256("1"), block.chainid, market));
        return keccak256(
            abi.encodePacked("\x19\x01", domainSeparator, keccak256(abi.encode(JOB_FAILURE_TYPEHASH, jobId, units)))
        );
    }

    /// @dev `key`'s 65-byte signature over that failure digest.
    function signFailure(uint256 key, address market, uint256 jobId, uint64 units) internal view returns (bytes memory) {
        (uint8 v, bytes32 r, bytes32 s) = VM.sign(key, failureDigest(market, jobId, units));
        return abi.encodePacked(r, s, v);
    }

    /// @dev `key`'s 65-byte signature (r, s, v) over that digest.
    function sign(uint256 key, address market, uint256 jobId, bytes32 resultHash, uint64 units)
        internal
        view
        returns (bytes memory)
    {
        (uint8 v, bytes32 r, bytes32 s) = VM.sign(key, digest(market, jobId, resultHash, units));
        return abi.encodePacked(r, s, v);
    }
}
