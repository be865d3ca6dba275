// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {RewardDistributor} from "../../src/RewardDistributor.sol";
import {HandlerBase} from "./HandlerBase.sol";
import {StandardTree} from "./StandardTree.sol";

/// @notice Plays the oracle committee, the guardian, a funder and the claimants: funds the
/// pool, builds each epoch's cumulative earnings into a real StandardMerkleTree root,
/// signs it with the committee keys, submits, sometimes vetoes, finalizes after the
/// challenge window (applying the slashes the report ordered) and claims with real proofs.
contract DistributorHandler is HandlerBase {
    uint256 internal constant MAX_FUND_PER_CALL = 1_000_000 ether;
    uint256 internal constant MAX_EPOCH_REWARDS = 250_000 ether;

    address internal immutable funder;
    address internal immutable guardian;
    uint256[] internal _signerKeys; // ascending by address, as the distributor requires

    /// @dev Cumulative earnings per provider in the finalized root, and in the one before.
    uint256[] internal _committed;
    uint256[] internal _previousCommitted;
    /// @dev The largest cumulative ever committed for a provider in a finalized root.
    mapping(address provider => uint256) public maxCommitted;

    /// @dev The report this handler last submitted (pending, or vetoed).
    RewardDistributor.EpochReport internal _report;
    RewardDistributor.Slash[] internal _slashes;
    RewardDistributor.Slash[] internal _noSlashes; // always empty
    uint256[] internal _pendingCumulative;

    /// @dev The last vetoed report, kept to try replaying its (still valid) signatures.
    RewardDistributor.EpochReport internal _vetoed;
    RewardDistributor.Slash[] internal _vetoedSlashes;
    uint256[] internal _vetoedCumulative;
    bool internal _hasVetoed;
    mapping(bytes32 digest => bool) public wasVetoed;

    uint64 public lastFinalized;
    /// @dev Ghost flags, asserted false by the invariants.
    bool public finalizedOutOfOrder; // a finalize left an epoch not above the previous one
    bool public vetoedReportFinalized; // a report the guardian vetoed was later finalized
    bool public forgedClaimAccepted; // a stale or inflated cumulative passed the proof check
    bool public claimPaidWrong; // a claim paid other than cumulative − already claimed
    uint256 public vetoedReplaysAccepted;

    constructor(Deps memory d, address funder_, address guardian_, uint256[] memory signerKeys_) HandlerBase(d) {
        funder = funder_;
        guardian = guardian_;
        _signerKeys = signerKeys_;
        for (uint256 i; i < providers.length; ++i) {
            _committed.push(0);
        }
    }

    // ─── Actions ─────────────────────────────────────────────────────────────

    function fund(uint256 amount) external step {
        _fund(amount);
    }

    function submitEpoch(uint256 epochSeed, uint256 rewardSeed, uint256 slashSeed, uint256 signerSeed) external step {
        if (_livePending()) return;
        _submit(epochSeed, rewardSeed, slashSeed, signerSeed);
    }

    /// @dev Vetoes the pending report, submitting one first if none is pending.
    function vetoEpoch(uint256 epochSeed, uint256 rewardSeed, uint256 slashSeed, uint256 signerSeed) external step {
        if (!_livePending()) _submit(epochSeed, rewardSeed, slashSeed, signerSeed);
        RewardDistributor.Pending memory p = distributor.pendingReport();
        if (block.timestamp >= p.finalizableAt) return;
        vm.prank(guardian);
        distributor.vetoEpoch(p.epoch);
        wasVetoed[distributor.hashReport(_report)] = true;
        _vetoed = _report;
        _copySlashes(_slashes, _vetoedSlashes);
        _vetoedCumulative = _pendingCumulative;
        _hasVetoed = true;
        _count("veto");
    }

    /// @dev Anyone holding a vetoed report's signatures tries to submit it again.
    function replayVetoed(uint256 signerSeed) external step {
        if (!_hasVetoed || _livePending() || _vetoed.epoch <= distributor.lastFinalizedEpoch()) return;
        RewardDistributor.Slash[] memory slashes = _vetoedSlashes;
        try distributor.submitEpoch(_vetoed, slashes, _sign(_vetoed, signerSeed)) {
            // Track it as pending so that finalizing it is caught by the vetoed flag.
            ++vetoedReplaysAccepted;
            _report = _vetoed;
            _copySlashes(_vetoedSlashes, _slashes);
            _pendingCumulative = _vetoedCumulative;
        } catch {
            _count("replayRefused");
        }
    }

    /// @dev A committee-signed report for an epoch at or below the last finalized one must
    /// be refused; one accepted is tracked as pending, so finalizing it trips the epoch checks.
    function submitStaleEpoch(uint256 epochSeed, uint256 rewardSeed, uint256 signerSeed) external step {
        uint64 last = distributor.lastFinalizedEpoch();
        if (last == 0 || _livePending()) return;
        RewardDistributor.Slash[] memory none;
        _splitRewards(0, rewardSeed);
        RewardDistributor.EpochReport memory report = RewardDistributor.EpochReport({
            epoch: uint64(_bound(epochSeed, 1, last)),
            rewardsRoot: StandardTree.root(StandardTree.leaves(providers, _pendingCumulative)),
            totalRewards: 0,
            slashesHash: keccak256(abi.encode(none))
        });
        try distributor.submitEpoch(report, none, _sign(report, signerSeed)) {
            _report = report;
            _copySlashes(_noSlashes, _slashes);
        } catch {
            _count("staleEpochRefused");
        }
    }

    /// @dev Finalizes the pending report after its window, submitting one first if none.
    function finalizeEpoch(uint256 epochSeed, uint256 rewardSeed, uint256 slashSeed, uint256 signerSeed) external step {
        if (!_livePending()) _submit(epochSeed, rewardSeed, slashSeed, signerSeed);
        _finalizePending();
    }

    function claim(uint256 providerSeed) external step {
        uint256 i = providerSeed % providers.length;
        if (_committed[i] <= distributor.claimed(providers[i])) return;
        _claim(i);
    }

    /// @dev Claims with a cumulative the current root does not hold (the previous root's,
    /// or the current one plus one) and that root's proof: must never pay.
    function claimForged(uint256 providerSeed, uint256 modeSeed) external step {
        uint256 i = providerSeed % providers.length;
        address p = providers[i];
        uint256[] memory amounts = _committed;
        if (modeSeed % 2 == 0 && _previousCommitted.length > 0) amounts = _previousCommitted;
        uint256 cumulative = amounts[i];
        if (amounts[i] == _committed[i]) cumulative += 1 + modeSeed % 1 ether;
        if (cumulative <= distributor.claimed(p)) return;
        bytes32[] memory proof = StandardTree.proof(StandardTree.leaves(providers, amounts), i);
        try distributor.claim(p, cumulative, proof) {
            forgedClaimAccepted = true;
        } catch {
            _count("forgedClaimRefused");
        }
    }

    /// @dev Pauses the distributor for one call: submit and finalize must stop; a claim
    /// must still pay.
    function pauseInterlude(uint256 providerSeed) external step {
        vm.prank(admin);
        distributor.pause();
        RewardDistributor.Slash[] memory slashes = _slashes;
        try distributor.finalizeEpoch(slashes) {
            _expectPaused(true, "");
        } catch (bytes memory err) {
            _expectPaused(false, err);
        }
        try distributor.submitEpoch(_report, slashes, _sign(_report, providerSeed)) {
            _expectPaused(true, "");
        } catch (bytes memory err) {
            _expectPaused(false, err);
        }
        uint256 n = providers.length;
        for (uint256 k; k < n; ++k) {
            uint256 i = (providerSeed % n + k) % n;
            if (_committed[i] > distributor.claimed(providers[i])) {
                _claim(i);
                _count("claimWhilePaused");
                break;
            }
        }
        vm.prank(admin);
        distributor.unpause();
    }

    /// @notice Finalizes what is pending and pays every provider what it is owed
    /// (afterInvariant only).
    function drain() external {
        vm.warp(clock.time());
        if (_livePending()) _finalizePending();
        for (uint256 i; i < providers.length; ++i) {
            if (_committed[i] > distributor.claimed(providers[i])) _claim(i);
        }
    }

    // ─── Views for the invariants ────────────────────────────────────────────

    function committed(uint256 i) external view returns (uint256) {
        return _committed[i];
    }

    function sumCommitted() external view returns (uint256 sum) {
        for (uint256 i; i < _committed.length; ++i) {
            sum += _committed[i];
        }
    }

    // ─── Internals ───────────────────────────────────────────────────────────

    function _fund(uint256 seed) private {
        uint256 amount = _bound(seed, 1 ether, MAX_FUND_PER_CALL);
        vm.prank(funder);
        distributor.fund(amount);
        _count("fund");
    }

    function _livePending() private view returns (bool) {
        RewardDistributor.Pending memory p = distributor.pendingReport();
        return p.epoch != 0 && !p.vetoed;
    }

    function _submit(uint256 epochSeed, uint256 rewardSeed, uint256 slashSeed, uint256 signerSeed) private {
        uint256 unallocated = distributor.totalFunded() - distributor.totalAllocated();
        if (unallocated < 1 ether) {
            _fund(rewardSeed);
            unallocated = distributor.totalFunded() - distributor.totalAllocated();
        }
        uint256 rewards = _bound(rewardSeed, 0, _min(unallocated, MAX_EPOCH_REWARDS));
        _splitRewards(rewards, uint256(keccak256(abi.encode(rewardSeed, "split"))));
        _orderSlashes(slashSeed);

        RewardDistributor.Slash[] memory slashes = _slashes;
        RewardDistributor.EpochReport memory report = RewardDistributor.EpochReport({
            epoch: distributor.lastFinalizedEpoch() + uint64(_bound(epochSeed, 1, 3)),
            rewardsRoot: StandardTree.root(StandardTree.leaves(providers, _pendingCumulative)),
            totalRewards: rewards,
            slashesHash: keccak256(abi.encode(slashes))
        });
        distributor.submitEpoch(report, slashes, _sign(report, signerSeed));
        _report = report;
        _count("submit");
    }

    /// @dev Each provider's cumulative grows by a random share of `rewards`; the shares add
    /// up to `rewards` exactly, so the committed cumulatives always sum to totalAllocated.
    function _splitRewards(uint256 rewards, uint256 seed) private {
        uint256 n = providers.length;
        delete _pendingCumulative;
        uint256 left = rewards;
        for (uint256 i; i < n; ++i) {
            uint256 share = i == n - 1 ? left : _bound(uint256(keccak256(abi.encode(seed, i))), 0, left);
            left -= share;
            _pendingCumulative.push(_committed[i] + share);
        }
    }

    /// @dev A third of reports order one or two slashes: mostly valid ones against
    /// providers, some with a bps above the vault's cap or against an unregistered address
    /// (the vault refuses those and the epoch still finalizes), jails, rarely a tombstone.
    function _orderSlashes(uint256 seed) private {
        delete _slashes;
        if (seed % 3 != 0) return;
        uint256 count = 1 + (seed >> 8) % 2;
        uint16 cap = vault.maxSlashBps();
        for (uint256 k; k < count; ++k) {
            uint256 r = uint256(keccak256(abi.encode(seed, k)));
            uint256 bpsRoll = (r >> 16) % 10;
            uint16 bps = bpsRoll == 0 ? cap + 1 : bpsRoll == 1 ? 0 : uint16(_bound(r >> 32, 1, cap));
            _slashes.push(
                RewardDistributor.Slash({
                    provider: r % 8 == 0 ? outsider : providers[(r >> 8) % providers.length],
                    bps: bps,
                    reason: "oracle",
                    evidenceHash: bytes32(r),
                    jailSeconds: (r >> 64) % 3 == 0 ? uint64(_bound(r >> 96, 1 hours, 2 days)) : 0,
                    tombstone: (r >> 160) % 64 == 0
                })
            );
        }
    }

    /// @dev Signatures of three or four committee members, in ascending signer order.
    function _sign(RewardDistributor.EpochReport memory report, uint256 signerSeed)
        private
        view
        returns (bytes[] memory sigs)
    {
        uint256 n = _signerKeys.length;
        uint256 skip = signerSeed % (n + 1); // == n: everyone signs
        sigs = new bytes[](skip == n ? n : n - 1);
        bytes32 digest = distributor.hashReport(report);
        uint256 j;
        for (uint256 i; i < n; ++i) {
            if (i == skip) continue;
            (uint8 v, bytes32 r, bytes32 s) = vm.sign(_signerKeys[i], digest);
            sigs[j++] = abi.encodePacked(r, s, v);
        }
    }

    function _finalizePending() private {
        RewardDistributor.Pending memory p = distributor.pendingReport();
        if (block.timestamp < p.finalizableAt) _advanceTo(p.finalizableAt);
        uint64 before = distributor.lastFinalizedEpoch();
        RewardDistributor.Slash[] memory slashes = _slashes;

        SlashWatch memory w = _watch();
        distributor.finalizeEpoch(slashes);
        _audit(w);

        uint64 epoch = distributor.lastFinalizedEpoch();
        if (epoch != p.epoch || epoch <= before || epoch <= lastFinalized) finalizedOutOfOrder = true;
        if (wasVetoed[distributor.hashReport(_report)]) vetoedReportFinalized = true;
        lastFinalized = epoch;
        _previousCommitted = _committed;
        _committed = _pendingCumulative;
        for (uint256 i; i < providers.length; ++i) {
            if (_committed[i] > maxCommitted[providers[i]]) maxCommitted[providers[i]] = _committed[i];
        }
        _count("finalize");
    }

    function _claim(uint256 i) private {
        address p = providers[i];
        uint256 cumulative = _committed[i];
        uint256 owed = cumulative - distributor.claimed(p);
        bytes32[] memory proof = StandardTree.proof(StandardTree.leaves(providers, _committed), i);
        uint256 before = token.balanceOf(p);
        distributor.claim(p, cumulative, proof);
        if (token.balanceOf(p) != before + owed) claimPaidWrong = true;
        _count("claim");
    }

    function _copySlashes(RewardDistributor.Slash[] storage from, RewardDistributor.Slash[] storage to) private {
        while (to.length > 0) {
            to.pop();
        }
        for (uint256 i; i < from.length; ++i) {
            to.push(from[i]);
        }
    }
}
