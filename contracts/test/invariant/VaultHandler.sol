// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {StakingVault} from "../../src/StakingVault.sol";
import {HandlerBase} from "./HandlerBase.sol";

/// @notice Drives the providers' side of the vault: stake, unstake, withdraw, unjail,
/// hardware updates, and the passage of time.
contract VaultHandler is HandlerBase {
    uint256 internal constant MAX_STAKE_PER_CALL = 250_000 ether;

    /// @dev Ghost flows through the vault since setUp (slashes are in the ledger).
    uint256 public deposited;
    uint256 public withdrawn;
    /// @dev A withdrawal that paid the provider something other than its unbonding amount.
    bool public withdrawalPaidWrong;

    constructor(Deps memory d) HandlerBase(d) {}

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

    /// @dev Half the time waits out the unbonding period first.
    function withdraw(uint256 providerSeed, uint256 waitSeed) external step {
        address p = _provider(providerSeed);
        StakingVault.ProviderView memory info = vault.providerInfo(p);
        if (info.unbonding == 0) return;
        if (block.timestamp < info.unbondingEnd) {
            if (waitSeed % 2 == 1) return;
            _advanceTo(info.unbondingEnd);
        }
        _withdraw(p);
    }

    /// @dev Serves the jail and tops the stake up to the minimum first if needed.
    function unjail(uint256 providerSeed) external step {
        address p = _provider(providerSeed);
        StakingVault.ProviderView memory info = vault.providerInfo(p);
        if (info.jailedUntil == 0 || info.tombstoned) return;
        if (block.timestamp < info.jailedUntil) _advanceTo(info.jailedUntil);
        uint256 minimum = vault.minStake(p);
        if (info.stake < minimum) {
            uint256 topUp = minimum - info.stake;
            if (token.balanceOf(p) < topUp) return;
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
        vm.prank(admin);
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
        } else if (info.unbonding > 0 && block.timestamp >= info.unbondingEnd) {
            _withdraw(p);
        }
        vm.prank(admin);
        vault.unpause();
    }

    function warp(uint256 dt) external step {
        _advanceBy(_bound(dt, 1 minutes, 2 days));
        _count("warp");
    }

    /// @notice Every provider unstakes everything and withdraws it (afterInvariant only).
    function drain() external {
        vm.warp(clock.time());
        uint256 releaseAt;
        for (uint256 i; i < providers.length; ++i) {
            address p = providers[i];
            uint256 active = vault.providerInfo(p).stake;
            if (active > 0) {
                vm.prank(p);
                vault.requestUnstake(active);
            }
            uint256 end = vault.providerInfo(p).unbondingEnd;
            if (end > releaseAt) releaseAt = end;
        }
        _advanceTo(releaseAt);
        for (uint256 i; i < providers.length; ++i) {
            if (vault.providerInfo(providers[i]).unbonding > 0) _withdraw(providers[i]);
        }
    }

    function _stake(address p, uint256 amount) private {
        vm.prank(p);
        vault.stake(amount);
        deposited += amount;
        _count("stake");
    }

    function _withdraw(address p) private {
        uint256 amount = vault.providerInfo(p).unbonding;
        uint256 before = token.balanceOf(p);
        vm.prank(p);
        vault.withdraw();
        if (token.balanceOf(p) != before + amount) withdrawalPaidWrong = true;
        withdrawn += amount;
        _count("withdraw");
    }
}
