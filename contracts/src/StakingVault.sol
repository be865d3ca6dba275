// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {IERC20Permit} from "@openzeppelin/contracts/token/ERC20/extensions/IERC20Permit.sol";
import {ERC20Burnable} from "@openzeppelin/contracts/token/ERC20/extensions/ERC20Burnable.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {ReentrancyGuardTransient} from "@openzeppelin/contracts/utils/ReentrancyGuardTransient.sol";
import {SafeCast} from "@openzeppelin/contracts/utils/math/SafeCast.sol";

import {SwarmAccess} from "./base/SwarmAccess.sol";
import {IStakingVault} from "./interfaces/IStakingVault.sol";

/// @title StakingVault
/// @notice The provider registry and its stake. A provider declares its hardware
/// (the spec's keccak hash on-chain, the GPU count for the minimum stake), stakes,
/// requests an unstake that unbonds for `unbondingPeriod`, and withdraws after it.
/// SLASHER_ROLE (the reward distributor and the job market) slashes, jails and
/// tombstones; slashes are bounded per incident and by a network-wide token bucket.
/// @dev Invariants:
///  - token.balanceOf(this) >= totalStaked + totalUnbonding (equal unless tokens are sent directly);
///  - a slash never takes more than the stake + unbonding it hits, nor more than
///    maxSlashBps of it, nor more than the bucket holds;
///  - a tombstoned provider stays jailed for ever;
///  - a pause stops register and stake, never requestUnstake, withdraw or unjail.
contract StakingVault is IStakingVault, SwarmAccess, ReentrancyGuardTransient {
    using SafeERC20 for IERC20;
    using SafeCast for uint256;

    bytes32 public constant SLASHER_ROLE = keccak256("SLASHER_ROLE");

    uint16 internal constant BPS = 10_000;
    /// @notice No setting may allow one incident to take more than this share of a stake.
    uint16 public constant MAX_SLASH_BPS_LIMIT = 10_000;
    /// @notice The longest unbonding period an admin may set.
    uint64 public constant MAX_UNBONDING_PERIOD = 90 days;

    /// @dev Three slots: the amounts stake/unstake read together, the times and flags
    /// eligibility reads together, then the spec hash.
    struct Provider {
        uint128 stake; // active stake
        uint128 unbonding; // requested for withdrawal, still slashable
        uint64 unbondingEnd; // when `unbonding` may be withdrawn
        uint64 jailedUntil; // 0: free; otherwise jailed, and unjail() is allowed from this time
        uint32 gpus; // declared GPU count; the minimum stake scales with it
        bool registered;
        bool tombstoned;
        bytes32 specHash; // keccak of the full off-chain hardware spec
    }

    IERC20 public immutable token;

    mapping(address provider => Provider) internal _providers;

    // Both totals in one slot: an unstake moves tokens from one to the other in one write.
    uint128 public totalStaked;
    uint128 public totalUnbonding;

    // Parameters: the four numbers share one slot, the treasury has its own.
    uint128 public minStakePerGpu;
    uint64 public unbondingPeriod;
    uint16 public maxSlashBps; // per-incident cap
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
    event SlashRateLimited(address indexed provider, uint256 requested, uint256 applied);
    event Jailed(address indexed provider, uint64 until);
    event Unjailed(address indexed provider);
    event Tombstoned(address indexed provider);
    event MinStakePerGpuSet(uint256 minStakePerGpu);
    event UnbondingPeriodSet(uint64 unbondingPeriod);
    event SlashPolicySet(uint16 maxSlashBps, uint16 treasuryShareBps, address treasury);
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
    error ProviderJailed(address provider, uint64 until);
    error ProviderTombstoned(address provider);
    error NotJailed(address provider);
    error InvalidBps(uint256 bps, uint256 max);
    error UnbondingPeriodTooLong(uint64 period, uint64 max);

    struct Params {
        uint128 minStakePerGpu;
        uint64 unbondingPeriod;
        uint16 maxSlashBps;
        uint16 treasuryShareBps;
        address treasury;
        uint128 slashBucketCapacity;
        uint128 slashRefillPerSecond;
    }

    constructor(IERC20 token_, address admin, Params memory params) SwarmAccess(admin) {
        if (address(token_) == address(0)) revert ZeroAddress();
        token = token_;
        _setMinStakePerGpu(params.minStakePerGpu);
        _setUnbondingPeriod(params.unbondingPeriod);
        _setSlashPolicy(params.maxSlashBps, params.treasuryShareBps, params.treasury);
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
        if (p.registered) revert AlreadyRegistered(msg.sender);
        p.registered = true;
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
    /// unbonding amount becomes withdrawable `unbondingPeriod` from now; it stays
    /// slashable until then. Never stopped by a pause. Emits {UnstakeRequested}.
    function requestUnstake(uint256 amount) external {
        if (amount == 0) revert ZeroAmount();
        Provider storage p = _registered(msg.sender);
        uint256 active = p.stake;
        if (amount > active) revert InsufficientStake(active, amount);
        uint128 unbonding = p.unbonding + amount.toUint128();
        uint64 releaseTime = uint64(block.timestamp) + unbondingPeriod;
        p.stake = uint128(active - amount);
        p.unbonding = unbonding;
        p.unbondingEnd = releaseTime;
        totalStaked -= uint128(amount);
        totalUnbonding += uint128(amount);
        emit UnstakeRequested(msg.sender, amount, unbonding, releaseTime);
    }

    /// @notice Pays the caller its whole unbonding amount once the unbonding period is
    /// over. Never stopped by a pause, a jail or a tombstone. Emits {Withdrawn}.
    function withdraw() external nonReentrant {
        Provider storage p = _providers[msg.sender];
        uint256 amount = p.unbonding;
        if (amount == 0) revert NothingToWithdraw();
        if (block.timestamp < p.unbondingEnd) revert StillUnbonding(p.unbondingEnd, uint64(block.timestamp));
        p.unbonding = 0;
        totalUnbonding -= uint128(amount);
        token.safeTransfer(msg.sender, amount);
        emit Withdrawn(msg.sender, amount);
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
    /// @dev Only SLASHER_ROLE. Takes `bps` of active and unbonding stake proportionally,
    /// capped per incident by maxSlashBps and network-wide by the token bucket (a
    /// limited slash emits {SlashRateLimited}). `treasuryShareBps` of it goes to the
    /// treasury, the rest is burned. Works while paused. Emits {Slashed}.
    function slash(address provider, uint16 bps, bytes32 reason, bytes32 evidenceHash)
        external
        onlyRole(SLASHER_ROLE)
        nonReentrant
        returns (uint256 slashed)
    {
        if (bps == 0 || bps > maxSlashBps) revert InvalidBps(bps, maxSlashBps);
        Provider storage p = _registered(provider);
        (uint256 fromStake, uint256 fromUnbonding) = _slashAmounts(provider, p, bps);
        p.stake -= uint128(fromStake);
        p.unbonding -= uint128(fromUnbonding);
        totalStaked -= uint128(fromStake);
        totalUnbonding -= uint128(fromUnbonding);
        slashed = fromStake + fromUnbonding;

        uint256 toTreasury = slashed * treasuryShareBps / BPS;
        emit Slashed(provider, reason, fromStake, fromUnbonding, bps, evidenceHash, toTreasury);
        if (toTreasury > 0) token.safeTransfer(treasury, toTreasury);
        if (slashed > toTreasury) ERC20Burnable(address(token)).burn(slashed - toTreasury);
    }

    /// @inheritdoc IStakingVault
    /// @dev Only SLASHER_ROLE. Never shortens a jail already running. Emits {Jailed}.
    function jail(address provider, uint64 until) external onlyRole(SLASHER_ROLE) {
        Provider storage p = _registered(provider);
        if (until > p.jailedUntil) {
            p.jailedUntil = until;
            emit Jailed(provider, until);
        }
    }

    /// @inheritdoc IStakingVault
    /// @dev Only SLASHER_ROLE, for fraud. Emits {Tombstoned} and {Jailed}.
    function tombstone(address provider) external onlyRole(SLASHER_ROLE) {
        Provider storage p = _registered(provider);
        if (p.tombstoned) return;
        p.tombstoned = true;
        p.jailedUntil = type(uint64).max;
        emit Tombstoned(provider);
        emit Jailed(provider, type(uint64).max);
    }

    // ─── Views ───────────────────────────────────────────────────────────────

    /// @notice The full record of `provider`.
    function providerInfo(address provider) external view returns (Provider memory) {
        return _providers[provider];
    }

    /// @notice The minimum active stake `provider` needs to take work.
    function minStake(address provider) public view returns (uint256) {
        return uint256(minStakePerGpu) * _providers[provider].gpus;
    }

    /// @inheritdoc IStakingVault
    function requireEligible(address provider) external view {
        Provider storage p = _providers[provider];
        if (!p.registered) revert NotRegistered(provider);
        if (p.tombstoned) revert ProviderTombstoned(provider);
        // A jail ends only by unjail(), which re-checks the stake: serving the time is not enough.
        if (p.jailedUntil != 0) revert ProviderJailed(provider, p.jailedUntil);
        uint256 minimum = uint256(minStakePerGpu) * p.gpus;
        if (p.stake < minimum) revert StakeBelowMinimum(provider, p.stake, minimum);
    }

    /// @notice Whether `provider` may take work and earn rewards now.
    function isEligible(address provider) external view returns (bool) {
        Provider storage p = _providers[provider];
        return p.registered && !p.tombstoned && p.jailedUntil == 0 && p.stake >= uint256(minStakePerGpu) * p.gpus;
    }

    /// @notice Tokens the network-wide slash limit allows right now.
    function availableSlashCapacity() external view returns (uint256) {
        return _bucketAt(block.timestamp);
    }

    // ─── Admin (DEFAULT_ADMIN_ROLE) ──────────────────────────────────────────

    /// @notice Sets the stake required per declared GPU. Emits {MinStakePerGpuSet}.
    function setMinStakePerGpu(uint128 value) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _setMinStakePerGpu(value);
    }

    /// @notice Sets the unbonding period for later requests. Emits {UnbondingPeriodSet}.
    function setUnbondingPeriod(uint64 period) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _setUnbondingPeriod(period);
    }

    /// @notice Sets the per-incident cap, the treasury's share of slashes and the
    /// treasury. Emits {SlashPolicySet}.
    function setSlashPolicy(uint16 maxSlashBps_, uint16 treasuryShareBps_, address treasury_)
        external
        onlyRole(DEFAULT_ADMIN_ROLE)
    {
        _setSlashPolicy(maxSlashBps_, treasuryShareBps_, treasury_);
    }

    /// @notice Sets the network-wide slash bucket. Emits {SlashRateLimitSet}.
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
        if (!p.registered) revert NotRegistered(provider);
    }

    /// @dev `bps` of active and unbonding stake, scaled down in proportion to what the
    /// network-wide bucket allows; draws the bucket down by the result.
    function _slashAmounts(address provider, Provider storage p, uint16 bps)
        private
        returns (uint256 fromStake, uint256 fromUnbonding)
    {
        fromStake = uint256(p.stake) * bps / BPS;
        fromUnbonding = uint256(p.unbonding) * bps / BPS;
        uint256 requested = fromStake + fromUnbonding;
        uint256 available = _bucketAt(block.timestamp);
        if (requested > available) {
            fromStake = fromStake * available / requested;
            fromUnbonding = fromUnbonding * available / requested;
            emit SlashRateLimited(provider, requested, fromStake + fromUnbonding);
        }
        _bucketLevel = uint128(available - fromStake - fromUnbonding);
        _bucketUpdatedAt = uint64(block.timestamp);
    }

    function _bucketAt(uint256 timestamp) private view returns (uint256) {
        uint256 refilled = _bucketLevel + (timestamp - _bucketUpdatedAt) * uint256(slashRefillPerSecond);
        return _min(refilled, slashBucketCapacity);
    }

    function _setMinStakePerGpu(uint128 value) private {
        if (value == 0) revert ZeroAmount();
        minStakePerGpu = value;
        emit MinStakePerGpuSet(value);
    }

    function _setUnbondingPeriod(uint64 period) private {
        if (period > MAX_UNBONDING_PERIOD) revert UnbondingPeriodTooLong(period, MAX_UNBONDING_PERIOD);
        unbondingPeriod = period;
        emit UnbondingPeriodSet(period);
    }

    function _setSlashPolicy(uint16 maxSlashBps_, uint16 treasuryShareBps_, address treasury_) private {
        if (maxSlashBps_ == 0 || maxSlashBps_ > MAX_SLASH_BPS_LIMIT) revert InvalidBps(maxSlashBps_, MAX_SLASH_BPS_LIMIT);
        if (treasuryShareBps_ > BPS) revert InvalidBps(treasuryShareBps_, BPS);
        if (treasury_ == address(0)) revert ZeroAddress();
        maxSlashBps = maxSlashBps_;
        treasuryShareBps = treasuryShareBps_;
        treasury = treasury_;
        emit SlashPolicySet(maxSlashBps_, treasuryShareBps_, treasury_);
    }

    function _setSlashRateLimit(uint128 capacity, uint128 refillPerSecond) private {
        slashBucketCapacity = capacity;
        slashRefillPerSecond = refillPerSecond;
        emit SlashRateLimitSet(capacity, refillPerSecond);
    }

    function _min(uint256 a, uint256 b) private pure returns (uint256) {
        return a < b ? a : b;
    }
}
