// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {ERC20} from "@openzeppelin/contracts/token/ERC20/ERC20.sol";
import {ERC20Burnable} from "@openzeppelin/contracts/token/ERC20/extensions/ERC20Burnable.sol";
import {ERC20Permit} from "@openzeppelin/contracts/token/ERC20/extensions/ERC20Permit.sol";
import {AccessControlDefaultAdminRules} from
    "@openzeppelin/contracts/access/extensions/AccessControlDefaultAdminRules.sol";

/// @title SwarmToken
/// @notice The ERC-20 in which stake, job payments and rewards are all denominated.
/// Supports EIP-2612 permits so staking and posting a job each take one transaction.
/// @dev Invariant: totalSupply() never exceeds MAX_SUPPLY; it falls only by burns
/// (slashed stake is burned by the vault).
/// The admin role moves in two steps with a delay (AccessControlDefaultAdminRules).
contract SwarmToken is ERC20, ERC20Burnable, ERC20Permit, AccessControlDefaultAdminRules {
    bytes32 public constant MINTER_ROLE = keccak256("MINTER_ROLE");
    /// @notice How long a proposed admin waits before it may accept the role.
    uint48 public constant ADMIN_TRANSFER_DELAY = 2 days;

    /// @notice The hard cap on supply: one billion tokens.
    uint256 public constant MAX_SUPPLY = 1_000_000_000 ether;

    /// @notice A mint would take the supply past MAX_SUPPLY.
    error SupplyCapExceeded(uint256 requested, uint256 remaining);

    /// @param admin receives DEFAULT_ADMIN_ROLE and MINTER_ROLE.
    /// @param initialHolder receives `initialSupply` tokens.
    constructor(address admin, address initialHolder, uint256 initialSupply)
        ERC20("Swarm", "SWARM")
        ERC20Permit("Swarm")
        AccessControlDefaultAdminRules(ADMIN_TRANSFER_DELAY, admin)
    {
        _grantRole(MINTER_ROLE, admin);
        _mintCapped(initialHolder, initialSupply);
    }

    /// @notice Mints `amount` to `to`, e.g. an epoch's emission for the reward
    /// distributor. Only MINTER_ROLE. Emits {Transfer}.
    function mint(address to, uint256 amount) external onlyRole(MINTER_ROLE) {
        _mintCapped(to, amount);
    }

    function _mintCapped(address to, uint256 amount) private {
        uint256 remaining = MAX_SUPPLY - totalSupply();
        if (amount > remaining) revert SupplyCapExceeded(amount, remaining);
        _mint(to, amount);
    }
}
