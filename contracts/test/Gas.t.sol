// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {SwarmTestBase} from "./utils/SwarmTestBase.sol";
import {RewardDistributor} from "../src/RewardDistributor.sol";
import {JobMarket} from "../src/JobMarket.sol";
import {ServingEscrow} from "../src/ServingEscrow.sol";
import {IStakingVault} from "../src/interfaces/IStakingVault.sol";

/// @notice The gas figures the issue sets targets for, written to snapshots/swarm.json.
/// Each measurement wraps exactly one external call, made with cold storage (every
/// contract is cooled with vm.cool just before it), and the test then asserts the call's
/// effect. State is "steady": another provider has staked, another buyer has posted, the
/// treasury has received fees before, so no measured call pays for a network-wide first
/// write. Figures are execution gas, without the 21,000 base and calldata costs.
contract GasTest is SwarmTestBase {
    string internal constant GROUP = "swarm";
    uint32 internal constant GPUS = 8;
    uint256 internal constant STAKE = 20_000 ether;
    uint256 internal constant TREE_DEPTH = 17; // 2^17 = 131,072 >= 100,000 leaves
    uint256 internal constant REWARD = 1_234 ether;
    uint128 internal constant PRICE = 2 ether;
    uint64 internal constant UNITS = 100;

    address internal newcomer = makeAddr("newcomer"); // a provider holding no tokens

    function setUp() public override {
        super.setUp();
        // Steady state: bob is an active provider, part of whose stake is unbonding.
        _registerAndStake(bob, GPUS, STAKE);
        vm.prank(bob);
        vault.requestUnstake(1_000 ether);
        // The reward pool is funded, and the treasury has been paid before.
        vm.startPrank(admin);
        token.approve(address(distributor), type(uint256).max);
        distributor.fund(1_000_000 ether);
        token.transfer(treasury, 1 ether);
        vm.stopPrank();
    }

    // ─── Helpers ─────────────────────────────────────────────────────────────

    function _coolAll() internal {
        vm.cool(address(token));
        vm.cool(address(vault));
        vm.cool(address(distributor));
        vm.cool(address(market));
    }

    function _start(string memory name) internal {
        _coolAll();
        vm.startSnapshotGas(GROUP, name);
    }

    /// @dev The `i`-th provider of a large report: funded, registered and staked, at an address
    /// no other test uses.
    function _stakedProvider(uint256 i) internal returns (address p) {
        p = address(uint160(0x100000 + i));
        vm.prank(admin);
        token.transfer(p, STAKE);
        vm.startPrank(p);
        token.approve(address(vault), STAKE);
        vault.register(keccak256(abi.encode(p)), GPUS);
        vault.stake(STAKE);
        vm.stopPrank();
    }

        function _noSlashes() internal pure returns (IStakingVault.SlashOrder[] memory none) {}

    function _report(uint64 epoch, bytes32 root, uint256 total)
        internal
        view
        returns (RewardDistributor.EpochReport memory)
    {
        return _report(epoch, root, total, _noSlashes());
    }

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

    /// @dev `newcomer` registers and stakes every token it has, so it holds none; alice
    /// is a provider that still holds tokens.
    function _claimants() internal {
        vm.prank(admin);
        token.transfer(newcomer, STAKE);
        vm.startPrank(newcomer);
        token.approve(address(vault), STAKE);
        vault.register(keccak256("newcomer"), GPUS);
        vault.stake(STAKE);
        vm.stopPrank();
        _registerAndStake(alice, GPUS, STAKE);
    }

    function _submit(RewardDistributor.EpochReport memory report) internal {
        distributor.submitEpoch(report, _noSlashes(), new address[](0), _sign(report, THRESHOLD));
    }

    /// @dev Takes `report` through the real flow: 3-of-4 signed submission, the challenge
    /// window, finalization with no slashes.
    function _publish(RewardDistributor.EpochReport memory report) internal {
        _submit(report);
        vm.warp(block.timestamp + CHALLENGE_WINDOW + 1);
        distributor.finalizeEpoch(_noSlashes());
        assertEq(distributor.rewardsRoot(), report.rewardsRoot);
    }

    /// @dev A depth-17 tree (room for 131,072 leaves) whose bottom pair is `newcomer` and
    /// `alice`, each owed REWARD, and whose other 16 levels hold pseudo-random subtrees.
    /// Returns the root and both providers' proofs (17 hashes each).
    function _bigTree()
        internal
        view
        returns (bytes32 root, bytes32[] memory newcomerProof, bytes32[] memory aliceProof)
    {
        bytes32 newcomerLeaf = _leaf(newcomer, REWARD);
        bytes32 aliceLeaf = _leaf(alice, REWARD);
        newcomerProof = new bytes32[](TREE_DEPTH);
        aliceProof = new bytes32[](TREE_DEPTH);
        newcomerProof[0] = aliceLeaf;
        aliceProof[0] = newcomerLeaf;
        root = _hashPair(newcomerLeaf, aliceLeaf);
        for (uint256 i = 1; i < TREE_DEPTH; ++i) {
            bytes32 sibling = keccak256(abi.encode("swarm-subtree", i));
            newcomerProof[i] = sibling;
            aliceProof[i] = sibling;
            root = _hashPair(root, sibling);
        }
    }

    /// @dev The root of a real tree over `n` providers' leaves (pairs hashed level by
    /// level, an odd node carried up).
    function _smallTreeRoot(uint256 n) internal pure returns (bytes32) {
        bytes32[] memory level = new bytes32[](n);
        for (uint256 i; i < n; ++i) {
            level[i] = _leaf(address(uint160(0x1000 + i)), (i + 1) * 1 ether);
        }
        while (n > 1) {
            uint256 m = (n + 1) / 2;
            for (uint256 i; i < m; ++i) {
                level[i] = 2 * i + 1 < n ? _hashPair(level[2 * i], level[2 * i + 1]) : level[2 * i];
            }
            n = m;
        }
        return level[0];
    }

    function _claim(address provider, bytes32[] memory proof) internal {
        distributor.claim(provider, REWARD, proof);
    }

    /// @dev alice eligible, carol's job posted (dave posted before her), returns its id.
    function _postedJob() internal returns (uint256 jobId) {
        _registerAndStake(alice, GPUS, STAKE);
        _post(dave, PRICE, UNITS, uint64(block.timestamp + 1 days));
        jobId = _post(carol, PRICE, UNITS, uint64(block.timestamp + 1 days));
    }

    function _assignedJob() internal returns (uint256 jobId) {
        jobId = _postedJob();
        vm.prank(matcher);
        market.assignJob(jobId, alice, PRICE);
    }

    function _completedJob() internal returns (uint256 jobId) {
        jobId = _assignedJob();
        bytes memory signature = _providerSignature(jobId, keccak256("result"), UNITS / 2);
        vm.prank(matcher);
        market.completeJob(jobId, keccak256("result"), UNITS / 2, signature);
    }

    // ─── StakingVault ────────────────────────────────────────────────────────

    function test_Gas_Register() public {
        vm.startPrank(alice);
        _start("register");
        vault.register(keccak256("spec"), GPUS);
        vm.stopSnapshotGas();
        vm.stopPrank();
        assertTrue(vault.providerInfo(alice).registered);
    }

    function test_Gas_StakeFirst() public {
        vm.prank(alice);
        vault.register(keccak256("spec"), GPUS);

        vm.startPrank(alice);
        _start("stake_first");
        vault.stake(STAKE);
        uint256 gasUsed = vm.stopSnapshotGas();
        vm.stopPrank();

        assertEq(vault.providerInfo(alice).stake, STAKE);
        assertEq(token.balanceOf(alice), ACTOR_FUNDS - STAKE);
        assertLe(gasUsed, 70_000, "stake_first above target");
    }

    function test_Gas_StakeTopUp() public {
        _registerAndStake(alice, GPUS, STAKE);

        vm.startPrank(alice);
        _start("stake_topup");
        vault.stake(1_000 ether);
        uint256 gasUsed = vm.stopSnapshotGas();
        vm.stopPrank();

        assertEq(vault.providerInfo(alice).stake, STAKE + 1_000 ether);
        assertLe(gasUsed, 70_000, "stake_topup above target");
    }

    function test_Gas_RequestUnstake() public {
        _registerAndStake(alice, GPUS, STAKE);

        vm.startPrank(alice);
        _start("requestUnstake");
        vault.requestUnstake(5_000 ether);
        uint256 gasUsed = vm.stopSnapshotGas();
        vm.stopPrank();

        assertEq(vault.providerInfo(alice).unbonding, 5_000 ether);
        assertEq(vault.providerInfo(alice).stake, STAKE - 5_000 ether);
        assertLe(gasUsed, 60_000, "requestUnstake above target");
    }

    function test_Gas_Withdraw() public {
        _registerAndStake(alice, GPUS, STAKE);
        vm.prank(alice);
        vault.requestUnstake(5_000 ether);
        vm.warp(block.timestamp + UNBONDING_PERIOD);

        vm.startPrank(alice);
        _start("withdraw");
        vault.withdraw();
        vm.stopSnapshotGas();
        vm.stopPrank();

        assertEq(token.balanceOf(alice), ACTOR_FUNDS - STAKE + 5_000 ether);
        assertEq(vault.providerInfo(alice).unbonding, 0);
    }

    // ─── RewardDistributor ───────────────────────────────────────────────────

    function test_Gas_Claim100kTreeNewHolder() public {
        _claimants();
        (bytes32 root, bytes32[] memory newcomerProof, bytes32[] memory aliceProof) = _bigTree();
        _publish(_report(1, root, 2 * REWARD));
        _claim(alice, aliceProof); // someone has claimed before
        assertEq(newcomerProof.length, 17);
        assertEq(token.balanceOf(newcomer), 0);

        _start("claim_100k_tree");
        _claim(newcomer, newcomerProof);
        uint256 gasUsed = vm.stopSnapshotGas();

        assertEq(token.balanceOf(newcomer), REWARD);
        assertEq(distributor.claimed(newcomer), REWARD);
        assertLe(gasUsed, 85_000, "claim (new holder) above target");
    }

    function test_Gas_Claim100kTreeFirstClaimEver() public {
        _claimants();
        (bytes32 root, bytes32[] memory newcomerProof,) = _bigTree();
        _publish(_report(1, root, 2 * REWARD));
        assertEq(distributor.totalClaimed(), 0);

        _start("claim_100k_tree_first_ever");
        _claim(newcomer, newcomerProof);
        uint256 gasUsed = vm.stopSnapshotGas();

        assertEq(token.balanceOf(newcomer), REWARD);
        assertEq(distributor.totalClaimed(), REWARD);
        assertLe(gasUsed, 85_000, "first claim above target");
    }

    function test_Gas_Claim100kTreeExistingHolder() public {
        _claimants();
        (bytes32 root, bytes32[] memory newcomerProof, bytes32[] memory aliceProof) = _bigTree();
        _publish(_report(1, root, 2 * REWARD));
        _claim(newcomer, newcomerProof); // someone has claimed before
        assertEq(aliceProof.length, 17);

        _start("claim_100k_tree_holder");
        _claim(alice, aliceProof);
        uint256 gasUsed = vm.stopSnapshotGas();

        assertEq(token.balanceOf(alice), ACTOR_FUNDS - STAKE + REWARD);
        assertEq(distributor.claimed(alice), REWARD);
        assertLe(gasUsed, 85_000, "claim (holder) above target");
    }

    function test_Gas_SubmitEpoch3Sigs() public {
        (bytes32 root,,) = _bigTree();
        RewardDistributor.EpochReport memory report = _report(1, root, 2 * REWARD);
        bytes[] memory sigs = _sign(report, THRESHOLD);
        IStakingVault.SlashOrder[] memory none = _noSlashes();

        _start("submitEpoch_3sigs");
        distributor.submitEpoch(report, none, new address[](0), sigs);
        uint256 gasUsed = vm.stopSnapshotGas();

        RewardDistributor.Pending memory pending = distributor.pendingReport();
        assertEq(pending.epoch, 1);
        assertEq(pending.rewardsRoot, root);
        assertEq(pending.finalizableAt, block.timestamp + CHALLENGE_WINDOW);
        assertLe(gasUsed, 200_000, "submitEpoch above target");
    }

    function _measureSubmit(string memory name, bytes32 root) internal returns (uint256 gasUsed) {
        RewardDistributor.EpochReport memory report = _report(1, root, 2 * REWARD);
        bytes[] memory sigs = _sign(report, THRESHOLD);
        IStakingVault.SlashOrder[] memory none = _noSlashes();
        _start(name);
        distributor.submitEpoch(report, none, new address[](0), sigs);
        gasUsed = vm.stopSnapshotGas();
        assertEq(distributor.pendingReport().rewardsRoot, root);
    }

    error Measured(uint256 gasUsed);

    /// @dev Measures a submission of `root`, then reverts so the next measurement starts
    /// from the very same state (a real EVM revert, unlike vm.revertToState, keeps the
    /// slots' original values and so their SSTORE prices).
    function measureSubmitAndRevert(string calldata name, bytes32 root) external {
        revert Measured(_measureSubmit(name, root));
    }

    function _measureIsolated(string memory name, bytes32 root) internal returns (uint256) {
        try this.measureSubmitAndRevert(name, root) {
            revert("measurement did not revert");
        } catch (bytes memory err) {
            assertEq(bytes4(err), Measured.selector);
            return abi.decode(_tail(err), (uint256));
        }
    }

    function _tail(bytes memory err) private pure returns (bytes memory out) {
        out = new bytes(err.length - 4);
        for (uint256 i; i < out.length; ++i) {
            out[i] = err[i + 4];
        }
    }

    function test_Gas_SubmitEpochIndependentOfProviderCount() public {
        (bytes32 bigRoot,,) = _bigTree();
        bytes32 smallRoot = _smallTreeRoot(10);
        assertTrue(smallRoot != bigRoot);

        uint256 gasSmall = _measureIsolated("submitEpoch_3sigs_10providers", smallRoot);
        uint256 gasBig = _measureIsolated("submitEpoch_3sigs_100kProviders", bigRoot);

        assertEq(gasSmall, gasBig, "submitEpoch gas depends on the tree");
        assertLe(gasBig, 200_000, "submitEpoch above target");
        assertEq(distributor.pendingReport().epoch, 0); // both measurements were rolled back
    }

    function test_Gas_FinalizeEpoch() public {
        _publish(_report(1, _smallTreeRoot(10), REWARD)); // a previous epoch
        (bytes32 root,,) = _bigTree();
        _submit(_report(2, root, 2 * REWARD));
        vm.warp(block.timestamp + CHALLENGE_WINDOW + 1);
        IStakingVault.SlashOrder[] memory none = _noSlashes();

        _start("finalizeEpoch");
        distributor.finalizeEpoch(none);
        vm.stopSnapshotGas();

        assertEq(distributor.rewardsRoot(), root);
        assertEq(distributor.lastFinalizedEpoch(), 2);
        assertEq(distributor.totalAllocated(), 3 * REWARD);
    }

    /// @dev The largest report a committee may submit: MAX_SLASHES_PER_REPORT slashes with
    /// jails, MAX_TOMBSTONES_PER_REPORT of them tombstones, each on its own staked provider.
    function test_Gas_FinalizeEpochLargestReport() public {
        uint256 n = distributor.MAX_SLASHES_PER_REPORT();
        IStakingVault.SlashOrder[] memory slashes = new IStakingVault.SlashOrder[](n);
        for (uint256 i; i < n; ++i) {
            address p = _stakedProvider(i);
            bool tombstone = i < distributor.MAX_TOMBSTONES_PER_REPORT();
            slashes[i] = IStakingVault.SlashOrder({
                provider: p,
                bps: tombstone ? MAX_SLASH_BPS : 100,
                reason: "downtime",
                evidenceHash: keccak256(abi.encode(i)),
                jailSeconds: distributor.MAX_JAIL_SECONDS(),
                tombstone: tombstone
            });
        }
        RewardDistributor.EpochReport memory report = _report(1, _smallTreeRoot(10), REWARD, slashes);
        distributor.submitEpoch(report, slashes, new address[](0), _sign(report, THRESHOLD));
        vm.warp(block.timestamp + CHALLENGE_WINDOW + 1);

        _start("finalizeEpoch_largest_report");
        distributor.finalizeEpoch(slashes);
        uint256 gasUsed = vm.stopSnapshotGas();

        assertEq(distributor.lastFinalizedEpoch(), 1);
        assertTrue(vault.providerInfo(address(0x100000)).tombstoned);
        assertEq(vault.providerInfo(address(uint160(0x100000 + n - 1))).stake, STAKE - STAKE / 100);
        assertLe(gasUsed, 15_000_000, "the largest report must finalize in 15M gas");
    }

    /// @dev Submitting the largest report: MAX_SLASHES_PER_REPORT slashes, each holding its
    /// provider in the vault, in a transaction of its own from cold storage.
    /// forge-config: default.isolate = true
    function test_Gas_SubmitEpoch200Slashes() public {
        uint256 n = distributor.MAX_SLASHES_PER_REPORT();
        IStakingVault.SlashOrder[] memory slashes = new IStakingVault.SlashOrder[](n);
        for (uint256 i; i < n; ++i) {
            address p = _stakedProvider(i);
            slashes[i] = IStakingVault.SlashOrder({
                provider: p,
                bps: 100,
                reason: "downtime",
                evidenceHash: keccak256(abi.encode(i)),
                jailSeconds: 0,
                tombstone: false
            });
        }
        RewardDistributor.EpochReport memory report = _report(1, _smallTreeRoot(10), REWARD, slashes);
        bytes[] memory sigs = _sign(report, THRESHOLD);

        _start("submitEpoch_200_slashes");
        distributor.submitEpoch(report, slashes, new address[](0), sigs);
        vm.stopSnapshotGas();

        assertEq(distributor.pendingReport().epoch, 1);
        assertGt(vault.providerInfo(address(uint160(0x100000 + n - 1))).reportHeldUntil, block.timestamp);
    }

    /// @dev The heaviest report a committee may submit, finalized in a transaction of its own
    /// (`isolate`, so each slot is priced from its value before the transaction, as on chain)
    /// from cold storage: MAX_SLASHES_PER_REPORT slashes, each above the per-incident cap, with
    /// the longest jail, on providers holding both stake and unbonding, none slashed before;
    /// MAX_TOMBSTONES_PER_REPORT tombstones first, whose slashes drain the network-wide
    /// bucket, so every later slash is rate limited into a new slash debt.
    /// forge-config: default.isolate = true
    function test_Gas_FinalizeEpochWorstReport() public {
        uint256 n = distributor.MAX_SLASHES_PER_REPORT();
        uint256 tombstones = distributor.MAX_TOMBSTONES_PER_REPORT();
        IStakingVault.SlashOrder[] memory slashes = new IStakingVault.SlashOrder[](n);
        for (uint256 i; i < n; ++i) {
            address p = _stakedProvider(i);
            vm.prank(p);
            vault.requestUnstake(STAKE / 4);
            slashes[i] = IStakingVault.SlashOrder({
                provider: p,
                bps: 10_000, // above the per-incident cap
                reason: "fraud",
                evidenceHash: keccak256(abi.encode(i)),
                jailSeconds: distributor.MAX_JAIL_SECONDS(),
                tombstone: i >= n - tombstones // the last in provider order, applied first
            });
        }
        // The tombstones' slashes take what the bucket holds: 8 × 50 % of a stake.
        vm.prank(admin);
        vault.setSlashRateLimit(uint128(tombstones * STAKE / 2), 1);
        RewardDistributor.EpochReport memory report = _report(1, _smallTreeRoot(10), REWARD, slashes);
        distributor.submitEpoch(report, slashes, new address[](0), _sign(report, THRESHOLD));
        vm.warp(block.timestamp + CHALLENGE_WINDOW + 1);

        _start("finalizeEpoch_worst_report");
        distributor.finalizeEpoch(slashes);
        uint256 gasUsed = vm.stopSnapshotGas();

        assertEq(distributor.lastFinalizedEpoch(), 1);
        address last = address(uint160(0x100000 + n - 1));
        assertTrue(vault.providerInfo(last).tombstoned);
        assertEq(vault.providerInfo(last).stake + vault.providerInfo(last).unbonding, STAKE / 2, "taken at the cap");
        address first = address(0x100000);
        assertEq(vault.providerInfo(first).stake + vault.providerInfo(first).unbonding, STAKE, "the bucket was empty");
        assertEq(vault.slashDebt(first), STAKE / 2, "owed instead");
        assertEq(vault.providerInfo(first).jailedUntil, block.timestamp + distributor.MAX_JAIL_SECONDS());
        assertLe(gasUsed, 15_000_000, "the worst report must finalize in 15M gas");
    }

    // ─── JobMarket ───────────────────────────────────────────────────────────

    function test_Gas_PostJob() public {
        _post(dave, PRICE, UNITS, uint64(block.timestamp + 1 days)); // another buyer's job
        uint64 deadline = uint64(block.timestamp + 1 days);

        vm.startPrank(carol);
        _start("postJob");
        uint256 jobId = market.postJob(keccak256("spec"), PRICE, UNITS, deadline);
        uint256 gasUsed = vm.stopSnapshotGas();
        vm.stopPrank();

        JobMarket.Job memory job = market.getJob(jobId);
        assertEq(job.buyer, carol);
        assertEq(uint8(job.status), uint8(JobMarket.Status.Posted));
        assertEq(token.balanceOf(carol), ACTOR_FUNDS - uint256(PRICE) * UNITS);
        assertLe(gasUsed, 130_000, "postJob above target");
    }

    function test_Gas_AssignJob() public {
        uint256 jobId = _postedJob();

        vm.startPrank(matcher);
        _start("assignJob");
        market.assignJob(jobId, alice, PRICE);
        vm.stopSnapshotGas();
        vm.stopPrank();

        JobMarket.Job memory job = market.getJob(jobId);
        assertEq(uint8(job.status), uint8(JobMarket.Status.Assigned));
        assertEq(job.provider, alice);
    }

    function test_Gas_ReassignJob() public {
        uint256 jobId = _assignedJob(); // bob, staked in setUp, takes it over

        vm.startPrank(matcher);
        _start("reassignJob");
        market.reassignJob(jobId, bob, PRICE / 2, "nodes lost", 0);
        vm.stopSnapshotGas();
        vm.stopPrank();

        JobMarket.Job memory job = market.getJob(jobId);
        assertEq(uint8(job.status), uint8(JobMarket.Status.Assigned));
        assertEq(job.provider, bob);
        assertEq(job.pricePerUnit, PRICE / 2);
        assertEq(market.escrowOf(jobId), uint256(PRICE) * UNITS);
    }

    function test_Gas_ReassignJobWithSlash() public {
        uint256 jobId = _assignedJob();

        vm.startPrank(matcher);
        _start("reassignJob_slash");
        market.reassignJob(jobId, bob, PRICE, "nodes lost", 1_000);
        vm.stopSnapshotGas();
        vm.stopPrank();

        assertEq(market.getJob(jobId).provider, bob);
        assertEq(vault.providerInfo(alice).stake, STAKE - STAKE / 10);
    }

    function test_Gas_CompleteJob() public {
        uint256 jobId = _assignedJob();
        bytes memory signature = _providerSignature(jobId, keccak256("result"), UNITS / 2);

        vm.startPrank(matcher);
        _start("completeJob");
        market.completeJob(jobId, keccak256("result"), UNITS / 2, signature);
        vm.stopSnapshotGas();
        vm.stopPrank();

        JobMarket.Job memory job = market.getJob(jobId);
        assertEq(uint8(job.status), uint8(JobMarket.Status.Completed));
        assertEq(job.unitsUsed, UNITS / 2);
    }

    function test_Gas_SettleJob() public {
        uint256 jobId = _completedJob();
        vm.warp(block.timestamp + DISPUTE_WINDOW);
        uint256 aliceBefore = token.balanceOf(alice);

        _start("settleJob");
        market.settleJob(jobId);
        vm.stopSnapshotGas();

        uint256 payment = uint256(PRICE) * (UNITS / 2);
        uint256 fee = payment * FEE_BPS / 10_000;
        assertEq(uint8(market.getJob(jobId).status), uint8(JobMarket.Status.Settled));
        assertEq(token.balanceOf(alice), aliceBefore + payment - fee);
        assertEq(token.balanceOf(carol), ACTOR_FUNDS - payment);
    }
}

