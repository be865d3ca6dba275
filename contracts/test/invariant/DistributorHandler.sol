// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {Vm} from "forge-std/Vm.sol";

import {StakingVault} from "../../src/StakingVault.sol";
import {RewardDistributor} from "../../src/RewardDistributor.sol";
import {HandlerBase} from "./HandlerBase.sol";
import {StandardTree} from "./StandardTree.sol";
import {IStakingVault} from "../../src/interfaces/IStakingVault.sol";

/// @notice Plays the oracle committee, the guardian, a funder and the claimants: funds the
/// pool, builds each epoch's cumulative earnings into a real StandardMerkleTree root,
/// signs it with the committee keys, submits, sometimes vetoes, discards or lets a report
/// lapse, finalizes after the challenge window (applying the slashes the report ordered,
/// under a measured gas cap) and claims with real proofs. It is also the record of every
/// report accepted: the adversarial committee hands it the reports it got accepted, so
/// that they are finalized, claimed against and accounted for like the honest ones.
contract DistributorHandler is HandlerBase {
    uint256 internal constant MAX_FUND_PER_CALL = 1_000_000 ether;
    uint256 internal constant MAX_EPOCH_REWARDS = 250_000 ether;
    /// @notice The gas a finalization of any accepted report must fit in.
    uint256 public constant FINALIZE_GAS_LIMIT = 15_000_000;

    address internal immutable funder;
    uint256[] internal _signerKeys; // ascending by address, as the distributor requires

    /// @dev Cumulative earnings per provider in the finalized root, and in the one before.
    uint256[] internal _committed;
    uint256[] internal _previousCommitted;
    /// @dev The largest cumulative ever committed for a provider in a finalized root.
    mapping(address provider => uint256) public maxCommitted;
    /// @dev What the finalized root's leaves commit beyond totalAllocated (an over-committing
    /// committee's excess; zero while the committee is honest).
    uint256 public excessCommitted;

    /// @dev The report last accepted (pending, or vetoed/discarded), with its slashes,
    /// leaves and excess.
    RewardDistributor.EpochReport internal _report;
    IStakingVault.SlashOrder[] internal _slashes;
    uint256[] internal _pendingCumulative;
    uint256 internal _pendingExcess;

    /// @dev The last vetoed or discarded report, kept to try submitting it again.
    RewardDistributor.EpochReport internal _vetoed;
    IStakingVault.SlashOrder[] internal _vetoedSlashes;
    bool internal _hasVetoed;
    /// @dev Contents (epoch, root, rewards, slashes) the guardian vetoed or discarded.
    mapping(bytes32 content => bool) public wasRefused;

    uint64 public lastFinalized;
    uint256 public finalizations;
    uint256 public maxFinalizeGas;
    uint256 public maxTombstonesFinalized;
    uint256 public maxSlashesFinalized;
    /// @dev Ghost flags, asserted false by the invariants.
    bool public finalizedOutOfOrder; // a finalize moved lastFinalizedEpoch by other than exactly one
    bool public vetoedReportFinalized; // a report the guardian vetoed or discarded was later finalized
    bool public refusedContentAccepted; // vetoed/discarded contents accepted again, under any expiry
    bool public forgedClaimAccepted; // a stale or inflated cumulative passed the proof check
    bool public claimPaidWrong; // a claim paid other than cumulative − already claimed
    bool public claimBeyondAllocationPaid; // a claim paid more than was allocated and unclaimed
    bool public acceptedReportNotFinalizable; // finalize of an accepted report reverted in its window
    bool public lapsedReportFinalized; // finalize succeeded after the report lapsed
    bool public lapsedReportResubmittedByStranger; // someone outside the committee brought a lapsed report back
    bool public holdOutlivedItsReport; // a provider stayed held by a vetoed, discarded or lapsed report
    bool public earlyDiscardAccepted; // discardEpoch succeeded before RECOVERY_DELAY
    bool public tombstonesNotFirst; // a tombstone applied after another slash of its report
    bool public tooManyTombstones; // a finalized report tombstoned more than the maximum
    uint256 public vetoedReplaysAccepted;

    constructor(Deps memory d, address funder_, uint256[] memory signerKeys_) HandlerBase(d) {
        funder = funder_;
        _signerKeys = signerKeys_;
        for (uint256 i; i < providers.length; ++i) {
            _committed.push(0);
        }
    }

    // ─── Actions ─────────────────────────────────────────────────────────────

    function fund(uint256 amount) external step {
        _fund(amount);
    }

    function submitEpoch(uint256 rewardSeed, uint256 slashSeed, uint256 signerSeed) external step {
        if (_livePending()) return;
        _submit(rewardSeed, slashSeed, signerSeed);
    }

    /// @dev Vetoes the pending report, submitting one first if none is pending.
    function vetoEpoch(uint256 rewardSeed, uint256 slashSeed, uint256 signerSeed) external step {
        if (!_livePending() && !_submit(rewardSeed, slashSeed, signerSeed)) return;
        RewardDistributor.Pending memory p = distributor.pendingReport();
        if (block.timestamp >= p.finalizableAt) return;
        vm.prank(guardian);
        distributor.vetoEpoch(p.epoch);
        _refused();
        _count("veto");
    }

    /// @dev Discards the pending report (submitting one first if none is pending): first
    /// too early, which must be refused, then RECOVERY_DELAY after its window.
    function discardEpoch(uint256 rewardSeed, uint256 slashSeed, uint256 signerSeed) external step {
        if (!_livePending() && !_submit(rewardSeed, slashSeed, signerSeed)) return;
        RewardDistributor.Pending memory p = distributor.pendingReport();
        uint256 allowedAt = uint256(p.finalizableAt) + distributor.RECOVERY_DELAY();
        if (block.timestamp < allowedAt) {
            vm.prank(guardian);
            try distributor.discardEpoch(p.epoch) {
                earlyDiscardAccepted = true;
            } catch {}
            _advanceTo(allowedAt);
        }
        vm.prank(guardian);
        distributor.discardEpoch(p.epoch);
        _refused();
        _count("discard");
    }

    /// @dev Lets the pending report (submitting one first if none is pending) lapse: its
    /// finalization must then be refused, and a new report for its epoch replaces it.
    function letLapse(uint256 rewardSeed, uint256 slashSeed, uint256 signerSeed) external step {
        if (!_livePending() && !_submit(rewardSeed, slashSeed, signerSeed)) return;
        RewardDistributor.Pending memory p = distributor.pendingReport();
        _advanceTo(uint256(p.finalizableAt) + distributor.FINALIZE_PERIOD() + 1);
        IStakingVault.SlashOrder[] memory slashes = _slashes;
        try distributor.finalizeEpoch(slashes) {
            lapsedReportFinalized = true;
        } catch {
            _count("lapseRefused");
        }
        _checkHoldsReleased(slashes);
        // Signed again with a later expiry: a stranger relaying it again is refused.
        RewardDistributor.EpochReport memory lapsed = _report;
        lapsed.expiresAt = uint64(block.timestamp + 1 days);
        bytes[] memory sigs = sign(lapsed, signerSeed);
        vm.prank(outsider);
        try distributor.submitEpoch(lapsed, slashes, new address[](0), sigs) {
            lapsedReportResubmittedByStranger = true;
        } catch (bytes memory err) {
            if (bytes4(err) == RewardDistributor.LapsedReportNotFromCommittee.selector) _count("lapsedReplayRefused");
        }
        if (_submit(rewardSeed >> 1, slashSeed >> 1, signerSeed >> 1)) _count("replaceLapsed");
    }

    /// @dev Anyone holding a vetoed or discarded report's signatures tries to submit it again.
    function replayVetoed(uint256 signerSeed) external step {
        if (!_hasVetoed || _livePending() || _vetoed.epoch != distributor.lastFinalizedEpoch() + 1) return;
        IStakingVault.SlashOrder[] memory slashes = _vetoedSlashes;
        try distributor.submitEpoch(_vetoed, slashes, new address[](0), sign(_vetoed, signerSeed)) {
            ++vetoedReplaysAccepted;
            refusedContentAccepted = true;
        } catch {
            _count("replayRefused");
        }
    }

    /// @dev A committee-signed report for an epoch at or below the last finalized one must
    /// be refused.
    function submitStaleEpoch(uint256 epochSeed, uint256 rewardSeed, uint256 signerSeed) external step {
        uint64 last = distributor.lastFinalizedEpoch();
        if (last == 0 || _livePending()) return;
        IStakingVault.SlashOrder[] memory none;
        uint256[] memory cumulative = _split(0, rewardSeed);
        RewardDistributor.EpochReport memory report =
            _epochReport(uint64(_bound(epochSeed, 1, last)), cumulative, 0, none);
        try distributor.submitEpoch(report, none, new address[](0), sign(report, signerSeed)) {
            finalizedOutOfOrder = true;
        } catch {
            _count("staleEpochRefused");
        }
    }

    /// @dev Finalizes the pending report after its window, submitting one first if none.
    function finalizeEpoch(uint256 rewardSeed, uint256 slashSeed, uint256 signerSeed) external step {
        if (!_livePending() && !_submit(rewardSeed, slashSeed, signerSeed)) return;
        _finalizePending();
    }

    /// @dev Claims what a provider is owed; an over-committed root may owe more than is
    /// left unclaimed, and that claim must be refused.
    function claim(uint256 providerSeed) external step {
        uint256 i = providerSeed % providers.length;
        uint256 already = distributor.claimed(providers[i]);
        if (_committed[i] <= already) return;
        if (_committed[i] - already <= distributor.unclaimedAllocation()) {
            _claim(i);
            return;
        }
        bytes32[] memory proof = StandardTree.proof(StandardTree.leaves(providers, _committed), i);
        try distributor.claim(providers[i], _committed[i], proof) {
            claimBeyondAllocationPaid = true;
        } catch {
            _count("claimBeyondAllocationRefused");
        }
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
        vm.prank(guardian);
        distributor.pause();
        IStakingVault.SlashOrder[] memory slashes = _slashes;
        try distributor.finalizeEpoch(slashes) {
            _expectPaused(true, "");
        } catch (bytes memory err) {
            _expectPaused(false, err);
        }
        try distributor.submitEpoch(_report, slashes, new address[](0), sign(_report, providerSeed)) {
            _expectPaused(true, "");
        } catch (bytes memory err) {
            _expectPaused(false, err);
        }
        uint256 n = providers.length;
        for (uint256 k; k < n; ++k) {
            uint256 i = (providerSeed % n + k) % n;
            uint256 owed = _committed[i] - _min(_committed[i], distributor.claimed(providers[i]));
            if (owed > 0 && owed <= distributor.unclaimedAllocation()) {
                _claim(i);
                _count("claimWhilePaused");
                break;
            }
        }
        vm.prank(guardian);
        distributor.unpause();
    }

    /// @notice Finalizes what is pending (or discards it once it has lapsed) and pays every
    /// provider what it is owed, as far as the allocation goes (afterInvariant only).
    function drain() external {
        vm.warp(clock.time());
        if (_livePending()) {
            _finalizePending();
        } else {
            RewardDistributor.Pending memory p = distributor.pendingReport();
            if (p.epoch != 0 && !p.vetoed) {
                _advanceTo(uint256(p.finalizableAt) + distributor.RECOVERY_DELAY());
                vm.prank(guardian);
                distributor.discardEpoch(p.epoch);
            }
        }
        for (uint256 i; i < providers.length; ++i) {
            uint256 owed = _committed[i] - _min(_committed[i], distributor.claimed(providers[i]));
            if (owed > 0 && owed <= distributor.unclaimedAllocation()) _claim(i);
        }
    }

    // ─── The record the adversarial committee shares ─────────────────────────

    /// @notice Takes on a report another committee handler got accepted: `cumulative` are
    /// its leaves, which may commit `excess` beyond its cumulativeTotal. Not a campaign target.
    function adopt(
        RewardDistributor.EpochReport memory report,
        IStakingVault.SlashOrder[] memory slashes,
        uint256[] memory cumulative,
        uint256 excess
    ) external {
        _report = report;
        _storeSlashes(slashes);
        _pendingCumulative = cumulative;
        _pendingExcess = excess;
    }

    /// @notice Finalizes at once a report another committee handler just got accepted with
    /// `slashes` and honest leaves `cumulative` (its slashes are not kept in storage).
    /// Not a campaign target.
    function finalizeAdopted(
        RewardDistributor.EpochReport memory report,
        IStakingVault.SlashOrder[] memory slashes,
        uint256[] memory cumulative
    ) external {
        _report = report;
        _pendingCumulative = cumulative;
        _pendingExcess = 0;
        _finalizeWith(slashes);
        delete _slashes;
    }

    /// @notice Finalizes the live pending report, if any, at the end of its challenge window.
    /// Not a campaign target.
    function finalizePending() external {
        if (_livePending()) _finalizePending();
    }

    /// @notice Signatures of three or four committee members, in ascending signer order.
    function sign(RewardDistributor.EpochReport memory report, uint256 signerSeed)
        public
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

    /// @notice Each provider's cumulative grows by a random share of `rewards`; the shares
    /// add up to `rewards` exactly.
    function split(uint256 rewards, uint256 seed) external view returns (uint256[] memory) {
        return _split(rewards, seed);
    }

    /// @notice Whether a report is pending, not vetoed and not lapsed.
    function livePending() external view returns (bool) {
        return _livePending();
    }

    /// @notice The report that was last vetoed or discarded, if any, with its slashes.
    function lastRefused()
        external
        view
        returns (bool, RewardDistributor.EpochReport memory, IStakingVault.SlashOrder[] memory)
    {
        return (_hasVetoed, _vetoed, _vetoedSlashes);
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

    /// @notice Whether some provider is owed a claim that what is left unclaimed would cover.
    function claimThatFitsLeft() external view returns (bool) {
        for (uint256 i; i < providers.length; ++i) {
            uint256 owed = _committed[i] - _min(_committed[i], distributor.claimed(providers[i]));
            if (owed > 0 && owed <= distributor.unclaimedAllocation()) return true;
        }
        return false;
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
        return p.epoch != 0 && !p.vetoed && block.timestamp <= uint256(p.finalizableAt) + distributor.FINALIZE_PERIOD();
    }

    /// @dev Submits an honest report for the next epoch; false if its contents were
    /// vetoed before (a veto is final for them) and it was refused.
    function _submit(uint256 rewardSeed, uint256 slashSeed, uint256 signerSeed) private returns (bool) {
        uint256 unallocated = distributor.totalFunded() - distributor.totalAllocated();
        if (unallocated < 1 ether) {
            _fund(rewardSeed);
            unallocated = distributor.totalFunded() - distributor.totalAllocated();
        }
        uint256 rewards = _bound(rewardSeed, 0, _min(unallocated, MAX_EPOCH_REWARDS));
        uint256[] memory cumulative = _split(rewards, uint256(keccak256(abi.encode(rewardSeed, "split"))));
        IStakingVault.SlashOrder[] memory slashes = _orderSlashes(slashSeed);
        RewardDistributor.EpochReport memory report =
            _epochReport(distributor.lastFinalizedEpoch() + 1, cumulative, rewards, slashes);
        if (wasRefused[_content(report)]) return false;
        bytes[] memory sigs = sign(report, signerSeed);
        // A committee member relays its committee's report: a report that lapsed may come
        // back only from one of them.
        vm.prank(vm.addr(_signerKeys[0]));
        distributor.submitEpoch(report, slashes, new address[](0), sigs);
        _report = report;
        _storeSlashes(slashes);
        _pendingCumulative = cumulative;
        _pendingExcess = 0;
        _count("submit");
        return true;
    }


    function _split(uint256 rewards, uint256 seed) private view returns (uint256[] memory cumulative) {
        uint256 n = providers.length;
        cumulative = new uint256[](n);
        uint256 left = rewards;
        for (uint256 i; i < n; ++i) {
            uint256 share = i == n - 1 ? left : _bound(uint256(keccak256(abi.encode(seed, i))), 0, left);
            left -= share;
            cumulative[i] = _committed[i] + share;
        }
    }

    /// @dev A third of reports order one or two slashes, sorted by provider without
    /// duplicates: mostly within the vault's cap, some above it (applied at the cap), some
    /// with zero bps (then a jail: no entry comes without a penalty) or against an unregistered
    /// address (the vault skips it and the epoch still finalizes), jails, rarely a tombstone.
    function _orderSlashes(uint256 seed) private view returns (IStakingVault.SlashOrder[] memory slashes) {
        if (seed % 3 != 0) return slashes;
        uint256 count = 1 + (seed >> 8) % 2;
        uint16 cap = vault.maxSlashBps();
        slashes = new IStakingVault.SlashOrder[](count);
        uint256 n;
        for (uint256 k; k < count; ++k) {
            uint256 r = uint256(keccak256(abi.encode(seed, k)));
            uint256 bpsRoll = (r >> 16) % 10;
            uint16 bps =
                bpsRoll == 0 ? uint16(_bound(r >> 32, cap, BPS)) : bpsRoll == 1 ? 0 : uint16(_bound(r >> 32, 1, cap));
            IStakingVault.SlashOrder memory s = IStakingVault.SlashOrder({
                provider: r % 8 == 0 ? outsider : providers[(r >> 8) % providers.length],
                bps: bps,
                reason: "oracle",
                evidenceHash: bytes32(r),
                jailSeconds: (r >> 64) % 3 == 0 || bps == 0 ? uint64(_bound(r >> 96, 1 hours, 2 days)) : 0,
                tombstone: (r >> 160) % 64 == 0
            }); // every entry carries a penalty: a zero-bps one jails
            // Insert in ascending provider order; a second slash of the same provider is dropped.
            uint256 j = n;
            bool duplicate;
            for (uint256 m; m < n; ++m) {
                if (slashes[m].provider == s.provider) duplicate = true;
            }
            if (duplicate) continue;
            for (; j > 0 && slashes[j - 1].provider > s.provider; --j) {
                slashes[j] = slashes[j - 1];
            }
            slashes[j] = s;
            ++n;
        }
        assembly ("memory-safe") {
            mstore(slashes, n)
        }
    }

    function _finalizePending() private {
        RewardDistributor.Pending memory p = distributor.pendingReport();
        if (block.timestamp < p.finalizableAt) _advanceTo(p.finalizableAt);
        _finalizeWith(_slashes);
    }

    /// @dev Finalizes the pending report, which was accepted with `slashes`, under the gas
    /// cap: in its window and unpaused it must go through.
    function _finalizeWith(IStakingVault.SlashOrder[] memory slashes) private {
        RewardDistributor.Pending memory p = distributor.pendingReport();
        if (block.timestamp < p.finalizableAt) _advanceTo(p.finalizableAt);
        uint64 before = distributor.lastFinalizedEpoch();

        SlashWatch memory w = _watch(address(distributor));
        uint256 gasBefore = gasleft();
        try distributor.finalizeEpoch{gas: FINALIZE_GAS_LIMIT}(slashes) {
            uint256 used = gasBefore - gasleft();
            if (used > maxFinalizeGas) maxFinalizeGas = used;
        } catch {
            vm.getRecordedLogs();
            acceptedReportNotFinalizable = true;
            return;
        }
        Vm.Log[] memory logs = vm.getRecordedLogs();
        _auditLogs(w, logs);
        _checkSlashOrder(logs, slashes);

        uint64 epoch = distributor.lastFinalizedEpoch();
        if (epoch != p.epoch || epoch != before + 1 || epoch != lastFinalized + 1) finalizedOutOfOrder = true;
        if (wasRefused[_content(_report)]) vetoedReportFinalized = true;
        lastFinalized = epoch;
        ++finalizations;
        if (slashes.length > maxSlashesFinalized) maxSlashesFinalized = slashes.length;
        _previousCommitted = _committed;
        _committed = _pendingCumulative;
        excessCommitted += _pendingExcess;
        for (uint256 i; i < providers.length; ++i) {
            if (_committed[i] > maxCommitted[providers[i]]) maxCommitted[providers[i]] = _committed[i];
        }
        _count("finalize");
    }

    /// @dev Counts the report's tombstones and checks none came after a slash of a provider
    /// the report did not tombstone.
    function _checkSlashOrder(Vm.Log[] memory logs, IStakingVault.SlashOrder[] memory slashes) private {
        uint256 tombstones;
        bool otherSeen;
        for (uint256 i; i < logs.length; ++i) {
            if (logs[i].emitter != address(vault) || logs[i].topics.length < 2) continue;
            bytes32 topic = logs[i].topics[0];
            if (topic == StakingVault.Tombstoned.selector) {
                ++tombstones;
                if (otherSeen) tombstonesNotFirst = true;
            } else if (topic == StakingVault.Slashed.selector) {
                address provider = address(uint160(uint256(logs[i].topics[1])));
                if (!_tombstoneOrdered(slashes, provider)) otherSeen = true;
            }
        }
        if (tombstones > maxTombstonesFinalized) maxTombstonesFinalized = tombstones;
        if (tombstones > distributor.MAX_TOMBSTONES_PER_REPORT()) tooManyTombstones = true;
    }

    /// @dev Whether the report (sorted by provider) orders `provider` tombstoned.
    function _tombstoneOrdered(IStakingVault.SlashOrder[] memory slashes, address provider) private pure returns (bool) {
        uint256 lo;
        uint256 hi = slashes.length;
        while (lo < hi) {
            uint256 mid = (lo + hi) / 2;
            if (slashes[mid].provider < provider) lo = mid + 1;
            else hi = mid;
        }
        return lo < slashes.length && slashes[lo].provider == provider && slashes[lo].tombstone;
    }

    function _claim(uint256 i) private {
        address p = providers[i];
        uint256 cumulative = _committed[i];
        uint256 owed = cumulative - distributor.claimed(p);
        uint256 unclaimed = distributor.unclaimedAllocation();
        bytes32[] memory proof = StandardTree.proof(StandardTree.leaves(providers, _committed), i);
        uint256 before = token.balanceOf(p);
        distributor.claim(p, cumulative, proof);
        if (token.balanceOf(p) != before + owed) claimPaidWrong = true;
        if (owed > unclaimed) claimBeyondAllocationPaid = true;
        _count("claim");
    }

    /// @dev The pending report was vetoed or discarded: its contents are refused for ever.
    function _refused() private {
        _checkHoldsReleased(_slashes);
        wasRefused[_content(_report)] = true;
        _vetoed = _report;
        _copySlashes(_slashes, _vetoedSlashes);
        _hasVetoed = true;
    }

    /// @dev No provider the refused or lapsed report slashed is still held by a report.
    function _checkHoldsReleased(IStakingVault.SlashOrder[] memory slashes) private {
        for (uint256 i; i < slashes.length; ++i) {
            if (vault.providerInfo(slashes[i].provider).reportHeldUntil != 0) holdOutlivedItsReport = true;
        }
    }

    function _content(RewardDistributor.EpochReport memory report) private pure returns (bytes32) {
        return keccak256(abi.encode(report.epoch, report.rewardsRoot, report.totalRewards, report.slashesHash));
    }

    function _storeSlashes(IStakingVault.SlashOrder[] memory slashes) private {
        delete _slashes;
        for (uint256 i; i < slashes.length; ++i) {
            _slashes.push(slashes[i]);
        }
    }

    function _copySlashes(IStakingVault.SlashOrder[] storage from, IStakingVault.SlashOrder[] storage to) private {
        while (to.length > 0) {
            to.pop();
        }
        for (uint256 i; i < from.length; ++i) {
            to.push(from[i]);
        }
    }
}
