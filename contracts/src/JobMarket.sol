// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {IERC20Permit} from "@openzeppelin/contracts/token/ERC20/extensions/IERC20Permit.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {EIP712} from "@openzeppelin/contracts/utils/cryptography/EIP712.sol";
import {SignatureChecker} from "@openzeppelin/contracts/utils/cryptography/SignatureChecker.sol";
import {ReentrancyGuardTransient} from "@openzeppelin/contracts/utils/ReentrancyGuardTransient.sol";

import {SwarmAccess} from "./base/SwarmAccess.sol";
import {IStakingVault} from "./interfaces/IStakingVault.sol";

/// @title JobMarket
/// @notice Escrow for buyers' jobs. A buyer posts a job, escrowing
/// `maxPricePerUnit × maxUnits`; the market's matcher (MATCHER_ROLE) assigns it to an
/// eligible provider at a price within the cap and later completes it with the result
/// hash and the units used, as the provider signed them with its address and its price (an
/// EIP-712 `JobResult`, checked against the provider's key or, for a contract wallet, its
/// ERC-1271 answer). After the
/// buyer's dispute window anyone settles it: the provider gets `units × price` less the
/// protocol fee, the treasury the fee, the buyer the rest. A failed job refunds the buyer
/// (and may slash the provider); a disputed one is resolved by ARBITER_ROLE, and a
/// buyer's dispute posts a bond (a share of the payment, never below a floor) that the
/// losing side forfeits, and that goes to the provider if the arbiter never rules. When a provider loses its
/// nodes the matcher reassigns the job to another provider with the escrow in place.
/// After the deadline anyone may return an unfinished job's escrow to its buyer, and a
/// dispute the arbiter leaves undecided settles half and half, so no operator can strand
/// anyone's funds. A deadline lies at most `maxJobDuration` (30 days by default) after the
/// posting and every price at or above `minPricePerUnit`, so a job holds its provider for
/// a bounded time and never for free.
///
/// Every slash the market can still make for a job lands before its provider can
/// withdraw: the market holds the provider's stake in the vault until the job's last
/// slashable second has passed (the deadline while it runs, the dispute window once it is
/// done, the arbitration period once it is disputed), and refuses a slash after that.
/// The matcher slashes a job's provider at most once, and the vault caps what it takes
/// per incident and per period, so a compromised matcher can only do bounded harm.
/// @dev Invariants:
///  - token.balanceOf(this) == totalEscrowed == the sum of escrowOf(j) over open jobs
///    (Posted, Assigned, Completed, Disputed; a disputed job's bond included), unless
///    tokens are sent directly;
///  - a job leaves escrow exactly once (Settled, Failed, Cancelled or Reclaimed);
///  - the matcher cannot complete a job with a result, units or price its provider did not
///    sign: a completed job's (provider, pricePerUnit, resultHash, unitsUsed) carries its
///    provider's signature;
///  - minPricePerUnit <= every assigned price; deadline <= posting + maxJobDuration <= 30 days;
///  - at most one matcher slash per job (failJob or reassignJob), none after its deadline,
///    and no arbiter ruling after the arbitration period;
///  - the provider of an open job cannot withdraw while a slash for it may still come;
///  - minDisputeWindow <= disputeWindow <= MAX_DISPUTE_WINDOW;
///  - the treasury is never the admin;
///  - a pause stops postJob, assignJob and reassignJob, never cancel, reclaim, settle or fail.
///
/// EIP712 is inherited first so that its two fallback strings (never written: the name
/// and version are short) come before the pause flag, which still shares a slot with
/// the market's parameters.
contract JobMarket is EIP712, SwarmAccess, ReentrancyGuardTransient {
    using SafeERC20 for IERC20;

    bytes32 public constant MATCHER_ROLE = keccak256("MATCHER_ROLE");
    bytes32 public constant ARBITER_ROLE = keccak256("ARBITER_ROLE");
    /// @notice The EIP-712 type a provider signs to vouch for a job's result and units.
    bytes32 public constant JOB_RESULT_TYPEHASH = keccak256(
        "JobResult(uint256 jobId,address provider,uint128 pricePerUnit,bytes32 resultHash,uint64 units)"
    );
    /// @notice What a provider signs when its lease of a job failed by the job's own fault
    /// after holding `units` units: {chargeJob} pays those.
    bytes32 public constant JOB_FAILURE_TYPEHASH =
        keccak256("JobFailure(uint256 jobId,address provider,uint128 pricePerUnit,uint64 units)");

    uint16 internal constant BPS = 10_000;
    /// @notice The highest protocol fee the admin may set: 20%.
    uint16 public constant MAX_FEE_BPS = 2_000;
    /// @notice The longest dispute window the admin may set.
    uint64 public constant MAX_DISPUTE_WINDOW = 7 days;
    /// @notice How long after the dispute window the arbiter may rule; after it the
    /// dispute settles half and half (see {reclaimExpired}).
    uint64 public constant ARBITRATION_PERIOD = 14 days;
    /// @notice The longest `maxJobDuration` the admin may set: the vault holds a provider's
    /// stake until its job's deadline, then through its dispute window and arbitration.
    uint64 public constant MAX_JOB_DURATION = 30 days;
    /// @notice The shortest `maxJobDuration` the admin may set.
    uint64 public constant MIN_JOB_DURATION = 1 hours;
    /// @notice The smallest dispute bond the admin may set: 1% of the job's payment,
    /// so a dispute never comes free.
    uint16 public constant MIN_DISPUTE_BOND_BPS = 100;
    /// @notice The largest dispute bond the admin may set: the whole payment, so a buyer
    /// never risks more than it would pay for the job.
    uint16 public constant MAX_DISPUTE_BOND_BPS = 10_000;
    /// @notice The highest floor the admin may set under a dispute bond: 10 tokens, so no
    /// change makes a dispute of a small job unaffordable.
    uint128 public constant MAX_MIN_DISPUTE_BOND = 10 ether;
    /// @notice The highest price floor the admin may set: 0.001 token a unit (a device-second,
    /// 3.6 tokens a device-hour), so no change of the floor prices every buyer out.
    uint128 public constant MAX_MIN_PRICE_PER_UNIT = 1e15;

    enum Status {
        None,
        Posted,
        Assigned,
        Completed, // awaiting the dispute window: with a result, or charged (failed by its own fault)
        Disputed,
        Settled,
        Failed,
        Cancelled,
        Reclaimed
    }

    /// @dev Five slots, by who writes them: postJob the first two, assignJob the next two
    /// (completeJob adds its time and units to them, a matcher slash its flag),
    /// completeJob the result hash.
    struct Job {
        address buyer; // slot 0: 20 bytes
        uint64 deadline; //  8
        Status status; //  1
        uint128 maxPricePerUnit; // slot 1: 16
        uint64 maxUnits; //  8
        address provider; // slot 2: 20
        uint64 disputeEnd; //  8
        uint16 feeBps; //  2: the protocol fee agreed at assignment
        bool slashed; //  1: the matcher has slashed a provider of this job (at most once)
        uint128 pricePerUnit; // slot 3: 16
        uint64 unitsUsed; //  8
        bytes32 resultHash; // slot 4
    }

    IERC20 public immutable token;
    IStakingVault public immutable vault;
    /// @notice The shortest dispute window any admin may ever set (set once, at deployment).
    uint64 public immutable minDisputeWindow;

    // The counter and the parameters a job's calls read share one slot; the treasury has its own.
    uint64 public nextJobId = 1;
    uint64 public disputeWindow;
    uint16 public feeBps;
    uint16 public disputeBondBps; // a buyer's dispute bond, in basis points of the job's payment
    /// @notice The furthest a job's deadline may lie from its posting.
    uint64 public maxJobDuration;
    address public treasury;
    /// @notice The lowest price per unit a job may be posted with or assigned at.
    uint128 public minPricePerUnit;
    /// @notice The smallest bond a buyer's dispute posts, whatever the job's payment.
    uint128 public minDisputeBond;
    uint256 public totalEscrowed;

    mapping(uint256 jobId => Job) internal _jobs;
    /// @notice The bond a buyer posted to dispute job `jobId`, held while the dispute is open.
    mapping(uint256 jobId => uint256) public disputeBond;

    // ─── Events ──────────────────────────────────────────────────────────────
    event JobPosted(
        uint256 indexed jobId,
        address indexed buyer,
        bytes32 specHash,
        uint256 maxPricePerUnit,
        uint256 maxUnits,
        uint64 deadline,
        uint256 escrow
    );
    event JobCancelled(uint256 indexed jobId, uint256 refund);
    event JobAssigned(uint256 indexed jobId, address indexed provider, uint256 pricePerUnit);
    event JobReassigned(
        uint256 indexed jobId,
        address indexed from,
        address indexed to,
        uint256 pricePerUnit,
        bytes32 reason,
        uint16 slashBps
    );
    event JobCompleted(uint256 indexed jobId, bytes32 resultHash, uint256 unitsUsed, uint64 disputeEnd);
    event JobCharged(
        uint256 indexed jobId, address indexed provider, bytes32 reason, uint256 unitsUsed, uint64 disputeEnd
    );
    event JobDisputed(uint256 indexed jobId, address indexed by, uint256 bond);
    event DisputeResolved(uint256 indexed jobId, bool buyerUpheld, uint16 slashBps);
    event DisputeExpired(uint256 indexed jobId, uint256 bondRefund);
    event JobSettled(uint256 indexed jobId, address indexed provider, uint256 payment, uint256 fee, uint256 refund);
    event JobFailed(uint256 indexed jobId, address indexed provider, bytes32 reason, uint16 slashBps, uint256 refund);
    event JobReclaimed(uint256 indexed jobId, uint256 refund);
    event FeeSet(uint16 feeBps, address treasury);
    event DisputeWindowSet(uint64 disputeWindow);
    event DisputeBondSet(uint16 disputeBondBps, uint128 minDisputeBond);
    event JobLimitsSet(uint64 maxJobDuration, uint128 minPricePerUnit);

    // ─── Errors ──────────────────────────────────────────────────────────────
    error ZeroAmount();
    error DeadlineNotInFuture(uint64 deadline, uint64 now_);
    error DeadlineTooFar(uint64 deadline, uint64 latest);
    error EscrowTooLarge(uint256 escrow);
    error UnknownJob(uint256 jobId);
    error WrongStatus(uint256 jobId, Status status);
    error NotBuyer(uint256 jobId, address caller);
    error PriceAboveCap(uint256 price, uint256 cap);
    error UnitsAboveMax(uint256 units, uint256 maxUnits);
    error DeadlinePassed(uint256 jobId, uint64 deadline);
    error DeadlineNotReached(uint256 jobId, uint64 deadline);
    error ArbitrationPending(uint256 jobId, uint64 arbitrationEnd);
    error DisputeWindowOpen(uint256 jobId, uint64 disputeEnd);
    error DisputeWindowClosed(uint256 jobId, uint64 disputeEnd);
    error FeeTooHigh(uint16 feeBps, uint16 max);
    error DisputeWindowTooLong(uint64 window, uint64 max);
    error DisputeWindowTooShort(uint64 window, uint64 min);
    error MinDisputeWindowOutOfRange(uint64 minWindow, uint64 max);
    error DisputeBondOutOfRange(uint16 bondBps, uint16 min, uint16 max);
    error JobDurationOutOfRange(uint64 duration, uint64 min, uint64 max);
    error MinDisputeBondTooHigh(uint256 minBond, uint256 max);
    error PriceFloorTooHigh(uint256 floor, uint256 max);
    error PriceBelowFloor(uint256 price, uint256 floor);
    error SameProvider(uint256 jobId, address provider);
    error AlreadySlashed(uint256 jobId);
    error SlashWindowClosed(uint256 jobId, uint64 deadline);
    error ArbitrationClosed(uint256 jobId, uint64 arbitrationEnd);
    /// @notice The signature given for job `jobId`'s result is not its provider's over that
    /// job, its own address, the job's price, the result hash and the units (see {resultDigest}).
    error BadResultSignature(uint256 jobId);
    error EmptyResult(uint256 jobId);

    /// @notice The market's settings at deployment.
    struct Params {
        address guardian; // PAUSER_ROLE
        address matcher; // MATCHER_ROLE (none if zero)
        address arbiter; // ARBITER_ROLE (none if zero)
        address treasury;
        uint16 feeBps;
        uint64 disputeWindow;
        uint64 minDisputeWindow; // the floor, for ever
        uint16 disputeBondBps;
        uint128 minDisputeBond;
        uint64 maxJobDuration;
        uint128 minPricePerUnit;
    }

    /// @param admin DEFAULT_ADMIN_ROLE: a timelock whose delay exceeds the unbonding period.
    /// @dev The market needs the vault's SLASHER_ROLE to hold and slash stake; without it
    /// assignment, completion and disputes revert.
    constructor(IERC20 token_, IStakingVault vault_, address admin, Params memory params)
        SwarmAccess(admin, params.guardian)
        EIP712("SwarmJobMarket", "2")
    {
        if (address(token_) == address(0) || address(vault_) == address(0)) revert ZeroAddress();
        if (params.minDisputeWindow == 0 || params.minDisputeWindow > MAX_DISPUTE_WINDOW) {
            revert MinDisputeWindowOutOfRange(params.minDisputeWindow, MAX_DISPUTE_WINDOW);
        }
        token = token_;
        vault = vault_;
        minDisputeWindow = params.minDisputeWindow;
        _setFee(params.feeBps, params.treasury);
        _setDisputeWindow(params.disputeWindow);
        _setDisputeBond(params.disputeBondBps, params.minDisputeBond);
        _setJobLimits(params.maxJobDuration, params.minPricePerUnit);
        if (params.matcher != address(0)) _grantRole(MATCHER_ROLE, params.matcher);
        if (params.arbiter != address(0)) _grantRole(ARBITER_ROLE, params.arbiter);
    }

    // ─── Buyers ──────────────────────────────────────────────────────────────

    /// @notice Posts a job whose off-chain spec hashes to `specHash`, escrowing
    /// `maxPricePerUnit × maxUnits` tokens (approved beforehand) until `deadline`.
    /// Stopped by a pause. Emits {JobPosted}.
    /// @return jobId the new job's id.
    function postJob(bytes32 specHash, uint128 maxPricePerUnit, uint64 maxUnits, uint64 deadline)
        external
        whenNotPaused
        nonReentrant
        returns (uint256 jobId)
    {
        return _post(specHash, maxPricePerUnit, maxUnits, deadline);
    }

    /// @notice Like {postJob}, with an EIP-2612 permit for the escrow instead of a prior
    /// approval. A permit already used is ignored if the allowance suffices.
    function postJobWithPermit(
        bytes32 specHash,
        uint128 maxPricePerUnit,
        uint64 maxUnits,
        uint64 deadline,
        uint256 permitDeadline,
        uint8 v,
        bytes32 r,
        bytes32 s
    ) external whenNotPaused nonReentrant returns (uint256 jobId) {
        uint256 escrow = uint256(maxPricePerUnit) * maxUnits;
        try IERC20Permit(address(token)).permit(msg.sender, address(this), escrow, permitDeadline, v, r, s) {}
            catch {}
        return _post(specHash, maxPricePerUnit, maxUnits, deadline);
    }

    /// @notice Cancels an unassigned job and refunds its escrow in full. Only the buyer.
    /// Emits {JobCancelled}.
    function cancelJob(uint256 jobId) external nonReentrant {
        Job storage job = _job(jobId);
        if (msg.sender != job.buyer) revert NotBuyer(jobId, msg.sender);
        _requireStatus(jobId, job, Status.Posted);
        job.status = Status.Cancelled;
        uint256 refund = _release(job);
        token.safeTransfer(job.buyer, refund);
        emit JobCancelled(jobId, refund);
    }

    /// @notice Refunds to its buyer a job that was not completed by its deadline, or
    /// settles a dispute the arbiter left undecided for ARBITRATION_PERIOD after the
    /// dispute window. Anyone may call — the buyer needs no operator, and the market
    /// service expires jobs for buyers. Never stopped by a pause.
    /// An undecided dispute is nobody's proven fault, so neither side takes all: the
    /// disputed payment (`units × price`) is split in half. The provider gets half the
    /// payment less the protocol fee on that half, the treasury that fee, and the buyer
    /// the rest of the escrow (odd wei go to the buyer). The buyer's dispute bond goes to the
    /// provider, the other party: a dispute left unanswered is never free.
    /// Emits {JobReclaimed}, or for a dispute {DisputeExpired} and {JobSettled}.
    function reclaimExpired(uint256 jobId) external nonReentrant {
        Job storage job = _job(jobId);
        Status status = job.status;
        if (status == Status.Disputed) {
            uint64 arbitrationEnd = job.disputeEnd + ARBITRATION_PERIOD;
            if (block.timestamp <= arbitrationEnd) revert ArbitrationPending(jobId, arbitrationEnd);
            uint256 bond = _releaseBond(jobId);
            emit DisputeExpired(jobId, bond);
            _settle(jobId, job, uint256(job.unitsUsed) * job.pricePerUnit / 2, bond, true);
            return;
        }
        if (status != Status.Posted && status != Status.Assigned) revert WrongStatus(jobId, status);
        if (block.timestamp <= job.deadline) revert DeadlineNotReached(jobId, job.deadline);
        job.status = Status.Reclaimed;
        uint256 refund = _release(job);
        token.safeTransfer(job.buyer, refund);
        emit JobReclaimed(jobId, refund);
    }

    /// @notice Disputes a completed job during its dispute window, holding its payment
    /// until ARBITER_ROLE resolves it, and the provider's stake until the arbitration
    /// period ends. The buyer, or MATCHER_ROLE when replicas of the job disagree on the
    /// result. A buyer posts a bond of {bondFor} tokens (approved beforehand): returned if
    /// the buyer is upheld, paid to the provider if the dispute is rejected or the arbiter
    /// never rules. The matcher posts none. Emits {JobDisputed}.
    function disputeJob(uint256 jobId) external nonReentrant {
        Job storage job = _job(jobId);
        bool byMatcher = hasRole(MATCHER_ROLE, msg.sender);
        if (msg.sender != job.buyer && !byMatcher) revert NotBuyer(jobId, msg.sender);
        _requireStatus(jobId, job, Status.Completed);
        uint64 disputeEnd = job.disputeEnd;
        if (block.timestamp >= disputeEnd) revert DisputeWindowClosed(jobId, disputeEnd);
        job.status = Status.Disputed;
        uint256 bond = byMatcher ? 0 : _bond(job);
        if (bond > 0) {
            disputeBond[jobId] = bond;
            totalEscrowed += bond;
        }
        emit JobDisputed(jobId, msg.sender, bond);
        _holdPastDeadline(job, disputeEnd + ARBITRATION_PERIOD + 1);
        if (bond > 0) token.safeTransferFrom(msg.sender, address(this), bond);
    }

    // ─── Matcher (MATCHER_ROLE) ──────────────────────────────────────────────

    /// @notice Assigns a posted job to `provider` at `pricePerUnit`, which must not
    /// exceed the buyer's cap nor fall below `minPricePerUnit`; the provider must be
    /// registered, staked above its minimum net of any slash debt and not jailed. Holds the provider's stake in the vault past the job's
    /// deadline, while the job may still be failed with a slash. Only MATCHER_ROLE.
    /// Stopped by a pause. Emits {JobAssigned}.
    function assignJob(uint256 jobId, address provider, uint128 pricePerUnit)
        external
        onlyRole(MATCHER_ROLE)
        whenNotPaused
    {
        Job storage job = _job(jobId);
        _requireStatus(jobId, job, Status.Posted);
        if (block.timestamp > job.deadline) revert DeadlinePassed(jobId, job.deadline);
        _checkPrice(pricePerUnit, job.maxPricePerUnit);
        vault.requireEligible(provider);
        job.status = Status.Assigned;
        job.provider = provider;
        job.feeBps = feeBps;
        job.pricePerUnit = pricePerUnit;
        emit JobAssigned(jobId, provider, pricePerUnit);
        vault.hold(provider, _afterDeadline(job.deadline));
    }

    /// @notice Moves an assigned job to `provider` at `pricePerUnit` (within the buyer's
    /// cap) when its provider can no longer run it, before the deadline; the escrow stays
    /// in place and the fee agreed at the first assignment holds. The previous provider is
    /// slashed by `slashBps` when the loss is its own — at most once per job, counting
    /// {failJob} ({AlreadySlashed}). The new provider's stake is held past the deadline.
    /// Only MATCHER_ROLE. Stopped by a pause (a paused market fails the job instead).
    /// Emits {JobReassigned}.
    function reassignJob(uint256 jobId, address provider, uint128 pricePerUnit, bytes32 reason, uint16 slashBps)
        external
        onlyRole(MATCHER_ROLE)
        whenNotPaused
        nonReentrant
    {
        Job storage job = _job(jobId);
        _requireStatus(jobId, job, Status.Assigned);
        if (block.timestamp > job.deadline) revert DeadlinePassed(jobId, job.deadline);
        address previous = job.provider;
        if (provider == previous) revert SameProvider(jobId, provider);
        _checkPrice(pricePerUnit, job.maxPricePerUnit);
        vault.requireEligible(provider);
        if (slashBps > 0) _markSlashed(jobId, job);
        job.provider = provider;
        job.pricePerUnit = pricePerUnit;
        emit JobReassigned(jobId, previous, provider, pricePerUnit, reason, slashBps);
        vault.hold(provider, _afterDeadline(job.deadline));
        if (slashBps > 0) vault.slash(previous, slashBps, reason, bytes32(jobId));
    }

    /// @notice Records an assigned job as done with `resultHash` and the `unitsUsed`
    /// (at most maxUnits), by its deadline, and opens the buyer's dispute window; the
    /// provider's stake stays held until the window closes. `providerSignature` is the
    /// job's current provider's signature over {resultDigest}`(jobId, resultHash,
    /// unitsUsed)`, which binds the provider's address and the job's price as well:
    /// a 65-byte ECDSA signature from its key, or whatever its contract
    /// wallet accepts through ERC-1271 ({BadResultSignature} otherwise). The matcher
    /// chooses when to submit a result, never what it says. A zero result hash is
    /// refused ({EmptyResult}): it marks a charged failure ({chargeJob}). Only MATCHER_ROLE.
    /// Emits {JobCompleted}.
    function completeJob(uint256 jobId, bytes32 resultHash, uint64 unitsUsed, bytes calldata providerSignature)
        external
        onlyRole(MATCHER_ROLE)
    {
        Job storage job = _job(jobId);
        _requireStatus(jobId, job, Status.Assigned);
        if (block.timestamp > job.deadline) revert DeadlinePassed(jobId, job.deadline);
        if (resultHash == bytes32(0)) revert EmptyResult(jobId);
        _recordUnits(jobId, job, unitsUsed, resultDigest(jobId, resultHash, unitsUsed), providerSignature);
        job.resultHash = resultHash;
        emit JobCompleted(jobId, resultHash, unitsUsed, job.disputeEnd);
        _holdPastDeadline(job, job.disputeEnd);
    }

    /// @notice Charges an assigned job that failed by its own fault (its program crashed, it
    /// broke a limit of its lease, it ran out its units) for the `unitsUsed` its lease held
    /// (at most maxUnits), by its deadline: like {completeJob} without a result. The job
    /// awaits its dispute window as a completed one whose result hash is zero; {settleJob}
    /// then pays the provider `unitsUsed × price` less the fee and refunds the rest, and the
    /// buyer may dispute it as any completed job. `providerSignature` is the job's current
    /// provider's over {failureDigest}`(jobId, unitsUsed)`, so the matcher chooses when to
    /// charge, never how much; a provider's own fault is never charged ({failJob}).
    /// Only MATCHER_ROLE. Emits {JobCharged}.
    function chargeJob(uint256 jobId, bytes32 reason, uint64 unitsUsed, bytes calldata providerSignature)
        external
        onlyRole(MATCHER_ROLE)
    {
        Job storage job = _job(jobId);
        _requireStatus(jobId, job, Status.Assigned);
        if (block.timestamp > job.deadline) revert DeadlinePassed(jobId, job.deadline);
        _recordUnits(jobId, job, unitsUsed, failureDigest(jobId, unitsUsed), providerSignature);
        emit JobCharged(jobId, job.provider, reason, unitsUsed, job.disputeEnd);
        _holdPastDeadline(job, job.disputeEnd);
    }

    /// @notice Fails an assigned job: refunds the buyer in full and, where the provider
    /// is at fault (`slashBps` > 0), slashes it through the vault — only up to the job's
    /// deadline ({SlashWindowClosed}; a fail without a slash is allowed at any time) and
    /// at most once per job, counting {reassignJob} ({AlreadySlashed}). Only MATCHER_ROLE.
    /// Emits {JobFailed}.
    function failJob(uint256 jobId, bytes32 reason, uint16 slashBps) external onlyRole(MATCHER_ROLE) nonReentrant {
        Job storage job = _job(jobId);
        _requireStatus(jobId, job, Status.Assigned);
        if (slashBps > 0) {
            if (block.timestamp > job.deadline) revert SlashWindowClosed(jobId, job.deadline);
            _markSlashed(jobId, job);
        }
        job.status = Status.Failed;
        uint256 refund = _release(job);
        token.safeTransfer(job.buyer, refund);
        emit JobFailed(jobId, job.provider, reason, slashBps, refund);
        if (slashBps > 0) vault.slash(job.provider, slashBps, reason, bytes32(jobId));
    }

    // ─── Settlement ──────────────────────────────────────────────────────────

    /// @notice Pays out a completed job after its dispute window: the provider
    /// `units × price` less the fee, the treasury the fee, the buyer the rest of the
    /// escrow. Anyone may call; never stopped by a pause. Emits {JobSettled}.
    function settleJob(uint256 jobId) external nonReentrant {
        Job storage job = _job(jobId);
        _requireStatus(jobId, job, Status.Completed);
        if (block.timestamp < job.disputeEnd) revert DisputeWindowOpen(jobId, job.disputeEnd);
        _settle(jobId, job, uint256(job.unitsUsed) * job.pricePerUnit, 0, false);
    }

    /// @notice Resolves a disputed job, until ARBITRATION_PERIOD after its dispute window
    /// ({ArbitrationClosed} after it; see {reclaimExpired}). If the buyer is upheld, the
    /// buyer is refunded in full with its bond and the provider slashed by `slashBps`;
    /// otherwise the job settles as completed and the buyer's bond goes to the provider.
    /// Only ARBITER_ROLE. Emits {DisputeResolved} and {JobFailed} or {JobSettled}.
    function resolveDispute(uint256 jobId, bool buyerUpheld, uint16 slashBps)
        external
        onlyRole(ARBITER_ROLE)
        nonReentrant
    {
        Job storage job = _job(jobId);
        _requireStatus(jobId, job, Status.Disputed);
        uint64 arbitrationEnd = job.disputeEnd + ARBITRATION_PERIOD;
        if (block.timestamp > arbitrationEnd) revert ArbitrationClosed(jobId, arbitrationEnd);
        uint256 bond = _releaseBond(jobId);
        emit DisputeResolved(jobId, buyerUpheld, slashBps);
        if (!buyerUpheld) {
            _settle(jobId, job, uint256(job.unitsUsed) * job.pricePerUnit, bond, true);
            return;
        }
        bytes32 reason = "dispute";
        job.status = Status.Failed;
        uint256 refund = _release(job);
        emit JobFailed(jobId, job.provider, reason, slashBps, refund);
        token.safeTransfer(job.buyer, refund + bond);
        if (slashBps > 0) vault.slash(job.provider, slashBps, reason, job.resultHash);
    }

    // ─── Views ───────────────────────────────────────────────────────────────

    /// @notice The full record of job `jobId`.
    function getJob(uint256 jobId) external view returns (Job memory) {
        return _jobs[jobId];
    }

    /// @notice The EIP-712 digest job `jobId`'s provider signs to vouch that the job produced
    /// `resultHash` using `units` units, run by it at the price it was assigned: the typed struct
    /// `JobResult(uint256 jobId,address provider,uint128 pricePerUnit,bytes32 resultHash,uint64 units)`
    /// with the job's current provider and price, in the domain "SwarmJobMarket", version "2",
    /// of this chain and this market. A signature given at another price or by a provider the
    /// job was moved away from matches no later assignment.
    function resultDigest(uint256 jobId, bytes32 resultHash, uint64 units) public view returns (bytes32) {
        Job storage job = _jobs[jobId];
        return _hashTypedDataV4(
            keccak256(abi.encode(JOB_RESULT_TYPEHASH, jobId, job.provider, job.pricePerUnit, resultHash, units))
        );
    }

    /// @notice The EIP-712 digest job `jobId`'s provider signs to vouch that its lease failed
    /// by the job's own fault after holding `units` units: the typed struct
    /// `JobFailure(uint256 jobId,address provider,uint128 pricePerUnit,uint64 units)` with the
    /// job's current provider and price, in the market's domain (see {resultDigest}).
    function failureDigest(uint256 jobId, uint64 units) public view returns (bytes32) {
        Job storage job = _jobs[jobId];
        return _hashTypedDataV4(
            keccak256(abi.encode(JOB_FAILURE_TYPEHASH, jobId, job.provider, job.pricePerUnit, units))
        );
    }

    /// @notice The tokens job `jobId` holds in escrow while it is open, its dispute bond included.
    function escrowOf(uint256 jobId) public view returns (uint256) {
        Job storage job = _jobs[jobId];
        return _isOpen(job.status) ? uint256(job.maxPricePerUnit) * job.maxUnits + disputeBond[jobId] : 0;
    }

    /// @notice The bond a buyer's dispute of job `jobId` would post now: `disputeBondBps`
    /// of the job's payment (`units × price`), rounded up, and at least `minDisputeBond`.
    function bondFor(uint256 jobId) external view returns (uint256) {
        return _bond(_jobs[jobId]);
    }

    // ─── Admin (DEFAULT_ADMIN_ROLE) ──────────────────────────────────────────

    /// @notice Sets the protocol fee (at most MAX_FEE_BPS) for jobs assigned later, and who
    /// receives it, which may not be the admin ({TreasuryIsAdmin}). Only the admin. Emits {FeeSet}.
    function setFee(uint16 feeBps_, address treasury_) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _setFee(feeBps_, treasury_);
    }

    /// @notice Sets the dispute window for jobs completed later, from minDisputeWindow to
    /// MAX_DISPUTE_WINDOW. Only the admin. Emits {DisputeWindowSet}.
    function setDisputeWindow(uint64 window) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _setDisputeWindow(window);
    }

    /// @notice Sets the bond a buyer posts to dispute a job, in basis points of the job's
    /// payment, from MIN_DISPUTE_BOND_BPS (1%) to MAX_DISPUTE_BOND_BPS (100%), and its floor
    /// in tokens, from 1 wei to MAX_MIN_DISPUTE_BOND, for disputes raised later. Only the admin.
    /// Emits {DisputeBondSet}.
    function setDisputeBond(uint16 bondBps, uint128 minBond) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _setDisputeBond(bondBps, minBond);
    }

    /// @notice Sets the longest a job may run from its posting to its deadline
    /// (MIN_JOB_DURATION to MAX_JOB_DURATION) and the lowest price per unit (1 wei to
    /// MAX_MIN_PRICE_PER_UNIT), for jobs posted and assignments made later. Only the admin. Emits {JobLimitsSet}.
    function setJobLimits(uint64 maxJobDuration_, uint128 minPricePerUnit_) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _setJobLimits(maxJobDuration_, minPricePerUnit_);
    }

    // ─── Internals ───────────────────────────────────────────────────────────

    function _post(bytes32 specHash, uint128 maxPricePerUnit, uint64 maxUnits, uint64 deadline)
        private
        returns (uint256 jobId)
    {
        if (maxPricePerUnit == 0 || maxUnits == 0) revert ZeroAmount();
        if (maxPricePerUnit < minPricePerUnit) revert PriceBelowFloor(maxPricePerUnit, minPricePerUnit);
        if (deadline <= block.timestamp) revert DeadlineNotInFuture(deadline, uint64(block.timestamp));
        uint64 latest = uint64(block.timestamp) + maxJobDuration;
        if (deadline > latest) revert DeadlineTooFar(deadline, latest);
        uint256 escrow = uint256(maxPricePerUnit) * maxUnits;
        if (escrow > type(uint128).max) revert EscrowTooLarge(escrow);
        jobId = nextJobId++;
        Job storage job = _jobs[jobId];
        job.buyer = msg.sender;
        job.deadline = deadline;
        job.status = Status.Posted;
        job.maxPricePerUnit = maxPricePerUnit;
        job.maxUnits = maxUnits;
        totalEscrowed += escrow;
        token.safeTransferFrom(msg.sender, address(this), escrow);
        emit JobPosted(jobId, msg.sender, specHash, maxPricePerUnit, maxUnits, deadline, escrow);
    }

    /// @dev Pays `payment` (at most the escrow) to the provider less the fee agreed at
    /// assignment, the fee to the treasury and the rest of the escrow to the buyer; a
    /// released dispute `bond` goes to the provider if `bondToProvider`, else to the buyer.
    function _settle(uint256 jobId, Job storage job, uint256 payment, uint256 bond, bool bondToProvider) private {
        job.status = Status.Settled;
        uint256 escrow = _release(job);
        uint256 fee = payment * job.feeBps / BPS;
        uint256 refund = escrow - payment;
        emit JobSettled(jobId, job.provider, payment - fee, fee, refund);
        uint256 toProvider = payment - fee;
        if (bondToProvider) toProvider += bond;
        else refund += bond;
        if (toProvider > 0) token.safeTransfer(job.provider, toProvider);
        if (fee > 0) token.safeTransfer(treasury, fee);
        if (refund > 0) token.safeTransfer(job.buyer, refund);
    }

    /// @dev Moves an assigned job to Completed with the units its provider signed for (`digest`,
    /// a result's or a failure's), opening its dispute window.
    function _recordUnits(
        uint256 jobId,
        Job storage job,
        uint64 unitsUsed,
        bytes32 digest,
        bytes calldata signature
    ) private {
        if (unitsUsed > job.maxUnits) revert UnitsAboveMax(unitsUsed, job.maxUnits);
        if (!SignatureChecker.isValidSignatureNow(job.provider, digest, signature)) {
            revert BadResultSignature(jobId);
        }
        job.status = Status.Completed;
        job.unitsUsed = unitsUsed;
        job.disputeEnd = uint64(block.timestamp) + disputeWindow;
    }

    /// @dev Takes a job's escrow off the books; the caller has already moved it to a
    /// terminal status and pays it out.
    function _release(Job storage job) private returns (uint256 escrow) {
        escrow = uint256(job.maxPricePerUnit) * job.maxUnits;
        totalEscrowed -= escrow;
    }

    /// @dev Takes a disputed job's bond off the books; the caller pays it out.
    function _releaseBond(uint256 jobId) private returns (uint256 bond) {
        bond = disputeBond[jobId];
        if (bond > 0) {
            delete disputeBond[jobId];
            totalEscrowed -= bond;
        }
    }

    /// @dev `disputeBondBps` of the job's payment, rounded up, and never below the floor:
    /// no dispute comes free, not even of a job charged nothing.
    function _bond(Job storage job) private view returns (uint256) {
        uint256 payment = uint256(job.unitsUsed) * job.pricePerUnit;
        uint256 bond = (payment * disputeBondBps + BPS - 1) / BPS;
        return bond < minDisputeBond ? minDisputeBond : bond;
    }

    /// @dev A price within the buyer's cap and at or above the floor.
    function _checkPrice(uint128 price, uint128 cap) private view {
        if (price > cap) revert PriceAboveCap(price, cap);
        if (price < minPricePerUnit) revert PriceBelowFloor(price, minPricePerUnit);
    }

    /// @dev Records the job's one matcher slash; a second reverts.
    function _markSlashed(uint256 jobId, Job storage job) private {
        if (job.slashed) revert AlreadySlashed(jobId);
        job.slashed = true;
    }

    /// @dev Holds the job's provider until `until` where that is later than the hold its
    /// assignment placed (past the deadline), which a hold never drops below.
    function _holdPastDeadline(Job storage job, uint64 until) private {
        if (until > _afterDeadline(job.deadline)) vault.hold(job.provider, until);
    }

    /// @dev The first second no slash of a running job can land: a job may be failed
    /// with a slash up to and including its deadline, and the vault lets a provider
    /// withdraw from the hold's time on.
    function _afterDeadline(uint64 deadline) private pure returns (uint64) {
        return deadline < type(uint64).max ? deadline + 1 : deadline;
    }

    function _job(uint256 jobId) private view returns (Job storage job) {
        job = _jobs[jobId];
        if (job.status == Status.None) revert UnknownJob(jobId);
    }

    function _requireStatus(uint256 jobId, Job storage job, Status expected) private view {
        if (job.status != expected) revert WrongStatus(jobId, job.status);
    }

    function _isOpen(Status status) private pure returns (bool) {
        return status == Status.Posted || status == Status.Assigned || status == Status.Completed
            || status == Status.Disputed;
    }

    function _setFee(uint16 feeBps_, address treasury_) private {
        if (feeBps_ > MAX_FEE_BPS) revert FeeTooHigh(feeBps_, MAX_FEE_BPS);
        if (treasury_ == address(0)) revert ZeroAddress();
        (address pendingAdmin,) = pendingDefaultAdmin();
        if (treasury_ == defaultAdmin() || treasury_ == pendingAdmin) revert TreasuryIsAdmin(treasury_);
        feeBps = feeBps_;
        treasury = treasury_;
        emit FeeSet(feeBps_, treasury_);
    }

    function _setDisputeWindow(uint64 window) private {
        if (window < minDisputeWindow) revert DisputeWindowTooShort(window, minDisputeWindow);
        if (window > MAX_DISPUTE_WINDOW) revert DisputeWindowTooLong(window, MAX_DISPUTE_WINDOW);
        disputeWindow = window;
        emit DisputeWindowSet(window);
    }

    function _setDisputeBond(uint16 bondBps, uint128 minBond) private {
        if (bondBps < MIN_DISPUTE_BOND_BPS || bondBps > MAX_DISPUTE_BOND_BPS) {
            revert DisputeBondOutOfRange(bondBps, MIN_DISPUTE_BOND_BPS, MAX_DISPUTE_BOND_BPS);
        }
        if (minBond == 0) revert ZeroAmount();
        if (minBond > MAX_MIN_DISPUTE_BOND) revert MinDisputeBondTooHigh(minBond, MAX_MIN_DISPUTE_BOND);
        disputeBondBps = bondBps;
        minDisputeBond = minBond;
        emit DisputeBondSet(bondBps, minBond);
    }

    function _setJobLimits(uint64 maxJobDuration_, uint128 minPricePerUnit_) private {
        if (maxJobDuration_ < MIN_JOB_DURATION || maxJobDuration_ > MAX_JOB_DURATION) {
            revert JobDurationOutOfRange(maxJobDuration_, MIN_JOB_DURATION, MAX_JOB_DURATION);
        }
        if (minPricePerUnit_ == 0) revert ZeroAmount();
        if (minPricePerUnit_ > MAX_MIN_PRICE_PER_UNIT) {
            revert PriceFloorTooHigh(minPricePerUnit_, MAX_MIN_PRICE_PER_UNIT);
        }
        maxJobDuration = maxJobDuration_;
        minPricePerUnit = minPricePerUnit_;
        emit JobLimitsSet(maxJobDuration_, minPricePerUnit_);
    }

    /// @dev The admin may not become the treasury's holder.
    function _checkAdminCandidate(address account) internal view override {
        if (account == treasury) revert TreasuryIsAdmin(account);
    }
}
