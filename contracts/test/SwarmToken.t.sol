// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {IERC20Errors} from "@openzeppelin/contracts/interfaces/draft-IERC6093.sol";
import {IAccessControl} from "@openzeppelin/contracts/access/IAccessControl.sol";
import {ERC20Permit} from "@openzeppelin/contracts/token/ERC20/extensions/ERC20Permit.sol";

import {SwarmTestBase} from "./utils/SwarmTestBase.sol";
import {SwarmToken} from "../src/SwarmToken.sol";

/// @dev EIP-2612 signing for SwarmToken, shared by the token and vault tests.
abstract contract PermitSigner is SwarmTestBase {
    bytes32 internal constant PERMIT_TYPEHASH =
        keccak256("Permit(address owner,address spender,uint256 value,uint256 nonce,uint256 deadline)");

    function _permitDigest(address owner, address spender_, uint256 value, uint256 nonce, uint256 deadline)
        internal
        view
        returns (bytes32)
    {
        bytes32 structHash = keccak256(abi.encode(PERMIT_TYPEHASH, owner, spender_, value, nonce, deadline));
        return keccak256(abi.encodePacked("\x19\x01", token.DOMAIN_SEPARATOR(), structHash));
    }

    /// @dev Signs with `key` a permit from `owner` at its current nonce.
    function _signPermit(uint256 key, address owner, address spender_, uint256 value, uint256 deadline)
        internal
        view
        returns (uint8 v, bytes32 r, bytes32 s)
    {
        return vm.sign(key, _permitDigest(owner, spender_, value, token.nonces(owner), deadline));
    }
}

