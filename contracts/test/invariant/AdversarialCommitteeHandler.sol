// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {RewardDistributor} from "../../src/RewardDistributor.sol";
import {HandlerBase} from "./HandlerBase.sol";
import {DistributorHandler} from "./DistributorHandler.sol";
import {IStakingVault} from "../../src/interfaces/IStakingVault.sol";

/// @notice A committee whose keys are in hostile hands. It signs, with a quorum of real
/// committee keys, every report the distributor's checks exist to refuse — a cumulative
/// total that is not allocated + rewards, duplicate or unsorted slashes, more slashes or
/// tombstones than a report may carry, jails near 2^64, skipped or repeated epochs,
/// expired reports, too few, repeated or foreign signatures, a slash list other than the
/// one signed, rewards beyond the pool, contents the guardian refused — and each must be
/// refused with its own error. It also gets accepted what no on-chain check can refuse:
/// roots whose leaves commit more than the report's cumulative total, the largest report
/// allowed (200 slashes, 8 of them tombstones of fresh providers every time, every jail
/// at the maximum), and a slash of the same provider in every epoch. Those are handed to
/// the distributor handler, which finalizes them under the gas cap and accounts for
/// them, so the invariants can bound the damage.
contract AdversarialCommitteeHandler is HandlerBase {
    uint256 internal constant MAX_EXCESS = 1_000_000 ether;
    uint256 internal constant MAX_REWARDS = 100_000 ether;
    /// @dev One in this many largest-report calls orders the full MAX_SLASHES_PER_REPORT.
    uint256 internal constant FULL_REPORT_EVERY = 8;

    enum Malformed {
        CumulativeTotal,
        DuplicateSlash,
        UnsortedSlashes,
        TooManySlashes,
        TooManyTombstones,
        JailTooLong,
        WrongEpoch,
        Expired,
        TooFewSignatures,
        RepeatedSigner,
        ForeignSigner,
        SlashesMismatch,
        Underfunded
    }

    DistributorHandler internal immutable record;
    uint256[] internal _signerKeys; // ascending by address
    uint256 internal immutable foreignKey;
    /// @dev Passive staked providers, ascending by address, the largest reports slash.
    address[] internal _crowd;
    uint256 internal _nextTombstone;
    uint256 internal _largestCalls;

    /// @dev Ghost flags, asserted false by the invariants.
    bool public malformedAccepted; // a report the distributor must refuse was accepted
    bool public malformedRefusedWrongly; // ... or refused with another error than its own
    bool public validReportRefused; // a report within every bound was refused
    uint256 public largestReportSlashes;

    constructor(Deps memory d, DistributorHandler record_, uint256[] memory signerKeys_, address[] memory crowd_)
        HandlerBase(d)
    {
        record = record_;
        _signerKeys = signerKeys_;
        _crowd = crowd_;
        foreignKey = uint256(keccak256("foreign committee key"));
    }

    // ─── Reports that must be refused ────────────────────────────────────────

    /// @dev Builds one malformed report of the kind `kindSeed` picks (otherwise valid, for
    /// the next epoch, with nothing pending) and submits it: it must be refused with the
    /// error of its kind.
    function submitMalformed(uint256 kindSeed, uint256 seed, uint256 signerSeed) external step {
        record.finalizePending();
        Malformed kind = Malformed(kindSeed % (uint256(type(Malformed).max) + 1));
        uint256 rewards = _bound(seed, 0, _min(_unallocated(), MAX_REWARDS));
        uint256[] memory cumulative = record.split(rewards, seed >> 8);
        IStakingVault.SlashOrder[] memory slashes;
        RewardDistributor.EpochReport memory report;
        bytes4 expected;

        if (kind == Malformed.DuplicateSlash) {
            slashes = new IStakingVault.SlashOrder[](2);
            slashes[0] = _slash(_provider(seed), 100, 0, false);
            slashes[1] = slashes[0];
            expected = RewardDistributor.SlashesNotSorted.selector;
        } else if (kind == Malformed.UnsortedSlashes) {
            slashes = new IStakingVault.SlashOrder[](2);
            (address a, address b) = (providers[0], providers[1]);
            if (a < b) (a, b) = (b, a);
            slashes[0] = _slash(a, 100, 0, false);
            slashes[1] = _slash(b, 100, 0, false);
            expected = RewardDistributor.SlashesNotSorted.selector;
        } else if (kind == Malformed.TooManySlashes) {
            slashes = _crowdSlashes(_crowd.length, seed, 0);
            uint256 n = slashes.length;
            IStakingVault.SlashOrder[] memory more = new IStakingVault.SlashOrder[](n + 1);
            for (uint256 i; i < n; ++i) {
                more[i] = slashes[i];
            }
            more[n] = _slash(address(uint160(_crowd[n - 1]) + 1), 100, 0, false);
            slashes = more;
            expected = RewardDistributor.TooManySlashes.selector;
        } else if (kind == Malformed.TooManyTombstones) {
            slashes = _crowdSlashes(distributor.MAX_TOMBSTONES_PER_REPORT() + 1, seed, type(uint256).max);
            expected = RewardDistributor.TooManyTombstones.selector;
        } else if (kind == Malformed.JailTooLong) {
            slashes = new IStakingVault.SlashOrder[](1);
            uint64 jail = uint64(_bound(seed >> 16, uint256(distributor.MAX_JAIL_SECONDS()) + 1, type(uint64).max));
            if (seed % 2 == 0) jail = type(uint64).max - uint64(seed % 1000);
            slashes[0] = _slash(_provider(seed), 100, jail, false);
            expected = RewardDistributor.JailTooLong.selector;
        }
        report = _epochReport(distributor.lastFinalizedEpoch() + 1, cumulative, rewards, slashes);
        IStakingVault.SlashOrder[] memory submitted = slashes;
        bytes[] memory sigs;

        if (kind == Malformed.CumulativeTotal) {
            uint256 delta = 1 + (seed >> 24) % 1_000 ether;
            if (seed % 2 == 0 || report.cumulativeTotal < delta) report.cumulativeTotal += delta;
            else report.cumulativeTotal -= delta;
            expected = RewardDistributor.CumulativeTotalMismatch.selector;
        } else if (kind == Malformed.WrongEpoch) {
            uint64 last = distributor.lastFinalizedEpoch();
            uint256 way = (seed >> 24) % 4;
            if (way == 0) report.epoch = last + 2 + uint64((seed >> 32) % 100);
            else if (way == 1) report.epoch = last;
            else if (way == 2) report.epoch = 0;
            else report.epoch = type(uint64).max;
            expected = RewardDistributor.WrongEpoch.selector;
        } else if (kind == Malformed.Expired) {
            report.expiresAt = uint64(block.timestamp) - 1 - uint64((seed >> 24) % 30 days);
            expected = RewardDistributor.ReportExpired.selector;
        } else if (kind == Malformed.SlashesMismatch) {
            submitted = new IStakingVault.SlashOrder[](1);
            submitted[0] = _slash(_provider(seed), 100, 0, false);
            expected = RewardDistributor.SlashesMismatch.selector;
        } else if (kind == Malformed.Underfunded) {
            uint256 extra = 1 + (seed >> 24) % 1_000 ether;
            report.totalRewards = _unallocated() + extra;
            report.cumulativeTotal = distributor.totalAllocated() + report.totalRewards;
            expected = RewardDistributor.Underfunded.selector;
        }

        if (kind == Malformed.TooFewSignatures) {
            sigs = _signedBy(report, distributor.threshold() - 1, false, false);
            expected = RewardDistributor.NotEnoughSignatures.selector;
        } else if (kind == Malformed.RepeatedSigner) {
            sigs = _signedBy(report, distributor.threshold(), true, false);
            expected = RewardDistributor.SignersNotAscending.selector;
        } else if (kind == Malformed.ForeignSigner) {
            sigs = _signedBy(report, distributor.threshold(), false, true);
            expected = RewardDistributor.NotASigner.selector;
        } else {
            sigs = record.sign(report, signerSeed);
        }

        try distributor.submitEpoch(report, submitted, new address[](0), sigs) {
            malformedAccepted = true;
        } catch (bytes memory err) {
            bool foreignOrder =
                kind == Malformed.ForeignSigner && bytes4(err) == RewardDistributor.SignersNotAscending.selector;
            if (bytes4(err) != expected && !foreignOrder) malformedRefusedWrongly = true;
            _count(string.concat("refused", vm.toString(uint256(kind))));
        }
    }

    /// @dev Re-signs the contents the guardian last vetoed or discarded under a new expiry:
    /// refused for ever, whatever the expiry.
    function resubmitRefused(uint256 signerSeed, uint256 expirySeed) external step {
        (bool has, RewardDistributor.EpochReport memory report, IStakingVault.SlashOrder[] memory slashes) =
            record.lastRefused();
        if (!has || report.epoch != distributor.lastFinalizedEpoch() + 1 || record.livePending()) return;
        if (report.cumulativeTotal != distributor.totalAllocated() + report.totalRewards) return;
        report.expiresAt = uint64(block.timestamp + _bound(expirySeed, 1, 30 days));
        try distributor.submitEpoch(report, slashes, new address[](0), record.sign(report, signerSeed)) {
            malformedAccepted = true;
        } catch (bytes memory err) {
            if (bytes4(err) != RewardDistributor.ReportVetoed.selector) malformedRefusedWrongly = true;
            _count("refusedContentRefused");
        }
    }

    // ─── Reports that pass every check ───────────────────────────────────────

    /// @dev A root whose leaves commit up to MAX_EXCESS more than its cumulative total
    /// (nothing on-chain can see the leaves); half the time finalized at once.
    function submitOvercommitted(uint256 rewardSeed, uint256 excessSeed, uint256 signerSeed) external step {
        record.finalizePending();
        uint256 rewards = _bound(rewardSeed, 0, _min(_unallocated(), MAX_REWARDS));
        uint256[] memory cumulative = record.split(rewards, rewardSeed >> 8);
        uint256 excess = _bound(excessSeed, 1, MAX_EXCESS);
        cumulative[(excessSeed >> 128) % cumulative.length] += excess;
        IStakingVault.SlashOrder[] memory none;
        RewardDistributor.EpochReport memory report =
            _epochReport(distributor.lastFinalizedEpoch() + 1, cumulative, rewards, none);
        if (!_submitValid(report, none, signerSeed)) return;
        record.adopt(report, none, cumulative, excess);
        _count("overcommitAccepted");
        if (signerSeed % 2 == 0) record.finalizePending();
    }

    /// @dev The largest report allowed, finalized at once: its slashes hit the crowd with
    /// random bps (some above the cap), every jail at MAX_JAIL_SECONDS, and
    /// MAX_TOMBSTONES_PER_REPORT tombstones of providers not tombstoned before. One call in
    /// FULL_REPORT_EVERY (the first included) orders MAX_SLASHES_PER_REPORT slashes.
    function submitLargestReport(uint256 sizeSeed, uint256 slashSeed, uint256 signerSeed) external step {
        record.finalizePending();
        uint256 n = _largestCalls++ % FULL_REPORT_EVERY == 0
            ? distributor.MAX_SLASHES_PER_REPORT()
            : _bound(sizeSeed, distributor.MAX_TOMBSTONES_PER_REPORT(), 40);
        IStakingVault.SlashOrder[] memory slashes = _crowdSlashes(n, slashSeed, _nextTombstone);
        _nextTombstone += distributor.MAX_TOMBSTONES_PER_REPORT();
        uint256[] memory cumulative = record.split(0, slashSeed);
        RewardDistributor.EpochReport memory report =
            _epochReport(distributor.lastFinalizedEpoch() + 1, cumulative, 0, slashes);
        if (!_submitValid(report, slashes, signerSeed)) return;
        record.finalizeAdopted(report, slashes, cumulative);
        if (n > largestReportSlashes) largestReportSlashes = n;
        _count(n == distributor.MAX_SLASHES_PER_REPORT() ? "largestReport" : "largeReport");
    }

    /// @dev Slashes the same provider in a report finalized at once, call after call:
    /// the per-period cap must bound what the distributor takes from it.
    function slashEveryEpoch(uint256 providerSeed, uint256 bpsSeed, uint256 signerSeed) external step {
        record.finalizePending();
        IStakingVault.SlashOrder[] memory slashes = new IStakingVault.SlashOrder[](1);
        slashes[0] = _slash(_provider(providerSeed), uint16(_bound(bpsSeed, 1, BPS)), uint64(bpsSeed % 2 days), false);
        uint256[] memory cumulative = record.split(0, bpsSeed);
        RewardDistributor.EpochReport memory report =
            _epochReport(distributor.lastFinalizedEpoch() + 1, cumulative, 0, slashes);
        if (!_submitValid(report, slashes, signerSeed)) return;
        record.finalizeAdopted(report, slashes, cumulative);
        _count("slashEveryEpoch");
    }

    // ─── Internals ───────────────────────────────────────────────────────────

    /// @dev Submits a report within every bound; it must be accepted.
    function _submitValid(
        RewardDistributor.EpochReport memory report,
        IStakingVault.SlashOrder[] memory slashes,
        uint256 signerSeed
    ) private returns (bool) {
        if (record.livePending() || distributor.paused()) return false;
        try distributor.submitEpoch(report, slashes, new address[](0), record.sign(report, signerSeed)) {
            return true;
        } catch (bytes memory err) {
            // The one refusal a valid report may meet: contents the guardian refused before.
            if (bytes4(err) != RewardDistributor.ReportVetoed.selector) validReportRefused = true;
            return false;
        }
    }


    /// @dev `n` slashes of the first crowd members, ascending, every jail at the maximum;
    /// MAX_TOMBSTONES_PER_REPORT of them (from crowd index `tombstoneFrom` on, wrapping)
    /// tombstones, or all of them when `tombstoneFrom` is type(uint256).max.
    function _crowdSlashes(uint256 n, uint256 seed, uint256 tombstoneFrom)
        private
        view
        returns (IStakingVault.SlashOrder[] memory slashes)
    {
        slashes = new IStakingVault.SlashOrder[](n);
        uint256 maxTombstones = distributor.MAX_TOMBSTONES_PER_REPORT();
        uint64 jail = distributor.MAX_JAIL_SECONDS();
        for (uint256 i; i < n; ++i) {
            bool tombstone = tombstoneFrom == type(uint256).max;
            if (!tombstone) {
                uint256 offset = (i + n - tombstoneFrom % n) % n;
                tombstone = offset < maxTombstones;
            }
            uint16 bps = uint16(_bound(uint256(keccak256(abi.encode(seed, i))), 1, BPS));
            slashes[i] = _slash(_crowd[i], bps, jail, tombstone);
        }
    }

    function _slash(address provider, uint16 bps, uint64 jailSeconds, bool tombstone)
        private
        pure
        returns (IStakingVault.SlashOrder memory)
    {
        return IStakingVault.SlashOrder({
            provider: provider,
            bps: bps,
            reason: "adversary",
            evidenceHash: keccak256(abi.encode(provider, bps)),
            jailSeconds: jailSeconds,
            tombstone: tombstone
        });
    }

    /// @dev `count` signatures in ascending signer order, one of them repeated, or one of
    /// them by a key outside the committee (sorted in by address).
    function _signedBy(RewardDistributor.EpochReport memory report, uint256 count, bool repeat, bool foreign)
        private
        view
        returns (bytes[] memory sigs)
    {
        bytes32 digest = distributor.hashReport(report);
        sigs = new bytes[](count);
        address[] memory signers = new address[](count);
        for (uint256 i; i < count; ++i) {
            uint256 key = _signerKeys[repeat && i == count - 1 ? i - 1 : i];
            if (foreign && i == count - 1) key = foreignKey;
            (uint8 v, bytes32 r, bytes32 s) = vm.sign(key, digest);
            sigs[i] = abi.encodePacked(r, s, v);
            signers[i] = vm.addr(key);
        }
        for (uint256 i = 1; i < count; ++i) {
            for (uint256 j = i; j > 0 && signers[j - 1] > signers[j]; --j) {
                (signers[j - 1], signers[j]) = (signers[j], signers[j - 1]);
                (sigs[j - 1], sigs[j]) = (sigs[j], sigs[j - 1]);
            }
        }
    }

    function _unallocated() private view returns (uint256) {
        return distributor.totalFunded() - distributor.totalAllocated();
    }
}
