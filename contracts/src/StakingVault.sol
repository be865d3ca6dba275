// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {IERC20Permit} from "@openzeppelin/contracts/token/ERC20/extensions/IERC20Permit.sol";
import {ERC20Burnable} from "@openzeppelin/contracts/token/ERC20/extensions/ERC20Burnable.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {ReentrancyGuardTransient} from "@openzeppelin/contracts/utils/ReentrancyGuardTransient.sol";
import {SafeCast} from "@openzeppelin/contracts/utils/math/SafeCast.sol";
import {Math} from "@openzeppelin/contracts/utils/math/Math.sol";

import {SwarmAccess} from "./base/SwarmAccess.sol";
import {IStakingVault, IReportHolds} from "./interfaces/IStakingVault.sol";

/// @title StakingVault
/// @notice The provider registry and its stake. A provider declares its hardware
/// (the spec's keccak hash on-chain, the GPU count for the minimum stake), stakes,
/// requests an unstake that unbonds for `unbondingPeriod`, and withdraws after it —
/// and not before any hold a slasher placed while a slash may still come (a job it
/// runs, a dispute, a pending epoch report or a slash it defers to the next), nor while it
/// owes a slash the rate limit deferred. SLASHER_ROLE (the reward distributor and the job
/// market) holds, slashes, jails and tombstones; a slash is capped per incident, per slasher
/// and provider over any SLASH_PERIOD (a sliding window), and network-wide by a token bucket
/// whose shortfall is owed, never forgiven. The reward distributor records each provider's
/// claimed rewards in its record here, and its report holds end when it says the report's
/// holds no longer stand (a veto, a discard, a lapse). The unbonding period always covers
/// the time a report's slash takes to reach the chain.
/// @dev Invariants:
///  - token.balanceOf(this) >= totalStaked + totalUnbonding (equal unless tokens are sent directly);
///  - a slash never takes more than the stake + unbonding it hits, nor more than
///    maxSlashBps of it net of the provider's slash debt, nor more than the bucket holds;
///  - a provider's slash debt never exceeds its stake + unbonding;
///  - a hold reaches at most MAX_HOLD past the moment it is placed;
///  - whatever holds stand, a provider withdraws its unbonding stake by its release plus the
///    distributor's challenge window plus its report lag ({exitBound} after the request), and
///    a deferred slash holds it at most one report lag past its release;
///  - one slasher takes at most maxSlashBpsPerPeriod (summed) from one provider within any
///    SLASH_PERIOD, however the slashes fall in time;
///  - unbondingPeriod >= the distributor's challengeWindow + maxReportLag;
///  - the treasury is never the admin;
///  - no withdrawal before unbondingEnd or heldUntil, and none of the unbonding a debt still claims;
///  - a provider's release time never moves earlier;
///  - a tombstoned provider stays jailed for ever;
///  - a pause stops register and stake, never requestUnstake, withdraw or unjail.
contract StakingVault is IStakingVault, SwarmAccess, ReentrancyGuardTransient {
    using SafeERC20 for IERC20;
    using SafeCast for uint256;

    bytes32 public constant SLASHER_ROLE = keccak256("SLASHER_ROLE");

    uint16 internal constant BPS = 10_000;
    /// @notice No setting may allow one incident to take more than this share of a stake.
    uint16 public constant MAX_SLASH_BPS_LIMIT = 10_000;
    /// @notice No setting may make one incident's cap smaller than this (1 %).
    uint16 public constant MIN_SLASH_BPS_LIMIT = 100;
    /// @notice The period over which one slasher's slashes of one provider are summed.
    uint64 public constant SLASH_PERIOD = 30 days;
    /// @notice The longest unbonding period an admin may set.
    uint64 public constant MAX_UNBONDING_PERIOD = 90 days;
    /// @notice The highest stake per GPU an admin may require.
    uint128 public constant MAX_MIN_STAKE_PER_GPU = 10_000_000 ether;
    /// @notice The bucket may not be set smaller than this, so slashing cannot be switched off.
    uint128 public constant MIN_BUCKET_CAPACITY = 1 ether;
    /// @notice The largest slash bucket the admin may set: a tenth of the token's hard cap on
    /// supply, so no change of the rate limit lets slashes take everything at once.
    uint128 public constant MAX_BUCKET_CAPACITY = 100_000_000 ether;
    /// @notice The furthest from now a slasher may hold a provider's stake.
    uint64 public constant MAX_HOLD = 120 days;
    /// @notice The per-period cap is checked over buckets of this length; the buckets summed
    /// cover the last SLASH_PERIOD and at most one bucket more.
    uint64 public constant SLASH_BUCKET = 2 days;
    uint256 internal constant SLASH_BUCKETS = 16; // (16 - 1) × 2 days = SLASH_PERIOD
    uint256 internal constant COUNTER_BITS = 14; // a bucket's bps (≤ 10,000)
    uint256 internal constant COUNTER_MASK = (1 << COUNTER_BITS) - 1;
    uint256 internal constant INDEX_MASK = type(uint32).max;
    /// @notice Stored jail end of a tombstoned provider (reported as type(uint64).max).
    uint40 internal constant FOREVER = type(uint40).max;
    bytes32 internal constant DEBT_REASON = "slash-debt";

    /// @dev Three slots: the amounts stake/unstake read together, then everything else a
    /// provider's own calls read together (times, GPUs, flags, claimed rewards), then the spec hash.
    struct Provider {
        uint128 stake; // active stake
        uint128 unbonding; // requested for withdrawal, still slashable
        uint40 unbondingEnd; // when `unbonding` may be withdrawn
        uint40 jailedUntil; // 0: free; otherwise jailed, and unjail() is allowed from this time
        uint40 heldUntil; // no withdrawal before this: a slash may still come until then
        uint32 gpus; // declared GPU count (0: not registered); the minimum stake scales with it
        bool tombstoned;
        uint96 claimedRewards; // what the reward distributor has paid out in all (supply < 2^96)
        bytes32 specHash; // keccak of the full off-chain hardware spec
    }

    /// @notice A provider's record as the views report it.
    struct ProviderView {
        uint128 stake;
        uint128 unbonding;
        uint64 unbondingEnd;
        uint64 jailedUntil; // type(uint64).max: tombstoned
        uint32 gpus;
        bool registered;
        bool tombstoned;
        bytes32 specHash;
        uint64 heldUntil; // the slashers' hold (SLASHER_ROLE): never moves earlier
        uint256 claimedRewards;
        uint256 slashDebt;
        uint64 reportHeldUntil; // the reward distributor's hold while its report's holds stand, else 0
    }

    /// @dev What the slashing of a provider leaves behind, in one slot: the debt the bucket
    /// deferred, and the reward distributor's hold (report `reportId`'s, until `holdUntil`,
    /// while the distributor says that report's holds stand). A report writes the hold before
    /// it slashes, so a debt its slash defers rewrites a slot that is already in use.
    struct Owed {
        uint128 debt;
        uint64 reportId;
        uint40 holdUntil;
        bool deferred;
    }

    IERC20 public immutable token;
    /// @notice The only contract that may record reward claims (set once, at deployment).
    address public immutable rewardsDistributor;
    /// @notice The shortest unbonding period any admin may ever set (set once, at deployment).
    uint64 public immutable minUnbondingPeriod;

    mapping(address provider => Provider) internal _providers;
    mapping(address provider => Owed) internal _owed;
    /// @dev One slasher's slashes of one provider over the last SLASH_BUCKETS buckets: the
    /// index of the latest bucket in the low 32 bits, then one 14-bit counter of bps per
    /// bucket, bucket k at position k % SLASH_BUCKETS.
    mapping(address slasher => mapping(address provider => uint256)) internal _windows;


    // Both totals in one slot: an unstake moves tokens from one to the other in one write.
    uint128 public totalStaked;
    uint128 public totalUnbonding;

    // Parameters: the numbers share one slot, the treasury has its own.
    uint128 public minStakePerGpu;
    uint64 public unbondingPeriod;
    uint16 public maxSlashBps; // per-incident cap
    uint16 public maxSlashBpsPerPeriod; // per slasher and provider, over SLASH_PERIOD
    uint16 public treasuryShareBps; // the rest of a slash is burned
    address public treasury;

    // Network-wide slash rate limit: a token bucket (its settings, then its level).
    uint128 public slashBucketCapacity;
    uint128 public slashRefillPerSecond;
    uint128 internal _bucketLevel;
    uint64 internal _bucketUpdatedAt;

    // ─── Events ──────────────────────────────────────────────────────────────
    event Registered(address indexed provider, bytes32 specHash, uint32 gpus);
    event SpecUpdated(address indexed provider, bytes32 specHash, uint32 gpus);
    event Staked(address indexed provider, uint256 amount, uint256 newStake);
    event UnstakeRequested(address indexed provider, uint256 amount, uint256 totalUnbonding, uint64 releaseTime);
    event Withdrawn(address indexed provider, uint256 amount);
    event Slashed(
        address indexed provider,
        bytes32 indexed reason,
        uint256 fromStake,
        uint256 fromUnbonding,
        uint16 bps,
        bytes32 evidenceHash,
        uint256 toTreasury
    );
    event SlashCapped(address indexed provider, address indexed slasher, uint16 requestedBps, uint16 appliedBps);
    event SlashRateLimited(address indexed provider, uint256 requested, uint256 applied);
    event SlashDebtChanged(address indexed provider, uint256 debt);
    event StakeHeld(address indexed provider, uint64 until);
    event StakeHeldForReport(address indexed provider, uint64 indexed reportId, uint64 until, bool deferred);
    event SlashSkipped(address indexed provider, address indexed slasher);
    event Jailed(address indexed provider, uint64 until);
    event Unjailed(address indexed provider);
    event Tombstoned(address indexed provider);
    event MinStakePerGpuSet(uint256 minStakePerGpu);
    event UnbondingPeriodSet(uint64 unbondingPeriod);
    event SlashPolicySet(uint16 maxSlashBps, uint16 maxSlashBpsPerPeriod, uint16 treasuryShareBps, address treasury);
    event SlashRateLimitSet(uint128 capacity, uint128 refillPerSecond);

    // ─── Errors ──────────────────────────────────────────────────────────────
    error ZeroAmount();
    error ZeroGpus();
    error AlreadyRegistered(address provider);
    error NotRegistered(address provider);
    error StakeBelowMinimum(address provider, uint256 stake, uint256 minimum);
    error InsufficientStake(uint256 stake, uint256 requested);
    error NothingToWithdraw();
    error StillUnbonding(uint64 releaseTime, uint64 now_);
    error StakeOnHold(uint64 heldUntil, uint64 now_);
    error SlashDebtOutstanding(address provider, uint256 debt);
    error ProviderJailed(address provider, uint64 until);
    error ProviderTombstoned(address provider);
    error NotJailed(address provider);
    error InvalidBps(uint256 bps, uint256 max);
    error OutOfRange(bytes32 parameter, uint256 value, uint256 min, uint256 max);
    error NotRewardsDistributor(address caller);
    error ClaimNotIncreasing(address provider, uint256 cumulative, uint256 claimed);
    /// @notice The unbonding period would not cover the time a report's slash takes to reach the
    /// chain: the distributor's challenge window plus its longest report lag.
    error UnbondingShorterThanReporting(uint64 unbondingPeriod, uint256 needed);

    struct Params {
        uint128 minStakePerGpu;
        uint64 unbondingPeriod;
        uint64 minUnbondingPeriod;
        uint16 maxSlashBps;
        uint16 maxSlashBpsPerPeriod;
        uint16 treasuryShareBps;
        address treasury;
        uint128 slashBucketCapacity;
        uint128 slashRefillPerSecond;
        address rewardsDistributor;
        address guardian; // PAUSER_ROLE
        address[] slashers; // SLASHER_ROLE from the start: the distributor and the market
    }

    /// @param admin DEFAULT_ADMIN_ROLE: a timelock whose delay exceeds the unbonding period.
    constructor(IERC20 token_, address admin, Params memory params) SwarmAccess(admin, params.guardian) {
        if (address(token_) == address(0) || params.rewardsDistributor == address(0)) revert ZeroAddress();
        if (params.minUnbondingPeriod == 0 || params.minUnbondingPeriod > MAX_UNBONDING_PERIOD) {
            revert OutOfRange("minUnbondingPeriod", params.minUnbondingPeriod, 1, MAX_UNBONDING_PERIOD);
        }
        token = token_;
        rewardsDistributor = params.rewardsDistributor;
        minUnbondingPeriod = params.minUnbondingPeriod;
        _setMinStakePerGpu(params.minStakePerGpu);
        _setUnbondingPeriod(params.unbondingPeriod);
        _setSlashPolicy(params.maxSlashBps, params.maxSlashBpsPerPeriod, params.treasuryShareBps, params.treasury);
        _setSlashRateLimit(params.slashBucketCapacity, params.slashRefillPerSecond);
        _bucketLevel = params.slashBucketCapacity;
        _bucketUpdatedAt = uint64(block.timestamp);
        for (uint256 i; i < params.slashers.length; ++i) {
            if (params.slashers[i] == address(0)) revert ZeroAddress();
            _grantRole(SLASHER_ROLE, params.slashers[i]);
        }
    }

    // ─── Providers ───────────────────────────────────────────────────────────

    /// @notice Registers the caller as a provider declaring `gpus` GPUs whose full spec
    /// hashes to `specHash`. The minimum stake becomes `minStakePerGpu × gpus`.
    /// Stopped by a pause. Emits {Registered}.
    function register(bytes32 specHash, uint32 gpus) external whenNotPaused {
        if (gpus == 0) revert ZeroGpus();
        Provider storage p = _providers[msg.sender];
        if (p.gpus != 0) revert AlreadyRegistered(msg.sender);
        p.gpus = gpus;
        p.specHash = specHash;
        emit Registered(msg.sender, specHash, gpus);
    }

    /// @notice Declares new hardware for the caller; the minimum stake follows `gpus`.
    /// Emits {SpecUpdated}.
    function updateSpec(bytes32 specHash, uint32 gpus) external whenNotPaused {
        if (gpus == 0) revert ZeroGpus();
        Provider storage p = _registered(msg.sender);
        p.gpus = gpus;
        p.specHash = specHash;
        emit SpecUpdated(msg.sender, specHash, gpus);
    }

    /// @notice Adds `amount` tokens (approved beforehand) to the caller's active stake.
    /// Stopped by a pause. Emits {Staked}.
    function stake(uint256 amount) external whenNotPaused nonReentrant {
        _stake(msg.sender, amount);
    }

    /// @notice Like {stake}, with an EIP-2612 permit instead of a prior approval.
    /// A permit already used (e.g. front-run) is ignored if the allowance suffices.
    function stakeWithPermit(uint256 amount, uint256 deadline, uint8 v, bytes32 r, bytes32 s)
        external
        whenNotPaused
        nonReentrant
    {
        try IERC20Permit(address(token)).permit(msg.sender, address(this), amount, deadline, v, r, s) {} catch {}
        _stake(msg.sender, amount);
    }

    /// @notice Moves `amount` from the caller's active stake into unbonding. The whole
    /// unbonding amount becomes withdrawable `unbondingPeriod` from now, or at the earlier
    /// request's release time if that is later (a release time never moves earlier); it
    /// stays slashable until then. Never stopped by a pause. Emits {UnstakeRequested}.
    function requestUnstake(uint256 amount) external {
        if (amount == 0) revert ZeroAmount();
        Provider storage p = _registered(msg.sender);
        uint256 active = p.stake;
        if (amount > active) revert InsufficientStake(active, amount);
        uint128 unbonding = p.unbonding + amount.toUint128();
        uint64 releaseTime = uint64(block.timestamp) + unbondingPeriod;
        if (p.unbondingEnd > releaseTime) releaseTime = p.unbondingEnd;
        p.stake = uint128(active - amount);
        p.unbonding = unbonding;
        p.unbondingEnd = uint40(releaseTime);
        totalStaked -= uint128(amount);
        totalUnbonding += uint128(amount);
        emit UnstakeRequested(msg.sender, amount, unbonding, releaseTime);
    }

    /// @notice Pays the caller its unbonding amount once the unbonding period is over and
    /// no hold is left. A slash debt is collected first, as far as the bucket allows; what is
    /// still owed stays in unbonding, slashable, and the rest is paid. Reverts only when
    /// nothing can move. Never stopped by a pause, a jail or a tombstone. Emits {Withdrawn}.
    function withdraw() external nonReentrant {
        Provider storage p = _providers[msg.sender];
        if (p.unbonding == 0) revert NothingToWithdraw();
        if (block.timestamp < p.unbondingEnd) revert StillUnbonding(p.unbondingEnd, uint64(block.timestamp));
        uint64 held = _heldUntil(msg.sender, p);
        if (block.timestamp < held) revert StakeOnHold(held, uint64(block.timestamp));
        uint256 debt = _owed[msg.sender].debt;
        uint256 collected = 0;
        uint256 toTreasury = 0;
        if (debt > 0) (debt, collected, toTreasury) = _collectDebt(msg.sender, p, debt);
        // What is still owed stays behind, slashable, until the bucket lets it be collected.
        uint256 unbonding = p.unbonding;
        uint256 kept = debt < unbonding ? debt : unbonding;
        if (kept >= unbonding && collected < 1) revert SlashDebtOutstanding(msg.sender, debt); // nothing moves
        uint256 amount = unbonding - kept;
        p.unbonding = uint128(kept);
        totalUnbonding -= uint128(amount);
        if (amount > 0) emit Withdrawn(msg.sender, amount);
        _payOut(collected, toTreasury);
        if (amount > 0) token.safeTransfer(msg.sender, amount);
    }

    /// @notice Collects as much of `provider`'s slash debt as the bucket allows now.
    /// Anyone may call. Emits {Slashed} (reason "slash-debt") and {SlashDebtChanged}.
    /// @return debt what is still owed.
    function collectSlashDebt(address provider) external nonReentrant returns (uint256 debt) {
        debt = _owed[provider].debt;
        if (debt == 0) return 0;
        uint256 collected = 0;
        uint256 toTreasury = 0;
        (debt, collected, toTreasury) = _collectDebt(provider, _registered(provider), debt);
        _payOut(collected, toTreasury);
    }

    /// @notice Lets a jailed provider back in once its jail time is served, if it is not
    /// tombstoned and its stake, net of its slash debt, meets the minimum. Until it calls
    /// this, a provider whose time is served stays ineligible. Emits {Unjailed}.
    function unjail() external {
        Provider storage p = _registered(msg.sender);
        if (p.tombstoned) revert ProviderTombstoned(msg.sender);
        if (p.jailedUntil == 0) revert NotJailed(msg.sender);
        if (block.timestamp < p.jailedUntil) revert ProviderJailed(msg.sender, p.jailedUntil);
        _requireMinimumStake(msg.sender, p);
        p.jailedUntil = 0;
        emit Unjailed(msg.sender);
    }

    // ─── Slashing (SLASHER_ROLE) ─────────────────────────────────────────────

    /// @inheritdoc IStakingVault
    /// @dev Only SLASHER_ROLE. Emits {StakeHeld} when it extends the hold.
    function hold(address provider, uint64 until) external onlyRole(SLASHER_ROLE) {
        Provider storage p = _registered(provider);
        uint40 stored = _holdEnd(until);
        if (stored > p.heldUntil) {
            p.heldUntil = stored;
            emit StakeHeld(provider, stored);
        }
    }

    /// @inheritdoc IStakingVault
    /// @dev Emits {StakeHeldForReport} per provider held.
    function holdForReport(uint64 reportId, uint64 until, bool deferred, address[] calldata providers) external {
        if (msg.sender != rewardsDistributor) revert NotRewardsDistributor(msg.sender);
        uint40 stored = _holdEnd(until);
        for (uint256 i; i < providers.length; ++i) {
            address provider = providers[i];
            // An address with no record has no stake to keep.
            if (_providers[provider].gpus == 0) continue;
            Owed storage o = _owed[provider];
            (o.reportId, o.holdUntil, o.deferred) = (reportId, stored, deferred);
            emit StakeHeldForReport(provider, reportId, stored, deferred);
        }
    }

    /// @inheritdoc IStakingVault
    /// @dev Only SLASHER_ROLE. Takes `bps` of active and unbonding stake proportionally.
    /// `bps` is lowered to the per-incident cap and to what is left of this slasher's
    /// allowance for this provider over the last SLASH_PERIOD ({SlashCapped}); the
    /// network-wide bucket then limits the amount ({SlashRateLimited}) and what it holds back
    /// becomes the provider's slash debt. `treasuryShareBps` of it goes to the treasury, the
    /// rest is burned. Works while paused. Emits {Slashed}.
    function slash(address provider, uint16 bps, bytes32 reason, bytes32 evidenceHash)
        external
        onlyRole(SLASHER_ROLE)
        nonReentrant
        returns (uint256 slashed)
    {
        if (bps == 0) revert InvalidBps(bps, maxSlashBps);
        uint256 toTreasury = 0;
        (slashed, toTreasury) = _slash(provider, _registered(provider), bps, reason, evidenceHash);
        _payOut(slashed, toTreasury);
    }

    /// @inheritdoc IStakingVault
    /// @dev Only SLASHER_ROLE. Each slash as {slash}, each jail and tombstone as {jail} and
    /// {tombstone}; the treasury is paid and the rest burned once for the whole batch. An
    /// address with no record emits {SlashSkipped}. Works while paused.
    function slashMany(SlashOrder[] calldata orders) external onlyRole(SLASHER_ROLE) nonReentrant {
        uint256 slashed = 0;
        uint256 toTreasury = 0;
        // Tombstones first, so the network-wide bucket serves fraud before anything else.
        for (uint256 pass; pass < 2; ++pass) {
            for (uint256 i; i < orders.length; ++i) {
                SlashOrder calldata o = orders[i];
                if (o.tombstone != (pass == 0)) continue;
                Provider storage p = _providers[o.provider];
                if (p.gpus == 0) {
                    emit SlashSkipped(o.provider, msg.sender);
                    continue;
                }
                if (o.bps > 0) {
                    (uint256 taken, uint256 share) = _slash(o.provider, p, o.bps, o.reason, o.evidenceHash);
                    slashed += taken;
                    toTreasury += share;
                }
                if (o.tombstone) _tombstone(o.provider, p);
                else if (o.jailSeconds > 0) _jail(o.provider, p, uint64(block.timestamp) + o.jailSeconds);
            }
        }
        _payOut(slashed, toTreasury);
    }

    /// @inheritdoc IStakingVault
    /// @dev Only SLASHER_ROLE. Never shortens a jail already running; a time past the
    /// record's range jails until the end of that range. Emits {Jailed}.
    function jail(address provider, uint64 until) external onlyRole(SLASHER_ROLE) {
        _jail(provider, _registered(provider), until);
    }

    /// @inheritdoc IStakingVault
    /// @dev Only SLASHER_ROLE, for fraud. Emits {Tombstoned} and {Jailed}.
    function tombstone(address provider) external onlyRole(SLASHER_ROLE) {
        _tombstone(provider, _registered(provider));
    }

    // ─── Rewards (the reward distributor) ────────────────────────────────────

    /// @inheritdoc IStakingVault
    /// @dev Only `rewardsDistributor`. Kept in the provider's own record, a slot it already
    /// has, so a provider's first claim creates no storage.
    function recordClaim(address provider, uint256 cumulative) external returns (uint256 previous) {
        if (msg.sender != rewardsDistributor) revert NotRewardsDistributor(msg.sender);
        Provider storage p = _registered(provider);
        previous = p.claimedRewards;
        if (cumulative <= previous) revert ClaimNotIncreasing(provider, cumulative, previous);
        p.claimedRewards = cumulative.toUint96();
    }

    // ─── Views ───────────────────────────────────────────────────────────────

    /// @notice The full record of `provider`.
    function providerInfo(address provider) external view returns (ProviderView memory info) {
        Provider storage p = _providers[provider];
        info.stake = p.stake;
        info.unbonding = p.unbonding;
        info.unbondingEnd = p.unbondingEnd;
        info.jailedUntil = p.jailedUntil == FOREVER ? type(uint64).max : p.jailedUntil;
        info.gpus = p.gpus;
        info.registered = p.gpus != 0;
        info.tombstoned = p.tombstoned;
        info.specHash = p.specHash;
        info.heldUntil = p.heldUntil;
        info.reportHeldUntil = _reportHeldUntil(provider, p, IReportHolds(rewardsDistributor).maxReportLag());
        info.claimedRewards = p.claimedRewards;
        info.slashDebt = _owed[provider].debt;
    }

    /// @notice When `provider` may withdraw its unbonding stake: its release, or the end of its
    /// holds if later, which never passes the release plus the challenge window and the report
    /// lag. 0 when nothing is unbonding.
    function withdrawableAt(address provider) external view returns (uint64) {
        Provider storage p = _providers[provider];
        if (p.unbonding == 0) return 0;
        uint64 held = _heldUntil(provider, p);
        return held > p.unbondingEnd ? held : p.unbondingEnd;
    }

    /// @inheritdoc IStakingVault
    function exitBound() external view returns (uint64) {
        IReportHolds reports = IReportHolds(rewardsDistributor);
        return unbondingPeriod + reports.challengeWindow() + reports.maxReportLag();
    }

    /// @notice Slashed amounts the network-wide bucket deferred for `provider`: collected as it refills.
    function slashDebt(address provider) external view returns (uint256) {
        return _owed[provider].debt;
    }

    /// @inheritdoc IStakingVault
    function claimedRewards(address provider) external view returns (uint256) {
        return _providers[provider].claimedRewards;
    }

    /// @notice The minimum active stake `provider` needs to take work.
    function minStake(address provider) public view returns (uint256) {
        return uint256(minStakePerGpu) * _providers[provider].gpus;
    }

    /// @inheritdoc IStakingVault
    function requireEligible(address provider) external view {
        Provider storage p = _providers[provider];
        if (p.gpus == 0) revert NotRegistered(provider);
        if (p.tombstoned) revert ProviderTombstoned(provider);
        // A jail ends only by unjail(), which re-checks the stake: serving the time is not enough.
        if (p.jailedUntil != 0) revert ProviderJailed(provider, p.jailedUntil);
        _requireMinimumStake(provider, p);
    }

    /// @notice Whether `provider` may take work and earn rewards now.
    function isEligible(address provider) external view returns (bool) {
        Provider storage p = _providers[provider];
        return p.gpus != 0 && !p.tombstoned && p.jailedUntil == 0
            && _netStake(provider, p) >= uint256(minStakePerGpu) * p.gpus;
    }

    /// @notice Tokens the network-wide slash limit allows right now.
    function availableSlashCapacity() external view returns (uint256) {
        return _bucketAt(block.timestamp);
    }

    /// @notice What `slasher` may still take from `provider` now, in basis points: the
    /// per-period cap less what it took over the last SLASH_PERIOD (counted in whole
    /// SLASH_BUCKETs, so up to one bucket more).
    function slashAllowanceBps(address slasher, address provider) external view returns (uint16) {
        uint256 used = _windowSum(_advance(_windows[slasher][provider], block.timestamp / SLASH_BUCKET));
        return used >= maxSlashBpsPerPeriod ? 0 : uint16(maxSlashBpsPerPeriod - used);
    }

    // ─── Admin (DEFAULT_ADMIN_ROLE) ──────────────────────────────────────────

    /// @notice Sets the stake required per declared GPU, from 1 wei to MAX_MIN_STAKE_PER_GPU.
    /// Emits {MinStakePerGpuSet}.
    function setMinStakePerGpu(uint128 value) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _setMinStakePerGpu(value);
    }

    /// @notice Sets the unbonding period for later requests, from minUnbondingPeriod to
    /// MAX_UNBONDING_PERIOD and no shorter than the reward distributor's challenge window plus
    /// its longest report lag ({UnbondingShorterThanReporting}), so a report's slash reaches the
    /// chain before an unstake requested at the misconduct is released. Emits {UnbondingPeriodSet}.
    function setUnbondingPeriod(uint64 period) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _setUnbondingPeriod(period);
        IReportHolds reports = IReportHolds(rewardsDistributor);
        uint256 needed = uint256(reports.challengeWindow()) + reports.maxReportLag();
        if (period < needed) revert UnbondingShorterThanReporting(period, needed);
    }

    /// @notice Sets the per-incident cap (MIN_SLASH_BPS_LIMIT to MAX_SLASH_BPS_LIMIT), the
    /// per-slasher cap over SLASH_PERIOD (at least the per-incident cap), the treasury's
    /// share of slashes and the treasury, which may not be the admin ({TreasuryIsAdmin}).
    /// Emits {SlashPolicySet}.
    function setSlashPolicy(
        uint16 maxSlashBps_,
        uint16 maxSlashBpsPerPeriod_,
        uint16 treasuryShareBps_,
        address treasury_
    ) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _setSlashPolicy(maxSlashBps_, maxSlashBpsPerPeriod_, treasuryShareBps_, treasury_);
    }

    /// @notice Sets the network-wide slash bucket: a capacity from MIN_BUCKET_CAPACITY to
    /// MAX_BUCKET_CAPACITY and a refill from 1 wei a second up to the capacity.
    /// Emits {SlashRateLimitSet}.
    function setSlashRateLimit(uint128 capacity, uint128 refillPerSecond) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _bucketLevel = uint128(_bucketAt(block.timestamp));
        _bucketUpdatedAt = uint64(block.timestamp);
        _setSlashRateLimit(capacity, refillPerSecond);
        if (_bucketLevel > capacity) _bucketLevel = capacity;
    }

    // ─── Internals ───────────────────────────────────────────────────────────

    function _stake(address provider, uint256 amount) private {
        if (amount == 0) revert ZeroAmount();
        Provider storage p = _registered(provider);
        if (p.tombstoned) revert ProviderTombstoned(provider);
        uint128 added = amount.toUint128();
        uint128 newStake = p.stake + added;
        p.stake = newStake;
        totalStaked += added;
        token.safeTransferFrom(provider, address(this), amount);
        emit Staked(provider, amount, newStake);
    }

    function _registered(address provider) private view returns (Provider storage p) {
        p = _providers[provider];
        if (p.gpus == 0) revert NotRegistered(provider);
    }

    /// @dev Slashes `bps` of `provider` (registered) for the caller, capped, without paying out.
    function _slash(address provider, Provider storage p, uint16 bps, bytes32 reason, bytes32 evidenceHash)
        private
        returns (uint256 slashed, uint256 toTreasury)
    {
        uint16 applied = _capped(provider, bps);
        if (applied != bps) emit SlashCapped(provider, msg.sender, bps, applied);
        if (applied == 0) return (0, 0);
        (uint256 fromStake, uint256 fromUnbonding) = _slashAmounts(provider, p, applied);
        return _take(provider, p, fromStake, fromUnbonding, applied, reason, evidenceHash);
    }

    function _jail(address provider, Provider storage p, uint64 until) private {
        uint40 stored = until >= FOREVER ? FOREVER - 1 : uint40(until);
        if (stored > p.jailedUntil) {
            p.jailedUntil = stored;
            emit Jailed(provider, stored);
        }
    }

    function _tombstone(address provider, Provider storage p) private {
        if (p.tombstoned) return;
        p.tombstoned = true;
        p.jailedUntil = FOREVER;
        emit Tombstoned(provider);
        emit Jailed(provider, type(uint64).max);
    }

    /// @dev A hold's end, at most MAX_HOLD from now.
    function _holdEnd(uint64 until) private view returns (uint40) {
        uint256 longest = block.timestamp + MAX_HOLD;
        return uint40(until > longest ? longest : until);
    }

    /// @dev The end of `provider`'s hold on its unbonding stake: the slashers', or the
    /// distributor's if later, and never past its release plus the challenge window and the
    /// report lag: no job, dispute or report keeps a provider that asked to leave longer.
    function _heldUntil(address provider, Provider storage p) private view returns (uint64) {
        IReportHolds reports = IReportHolds(rewardsDistributor);
        uint64 lag = reports.maxReportLag();
        uint64 report = _reportHeldUntil(provider, p, lag);
        uint64 held = report > p.heldUntil ? report : p.heldUntil;
        uint64 bound = p.unbondingEnd + reports.challengeWindow() + lag;
        return held > bound ? bound : held;
    }

    /// @dev The distributor's hold of `provider` while it lasts and its report's holds stand;
    /// else 0. A deferred slash holds the provider at most one report lag past its release:
    /// the next report slashes it by then, or it leaves.
    function _reportHeldUntil(address provider, Provider storage p, uint64 lag) private view returns (uint64) {
        Owed storage o = _owed[provider];
        uint64 until = o.holdUntil;
        if (until <= block.timestamp) return 0;
        if (!IReportHolds(rewardsDistributor).isHoldLive(o.reportId, o.deferred)) return 0;
        if (o.deferred && p.unbondingEnd > 0) {
            uint64 bound = p.unbondingEnd + lag;
            if (until > bound) return bound;
        }
        return until;
    }

    /// @dev Active stake less what the provider owes: a debt is taken before anything else.
    function _netStake(address provider, Provider storage p) private view returns (uint256) {
        uint256 owed = _owed[provider].debt;
        return p.stake > owed ? p.stake - owed : 0;
    }

    function _requireMinimumStake(address provider, Provider storage p) private view {
        uint256 minimum = uint256(minStakePerGpu) * p.gpus;
        uint256 net = _netStake(provider, p);
        if (net < minimum) revert StakeBelowMinimum(provider, net, minimum);
    }

    /// @dev `bps` lowered to the per-incident cap and to the caller's allowance for
    /// `provider` over the last SLASH_PERIOD, which it then uses up.
    function _capped(address provider, uint16 bps) private returns (uint16 applied) {
        applied = bps > maxSlashBps ? maxSlashBps : bps;
        uint256 bucket = block.timestamp / SLASH_BUCKET;
        uint256 w = _advance(_windows[msg.sender][provider], bucket);
        uint256 used = _windowSum(w);
        uint256 limit = maxSlashBpsPerPeriod;
        uint256 left = used >= limit ? 0 : limit - used;
        if (applied > left) applied = uint16(left);
        _windows[msg.sender][provider] = w + (uint256(applied) << _counterShift(bucket));
    }

    /// @dev The window moved on to `bucket`: the counters of buckets that fell out of it zeroed.
    function _advance(uint256 w, uint256 bucket) private pure returns (uint256) {
        uint256 last = w & INDEX_MASK;
        if (bucket >= last + SLASH_BUCKETS) return bucket; // every counter is stale
        for (uint256 k = last + 1; k <= bucket; ++k) {
            w &= ~(COUNTER_MASK << _counterShift(k));
        }
        return (w & ~INDEX_MASK) | bucket;
    }

    /// @dev The bps the window's buckets hold in all.
    function _windowSum(uint256 w) private pure returns (uint256 sum) {
        w >>= 32;
        for (uint256 i; i < SLASH_BUCKETS; ++i) {
            sum += w & COUNTER_MASK;
            w >>= COUNTER_BITS;
        }
    }

    function _counterShift(uint256 bucket) private pure returns (uint256) {
        return 32 + (bucket % SLASH_BUCKETS) * COUNTER_BITS;
    }

    /// @dev `bps` of the provider's stake and unbonding, net of what it already owes (so a
    /// deferred slash never makes a later one larger), then limited by the bucket.
    function _slashAmounts(address provider, Provider storage p, uint16 bps)
        private
        returns (uint256 fromStake, uint256 fromUnbonding)
    {
        uint256 held = uint256(p.stake) + p.unbonding;
        if (held == 0) return (0, 0);
        uint256 scale = uint256(bps) * (held - _min(_owed[provider].debt, held));
        uint256 denominator = uint256(BPS) * held;
        return _rateLimited(
            provider, Math.mulDiv(p.stake, scale, denominator), Math.mulDiv(p.unbonding, scale, denominator)
        );
    }

    /// @dev The amounts scaled down to what the network-wide bucket holds, drawing it down;
    /// what it holds back is added to the provider's slash debt.
    function _rateLimited(address provider, uint256 fromStake, uint256 fromUnbonding)
        private
        returns (uint256, uint256)
    {
        uint256 requested = fromStake + fromUnbonding;
        uint256 available = _bucketAt(block.timestamp);
        if (requested > available) {
            fromStake = fromStake * available / requested;
            fromUnbonding = fromUnbonding * available / requested;
            Owed storage o = _owed[provider];
            uint256 debt = o.debt + requested - fromStake - fromUnbonding;
            o.debt = uint128(debt); // at most what the provider holds (see _slashAmounts)
            emit SlashRateLimited(provider, requested, fromStake + fromUnbonding);
            emit SlashDebtChanged(provider, debt);
        }
        _drawBucket(available, fromStake + fromUnbonding);
        return (fromStake, fromUnbonding);
    }

    /// @dev Removes a slashed amount from the provider and the totals; returns it and the
    /// treasury's share, which the caller pays out with {_payOut} after its own effects.
    function _take(
        address provider,
        Provider storage p,
        uint256 fromStake,
        uint256 fromUnbonding,
        uint16 bps,
        bytes32 reason,
        bytes32 evidenceHash
    ) private returns (uint256 slashed, uint256 toTreasury) {
        p.stake -= uint128(fromStake);
        p.unbonding -= uint128(fromUnbonding);
        totalStaked -= uint128(fromStake);
        totalUnbonding -= uint128(fromUnbonding);
        slashed = fromStake + fromUnbonding;
        toTreasury = slashed * treasuryShareBps / BPS;
        emit Slashed(provider, reason, fromStake, fromUnbonding, bps, evidenceHash, toTreasury);
    }

    /// @dev Pays the treasury its share of a slashed amount and burns the rest.
    function _payOut(uint256 slashed, uint256 toTreasury) private {
        if (toTreasury > 0) token.safeTransfer(treasury, toTreasury);
        if (slashed > toTreasury) ERC20Burnable(address(token)).burn(slashed - toTreasury);
    }

    /// @dev Takes as much of `debt` as the bucket and the provider's stake allow,
    /// proportionally from active and unbonding stake. Returns what is still owed, what
    /// was taken and the treasury's share of it (not yet paid out).
    function _collectDebt(address provider, Provider storage p, uint256 debt)
        private
        returns (uint256 owed, uint256 collected, uint256 toTreasury)
    {
        uint256 held = uint256(p.stake) + p.unbonding;
        uint256 available = _bucketAt(block.timestamp);
        collected = _min(_min(debt, available), held);
        owed = debt;
        if (collected > 0) {
            uint256 fromStake = uint256(p.stake) * collected / held;
            _drawBucket(available, collected);
            owed = debt - collected;
            _owed[provider].debt = uint128(owed);
            emit SlashDebtChanged(provider, owed);
            (, toTreasury) = _take(provider, p, fromStake, collected - fromStake, 0, DEBT_REASON, bytes32(0));
        }
    }

    function _drawBucket(uint256 available, uint256 amount) private {
        _bucketLevel = uint128(available - amount);
        _bucketUpdatedAt = uint64(block.timestamp);
    }

    function _bucketAt(uint256 timestamp) private view returns (uint256) {
        uint256 refilled = _bucketLevel + (timestamp - _bucketUpdatedAt) * uint256(slashRefillPerSecond);
        return _min(refilled, slashBucketCapacity);
    }

    function _setMinStakePerGpu(uint128 value) private {
        if (value == 0 || value > MAX_MIN_STAKE_PER_GPU) {
            revert OutOfRange("minStakePerGpu", value, 1, MAX_MIN_STAKE_PER_GPU);
        }
        minStakePerGpu = value;
        emit MinStakePerGpuSet(value);
    }

    function _setUnbondingPeriod(uint64 period) private {
        if (period < minUnbondingPeriod || period > MAX_UNBONDING_PERIOD) {
            revert OutOfRange("unbondingPeriod", period, minUnbondingPeriod, MAX_UNBONDING_PERIOD);
        }
        unbondingPeriod = period;
        emit UnbondingPeriodSet(period);
    }

    function _setSlashPolicy(
        uint16 maxSlashBps_,
        uint16 maxSlashBpsPerPeriod_,
        uint16 treasuryShareBps_,
        address treasury_
    ) private {
        if (maxSlashBps_ < MIN_SLASH_BPS_LIMIT || maxSlashBps_ > MAX_SLASH_BPS_LIMIT) {
            revert OutOfRange("maxSlashBps", maxSlashBps_, MIN_SLASH_BPS_LIMIT, MAX_SLASH_BPS_LIMIT);
        }
        if (maxSlashBpsPerPeriod_ < maxSlashBps_ || maxSlashBpsPerPeriod_ > BPS) {
            revert OutOfRange("maxSlashBpsPerPeriod", maxSlashBpsPerPeriod_, maxSlashBps_, BPS);
        }
        if (treasuryShareBps_ > BPS) revert InvalidBps(treasuryShareBps_, BPS);
        if (treasury_ == address(0)) revert ZeroAddress();
        if (treasury_ == defaultAdmin() || treasury_ == _pendingAdmin()) revert TreasuryIsAdmin(treasury_);
        maxSlashBps = maxSlashBps_;
        maxSlashBpsPerPeriod = maxSlashBpsPerPeriod_;
        treasuryShareBps = treasuryShareBps_;
        treasury = treasury_;
        emit SlashPolicySet(maxSlashBps_, maxSlashBpsPerPeriod_, treasuryShareBps_, treasury_);
    }

    function _setSlashRateLimit(uint128 capacity, uint128 refillPerSecond) private {
        if (capacity < MIN_BUCKET_CAPACITY || capacity > MAX_BUCKET_CAPACITY) {
            revert OutOfRange("slashBucketCapacity", capacity, MIN_BUCKET_CAPACITY, MAX_BUCKET_CAPACITY);
        }
        if (refillPerSecond == 0 || refillPerSecond > capacity) {
            revert OutOfRange("slashRefillPerSecond", refillPerSecond, 1, capacity);
        }
        slashBucketCapacity = capacity;
        slashRefillPerSecond = refillPerSecond;
        emit SlashRateLimitSet(capacity, refillPerSecond);
    }

    /// @dev The admin may not become the treasury's holder.
    function _checkAdminCandidate(address account) internal view override {
        if (account == treasury) revert TreasuryIsAdmin(account);
    }

    function _pendingAdmin() private view returns (address pending) {
        (pending,) = pendingDefaultAdmin();
    }

    function _min(uint256 a, uint256 b) private pure returns (uint256) {
        return a < b ? a : b;
    }
}
