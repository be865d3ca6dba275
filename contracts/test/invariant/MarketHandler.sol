// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {JobMarket} from "../../src/JobMarket.sol";
import {HandlerBase} from "./HandlerBase.sol";
import {JobResults} from "../utils/JobResults.sol";

/// @notice Plays the buyers, the matcher and the arbiter through every job transition, and
/// accounts for each job's escrow (a buyer's dispute bond included) leaving the market,
/// party by party at settlement. Reassignments move no escrow; the slashes they order go
/// through the vault and the shared slash audit. An adversarial matcher also piles
/// failJob/reassignJob slashes on one provider through many jobs, and tries a second
/// slash of a job and a slash after its deadline: the market must refuse those, and the
/// vault's per-slasher cap must bound what the provider loses. The holds the market
/// places in the vault and the dispute bonds it escrows are checked in their own section.
/// Every result is signed by the job's provider, and the handler remembers what each
/// provider signed; the matcher also tries to complete jobs with results or units their
/// provider did not sign, which the market must refuse.
contract MarketHandler is HandlerBase {
    uint256 internal constant MAX_PRICE = 10 ether;
    uint256 internal constant MAX_UNITS = 1_000;

    struct JobGhost {
        uint256 escrow; // what the buyer escrowed at post time
        uint256 payouts; // how many calls moved this job's escrow out of the market
        uint256 paidOut; // what those calls paid buyer + provider + treasury (less slash income)
        uint256 marketOutflow; // what those calls took out of the market's balance
        uint16 feeBps; // the market's fee when the job was assigned
        uint256 bond; // the buyer's dispute bond, part of `escrow` while the dispute is open
    }

    struct Balances {
        uint256 market;
        uint256 buyer;
        uint256 provider;
        uint256 treasury;
    }

    address internal immutable matcher;
    address internal immutable arbiter;
    uint256 internal immutable matcherKey;
    address[] internal _buyers;
    mapping(address provider => uint256) internal _keyOf;

    uint256[] public jobIds;
    mapping(uint256 jobId => JobGhost) internal _ghosts;
    /// @dev A closing call during which some balance went the wrong way.
    bool public balanceWentBackwards;
    /// @dev A reassignment that moved tokens in or out of the market, changed the escrow
    /// books or paid anyone but the slash's treasury share.
    bool public reassignMovedEscrow;
    /// @dev A settlement that paid the provider other than units × price − fee, the
    /// treasury other than the fee agreed at assignment, or the buyer other than the rest.
    bool public settlementSplitWrong;
    /// @dev An assignment that recorded a fee other than the market's at that moment.
    bool public feeNotLockedAtAssignment;
    /// @dev The adversarial matcher's slashes of one provider took (or charged as debt)
    /// more than its remaining per-period allowance of what it held, or left it less than
    /// (1 − maxSlashBpsPerPeriod / 10000) of it.
    bool public matcherBurstExceededCap;
    bool public providerKeptTooLittle;
    /// @dev A second matcher slash of one job, or a matcher slash after the job's deadline,
    /// went through.
    bool public secondJobSlashAccepted;
    bool public lateSlashAccepted;
    /// @dev A dispute bond other than the bond rate of the payment (rounded up, at least the
    /// floor) for a buyer, or other than zero for the matcher.
    bool public disputeBondWrong;
    /// @dev The provider of an open job was not held in the vault until the job's last
    /// slashable second (past the deadline; the dispute window; the arbitration period).
    bool public holdMissing;
    /// @dev keccak256(provider, resultHash, units) of the result the handler had job `jobId`'s
    /// provider sign before completing it; zero for a job it never completed.
    mapping(uint256 jobId => bytes32) public signedResult;
    /// @dev A completion whose result or units its provider did not sign went through, or
    /// was refused for another reason than BadResultSignature.
    bool public forgedResultAccepted;

    /// @dev `providerKeys_` are the keys of `d.providers`, in the same order; `matcherKey_`
    /// is the matcher's, which it uses to forge results.
    constructor(
        Deps memory d,
        address matcher_,
        address arbiter_,
        address[] memory buyers_,
        uint256 matcherKey_,
        uint256[] memory providerKeys_
    ) HandlerBase(d) {
        require(vm.addr(matcherKey_) == matcher_, "matcher key");
        require(providerKeys_.length == d.providers.length, "one key per provider");
        matcher = matcher_;
        arbiter = arbiter_;
        matcherKey = matcherKey_;
        _buyers = buyers_;
        for (uint256 i; i < providerKeys_.length; ++i) {
            require(vm.addr(providerKeys_[i]) == d.providers[i], "provider key");
            _keyOf[d.providers[i]] = providerKeys_[i];
        }
    }

    // ─── Buyers ──────────────────────────────────────────────────────────────

    function postJob(uint256 buyerSeed, uint256 price, uint256 units, uint256 ttl) external step {
        _post(buyerSeed, price, units, ttl);
    }

    function cancelJob(uint256 jobSeed) external step {
        (uint256 id, JobMarket.Job memory job) = _find(jobSeed, JobMarket.Status.Posted, false);
        if (id == 0) return;
        _cancel(id, job);
    }

    /// @dev Disputes a completed job in its window, completing one first if there is none;
    /// half the time the matcher disputes it (replicas that disagree), not the buyer.
    function disputeJob(uint256 jobSeed, uint256 bySeed) external step {
        (uint256 id, JobMarket.Job memory job) = _completedInWindow(jobSeed);
        if (id == 0) return;
        _dispute(id, job, bySeed % 2 == 0 ? job.buyer : matcher);
    }

    /// @dev Reclaims a posted or assigned job (posting one if there is none); half the
    /// time waits for the deadline of a live one first. Half the reclaims are made by an
    /// outsider: the refund must still reach the buyer. One call in four instead lets a
    /// dispute (raising one if there is none) go undecided past its arbitration period,
    /// which settles it half and half.
    function reclaimExpired(uint256 jobSeed, uint256 waitSeed) external step {
        if (waitSeed % 4 == 3) {
            (uint256 disputed, JobMarket.Job memory open) = _find(jobSeed, JobMarket.Status.Disputed, false);
            if (disputed == 0) {
                (disputed, open) = _completedInWindow(jobSeed);
                if (disputed == 0) return;
                open = _dispute(disputed, open, (waitSeed >> 2) % 2 == 0 ? open.buyer : matcher);
            }
            _expireDispute(disputed, open);
            return;
        }
        (uint256 id, JobMarket.Job memory job) = _find(jobSeed, JobMarket.Status.Posted, false);
        if (id == 0) (id, job) = _find(jobSeed, JobMarket.Status.Assigned, false);
        if (id == 0) (id, job) = _post(jobSeed, waitSeed >> 8, waitSeed >> 72, waitSeed >> 136);
        if (block.timestamp <= job.deadline) {
            if (waitSeed % 2 != 0) return;
            _advanceTo(uint256(job.deadline) + 1);
        }
        Balances memory before = _balances(job);
        bool byOutsider = (waitSeed >> 1) % 2 == 0;
        vm.prank(byOutsider ? outsider : job.buyer);
        market.reclaimExpired(id);
        _recordClose(id, job, before, 0);
        _count(byOutsider ? "reclaimByOutsider" : "reclaim");
    }

    // ─── Matcher ─────────────────────────────────────────────────────────────

    /// @dev Assigns a live posted job, posting one first if there is none.
    function assignJob(uint256 jobSeed, uint256 providerSeed, uint256 price) external step {
        (uint256 id, JobMarket.Job memory job) = _find(jobSeed, JobMarket.Status.Posted, true);
        if (id == 0) (id, job) = _post(jobSeed, price, providerSeed, jobSeed >> 128);
        _assign(id, job, providerSeed, price);
    }

    /// @dev Completes a live assigned job, assigning one first if there is none.
    function completeJob(uint256 jobSeed, uint256 units) external step {
        (uint256 id, JobMarket.Job memory job) = _assignedLive(jobSeed);
        if (id == 0) return;
        _complete(id, job, units);
    }

    /// @dev Charges a live assigned job for the units its provider signed it used before it
    /// failed by its own fault (assigning one first if there is none); the matcher's own
    /// signature or a result's over the same units is refused first.
    function chargeJob(uint256 jobSeed, uint256 units) external step {
        (uint256 id, JobMarket.Job memory job) = _assignedLive(jobSeed);
        if (id == 0) return;
        units = _bound(units, 0, job.maxUnits);
        _forgeCharge(id, units, JobResults.signFailure(matcherKey, address(market), id, uint64(units)));
        _forgeCharge(id, units, _sign(_keyOf[job.provider], id, bytes32(0), units));
        bytes memory signature = JobResults.signFailure(_keyOf[job.provider], address(market), id, uint64(units));
        signedResult[id] = keccak256(abi.encode(job.provider, bytes32(0), units));
        vm.prank(matcher);
        market.chargeJob(id, "job-failed", uint64(units), signature);
        _afterComplete(id);
        _count("charge");
    }

    /// @dev The matcher charges job `id` with a signature its provider did not give for that
    /// failure: the market must refuse it with BadResultSignature.
    function _forgeCharge(uint256 id, uint256 units, bytes memory signature) private {
        vm.prank(matcher);
        try market.chargeJob(id, "job-failed", uint64(units), signature) {
            forgedResultAccepted = true;
        } catch (bytes memory err) {
            if (keccak256(err) != keccak256(abi.encodeWithSelector(JobMarket.BadResultSignature.selector, id))) {
                forgedResultAccepted = true;
            }
        }
    }

    /// @dev Tries every forgery on a live assigned job (assigning one first if there is
    /// none), each within the job's units so that only the signature can refuse it: the
    /// matcher's own signature, another provider's, and the provider's signature over other
    /// units, another result hash or another job, or cut short. Then completes it honestly.
    function completeForged(uint256 jobSeed, uint256 units) external step {
        (uint256 id, JobMarket.Job memory job) = _assignedLive(jobSeed);
        if (id == 0) return;
        units = _bound(units, 0, job.maxUnits);
        bytes32 result = keccak256(abi.encode(id, units));
        uint256 key = _keyOf[job.provider];
        uint64 otherUnits = uint64(units == 0 ? 1 : units - 1);
        bytes memory honest = _sign(key, id, result, units);
        _forge(id, result, units, _sign(matcherKey, id, result, units));
        _forge(id, result, units, _sign(_keyOf[_otherProvider(job.provider)], id, result, units));
        _forge(id, result, otherUnits, honest);
        _forge(id, keccak256(abi.encode(result)), units, honest);
        _forge(id, result, units, _sign(key, id + 1, result, units));
        _forge(id, result, units, _truncated(honest));
        if (market.getJob(id).status == JobMarket.Status.Assigned) _complete(id, job, units);
        _count("forgedResultRefused");
    }

    /// @dev Moves a live assigned job (assigning one first if there is none) to another
    /// eligible provider at a new price; half the time the previous provider is slashed,
    /// sometimes by more than the per-incident cap (the vault applies the cap).
    function reassignJob(uint256 jobSeed, uint256 providerSeed, uint256 priceSeed) external step {
        (uint256 id, JobMarket.Job memory job) = _assignedLive(jobSeed);
        if (id == 0) return;
        address provider = _eligibleProvider(providerSeed, job.provider);
        if (provider == address(0)) return;
        uint16 bps = priceSeed % 2 == 0 || job.slashed ? 0 : _slashBps(priceSeed >> 1);
        _reassign(id, job, provider, uint128(_bound(priceSeed >> 17, market.minPricePerUnit(), job.maxPricePerUnit)), bps);
    }

    /// @dev Half the failures blame the provider and slash it. A job already slashed
    /// once, or past its deadline, is tried with a slash first: refused, it fails without.
    function failJob(uint256 jobSeed, uint256 bpsSeed) external step {
        (uint256 id, JobMarket.Job memory job) = _find(jobSeed, JobMarket.Status.Assigned, false);
        if (id == 0) (id, job) = _assignedLive(jobSeed);
        if (id == 0) return;
        uint16 bps = bpsSeed % 2 == 0 ? 0 : _slashBps(bpsSeed >> 1);
        if (bps > 0 && (job.slashed || block.timestamp > job.deadline)) {
            _slashRefused(id, job, bps);
            bps = 0;
        }
        _fail(id, job, bps);
    }

    // ─── Anyone / arbiter ────────────────────────────────────────────────────

    /// @dev Settles a completed job (completing one first if there is none), waiting out
    /// its dispute window if needed.
    function settleJob(uint256 jobSeed) external step {
        (uint256 id, JobMarket.Job memory job) = _find(jobSeed, JobMarket.Status.Completed, false);
        if (id == 0) (id, job) = _completedInWindow(jobSeed);
        if (id == 0) return;
        _settle(id, job);
    }

    /// @dev Rules on a disputed job (disputing one first if there is none); upheld buyers
    /// get the provider slashed half the time.
    function resolveDispute(uint256 jobSeed, uint256 verdictSeed) external step {
        (uint256 id, JobMarket.Job memory job) = _find(jobSeed, JobMarket.Status.Disputed, false);
        if (id == 0) {
            (id, job) = _completedInWindow(jobSeed);
            if (id == 0) return;
            job = _dispute(id, job, job.buyer);
        }
        if (block.timestamp > uint256(job.disputeEnd) + market.ARBITRATION_PERIOD()) {
            _expireDispute(id, job);
            return;
        }
        bool buyerUpheld = verdictSeed % 2 == 0;
        uint16 bps = buyerUpheld && (verdictSeed >> 1) % 2 == 0 ? _slashBps(verdictSeed >> 2) : 0;
        _resolve(id, job, buyerUpheld, bps);
    }

    /// @dev Pauses the market for one call: posting, assigning and reassigning must stop;
    /// cancelling, failing and settling must not.
    function pauseInterlude(uint256 jobSeed) external step {
        vm.prank(guardian);
        market.pause();
        address buyer = _buyers[jobSeed % _buyers.length];
        vm.prank(buyer);
        try market.postJob("paused", 1 ether, 1, uint64(block.timestamp + 1 days)) returns (uint256 posted) {
            jobIds.push(posted);
            _ghosts[posted].escrow = 1 ether;
            _expectPaused(true, "");
        } catch (bytes memory err) {
            _expectPaused(false, err);
        }
        (uint256 id, JobMarket.Job memory job) = _find(jobSeed, JobMarket.Status.Posted, false);
        if (id != 0) {
            vm.prank(matcher);
            try market.assignJob(id, providers[0], 0) {
                _expectPaused(true, "");
            } catch (bytes memory err) {
                _expectPaused(false, err);
            }
            _cancel(id, job);
        } else {
            (id, job) = _find(jobSeed, JobMarket.Status.Completed, false);
            if (id != 0) {
                _settle(id, job);
            } else {
                (id, job) = _find(jobSeed, JobMarket.Status.Assigned, false);
                if (id != 0) {
                    vm.prank(matcher);
                    try market.reassignJob(id, _provider(jobSeed), 0, "paused", 0) {
                        _expectPaused(true, "");
                    } catch (bytes memory err) {
                        _expectPaused(false, err);
                    }
                    _fail(id, job, 0);
                }
            }
        }
        vm.prank(guardian);
        market.unpause();
        _count("pauseInterlude");
    }

    /// @dev Tries to take a closed job's escrow out a second time, every way there is.
    /// Each attempt must revert; one that does not counts a second payout for the job.
    function replayClose(uint256 jobSeed, uint256 waySeed) external step {
        uint256 n = jobIds.length;
        for (uint256 k; k < n; ++k) {
            uint256 id = jobIds[(jobSeed % n + k) % n];
            JobMarket.Job memory job = market.getJob(id);
            if (uint8(job.status) < uint8(JobMarket.Status.Settled)) continue;
            Balances memory before = _balances(job);
            uint256 way = waySeed % 5;
            bool paid;
            if (way == 0) {
                vm.prank(job.buyer);
                try market.cancelJob(id) {
                    paid = true;
                } catch {}
            } else if (way == 1) {
                vm.prank(job.buyer);
                try market.reclaimExpired(id) {
                    paid = true;
                } catch {}
            } else if (way == 2) {
                try market.settleJob(id) {
                    paid = true;
                } catch {}
            } else if (way == 3) {
                vm.prank(matcher);
                try market.failJob(id, "replay", 0) {
                    paid = true;
                } catch {}
            } else {
                vm.prank(arbiter);
                try market.resolveDispute(id, true, 0) {
                    paid = true;
                } catch {}
            }
            if (paid) _recordClose(id, job, before, 0);
            else _count("replayRefused");
            return;
        }
    }

    // ─── Adversarial matcher ─────────────────────────────────────────────────

    /// @dev Assigns two to six new jobs to one eligible provider, then fails or reassigns
    /// every one of them with a slash of that provider (random bps up to 100 %), one call
    /// after another with no time passing: what the provider loses (taken, or owed as debt)
    /// must stay within the market's remaining per-period allowance of what it held, and it
    /// must keep at least (1 − maxSlashBpsPerPeriod / 10000) of it, rounding included.
    function slashBurst(uint256 providerSeed, uint256 countSeed, uint256 bpsSeed) external step {
        address victim = _eligibleProvider(providerSeed, address(0));
        if (victim == address(0)) return;
        uint256 n = _bound(countSeed, 2, 6);
        uint256[] memory ids = new uint256[](n);
        for (uint256 k; k < n; ++k) {
            uint256 r = uint256(keccak256(abi.encode(countSeed, k)));
            (uint256 id, JobMarket.Job memory job) = _post(r, r >> 64, r >> 128, r >> 192);
            _assignTo(id, job, victim, r >> 32);
            ids[k] = id;
        }
        uint256 held = _held(victim);
        uint256 allowance = vault.slashAllowanceBps(address(market), victim);
        uint256 periodCap = vault.maxSlashBpsPerPeriod();
        uint256 debtBefore = vault.slashDebt(victim);
        for (uint256 k; k < n; ++k) {
            uint256 r = uint256(keccak256(abi.encode(bpsSeed, k)));
            JobMarket.Job memory job = market.getJob(ids[k]);
            uint16 bps = uint16(_bound(r, 1, BPS));
            address other = r % 2 == 0 ? _eligibleProvider(r >> 16, victim) : address(0);
            if (other != address(0)) {
                _reassign(ids[k], job, other, uint128(_bound(r >> 32, 0, job.maxPricePerUnit)), bps);
                // The job runs on with another provider: a second slash of it must be refused.
                _slashRefused(ids[k], market.getJob(ids[k]), bps);
            } else {
                _fail(ids[k], job, bps);
            }
        }
        uint256 heldAfter = _held(victim);
        uint256 charged = held - heldAfter + vault.slashDebt(victim) - debtBefore;
        if (charged * BPS > held * allowance) matcherBurstExceededCap = true;
        if (heldAfter < held - held * periodCap / BPS) providerKeptTooLittle = true;
        _count("slashBurst");
    }

    // ─── Holds and dispute bonds ─────────────────────────────────────────────

    /// @dev Once a job is assigned, its provider is held past the deadline (a fail may
    /// slash up to it).
    function _afterAssign(uint256 id, address provider) private {
        if (vault.providerInfo(provider).heldUntil <= market.getJob(id).deadline) holdMissing = true;
    }

    /// @dev Once it is completed, until its dispute window closes.
    function _afterComplete(uint256 id) private {
        JobMarket.Job memory job = market.getJob(id);
        if (vault.providerInfo(job.provider).heldUntil < job.disputeEnd) holdMissing = true;
    }

    /// @dev Once it is disputed, past the arbitration period; a buyer's dispute escrows a
    /// bond of the bond rate of the payment, rounded up (the matcher's none), which the
    /// ghost adds to what the job must pay out.
    function _afterDispute(uint256 id, address by) private {
        JobMarket.Job memory job = market.getJob(id);
        if (vault.providerInfo(job.provider).heldUntil <= uint256(job.disputeEnd) + market.ARBITRATION_PERIOD()) {
            holdMissing = true;
        }
        uint256 payment = uint256(job.unitsUsed) * job.pricePerUnit;
        uint256 expected = by == matcher ? 0 : (payment * market.disputeBondBps() + BPS - 1) / BPS;
        if (by != matcher && expected < market.minDisputeBond()) expected = market.minDisputeBond();
        uint256 bond = market.disputeBond(id);
        if (bond != expected) disputeBondWrong = true;
        _ghosts[id].bond = bond;
        _ghosts[id].escrow += bond;
    }

    /// @dev A matcher slash the market must refuse (a job's second, or one after its
    /// deadline), tried by failJob or, for a job still running, by reassignJob.
    function _slashRefused(uint256 id, JobMarket.Job memory job, uint16 bps) private {
        if (job.status != JobMarket.Status.Assigned) return;
        bool late = block.timestamp > job.deadline;
        address other = late ? address(0) : _eligibleProvider(id, job.provider);
        vm.startPrank(matcher);
        bool accepted = true;
        if (other != address(0)) {
            try market.reassignJob(id, other, job.pricePerUnit, "again", bps) {}
                catch {
                accepted = false;
            }
        } else {
            try market.failJob(id, "again", bps) {}
                catch {
                accepted = false;
            }
        }
        vm.stopPrank();
        if (accepted) {
            if (late) lateSlashAccepted = true;
            else secondJobSlashAccepted = true;
            if (other == address(0)) ++_ghosts[id].payouts;
        }
        _count(late ? "lateSlashRefused" : "secondSlashRefused");
    }

    /// @dev Lets a dispute go undecided past its arbitration period; anyone then settles it
    /// half and half: the provider half the payment less the fee on it, the treasury that
    /// fee, the buyer the rest of the escrow and its bond back.
    function _expireDispute(uint256 id, JobMarket.Job memory job) private {
        _advanceTo(uint256(job.disputeEnd) + market.ARBITRATION_PERIOD() + 1);
        Balances memory before = _balances(job);
        SlashWatch memory w = _watch(address(market));
        vm.prank(outsider);
        market.reclaimExpired(id);
        _recordClose(id, job, before, _audit(w));
        _checkSplit(id, job, before, uint256(job.unitsUsed) * job.pricePerUnit / 2, true); // the bond goes to the provider
        _count("disputeExpired");
    }

    /// @notice Closes every open job (afterInvariant only): cancels the posted, fails the
    /// assigned without blame, settles the completed and rules for the provider on disputes.
    function drain() external {
        vm.warp(clock.time());
        for (uint256 k; k < jobIds.length; ++k) {
            uint256 id = jobIds[k];
            JobMarket.Job memory job = market.getJob(id);
            if (job.status == JobMarket.Status.Posted) _cancel(id, job);
            else if (job.status == JobMarket.Status.Assigned) _fail(id, job, 0);
            else if (job.status == JobMarket.Status.Completed) _settle(id, job);
            else if (job.status != JobMarket.Status.Disputed) continue;
            else if (block.timestamp > uint256(job.disputeEnd) + market.ARBITRATION_PERIOD()) _expireDispute(id, job);
            else _resolve(id, job, false, 0);
        }
    }

    // ─── Views for the invariants ────────────────────────────────────────────

    function jobCount() external view returns (uint256) {
        return jobIds.length;
    }

    function ghost(uint256 jobId) external view returns (JobGhost memory) {
        return _ghosts[jobId];
    }

    // ─── Internals ───────────────────────────────────────────────────────────

    function _post(uint256 buyerSeed, uint256 price, uint256 units, uint256 ttl)
        private
        returns (uint256 id, JobMarket.Job memory job)
    {
        address buyer = _buyers[buyerSeed % _buyers.length];
        price = _bound(price, 1 gwei, MAX_PRICE);
        units = _bound(units, 1, MAX_UNITS);
        ttl = _bound(ttl, 1 hours, 10 days);
        vm.prank(buyer);
        id = market.postJob(
            keccak256(abi.encode(buyer, jobIds.length)), uint128(price), uint64(units), uint64(block.timestamp + ttl)
        );
        jobIds.push(id);
        _ghosts[id].escrow = price * units;
        job = market.getJob(id);
        _count("post");
    }

    /// @dev Assigns to an eligible provider; returns the job unchanged if there is none.
    function _assign(uint256 id, JobMarket.Job memory job, uint256 providerSeed, uint256 price)
        private
        returns (JobMarket.Job memory)
    {
        address provider = _eligibleProvider(providerSeed, address(0));
        if (provider == address(0)) return job;
        return _assignTo(id, job, provider, price);
    }

    /// @dev Assigns to `provider`, recording the fee in force as the one agreed.
    function _assignTo(uint256 id, JobMarket.Job memory job, address provider, uint256 price)
        private
        returns (JobMarket.Job memory assigned)
    {
        uint16 fee = market.feeBps();
        uint128 assigned_ = uint128(_bound(price, market.minPricePerUnit(), job.maxPricePerUnit));
        vm.prank(matcher);
        market.assignJob(id, provider, assigned_);
        _ghosts[id].feeBps = fee;
        assigned = market.getJob(id);
        if (assigned.feeBps != fee) feeNotLockedAtAssignment = true;
        _afterAssign(id, provider);
        _count("assign");
    }

    function _reassign(uint256 id, JobMarket.Job memory job, address provider, uint128 price, uint16 bps) private {
        uint256 marketBefore = token.balanceOf(address(market));
        uint256 escrowedBefore = market.totalEscrowed();
        uint256 buyerBefore = token.balanceOf(job.buyer);
        uint256 toBefore = token.balanceOf(provider);
        uint256 fromBefore = token.balanceOf(job.provider);
        SlashWatch memory w = _watch(address(market));
        vm.prank(matcher);
        market.reassignJob(id, provider, price, "lost", bps);
        _audit(w);
        if (
            token.balanceOf(address(market)) != marketBefore || market.totalEscrowed() != escrowedBefore
                || market.escrowOf(id) != _ghosts[id].escrow || token.balanceOf(job.buyer) != buyerBefore
                || token.balanceOf(provider) != toBefore || token.balanceOf(job.provider) != fromBefore
        ) reassignMovedEscrow = true;
        JobMarket.Job memory moved = market.getJob(id);
        if (
            moved.provider != provider || moved.pricePerUnit != price || moved.feeBps != job.feeBps
                || moved.status != JobMarket.Status.Assigned
        ) reassignMovedEscrow = true;
        _count(bps > 0 ? "reassignWithSlash" : "reassign");
    }

    /// @dev Slash bps for a blamed provider: mostly within the per-incident cap, one in
    /// four anywhere up to 100 % (applied at the cap).
    function _slashBps(uint256 seed) private view returns (uint16) {
        if (seed % 4 == 0) return uint16(_bound(seed >> 2, 1, BPS));
        return uint16(_bound(seed >> 2, 1, vault.maxSlashBps()));
    }

    /// @dev Completes with a result its provider signed, remembering what it signed.
    function _complete(uint256 id, JobMarket.Job memory job, uint256 units) private returns (JobMarket.Job memory) {
        units = _bound(units, 0, job.maxUnits);
        bytes32 result = keccak256(abi.encode(id, units));
        bytes memory signature = _sign(_keyOf[job.provider], id, result, units);
        signedResult[id] = keccak256(abi.encode(job.provider, result, units));
        vm.prank(matcher);
        market.completeJob(id, result, uint64(units), signature);
        _afterComplete(id);
        _count("complete");
        return market.getJob(id);
    }

    function _dispute(uint256 id, JobMarket.Job memory job, address by) private returns (JobMarket.Job memory) {
        vm.prank(by);
        market.disputeJob(id);
        _afterDispute(id, by);
        _count(by == job.buyer ? "dispute" : "disputeByMatcher");
        return market.getJob(id);
    }

    /// @dev `key`'s signature over a result, as JobResults builds it.
    function _sign(uint256 key, uint256 id, bytes32 result, uint256 units) private view returns (bytes memory) {
        return JobResults.sign(key, address(market), id, result, uint64(units));
    }

    /// @dev The matcher completes job `id` with a result or `signature` its provider did not
    /// give: the market must refuse it with BadResultSignature.
    function _forge(uint256 id, bytes32 result, uint256 units, bytes memory signature) private {
        vm.prank(matcher);
        try market.completeJob(id, result, uint64(units), signature) {
            forgedResultAccepted = true;
        } catch (bytes memory err) {
            if (keccak256(err) != keccak256(abi.encodeWithSelector(JobMarket.BadResultSignature.selector, id))) {
                forgedResultAccepted = true;
            }
        }
    }

    /// @dev The first 64 bytes of a 65-byte signature.
    function _truncated(bytes memory signature) private pure returns (bytes memory cut) {
        cut = new bytes(64);
        for (uint256 i; i < 64; ++i) {
            cut[i] = signature[i];
        }
    }

    /// @dev A provider other than `provider` (every provider has a key).
    function _otherProvider(address provider) private view returns (address) {
        return providers[0] == provider ? providers[1] : providers[0];
    }

    /// @dev A live assigned job, else a live posted one assigned now, else a new one
    /// posted and assigned now; (0, _) if no provider is eligible.
    function _assignedLive(uint256 seed) private returns (uint256 id, JobMarket.Job memory job) {
        (id, job) = _find(seed, JobMarket.Status.Assigned, true);
        if (id != 0) return (id, job);
        (id, job) = _find(seed, JobMarket.Status.Posted, true);
        if (id == 0) (id, job) = _post(seed, seed >> 64, seed >> 128, seed >> 192);
        job = _assign(id, job, seed >> 32, seed >> 96);
        if (job.status != JobMarket.Status.Assigned) return (0, job);
    }

    /// @dev A completed job still in its dispute window, else one completed now.
    function _completedInWindow(uint256 seed) private returns (uint256 id, JobMarket.Job memory job) {
        uint256 n = jobIds.length;
        for (uint256 k; k < n; ++k) {
            id = jobIds[(seed % n + k) % n];
            job = market.getJob(id);
            if (job.status == JobMarket.Status.Completed && block.timestamp < job.disputeEnd) return (id, job);
        }
        (id, job) = _assignedLive(seed);
        if (id != 0) job = _complete(id, job, seed >> 16);
    }

    function _cancel(uint256 id, JobMarket.Job memory job) private {
        Balances memory before = _balances(job);
        vm.prank(job.buyer);
        market.cancelJob(id);
        _recordClose(id, job, before, 0);
        _count("cancel");
    }

    function _fail(uint256 id, JobMarket.Job memory job, uint16 bps) private {
        Balances memory before = _balances(job);
        SlashWatch memory w = _watch(address(market));
        vm.prank(matcher);
        market.failJob(id, "fault", bps);
        uint256 slashIncome = _audit(w);
        _recordClose(id, job, before, slashIncome);
        _count(bps > 0 ? "failWithSlash" : "fail");
    }

    function _settle(uint256 id, JobMarket.Job memory job) private {
        if (block.timestamp < job.disputeEnd) _advanceTo(job.disputeEnd);
        Balances memory before = _balances(job);
        SlashWatch memory w = _watch(address(market));
        market.settleJob(id);
        uint256 slashIncome = _audit(w);
        _recordClose(id, job, before, slashIncome);
        _checkSplit(id, job, before, uint256(job.unitsUsed) * job.pricePerUnit, false);
        _count("settle");
    }

    function _resolve(uint256 id, JobMarket.Job memory job, bool buyerUpheld, uint16 bps) private {
        Balances memory before = _balances(job);
        SlashWatch memory w = _watch(address(market));
        vm.prank(arbiter);
        market.resolveDispute(id, buyerUpheld, bps);
        uint256 slashIncome = _audit(w);
        _recordClose(id, job, before, slashIncome);
        if (!buyerUpheld) _checkSplit(id, job, before, uint256(job.unitsUsed) * job.pricePerUnit, true);
        _count(buyerUpheld ? "resolveForBuyer" : "resolveForProvider");
    }

    /// @dev The first open job with `status` from a random start; `live` also requires its
    /// deadline not to have passed.
    function _find(uint256 seed, JobMarket.Status status, bool live)
        private
        view
        returns (uint256 id, JobMarket.Job memory job)
    {
        uint256 n = jobIds.length;
        for (uint256 k; k < n; ++k) {
            uint256 candidate = jobIds[(seed % n + k) % n];
            job = market.getJob(candidate);
            if (job.status == status && (!live || block.timestamp <= job.deadline)) return (candidate, job);
        }
        return (0, job);
    }

    /// @dev An eligible provider other than `except`, from a random start; address(0) if none.
    function _eligibleProvider(uint256 seed, address except) private view returns (address) {
        uint256 n = providers.length;
        for (uint256 k; k < n; ++k) {
            address p = providers[(seed % n + k) % n];
            if (p != except && vault.isEligible(p)) return p;
        }
        return address(0);
    }

    function _balances(JobMarket.Job memory job) private view returns (Balances memory b) {
        b.market = token.balanceOf(address(market));
        b.buyer = token.balanceOf(job.buyer);
        b.provider = job.provider == address(0) ? 0 : token.balanceOf(job.provider);
        b.treasury = token.balanceOf(treasury);
    }

    /// @dev A settled job must pay its provider `payment` − fee, the treasury the fee
    /// (payment × the fee agreed at assignment / 10000) and its buyer the rest of the
    /// escrow; a dispute bond goes to the provider if `bondToProvider`, else back to the buyer.
    function _checkSplit(
        uint256 id,
        JobMarket.Job memory job,
        Balances memory before,
        uint256 payment,
        bool bondToProvider
    ) private {
        Balances memory afterwards = _balances(job);
        JobGhost memory g = _ghosts[id];
        uint256 fee = payment * g.feeBps / BPS;
        uint256 toProvider = payment - fee + (bondToProvider ? g.bond : 0);
        uint256 toBuyer = g.escrow - g.bond - payment + (bondToProvider ? 0 : g.bond);
        if (
            afterwards.provider != before.provider + toProvider || afterwards.treasury != before.treasury + fee
                || afterwards.buyer != before.buyer + toBuyer
        ) settlementSplitWrong = true;
    }

    /// @dev Counts a payout for `id` and records what left the market and what buyer,
    /// provider and treasury received (the treasury's slash income excluded).
    function _recordClose(uint256 id, JobMarket.Job memory job, Balances memory before, uint256 slashIncome) private {
        Balances memory afterwards = _balances(job);
        JobGhost storage g = _ghosts[id];
        ++g.payouts;
        if (
            afterwards.market > before.market || afterwards.buyer < before.buyer
                || afterwards.provider < before.provider || afterwards.treasury < before.treasury + slashIncome
        ) {
            balanceWentBackwards = true;
            return;
        }
        g.marketOutflow += before.market - afterwards.market;
        g.paidOut += (afterwards.buyer - before.buyer) + (afterwards.provider - before.provider)
            + (afterwards.treasury - before.treasury - slashIncome);
    }
}
