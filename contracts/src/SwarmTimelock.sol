// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

// The admin of every Swarm contract is OpenZeppelin's TimelockController, unchanged: its
// proposers schedule each parameter change, role grant or revocation, committee change, mint
// and treasury change, which anyone may execute once the delay (longer than the unbonding
// period) has passed. This file only brings the library's contract into the build, so the
// deploy scripts and the tests deploy the library's own code.
import {TimelockController} from "@openzeppelin/contracts/governance/TimelockController.sol";
