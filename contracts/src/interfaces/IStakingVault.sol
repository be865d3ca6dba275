// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

/// @notice What the market and the reward distributor need from the staking vault.
interface IStakingVault {
    /// @notice One slash a batch orders ({slashMany}): `bps` of the stake (0: none), a jail of
    /// `jailSeconds` from now (0: none) or, for fraud, a tombstone.
    struct SlashOrder {
        address provider;
        uint16 bps;
        bytes32 reason;
        bytes32 evidenceHash;
        uint64 jailSeconds;
        bool tombstone;
    }

    /// @notice Reverts with the reason `provider` may not take work (not registered,
    /// stake net of its slash debt below its minimum, jailed or tombstoned); returns otherwise.
    function requireEligible(address provider) external view;

    /// @notice Keeps `provider`'s stake (active and unbonding) in the vault until `until`,
    /// because a slash may still come until then: no withdrawal before it. A later time
    /// only extends the hold, an earlier one is ignored; no hold reaches more than the
    /// vault's MAX_HOLD past now. Only SLASHER_ROLE.
    function hold(address provider, uint64 until) external;

    /// @notice Keeps each of `providers`' stake in the vault until `until` on behalf of the
    /// reward distributor's report `reportId`, for as long as the distributor says that
    /// report's holds are live (a vetoed, discarded or lapsed report's are not). `deferred`:
    /// the hold is for a slash the report defers to the next report. Replaces the provider's
    /// earlier report hold; skips an address the vault does not know. Only the reward distributor.
    function holdForReport(uint64 reportId, uint64 until, bool deferred, address[] calldata providers) external;

    /// @notice Slashes `bps` basis points of the provider's active and unbonding stake;
    /// a `bps` above a cap is applied at the cap.
    /// @return slashed the amount actually taken after the caps and the rate limit.
    function slash(address provider, uint16 bps, bytes32 reason, bytes32 evidenceHash)
        external
        returns (uint256 slashed);

    /// @notice Applies `orders` as one batch, tombstones first: each order's slash, then its
    /// tombstone or jail; an address the vault does not know is skipped. Only SLASHER_ROLE.
    function slashMany(SlashOrder[] calldata orders) external;

    /// @notice Jails `provider` until `until` (a later time only extends a jail).
    function jail(address provider, uint64 until) external;

    /// @notice Jails `provider` for ever.
    function tombstone(address provider) external;

    /// @notice Records that `provider` has now claimed `cumulative` rewards in all, kept in
    /// the provider's own record. Only the vault's `rewardsDistributor`.
    /// @return previous what the provider had claimed before.
    function recordClaim(address provider, uint256 cumulative) external returns (uint256 previous);

    /// @notice The one contract allowed to call {recordClaim} and {holdForReport}.
    function rewardsDistributor() external view returns (address);

    /// @notice The rewards `provider` has claimed in all.
    function claimedRewards(address provider) external view returns (uint256);

    /// @notice How long an unstake request unbonds.
    function unbondingPeriod() external view returns (uint64);

    /// @notice The longest a provider waits from asking for its stake back to holding it,
    /// whatever holds jobs, disputes and reports place: the unbonding period, then at most
    /// the distributor's challenge window plus its report lag. The admin's timelock waits
    /// longer than this ({SwarmTimelock}), so a provider that asks when a change is scheduled
    /// leaves before the change can execute.
    function exitBound() external view returns (uint64);
}

/// @notice The timelock's view of what it must outwait: the vault's {IStakingVault.exitBound}.
interface IExitBound {
    function exitBound() external view returns (uint64);
}

/// @notice What the staking vault needs from the reward distributor: whether a report's
/// holds still stand, and the timing a report's slashes need the unbonding period to cover.
interface IReportHolds {
    /// @notice Whether the holds report `reportId` placed still stand: those of the pending
    /// report while it may still be finalized, and the deferred ones of the last finalized
    /// report until the next report finalizes. A vetoed, discarded or lapsed report's never.
    function isHoldLive(uint64 reportId, bool deferred) external view returns (bool);

    /// @notice How long a submitted report waits before it may be finalized.
    function challengeWindow() external view returns (uint64);

    /// @notice The longest from a provider's misconduct to the submission of the report that
    /// slashes it, the previous report's challenge window aside.
    function maxReportLag() external view returns (uint64);
}
