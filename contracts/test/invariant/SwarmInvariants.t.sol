// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {StakingVault} from "../../src/StakingVault.sol";
import {RewardDistributor} from "../../src/RewardDistributor.sol";
import {JobMarket} from "../../src/JobMarket.sol";
import {SwarmTestBase} from "../utils/SwarmTestBase.sol";

import {Clock, SlashLedger, HandlerBase} from "./HandlerBase.sol";
import {VaultHandler} from "./VaultHandler.sol";
import {DistributorHandler} from "./DistributorHandler.sol";
import {AdversarialCommitteeHandler} from "./AdversarialCommitteeHandler.sol";
import {MarketHandler} from "./MarketHandler.sol";
import {AdminHandler} from "./AdminHandler.sol";
import {TimelockHandler} from "./TimelockHandler.sol";

/// @notice Invariants of the four contracts together: the vault, distributor, adversarial
/// committee, market and admin handlers run against one deployment, so the distributor's
/// and the market's slashes hit the stake the vault handler moves while the admin changes
/// parameters under them. A crowd of passive staked providers gives the committee's
/// largest reports real stakes to slash. After every run, afterInvariant lets everyone
/// exit (finalize or clear the pending report, claim, close every job, pay slash debts as
/// the bucket refills, wait out holds, unstake and withdraw) and checks nothing is stuck.
contract SwarmInvariantsTest is SwarmTestBase {
    uint256 internal constant INITIAL_STAKE = 100_000 ether;
    uint32 internal constant INITIAL_GPUS = 2;
    uint256 internal constant FUNDER_FUNDS = 100_000_000 ether;
    uint128 internal constant SLASH_BUCKET = 50_000 ether;
    uint128 internal constant SLASH_REFILL = 0.25 ether; // per second: a full refill takes over two days
    uint256 internal constant CROWD_SIZE = 200; // MAX_SLASHES_PER_REPORT
    uint256 internal constant CROWD_STAKE = 10 ether;
    uint160 internal constant CROWD_BASE = 0xC0000;

    address internal erin = makeAddr("erin"); // third provider
    uint256 internal erinKey = _keyOf("erin");
    address internal outsider = makeAddr("outsider"); // never registers
    address internal funder = makeAddr("funder");

    address[] internal providerSet;
    address[] internal crowd;
    Clock internal clock;
    SlashLedger internal ledger;
    VaultHandler internal vaultHandler;
    DistributorHandler internal distributorHandler;
    AdversarialCommitteeHandler internal committeeHandler;
    MarketHandler internal marketHandler;
    AdminHandler internal adminHandler;
    TimelockHandler internal timelockHandler;
    uint256 internal initialSupply;

    function setUp() public override {
        super.setUp();
        vm.startPrank(admin);
        token.transfer(erin, ACTOR_FUNDS);
        token.transfer(funder, FUNDER_FUNDS);
        vm.stopPrank();
        vm.prank(erin);
        token.approve(address(vault), type(uint256).max);
        vm.prank(funder);
        token.approve(address(distributor), type(uint256).max);

        providerSet.push(alice);
        providerSet.push(bob);
        providerSet.push(erin);
        for (uint256 i; i < providerSet.length; ++i) {
            _registerAndStake(providerSet[i], INITIAL_GPUS, INITIAL_STAKE);
        }
        address[] memory slashers = new address[](2);
        (slashers[0], slashers[1]) = (address(distributor), address(market));
        ledger = new SlashLedger(slashers);
        _raiseCrowd();
        initialSupply = token.totalSupply();
        // A bucket small enough that the oracle's and the market's slashes hit the limit.
        vm.prank(admin);
        vault.setSlashRateLimit(SLASH_BUCKET, SLASH_REFILL);
        // A report lag of days, so that holds past a provider's release (cut at its release
        // plus the challenge window and the lag) last long enough to be met.
        vm.prank(admin);
        distributor.setMaxReportLag(3 days);
        // The admin handler sets the unbonding, the challenge window and the lag anywhere the
        // contracts allow, as the timelock, without the timelock's check: a delay longer than the
        // longest exit bound they allow keeps the timelock's promise true all the same.
        uint256 longestBound = uint256(vault.MAX_UNBONDING_PERIOD()) + distributor.MAX_CHALLENGE_WINDOW()
            + distributor.MAX_REPORT_LAG();
        vm.prank(admin);
        timelock.updateDelay(longestBound + 1 days);

        clock = new Clock(block.timestamp);
        HandlerBase.Deps memory deps = HandlerBase.Deps({
            token: token,
            vault: vault,
            distributor: distributor,
            market: market,
            clock: clock,
            ledger: ledger,
            treasury: treasury,
            admin: admin,
            guardian: guardian,
            providers: providerSet,
            outsider: outsider
        });
        address[] memory buyers = new address[](2);
        (buyers[0], buyers[1]) = (carol, dave);
        vaultHandler = new VaultHandler(deps, crowd, governor);
        timelockHandler = new TimelockHandler(vaultHandler);
        distributorHandler = new DistributorHandler(deps, funder, signerKeys);
        committeeHandler = new AdversarialCommitteeHandler(deps, distributorHandler, signerKeys, crowd);
        uint256[] memory providerKeys = new uint256[](3);
        (providerKeys[0], providerKeys[1], providerKeys[2]) = (aliceKey, bobKey, erinKey);
        marketHandler = new MarketHandler(deps, matcher, arbiter, buyers, matcherKey, providerKeys);
        adminHandler = new AdminHandler(deps);

        _target(address(vaultHandler), _vaultSelectors());
        _target(address(distributorHandler), _distributorSelectors());
        _target(address(committeeHandler), _committeeSelectors());
        _target(address(marketHandler), _marketSelectors());
        _target(address(adminHandler), _adminSelectors());
        bytes4[] memory hostile = new bytes4[](1);
        hostile[0] = TimelockHandler.leaveBeforeAHostileChange.selector;
        _target(address(timelockHandler), hostile);
    }

    // ─── The campaigns ───────────────────────────────────────────────────────
    // Every campaign runs every handler; each checks its own area after every call, and
    // afterInvariant checks every area at the end of every run (the ghost flags are
    // sticky, so a violation anywhere in the run is still seen there).

    /// forge-config: default.invariant.fail-on-revert = true
    function invariant_VaultSolvencyExitsAndParameters() public view {
        _assertVaultHoldsEveryStakedAndUnbondingToken();
        _assertNoWithdrawalBeforeReleaseHoldOrDebt();
        _assertAdminParametersStayInRange();
    }

    /// forge-config: default.invariant.fail-on-revert = true
    function invariant_SlashesStayWithinEveryCap() public view {
        _assertSlashNeverTakesMoreThanTheStakeItHits();
        _assertSlashersStayWithinTheirPerPeriodCap();
    }

    /// forge-config: default.invariant.fail-on-revert = true
    function invariant_RewardsAndEpochsUnderAHostileCommittee() public view {
        _assertDistributorNeverPaysMoreThanFunded();
        _assertClaimsNeverExceedCommittedCumulative();
        _assertCommitteeDamageIsBounded();
        _assertFinalizedEpochOnlyIncreases();
    }

    /// forge-config: default.invariant.fail-on-revert = true
    function invariant_MarketEscrowAndSettlement() public view {
        _assertMarketEscrowMatchesOpenJobs();
    }

    function _assertAll() internal view {
        _assertVaultHoldsEveryStakedAndUnbondingToken();
        _assertNoWithdrawalBeforeReleaseHoldOrDebt();
        _assertSlashNeverTakesMoreThanTheStakeItHits();
        _assertSlashersStayWithinTheirPerPeriodCap();
        _assertDistributorNeverPaysMoreThanFunded();
        _assertClaimsNeverExceedCommittedCumulative();
        _assertCommitteeDamageIsBounded();
        _assertMarketEscrowMatchesOpenJobs();
        _assertFinalizedEpochOnlyIncreases();
        _assertAdminParametersStayInRange();
    }

    // ─── 1. Vault solvency ───────────────────────────────────────────────────

    function _assertVaultHoldsEveryStakedAndUnbondingToken() internal view {
        (uint256 staked, uint256 unbonding) = _sumActorStakes();
        uint256 crowdHeld = ledger.crowdHeldTotal();
        // The crowd never unstakes during the campaign (the drain withdraws in one go).
        assertEq(vault.totalStaked(), staked + crowdHeld, "totalStaked != sum of stakes");
        assertEq(vault.totalUnbonding(), unbonding, "totalUnbonding != sum of unbonding");
        assertGe(token.balanceOf(address(vault)), staked + unbonding + crowdHeld, "vault holds less than it owes");
        // Nothing sends tokens to the vault directly, so it holds exactly what it owes:
        // what was staked, less what was withdrawn and what slashes (debt collections
        // included) took.
        assertEq(token.balanceOf(address(vault)), staked + unbonding + crowdHeld, "vault holds more than it owes");
        assertEq(
            staked + unbonding + crowdHeld,
            INITIAL_STAKE * providerSet.length + CROWD_SIZE * CROWD_STAKE + vaultHandler.deposited()
                - vaultHandler.withdrawn() - ledger.totalSlashed(),
            "stake flows do not add up"
        );
        assertFalse(vaultHandler.withdrawalPaidWrong(), "a withdrawal paid other than the unbonding amount");
        assertFalse(vaultHandler.pauseNotEnforced(), "vault pause did not stop stake");
    }

    // ─── 2. Withdrawals, holds and slash debt ────────────────────────────────

    function _assertNoWithdrawalBeforeReleaseHoldOrDebt() internal view {
        assertFalse(vaultHandler.withdrawalBeforeRelease(), "a withdrawal before unbondingEnd or heldUntil");
        assertFalse(vaultHandler.withdrawalWithDebt(), "a withdrawal paid out unbonding a slash debt still claimed");
        assertFalse(vaultHandler.withdrawalRefusedWrongly(), "a withdrawal refused for the wrong reason");
        assertFalse(vaultHandler.heldPastExitBound(), "a hold outlived the exit bound");
        assertFalse(
            vaultHandler.heldPastTheTimelock(),
            "a provider that asked to leave as a change was scheduled was still held when it could run"
        );
        assertFalse(ledger.releaseMovedEarlier(), "a provider's unbondingEnd or heldUntil moved earlier");
        for (uint256 i; i < providerSet.length; ++i) {
            address p = providerSet[i];
            assertEq(
                vault.slashDebt(p),
                ledger.debtIncurred(p) - ledger.debtCollected(p),
                "slash debt != deferred - collected"
            );
            StakingVault.ProviderView memory info = vault.providerInfo(p);
            assertLe(info.slashDebt, uint256(info.stake) + info.unbonding, "slash debt above what the provider holds");
        }
        assertFalse(ledger.debtOverCollected(), "a debt collection took more than was owed");
    }

    // ─── 3. Slashes ──────────────────────────────────────────────────────────

    function _assertSlashNeverTakesMoreThanTheStakeItHits() internal view {
        assertFalse(ledger.slashAboveHeld(), "slash took more stake or unbonding than there was");
        assertFalse(ledger.slashAboveBps(), "slash took (or charged as debt) more than bps of the stake");
        assertFalse(ledger.slashZeroBps(), "slash with zero bps");
        assertFalse(ledger.slashAboveIncidentCap(), "slash above the per-incident cap");
        assertFalse(ledger.slashNotAtCap(), "slash applied other than at min(requested, caps)");
        assertFalse(ledger.slashAboveBucket(), "slash above the network-wide bucket");
        assertFalse(ledger.treasuryShareWrong(), "treasury share of a slash");
        assertFalse(ledger.unknownProviderSlashed(), "slashed an address outside the actor set, or outside a slasher");
        assertFalse(ledger.stateDeltaMismatch(), "vault state delta != Slashed events");
        assertFalse(ledger.splitMismatch(), "treasury delta + burn != slashed in a call");
        assertEq(ledger.treasuryIncome() + ledger.burned(), ledger.totalSlashed(), "treasury + burned != slashed");
        assertEq(token.totalSupply(), initialSupply - ledger.burned(), "supply fell by other than slash burns");
        assertEq(
            token.balanceOf(treasury), ledger.treasuryIncome() + ledger.marketFees(), "treasury got unexplained tokens"
        );
    }

    /// @dev One slasher never sums more than maxSlashBpsPerPeriod on one provider within any
    /// SLASH_PERIOD (a sliding window, checked at every slash), nor charges it (taken + owed)
    /// more than that share of the most it held then; the ledger's recount of the slashes the
    /// vault still counts agrees with the vault's own allowance.
    function _assertSlashersStayWithinTheirPerPeriodCap() internal view {
        assertFalse(ledger.periodBpsExceeded(), "one slasher summed more than the per-period cap");
        assertFalse(ledger.periodTakeExceeded(), "one slasher took more than its per-period share");
        assertFalse(marketHandler.matcherBurstExceededCap(), "the matcher's burst exceeded its allowance");
        assertFalse(marketHandler.providerKeptTooLittle(), "a provider kept less than 1 - cap of its stake");
        assertFalse(marketHandler.secondJobSlashAccepted(), "the matcher slashed one job twice");
        assertFalse(marketHandler.lateSlashAccepted(), "the matcher slashed a job after its deadline");
        uint16 cap = vault.maxSlashBpsPerPeriod();
        address[2] memory slashers = [address(distributor), address(market)];
        for (uint256 s; s < slashers.length; ++s) {
            for (uint256 i; i < providerSet.length; ++i) {
                uint256 used = ledger.counted(slashers[s], providerSet[i]);
                uint256 expected = used >= cap ? 0 : cap - used;
                assertEq(vault.slashAllowanceBps(slashers[s], providerSet[i]), expected, "allowance != ghost window");
            }
        }
    }

    // ─── 4. Rewards ──────────────────────────────────────────────────────────

    function _assertDistributorNeverPaysMoreThanFunded() internal view {
        uint256 funded = distributor.totalFunded();
        uint256 allocated = distributor.totalAllocated();
        uint256 paid = distributor.totalClaimed();
        assertEq(token.balanceOf(address(distributor)), funded - paid, "balance != funded - claimed");
        assertLe(paid, allocated, "claimed more than allocated");
        assertLe(allocated, funded, "allocated more than funded");
        // Roots commit what was allocated, plus what an over-committing committee added.
        assertEq(
            distributorHandler.sumCommitted(),
            allocated + distributorHandler.excessCommitted(),
            "committed cumulatives != allocated + excess"
        );
        assertFalse(distributorHandler.claimBeyondAllocationPaid(), "a claim paid beyond the allocation left");
    }

    function _assertClaimsNeverExceedCommittedCumulative() internal view {
        uint256 sumClaimed;
        for (uint256 i; i < providerSet.length; ++i) {
            address p = providerSet[i];
            uint256 c = distributor.claimed(p);
            assertLe(c, distributorHandler.maxCommitted(p), "claimed beyond any finalized cumulative");
            sumClaimed += c;
        }
        assertEq(sumClaimed, distributor.totalClaimed(), "totalClaimed != sum of claimed");
        assertFalse(distributorHandler.claimPaidWrong(), "a claim paid other than cumulative - claimed");
        assertFalse(distributorHandler.forgedClaimAccepted(), "a stale or inflated cumulative was paid");
        assertFalse(distributorHandler.vetoedReportFinalized(), "a vetoed report was finalized");
        assertFalse(distributorHandler.pauseNotEnforced(), "distributor pause did not stop submit/finalize");
    }

    // ─── 5. A hostile committee ──────────────────────────────────────────────

    /// @dev Every malformed report is refused with its own error; every report accepted
    /// finalizes within the gas cap in its window, tombstones first and at most
    /// MAX_TOMBSTONES_PER_REPORT of them, or is cleared by a veto, a discard or a lapse.
    function _assertCommitteeDamageIsBounded() internal view {
        assertFalse(committeeHandler.malformedAccepted(), "a malformed or refused report was accepted");
        assertFalse(committeeHandler.malformedRefusedWrongly(), "a malformed report refused with the wrong error");
        assertFalse(committeeHandler.validReportRefused(), "a report within every bound was refused");
        assertFalse(distributorHandler.acceptedReportNotFinalizable(), "an accepted report could not be finalized");
        assertLe(
            distributorHandler.maxFinalizeGas(), distributorHandler.FINALIZE_GAS_LIMIT(), "a finalize above the gas cap"
        );
        assertFalse(distributorHandler.tooManyTombstones(), "a report tombstoned more than the maximum");
        assertLe(
            distributorHandler.maxTombstonesFinalized(),
            distributor.MAX_TOMBSTONES_PER_REPORT(),
            "a report tombstoned more than the maximum"
        );
        assertFalse(distributorHandler.tombstonesNotFirst(), "a tombstone applied after another slash");
        assertFalse(distributorHandler.lapsedReportFinalized(), "a lapsed report was finalized");
        assertFalse(distributorHandler.lapsedReportResubmittedByStranger(), "a stranger brought a lapsed report back");
        assertFalse(distributorHandler.holdOutlivedItsReport(), "a hold outlived its vetoed, discarded or lapsed report");
        assertFalse(distributorHandler.earlyDiscardAccepted(), "a report discarded before RECOVERY_DELAY");
        assertFalse(distributorHandler.refusedContentAccepted(), "vetoed or discarded contents accepted again");
        assertEq(distributorHandler.vetoedReplaysAccepted(), 0, "a vetoed report's signatures were replayed");
    }

    // ─── 6. Market escrow ────────────────────────────────────────────────────

    function _assertMarketEscrowMatchesOpenJobs() internal view {
        uint256 sumEscrow;
        uint256 n = market.nextJobId();
        for (uint256 id = 1; id < n; ++id) {
            uint256 escrow = market.escrowOf(id);
            sumEscrow += escrow;
            // Only completeJob and chargeJob set disputeEnd: a job that has it carries its provider's word.
            JobMarket.Job memory job = market.getJob(id);
            if (job.disputeEnd != 0) {
                assertEq(
                    keccak256(abi.encode(job.provider, job.resultHash, uint256(job.unitsUsed))),
                    marketHandler.signedResult(id),
                    "a job completed with a result or units its provider did not sign"
                );
            }
            MarketHandler.JobGhost memory g = marketHandler.ghost(id);
            assertLe(g.payouts, 1, "a job left escrow more than once");
            if (g.payouts == 0) {
                assertEq(escrow, g.escrow, "open job's escrow changed");
            } else {
                assertEq(escrow, 0, "closed job still holds escrow");
                assertEq(g.marketOutflow, g.escrow, "closing took other than the escrow out of the market");
                assertEq(g.paidOut, g.escrow, "buyer + provider + treasury payouts != escrow");
            }
        }
        assertEq(n - 1, marketHandler.jobCount(), "jobs posted outside the handler");
        assertEq(market.totalEscrowed(), sumEscrow, "totalEscrowed != sum of escrowOf");
        assertEq(token.balanceOf(address(market)), market.totalEscrowed(), "market balance != totalEscrowed");
        assertFalse(marketHandler.balanceWentBackwards(), "a payout reduced someone's balance");
        assertFalse(marketHandler.reassignMovedEscrow(), "a reassignment moved escrow or paid someone");
        assertFalse(marketHandler.settlementSplitWrong(), "a settlement split other than provider/fee/buyer");
        assertFalse(marketHandler.feeNotLockedAtAssignment(), "a job's fee is not the one at its assignment");
        assertFalse(marketHandler.disputeBondWrong(), "a dispute bond other than the bond rate of the payment");
        assertFalse(marketHandler.holdMissing(), "an open job's provider not held until its last slashable second");
        assertFalse(marketHandler.pauseNotEnforced(), "market pause did not stop post/assign/reassign");
        assertFalse(marketHandler.forgedResultAccepted(), "the matcher completed a job with a forged result");
    }

    // ─── 7. Epochs ───────────────────────────────────────────────────────────

    function _assertFinalizedEpochOnlyIncreases() internal view {
        uint64 epoch = distributor.lastFinalizedEpoch();
        assertFalse(ledger.epochDecreased(), "lastFinalizedEpoch decreased between calls");
        assertGe(epoch, ledger.maxEpochSeen(), "lastFinalizedEpoch below one already seen");
        assertFalse(distributorHandler.finalizedOutOfOrder(), "a finalization moved the epoch by other than one");
        assertEq(epoch, distributorHandler.lastFinalized(), "epoch finalized outside the handler");
        assertEq(epoch, distributorHandler.finalizations(), "finalizations != lastFinalizedEpoch");
    }

    // ─── 8. Admin parameters ─────────────────────────────────────────────────

    function _assertAdminParametersStayInRange() internal view {
        assertFalse(adminHandler.outOfRangeAccepted(), "an out-of-range parameter was accepted");
        assertFalse(adminHandler.inRangeRefused(), "an in-range parameter was refused");
        assertFalse(adminHandler.refusedWithWrongError(), "an out-of-range parameter refused with the wrong error");
        assertFalse(adminHandler.strangerAccepted(), "a parameter changed without the admin");
        uint64 unbonding = vault.unbondingPeriod();
        assertTrue(unbonding >= vault.minUnbondingPeriod() && unbonding <= vault.MAX_UNBONDING_PERIOD(), "unbonding");
        uint16 incident = vault.maxSlashBps();
        assertTrue(incident >= vault.MIN_SLASH_BPS_LIMIT() && incident <= vault.MAX_SLASH_BPS_LIMIT(), "maxSlashBps");
        uint16 period = vault.maxSlashBpsPerPeriod();
        assertTrue(period >= incident && period <= 10_000, "maxSlashBpsPerPeriod");
        assertLe(vault.treasuryShareBps(), 10_000, "treasuryShareBps");
        assertEq(vault.treasury(), treasury, "treasury moved");
        uint128 capacity = vault.slashBucketCapacity();
        assertTrue(
            capacity >= vault.MIN_BUCKET_CAPACITY() && capacity <= vault.MAX_BUCKET_CAPACITY(), "bucket capacity"
        );
        uint128 refill = vault.slashRefillPerSecond();
        assertTrue(refill >= 1 && refill <= capacity, "bucket refill");
        uint128 minStake = vault.minStakePerGpu();
        assertTrue(minStake >= 1 && minStake <= vault.MAX_MIN_STAKE_PER_GPU(), "minStakePerGpu");
        uint64 window = distributor.challengeWindow();
        assertTrue(
            window >= distributor.minChallengeWindow() && window <= distributor.MAX_CHALLENGE_WINDOW(),
            "challengeWindow"
        );
        assertLe(
            uint256(window) + distributor.maxReportLag(), vault.unbondingPeriod(), "challenge window + lag > unbonding"
        );
        assertLe(market.feeBps(), market.MAX_FEE_BPS(), "feeBps");
        assertTrue(
            market.disputeWindow() >= market.minDisputeWindow()
                && market.disputeWindow() <= market.MAX_DISPUTE_WINDOW(),
            "disputeWindow"
        );
        uint16 bond = market.disputeBondBps();
        assertTrue(bond >= market.MIN_DISPUTE_BOND_BPS() && bond <= market.MAX_DISPUTE_BOND_BPS(), "disputeBondBps");
        uint128 bondFloor = market.minDisputeBond();
        assertTrue(bondFloor >= 1 && bondFloor <= market.MAX_MIN_DISPUTE_BOND(), "minDisputeBond");
        assertLe(market.minPricePerUnit(), market.MAX_MIN_PRICE_PER_UNIT(), "minPricePerUnit");
        assertEq(vault.defaultAdmin(), admin, "vault admin moved");
    }

    // ─── After every run: everyone can get out ───────────────────────────────

    function afterInvariant() public {
        distributorHandler.drain();
        marketHandler.drain();
        vaultHandler.drain();

        RewardDistributor.Pending memory p = distributor.pendingReport();
        assertTrue(p.epoch == 0 || p.vetoed, "a report is still pending");
        if (distributorHandler.excessCommitted() == 0) {
            assertEq(distributor.totalClaimed(), distributor.totalAllocated(), "allocated rewards left unclaimed");
        } else {
            // An over-committed root owes more than was allocated: what is left is owed
            // to someone, but no claim left fits in it.
            assertFalse(distributorHandler.claimThatFitsLeft(), "a claim that fits the allocation left unpaid");
        }
        assertEq(
            token.balanceOf(address(distributor)),
            distributor.totalFunded() - distributor.totalClaimed(),
            "distributor holds other than the unclaimed pool"
        );
        assertEq(market.totalEscrowed(), 0, "escrow left after closing every job");
        assertEq(token.balanceOf(address(market)), 0, "market kept tokens");
        assertEq(vault.totalStaked() + vault.totalUnbonding(), 0, "stake left after every exit");
        assertEq(token.balanceOf(address(vault)), 0, "vault kept tokens");

        _assertAll();
    }

    // ─── The handlers reach every transition ─────────────────────────────────

    /// @dev A seeded random walk over exactly the selectors the campaign targets, with
    /// random arguments: proves the handlers, not just the fuzzer's luck, reach finalized
    /// epochs, vetoes, discards, lapses, claims, slashes, debts, every malformed report,
    /// every admin setter and every way a job closes. A walk is one sample: the rare steps
    /// (a slash by reassignment, a withdrawal refused for a debt) are reached by some seeds
    /// and not others, so a change to the selectors may need a new label for the walk; the
    /// test says which action it missed.
    function test_HandlersReachEveryTransition() public {
        FuzzSelector[] memory targets = targetSelectors();
        uint256 walked = targets.length - 1; // the timelock handler, targeted last, comes after the walk
        for (uint256 k; k < 1200; ++k) {
            uint256 r = uint256(keccak256(abi.encode("walk-c", k)));
            FuzzSelector memory t = targets[r % walked];
            bytes4 selector = t.selectors[(r >> 8) % t.selectors.length];
            bytes memory args = abi.encode(
                uint256(keccak256(abi.encode(r, 1))),
                uint256(keccak256(abi.encode(r, 2))),
                uint256(keccak256(abi.encode(r, 3))),
                uint256(keccak256(abi.encode(r, 4)))
            );
            (bool ok,) = t.addr.call(bytes.concat(selector, args));
            ok; // a handler may revert; the campaign's invariants would catch it
        }

        string[16] memory distributorActions = [
            "fund",
            "submit",
            "veto",
            "discard",
            "lapseRefused",
            "replaceLapsed",
            "lapsedReplayRefused",
            "finalize",
            "claim",
            "claimBeyondAllocationRefused",
            "forgedClaimRefused",
            "replayRefused",
            "claimWhilePaused",
            "staleEpochRefused",
            "overcommitAccepted",
            "slashEveryEpoch"
        ];
        for (uint256 i; i < distributorActions.length; ++i) {
            HandlerBase h = i < 14 ? HandlerBase(distributorHandler) : HandlerBase(committeeHandler);
            _reached(h, distributorActions[i]);
        }
        string[3] memory committeeActions = ["largestReport", "largeReport", "refusedContentRefused"];
        for (uint256 i; i < committeeActions.length; ++i) {
            _reached(committeeHandler, committeeActions[i]);
        }
        for (uint256 kind; kind <= uint256(type(AdversarialCommitteeHandler.Malformed).max); ++kind) {
            _reached(committeeHandler, string.concat("refused", vm.toString(kind)));
        }
        string[23] memory marketActions = [
            "pauseInterlude",
            "post",
            "assign",
            "reassign",
            "reassignWithSlash",
            "complete",
            "dispute",
            "disputeByMatcher",
            "settle",
            "cancel",
            "reclaim",
            "reclaimByOutsider",
            "fail",
            "failWithSlash",
            "resolveForBuyer",
            "resolveForProvider",
            "replayRefused",
            "slashBurst",
            "secondSlashRefused",
            "lateSlashRefused",
            "disputeExpired",
            "forgedResultRefused",
            "charge"
        ];
        for (uint256 i; i < marketActions.length; ++i) {
            _reached(marketHandler, marketActions[i]);
        }
        for (uint256 k; k < 3; ++k) {
            timelockHandler.leaveBeforeAHostileChange(k);
        }
        _reached(vaultHandler, "leaveBeforeAHostileChange");
        string[11] memory vaultActions = [
            "stake",
            "requestUnstake",
            "withdraw",
            "withdrawAfterDebt",
            "withdrawRefusedUnbonding",
            "withdrawRefusedOnHold",
            "withdrawRefusedWithDebt",
            "collectDebt",
            "unjail",
            "updateSpec",
            "requestUnstakeWhilePaused"
        ];
        for (uint256 i; i < vaultActions.length; ++i) {
            _reached(vaultHandler, vaultActions[i]);
        }
        string[10] memory setters = [
            "setMaxReportLag",
            "setUnbondingPeriod",
            "setSlashPolicy",
            "setSlashRateLimit",
            "setMinStakePerGpu",
            "setChallengeWindow",
            "setMarketFee",
            "setDisputeWindow",
            "setDisputeBond",
            "strangerRefused"
        ];
        for (uint256 i; i < setters.length; ++i) {
            _reached(adminHandler, setters[i]);
            if (i < 9) _reached(adminHandler, string.concat(setters[i], "Refused"));
        }
        assertEq(_missed, "", "actions never reached");
        assertGt(ledger.recordCount(), 0, "no slash applied");
        assertGt(ledger.crowdSlashCount(), 0, "no crowd slash applied");
        assertGt(ledger.notApplied(), 0, "no refused slash reported");
        assertGt(ledger.rateLimited(), 0, "no slash hit the rate limit");
        assertGt(ledger.debtCollections(), 0, "no slash debt collected");
        assertGt(ledger.cappedSlashes(), 0, "no slash lowered to a cap");
        assertGt(ledger.droppedSlashes(), 0, "no slash dropped by the per-period cap");
        assertEq(
            committeeHandler.largestReportSlashes(),
            distributor.MAX_SLASHES_PER_REPORT(),
            "largest report not finalized"
        );
        assertEq(
            distributorHandler.maxTombstonesFinalized(),
            distributor.MAX_TOMBSTONES_PER_REPORT(),
            "no report finalized with the most tombstones"
        );
        assertGt(distributorHandler.excessCommitted(), 0, "no over-committed root finalized");
        assertGt(distributor.lastFinalizedEpoch(), 0, "no epoch finalized");
        emit log_named_uint("largest finalize, gas", distributorHandler.maxFinalizeGas());

        _assertAll();
        afterInvariant();
    }

    /// @dev Actions the walk never reached, listed so that one run names them all.
    string internal _missed;

    function _reached(HandlerBase handler, string memory action) private {
        if (handler.counts(action) == 0) _missed = string.concat(_missed, " ", action);
    }

    // ─── Setup helpers ───────────────────────────────────────────────────────

    /// @dev CROWD_SIZE passive providers at ascending addresses, each with CROWD_STAKE.
    function _raiseCrowd() private {
        vm.prank(admin);
        token.transfer(address(this), CROWD_SIZE * CROWD_STAKE);
        for (uint256 i; i < CROWD_SIZE; ++i) {
            address p = address(CROWD_BASE + uint160(i));
            token.transfer(p, CROWD_STAKE);
            vm.startPrank(p);
            token.approve(address(vault), CROWD_STAKE);
            vault.register(keccak256(abi.encode(p)), 1);
            vault.stake(CROWD_STAKE);
            vm.stopPrank();
            crowd.push(p);
            ledger.addCrowd(p, CROWD_STAKE);
        }
    }

    function _sumActorStakes() private view returns (uint256 staked, uint256 unbonding) {
        for (uint256 i; i < providerSet.length; ++i) {
            StakingVault.ProviderView memory info = vault.providerInfo(providerSet[i]);
            staked += info.stake;
            unbonding += info.unbonding;
        }
        StakingVault.ProviderView memory stranger = vault.providerInfo(outsider);
        staked += stranger.stake;
        unbonding += stranger.unbonding;
    }

    function _target(address handler, bytes4[] memory selectors) private {
        targetContract(handler);
        targetSelector(FuzzSelector({addr: handler, selectors: selectors}));
    }

    function _vaultSelectors() private pure returns (bytes4[] memory s) {
        s = new bytes4[](8);
        s[0] = VaultHandler.stake.selector;
        s[1] = VaultHandler.requestUnstake.selector;
        s[2] = VaultHandler.withdraw.selector;
        s[3] = VaultHandler.unjail.selector;
        s[4] = VaultHandler.updateSpec.selector;
        s[5] = VaultHandler.warp.selector;
        s[6] = VaultHandler.pauseInterlude.selector;
        s[7] = VaultHandler.collectDebt.selector;
    }

    function _distributorSelectors() private pure returns (bytes4[] memory s) {
        s = new bytes4[](11);
        s[0] = DistributorHandler.fund.selector;
        s[1] = DistributorHandler.submitEpoch.selector;
        s[2] = DistributorHandler.vetoEpoch.selector;
        s[3] = DistributorHandler.replayVetoed.selector;
        s[4] = DistributorHandler.finalizeEpoch.selector;
        s[5] = DistributorHandler.claim.selector;
        s[6] = DistributorHandler.claimForged.selector;
        s[7] = DistributorHandler.pauseInterlude.selector;
        s[8] = DistributorHandler.submitStaleEpoch.selector;
        s[9] = DistributorHandler.discardEpoch.selector;
        s[10] = DistributorHandler.letLapse.selector;
    }

    function _committeeSelectors() private pure returns (bytes4[] memory s) {
        s = new bytes4[](5);
        s[0] = AdversarialCommitteeHandler.submitMalformed.selector;
        s[1] = AdversarialCommitteeHandler.resubmitRefused.selector;
        s[2] = AdversarialCommitteeHandler.submitOvercommitted.selector;
        s[3] = AdversarialCommitteeHandler.submitLargestReport.selector;
        s[4] = AdversarialCommitteeHandler.slashEveryEpoch.selector;
    }

    function _marketSelectors() private pure returns (bytes4[] memory s) {
        s = new bytes4[](15);
        s[14] = MarketHandler.chargeJob.selector;
        s[0] = MarketHandler.postJob.selector;
        s[1] = MarketHandler.cancelJob.selector;
        s[2] = MarketHandler.disputeJob.selector;
        s[3] = MarketHandler.reclaimExpired.selector;
        s[4] = MarketHandler.assignJob.selector;
        s[5] = MarketHandler.completeJob.selector;
        s[6] = MarketHandler.failJob.selector;
        s[7] = MarketHandler.settleJob.selector;
        s[8] = MarketHandler.resolveDispute.selector;
        s[9] = MarketHandler.replayClose.selector;
        s[10] = MarketHandler.pauseInterlude.selector;
        s[11] = MarketHandler.reassignJob.selector;
        s[12] = MarketHandler.slashBurst.selector;
        s[13] = MarketHandler.completeForged.selector;
    }

    function _adminSelectors() private pure returns (bytes4[] memory s) {
        s = new bytes4[](10);
        s[9] = AdminHandler.setMaxReportLag.selector;
        s[8] = AdminHandler.setDisputeBond.selector;
        s[0] = AdminHandler.setUnbondingPeriod.selector;
        s[1] = AdminHandler.setSlashPolicy.selector;
        s[2] = AdminHandler.setSlashRateLimit.selector;
        s[3] = AdminHandler.setMinStakePerGpu.selector;
        s[4] = AdminHandler.setChallengeWindow.selector;
        s[5] = AdminHandler.setMarketFee.selector;
        s[6] = AdminHandler.setDisputeWindow.selector;
        s[7] = AdminHandler.strangerRefused.selector;
    }
}
