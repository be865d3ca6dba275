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
import {StandardTree} from "./StandardTree.sol";
import {IStakingVault} from "../../src/interfaces/IStakingVault.sol";

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

/// @notice Ghost record of every slash the vault applied, of the slash debt it deferred and
/// collected, of each slasher's per-period allowance, of the crowd of passive providers and
/// of the epochs seen, shared by the handlers whose calls can slash. Each slash is checked
/// when it is recorded; a violation raises a flag the invariants assert false.
contract SlashLedger {
    uint256 internal constant BPS = 10_000;
    uint256 internal constant SLASH_PERIOD = 30 days;
    /// @dev The vault counts a slasher's slashes in 2-day buckets: at time t, every slash whose
    /// bucket is one of the 16 ending with t's. The ghost keeps every slash and recounts.
    uint256 internal constant SLASH_BUCKET = 2 days;
    uint256 internal constant COUNTED_BUCKETS = 16;

    struct SlashRecord {
        address provider;
        address slasher; // address(0): a debt collection, which no slasher orders
        uint256 held; // stake + unbonding just before this slash
        uint256 heldStake;
        uint256 heldUnbonding;
        uint256 fromStake;
        uint256 fromUnbonding;
        uint256 debtAdded; // what the bucket held back and the provider now owes
        uint16 bps; // as the Slashed event reports it (0 for a debt collection)
        uint16 requestedBps; // what the slasher asked for
        uint16 maxBps; // the per-incident cap at the time
        uint16 maxBpsPerPeriod; // the per-slasher cap at the time
        uint256 bucketBefore; // network-wide capacity left just before this slash
        uint256 toTreasury;
        uint256 expectedToTreasury;
        bool debt; // a "slash-debt" collection
    }

    /// @dev One applied slash of one provider by one slasher, kept for ever: the per-period cap
    /// is checked over every SLASH_PERIOD that ends at a slash.
    struct Applied {
        uint64 time;
        uint16 bps;
        uint16 cap; // the per-period cap in force
        uint256 held; // stake + unbonding just before it
        uint256 charged; // taken + owed
    }

    SlashRecord[] internal _records; // the actor providers' slashes
    uint256 public crowdSlashCount;
    mapping(address slasher => mapping(address provider => Applied[])) internal _history;
    address[] internal _slashers;

    uint256 public totalSlashed; // sum of amounts taken, from the Slashed events
    uint256 public treasuryIncome; // treasury balance growth during slashing calls, less market fees
    uint256 public burned; // supply burned during slashing calls
    uint256 public marketFees; // fees JobSettled reported during audited calls
    uint256 public rateLimited;
    uint256 public notApplied;
    uint256 public debtCollections;
    uint256 public cappedSlashes; // slashes the vault lowered to a cap
    uint256 public droppedSlashes; // slashes the per-period cap dropped entirely

    mapping(address provider => uint256) public debtIncurred;
    mapping(address provider => uint256) public debtCollected;

    /// @dev The crowd: passive staked providers that only the oracle slashes; their stake
    /// is tracked here instead of being read back after every call.
    mapping(address provider => bool) public isCrowd;
    mapping(address provider => uint256) public crowdHeld;
    uint256 public crowdHeldTotal;

    /// @dev Per-slash violations (see {recordSlash}) and whole-call mismatches.
    bool public unknownProviderSlashed;
    bool public stateDeltaMismatch;
    bool public splitMismatch;
    bool public slashAboveHeld; // took more stake or unbonding than there was
    bool public slashAboveBps; // took (or charged as debt) more than bps of what it hit, net of its debt
    bool public slashZeroBps; // an ordered slash reported with zero bps
    bool public slashAboveIncidentCap; // applied bps above maxSlashBps
    bool public slashNotAtCap; // applied bps other than min(requested, incident cap, period allowance)
    bool public slashAboveBucket; // took more than the network-wide bucket held
    bool public treasuryShareWrong;
    bool public debtOverCollected; // a debt collection took more than was owed
    bool public periodBpsExceeded; // one slasher summed more than the per-period cap on one provider within 30 days
    bool public periodTakeExceeded; // ... or charged more than that share of the most the provider held then

    uint64 public maxEpochSeen;
    bool public epochDecreased;

    /// @dev Release times seen per provider; a later sighting below one of them raises the flag.
    mapping(address provider => uint256) public lastUnbondingEnd;
    mapping(address provider => uint256) public lastHeldUntil;
    bool public releaseMovedEarlier;

    constructor(address[] memory slashers_) {
        _slashers = slashers_;
    }

    // ─── Slashes ─────────────────────────────────────────────────────────────

    /// @dev Checks one applied slash (or debt collection) against what it hit and the caps,
    /// and moves the slasher's period window forward.
    function recordSlash(SlashRecord memory r) external {
        uint256 taken = r.fromStake + r.fromUnbonding;
        totalSlashed += taken;
        if (isCrowd[r.provider]) {
            crowdHeld[r.provider] -= taken;
            crowdHeldTotal -= taken;
            ++crowdSlashCount;
        } else {
            _records.push(r);
        }
        if (r.fromStake > r.heldStake || r.fromUnbonding > r.heldUnbonding) slashAboveHeld = true;
        if (taken > r.bucketBefore) slashAboveBucket = true;
        if (r.toTreasury != r.expectedToTreasury) treasuryShareWrong = true;
        if (r.debt) {
            ++debtCollections;
            uint256 owed = debtIncurred[r.provider] - debtCollected[r.provider];
            if (taken > owed || r.bps != 0) debtOverCollected = true;
            debtCollected[r.provider] += _min(taken, owed);
            return;
        }
        // A slash applies to what the provider holds net of what it already owes.
        uint256 owedBefore = debtIncurred[r.provider] - debtCollected[r.provider];
        uint256 net = r.held - _min(owedBefore, r.held);
        debtIncurred[r.provider] += r.debtAdded;
        if (r.bps == 0) slashZeroBps = true;
        if (r.bps > r.maxBps) slashAboveIncidentCap = true;
        if ((taken + r.debtAdded) * BPS > net * r.bps) slashAboveBps = true;
        if (r.bps != r.requestedBps) ++cappedSlashes;

        uint256 used = counted(r.slasher, r.provider);
        uint256 left = used >= r.maxBpsPerPeriod ? 0 : r.maxBpsPerPeriod - used;
        if (r.bps != _min(_min(r.requestedBps, r.maxBps), left)) slashNotAtCap = true;
        Applied[] storage history = _history[r.slasher][r.provider];
        history.push(
            Applied({
                time: uint64(block.timestamp),
                bps: r.bps,
                cap: r.maxBpsPerPeriod,
                held: r.held,
                charged: taken + r.debtAdded
            })
        );
        // Over the SLASH_PERIOD that ends now: the bps summed within the highest cap in force,
        // and what was charged within that share of the most the provider held.
        uint256 bpsSum;
        uint256 charged;
        uint256 maxCap;
        uint256 maxHeld;
        for (uint256 i = history.length; i > 0; --i) {
            Applied storage a = history[i - 1];
            if (uint256(a.time) + SLASH_PERIOD < block.timestamp) break;
            bpsSum += a.bps;
            charged += a.charged;
            if (a.cap > maxCap) maxCap = a.cap;
            if (a.held > maxHeld) maxHeld = a.held;
        }
        if (bpsSum > maxCap) periodBpsExceeded = true;
        if (charged * BPS > maxHeld * maxCap) periodTakeExceeded = true;
    }

    /// @dev The bps `slasher` has applied to `provider` that the vault counts now: those of
    /// the COUNTED_BUCKETS buckets ending with the current one.
    function counted(address slasher, address provider) public view returns (uint256 sum) {
        Applied[] storage history = _history[slasher][provider];
        uint256 current = block.timestamp / SLASH_BUCKET;
        for (uint256 i = history.length; i > 0; --i) {
            Applied storage a = history[i - 1];
            if (uint256(a.time) / SLASH_BUCKET + COUNTED_BUCKETS <= current) break;
            sum += a.bps;
        }
    }

    /// @dev A slash the per-period cap dropped entirely (SlashCapped to 0, no Slashed event):
    /// right only if this slasher's allowance for the provider was used up.
    function recordDropped(address slasher, address provider, uint16 maxBpsPerPeriod) external {
        ++droppedSlashes;
        if (counted(slasher, provider) < maxBpsPerPeriod) slashNotAtCap = true;
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

    // ─── The crowd ───────────────────────────────────────────────────────────

    function addCrowd(address provider, uint256 held) external {
        isCrowd[provider] = true;
        crowdHeld[provider] = held;
        crowdHeldTotal += held;
    }

    /// @dev A crowd member withdrew everything it held (the drain only).
    function noteCrowdExit(address provider) external {
        crowdHeldTotal -= crowdHeld[provider];
        crowdHeld[provider] = 0;
    }

    // ─── Epochs and release times ────────────────────────────────────────────

    function observeEpoch(uint64 epoch) external {
        if (epoch < maxEpochSeen) epochDecreased = true;
        else maxEpochSeen = epoch;
    }

    function observeRelease(address provider, uint256 unbondingEnd, uint256 heldUntil) external {
        if (unbondingEnd < lastUnbondingEnd[provider] || heldUntil < lastHeldUntil[provider]) {
            releaseMovedEarlier = true;
        }
        lastUnbondingEnd[provider] = unbondingEnd;
        lastHeldUntil[provider] = heldUntil;
    }

    // ─── Views ───────────────────────────────────────────────────────────────

    function recordCount() external view returns (uint256) {
        return _records.length;
    }

    function records(uint256 i) external view returns (SlashRecord memory) {
        return _records[i];
    }

    function _min(uint256 a, uint256 b) private pure returns (uint256) {
        return a < b ? a : b;
    }
}

/// @notice What every handler shares: the deployed contracts, the actor set, the clock,
/// call counters and the slash audit that wraps any call that may slash.
abstract contract HandlerBase is CommonBase, StdUtils {
    uint256 internal constant BPS = 10_000;
    bytes32 internal constant DEBT_REASON = "slash-debt";

    struct Deps {
        SwarmToken token;
        StakingVault vault;
        RewardDistributor distributor;
        JobMarket market;
        Clock clock;
        SlashLedger ledger;
        address treasury;
        address admin; // DEFAULT_ADMIN_ROLE everywhere (the timelock)
        address guardian; // PAUSER_ROLE everywhere
        address[] providers;
        address outsider; // never registered
    }

    /// @dev The vault state a slashing call starts from; the audit walks it forward one
    /// Slashed event at a time.
    struct SlashWatch {
        address slasher; // whose slashes this call may apply (address(0): debt collections only)
        uint256[] stake;
        uint256[] unbonding;
        uint256 treasury;
        uint256 supply;
        uint256 bucket;
        uint16 maxBps;
        uint16 maxBpsPerPeriod;
        uint16 shareBps;
        address exiting; // a provider withdrawing in this call: its unbonding leaves the vault
        uint256 exitPaid; // what the audit expects that withdrawal to pay
    }

    /// @dev What the audit carries from one event to the next of the same slash.
    struct Carry {
        address cappedProvider;
        uint16 requestedBps;
        address limitedProvider;
        uint256 debtAdded;
        address[] crowdTouched;
        uint256 crowdCount;
    }

    SwarmToken internal immutable token;
    StakingVault internal immutable vault;
    RewardDistributor internal immutable distributor;
    JobMarket internal immutable market;
    Clock internal immutable clock;
    SlashLedger internal immutable ledger;
    address internal immutable treasury;
    address internal immutable admin;
    address internal immutable guardian;
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
        guardian = d.guardian;
        outsider = d.outsider;
        providers = d.providers;
    }

    /// @dev The hold a withdrawal waits for: the slashers', or a report's while it stands.
    /// @dev When the provider's holds end for a withdrawal: the slashers' or the distributor's,
    /// never past its release plus the challenge window and the report lag (the exit bound).
    function _held(StakingVault.ProviderView memory info) internal view returns (uint64) {
        uint64 held = info.reportHeldUntil > info.heldUntil ? info.reportHeldUntil : info.heldUntil;
        uint64 bound = _exitBy(info);
        return held > bound ? bound : held;
    }

    /// @dev The latest a provider that asked to leave may be held: its release plus the
    /// distributor's challenge window and report lag.
    function _exitBy(StakingVault.ProviderView memory info) internal view returns (uint64) {
        return info.unbondingEnd + distributor.challengeWindow() + distributor.maxReportLag();
    }

    /// @dev Runs a handler action at the campaign's time and records the epoch and the
    /// providers' release times it leaves.
    modifier step() {
        vm.warp(clock.time());
        _;
        ledger.observeEpoch(distributor.lastFinalizedEpoch());
        for (uint256 i; i < providers.length; ++i) {
            StakingVault.ProviderView memory info = vault.providerInfo(providers[i]);
            ledger.observeRelease(providers[i], info.unbondingEnd, info.heldUntil);
        }
    }

    /// @dev A report of the providers' `cumulative` earnings as a real StandardMerkleTree root,
    /// adding `rewards` to what is allocated, valid for a day.
    function _epochReport(
        uint64 epoch,
        uint256[] memory cumulative,
        uint256 rewards,
        IStakingVault.SlashOrder[] memory slashes
    ) internal view returns (RewardDistributor.EpochReport memory) {
        return RewardDistributor.EpochReport({
            epoch: epoch,
            rewardsRoot: StandardTree.root(StandardTree.leaves(providers, cumulative)),
            totalRewards: rewards,
            cumulativeTotal: distributor.totalAllocated() + rewards,
            slashesHash: keccak256(abi.encode(slashes)),
            deferredHash: keccak256(abi.encode(new address[](0))),
            expiresAt: uint64(block.timestamp) + 1 days
        });
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

    function _held(address p) internal view returns (uint256) {
        StakingVault.ProviderView memory info = vault.providerInfo(p);
        return uint256(info.stake) + info.unbonding;
    }

    function _min(uint256 a, uint256 b) internal pure returns (uint256) {
        return a < b ? a : b;
    }

    // ─── Slash audit ─────────────────────────────────────────────────────────

    /// @dev Snapshots what a slash by `slasher` may touch and starts recording logs.
    function _watch(address slasher) internal returns (SlashWatch memory w) {
        uint256 n = providers.length;
        w.slasher = slasher;
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
        w.maxBpsPerPeriod = vault.maxSlashBpsPerPeriod();
        w.shareBps = vault.treasuryShareBps();
        vm.recordLogs();
    }

    /// @dev Audits the watched call's logs; see {_auditLogs}.
    function _audit(SlashWatch memory w) internal returns (uint256 toTreasury) {
        return _auditLogs(w, vm.getRecordedLogs());
    }

    /// @dev Records every Slashed event of the watched call against the stake it hit, then
    /// checks the vault's state delta and the treasury/burn split of the whole call.
    /// Never reverts on a mismatch (that would hide it): it raises a ledger flag.
    /// @return toTreasury what the slashes of this call sent the treasury.
    function _auditLogs(SlashWatch memory w, Vm.Log[] memory logs) internal returns (uint256 toTreasury) {
        uint256 slashed;
        uint256 fees;
        Carry memory c;
        c.crowdTouched = new address[](logs.length);
        for (uint256 i; i < logs.length; ++i) {
            Vm.Log memory log = logs[i];
            if (log.topics.length == 0) continue;
            bytes32 topic = log.topics[0];
            if (log.emitter == address(vault)) {
                if (topic == StakingVault.Slashed.selector) {
                    (uint256 taken, uint256 toT) = _auditSlash(w, c, log);
                    slashed += taken;
                    toTreasury += toT;
                } else if (topic == StakingVault.SlashCapped.selector) {
                    (uint16 requested, uint16 applied) = abi.decode(log.data, (uint16, uint16));
                    address provider = address(uint160(uint256(log.topics[1])));
                    if (applied == 0) {
                        ledger.recordDropped(w.slasher, provider, w.maxBpsPerPeriod);
                    } else {
                        (c.cappedProvider, c.requestedBps) = (provider, requested);
                    }
                } else if (topic == StakingVault.SlashRateLimited.selector) {
                    (uint256 requested, uint256 applied) = abi.decode(log.data, (uint256, uint256));
                    (c.limitedProvider, c.debtAdded) = (address(uint160(uint256(log.topics[1]))), requested - applied);
                    ledger.countRateLimited();
                } else if (topic == StakingVault.SlashSkipped.selector) {
                    ledger.countNotApplied();
                }
            } else if (log.emitter == address(market) && topic == JobMarket.JobSettled.selector) {
                (, uint256 fee,) = abi.decode(log.data, (uint256, uint256, uint256));
                fees += fee;
            }
        }

        bool stateOk = true;
        for (uint256 i; i < providers.length; ++i) {
            StakingVault.ProviderView memory info = vault.providerInfo(providers[i]);
            if (providers[i] == w.exiting) {
                // What a debt still claims stays in unbonding; the rest is paid out.
                uint256 owed = vault.slashDebt(providers[i]);
                uint256 kept = owed < w.unbonding[i] ? owed : w.unbonding[i];
                w.exitPaid = w.unbonding[i] - kept;
                w.unbonding[i] = kept;
            }
            if (info.stake != w.stake[i] || info.unbonding != w.unbonding[i]) stateOk = false;
        }
        for (uint256 k; k < c.crowdCount; ++k) {
            StakingVault.ProviderView memory info = vault.providerInfo(c.crowdTouched[k]);
            if (info.stake != ledger.crowdHeld(c.crowdTouched[k]) || info.unbonding != 0) stateOk = false;
        }
        uint256 treasuryNow = token.balanceOf(treasury);
        uint256 supplyNow = token.totalSupply();
        bool splitOk = treasuryNow >= w.treasury + fees && w.supply >= supplyNow;
        uint256 treasuryIn = splitOk ? treasuryNow - w.treasury - fees : 0;
        uint256 burnt = splitOk ? w.supply - supplyNow : 0;
        splitOk = splitOk && treasuryIn == toTreasury && treasuryIn + burnt == slashed;
        ledger.recordCall(treasuryIn, burnt, fees, stateOk, splitOk);
    }

    function _auditSlash(SlashWatch memory w, Carry memory c, Vm.Log memory log)
        private
        returns (uint256 taken, uint256 toT)
    {
        SlashLedger.SlashRecord memory r = _decodeSlash(w, c, log);
        taken = r.fromStake + r.fromUnbonding;
        toT = r.toTreasury;
        // Only debt collections may happen outside a slasher's call.
        if (!r.debt && w.slasher == address(0)) ledger.flagUnknownProvider();

        uint256 i = _indexOf(r.provider);
        if (i != type(uint256).max) {
            (r.heldStake, r.heldUnbonding) = (w.stake[i], w.unbonding[i]);
            // Walk the snapshot forward so a second slash of the same provider in this call
            // is measured against what the first one left (saturating: the record keeps any excess).
            w.stake[i] -= _min(r.fromStake, w.stake[i]);
            w.unbonding[i] -= _min(r.fromUnbonding, w.unbonding[i]);
        } else if (ledger.isCrowd(r.provider)) {
            r.heldStake = ledger.crowdHeld(r.provider);
            c.crowdTouched[c.crowdCount++] = r.provider;
        } else {
            ledger.flagUnknownProvider();
            return (taken, toT);
        }
        r.held = r.heldStake + r.heldUnbonding;
        ledger.recordSlash(r);
        w.bucket -= _min(taken, w.bucket);
    }

    /// @dev The record of one Slashed event, with what the events before it in the same
    /// slash said (the bps asked for, the debt deferred); the holdings are filled in later.
    function _decodeSlash(SlashWatch memory w, Carry memory c, Vm.Log memory log)
        private
        pure
        returns (SlashLedger.SlashRecord memory r)
    {
        r.provider = address(uint160(uint256(log.topics[1])));
        r.debt = log.topics[2] == DEBT_REASON;
        (r.fromStake, r.fromUnbonding, r.bps,, r.toTreasury) =
            abi.decode(log.data, (uint256, uint256, uint16, bytes32, uint256));
        r.slasher = r.debt ? address(0) : w.slasher;
        r.requestedBps = c.cappedProvider == r.provider ? c.requestedBps : r.bps;
        r.debtAdded = c.limitedProvider == r.provider ? c.debtAdded : 0;
        (c.cappedProvider, c.limitedProvider, c.debtAdded) = (address(0), address(0), 0);
        r.maxBps = w.maxBps;
        r.maxBpsPerPeriod = w.maxBpsPerPeriod;
        r.bucketBefore = w.bucket;
        r.expectedToTreasury = (r.fromStake + r.fromUnbonding) * w.shareBps / BPS;
    }

    function _indexOf(address provider) private view returns (uint256) {
        for (uint256 i; i < providers.length; ++i) {
            if (providers[i] == provider) return i;
        }
        return type(uint256).max;
    }
}
