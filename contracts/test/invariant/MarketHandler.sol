// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {JobMarket} from "../../src/JobMarket.sol";
import {HandlerBase} from "./HandlerBase.sol";

/// @notice Plays the buyers, the matcher and the arbiter through every job transition, and
/// accounts for each job's escrow leaving the market. Reassignments move no escrow; the
/// slashes they order go through the vault and the shared slash audit.
contract MarketHandler is HandlerBase {
    uint256 internal constant MAX_PRICE = 10 ether;
    uint256 internal constant MAX_UNITS = 1_000;

    struct JobGhost {
        uint256 escrow; // what the buyer escrowed at post time
        uint256 payouts; // how many calls moved this job's escrow out of the market
        uint256 paidOut; // what those calls paid buyer + provider + treasury (less slash income)
        uint256 marketOutflow; // what those calls took out of the market's balance
    }

    struct Balances {
        uint256 market;
        uint256 buyer;
        uint256 provider;
        uint256 treasury;
    }

    address internal immutable matcher;
    address internal immutable arbiter;
    address[] internal _buyers;

    uint256[] public jobIds;
    mapping(uint256 jobId => JobGhost) internal _ghosts;
    /// @dev A closing call during which some balance went the wrong way.
    bool public balanceWentBackwards;
    /// @dev A reassignment that moved tokens in or out of the market, changed the escrow
    /// books or paid anyone but the slash's treasury share.
    bool public reassignMovedEscrow;

    constructor(Deps memory d, address matcher_, address arbiter_, address[] memory buyers_) HandlerBase(d) {
        matcher = matcher_;
        arbiter = arbiter_;
        _buyers = buyers_;
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
    /// outsider: the refund must still reach the buyer.
    function reclaimExpired(uint256 jobSeed, uint256 waitSeed) external step {
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

    /// @dev Moves a live assigned job (assigning one first if there is none) to another
    /// eligible provider at a new price; half the time the previous provider is slashed.
    function reassignJob(uint256 jobSeed, uint256 providerSeed, uint256 priceSeed) external step {
        (uint256 id, JobMarket.Job memory job) = _assignedLive(jobSeed);
        if (id == 0) return;
        address provider = _eligibleProvider(providerSeed, job.provider);
        if (provider == address(0)) return;
        uint16 bps = priceSeed % 2 == 0 ? 0 : uint16(_bound(priceSeed >> 1, 1, vault.maxSlashBps()));
        uint128 price = uint128(_bound(priceSeed >> 17, 0, job.maxPricePerUnit));

        uint256 marketBefore = token.balanceOf(address(market));
        uint256 escrowedBefore = market.totalEscrowed();
        uint256 buyerBefore = token.balanceOf(job.buyer);
        uint256 toBefore = token.balanceOf(provider);
        uint256 fromBefore = token.balanceOf(job.provider);
        SlashWatch memory w = _watch();
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

    /// @dev Half the failures blame the provider and slash it.
    function failJob(uint256 jobSeed, uint256 bpsSeed) external step {
        (uint256 id, JobMarket.Job memory job) = _find(jobSeed, JobMarket.Status.Assigned, false);
        if (id == 0) (id, job) = _assignedLive(jobSeed);
        if (id == 0) return;
        uint16 bps = bpsSeed % 2 == 0 ? 0 : uint16(_bound(bpsSeed >> 1, 1, vault.maxSlashBps()));
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
        bool buyerUpheld = verdictSeed % 2 == 0;
        uint16 bps =
            buyerUpheld && (verdictSeed >> 1) % 2 == 0 ? uint16(_bound(verdictSeed >> 2, 1, vault.maxSlashBps())) : 0;
        _resolve(id, job, buyerUpheld, bps);
    }

    /// @dev Pauses the market for one call: posting, assigning and reassigning must stop;
    /// cancelling, failing and settling must not.
    function pauseInterlude(uint256 jobSeed) external step {
        vm.prank(admin);
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
        vm.prank(admin);
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
            else if (job.status == JobMarket.Status.Disputed) _resolve(id, job, false, 0);
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
        vm.prank(matcher);
        market.assignJob(id, provider, uint128(_bound(price, 0, job.maxPricePerUnit)));
        _count("assign");
        return market.getJob(id);
    }

    function _complete(uint256 id, JobMarket.Job memory job, uint256 units) private returns (JobMarket.Job memory) {
        units = _bound(units, 0, job.maxUnits);
        vm.prank(matcher);
        market.completeJob(id, keccak256(abi.encode(id, units)), uint64(units));
        _count("complete");
        return market.getJob(id);
    }

    function _dispute(uint256 id, JobMarket.Job memory job, address by) private returns (JobMarket.Job memory) {
        vm.prank(by);
        market.disputeJob(id);
        _count(by == job.buyer ? "dispute" : "disputeByMatcher");
        return market.getJob(id);
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
        SlashWatch memory w = _watch();
        vm.prank(matcher);
        market.failJob(id, "fault", bps);
        uint256 slashIncome = _audit(w);
        _recordClose(id, job, before, slashIncome);
        _count(bps > 0 ? "failWithSlash" : "fail");
    }

    function _settle(uint256 id, JobMarket.Job memory job) private {
        if (block.timestamp < job.disputeEnd) _advanceTo(job.disputeEnd);
        Balances memory before = _balances(job);
        SlashWatch memory w = _watch();
        market.settleJob(id);
        uint256 slashIncome = _audit(w);
        _recordClose(id, job, before, slashIncome);
        _count("settle");
    }

    function _resolve(uint256 id, JobMarket.Job memory job, bool buyerUpheld, uint16 bps) private {
        Balances memory before = _balances(job);
        SlashWatch memory w = _watch();
        vm.prank(arbiter);
        market.resolveDispute(id, buyerUpheld, bps);
        uint256 slashIncome = _audit(w);
        _recordClose(id, job, before, slashIncome);
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
