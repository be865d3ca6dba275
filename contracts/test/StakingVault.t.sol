// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {IERC20Errors} from "@openzeppelin/contracts/interfaces/draft-IERC6093.sol";
import {IAccessControl} from "@openzeppelin/contracts/access/IAccessControl.sol";
import {Pausable} from "@openzeppelin/contracts/utils/Pausable.sol";
import {SafeCast} from "@openzeppelin/contracts/utils/math/SafeCast.sol";
import {Vm} from "forge-std/Vm.sol";

import {PermitSigner} from "./SwarmToken.t.sol";
import {SwarmAccess} from "../src/base/SwarmAccess.sol";
import {StakingVault} from "../src/StakingVault.sol";

contract StakingVaultTest is PermitSigner {
    uint32 internal constant GPUS = 4;
    uint256 internal constant MIN = uint256(MIN_STAKE_PER_GPU) * GPUS; // 4,000 tokens
    uint256 internal constant STAKE = 10_000 ether;
    uint16 internal constant BPS = 10_000;
    bytes32 internal constant SPEC = keccak256("8x H100 80GB");
    bytes32 internal constant REASON = "downtime";
    bytes32 internal constant EVIDENCE = keccak256("evidence");

    address internal slasher = makeAddr("slasher");
    address internal permitter;
    uint256 internal permitterKey;

    function setUp() public override {
        super.setUp();
        (permitter, permitterKey) = makeAddrAndKey("permitter");
        vm.startPrank(admin);
        vault.grantRole(vault.SLASHER_ROLE(), slasher);
        token.transfer(permitter, ACTOR_FUNDS);
        vm.stopPrank();
    }

    // ─── Helpers ─────────────────────────────────────────────────────────────

    function _register(address provider) internal {
        vm.prank(provider);
        vault.register(SPEC, GPUS);
    }

    function _stake(address provider, uint256 amount) internal {
        vm.prank(provider);
        vault.stake(amount);
    }

    function _unstake(address provider, uint256 amount) internal {
        vm.prank(provider);
        vault.requestUnstake(amount);
    }

    function _slash(address provider, uint16 bps) internal returns (uint256) {
        vm.prank(slasher);
        return vault.slash(provider, bps, REASON, EVIDENCE);
    }

    function _jail(address provider, uint64 until) internal {
        vm.prank(slasher);
        vault.jail(provider, until);
    }

    function _tombstone(address provider) internal {
        vm.prank(slasher);
        vault.tombstone(provider);
    }

    function _pause() internal {
        vm.prank(admin);
        vault.pause();
    }

    function _setRateLimit(uint128 capacity, uint128 refill) internal {
        vm.prank(admin);
        vault.setSlashRateLimit(capacity, refill);
    }

    function _info(address provider) internal view returns (StakingVault.ProviderView memory) {
        return vault.providerInfo(provider);
    }

    function _expectUnauthorized(address account, bytes32 role) internal {
        vm.expectRevert(abi.encodeWithSelector(IAccessControl.AccessControlUnauthorizedAccount.selector, account, role));
    }

    function _expectNoLogs() internal {
        assertEq(vm.getRecordedLogs().length, 0, "unexpected event");
    }

    /// @dev The vault holds exactly what it accounts for.
    function _assertVaultSolvent() internal view {
        assertEq(token.balanceOf(address(vault)), vault.totalStaked() + vault.totalUnbonding());
    }

    function _now() internal view returns (uint64) {
        return uint64(block.timestamp);
    }

    // ─── Constructor ─────────────────────────────────────────────────────────

    function test_ConstructorSetsParametersAndFullBucket() public view {
        assertEq(address(vault.token()), address(token));
        assertEq(vault.minStakePerGpu(), MIN_STAKE_PER_GPU);
        assertEq(vault.unbondingPeriod(), UNBONDING_PERIOD);
        assertEq(vault.maxSlashBps(), MAX_SLASH_BPS);
        assertEq(vault.treasuryShareBps(), TREASURY_SHARE_BPS);
        assertEq(vault.treasury(), treasury);
        assertEq(vault.slashBucketCapacity(), BUCKET_CAPACITY);
        assertEq(vault.slashRefillPerSecond(), BUCKET_REFILL);
        assertEq(vault.availableSlashCapacity(), BUCKET_CAPACITY);
        assertTrue(vault.hasRole(vault.DEFAULT_ADMIN_ROLE(), admin));
        assertTrue(vault.hasRole(vault.PAUSER_ROLE(), admin));
    }

    function _params() internal view returns (StakingVault.Params memory) {
        return StakingVault.Params({
            minStakePerGpu: MIN_STAKE_PER_GPU,
            unbondingPeriod: UNBONDING_PERIOD,
            maxSlashBps: MAX_SLASH_BPS,
            treasuryShareBps: TREASURY_SHARE_BPS,
            treasury: treasury,
            slashBucketCapacity: BUCKET_CAPACITY,
            slashRefillPerSecond: BUCKET_REFILL
        });
    }

    function test_RevertWhen_ConstructorZeroToken() public {
        vm.expectRevert(SwarmAccess.ZeroAddress.selector);
        new StakingVault(IERC20(address(0)), admin, _params());
    }

    function test_RevertWhen_ConstructorZeroAdmin() public {
        vm.expectRevert(SwarmAccess.ZeroAddress.selector);
        new StakingVault(token, address(0), _params());
    }

    function test_RevertWhen_ConstructorInvalidParams() public {
        StakingVault.Params memory p = _params();
        p.unbondingPeriod = 91 days;
        vm.expectRevert(abi.encodeWithSelector(StakingVault.UnbondingPeriodTooLong.selector, 91 days, 90 days));
        new StakingVault(token, admin, p);
    }

    // ─── register ────────────────────────────────────────────────────────────

    function test_RegisterRecordsSpecAndGpus() public {
        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.Registered(alice, SPEC, GPUS);
        _register(alice);

        StakingVault.ProviderView memory p = _info(alice);
        assertTrue(p.registered);
        assertFalse(p.tombstoned);
        assertEq(p.gpus, GPUS);
        assertEq(p.specHash, SPEC);
        assertEq(p.stake, 0);
        assertEq(p.jailedUntil, 0);
        assertEq(vault.minStake(alice), MIN);
    }

    function test_RevertWhen_RegisterZeroGpus() public {
        vm.expectRevert(StakingVault.ZeroGpus.selector);
        vm.prank(alice);
        vault.register(SPEC, 0);
    }

    function test_RevertWhen_RegisterTwice() public {
        _register(alice);
        vm.expectRevert(abi.encodeWithSelector(StakingVault.AlreadyRegistered.selector, alice));
        vm.prank(alice);
        vault.register(SPEC, 1);
    }

    function test_RevertWhen_RegisterWhilePaused() public {
        _pause();
        vm.expectRevert(Pausable.EnforcedPause.selector);
        vm.prank(alice);
        vault.register(SPEC, GPUS);
    }

    // ─── updateSpec ──────────────────────────────────────────────────────────

    function test_UpdateSpecChangesHashAndMinimum() public {
        _registerAndStake(alice, GPUS, STAKE);
        bytes32 newSpec = keccak256("16x H100");
        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.SpecUpdated(alice, newSpec, 16);
        vm.prank(alice);
        vault.updateSpec(newSpec, 16);

        assertEq(_info(alice).specHash, newSpec);
        assertEq(_info(alice).gpus, 16);
        assertEq(vault.minStake(alice), 16 * uint256(MIN_STAKE_PER_GPU));
        // 10,000 staked is now below the 16,000 minimum.
        assertFalse(vault.isEligible(alice));
    }

    function test_RevertWhen_UpdateSpecZeroGpus() public {
        _register(alice);
        vm.expectRevert(StakingVault.ZeroGpus.selector);
        vm.prank(alice);
        vault.updateSpec(SPEC, 0);
    }

    function test_RevertWhen_UpdateSpecNotRegistered() public {
        vm.expectRevert(abi.encodeWithSelector(StakingVault.NotRegistered.selector, carol));
        vm.prank(carol);
        vault.updateSpec(SPEC, 1);
    }

    function test_RevertWhen_UpdateSpecWhilePaused() public {
        _register(alice);
        _pause();
        vm.expectRevert(Pausable.EnforcedPause.selector);
        vm.prank(alice);
        vault.updateSpec(SPEC, 1);
    }

    // ─── stake ───────────────────────────────────────────────────────────────

    function test_StakeMovesTokensAndAddsToStake() public {
        _register(alice);
        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.Staked(alice, STAKE, STAKE);
        _stake(alice, STAKE);

        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.Staked(alice, 1 ether, STAKE + 1 ether);
        _stake(alice, 1 ether);

        assertEq(_info(alice).stake, STAKE + 1 ether);
        assertEq(vault.totalStaked(), STAKE + 1 ether);
        assertEq(token.balanceOf(alice), ACTOR_FUNDS - STAKE - 1 ether);
        _assertVaultSolvent();
    }

    function test_StakeAllowedWhileJailed() public {
        _registerAndStake(alice, GPUS, STAKE);
        _jail(alice, _now() + 1 days);
        _stake(alice, 1 ether);
        assertEq(_info(alice).stake, STAKE + 1 ether);
    }

    function test_RevertWhen_StakeZero() public {
        _register(alice);
        vm.expectRevert(StakingVault.ZeroAmount.selector);
        _stake(alice, 0);
    }

    function test_RevertWhen_StakeNotRegistered() public {
        vm.expectRevert(abi.encodeWithSelector(StakingVault.NotRegistered.selector, alice));
        _stake(alice, STAKE);
    }

    function test_RevertWhen_StakeTombstoned() public {
        _registerAndStake(alice, GPUS, STAKE);
        _tombstone(alice);
        vm.expectRevert(abi.encodeWithSelector(StakingVault.ProviderTombstoned.selector, alice));
        _stake(alice, STAKE);
    }

    function test_RevertWhen_StakeWhilePaused() public {
        _register(alice);
        _pause();
        vm.expectRevert(Pausable.EnforcedPause.selector);
        _stake(alice, STAKE);
    }

    function test_RevertWhen_StakeWithoutAllowance() public {
        _register(carol); // carol approved the market, not the vault
        vm.expectRevert(
            abi.encodeWithSelector(IERC20Errors.ERC20InsufficientAllowance.selector, address(vault), 0, STAKE)
        );
        _stake(carol, STAKE);
    }

    function test_RevertWhen_StakeAboveBalance() public {
        _register(alice);
        vm.expectRevert(
            abi.encodeWithSelector(IERC20Errors.ERC20InsufficientBalance.selector, alice, ACTOR_FUNDS, ACTOR_FUNDS + 1)
        );
        _stake(alice, ACTOR_FUNDS + 1);
    }

    function test_RevertWhen_StakeOverflowsUint128() public {
        _register(alice);
        uint256 amount = uint256(type(uint128).max) + 1;
        vm.expectRevert(abi.encodeWithSelector(SafeCast.SafeCastOverflowedUintDowncast.selector, 128, amount));
        _stake(alice, amount);
    }

    // ─── stakeWithPermit ─────────────────────────────────────────────────────

    function _stakeWithPermit(uint256 amount, uint8 v, bytes32 r, bytes32 s, uint256 deadline) internal {
        vm.prank(permitter);
        vault.stakeWithPermit(amount, deadline, v, r, s);
    }

    function test_StakeWithPermitNeedsNoPriorApproval() public {
        _register(permitter);
        uint256 deadline = block.timestamp + 1 hours;
        (uint8 v, bytes32 r, bytes32 s) = _signPermit(permitterKey, permitter, address(vault), STAKE, deadline);

        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.Staked(permitter, STAKE, STAKE);
        _stakeWithPermit(STAKE, v, r, s, deadline);

        assertEq(_info(permitter).stake, STAKE);
        assertEq(token.nonces(permitter), 1);
        assertEq(token.allowance(permitter, address(vault)), 0);
        assertEq(token.balanceOf(permitter), ACTOR_FUNDS - STAKE);
    }

    function test_StakeWithPermitSucceedsWhenPermitFrontRun() public {
        _register(permitter);
        uint256 deadline = block.timestamp + 1 hours;
        (uint8 v, bytes32 r, bytes32 s) = _signPermit(permitterKey, permitter, address(vault), STAKE, deadline);

        // Someone watching the mempool submits the permit first.
        vm.prank(makeAddr("griefer"));
        token.permit(permitter, address(vault), STAKE, deadline, v, r, s);

        _stakeWithPermit(STAKE, v, r, s, deadline);
        assertEq(_info(permitter).stake, STAKE);
        assertEq(token.nonces(permitter), 1);
        assertEq(token.allowance(permitter, address(vault)), 0);
    }

    function test_RevertWhen_StakeWithBadPermitAndNoAllowance() public {
        _register(permitter);
        uint256 deadline = block.timestamp + 1 hours;
        (, uint256 otherKey) = makeAddrAndKey("other");
        (uint8 v, bytes32 r, bytes32 s) = _signPermit(otherKey, permitter, address(vault), STAKE, deadline);
        vm.expectRevert(
            abi.encodeWithSelector(IERC20Errors.ERC20InsufficientAllowance.selector, address(vault), 0, STAKE)
        );
        _stakeWithPermit(STAKE, v, r, s, deadline);
    }

    function test_RevertWhen_StakeWithPermitWhilePaused() public {
        _register(permitter);
        _pause();
        uint256 deadline = block.timestamp + 1 hours;
        (uint8 v, bytes32 r, bytes32 s) = _signPermit(permitterKey, permitter, address(vault), STAKE, deadline);
        vm.expectRevert(Pausable.EnforcedPause.selector);
        _stakeWithPermit(STAKE, v, r, s, deadline);
    }

    // ─── requestUnstake ──────────────────────────────────────────────────────

    function test_RequestUnstakeMovesStakeToUnbonding() public {
        _registerAndStake(alice, GPUS, STAKE);
        uint64 release = _now() + UNBONDING_PERIOD;
        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.UnstakeRequested(alice, 3_000 ether, 3_000 ether, release);
        _unstake(alice, 3_000 ether);

        StakingVault.ProviderView memory p = _info(alice);
        assertEq(p.stake, STAKE - 3_000 ether);
        assertEq(p.unbonding, 3_000 ether);
        assertEq(p.unbondingEnd, release);
        assertEq(vault.totalStaked(), STAKE - 3_000 ether);
        assertEq(vault.totalUnbonding(), 3_000 ether);
        assertEq(token.balanceOf(alice), ACTOR_FUNDS - STAKE); // nothing paid yet
        _assertVaultSolvent();
    }

    function test_RequestUnstakeAgainResetsReleaseTime() public {
        _registerAndStake(alice, GPUS, STAKE);
        _unstake(alice, 1_000 ether);
        vm.warp(block.timestamp + 3 days);
        uint64 release = _now() + UNBONDING_PERIOD;
        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.UnstakeRequested(alice, 2_000 ether, 3_000 ether, release);
        _unstake(alice, 2_000 ether);
        assertEq(_info(alice).unbonding, 3_000 ether);
        assertEq(_info(alice).unbondingEnd, release);
    }

    function test_RequestUnstakeAllowedWhilePaused() public {
        _registerAndStake(alice, GPUS, STAKE);
        _pause();
        _unstake(alice, STAKE);
        assertEq(_info(alice).unbonding, STAKE);
        assertEq(_info(alice).stake, 0);
    }

    function test_RevertWhen_UnstakeZero() public {
        _registerAndStake(alice, GPUS, STAKE);
        vm.expectRevert(StakingVault.ZeroAmount.selector);
        _unstake(alice, 0);
    }

    function test_RevertWhen_UnstakeAboveStake() public {
        _registerAndStake(alice, GPUS, STAKE);
        vm.expectRevert(abi.encodeWithSelector(StakingVault.InsufficientStake.selector, STAKE, STAKE + 1));
        _unstake(alice, STAKE + 1);
    }

    function test_RevertWhen_UnstakeNotRegistered() public {
        vm.expectRevert(abi.encodeWithSelector(StakingVault.NotRegistered.selector, carol));
        _unstake(carol, 1);
    }

    // ─── withdraw ────────────────────────────────────────────────────────────

    function _withdraw(address provider) internal {
        vm.prank(provider);
        vault.withdraw();
    }

    function test_WithdrawPaysUnbondingAfterPeriod() public {
        _registerAndStake(alice, GPUS, STAKE);
        _unstake(alice, 4_000 ether);
        vm.warp(block.timestamp + UNBONDING_PERIOD);

        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.Withdrawn(alice, 4_000 ether);
        _withdraw(alice);

        assertEq(token.balanceOf(alice), ACTOR_FUNDS - STAKE + 4_000 ether);
        assertEq(_info(alice).unbonding, 0);
        assertEq(_info(alice).stake, STAKE - 4_000 ether);
        assertEq(vault.totalUnbonding(), 0);
        _assertVaultSolvent();
    }

    function test_RevertWhen_WithdrawNothingUnbonding() public {
        _registerAndStake(alice, GPUS, STAKE);
        vm.expectRevert(StakingVault.NothingToWithdraw.selector);
        _withdraw(alice);
    }

    function test_RevertWhen_WithdrawTwice() public {
        _registerAndStake(alice, GPUS, STAKE);
        _unstake(alice, STAKE);
        vm.warp(block.timestamp + UNBONDING_PERIOD);
        _withdraw(alice);
        vm.expectRevert(StakingVault.NothingToWithdraw.selector);
        _withdraw(alice);
    }

    function test_RevertWhen_WithdrawStillUnbonding() public {
        _registerAndStake(alice, GPUS, STAKE);
        _unstake(alice, STAKE);
        uint64 release = _now() + UNBONDING_PERIOD;
        vm.warp(release - 1);
        vm.expectRevert(abi.encodeWithSelector(StakingVault.StillUnbonding.selector, release, release - 1));
        _withdraw(alice);
    }

    function test_WithdrawWorksWhilePausedJailedAndTombstoned() public {
        _registerAndStake(alice, GPUS, STAKE);
        _unstake(alice, STAKE);
        _tombstone(alice); // also jails for ever
        _pause();
        vm.warp(block.timestamp + UNBONDING_PERIOD);
        _withdraw(alice);
        assertEq(token.balanceOf(alice), ACTOR_FUNDS);
    }

    function test_WithdrawWorksWhileJailed() public {
        _registerAndStake(alice, GPUS, STAKE);
        _unstake(alice, STAKE);
        _jail(alice, _now() + 365 days);
        vm.warp(block.timestamp + UNBONDING_PERIOD);
        _withdraw(alice);
        assertEq(token.balanceOf(alice), ACTOR_FUNDS);
    }

    // ─── unjail ──────────────────────────────────────────────────────────────

    function _unjail(address provider) internal {
        vm.prank(provider);
        vault.unjail();
    }

    function test_UnjailAfterJailServed() public {
        _registerAndStake(alice, GPUS, STAKE);
        uint64 until = _now() + 1 days;
        _jail(alice, until);
        vm.warp(until);
        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.Unjailed(alice);
        _unjail(alice);
        assertEq(_info(alice).jailedUntil, 0);
        assertTrue(vault.isEligible(alice));
    }

    function test_RevertWhen_UnjailNotRegistered() public {
        vm.expectRevert(abi.encodeWithSelector(StakingVault.NotRegistered.selector, carol));
        _unjail(carol);
    }

    function test_RevertWhen_UnjailNotJailed() public {
        _registerAndStake(alice, GPUS, STAKE);
        vm.expectRevert(abi.encodeWithSelector(StakingVault.NotJailed.selector, alice));
        _unjail(alice);
    }

    function test_RevertWhen_UnjailBeforeJailServed() public {
        _registerAndStake(alice, GPUS, STAKE);
        uint64 until = _now() + 1 days;
        _jail(alice, until);
        vm.warp(until - 1);
        vm.expectRevert(abi.encodeWithSelector(StakingVault.ProviderJailed.selector, alice, until));
        _unjail(alice);
    }

    function test_RevertWhen_UnjailTombstoned() public {
        _registerAndStake(alice, GPUS, STAKE);
        _tombstone(alice);
        vm.warp(type(uint64).max);
        vm.expectRevert(abi.encodeWithSelector(StakingVault.ProviderTombstoned.selector, alice));
        _unjail(alice);
    }

    function test_RevertWhen_UnjailStakeBelowMinimum() public {
        _registerAndStake(alice, GPUS, STAKE);
        uint64 until = _now() + 1 days;
        _jail(alice, until);
        _unstake(alice, STAKE - MIN + 1);
        vm.warp(until);
        vm.expectRevert(abi.encodeWithSelector(StakingVault.StakeBelowMinimum.selector, alice, MIN - 1, MIN));
        _unjail(alice);
    }

    function test_UnjailAllowedWhilePaused() public {
        _registerAndStake(alice, GPUS, STAKE);
        _jail(alice, _now() + 1);
        _pause();
        vm.warp(block.timestamp + 1);
        _unjail(alice);
        assertEq(_info(alice).jailedUntil, 0);
    }

    // ─── slash ───────────────────────────────────────────────────────────────

    function test_RevertWhen_SlashWithoutSlasherRole() public {
        _registerAndStake(alice, GPUS, STAKE);
        _expectUnauthorized(bob, vault.SLASHER_ROLE());
        vm.prank(bob);
        vault.slash(alice, 100, REASON, EVIDENCE);
    }

    function test_RevertWhen_SlashZeroBps() public {
        _registerAndStake(alice, GPUS, STAKE);
        vm.expectRevert(abi.encodeWithSelector(StakingVault.InvalidBps.selector, 0, MAX_SLASH_BPS));
        _slash(alice, 0);
    }

    function test_RevertWhen_SlashAboveMaxBps() public {
        _registerAndStake(alice, GPUS, STAKE);
        vm.expectRevert(abi.encodeWithSelector(StakingVault.InvalidBps.selector, MAX_SLASH_BPS + 1, MAX_SLASH_BPS));
        _slash(alice, MAX_SLASH_BPS + 1);
    }

    function test_RevertWhen_SlashNotRegistered() public {
        vm.expectRevert(abi.encodeWithSelector(StakingVault.NotRegistered.selector, carol));
        _slash(carol, 100);
    }

    function test_SlashSplitsProportionallyAcrossStakeAndUnbonding() public {
        _registerAndStake(alice, GPUS, STAKE);
        _unstake(alice, 2_000 ether); // 8,000 active, 2,000 unbonding
        uint256 supplyBefore = token.totalSupply();

        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.Slashed(alice, REASON, 2_000 ether, 500 ether, 2_500, EVIDENCE, 1_250 ether);
        vm.expectEmit(true, true, true, true, address(token));
        emit IERC20.Transfer(address(vault), treasury, 1_250 ether);
        vm.expectEmit(true, true, true, true, address(token));
        emit IERC20.Transfer(address(vault), address(0), 1_250 ether);
        uint256 slashed = _slash(alice, 2_500);

        assertEq(slashed, 2_500 ether);
        assertEq(_info(alice).stake, 6_000 ether);
        assertEq(_info(alice).unbonding, 1_500 ether);
        assertEq(vault.totalStaked(), 6_000 ether);
        assertEq(vault.totalUnbonding(), 1_500 ether);
        assertEq(token.balanceOf(treasury), 1_250 ether);
        assertEq(token.totalSupply(), supplyBefore - 1_250 ether);
        assertEq(vault.availableSlashCapacity(), BUCKET_CAPACITY - 2_500 ether);
        _assertVaultSolvent();
    }

    function test_SlashAllToTreasuryBurnsNothing() public {
        vm.prank(admin);
        vault.setSlashPolicy(MAX_SLASH_BPS, BPS, treasury);
        _registerAndStake(alice, GPUS, STAKE);
        uint256 supplyBefore = token.totalSupply();
        _slash(alice, 1_000);
        assertEq(token.balanceOf(treasury), 1_000 ether);
        assertEq(token.totalSupply(), supplyBefore);
    }

    function test_SlashWithZeroTreasuryShareBurnsAll() public {
        vm.prank(admin);
        vault.setSlashPolicy(MAX_SLASH_BPS, 0, treasury);
        _registerAndStake(alice, GPUS, STAKE);
        uint256 supplyBefore = token.totalSupply();
        _slash(alice, 1_000);
        assertEq(token.balanceOf(treasury), 0);
        assertEq(token.totalSupply(), supplyBefore - 1_000 ether);
        _assertVaultSolvent();
    }

    function test_SlashOfEmptyProviderTakesNothing() public {
        _register(alice);
        uint256 supplyBefore = token.totalSupply();
        assertEq(_slash(alice, 1_000), 0);
        assertEq(token.totalSupply(), supplyBefore);
        assertEq(vault.availableSlashCapacity(), BUCKET_CAPACITY);
    }

    function test_SlashWorksWhilePaused() public {
        _registerAndStake(alice, GPUS, STAKE);
        _pause();
        assertEq(_slash(alice, 1_000), 1_000 ether);
        assertEq(_info(alice).stake, STAKE - 1_000 ether);
    }

    function test_SlashRateLimitedScalesBothPartsAndEmits() public {
        _setRateLimit(1_000 ether, 1 ether);
        _registerAndStake(alice, GPUS, STAKE);
        _unstake(alice, 2_000 ether); // asks 2,000 + 500; bucket holds 1,000

        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.SlashRateLimited(alice, 2_500 ether, 1_000 ether);
        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.Slashed(alice, REASON, 800 ether, 200 ether, 2_500, EVIDENCE, 500 ether);
        assertEq(_slash(alice, 2_500), 1_000 ether);

        assertEq(_info(alice).stake, 7_200 ether);
        assertEq(_info(alice).unbonding, 1_800 ether);
        assertEq(vault.availableSlashCapacity(), 0);
        _assertVaultSolvent();
    }

    function test_SlashBucketRefillsOverTimeUpToCapacity() public {
        _setRateLimit(1_000 ether, 1 ether);
        _registerAndStake(alice, GPUS, STAKE);
        _slash(alice, 1_000); // takes the whole bucket (1,000)
        assertEq(vault.availableSlashCapacity(), 0);

        vm.warp(block.timestamp + 100);
        assertEq(vault.availableSlashCapacity(), 100 ether);
        // A slash now is limited to the 100 refilled.
        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.SlashRateLimited(alice, 900 ether, 100 ether);
        assertEq(_slash(alice, 1_000), 100 ether);
        assertEq(vault.availableSlashCapacity(), 0);

        vm.warp(block.timestamp + 10 days);
        assertEq(vault.availableSlashCapacity(), 1_000 ether);
    }

    function test_SlashWithEmptyBucketTakesNothing() public {
        _setRateLimit(0, 0);
        _registerAndStake(alice, GPUS, STAKE);
        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.SlashRateLimited(alice, 1_000 ether, 0);
        assertEq(_slash(alice, 1_000), 0);
        assertEq(_info(alice).stake, STAKE);
    }

    // ─── jail ────────────────────────────────────────────────────────────────

    function test_JailSetsReleaseAndBlocksEligibility() public {
        _registerAndStake(alice, GPUS, STAKE);
        uint64 until = _now() + 1 days;
        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.Jailed(alice, until);
        _jail(alice, until);
        assertEq(_info(alice).jailedUntil, until);
        assertFalse(vault.isEligible(alice));
        vm.warp(until);
        // Serving the time is not enough: the provider must unjail, which re-checks its stake.
        assertFalse(vault.isEligible(alice));
        vm.expectRevert(abi.encodeWithSelector(StakingVault.ProviderJailed.selector, alice, until));
        vault.requireEligible(alice);
        vm.prank(alice);
        vault.unjail();
        assertTrue(vault.isEligible(alice));
    }

    function test_JailExtendsLaterRelease() public {
        _registerAndStake(alice, GPUS, STAKE);
        _jail(alice, _now() + 1 days);
        _jail(alice, _now() + 2 days);
        assertEq(_info(alice).jailedUntil, _now() + 2 days);
    }

    function test_JailNeverShortens() public {
        _registerAndStake(alice, GPUS, STAKE);
        uint64 until = _now() + 2 days;
        _jail(alice, until);
        vm.recordLogs();
        _jail(alice, _now() + 1 days);
        _expectNoLogs();
        assertEq(_info(alice).jailedUntil, until);
    }

    function test_RevertWhen_JailWithoutSlasherRole() public {
        _registerAndStake(alice, GPUS, STAKE);
        _expectUnauthorized(alice, vault.SLASHER_ROLE());
        vm.prank(alice);
        vault.jail(bob, _now() + 1);
    }

    function test_RevertWhen_JailNotRegistered() public {
        vm.expectRevert(abi.encodeWithSelector(StakingVault.NotRegistered.selector, carol));
        _jail(carol, _now() + 1);
    }

    // ─── tombstone ───────────────────────────────────────────────────────────

    function test_TombstoneJailsForEver() public {
        _registerAndStake(alice, GPUS, STAKE);
        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.Tombstoned(alice);
        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.Jailed(alice, type(uint64).max);
        _tombstone(alice);

        assertTrue(_info(alice).tombstoned);
        assertEq(_info(alice).jailedUntil, type(uint64).max);
        vm.warp(uint256(type(uint64).max) + 1);
        assertFalse(vault.isEligible(alice));
        vm.expectRevert(abi.encodeWithSelector(StakingVault.ProviderTombstoned.selector, alice));
        vault.requireEligible(alice);
    }

    function test_TombstoneIsIdempotent() public {
        _registerAndStake(alice, GPUS, STAKE);
        _tombstone(alice);
        vm.recordLogs();
        _tombstone(alice);
        _expectNoLogs();
        assertTrue(_info(alice).tombstoned);
        assertEq(_info(alice).jailedUntil, type(uint64).max);
    }

    function test_TombstoneOverridesEarlierJail() public {
        _registerAndStake(alice, GPUS, STAKE);
        _jail(alice, _now() + 1 days);
        _tombstone(alice);
        assertEq(_info(alice).jailedUntil, type(uint64).max);
    }

    function test_TombstoneBlocksUnjailAndStake() public {
        _registerAndStake(alice, GPUS, STAKE);
        _tombstone(alice);
        vm.expectRevert(abi.encodeWithSelector(StakingVault.ProviderTombstoned.selector, alice));
        _unjail(alice);
        vm.expectRevert(abi.encodeWithSelector(StakingVault.ProviderTombstoned.selector, alice));
        _stake(alice, 1);
    }

    function test_RevertWhen_TombstoneWithoutSlasherRole() public {
        _registerAndStake(alice, GPUS, STAKE);
        _expectUnauthorized(bob, vault.SLASHER_ROLE());
        vm.prank(bob);
        vault.tombstone(alice);
    }

    function test_RevertWhen_TombstoneNotRegistered() public {
        vm.expectRevert(abi.encodeWithSelector(StakingVault.NotRegistered.selector, carol));
        _tombstone(carol);
    }

    // ─── Views ───────────────────────────────────────────────────────────────

    function test_MinStakeScalesWithGpusAndIsZeroForStrangers() public {
        _registerAndStake(alice, 3, 0);
        assertEq(vault.minStake(alice), 3 * uint256(MIN_STAKE_PER_GPU));
        assertEq(vault.minStake(carol), 0);
        vm.prank(admin);
        vault.setMinStakePerGpu(5 ether);
        assertEq(vault.minStake(alice), 15 ether);
    }

    function test_EligibleAtExactlyMinimumStake() public {
        _registerAndStake(alice, GPUS, MIN);
        assertTrue(vault.isEligible(alice));
        vault.requireEligible(alice); // does not revert
        _unstake(alice, 1);
        assertFalse(vault.isEligible(alice));
    }

    function test_RevertWhen_RequireEligibleNotRegistered() public {
        assertFalse(vault.isEligible(carol));
        vm.expectRevert(abi.encodeWithSelector(StakingVault.NotRegistered.selector, carol));
        vault.requireEligible(carol);
    }

    function test_RevertWhen_RequireEligibleTombstoned() public {
        _registerAndStake(alice, GPUS, STAKE);
        _tombstone(alice);
        vm.expectRevert(abi.encodeWithSelector(StakingVault.ProviderTombstoned.selector, alice));
        vault.requireEligible(alice);
    }

    function test_RevertWhen_RequireEligibleJailed() public {
        _registerAndStake(alice, GPUS, STAKE);
        uint64 until = _now() + 1 hours;
        _jail(alice, until);
        assertFalse(vault.isEligible(alice));
        vm.expectRevert(abi.encodeWithSelector(StakingVault.ProviderJailed.selector, alice, until));
        vault.requireEligible(alice);
    }

    function test_RevertWhen_RequireEligibleStakeBelowMinimum() public {
        _registerAndStake(alice, GPUS, MIN - 1);
        assertFalse(vault.isEligible(alice));
        vm.expectRevert(abi.encodeWithSelector(StakingVault.StakeBelowMinimum.selector, alice, MIN - 1, MIN));
        vault.requireEligible(alice);
    }

    function test_AvailableSlashCapacityTracksSlashes() public {
        assertEq(vault.availableSlashCapacity(), BUCKET_CAPACITY);
        _registerAndStake(alice, GPUS, STAKE);
        _slash(alice, 1_000);
        assertEq(vault.availableSlashCapacity(), BUCKET_CAPACITY - 1_000 ether);
        vm.warp(block.timestamp + 10);
        assertEq(vault.availableSlashCapacity(), BUCKET_CAPACITY - 1_000 ether + 10 * uint256(BUCKET_REFILL));
    }

    // ─── Admin ───────────────────────────────────────────────────────────────

    function test_SetMinStakePerGpu() public {
        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.MinStakePerGpuSet(2_000 ether);
        vm.prank(admin);
        vault.setMinStakePerGpu(2_000 ether);
        assertEq(vault.minStakePerGpu(), 2_000 ether);
    }

    function test_RevertWhen_SetMinStakePerGpuZero() public {
        vm.expectRevert(StakingVault.ZeroAmount.selector);
        vm.prank(admin);
        vault.setMinStakePerGpu(0);
    }

    function test_RevertWhen_SetMinStakePerGpuWithoutAdmin() public {
        _expectUnauthorized(alice, vault.DEFAULT_ADMIN_ROLE());
        vm.prank(alice);
        vault.setMinStakePerGpu(1);
    }

    function test_SetUnbondingPeriodAppliesToLaterRequests() public {
        _registerAndStake(alice, GPUS, STAKE);
        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.UnbondingPeriodSet(90 days);
        vm.prank(admin);
        vault.setUnbondingPeriod(90 days);
        assertEq(vault.unbondingPeriod(), 90 days);
        _unstake(alice, 1 ether);
        assertEq(_info(alice).unbondingEnd, _now() + 90 days);
    }

    function test_SetUnbondingPeriodZeroAllowsImmediateWithdraw() public {
        vm.prank(admin);
        vault.setUnbondingPeriod(0);
        _registerAndStake(alice, GPUS, STAKE);
        _unstake(alice, STAKE);
        _withdraw(alice);
        assertEq(token.balanceOf(alice), ACTOR_FUNDS);
    }

    function test_RevertWhen_SetUnbondingPeriodTooLong() public {
        vm.expectRevert(abi.encodeWithSelector(StakingVault.UnbondingPeriodTooLong.selector, 90 days + 1, 90 days));
        vm.prank(admin);
        vault.setUnbondingPeriod(90 days + 1);
    }

    function test_RevertWhen_SetUnbondingPeriodWithoutAdmin() public {
        _expectUnauthorized(alice, vault.DEFAULT_ADMIN_ROLE());
        vm.prank(alice);
        vault.setUnbondingPeriod(1 days);
    }

    function test_SetSlashPolicy() public {
        address newTreasury = makeAddr("newTreasury");
        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.SlashPolicySet(BPS, 1_234, newTreasury);
        vm.prank(admin);
        vault.setSlashPolicy(BPS, 1_234, newTreasury);
        assertEq(vault.maxSlashBps(), BPS);
        assertEq(vault.treasuryShareBps(), 1_234);
        assertEq(vault.treasury(), newTreasury);
    }

    function test_RevertWhen_SetSlashPolicyZeroMaxBps() public {
        vm.expectRevert(abi.encodeWithSelector(StakingVault.InvalidBps.selector, 0, BPS));
        vm.prank(admin);
        vault.setSlashPolicy(0, 0, treasury);
    }

    function test_RevertWhen_SetSlashPolicyMaxBpsAboveLimit() public {
        vm.expectRevert(abi.encodeWithSelector(StakingVault.InvalidBps.selector, BPS + 1, BPS));
        vm.prank(admin);
        vault.setSlashPolicy(BPS + 1, 0, treasury);
    }

    function test_RevertWhen_SetSlashPolicyTreasuryShareAbove100Percent() public {
        vm.expectRevert(abi.encodeWithSelector(StakingVault.InvalidBps.selector, BPS + 1, BPS));
        vm.prank(admin);
        vault.setSlashPolicy(BPS, BPS + 1, treasury);
    }

    function test_RevertWhen_SetSlashPolicyZeroTreasury() public {
        vm.expectRevert(SwarmAccess.ZeroAddress.selector);
        vm.prank(admin);
        vault.setSlashPolicy(BPS, 0, address(0));
    }

    function test_RevertWhen_SetSlashPolicyWithoutAdmin() public {
        _expectUnauthorized(alice, vault.DEFAULT_ADMIN_ROLE());
        vm.prank(alice);
        vault.setSlashPolicy(BPS, 0, alice);
    }

    function test_SetSlashRateLimitKeepsLevelAndRefillsAtNewRate() public {
        _registerAndStake(alice, GPUS, STAKE);
        _slash(alice, 1_000); // level: capacity - 1,000
        vm.warp(block.timestamp + 10); // +100 refilled at the old rate

        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.SlashRateLimitSet(2 * BUCKET_CAPACITY, 1 ether);
        _setRateLimit(2 * BUCKET_CAPACITY, 1 ether);
        uint256 level = BUCKET_CAPACITY - 900 ether;
        assertEq(vault.availableSlashCapacity(), level);
        assertEq(vault.slashBucketCapacity(), 2 * BUCKET_CAPACITY);
        assertEq(vault.slashRefillPerSecond(), 1 ether);

        vm.warp(block.timestamp + 50);
        assertEq(vault.availableSlashCapacity(), level + 50 ether);
    }

    function test_SetSlashRateLimitClampsLevelToLowerCapacity() public {
        _setRateLimit(10 ether, 1 ether);
        assertEq(vault.availableSlashCapacity(), 10 ether);
        vm.warp(block.timestamp + 1 days);
        assertEq(vault.availableSlashCapacity(), 10 ether);
    }

    function test_RevertWhen_SetSlashRateLimitWithoutAdmin() public {
        _expectUnauthorized(alice, vault.DEFAULT_ADMIN_ROLE());
        vm.prank(alice);
        vault.setSlashRateLimit(1, 1);
    }

    // ─── Pause ───────────────────────────────────────────────────────────────

    function test_PauseAndUnpauseByPauser() public {
        vm.expectEmit(true, true, true, true, address(vault));
        emit Pausable.Paused(admin);
        _pause();
        assertTrue(vault.paused());

        vm.expectEmit(true, true, true, true, address(vault));
        emit Pausable.Unpaused(admin);
        vm.prank(admin);
        vault.unpause();
        assertFalse(vault.paused());
        _registerAndStake(alice, GPUS, STAKE); // works again
        assertEq(_info(alice).stake, STAKE);
    }

    function test_RevertWhen_PauseWithoutPauserRole() public {
        _expectUnauthorized(guardian, vault.PAUSER_ROLE());
        vm.prank(guardian);
        vault.pause();
    }

    function test_RevertWhen_UnpauseWithoutPauserRole() public {
        _pause();
        _expectUnauthorized(alice, vault.PAUSER_ROLE());
        vm.prank(alice);
        vault.unpause();
    }

    function test_GrantedPauserMayPause() public {
        address pauser = makeAddr("pauser");
        vm.startPrank(admin);
        vault.grantRole(vault.PAUSER_ROLE(), pauser);
        vm.stopPrank();
        vm.prank(pauser);
        vault.pause();
        assertTrue(vault.paused());
    }

    // ─── Fuzz ────────────────────────────────────────────────────────────────

    function testFuzz_StakeUnstakeWithdrawConservesBalances(
        uint256 stakeAmount,
        uint256 firstUnstake,
        uint256 secondUnstake,
        uint256 gap,
        uint256 wait
    ) public {
        stakeAmount = bound(stakeAmount, 1, ACTOR_FUNDS);
        firstUnstake = bound(firstUnstake, 1, stakeAmount);
        secondUnstake = bound(secondUnstake, 0, stakeAmount - firstUnstake);
        gap = bound(gap, 0, 2 * UNBONDING_PERIOD);
        wait = bound(wait, 0, 2 * UNBONDING_PERIOD);
        uint256 total = ACTOR_FUNDS + token.balanceOf(address(vault));

        _registerAndStake(alice, GPUS, stakeAmount);
        _unstake(alice, firstUnstake);
        vm.warp(block.timestamp + gap);
        if (secondUnstake > 0) _unstake(alice, secondUnstake);
        uint256 unbonding = firstUnstake + secondUnstake;
        uint64 release = _info(alice).unbondingEnd;
        assertEq(release, _now() - (secondUnstake > 0 ? 0 : gap) + UNBONDING_PERIOD);

        vm.warp(block.timestamp + wait);
        if (block.timestamp < release) {
            vm.expectRevert(abi.encodeWithSelector(StakingVault.StillUnbonding.selector, release, _now()));
            _withdraw(alice);
            assertEq(token.balanceOf(alice), ACTOR_FUNDS - stakeAmount);
        } else {
            _withdraw(alice);
            assertEq(token.balanceOf(alice), ACTOR_FUNDS - stakeAmount + unbonding);
            unbonding = 0;
        }
        assertEq(_info(alice).stake, stakeAmount - firstUnstake - secondUnstake);
        assertEq(_info(alice).unbonding, unbonding);
        assertEq(token.balanceOf(alice) + token.balanceOf(address(vault)), total);
        _assertVaultSolvent();
    }

    function testFuzz_WithdrawExactlyAtReleaseTime(uint256 amount, uint64 period, uint256 start) public {
        amount = bound(amount, 1, ACTOR_FUNDS);
        period = uint64(bound(period, 1, vault.MAX_UNBONDING_PERIOD()));
        vm.warp(bound(start, block.timestamp, block.timestamp + 3650 days));
        vm.prank(admin);
        vault.setUnbondingPeriod(period);
        _registerAndStake(alice, GPUS, amount);
        _unstake(alice, amount);
        uint64 release = _now() + period;

        vm.warp(release - 1);
        vm.expectRevert(abi.encodeWithSelector(StakingVault.StillUnbonding.selector, release, release - 1));
        _withdraw(alice);

        vm.warp(release);
        _withdraw(alice);
        assertEq(token.balanceOf(alice), ACTOR_FUNDS);
        assertEq(token.balanceOf(address(vault)), 0);
    }

    function testFuzz_SlashNeverExceedsStakeAndSplitsExactly(
        uint256 stakeAmount,
        uint256 unbondAmount,
        uint256 bps,
        uint256 treasuryShare
    ) public {
        stakeAmount = bound(stakeAmount, 1, ACTOR_FUNDS);
        unbondAmount = bound(unbondAmount, 0, stakeAmount);
        bps = bound(bps, 1, BPS);
        treasuryShare = bound(treasuryShare, 0, BPS);
        vm.prank(admin);
        vault.setSlashPolicy(BPS, uint16(treasuryShare), treasury);
        _registerAndStake(alice, GPUS, stakeAmount);
        if (unbondAmount > 0) _unstake(alice, unbondAmount);

        uint256 active = stakeAmount - unbondAmount;
        uint256 capacity = vault.availableSlashCapacity();
        uint256 supplyBefore = token.totalSupply();
        uint256 vaultBefore = token.balanceOf(address(vault));

        uint256 slashed = _slash(alice, uint16(bps));

        uint256 toTreasury = token.balanceOf(treasury);
        uint256 burned = supplyBefore - token.totalSupply();
        assertLe(slashed, stakeAmount * bps / BPS, "more than bps of stake");
        assertLe(slashed, stakeAmount, "more than there is");
        assertLe(slashed, capacity, "more than the bucket");
        assertEq(toTreasury + burned, slashed, "split");
        assertEq(toTreasury, slashed * treasuryShare / BPS, "treasury share");
        assertEq(vaultBefore - token.balanceOf(address(vault)), slashed, "vault outflow");
        assertEq(uint256(_info(alice).stake) + _info(alice).unbonding, stakeAmount - slashed, "provider books");
        assertEq(vault.availableSlashCapacity(), capacity - slashed, "bucket drawn");
        uint256 requested = active * bps / BPS + unbondAmount * bps / BPS;
        if (requested <= capacity) assertEq(slashed, requested, "unlimited slash takes exactly bps");
        _assertVaultSolvent();
    }

    function testFuzz_BucketRefillNeverExceedsCapacity(
        uint256 capacity,
        uint256 refill,
        uint256 stakeAmount,
        uint256 elapsed
    ) public {
        capacity = bound(capacity, 1, 2 * ACTOR_FUNDS);
        refill = bound(refill, 0, 1e30);
        stakeAmount = bound(stakeAmount, 2, ACTOR_FUNDS);
        elapsed = bound(elapsed, 0, 100 * 365 days);
        _setRateLimit(uint128(capacity), uint128(refill));
        _registerAndStake(alice, GPUS, stakeAmount);

        // A new capacity keeps the current level (clamped down to it, never topped up).
        uint256 start = capacity < BUCKET_CAPACITY ? capacity : BUCKET_CAPACITY;
        assertEq(vault.availableSlashCapacity(), start);
        uint256 slashed = _slash(alice, MAX_SLASH_BPS);
        uint256 requested = stakeAmount * MAX_SLASH_BPS / BPS;
        assertEq(slashed, requested < start ? requested : start);
        uint256 level = start - slashed;

        vm.warp(block.timestamp + elapsed);
        uint256 expected = level + elapsed * refill;
        if (expected > capacity) expected = capacity;
        assertEq(vault.availableSlashCapacity(), expected);
        assertLe(vault.availableSlashCapacity(), capacity);
    }
}
