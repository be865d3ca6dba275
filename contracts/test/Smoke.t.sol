// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {SwarmTestBase} from "./utils/SwarmTestBase.sol";

contract SmokeTest is SwarmTestBase {
    function test_DeployWiresRoles() public view {
        assertTrue(vault.hasRole(vault.SLASHER_ROLE(), address(distributor)));
        assertEq(token.balanceOf(alice), ACTOR_FUNDS);
    }
}
