// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {AccessControlDefaultAdminRules} from
    "@openzeppelin/contracts/access/extensions/AccessControlDefaultAdminRules.sol";
import {Pausable} from "@openzeppelin/contracts/utils/Pausable.sol";

/// @title SwarmAccess
/// @notice Roles and the emergency pause shared by every Swarm contract. The admin
/// (DEFAULT_ADMIN_ROLE) grants and revokes roles and changes parameters; in a Swarm
/// deployment it is an OpenZeppelin TimelockController whose delay exceeds the unbonding
/// period, so every such change waits in public long enough for a provider to leave first.
/// PAUSER_ROLE, the guardian's key, pauses and unpauses at once: a pause stops new work and
/// never moves funds. Each contract decides which of its functions a pause stops — never
/// withdrawals, refunds or claims.
/// @dev The admin role has exactly one holder and moves in two steps with a delay
/// (OpenZeppelin's AccessControlDefaultAdminRules): the admin proposes a successor, who
/// accepts no sooner than ADMIN_TRANSFER_DELAY later, so a stolen admin key cannot hand
/// the role on unseen and a mistyped address never receives it. A contract with a treasury
/// refuses to make its treasury the admin ({_checkAdminCandidate}).
abstract contract SwarmAccess is AccessControlDefaultAdminRules, Pausable {
    bytes32 public constant PAUSER_ROLE = keccak256("PAUSER_ROLE");
    /// @notice How long a proposed admin waits before it may accept the role.
    uint48 public constant ADMIN_TRANSFER_DELAY = 2 days;

    /// @notice A zero address was given where a contract or account is required.
    error ZeroAddress();
    /// @notice The treasury that receives slashes or fees may not be the admin.
    error TreasuryIsAdmin(address account);

    /// @param admin receives DEFAULT_ADMIN_ROLE (a timelock in a Swarm deployment).
    /// @param guardian receives PAUSER_ROLE: the emergency pause, immediate.
    constructor(address admin, address guardian) AccessControlDefaultAdminRules(ADMIN_TRANSFER_DELAY, admin) {
        if (guardian == address(0)) revert ZeroAddress();
        _grantRole(PAUSER_ROLE, guardian);
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

    /// @dev Refuses a proposed admin that may not hold the role (the treasury).
    function _beginDefaultAdminTransfer(address newAdmin) internal virtual override {
        _checkAdminCandidate(newAdmin);
        super._beginDefaultAdminTransfer(newAdmin);
    }

    /// @dev Reverts if `account` may not be the admin; a contract with a treasury overrides it.
    function _checkAdminCandidate(address account) internal view virtual {}
}
