// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {CommonBase} from "forge-std/Base.sol";
import {StdUtils} from "forge-std/StdUtils.sol";
import {Vm} from "forge-std/Vm.sol";
import {Pausable} from "@openzeppelin/contracts/utils/Pausable.sol";

import {SwarmToken} from "../../src/SwarmToken.sol";
import {StakingVault} from "../../src/StakingVault.sol";
import {RewardDistributor} from "../../src/RewardDistributor.sol";
import {JobMarket} from "../../src/JobMarket.sol";

/// @notice The campaign's clock. Every handler call starts by warping to it, so time only
/// moves forward and by the amounts the handlers choose, whatever the fuzzer does to the
/// block environment between calls.
contract Clock {
    uint256 public time;

    constructor(uint256 start) {
        time = start;
    }

    function advanceBy(uint256 dt) external {
        time += dt;
    }

    function advanceTo(uint256 t) external {
        if (t > time) time = t;
    }
}

/// @notice Ghost record of every slash the vault applied and of the epochs seen, shared by
/// the handlers whose calls can slash.
contract SlashLedger {
    struct SlashRecord {
        address provider;
        uint256 held; // stake + unbonding just before this slash
        uint256 heldStake;
        uint256 heldUnbonding;
        uint256 fromStake;
        uint256 fromUnbonding;
        uint16 bps;
        uint16 maxBps;
        uint256 bucketBefore; // network-wide capacity left just before this slash
        uint256 toTreasury;
        uint256 expectedToTreasury;
    }

    SlashRecord[] internal _records;

    uint256 public totalSlashed; // sum of amounts taken, from the Slashed events
    uint256 public treasuryIncome; // treasury balance growth during slashing calls, less market fees
    uint256 public burned; // supply burned during slashing calls
    uint256 public marketFees; // fees JobSettled reported during audited calls
    uint256 public rateLimited;
    uint256 public notApplied;

    /// @dev A slash for an address outside the actor set, a post-call stake that differs
    /// from the pre-call stake less the Slashed events, or a treasury/burn split that does
    /// not add up, in any one call.
    bool public unknownProviderSlashed;
    bool public stateDeltaMismatch;
    bool public splitMismatch;

    uint64 public maxEpochSeen;
    bool public epochDecreased;

    function recordSlash(SlashRecord memory r) external {
        _records.push(r);
        totalSlashed += r.fromStake + r.fromUnbonding;
    }

    function recordCall(uint256 treasuryIn, uint256 burnt, uint256 fees, bool stateOk, bool splitOk) external {
        treasuryIncome += treasuryIn;
        burned += burnt;
        marketFees += fees;
        if (!stateOk) stateDeltaMismatch = true;
        if (!splitOk) splitMismatch = true;
    }

    function countRateLimited() external {
        ++rateLimited;
    }

    function countNotApplied() external {
        ++notApplied;
    }

    function flagUnknownProvider() external {
        unknownProviderSlashed = true;
    }

    function observeEpoch(uint64 epoch) external {
        if (epoch < maxEpochSeen) epochDecreased = true;
        else maxEpochSeen = epoch;
    }

    function recordCount() external view returns (uint256) {
        return _records.length;
    }

    function records(uint256 i) external view returns (SlashRecord memory) {
        return _records[i];
    }
}

