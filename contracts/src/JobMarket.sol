// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {IERC20Permit} from "@openzeppelin/contracts/token/ERC20/extensions/IERC20Permit.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {ReentrancyGuardTransient} from "@openzeppelin/contracts/utils/ReentrancyGuardTransient.sol";

import {SwarmAccess} from "./base/SwarmAccess.sol";
import {IStakingVault} from "./interfaces/IStakingVault.sol";

/// @title JobMarket
/// @notice Escrow for buyers' jobs. A buyer posts a job, escrowing
/// `maxPricePerUnit × maxUnits`; the market's matcher (MATCHER_ROLE) assigns it to an
/// eligible provider at a price within the cap and later completes it with the result
/// hash and the units used. After the buyer's dispute window anyone settles it: the
/// provider gets `units × price` less the protocol fee, the treasury the fee, the buyer
/// the rest. A failed job refunds the buyer (and may slash the provider); a disputed one
/// is resolved by ARBITER_ROLE. When a provider loses its nodes the matcher reassigns the
/// job to another provider with the escrow in place. After the deadline anyone may
/// return an unfinished job's escrow to its buyer, so no operator can strand a buyer's
/// funds.
/// @dev Invariants:
///  - token.balanceOf(this) == totalEscrowed == the sum of escrow(j) over open jobs
///    (Posted, Assigned, Completed, Disputed), unless tokens are sent directly;
///  - a job leaves escrow exactly once (Settled, Failed, Cancelled or Reclaimed);
///  - a pause stops postJob, assignJob and reassignJob, never cancel, reclaim, settle or fail.
contract JobMarket is SwarmAccess, ReentrancyGuardTransient {
    using SafeERC20 for IERC20;

    bytes32 public constant MATCHER_ROLE = keccak256("MATCHER_ROLE");
    bytes32 public constant ARBITER_ROLE = keccak256("ARBITER_ROLE");

    uint16 internal constant BPS = 10_000;
    /// @notice The highest protocol fee the admin may set: 20%.
    uint16 public constant MAX_FEE_BPS = 2_000;
    /// @notice The longest dispute window the admin may set.
    uint64 public constant MAX_DISPUTE_WINDOW = 30 days;
    /// @notice How long the arbiter has to resolve a dispute before the buyer may
    /// reclaim the escrow alone.
    uint64 public constant ARBITRATION_PERIOD = 14 days;

    enum Status {
        None,
        Posted,
        Assigned,
        Completed, // awaiting the dispute window
        Disputed,
        Settled,
        Failed,
        Cancelled,
        Reclaimed
    }

    /// @dev Five slots, by who writes them: postJob the first two, assignJob the next two
    /// (completeJob adds its time and units to them), completeJob the result hash.
    struct Job {
        address buyer;
        uint64 deadline;
        Status status;
        uint128 maxPricePerUnit;
        uint64 maxUnits;
        address provider;
        uint64 disputeEnd;
        uint16 feeBps; // the protocol fee agreed at assignment
        uint128 pricePerUnit;
        uint64 unitsUsed;
        bytes32 resultHash;
    }

    IERC20 public immutable token;
    IStakingVault public immutable vault;

    uint64 public nextJobId = 1;
    uint64 public disputeWindow;
    uint16 public feeBps;
    address public treasury;
    uint256 public totalEscrowed;

    mapping(uint256 jobId => Job) internal _jobs;

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
    event JobDisputed(uint256 indexed jobId, address indexed by);
    event DisputeResolved(uint256 indexed jobId, bool buyerUpheld, uint16 slashBps);
    event JobSettled(uint256 indexed jobId, address indexed provider, uint256 payment, uint256 fee, uint256 refund);
    event JobFailed(uint256 indexed jobId, address indexed provider, bytes32 reason, uint16 slashBps, uint256 refund);
    event JobReclaimed(uint256 indexed jobId, uint256 refund);
    event FeeSet(uint16 feeBps, address treasury);
    event DisputeWindowSet(uint64 disputeWindow);

    // ─── Errors ──────────────────────────────────────────────────────────────
    error ZeroAmount();
    error DeadlineNotInFuture(uint64 deadline, uint64 now_);
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
    error SameProvider(uint256 jobId, address provider);

    constructor(
        IERC20 token_,
        IStakingVault vault_,
        address admin,
        address treasury_,
        uint16 feeBps_,
        uint64 disputeWindow_
    ) SwarmAccess(admin) {
        if (address(token_) == address(0) || address(vault_) == address(0)) revert ZeroAddress();
        token = token_;
        vault = vault_;
        _setFee(feeBps_, treasury_);
        _setDisputeWindow(disputeWindow_);
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

    /// @notice Refunds to its buyer a job that was not completed by its deadline, or a
    /// dispute the arbiter left unresolved for ARBITRATION_PERIOD after the dispute window.
    /// Anyone may call — the buyer needs no operator, and the market service expires jobs
    /// for buyers — and the refund always goes to the buyer. Never stopped by a pause.
    /// Emits {JobReclaimed}.
    function reclaimExpired(uint256 jobId) external nonReentrant {
        Job storage job = _job(jobId);
        Status status = job.status;
        if (status == Status.Posted || status == Status.Assigned) {
            if (block.timestamp <= job.deadline) revert DeadlineNotReached(jobId, job.deadline);
        } else if (status == Status.Disputed) {
            uint64 arbitrationEnd = job.disputeEnd + ARBITRATION_PERIOD;
            if (block.timestamp <= arbitrationEnd) revert ArbitrationPending(jobId, arbitrationEnd);
        } else {
            revert WrongStatus(jobId, status);
        }
        job.status = Status.Reclaimed;
        uint256 refund = _release(job);
        token.safeTransfer(job.buyer, refund);
        emit JobReclaimed(jobId, refund);
    }

    /// @notice Disputes a completed job during its dispute window, holding its payment
    /// until ARBITER_ROLE resolves it. The buyer, or MATCHER_ROLE when replicas of the job
    /// disagree on the result. Emits {JobDisputed}.
    function disputeJob(uint256 jobId) external {
        Job storage job = _job(jobId);
        if (msg.sender != job.buyer && !hasRole(MATCHER_ROLE, msg.sender)) revert NotBuyer(jobId, msg.sender);
        _requireStatus(jobId, job, Status.Completed);
        if (block.timestamp >= job.disputeEnd) revert DisputeWindowClosed(jobId, job.disputeEnd);
        job.status = Status.Disputed;
        emit JobDisputed(jobId, msg.sender);
    }

    // ─── Matcher (MATCHER_ROLE) ──────────────────────────────────────────────

    /// @notice Assigns a posted job to `provider` at `pricePerUnit`, which must not
    /// exceed the buyer's cap; the provider must be registered, staked above its
    /// minimum and not jailed. Only MATCHER_ROLE. Stopped by a pause. Emits {JobAssigned}.
    function assignJob(uint256 jobId, address provider, uint128 pricePerUnit)
        external
        onlyRole(MATCHER_ROLE)
        whenNotPaused
    {
        Job storage job = _job(jobId);
        _requireStatus(jobId, job, Status.Posted);
        if (block.timestamp > job.deadline) revert DeadlinePassed(jobId, job.deadline);
        if (pricePerUnit > job.maxPricePerUnit) revert PriceAboveCap(pricePerUnit, job.maxPricePerUnit);
        vault.requireEligible(provider);
        job.status = Status.Assigned;
        job.provider = provider;
        job.feeBps = feeBps;
        job.pricePerUnit = pricePerUnit;
        emit JobAssigned(jobId, provider, pricePerUnit);
    }

    /// @notice Moves an assigned job to `provider` at `pricePerUnit` (within the buyer's
    /// cap) when its provider can no longer run it, before the deadline; the escrow stays
    /// in place and the fee agreed at the first assignment holds. The previous provider is
    /// slashed by `slashBps` when the loss is its own. Only MATCHER_ROLE. Stopped by a
    /// pause (a paused market fails the job instead). Emits {JobReassigned}.
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
        if (pricePerUnit > job.maxPricePerUnit) revert PriceAboveCap(pricePerUnit, job.maxPricePerUnit);
        vault.requireEligible(provider);
        job.provider = provider;
        job.pricePerUnit = pricePerUnit;
        emit JobReassigned(jobId, previous, provider, pricePerUnit, reason, slashBps);
        if (slashBps > 0) vault.slash(previous, slashBps, reason, bytes32(jobId));
    }

    /// @notice Records an assigned job as done with `resultHash` and the `unitsUsed`
    /// (at most maxUnits), by its deadline, and opens the buyer's dispute window.
    /// Only MATCHER_ROLE. Emits {JobCompleted}.
    function completeJob(uint256 jobId, bytes32 resultHash, uint64 unitsUsed) external onlyRole(MATCHER_ROLE) {
        Job storage job = _job(jobId);
        _requireStatus(jobId, job, Status.Assigned);
        if (block.timestamp > job.deadline) revert DeadlinePassed(jobId, job.deadline);
        if (unitsUsed > job.maxUnits) revert UnitsAboveMax(unitsUsed, job.maxUnits);
        uint64 disputeEnd = uint64(block.timestamp) + disputeWindow;
        job.status = Status.Completed;
        job.unitsUsed = unitsUsed;
        job.disputeEnd = disputeEnd;
        job.resultHash = resultHash;
        emit JobCompleted(jobId, resultHash, unitsUsed, disputeEnd);
    }

    /// @notice Fails an assigned job: refunds the buyer in full and, where the provider
    /// is at fault (`slashBps` > 0), slashes it through the vault. Only MATCHER_ROLE.
    /// Emits {JobFailed}.
    function failJob(uint256 jobId, bytes32 reason, uint16 slashBps) external onlyRole(MATCHER_ROLE) nonReentrant {
        Job storage job = _job(jobId);
        _requireStatus(jobId, job, Status.Assigned);
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
        _settle(jobId, job);
    }

    /// @notice Resolves a disputed job. If the buyer is upheld, the buyer is refunded
    /// in full and the provider slashed by `slashBps`; otherwise the job settles as
    /// completed. Only ARBITER_ROLE. Emits {DisputeResolved} and {JobFailed} or {JobSettled}.
    function resolveDispute(uint256 jobId, bool buyerUpheld, uint16 slashBps)
        external
        onlyRole(ARBITER_ROLE)
        nonReentrant
    {
        Job storage job = _job(jobId);
        _requireStatus(jobId, job, Status.Disputed);
        emit DisputeResolved(jobId, buyerUpheld, slashBps);
        if (!buyerUpheld) {
            _settle(jobId, job);
            return;
        }
        bytes32 reason = "dispute";
        job.status = Status.Failed;
        uint256 refund = _release(job);
        token.safeTransfer(job.buyer, refund);
        emit JobFailed(jobId, job.provider, reason, slashBps, refund);
        if (slashBps > 0) vault.slash(job.provider, slashBps, reason, job.resultHash);
    }

    // ─── Views ───────────────────────────────────────────────────────────────

    /// @notice The full record of job `jobId`.
    function getJob(uint256 jobId) external view returns (Job memory) {
        return _jobs[jobId];
    }

    /// @notice The tokens job `jobId` holds in escrow while it is open.
    function escrowOf(uint256 jobId) public view returns (uint256) {
        Job storage job = _jobs[jobId];
        return _isOpen(job.status) ? uint256(job.maxPricePerUnit) * job.maxUnits : 0;
    }

    // ─── Admin (DEFAULT_ADMIN_ROLE) ──────────────────────────────────────────

    /// @notice Sets the protocol fee and who receives it. Emits {FeeSet}.
    function setFee(uint16 feeBps_, address treasury_) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _setFee(feeBps_, treasury_);
    }

    /// @notice Sets the dispute window for jobs completed later. Emits {DisputeWindowSet}.
    function setDisputeWindow(uint64 window) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _setDisputeWindow(window);
    }

    // ─── Internals ───────────────────────────────────────────────────────────

    function _post(bytes32 specHash, uint128 maxPricePerUnit, uint64 maxUnits, uint64 deadline)
        private
        returns (uint256 jobId)
    {
        if (maxPricePerUnit == 0 || maxUnits == 0) revert ZeroAmount();
        if (deadline <= block.timestamp) revert DeadlineNotInFuture(deadline, uint64(block.timestamp));
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

    function _settle(uint256 jobId, Job storage job) private {
        job.status = Status.Settled;
        uint256 escrow = _release(job);
        uint256 payment = uint256(job.unitsUsed) * job.pricePerUnit;
        uint256 fee = payment * job.feeBps / BPS;
        uint256 refund = escrow - payment;
        emit JobSettled(jobId, job.provider, payment - fee, fee, refund);
        if (payment > fee) token.safeTransfer(job.provider, payment - fee);
        if (fee > 0) token.safeTransfer(treasury, fee);
        if (refund > 0) token.safeTransfer(job.buyer, refund);
    }

    /// @dev Takes a job's escrow off the books; the caller has already moved it to a
    /// terminal status and pays it out.
    function _release(Job storage job) private returns (uint256 escrow) {
        escrow = uint256(job.maxPricePerUnit) * job.maxUnits;
        totalEscrowed -= escrow;
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
        feeBps = feeBps_;
        treasury = treasury_;
        emit FeeSet(feeBps_, treasury_);
    }

    function _setDisputeWindow(uint64 window) private {
        if (window > MAX_DISPUTE_WINDOW) revert DisputeWindowTooLong(window, MAX_DISPUTE_WINDOW);
        disputeWindow = window;
        emit DisputeWindowSet(window);
    }
}
