// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IAccessControl} from "@openzeppelin/contracts/access/IAccessControl.sol";
import {IAccessControlDefaultAdminRules} from
    "@openzeppelin/contracts/access/extensions/IAccessControlDefaultAdminRules.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {IERC20Errors} from "@openzeppelin/contracts/interfaces/draft-IERC6093.sol";
import {Pausable} from "@openzeppelin/contracts/utils/Pausable.sol";

import {SwarmTestBase} from "./utils/SwarmTestBase.sol";
import {ContractWallet} from "./utils/ContractWallet.sol";
import {JobResults} from "./utils/JobResults.sol";
import {JobMarket} from "../src/JobMarket.sol";
import {StakingVault} from "../src/StakingVault.sol";
import {SwarmAccess} from "../src/base/SwarmAccess.sol";
import {IStakingVault} from "../src/interfaces/IStakingVault.sol";

contract JobMarketTest is SwarmTestBase {
    bytes32 internal constant DEFAULT_ADMIN_ROLE = 0x00;
    bytes32 internal constant MATCHER_ROLE = keccak256("MATCHER_ROLE");
    bytes32 internal constant ARBITER_ROLE = keccak256("ARBITER_ROLE");
    bytes32 internal constant SLASHER_ROLE = keccak256("SLASHER_ROLE");
    bytes32 internal constant PERMIT_TYPEHASH =
        keccak256("Permit(address owner,address spender,uint256 value,uint256 nonce,uint256 deadline)");

    bytes32 internal constant SPEC = keccak256("spec");
    bytes32 internal constant RESULT = keccak256("result");
    bytes32 internal constant REASON = "timeout";

    // The default job: a cap of 3 tokens per unit for 10 units, 30 tokens escrowed,
    // assigned at 2 tokens + 1 wei per unit and completed with 7 units used.
    uint128 internal constant CAP = 3 ether;
    uint64 internal constant UNITS = 10;
    uint256 internal constant ESCROW = 30 ether;
    uint128 internal constant RATE = 2 ether + 1;
    uint64 internal constant USED = 7;
    // 7 × (2e18 + 1) = 14e18 + 7; the fee at 250 bps is floor((14e18 + 7) / 40).
    uint256 internal constant PAYMENT = 14 ether + 7;
    uint256 internal constant FEE = 0.35 ether;
    uint256 internal constant PROVIDER_CUT = 13.65 ether + 7;
    uint256 internal constant REFUND = 16 ether - 7;
    // The buyer's dispute bond at 1,000 bps: 10% of the payment, rounded up.
    uint256 internal constant BOND = 1.4 ether + 1;

    uint256 internal constant ALICE_STAKE = 10_000 ether;
    uint16 internal constant MAX_FEE_RAISE = 2_000;
    uint16 internal constant BPS = 10_000;

    address internal slasher = makeAddr("slasher");
    address internal stranger = makeAddr("stranger");
    uint64 internal deadline;

    function setUp() public override {
        super.setUp();
        deadline = uint64(block.timestamp + 2 days);
        _registerAndStake(alice, 1, ALICE_STAKE);
        vm.prank(admin);
        vault.grantRole(SLASHER_ROLE, slasher);
    }

    // ─── Helpers ─────────────────────────────────────────────────────────────

    function _postDefault() internal returns (uint256) {
        return _post(carol, CAP, UNITS, deadline);
    }

    function _assign(uint256 jobId, address provider, uint128 price) internal {
        vm.prank(matcher);
        market.assignJob(jobId, provider, price);
    }

    /// @dev Completes with RESULT and `units`, signed by the job's provider.
    function _complete(uint256 jobId, uint64 units) internal {
        _completeWith(jobId, RESULT, units, _providerSignature(jobId, RESULT, units));
    }

    function _completeWith(uint256 jobId, bytes32 resultHash, uint64 units, bytes memory signature) internal {
        vm.prank(matcher);
        market.completeJob(jobId, resultHash, units, signature);
    }

    /// @dev Charges `units` for a failure by the job's own fault, signed by the job's provider.
    function _charge(uint256 jobId, uint64 units) internal {
        bytes memory signature = JobResults.signFailure(aliceKey, address(market), jobId, units);
        vm.prank(matcher);
        market.chargeJob(jobId, REASON, units, signature);
    }

    function _expectBadSignature(uint256 jobId) internal {
        vm.expectRevert(abi.encodeWithSelector(JobMarket.BadResultSignature.selector, jobId));
    }

    function _reassign(uint256 jobId, address provider, uint128 price, uint16 slashBps) internal {
        vm.prank(matcher);
        market.reassignJob(jobId, provider, price, REASON, slashBps);
    }

    /// @dev Makes bob an eligible provider, staked like alice.
    function _stakeBob() internal {
        _registerAndStake(bob, 1, ALICE_STAKE);
    }

    function _assigned() internal returns (uint256 jobId) {
        jobId = _postDefault();
        _assign(jobId, alice, RATE);
    }

    function _completed() internal returns (uint256 jobId) {
        jobId = _assigned();
        _complete(jobId, USED);
    }

    function _disputed() internal returns (uint256 jobId) {
        jobId = _completed();
        vm.prank(carol);
        market.disputeJob(jobId);
    }

    function _settled() internal returns (uint256 jobId) {
        jobId = _completed();
        vm.warp(block.timestamp + DISPUTE_WINDOW);
        market.settleJob(jobId);
    }

    function _pauseMarket() internal {
        vm.prank(guardian);
        market.pause();
    }

    function _status(uint256 jobId) internal view returns (JobMarket.Status) {
        return market.getJob(jobId).status;
    }

    function _stakeOf(address provider) internal view returns (uint256) {
        return vault.providerInfo(provider).stake;
    }

    function _expectUnauthorized(address account, bytes32 role) internal {
        vm.expectRevert(abi.encodeWithSelector(IAccessControl.AccessControlUnauthorizedAccount.selector, account, role));
    }

    function _expectWrongStatus(uint256 jobId, JobMarket.Status status) internal {
        vm.expectRevert(abi.encodeWithSelector(JobMarket.WrongStatus.selector, jobId, status));
    }

    function _split(bytes memory signature) internal pure returns (bytes32 r, bytes32 s, uint8 v) {
        assembly ("memory-safe") {
            r := mload(add(signature, 0x20))
            s := mload(add(signature, 0x40))
            v := byte(0, mload(add(signature, 0x60)))
        }
    }

    function _signPermit(uint256 key, address owner, uint256 value, uint256 permitDeadline)
        internal
        view
        returns (uint8 v, bytes32 r, bytes32 s)
    {
        bytes32 structHash =
            keccak256(abi.encode(PERMIT_TYPEHASH, owner, address(market), value, token.nonces(owner), permitDeadline));
        return vm.sign(key, keccak256(abi.encodePacked("\x19\x01", token.DOMAIN_SEPARATOR(), structHash)));
    }

    function _deployMarket(IERC20 token_, IStakingVault vault_, address admin_, address treasury_, uint16 fee, uint64 window)
        internal
        returns (JobMarket)
    {
        JobMarket.Params memory p = _marketParams();
        p.treasury = treasury_;
        p.feeBps = fee;
        p.disputeWindow = window;
        return new JobMarket(token_, vault_, admin_, p);
    }

    function _deployMarket(uint64 window, uint64 minWindow, uint16 bondBps) internal returns (JobMarket) {
        JobMarket.Params memory p = _marketParams();
        p.disputeWindow = window;
        p.minDisputeWindow = minWindow;
        p.disputeBondBps = bondBps;
        return new JobMarket(token, vault, admin, p);
    }

    // ─── Constructor ─────────────────────────────────────────────────────────

    function test_Constructor_SetsParametersRolesAndEmits() public {
        vm.expectEmit();
        emit JobMarket.FeeSet(FEE_BPS, treasury);
        vm.expectEmit();
        emit JobMarket.DisputeWindowSet(DISPUTE_WINDOW);
        vm.expectEmit();
        emit JobMarket.DisputeBondSet(DISPUTE_BOND_BPS, MIN_DISPUTE_BOND);
        vm.expectEmit();
        emit JobMarket.JobLimitsSet(MAX_JOB_DURATION, MIN_PRICE_PER_UNIT);
        JobMarket m = _deployMarket(token, vault, admin, treasury, FEE_BPS, DISPUTE_WINDOW);

        assertEq(address(m.token()), address(token));
        assertEq(address(m.vault()), address(vault));
        assertEq(m.feeBps(), FEE_BPS);
        assertEq(m.treasury(), treasury);
        assertEq(m.disputeWindow(), DISPUTE_WINDOW);
        assertEq(m.minDisputeWindow(), MIN_DISPUTE_WINDOW);
        assertEq(m.disputeBondBps(), DISPUTE_BOND_BPS);
        assertEq(m.nextJobId(), 1);
        assertEq(m.totalEscrowed(), 0);
        assertEq(m.minDisputeBond(), MIN_DISPUTE_BOND);
        assertEq(m.maxJobDuration(), MAX_JOB_DURATION);
        assertEq(m.minPricePerUnit(), MIN_PRICE_PER_UNIT);
        assertTrue(m.hasRole(DEFAULT_ADMIN_ROLE, admin));
        assertTrue(m.hasRole(m.PAUSER_ROLE(), guardian));
        assertFalse(m.hasRole(m.PAUSER_ROLE(), admin));
        assertTrue(m.hasRole(MATCHER_ROLE, matcher));
        assertTrue(m.hasRole(m.ARBITER_ROLE(), arbiter));
        assertFalse(m.hasRole(MATCHER_ROLE, admin));
    }

    function test_Constructor_AcceptsMaximumFeeAndWindow() public {
        JobMarket m = _deployMarket(token, vault, admin, treasury, 2_000, 7 days);
        assertEq(m.feeBps(), m.MAX_FEE_BPS());
        assertEq(m.disputeWindow(), m.MAX_DISPUTE_WINDOW());
    }

    function test_RevertWhen_ConstructorFeeTooHigh() public {
        vm.expectRevert(abi.encodeWithSelector(JobMarket.FeeTooHigh.selector, uint16(2_001), uint16(2_000)));
        _deployMarket(token, vault, admin, treasury, 2_001, DISPUTE_WINDOW);
    }

    function test_RevertWhen_ConstructorZeroToken() public {
        vm.expectRevert(SwarmAccess.ZeroAddress.selector);
        _deployMarket(IERC20(address(0)), vault, admin, treasury, FEE_BPS, DISPUTE_WINDOW);
    }

    function test_RevertWhen_ConstructorZeroVault() public {
        vm.expectRevert(SwarmAccess.ZeroAddress.selector);
        _deployMarket(token, IStakingVault(address(0)), admin, treasury, FEE_BPS, DISPUTE_WINDOW);
    }

    function test_RevertWhen_ConstructorZeroAdmin() public {
        vm.expectRevert(
            abi.encodeWithSelector(IAccessControlDefaultAdminRules.AccessControlInvalidDefaultAdmin.selector, address(0))
        );
        _deployMarket(token, vault, address(0), treasury, FEE_BPS, DISPUTE_WINDOW);
    }

    function test_RevertWhen_ConstructorZeroTreasury() public {
        vm.expectRevert(SwarmAccess.ZeroAddress.selector);
        _deployMarket(token, vault, admin, address(0), FEE_BPS, DISPUTE_WINDOW);
    }

    function test_RevertWhen_ConstructorDisputeWindowTooLong() public {
        vm.expectRevert(
            abi.encodeWithSelector(JobMarket.DisputeWindowTooLong.selector, uint64(7 days + 1), uint64(7 days))
        );
        _deployMarket(token, vault, admin, treasury, FEE_BPS, 7 days + 1);
    }

    // ─── setFee / setDisputeWindow ───────────────────────────────────────────

    function test_SetFee_UpdatesFeeAndTreasuryAndEmits() public {
        address newTreasury = makeAddr("newTreasury");
        vm.expectEmit(address(market));
        emit JobMarket.FeeSet(2_000, newTreasury);
        vm.prank(admin);
        market.setFee(2_000, newTreasury);
        assertEq(market.feeBps(), 2_000);
        assertEq(market.treasury(), newTreasury);
    }

    function test_RevertWhen_SetFeeTooHigh() public {
        vm.expectRevert(abi.encodeWithSelector(JobMarket.FeeTooHigh.selector, uint16(2_001), uint16(2_000)));
        vm.prank(admin);
        market.setFee(2_001, treasury);
        assertEq(market.feeBps(), FEE_BPS);
    }

    function test_RevertWhen_SetFeeZeroTreasury() public {
        vm.expectRevert(SwarmAccess.ZeroAddress.selector);
        vm.prank(admin);
        market.setFee(100, address(0));
    }

    function test_RevertWhen_SetFeeCallerNotAdmin() public {
        _expectUnauthorized(matcher, DEFAULT_ADMIN_ROLE);
        vm.prank(matcher);
        market.setFee(0, matcher);
    }

    function test_SetDisputeWindow_UpdatesAndEmits() public {
        vm.expectEmit(address(market));
        emit JobMarket.DisputeWindowSet(7 days);
        vm.prank(admin);
        market.setDisputeWindow(7 days);
        assertEq(market.disputeWindow(), 7 days);
    }

    function test_SetDisputeWindow_AppliesToJobsCompletedLater() public {
        uint256 jobId = _assigned();
        vm.prank(admin);
        market.setDisputeWindow(3 hours);
        _complete(jobId, USED);
        assertEq(market.getJob(jobId).disputeEnd, block.timestamp + 3 hours);
    }

    function test_RevertWhen_SetDisputeWindowTooLong() public {
        vm.expectRevert(
            abi.encodeWithSelector(JobMarket.DisputeWindowTooLong.selector, uint64(7 days + 1), uint64(7 days))
        );
        vm.prank(admin);
        market.setDisputeWindow(7 days + 1);
        assertEq(market.disputeWindow(), DISPUTE_WINDOW);
    }

    function test_RevertWhen_SetDisputeWindowCallerNotAdmin() public {
        _expectUnauthorized(arbiter, DEFAULT_ADMIN_ROLE);
        vm.prank(arbiter);
        market.setDisputeWindow(1 hours);
    }

    function test_RevertWhen_PauseCallerNotPauser() public {
        _expectUnauthorized(matcher, market.PAUSER_ROLE());
        vm.prank(matcher);
        market.pause();
    }

    // ─── Floors and ceilings of the settings ─────────────────────────────────

    function test_Constructor_AcceptsWindowAtItsFloorAndBondAtItsBounds() public {
        JobMarket m = _deployMarket(MIN_DISPUTE_WINDOW, MIN_DISPUTE_WINDOW, 100);
        assertEq(m.disputeWindow(), MIN_DISPUTE_WINDOW);
        assertEq(m.disputeBondBps(), m.MIN_DISPUTE_BOND_BPS());
        m = _deployMarket(7 days, 7 days, 10_000);
        assertEq(m.minDisputeWindow(), m.MAX_DISPUTE_WINDOW());
        assertEq(m.disputeBondBps(), m.MAX_DISPUTE_BOND_BPS());
    }

    function test_RevertWhen_ConstructorDisputeWindowBelowFloor() public {
        vm.expectRevert(
            abi.encodeWithSelector(JobMarket.DisputeWindowTooShort.selector, MIN_DISPUTE_WINDOW - 1, MIN_DISPUTE_WINDOW)
        );
        _deployMarket(MIN_DISPUTE_WINDOW - 1, MIN_DISPUTE_WINDOW, DISPUTE_BOND_BPS);
    }

    function test_RevertWhen_ConstructorZeroDisputeWindowFloor() public {
        vm.expectRevert(abi.encodeWithSelector(JobMarket.MinDisputeWindowOutOfRange.selector, 0, 7 days));
        _deployMarket(DISPUTE_WINDOW, 0, DISPUTE_BOND_BPS);
    }

    function test_RevertWhen_ConstructorDisputeWindowFloorAboveCeiling() public {
        vm.expectRevert(abi.encodeWithSelector(JobMarket.MinDisputeWindowOutOfRange.selector, 7 days + 1, 7 days));
        _deployMarket(7 days, 7 days + 1, DISPUTE_BOND_BPS);
    }

    function test_RevertWhen_ConstructorDisputeBondOutOfRange() public {
        vm.expectRevert(abi.encodeWithSelector(JobMarket.DisputeBondOutOfRange.selector, 99, 100, 10_000));
        _deployMarket(DISPUTE_WINDOW, MIN_DISPUTE_WINDOW, 99);
        vm.expectRevert(abi.encodeWithSelector(JobMarket.DisputeBondOutOfRange.selector, 10_001, 100, 10_000));
        _deployMarket(DISPUTE_WINDOW, MIN_DISPUTE_WINDOW, 10_001);
    }

    function test_RevertWhen_SetDisputeWindowBelowFloor() public {
        vm.expectRevert(
            abi.encodeWithSelector(JobMarket.DisputeWindowTooShort.selector, MIN_DISPUTE_WINDOW - 1, MIN_DISPUTE_WINDOW)
        );
        vm.prank(admin);
        market.setDisputeWindow(MIN_DISPUTE_WINDOW - 1);
        vm.expectRevert(abi.encodeWithSelector(JobMarket.DisputeWindowTooShort.selector, 0, MIN_DISPUTE_WINDOW));
        vm.prank(admin);
        market.setDisputeWindow(0);
        assertEq(market.disputeWindow(), DISPUTE_WINDOW);
    }

    function test_SetDisputeWindow_AcceptsTheFloor() public {
        vm.prank(admin);
        market.setDisputeWindow(MIN_DISPUTE_WINDOW);
        assertEq(market.disputeWindow(), MIN_DISPUTE_WINDOW);
    }

    function test_SetDisputeBond_UpdatesAndEmits() public {
        vm.expectEmit(address(market));
        emit JobMarket.DisputeBondSet(10_000, 5 ether);
        vm.prank(admin);
        market.setDisputeBond(10_000, 5 ether);
        assertEq(market.disputeBondBps(), 10_000);
        assertEq(market.minDisputeBond(), 5 ether);
        vm.prank(admin);
        market.setDisputeBond(100, 1);
        assertEq(market.disputeBondBps(), 100);
    }

    function test_RevertWhen_SetDisputeBondOutOfRange() public {
        vm.startPrank(admin);
        vm.expectRevert(abi.encodeWithSelector(JobMarket.DisputeBondOutOfRange.selector, 0, 100, 10_000));
        market.setDisputeBond(0, MIN_DISPUTE_BOND);
        vm.expectRevert(abi.encodeWithSelector(JobMarket.DisputeBondOutOfRange.selector, 10_001, 100, 10_000));
        market.setDisputeBond(10_001, MIN_DISPUTE_BOND);
        vm.stopPrank();
        assertEq(market.disputeBondBps(), DISPUTE_BOND_BPS);
    }

    function test_RevertWhen_SetDisputeBondCallerNotAdmin() public {
        _expectUnauthorized(matcher, DEFAULT_ADMIN_ROLE);
        vm.prank(matcher);
        market.setDisputeBond(500, MIN_DISPUTE_BOND);
    }

    // ─── postJob ─────────────────────────────────────────────────────────────

    function test_PostJob_PullsEscrowAndRecordsJob() public {
        uint256 jobId = _postDefault();

        assertEq(jobId, 1);
        assertEq(market.nextJobId(), 2);
        assertEq(token.balanceOf(carol), ACTOR_FUNDS - ESCROW);
        assertEq(token.balanceOf(address(market)), ESCROW);
        assertEq(market.totalEscrowed(), ESCROW);
        assertEq(market.escrowOf(jobId), ESCROW);

        JobMarket.Job memory job = market.getJob(jobId);
        assertEq(job.buyer, carol);
        assertEq(job.deadline, deadline);
        assertEq(uint8(job.status), uint8(JobMarket.Status.Posted));
        assertEq(job.maxPricePerUnit, CAP);
        assertEq(job.maxUnits, UNITS);
        assertEq(job.provider, address(0));
        assertEq(job.pricePerUnit, 0);
    }

    function test_PostJob_EmitsJobPosted() public {
        vm.expectEmit(address(market));
        emit JobMarket.JobPosted(1, carol, SPEC, CAP, UNITS, deadline, ESCROW);
        _postDefault();
    }

    function test_PostJob_IdsIncreaseAndEscrowAccumulates() public {
        uint256 first = _postDefault();
        uint256 second = _post(dave, 1 ether, 5, deadline);
        uint256 third = _postDefault();
        assertEq(first, 1);
        assertEq(second, 2);
        assertEq(third, 3);
        assertEq(market.totalEscrowed(), 2 * ESCROW + 5 ether);
        assertEq(token.balanceOf(address(market)), 2 * ESCROW + 5 ether);
        assertEq(market.getJob(second).buyer, dave);
    }

    function test_RevertWhen_PostJobPriceZero() public {
        vm.expectRevert(JobMarket.ZeroAmount.selector);
        _post(carol, 0, UNITS, deadline);
    }

    function test_RevertWhen_PostJobUnitsZero() public {
        vm.expectRevert(JobMarket.ZeroAmount.selector);
        _post(carol, CAP, 0, deadline);
    }

    function test_RevertWhen_PostJobDeadlineIsNow() public {
        uint64 nowTs = uint64(block.timestamp);
        vm.expectRevert(abi.encodeWithSelector(JobMarket.DeadlineNotInFuture.selector, nowTs, nowTs));
        _post(carol, CAP, UNITS, nowTs);
    }

    function test_RevertWhen_PostJobDeadlineInPast() public {
        uint64 nowTs = uint64(block.timestamp);
        vm.expectRevert(abi.encodeWithSelector(JobMarket.DeadlineNotInFuture.selector, nowTs - 1, nowTs));
        _post(carol, CAP, UNITS, nowTs - 1);
    }

    function test_RevertWhen_PostJobEscrowTooLarge() public {
        uint256 escrow = uint256(type(uint128).max) * 2;
        vm.expectRevert(abi.encodeWithSelector(JobMarket.EscrowTooLarge.selector, escrow));
        _post(carol, type(uint128).max, 2, deadline);
    }

    function test_RevertWhen_PostJobEscrowAtUint128MaxExceedsBalance() public {
        // Exactly type(uint128).max is not too large: it reaches the transfer.
        vm.expectRevert(
            abi.encodeWithSelector(
                IERC20Errors.ERC20InsufficientBalance.selector, carol, ACTOR_FUNDS, uint256(type(uint128).max)
            )
        );
        _post(carol, type(uint128).max, 1, deadline);
    }

    function test_RevertWhen_PostJobAllowanceInsufficient() public {
        vm.prank(carol);
        token.approve(address(market), ESCROW - 1);
        vm.expectRevert(
            abi.encodeWithSelector(
                IERC20Errors.ERC20InsufficientAllowance.selector, address(market), ESCROW - 1, ESCROW
            )
        );
        _postDefault();
    }

    function test_RevertWhen_PostJobBalanceInsufficient() public {
        vm.prank(stranger);
        token.approve(address(market), type(uint256).max);
        vm.prank(carol);
        token.transfer(stranger, ESCROW - 1);
        vm.expectRevert(
            abi.encodeWithSelector(IERC20Errors.ERC20InsufficientBalance.selector, stranger, ESCROW - 1, ESCROW)
        );
        _post(stranger, CAP, UNITS, deadline);
    }

    function test_RevertWhen_PostJobPaused() public {
        _pauseMarket();
        vm.expectRevert(Pausable.EnforcedPause.selector);
        _postDefault();
    }

    function test_PostJob_WorksAfterUnpause() public {
        _pauseMarket();
        vm.prank(guardian);
        market.unpause();
        assertEq(_postDefault(), 1);
        assertEq(market.totalEscrowed(), ESCROW);
    }

    // ─── postJobWithPermit ───────────────────────────────────────────────────

    function _permitBuyer() internal returns (address buyer, uint256 key) {
        (buyer, key) = makeAddrAndKey("permitBuyer");
        vm.prank(admin);
        token.transfer(buyer, 100 ether);
    }

    function test_PostJobWithPermit_PostsWithSignedPermit() public {
        (address buyer, uint256 key) = _permitBuyer();
        uint256 permitDeadline = block.timestamp + 1 hours;
        (uint8 v, bytes32 r, bytes32 s) = _signPermit(key, buyer, ESCROW, permitDeadline);

        vm.expectEmit(address(market));
        emit JobMarket.JobPosted(1, buyer, SPEC, CAP, UNITS, deadline, ESCROW);
        vm.prank(buyer);
        uint256 jobId = market.postJobWithPermit(SPEC, CAP, UNITS, deadline, permitDeadline, v, r, s);

        assertEq(jobId, 1);
        assertEq(token.nonces(buyer), 1);
        assertEq(token.allowance(buyer, address(market)), 0);
        assertEq(token.balanceOf(buyer), 100 ether - ESCROW);
        assertEq(token.balanceOf(address(market)), ESCROW);
        assertEq(market.getJob(jobId).buyer, buyer);
    }

    function test_PostJobWithPermit_WorksWhenPermitAlreadyUsed() public {
        (address buyer, uint256 key) = _permitBuyer();
        uint256 permitDeadline = block.timestamp + 1 hours;
        (uint8 v, bytes32 r, bytes32 s) = _signPermit(key, buyer, ESCROW, permitDeadline);
        // Someone front-runs the permit; the allowance is already in place.
        vm.prank(stranger);
        token.permit(buyer, address(market), ESCROW, permitDeadline, v, r, s);
        assertEq(token.allowance(buyer, address(market)), ESCROW);

        vm.prank(buyer);
        uint256 jobId = market.postJobWithPermit(SPEC, CAP, UNITS, deadline, permitDeadline, v, r, s);

        assertEq(jobId, 1);
        assertEq(token.nonces(buyer), 1);
        assertEq(token.allowance(buyer, address(market)), 0);
        assertEq(token.balanceOf(address(market)), ESCROW);
        assertEq(market.totalEscrowed(), ESCROW);
    }

    function test_RevertWhen_PostJobWithPermitInvalidAndNoAllowance() public {
        (address buyer,) = _permitBuyer();
        (, uint256 wrongKey) = makeAddrAndKey("notTheBuyer");
        uint256 permitDeadline = block.timestamp + 1 hours;
        (uint8 v, bytes32 r, bytes32 s) = _signPermit(wrongKey, buyer, ESCROW, permitDeadline);
        vm.expectRevert(
            abi.encodeWithSelector(IERC20Errors.ERC20InsufficientAllowance.selector, address(market), 0, ESCROW)
        );
        vm.prank(buyer);
        market.postJobWithPermit(SPEC, CAP, UNITS, deadline, permitDeadline, v, r, s);
    }

    function test_RevertWhen_PostJobWithPermitPaused() public {
        (address buyer, uint256 key) = _permitBuyer();
        (uint8 v, bytes32 r, bytes32 s) = _signPermit(key, buyer, ESCROW, block.timestamp + 1 hours);
        _pauseMarket();
        vm.expectRevert(Pausable.EnforcedPause.selector);
        vm.prank(buyer);
        market.postJobWithPermit(SPEC, CAP, UNITS, deadline, block.timestamp + 1 hours, v, r, s);
        assertEq(token.nonces(buyer), 0);
    }

    // ─── cancelJob ───────────────────────────────────────────────────────────

    function test_CancelJob_RefundsInFullAndEmits() public {
        uint256 jobId = _postDefault();
        vm.expectEmit(address(market));
        emit JobMarket.JobCancelled(jobId, ESCROW);
        vm.prank(carol);
        market.cancelJob(jobId);

        assertEq(token.balanceOf(carol), ACTOR_FUNDS);
        assertEq(token.balanceOf(address(market)), 0);
        assertEq(market.totalEscrowed(), 0);
        assertEq(uint8(_status(jobId)), uint8(JobMarket.Status.Cancelled));
    }

    function test_RevertWhen_CancelJobNotBuyer() public {
        uint256 jobId = _postDefault();
        vm.expectRevert(abi.encodeWithSelector(JobMarket.NotBuyer.selector, jobId, dave));
        vm.prank(dave);
        market.cancelJob(jobId);
    }

    function test_RevertWhen_CancelJobAfterAssignment() public {
        uint256 jobId = _assigned();
        _expectWrongStatus(jobId, JobMarket.Status.Assigned);
        vm.prank(carol);
        market.cancelJob(jobId);
    }

    function test_RevertWhen_CancelJobTwice() public {
        uint256 jobId = _postDefault();
        vm.startPrank(carol);
        market.cancelJob(jobId);
        _expectWrongStatus(jobId, JobMarket.Status.Cancelled);
        market.cancelJob(jobId);
        vm.stopPrank();
        assertEq(token.balanceOf(carol), ACTOR_FUNDS);
    }

    function test_RevertWhen_CancelJobUnknown() public {
        vm.expectRevert(abi.encodeWithSelector(JobMarket.UnknownJob.selector, 99));
        vm.prank(carol);
        market.cancelJob(99);
    }

    function test_CancelJob_WorksWhilePaused() public {
        uint256 jobId = _postDefault();
        _pauseMarket();
        vm.prank(carol);
        market.cancelJob(jobId);
        assertEq(token.balanceOf(carol), ACTOR_FUNDS);
        assertEq(uint8(_status(jobId)), uint8(JobMarket.Status.Cancelled));
    }

    // ─── assignJob ───────────────────────────────────────────────────────────

    function test_AssignJob_RecordsProviderAndPriceAndEmits() public {
        uint256 jobId = _postDefault();
        vm.expectEmit(address(market));
        emit JobMarket.JobAssigned(jobId, alice, RATE);
        _assign(jobId, alice, RATE);

        JobMarket.Job memory job = market.getJob(jobId);
        assertEq(uint8(job.status), uint8(JobMarket.Status.Assigned));
        assertEq(job.provider, alice);
        assertEq(job.pricePerUnit, RATE);
        assertEq(job.buyer, carol);
        assertEq(job.maxPricePerUnit, CAP);
        assertEq(job.maxUnits, UNITS);
        assertEq(market.escrowOf(jobId), ESCROW);
    }

    function test_AssignJob_AcceptsPriceAtCapAndAtDeadline() public {
        uint256 jobId = _postDefault();
        vm.warp(deadline);
        _assign(jobId, alice, CAP);
        assertEq(market.getJob(jobId).pricePerUnit, CAP);
    }

    function test_RevertWhen_AssignJobCallerNotMatcher() public {
        uint256 jobId = _postDefault();
        _expectUnauthorized(carol, MATCHER_ROLE);
        vm.prank(carol);
        market.assignJob(jobId, alice, RATE);
    }

    function test_RevertWhen_AssignJobAlreadyAssigned() public {
        uint256 jobId = _assigned();
        _expectWrongStatus(jobId, JobMarket.Status.Assigned);
        _assign(jobId, alice, RATE);
    }

    function test_RevertWhen_AssignJobCancelled() public {
        uint256 jobId = _postDefault();
        vm.prank(carol);
        market.cancelJob(jobId);
        _expectWrongStatus(jobId, JobMarket.Status.Cancelled);
        _assign(jobId, alice, RATE);
    }

    function test_RevertWhen_AssignJobUnknown() public {
        vm.expectRevert(abi.encodeWithSelector(JobMarket.UnknownJob.selector, 7));
        _assign(7, alice, RATE);
    }

    function test_RevertWhen_AssignJobAfterDeadline() public {
        uint256 jobId = _postDefault();
        vm.warp(deadline + 1);
        vm.expectRevert(abi.encodeWithSelector(JobMarket.DeadlinePassed.selector, jobId, deadline));
        _assign(jobId, alice, RATE);
    }

    function test_RevertWhen_AssignJobPriceAboveCap() public {
        uint256 jobId = _postDefault();
        vm.expectRevert(abi.encodeWithSelector(JobMarket.PriceAboveCap.selector, uint256(CAP) + 1, uint256(CAP)));
        _assign(jobId, alice, CAP + 1);
    }

    function test_RevertWhen_AssignJobProviderNotRegistered() public {
        uint256 jobId = _postDefault();
        vm.expectRevert(abi.encodeWithSelector(StakingVault.NotRegistered.selector, bob));
        _assign(jobId, bob, RATE);
    }

    function test_RevertWhen_AssignJobProviderStakeBelowMinimum() public {
        _registerAndStake(bob, 2, MIN_STAKE_PER_GPU);
        uint256 jobId = _postDefault();
        vm.expectRevert(
            abi.encodeWithSelector(
                StakingVault.StakeBelowMinimum.selector, bob, uint256(MIN_STAKE_PER_GPU), 2 * uint256(MIN_STAKE_PER_GPU)
            )
        );
        _assign(jobId, bob, RATE);
    }

    function test_RevertWhen_AssignJobProviderJailed() public {
        uint256 jobId = _postDefault();
        uint64 until = uint64(block.timestamp + 1 hours);
        vm.prank(slasher);
        vault.jail(alice, until);
        vm.expectRevert(abi.encodeWithSelector(StakingVault.ProviderJailed.selector, alice, until));
        _assign(jobId, alice, RATE);
    }

    function test_RevertWhen_AssignJobProviderTombstoned() public {
        uint256 jobId = _postDefault();
        vm.prank(slasher);
        vault.tombstone(alice);
        vm.expectRevert(abi.encodeWithSelector(StakingVault.ProviderTombstoned.selector, alice));
        _assign(jobId, alice, RATE);
    }

    function test_RevertWhen_AssignJobPaused() public {
        uint256 jobId = _postDefault();
        _pauseMarket();
        vm.expectRevert(Pausable.EnforcedPause.selector);
        _assign(jobId, alice, RATE);
        assertEq(uint8(_status(jobId)), uint8(JobMarket.Status.Posted));
    }

    // ─── reassignJob ─────────────────────────────────────────────────────────

    function test_ReassignJob_MovesJobToNewProviderAndKeepsEscrow() public {
        uint256 jobId = _assigned();
        _stakeBob();
        vm.expectEmit(address(market));
        emit JobMarket.JobReassigned(jobId, alice, bob, CAP, REASON, 0);
        _reassign(jobId, bob, CAP, 0);

        JobMarket.Job memory job = market.getJob(jobId);
        assertEq(uint8(job.status), uint8(JobMarket.Status.Assigned));
        assertEq(job.provider, bob);
        assertEq(job.pricePerUnit, CAP);
        assertEq(job.buyer, carol);
        assertEq(job.deadline, deadline);
        assertEq(job.maxPricePerUnit, CAP);
        assertEq(job.maxUnits, UNITS);
        assertEq(job.feeBps, FEE_BPS);
        assertEq(market.escrowOf(jobId), ESCROW);
        assertEq(market.totalEscrowed(), ESCROW);
        assertEq(token.balanceOf(address(market)), ESCROW);
        assertEq(token.balanceOf(carol), ACTOR_FUNDS - ESCROW);
        assertEq(_stakeOf(alice), ALICE_STAKE);
    }

    function test_ReassignJob_KeepsTheFeeAgreedAtFirstAssignment() public {
        uint256 jobId = _assigned();
        _stakeBob();
        vm.prank(admin);
        market.setFee(MAX_FEE_RAISE, treasury);
        _reassign(jobId, bob, RATE, 0);
        assertEq(market.getJob(jobId).feeBps, FEE_BPS);
    }

    function test_ReassignJob_SettlementPaysTheNewProvider() public {
        uint256 jobId = _postDefault();
        _assign(jobId, alice, CAP);
        _stakeBob();
        vm.prank(admin);
        market.setFee(MAX_FEE_RAISE, treasury); // after the first assignment: not this job's fee
        _reassign(jobId, bob, RATE, 0);
        _complete(jobId, USED);
        uint256 treasuryBefore = token.balanceOf(treasury);
        vm.warp(block.timestamp + DISPUTE_WINDOW);

        vm.expectEmit(address(market));
        emit JobMarket.JobSettled(jobId, bob, PROVIDER_CUT, FEE, REFUND);
        market.settleJob(jobId);

        assertEq(token.balanceOf(bob), ACTOR_FUNDS - ALICE_STAKE + PROVIDER_CUT);
        assertEq(token.balanceOf(alice), ACTOR_FUNDS - ALICE_STAKE);
        assertEq(token.balanceOf(treasury), treasuryBefore + FEE);
        assertEq(token.balanceOf(carol), ACTOR_FUNDS - ESCROW + REFUND);
        assertEq(token.balanceOf(address(market)), 0);
        assertEq(market.totalEscrowed(), 0);
    }

    function test_ReassignJob_SlashesThePreviousProvider() public {
        uint256 jobId = _assigned();
        _stakeBob();
        uint16 slashBps = 2_500;
        uint256 slashed = ALICE_STAKE * slashBps / BPS;
        uint256 treasuryBefore = token.balanceOf(treasury);

        vm.expectEmit(address(market));
        emit JobMarket.JobReassigned(jobId, alice, bob, RATE, REASON, slashBps);
        vm.expectEmit(address(vault));
        emit StakingVault.Slashed(alice, REASON, slashed, 0, slashBps, bytes32(jobId), slashed / 2);
        _reassign(jobId, bob, RATE, slashBps);

        assertEq(_stakeOf(alice), ALICE_STAKE - slashed);
        assertEq(_stakeOf(bob), ALICE_STAKE);
        assertEq(token.balanceOf(treasury), treasuryBefore + slashed / 2);
        assertEq(market.getJob(jobId).provider, bob);
        assertEq(market.totalEscrowed(), ESCROW);
        assertEq(token.balanceOf(address(market)), ESCROW);
        assertEq(token.balanceOf(carol), ACTOR_FUNDS - ESCROW);
    }

    function test_ReassignJob_AcceptsPriceAtCapAndAtDeadline() public {
        uint256 jobId = _assigned();
        _stakeBob();
        vm.warp(deadline);
        _reassign(jobId, bob, CAP, 0);
        assertEq(market.getJob(jobId).pricePerUnit, CAP);
    }

    function test_ReassignJob_MayMoveBackToAnEarlierProvider() public {
        uint256 jobId = _assigned();
        _stakeBob();
        _reassign(jobId, bob, RATE, 0);
        _reassign(jobId, alice, RATE - 1, 0);
        assertEq(market.getJob(jobId).provider, alice);
        assertEq(market.getJob(jobId).pricePerUnit, RATE - 1);
        assertEq(market.totalEscrowed(), ESCROW);
    }

    function test_RevertWhen_ReassignJobCallerNotMatcher() public {
        uint256 jobId = _assigned();
        _stakeBob();
        _expectUnauthorized(carol, MATCHER_ROLE);
        vm.prank(carol);
        market.reassignJob(jobId, bob, RATE, REASON, 0);
    }

    function test_RevertWhen_ReassignJobPosted() public {
        uint256 jobId = _postDefault();
        _stakeBob();
        _expectWrongStatus(jobId, JobMarket.Status.Posted);
        _reassign(jobId, bob, RATE, 0);
    }

    function test_RevertWhen_ReassignJobCompleted() public {
        uint256 jobId = _completed();
        _stakeBob();
        _expectWrongStatus(jobId, JobMarket.Status.Completed);
        _reassign(jobId, bob, RATE, 0);
    }

    function test_RevertWhen_ReassignJobDisputed() public {
        uint256 jobId = _disputed();
        _stakeBob();
        _expectWrongStatus(jobId, JobMarket.Status.Disputed);
        _reassign(jobId, bob, RATE, 0);
    }

    function test_RevertWhen_ReassignJobSettled() public {
        uint256 jobId = _settled();
        _stakeBob();
        _expectWrongStatus(jobId, JobMarket.Status.Settled);
        _reassign(jobId, bob, RATE, 0);
    }

    function test_RevertWhen_ReassignJobFailed() public {
        uint256 jobId = _assigned();
        vm.prank(matcher);
        market.failJob(jobId, REASON, 0);
        _stakeBob();
        _expectWrongStatus(jobId, JobMarket.Status.Failed);
        _reassign(jobId, bob, RATE, 0);
    }

    function test_RevertWhen_ReassignJobUnknown() public {
        _stakeBob();
        vm.expectRevert(abi.encodeWithSelector(JobMarket.UnknownJob.selector, 7));
        _reassign(7, bob, RATE, 0);
    }

    function test_RevertWhen_ReassignJobAfterDeadline() public {
        uint256 jobId = _assigned();
        _stakeBob();
        vm.warp(deadline + 1);
        vm.expectRevert(abi.encodeWithSelector(JobMarket.DeadlinePassed.selector, jobId, deadline));
        _reassign(jobId, bob, RATE, 0);
    }

    function test_RevertWhen_ReassignJobSameProvider() public {
        uint256 jobId = _assigned();
        vm.expectRevert(abi.encodeWithSelector(JobMarket.SameProvider.selector, jobId, alice));
        _reassign(jobId, alice, RATE, 500);
        assertEq(_stakeOf(alice), ALICE_STAKE);
    }

    function test_RevertWhen_ReassignJobPriceAboveCap() public {
        uint256 jobId = _assigned();
        _stakeBob();
        vm.expectRevert(abi.encodeWithSelector(JobMarket.PriceAboveCap.selector, uint256(CAP) + 1, uint256(CAP)));
        _reassign(jobId, bob, CAP + 1, 0);
    }

    function test_RevertWhen_ReassignJobProviderNotRegistered() public {
        uint256 jobId = _assigned();
        vm.expectRevert(abi.encodeWithSelector(StakingVault.NotRegistered.selector, bob));
        _reassign(jobId, bob, RATE, 0);
    }

    function test_RevertWhen_ReassignJobProviderUnstaked() public {
        uint256 jobId = _assigned();
        _stakeBob();
        vm.prank(bob);
        vault.requestUnstake(ALICE_STAKE);
        vm.expectRevert(
            abi.encodeWithSelector(StakingVault.StakeBelowMinimum.selector, bob, 0, uint256(MIN_STAKE_PER_GPU))
        );
        _reassign(jobId, bob, RATE, 0);
    }

    function test_RevertWhen_ReassignJobProviderJailed() public {
        uint256 jobId = _assigned();
        _stakeBob();
        uint64 until = uint64(block.timestamp + 1 hours);
        vm.prank(slasher);
        vault.jail(bob, until);
        vm.expectRevert(abi.encodeWithSelector(StakingVault.ProviderJailed.selector, bob, until));
        _reassign(jobId, bob, RATE, 0);
    }

    function test_RevertWhen_ReassignJobProviderTombstoned() public {
        uint256 jobId = _assigned();
        _stakeBob();
        vm.prank(slasher);
        vault.tombstone(bob);
        vm.expectRevert(abi.encodeWithSelector(StakingVault.ProviderTombstoned.selector, bob));
        _reassign(jobId, bob, RATE, 0);
    }

    function test_RevertWhen_ReassignJobPaused() public {
        uint256 jobId = _assigned();
        _stakeBob();
        _pauseMarket();
        vm.expectRevert(Pausable.EnforcedPause.selector);
        _reassign(jobId, bob, RATE, 0);
        assertEq(market.getJob(jobId).provider, alice);
    }

    function test_ReassignJob_SlashAboveVaultCapIsAppliedAtTheCap() public {
        uint256 jobId = _assigned();
        _stakeBob();
        vm.expectEmit(address(vault));
        emit StakingVault.SlashCapped(alice, address(market), MAX_SLASH_BPS + 1, MAX_SLASH_BPS);
        _reassign(jobId, bob, RATE, MAX_SLASH_BPS + 1);
        assertEq(market.getJob(jobId).provider, bob);
        assertEq(_stakeOf(alice), ALICE_STAKE - ALICE_STAKE * MAX_SLASH_BPS / BPS);
        assertEq(market.totalEscrowed(), ESCROW);
    }

    // ─── completeJob ─────────────────────────────────────────────────────────

    function test_CompleteJob_RecordsResultAndOpensDisputeWindow() public {
        uint256 jobId = _assigned();
        uint64 disputeEnd = uint64(block.timestamp) + DISPUTE_WINDOW;
        vm.expectEmit(address(market));
        emit JobMarket.JobCompleted(jobId, RESULT, USED, disputeEnd);
        _complete(jobId, USED);

        JobMarket.Job memory job = market.getJob(jobId);
        assertEq(uint8(job.status), uint8(JobMarket.Status.Completed));
        assertEq(job.resultHash, RESULT);
        assertEq(job.unitsUsed, USED);
        assertEq(job.disputeEnd, disputeEnd);
        assertEq(market.escrowOf(jobId), ESCROW);
    }

    function test_CompleteJob_AcceptsMaxUnitsAtDeadline() public {
        uint256 jobId = _assigned();
        vm.warp(deadline);
        _complete(jobId, UNITS);
        assertEq(market.getJob(jobId).unitsUsed, UNITS);
        assertEq(market.getJob(jobId).disputeEnd, deadline + DISPUTE_WINDOW);
    }

    function test_CompleteJob_WorksWhilePaused() public {
        uint256 jobId = _assigned();
        _pauseMarket();
        _complete(jobId, USED);
        assertEq(uint8(_status(jobId)), uint8(JobMarket.Status.Completed));
    }

    function test_RevertWhen_CompleteJobCallerNotMatcher() public {
        uint256 jobId = _assigned();
        bytes memory signature = _providerSignature(jobId, RESULT, USED);
        _expectUnauthorized(alice, MATCHER_ROLE);
        vm.prank(alice); // even the provider, with its own signature
        market.completeJob(jobId, RESULT, USED, signature);
    }

    function test_RevertWhen_CompleteJobNotAssigned() public {
        uint256 jobId = _postDefault();
        bytes memory signature = _signResult(aliceKey, jobId, RESULT, USED);
        _expectWrongStatus(jobId, JobMarket.Status.Posted);
        _completeWith(jobId, RESULT, USED, signature);
    }

    function test_RevertWhen_CompleteJobTwice() public {
        uint256 jobId = _completed();
        bytes memory signature = _providerSignature(jobId, RESULT, USED);
        _expectWrongStatus(jobId, JobMarket.Status.Completed);
        _completeWith(jobId, RESULT, USED, signature);
    }

    function test_RevertWhen_CompleteJobAfterDeadline() public {
        uint256 jobId = _assigned();
        bytes memory signature = _providerSignature(jobId, RESULT, USED);
        vm.warp(deadline + 1);
        vm.expectRevert(abi.encodeWithSelector(JobMarket.DeadlinePassed.selector, jobId, deadline));
        _completeWith(jobId, RESULT, USED, signature);
    }

    function test_RevertWhen_CompleteJobUnitsAboveMax() public {
        uint256 jobId = _assigned();
        bytes memory signature = _providerSignature(jobId, RESULT, UNITS + 1);
        vm.expectRevert(
            abi.encodeWithSelector(JobMarket.UnitsAboveMax.selector, uint256(UNITS) + 1, uint256(UNITS))
        );
        _completeWith(jobId, RESULT, UNITS + 1, signature);
    }

    function test_RevertWhen_CompleteJobWithAnEmptyResult() public {
        uint256 jobId = _assigned();
        bytes memory signature = _providerSignature(jobId, bytes32(0), USED);
        vm.expectRevert(abi.encodeWithSelector(JobMarket.EmptyResult.selector, jobId));
        _completeWith(jobId, bytes32(0), USED, signature);
    }

    // ─── chargeJob: a failure by the job's own fault, paid for what it used ──

    function test_ChargeJob_OpensTheDisputeWindowAndSettlesForTheUnitsUsed() public {
        uint256 jobId = _assigned();
        uint64 disputeEnd = uint64(block.timestamp) + DISPUTE_WINDOW;
        vm.expectEmit(address(market));
        emit JobMarket.JobCharged(jobId, alice, REASON, USED, disputeEnd);
        _charge(jobId, USED);
        JobMarket.Job memory job = market.getJob(jobId);
        assertEq(uint8(job.status), uint8(JobMarket.Status.Completed));
        assertEq(job.resultHash, bytes32(0), "no result: a charged failure");
        assertEq(job.unitsUsed, USED);
        assertEq(market.escrowOf(jobId), ESCROW, "held until the window closes");
        assertGe(vault.providerInfo(alice).heldUntil, disputeEnd);

        uint256 treasuryBefore = token.balanceOf(treasury);
        vm.warp(block.timestamp + DISPUTE_WINDOW);
        vm.expectEmit(address(market));
        emit JobMarket.JobSettled(jobId, alice, PROVIDER_CUT, FEE, REFUND);
        market.settleJob(jobId);
        assertEq(token.balanceOf(alice), ACTOR_FUNDS - ALICE_STAKE + PROVIDER_CUT);
        assertEq(token.balanceOf(treasury), treasuryBefore + FEE);
        assertEq(token.balanceOf(carol), ACTOR_FUNDS - ESCROW + REFUND);
        assertEq(market.totalEscrowed(), 0);
    }

    function test_ChargedJob_DisputedAndUpheldRefundsTheBuyerInFull() public {
        uint256 jobId = _assigned();
        _charge(jobId, UNITS);
        vm.prank(carol);
        market.disputeJob(jobId);
        vm.prank(arbiter);
        market.resolveDispute(jobId, true, 0);
        assertEq(token.balanceOf(carol), ACTOR_FUNDS, "escrow and bond back");
        assertEq(token.balanceOf(alice), ACTOR_FUNDS - ALICE_STAKE);
        assertEq(uint8(_status(jobId)), uint8(JobMarket.Status.Failed));
    }

    function test_RevertWhen_ChargeJobWithAResultsSignature() public {
        uint256 jobId = _assigned();
        // The provider's word on a result (even an empty one) is not its word on a failure.
        bytes memory signature = _signResult(aliceKey, jobId, bytes32(0), USED);
        _expectBadSignature(jobId);
        vm.prank(matcher);
        market.chargeJob(jobId, REASON, USED, signature);
    }

    function test_RevertWhen_ChargeJobUnitsOtherThanSigned() public {
        uint256 jobId = _assigned();
        bytes memory signature = JobResults.signFailure(aliceKey, address(market), jobId, USED);
        _expectBadSignature(jobId);
        vm.prank(matcher);
        market.chargeJob(jobId, REASON, USED + 1, signature);
    }

    function test_RevertWhen_ChargeJobSignedByAnotherProvider() public {
        uint256 jobId = _assigned();
        bytes memory signature = JobResults.signFailure(bobKey, address(market), jobId, USED);
        _expectBadSignature(jobId);
        vm.prank(matcher);
        market.chargeJob(jobId, REASON, USED, signature);
    }

    function test_RevertWhen_ChargeJobUnitsAboveMax() public {
        uint256 jobId = _assigned();
        bytes memory signature = JobResults.signFailure(aliceKey, address(market), jobId, UNITS + 1);
        vm.expectRevert(abi.encodeWithSelector(JobMarket.UnitsAboveMax.selector, UNITS + 1, UNITS));
        vm.prank(matcher);
        market.chargeJob(jobId, REASON, UNITS + 1, signature);
    }

    function test_RevertWhen_ChargeJobCallerNotMatcher() public {
        uint256 jobId = _assigned();
        bytes memory signature = JobResults.signFailure(aliceKey, address(market), jobId, USED);
        _expectUnauthorized(alice, MATCHER_ROLE);
        vm.prank(alice); // even the provider, with its own signature
        market.chargeJob(jobId, REASON, USED, signature);
    }

    function test_RevertWhen_ChargeJobNotAssignedOrAfterDeadline() public {
        uint256 posted = _postDefault();
        bytes memory signature = JobResults.signFailure(aliceKey, address(market), posted, USED);
        _expectWrongStatus(posted, JobMarket.Status.Posted);
        vm.prank(matcher);
        market.chargeJob(posted, REASON, USED, signature);

        uint256 jobId = _assigned();
        signature = JobResults.signFailure(aliceKey, address(market), jobId, USED);
        vm.warp(deadline + 1);
        vm.expectRevert(abi.encodeWithSelector(JobMarket.DeadlinePassed.selector, jobId, deadline));
        vm.prank(matcher);
        market.chargeJob(jobId, REASON, USED, signature);
    }

    function testFuzz_ChargePaysEachPartyItsShare(uint128 price, uint64 unitsUsed, uint16 fee) public {
        _assertSettlementPaysEachPartyItsShare(price, unitsUsed, fee, true);
    }

    function test_FailureDigestIsTheEip712Standard() public view {
        assertEq(market.failureDigest(7, USED), JobResults.failureDigest(address(market), 7, address(0), 0, USED));
        assertTrue(market.failureDigest(7, USED) != market.resultDigest(7, bytes32(0), USED));
    }

    // ─── completeJob: the provider's signature ───────────────────────────────

    function test_ResultDigest_IsTheEip712JobResultInTheMarketsDomain() public view {
        assertEq(market.resultDigest(7, RESULT, USED), JobResults.digest(address(market), 7, address(0), 0, RESULT, USED));
        assertEq(
            market.JOB_RESULT_TYPEHASH(),
            keccak256("JobResult(uint256 jobId,address provider,uint128 pricePerUnit,bytes32 resultHash,uint64 units)")
        );
        (, string memory name, string memory version, uint256 chainId, address verifyingContract,,) =
            market.eip712Domain();
        assertEq(name, "SwarmJobMarket");
        assertEq(version, "2");
        assertEq(chainId, block.chainid);
        assertEq(verifyingContract, address(market));
    }

    function test_RevertWhen_CompleteJobSignedByTheMatcher() public {
        uint256 jobId = _assigned();
        _expectBadSignature(jobId);
        _completeWith(jobId, RESULT, USED, _signResult(matcherKey, jobId, RESULT, USED));
        assertEq(uint8(_status(jobId)), uint8(JobMarket.Status.Assigned));
    }

    function test_RevertWhen_CompleteJobSignedByAnotherProvider() public {
        uint256 jobId = _assigned();
        _stakeBob();
        _expectBadSignature(jobId);
        _completeWith(jobId, RESULT, USED, _signResult(bobKey, jobId, RESULT, USED));
    }

    function test_RevertWhen_CompleteJobWithTheProvidersSignatureForAnotherJob() public {
        uint256 jobId = _assigned();
        uint256 other = _assigned();
        _expectBadSignature(jobId);
        _completeWith(jobId, RESULT, USED, _signResult(aliceKey, other, RESULT, USED));
    }

    function test_RevertWhen_CompleteJobWithAnotherResultHash() public {
        uint256 jobId = _assigned();
        bytes memory signature = _signResult(aliceKey, jobId, RESULT, USED);
        _expectBadSignature(jobId);
        _completeWith(jobId, keccak256("forged"), USED, signature);
    }

    function test_RevertWhen_CompleteJobWithOtherUnits() public {
        uint256 jobId = _assigned();
        bytes memory signature = _signResult(aliceKey, jobId, RESULT, USED);
        // More units than signed (the buyer would overpay), and fewer (the provider would be underpaid).
        _expectBadSignature(jobId);
        _completeWith(jobId, RESULT, USED + 1, signature);
        _expectBadSignature(jobId);
        _completeWith(jobId, RESULT, USED - 1, signature);
    }

    function test_RevertWhen_CompleteJobSignedByThePreviousProviderAfterReassignment() public {
        uint256 jobId = _assigned();
        bytes memory byAlice = _signResult(aliceKey, jobId, RESULT, USED);
        _stakeBob();
        _reassign(jobId, bob, RATE, 0);
        _expectBadSignature(jobId);
        _completeWith(jobId, RESULT, USED, byAlice);

        _completeWith(jobId, RESULT, USED, _signResult(bobKey, jobId, RESULT, USED));
        assertEq(uint8(_status(jobId)), uint8(JobMarket.Status.Completed));
        assertEq(market.getJob(jobId).provider, bob);
    }

    function test_RevertWhen_CompleteJobSignatureMalformed() public {
        uint256 jobId = _assigned();
        bytes memory good = _signResult(aliceKey, jobId, RESULT, USED);
        (bytes32 r, bytes32 s, uint8 v) = _split(good);
        // secp256k1's order: (r, n − s, v ^ 1) is the same signature's malleated twin.
        uint256 n = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141;
        bytes[] memory malformed = new bytes[](6);
        malformed[0] = "";
        malformed[1] = abi.encodePacked(r, s); // 64 bytes, no v
        malformed[2] = abi.encodePacked(good, uint8(0)); // 66 bytes
        malformed[3] = abi.encodePacked(r, s, uint8(v == 27 ? 29 : 30)); // v out of range
        malformed[4] = abi.encodePacked(bytes32(0), s, v); // r zero
        malformed[5] = abi.encodePacked(r, bytes32(n - uint256(s)), v == 27 ? uint8(28) : uint8(27)); // high s
        for (uint256 i; i < malformed.length; ++i) {
            _expectBadSignature(jobId);
            _completeWith(jobId, RESULT, USED, malformed[i]);
        }
        _completeWith(jobId, RESULT, USED, good);
        assertEq(uint8(_status(jobId)), uint8(JobMarket.Status.Completed));
    }

    function test_RevertWhen_CompleteJobSignedForAnotherMarket() public {
        uint256 jobId = _assigned();
        JobMarket twin = _deployMarket(token, vault, admin, treasury, FEE_BPS, DISPUTE_WINDOW);
        _expectBadSignature(jobId);
        _completeWith(jobId, RESULT, USED, JobResults.sign(aliceKey, address(twin), jobId, RESULT, USED));
    }

    function test_RevertWhen_CompleteJobSignedOnAnotherChain() public {
        uint256 jobId = _assigned();
        bytes memory signature = _signResult(aliceKey, jobId, RESULT, USED);
        vm.chainId(block.chainid + 1); // a fork: the market's domain follows the chain id
        _expectBadSignature(jobId);
        _completeWith(jobId, RESULT, USED, signature);
    }

    function test_CompleteJob_ContractWalletProviderSignsThroughErc1271() public {
        (address owner, uint256 ownerKey) = makeAddrAndKey("walletOwner");
        address wallet = address(new ContractWallet(owner));
        vm.prank(admin);
        token.transfer(wallet, ALICE_STAKE);
        vm.startPrank(wallet);
        token.approve(address(vault), ALICE_STAKE);
        vault.register(keccak256("wallet"), 1);
        vault.stake(ALICE_STAKE);
        vm.stopPrank();
        uint256 jobId = _postDefault();
        _assign(jobId, wallet, RATE);

        // The key behind the wallet, not any other, vouches for the wallet's result.
        _expectBadSignature(jobId);
        _completeWith(jobId, RESULT, USED, _signResult(aliceKey, jobId, RESULT, USED));
        _completeWith(jobId, RESULT, USED, JobResults.signFor(ownerKey, address(market), jobId, wallet, RESULT, USED));
        assertEq(uint8(_status(jobId)), uint8(JobMarket.Status.Completed));

        vm.warp(block.timestamp + DISPUTE_WINDOW);
        market.settleJob(jobId);
        assertEq(token.balanceOf(wallet), PROVIDER_CUT);
    }

    /// @dev Only the provider's signature over exactly the submitted result and units
    /// completes the job; a signature over anything else is refused.
    function testFuzz_CompleteJob_OnlyTheProvidersExactSignaturePasses(
        bytes32 signedHash,
        uint64 signedUnits,
        bytes32 resultHash,
        uint64 units,
        bool sameResult
    ) public {
        signedUnits = uint64(bound(signedUnits, 0, UNITS));
        units = uint64(bound(units, 0, UNITS));
        vm.assume(signedHash != bytes32(0) && resultHash != bytes32(0)); // an empty result is refused first
        if (sameResult) (resultHash, units) = (signedHash, signedUnits);
        uint256 jobId = _assigned();
        bytes memory signature = _signResult(aliceKey, jobId, signedHash, signedUnits);
        bool exact = resultHash == signedHash && units == signedUnits;
        if (!exact) _expectBadSignature(jobId);
        _completeWith(jobId, resultHash, units, signature);
        if (exact) {
            JobMarket.Job memory job = market.getJob(jobId);
            assertEq(uint8(job.status), uint8(JobMarket.Status.Completed));
            assertEq(job.resultHash, signedHash);
            assertEq(job.unitsUsed, signedUnits);
        }
    }

    /// @dev No key but the provider's signs for it.
    function testFuzz_RevertWhen_CompleteJobSignedByAnyOtherKey(uint256 key) public {
        key = bound(key, 1, 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364140);
        vm.assume(key != aliceKey);
        uint256 jobId = _assigned();
        _expectBadSignature(jobId);
        _completeWith(jobId, RESULT, USED, _signResult(key, jobId, RESULT, USED));
    }

    // ─── settleJob ───────────────────────────────────────────────────────────

    function test_RevertWhen_SettleJobDisputeWindowOpen() public {
        uint256 jobId = _completed();
        uint64 disputeEnd = uint64(block.timestamp) + DISPUTE_WINDOW;
        vm.warp(disputeEnd - 1);
        vm.expectRevert(abi.encodeWithSelector(JobMarket.DisputeWindowOpen.selector, jobId, disputeEnd));
        market.settleJob(jobId);
    }

    function test_SettleJob_PaysProviderTreasuryAndBuyerToTheWei() public {
        uint256 jobId = _completed();
        uint256 treasuryBefore = token.balanceOf(treasury);
        vm.warp(block.timestamp + DISPUTE_WINDOW);

        vm.expectEmit(address(market));
        emit JobMarket.JobSettled(jobId, alice, PROVIDER_CUT, FEE, REFUND);
        vm.prank(stranger); // anyone may settle
        market.settleJob(jobId);

        assertEq(token.balanceOf(alice), ACTOR_FUNDS - ALICE_STAKE + PROVIDER_CUT);
        assertEq(token.balanceOf(treasury), treasuryBefore + FEE);
        assertEq(token.balanceOf(carol), ACTOR_FUNDS - ESCROW + REFUND);
        assertEq(token.balanceOf(address(market)), 0);
        assertEq(token.balanceOf(stranger), 0);
        assertEq(market.totalEscrowed(), 0);
        assertEq(uint8(_status(jobId)), uint8(JobMarket.Status.Settled));
        assertEq(PROVIDER_CUT + FEE + REFUND, ESCROW);
    }

    function test_SettleJob_ZeroUnitsRefundsBuyerInFull() public {
        uint256 jobId = _assigned();
        _complete(jobId, 0);
        uint256 treasuryBefore = token.balanceOf(treasury);
        vm.warp(block.timestamp + DISPUTE_WINDOW);
        vm.expectEmit(address(market));
        emit JobMarket.JobSettled(jobId, alice, 0, 0, ESCROW);
        market.settleJob(jobId);
        assertEq(token.balanceOf(carol), ACTOR_FUNDS);
        assertEq(token.balanceOf(alice), ACTOR_FUNDS - ALICE_STAKE);
        assertEq(token.balanceOf(treasury), treasuryBefore);
    }

    function test_SettleJob_UsesFeeAgreedAtAssignment() public {
        uint256 jobId = _completed();
        vm.prank(admin);
        market.setFee(MAX_FEE_RAISE, treasury);
        uint256 treasuryBefore = token.balanceOf(treasury);
        vm.warp(block.timestamp + DISPUTE_WINDOW);
        market.settleJob(jobId);
        assertEq(token.balanceOf(alice), ACTOR_FUNDS - ALICE_STAKE + PROVIDER_CUT);
        assertEq(token.balanceOf(treasury), treasuryBefore + FEE);
        assertEq(market.getJob(jobId).feeBps, FEE_BPS);
    }

    function test_SettleJob_AfterTheShortestDisputeWindow() public {
        vm.prank(admin);
        market.setDisputeWindow(MIN_DISPUTE_WINDOW);
        uint256 jobId = _completed();
        vm.warp(block.timestamp + MIN_DISPUTE_WINDOW);
        market.settleJob(jobId);
        assertEq(uint8(_status(jobId)), uint8(JobMarket.Status.Settled));
        assertEq(token.balanceOf(carol), ACTOR_FUNDS - ESCROW + REFUND);
    }

    function test_SettleJob_WorksWhilePaused() public {
        uint256 jobId = _completed();
        _pauseMarket();
        vm.warp(block.timestamp + DISPUTE_WINDOW);
        market.settleJob(jobId);
        assertEq(uint8(_status(jobId)), uint8(JobMarket.Status.Settled));
        assertEq(token.balanceOf(alice), ACTOR_FUNDS - ALICE_STAKE + PROVIDER_CUT);
    }

    function test_RevertWhen_SettleJobTwice() public {
        uint256 jobId = _settled();
        _expectWrongStatus(jobId, JobMarket.Status.Settled);
        market.settleJob(jobId);
        assertEq(token.balanceOf(alice), ACTOR_FUNDS - ALICE_STAKE + PROVIDER_CUT);
    }

    function test_RevertWhen_SettleJobNotCompleted() public {
        uint256 jobId = _assigned();
        _expectWrongStatus(jobId, JobMarket.Status.Assigned);
        market.settleJob(jobId);
    }

    function test_RevertWhen_SettleJobUnknown() public {
        vm.expectRevert(abi.encodeWithSelector(JobMarket.UnknownJob.selector, 0));
        market.settleJob(0);
    }

    // ─── disputeJob ──────────────────────────────────────────────────────────

    function test_DisputeJob_HoldsPaymentAndEmits() public {
        uint256 jobId = _completed();
        vm.warp(block.timestamp + DISPUTE_WINDOW - 1);
        vm.expectEmit(address(market));
        emit JobMarket.JobDisputed(jobId, carol, BOND);
        vm.prank(carol);
        market.disputeJob(jobId);
        assertEq(uint8(_status(jobId)), uint8(JobMarket.Status.Disputed));
        assertEq(market.escrowOf(jobId), ESCROW + BOND);
        assertEq(market.disputeBond(jobId), BOND);
        assertEq(market.totalEscrowed(), ESCROW + BOND);
        assertEq(token.balanceOf(address(market)), ESCROW + BOND);
        assertEq(token.balanceOf(carol), ACTOR_FUNDS - ESCROW - BOND);
    }

    function test_DisputeJob_ByMatcherWhenReplicasDisagree() public {
        uint256 jobId = _completed();
        vm.expectEmit(address(market));
        emit JobMarket.JobDisputed(jobId, matcher, 0);
        vm.prank(matcher);
        market.disputeJob(jobId);
        assertEq(uint8(_status(jobId)), uint8(JobMarket.Status.Disputed));
        assertEq(market.escrowOf(jobId), ESCROW);
        assertEq(market.disputeBond(jobId), 0);
        assertEq(token.balanceOf(address(market)), ESCROW);
    }

    function test_RevertWhen_DisputeJobNotBuyer() public {
        uint256 jobId = _completed();
        vm.expectRevert(abi.encodeWithSelector(JobMarket.NotBuyer.selector, jobId, dave));
        vm.prank(dave);
        market.disputeJob(jobId);
        assertEq(uint8(_status(jobId)), uint8(JobMarket.Status.Completed));
    }

    function test_RevertWhen_DisputeJobByProvider() public {
        uint256 jobId = _completed();
        vm.expectRevert(abi.encodeWithSelector(JobMarket.NotBuyer.selector, jobId, alice));
        vm.prank(alice);
        market.disputeJob(jobId);
    }

    function test_RevertWhen_MatcherDisputesAfterWindow() public {
        uint256 jobId = _completed();
        uint64 disputeEnd = uint64(block.timestamp) + DISPUTE_WINDOW;
        vm.warp(disputeEnd);
        vm.expectRevert(abi.encodeWithSelector(JobMarket.DisputeWindowClosed.selector, jobId, disputeEnd));
        vm.prank(matcher);
        market.disputeJob(jobId);
    }

    function test_RevertWhen_DisputeJobWindowClosed() public {
        uint256 jobId = _completed();
        uint64 disputeEnd = uint64(block.timestamp) + DISPUTE_WINDOW;
        vm.warp(disputeEnd);
        vm.expectRevert(abi.encodeWithSelector(JobMarket.DisputeWindowClosed.selector, jobId, disputeEnd));
        vm.prank(carol);
        market.disputeJob(jobId);
    }

    function test_RevertWhen_DisputeJobNotCompleted() public {
        uint256 jobId = _assigned();
        _expectWrongStatus(jobId, JobMarket.Status.Assigned);
        vm.prank(carol);
        market.disputeJob(jobId);
    }

    function test_RevertWhen_DisputeJobTwice() public {
        uint256 jobId = _disputed();
        _expectWrongStatus(jobId, JobMarket.Status.Disputed);
        vm.prank(carol);
        market.disputeJob(jobId);
    }

    function test_RevertWhen_SettleJobDisputed() public {
        uint256 jobId = _disputed();
        vm.warp(block.timestamp + DISPUTE_WINDOW + 1);
        _expectWrongStatus(jobId, JobMarket.Status.Disputed);
        market.settleJob(jobId);
    }

    // ─── resolveDispute ──────────────────────────────────────────────────────

    function test_ResolveDispute_BuyerUpheldRefundsAndSlashes() public {
        uint256 jobId = _disputed();
        uint16 slashBps = 1_000;
        uint256 slashed = ALICE_STAKE * slashBps / BPS;

        vm.expectEmit(address(market));
        emit JobMarket.DisputeResolved(jobId, true, slashBps);
        vm.expectEmit(address(market));
        emit JobMarket.JobFailed(jobId, alice, "dispute", slashBps, ESCROW);
        vm.expectEmit(address(vault));
        emit StakingVault.Slashed(alice, "dispute", slashed, 0, slashBps, RESULT, slashed / 2);
        vm.prank(arbiter);
        market.resolveDispute(jobId, true, slashBps);

        assertEq(token.balanceOf(carol), ACTOR_FUNDS); // the escrow and the bond back
        assertEq(market.disputeBond(jobId), 0);
        assertEq(token.balanceOf(address(market)), 0);
        assertEq(market.totalEscrowed(), 0);
        assertEq(_stakeOf(alice), ALICE_STAKE - slashed);
        assertEq(token.balanceOf(alice), ACTOR_FUNDS - ALICE_STAKE);
        assertEq(uint8(_status(jobId)), uint8(JobMarket.Status.Failed));
    }

    function test_ResolveDispute_BuyerUpheldWithoutSlash() public {
        uint256 jobId = _disputed();
        vm.prank(arbiter);
        market.resolveDispute(jobId, true, 0);
        assertEq(token.balanceOf(carol), ACTOR_FUNDS);
        assertEq(_stakeOf(alice), ALICE_STAKE);
        assertEq(uint8(_status(jobId)), uint8(JobMarket.Status.Failed));
    }

    function test_ResolveDispute_RejectedSettlesAsCompleted() public {
        uint256 jobId = _disputed();
        uint256 treasuryBefore = token.balanceOf(treasury);

        vm.expectEmit(address(market));
        emit JobMarket.DisputeResolved(jobId, false, 500);
        vm.expectEmit(address(market));
        emit JobMarket.JobSettled(jobId, alice, PROVIDER_CUT, FEE, REFUND);
        vm.prank(arbiter);
        market.resolveDispute(jobId, false, 500);

        // The rejected buyer's bond goes to the provider.
        assertEq(token.balanceOf(alice), ACTOR_FUNDS - ALICE_STAKE + PROVIDER_CUT + BOND);
        assertEq(token.balanceOf(treasury), treasuryBefore + FEE);
        assertEq(token.balanceOf(carol), ACTOR_FUNDS - ESCROW + REFUND - BOND);
        assertEq(market.disputeBond(jobId), 0);
        assertEq(token.balanceOf(address(market)), 0);
        assertEq(_stakeOf(alice), ALICE_STAKE);
        assertEq(market.totalEscrowed(), 0);
        assertEq(uint8(_status(jobId)), uint8(JobMarket.Status.Settled));
    }

    function test_RevertWhen_ResolveDisputeCallerNotArbiter() public {
        uint256 jobId = _disputed();
        _expectUnauthorized(matcher, ARBITER_ROLE);
        vm.prank(matcher);
        market.resolveDispute(jobId, true, 0);
    }

    function test_RevertWhen_ResolveDisputeNotDisputed() public {
        uint256 jobId = _completed();
        _expectWrongStatus(jobId, JobMarket.Status.Completed);
        vm.prank(arbiter);
        market.resolveDispute(jobId, true, 0);
    }

    function test_RevertWhen_ResolveDisputeTwice() public {
        uint256 jobId = _disputed();
        vm.startPrank(arbiter);
        market.resolveDispute(jobId, false, 0);
        _expectWrongStatus(jobId, JobMarket.Status.Settled);
        market.resolveDispute(jobId, true, 0);
        vm.stopPrank();
    }

    // ─── failJob ─────────────────────────────────────────────────────────────

    function test_FailJob_RefundsInFullWithoutSlash() public {
        uint256 jobId = _assigned();
        vm.expectEmit(address(market));
        emit JobMarket.JobFailed(jobId, alice, REASON, 0, ESCROW);
        vm.prank(matcher);
        market.failJob(jobId, REASON, 0);

        assertEq(token.balanceOf(carol), ACTOR_FUNDS);
        assertEq(token.balanceOf(address(market)), 0);
        assertEq(market.totalEscrowed(), 0);
        assertEq(market.escrowOf(jobId), 0);
        assertEq(_stakeOf(alice), ALICE_STAKE);
        assertEq(uint8(_status(jobId)), uint8(JobMarket.Status.Failed));
    }

    function test_FailJob_SlashesProviderByShare() public {
        uint256 jobId = _assigned();
        uint16 slashBps = 2_500;
        uint256 slashed = ALICE_STAKE * slashBps / BPS;

        vm.expectEmit(address(market));
        emit JobMarket.JobFailed(jobId, alice, REASON, slashBps, ESCROW);
        vm.expectEmit(address(vault));
        emit StakingVault.Slashed(alice, REASON, slashed, 0, slashBps, bytes32(jobId), slashed / 2);
        vm.prank(matcher);
        market.failJob(jobId, REASON, slashBps);

        assertEq(token.balanceOf(carol), ACTOR_FUNDS);
        assertEq(_stakeOf(alice), ALICE_STAKE - slashed);
    }

    function test_FailJob_SlashAboveVaultCapIsAppliedAtTheCap() public {
        uint256 jobId = _assigned();
        uint256 slashed = ALICE_STAKE * MAX_SLASH_BPS / BPS;
        vm.expectEmit(address(vault));
        emit StakingVault.SlashCapped(alice, address(market), BPS, MAX_SLASH_BPS);
        vm.prank(matcher);
        market.failJob(jobId, REASON, BPS);
        assertEq(_stakeOf(alice), ALICE_STAKE - slashed);
        assertEq(uint8(_status(jobId)), uint8(JobMarket.Status.Failed));
        assertEq(token.balanceOf(carol), ACTOR_FUNDS);
        assertEq(market.totalEscrowed(), 0);
    }

    function test_FailJob_WorksWhilePaused() public {
        uint256 jobId = _assigned();
        _pauseMarket();
        vm.prank(matcher);
        market.failJob(jobId, REASON, 100);
        assertEq(token.balanceOf(carol), ACTOR_FUNDS);
        assertEq(_stakeOf(alice), ALICE_STAKE - ALICE_STAKE / 100);
    }

    function test_RevertWhen_FailJobCallerNotMatcher() public {
        uint256 jobId = _assigned();
        _expectUnauthorized(arbiter, MATCHER_ROLE);
        vm.prank(arbiter);
        market.failJob(jobId, REASON, 0);
    }

    function test_RevertWhen_FailJobPosted() public {
        uint256 jobId = _postDefault();
        _expectWrongStatus(jobId, JobMarket.Status.Posted);
        vm.prank(matcher);
        market.failJob(jobId, REASON, 0);
    }

    function test_RevertWhen_FailJobCompleted() public {
        uint256 jobId = _completed();
        _expectWrongStatus(jobId, JobMarket.Status.Completed);
        vm.prank(matcher);
        market.failJob(jobId, REASON, 0);
    }


    // ─── Holds: no stake escapes a slash that can still come ─────────────────

    /// @dev alice takes a job whose deadline is after her unbonding would end, then
    /// requests her whole stake back at once.
    function _assignedThenUnstaked(uint64 lifetime) internal returns (uint256 jobId) {
        jobId = _post(carol, CAP, UNITS, uint64(block.timestamp) + lifetime);
        _assign(jobId, alice, RATE);
        vm.prank(alice);
        vault.requestUnstake(ALICE_STAKE);
    }

    function _expectOnHold(uint64 heldUntil) internal {
        vm.expectRevert(abi.encodeWithSelector(StakingVault.StakeOnHold.selector, heldUntil, uint64(block.timestamp)));
        vm.prank(alice);
        vault.withdraw();
    }

    function test_AssignJob_HoldsTheProviderPastTheDeadline() public {
        uint64 jobDeadline = uint64(block.timestamp) + 10 days;
        uint256 jobId = _post(carol, CAP, UNITS, jobDeadline);
        vm.expectEmit(address(vault));
        emit StakingVault.StakeHeld(alice, jobDeadline + 1);
        _assign(jobId, alice, RATE);
        assertEq(vault.providerInfo(alice).heldUntil, jobDeadline + 1);
    }

    function test_ProviderWhoUnstakesAfterTakingAJobCannotWithdrawUntilItsDeadlinePassed() public {
        uint64 jobDeadline = uint64(block.timestamp) + UNBONDING_PERIOD + 12 hours; // within the exit bound
        _assignedThenUnstaked(UNBONDING_PERIOD + 12 hours);
        vm.warp(block.timestamp + UNBONDING_PERIOD); // unbonding is over, the job is not
        _expectOnHold(jobDeadline + 1);
        vm.warp(jobDeadline);
        _expectOnHold(jobDeadline + 1);

        vm.warp(jobDeadline + 1); // no slash can come for the job any more
        vm.prank(alice);
        vault.withdraw();
        assertEq(token.balanceOf(alice), ACTOR_FUNDS);
    }

    /// @dev A job whose deadline lies past its provider's exit bound holds it only to the bound:
    /// then it leaves with everything, and a slash for the job finds nothing.
    function test_AJobPastTheExitBoundHoldsItsProviderOnlyToTheBound() public {
        uint64 jobDeadline = uint64(block.timestamp) + 20 days;
        uint256 jobId = _assignedThenUnstaked(20 days);
        uint64 exitBy = vault.providerInfo(alice).unbondingEnd + CHALLENGE_WINDOW + MAX_REPORT_LAG;
        assertEq(vault.providerInfo(alice).heldUntil, jobDeadline + 1);
        assertEq(vault.withdrawableAt(alice), exitBy);
        vm.warp(exitBy - 1);
        _expectOnHold(exitBy);
        vm.warp(exitBy);
        vm.prank(alice);
        vault.withdraw();
        assertEq(token.balanceOf(alice), ACTOR_FUNDS);

        vm.warp(jobDeadline);
        vm.prank(matcher);
        market.failJob(jobId, REASON, 2_500);
        assertEq(token.balanceOf(alice), ACTOR_FUNDS, "the slash found nothing");
        assertEq(vault.providerInfo(alice).unbonding, 0);
    }

    function test_FailJobSlashStillFindsTheStakeOfAProviderThatTriedToLeave() public {
        uint64 jobDeadline = uint64(block.timestamp) + UNBONDING_PERIOD + 12 hours; // within the exit bound
        uint256 jobId = _assignedThenUnstaked(UNBONDING_PERIOD + 12 hours);
        vm.warp(block.timestamp + UNBONDING_PERIOD);
        _expectOnHold(jobDeadline + 1); // the escape fails

        vm.warp(jobDeadline);
        vm.prank(matcher);
        market.failJob(jobId, REASON, 2_500);
        assertEq(vault.providerInfo(alice).unbonding, ALICE_STAKE - ALICE_STAKE / 4);
    }

    function test_CompleteJob_HoldsTheProviderUntilTheDisputeWindowCloses() public {
        vm.prank(admin);
        market.setDisputeWindow(1 days + 6 hours);
        uint256 jobId = _assignedThenUnstaked(7 days);
        vm.warp(block.timestamp + 6 days); // the window ends after the release, within the exit bound
        _complete(jobId, USED);
        uint64 disputeEnd = market.getJob(jobId).disputeEnd;
        assertEq(vault.providerInfo(alice).heldUntil, disputeEnd);
        assertLt(disputeEnd, vault.providerInfo(alice).unbondingEnd + CHALLENGE_WINDOW + MAX_REPORT_LAG);

        vm.warp(block.timestamp + UNBONDING_PERIOD - 6 days); // the unbonding is over
        _expectOnHold(disputeEnd);
        vm.warp(disputeEnd - 1);
        _expectOnHold(disputeEnd);
        vm.warp(disputeEnd);
        vm.prank(alice);
        vault.withdraw();
        assertEq(vault.providerInfo(alice).unbonding, 0);
    }

    /// @dev A dispute holds the provider that asked to leave until its exit bound (its release
    /// plus the challenge window and the report lag), never through the whole arbitration: a
    /// ruling within the bound still finds the stake.
    function test_DisputeSlashFindsTheStakeOfAProviderThatTriedToLeaveUntilItsExitBound() public {
        uint256 jobId = _assignedThenUnstaked(2 days);
        _complete(jobId, USED);
        vm.prank(carol);
        market.disputeJob(jobId);
        uint64 arbitrationEnd = market.getJob(jobId).disputeEnd + market.ARBITRATION_PERIOD();
        assertEq(vault.providerInfo(alice).heldUntil, arbitrationEnd + 1);
        uint64 exitBy = vault.providerInfo(alice).unbondingEnd + CHALLENGE_WINDOW + MAX_REPORT_LAG;
        assertLt(exitBy, arbitrationEnd + 1, "the arbitration alone would hold her past her exit bound");

        vm.warp(block.timestamp + UNBONDING_PERIOD);
        _expectOnHold(exitBy); // the escape fails
        vm.warp(exitBy - 1);
        _expectOnHold(exitBy);
        vm.prank(arbiter);
        market.resolveDispute(jobId, true, 1_000);
        assertEq(vault.providerInfo(alice).unbonding, ALICE_STAKE - ALICE_STAKE / 10);

        vm.warp(exitBy);
        vm.prank(alice);
        vault.withdraw();
        assertEq(token.balanceOf(alice), ACTOR_FUNDS - ALICE_STAKE / 10);
    }

    function test_ReassignJob_HoldsTheNewProviderPastTheDeadline() public {
        uint256 jobId = _assigned();
        _stakeBob();
        vm.expectEmit(address(vault));
        emit StakingVault.StakeHeld(bob, deadline + 1);
        _reassign(jobId, bob, RATE, 0);
        assertEq(vault.providerInfo(bob).heldUntil, deadline + 1);
    }

    // ─── Slash windows ───────────────────────────────────────────────────────

    function test_FailJob_SlashesAtTheDeadline() public {
        uint256 jobId = _assigned();
        vm.warp(deadline);
        vm.prank(matcher);
        market.failJob(jobId, REASON, 1_000);
        assertEq(_stakeOf(alice), ALICE_STAKE - ALICE_STAKE / 10);
    }

    function test_RevertWhen_FailJobSlashesAfterTheDeadline() public {
        uint256 jobId = _assigned();
        vm.warp(deadline + 1);
        vm.expectRevert(abi.encodeWithSelector(JobMarket.SlashWindowClosed.selector, jobId, deadline));
        vm.prank(matcher);
        market.failJob(jobId, REASON, 1);
        assertEq(uint8(_status(jobId)), uint8(JobMarket.Status.Assigned));
    }

    function test_FailJob_WithoutSlashAfterTheDeadline() public {
        uint256 jobId = _assigned();
        vm.warp(deadline + 1);
        vm.prank(matcher);
        market.failJob(jobId, REASON, 0);
        assertEq(uint8(_status(jobId)), uint8(JobMarket.Status.Failed));
        assertEq(token.balanceOf(carol), ACTOR_FUNDS);
        assertEq(_stakeOf(alice), ALICE_STAKE);
    }

    function test_ResolveDispute_RulesAtTheEndOfTheArbitrationPeriod() public {
        uint256 jobId = _disputed();
        vm.warp(market.getJob(jobId).disputeEnd + market.ARBITRATION_PERIOD());
        vm.prank(arbiter);
        market.resolveDispute(jobId, true, 1_000);
        assertEq(_stakeOf(alice), ALICE_STAKE - ALICE_STAKE / 10);
    }

    function test_RevertWhen_ResolveDisputeAfterTheArbitrationPeriod() public {
        uint256 jobId = _disputed();
        uint64 arbitrationEnd = market.getJob(jobId).disputeEnd + market.ARBITRATION_PERIOD();
        vm.warp(arbitrationEnd + 1);
        vm.expectRevert(abi.encodeWithSelector(JobMarket.ArbitrationClosed.selector, jobId, arbitrationEnd));
        vm.prank(arbiter);
        market.resolveDispute(jobId, false, 0);
        assertEq(uint8(_status(jobId)), uint8(JobMarket.Status.Disputed));
    }

    // ─── One matcher slash per job ───────────────────────────────────────────

    function test_RevertWhen_FailJobSlashesAfterAReassignSlash() public {
        uint256 jobId = _assigned();
        _stakeBob();
        _reassign(jobId, bob, RATE, 1_000);
        assertTrue(market.getJob(jobId).slashed);
        vm.expectRevert(abi.encodeWithSelector(JobMarket.AlreadySlashed.selector, jobId));
        vm.prank(matcher);
        market.failJob(jobId, REASON, 1_000);
        assertEq(_stakeOf(bob), ALICE_STAKE);

        vm.prank(matcher);
        market.failJob(jobId, REASON, 0); // the job may still fail, without a slash
        assertEq(uint8(_status(jobId)), uint8(JobMarket.Status.Failed));
    }

    function test_ReassignJob_BouncingAJobBackAndForthSlashesAtMostOnce() public {
        uint256 jobId = _assigned();
        _stakeBob();
        _reassign(jobId, bob, RATE, 1_000); // A → B, A slashed
        vm.expectRevert(abi.encodeWithSelector(JobMarket.AlreadySlashed.selector, jobId));
        _reassign(jobId, alice, RATE, 1_000); // B → A with a slash: refused
        _reassign(jobId, alice, RATE, 0); // B → A without one
        vm.expectRevert(abi.encodeWithSelector(JobMarket.AlreadySlashed.selector, jobId));
        _reassign(jobId, bob, RATE, 1_000); // A → B again: refused
        _reassign(jobId, bob, RATE, 0);

        assertEq(_stakeOf(alice), ALICE_STAKE - ALICE_STAKE / 10);
        assertEq(_stakeOf(bob), ALICE_STAKE);
        assertEq(market.getJob(jobId).provider, bob);
    }

    function test_GetJob_RecordsNoSlashUntilTheMatcherSlashes() public {
        uint256 jobId = _assigned();
        _stakeBob();
        _reassign(jobId, bob, RATE, 0);
        assertFalse(market.getJob(jobId).slashed);
        vm.prank(matcher);
        market.failJob(jobId, REASON, 500);
        assertTrue(market.getJob(jobId).slashed);
    }

    function test_ResolveDispute_ArbiterMaySlashAJobTheMatcherSlashed() public {
        uint256 jobId = _assigned();
        _stakeBob();
        _reassign(jobId, bob, RATE, 1_000);
        _complete(jobId, USED);
        vm.prank(carol);
        market.disputeJob(jobId);
        vm.prank(arbiter);
        market.resolveDispute(jobId, true, 1_000);
        assertEq(_stakeOf(alice), ALICE_STAKE - ALICE_STAKE / 10);
        assertEq(_stakeOf(bob), ALICE_STAKE - ALICE_STAKE / 10);
    }

    function test_MatcherFailingManyJobsOfOneProviderTakesAtMostThePeriodCap() public {
        uint256 jobs = 8;
        for (uint256 i; i < jobs; ++i) {
            uint256 jobId = _postDefault();
            _assign(jobId, alice, RATE);
            vm.prank(matcher);
            market.failJob(jobId, REASON, BPS); // each asks for everything
        }
        // The vault applies each at the per-incident cap and stops at the period's total.
        assertGe(_stakeOf(alice), ALICE_STAKE * (BPS - MAX_SLASH_BPS_PER_PERIOD) / BPS);
        assertEq(vault.slashAllowanceBps(address(market), alice), 0);

        // More only once those slashes have left every window of SLASH_PERIOD that counts
        // them: the buckets make that at most one bucket later.
        uint256 left = _stakeOf(alice);
        vm.warp(block.timestamp + vault.SLASH_PERIOD() - 1);
        assertEq(vault.slashAllowanceBps(address(market), alice), 0, "still within 30 days");
        vm.warp(block.timestamp + 1 + vault.SLASH_BUCKET());
        deadline = uint64(block.timestamp + 2 days);
        vm.startPrank(alice);
        vault.stake(ALICE_STAKE); // back above the minimum
        vm.stopPrank();
        uint256 nextJob = _postDefault();
        _assign(nextJob, alice, RATE);
        vm.prank(matcher);
        market.failJob(nextJob, REASON, BPS);
        assertEq(_stakeOf(alice), (left + ALICE_STAKE) - (left + ALICE_STAKE) * MAX_SLASH_BPS / BPS);
    }

    // ─── Dispute bond ────────────────────────────────────────────────────────

    function test_BondFor_IsTheBondShareOfThePaymentRoundedUp() public {
        uint256 jobId = _completed();
        assertEq(market.bondFor(jobId), BOND);
        vm.prank(admin);
        market.setDisputeBond(10_000, MIN_DISPUTE_BOND);
        assertEq(market.bondFor(jobId), PAYMENT);
        vm.prank(admin);
        market.setDisputeBond(100, MIN_DISPUTE_BOND);
        assertEq(market.bondFor(jobId), MIN_DISPUTE_BOND, "never below the floor");
        vm.prank(admin);
        market.setDisputeBond(100, 1);
        assertEq(market.bondFor(jobId), 0.14 ether + 1);
    }

    /// @dev A job that used nothing still costs its floor to dispute: a dispute never comes free.
    function test_DisputeJob_ZeroUnitsTakesTheFloorBond() public {
        uint256 jobId = _assigned();
        _complete(jobId, 0);
        vm.expectEmit(address(market));
        emit JobMarket.JobDisputed(jobId, carol, MIN_DISPUTE_BOND);
        vm.prank(carol);
        market.disputeJob(jobId);
        assertEq(token.balanceOf(carol), ACTOR_FUNDS - ESCROW - MIN_DISPUTE_BOND);
    }

    function test_RevertWhen_DisputeJobBondNotApproved() public {
        uint256 jobId = _completed();
        vm.prank(carol);
        token.approve(address(market), BOND - 1);
        vm.expectRevert(
            abi.encodeWithSelector(IERC20Errors.ERC20InsufficientAllowance.selector, address(market), BOND - 1, BOND)
        );
        vm.prank(carol);
        market.disputeJob(jobId);
        assertEq(uint8(_status(jobId)), uint8(JobMarket.Status.Completed));
    }

    function test_RevertWhen_DisputeJobBondBalanceInsufficient() public {
        uint256 jobId = _completed();
        uint256 keep = BOND - 1;
        uint256 spare = token.balanceOf(carol) - keep;
        vm.prank(carol);
        token.transfer(dave, spare);
        vm.expectRevert(abi.encodeWithSelector(IERC20Errors.ERC20InsufficientBalance.selector, carol, keep, BOND));
        vm.prank(carol);
        market.disputeJob(jobId);
    }

    function test_ResolveDispute_UpheldReturnsTheBondToTheBuyer() public {
        uint256 jobId = _disputed();
        assertEq(token.balanceOf(carol), ACTOR_FUNDS - ESCROW - BOND);
        vm.prank(arbiter);
        market.resolveDispute(jobId, true, 0);
        assertEq(token.balanceOf(carol), ACTOR_FUNDS);
        assertEq(token.balanceOf(alice), ACTOR_FUNDS - ALICE_STAKE);
        assertEq(token.balanceOf(address(market)), 0);
        assertEq(market.totalEscrowed(), 0);
    }

    function test_ResolveDispute_RejectedPaysTheBondToTheProvider() public {
        uint256 jobId = _disputed();
        uint256 treasuryBefore = token.balanceOf(treasury);
        vm.prank(arbiter);
        market.resolveDispute(jobId, false, 0);
        assertEq(token.balanceOf(alice), ACTOR_FUNDS - ALICE_STAKE + PROVIDER_CUT + BOND);
        assertEq(token.balanceOf(treasury), treasuryBefore + FEE);
        assertEq(token.balanceOf(carol), ACTOR_FUNDS - PAYMENT - BOND);
        assertEq(token.balanceOf(address(market)), 0);
        assertEq(market.totalEscrowed(), 0);
    }

    function test_ReclaimExpired_UnresolvedMatcherDisputeSplitsWithoutBond() public {
        uint256 jobId = _completed();
        vm.prank(matcher);
        market.disputeJob(jobId);
        vm.warp(market.getJob(jobId).disputeEnd + market.ARBITRATION_PERIOD() + 1);
        vm.expectEmit(address(market));
        emit JobMarket.DisputeExpired(jobId, 0);
        market.reclaimExpired(jobId);
        assertEq(token.balanceOf(alice), ACTOR_FUNDS - ALICE_STAKE + 6.825 ether + 3);
        assertEq(token.balanceOf(carol), ACTOR_FUNDS - 7 ether - 3);
        assertEq(token.balanceOf(address(market)), 0);
    }

    // ─── reclaimExpired ──────────────────────────────────────────────────────

    function test_ReclaimExpired_ByAStrangerRefundsTheBuyer() public {
        uint256 jobId = _assigned();
        vm.warp(deadline + 1);
        vm.expectEmit(address(market));
        emit JobMarket.JobReclaimed(jobId, ESCROW);
        vm.prank(stranger);
        market.reclaimExpired(jobId);
        assertEq(token.balanceOf(carol), ACTOR_FUNDS);
        assertEq(token.balanceOf(stranger), 0);
        assertEq(token.balanceOf(alice), ACTOR_FUNDS - ALICE_STAKE);
        assertEq(token.balanceOf(address(market)), 0);
        assertEq(market.totalEscrowed(), 0);
        assertEq(uint8(_status(jobId)), uint8(JobMarket.Status.Reclaimed));
    }

    function test_RevertWhen_StrangerReclaimsBeforeDeadline() public {
        uint256 jobId = _postDefault();
        vm.expectRevert(abi.encodeWithSelector(JobMarket.DeadlineNotReached.selector, jobId, deadline));
        vm.prank(stranger);
        market.reclaimExpired(jobId);
    }

    function test_RevertWhen_ReclaimExpiredBeforeDeadline() public {
        uint256 jobId = _postDefault();
        vm.expectRevert(abi.encodeWithSelector(JobMarket.DeadlineNotReached.selector, jobId, deadline));
        vm.prank(carol);
        market.reclaimExpired(jobId);
    }

    function test_RevertWhen_ReclaimExpiredAtDeadline() public {
        uint256 jobId = _assigned();
        vm.warp(deadline);
        vm.expectRevert(abi.encodeWithSelector(JobMarket.DeadlineNotReached.selector, jobId, deadline));
        vm.prank(carol);
        market.reclaimExpired(jobId);
    }

    function test_ReclaimExpired_PostedAfterDeadline() public {
        uint256 jobId = _postDefault();
        vm.warp(deadline + 1);
        vm.expectEmit(address(market));
        emit JobMarket.JobReclaimed(jobId, ESCROW);
        vm.prank(carol);
        market.reclaimExpired(jobId);
        assertEq(token.balanceOf(carol), ACTOR_FUNDS);
        assertEq(market.totalEscrowed(), 0);
        assertEq(uint8(_status(jobId)), uint8(JobMarket.Status.Reclaimed));
    }

    function test_ReclaimExpired_AssignedAfterDeadline() public {
        uint256 jobId = _assigned();
        vm.warp(deadline + 1);
        vm.expectEmit(address(market));
        emit JobMarket.JobReclaimed(jobId, ESCROW);
        vm.prank(carol);
        market.reclaimExpired(jobId);
        assertEq(token.balanceOf(carol), ACTOR_FUNDS);
        assertEq(token.balanceOf(address(market)), 0);
        assertEq(uint8(_status(jobId)), uint8(JobMarket.Status.Reclaimed));
    }

    function test_ReclaimExpired_WorksWhilePaused() public {
        uint256 jobId = _assigned();
        _pauseMarket();
        vm.warp(deadline + 1);
        vm.prank(carol);
        market.reclaimExpired(jobId);
        assertEq(token.balanceOf(carol), ACTOR_FUNDS);
    }

    function test_RevertWhen_ReclaimExpiredCompleted() public {
        uint256 jobId = _completed();
        vm.warp(deadline + 1);
        _expectWrongStatus(jobId, JobMarket.Status.Completed);
        vm.prank(carol);
        market.reclaimExpired(jobId);
    }

    function test_RevertWhen_ReclaimExpiredSettled() public {
        uint256 jobId = _settled();
        vm.warp(deadline + 1);
        _expectWrongStatus(jobId, JobMarket.Status.Settled);
        vm.prank(carol);
        market.reclaimExpired(jobId);
    }

    function test_RevertWhen_ReclaimDisputedBeforeArbitrationEnds() public {
        uint256 jobId = _disputed();
        uint64 arbitrationEnd = market.getJob(jobId).disputeEnd + market.ARBITRATION_PERIOD();
        vm.warp(arbitrationEnd);
        vm.expectRevert(abi.encodeWithSelector(JobMarket.ArbitrationPending.selector, jobId, arbitrationEnd));
        vm.prank(carol);
        market.reclaimExpired(jobId);
    }

    function test_ReclaimExpired_SplitsAnUnresolvedDisputeToTheWei() public {
        uint256 jobId = _disputed();
        uint64 arbitrationEnd = market.getJob(jobId).disputeEnd + market.ARBITRATION_PERIOD();
        uint256 treasuryBefore = token.balanceOf(treasury);
        vm.warp(arbitrationEnd + 1);
        // Half of 14e18 + 7 is 7e18 + 3 (the odd wei stays with the buyer); the fee on that
        // half at 250 bps is floor((7e18 + 3) / 40) = 0.175e18.
        uint256 half = 7 ether + 3;
        uint256 halfFee = 0.175 ether;
        vm.expectEmit(address(market));
        emit JobMarket.DisputeExpired(jobId, BOND);
        vm.expectEmit(address(market));
        emit JobMarket.JobSettled(jobId, alice, half - halfFee, halfFee, ESCROW - half);
        vm.prank(stranger); // anyone may settle it
        market.reclaimExpired(jobId);

        // The buyer's bond goes to the provider: a dispute the arbiter never answers is not free.
        assertEq(token.balanceOf(alice), ACTOR_FUNDS - ALICE_STAKE + 6.825 ether + 3 + BOND);
        assertEq(token.balanceOf(treasury), treasuryBefore + 0.175 ether);
        assertEq(token.balanceOf(carol), ACTOR_FUNDS - 7 ether - 3 - BOND); // 23e18 - 3 of the escrow
        assertEq(token.balanceOf(stranger), 0);
        assertEq(token.balanceOf(address(market)), 0);
        assertEq(market.totalEscrowed(), 0);
        assertEq(market.disputeBond(jobId), 0);
        assertEq(_stakeOf(alice), ALICE_STAKE);
        assertEq(uint8(_status(jobId)), uint8(JobMarket.Status.Settled));
    }

    function test_RevertWhen_ReclaimExpiredTwice() public {
        uint256 jobId = _postDefault();
        vm.warp(deadline + 1);
        vm.startPrank(carol);
        market.reclaimExpired(jobId);
        _expectWrongStatus(jobId, JobMarket.Status.Reclaimed);
        market.reclaimExpired(jobId);
        vm.stopPrank();
        assertEq(token.balanceOf(carol), ACTOR_FUNDS);
    }

    function test_RevertWhen_ReclaimExpiredUnknown() public {
        vm.expectRevert(abi.encodeWithSelector(JobMarket.UnknownJob.selector, 5));
        vm.prank(carol);
        market.reclaimExpired(5);
    }

    // ─── Views ───────────────────────────────────────────────────────────────

    function test_EscrowOf_OpenJobsHoldTheirEscrow() public {
        uint256 posted = _postDefault();
        uint256 assigned = _assigned();
        uint256 completed = _completed();
        uint256 disputed = _disputed();
        assertEq(market.escrowOf(posted), ESCROW);
        assertEq(market.escrowOf(assigned), ESCROW);
        assertEq(market.escrowOf(completed), ESCROW);
        assertEq(market.escrowOf(disputed), ESCROW + BOND);
        assertEq(market.totalEscrowed(), 4 * ESCROW + BOND);
        assertEq(token.balanceOf(address(market)), 4 * ESCROW + BOND);
    }

    function test_EscrowOf_ClosedAndUnknownJobsHoldNothing() public {
        uint256 cancelled = _postDefault();
        vm.prank(carol);
        market.cancelJob(cancelled);

        uint256 failed = _assigned();
        vm.prank(matcher);
        market.failJob(failed, REASON, 0);

        uint256 settled = _settled();

        uint256 reclaimed = _postDefault();
        vm.warp(block.timestamp + 2 days + 1);
        vm.prank(carol);
        market.reclaimExpired(reclaimed);

        assertEq(market.escrowOf(cancelled), 0);
        assertEq(market.escrowOf(failed), 0);
        assertEq(market.escrowOf(settled), 0);
        assertEq(market.escrowOf(reclaimed), 0);
        assertEq(market.escrowOf(99), 0);
        assertEq(market.totalEscrowed(), 0);
        assertEq(token.balanceOf(address(market)), 0);
    }

    function test_GetJob_UnknownIsEmpty() public view {
        JobMarket.Job memory job = market.getJob(42);
        assertEq(job.buyer, address(0));
        assertEq(uint8(job.status), uint8(JobMarket.Status.None));
        assertEq(job.maxUnits, 0);
    }

    // ─── Fuzz ────────────────────────────────────────────────────────────────

    function testFuzz_SettlementConservesEscrow(
        uint128 cap,
        uint64 maxUnits,
        uint128 price,
        uint64 unitsUsed,
        uint16 fee
    ) public {
        maxUnits = uint64(bound(maxUnits, 1, 1e9));
        cap = uint128(bound(cap, 1, ACTOR_FUNDS / maxUnits));
        price = uint128(bound(price, MIN_PRICE_PER_UNIT, cap));
        unitsUsed = uint64(bound(unitsUsed, 0, maxUnits));
        fee = uint16(bound(fee, 0, market.MAX_FEE_BPS()));
        vm.prank(admin);
        market.setFee(fee, treasury);

        // An unrelated open job keeps a prior balance in the market.
        _post(dave, 1 ether, 3, deadline);
        uint256 marketBefore = token.balanceOf(address(market));
        uint256 carolBefore = token.balanceOf(carol);
        uint256 aliceBefore = token.balanceOf(alice);
        uint256 treasuryBefore = token.balanceOf(treasury);
        uint256 escrow = uint256(cap) * maxUnits;

        uint256 jobId = _post(carol, cap, maxUnits, deadline);
        _assign(jobId, alice, price);
        _complete(jobId, unitsUsed);
        vm.warp(block.timestamp + DISPUTE_WINDOW);
        market.settleJob(jobId);

        uint256 toProvider = token.balanceOf(alice) - aliceBefore;
        uint256 toTreasury = token.balanceOf(treasury) - treasuryBefore;
        uint256 refund = token.balanceOf(carol) - (carolBefore - escrow);
        uint256 payment = uint256(price) * unitsUsed;

        assertEq(toProvider + toTreasury + refund, escrow);
        assertEq(toProvider + toTreasury, payment);
        assertEq(toTreasury, payment * fee / BPS);
        assertLe(toTreasury * BPS, payment * market.MAX_FEE_BPS());
        assertEq(token.balanceOf(address(market)), marketBefore);
        assertEq(market.totalEscrowed(), marketBefore);
    }

    function test_RevertWhen_PostJobDeadlineBeyondTheLongestJob() public {
        uint64 latest = uint64(block.timestamp) + market.MAX_JOB_DURATION();
        vm.prank(carol);
        vm.expectRevert(abi.encodeWithSelector(JobMarket.DeadlineTooFar.selector, latest + 1, latest));
        market.postJob(keccak256("spec"), CAP, UNITS, latest + 1);
        uint256 jobId = _post(carol, CAP, UNITS, latest);
        _assign(jobId, alice, RATE);
        assertEq(vault.providerInfo(alice).heldUntil, latest + 1, "the hold covers the whole job");
    }

    function testFuzz_ReclaimFailsAtDeadlineAndWorksOneSecondLater(uint64 lifetime, bool assign) public {
        lifetime = uint64(bound(lifetime, 1, MAX_JOB_DURATION));
        uint64 jobDeadline = uint64(block.timestamp) + lifetime;
        uint256 jobId = _post(carol, CAP, UNITS, jobDeadline);
        if (assign) _assign(jobId, alice, RATE);

        vm.warp(jobDeadline);
        vm.expectRevert(abi.encodeWithSelector(JobMarket.DeadlineNotReached.selector, jobId, jobDeadline));
        vm.prank(carol);
        market.reclaimExpired(jobId);

        vm.warp(uint256(jobDeadline) + 1);
        vm.prank(carol);
        market.reclaimExpired(jobId);
        assertEq(token.balanceOf(carol), ACTOR_FUNDS);
        assertEq(market.totalEscrowed(), 0);
        assertEq(uint8(_status(jobId)), uint8(JobMarket.Status.Reclaimed));
    }

    function testFuzz_FailJobSlashesExactShare(uint16 slashBps) public {
        slashBps = uint16(bound(slashBps, 0, MAX_SLASH_BPS));
        uint256 jobId = _assigned();
        vm.prank(matcher);
        market.failJob(jobId, REASON, slashBps);
        assertEq(_stakeOf(alice), ALICE_STAKE - ALICE_STAKE * slashBps / BPS);
        assertEq(token.balanceOf(carol), ACTOR_FUNDS);
    }

    function testFuzz_ReassignConservesEscrow(uint128 price, uint16 slashBps, uint64 unitsUsed) public {
        price = uint128(bound(price, MIN_PRICE_PER_UNIT, CAP));
        slashBps = uint16(bound(slashBps, 0, MAX_SLASH_BPS));
        unitsUsed = uint64(bound(unitsUsed, 0, UNITS));
        uint256 jobId = _assigned();
        _stakeBob();
        _reassign(jobId, bob, price, slashBps);

        assertEq(market.totalEscrowed(), ESCROW);
        assertEq(market.escrowOf(jobId), ESCROW);
        assertEq(token.balanceOf(address(market)), ESCROW);
        assertEq(token.balanceOf(carol), ACTOR_FUNDS - ESCROW);
        assertEq(_stakeOf(alice), ALICE_STAKE - ALICE_STAKE * slashBps / BPS);
        assertEq(_stakeOf(bob), ALICE_STAKE);

        _complete(jobId, unitsUsed);
        uint256 treasuryBefore = token.balanceOf(treasury);
        vm.warp(block.timestamp + DISPUTE_WINDOW);
        market.settleJob(jobId);

        uint256 payment = uint256(price) * unitsUsed;
        uint256 fee = payment * FEE_BPS / BPS;
        uint256 toProvider = token.balanceOf(bob) - (ACTOR_FUNDS - ALICE_STAKE);
        uint256 toTreasury = token.balanceOf(treasury) - treasuryBefore;
        uint256 refund = token.balanceOf(carol) - (ACTOR_FUNDS - ESCROW);
        assertEq(toProvider, payment - fee);
        assertEq(toTreasury, fee);
        assertEq(toProvider + toTreasury + refund, ESCROW);
        assertEq(token.balanceOf(alice), ACTOR_FUNDS - ALICE_STAKE);
        assertEq(token.balanceOf(address(market)), 0);
        assertEq(market.totalEscrowed(), 0);
    }

    function testFuzz_SettlementPaysEachPartyItsShare(uint128 price, uint64 unitsUsed, uint16 fee) public {
        _assertSettlementPaysEachPartyItsShare(price, unitsUsed, fee, false);
    }

    /// @dev A job completed (or `charged`, failed by its own fault) with `unitsUsed` at `price`
    /// settles to the wei: the provider the payment less the fee, the treasury the fee, the
    /// buyer the rest of the escrow.
    function _assertSettlementPaysEachPartyItsShare(uint128 price, uint64 unitsUsed, uint16 fee, bool charged)
        internal
    {
        price = uint128(bound(price, MIN_PRICE_PER_UNIT, CAP));
        unitsUsed = uint64(bound(unitsUsed, 0, UNITS));
        fee = uint16(bound(fee, 0, market.MAX_FEE_BPS()));
        vm.prank(admin);
        market.setFee(fee, treasury);
        uint256 treasuryBefore = token.balanceOf(treasury);
        uint256 jobId = _postDefault();
        _assign(jobId, alice, price);
        if (charged) _charge(jobId, unitsUsed);
        else _complete(jobId, unitsUsed);
        vm.warp(block.timestamp + DISPUTE_WINDOW);
        market.settleJob(jobId);

        uint256 payment = uint256(price) * unitsUsed;
        uint256 expectedFee = payment * fee / BPS;
        assertEq(token.balanceOf(alice), ACTOR_FUNDS - ALICE_STAKE + payment - expectedFee, "provider");
        assertEq(token.balanceOf(treasury), treasuryBefore + expectedFee, "treasury");
        assertEq(token.balanceOf(carol), ACTOR_FUNDS - ESCROW + (ESCROW - payment), "buyer");
        assertEq(token.balanceOf(address(market)), market.totalEscrowed());
    }

    function testFuzz_DisputeOutcomesPayEachPartyItsShare(
        uint128 price,
        uint64 unitsUsed,
        uint16 fee,
        uint16 bondBps,
        uint8 outcome
    ) public {
        price = uint128(bound(price, MIN_PRICE_PER_UNIT, CAP));
        unitsUsed = uint64(bound(unitsUsed, 0, UNITS));
        fee = uint16(bound(fee, 0, market.MAX_FEE_BPS()));
        bondBps = uint16(bound(bondBps, market.MIN_DISPUTE_BOND_BPS(), market.MAX_DISPUTE_BOND_BPS()));
        outcome = uint8(bound(outcome, 0, 2)); // upheld, rejected, undecided
        vm.startPrank(admin);
        market.setFee(fee, treasury);
        market.setDisputeBond(bondBps, MIN_DISPUTE_BOND);
        vm.stopPrank();
        uint256 treasuryBefore = token.balanceOf(treasury);
        uint256 jobId = _postDefault();
        _assign(jobId, alice, price);
        _complete(jobId, unitsUsed);
        uint256 payment = uint256(price) * unitsUsed;
        uint256 bond = (payment * bondBps + BPS - 1) / BPS;
        if (bond < MIN_DISPUTE_BOND) bond = MIN_DISPUTE_BOND;
        assertEq(market.bondFor(jobId), bond);
        vm.prank(carol);
        market.disputeJob(jobId);
        assertEq(token.balanceOf(address(market)), market.totalEscrowed());
        assertEq(market.totalEscrowed(), ESCROW + bond);

        uint256 toProvider;
        uint256 toTreasury;
        uint256 toBuyer;
        if (outcome == 0) {
            vm.prank(arbiter);
            market.resolveDispute(jobId, true, 0);
            toBuyer = ESCROW + bond;
        } else if (outcome == 1) {
            vm.prank(arbiter);
            market.resolveDispute(jobId, false, 0);
            toTreasury = payment * fee / BPS;
            toProvider = payment - toTreasury + bond;
            toBuyer = ESCROW - payment;
        } else {
            vm.warp(market.getJob(jobId).disputeEnd + market.ARBITRATION_PERIOD() + 1);
            market.reclaimExpired(jobId);
            uint256 half = payment / 2;
            toTreasury = half * fee / BPS;
            toProvider = half - toTreasury + bond; // the bond is forfeited to the other party
            toBuyer = ESCROW - half;
        }
        assertEq(token.balanceOf(alice), ACTOR_FUNDS - ALICE_STAKE + toProvider, "provider");
        assertEq(token.balanceOf(treasury), treasuryBefore + toTreasury, "treasury");
        assertEq(token.balanceOf(carol), ACTOR_FUNDS - ESCROW - bond + toBuyer, "buyer");
        assertEq(token.balanceOf(address(market)), 0);
        assertEq(market.totalEscrowed(), 0);
    }

    /// @dev Whether alice's withdrawal goes through now (state rolled back either way).
    function _canWithdraw() internal returns (bool ok) {
        uint256 snapshot = vm.snapshotState();
        vm.prank(alice);
        (ok,) = address(vault).call(abi.encodeCall(StakingVault.withdraw, ()));
        vm.revertToState(snapshot);
    }

    /// @dev A random timeline: alice takes a job, requests her whole stake back, and the
    /// job stays assigned (path 0), completes (1), or completes and is disputed by the
    /// buyer (2) or the matcher (3). At any moment up to the last second a slash for it
    /// can land, or her exit bound if that comes first, alice cannot withdraw, and that slash
    /// still finds her stake; from the first second after it (and the end of unbonding) she can.
    function testFuzz_NoWithdrawalWhileASlashForAnOpenJobCanStillCome(
        uint64 lifetime,
        uint64 assignGap,
        uint64 unstakeGap,
        uint64 completeGap,
        uint64 disputeGap,
        uint64 tryGap,
        uint8 path,
        uint64 window
    ) public {
        vm.prank(admin);
        vault.setUnbondingPeriod(MIN_UNBONDING_PERIOD); // so the hold, not the unbonding, decides
        window = uint64(bound(window, MIN_DISPUTE_WINDOW, 7 days));
        vm.prank(admin);
        market.setDisputeWindow(window);
        path = uint8(bound(path, 0, 3));
        lifetime = uint64(bound(lifetime, 1 hours, MAX_JOB_DURATION));
        uint64 jobDeadline = uint64(block.timestamp) + lifetime;
        uint256 jobId = _post(carol, CAP, UNITS, jobDeadline);

        uint64 t = uint64(block.timestamp) + uint64(bound(assignGap, 0, lifetime));
        vm.warp(t);
        _assign(jobId, alice, RATE);
        t += uint64(bound(unstakeGap, 0, jobDeadline - t));
        vm.warp(t);
        vm.prank(alice);
        vault.requestUnstake(ALICE_STAKE);

        // The last second a slash for the job can land, as things stand.
        uint64 lastSlash = jobDeadline;
        uint64 disputeEnd;
        if (path > 0) {
            t += uint64(bound(completeGap, 0, jobDeadline - t));
            vm.warp(t);
            _complete(jobId, USED);
            disputeEnd = t + window;
            lastSlash = disputeEnd - 1; // a dispute may still come until then
            if (path > 1) {
                t += uint64(bound(disputeGap, 0, disputeEnd - 1 - t));
                vm.warp(t);
                vm.prank(path == 2 ? carol : matcher);
                market.disputeJob(jobId);
                lastSlash = disputeEnd + market.ARBITRATION_PERIOD();
            }
        }

        // The exit bound: past it no hold keeps her, whatever the job.
        uint64 unbondingEnd = vault.providerInfo(alice).unbondingEnd;
        uint64 exitBy = unbondingEnd + CHALLENGE_WINDOW + MAX_REPORT_LAG;
        if (lastSlash >= exitBy) lastSlash = exitBy - 1;

        // Anywhere in the window, the withdrawal fails and the slash lands.
        if (t <= lastSlash) {
            t += uint64(bound(tryGap, 0, lastSlash - t));
            vm.warp(t);
            assertFalse(_canWithdraw(), "withdrew while a slash could still come");
            if (path == 0) {
                vm.prank(matcher);
                market.failJob(jobId, REASON, 1_000);
            } else {
                if (path == 1) {
                    vm.prank(carol);
                    market.disputeJob(jobId);
                }
                vm.prank(arbiter);
                market.resolveDispute(jobId, true, 1_000);
            }
            assertEq(
                vault.providerInfo(alice).unbonding, ALICE_STAKE - ALICE_STAKE / 10, "the slash found the stake"
            );
        }

        // Free from the first second no slash can come (nor unbonding holds it) or from the
        // exit bound, whichever is first, not before.
        uint64 free = path == 0 ? jobDeadline + 1 : disputeEnd + market.ARBITRATION_PERIOD() + 1;
        if (free < jobDeadline + 1) free = jobDeadline + 1;
        if (free > exitBy) free = exitBy;
        if (free < unbondingEnd) free = unbondingEnd;
        if (free - 1 > t) {
            vm.warp(free - 1);
            assertFalse(_canWithdraw(), "withdrew a second early");
        }
        vm.warp(free);
        assertTrue(_canWithdraw(), "still held after every slash window closed");
    }

    function testFuzz_RevertWhen_AssignPriceAboveCap(uint128 cap, uint128 price) public {
        cap = uint128(bound(cap, 1, 1_000 ether));
        price = uint128(bound(price, uint256(cap) + 1, type(uint128).max));
        uint256 jobId = _post(carol, cap, 1, deadline);
        vm.expectRevert(abi.encodeWithSelector(JobMarket.PriceAboveCap.selector, uint256(price), uint256(cap)));
        _assign(jobId, alice, price);
    }
}
