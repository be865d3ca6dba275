// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// @notice What the market and the reward distributor need from the staking vault.
interface IStakingVault {
    /// @notice Reverts with the reason `provider` may not take work (not registered,
    /// stake below its minimum, jailed or tombstoned); returns otherwise.
    function requireEligible(address provider) external view;

    /// @notice Keeps `provider`'s stake (active and unbonding) in the vault until `until`,
    /// because a slash may still come until then: no withdrawal before it. A later time
    /// only extends the hold, an earlier one is ignored; no hold reaches more than the
    /// vault's MAX_HOLD past now. Only SLASHER_ROLE.
    function hold(address provider, uint64 until) external;

    /// @notice Slashes `bps` basis points of the provider's active and unbonding stake;
    /// a `bps` above a cap is applied at the cap.
    /// @return slashed the amount actually taken after the caps and the rate limit.
    function slash(address provider, uint16 bps, bytes32 reason, bytes32 evidenceHash)
        external
        returns (uint256 slashed);

    /// @notice Jails `provider` until `until` (a later time only extends a jail).
    function jail(address provider, uint64 until) external;

    /// @notice Jails `provider` for ever.
    function tombstone(address provider) external;

    /// @notice Records that `provider` has now claimed `cumulative` rewards in all, kept in
    /// the provider's own record. Only the vault's `rewardsDistributor`.
    /// @return previous what the provider had claimed before.
    function recordClaim(address provider, uint256 cumulative) external returns (uint256 previous);

    /// @notice The one contract allowed to call {recordClaim}.
    function rewardsDistributor() external view returns (address);

    /// @notice The rewards `provider` has claimed in all.
    function claimedRewards(address provider) external view returns (uint256);
}
