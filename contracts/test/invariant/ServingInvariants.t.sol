// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {CommonBase} from "forge-std/Base.sol";
import {StdUtils} from "forge-std/StdUtils.sol";

import {SwarmToken} from "../../src/SwarmToken.sol";
import {ServingEscrow} from "../../src/ServingEscrow.sol";
import {SwarmTestBase} from "../utils/SwarmTestBase.sol";

/// @notice Buyers deposit, sign ever-growing vouchers, thaw and withdraw; providers redeem the
/// latest voucher, a stale one, or a forged one; time passes. The ghost keeps, per pair,
/// what was deposited, withdrawn and paid, and the highest cumulative the buyer signed.
contract ServingHandler is CommonBase, StdUtils {
    ServingEscrow internal immutable escrow;
    SwarmToken internal immutable token;
    uint256 internal time;

    address[] public buyers;
    uint256[] internal buyerKeys;
    address[] public providers;

    struct Ghost {
        uint256 deposited;
        uint256 withdrawn;
        uint256 paid;
        uint128 signed; // the highest cumulative the buyer signed
        bytes signature; // over `signed`
    }

    mapping(address => mapping(address => Ghost)) internal _ghosts;
    mapping(address => uint256) public paidTo; // per provider, every pair together
    bool public paidBeyondSigned;
    bool public redeemedWentDown;
    bool public earlyWithdrawal;
    bool public withdrewMoreThanThawed;
    bool public forgeryPaid;
    uint256 public redemptions;

    constructor(ServingEscrow escrow_, SwarmToken token_, address[] memory buyers_, uint256[] memory keys, address[] memory providers_) {
        escrow = escrow_;
        token = token_;
        buyers = buyers_;
        buyerKeys = keys;
        providers = providers_;
        time = block.timestamp;
    }

    function ghost(address buyer, address provider) external view returns (uint256, uint256, uint256, uint128) {
        Ghost storage g = _ghosts[buyer][provider];
        return (g.deposited, g.withdrawn, g.paid, g.signed);
    }

    function buyerCount() external view returns (uint256) {
        return buyers.length;
    }

    function providerCount() external view returns (uint256) {
        return providers.length;
    }

    function _pick(uint256 b, uint256 p) internal view returns (address buyer, uint256 key, address provider) {
        uint256 i = b % buyers.length;
        return (buyers[i], buyerKeys[i], providers[p % providers.length]);
    }

    function _sign(uint256 key, address buyer, address provider, uint128 cumulative) internal view returns (bytes memory) {
        (uint8 v, bytes32 r, bytes32 s) = vm.sign(key, escrow.voucherDigest(buyer, provider, cumulative));
        return abi.encodePacked(r, s, v);
    }

    function _redeemed(address buyer, address provider) internal view returns (uint256 r) {
        (, r,,) = escrow.accountOf(buyer, provider);
    }

    function deposit(uint256 b, uint256 p, uint256 amount) external {
        vm.warp(time);
        (address buyer,, address provider) = _pick(b, p);
        amount = bound(amount, 1, 1_000 ether);
        vm.prank(buyer);
        escrow.deposit(provider, amount);
        _ghosts[buyer][provider].deposited += amount;
    }

    /// The buyer signs a voucher that adds `more` to the last one (requests it paid for).
    function sign(uint256 b, uint256 p, uint256 more) external {
        (address buyer, uint256 key, address provider) = _pick(b, p);
        Ghost storage g = _ghosts[buyer][provider];
        g.signed += uint128(bound(more, 1, 300 ether));
        g.signature = _sign(key, buyer, provider, g.signed);
    }

    function redeemLatest(uint256 b, uint256 p) external {
        vm.warp(time);
        (address buyer,, address provider) = _pick(b, p);
        Ghost storage g = _ghosts[buyer][provider];
        if (g.signed == 0) return;
        uint256 before = _redeemed(buyer, provider);
        uint256 balanceBefore = token.balanceOf(provider);
        try escrow.redeem(buyer, provider, g.signed, g.signature) returns (uint256 paid) {
            g.paid += paid;
            paidTo[provider] += paid;
            ++redemptions;
            if (token.balanceOf(provider) != balanceBefore + paid) paidBeyondSigned = true;
        } catch {}
        uint256 afterwards = _redeemed(buyer, provider);
        if (afterwards < before) redeemedWentDown = true;
        if (afterwards > g.signed) paidBeyondSigned = true;
    }

    /// A provider replays an older voucher: it must pay nothing.
    function redeemStale(uint256 b, uint256 p, uint256 back) external {
        vm.warp(time);
        (address buyer, uint256 key, address provider) = _pick(b, p);
        uint256 redeemed = _redeemed(buyer, provider);
        if (redeemed == 0) return;
        uint128 stale = uint128(bound(back, 1, redeemed));
        bytes memory sig = _sign(key, buyer, provider, stale);
        try escrow.redeem(buyer, provider, stale, sig) {
            forgeryPaid = true;
        } catch {}
    }

    /// A provider signs a voucher itself, or a buyer's key signs for another pair.
    function redeemForged(uint256 b, uint256 p, uint256 amount, bool otherPair) external {
        vm.warp(time);
        (address buyer, uint256 key, address provider) = _pick(b, p);
        uint128 cumulative = uint128(bound(amount, _redeemed(buyer, provider) + 1, 10_000 ether));
        bytes memory sig = otherPair
            ? _sign(key, buyer, providers[(p + 1) % providers.length], cumulative)
            : _sign(uint256(keccak256(abi.encode(provider))) % 2 ** 128 + 1, buyer, provider, cumulative);
        try escrow.redeem(buyer, provider, cumulative, sig) {
            forgeryPaid = true;
        } catch {}
    }

    function thaw(uint256 b, uint256 p, uint256 amount) external {
        vm.warp(time);
        (address buyer,, address provider) = _pick(b, p);
        (uint256 balance,,,) = escrow.accountOf(buyer, provider);
        vm.prank(buyer);
        escrow.thaw(provider, bound(amount, 0, balance));
    }

    function withdraw(uint256 b, uint256 p) external {
        vm.warp(time);
        (address buyer,, address provider) = _pick(b, p);
        (,, uint256 thawing, uint64 endsAt) = escrow.accountOf(buyer, provider);
        vm.prank(buyer);
        try escrow.withdraw(provider) returns (uint256 amount) {
            if (time < endsAt) earlyWithdrawal = true;
            if (amount > thawing) withdrewMoreThanThawed = true;
            _ghosts[buyer][provider].withdrawn += amount;
        } catch {}
    }

    function wait(uint256 dt) external {
        time += bound(dt, 1, 2 days);
    }
}

