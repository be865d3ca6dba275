// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {VaultHandler} from "./VaultHandler.sol";

/// @notice The admin's key scheduling a hostile change through the timelock while a provider
/// leaves: a target of its own, so the campaign calls it beside the other handlers, while the
/// withdrawals it makes stay in the vault handler's accounts.
contract TimelockHandler {
    VaultHandler internal immutable _vault;

    constructor(VaultHandler vault_) {
        _vault = vault_;
    }

    function leaveBeforeAHostileChange(uint256 providerSeed) external {
        _vault.leaveBeforeAHostileChange(providerSeed);
    }
}
