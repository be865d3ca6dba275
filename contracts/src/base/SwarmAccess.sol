// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {AccessControl} from "@openzeppelin/contracts/access/AccessControl.sol";
import {Pausable} from "@openzeppelin/contracts/utils/Pausable.sol";

/// @title SwarmAccess
/// @notice Roles and the emergency pause shared by every Swarm contract. The admin
/// (DEFAULT_ADMIN_ROLE) grants roles and changes parameters; PAUSER_ROLE may pause and
/// unpause. Each contract decides which of its functions a pause stops — never
/// withdrawals, refunds or claims.
abstract contract SwarmAccess is AccessControl, Pausable {
    bytes32 public constant PAUSER_ROLE = keccak256("PAUSER_ROLE");

    /// @notice A zero address was given where a contract or account is required.
    error ZeroAddress();

    constructor(address admin) {
        if (admin == address(0)) revert ZeroAddress();
        _grantRole(DEFAULT_ADMIN_ROLE, admin);
        _grantRole(PAUSER_ROLE, admin);
    }

    /// @notice Stops new stake, new jobs and new reports. Only PAUSER_ROLE.
    /// @dev Emits {Paused}.
    function pause() external onlyRole(PAUSER_ROLE) {
        _pause();
    }

    /// @notice Lifts the pause. Only PAUSER_ROLE.
    /// @dev Emits {Unpaused}.
    function unpause() external onlyRole(PAUSER_ROLE) {
        _unpause();
    }
}