contract ServingInvariantsTest is SwarmTestBase {
    ServingEscrow internal escrow;
    ServingHandler internal handler;

    function setUp() public override {
        super.setUp();
        escrow = new ServingEscrow(token, 1 days);
        address[] memory buyers = new address[](2);
        uint256[] memory keys = new uint256[](2);
        (buyers[0], keys[0]) = (carol, _keyOf("carol"));
        (buyers[1], keys[1]) = (dave, _keyOf("dave"));
        address[] memory providers = new address[](2);
        (providers[0], providers[1]) = (alice, bob);
        handler = new ServingHandler(escrow, token, buyers, keys, providers);
        for (uint256 i; i < buyers.length; ++i) {
            vm.prank(buyers[i]);
            token.approve(address(escrow), type(uint256).max);
        }
        targetContract(address(handler));
    }

    function invariant_TheEscrowHoldsEveryPairsBalance() public view {
        uint256 sum;
        for (uint256 b; b < handler.buyerCount(); ++b) {
            for (uint256 p; p < handler.providerCount(); ++p) {
                (uint256 balance,,,) = escrow.accountOf(handler.buyers(b), handler.providers(p));
                sum += balance;
            }
        }
        assertEq(escrow.totalHeld(), sum);
        assertEq(token.balanceOf(address(escrow)), sum);
    }

    function invariant_EveryWeiOfEveryPairIsAccountedFor() public view {
        for (uint256 b; b < handler.buyerCount(); ++b) {
            for (uint256 p; p < handler.providerCount(); ++p) {
                address buyer = handler.buyers(b);
                address provider = handler.providers(p);
                (uint256 balance, uint256 redeemed,,) = escrow.accountOf(buyer, provider);
                (uint256 deposited, uint256 withdrawn, uint256 paid, uint128 signed) = handler.ghost(buyer, provider);
                assertEq(deposited, balance + redeemed + withdrawn, "deposited = held + paid + withdrawn");
                assertEq(paid, redeemed, "the provider was paid exactly what was redeemed");
                assertLe(redeemed, signed, "never more than the buyer signed");
            }
        }
    }

    function invariant_ProvidersHoldWhatTheyWerePaid() public view {
        for (uint256 p; p < handler.providerCount(); ++p) {
            address provider = handler.providers(p);
            assertEq(token.balanceOf(provider), ACTOR_FUNDS + handler.paidTo(provider));
        }
    }

    function invariant_NoRuleIsBroken() public view {
        assertFalse(handler.paidBeyondSigned(), "paid beyond what the buyer signed");
        assertFalse(handler.redeemedWentDown(), "redeemed went down");
        assertFalse(handler.earlyWithdrawal(), "withdrawn before the thaw ended");
        assertFalse(handler.withdrewMoreThanThawed(), "withdrew more than thawed");
        assertFalse(handler.forgeryPaid(), "a stale or forged voucher paid");
    }
}
