// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";

import {SwarmTestBase} from "./utils/SwarmTestBase.sol";
import {ContractWallet} from "./utils/ContractWallet.sol";
import {ServingEscrow} from "../src/ServingEscrow.sol";

/// @notice The serving escrow: deposits, vouchers redeemed for what they add, thaws, and the
/// attempts a buyer or a provider would make to be paid twice or to take what is not theirs.
contract ServingEscrowTest is SwarmTestBase {
    uint64 internal constant THAW = 1 days;
    uint256 internal constant DEPOSIT = 1_000 ether;

    ServingEscrow internal escrow;
    uint256 internal carolKey = _keyOf("carol");
    uint256 internal daveKey = _keyOf("dave");

    function setUp() public override {
        super.setUp();
        escrow = new ServingEscrow(token, THAW);
        vm.prank(carol);
        token.approve(address(escrow), type(uint256).max);
        vm.prank(dave);
        token.approve(address(escrow), type(uint256).max);
    }

    function _voucher(uint256 key, address buyer, address provider, uint128 cumulative)
        internal
        view
        returns (bytes memory)
    {
        (uint8 v, bytes32 r, bytes32 s) = vm.sign(key, escrow.voucherDigest(buyer, provider, cumulative));
        return abi.encodePacked(r, s, v);
    }

    function _balance(address buyer, address provider) internal view returns (uint256 b) {
        (b,,,) = escrow.accountOf(buyer, provider);
    }

    function _redeemed(address buyer, address provider) internal view returns (uint256 r) {
        (, r,,) = escrow.accountOf(buyer, provider);
    }

    // ─── Deposits ────────────────────────────────────────────────────────────

    function test_DepositHoldsTheTokensForThePair() public {
        uint256 before = token.balanceOf(carol);
        vm.expectEmit(address(escrow));
        emit ServingEscrow.Deposited(carol, alice, DEPOSIT);
        vm.prank(carol);
        escrow.deposit(alice, DEPOSIT);
        assertEq(token.balanceOf(carol), before - DEPOSIT);
        assertEq(token.balanceOf(address(escrow)), DEPOSIT);
        assertEq(escrow.totalHeld(), DEPOSIT);
        assertEq(_balance(carol, alice), DEPOSIT);
        assertEq(_balance(carol, bob), 0, "a deposit is for one provider");
    }

    function test_DepositWithPermitNeedsNoApproval() public {
        address buyer = vm.addr(0xB0B1);
        vm.prank(admin);
        token.transfer(buyer, DEPOSIT);
        uint256 deadline = block.timestamp + 1 hours;
        bytes32 structHash = keccak256(
            abi.encode(
                keccak256("Permit(address owner,address spender,uint256 value,uint256 nonce,uint256 deadline)"),
                buyer,
                address(escrow),
                DEPOSIT,
                token.nonces(buyer),
                deadline
            )
        );
        bytes32 digest = keccak256(abi.encodePacked("\x19\x01", token.DOMAIN_SEPARATOR(), structHash));
        (uint8 v, bytes32 r, bytes32 s) = vm.sign(0xB0B1, digest);
        vm.prank(buyer);
        escrow.depositWithPermit(alice, DEPOSIT, deadline, v, r, s);
        assertEq(_balance(buyer, alice), DEPOSIT);
        assertEq(token.balanceOf(buyer), 0);
    }

    function test_DepositRefusesZeroAndNoProvider() public {
        vm.startPrank(carol);
        vm.expectRevert(ServingEscrow.ZeroAmount.selector);
        escrow.deposit(alice, 0);
        vm.expectRevert(ServingEscrow.ZeroAddress.selector);
        escrow.deposit(address(0), DEPOSIT);
        vm.stopPrank();
    }

    function test_ConstructorRefusesALongThawAShortOneAndNoToken() public {
        vm.expectRevert(abi.encodeWithSelector(ServingEscrow.ThawPeriodTooLong.selector, 31 days, 30 days));
        new ServingEscrow(token, 31 days);
        vm.expectRevert(abi.encodeWithSelector(ServingEscrow.ThawPeriodTooShort.selector, 1 hours - 1, 1 hours));
        new ServingEscrow(token, 1 hours - 1);
        assertEq(new ServingEscrow(token, 1 hours).thawPeriod(), 1 hours, "the floor itself is allowed");
        vm.expectRevert(ServingEscrow.ZeroAddress.selector);
        new ServingEscrow(IERC20(address(0)), THAW);
    }

    // ─── Redemption ──────────────────────────────────────────────────────────

    function test_RedeemPaysWhatEachVoucherAddsAndNothingTwice() public {
        vm.prank(carol);
        escrow.deposit(alice, DEPOSIT);
        uint256 start = token.balanceOf(alice);

        vm.expectEmit(address(escrow));
        emit ServingEscrow.Redeemed(carol, alice, 30 ether, 30 ether, 30 ether);
        uint256 paid = escrow.redeem(carol, alice, 30 ether, _voucher(carolKey, carol, alice, 30 ether));
        assertEq(paid, 30 ether);
        assertEq(token.balanceOf(alice), start + 30 ether);

        // The same voucher again, or an older one, pays nothing.
        bytes memory first = _voucher(carolKey, carol, alice, 30 ether);
        vm.expectRevert(abi.encodeWithSelector(ServingEscrow.VoucherNotAbove.selector, 30 ether, 30 ether));
        escrow.redeem(carol, alice, 30 ether, first);
        bytes memory older = _voucher(carolKey, carol, alice, 10 ether);
        vm.expectRevert(abi.encodeWithSelector(ServingEscrow.VoucherNotAbove.selector, 10 ether, 30 ether));
        escrow.redeem(carol, alice, 10 ether, older);

        // A later voucher pays only what it adds; anyone may send it, the provider is paid.
        vm.prank(dave);
        paid = escrow.redeem(carol, alice, 75 ether, _voucher(carolKey, carol, alice, 75 ether));
        assertEq(paid, 45 ether);
        assertEq(token.balanceOf(alice), start + 75 ether);
        assertEq(_balance(carol, alice), DEPOSIT - 75 ether);
        assertEq(_redeemed(carol, alice), 75 ether);
        assertEq(escrow.totalHeld(), DEPOSIT - 75 ether);
        assertEq(token.balanceOf(address(escrow)), DEPOSIT - 75 ether);
    }

    function test_AVoucherBeyondTheDepositIsPaidInPartAndTheRestLater() public {
        vm.prank(carol);
        escrow.deposit(alice, 100 ether);
        bytes memory voucher = _voucher(carolKey, carol, alice, 250 ether);
        assertEq(escrow.redeem(carol, alice, 250 ether, voucher), 100 ether);
        assertEq(_balance(carol, alice), 0);
        vm.expectRevert(ServingEscrow.DepositEmpty.selector);
        escrow.redeem(carol, alice, 250 ether, voucher);

        vm.prank(carol);
        escrow.deposit(alice, 500 ether);
        assertEq(escrow.redeem(carol, alice, 250 ether, voucher), 150 ether, "the same voucher pays its rest");
        assertEq(_redeemed(carol, alice), 250 ether);
        assertEq(_balance(carol, alice), 350 ether);
    }

    function test_AForgedVoucherIsRefused() public {
        vm.prank(carol);
        escrow.deposit(alice, DEPOSIT);
        // Signed by the provider itself, by another buyer, or by the buyer for another provider.
        bytes[3] memory forged = [
            _voucher(aliceKey, carol, alice, 10 ether),
            _voucher(daveKey, carol, alice, 10 ether),
            _voucher(carolKey, carol, bob, 10 ether)
        ];
        for (uint256 i; i < forged.length; ++i) {
            vm.expectRevert(ServingEscrow.InvalidVoucherSignature.selector);
            escrow.redeem(carol, alice, 10 ether, forged[i]);
        }
        // Signed for another escrow (another deployment's domain).
        ServingEscrow other = new ServingEscrow(token, THAW);
        (uint8 v, bytes32 r, bytes32 s) = vm.sign(carolKey, other.voucherDigest(carol, alice, 10 ether));
        vm.expectRevert(ServingEscrow.InvalidVoucherSignature.selector);
        escrow.redeem(carol, alice, 10 ether, abi.encodePacked(r, s, v));
        // A signature for a smaller amount does not pay a larger one.
        bytes memory small = _voucher(carolKey, carol, alice, 1 ether);
        vm.expectRevert(ServingEscrow.InvalidVoucherSignature.selector);
        escrow.redeem(carol, alice, 900 ether, small);
        assertEq(_redeemed(carol, alice), 0);
        assertEq(_balance(carol, alice), DEPOSIT);
    }

    function test_AContractWalletBuyerSignsThroughERC1271() public {
        ContractWallet wallet = new ContractWallet(carol);
        vm.prank(admin);
        token.transfer(address(wallet), DEPOSIT);
        vm.startPrank(address(wallet));
        token.approve(address(escrow), DEPOSIT);
        escrow.deposit(alice, DEPOSIT);
        vm.stopPrank();
        assertTrue(escrow.depositedAsContract(address(wallet)), "recorded at its deposit");
        bytes memory voucher = _voucher(carolKey, address(wallet), alice, 5 ether);
        assertEq(escrow.redeem(address(wallet), alice, 5 ether, voucher), 5 ether);
        bytes memory forged = _voucher(daveKey, address(wallet), alice, 6 ether);
        vm.expectRevert(ServingEscrow.InvalidVoucherSignature.selector);
        escrow.redeem(address(wallet), alice, 6 ether, forged);
    }

    /// @dev A buyer that deposited from its key is checked by its key alone: code it attaches
    /// later (an EIP-7702 delegation to a wallet that accepts its own owner's signatures) is
    /// never asked, so a signature by another key is refused and the buyer's own still pays.
    function test_AnAccountThatDepositedFromItsKeyIsNeverAskedItsCode() public {
        vm.prank(carol);
        escrow.deposit(alice, DEPOSIT);
        assertFalse(escrow.depositedAsContract(carol));
        // Carol's account delegates to a wallet that accepts whatever dave's key signs.
        vm.signAndAttachDelegation(address(new ContractWallet(dave)), carolKey);
        vm.prank(carol);
        escrow.thaw(alice, 0);
        assertEq(carol.code.length, 23, "a delegation designator");
        bytes memory byDave = _voucher(daveKey, carol, alice, 5 ether);
        vm.expectRevert(ServingEscrow.InvalidVoucherSignature.selector);
        escrow.redeem(carol, alice, 5 ether, byDave);
        assertEq(escrow.redeem(carol, alice, 5 ether, _voucher(carolKey, carol, alice, 5 ether)), 5 ether);
        // Depositing again with the delegation attached still records an account with a key.
        vm.prank(carol);
        escrow.deposit(alice, 1 ether);
        assertFalse(escrow.depositedAsContract(carol));
    }

    function test_RedemptionGasDoesNotDependOnTheAmount() public {
        vm.prank(carol);
        escrow.deposit(alice, DEPOSIT);
        vm.prank(dave);
        escrow.deposit(alice, DEPOSIT);
        escrow.redeem(carol, alice, 1, _voucher(carolKey, carol, alice, 1)); // both pairs warm alike
        escrow.redeem(dave, alice, 1, _voucher(daveKey, dave, alice, 1));
        bytes memory one = _voucher(carolKey, carol, alice, 2);
        bytes memory many = _voucher(daveKey, dave, alice, 999 ether);
        vm.cool(address(escrow));
        vm.cool(address(token));
        uint256 g = gasleft();
        escrow.redeem(carol, alice, 2, one);
        uint256 gasOne = g - gasleft();
        vm.cool(address(escrow));
        vm.cool(address(token));
        g = gasleft();
        escrow.redeem(dave, alice, 999 ether, many);
        uint256 gasMany = g - gasleft();
        assertApproxEqAbs(gasOne, gasMany, 200, "one request's voucher and a million's cost the same");
        assertLt(gasMany, 80_000);
    }

    // ─── Thaw and withdraw ───────────────────────────────────────────────────

    function test_AThawedDepositStaysRedeemableUntilItIsWithdrawn() public {
        vm.startPrank(carol);
        escrow.deposit(alice, DEPOSIT);
        vm.expectEmit(address(escrow));
        emit ServingEscrow.ThawStarted(carol, alice, DEPOSIT, uint64(block.timestamp) + THAW);
        escrow.thaw(alice, DEPOSIT);
        vm.expectRevert(abi.encodeWithSelector(ServingEscrow.StillThawing.selector, uint64(block.timestamp) + THAW));
        escrow.withdraw(alice);
        vm.stopPrank();

        // The provider redeems what the buyer signed during the thaw.
        vm.warp(block.timestamp + THAW - 1);
        assertEq(escrow.redeem(carol, alice, 400 ether, _voucher(carolKey, carol, alice, 400 ether)), 400 ether);

        vm.warp(block.timestamp + 1);
        uint256 before = token.balanceOf(carol);
        vm.prank(carol);
        assertEq(escrow.withdraw(alice), DEPOSIT - 400 ether, "the buyer gets what was left unspent");
        assertEq(token.balanceOf(carol), before + DEPOSIT - 400 ether);
        assertEq(_balance(carol, alice), 0);
        assertEq(escrow.totalHeld(), 0);
        (,, uint256 thawing, uint64 endsAt) = escrow.accountOf(carol, alice);
        assertEq(thawing, 0);
        assertEq(endsAt, 0);
        // A voucher signed before stays valid, but there is nothing left to pay it from.
        bytes memory later = _voucher(carolKey, carol, alice, 500 ether);
        vm.expectRevert(ServingEscrow.DepositEmpty.selector);
        escrow.redeem(carol, alice, 500 ether, later);
    }

    function test_APartThawLeavesTheRestAndARestartedThawWaitsAgain() public {
        vm.startPrank(carol);
        escrow.deposit(alice, DEPOSIT);
        escrow.thaw(alice, 100 ether);
        vm.warp(block.timestamp + THAW / 2);
        escrow.thaw(alice, 200 ether); // restarts the clock
        vm.warp(block.timestamp + THAW / 2);
        vm.expectRevert();
        escrow.withdraw(alice);
        vm.warp(block.timestamp + THAW / 2);
        assertEq(escrow.withdraw(alice), 200 ether);
        assertEq(_balance(carol, alice), DEPOSIT - 200 ether);
        vm.expectRevert(ServingEscrow.NothingThawing.selector);
        escrow.withdraw(alice);
        vm.stopPrank();
    }

    function test_AThawIsBoundedByTheDepositAndZeroCancelsIt() public {
        vm.startPrank(carol);
        escrow.deposit(alice, DEPOSIT);
        vm.expectRevert(abi.encodeWithSelector(ServingEscrow.ThawExceedsBalance.selector, DEPOSIT + 1, DEPOSIT));
        escrow.thaw(alice, DEPOSIT + 1);
        escrow.thaw(alice, DEPOSIT);
        escrow.thaw(alice, 0);
        vm.warp(block.timestamp + THAW);
        vm.expectRevert(ServingEscrow.NothingThawing.selector);
        escrow.withdraw(alice);
        vm.stopPrank();
        assertEq(_balance(carol, alice), DEPOSIT);
    }

    function test_NoOneButTheBuyerWithdrawsItsDeposit() public {
        vm.prank(carol);
        escrow.deposit(alice, DEPOSIT);
        vm.prank(carol);
        escrow.thaw(alice, DEPOSIT);
        vm.warp(block.timestamp + THAW);
        // The provider (or anyone) thawing "for" the buyer touches only its own, empty, pair.
        vm.startPrank(alice);
        vm.expectRevert(ServingEscrow.NothingThawing.selector);
        escrow.withdraw(alice);
        vm.expectRevert(abi.encodeWithSelector(ServingEscrow.ThawExceedsBalance.selector, 1, 0));
        escrow.thaw(alice, 1);
        vm.stopPrank();
        assertEq(_balance(carol, alice), DEPOSIT);
    }

    // ─── Fuzz ────────────────────────────────────────────────────────────────

    /// Whatever vouchers arrive in whatever order, the provider is paid the highest
    /// cumulative among them (within the deposit), and never more.
    function testFuzz_VouchersInAnyOrderPayTheHighestOnce(uint128[8] memory amounts, uint128 deposited) public {
        deposited = uint128(bound(deposited, 1, DEPOSIT));
        vm.prank(carol);
        escrow.deposit(alice, deposited);
        uint256 start = token.balanceOf(alice);
        uint256 highest;
        for (uint256 i; i < amounts.length; ++i) {
            uint128 cumulative = uint128(bound(amounts[i], 1, 2 * DEPOSIT));
            bytes memory sig = _voucher(carolKey, carol, alice, cumulative);
            uint256 redeemed = _redeemed(carol, alice);
            if (cumulative <= redeemed) {
                vm.expectRevert(abi.encodeWithSelector(ServingEscrow.VoucherNotAbove.selector, cumulative, redeemed));
                escrow.redeem(carol, alice, cumulative, sig);
            } else if (_balance(carol, alice) == 0) {
                vm.expectRevert(ServingEscrow.DepositEmpty.selector);
                escrow.redeem(carol, alice, cumulative, sig);
            } else {
                escrow.redeem(carol, alice, cumulative, sig);
            }
            if (cumulative > highest) highest = cumulative;
        }
        uint256 paid = token.balanceOf(alice) - start;
        assertEq(paid, highest < deposited ? highest : deposited);
        assertEq(paid, _redeemed(carol, alice));
        assertEq(_balance(carol, alice) + paid, deposited);
    }
}