/// @notice What every handler shares: the deployed contracts, the actor set, the clock,
/// call counters and the slash audit that wraps any call that may slash.
abstract contract HandlerBase is CommonBase, StdUtils {
    uint256 internal constant BPS = 10_000;

    struct Deps {
        SwarmToken token;
        StakingVault vault;
        RewardDistributor distributor;
        JobMarket market;
        Clock clock;
        SlashLedger ledger;
        address treasury;
        address admin; // DEFAULT_ADMIN_ROLE and PAUSER_ROLE everywhere
        address[] providers;
        address outsider; // never registered
    }

    /// @dev The vault state a slashing call starts from; the audit walks it forward one
    /// Slashed event at a time.
    struct SlashWatch {
        uint256[] stake;
        uint256[] unbonding;
        uint256 treasury;
        uint256 supply;
        uint256 bucket;
        uint16 maxBps;
        uint16 shareBps;
    }

    SwarmToken internal immutable token;
    StakingVault internal immutable vault;
    RewardDistributor internal immutable distributor;
    JobMarket internal immutable market;
    Clock internal immutable clock;
    SlashLedger internal immutable ledger;
    address internal immutable treasury;
    address internal immutable admin;
    address internal immutable outsider;
    address[] internal providers;

    mapping(string action => uint256) public counts;
    /// @dev A call the pause should stop went through, or failed for another reason.
    bool public pauseNotEnforced;

    constructor(Deps memory d) {
        token = d.token;
        vault = d.vault;
        distributor = d.distributor;
        market = d.market;
        clock = d.clock;
        ledger = d.ledger;
        treasury = d.treasury;
        admin = d.admin;
        outsider = d.outsider;
        providers = d.providers;
    }

    /// @dev Runs a handler action at the campaign's time and records the epoch it leaves.
    modifier step() {
        vm.warp(clock.time());
        _;
        ledger.observeEpoch(distributor.lastFinalizedEpoch());
    }

    function _count(string memory action) internal {
        ++counts[action];
    }

    function _advanceBy(uint256 dt) internal {
        clock.advanceBy(dt);
        vm.warp(clock.time());
    }

    function _advanceTo(uint256 t) internal {
        clock.advanceTo(t);
        vm.warp(clock.time());
    }

    /// @dev Records whether a call made while paused failed with EnforcedPause.
    function _expectPaused(bool succeeded, bytes memory err) internal {
        if (succeeded || bytes4(err) != Pausable.EnforcedPause.selector) pauseNotEnforced = true;
    }

    function _provider(uint256 seed) internal view returns (address) {
        return providers[seed % providers.length];
    }

    function _min(uint256 a, uint256 b) internal pure returns (uint256) {
        return a < b ? a : b;
    }

    // ─── Slash audit ─────────────────────────────────────────────────────────

    /// @dev Snapshots what a slash may touch and starts recording logs.
    function _watch() internal returns (SlashWatch memory w) {
        uint256 n = providers.length;
        w.stake = new uint256[](n);
        w.unbonding = new uint256[](n);
        for (uint256 i; i < n; ++i) {
            StakingVault.ProviderView memory info = vault.providerInfo(providers[i]);
            w.stake[i] = info.stake;
            w.unbonding[i] = info.unbonding;
        }
        w.treasury = token.balanceOf(treasury);
        w.supply = token.totalSupply();
        w.bucket = vault.availableSlashCapacity();
        w.maxBps = vault.maxSlashBps();
        w.shareBps = vault.treasuryShareBps();
        vm.recordLogs();
    }

    /// @dev Records every Slashed event of the watched call against the stake it hit, then
    /// checks the vault's state delta and the treasury/burn split of the whole call.
    /// Never reverts on a mismatch (that would hide it): it raises a ledger flag.
    /// @return toTreasury what the slashes of this call sent the treasury.
    function _audit(SlashWatch memory w) internal returns (uint256 toTreasury) {
        Vm.Log[] memory logs = vm.getRecordedLogs();
        uint256 slashed;
        uint256 fees;
        for (uint256 i; i < logs.length; ++i) {
            Vm.Log memory log = logs[i];
            if (log.topics.length == 0) continue;
            bytes32 topic = log.topics[0];
            if (log.emitter == address(vault) && topic == StakingVault.Slashed.selector) {
                (uint256 taken, uint256 toT) = _auditSlash(w, log);
                slashed += taken;
                toTreasury += toT;
            } else if (log.emitter == address(vault) && topic == StakingVault.SlashRateLimited.selector) {
                ledger.countRateLimited();
            } else if (log.emitter == address(distributor) && topic == RewardDistributor.SlashNotApplied.selector) {
                ledger.countNotApplied();
            } else if (log.emitter == address(market) && topic == JobMarket.JobSettled.selector) {
                (, uint256 fee,) = abi.decode(log.data, (uint256, uint256, uint256));
                fees += fee;
            }
        }

        bool stateOk = true;
        for (uint256 i; i < providers.length; ++i) {
            StakingVault.ProviderView memory info = vault.providerInfo(providers[i]);
            if (info.stake != w.stake[i] || info.unbonding != w.unbonding[i]) stateOk = false;
        }
        uint256 treasuryNow = token.balanceOf(treasury);
        uint256 supplyNow = token.totalSupply();
        bool splitOk = treasuryNow >= w.treasury + fees && w.supply >= supplyNow;
        uint256 treasuryIn = splitOk ? treasuryNow - w.treasury - fees : 0;
        uint256 burnt = splitOk ? w.supply - supplyNow : 0;
        splitOk = splitOk && treasuryIn == toTreasury && treasuryIn + burnt == slashed;
        ledger.recordCall(treasuryIn, burnt, fees, stateOk, splitOk);
    }

    function _auditSlash(SlashWatch memory w, Vm.Log memory log) private returns (uint256 taken, uint256 toT) {
        address provider = address(uint160(uint256(log.topics[1])));
        (uint256 fromStake, uint256 fromUnbonding, uint16 bps,, uint256 toTreasury) =
            abi.decode(log.data, (uint256, uint256, uint16, bytes32, uint256));
        taken = fromStake + fromUnbonding;
        toT = toTreasury;
        uint256 i = _indexOf(provider);
        if (i == type(uint256).max) {
            ledger.flagUnknownProvider();
            return (taken, toT);
        }
        ledger.recordSlash(
            SlashLedger.SlashRecord({
                provider: provider,
                held: w.stake[i] + w.unbonding[i],
                heldStake: w.stake[i],
                heldUnbonding: w.unbonding[i],
                fromStake: fromStake,
                fromUnbonding: fromUnbonding,
                bps: bps,
                maxBps: w.maxBps,
                bucketBefore: w.bucket,
                toTreasury: toTreasury,
                expectedToTreasury: taken * w.shareBps / BPS
            })
        );
        // Walk the snapshot forward so a second slash of the same provider in this call is
        // measured against what the first one left (saturating: the record keeps any excess).
        w.stake[i] -= _min(fromStake, w.stake[i]);
        w.unbonding[i] -= _min(fromUnbonding, w.unbonding[i]);
        w.bucket -= _min(taken, w.bucket);
    }

    function _indexOf(address provider) private view returns (uint256) {
        for (uint256 i; i < providers.length; ++i) {
            if (providers[i] == provider) return i;
        }
        return type(uint256).max;
    }
}
