// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {Vm} from "forge-std/Vm.sol";

/// @notice A provider's signature over a job's result, as a provider site makes it: the
/// EIP-712 digest is built here from the standard, not asked of the market, so a test that
/// signs with it also checks the market's {JobMarket.resultDigest}. The signer vouches for
/// itself as the job's provider and for the price it reads on chain, as a site does.
library JobResults {
    Vm private constant VM = Vm(address(uint160(uint256(keccak256("hevm cheat code")))));

    /// @dev The storage slot of the market's `_jobs` mapping (`forge inspect JobMarket storageLayout`);
    /// a job's price is the low 128 bits of its fourth slot. Read with a cheatcode rather than
    /// `getJob`, so signing between `vm.expectRevert` and the call it expects makes no call.
    uint256 internal constant JOBS_SLOT = 9;

    bytes32 internal constant DOMAIN_TYPEHASH =
        keccak256("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)");
    bytes32 internal constant JOB_RESULT_TYPEHASH =
        keccak256("JobResult(uint256 jobId,address provider,uint128 pricePerUnit,bytes32 resultHash,uint64 units)");
    bytes32 internal constant JOB_FAILURE_TYPEHASH =
        keccak256("JobFailure(uint256 jobId,address provider,uint128 pricePerUnit,uint64 units)");

    /// @dev The domain of `market`: "SwarmJobMarket", version "2", this chain.
    function domainSeparator(address market) internal view returns (bytes32) {
        return keccak256(abi.encode(DOMAIN_TYPEHASH, keccak256("SwarmJobMarket"), keccak256("2"), block.chainid, market));
    }

    /// @dev The digest of `JobResult(jobId, provider, price, resultHash, units)` in the domain of `market`.
    function digest(
        address market,
        uint256 jobId,
        address provider,
        uint128 price,
        bytes32 resultHash,
        uint64 units
    ) internal view returns (bytes32) {
        bytes32 structHash = keccak256(abi.encode(JOB_RESULT_TYPEHASH, jobId, provider, price, resultHash, units));
        return keccak256(abi.encodePacked("\x19\x01", domainSeparator(market), structHash));
    }

    /// @dev The digest of `JobFailure(jobId, provider, price, units)` in the domain of `market`: a
    /// provider's word that its lease of the job failed by the job's own fault after holding `units` units.
    function failureDigest(address market, uint256 jobId, address provider, uint128 price, uint64 units)
        internal
        view
        returns (bytes32)
    {
        bytes32 structHash = keccak256(abi.encode(JOB_FAILURE_TYPEHASH, jobId, provider, price, units));
        return keccak256(abi.encodePacked("\x19\x01", domainSeparator(market), structHash));
    }

    /// @dev `key`'s signature over the failure of job `jobId`, as its provider at the price on chain now.
    function signFailure(uint256 key, address market, uint256 jobId, uint64 units) internal view returns (bytes memory) {
        return _sign(key, failureDigest(market, jobId, VM.addr(key), priceOf(market, jobId), units));
    }

    /// @dev `key`'s 65-byte signature (r, s, v) over job `jobId`'s result, as its provider at the
    /// price on chain now.
    function sign(uint256 key, address market, uint256 jobId, bytes32 resultHash, uint64 units)
        internal
        view
        returns (bytes memory)
    {
        return signAt(key, market, jobId, priceOf(market, jobId), resultHash, units);
    }

    /// @dev `key`'s signature over job `jobId`'s result naming `provider` (a contract wallet
    /// whose owner holds `key`) at the price on chain now.
    function signFor(uint256 key, address market, uint256 jobId, address provider, bytes32 resultHash, uint64 units)
        internal
        view
        returns (bytes memory)
    {
        return _sign(key, digest(market, jobId, provider, priceOf(market, jobId), resultHash, units));
    }

    /// @dev Job `jobId`'s price on chain now, as a site reads it before it signs.
    function priceOf(address market, uint256 jobId) internal view returns (uint128) {
        bytes32 base = keccak256(abi.encode(jobId, JOBS_SLOT));
        return uint128(uint256(VM.load(market, bytes32(uint256(base) + 3))));
    }

    /// @dev `key`'s signature over job `jobId`'s result at `price`, whatever the job's price is now.
    function signAt(uint256 key, address market, uint256 jobId, uint128 price, bytes32 resultHash, uint64 units)
        internal
        view
        returns (bytes memory)
    {
        return _sign(key, digest(market, jobId, VM.addr(key), price, resultHash, units));
    }

    function _sign(uint256 key, bytes32 d) private pure returns (bytes memory) {
        (uint8 v, bytes32 r, bytes32 s) = VM.sign(key, d);
        return abi.encodePacked(r, s, v);
    }
}
