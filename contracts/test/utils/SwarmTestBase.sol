// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {Test} from "forge-std/Test.sol";
import {SwarmTimelock} from "../../src/SwarmTimelock.sol";

import {SwarmToken} from "../../src/SwarmToken.sol";
import {StakingVault} from "../../src/StakingVault.sol";
import {RewardDistributor} from "../../src/RewardDistributor.sol";
import {JobMarket} from "../../src/JobMarket.sol";
import {IExitBound, IStakingVault} from "../../src/interfaces/IStakingVault.sol";
import {JobResults} from "./JobResults.sol";

/// @notice Deploys and wires the four contracts the way `ledger/deploy.py` does, with
/// funded actors, for every Foundry test. The admin of every contract is a SwarmTimelock
/// (OpenZeppelin's TimelockController, bound to the vault) whose one proposer is `governor`'s
/// key: a test that pranks `admin` acts as an operation the timelock executes after its delay
/// (without the timelock's check of its delay against the exit bound); an attack by the
/// admin's key goes through {_schedule} and {_execute}.
abstract contract SwarmTestBase is Test {
    uint128 internal constant MIN_STAKE_PER_GPU = 1_000 ether;
    uint64 internal constant UNBONDING_PERIOD = 7 days;
    uint64 internal constant MIN_UNBONDING_PERIOD = 1 days;
    uint16 internal constant MAX_SLASH_BPS = 5_000;
    uint16 internal constant MAX_SLASH_BPS_PER_PERIOD = 7_500;
    uint16 internal constant TREASURY_SHARE_BPS = 5_000;
    uint128 internal constant BUCKET_CAPACITY = 1_000_000 ether;
    uint128 internal constant BUCKET_REFILL = 10 ether; // per second
    uint64 internal constant CHALLENGE_WINDOW = 1 hours;
    uint64 internal constant MIN_CHALLENGE_WINDOW = 10 minutes;
    uint16 internal constant FEE_BPS = 250;
    uint64 internal constant DISPUTE_WINDOW = 1 days;
    uint64 internal constant MIN_DISPUTE_WINDOW = 1 hours;
    uint16 internal constant DISPUTE_BOND_BPS = 1_000;
    uint128 internal constant MIN_DISPUTE_BOND = 1 ether;
    uint64 internal constant MAX_JOB_DURATION = 30 days;
    uint128 internal constant MIN_PRICE_PER_UNIT = 1;
    uint64 internal constant MAX_REPORT_LAG = 12 hours; // with the window, within the unbonding floor
    /// @dev Longer than the unbonding period: a provider sees a change scheduled and leaves first.
    uint256 internal constant TIMELOCK_DELAY = UNBONDING_PERIOD + 1 days;
    uint256 internal constant ACTOR_FUNDS = 10_000_000 ether;

    address internal governor = makeAddr("governor"); // the admin's key: the timelock's proposer
    SwarmTimelock internal timelock;
    address internal admin; // the timelock
    address internal treasury = makeAddr("treasury");
    address internal guardian = makeAddr("guardian");
    address internal matcher = makeAddr("matcher");
    address internal arbiter = makeAddr("arbiter");
    address internal alice = makeAddr("alice"); // provider
    address internal bob = makeAddr("bob"); // provider
    // The keys that sign a job's result: the providers', and the matcher's for forgeries.
    uint256 internal aliceKey = _keyOf("alice");
    uint256 internal bobKey = _keyOf("bob");
    uint256 internal matcherKey = _keyOf("matcher");
    address internal carol = makeAddr("carol"); // buyer
    address internal dave = makeAddr("dave"); // buyer

    // Committee: four keys, threshold three.
    uint256[] internal signerKeys;
    address[] internal signerAddrs;
    uint8 internal constant THRESHOLD = 3;

    SwarmToken internal token;
    StakingVault internal vault;
    RewardDistributor internal distributor;
    JobMarket internal market;

    function setUp() public virtual {
        vm.warp(1_700_000_000);
        for (uint256 i = 1; i <= 4; ++i) {
            (address a, uint256 k) = makeAddrAndKey(string.concat("signer", vm.toString(i)));
            signerKeys.push(k);
            signerAddrs.push(a);
        }
        _sortSigners();

        address[] memory proposers = new address[](1);
        proposers[0] = governor;
        address[] memory executors = new address[](1); // address(0): anyone executes a ready operation
        timelock = new SwarmTimelock(TIMELOCK_DELAY, proposers, executors, address(0));
        admin = address(timelock);

        vm.startPrank(admin);
        token = new SwarmToken(admin, admin, 500_000_000 ether);
        // The vault names the distributor and the market, created right after it, as its
        // slashers, and the distributor as the one that records claims and report holds.
        address nextDistributor = vm.computeCreateAddress(admin, vm.getNonce(admin) + 1);
        address nextMarket = vm.computeCreateAddress(admin, vm.getNonce(admin) + 2);
        vault = new StakingVault(token, admin, _vaultParams(nextDistributor, nextMarket));
        distributor = new RewardDistributor(
            token, vault, admin, guardian, signerAddrs, THRESHOLD, CHALLENGE_WINDOW, MIN_CHALLENGE_WINDOW, MAX_REPORT_LAG
        );
        market = new JobMarket(token, vault, admin, _marketParams());

        address[4] memory actors = [alice, bob, carol, dave];
        for (uint256 i; i < actors.length; ++i) {
            token.transfer(actors[i], ACTOR_FUNDS);
        }
        vm.stopPrank();
        timelock.bindVault(IExitBound(address(vault))); // its delay now outwaits the vault's exit bound

        address[2] memory providers = [alice, bob];
        for (uint256 i; i < providers.length; ++i) {
            vm.prank(providers[i]);
            token.approve(address(vault), type(uint256).max);
        }
        address[2] memory buyers = [carol, dave];
        for (uint256 i; i < buyers.length; ++i) {
            vm.prank(buyers[i]);
            token.approve(address(market), type(uint256).max);
        }
    }

    /// @dev The vault's parameters, with `rewardsDistributor` as the contract that records
    /// claims, and it and `market_` as the slashers.
    function _vaultParams(address rewardsDistributor, address market_) internal view returns (StakingVault.Params memory p) {
        p = _vaultParams(rewardsDistributor);
        p.slashers = new address[](2);
        p.slashers[0] = rewardsDistributor;
        p.slashers[1] = market_;
    }

    /// @dev The vault's parameters, with `rewardsDistributor` as the contract that records claims
    /// and no slasher.
    function _vaultParams(address rewardsDistributor) internal view returns (StakingVault.Params memory) {
        return StakingVault.Params({
            minStakePerGpu: MIN_STAKE_PER_GPU,
            unbondingPeriod: UNBONDING_PERIOD,
            minUnbondingPeriod: MIN_UNBONDING_PERIOD,
            maxSlashBps: MAX_SLASH_BPS,
            maxSlashBpsPerPeriod: MAX_SLASH_BPS_PER_PERIOD,
            treasuryShareBps: TREASURY_SHARE_BPS,
            treasury: treasury,
            slashBucketCapacity: BUCKET_CAPACITY,
            slashRefillPerSecond: BUCKET_REFILL,
            rewardsDistributor: rewardsDistributor,
            guardian: guardian,
            slashers: new address[](0)
        });
    }

    /// @dev The market's parameters: the test's guardian, matcher, arbiter and treasury.
    function _marketParams() internal view returns (JobMarket.Params memory) {
        return JobMarket.Params({
            guardian: guardian,
            matcher: matcher,
            arbiter: arbiter,
            treasury: treasury,
            feeBps: FEE_BPS,
            disputeWindow: DISPUTE_WINDOW,
            minDisputeWindow: MIN_DISPUTE_WINDOW,
            disputeBondBps: DISPUTE_BOND_BPS,
            minDisputeBond: MIN_DISPUTE_BOND,
            maxJobDuration: MAX_JOB_DURATION,
            minPricePerUnit: MIN_PRICE_PER_UNIT
        });
    }

    /// @dev `governor` schedules `data` on `target` through the timelock; returns the operation id.
    function _schedule(address target, bytes memory data) internal returns (bytes32 id) {
        vm.prank(governor);
        timelock.schedule(target, 0, data, bytes32(0), bytes32(0), TIMELOCK_DELAY);
        return timelock.hashOperation(target, 0, data, bytes32(0), bytes32(0));
    }

    /// @dev Anyone executes the operation `data` on `target` once the timelock allows it.
    function _execute(address target, bytes memory data) internal {
        timelock.execute(target, 0, data, bytes32(0), bytes32(0));
    }

    /// @dev Registers `provider` with `gpus` GPUs and stakes `amount`.
    function _registerAndStake(address provider, uint32 gpus, uint256 amount) internal {
        vm.startPrank(provider);
        vault.register(keccak256(abi.encode(provider, gpus)), gpus);
        if (amount > 0) vault.stake(amount);
        vm.stopPrank();
    }

    /// @dev Posts a job for `buyer` and returns its id.
    function _post(address buyer, uint128 price, uint64 units, uint64 deadline) internal returns (uint256) {
        vm.prank(buyer);
        return market.postJob(keccak256("spec"), price, units, deadline);
    }

    /// @dev `key`'s signature over job `jobId`'s result `resultHash` using `units` units.
    function _signResult(uint256 key, uint256 jobId, bytes32 resultHash, uint64 units)
        internal
        view
        returns (bytes memory)
    {
        return JobResults.sign(key, address(market), jobId, resultHash, units);
    }

    /// @dev The signature job `jobId`'s provider gives its result: bob's if bob runs the job,
    /// else alice's (a job not yet assigned is refused on its status before any signature).
    function _providerSignature(uint256 jobId, bytes32 resultHash, uint64 units) internal view returns (bytes memory) {
        uint256 key = market.getJob(jobId).provider == bob ? bobKey : aliceKey;
        return _signResult(key, jobId, resultHash, units);
    }

    /// @dev Signs `report` with the first `n` committee keys, in ascending signer order.
    function _sign(RewardDistributor.EpochReport memory report, uint256 n) internal view returns (bytes[] memory sigs) {
        bytes32 digest = distributor.hashReport(report);
        sigs = new bytes[](n);
        for (uint256 i; i < n; ++i) {
            (uint8 v, bytes32 r, bytes32 s) = vm.sign(signerKeys[i], digest);
            sigs[i] = abi.encodePacked(r, s, v);
        }
    }

    /// @dev The StandardMerkleTree leaf of `(provider, cumulative)`.
    function _leaf(address provider, uint256 cumulative) internal pure returns (bytes32) {
        return keccak256(bytes.concat(keccak256(abi.encode(provider, cumulative))));
    }

    /// @dev OpenZeppelin's commutative pair hash (sorted pair).
    function _hashPair(bytes32 a, bytes32 b) internal pure returns (bytes32) {
        return a < b ? keccak256(abi.encodePacked(a, b)) : keccak256(abi.encodePacked(b, a));
    }

    /// @dev The key makeAddr(`name`) belongs to.
    function _keyOf(string memory name) internal returns (uint256 key) {
        (, key) = makeAddrAndKey(name);
    }

    function _sortSigners() private {
        uint256 n = signerAddrs.length;
        for (uint256 i; i < n; ++i) {
            for (uint256 j = i + 1; j < n; ++j) {
                if (signerAddrs[j] < signerAddrs[i]) {
                    (signerAddrs[i], signerAddrs[j]) = (signerAddrs[j], signerAddrs[i]);
                    (signerKeys[i], signerKeys[j]) = (signerKeys[j], signerKeys[i]);
                }
            }
        }
    }
}