/// @notice The serving escrow's gas, in the same snapshot. The state is set up in setUp, so
/// the measured calls write slots as a later transaction would (not ones this test already
/// dirtied): carol has deposited for alice and redeemed once, dave has deposited for
/// `newcomer`, a provider holding no tokens.
contract ServingGasTest is SwarmTestBase {
    string internal constant GROUP = "swarm";
    address internal newcomer = makeAddr("newcomer");
    ServingEscrow internal escrow;

    function setUp() public override {
        super.setUp();
        escrow = new ServingEscrow(token, 1 days);
        vm.prank(carol);
        token.approve(address(escrow), type(uint256).max);
        vm.prank(dave);
        token.approve(address(escrow), type(uint256).max);
        vm.prank(carol);
        escrow.deposit(alice, 1_000 ether);
        vm.prank(dave);
        escrow.deposit(newcomer, 1_000 ether);
        escrow.redeem(carol, alice, 1 ether, _voucher("carol", alice, 1 ether));
    }

    function _voucher(string memory buyer, address provider, uint128 cumulative) internal returns (bytes memory) {
        (uint8 v, bytes32 r, bytes32 s) =
            vm.sign(_keyOf(buyer), escrow.voucherDigest(makeAddr(buyer), provider, cumulative));
        return abi.encodePacked(r, s, v);
    }

    function _cool() internal {
        vm.cool(address(token));
        vm.cool(address(escrow));
    }

    function _measureRedeem(string memory name, address buyer, address provider, uint128 cumulative) internal {
        bytes memory sig = _voucher(buyer == carol ? "carol" : "dave", provider, cumulative);
        uint256 before = token.balanceOf(provider);
        (, uint256 redeemed,,) = escrow.accountOf(buyer, provider);
        _cool();
        vm.startSnapshotGas(GROUP, name);
        escrow.redeem(buyer, provider, cumulative, sig);
        vm.stopSnapshotGas();
        assertEq(token.balanceOf(provider), before + cumulative - redeemed);
    }

    function test_Gas_ServingDepositTopUp() public {
        _cool();
        vm.startSnapshotGas(GROUP, "serving_deposit_topup");
        vm.prank(carol);
        escrow.deposit(alice, 500 ether);
        vm.stopSnapshotGas();
        (uint256 balance,,,) = escrow.accountOf(carol, alice);
        assertEq(balance, 1_499 ether);
    }

    /// One redemption, whatever it pays for: a voucher for one more request and one for a
    /// million are measured apart and cost the same.
    function test_Gas_ServingRedeem() public {
        _measureRedeem("serving_redeem", carol, alice, 1 ether + 1e15);
    }

    function test_Gas_ServingRedeemMany() public {
        _measureRedeem("serving_redeem_many", carol, alice, 900 ether);
    }

    function test_Gas_ServingRedeemFirstToEmptyProvider() public {
        _measureRedeem("serving_redeem_first_to_empty_provider", dave, newcomer, 7 ether);
    }
}
