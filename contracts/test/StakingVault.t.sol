// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {IERC20Errors} from "@openzeppelin/contracts/interfaces/draft-IERC6093.sol";
import {IAccessControl} from "@openzeppelin/contracts/access/IAccessControl.sol";
import {
    IAccessControlDefaultAdminRules
} from "@openzeppelin/contracts/access/extensions/IAccessControlDefaultAdminRules.sol";
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
        vm.prank(guardian);
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

    function _expectOutOfRange(bytes32 parameter, uint256 value, uint256 min, uint256 max) internal {
        vm.expectRevert(abi.encodeWithSelector(StakingVault.OutOfRange.selector, parameter, value, min, max));
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
        assertTrue(vault.hasRole(vault.PAUSER_ROLE(), guardian));
        assertFalse(vault.hasRole(vault.PAUSER_ROLE(), admin));
        assertTrue(vault.hasRole(vault.SLASHER_ROLE(), address(distributor)));
        assertTrue(vault.hasRole(vault.SLASHER_ROLE(), address(market)));
    }

    function _params() internal view returns (StakingVault.Params memory) {
        return _vaultParams(address(distributor));
    }

    function test_RevertWhen_ConstructorZeroToken() public {
        vm.expectRevert(SwarmAccess.ZeroAddress.selector);
        new StakingVault(IERC20(address(0)), admin, _params());
    }

    function test_RevertWhen_ConstructorZeroAdmin() public {
        vm.expectRevert(
            abi.encodeWithSelector(
                IAccessControlDefaultAdminRules.AccessControlInvalidDefaultAdmin.selector, address(0)
            )
        );
        new StakingVault(token, address(0), _params());
    }

    function test_RevertWhen_ConstructorInvalidParams() public {
        StakingVault.Params memory p = _params();
        p.unbondingPeriod = 91 days;
        _expectOutOfRange("unbondingPeriod", 91 days, MIN_UNBONDING_PERIOD, 90 days);
        new StakingVault(token, admin, p);
    }

    function test_RevertWhen_ConstructorZeroRewardsDistributor() public {
        StakingVault.Params memory p = _params();
        p.rewardsDistributor = address(0);
        vm.expectRevert(SwarmAccess.ZeroAddress.selector);
        new StakingVault(token, admin, p);
    }

    function test_RevertWhen_ConstructorZeroUnbondingFloor() public {
        StakingVault.Params memory p = _params();
        p.minUnbondingPeriod = 0;
        _expectOutOfRange("minUnbondingPeriod", 0, 1, 90 days);
        new StakingVault(token, admin, p);
    }

    function test_RevertWhen_ConstructorZeroUnbondingPeriod() public {
        StakingVault.Params memory p = _params();
        p.unbondingPeriod = 0;
        _expectOutOfRange("unbondingPeriod", 0, MIN_UNBONDING_PERIOD, 90 days);
        new StakingVault(token, admin, p);
    }

    function test_RevertWhen_ConstructorUnbondingPeriodBelowFloor() public {
        StakingVault.Params memory p = _params();
        p.unbondingPeriod = MIN_UNBONDING_PERIOD - 1;
        _expectOutOfRange("unbondingPeriod", MIN_UNBONDING_PERIOD - 1, MIN_UNBONDING_PERIOD, 90 days);
        new StakingVault(token, admin, p);
    }

    function test_RevertWhen_ConstructorParameterOutOfRange() public {
        StakingVault.Params memory p = _params();
        p.minStakePerGpu = 0;
        _expectOutOfRange("minStakePerGpu", 0, 1, vault.MAX_MIN_STAKE_PER_GPU());
        new StakingVault(token, admin, p);

        p = _params();
        p.maxSlashBps = 99;
        _expectOutOfRange("maxSlashBps", 99, 100, BPS);
        new StakingVault(token, admin, p);

        p = _params();
        p.maxSlashBpsPerPeriod = MAX_SLASH_BPS - 1;
        _expectOutOfRange("maxSlashBpsPerPeriod", MAX_SLASH_BPS - 1, MAX_SLASH_BPS, BPS);
        new StakingVault(token, admin, p);

        p = _params();
        p.slashBucketCapacity = 0;
        _expectOutOfRange("slashBucketCapacity", 0, 1 ether, vault.MAX_BUCKET_CAPACITY());
        new StakingVault(token, admin, p);

        p = _params();
        p.slashRefillPerSecond = 0;
        _expectOutOfRange("slashRefillPerSecond", 0, 1, BUCKET_CAPACITY);
        new StakingVault(token, admin, p);
    }

    function testFuzz_ConstructorKeepsUnbondingPeriodWithinFloorAndCeiling(uint64 floor, uint64 period) public {
        StakingVault.Params memory p = _params();
        p.minUnbondingPeriod = floor;
        p.unbondingPeriod = period;
        uint64 ceiling = vault.MAX_UNBONDING_PERIOD();
        if (floor == 0 || floor > ceiling) {
            _expectOutOfRange("minUnbondingPeriod", floor, 1, ceiling);
        } else if (period < floor || period > ceiling) {
            _expectOutOfRange("unbondingPeriod", period, floor, ceiling);
        }
        StakingVault v = new StakingVault(token, admin, p);
        if (floor != 0 && floor <= ceiling && period >= floor && period <= ceiling) {
            assertEq(v.minUnbondingPeriod(), floor);
            assertEq(v.unbondingPeriod(), period);
        }
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

    function test_RequestUnstakeAgainPushesReleaseTimeLater() public {
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

    function test_RequestUnstakeNeverMovesReleaseEarlierAfterPeriodLowered() public {
        _registerAndStake(alice, GPUS, STAKE);
        vm.prank(admin);
        vault.setUnbondingPeriod(90 days);
        _unstake(alice, 1_000 ether);
        uint64 release = _now() + 90 days;

        vm.prank(admin);
        vault.setUnbondingPeriod(MIN_UNBONDING_PERIOD);
        vm.warp(block.timestamp + 1 days);
        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.UnstakeRequested(alice, 2_000 ether, 3_000 ether, release);
        _unstake(alice, 2_000 ether);
        assertEq(_info(alice).unbondingEnd, release);

        vm.warp(_now() + MIN_UNBONDING_PERIOD);
        vm.expectRevert(abi.encodeWithSelector(StakingVault.StillUnbonding.selector, release, _now()));
        _withdraw(alice);
        vm.warp(release);
        _withdraw(alice);
        assertEq(token.balanceOf(alice), ACTOR_FUNDS - STAKE + 3_000 ether);
    }

    function testFuzz_ReleaseTimeNeverMovesEarlier(
        uint64[8] calldata gaps,
        uint256[8] calldata amounts,
        uint64[8] calldata periods,
        bool[8] calldata withdraws
    ) public {
        _registerAndStake(alice, GPUS, STAKE);
        uint64 ceiling = vault.MAX_UNBONDING_PERIOD();
        uint64 previous;
        for (uint256 i; i < 8; ++i) {
            vm.warp(block.timestamp + bound(gaps[i], 0, 2 * ceiling));
            if (periods[i] % 2 == 1) {
                vm.prank(admin);
                vault.setUnbondingPeriod(uint64(bound(periods[i], MIN_UNBONDING_PERIOD, ceiling)));
            }
            if (withdraws[i] && _info(alice).unbonding > 0 && _now() >= previous) _withdraw(alice);
            uint64 floor = _now() + vault.unbondingPeriod();
            _unstake(alice, bound(amounts[i], 1, 1_000 ether));
            uint64 release = _info(alice).unbondingEnd;
            assertGe(release, previous, "release moved earlier");
            assertGe(release, floor, "release before request time + period");
            assertEq(release, previous > floor ? previous : floor);
            previous = release;
        }
        vm.warp(previous - 1);
        vm.expectRevert(abi.encodeWithSelector(StakingVault.StillUnbonding.selector, previous, previous - 1));
        _withdraw(alice);
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

    // ─── hold ────────────────────────────────────────────────────────────────

    function _hold(address provider, uint64 until) internal {
        vm.prank(slasher);
        vault.hold(provider, until);
    }

    function test_RevertWhen_WithdrawWhileHeld() public {
        _registerAndStake(alice, GPUS, STAKE);
        _unstake(alice, STAKE);
        uint64 until = _now() + UNBONDING_PERIOD + 12 hours; // within the exit bound
        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.StakeHeld(alice, until);
        _hold(alice, until);
        assertEq(_info(alice).heldUntil, until);

        vm.warp(block.timestamp + UNBONDING_PERIOD);
        vm.expectRevert(abi.encodeWithSelector(StakingVault.StakeOnHold.selector, until, _now()));
        _withdraw(alice);
        vm.warp(until - 1);
        vm.expectRevert(abi.encodeWithSelector(StakingVault.StakeOnHold.selector, until, until - 1));
        _withdraw(alice);

        vm.warp(until);
        _withdraw(alice);
        assertEq(token.balanceOf(alice), ACTOR_FUNDS);
        _assertVaultSolvent();
    }

    function test_HoldPlacedBeforeUnstakeStillBlocksWithdraw() public {
        _registerAndStake(alice, GPUS, STAKE);
        uint64 until = _now() + UNBONDING_PERIOD + 12 hours; // within the exit bound
        _hold(alice, until);
        _unstake(alice, STAKE);
        vm.warp(_info(alice).unbondingEnd);
        vm.expectRevert(abi.encodeWithSelector(StakingVault.StakeOnHold.selector, until, _now()));
        _withdraw(alice);
        vm.warp(until);
        _withdraw(alice);
        assertEq(token.balanceOf(alice), ACTOR_FUNDS);
    }

    function test_HoldOnlyExtends() public {
        _registerAndStake(alice, GPUS, STAKE);
        uint64 later = _now() + 20 days;
        _hold(alice, later);

        vm.recordLogs();
        _hold(alice, _now() + 10 days);
        _hold(alice, later);
        _expectNoLogs();
        assertEq(_info(alice).heldUntil, later);

        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.StakeHeld(alice, later + 1);
        _hold(alice, later + 1);
        assertEq(_info(alice).heldUntil, later + 1);
    }

    function testFuzz_NoWithdrawBeforeReleaseOrHold(uint64 holdFor, uint64 wait) public {
        _registerAndStake(alice, GPUS, STAKE);
        _unstake(alice, STAKE);
        uint64 release = _info(alice).unbondingEnd;
        uint64 until = _now() + uint64(bound(holdFor, 0, vault.MAX_HOLD()));
        _hold(alice, until);
        uint64 exitBy = release + CHALLENGE_WINDOW + MAX_REPORT_LAG;
        if (until > exitBy) until = exitBy; // no hold keeps her past her exit bound
        vm.warp(block.timestamp + bound(wait, 0, 400 days));
        if (_now() < release) {
            vm.expectRevert(abi.encodeWithSelector(StakingVault.StillUnbonding.selector, release, _now()));
        } else if (_now() < until) {
            vm.expectRevert(abi.encodeWithSelector(StakingVault.StakeOnHold.selector, until, _now()));
        }
        _withdraw(alice);
        bool paid = _now() >= release && _now() >= until;
        assertEq(token.balanceOf(alice), paid ? ACTOR_FUNDS : ACTOR_FUNDS - STAKE);
    }

    /// @dev A hold reaches at most MAX_HOLD past now, and keeps a provider that asked to leave
    /// no longer than its exit bound: its release plus the challenge window and the report lag.
    function test_HoldReachesAtMostMaxHoldPastNowAndTheExitBound() public {
        _registerAndStake(alice, GPUS, STAKE);
        _unstake(alice, STAKE);
        uint256 longest = block.timestamp + vault.MAX_HOLD();
        _hold(alice, type(uint64).max);
        assertEq(_info(alice).heldUntil, longest);
        vm.recordLogs();
        _hold(alice, uint64(longest)); // nothing to extend: no event
        assertEq(vm.getRecordedLogs().length, 0);
        uint64 exitBy = _info(alice).unbondingEnd + CHALLENGE_WINDOW + MAX_REPORT_LAG;
        assertEq(vault.exitBound(), UNBONDING_PERIOD + CHALLENGE_WINDOW + MAX_REPORT_LAG);
        assertEq(vault.withdrawableAt(alice), exitBy);
        vm.warp(exitBy - 1);
        vm.expectRevert(abi.encodeWithSelector(StakingVault.StakeOnHold.selector, exitBy, exitBy - 1));
        _withdraw(alice);
        vm.warp(exitBy);
        _withdraw(alice);
        assertEq(_info(alice).unbonding, 0);
        assertEq(vault.withdrawableAt(alice), 0, "nothing left to withdraw");
    }

    function test_RevertWhen_HoldWithoutSlasherRole() public {
        _registerAndStake(alice, GPUS, STAKE);
        _expectUnauthorized(alice, vault.SLASHER_ROLE());
        vm.prank(alice);
        vault.hold(alice, _now() + 1 days);
        _expectUnauthorized(admin, vault.SLASHER_ROLE());
        vm.prank(admin);
        vault.hold(alice, _now() + 1 days);
        assertEq(_info(alice).heldUntil, 0);
    }

    function test_RevertWhen_HoldNotRegistered() public {
        vm.expectRevert(abi.encodeWithSelector(StakingVault.NotRegistered.selector, carol));
        _hold(carol, _now() + 1 days);
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

    function test_SlashAboveMaxBpsTakesTheCap() public {
        _registerAndStake(alice, GPUS, STAKE);
        _unstake(alice, 2_000 ether); // 8,000 active, 2,000 unbonding
        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.SlashCapped(alice, slasher, MAX_SLASH_BPS + 1, MAX_SLASH_BPS);
        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.Slashed(alice, REASON, 4_000 ether, 1_000 ether, MAX_SLASH_BPS, EVIDENCE, 2_500 ether);
        assertEq(_slash(alice, MAX_SLASH_BPS + 1), STAKE * MAX_SLASH_BPS / BPS);
        assertEq(_info(alice).stake, 4_000 ether);
        assertEq(_info(alice).unbonding, 1_000 ether);
        _assertVaultSolvent();
    }

    function testFuzz_SlashAboveMaxBpsTakesExactlyTheCap(uint256 stakeAmount, uint256 bps) public {
        stakeAmount = bound(stakeAmount, 1, 2 * BUCKET_CAPACITY);
        bps = bound(bps, MAX_SLASH_BPS, type(uint16).max);
        _registerAndStake(alice, GPUS, stakeAmount);
        uint256 slashed = _slash(alice, uint16(bps));
        assertEq(slashed, stakeAmount * MAX_SLASH_BPS / BPS);
        assertEq(_info(alice).stake, stakeAmount - slashed);
        assertEq(vault.slashDebt(alice), 0);
        assertEq(vault.slashAllowanceBps(slasher, alice), MAX_SLASH_BPS_PER_PERIOD - MAX_SLASH_BPS);
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
        vault.setSlashPolicy(MAX_SLASH_BPS, MAX_SLASH_BPS_PER_PERIOD, BPS, treasury);
        _registerAndStake(alice, GPUS, STAKE);
        uint256 supplyBefore = token.totalSupply();
        _slash(alice, 1_000);
        assertEq(token.balanceOf(treasury), 1_000 ether);
        assertEq(token.totalSupply(), supplyBefore);
    }

    function test_SlashWithZeroTreasuryShareBurnsAll() public {
        vm.prank(admin);
        vault.setSlashPolicy(MAX_SLASH_BPS, MAX_SLASH_BPS_PER_PERIOD, 0, treasury);
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
        emit StakingVault.SlashDebtChanged(alice, 1_500 ether);
        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.Slashed(alice, REASON, 800 ether, 200 ether, 2_500, EVIDENCE, 500 ether);
        assertEq(_slash(alice, 2_500), 1_000 ether);

        assertEq(_info(alice).stake, 7_200 ether);
        assertEq(_info(alice).unbonding, 1_800 ether);
        assertEq(vault.slashDebt(alice), 1_500 ether);
        assertEq(_info(alice).slashDebt, 1_500 ether);
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
        assertEq(vault.slashDebt(alice), 800 ether);

        vm.warp(block.timestamp + 10 days);
        assertEq(vault.availableSlashCapacity(), 1_000 ether);
    }

    function test_SlashWithEmptyBucketTakesNothingAndOwesAll() public {
        _setRateLimit(1_000 ether, 1 ether);
        _registerAndStake(alice, GPUS, STAKE);
        _registerAndStake(bob, GPUS, STAKE);
        _slash(bob, 1_000); // empties the bucket
        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.SlashRateLimited(alice, 1_000 ether, 0);
        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.SlashDebtChanged(alice, 1_000 ether);
        assertEq(_slash(alice, 1_000), 0);
        assertEq(_info(alice).stake, STAKE);
        assertEq(vault.slashDebt(alice), 1_000 ether);
        _assertVaultSolvent();
    }

    // ─── Per-slasher period cap ──────────────────────────────────────────────

    function test_SlasherAllowanceCapsSlashesWithinPeriodAndResetsAfter() public {
        _registerAndStake(alice, GPUS, STAKE);
        uint64 start = _now();
        assertEq(_slash(alice, MAX_SLASH_BPS), 5_000 ether);
        assertEq(vault.slashAllowanceBps(slasher, alice), MAX_SLASH_BPS_PER_PERIOD - MAX_SLASH_BPS);

        vm.warp(block.timestamp + 10 days);
        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.SlashCapped(alice, slasher, MAX_SLASH_BPS, 2_500);
        assertEq(_slash(alice, MAX_SLASH_BPS), 1_250 ether); // 2,500 bps of 5,000
        assertEq(vault.slashAllowanceBps(slasher, alice), 0);

        vm.warp(start + vault.SLASH_PERIOD() - 1);
        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.SlashCapped(alice, slasher, 100, 0);
        assertEq(_slash(alice, 100), 0);
        assertEq(_info(alice).stake, 3_750 ether);

        // The first slash leaves the window at most one bucket after the period; the second,
        // ten days younger, still counts: the cap holds over every 30 days, not per fixed period.
        vm.warp(start + vault.SLASH_PERIOD() + vault.SLASH_BUCKET());
        assertEq(vault.slashAllowanceBps(slasher, alice), MAX_SLASH_BPS_PER_PERIOD - 2_500);
        assertEq(_slash(alice, MAX_SLASH_BPS), 1_875 ether);
        assertEq(_info(alice).stake, 1_875 ether);
        _assertVaultSolvent();
    }

    function test_EachSlasherHasItsOwnAllowance() public {
        address other = makeAddr("otherSlasher");
        vm.startPrank(admin);
        vault.grantRole(vault.SLASHER_ROLE(), other);
        vm.stopPrank();
        _registerAndStake(alice, GPUS, STAKE);
        _registerAndStake(bob, GPUS, STAKE);

        _slash(alice, MAX_SLASH_BPS);
        _slash(alice, MAX_SLASH_BPS);
        assertEq(_slash(alice, MAX_SLASH_BPS), 0);
        assertEq(_info(alice).stake, 3_750 ether); // 5,000 bps, then the 2,500 left

        assertEq(vault.slashAllowanceBps(other, alice), MAX_SLASH_BPS_PER_PERIOD);
        vm.prank(other);
        assertEq(vault.slash(alice, MAX_SLASH_BPS, REASON, EVIDENCE), 1_875 ether);
        assertEq(vault.slashAllowanceBps(other, alice), MAX_SLASH_BPS_PER_PERIOD - MAX_SLASH_BPS);

        // The allowance is per provider too.
        assertEq(vault.slashAllowanceBps(slasher, bob), MAX_SLASH_BPS_PER_PERIOD);
        assertEq(_slash(bob, MAX_SLASH_BPS), 5_000 ether);
    }

    function testFuzz_SlasherTakesAtMostPeriodCap(uint16[12] calldata bpsList, uint256 n, uint256 unbond, uint256 step)
        public
    {
        n = bound(n, 1, 12);
        _registerAndStake(alice, GPUS, STAKE);
        unbond = bound(unbond, 0, STAKE);
        if (unbond > 0) _unstake(alice, unbond);
        step = bound(step, 0, vault.SLASH_PERIOD() / 12);

        uint256 used;
        for (uint256 i; i < n; ++i) {
            uint256 bps = bound(bpsList[i], 1, type(uint16).max);
            uint256 held = uint256(_info(alice).stake) + _info(alice).unbonding;
            uint256 applied = bps < MAX_SLASH_BPS ? bps : MAX_SLASH_BPS;
            if (applied > MAX_SLASH_BPS_PER_PERIOD - used) applied = MAX_SLASH_BPS_PER_PERIOD - used;
            uint256 slashed = _slash(alice, uint16(bps));
            assertLe(slashed, held * applied / BPS, "more than the applied bps");
            assertGe(slashed + 1, held * applied / BPS, "less than the applied bps");
            used += applied;
            assertEq(vault.slashAllowanceBps(slasher, alice), MAX_SLASH_BPS_PER_PERIOD - used);
            vm.warp(block.timestamp + step);
        }
        uint256 remaining = uint256(_info(alice).stake) + _info(alice).unbonding;
        assertGe(remaining * BPS, STAKE * (BPS - MAX_SLASH_BPS_PER_PERIOD), "took more than the period cap");
        assertEq(vault.slashDebt(alice), 0);
        _assertVaultSolvent();
    }

    // ─── Slash debt ──────────────────────────────────────────────────────────

    function _collect(address provider) internal returns (uint256) {
        vm.prank(carol);
        return vault.collectSlashDebt(provider);
    }

    /// @dev The totals equal the providers' records and the vault's balance, to the wei.
    function _assertBooks() internal view {
        StakingVault.ProviderView memory a = _info(alice);
        StakingVault.ProviderView memory b = _info(bob);
        assertEq(vault.totalStaked(), uint256(a.stake) + b.stake, "totalStaked");
        assertEq(vault.totalUnbonding(), uint256(a.unbonding) + b.unbonding, "totalUnbonding");
        _assertVaultSolvent();
    }

    function test_BucketShortfallBecomesDebtCollectedAsTheBucketRefills() public {
        _setRateLimit(1_000 ether, 1 ether);
        _registerAndStake(alice, GPUS, STAKE);
        _unstake(alice, 4_000 ether); // 6,000 active, 4,000 unbonding
        uint256 supply = token.totalSupply();

        // Asks 3,000 + 2,000; the bucket holds 1,000: 600 + 400 taken, 4,000 owed.
        assertEq(_slash(alice, MAX_SLASH_BPS), 1_000 ether);
        assertEq(vault.slashDebt(alice), 4_000 ether);
        assertEq(_info(alice).stake, 5_400 ether);
        assertEq(_info(alice).unbonding, 3_600 ether);
        _assertBooks();

        // The bucket is empty: nothing to collect yet.
        vm.recordLogs();
        assertEq(_collect(alice), 4_000 ether);
        _expectNoLogs();

        // Unbonded, but the bucket covers only 1,000 of the 4,000 owed: the withdrawal collects
        // that, keeps what is still owed in unbonding, and pays out the rest.
        vm.warp(_info(alice).unbondingEnd);
        uint256 wallet = token.balanceOf(alice);
        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.SlashDebtChanged(alice, 3_000 ether);
        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.Slashed(alice, "slash-debt", 600 ether, 400 ether, 0, bytes32(0), 500 ether);
        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.Withdrawn(alice, 200 ether);
        _withdraw(alice);
        assertEq(_info(alice).stake, 4_800 ether);
        assertEq(_info(alice).unbonding, 3_000 ether, "what is owed stays behind");
        assertEq(_info(alice).slashDebt, 3_000 ether);
        assertEq(token.balanceOf(alice), wallet + 200 ether);
        assertEq(vault.availableSlashCapacity(), 0);
        _assertBooks();

        // Nothing can move now: the bucket is empty and all the unbonding left is owed.
        vm.expectRevert(abi.encodeWithSelector(StakingVault.SlashDebtOutstanding.selector, alice, 3_000 ether));
        _withdraw(alice);

        // A bucket large enough lets the next withdrawal collect the rest and pay what is left.
        _setRateLimit(10_000 ether, 10 ether);
        vm.warp(block.timestamp + 1_000);
        StakingVault.ProviderView memory before = _info(alice);
        uint256 fromStake = uint256(before.stake) * 3_000 ether / (uint256(before.stake) + before.unbonding);
        _withdraw(alice);
        assertEq(vault.slashDebt(alice), 0);
        assertEq(_info(alice).stake, before.stake - fromStake);
        assertEq(_info(alice).unbonding, 0);
        assertEq(token.balanceOf(alice), wallet + 200 ether + before.unbonding - (3_000 ether - fromStake));
        // 5,000 taken in all: half to the treasury, half burned.
        assertEq(token.balanceOf(treasury), 2_500 ether);
        assertEq(token.totalSupply(), supply - 2_500 ether);
        _assertBooks();
    }

    function test_CollectSlashDebtWithoutDebtDoesNothing() public {
        _registerAndStake(alice, GPUS, STAKE);
        vm.recordLogs();
        assertEq(_collect(alice), 0);
        assertEq(_collect(carol), 0);
        _expectNoLogs();
        assertEq(_info(alice).stake, STAKE);
    }

    function testFuzz_SlashDebtIsNeverForgiven(
        uint256 stakeAmount,
        uint256 unbond,
        uint256 bps,
        uint256 capacity,
        uint256 treasuryShare,
        uint256 drain
    ) public {
        stakeAmount = bound(stakeAmount, 1 ether, ACTOR_FUNDS);
        unbond = bound(unbond, 0, stakeAmount);
        bps = bound(bps, 1, MAX_SLASH_BPS);
        uint256 requested = (stakeAmount - unbond) * bps / BPS + unbond * bps / BPS;
        capacity = bound(capacity, requested / 8 + 1 ether, requested + 2 ether);
        treasuryShare = bound(treasuryShare, 0, BPS);
        vm.prank(admin);
        vault.setSlashPolicy(MAX_SLASH_BPS, MAX_SLASH_BPS_PER_PERIOD, uint16(treasuryShare), treasury);
        _setRateLimit(uint128(capacity), uint128(capacity / 1 days + 1));
        _registerAndStake(alice, GPUS, stakeAmount);
        _registerAndStake(bob, GPUS, ACTOR_FUNDS);
        if (unbond > 0) _unstake(alice, unbond);
        // Another slash drains part of the bucket first.
        _slash(bob, uint16(bound(drain, 1, 1_000)));
        _assertBooks();

        uint256 supply = token.totalSupply();
        uint256 treasuryBefore = token.balanceOf(treasury);
        uint256 slashed = _slash(alice, uint16(bps));
        assertEq(slashed + vault.slashDebt(alice), requested, "shortfall owed");
        _assertBooks();

        for (uint256 i; vault.slashDebt(alice) > 0; ++i) {
            assertLt(i, 16, "debt not collected");
            vm.warp(block.timestamp + 1 days);
            _collect(alice);
            _assertBooks();
        }
        uint256 taken = stakeAmount - _info(alice).stake - _info(alice).unbonding;
        assertEq(taken, requested, "taken in all");
        uint256 toTreasury = token.balanceOf(treasury) - treasuryBefore;
        assertEq(toTreasury + (supply - token.totalSupply()), taken, "split");
        assertLe(toTreasury, taken * treasuryShare / BPS, "treasury share");
        assertGe(toTreasury + 20, taken * treasuryShare / BPS, "treasury share");
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

    function test_JailBeyondRecordRangeSaturatesWithoutTombstoning() public {
        _registerAndStake(alice, GPUS, STAKE);
        uint64 stored = type(uint40).max - 1;
        vm.expectEmit(true, true, true, true, address(vault));
        emit StakingVault.Jailed(alice, stored);
        _jail(alice, type(uint64).max - 1);

        assertEq(_info(alice).jailedUntil, stored);
        assertFalse(_info(alice).tombstoned);
        assertFalse(vault.isEligible(alice));
        vm.expectRevert(abi.encodeWithSelector(StakingVault.ProviderJailed.selector, alice, stored));
        vault.requireEligible(alice);
        vm.expectRevert(abi.encodeWithSelector(StakingVault.ProviderJailed.selector, alice, stored));
        _unjail(alice);

        _tombstone(alice);
        assertEq(_info(alice).jailedUntil, type(uint64).max);
    }

    function testFuzz_JailNeverRevertsAndNeverReadsAsTombstone(uint64 until) public {
        _registerAndStake(alice, GPUS, STAKE);
        until = uint64(bound(until, _now() + 1, type(uint64).max));
        _jail(alice, until);
        uint64 jailed = _info(alice).jailedUntil;
        assertEq(jailed, until < type(uint40).max ? until : type(uint40).max - 1);
        assertLt(jailed, type(uint64).max);
        assertFalse(vault.isEligible(alice));
    }

    function test_TombstoneAfterFarJailReportsForever() public {
        _registerAndStake(alice, GPUS, STAKE);
        _jail(alice, type(uint64).max);
        _tombstone(alice);
        _jail(alice, type(uint64).max);
        assertEq(_info(alice).jailedUntil, type(uint64).max);
        assertTrue(_info(alice).tombstoned);
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

    // ─── recordClaim ─────────────────────────────────────────────────────────

    function _recordClaim(address provider, uint256 cumulative) internal returns (uint256) {
        vm.prank(address(distributor));
        return vault.recordClaim(provider, cumulative);
    }

    function test_RecordClaimStoresCumulativeAndReturnsPrevious() public {
        _registerAndStake(alice, GPUS, STAKE);
        assertEq(vault.rewardsDistributor(), address(distributor));
        assertEq(_recordClaim(alice, 100 ether), 0);
        assertEq(_recordClaim(alice, 250 ether), 100 ether);
        assertEq(vault.claimedRewards(alice), 250 ether);
        assertEq(_info(alice).claimedRewards, 250 ether);
        assertEq(vault.claimedRewards(bob), 0);
    }

    function test_RecordClaimLeavesTheRestOfTheRecord() public {
        _registerAndStake(alice, GPUS, STAKE);
        _unstake(alice, 1_000 ether);
        _hold(alice, _now() + 40 days);
        _jail(alice, _now() + 2 days);
        StakingVault.ProviderView memory before = _info(alice);

        _recordClaim(alice, type(uint96).max);

        StakingVault.ProviderView memory afterwards = _info(alice);
        assertEq(afterwards.claimedRewards, type(uint96).max);
        assertEq(afterwards.stake, before.stake);
        assertEq(afterwards.unbonding, before.unbonding);
        assertEq(afterwards.unbondingEnd, before.unbondingEnd);
        assertEq(afterwards.jailedUntil, before.jailedUntil);
        assertEq(afterwards.heldUntil, before.heldUntil);
        assertEq(afterwards.gpus, before.gpus);
        assertEq(afterwards.tombstoned, before.tombstoned);
        assertEq(afterwards.specHash, before.specHash);
        assertTrue(afterwards.registered);
    }

    function test_RevertWhen_RecordClaimNotDistributor() public {
        _registerAndStake(alice, GPUS, STAKE);
        address[4] memory callers = [slasher, admin, alice, address(market)];
        for (uint256 i; i < callers.length; ++i) {
            vm.expectRevert(abi.encodeWithSelector(StakingVault.NotRewardsDistributor.selector, callers[i]));
            vm.prank(callers[i]);
            vault.recordClaim(alice, 1 ether);
        }
        assertEq(vault.claimedRewards(alice), 0);
    }

    function test_RevertWhen_RecordClaimNotIncreasing() public {
        _registerAndStake(alice, GPUS, STAKE);
        vm.expectRevert(abi.encodeWithSelector(StakingVault.ClaimNotIncreasing.selector, alice, 0, 0));
        _recordClaim(alice, 0);
        _recordClaim(alice, 250 ether);
        vm.expectRevert(abi.encodeWithSelector(StakingVault.ClaimNotIncreasing.selector, alice, 250 ether, 250 ether));
        _recordClaim(alice, 250 ether);
        vm.expectRevert(abi.encodeWithSelector(StakingVault.ClaimNotIncreasing.selector, alice, 100 ether, 250 ether));
        _recordClaim(alice, 100 ether);
        assertEq(vault.claimedRewards(alice), 250 ether);
    }

    function test_RevertWhen_RecordClaimAboveUint96() public {
        _registerAndStake(alice, GPUS, STAKE);
        uint256 tooMuch = uint256(type(uint96).max) + 1;
        vm.expectRevert(abi.encodeWithSelector(SafeCast.SafeCastOverflowedUintDowncast.selector, 96, tooMuch));
        _recordClaim(alice, tooMuch);
        _recordClaim(alice, type(uint96).max);
        vm.expectRevert(abi.encodeWithSelector(SafeCast.SafeCastOverflowedUintDowncast.selector, 96, tooMuch));
        _recordClaim(alice, tooMuch);
        assertEq(vault.claimedRewards(alice), type(uint96).max);
    }

    function test_RevertWhen_RecordClaimNotRegistered() public {
        vm.expectRevert(abi.encodeWithSelector(StakingVault.NotRegistered.selector, carol));
        _recordClaim(carol, 1 ether);
    }

    function testFuzz_RecordClaimStrictlyIncreasing(uint256 first, uint256 second) public {
        _registerAndStake(alice, GPUS, STAKE);
        first = bound(first, 1, type(uint96).max);
        _recordClaim(alice, first);
        if (second <= first) {
            vm.expectRevert(abi.encodeWithSelector(StakingVault.ClaimNotIncreasing.selector, alice, second, first));
        } else if (second > type(uint96).max) {
            vm.expectRevert(abi.encodeWithSelector(SafeCast.SafeCastOverflowedUintDowncast.selector, 96, second));
        }
        _recordClaim(alice, second);
        uint256 expected = second > first && second <= type(uint96).max ? second : first;
        assertEq(vault.claimedRewards(alice), expected);
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
        _expectOutOfRange("minStakePerGpu", 0, 1, vault.MAX_MIN_STAKE_PER_GPU());
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

    function test_RevertWhen_SetUnbondingPeriodZero() public {
        _expectOutOfRange("unbondingPeriod", 0, MIN_UNBONDING_PERIOD, 90 days);
        vm.prank(admin);
        vault.setUnbondingPeriod(0);
    }

    function test_RevertWhen_SetUnbondingPeriodTooLong() public {
        _expectOutOfRange("unbondingPeriod", 90 days + 1, MIN_UNBONDING_PERIOD, 90 days);
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
        emit StakingVault.SlashPolicySet(2_000, 3_000, 1_234, newTreasury);
        vm.prank(admin);
        vault.setSlashPolicy(2_000, 3_000, 1_234, newTreasury);
        assertEq(vault.maxSlashBps(), 2_000);
        assertEq(vault.maxSlashBpsPerPeriod(), 3_000);
        assertEq(vault.treasuryShareBps(), 1_234);
        assertEq(vault.treasury(), newTreasury);
    }

    function test_RevertWhen_SetSlashPolicyZeroMaxBps() public {
        _expectOutOfRange("maxSlashBps", 0, 100, BPS);
        vm.prank(admin);
        vault.setSlashPolicy(0, BPS, 0, treasury);
    }

    function test_RevertWhen_SetSlashPolicyMaxBpsAboveLimit() public {
        _expectOutOfRange("maxSlashBps", BPS + 1, 100, BPS);
        vm.prank(admin);
        vault.setSlashPolicy(BPS + 1, BPS, 0, treasury);
    }

    function test_RevertWhen_SetSlashPolicyPeriodCapBelowIncidentCap() public {
        _expectOutOfRange("maxSlashBpsPerPeriod", 999, 1_000, BPS);
        vm.prank(admin);
        vault.setSlashPolicy(1_000, 999, 0, treasury);
    }

    function test_RevertWhen_SetSlashPolicyTreasuryShareAbove100Percent() public {
        vm.expectRevert(abi.encodeWithSelector(StakingVault.InvalidBps.selector, BPS + 1, BPS));
        vm.prank(admin);
        vault.setSlashPolicy(BPS, BPS, BPS + 1, treasury);
    }

    function test_RevertWhen_SetSlashPolicyZeroTreasury() public {
        vm.expectRevert(SwarmAccess.ZeroAddress.selector);
        vm.prank(admin);
        vault.setSlashPolicy(BPS, BPS, 0, address(0));
    }

    function test_RevertWhen_SetSlashPolicyWithoutAdmin() public {
        _expectUnauthorized(alice, vault.DEFAULT_ADMIN_ROLE());
        vm.prank(alice);
        vault.setSlashPolicy(BPS, BPS, 0, alice);
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

    function test_AdminTransferIsTwoStepAndDelayed() public {
        address newAdmin = makeAddr("newAdmin");
        uint48 delay = vault.ADMIN_TRANSFER_DELAY();
        assertEq(delay, 2 days);
        assertEq(vault.defaultAdminDelay(), delay);

        vm.prank(admin);
        vault.beginDefaultAdminTransfer(newAdmin);
        (address pending, uint48 schedule) = vault.pendingDefaultAdmin();
        assertEq(pending, newAdmin);
        assertEq(schedule, _now() + delay);
        assertEq(vault.defaultAdmin(), admin);
        assertFalse(vault.hasRole(vault.DEFAULT_ADMIN_ROLE(), newAdmin));

        vm.expectRevert(
            abi.encodeWithSelector(
                IAccessControlDefaultAdminRules.AccessControlEnforcedDefaultAdminDelay.selector, schedule
            )
        );
        vm.prank(newAdmin);
        vault.acceptDefaultAdminTransfer();

        vm.warp(schedule);
        vm.expectRevert(
            abi.encodeWithSelector(
                IAccessControlDefaultAdminRules.AccessControlEnforcedDefaultAdminDelay.selector, schedule
            )
        );
        vm.prank(newAdmin);
        vault.acceptDefaultAdminTransfer();

        vm.expectRevert(
            abi.encodeWithSelector(IAccessControlDefaultAdminRules.AccessControlInvalidDefaultAdmin.selector, alice)
        );
        vm.prank(alice);
        vault.acceptDefaultAdminTransfer();

        vm.warp(uint256(schedule) + 1);
        vm.prank(newAdmin);
        vault.acceptDefaultAdminTransfer();
        assertEq(vault.defaultAdmin(), newAdmin);
        assertTrue(vault.hasRole(vault.DEFAULT_ADMIN_ROLE(), newAdmin));
        assertFalse(vault.hasRole(vault.DEFAULT_ADMIN_ROLE(), admin));

        _expectUnauthorized(admin, vault.DEFAULT_ADMIN_ROLE());
        vm.prank(admin);
        vault.setMinStakePerGpu(1 ether);
        vm.prank(newAdmin);
        vault.setMinStakePerGpu(1 ether);
        assertEq(vault.minStakePerGpu(), 1 ether);
    }

    function test_RevertWhen_DefaultAdminRoleGrantedOrRevokedDirectly() public {
        bytes32 adminRole = vault.DEFAULT_ADMIN_ROLE();
        vm.startPrank(admin);
        vm.expectRevert(IAccessControlDefaultAdminRules.AccessControlEnforcedDefaultAdminRules.selector);
        vault.grantRole(adminRole, alice);
        vm.expectRevert(IAccessControlDefaultAdminRules.AccessControlEnforcedDefaultAdminRules.selector);
        vault.revokeRole(adminRole, admin);
        vm.stopPrank();
        assertFalse(vault.hasRole(adminRole, alice));
        assertEq(vault.defaultAdmin(), admin);
    }

    function test_RevertWhen_BeginAdminTransferWithoutAdmin() public {
        _expectUnauthorized(alice, vault.DEFAULT_ADMIN_ROLE());
        vm.prank(alice);
        vault.beginDefaultAdminTransfer(alice);
    }

    // ─── Parameter ranges ────────────────────────────────────────────────────

    function test_RevertWhen_SetUnbondingPeriodBelowFloor() public {
        _expectOutOfRange("unbondingPeriod", MIN_UNBONDING_PERIOD - 1, MIN_UNBONDING_PERIOD, 90 days);
        vm.prank(admin);
        vault.setUnbondingPeriod(MIN_UNBONDING_PERIOD - 1);
        vm.prank(admin);
        vault.setUnbondingPeriod(MIN_UNBONDING_PERIOD);
        assertEq(vault.unbondingPeriod(), MIN_UNBONDING_PERIOD);
    }

    function testFuzz_SetMinStakePerGpuWithinRange(uint128 value) public {
        uint128 ceiling = vault.MAX_MIN_STAKE_PER_GPU();
        bool valid = value >= 1 && value <= ceiling;
        if (!valid) _expectOutOfRange("minStakePerGpu", value, 1, ceiling);
        vm.prank(admin);
        vault.setMinStakePerGpu(value);
        assertEq(vault.minStakePerGpu(), valid ? value : MIN_STAKE_PER_GPU);
    }

    function testFuzz_SetUnbondingPeriodWithinRange(uint64 period) public {
        uint64 ceiling = vault.MAX_UNBONDING_PERIOD();
        bool valid = period >= MIN_UNBONDING_PERIOD && period <= ceiling;
        if (!valid) _expectOutOfRange("unbondingPeriod", period, MIN_UNBONDING_PERIOD, ceiling);
        vm.prank(admin);
        vault.setUnbondingPeriod(period);
        assertEq(vault.unbondingPeriod(), valid ? period : UNBONDING_PERIOD);
    }

    function testFuzz_SetSlashPolicyWithinRange(uint16 maxBps, uint16 perPeriod, uint16 share) public {
        uint16 floor = vault.MIN_SLASH_BPS_LIMIT();
        uint16 ceiling = vault.MAX_SLASH_BPS_LIMIT();
        bool valid;
        if (maxBps < floor || maxBps > ceiling) {
            _expectOutOfRange("maxSlashBps", maxBps, floor, ceiling);
        } else if (perPeriod < maxBps || perPeriod > BPS) {
            _expectOutOfRange("maxSlashBpsPerPeriod", perPeriod, maxBps, BPS);
        } else if (share > BPS) {
            vm.expectRevert(abi.encodeWithSelector(StakingVault.InvalidBps.selector, share, BPS));
        } else {
            valid = true;
        }
        vm.prank(admin);
        vault.setSlashPolicy(maxBps, perPeriod, share, treasury);
        assertEq(vault.maxSlashBps(), valid ? maxBps : MAX_SLASH_BPS);
        assertEq(vault.maxSlashBpsPerPeriod(), valid ? perPeriod : MAX_SLASH_BPS_PER_PERIOD);
        assertEq(vault.treasuryShareBps(), valid ? share : TREASURY_SHARE_BPS);
        assertGe(vault.maxSlashBps(), floor);
        assertGe(vault.maxSlashBpsPerPeriod(), vault.maxSlashBps());
    }

    function testFuzz_SetSlashRateLimitWithinRange(uint128 capacity, uint128 refill) public {
        uint128 floor = vault.MIN_BUCKET_CAPACITY();
        bool valid;
        uint128 ceiling = vault.MAX_BUCKET_CAPACITY();
        if (capacity < floor || capacity > ceiling) {
            _expectOutOfRange("slashBucketCapacity", capacity, floor, ceiling);
        } else if (refill == 0 || refill > capacity) {
            _expectOutOfRange("slashRefillPerSecond", refill, 1, capacity);
        } else {
            valid = true;
        }
        _setRateLimit(capacity, refill);
        assertEq(vault.slashBucketCapacity(), valid ? capacity : BUCKET_CAPACITY);
        assertEq(vault.slashRefillPerSecond(), valid ? refill : BUCKET_REFILL);
    }

    // ─── Pause ───────────────────────────────────────────────────────────────

    function test_PauseAndUnpauseByPauser() public {
        vm.expectEmit(true, true, true, true, address(vault));
        emit Pausable.Paused(guardian);
        _pause();
        assertTrue(vault.paused());

        vm.expectEmit(true, true, true, true, address(vault));
        emit Pausable.Unpaused(guardian);
        vm.prank(guardian);
        vault.unpause();
        assertFalse(vault.paused());
        _registerAndStake(alice, GPUS, STAKE); // works again
        assertEq(_info(alice).stake, STAKE);
    }

    function test_RevertWhen_PauseWithoutPauserRole() public {
        // The admin (the timelock) holds no pause: the guardian's key does.
        _expectUnauthorized(admin, vault.PAUSER_ROLE());
        vm.prank(admin);
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
        period = uint64(bound(period, MIN_UNBONDING_PERIOD, vault.MAX_UNBONDING_PERIOD()));
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
        vault.setSlashPolicy(BPS, BPS, uint16(treasuryShare), treasury);
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
        assertEq(vault.slashDebt(alice), requested - slashed, "shortfall owed");
        _assertVaultSolvent();
    }

    function testFuzz_BucketRefillNeverExceedsCapacity(
        uint256 capacity,
        uint256 refill,
        uint256 stakeAmount,
        uint256 elapsed
    ) public {
        capacity = bound(capacity, vault.MIN_BUCKET_CAPACITY(), 2 * ACTOR_FUNDS);
        refill = bound(refill, 1, capacity);
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

    // ─── Slash debt and later slashes ────────────────────────────────────────

    /// @dev Total taken from alice (now and owed) by one slasher's 5,000 then 2,500 bps.
    function _takenBySequence() internal returns (uint256) {
        _slash(alice, MAX_SLASH_BPS);
        _slash(alice, 2_500);
        return STAKE - _info(alice).stake - _info(alice).unbonding + vault.slashDebt(alice);
    }

    function test_RateLimitDefersASlashButNeverEnlargesTheNext() public {
        _registerAndStake(alice, GPUS, STAKE);
        _registerAndStake(bob, GPUS, STAKE);
        uint256 snap = vm.snapshotState();
        uint256 ample = _takenBySequence();
        vm.revertToState(snap);

        _setRateLimit(1_000 ether, 1 ether);
        _slash(bob, 1_000); // empties the bucket
        uint256 deferred = _takenBySequence();
        assertEq(ample, 6_250 ether);
        assertEq(deferred, ample, "a bucket shortfall made the slash larger");
    }

    function test_SlashDebtNeverExceedsWhatTheProviderHolds() public {
        address other = makeAddr("otherSlasher");
        vm.startPrank(admin);
        vault.grantRole(vault.SLASHER_ROLE(), other);
        vm.stopPrank();
        _registerAndStake(alice, GPUS, STAKE);
        _registerAndStake(bob, GPUS, STAKE);
        _setRateLimit(1_000 ether, 1 ether);
        _slash(bob, 1_000); // empties the bucket

        _slash(alice, MAX_SLASH_BPS);
        _slash(alice, 2_500);
        vm.startPrank(other);
        vault.slash(alice, MAX_SLASH_BPS, REASON, EVIDENCE);
        vault.slash(alice, 2_500, REASON, EVIDENCE);
        vm.stopPrank();
        assertLe(
            vault.slashDebt(alice), uint256(_info(alice).stake) + _info(alice).unbonding, "owes more than it holds"
        );
    }
}
