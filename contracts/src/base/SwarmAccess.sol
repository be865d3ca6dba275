// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {AccessControlDefaultAdminRules} from
    "@openzeppelin/contracts/access/extensions/AccessControlDefaultAdminRules.sol";
import {Pausable} from "@openzeppelin/contracts/utils/Pausable.sol";

/// @title SwarmAccess
/// @notice Roles and the emergency pause shared by every Swarm contract. The admin
/// (DEFAULT_ADMIN_ROLE) grants roles and changes parameters; PAUSER_ROLE may pause and
/// unpause. Each contract decides which of its functions a pause stops — never
/// withdrawals, refunds or claims.
/// @dev The admin role has exactly one holder and moves in two steps with a delay
/// (OpenZeppelin's AccessControlDefaultAdminRules): the admin proposes a successor, who
/// accepts no sooner than ADMIN_TRANSFER_DELAY later, so a stolen admin key cannot hand
/// the role on unseen and a mistyped address never receives it.
abstract contract SwarmAccess is AccessControlDefaultAdminRules, Pausable {
    bytes32 public constant PAUSER_ROLE = keccak256("PAUSER_ROLE");
    /// @notice How long a proposed admin waits before it may accept the role.
    uint48 public constant ADMIN_TRANSFER_DELAY = 2 days;

    /// @notice A zero address was given where a contract or account is required.
    error ZeroAddress();

    constructor(address admin) AccessControlDefaultAdminRules(ADMIN_TRANSFER_DELAY, admin) {
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
