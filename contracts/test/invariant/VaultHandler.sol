// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IAccessControl} from "@openzeppelin/contracts/access/IAccessControl.sol";

import {StakingVault} from "../../src/StakingVault.sol";
import {SwarmTimelock} from "../../src/SwarmTimelock.sol";
import {HandlerBase} from "./HandlerBase.sol";

/// @notice Drives the providers' side of the vault: stake, unstake, withdraw (on time, and
/// too early: before the unbonding ends, under a slasher's hold, with a slash debt the
/// bucket cannot cover), slash-debt collection by anyone, unjail, hardware updates, and
/// the passage of time.
contract VaultHandler is HandlerBase {
    uint256 internal constant MAX_STAKE_PER_CALL = 250_000 ether;
    /// @dev Refills the drain waits for with the admin's bucket before widening it.
    uint256 internal constant DRAIN_REFILLS = 8;
    /// @dev The longest the campaign waits for the bucket to refill: a slower refill (an
    /// admin may set 1 wei a second) would push the clock past the vault's 40-bit times.
    uint256 internal constant MAX_REFILL_WAIT = 30 days;

    /// @dev Passive providers that only the oracle slashes; they exit in the drain.
    address[] internal _crowd;

    /// @dev Ghost flows through the vault since setUp (slashes are in the ledger).
    uint256 public deposited;
    uint256 public withdrawn;
    /// @dev Ghost flags, asserted false by the invariants.
    bool public withdrawalPaidWrong; // paid other than the unbonding left after debt collection
    bool public withdrawalBeforeRelease; // succeeded before unbondingEnd or heldUntil
    bool public withdrawalWithDebt; // paid out unbonding that a slash debt still claimed
    bool public withdrawalRefusedWrongly; // refused for another reason than the one due
    bool public heldPastExitBound; // refused for a hold at or after its release plus the challenge window and the report lag

    bool public heldPastTheTimelock; // asked to leave as a change was scheduled, still held when it could run

    address internal immutable _governor; // the timelock's proposer: the admin's key

    constructor(Deps memory d, address[] memory crowd_, address governor_) HandlerBase(d) {
        _crowd = crowd_;
        _governor = governor_;
    }

    /// @dev The admin's key turns hostile: through the timelock, in public, it schedules a
    /// 100 % slash policy and SLASHER_ROLE for itself. The provider it aims at sees the
    /// operation and asks for its whole stake back in that block. Whatever the campaign's
    /// jobs, disputes and reports hold, it withdraws everything before the operation could
    /// execute; the proposer then cancels it, so the campaign goes on. Skipped while the
    /// provider owes a slash debt (owed whatever the timelock), and should the admin's direct
    /// changes of this campaign (made as the timelock, without its check of the delay) bring the
    /// delay within the exit bound (the campaign's delay outwaits every bound the contracts allow).
    function leaveBeforeAHostileChange(uint256 providerSeed) external step {
        address p = _provider(providerSeed);
        SwarmTimelock timelock = SwarmTimelock(payable(admin));
        uint256 delay = timelock.getMinDelay();
        uint256 active = vault.providerInfo(p).stake;
        if (active == 0 || vault.slashDebt(p) > 0 || delay <= vault.exitBound()) return;
        address[] memory targets = new address[](2);
        uint256[] memory values = new uint256[](2);
        bytes[] memory calls = new bytes[](2);
        (targets[0], targets[1]) = (address(vault), address(vault));
        calls[0] = abi.encodeCall(StakingVault.setSlashPolicy, (10_000, 10_000, 10_000, treasury));
        calls[1] = abi.encodeCall(IAccessControl.grantRole, (vault.SLASHER_ROLE(), _governor));
        bytes32 salt = keccak256(abi.encode(providerSeed, block.timestamp));
        vm.prank(_governor);
        timelock.scheduleBatch(targets, values, calls, bytes32(0), salt, delay);
        uint256 executesAt = block.timestamp + delay;

        uint256 release = block.timestamp + vault.unbondingPeriod();
        uint256 earlier = vault.providerInfo(p).unbondingEnd; // a release never moves earlier
        if (earlier > release) release = earlier;
        vm.prank(p);
        vault.requestUnstake(active);
        uint256 free = vault.withdrawableAt(p);
        // The vault's promise, which the timelock's delay outwaits: the release plus the
        // challenge window and the report lag, whatever any role holds.
        if (free > release + distributor.challengeWindow() + distributor.maxReportLag()) heldPastExitBound = true;
        if (free >= executesAt) heldPastTheTimelock = true;
        _advanceTo(free);
        _tryWithdraw(p);
        if (vault.providerInfo(p).unbonding > 0) heldPastTheTimelock = true;
        bytes32 id = timelock.hashOperationBatch(targets, values, calls, bytes32(0), salt);
        vm.prank(_governor);
        timelock.cancel(id);
        _count("leaveBeforeAHostileChange");
    }

    function stake(uint256 providerSeed, uint256 amount) external step {
        address p = _provider(providerSeed);
        if (vault.providerInfo(p).tombstoned || vault.paused()) return;
        amount = _bound(amount, 1 ether, MAX_STAKE_PER_CALL);
        if (token.balanceOf(p) < amount) return;
        _stake(p, amount);
    }

    function requestUnstake(uint256 providerSeed, uint256 amount) external step {
        address p = _provider(providerSeed);
        uint256 active = vault.providerInfo(p).stake;
        if (active == 0) return;
        amount = _bound(amount, 1, active);
        vm.prank(p);
        vault.requestUnstake(amount);
        _count("requestUnstake");
    }

    /// @dev One attempt in eight waits until the exit bound (the release plus the challenge
    /// window and the report lag), past which no hold may refuse it. Of the rest, a quarter go
    /// at once, whatever is due (refused while unbonding or held); a quarter wait out only the
    /// unbonding period (refused while a hold lasts); a quarter wait out the hold too; the rest
    /// also wait (up to MAX_REFILL_WAIT) for the bucket to refill enough to collect the
    /// provider's slash debt. What a debt the bucket cannot cover yet still claims stays in
    /// unbonding.
    function withdraw(uint256 providerSeed, uint256 waitSeed) external step {
        address p = _provider(providerSeed);
        StakingVault.ProviderView memory info = vault.providerInfo(p);
        if (info.unbonding == 0) return;
        uint256 mode = waitSeed % 4;
        if ((waitSeed >> 128) % 8 == 0) _advanceTo(_exitBy(info)); // whatever any role holds
        else if (mode == 1) _advanceTo(info.unbondingEnd);
        else if (mode > 1) _advanceTo(info.unbondingEnd > _held(info) ? info.unbondingEnd : _held(info));
        uint256 debt = vault.slashDebt(p);
        if (mode == 3 && debt > 0 && debt <= vault.slashBucketCapacity()) {
            uint256 available = vault.availableSlashCapacity();
            uint256 refill = vault.slashRefillPerSecond();
            uint256 wait = debt > available ? (debt - available + refill - 1) / refill : 0;
            if (wait <= MAX_REFILL_WAIT) _advanceBy(wait);
        }
        _tryWithdraw(p);
    }

    /// @dev Anyone collects a provider's slash debt, half the time after waiting for the
    /// bucket to refill by up to a day.
    function collectDebt(uint256 providerSeed, uint256 waitSeed) external step {
        address p = _provider(providerSeed);
        if (vault.slashDebt(p) == 0) return;
        if (waitSeed % 2 == 0) _advanceBy(_bound(waitSeed >> 1, 1, 1 days));
        _collect(p);
    }

    /// @dev Serves the jail and tops the stake up to the minimum plus any slash debt first if
    /// needed: a debt counts against the stake that unjails.
    function unjail(uint256 providerSeed) external step {
        address p = _provider(providerSeed);
        StakingVault.ProviderView memory info = vault.providerInfo(p);
        if (info.jailedUntil == 0 || info.tombstoned) return;
        if (block.timestamp < info.jailedUntil) _advanceTo(info.jailedUntil);
        if (info.slashDebt > 0) {
            _collect(p); // what the bucket allows is taken first; the rest counts against the stake
            info = vault.providerInfo(p);
        }
        uint256 minimum = vault.minStake(p) + info.slashDebt;
        if (info.stake < minimum) {
            uint256 topUp = minimum - info.stake;
            if (token.balanceOf(p) < topUp || vault.paused()) return;
            _stake(p, topUp);
        }
        vm.prank(p);
        vault.unjail();
        _count("unjail");
    }

    function updateSpec(uint256 providerSeed, uint256 gpus) external step {
        address p = _provider(providerSeed);
        gpus = _bound(gpus, 1, 8);
        vm.prank(p);
        vault.updateSpec(keccak256(abi.encode(p, gpus)), uint32(gpus));
        _count("updateSpec");
    }

    /// @dev Pauses the vault for one call: stake must stop; unstake and withdraw must not.
    function pauseInterlude(uint256 providerSeed, uint256 amount) external step {
        address p = _provider(providerSeed);
        vm.prank(guardian);
        vault.pause();
        vm.prank(p);
        try vault.stake(1 ether) {
            deposited += 1 ether;
            _expectPaused(true, "");
        } catch (bytes memory err) {
            _expectPaused(false, err);
        }
        StakingVault.ProviderView memory info = vault.providerInfo(p);
        if (info.stake > 0) {
            vm.prank(p);
            vault.requestUnstake(_bound(amount, 1, info.stake));
            _count("requestUnstakeWhilePaused");
        } else if (info.unbonding > 0) {
            _tryWithdraw(p);
        }
        vm.prank(guardian);
        vault.unpause();
    }

    function warp(uint256 dt) external step {
        _advanceBy(_bound(dt, 1 minutes, 2 days));
        _count("warp");
    }

    /// @notice Every provider, the crowd included, pays its slash debt as the bucket refills,
    /// unstakes everything, waits out unbonding and holds, and withdraws (afterInvariant only).
    /// If debts are still owed after DRAIN_REFILLS full refills of the bucket the admin set,
    /// or a full refill would take longer than MAX_REFILL_WAIT, the admin widens the bucket
    /// (within its range) so that the drain ends.
    function drain() external {
        vm.warp(clock.time());
        _collectAll();
        uint256 releaseAt = clock.time();
        for (uint256 i; i < providers.length + _crowd.length; ++i) {
            address p = i < providers.length ? providers[i] : _crowd[i - providers.length];
            StakingVault.ProviderView memory info = vault.providerInfo(p);
            if (info.stake > 0) {
                vm.prank(p);
                vault.requestUnstake(info.stake);
                info = vault.providerInfo(p);
            }
            if (info.unbondingEnd > releaseAt) releaseAt = info.unbondingEnd;
            if (_held(info) > releaseAt) releaseAt = _held(info);
        }
        _advanceTo(releaseAt);
        for (uint256 i; i < providers.length; ++i) {
            if (vault.providerInfo(providers[i]).unbonding > 0) _tryWithdraw(providers[i]);
        }
        for (uint256 i; i < _crowd.length; ++i) {
            address p = _crowd[i];
            uint256 amount = vault.providerInfo(p).unbonding;
            if (amount == 0) continue;
            vm.prank(p);
            vault.withdraw();
            withdrawn += amount;
            ledger.noteCrowdExit(p);
        }
    }

    // ─── Internals ───────────────────────────────────────────────────────────

    function _stake(address p, uint256 amount) private {
        vm.prank(p);
        vault.stake(amount);
        deposited += amount;
        _count("stake");
    }

    /// @dev Withdraws, auditing the debt collection it makes; a success must be due and pay
    /// the unbonding left, a refusal must be for the reason due first.
    function _tryWithdraw(address p) private {
        StakingVault.ProviderView memory info = vault.providerInfo(p);
        uint256 debt = vault.slashDebt(p);
        uint256 collectable = _min(_min(debt, vault.availableSlashCapacity()), uint256(info.stake) + info.unbonding);
        bytes4 due;
        if (block.timestamp < info.unbondingEnd) due = StakingVault.StillUnbonding.selector;
        else if (block.timestamp < _held(info)) due = StakingVault.StakeOnHold.selector;
        else if (debt > 0 && collectable == 0 && debt >= info.unbonding) due = StakingVault.SlashDebtOutstanding.selector;

        uint256 before = token.balanceOf(p);
        SlashWatch memory w = _watch(address(0));
        w.exiting = p;
        vm.prank(p);
        try vault.withdraw() {
            _audit(w);
            uint256 paid = token.balanceOf(p) - before;
            if (paid != w.exitPaid) withdrawalPaidWrong = true;
            if (block.timestamp < info.unbondingEnd || block.timestamp < _held(info)) {
                withdrawalBeforeRelease = true;
            }
            uint256 owed = vault.slashDebt(p);
            if (owed > 0 && paid > 0 && vault.providerInfo(p).unbonding < owed) withdrawalWithDebt = true;
            withdrawn += paid;
            _count(debt > 0 ? "withdrawAfterDebt" : "withdraw");
        } catch (bytes memory err) {
            vm.getRecordedLogs();
            bool nothingLeft = bytes4(err) == StakingVault.NothingToWithdraw.selector && due == bytes4(0);
            if (bytes4(err) != due && !nothingLeft) withdrawalRefusedWrongly = true;
            if (bytes4(err) == StakingVault.StakeOnHold.selector && block.timestamp >= _exitBy(info)) {
                heldPastExitBound = true;
            }
            if (due == StakingVault.StillUnbonding.selector) _count("withdrawRefusedUnbonding");
            else if (due == StakingVault.StakeOnHold.selector) _count("withdrawRefusedOnHold");
            else if (due == StakingVault.SlashDebtOutstanding.selector) _count("withdrawRefusedWithDebt");
        }
    }

    /// @dev An outsider collects what the bucket allows of `p`'s debt, audited.
    function _collect(address p) private {
        SlashWatch memory w = _watch(address(0));
        vm.prank(outsider);
        vault.collectSlashDebt(p);
        _audit(w);
        _count("collectDebt");
    }

    /// @dev Collects every debt that still has stake to come from, refill after refill.
    function _collectAll() private {
        for (uint256 round;; ++round) {
            bool owed;
            for (uint256 i; i < providers.length + _crowd.length; ++i) {
                address p = i < providers.length ? providers[i] : _crowd[i - providers.length];
                if (vault.slashDebt(p) == 0 || _held(p) == 0) continue;
                if (vault.availableSlashCapacity() > 0) _collect(p);
                if (vault.slashDebt(p) > 0 && _held(p) > 0) owed = true;
            }
            if (!owed) return;
            uint256 refill = vault.slashRefillPerSecond();
            uint256 wait = (uint256(vault.slashBucketCapacity()) + refill - 1) / refill;
            if (round >= DRAIN_REFILLS || wait > MAX_REFILL_WAIT) {
                uint128 capacity = vault.slashBucketCapacity();
                if (capacity < 1_000_000 ether) capacity = 1_000_000 ether;
                vm.prank(admin);
                vault.setSlashRateLimit(capacity, capacity);
                wait = 1;
            }
            _advanceBy(wait);
        }
    }
}
