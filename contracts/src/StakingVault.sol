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
import {IStakingVault} from "./interfaces/IStakingVault.sol";

/// @title StakingVault
/// @notice The provider registry and its stake. A provider declares its hardware
/// (the spec's keccak hash on-chain, the GPU count for the minimum stake), stakes,
/// requests an unstake that unbonds for `unbondingPeriod`, and withdraws after it —
/// and not before any hold a slasher placed while a slash may still come (a job it
/// runs, a dispute, a pending epoch report), nor while it owes a slash the rate limit
/// deferred. SLASHER_ROLE (the reward distributor and the job market) holds, slashes,
/// jails and tombstones; a slash is capped per incident, per slasher and provider over
/// SLASH_PERIOD, and network-wide by a token bucket whose shortfall is owed, never forgiven.
/// The reward distributor records each provider's claimed rewards in its record here.
/// @dev Invariants:
///  - token.balanceOf(this) >= totalStaked + totalUnbonding (equal unless tokens are sent directly);
///  - a slash never takes more than the stake + unbonding it hits, nor more than
///    maxSlashBps of it net of the provider's slash debt, nor more than the bucket holds;
///  - a provider's slash debt never exceeds its stake + unbonding;
///  - a hold reaches at most MAX_HOLD past the moment it is placed;
///  - one slasher takes at most maxSlashBpsPerPeriod (summed) from one provider per SLASH_PERIOD;
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
    /// @notice The furthest from now a slasher may hold a provider's stake.
    uint64 public constant MAX_HOLD = 365 days;
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
        uint64 heldUntil;
        uint256 claimedRewards;
        uint256 slashDebt;
    }

    /// @dev One slasher's slashes of one provider in the current period.
    struct SlashWindow {
        uint64 start;
        uint16 usedBps;
    }

    IERC20 public immutable token;
    /// @notice The only contract that may record reward claims (set once, at deployment).
    address public immutable rewardsDistributor;
    /// @notice The shortest unbonding period any admin may ever set (set once, at deployment).
    uint64 public immutable minUnbondingPeriod;

    mapping(address provider => Provider) internal _providers;
    /// @notice Slashed amounts the network-wide bucket deferred: collected as it refills.
    mapping(address provider => uint256) public slashDebt;
    mapping(address slasher => mapping(address provider => SlashWindow)) internal _windows;

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
    }

    constructor(IERC20 token_, address admin, Params memory params) SwarmAccess(admin) {
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
        if (block.timestamp < p.heldUntil) revert StakeOnHold(p.heldUntil, uint64(block.timestamp));
        uint256 debt = slashDebt[msg.sender];
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
        debt = slashDebt[provider];
        if (debt == 0) return 0;
        uint256 collected = 0;
        uint256 toTreasury = 0;
        (debt, collected, toTreasury) = _collectDebt(provider, _registered(provider), debt);
        _payOut(collected, toTreasury);
    }

    /// @notice Lets a jailed provider back in once its jail time is served, if it is not
    /// tombstoned and its stake meets the minimum. Until it calls this, a provider whose
    /// time is served stays ineligible. Emits {Unjailed}.
    function unjail() external {
        Provider storage p = _registered(msg.sender);
        if (p.tombstoned) revert ProviderTombstoned(msg.sender);
        if (p.jailedUntil == 0) revert NotJailed(msg.sender);
        if (block.timestamp < p.jailedUntil) revert ProviderJailed(msg.sender, p.jailedUntil);
        uint256 minimum = uint256(minStakePerGpu) * p.gpus;
        if (p.stake < minimum) revert StakeBelowMinimum(msg.sender, p.stake, minimum);
        p.jailedUntil = 0;
        emit Unjailed(msg.sender);
    }

    // ─── Slashing (SLASHER_ROLE) ─────────────────────────────────────────────

    /// @inheritdoc IStakingVault
    /// @dev Only SLASHER_ROLE. Emits {StakeHeld} when it extends the hold.
    function hold(address provider, uint64 until) external onlyRole(SLASHER_ROLE) {
        Provider storage p = _registered(provider);
        uint256 longest = block.timestamp + MAX_HOLD;
        uint40 stored = uint40(until > longest ? longest : until);
        if (stored > p.heldUntil) {
            p.heldUntil = stored;
            emit StakeHeld(provider, stored);
        }
    }

    /// @inheritdoc IStakingVault
    /// @dev Only SLASHER_ROLE. Takes `bps` of active and unbonding stake proportionally.
    /// `bps` is lowered to the per-incident cap and to what is left of this slasher's
    /// allowance for this provider this period ({SlashCapped}); the network-wide bucket
    /// then limits the amount ({SlashRateLimited}) and what it holds back becomes the
    /// provider's slash debt. `treasuryShareBps` of it goes to the treasury, the rest is
    /// burned. Works while paused. Emits {Slashed}.
    function slash(address provider, uint16 bps, bytes32 reason, bytes32 evidenceHash)
        external
        onlyRole(SLASHER_ROLE)
        nonReentrant
        returns (uint256 slashed)
    {
        if (bps == 0) revert InvalidBps(bps, maxSlashBps);
        Provider storage p = _registered(provider);
        uint16 applied = _capped(provider, bps);
        if (applied != bps) emit SlashCapped(provider, msg.sender, bps, applied);
        if (applied == 0) return 0;
        (uint256 fromStake, uint256 fromUnbonding) = _slashAmounts(provider, p, applied);
        uint256 toTreasury = 0;
        (slashed, toTreasury) = _take(provider, p, fromStake, fromUnbonding, applied, reason, evidenceHash);
        _payOut(slashed, toTreasury);
    }

    /// @inheritdoc IStakingVault
    /// @dev Only SLASHER_ROLE. Never shortens a jail already running; a time past the
    /// record's range jails until the end of that range. Emits {Jailed}.
    function jail(address provider, uint64 until) external onlyRole(SLASHER_ROLE) {
        Provider storage p = _registered(provider);
        uint40 stored = until >= FOREVER ? FOREVER - 1 : uint40(until);
        if (stored > p.jailedUntil) {
            p.jailedUntil = stored;
            emit Jailed(provider, stored);
        }
    }

    /// @inheritdoc IStakingVault
    /// @dev Only SLASHER_ROLE, for fraud. Emits {Tombstoned} and {Jailed}.
    function tombstone(address provider) external onlyRole(SLASHER_ROLE) {
        Provider storage p = _registered(provider);
        if (p.tombstoned) return;
        p.tombstoned = true;
        p.jailedUntil = FOREVER;
        emit Tombstoned(provider);
        emit Jailed(provider, type(uint64).max);
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
        info.claimedRewards = p.claimedRewards;
        info.slashDebt = slashDebt[provider];
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
        uint256 minimum = uint256(minStakePerGpu) * p.gpus;
        if (p.stake < minimum) revert StakeBelowMinimum(provider, p.stake, minimum);
    }

    /// @notice Whether `provider` may take work and earn rewards now.
    function isEligible(address provider) external view returns (bool) {
        Provider storage p = _providers[provider];
        return p.gpus != 0 && !p.tombstoned && p.jailedUntil == 0 && p.stake >= uint256(minStakePerGpu) * p.gpus;
    }

    /// @notice Tokens the network-wide slash limit allows right now.
    function availableSlashCapacity() external view returns (uint256) {
        return _bucketAt(block.timestamp);
    }

    /// @notice What `slasher` may still take from `provider` this period, in basis points.
    function slashAllowanceBps(address slasher, address provider) external view returns (uint16) {
        SlashWindow memory w = _windows[slasher][provider];
        if (block.timestamp >= uint256(w.start) + SLASH_PERIOD) return maxSlashBpsPerPeriod;
        return w.usedBps >= maxSlashBpsPerPeriod ? 0 : maxSlashBpsPerPeriod - w.usedBps;
    }

    // ─── Admin (DEFAULT_ADMIN_ROLE) ──────────────────────────────────────────

    /// @notice Sets the stake required per declared GPU, from 1 wei to MAX_MIN_STAKE_PER_GPU.
    /// Emits {MinStakePerGpuSet}.
    function setMinStakePerGpu(uint128 value) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _setMinStakePerGpu(value);
    }

    /// @notice Sets the unbonding period for later requests, from minUnbondingPeriod to
    /// MAX_UNBONDING_PERIOD. Emits {UnbondingPeriodSet}.
    function setUnbondingPeriod(uint64 period) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _setUnbondingPeriod(period);
    }

    /// @notice Sets the per-incident cap (MIN_SLASH_BPS_LIMIT to MAX_SLASH_BPS_LIMIT), the
    /// per-slasher cap over SLASH_PERIOD (at least the per-incident cap), the treasury's
    /// share of slashes and the treasury. Emits {SlashPolicySet}.
    function setSlashPolicy(
        uint16 maxSlashBps_,
        uint16 maxSlashBpsPerPeriod_,
        uint16 treasuryShareBps_,
        address treasury_
    ) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _setSlashPolicy(maxSlashBps_, maxSlashBpsPerPeriod_, treasuryShareBps_, treasury_);
    }

    /// @notice Sets the network-wide slash bucket: a capacity of at least MIN_BUCKET_CAPACITY
    /// and a refill from 1 wei a second up to the capacity. Emits {SlashRateLimitSet}.
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

    /// @dev `bps` lowered to the per-incident cap and to the caller's allowance for
    /// `provider` this period, which it then uses up.
    function _capped(address provider, uint16 bps) private returns (uint16 applied) {
        applied = bps > maxSlashBps ? maxSlashBps : bps;
        SlashWindow storage w = _windows[msg.sender][provider];
        uint16 used = w.usedBps;
        if (block.timestamp >= uint256(w.start) + SLASH_PERIOD) {
            w.start = uint64(block.timestamp);
            used = 0;
        }
        uint16 limit = maxSlashBpsPerPeriod;
        uint16 left = used >= limit ? 0 : limit - used;
        if (applied > left) applied = left;
        w.usedBps = used + applied;
    }

    /// @dev `bps` of the provider's stake and unbonding, net of what it already owes (so a
    /// deferred slash never makes a later one larger), then limited by the bucket.
    function _slashAmounts(address provider, Provider storage p, uint16 bps)
        private
        returns (uint256 fromStake, uint256 fromUnbonding)
    {
        uint256 held = uint256(p.stake) + p.unbonding;
        if (held == 0) return (0, 0);
        uint256 scale = uint256(bps) * (held - _min(slashDebt[provider], held));
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
            uint256 debt = slashDebt[provider] + requested - fromStake - fromUnbonding;
            slashDebt[provider] = debt;
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
            slashDebt[provider] = owed;
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
        maxSlashBps = maxSlashBps_;
        maxSlashBpsPerPeriod = maxSlashBpsPerPeriod_;
        treasuryShareBps = treasuryShareBps_;
        treasury = treasury_;
        emit SlashPolicySet(maxSlashBps_, maxSlashBpsPerPeriod_, treasuryShareBps_, treasury_);
    }

    function _setSlashRateLimit(uint128 capacity, uint128 refillPerSecond) private {
        if (capacity < MIN_BUCKET_CAPACITY) revert OutOfRange("slashBucketCapacity", capacity, MIN_BUCKET_CAPACITY, type(uint128).max);
        if (refillPerSecond == 0 || refillPerSecond > capacity) {
            revert OutOfRange("slashRefillPerSecond", refillPerSecond, 1, capacity);
        }
        slashBucketCapacity = capacity;
        slashRefillPerSecond = refillPerSecond;
        emit SlashRateLimitSet(capacity, refillPerSecond);
    }

    function _min(uint256 a, uint256 b) private pure returns (uint256) {
        return a < b ? a : b;
    }
}