contract SwarmTokenTest is PermitSigner {
    uint256 internal constant INITIAL_SUPPLY = 500_000_000 ether;

    address internal holder;
    uint256 internal holderKey;
    address internal spender = makeAddr("spender");

    function setUp() public override {
        super.setUp();
        (holder, holderKey) = makeAddrAndKey("holder");
        vm.prank(admin);
        token.transfer(holder, 1_000 ether);
    }

    // ─── Deployment ──────────────────────────────────────────────────────────

    function test_ConstructorSetsMetadataRolesAndInitialSupply() public view {
        assertEq(token.name(), "Swarm");
        assertEq(token.symbol(), "SWARM");
        assertEq(token.decimals(), 18);
        assertEq(token.totalSupply(), INITIAL_SUPPLY);
        assertTrue(token.hasRole(token.DEFAULT_ADMIN_ROLE(), admin));
        assertTrue(token.hasRole(token.MINTER_ROLE(), admin));
        assertEq(token.MAX_SUPPLY(), 1_000_000_000 ether);
    }

    function test_RevertWhen_ConstructorInitialSupplyAboveCap() public {
        uint256 cap = 1_000_000_000 ether;
        vm.expectRevert(abi.encodeWithSelector(SwarmToken.SupplyCapExceeded.selector, cap + 1, cap));
        new SwarmToken(admin, admin, cap + 1);
    }

    // ─── mint ────────────────────────────────────────────────────────────────

    function test_MintByMinterCreditsRecipientAndSupply() public {
        uint256 amount = 123 ether;
        vm.expectEmit(true, true, true, true, address(token));
        emit IERC20.Transfer(address(0), alice, amount);
        vm.prank(admin);
        token.mint(alice, amount);
        assertEq(token.balanceOf(alice), ACTOR_FUNDS + amount);
        assertEq(token.totalSupply(), INITIAL_SUPPLY + amount);
    }

    function test_MintByGrantedMinter() public {
        address minter = makeAddr("minter");
        vm.startPrank(admin);
        token.grantRole(token.MINTER_ROLE(), minter);
        vm.stopPrank();
        vm.prank(minter);
        token.mint(bob, 5 ether);
        assertEq(token.balanceOf(bob), ACTOR_FUNDS + 5 ether);
    }

    function test_RevertWhen_MintWithoutMinterRole() public {
        bytes32 role = token.MINTER_ROLE();
        vm.expectRevert(abi.encodeWithSelector(IAccessControl.AccessControlUnauthorizedAccount.selector, alice, role));
        vm.prank(alice);
        token.mint(alice, 1 ether);
        assertEq(token.totalSupply(), INITIAL_SUPPLY);
    }

    function test_MintUpToExactlyTheCap() public {
        uint256 remaining = token.MAX_SUPPLY() - token.totalSupply();
        vm.prank(admin);
        token.mint(carol, remaining);
        assertEq(token.totalSupply(), token.MAX_SUPPLY());
    }

    function test_RevertWhen_MintExceedsSupplyCap() public {
        uint256 remaining = token.MAX_SUPPLY() - token.totalSupply();
        vm.expectRevert(abi.encodeWithSelector(SwarmToken.SupplyCapExceeded.selector, remaining + 1, remaining));
        vm.prank(admin);
        token.mint(carol, remaining + 1);
    }

    function test_RevertWhen_MintAfterCapReached() public {
        vm.startPrank(admin);
        token.mint(carol, token.MAX_SUPPLY() - token.totalSupply());
        vm.expectRevert(abi.encodeWithSelector(SwarmToken.SupplyCapExceeded.selector, 1, 0));
        token.mint(carol, 1);
        vm.stopPrank();
    }

    function testFuzz_MintNeverExceedsCap(uint256 first, uint256 second) public {
        uint256 remaining = token.MAX_SUPPLY() - token.totalSupply();
        first = bound(first, 0, remaining);
        second = bound(second, 0, 2 * remaining);
        vm.startPrank(admin);
        token.mint(dave, first);
        uint256 left = remaining - first;
        if (second > left) {
            vm.expectRevert(abi.encodeWithSelector(SwarmToken.SupplyCapExceeded.selector, second, left));
        }
        token.mint(dave, second);
        vm.stopPrank();
        assertLe(token.totalSupply(), token.MAX_SUPPLY());
        assertEq(token.totalSupply(), INITIAL_SUPPLY + first + (second > left ? 0 : second));
    }

    // ─── burn / burnFrom ─────────────────────────────────────────────────────

    function test_BurnReducesBalanceAndSupply() public {
        vm.expectEmit(true, true, true, true, address(token));
        emit IERC20.Transfer(alice, address(0), 40 ether);
        vm.prank(alice);
        token.burn(40 ether);
        assertEq(token.balanceOf(alice), ACTOR_FUNDS - 40 ether);
        assertEq(token.totalSupply(), INITIAL_SUPPLY - 40 ether);
    }

    function test_BurnFreesRoomUnderCap() public {
        vm.startPrank(admin);
        token.mint(admin, token.MAX_SUPPLY() - token.totalSupply());
        token.burn(7 ether);
        token.mint(bob, 7 ether);
        vm.stopPrank();
        assertEq(token.totalSupply(), token.MAX_SUPPLY());
    }

    function test_RevertWhen_BurnAboveBalance() public {
        vm.expectRevert(
            abi.encodeWithSelector(IERC20Errors.ERC20InsufficientBalance.selector, alice, ACTOR_FUNDS, ACTOR_FUNDS + 1)
        );
        vm.prank(alice);
        token.burn(ACTOR_FUNDS + 1);
    }

    function test_BurnFromSpendsAllowance() public {
        vm.prank(alice);
        token.approve(spender, 10 ether);
        vm.prank(spender);
        token.burnFrom(alice, 4 ether);
        assertEq(token.allowance(alice, spender), 6 ether);
        assertEq(token.balanceOf(alice), ACTOR_FUNDS - 4 ether);
        assertEq(token.totalSupply(), INITIAL_SUPPLY - 4 ether);
    }

    function test_RevertWhen_BurnFromWithoutAllowance() public {
        vm.expectRevert(abi.encodeWithSelector(IERC20Errors.ERC20InsufficientAllowance.selector, spender, 0, 1 ether));
        vm.prank(spender);
        token.burnFrom(alice, 1 ether);
    }

    // ─── permit ──────────────────────────────────────────────────────────────

    function test_PermitSetsAllowanceAndBumpsNonce() public {
        uint256 deadline = block.timestamp + 1 hours;
        (uint8 v, bytes32 r, bytes32 s) = _signPermit(holderKey, holder, spender, 300 ether, deadline);

        vm.expectEmit(true, true, true, true, address(token));
        emit IERC20.Approval(holder, spender, 300 ether);
        vm.prank(carol); // anyone may relay a permit
        token.permit(holder, spender, 300 ether, deadline, v, r, s);

        assertEq(token.allowance(holder, spender), 300 ether);
        assertEq(token.nonces(holder), 1);

        vm.prank(spender);
        token.transferFrom(holder, spender, 300 ether);
        assertEq(token.balanceOf(spender), 300 ether);
    }

    function test_PermitAtExactDeadline() public {
        uint256 deadline = block.timestamp;
        (uint8 v, bytes32 r, bytes32 s) = _signPermit(holderKey, holder, spender, 1 ether, deadline);
        token.permit(holder, spender, 1 ether, deadline, v, r, s);
        assertEq(token.allowance(holder, spender), 1 ether);
    }

    function test_RevertWhen_PermitSignedByAnotherKey() public {
        (address mallory, uint256 malloryKey) = makeAddrAndKey("mallory");
        uint256 deadline = block.timestamp + 1 hours;
        (uint8 v, bytes32 r, bytes32 s) = _signPermit(malloryKey, holder, spender, 1 ether, deadline);
        vm.expectRevert(abi.encodeWithSelector(ERC20Permit.ERC2612InvalidSigner.selector, mallory, holder));
        token.permit(holder, spender, 1 ether, deadline, v, r, s);
        assertEq(token.allowance(holder, spender), 0);
    }

    function test_RevertWhen_PermitExpired() public {
        uint256 deadline = block.timestamp - 1;
        (uint8 v, bytes32 r, bytes32 s) = _signPermit(holderKey, holder, spender, 1 ether, deadline);
        vm.expectRevert(abi.encodeWithSelector(ERC20Permit.ERC2612ExpiredSignature.selector, deadline));
        token.permit(holder, spender, 1 ether, deadline, v, r, s);
    }

    function test_RevertWhen_PermitReplayed() public {
        uint256 deadline = block.timestamp + 1 hours;
        (uint8 v, bytes32 r, bytes32 s) = _signPermit(holderKey, holder, spender, 1 ether, deadline);
        token.permit(holder, spender, 1 ether, deadline, v, r, s);

        // The nonce moved on, so the same signature now recovers to an unrelated address.
        address recovered = ecrecover(_permitDigest(holder, spender, 1 ether, 1, deadline), v, r, s);
        vm.expectRevert(abi.encodeWithSelector(ERC20Permit.ERC2612InvalidSigner.selector, recovered, holder));
        token.permit(holder, spender, 1 ether, deadline, v, r, s);
    }

    function test_RevertWhen_PermitValueTampered() public {
        uint256 deadline = block.timestamp + 1 hours;
        (uint8 v, bytes32 r, bytes32 s) = _signPermit(holderKey, holder, spender, 1 ether, deadline);
        address recovered = ecrecover(_permitDigest(holder, spender, 2 ether, 0, deadline), v, r, s);
        vm.expectRevert(abi.encodeWithSelector(ERC20Permit.ERC2612InvalidSigner.selector, recovered, holder));
        token.permit(holder, spender, 2 ether, deadline, v, r, s);
    }
}
