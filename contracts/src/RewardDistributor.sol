// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {SafeERC20} from "@openzeppelin/contracts/token/ERC20/utils/SafeERC20.sol";
import {ReentrancyGuardTransient} from "@openzeppelin/contracts/utils/ReentrancyGuardTransient.sol";
import {EIP712} from "@openzeppelin/contracts/utils/cryptography/EIP712.sol";
import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";
import {MerkleProof} from "@openzeppelin/contracts/utils/cryptography/MerkleProof.sol";

import {SwarmAccess} from "./base/SwarmAccess.sol";
import {IStakingVault} from "./interfaces/IStakingVault.sol";

/// @title RewardDistributor
/// @notice Epoch settlement. An oracle committee (a signer set and a threshold, changed
/// only by the admin) signs one EIP-712 {EpochReport} per epoch. A submitted report is
/// optimistic: a guardian may veto it during the challenge window; after the window
/// anyone finalizes it, which publishes its rewards root and applies its slashes.
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
///  - a pause stops submit and finalize, never claims.
contract RewardDistributor is SwarmAccess, EIP712, ReentrancyGuardTransient {
    using SafeERC20 for IERC20;

    bytes32 public constant GUARDIAN_ROLE = keccak256("GUARDIAN_ROLE");
    bytes32 public constant EPOCH_REPORT_TYPEHASH = keccak256(
        "EpochReport(uint64 epoch,bytes32 rewardsRoot,uint256 totalRewards,uint256 cumulativeTotal,"
        "bytes32 slashesHash,uint64 expiresAt)"
    );

    /// @notice The largest committee the admin may set.
    uint256 public constant MAX_SIGNERS = 32;
    /// @notice The longest challenge window the admin may set.
    uint64 public constant MAX_CHALLENGE_WINDOW = 30 days;
    /// @notice The most slashes one report may order; finalizing them fits in a block.
    uint256 public constant MAX_SLASHES_PER_REPORT = 200;
    /// @notice The most tombstones one report may order.
    uint256 public constant MAX_TOMBSTONES_PER_REPORT = 8;
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
        bytes32 slashesHash; // keccak256(abi.encode(slashes))
        uint64 expiresAt; // the report may not be submitted after this time
    }

    /// @notice One slash the oracle orders, applied when its report finalizes.
    struct Slash {
        address provider;
        uint16 bps;
        bytes32 reason;
        bytes32 evidenceHash;
        uint64 jailSeconds; // 0: no jail; at most MAX_JAIL_SECONDS
        bool tombstone;
    }

    /// @dev The report waiting out its challenge window; two packed slots plus two.
    struct Pending {
        uint64 epoch;
        uint64 finalizableAt;
        bool vetoed;
        bytes32 rewardsRoot;
        uint256 totalRewards;
        bytes32 slashesHash;
    }

    IERC20 public immutable token;
    IStakingVault public immutable vault;
    /// @notice The shortest challenge window any admin may ever set (set once, at deployment).
    uint64 public immutable minChallengeWindow;

    bytes32 public rewardsRoot;
    uint64 public lastFinalizedEpoch;
    uint64 public challengeWindow;
    uint8 public threshold;

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

    // ─── Events ──────────────────────────────────────────────────────────────
    event Funded(address indexed from, uint256 amount, uint256 totalFunded);
    event CommitteeSet(address[] signers, uint8 threshold);
    event ChallengeWindowSet(uint64 challengeWindow);
    event EpochSubmitted(
        uint64 indexed epoch, bytes32 rewardsRoot, uint256 totalRewards, bytes32 slashesHash, uint64 finalizableAt
    );
    event SlashProposed(uint64 indexed epoch, Slash slash);
    event EpochVetoed(uint64 indexed epoch, address indexed guardian);
    event EpochDiscarded(uint64 indexed epoch, address indexed by);
    event EpochFinalized(uint64 indexed epoch, bytes32 rewardsRoot, uint256 totalRewards, uint256 slashCount);
    event SlashNotApplied(uint64 indexed epoch, address indexed provider, bytes revertData);
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
    error SlashesNotSorted(uint256 index, address provider);
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

    /// @param minChallengeWindow_ the floor under every challenge window, for ever.
    constructor(
        IERC20 token_,
        IStakingVault vault_,
        address admin,
        address[] memory committee,
        uint8 threshold_,
        uint64 challengeWindow_,
        uint64 minChallengeWindow_
    ) SwarmAccess(admin) EIP712("SwarmRewardDistributor", "2") {
        if (address(token_) == address(0) || address(vault_) == address(0)) revert ZeroAddress();
        if (vault_.rewardsDistributor() != address(this)) revert VaultNotLinked(vault_.rewardsDistributor());
        if (minChallengeWindow_ == 0 || minChallengeWindow_ > MAX_CHALLENGE_WINDOW) {
            revert ChallengeWindowOutOfRange(minChallengeWindow_, 1, MAX_CHALLENGE_WINDOW);
        }
        token = token_;
        vault = vault_;
        minChallengeWindow = minChallengeWindow_;
        _grantRole(GUARDIAN_ROLE, admin);
        _setCommittee(committee, threshold_);
        _setChallengeWindow(challengeWindow_);
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
    /// orders and at least `threshold` signatures from distinct signers, sorted by
    /// signer address. Anyone may submit, until the report's expiry. The epoch must be
    /// the one after the last finalized; no other report may be pending (a lapsed one is
    /// replaced); the cumulative total must be everything allocated so far plus this
    /// epoch's rewards; the slashes must be sorted by provider without duplicates, at most
    /// MAX_SLASHES_PER_REPORT (MAX_TOMBSTONES_PER_REPORT tombstones) with jails of at most
    /// MAX_JAIL_SECONDS. Holds each slashed provider's stake in the vault until the report
    /// lapses, so no withdrawal escapes it. Starts the challenge window. Stopped by a
    /// pause. Emits {EpochSubmitted} and one {SlashProposed} per slash.
    /// @dev Gas depends on the number of signatures and slashes, never on providers.
    function submitEpoch(EpochReport calldata report, Slash[] calldata slashes, bytes[] calldata signatures)
        external
        whenNotPaused
    {
        Pending storage pending = _pending;
        if (pending.epoch != 0 && !pending.vetoed && block.timestamp <= _lapsesAt(pending.finalizableAt)) {
            revert ReportPending(pending.epoch, pending.finalizableAt);
        }
        if (report.epoch != lastFinalizedEpoch + 1) revert WrongEpoch(report.epoch, lastFinalizedEpoch + 1);
        if (block.timestamp > report.expiresAt) revert ReportExpired(report.expiresAt, uint64(block.timestamp));
        uint256 allocated = totalAllocated;
        if (report.cumulativeTotal != allocated + report.totalRewards) {
            revert CumulativeTotalMismatch(report.cumulativeTotal, allocated + report.totalRewards);
        }
        uint256 unallocated = totalFunded - allocated;
        if (report.totalRewards > unallocated) revert Underfunded(report.totalRewards, unallocated);
        bytes32 slashesHash = keccak256(abi.encode(slashes));
        if (slashesHash != report.slashesHash) revert SlashesMismatch(report.slashesHash, slashesHash);
        _checkSlashes(slashes);
        bytes32 digest = hashReport(report);
        if (_vetoedReports[_contentHash(report.epoch, report.rewardsRoot, report.totalRewards, slashesHash)]) {
            revert ReportVetoed(report.epoch);
        }
        _checkSignatures(digest, signatures);

        uint64 finalizableAt = uint64(block.timestamp) + challengeWindow;
        _pending = Pending({
            epoch: report.epoch,
            finalizableAt: finalizableAt,
            vetoed: false,
            rewardsRoot: report.rewardsRoot,
            totalRewards: report.totalRewards,
            slashesHash: slashesHash
        });
        emit EpochSubmitted(report.epoch, report.rewardsRoot, report.totalRewards, slashesHash, finalizableAt);
        // finalizeEpoch is still allowed at lapsesAt itself: hold past it.
        uint64 holdUntil = _lapsesAt(finalizableAt) + 1;
        for (uint256 i; i < slashes.length; ++i) {
            emit SlashProposed(report.epoch, slashes[i]);
            // A provider the vault does not know is skipped at finalization too.
            try vault.hold(slashes[i].provider, holdUntil) {} catch {}
        }
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
    function finalizeEpoch(Slash[] calldata slashes) external whenNotPaused nonReentrant {
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
        totalAllocated += pending.totalRewards;
        unclaimedAllocation += pending.totalRewards;
        emit EpochFinalized(pending.epoch, pending.rewardsRoot, pending.totalRewards, slashes.length);

        for (uint256 i; i < slashes.length; ++i) {
            if (slashes[i].tombstone) _applySlash(pending.epoch, slashes[i]);
        }
        for (uint256 i; i < slashes.length; ++i) {
            if (!slashes[i].tombstone) _applySlash(pending.epoch, slashes[i]);
        }
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
    /// MAX_CHALLENGE_WINDOW. Emits {ChallengeWindowSet}.
    function setChallengeWindow(uint64 window) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _setChallengeWindow(window);
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
        _vetoedReports[_contentHash(pending.epoch, pending.rewardsRoot, pending.totalRewards, pending.slashesHash)] =
            true;
    }

    function _contentHash(uint64 epoch, bytes32 root, uint256 totalRewards, bytes32 slashesHash)
        private
        pure
        returns (bytes32)
    {
        return keccak256(abi.encode(epoch, root, totalRewards, slashesHash));
    }

    /// @dev Slashes sorted by provider without duplicates, within the count, tombstone and
    /// jail bounds, so finalization is bounded.
    function _checkSlashes(Slash[] calldata slashes) private pure {
        uint256 n = slashes.length;
        if (n > MAX_SLASHES_PER_REPORT) revert TooManySlashes(n, MAX_SLASHES_PER_REPORT);
        uint256 tombstones = 0;
        address previous = address(0); // also refuses address(0) as the first provider
        for (uint256 i; i < n; ++i) {
            Slash calldata s = slashes[i];
            if (s.provider <= previous) revert SlashesNotSorted(i, s.provider);
            if (s.jailSeconds > MAX_JAIL_SECONDS) revert JailTooLong(s.provider, s.jailSeconds, MAX_JAIL_SECONDS);
            if (s.tombstone) ++tombstones;
            previous = s.provider;
        }
        if (tombstones > MAX_TOMBSTONES_PER_REPORT) revert TooManyTombstones(tombstones, MAX_TOMBSTONES_PER_REPORT);
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

    /// @dev A slash the vault refuses (a provider never registered) must not block the
    /// epoch's rewards: it is reported and skipped. Jails are bounded at submission, so the
    /// end time cannot overflow.
    function _applySlash(uint64 epoch, Slash calldata s) private {
        if (s.bps > 0) {
            try vault.slash(s.provider, s.bps, s.reason, s.evidenceHash) {}
            catch (bytes memory err) {
                emit SlashNotApplied(epoch, s.provider, err);
            }
        }
        if (s.tombstone) {
            try vault.tombstone(s.provider) {}
            catch (bytes memory err) {
                emit SlashNotApplied(epoch, s.provider, err);
            }
        } else if (s.jailSeconds > 0) {
            try vault.jail(s.provider, uint64(block.timestamp) + s.jailSeconds) {}
            catch (bytes memory err) {
                emit SlashNotApplied(epoch, s.provider, err);
            }
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

    function _setChallengeWindow(uint64 window) private {
        if (window < minChallengeWindow || window > MAX_CHALLENGE_WINDOW) {
            revert ChallengeWindowOutOfRange(window, minChallengeWindow, MAX_CHALLENGE_WINDOW);
        }
        challengeWindow = window;
        emit ChallengeWindowSet(window);
    }
}
