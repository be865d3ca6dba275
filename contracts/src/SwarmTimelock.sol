// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {TimelockController} from "@openzeppelin/contracts/governance/TimelockController.sol";

import {IExitBound} from "./interfaces/IStakingVault.sol";

/// @title SwarmTimelock
/// @notice The admin of every Swarm contract: OpenZeppelin's TimelockController, whose proposers
/// schedule each parameter change, role grant or revocation, committee change, mint and
/// treasury change in public, and anyone executes it once the delay has passed.
///
/// Bound to the staking vault ({bindVault}, once, by its deployer), it keeps its delay longer
/// than the vault's {IExitBound.exitBound}, the longest a provider waits from asking for its
/// stake back to holding it: checked when it is bound and after every call it executes, a
/// change of its own delay and of the vault's or the distributor's timing included. So a
/// provider that asks for its stake back when a change it refuses is scheduled has all of it
/// before that change can execute. A devnet's timelock, with no delay, is left unbound.
contract SwarmTimelock is TimelockController {
    /// @notice The vault whose exit bound the delay outwaits; zero until bound.
    IExitBound public vault;
    address private immutable _deployer;

    event VaultBound(address indexed vault, uint256 exitBound);

    /// @notice The delay would not exceed the vault's exit bound.
    error DelayWithinExitBound(uint256 delay, uint256 exitBound);
    /// @notice Only the timelock's deployer binds it, once.
    error NotBindable(address caller);

    constructor(uint256 minDelay, address[] memory proposers, address[] memory executors, address admin)
        TimelockController(minDelay, proposers, executors, admin)
    {
        _deployer = msg.sender;
    }

    /// @notice Binds the timelock to `vault_`, whose exit bound its delay must exceed from now
    /// on. Only its deployer, once. Emits {VaultBound}.
    function bindVault(IExitBound vault_) external {
        if (msg.sender != _deployer || address(vault) != address(0) || address(vault_) == address(0)) {
            revert NotBindable(msg.sender);
        }
        vault = vault_;
        emit VaultBound(address(vault_), _checkDelay());
    }

    /// @dev Each call an operation makes, then the delay checked against the exit bound.
    function _execute(address target, uint256 value, bytes calldata data) internal override {
        super._execute(target, value, data);
        if (address(vault) != address(0)) _checkDelay();
    }

    function _checkDelay() private view returns (uint256 bound) {
        bound = vault.exitBound();
        uint256 delay = getMinDelay();
        if (delay <= bound) revert DelayWithinExitBound(delay, bound);
    }
}
