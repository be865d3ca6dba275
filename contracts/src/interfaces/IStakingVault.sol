// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// @notice What the market and the reward distributor need from the staking vault.
interface IStakingVault {
    /// @notice Reverts with the reason `provider` may not take work (not registered,
    /// stake below its minimum, jailed or tombstoned); returns otherwise.
    function requireEligible(address provider) external view;

    /// @notice Slashes `bps` basis points of the provider's active and unbonding stake.
    /// @return slashed the amount actually taken after the per-incident cap and rate limit.
    function slash(address provider, uint16 bps, bytes32 reason, bytes32 evidenceHash)
        external
        returns (uint256 slashed);

    /// @notice Jails `provider` until `until` (a later time only extends a jail).
    function jail(address provider, uint64 until) external;

    /// @notice Jails `provider` for ever.
    function tombstone(address provider) external;
}
