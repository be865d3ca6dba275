// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {ReentrancyGuardTransient} from "@openzeppelin/contracts/utils/ReentrancyGuardTransient.sol";
import {EIP712} from "@openzeppelin/contracts/utils/cryptography/EIP712.sol";
import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";
import {MerkleProof} from "@openzeppelin/contracts/utils/cryptography/MerkleProof.sol";

import {SwarmAccess} from "./base/SwarmAccess.sol";
import {IStakingVault, IReportHolds} from "./interfaces/IStakingVault.sol";

/// @title RewardDistributor
/// @notice Epoch settlement. An oracle committee (a signer set and a threshold, changed
/// only by the admin) signs one EIP-712 {EpochReport} per epoch. A submitted report is
/// optimistic: it holds the stake of each provider it slashes, and of each whose slash it
/// defers to the next report, and a guardian may veto it during the challenge window;
/// after the window anyone finalizes it, which publishes its rewards root and applies its
/// slashes. A veto, a discard or a lapse ends the holds the report placed.
/// The root commits to each provider's *cumulative* earnings as an OpenZeppelin
/// StandardMerkleTree leaf of `(address provider, uint256 cumulative)`, so one proof
/// claims every epoch a provider has not yet claimed; what each provider has claimed is
/// kept in its record in the staking vault.
/// @dev Invariants:
///  - totalClaimed <= totalAllocated <= totalFunded: never pays more than was funded;
///  - a report's cumulativeTotal equals everything allocated through its epoch;
///  - claimed[p] never exceeds the cumulative amount proven for p;
///  - epochs finalize one after another (lastFinalizedEpoch + 1), never skipping;
///  - a report orders at most MAX_SLASHES_PER_REPORT slashes (MAX_TOMBSTONES_PER_REPORT
///    tombstones), sorted by provider without duplicates, with bounded jails, so every
///    report accepted can be finalized in one bounded transaction;
///  - a pending report can always be cleared: it lapses FINALIZE_PERIOD after its window,
///    and a guardian may discard it RECOVERY_DELAY after its window;
///  - every slash entry carries a penalty; a report's holds stand only while it may still be
///    finalized (its deferred holds until the next report finalizes), never past a veto,
///    a discard or a lapse;
///  - challengeWindow + maxReportLag <= the vault's unbondingPeriod;
///  - a pause stops submit and finalize, never claims.
contract RewardDistributor is IReportHolds, SwarmAccess, EIP712, ReentrancyGuardTransient {
    using SafeERC20 for IERC20;

    bytes32 public constant GUARDIAN_ROLE = keccak256("GUARDIAN_ROLE");
    bytes32 public constant EPOCH_REPORT_TYPEHASH = keccak256(
        "EpochReport(uint64 epoch,bytes32 rewardsRoot,uint256 totalRewards,uint256 cumulativeTotal,"
        "bytes32 slashesHash,bytes32 deferredHash,uint64 expiresAt)"
    );

    /// @notice The largest committee the admin may set.
    uint256 public constant MAX_SIGNERS = 32;
    /// @notice The longest challenge window the admin may set.
    uint64 public constant MAX_CHALLENGE_WINDOW = 30 days;
    /// @notice The most slashes one report may order; finalizing them fits in a block.
    uint256 public constant MAX_SLASHES_PER_REPORT = 200;
    /// @notice The most tombstones one report may order.
    uint256 public constant MAX_TOMBSTONES_PER_REPORT = 8;
    /// @notice The most providers one report may hold for slashes it defers to the next report.
    uint256 public constant MAX_DEFERRED_PER_REPORT = 200;
    /// @notice The longest report lag the admin may set.
    uint64 public constant MAX_REPORT_LAG = 60 days;
    /// @notice The longest jail one slash may order.
    uint64 public constant MAX_JAIL_SECONDS = 365 days;
    /// @notice How long after its window a report may be finalized; after that it lapses
    /// and a new report for its epoch may be submitted.
    uint64 public constant FINALIZE_PERIOD = 7 days;
    /// @notice How long after its window a guardian must wait to discard a pending report.
    uint64 public constant RECOVERY_DELAY = 1 days;

    /// @notice What the committee signs for one epoch.
    struct EpochReport {
        uint64 epoch; // lastFinalizedEpoch + 1
        bytes32 rewardsRoot; // cumulative earnings per provider, StandardMerkleTree root
        uint256 totalRewards; // this epoch's emission, added to what may be claimed
        uint256 cumulativeTotal; // the sum of the root's leaves: all allocated through this epoch
        bytes32 slashesHash; // keccak256(abi.encode(slashes)), IStakingVault.SlashOrder[]
        bytes32 deferredHash; // keccak256(abi.encode(deferred)): providers whose slash waits for the next report
        uint64 expiresAt; // the report may not be submitted after this time
    }

    /// @dev The report waiting out its challenge window; one packed slot plus four.
    struct Pending {
        uint64 epoch;
        uint64 finalizableAt;
        bool vetoed;
        uint64 reportId; // this submission's number: its holds are tagged with it
        bytes32 rewardsRoot;
        uint256 totalRewards;
        bytes32 slashesHash;
        bytes32 deferredHash;
    }

    IERC20 public immutable token;
    IStakingVault public immutable vault;
    /// @notice The shortest challenge window any admin may ever set (set once, at deployment).
    uint64 public immutable minChallengeWindow;

    bytes32 public rewardsRoot;
    uint64 public lastFinalizedEpoch;
    uint64 public challengeWindow;
    uint8 public threshold;
    /// @notice The submission number of the last finalized report, whose deferred holds stand.
    uint64 public lastFinalizedReportId;
    /// @notice Submissions so far; each report submitted takes the next number.
    uint64 public reportCount;
    /// @notice The longest from a misconduct to the submission of the report that slashes it,
    /// the previous report's challenge window aside: the epoch, its aggregation and signing.
    uint64 public maxReportLag;

    uint256 public totalFunded;
    uint256 public totalAllocated;
    /// @dev Allocated but not yet claimed. Kept instead of a claimed total so that a
    /// claim only ever lowers a slot that is already non-zero.
    uint256 public unclaimedAllocation;

    Pending internal _pending;
    address[] internal _signers;
    mapping(address => bool) public isSigner;
    /// @dev EIP-712 digests of vetoed reports: a veto is final for that exact report,
    /// so nobody can resubmit it with its (still valid) signatures.
    mapping(bytes32 digest => bool) internal _vetoedReports;
    /// @dev Content hashes of reports that lapsed: only a committee member may submit one again.
    mapping(bytes32 content => bool) internal _lapsedReports;

    // ─── Events ──────────────────────────────────────────────────────────────
    event Funded(address indexed from, uint256 amount, uint256 totalFunded);
    event CommitteeSet(address[] signers, uint8 threshold);
    event ChallengeWindowSet(uint64 challengeWindow);
    event MaxReportLagSet(uint64 maxReportLag);
    event EpochSubmitted(
        uint64 indexed epoch, bytes32 rewardsRoot, uint256 totalRewards, bytes32 slashesHash, uint64 finalizableAt
    );
    event SlashProposed(uint64 indexed epoch, IStakingVault.SlashOrder slash);
    event SlashDeferred(uint64 indexed epoch, address indexed provider);
    event EpochVetoed(uint64 indexed epoch, address indexed guardian);
    event EpochDiscarded(uint64 indexed epoch, address indexed by);
    event EpochFinalized(uint64 indexed epoch, bytes32 rewardsRoot, uint256 totalRewards, uint256 slashCount);
    event Claimed(address indexed provider, uint256 amount, uint256 cumulative);

    // ─── Errors ──────────────────────────────────────────────────────────────
    error ZeroAmount();
    error InvalidCommittee(uint256 signers, uint256 threshold);
    error ChallengeWindowOutOfRange(uint64 window, uint64 min, uint64 max);
    error VaultNotLinked(address vaultDistributor);
    error WrongEpoch(uint64 epoch, uint64 expected);
    error ReportExpired(uint64 expiresAt, uint64 now_);
    error CumulativeTotalMismatch(uint256 given, uint256 expected);
    error TooManySlashes(uint256 slashes, uint256 max);
    error TooManyTombstones(uint256 tombstones, uint256 max);
    error TooManyDeferred(uint256 deferred, uint256 max);
    error SlashesNotSorted(uint256 index, address provider);
    error DeferredNotSorted(uint256 index, address provider);
    /// @notice A slash entry orders no penalty (no bps, no jail, no tombstone).
    error EmptySlash(uint256 index, address provider);
    /// @notice A report that lapsed may be submitted again only by a committee member.
    error LapsedReportNotFromCommittee(address caller);
    error ReportLagOutOfRange(uint64 lag, uint64 min, uint64 max);
    /// @notice The challenge window plus the report lag would exceed the vault's unbonding period.
    error ReportingLongerThanUnbonding(uint256 reporting, uint64 unbondingPeriod);
    error JailTooLong(address provider, uint64 jailSeconds, uint64 max);
    error ReportPending(uint64 epoch, uint64 finalizableAt);
    error ReportLapsed(uint64 epoch, uint64 lapsedAt);
    error NoPendingReport();
    error SlashesMismatch(bytes32 expected, bytes32 given);
    error NotEnoughSignatures(uint256 given, uint256 threshold);
    error NotASigner(address signer);
    error SignersNotAscending(address previous, address next);
    error ChallengeWindowOpen(uint64 finalizableAt, uint64 now_);
    error ChallengeWindowClosed(uint64 finalizableAt, uint64 now_);
    error RecoveryNotYet(uint64 allowedAt, uint64 now_);
    error ReportVetoed(uint64 epoch);
    error Underfunded(uint256 needed, uint256 available);
    error InvalidProof(address provider, uint256 cumulative);
    error NothingToClaim(address provider, uint256 cumulative, uint256 alreadyClaimed);
    error ClaimExceedsAllocation(uint256 amount, uint256 unclaimedAllocation);

    /// @param admin DEFAULT_ADMIN_ROLE: a timelock whose delay exceeds the unbonding period.
    /// @param guardian GUARDIAN_ROLE (veto, discard) and PAUSER_ROLE.
    /// @param minChallengeWindow_ the floor under every challenge window, for ever.
    /// @param maxReportLag_ see {maxReportLag}; with the challenge window, within the vault's unbonding.
    constructor(
        IERC20 token_,
        IStakingVault vault_,
        address admin,
        address guardian,
        address[] memory committee,
        uint8 threshold_,
        uint64 challengeWindow_,
        uint64 minChallengeWindow_,
        uint64 maxReportLag_
    ) SwarmAccess(admin, guardian) EIP712("SwarmRewardDistributor", "3") {
        if (address(token_) == address(0) || address(vault_) == address(0)) revert ZeroAddress();
        if (vault_.rewardsDistributor() != address(this)) revert VaultNotLinked(vault_.rewardsDistributor());
        if (minChallengeWindow_ == 0 || minChallengeWindow_ > MAX_CHALLENGE_WINDOW) {
            revert ChallengeWindowOutOfRange(minChallengeWindow_, 1, MAX_CHALLENGE_WINDOW);
        }
        token = token_;
        vault = vault_;
        minChallengeWindow = minChallengeWindow_;
        _grantRole(GUARDIAN_ROLE, guardian);
        _setCommittee(committee, threshold_);
        _setTiming(challengeWindow_, maxReportLag_);
    }

    // ─── Funding ─────────────────────────────────────────────────────────────

    /// @notice Pulls `amount` tokens (approved beforehand) from the caller into the
    /// reward pool. Anyone may fund. Emits {Funded}.
    function fund(uint256 amount) external nonReentrant {
        if (amount == 0) revert ZeroAmount();
        uint256 total = totalFunded + amount;
        totalFunded = total;
        token.safeTransferFrom(msg.sender, address(this), amount);
        emit Funded(msg.sender, amount, total);
    }

    // ─── Epochs ──────────────────────────────────────────────────────────────

    /// @notice Submits the committee's report for `report.epoch` with the slashes it
    /// orders, the providers whose slashes it defers to the next report, and at least
    /// `threshold` signatures from distinct signers, sorted by signer address. Anyone may
    /// submit, until the report's expiry; a report that lapsed only a committee member
    /// ({LapsedReportNotFromCommittee}). The epoch must be the one after the last finalized;
    /// no other report may be pending (a lapsed one is replaced); the cumulative total must be
    /// everything allocated so far plus this epoch's rewards; the slashes must be sorted by
    /// provider without duplicates, each with a penalty, at most MAX_SLASHES_PER_REPORT
    /// (MAX_TOMBSTONES_PER_REPORT tombstones) with jails of at most MAX_JAIL_SECONDS; the
    /// deferred providers sorted, at most MAX_DEFERRED_PER_REPORT. Holds in the vault the stake
    /// of each provider a slash takes from until the report lapses, and of each deferred one
    /// until the next report may have arrived, as long as this report's holds stand
    /// ({isHoldLive}). Starts the challenge window. Stopped by a pause. Emits {EpochSubmitted},
    /// one {SlashProposed} per slash and one {SlashDeferred} per deferred provider.
    /// @dev Gas depends on the number of signatures, slashes and deferred providers, never on
    /// the providers in the root. The holds are not wrapped in a `try`: a gas limit too low for
    /// them fails the whole submission.
    function submitEpoch(
        EpochReport calldata report,
        IStakingVault.SlashOrder[] calldata slashes,
        address[] calldata deferred,
        bytes[] calldata signatures
    ) external whenNotPaused {
        Pending storage pending = _pending;
        bool replacesLapsed = pending.epoch != 0 && !pending.vetoed;
        if (replacesLapsed && block.timestamp <= _lapsesAt(pending.finalizableAt)) {
            revert ReportPending(pending.epoch, pending.finalizableAt);
        }
        (bytes32 slashesHash, bytes32 deferredHash) = _checkContent(report, slashes, deferred);
        address[] memory slashed = _checkSlashes(slashes);
        _checkDeferred(deferred);
        _checkNotRefused(report, slashesHash, deferredHash, replacesLapsed);
        _checkSignatures(hashReport(report), signatures);

        (uint64 reportId, uint64 lapsesAt) = _startReport(report, slashesHash, deferredHash);
        for (uint256 i; i < slashes.length; ++i) {
            emit SlashProposed(report.epoch, slashes[i]);
        }
        for (uint256 i; i < deferred.length; ++i) {
            emit SlashDeferred(report.epoch, deferred[i]);
        }
        // finalizeEpoch is still allowed at lapsesAt itself: hold past it.
        if (slashed.length > 0) vault.holdForReport(reportId, lapsesAt + 1, false, slashed);
        // The next report may come as late as maxReportLag after this one finalizes.
        if (deferred.length > 0) vault.holdForReport(reportId, lapsesAt + maxReportLag + 1, true, deferred);
    }

    /// @notice Vetoes the pending report before its challenge window closes; the
    /// committee may then submit a corrected report for the same epoch; the vetoed
    /// report itself is refused for ever ({ReportVetoed}). Only GUARDIAN_ROLE.
    /// Emits {EpochVetoed}.
    function vetoEpoch(uint64 epoch) external onlyRole(GUARDIAN_ROLE) {
        Pending storage pending = _pendingReport(epoch);
        if (block.timestamp >= pending.finalizableAt) {
            revert ChallengeWindowClosed(pending.finalizableAt, uint64(block.timestamp));
        }
        _refuse(pending);
        emit EpochVetoed(epoch, msg.sender);
    }

    /// @notice Discards a pending report that was not finalized within RECOVERY_DELAY after
    /// its challenge window, so the committee can submit a new report for its epoch; the
    /// discarded report is refused for ever. Only GUARDIAN_ROLE. Emits {EpochDiscarded}.
    function discardEpoch(uint64 epoch) external onlyRole(GUARDIAN_ROLE) {
        Pending storage pending = _pendingReport(epoch);
        uint64 allowedAt = pending.finalizableAt + RECOVERY_DELAY;
        if (block.timestamp < allowedAt) revert RecoveryNotYet(allowedAt, uint64(block.timestamp));
        _refuse(pending);
        emit EpochDiscarded(epoch, msg.sender);
    }

    /// @notice Finalizes the pending report after its challenge window and before it
    /// lapses: publishes its rewards root, allocates its rewards and applies `slashes`,
    /// which must be the list the committee signed — tombstones first, so the network-wide
    /// slash limit serves fraud before anything else. Anyone may call. Stopped by a pause.
    /// Emits {EpochFinalized}, and the vault's {Slashed}/{Jailed}/{Tombstoned}.
    function finalizeEpoch(IStakingVault.SlashOrder[] calldata slashes) external whenNotPaused nonReentrant {
        Pending memory pending = _pending;
        if (pending.epoch == 0 || pending.vetoed) revert NoPendingReport();
        if (block.timestamp < pending.finalizableAt) {
            revert ChallengeWindowOpen(pending.finalizableAt, uint64(block.timestamp));
        }
        uint64 lapsesAt = _lapsesAt(pending.finalizableAt);
        if (block.timestamp > lapsesAt) revert ReportLapsed(pending.epoch, lapsesAt);
        bytes32 slashesHash = keccak256(abi.encode(slashes));
        if (slashesHash != pending.slashesHash) revert SlashesMismatch(pending.slashesHash, slashesHash);

        delete _pending;
        rewardsRoot = pending.rewardsRoot;
        lastFinalizedEpoch = pending.epoch;
        lastFinalizedReportId = pending.reportId;
        totalAllocated += pending.totalRewards;
        unclaimedAllocation += pending.totalRewards;
        emit EpochFinalized(pending.epoch, pending.rewardsRoot, pending.totalRewards, slashes.length);
        // One call for the batch; the vault skips an address it does not know, tombstones first.
        if (slashes.length > 0) vault.slashMany(slashes);
    }

    // ─── Claims ──────────────────────────────────────────────────────────────

    /// @notice Pays `provider` its `cumulative` earnings, proven against the current
    /// root, less what it has already claimed. Anyone may call; tokens go to the
    /// provider. Never stopped by a pause. Emits {Claimed}.
    /// @dev What a provider has claimed lives in its vault record, a slot it already has,
    /// so a first claim creates no storage of its own.
    function claim(address provider, uint256 cumulative, bytes32[] calldata proof) external nonReentrant {
        bytes32 leaf = keccak256(bytes.concat(keccak256(abi.encode(provider, cumulative))));
        if (!MerkleProof.verifyCalldata(proof, rewardsRoot, leaf)) revert InvalidProof(provider, cumulative);
        uint256 already = vault.recordClaim(provider, cumulative); // reverts unless cumulative > already
        uint256 amount = cumulative - already;
        uint256 unclaimed = unclaimedAllocation;
        if (amount > unclaimed) revert ClaimExceedsAllocation(amount, unclaimed);
        unclaimedAllocation = unclaimed - amount;
        token.safeTransfer(provider, amount);
        emit Claimed(provider, amount, cumulative);
    }

    // ─── Views ───────────────────────────────────────────────────────────────

    /// @notice The EIP-712 digest the committee signs for `report`.
    function hashReport(EpochReport calldata report) public view returns (bytes32) {
        return _hashTypedDataV4(keccak256(abi.encode(EPOCH_REPORT_TYPEHASH, report)));
    }

    /// @notice What `provider` has claimed in all.
    function claimed(address provider) external view returns (uint256) {
        return vault.claimedRewards(provider);
    }

    /// @notice Everything claimed so far, over all providers.
    function totalClaimed() external view returns (uint256) {
        return totalAllocated - unclaimedAllocation;
    }

    /// @inheritdoc IReportHolds
    function isHoldLive(uint64 reportId, bool deferred) external view returns (bool) {
        Pending storage pending = _pending;
        if (
            reportId == pending.reportId && pending.epoch != 0 && !pending.vetoed
                && block.timestamp <= _lapsesAt(pending.finalizableAt)
        ) return true;
        return deferred && reportId != 0 && reportId == lastFinalizedReportId;
    }

    /// @notice The report waiting out its challenge window (epoch 0 if none).
    function pendingReport() external view returns (Pending memory) {
        return _pending;
    }

    /// @notice The current committee.
    function signers() external view returns (address[] memory) {
        return _signers;
    }

    /// @notice The EIP-712 domain separator of this contract.
    function domainSeparator() external view returns (bytes32) {
        return _domainSeparatorV4();
    }

    // ─── Admin (DEFAULT_ADMIN_ROLE) ──────────────────────────────────────────

    /// @notice Replaces the committee: 1 to MAX_SIGNERS distinct signers and a threshold
    /// above half of them. Emits {CommitteeSet}.
    function setCommittee(address[] calldata newSigners, uint8 newThreshold) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _setCommittee(newSigners, newThreshold);
    }

    /// @notice Sets the challenge window for later reports, from minChallengeWindow to
    /// MAX_CHALLENGE_WINDOW, and with the report lag within the vault's unbonding period
    /// ({ReportingLongerThanUnbonding}). Emits {ChallengeWindowSet}.
    function setChallengeWindow(uint64 window) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _setTiming(window, maxReportLag);
    }

    /// @notice Sets the report lag, from 1 second to MAX_REPORT_LAG, and with the challenge
    /// window within the vault's unbonding period ({ReportingLongerThanUnbonding}). The oracle
    /// refuses epochs longer than half of it. Emits {MaxReportLagSet}.
    function setMaxReportLag(uint64 lag) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _setTiming(challengeWindow, lag);
    }

    // ─── Internals ───────────────────────────────────────────────────────────

    function _lapsesAt(uint64 finalizableAt) private pure returns (uint64) {
        return finalizableAt + FINALIZE_PERIOD;
    }

    function _pendingReport(uint64 epoch) private view returns (Pending storage pending) {
        pending = _pending;
        if (pending.epoch == 0 || pending.epoch != epoch || pending.vetoed) revert NoPendingReport();
    }

    /// @dev Marks the pending report refused: it can never be submitted again. Its digest
    /// is rebuilt from what was stored; the expiry is not stored, so every expiry of the
    /// same content is refused through the content hash.
    function _refuse(Pending storage pending) private {
        pending.vetoed = true;
        _vetoedReports[_pendingContent(pending)] = true;
    }

    function _pendingContent(Pending storage pending) private view returns (bytes32) {
        return _contentHash(
            pending.epoch, pending.rewardsRoot, pending.totalRewards, pending.slashesHash, pending.deferredHash
        );
    }

    function _contentHash(uint64 epoch, bytes32 root, uint256 totalRewards, bytes32 slashesHash, bytes32 deferredHash)
        private
        pure
        returns (bytes32)
    {
        return keccak256(abi.encode(epoch, root, totalRewards, slashesHash, deferredHash));
    }

    /// @dev Makes `report` the pending one under the next submission number and starts its
    /// challenge window. Emits {EpochSubmitted}.
    function _startReport(EpochReport calldata report, bytes32 slashesHash, bytes32 deferredHash)
        private
        returns (uint64 reportId, uint64 lapsesAt)
    {
        reportId = ++reportCount;
        uint64 finalizableAt = uint64(block.timestamp) + challengeWindow;
        _pending = Pending({
            epoch: report.epoch,
            finalizableAt: finalizableAt,
            vetoed: false,
            reportId: reportId,
            rewardsRoot: report.rewardsRoot,
            totalRewards: report.totalRewards,
            slashesHash: slashesHash,
            deferredHash: deferredHash
        });
        emit EpochSubmitted(report.epoch, report.rewardsRoot, report.totalRewards, slashesHash, finalizableAt);
        lapsesAt = _lapsesAt(finalizableAt);
    }

    /// @dev The report is for the next epoch, unexpired, allocates exactly what is funded for
    /// it, and carries the slashes and deferred providers it was signed with. Returns their hashes.
    function _checkContent(
        EpochReport calldata report,
        IStakingVault.SlashOrder[] calldata slashes,
        address[] calldata deferred
    ) private view returns (bytes32 slashesHash, bytes32 deferredHash) {
        if (report.epoch != lastFinalizedEpoch + 1) revert WrongEpoch(report.epoch, lastFinalizedEpoch + 1);
        if (block.timestamp > report.expiresAt) revert ReportExpired(report.expiresAt, uint64(block.timestamp));
        uint256 allocated = totalAllocated;
        if (report.cumulativeTotal != allocated + report.totalRewards) {
            revert CumulativeTotalMismatch(report.cumulativeTotal, allocated + report.totalRewards);
        }
        uint256 unallocated = totalFunded - allocated;
        if (report.totalRewards > unallocated) revert Underfunded(report.totalRewards, unallocated);
        slashesHash = keccak256(abi.encode(slashes));
        if (slashesHash != report.slashesHash) revert SlashesMismatch(report.slashesHash, slashesHash);
        deferredHash = keccak256(abi.encode(deferred));
        if (deferredHash != report.deferredHash) revert SlashesMismatch(report.deferredHash, deferredHash);
    }

    /// @dev Refuses a vetoed or discarded report, and a lapsed one unless a committee member
    /// submits it; records the lapsed report this submission replaces.
    function _checkNotRefused(
        EpochReport calldata report,
        bytes32 slashesHash,
        bytes32 deferredHash,
        bool replacesLapsed
    ) private {
        bytes32 content = _contentHash(report.epoch, report.rewardsRoot, report.totalRewards, slashesHash, deferredHash);
        if (_vetoedReports[content]) revert ReportVetoed(report.epoch);
        if (replacesLapsed) _lapsedReports[_pendingContent(_pending)] = true;
        if (_lapsedReports[content] && !isSigner[msg.sender]) revert LapsedReportNotFromCommittee(msg.sender);
    }

    /// @dev Slashes sorted by provider without duplicates, each with a penalty, within the
    /// count, tombstone and jail bounds, so finalization is bounded. Returns the providers a
    /// slash takes stake from: those the report holds.
    function _checkSlashes(IStakingVault.SlashOrder[] calldata slashes) private pure returns (address[] memory held) {
        uint256 n = slashes.length;
        if (n > MAX_SLASHES_PER_REPORT) revert TooManySlashes(n, MAX_SLASHES_PER_REPORT);
        held = new address[](n);
        uint256 holds = 0;
        uint256 tombstones = 0;
        address previous = address(0); // also refuses address(0) as the first provider
        for (uint256 i; i < n; ++i) {
            IStakingVault.SlashOrder calldata s = slashes[i];
            if (s.provider <= previous) revert SlashesNotSorted(i, s.provider);
            if (s.jailSeconds > MAX_JAIL_SECONDS) revert JailTooLong(s.provider, s.jailSeconds, MAX_JAIL_SECONDS);
            if (s.bps == 0 && s.jailSeconds == 0 && !s.tombstone) revert EmptySlash(i, s.provider);
            if (s.tombstone) ++tombstones;
            if (s.bps > 0) held[holds++] = s.provider;
            previous = s.provider;
        }
        if (tombstones > MAX_TOMBSTONES_PER_REPORT) revert TooManyTombstones(tombstones, MAX_TOMBSTONES_PER_REPORT);
        assembly ("memory-safe") {
            mstore(held, holds)
        }
    }

    /// @dev Deferred providers sorted without duplicates, within their bound.
    function _checkDeferred(address[] calldata deferred) private pure {
        uint256 n = deferred.length;
        if (n > MAX_DEFERRED_PER_REPORT) revert TooManyDeferred(n, MAX_DEFERRED_PER_REPORT);
        address previous = address(0);
        for (uint256 i; i < n; ++i) {
            if (deferred[i] <= previous) revert DeferredNotSorted(i, deferred[i]);
            previous = deferred[i];
        }
    }

    function _checkSignatures(bytes32 digest, bytes[] calldata signatures) private view {
        if (signatures.length < threshold) revert NotEnoughSignatures(signatures.length, threshold);
        address previous;
        for (uint256 i; i < signatures.length; ++i) {
            address signer = ECDSA.recover(digest, signatures[i]);
            // Ascending order makes distinctness a single comparison per signature.
            if (signer <= previous) revert SignersNotAscending(previous, signer);
            if (!isSigner[signer]) revert NotASigner(signer);
            previous = signer;
        }
    }

    function _setCommittee(address[] memory newSigners, uint8 newThreshold) private {
        uint256 n = newSigners.length;
        // A majority at least: no minority of the committee can sign a report alone.
        if (n == 0 || n > MAX_SIGNERS || uint256(newThreshold) * 2 <= n || newThreshold > n) {
            revert InvalidCommittee(n, newThreshold);
        }
        for (uint256 i; i < _signers.length; ++i) {
            isSigner[_signers[i]] = false;
        }
        for (uint256 i; i < n; ++i) {
            address signer = newSigners[i];
            if (signer == address(0) || isSigner[signer]) revert InvalidCommittee(n, newThreshold);
            isSigner[signer] = true;
        }
        _signers = newSigners;
        threshold = newThreshold;
        emit CommitteeSet(newSigners, newThreshold);
    }

    /// @dev Sets the challenge window and the report lag, each within its range and together
    /// within the vault's unbonding period; emits an event for each that changed.
    function _setTiming(uint64 window, uint64 lag) private {
        if (window < minChallengeWindow || window > MAX_CHALLENGE_WINDOW) {
            revert ChallengeWindowOutOfRange(window, minChallengeWindow, MAX_CHALLENGE_WINDOW);
        }
        if (lag == 0 || lag > MAX_REPORT_LAG) revert ReportLagOutOfRange(lag, 1, MAX_REPORT_LAG);
        uint64 unbonding = vault.unbondingPeriod();
        if (uint256(window) + lag > unbonding) revert ReportingLongerThanUnbonding(uint256(window) + lag, unbonding);
        if (window != challengeWindow) {
            challengeWindow = window;
            emit ChallengeWindowSet(window);
        }
        if (lag != maxReportLag) {
            maxReportLag = lag;
            emit MaxReportLagSet(lag);
        }
    }
}
