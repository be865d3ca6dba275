// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {Vm} from "forge-std/Vm.sol";
import {IERC20} from "@openzeppelin/contracts/token/ERC20/IERC20.sol";
import {IERC20Errors} from "@openzeppelin/contracts/interfaces/draft-IERC6093.sol";
import {IAccessControl} from "@openzeppelin/contracts/access/IAccessControl.sol";
import {Pausable} from "@openzeppelin/contracts/utils/Pausable.sol";
import {ECDSA} from "@openzeppelin/contracts/utils/cryptography/ECDSA.sol";
import {MerkleProof} from "@openzeppelin/contracts/utils/cryptography/MerkleProof.sol";

import {SwarmAccess} from "../src/base/SwarmAccess.sol";
import {StakingVault} from "../src/StakingVault.sol";
import {RewardDistributor} from "../src/RewardDistributor.sol";
import {IStakingVault} from "../src/interfaces/IStakingVault.sol";

import {SwarmTestBase} from "./utils/SwarmTestBase.sol";
import {MerkleBuilder} from "./utils/MerkleBuilder.sol";

contract RewardDistributorTest is SwarmTestBase {
    using MerkleBuilder for bytes32[];

    uint256 internal constant POOL = 1_000_000 ether;
    uint256 internal constant STAKE = 10_000 ether;
    bytes32 internal constant REASON = keccak256("DOWNTIME");
    bytes32 internal constant EVIDENCE = keccak256("evidence");
    bytes32 internal constant DEFAULT_ADMIN_ROLE = 0x00;
    uint256 internal constant SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141;

    address internal erin = makeAddr("erin");
    address internal outsider;
    uint256 internal outsiderKey;
    address[] internal claimants;

    function setUp() public override {
        super.setUp();
        (outsider, outsiderKey) = makeAddrAndKey("outsider");
        claimants = [alice, bob, carol, dave, erin];
        vm.prank(admin);
        token.approve(address(distributor), type(uint256).max);
    }

    // ─── Helpers ─────────────────────────────────────────────────────────────

    function _fund(uint256 amount) internal {
        vm.prank(admin);
        distributor.fund(amount);
    }

    function _noSlashes() internal pure returns (IStakingVault.SlashOrder[] memory) {
        return new IStakingVault.SlashOrder[](0);
    }

    function _slash(address provider, uint16 bps, uint64 jailSeconds, bool tombstone)
        internal
        pure
        returns (IStakingVault.SlashOrder memory)
    {
        return IStakingVault.SlashOrder({
            provider: provider,
            bps: bps,
            reason: REASON,
            evidenceHash: EVIDENCE,
            jailSeconds: jailSeconds,
            tombstone: tombstone
        });
    }

    /// @dev Two slashes in the order a report must list them: by provider, ascending.
    function _slashes(IStakingVault.SlashOrder memory a, IStakingVault.SlashOrder memory b)
        internal
        pure
        returns (IStakingVault.SlashOrder[] memory list)
    {
        list = new IStakingVault.SlashOrder[](2);
        (list[0], list[1]) = a.provider < b.provider ? (a, b) : (b, a);
    }

    /// @dev A report whose cumulative total is what is allocated now plus `total`, valid for a day.
    function _report(uint64 epoch, bytes32 root, uint256 total, IStakingVault.SlashOrder[] memory slashes)
        internal
        view
        returns (RewardDistributor.EpochReport memory)
    {
        return RewardDistributor.EpochReport({
            epoch: epoch,
            rewardsRoot: root,
            totalRewards: total,
            cumulativeTotal: distributor.totalAllocated() + total,
            slashesHash: keccak256(abi.encode(slashes)),
            deferredHash: keccak256(abi.encode(new address[](0))),
            expiresAt: uint64(block.timestamp + 1 days)
        });
    }

    /// @dev A slash-free report with a distinct placeholder root.
    function _report(uint64 epoch, uint256 total) internal view returns (RewardDistributor.EpochReport memory) {
        return _report(epoch, keccak256(abi.encode("root", epoch, total)), total, _noSlashes());
    }

    function _arr(uint256 a, uint256 b) internal pure returns (uint256[] memory out) {
        out = new uint256[](2);
        (out[0], out[1]) = (a, b);
    }

    function _arr(uint256 a, uint256 b, uint256 c) internal pure returns (uint256[] memory out) {
        out = new uint256[](3);
        (out[0], out[1], out[2]) = (a, b, c);
    }

    function _arr(uint256 a, uint256 b, uint256 c, uint256 d, uint256 e) internal pure returns (uint256[] memory out) {
        out = new uint256[](5);
        (out[0], out[1], out[2], out[3], out[4]) = (a, b, c, d, e);
    }

    /// @dev The committee keys at `indexes` (committee sorted ascending by address).
    function _committeeKeys(uint256[] memory indexes) internal view returns (uint256[] memory keys) {
        keys = new uint256[](indexes.length);
        for (uint256 i; i < indexes.length; ++i) {
            keys[i] = signerKeys[indexes[i]];
        }
    }

    /// @dev Signs `report` with `keys` in the order given.
    function _signWith(RewardDistributor.EpochReport memory report, uint256[] memory keys)
        internal
        view
        returns (bytes[] memory sigs)
    {
        bytes32 digest = distributor.hashReport(report);
        sigs = new bytes[](keys.length);
        for (uint256 i; i < keys.length; ++i) {
            (uint8 v, bytes32 r, bytes32 s) = vm.sign(keys[i], digest);
            sigs[i] = abi.encodePacked(r, s, v);
        }
    }

    /// @dev Sorts `keys` by their address, ascending (insertion sort; small lists).
    function _sortByAddress(uint256[] memory keys) internal pure returns (uint256[] memory) {
        for (uint256 i = 1; i < keys.length; ++i) {
            for (uint256 j = i; j > 0 && vm.addr(keys[j]) < vm.addr(keys[j - 1]); --j) {
                (keys[j], keys[j - 1]) = (keys[j - 1], keys[j]);
            }
        }
        return keys;
    }

    function _submit(RewardDistributor.EpochReport memory report, IStakingVault.SlashOrder[] memory slashes) internal {
        distributor.submitEpoch(report, slashes, new address[](0), _sign(report, THRESHOLD));
    }

    function _warpToFinalizable() internal {
        vm.warp(distributor.pendingReport().finalizableAt);
    }

    function _submitAndFinalize(RewardDistributor.EpochReport memory report, IStakingVault.SlashOrder[] memory slashes)
        internal
    {
        _submit(report, slashes);
        _warpToFinalizable();
        distributor.finalizeEpoch(slashes);
    }

    function _publish(uint64 epoch, bytes32 root, uint256 total) internal {
        _submitAndFinalize(_report(epoch, root, total, _noSlashes()), _noSlashes());
    }

    /// @dev Funds and publishes a tree of `accounts[i]`'s cumulative `cumulatives[i]`;
    /// the epoch's emission is whatever the tree adds to what is already allocated.
    function _publishCumulatives(uint64 epoch, address[] memory accounts, uint256[] memory cumulatives)
        internal
        returns (bytes32[] memory leaves)
    {
        uint256 sum;
        for (uint256 i; i < cumulatives.length; ++i) {
            sum += cumulatives[i];
        }
        uint256 emission = sum - distributor.totalAllocated();
        if (emission > 0) _fund(emission);
        leaves = MerkleBuilder.leaves(accounts, cumulatives);
        _publish(epoch, leaves.root(), emission);
        _registerAll(accounts);
    }

    /// @dev Sorts `list` by provider, ascending, as a report must list its slashes.
    function _sortSlashes(IStakingVault.SlashOrder[] memory list) internal pure {
        for (uint256 i = 1; i < list.length; ++i) {
            for (uint256 j = i; j > 0 && list[j].provider < list[j - 1].provider; --j) {
                (list[j], list[j - 1]) = (list[j - 1], list[j]);
            }
        }
    }

    /// @dev Claims are recorded in the vault's provider record: every claimant registers.
    function _registerAll(address[] memory accounts) internal {
        for (uint256 i; i < accounts.length; ++i) {
            if (!vault.providerInfo(accounts[i]).registered) {
                vm.prank(accounts[i]);
                vault.register(keccak256(abi.encode(accounts[i])), 1);
            }
        }
    }

    function _claim(bytes32[] memory leaves, uint256 index, address provider, uint256 cumulative) internal {
        distributor.claim(provider, cumulative, leaves.proof(index));
    }

    function _expectUnauthorized(address account, bytes32 role) internal {
        vm.expectRevert(abi.encodeWithSelector(IAccessControl.AccessControlUnauthorizedAccount.selector, account, role));
    }

    function _expectInvalidCommittee(uint256 n, uint256 t) internal {
        vm.expectRevert(abi.encodeWithSelector(RewardDistributor.InvalidCommittee.selector, n, t));
    }

    function _newCommittee(string memory prefix, uint256 n)
        internal
        returns (address[] memory addrs, uint256[] memory keys)
    {
        keys = new uint256[](n);
        for (uint256 i; i < n; ++i) {
            (, keys[i]) = makeAddrAndKey(string.concat(prefix, vm.toString(i)));
        }
        _sortByAddress(keys);
        addrs = new address[](n);
        for (uint256 i; i < n; ++i) {
            addrs[i] = vm.addr(keys[i]);
        }
    }

    /// @dev A distributor on `own`, a vault made by {_linkedVault} just before.
    function _deploy(StakingVault own, address[] memory committee, uint8 t, uint64 window)
        internal
        returns (RewardDistributor)
    {
        return new RewardDistributor(token, own, admin, guardian, committee, t, window, MIN_CHALLENGE_WINDOW, MAX_REPORT_LAG);
    }

    /// @dev A vault that names the next contract this test creates as its distributor.
    function _linkedVault() internal returns (StakingVault) {
        return new StakingVault(token, admin, _vaultParams(vm.computeCreateAddress(address(this), vm.getNonce(address(this)) + 1)));
    }

    // ─── MerkleBuilder ───────────────────────────────────────────────────────

    function test_MerkleBuilder_EveryProofVerifiesForOneToNineLeaves() public pure {
        for (uint256 n = 1; n <= 9; ++n) {
            bytes32[] memory leaves = new bytes32[](n);
            for (uint256 i; i < n; ++i) {
                leaves[i] = MerkleBuilder.leaf(address(uint160(i + 1)), (i + 1) * 1 ether);
            }
            bytes32 root = leaves.root();
            for (uint256 i; i < n; ++i) {
                assertTrue(MerkleProof.verify(leaves.proof(i), root, leaves[i]), "proof verifies");
                assertFalse(MerkleProof.verify(leaves.proof(i), root, keccak256("other")), "other leaf fails");
            }
        }
    }

    function test_MerkleBuilder_LeafAndPairMatchTheBase() public view {
        assertEq(MerkleBuilder.leaf(alice, 7 ether), _leaf(alice, 7 ether));
        bytes32[] memory two = new bytes32[](2);
        (two[0], two[1]) = (_leaf(alice, 1), _leaf(bob, 2));
        assertEq(two.root(), _hashPair(two[0], two[1]));
        assertEq(two.proof(0).length, 1);
        assertEq(two.proof(0)[0], two[1]);
    }

    // ─── Constructor ─────────────────────────────────────────────────────────

    function test_Constructor_SetsCommitteeWindowAndRoles() public view {
        assertEq(address(distributor.token()), address(token));
        assertEq(address(distributor.vault()), address(vault));
        assertEq(distributor.signers(), signerAddrs);
        assertEq(distributor.threshold(), THRESHOLD);
        assertEq(distributor.challengeWindow(), CHALLENGE_WINDOW);
        assertTrue(distributor.hasRole(DEFAULT_ADMIN_ROLE, admin));
        assertFalse(distributor.hasRole(distributor.GUARDIAN_ROLE(), admin));
        assertFalse(distributor.hasRole(distributor.PAUSER_ROLE(), admin));
        assertTrue(distributor.hasRole(distributor.GUARDIAN_ROLE(), guardian));
        assertTrue(distributor.hasRole(distributor.PAUSER_ROLE(), guardian));
        assertEq(distributor.maxReportLag(), MAX_REPORT_LAG);
        for (uint256 i; i < signerAddrs.length; ++i) {
            assertTrue(distributor.isSigner(signerAddrs[i]));
        }
        assertEq(distributor.pendingReport().epoch, 0);
        assertEq(distributor.rewardsRoot(), bytes32(0));
    }

    function test_Constructor_EmitsCommitteeSetAndChallengeWindowSet() public {
        StakingVault own = _linkedVault();
        address next = vm.computeCreateAddress(address(this), vm.getNonce(address(this)));
        vm.expectEmit(next);
        emit RewardDistributor.CommitteeSet(signerAddrs, 3);
        vm.expectEmit(next);
        emit RewardDistributor.ChallengeWindowSet(2 hours);
        assertEq(address(new RewardDistributor(token, own, admin, guardian, signerAddrs, 3, 2 hours, MIN_CHALLENGE_WINDOW, MAX_REPORT_LAG)), next);
    }

    function test_RevertWhen_ConstructorGetsZeroTokenVaultOrAdmin() public {
        StakingVault own = _linkedVault();
        vm.expectRevert(SwarmAccess.ZeroAddress.selector);
        new RewardDistributor(IERC20(address(0)), own, admin, guardian, signerAddrs, THRESHOLD, CHALLENGE_WINDOW, 1, MAX_REPORT_LAG);
        vm.expectRevert(SwarmAccess.ZeroAddress.selector);
        new RewardDistributor(token, IStakingVault(address(0)), admin, guardian, signerAddrs, THRESHOLD, CHALLENGE_WINDOW, 1, MAX_REPORT_LAG);
        vm.expectRevert(abi.encodeWithSignature("AccessControlInvalidDefaultAdmin(address)", address(0)));
        new RewardDistributor(token, own, address(0), guardian, signerAddrs, THRESHOLD, CHALLENGE_WINDOW, 1, MAX_REPORT_LAG);
    }

    function test_RevertWhen_ConstructorGetsAVaultThatNamesAnotherDistributor() public {
        vm.expectRevert(abi.encodeWithSelector(RewardDistributor.VaultNotLinked.selector, address(distributor)));
        new RewardDistributor(token, vault, admin, guardian, signerAddrs, THRESHOLD, CHALLENGE_WINDOW, MIN_CHALLENGE_WINDOW, MAX_REPORT_LAG);
    }

    function test_RevertWhen_ConstructorGetsInvalidCommittee() public {
        StakingVault own = _linkedVault();
        _expectInvalidCommittee(0, 1);
        _deploy(own, new address[](0), 1, CHALLENGE_WINDOW);
        own = _linkedVault();
        _expectInvalidCommittee(4, 5);
        _deploy(own, signerAddrs, 5, CHALLENGE_WINDOW);
        own = _linkedVault();
        _expectInvalidCommittee(4, 2);
        _deploy(own, signerAddrs, 2, CHALLENGE_WINDOW);
    }

    function test_RevertWhen_SetCommitteeThresholdIsNotAMajority() public {
        for (uint8 t = 1; t <= 2; ++t) {
            _expectInvalidCommittee(4, t);
            vm.prank(admin);
            distributor.setCommittee(signerAddrs, t);
        }
        vm.prank(admin);
        distributor.setCommittee(signerAddrs, 3);
        assertEq(distributor.threshold(), 3);
    }

    function test_RevertWhen_ConstructorGetsTooLongWindow() public {
        uint64 max = distributor.MAX_CHALLENGE_WINDOW();
        StakingVault own = _linkedVault();
        vm.expectRevert(
            abi.encodeWithSelector(RewardDistributor.ChallengeWindowOutOfRange.selector, max + 1, MIN_CHALLENGE_WINDOW, max)
        );
        _deploy(own, signerAddrs, THRESHOLD, max + 1);
        own = _linkedVault();
        vm.expectRevert(
            abi.encodeWithSelector(
                RewardDistributor.ChallengeWindowOutOfRange.selector, MIN_CHALLENGE_WINDOW - 1, MIN_CHALLENGE_WINDOW, max
            )
        );
        _deploy(own, signerAddrs, THRESHOLD, MIN_CHALLENGE_WINDOW - 1);
    }

    // ─── setCommittee ────────────────────────────────────────────────────────

    function test_RevertWhen_SetCommitteeEmpty() public {
        _expectInvalidCommittee(0, 1);
        vm.prank(admin);
        distributor.setCommittee(new address[](0), 1);
    }

    function test_RevertWhen_SetCommitteeThresholdZero() public {
        _expectInvalidCommittee(4, 0);
        vm.prank(admin);
        distributor.setCommittee(signerAddrs, 0);
    }

    function test_RevertWhen_SetCommitteeThresholdAboveSize() public {
        _expectInvalidCommittee(4, 5);
        vm.prank(admin);
        distributor.setCommittee(signerAddrs, 5);
    }

    function test_RevertWhen_SetCommitteeAboveMaxSigners() public {
        (address[] memory big,) = _newCommittee("member", distributor.MAX_SIGNERS() + 1);
        _expectInvalidCommittee(33, 1);
        vm.prank(admin);
        distributor.setCommittee(big, 1);
    }

    function test_SetCommittee_AcceptsExactlyMaxSigners() public {
        (address[] memory big,) = _newCommittee("member", distributor.MAX_SIGNERS());
        vm.prank(admin);
        distributor.setCommittee(big, 32);
        assertEq(distributor.signers().length, 32);
        assertEq(distributor.threshold(), 32);
    }

    function test_RevertWhen_SetCommitteeHasDuplicateSigner() public {
        address[] memory dup = new address[](3);
        (dup[0], dup[1], dup[2]) = (signerAddrs[0], signerAddrs[1], signerAddrs[0]);
        _expectInvalidCommittee(3, 2);
        vm.prank(admin);
        distributor.setCommittee(dup, 2);
    }

    function test_RevertWhen_SetCommitteeHasZeroAddress() public {
        address[] memory withZero = new address[](2);
        withZero[0] = signerAddrs[0];
        _expectInvalidCommittee(2, 1);
        vm.prank(admin);
        distributor.setCommittee(withZero, 1);
    }

    function test_RevertWhen_SetCommitteeByNonAdmin() public {
        _expectUnauthorized(guardian, DEFAULT_ADMIN_ROLE);
        vm.prank(guardian);
        distributor.setCommittee(signerAddrs, 2);
    }

    function test_SetCommittee_ReplacesSignersAndEmits() public {
        (address[] memory fresh,) = _newCommittee("fresh", 3);
        vm.expectEmit(address(distributor));
        emit RewardDistributor.CommitteeSet(fresh, 2);
        vm.prank(admin);
        distributor.setCommittee(fresh, 2);

        assertEq(distributor.signers(), fresh);
        assertEq(distributor.threshold(), 2);
        for (uint256 i; i < signerAddrs.length; ++i) {
            assertFalse(distributor.isSigner(signerAddrs[i]), "old signer removed");
        }
        for (uint256 i; i < fresh.length; ++i) {
            assertTrue(distributor.isSigner(fresh[i]), "new signer added");
        }
    }

    function test_SetCommittee_KeepsASignerPresentInBothSets() public {
        address[] memory overlap = new address[](2);
        (overlap[0], overlap[1]) = (signerAddrs[1], outsider);
        vm.prank(admin);
        distributor.setCommittee(overlap, 2);
        assertTrue(distributor.isSigner(signerAddrs[1]));
        assertTrue(distributor.isSigner(outsider));
        assertFalse(distributor.isSigner(signerAddrs[0]));
        assertFalse(distributor.isSigner(signerAddrs[2]));
    }

    function test_RevertWhen_OldSignerSignsAfterCommitteeReplaced() public {
        (address[] memory fresh, uint256[] memory freshKeys) = _newCommittee("fresh", 3);
        vm.prank(admin);
        distributor.setCommittee(fresh, 2);
        _fund(100 ether);

        RewardDistributor.EpochReport memory report = _report(1, 100 ether);
        bytes[] memory oldSigs = _sign(report, 4);
        vm.expectRevert(abi.encodeWithSelector(RewardDistributor.NotASigner.selector, signerAddrs[0]));
        distributor.submitEpoch(report, _noSlashes(), new address[](0), oldSigs);

        distributor.submitEpoch(report, _noSlashes(), new address[](0), _signWith(report, _arr(freshKeys[0], freshKeys[2])));
        assertEq(distributor.pendingReport().epoch, 1);
    }

    // ─── setChallengeWindow ──────────────────────────────────────────────────

    function test_RevertWhen_SetChallengeWindowTooLong() public {
        uint64 max = distributor.MAX_CHALLENGE_WINDOW();
        StakingVault own = _linkedVault();
        vm.expectRevert(abi.encodeWithSelector(RewardDistributor.ChallengeWindowOutOfRange.selector, max + 1, MIN_CHALLENGE_WINDOW, max));
        vm.prank(admin);
        distributor.setChallengeWindow(max + 1);
    }

    function test_RevertWhen_SetChallengeWindowByNonAdmin() public {
        _expectUnauthorized(guardian, DEFAULT_ADMIN_ROLE);
        vm.prank(guardian);
        distributor.setChallengeWindow(2 hours);
    }

    function test_SetChallengeWindow_EmitsAndAppliesToNextReport() public {
        uint64 max = UNBONDING_PERIOD - MAX_REPORT_LAG; // the longest the vault's unbonding covers
        vm.expectEmit(address(distributor));
        emit RewardDistributor.ChallengeWindowSet(max);
        vm.prank(admin);
        distributor.setChallengeWindow(max);
        assertEq(distributor.challengeWindow(), max);

        _fund(1 ether);
        _submit(_report(1, 1 ether), _noSlashes());
        assertEq(distributor.pendingReport().finalizableAt, block.timestamp + max);
    }

    // ─── fund ────────────────────────────────────────────────────────────────

    function test_RevertWhen_FundZero() public {
        vm.expectRevert(RewardDistributor.ZeroAmount.selector);
        vm.prank(admin);
        distributor.fund(0);
    }

    function test_RevertWhen_FundWithoutAllowance() public {
        vm.expectRevert(
            abi.encodeWithSelector(IERC20Errors.ERC20InsufficientAllowance.selector, address(distributor), 0, 1 ether)
        );
        vm.prank(carol);
        distributor.fund(1 ether);
    }

    function test_Fund_PullsTokensAndAccumulates() public {
        uint256 adminBefore = token.balanceOf(admin);
        vm.expectEmit(address(distributor));
        emit RewardDistributor.Funded(admin, 300 ether, 300 ether);
        _fund(300 ether);

        vm.startPrank(carol);
        token.approve(address(distributor), 200 ether);
        vm.expectEmit(address(distributor));
        emit RewardDistributor.Funded(carol, 200 ether, 500 ether);
        distributor.fund(200 ether);
        vm.stopPrank();

        assertEq(distributor.totalFunded(), 500 ether);
        assertEq(token.balanceOf(address(distributor)), 500 ether);
        assertEq(token.balanceOf(admin), adminBefore - 300 ether);
        assertEq(token.balanceOf(carol), ACTOR_FUNDS - 200 ether);
    }

    // ─── submitEpoch ─────────────────────────────────────────────────────────

    function _expectSubmitted(
        RewardDistributor.EpochReport memory report,
        IStakingVault.SlashOrder[] memory slashes,
        uint64 finalizableAt
    ) internal {
        vm.expectEmit(address(distributor));
        emit RewardDistributor.EpochSubmitted(
            report.epoch, report.rewardsRoot, report.totalRewards, report.slashesHash, finalizableAt
        );
        for (uint256 i; i < slashes.length; ++i) {
            vm.expectEmit(address(distributor));
            emit RewardDistributor.SlashProposed(report.epoch, slashes[i]);
        }
    }

    function _assertPending(RewardDistributor.EpochReport memory report, uint64 finalizableAt) internal view {
        RewardDistributor.Pending memory p = distributor.pendingReport();
        assertEq(p.epoch, report.epoch);
        assertEq(p.finalizableAt, finalizableAt);
        assertFalse(p.vetoed);
        assertEq(p.rewardsRoot, report.rewardsRoot);
        assertEq(p.totalRewards, report.totalRewards);
        assertEq(p.slashesHash, report.slashesHash);
    }

    function _submitWithSigners(uint256 n) internal {
        _fund(POOL);
        IStakingVault.SlashOrder[] memory slashes = _slashes(_slash(alice, 100, 1 days, false), _slash(bob, 0, 0, true));
        RewardDistributor.EpochReport memory report = _report(1, keccak256("root1"), 400 ether, slashes);
        uint64 finalizableAt = uint64(block.timestamp) + CHALLENGE_WINDOW;
        bytes[] memory sigs = _sign(report, n);

        _expectSubmitted(report, slashes, finalizableAt);
        vm.prank(carol); // anyone may submit
        distributor.submitEpoch(report, slashes, new address[](0), sigs);
        _assertPending(report, finalizableAt);
        assertEq(distributor.rewardsRoot(), bytes32(0), "nothing published before finalization");
        assertEq(distributor.totalAllocated(), 0);
    }

    function test_SubmitEpoch_ThreeOfFourSignatures() public {
        _submitWithSigners(3);
    }

    function test_SubmitEpoch_FourOfFourSignatures() public {
        _submitWithSigners(4);
    }

    function test_SubmitEpoch_AnyAscendingSubsetOfThree() public {
        _fund(1 ether);
        RewardDistributor.EpochReport memory report = _report(1, 1 ether);
        distributor.submitEpoch(report, _noSlashes(), new address[](0), _signWith(report, _committeeKeys(_arr(0, 2, 3))));
        _assertPending(report, uint64(block.timestamp) + CHALLENGE_WINDOW);
    }

    function test_RevertWhen_SubmitEpochWithTwoOfFourSignatures() public {
        _fund(1 ether);
        RewardDistributor.EpochReport memory report = _report(1, 1 ether);
        bytes[] memory sigs = _sign(report, 2);
        vm.expectRevert(abi.encodeWithSelector(RewardDistributor.NotEnoughSignatures.selector, 2, THRESHOLD));
        distributor.submitEpoch(report, _noSlashes(), new address[](0), sigs);
    }

    function test_RevertWhen_SubmitEpochWithDuplicateSigner() public {
        _fund(1 ether);
        RewardDistributor.EpochReport memory report = _report(1, 1 ether);
        bytes[] memory sigs = _signWith(report, _committeeKeys(_arr(0, 1, 1)));
        vm.expectRevert(
            abi.encodeWithSelector(RewardDistributor.SignersNotAscending.selector, signerAddrs[1], signerAddrs[1])
        );
        distributor.submitEpoch(report, _noSlashes(), new address[](0), sigs);
    }

    function test_RevertWhen_SubmitEpochWithUnsortedSigners() public {
        _fund(1 ether);
        RewardDistributor.EpochReport memory report = _report(1, 1 ether);
        bytes[] memory sigs = _signWith(report, _committeeKeys(_arr(1, 0, 2)));
        vm.expectRevert(
            abi.encodeWithSelector(RewardDistributor.SignersNotAscending.selector, signerAddrs[1], signerAddrs[0])
        );
        distributor.submitEpoch(report, _noSlashes(), new address[](0), sigs);
    }

    function test_RevertWhen_SubmitEpochWithNonMemberSignature() public {
        _fund(1 ether);
        RewardDistributor.EpochReport memory report = _report(1, 1 ether);
        // Ascending order throughout, so membership is the only thing that can fail.
        uint256[] memory keys = _committeeKeys(_arr(0, 1, 2));
        uint256[] memory withOutsider = new uint256[](4);
        (withOutsider[0], withOutsider[1], withOutsider[2], withOutsider[3]) = (keys[0], keys[1], keys[2], outsiderKey);
        bytes[] memory sigs = _signWith(report, _sortByAddress(withOutsider));
        vm.expectRevert(abi.encodeWithSelector(RewardDistributor.NotASigner.selector, outsider));
        distributor.submitEpoch(report, _noSlashes(), new address[](0), sigs);
    }

    function test_RevertWhen_SubmitEpochWithSignaturesOverAnotherReport() public {
        _fund(2 ether);
        RewardDistributor.EpochReport memory report = _report(1, 1 ether);
        bytes[] memory otherSigs = _sign(_report(1, 2 ether), THRESHOLD);
        (address recovered,,) = ECDSA.tryRecover(distributor.hashReport(report), otherSigs[0]);
        assertFalse(distributor.isSigner(recovered));
        vm.expectRevert(abi.encodeWithSelector(RewardDistributor.NotASigner.selector, recovered));
        distributor.submitEpoch(report, _noSlashes(), new address[](0), otherSigs);
    }

    function test_RevertWhen_SubmitEpochWithMalformedSignature() public {
        _fund(1 ether);
        RewardDistributor.EpochReport memory report = _report(1, 1 ether);
        bytes[] memory sigs = _sign(report, THRESHOLD);
        sigs[1] = hex"deadbeef";
        vm.expectRevert(abi.encodeWithSelector(ECDSA.ECDSAInvalidSignatureLength.selector, 4));
        distributor.submitEpoch(report, _noSlashes(), new address[](0), sigs);
    }

    function test_RevertWhen_SubmitEpochWithMalleableSignature() public {
        _fund(1 ether);
        RewardDistributor.EpochReport memory report = _report(1, 1 ether);
        bytes[] memory sigs = _sign(report, THRESHOLD);
        (uint8 v, bytes32 r, bytes32 s) = vm.sign(signerKeys[0], distributor.hashReport(report));
        bytes32 highS = bytes32(SECP256K1_N - uint256(s));
        sigs[0] = abi.encodePacked(r, highS, v == 27 ? uint8(28) : uint8(27));
        vm.expectRevert(abi.encodeWithSelector(ECDSA.ECDSAInvalidSignatureS.selector, highS));
        distributor.submitEpoch(report, _noSlashes(), new address[](0), sigs);
    }

    function test_RevertWhen_SubmitEpochSlashesDifferFromSigned() public {
        _fund(1 ether);
        IStakingVault.SlashOrder[] memory signed = _slashes(_slash(alice, 100, 0, false), _slash(bob, 100, 0, false));
        IStakingVault.SlashOrder[] memory given = _slashes(_slash(alice, 100, 0, false), _slash(bob, 200, 0, false));
        RewardDistributor.EpochReport memory report = _report(1, keccak256("root"), 1 ether, signed);
        bytes[] memory sigs = _sign(report, THRESHOLD);
        vm.expectRevert(
            abi.encodeWithSelector(
                RewardDistributor.SlashesMismatch.selector, report.slashesHash, keccak256(abi.encode(given))
            )
        );
        distributor.submitEpoch(report, given, new address[](0), sigs);
    }

    function test_RevertWhen_SubmitEpochZero() public {
        _fund(1 ether);
        RewardDistributor.EpochReport memory report = _report(0, 1 ether);
        bytes[] memory sigs = _sign(report, THRESHOLD);
        vm.expectRevert(abi.encodeWithSelector(RewardDistributor.WrongEpoch.selector, 0, 1));
        distributor.submitEpoch(report, _noSlashes(), new address[](0), sigs);
    }

    function test_RevertWhen_SubmitEpochIsNotTheNextOne() public {
        _fund(4 ether);
        _publish(1, keccak256("root1"), 1 ether);
        _publish(2, keccak256("root2"), 1 ether);
        assertEq(distributor.lastFinalizedEpoch(), 2);

        RewardDistributor.EpochReport memory same = _report(2, 1 ether);
        bytes[] memory sigs = _sign(same, THRESHOLD);
        vm.expectRevert(abi.encodeWithSelector(RewardDistributor.WrongEpoch.selector, 2, 3));
        distributor.submitEpoch(same, _noSlashes(), new address[](0), sigs);

        RewardDistributor.EpochReport memory older = _report(1, 1 ether);
        sigs = _sign(older, THRESHOLD);
        vm.expectRevert(abi.encodeWithSelector(RewardDistributor.WrongEpoch.selector, 1, 3));
        distributor.submitEpoch(older, _noSlashes(), new address[](0), sigs);

        RewardDistributor.EpochReport memory skipping = _report(4, 1 ether);
        sigs = _sign(skipping, THRESHOLD);
        vm.expectRevert(abi.encodeWithSelector(RewardDistributor.WrongEpoch.selector, 4, 3));
        distributor.submitEpoch(skipping, _noSlashes(), new address[](0), sigs);
    }

    function test_RevertWhen_SubmitEpochWhileAnotherIsPending() public {
        _fund(2 ether);
        _submit(_report(1, 1 ether), _noSlashes());
        uint64 finalizableAt = distributor.pendingReport().finalizableAt;
        vm.warp(finalizableAt + 1 days); // still pending until someone finalizes it

        RewardDistributor.EpochReport memory next = _report(2, 1 ether);
        bytes[] memory sigs = _sign(next, THRESHOLD);
        vm.expectRevert(abi.encodeWithSelector(RewardDistributor.ReportPending.selector, 1, finalizableAt));
        distributor.submitEpoch(next, _noSlashes(), new address[](0), sigs);
    }

    function test_RevertWhen_SubmitEpochAboveUnallocatedFunds() public {
        RewardDistributor.EpochReport memory report = _report(1, 1 ether);
        bytes[] memory sigs = _sign(report, THRESHOLD);
        vm.expectRevert(abi.encodeWithSelector(RewardDistributor.Underfunded.selector, 1 ether, 0));
        distributor.submitEpoch(report, _noSlashes(), new address[](0), sigs);

        _fund(100 ether);
        _publish(1, keccak256("root1"), 60 ether);
        report = _report(2, 50 ether);
        sigs = _sign(report, THRESHOLD);
        vm.expectRevert(abi.encodeWithSelector(RewardDistributor.Underfunded.selector, 50 ether, 40 ether));
        distributor.submitEpoch(report, _noSlashes(), new address[](0), sigs);

        _submit(_report(2, 40 ether), _noSlashes()); // exactly what is left
        assertEq(distributor.pendingReport().totalRewards, 40 ether);
    }

    function test_RevertWhen_SubmitEpochPaused() public {
        _fund(1 ether);
        vm.prank(guardian);
        distributor.pause();
        RewardDistributor.EpochReport memory report = _report(1, 1 ether);
        bytes[] memory sigs = _sign(report, THRESHOLD);
        vm.expectRevert(Pausable.EnforcedPause.selector);
        distributor.submitEpoch(report, _noSlashes(), new address[](0), sigs);
    }

    function test_SubmitEpoch_CorrectedReportForSameEpochAfterVeto() public {
        _fund(2 ether);
        _submit(_report(1, 2 ether), _noSlashes());
        vm.prank(guardian);
        distributor.vetoEpoch(1);

        vm.warp(block.timestamp + 10 minutes);
        RewardDistributor.EpochReport memory corrected = _report(1, keccak256("corrected"), 1 ether, _noSlashes());
        _expectSubmitted(corrected, _noSlashes(), uint64(block.timestamp) + CHALLENGE_WINDOW);
        _submit(corrected, _noSlashes());
        _assertPending(corrected, uint64(block.timestamp) + CHALLENGE_WINDOW);

        _warpToFinalizable();
        distributor.finalizeEpoch(_noSlashes());
        assertEq(distributor.rewardsRoot(), keccak256("corrected"));
        assertEq(distributor.totalAllocated(), 1 ether);
    }

    function test_RevertWhen_VetoedReportIsResubmitted() public {
        _fund(2 ether);
        RewardDistributor.EpochReport memory vetoed = _report(1, 2 ether);
        _submit(vetoed, _noSlashes());
        vm.prank(guardian);
        distributor.vetoEpoch(1);

        // The committee's signatures stay valid, but the veto is final for this report,
        // whoever replays it and whichever signer subset they use.
        bytes[] memory allSigs = _sign(vetoed, 4);
        vm.expectRevert(abi.encodeWithSelector(RewardDistributor.ReportVetoed.selector, 1));
        vm.prank(alice);
        distributor.submitEpoch(vetoed, _noSlashes(), new address[](0), allSigs);
    }

    function test_RevertWhen_OlderVetoedReportIsReplayedAfterASecondVeto() public {
        _fund(2 ether);
        RewardDistributor.EpochReport memory first = _report(1, 2 ether);
        _submit(first, _noSlashes());
        vm.prank(guardian);
        distributor.vetoEpoch(1);
        _submit(_report(1, 1 ether), _noSlashes());
        vm.prank(guardian);
        distributor.vetoEpoch(1);

        bytes[] memory sigs = _sign(first, THRESHOLD);
        vm.expectRevert(abi.encodeWithSelector(RewardDistributor.ReportVetoed.selector, 1));
        distributor.submitEpoch(first, _noSlashes(), new address[](0), sigs);
    }

    // ─── vetoEpoch ───────────────────────────────────────────────────────────

    function _submitEpochOne() internal returns (uint64 finalizableAt) {
        _fund(1 ether);
        _submit(_report(1, 1 ether), _noSlashes());
        return distributor.pendingReport().finalizableAt;
    }

    function test_RevertWhen_VetoByNonGuardian() public {
        _submitEpochOne();
        _expectUnauthorized(alice, distributor.GUARDIAN_ROLE());
        vm.prank(alice);
        distributor.vetoEpoch(1);
    }

    function test_RevertWhen_VetoWithNoReport() public {
        vm.expectRevert(RewardDistributor.NoPendingReport.selector);
        vm.prank(guardian);
        distributor.vetoEpoch(1);
    }

    function test_RevertWhen_VetoWrongEpoch() public {
        _submitEpochOne();
        vm.expectRevert(RewardDistributor.NoPendingReport.selector);
        vm.prank(guardian);
        distributor.vetoEpoch(2);
    }

    function test_RevertWhen_VetoAlreadyVetoed() public {
        _submitEpochOne();
        vm.startPrank(guardian);
        distributor.vetoEpoch(1);
        vm.expectRevert(RewardDistributor.NoPendingReport.selector);
        distributor.vetoEpoch(1);
        vm.stopPrank();
    }

    function test_RevertWhen_VetoAtFinalizableAt() public {
        uint64 finalizableAt = _submitEpochOne();
        vm.warp(finalizableAt);
        vm.expectRevert(
            abi.encodeWithSelector(RewardDistributor.ChallengeWindowClosed.selector, finalizableAt, finalizableAt)
        );
        vm.prank(guardian);
        distributor.vetoEpoch(1);
    }

    function test_RevertWhen_VetoAfterFinalizableAt() public {
        uint64 finalizableAt = _submitEpochOne();
        vm.warp(finalizableAt + 1 days);
        vm.expectRevert(
            abi.encodeWithSelector(
                RewardDistributor.ChallengeWindowClosed.selector, finalizableAt, finalizableAt + 1 days
            )
        );
        vm.prank(guardian);
        distributor.vetoEpoch(1);
    }

    function test_Veto_LastSecondOfWindowEmitsAndMarksVetoed() public {
        uint64 finalizableAt = _submitEpochOne();
        vm.warp(finalizableAt - 1);
        vm.expectEmit(address(distributor));
        emit RewardDistributor.EpochVetoed(1, guardian);
        vm.prank(guardian);
        distributor.vetoEpoch(1);

        RewardDistributor.Pending memory p = distributor.pendingReport();
        assertTrue(p.vetoed);
        assertEq(p.epoch, 1);
    }

    function test_Veto_WorksWhilePaused() public {
        _submitEpochOne();
        vm.prank(guardian);
        distributor.pause();
        vm.prank(guardian);
        distributor.vetoEpoch(1);
        assertTrue(distributor.pendingReport().vetoed);
    }

    function test_RevertWhen_FinalizingVetoedReport() public {
        uint64 finalizableAt = _submitEpochOne();
        vm.prank(guardian);
        distributor.vetoEpoch(1);
        vm.warp(finalizableAt);
        vm.expectRevert(RewardDistributor.NoPendingReport.selector);
        distributor.finalizeEpoch(_noSlashes());
        assertEq(distributor.lastFinalizedEpoch(), 0);
        assertEq(distributor.totalAllocated(), 0);
    }

    // ─── finalizeEpoch ───────────────────────────────────────────────────────

    function test_RevertWhen_FinalizeDuringChallengeWindow() public {
        uint64 finalizableAt = _submitEpochOne();
        vm.expectRevert(
            abi.encodeWithSelector(RewardDistributor.ChallengeWindowOpen.selector, finalizableAt, block.timestamp)
        );
        distributor.finalizeEpoch(_noSlashes());

        vm.warp(finalizableAt - 1);
        vm.expectRevert(
            abi.encodeWithSelector(RewardDistributor.ChallengeWindowOpen.selector, finalizableAt, finalizableAt - 1)
        );
        distributor.finalizeEpoch(_noSlashes());
    }

    function test_RevertWhen_FinalizeWithNoReport() public {
        vm.expectRevert(RewardDistributor.NoPendingReport.selector);
        distributor.finalizeEpoch(_noSlashes());
    }

    function test_RevertWhen_FinalizeTwice() public {
        _submitEpochOne();
        _warpToFinalizable();
        distributor.finalizeEpoch(_noSlashes());
        vm.expectRevert(RewardDistributor.NoPendingReport.selector);
        distributor.finalizeEpoch(_noSlashes());
    }

    function test_RevertWhen_FinalizeWithOtherSlashes() public {
        _fund(1 ether);
        IStakingVault.SlashOrder[] memory signed = _slashes(_slash(alice, 100, 0, false), _slash(bob, 100, 0, false));
        _submit(_report(1, keccak256("root"), 1 ether, signed), signed);
        _warpToFinalizable();
        IStakingVault.SlashOrder[] memory none = _noSlashes();
        vm.expectRevert(
            abi.encodeWithSelector(
                RewardDistributor.SlashesMismatch.selector, keccak256(abi.encode(signed)), keccak256(abi.encode(none))
            )
        );
        distributor.finalizeEpoch(none);
    }

    function test_RevertWhen_FinalizePausedThenWorksAfterUnpause() public {
        _submitEpochOne();
        _warpToFinalizable();
        vm.prank(guardian);
        distributor.pause();
        vm.expectRevert(Pausable.EnforcedPause.selector);
        distributor.finalizeEpoch(_noSlashes());

        vm.prank(guardian);
        distributor.unpause();
        distributor.finalizeEpoch(_noSlashes());
        assertEq(distributor.lastFinalizedEpoch(), 1);
    }

    /// @dev The report's emission is checked against unallocated funds at submission;
    /// funds never decrease and only finalization allocates, so the same check in
    /// finalizeEpoch cannot fail. The report is refused at submission instead.
    function test_Underfunded_IsCaughtAtSubmitSoFinalizeStaysCovered() public {
        _fund(10 ether);
        RewardDistributor.EpochReport memory tooBig = _report(1, 10 ether + 1);
        bytes[] memory sigs = _sign(tooBig, THRESHOLD);
        vm.expectRevert(abi.encodeWithSelector(RewardDistributor.Underfunded.selector, 10 ether + 1, 10 ether));
        distributor.submitEpoch(tooBig, _noSlashes(), new address[](0), sigs);

        _submitAndFinalize(_report(1, 10 ether), _noSlashes());
        assertEq(distributor.totalAllocated(), distributor.totalFunded());
    }

    function test_FinalizeEpoch_PublishesRootAndAllocates() public {
        _fund(POOL);
        _publish(1, keccak256("root1"), 100 ether);

        RewardDistributor.EpochReport memory report = _report(2, keccak256("root2"), 250 ether, _noSlashes());
        _submit(report, _noSlashes());
        _warpToFinalizable();
        vm.expectEmit(address(distributor));
        emit RewardDistributor.EpochFinalized(2, keccak256("root2"), 250 ether, 0);
        vm.prank(dave); // anyone may finalize
        distributor.finalizeEpoch(_noSlashes());

        assertEq(distributor.rewardsRoot(), keccak256("root2"));
        assertEq(distributor.lastFinalizedEpoch(), 2);
        assertEq(distributor.totalAllocated(), 350 ether);
        assertEq(distributor.pendingReport().epoch, 0, "pending cleared");
        assertEq(token.balanceOf(address(distributor)), POOL, "finalization moves no tokens");
    }

    function test_FinalizeEpoch_AppliesSlashJailAndTombstoneThroughVault() public {
        _registerAndStake(alice, 1, STAKE);
        _registerAndStake(bob, 1, STAKE);
        _fund(1 ether);
        IStakingVault.SlashOrder[] memory slashes =
            _slashes(_slash(alice, 1_000, 1 days, false), _slash(bob, 2_000, 0, true));
        _submit(_report(1, keccak256("root"), 1 ether, slashes), slashes);
        _warpToFinalizable();
        uint64 jailUntil = uint64(block.timestamp) + 1 days;
        uint256 treasuryBefore = token.balanceOf(treasury);
        uint256 supplyBefore = token.totalSupply();

        vm.expectEmit(address(distributor));
        emit RewardDistributor.EpochFinalized(1, keccak256("root"), 1 ether, 2);
        // The tombstone goes first, whatever its place in the list.
        vm.expectEmit(address(vault));
        emit StakingVault.Slashed(bob, REASON, 2_000 ether, 0, 2_000, EVIDENCE, 1_000 ether);
        vm.expectEmit(address(vault));
        emit StakingVault.Tombstoned(bob);
        vm.expectEmit(address(vault));
        emit StakingVault.Jailed(bob, type(uint64).max);
        vm.expectEmit(address(vault));
        emit StakingVault.Slashed(alice, REASON, 1_000 ether, 0, 1_000, EVIDENCE, 500 ether);
        vm.expectEmit(address(vault));
        emit StakingVault.Jailed(alice, jailUntil);
        distributor.finalizeEpoch(slashes);

        StakingVault.ProviderView memory a = vault.providerInfo(alice);
        StakingVault.ProviderView memory b = vault.providerInfo(bob);
        assertEq(a.stake, STAKE - 1_000 ether);
        assertEq(a.jailedUntil, jailUntil);
        assertFalse(a.tombstoned);
        assertEq(b.stake, STAKE - 2_000 ether);
        assertTrue(b.tombstoned);
        assertEq(b.jailedUntil, type(uint64).max);
        assertEq(vault.totalStaked(), 2 * STAKE - 3_000 ether);
        assertEq(token.balanceOf(treasury), treasuryBefore + 1_500 ether);
        assertEq(token.totalSupply(), supplyBefore - 1_500 ether);
        assertEq(distributor.lastFinalizedEpoch(), 1);
    }

    function test_FinalizeEpoch_AnUnknownProviderIsSkippedAndDoesNotBlock() public {
        _registerAndStake(alice, 1, STAKE);
        _registerAndStake(bob, 1, STAKE);
        _fund(1 ether);
        IStakingVault.SlashOrder[] memory slashes = new IStakingVault.SlashOrder[](3);
        slashes[0] = _slash(carol, 1_000, 1 days, false); // never registered: skipped
        slashes[1] = _slash(alice, MAX_SLASH_BPS + 1, 1 hours, false); // above the vault cap: applied at the cap
        slashes[2] = _slash(bob, 1_000, 0, false); // valid
        _sortSlashes(slashes);
        _submit(_report(1, keccak256("root"), 1 ether, slashes), slashes);
        _warpToFinalizable();

        vm.expectEmit(address(vault));
        emit StakingVault.SlashSkipped(carol, address(distributor));
        distributor.finalizeEpoch(slashes);

        assertEq(vault.providerInfo(alice).stake, STAKE - STAKE * MAX_SLASH_BPS / 10_000, "taken at the cap");
        assertEq(vault.providerInfo(alice).jailedUntil, block.timestamp + 1 hours);
        assertEq(vault.providerInfo(bob).stake, STAKE - 1_000 ether);
        assertFalse(vault.providerInfo(carol).registered);
        assertEq(distributor.rewardsRoot(), keccak256("root"));
        assertEq(distributor.totalAllocated(), 1 ether);
    }

    /// @dev The slashes are applied in one call that nothing swallows: without its slasher
    /// role the distributor finalizes nothing, and the report stays pending until it lapses.
    function test_RevertWhen_FinalizeEpochWithoutTheSlasherRole_TheReportStaysPending() public {
        _registerAndStake(alice, 1, STAKE);
        _fund(1 ether);
        IStakingVault.SlashOrder[] memory slashes = new IStakingVault.SlashOrder[](1);
        slashes[0] = _slash(alice, 0, 0, true); // tombstone only
        _submit(_report(1, keccak256("root"), 1 ether, slashes), slashes);
        bytes32 slasherRole = vault.SLASHER_ROLE();
        vm.prank(admin);
        vault.revokeRole(slasherRole, address(distributor));
        _warpToFinalizable();

        vm.expectRevert(
            abi.encodeWithSelector(
                IAccessControl.AccessControlUnauthorizedAccount.selector, address(distributor), slasherRole
            )
        );
        distributor.finalizeEpoch(slashes);
        assertFalse(vault.providerInfo(alice).tombstoned);
        assertEq(distributor.lastFinalizedEpoch(), 0);
        assertEq(distributor.pendingReport().epoch, 1);
    }

    function test_RevertWhen_SubmitEpochOrdersAnEntryWithNoPenalty() public {
        _registerAndStake(alice, 1, STAKE);
        _fund(1 ether);
        IStakingVault.SlashOrder[] memory slashes = new IStakingVault.SlashOrder[](1);
        slashes[0] = _slash(alice, 0, 0, false); // no bps, no jail, no tombstone: a hold with no reason
        RewardDistributor.EpochReport memory report = _report(1, keccak256("root"), 1 ether, slashes);
        bytes[] memory sigs = _sign(report, THRESHOLD);
        vm.expectRevert(abi.encodeWithSelector(RewardDistributor.EmptySlash.selector, 0, alice));
        distributor.submitEpoch(report, slashes, new address[](0), sigs);
        assertEq(vault.providerInfo(alice).heldUntil, 0, "nothing held");
    }

    function testFuzz_FinalizeSlashTakesItsBpsAndJails(uint16 bps, uint64 jailSeconds, uint256 stakeAmount) public {
        bps = uint16(bound(bps, 1, MAX_SLASH_BPS));
        jailSeconds = uint64(bound(jailSeconds, 0, 365 days));
        stakeAmount = bound(stakeAmount, MIN_STAKE_PER_GPU, 100_000 ether);
        _registerAndStake(alice, 1, stakeAmount);
        _fund(1 ether);
        IStakingVault.SlashOrder[] memory slashes = new IStakingVault.SlashOrder[](1);
        slashes[0] = _slash(alice, bps, jailSeconds, false);
        _submit(_report(1, keccak256("root"), 1 ether, slashes), slashes);
        _warpToFinalizable();

        distributor.finalizeEpoch(slashes);
        StakingVault.ProviderView memory p = vault.providerInfo(alice);
        assertEq(p.stake, stakeAmount - stakeAmount * bps / 10_000);
        assertEq(p.jailedUntil, jailSeconds == 0 ? 0 : block.timestamp + jailSeconds);
        assertFalse(p.tombstoned);
    }

    // ─── claim ───────────────────────────────────────────────────────────────

    function _epochOne() internal returns (bytes32[] memory leaves) {
        // alice, bob, carol, dave, erin: five leaves, so one node is carried up a level.
        return _publishCumulatives(1, claimants, _arr(100 ether, 200 ether, 50 ether, 10 ether, 1 ether));
    }

    function _epochTwo() internal returns (bytes32[] memory leaves) {
        return _publishCumulatives(2, claimants, _arr(160 ether, 230 ether, 50 ether, 15 ether, 3 ether));
    }

    function test_Claim_PaysCumulativeAndEmits() public {
        bytes32[] memory leaves = _epochOne();
        vm.expectEmit(address(distributor));
        emit RewardDistributor.Claimed(alice, 100 ether, 100 ether);
        _claim(leaves, 0, alice, 100 ether);

        assertEq(token.balanceOf(alice), ACTOR_FUNDS + 100 ether);
        assertEq(distributor.claimed(alice), 100 ether);
        assertEq(distributor.totalClaimed(), 100 ether);
        assertEq(token.balanceOf(address(distributor)), 361 ether - 100 ether);
    }

    function test_Claim_EveryLeafOfTheTreeIsClaimable() public {
        bytes32[] memory leaves = _epochOne();
        uint256[] memory cums = _arr(100 ether, 200 ether, 50 ether, 10 ether, 1 ether);
        for (uint256 i; i < claimants.length; ++i) {
            uint256 before = token.balanceOf(claimants[i]);
            _claim(leaves, i, claimants[i], cums[i]);
            assertEq(token.balanceOf(claimants[i]), before + cums[i]);
        }
        assertEq(distributor.totalClaimed(), distributor.totalAllocated());
        assertEq(token.balanceOf(address(distributor)), 0);
    }

    function test_Claim_SecondEpochPaysOnlyTheDifference() public {
        _claim(_epochOne(), 0, alice, 100 ether);
        bytes32[] memory leaves = _epochTwo();
        vm.expectEmit(address(distributor));
        emit RewardDistributor.Claimed(alice, 60 ether, 160 ether);
        _claim(leaves, 0, alice, 160 ether);
        assertEq(token.balanceOf(alice), ACTOR_FUNDS + 160 ether);
        assertEq(distributor.claimed(alice), 160 ether);
    }

    function test_Claim_OneProofClaimsEverySkippedEpoch() public {
        _epochOne(); // bob does not claim
        bytes32[] memory leaves = _epochTwo();
        vm.expectEmit(address(distributor));
        emit RewardDistributor.Claimed(bob, 230 ether, 230 ether);
        _claim(leaves, 1, bob, 230 ether);
        assertEq(token.balanceOf(bob), ACTOR_FUNDS + 230 ether);
        assertEq(distributor.totalClaimed(), 230 ether);
    }

    function test_Claim_AnyoneMayCallAndTokensGoToProvider() public {
        bytes32[] memory leaves = _epochOne();
        bytes32[] memory proof = leaves.proof(1);
        vm.prank(carol);
        distributor.claim(bob, 200 ether, proof);
        assertEq(token.balanceOf(bob), ACTOR_FUNDS + 200 ether);
        assertEq(token.balanceOf(carol), ACTOR_FUNDS);
        assertEq(distributor.claimed(carol), 0);
    }

    function test_Claim_WorksWhilePaused() public {
        bytes32[] memory leaves = _epochOne();
        vm.prank(guardian);
        distributor.pause();
        _claim(leaves, 0, alice, 100 ether);
        assertEq(token.balanceOf(alice), ACTOR_FUNDS + 100 ether);
    }

    function test_RevertWhen_ClaimWithWrongAmountOrProvider() public {
        bytes32[] memory leaves = _epochOne();
        bytes32[] memory proof = leaves.proof(0);
        vm.expectRevert(abi.encodeWithSelector(RewardDistributor.InvalidProof.selector, alice, 101 ether));
        distributor.claim(alice, 101 ether, proof);
        vm.expectRevert(abi.encodeWithSelector(RewardDistributor.InvalidProof.selector, carol, 100 ether));
        distributor.claim(carol, 100 ether, proof);
    }

    function test_RevertWhen_ClaimWithProofAgainstAReplacedRoot() public {
        bytes32[] memory oldLeaves = _epochOne();
        _epochTwo();
        bytes32[] memory oldProof = oldLeaves.proof(0);
        vm.expectRevert(abi.encodeWithSelector(RewardDistributor.InvalidProof.selector, alice, 100 ether));
        distributor.claim(alice, 100 ether, oldProof);
    }

    function test_RevertWhen_ClaimBeforeAnyRoot() public {
        vm.expectRevert(abi.encodeWithSelector(RewardDistributor.InvalidProof.selector, alice, 1 ether));
        distributor.claim(alice, 1 ether, new bytes32[](0));
    }

    function test_RevertWhen_ClaimTwice() public {
        bytes32[] memory leaves = _epochOne();
        _claim(leaves, 0, alice, 100 ether);
        bytes32[] memory proof = leaves.proof(0);
        vm.expectRevert(abi.encodeWithSelector(StakingVault.ClaimNotIncreasing.selector, alice, 100 ether, 100 ether));
        distributor.claim(alice, 100 ether, proof);
    }

    function test_RevertWhen_ClaimAboveAllocation() public {
        // A committee-signed root promising 150 + 50 while the epoch only allocates 100.
        address[] memory accounts = new address[](2);
        (accounts[0], accounts[1]) = (alice, bob);
        bytes32[] memory leaves = MerkleBuilder.leaves(accounts, _arr(150 ether, 50 ether));
        _fund(POOL);
        _publish(1, leaves.root(), 100 ether);
        _registerAll(accounts);

        _claim(leaves, 1, bob, 50 ether);
        bytes32[] memory proof = leaves.proof(0);
        vm.expectRevert(abi.encodeWithSelector(RewardDistributor.ClaimExceedsAllocation.selector, 150 ether, 50 ether));
        distributor.claim(alice, 150 ether, proof);
        assertEq(distributor.totalClaimed(), 50 ether);
        assertEq(token.balanceOf(address(distributor)), POOL - 50 ether);
    }

    // ─── Bounds on a report ──────────────────────────────────────────────────

    /// @dev `n` providers with ascending addresses, each registered and staked.
    function _stakedProviders(uint256 n) internal returns (address[] memory list) {
        list = new address[](n);
        for (uint256 i; i < n; ++i) {
            list[i] = address(uint160(0x100000 + i));
            vm.prank(admin);
            token.transfer(list[i], STAKE);
            vm.startPrank(list[i]);
            token.approve(address(vault), STAKE);
            vault.register(keccak256(abi.encode(list[i])), 1);
            vault.stake(STAKE);
            vm.stopPrank();
        }
    }

    /// @dev The largest report allowed: MAX_SLASHES_PER_REPORT slashes, each with a jail,
    /// MAX_TOMBSTONES_PER_REPORT of them tombstones.
    function _largestSlashes(address[] memory providers) internal view returns (IStakingVault.SlashOrder[] memory list) {
        list = new IStakingVault.SlashOrder[](distributor.MAX_SLASHES_PER_REPORT());
        for (uint256 i; i < list.length; ++i) {
            bool tombstone = i < distributor.MAX_TOMBSTONES_PER_REPORT();
            list[i] = _slash(providers[i], tombstone ? MAX_SLASH_BPS : 100, distributor.MAX_JAIL_SECONDS(), tombstone);
        }
    }

    function test_FinalizeEpoch_TheLargestReportAllowedFitsInFifteenMillionGas() public {
        address[] memory providers = _stakedProviders(distributor.MAX_SLASHES_PER_REPORT());
        IStakingVault.SlashOrder[] memory slashes = _largestSlashes(providers);
        _fund(1 ether);
        _submit(_report(1, keccak256("root"), 1 ether, slashes), slashes);
        _warpToFinalizable();
        uint256 before = gasleft();
        distributor.finalizeEpoch(slashes);
        uint256 used = before - gasleft();
        emit log_named_uint("finalizeEpoch gas, largest report", used);
        assertLt(used, 15_000_000, "fits in half a block");
        assertEq(distributor.lastFinalizedEpoch(), 1);
        for (uint256 i; i < providers.length; ++i) {
            StakingVault.ProviderView memory p = vault.providerInfo(providers[i]);
            assertLt(p.stake, STAKE, "every slash applied");
            assertGt(p.jailedUntil, block.timestamp);
        }
    }

    function test_RevertWhen_SubmitEpochOrdersMoreSlashesThanTheMaximum() public {
        uint256 max = distributor.MAX_SLASHES_PER_REPORT();
        IStakingVault.SlashOrder[] memory slashes = new IStakingVault.SlashOrder[](max + 1);
        for (uint256 i; i < slashes.length; ++i) {
            slashes[i] = _slash(address(uint160(0x100000 + i)), 100, 0, false);
        }
        _fund(1 ether);
        RewardDistributor.EpochReport memory report = _report(1, keccak256("root"), 1 ether, slashes);
        bytes[] memory sigs = _sign(report, THRESHOLD);
        vm.expectRevert(abi.encodeWithSelector(RewardDistributor.TooManySlashes.selector, max + 1, max));
        distributor.submitEpoch(report, slashes, new address[](0), sigs);
    }

    function test_RevertWhen_SubmitEpochOrdersMoreTombstonesThanTheMaximum() public {
        uint256 max = distributor.MAX_TOMBSTONES_PER_REPORT();
        IStakingVault.SlashOrder[] memory slashes = new IStakingVault.SlashOrder[](max + 1);
        for (uint256 i; i < slashes.length; ++i) {
            slashes[i] = _slash(address(uint160(0x100000 + i)), 0, 0, true);
        }
        _fund(1 ether);
        RewardDistributor.EpochReport memory report = _report(1, keccak256("root"), 1 ether, slashes);
        bytes[] memory sigs = _sign(report, THRESHOLD);
        vm.expectRevert(abi.encodeWithSelector(RewardDistributor.TooManyTombstones.selector, max + 1, max));
        distributor.submitEpoch(report, slashes, new address[](0), sigs);
    }

    function testFuzz_RevertWhen_SubmitEpochJailsPastTheMaximum(uint64 jailSeconds) public {
        uint64 max = distributor.MAX_JAIL_SECONDS();
        jailSeconds = uint64(bound(jailSeconds, uint256(max) + 1, type(uint64).max));
        IStakingVault.SlashOrder[] memory slashes = new IStakingVault.SlashOrder[](1);
        slashes[0] = _slash(alice, 100, jailSeconds, false);
        _fund(1 ether);
        RewardDistributor.EpochReport memory report = _report(1, keccak256("root"), 1 ether, slashes);
        bytes[] memory sigs = _sign(report, THRESHOLD);
        vm.expectRevert(abi.encodeWithSelector(RewardDistributor.JailTooLong.selector, alice, jailSeconds, max));
        distributor.submitEpoch(report, slashes, new address[](0), sigs);
    }

    function test_FinalizeEpoch_TheLongestJailAllowedFinalizes() public {
        _registerAndStake(alice, 1, STAKE);
        IStakingVault.SlashOrder[] memory slashes = new IStakingVault.SlashOrder[](1);
        slashes[0] = _slash(alice, 0, distributor.MAX_JAIL_SECONDS(), false);
        _fund(1 ether);
        _submitAndFinalize(_report(1, keccak256("root"), 1 ether, slashes), slashes);
        assertEq(vault.providerInfo(alice).jailedUntil, block.timestamp + distributor.MAX_JAIL_SECONDS());
    }

    function test_RevertWhen_SubmitEpochSlashesAreUnsortedOrRepeated() public {
        _fund(1 ether);
        (address low, address high) = alice < bob ? (alice, bob) : (bob, alice);
        IStakingVault.SlashOrder[] memory slashes = new IStakingVault.SlashOrder[](2);
        (slashes[0], slashes[1]) = (_slash(high, 100, 0, false), _slash(low, 100, 0, false));
        RewardDistributor.EpochReport memory report = _report(1, keccak256("root"), 1 ether, slashes);
        bytes[] memory sigs = _sign(report, THRESHOLD);
        vm.expectRevert(abi.encodeWithSelector(RewardDistributor.SlashesNotSorted.selector, 1, low));
        distributor.submitEpoch(report, slashes, new address[](0), sigs);

        (slashes[0], slashes[1]) = (_slash(low, 100, 0, false), _slash(low, 200, 0, false));
        report = _report(1, keccak256("root"), 1 ether, slashes);
        sigs = _sign(report, THRESHOLD);
        vm.expectRevert(abi.encodeWithSelector(RewardDistributor.SlashesNotSorted.selector, 1, low));
        distributor.submitEpoch(report, slashes, new address[](0), sigs);

        slashes = new IStakingVault.SlashOrder[](1);
        slashes[0] = _slash(address(0), 100, 0, false);
        report = _report(1, keccak256("root"), 1 ether, slashes);
        sigs = _sign(report, THRESHOLD);
        vm.expectRevert(abi.encodeWithSelector(RewardDistributor.SlashesNotSorted.selector, 0, address(0)));
        distributor.submitEpoch(report, slashes, new address[](0), sigs);
    }

    function testFuzz_RevertWhen_SubmitEpochCumulativeTotalIsNotWhatWasAllocated(uint256 claimedTotal) public {
        _fund(10 ether);
        _publish(1, keccak256("root1"), 4 ether);
        RewardDistributor.EpochReport memory report = _report(2, keccak256("root2"), 1 ether, _noSlashes());
        assertEq(report.cumulativeTotal, 5 ether);
        vm.assume(claimedTotal != 5 ether);
        report.cumulativeTotal = claimedTotal;
        bytes[] memory sigs = _sign(report, THRESHOLD);
        vm.expectRevert(abi.encodeWithSelector(RewardDistributor.CumulativeTotalMismatch.selector, claimedTotal, 5 ether));
        distributor.submitEpoch(report, _noSlashes(), new address[](0), sigs);
    }

    function test_RevertWhen_SubmitEpochAfterItsExpiry() public {
        _fund(1 ether);
        RewardDistributor.EpochReport memory report = _report(1, 1 ether);
        bytes[] memory sigs = _sign(report, THRESHOLD);
        vm.warp(report.expiresAt + 1);
        vm.expectRevert(
            abi.encodeWithSelector(RewardDistributor.ReportExpired.selector, report.expiresAt, report.expiresAt + 1)
        );
        distributor.submitEpoch(report, _noSlashes(), new address[](0), sigs);
        vm.warp(report.expiresAt);
        distributor.submitEpoch(report, _noSlashes(), new address[](0), sigs);
        assertEq(distributor.pendingReport().epoch, 1);
    }

    function test_RevertWhen_FinalizeAfterTheReportLapsed_ThenANewReportReplacesIt() public {
        uint64 finalizableAt = _submitEpochOne();
        uint64 lapsesAt = finalizableAt + distributor.FINALIZE_PERIOD();
        vm.warp(lapsesAt + 1);
        vm.expectRevert(abi.encodeWithSelector(RewardDistributor.ReportLapsed.selector, 1, lapsesAt));
        distributor.finalizeEpoch(_noSlashes());

        RewardDistributor.EpochReport memory fresh = _report(1, keccak256("fresh"), 1 ether, _noSlashes());
        _submit(fresh, _noSlashes());
        _warpToFinalizable();
        distributor.finalizeEpoch(_noSlashes());
        assertEq(distributor.rewardsRoot(), keccak256("fresh"));
        assertEq(distributor.lastFinalizedEpoch(), 1);
    }

    function test_DiscardEpoch_GuardianClearsAStuckReportAfterTheRecoveryDelay() public {
        uint64 finalizableAt = _submitEpochOne();
        RewardDistributor.EpochReport memory stuck = _report(1, 1 ether);
        uint64 allowedAt = finalizableAt + distributor.RECOVERY_DELAY();
        vm.warp(allowedAt - 1);
        vm.prank(guardian);
        vm.expectRevert(abi.encodeWithSelector(RewardDistributor.RecoveryNotYet.selector, allowedAt, allowedAt - 1));
        distributor.discardEpoch(1);

        _expectUnauthorized(alice, distributor.GUARDIAN_ROLE());
        vm.prank(alice);
        distributor.discardEpoch(1);

        vm.warp(allowedAt);
        vm.expectEmit(address(distributor));
        emit RewardDistributor.EpochDiscarded(1, guardian);
        vm.prank(guardian);
        distributor.discardEpoch(1);
        vm.expectRevert(RewardDistributor.NoPendingReport.selector);
        distributor.finalizeEpoch(_noSlashes());

        stuck.expiresAt = uint64(block.timestamp + 1 days); // same content, a new expiry
        bytes[] memory sigs = _sign(stuck, THRESHOLD);
        vm.expectRevert(abi.encodeWithSelector(RewardDistributor.ReportVetoed.selector, 1));
        distributor.submitEpoch(stuck, _noSlashes(), new address[](0), sigs);

        _submit(_report(1, keccak256("replacement"), 1 ether, _noSlashes()), _noSlashes());
        assertEq(distributor.pendingReport().epoch, 1);
    }

    function test_SubmitEpoch_HoldsASlashedProvidersStakeUntilTheReportLapses() public {
        _registerAndStake(alice, 1, STAKE);
        vm.prank(alice);
        vault.requestUnstake(STAKE);
        IStakingVault.SlashOrder[] memory slashes = new IStakingVault.SlashOrder[](1);
        slashes[0] = _slash(alice, 1_000, 0, false);
        _fund(1 ether);
        _submit(_report(1, keccak256("root"), 1 ether, slashes), slashes);
        uint64 heldUntil = distributor.pendingReport().finalizableAt + distributor.FINALIZE_PERIOD() + 1;
        assertEq(vault.providerInfo(alice).reportHeldUntil, heldUntil);

        // The unbonding period ends while the report waits: the stake still cannot leave.
        vm.warp(vault.providerInfo(alice).unbondingEnd);
        vm.prank(alice);
        vm.expectRevert(abi.encodeWithSelector(StakingVault.StakeOnHold.selector, heldUntil, uint64(block.timestamp)));
        vault.withdraw();

        // Even at the last second the report may be finalized, the stake is still held.
        vm.warp(heldUntil - 1);
        vm.prank(alice);
        vm.expectRevert(abi.encodeWithSelector(StakingVault.StakeOnHold.selector, heldUntil, heldUntil - 1));
        vault.withdraw();
        distributor.finalizeEpoch(slashes);
        assertEq(vault.providerInfo(alice).unbonding, STAKE - 1_000 ether, "the slash reached the unbonding stake");
    }

    function test_FinalizeEpoch_TombstonesDrawTheBucketBeforeOtherSlashes() public {
        _registerAndStake(alice, 1, STAKE);
        _registerAndStake(bob, 1, STAKE);
        vm.prank(admin);
        vault.setSlashRateLimit(1_000 ether, 1);
        (address honest, address fraud) = alice < bob ? (alice, bob) : (bob, alice);
        IStakingVault.SlashOrder[] memory slashes = new IStakingVault.SlashOrder[](2);
        // The fraud sorts second but is applied first: it takes the whole bucket.
        slashes[0] = _slash(honest, 1_000, 0, false);
        slashes[1] = _slash(fraud, 1_000, 0, true);
        _fund(1 ether);
        _submit(_report(1, keccak256("root"), 1 ether, slashes), slashes);
        _warpToFinalizable();
        vm.prank(admin);
        vault.setSlashRateLimit(1_000 ether, 1); // the bucket is full again, and refills slowly
        distributor.finalizeEpoch(slashes);

        assertEq(vault.providerInfo(fraud).stake, STAKE - 1_000 ether, "the fraud is slashed in full");
        assertTrue(vault.providerInfo(fraud).tombstoned);
        StakingVault.ProviderView memory h = vault.providerInfo(honest);
        assertEq(STAKE - h.stake + h.slashDebt, 1_000 ether, "what the bucket held back is owed, not forgiven");
        assertGt(h.slashDebt, 0);
    }

    function test_RevertWhen_SetChallengeWindowBelowTheFloor() public {
        uint64 max = distributor.MAX_CHALLENGE_WINDOW();
        vm.prank(admin);
        vm.expectRevert(
            abi.encodeWithSelector(RewardDistributor.ChallengeWindowOutOfRange.selector, 0, MIN_CHALLENGE_WINDOW, max)
        );
        distributor.setChallengeWindow(0);
        vm.prank(admin);
        distributor.setChallengeWindow(MIN_CHALLENGE_WINDOW);
        assertEq(distributor.challengeWindow(), MIN_CHALLENGE_WINDOW);
    }

    // ─── Views ───────────────────────────────────────────────────────────────

    function _expectedDomainSeparator() internal view returns (bytes32) {
        return keccak256(
            abi.encode(
                keccak256("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)"),
                keccak256("SwarmRewardDistributor"),
                keccak256("3"),
                block.chainid,
                address(distributor)
            )
        );
    }

    function test_DomainSeparator_MatchesEip712Domain() public {
        assertEq(distributor.domainSeparator(), _expectedDomainSeparator());
        (, string memory name, string memory version, uint256 chainId, address verifying,,) = distributor.eip712Domain();
        assertEq(name, "SwarmRewardDistributor");
        assertEq(version, "3");
        assertEq(chainId, block.chainid);
        assertEq(verifying, address(distributor));

        vm.chainId(block.chainid + 1);
        assertEq(distributor.domainSeparator(), _expectedDomainSeparator(), "follows a fork's chain id");
    }

    function test_HashReport_MatchesIndependentDigest() public view {
        bytes32 typehash = keccak256(
            "EpochReport(uint64 epoch,bytes32 rewardsRoot,uint256 totalRewards,uint256 cumulativeTotal,"
            "bytes32 slashesHash,bytes32 deferredHash,uint64 expiresAt)"
        );
        assertEq(distributor.EPOCH_REPORT_TYPEHASH(), typehash);

        IStakingVault.SlashOrder[] memory slashes = _slashes(_slash(alice, 100, 1 days, false), _slash(bob, 0, 0, true));
        RewardDistributor.EpochReport memory report = _report(42, keccak256("root"), 123 ether, slashes);
        bytes32 structHash = keccak256(
            abi.encode(
                typehash,
                uint64(42),
                keccak256("root"),
                uint256(123 ether),
                uint256(123 ether),
                keccak256(abi.encode(slashes)),
                keccak256(abi.encode(new address[](0))),
                uint64(block.timestamp + 1 days)
            )
        );
        bytes32 digest = keccak256(abi.encodePacked(hex"1901", _expectedDomainSeparator(), structHash));
        assertEq(distributor.hashReport(report), digest);

        report.totalRewards += 1;
        assertTrue(distributor.hashReport(report) != digest, "every field is bound");
        report.totalRewards -= 1;
        report.cumulativeTotal += 1;
        assertTrue(distributor.hashReport(report) != digest, "the cumulative total is bound");
        report.cumulativeTotal -= 1;
        report.expiresAt += 1;
        assertTrue(distributor.hashReport(report) != digest, "the expiry is bound");
    }

    function test_Signers_ReturnsCommitteeInOrder() public view {
        address[] memory list = distributor.signers();
        assertEq(list.length, 4);
        for (uint256 i; i < list.length; ++i) {
            assertEq(list[i], signerAddrs[i]);
            if (i > 0) assertGt(uint160(list[i]), uint160(list[i - 1]));
        }
        assertFalse(distributor.isSigner(outsider));
    }

    // ─── Fuzz ────────────────────────────────────────────────────────────────

    /// @dev Three providers over three epochs with fuzzed earnings and claim timing:
    /// each is paid exactly its final cumulative, and never more than was funded.
    function testFuzz_ClaimsAcrossEpochsPayExactlyTheFinalCumulative(
        uint256[9] memory increments,
        uint16 claimMask,
        uint256 slack
    ) public {
        address[] memory accounts = new address[](3);
        (accounts[0], accounts[1], accounts[2]) = (alice, bob, erin);
        uint256[] memory cums = new uint256[](3);
        uint256[] memory paid = new uint256[](3);
        uint256[] memory before = new uint256[](3);
        for (uint256 j; j < 3; ++j) {
            before[j] = token.balanceOf(accounts[j]);
        }
        _fund(bound(slack, 1, 1_000 ether)); // never allocated

        bytes32[] memory leaves;
        for (uint256 e; e < 3; ++e) {
            for (uint256 j; j < 3; ++j) {
                cums[j] += bound(increments[e * 3 + j], 0, 1_000_000 ether);
            }
            leaves = _publishCumulatives(uint64(e + 1), accounts, cums);
            for (uint256 j; j < 3; ++j) {
                bool wantsToClaim = (claimMask >> (e * 3 + j)) & 1 == 1;
                if (wantsToClaim && cums[j] > distributor.claimed(accounts[j])) {
                    paid[j] += cums[j] - distributor.claimed(accounts[j]);
                    _claim(leaves, j, accounts[j], cums[j]);
                }
            }
            assertLe(distributor.totalClaimed(), distributor.totalAllocated());
            assertLe(distributor.totalAllocated(), distributor.totalFunded());
        }
        for (uint256 j; j < 3; ++j) {
            if (cums[j] > distributor.claimed(accounts[j])) {
                paid[j] += cums[j] - distributor.claimed(accounts[j]);
                _claim(leaves, j, accounts[j], cums[j]);
            }
            assertEq(paid[j], cums[j]);
            assertEq(token.balanceOf(accounts[j]) - before[j], cums[j]);
            assertEq(distributor.claimed(accounts[j]), cums[j]);
        }
        assertEq(distributor.totalClaimed(), cums[0] + cums[1] + cums[2]);
        assertEq(distributor.totalClaimed(), distributor.totalAllocated());
        assertLe(distributor.totalClaimed(), distributor.totalFunded());
        assertEq(token.balanceOf(address(distributor)), distributor.totalFunded() - distributor.totalClaimed());
    }

    function testFuzz_FinalizeOnlyFromFinalizableAt(uint64 window, uint256 delay) public {
        window = uint64(bound(window, MIN_CHALLENGE_WINDOW, UNBONDING_PERIOD - MAX_REPORT_LAG));
        vm.warp(block.timestamp + bound(delay, 0, 365 days));
        vm.prank(admin);
        distributor.setChallengeWindow(window);
        _submitEpochOne();
        uint64 finalizableAt = uint64(block.timestamp) + window;
        assertEq(distributor.pendingReport().finalizableAt, finalizableAt);

        if (window > 0) {
            vm.warp(finalizableAt - 1);
            vm.expectRevert(
                abi.encodeWithSelector(RewardDistributor.ChallengeWindowOpen.selector, finalizableAt, finalizableAt - 1)
            );
            distributor.finalizeEpoch(_noSlashes());
        }
        vm.warp(finalizableAt);
        distributor.finalizeEpoch(_noSlashes());
        assertEq(distributor.lastFinalizedEpoch(), 1);
    }

    function testFuzz_VetoOnlyBeforeFinalizableAt(uint64 window, uint256 elapsed) public {
        window = uint64(bound(window, MIN_CHALLENGE_WINDOW, UNBONDING_PERIOD - MAX_REPORT_LAG));
        vm.prank(admin);
        distributor.setChallengeWindow(window);
        uint64 finalizableAt = _submitEpochOne();
        elapsed = bound(elapsed, 0, 2 * uint256(window));
        vm.warp(block.timestamp + elapsed);

        vm.prank(guardian);
        if (block.timestamp >= finalizableAt) {
            vm.expectRevert(
                abi.encodeWithSelector(
                    RewardDistributor.ChallengeWindowClosed.selector, finalizableAt, uint64(block.timestamp)
                )
            );
            distributor.vetoEpoch(1);
            assertFalse(distributor.pendingReport().vetoed);
        } else {
            distributor.vetoEpoch(1);
            assertTrue(distributor.pendingReport().vetoed);
        }
    }

    /// @dev An eight-member committee with a fuzzed threshold: any ascending subset of
    /// at least `threshold` members is accepted, any smaller one is refused.
    function testFuzz_AscendingSignerSubsetsMeetThreshold(uint8 threshold_, uint8 mask) public {
        uint8 t = uint8(bound(threshold_, 5, 8)); // a majority of eight
        (address[] memory members, uint256[] memory keys) = _newCommittee("member", 8);
        vm.prank(admin);
        distributor.setCommittee(members, t);

        uint256 count;
        for (uint256 i; i < 8; ++i) {
            if ((mask >> i) & 1 == 1) ++count;
        }
        uint256[] memory chosen = new uint256[](count);
        count = 0;
        for (uint256 i; i < 8; ++i) {
            if ((mask >> i) & 1 == 1) chosen[count++] = keys[i];
        }

        _fund(1 ether);
        RewardDistributor.EpochReport memory report = _report(1, 1 ether);
        bytes[] memory sigs = _signWith(report, chosen);
        if (count < t) {
            vm.expectRevert(abi.encodeWithSelector(RewardDistributor.NotEnoughSignatures.selector, count, t));
            distributor.submitEpoch(report, _noSlashes(), new address[](0), sigs);
            assertEq(distributor.pendingReport().epoch, 0);
        } else {
            distributor.submitEpoch(report, _noSlashes(), new address[](0), sigs);
            assertEq(distributor.pendingReport().epoch, 1);
        }
    }

    function testFuzz_MerkleBuilderProofsVerify(uint256 n, uint256 index, uint256 seed) public pure {
        n = bound(n, 1, 40);
        index = bound(index, 0, n - 1);
        bytes32[] memory leaves = new bytes32[](n);
        for (uint256 i; i < n; ++i) {
            leaves[i] = MerkleBuilder.leaf(address(uint160(uint256(keccak256(abi.encode(seed, i))))), i);
        }
        assertTrue(MerkleProof.verify(leaves.proof(index), leaves.root(), leaves[index]));
    }
}
