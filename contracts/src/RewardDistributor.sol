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
/// claims every epoch a provider has not yet claimed.
/// @dev Invariants:
///  - totalClaimed <= totalAllocated <= totalFunded: never pays more than was funded;
///  - claimed[p] never exceeds the cumulative amount proven for p;
///  - lastFinalizedEpoch only increases;
///  - a pause stops submit and finalize, never claims.
contract RewardDistributor is SwarmAccess, EIP712, ReentrancyGuardTransient {
    using SafeERC20 for IERC20;

    bytes32 public constant GUARDIAN_ROLE = keccak256("GUARDIAN_ROLE");
    bytes32 public constant EPOCH_REPORT_TYPEHASH =
        keccak256("EpochReport(uint64 epoch,bytes32 rewardsRoot,uint256 totalRewards,bytes32 slashesHash)");

    /// @notice The largest committee the admin may set.
    uint256 public constant MAX_SIGNERS = 32;
    /// @notice The longest challenge window the admin may set.
    uint64 public constant MAX_CHALLENGE_WINDOW = 30 days;

    /// @notice What the committee signs for one epoch.
    struct EpochReport {
        uint64 epoch;
        bytes32 rewardsRoot; // cumulative earnings per provider, StandardMerkleTree root
        uint256 totalRewards; // this epoch's emission, added to what may be claimed
        bytes32 slashesHash; // keccak256(abi.encode(slashes))
    }

    /// @notice One slash the oracle orders, applied when its report finalizes.
    struct Slash {
        address provider;
        uint16 bps;
        bytes32 reason;
        bytes32 evidenceHash;
        uint64 jailSeconds; // 0: no jail
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
    mapping(address provider => uint256) public claimed;
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
    event EpochFinalized(uint64 indexed epoch, bytes32 rewardsRoot, uint256 totalRewards, uint256 slashCount);
    event SlashNotApplied(uint64 indexed epoch, address indexed provider, bytes revertData);
    event Claimed(address indexed provider, uint256 amount, uint256 cumulative);

    // ─── Errors ──────────────────────────────────────────────────────────────
    error ZeroAmount();
    error InvalidCommittee(uint256 signers, uint256 threshold);
    error ChallengeWindowTooLong(uint64 window, uint64 max);
    error EpochNotIncreasing(uint64 epoch, uint64 mustExceed);
    error ReportPending(uint64 epoch, uint64 finalizableAt);
    error NoPendingReport();
    error SlashesMismatch(bytes32 expected, bytes32 given);
    error NotEnoughSignatures(uint256 given, uint256 threshold);
    error NotASigner(address signer);
    error SignersNotAscending(address previous, address next);
    error ChallengeWindowOpen(uint64 finalizableAt, uint64 now_);
    error ChallengeWindowClosed(uint64 finalizableAt, uint64 now_);
    error ReportVetoed(uint64 epoch);
    error Underfunded(uint256 needed, uint256 available);
    error InvalidProof(address provider, uint256 cumulative);
    error NothingToClaim(address provider, uint256 cumulative, uint256 alreadyClaimed);
    error ClaimExceedsAllocation(uint256 amount, uint256 unclaimedAllocation);

    constructor(
        IERC20 token_,
        IStakingVault vault_,
        address admin,
        address[] memory committee,
        uint8 threshold_,
        uint64 challengeWindow_
    ) SwarmAccess(admin) EIP712("SwarmRewardDistributor", "1") {
        if (address(token_) == address(0) || address(vault_) == address(0)) revert ZeroAddress();
        token = token_;
        vault = vault_;
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
    /// signer address. Anyone may submit. Starts the challenge window. The epoch must
    /// exceed the last finalized one and no other report may be pending. Stopped by a
    /// pause. Emits {EpochSubmitted} and one {SlashProposed} per slash.
    /// @dev Gas depends on the number of signatures and slashes, never on providers.
    function submitEpoch(EpochReport calldata report, Slash[] calldata slashes, bytes[] calldata signatures)
        external
        whenNotPaused
    {
        Pending storage pending = _pending;
        if (pending.epoch != 0 && !pending.vetoed) revert ReportPending(pending.epoch, pending.finalizableAt);
        if (report.epoch <= lastFinalizedEpoch) revert EpochNotIncreasing(report.epoch, lastFinalizedEpoch);
        bytes32 slashesHash = keccak256(abi.encode(slashes));
        if (slashesHash != report.slashesHash) revert SlashesMismatch(report.slashesHash, slashesHash);
        uint256 unallocated = totalFunded - totalAllocated;
        if (report.totalRewards > unallocated) revert Underfunded(report.totalRewards, unallocated);
        bytes32 digest = hashReport(report);
        if (_vetoedReports[digest]) revert ReportVetoed(report.epoch);
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
        for (uint256 i; i < slashes.length; ++i) {
            emit SlashProposed(report.epoch, slashes[i]);
        }
    }

    /// @notice Vetoes the pending report before its challenge window closes; the
    /// committee may then submit a corrected report for the same epoch; the vetoed
    /// report itself is refused for ever ({ReportVetoed}). Only GUARDIAN_ROLE.
    /// Emits {EpochVetoed}.
    function vetoEpoch(uint64 epoch) external onlyRole(GUARDIAN_ROLE) {
        Pending storage pending = _pending;
        if (pending.epoch == 0 || pending.epoch != epoch || pending.vetoed) revert NoPendingReport();
        if (block.timestamp >= pending.finalizableAt) {
            revert ChallengeWindowClosed(pending.finalizableAt, uint64(block.timestamp));
        }
        pending.vetoed = true;
        _vetoedReports[_hashReport(epoch, pending.rewardsRoot, pending.totalRewards, pending.slashesHash)] = true;
        emit EpochVetoed(epoch, msg.sender);
    }

    /// @notice Finalizes the pending report after its challenge window: publishes its
    /// rewards root, allocates its rewards and applies `slashes`, which must be the
    /// list the committee signed. Anyone may call. Stopped by a pause.
    /// Emits {EpochFinalized}, and the vault's {Slashed}/{Jailed}/{Tombstoned}.
    function finalizeEpoch(Slash[] calldata slashes) external whenNotPaused nonReentrant {
        Pending memory pending = _pending;
        if (pending.epoch == 0 || pending.vetoed) revert NoPendingReport();
        if (block.timestamp < pending.finalizableAt) {
            revert ChallengeWindowOpen(pending.finalizableAt, uint64(block.timestamp));
        }
        bytes32 slashesHash = keccak256(abi.encode(slashes));
        if (slashesHash != pending.slashesHash) revert SlashesMismatch(pending.slashesHash, slashesHash);
        uint256 unallocated = totalFunded - totalAllocated;
        if (pending.totalRewards > unallocated) revert Underfunded(pending.totalRewards, unallocated);

        delete _pending;
        rewardsRoot = pending.rewardsRoot;
        lastFinalizedEpoch = pending.epoch;
        totalAllocated += pending.totalRewards;
        unclaimedAllocation += pending.totalRewards;
        emit EpochFinalized(pending.epoch, pending.rewardsRoot, pending.totalRewards, slashes.length);

        for (uint256 i; i < slashes.length; ++i) {
            _applySlash(pending.epoch, slashes[i]);
        }
    }

    // ─── Claims ──────────────────────────────────────────────────────────────

    /// @notice Pays `provider` its `cumulative` earnings, proven against the current
    /// root, less what it has already claimed. Anyone may call; tokens go to the
    /// provider. Never stopped by a pause. Emits {Claimed}.
    function claim(address provider, uint256 cumulative, bytes32[] calldata proof) external nonReentrant {
        bytes32 leaf = keccak256(bytes.concat(keccak256(abi.encode(provider, cumulative))));
        if (!MerkleProof.verifyCalldata(proof, rewardsRoot, leaf)) revert InvalidProof(provider, cumulative);
        uint256 already = claimed[provider];
        if (cumulative <= already) revert NothingToClaim(provider, cumulative, already);
        uint256 amount = cumulative - already;
        uint256 unclaimed = unclaimedAllocation;
        if (amount > unclaimed) revert ClaimExceedsAllocation(amount, unclaimed);
        claimed[provider] = cumulative;
        unclaimedAllocation = unclaimed - amount;
        token.safeTransfer(provider, amount);
        emit Claimed(provider, amount, cumulative);
    }

    // ─── Views ───────────────────────────────────────────────────────────────

    /// @notice The EIP-712 digest the committee signs for `report`.
    function hashReport(EpochReport calldata report) public view returns (bytes32) {
        return _hashReport(report.epoch, report.rewardsRoot, report.totalRewards, report.slashesHash);
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

    /// @notice Replaces the committee. Emits {CommitteeSet}.
    function setCommittee(address[] calldata newSigners, uint8 newThreshold) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _setCommittee(newSigners, newThreshold);
    }

    /// @notice Sets the challenge window for later reports. Emits {ChallengeWindowSet}.
    function setChallengeWindow(uint64 window) external onlyRole(DEFAULT_ADMIN_ROLE) {
        _setChallengeWindow(window);
    }

    // ─── Internals ───────────────────────────────────────────────────────────

    function _hashReport(uint64 epoch, bytes32 root, uint256 totalRewards, bytes32 slashesHash)
        private
        view
        returns (bytes32)
    {
        return _hashTypedDataV4(keccak256(abi.encode(EPOCH_REPORT_TYPEHASH, epoch, root, totalRewards, slashesHash)));
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

    /// @dev A slash the vault refuses (a provider never registered, a bps above a cap
    /// lowered since signing) must not block the epoch's rewards: it is reported and skipped.
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
        if (n == 0 || n > MAX_SIGNERS || newThreshold == 0 || newThreshold > n) {
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
        if (window > MAX_CHALLENGE_WINDOW) revert ChallengeWindowTooLong(window, MAX_CHALLENGE_WINDOW);
        challengeWindow = window;
        emit ChallengeWindowSet(window);
    }
}
