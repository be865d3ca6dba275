// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {StakingVault} from "../../src/StakingVault.sol";
import {RewardDistributor} from "../../src/RewardDistributor.sol";
import {SwarmTestBase} from "../utils/SwarmTestBase.sol";

import {Clock, SlashLedger, HandlerBase} from "./HandlerBase.sol";
import {VaultHandler} from "./VaultHandler.sol";
import {DistributorHandler} from "./DistributorHandler.sol";
import {MarketHandler} from "./MarketHandler.sol";

/// @notice Invariants of the four contracts together: the vault, distributor and market
/// handlers run against one deployment, so the distributor's and the market's slashes hit
/// the stake the vault handler moves. After every run, afterInvariant lets everyone exit
/// (finalize, claim, close every job, unstake and withdraw) and checks nothing is stuck.
contract SwarmInvariantsTest is SwarmTestBase {
    uint256 internal constant INITIAL_STAKE = 100_000 ether;
    uint32 internal constant INITIAL_GPUS = 2;
    uint256 internal constant FUNDER_FUNDS = 100_000_000 ether;
    uint128 internal constant SLASH_BUCKET = 150_000 ether;
    uint128 internal constant SLASH_REFILL = 1 ether; // per second

    address internal erin = makeAddr("erin"); // third provider
    address internal outsider = makeAddr("outsider"); // never registers
    address internal funder = makeAddr("funder");

    address[] internal providerSet;
    Clock internal clock;
    SlashLedger internal ledger;
    VaultHandler internal vaultHandler;
    DistributorHandler internal distributorHandler;
    MarketHandler internal marketHandler;
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
        initialSupply = token.totalSupply();
        // A bucket small enough that the oracle's and the market's slashes hit the limit.
        vm.prank(admin);
        vault.setSlashRateLimit(SLASH_BUCKET, SLASH_REFILL);

        clock = new Clock(block.timestamp);
        ledger = new SlashLedger();
        HandlerBase.Deps memory deps = HandlerBase.Deps({
            token: token,
            vault: vault,
            distributor: distributor,
            market: market,
            clock: clock,
            ledger: ledger,
            treasury: treasury,
            admin: admin,
            providers: providerSet,
            outsider: outsider
        });
        address[] memory buyers = new address[](2);
        (buyers[0], buyers[1]) = (carol, dave);
        vaultHandler = new VaultHandler(deps);
        distributorHandler = new DistributorHandler(deps, funder, guardian, signerKeys);
        marketHandler = new MarketHandler(deps, matcher, arbiter, buyers);

        _target(address(vaultHandler), _vaultSelectors());
        _target(address(distributorHandler), _distributorSelectors());
        _target(address(marketHandler), _marketSelectors());
    }

    // ─── 1. Vault solvency ───────────────────────────────────────────────────

    /// forge-config: default.invariant.fail-on-revert = true
    function invariant_VaultHoldsEveryStakedAndUnbondingToken() public view {
        (uint256 staked, uint256 unbonding) = _sumActorStakes();
        assertEq(vault.totalStaked(), staked, "totalStaked != sum of stakes");
        assertEq(vault.totalUnbonding(), unbonding, "totalUnbonding != sum of unbonding");
        assertGe(token.balanceOf(address(vault)), staked + unbonding, "vault holds less than it owes");
        // Nothing sends tokens to the vault directly, so it holds exactly what it owes:
        // what was staked, less what was withdrawn and what slashes took.
        assertEq(token.balanceOf(address(vault)), staked + unbonding, "vault holds more than it owes");
        assertEq(
            staked + unbonding,
            INITIAL_STAKE * providerSet.length + vaultHandler.deposited() - vaultHandler.withdrawn()
                - ledger.totalSlashed(),
            "stake flows do not add up"
        );
        assertFalse(vaultHandler.withdrawalPaidWrong(), "a withdrawal paid other than the unbonding amount");
        assertFalse(vaultHandler.pauseNotEnforced(), "vault pause did not stop stake");
    }

    // ─── 2. Slashes ──────────────────────────────────────────────────────────

    /// forge-config: default.invariant.fail-on-revert = true
    function invariant_SlashNeverTakesMoreThanTheStakeItHits() public view {
        uint256 n = ledger.recordCount();
        for (uint256 i; i < n; ++i) {
            SlashLedger.SlashRecord memory r = ledger.records(i);
            uint256 taken = r.fromStake + r.fromUnbonding;
            assertLe(r.fromStake, r.heldStake, "slash took more stake than there was");
            assertLe(r.fromUnbonding, r.heldUnbonding, "slash took more unbonding than there was");
            assertLe(taken, r.held * r.bps / 10_000, "slash took more than bps of the stake");
            assertGt(r.bps, 0, "slash with zero bps");
            assertLe(r.bps, r.maxBps, "slash above the per-incident cap");
            assertLe(taken, r.bucketBefore, "slash above the network-wide bucket");
            assertEq(r.toTreasury, r.expectedToTreasury, "treasury share of a slash");
        }
        assertFalse(ledger.unknownProviderSlashed(), "slashed an address outside the actor set");
        assertFalse(ledger.stateDeltaMismatch(), "vault state delta != Slashed events");
        assertFalse(ledger.splitMismatch(), "treasury delta + burn != slashed in a call");
        assertEq(ledger.treasuryIncome() + ledger.burned(), ledger.totalSlashed(), "treasury + burned != slashed");
        assertEq(token.totalSupply(), initialSupply - ledger.burned(), "supply fell by other than slash burns");
        assertEq(
            token.balanceOf(treasury), ledger.treasuryIncome() + ledger.marketFees(), "treasury got unexplained tokens"
        );
    }

    // ─── 3. Rewards ──────────────────────────────────────────────────────────

    /// forge-config: default.invariant.fail-on-revert = true
    function invariant_DistributorNeverPaysMoreThanFunded() public view {
        uint256 funded = distributor.totalFunded();
        uint256 allocated = distributor.totalAllocated();
        uint256 paid = distributor.totalClaimed();
        assertEq(token.balanceOf(address(distributor)), funded - paid, "balance != funded - claimed");
        assertLe(paid, allocated, "claimed more than allocated");
        assertLe(allocated, funded, "allocated more than funded");
        // The committee in this harness is honest: its roots commit exactly what was allocated.
        assertEq(distributorHandler.sumCommitted(), allocated, "committed cumulatives != allocated");
    }

    /// forge-config: default.invariant.fail-on-revert = true
    function invariant_ClaimsNeverExceedCommittedCumulative() public view {
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

    // ─── 4. Market escrow ────────────────────────────────────────────────────

    /// forge-config: default.invariant.fail-on-revert = true
    function invariant_MarketEscrowMatchesOpenJobs() public view {
        uint256 sumEscrow;
        uint256 n = market.nextJobId();
        for (uint256 id = 1; id < n; ++id) {
            uint256 escrow = market.escrowOf(id);
            sumEscrow += escrow;
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
        assertFalse(marketHandler.pauseNotEnforced(), "market pause did not stop post/assign/reassign");
    }

    // ─── 5. Epochs ───────────────────────────────────────────────────────────

    /// forge-config: default.invariant.fail-on-revert = true
    function invariant_FinalizedEpochOnlyIncreases() public view {
        uint64 epoch = distributor.lastFinalizedEpoch();
        assertFalse(ledger.epochDecreased(), "lastFinalizedEpoch decreased between calls");
        assertGe(epoch, ledger.maxEpochSeen(), "lastFinalizedEpoch below one already seen");
        assertFalse(distributorHandler.finalizedOutOfOrder(), "a finalized epoch did not exceed the previous one");
        assertEq(epoch, distributorHandler.lastFinalized(), "epoch finalized outside the handler");
    }

    // ─── After every run: everyone can get out ───────────────────────────────

    function afterInvariant() public {
        distributorHandler.drain();
        marketHandler.drain();
        vaultHandler.drain();

        RewardDistributor.Pending memory p = distributor.pendingReport();
        assertTrue(p.epoch == 0 || p.vetoed, "a report is still pending");
        assertEq(distributor.totalClaimed(), distributor.totalAllocated(), "allocated rewards left unclaimed");
        assertEq(
            token.balanceOf(address(distributor)),
            distributor.totalFunded() - distributor.totalAllocated(),
            "distributor holds other than the unallocated pool"
        );
        assertEq(market.totalEscrowed(), 0, "escrow left after closing every job");
        assertEq(token.balanceOf(address(market)), 0, "market kept tokens");
        assertEq(vault.totalStaked() + vault.totalUnbonding(), 0, "stake left after every exit");
        assertEq(token.balanceOf(address(vault)), 0, "vault kept tokens");

        invariant_VaultHoldsEveryStakedAndUnbondingToken();
        invariant_SlashNeverTakesMoreThanTheStakeItHits();
        invariant_DistributorNeverPaysMoreThanFunded();
        invariant_ClaimsNeverExceedCommittedCumulative();
        invariant_MarketEscrowMatchesOpenJobs();
        invariant_FinalizedEpochOnlyIncreases();
    }

    // ─── The handlers reach every transition ─────────────────────────────────

    /// @dev A seeded random walk over exactly the selectors the campaign targets, with
    /// random arguments: proves the handlers, not just the fuzzer's luck, reach finalized
    /// epochs, vetoes, claims, slashes and every way a job closes.
    function test_HandlersReachEveryTransition() public {
        FuzzSelector[] memory targets = targetSelectors();
        for (uint256 k; k < 400; ++k) {
            uint256 r = uint256(keccak256(abi.encode("walk", k)));
            FuzzSelector memory t = targets[r % targets.length];
            bytes4 selector = t.selectors[(r >> 8) % t.selectors.length];
            bytes memory args = abi.encode(
                uint256(keccak256(abi.encode(r, 1))),
                uint256(keccak256(abi.encode(r, 2))),
                uint256(keccak256(abi.encode(r, 3))),
                uint256(keccak256(abi.encode(r, 4)))
            );
            (bool ok,) = t.addr.call(bytes.concat(selector, args));
            ok; // a handler may revert; fail_on_revert is off for the campaign too
        }

        string[9] memory distributorActions = [
            "fund",
            "submit",
            "veto",
            "finalize",
            "claim",
            "forgedClaimRefused",
            "replayRefused",
            "claimWhilePaused",
            "staleEpochRefused"
        ];
        for (uint256 i; i < distributorActions.length; ++i) {
            assertGt(distributorHandler.counts(distributorActions[i]), 0, distributorActions[i]);
        }
        string[17] memory marketActions = [
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
            "replayRefused"
        ];
        for (uint256 i; i < marketActions.length; ++i) {
            assertGt(marketHandler.counts(marketActions[i]), 0, marketActions[i]);
        }
        string[6] memory vaultActions =
            ["stake", "requestUnstake", "withdraw", "unjail", "updateSpec", "requestUnstakeWhilePaused"];
        for (uint256 i; i < vaultActions.length; ++i) {
            assertGt(vaultHandler.counts(vaultActions[i]), 0, vaultActions[i]);
        }
        assertGt(ledger.recordCount(), 0, "no slash applied");
        assertGt(ledger.notApplied(), 0, "no refused slash reported");
        assertGt(ledger.rateLimited(), 0, "no slash hit the rate limit");
        assertGt(distributor.lastFinalizedEpoch(), 0, "no epoch finalized");

        invariant_VaultHoldsEveryStakedAndUnbondingToken();
        invariant_SlashNeverTakesMoreThanTheStakeItHits();
        invariant_DistributorNeverPaysMoreThanFunded();
        invariant_ClaimsNeverExceedCommittedCumulative();
        invariant_MarketEscrowMatchesOpenJobs();
        invariant_FinalizedEpochOnlyIncreases();
        afterInvariant();
    }

    // ─── Setup helpers ───────────────────────────────────────────────────────

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
        s = new bytes4[](7);
        s[6] = VaultHandler.pauseInterlude.selector;
        s[0] = VaultHandler.stake.selector;
        s[1] = VaultHandler.requestUnstake.selector;
        s[2] = VaultHandler.withdraw.selector;
        s[3] = VaultHandler.unjail.selector;
        s[4] = VaultHandler.updateSpec.selector;
        s[5] = VaultHandler.warp.selector;
    }

    function _distributorSelectors() private pure returns (bytes4[] memory s) {
        s = new bytes4[](9);
        s[7] = DistributorHandler.pauseInterlude.selector;
        s[8] = DistributorHandler.submitStaleEpoch.selector;
        s[0] = DistributorHandler.fund.selector;
        s[1] = DistributorHandler.submitEpoch.selector;
        s[2] = DistributorHandler.vetoEpoch.selector;
        s[3] = DistributorHandler.replayVetoed.selector;
        s[4] = DistributorHandler.finalizeEpoch.selector;
        s[5] = DistributorHandler.claim.selector;
        s[6] = DistributorHandler.claimForged.selector;
    }

    function _marketSelectors() private pure returns (bytes4[] memory s) {
        s = new bytes4[](12);
        s[10] = MarketHandler.pauseInterlude.selector;
        s[11] = MarketHandler.reassignJob.selector;
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
    }
}
