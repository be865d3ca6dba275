// SPDX-License-Identifier: Apache-2.0
pragma solidity ^0.8.24;

import {IAccessControl} from "@openzeppelin/contracts/access/IAccessControl.sol";
import {
    IAccessControlDefaultAdminRules
} from "@openzeppelin/contracts/access/extensions/IAccessControlDefaultAdminRules.sol";

import {StakingVault} from "../../src/StakingVault.sol";
import {RewardDistributor} from "../../src/RewardDistributor.sol";
import {JobMarket} from "../../src/JobMarket.sol";
import {SwarmAccess} from "../../src/base/SwarmAccess.sol";
import {HandlerBase} from "./HandlerBase.sol";

/// @notice Plays the admin in the middle of the campaign: half of its calls set a parameter
/// to a value within its allowed range, which must be taken; the other half try a value
/// outside it, which must be refused with the parameter's own error. Covers the vault's
/// unbonding period, slash policy (per-incident and per-period caps, treasury share),
/// network-wide bucket and minimum stake per GPU, the distributor's challenge window,
/// and the market's fee, dispute window and dispute bond. Strangers' setter calls and a one-step
/// grant of the admin role must be refused. The treasury address never changes: the
/// slash audit accounts for what one treasury receives.
contract AdminHandler is HandlerBase {
    /// @dev Ghost flags, asserted false by the invariants.
    bool public outOfRangeAccepted; // a value outside its range was set
    bool public inRangeRefused; // a value within its range was refused
    bool public refusedWithWrongError; // an out-of-range value refused with another error
    bool public strangerAccepted; // a setter or a one-step admin grant went through without the admin

    constructor(Deps memory d) HandlerBase(d) {}

    // ─── Vault ───────────────────────────────────────────────────────────────

    /// @dev In range: from the larger of the floor and the distributor's challenge window plus
    /// its report lag, to the ceiling. Below the floor: OutOfRange; above it but below the
    /// reporting time: UnbondingShorterThanReporting; above the ceiling: OutOfRange.
    function setUnbondingPeriod(uint256 seed) external step {
        uint64 floor = vault.minUnbondingPeriod();
        uint64 reporting = distributor.challengeWindow() + distributor.maxReportLag();
        uint64 lowest = reporting > floor ? reporting : floor;
        uint64 ceiling = vault.MAX_UNBONDING_PERIOD();
        uint64 period;
        bool inRange = seed % 2 == 0;
        if (inRange) period = uint64(_bound(seed >> 1, lowest, ceiling));
        else if ((seed >> 1) % 2 == 0) period = uint64(_bound(seed >> 2, 0, lowest - 1));
        else period = uint64(_bound(seed >> 2, uint256(ceiling) + 1, type(uint64).max));
        bytes4 expected = period >= floor && period < reporting
            ? StakingVault.UnbondingShorterThanReporting.selector
            : StakingVault.OutOfRange.selector;
        vm.prank(admin);
        try vault.setUnbondingPeriod(period) {
            _taken(inRange, "setUnbondingPeriod");
        } catch (bytes memory err) {
            _refused(inRange, err, expected, "setUnbondingPeriod");
        }
    }

    /// @dev In range: a per-incident cap from 1 % to 100 %, a per-period cap from it to
    /// 100 %, any treasury share. Out of range, one of: a per-incident cap below 1 % or
    /// above 100 %, a per-period cap below the per-incident one or above 100 %, a treasury
    /// share above 100 % (InvalidBps), no treasury (ZeroAddress).
    function setSlashPolicy(uint256 incidentSeed, uint256 periodSeed, uint256 shareSeed) external step {
        uint16 floor = vault.MIN_SLASH_BPS_LIMIT();
        uint16 incident = uint16(_bound(incidentSeed, floor, BPS));
        uint16 period = uint16(_bound(periodSeed, incident, BPS));
        uint16 share = uint16(_bound(shareSeed, 0, BPS));
        address to = treasury;
        bytes4 expected = StakingVault.OutOfRange.selector;
        bool inRange = incidentSeed % 2 == 0;
        if (!inRange) {
            uint256 way = (incidentSeed >> 1) % 6;
            if (way == 0) incident = uint16(_bound(incidentSeed >> 8, 0, floor - 1));
            else if (way == 1) incident = uint16(_bound(incidentSeed >> 8, BPS + 1, type(uint16).max));
            else if (way == 2) period = uint16(_bound(periodSeed >> 8, 0, incident - 1));
            else if (way == 3) period = uint16(_bound(periodSeed >> 8, BPS + 1, type(uint16).max));
            else if (way == 4) share = uint16(_bound(shareSeed, BPS + 1, type(uint16).max));
            else to = address(0);
            if (way == 4) expected = StakingVault.InvalidBps.selector;
            if (way == 5) expected = SwarmAccess.ZeroAddress.selector;
        }
        vm.prank(admin);
        try vault.setSlashPolicy(incident, period, share, to) {
            _taken(inRange, "setSlashPolicy");
        } catch (bytes memory err) {
            _refused(inRange, err, expected, "setSlashPolicy");
        }
    }

    /// @dev In range: a capacity from MIN_BUCKET_CAPACITY up to 200,000 tokens and a refill
    /// that fills it in one hour to thirty days (one call in eight: any refill from 1 wei a
    /// second up to the capacity). Out of range: a capacity below the minimum or above the
    /// maximum, no refill, or a refill above the capacity.
    function setSlashRateLimit(uint256 capacitySeed, uint256 refillSeed) external step {
        uint128 floor = vault.MIN_BUCKET_CAPACITY();
        uint256 capacity = _bound(capacitySeed >> 1, floor, 200_000 ether);
        uint256 refill = refillSeed % 8 == 0
            ? _bound(refillSeed >> 3, 1, capacity)
            : _bound(refillSeed >> 3, capacity / 30 days + 1, capacity / 1 hours + 1);
        bool inRange = capacitySeed % 2 == 0;
        if (!inRange) {
            uint256 way = (refillSeed >> 3) % 4;
            if (way == 0) capacity = _bound(capacitySeed >> 1, 0, floor - 1);
            else if (way == 1) refill = 0;
            else if (way == 2) refill = _bound(refillSeed >> 5, capacity + 1, type(uint128).max);
            else capacity = _bound(capacitySeed >> 1, uint256(vault.MAX_BUCKET_CAPACITY()) + 1, type(uint128).max);
        }
        vm.prank(admin);
        try vault.setSlashRateLimit(uint128(capacity), uint128(refill)) {
            _taken(inRange, "setSlashRateLimit");
        } catch (bytes memory err) {
            _refused(inRange, err, StakingVault.OutOfRange.selector, "setSlashRateLimit");
        }
    }

    /// @dev In range: mostly up to 20,000 tokens a GPU, one call in eight up to the ceiling.
    function setMinStakePerGpu(uint256 seed) external step {
        uint128 ceiling = vault.MAX_MIN_STAKE_PER_GPU();
        bool inRange = seed % 2 == 0;
        uint256 value = _bound(seed >> 4, 1, (seed >> 1) % 8 == 0 ? ceiling : 20_000 ether);
        if (!inRange) value = (seed >> 1) % 2 == 0 ? 0 : _bound(seed >> 4, uint256(ceiling) + 1, type(uint128).max);
        vm.prank(admin);
        try vault.setMinStakePerGpu(uint128(value)) {
            _taken(inRange, "setMinStakePerGpu");
        } catch (bytes memory err) {
            _refused(inRange, err, StakingVault.OutOfRange.selector, "setMinStakePerGpu");
        }
    }

    // ─── Distributor ─────────────────────────────────────────────────────────

    /// @dev In range: mostly up to two days, one call in eight up to MAX_CHALLENGE_WINDOW.
    /// @dev In range: from the floor to the smaller of the ceiling and what the vault's
    /// unbonding leaves beside the report lag (ReportingLongerThanUnbonding beyond that).
    function setChallengeWindow(uint256 seed) external step {
        uint64 floor = distributor.minChallengeWindow();
        uint64 ceiling = distributor.MAX_CHALLENGE_WINDOW();
        uint64 room = vault.unbondingPeriod() - distributor.maxReportLag();
        uint64 highest = room < ceiling ? room : ceiling;
        bool inRange = seed % 2 == 0;
        uint64 window = uint64(_bound(seed >> 4, floor, (seed >> 1) % 8 == 0 ? highest : _min64(2 days, highest)));
        if (!inRange) {
            window = (seed >> 1) % 2 == 0
                ? uint64(_bound(seed >> 4, 0, floor - 1))
                : uint64(_bound(seed >> 4, uint256(highest) + 1, type(uint64).max));
        }
        bytes4 expected = window >= floor && window <= ceiling
            ? RewardDistributor.ReportingLongerThanUnbonding.selector
            : RewardDistributor.ChallengeWindowOutOfRange.selector;
        vm.prank(admin);
        try distributor.setChallengeWindow(window) {
            _taken(inRange, "setChallengeWindow");
        } catch (bytes memory err) {
            _refused(inRange, err, expected, "setChallengeWindow");
        }
    }

    /// @dev In range: 1 second to the smaller of MAX_REPORT_LAG and what the vault's unbonding
    /// leaves beside the challenge window (ReportingLongerThanUnbonding beyond that).
    function setMaxReportLag(uint256 seed) external step {
        uint64 ceiling = distributor.MAX_REPORT_LAG();
        uint64 room = vault.unbondingPeriod() - distributor.challengeWindow();
        uint64 highest = room < ceiling ? room : ceiling;
        bool inRange = seed % 2 == 0;
        uint64 lag = uint64(_bound(seed >> 4, 1, highest));
        if (!inRange) {
            lag = (seed >> 1) % 2 == 0 ? 0 : uint64(_bound(seed >> 4, uint256(highest) + 1, type(uint64).max));
        }
        bytes4 expected = lag >= 1 && lag <= ceiling
            ? RewardDistributor.ReportingLongerThanUnbonding.selector
            : RewardDistributor.ReportLagOutOfRange.selector;
        vm.prank(admin);
        try distributor.setMaxReportLag(lag) {
            _taken(inRange, "setMaxReportLag");
        } catch (bytes memory err) {
            _refused(inRange, err, expected, "setMaxReportLag");
        }
    }

    function _min64(uint64 a, uint64 b) private pure returns (uint64) {
        return a < b ? a : b;
    }

    // ─── Market ───────────────────────────────────────────────────────────────

    function setMarketFee(uint256 seed) external step {
        uint16 ceiling = market.MAX_FEE_BPS();
        bool inRange = seed % 2 == 0;
        uint16 fee = uint16(_bound(seed >> 1, 0, ceiling));
        if (!inRange) fee = uint16(_bound(seed >> 1, uint256(ceiling) + 1, type(uint16).max));
        vm.prank(admin);
        try market.setFee(fee, treasury) {
            _taken(inRange, "setMarketFee");
        } catch (bytes memory err) {
            _refused(inRange, err, JobMarket.FeeTooHigh.selector, "setMarketFee");
        }
    }

    /// @dev In range: from minDisputeWindow, mostly up to three days, one call in eight up
    /// to MAX_DISPUTE_WINDOW. Out of range: below the floor or above the ceiling.
    function setDisputeWindow(uint256 seed) external step {
        uint64 floor = market.minDisputeWindow();
        uint64 ceiling = market.MAX_DISPUTE_WINDOW();
        bool inRange = seed % 2 == 0;
        uint64 window = uint64(_bound(seed >> 4, floor, (seed >> 1) % 8 == 0 ? ceiling : 3 days));
        bytes4 expected = JobMarket.DisputeWindowTooLong.selector;
        if (!inRange && (seed >> 1) % 2 == 0) {
            (window, expected) = (uint64(_bound(seed >> 4, 0, floor - 1)), JobMarket.DisputeWindowTooShort.selector);
        } else if (!inRange) {
            window = uint64(_bound(seed >> 4, uint256(ceiling) + 1, type(uint64).max));
        }
        vm.prank(admin);
        try market.setDisputeWindow(window) {
            _taken(inRange, "setDisputeWindow");
        } catch (bytes memory err) {
            _refused(inRange, err, expected, "setDisputeWindow");
        }
    }

    /// @dev In range: MIN_DISPUTE_BOND_BPS to MAX_DISPUTE_BOND_BPS, with a floor from 1 wei to
    /// MAX_MIN_DISPUTE_BOND; out of range: the share on either side, or the floor above its ceiling.
    function setDisputeBond(uint256 seed) external step {
        uint16 floor = market.MIN_DISPUTE_BOND_BPS();
        uint16 ceiling = market.MAX_DISPUTE_BOND_BPS();
        uint128 bondCeiling = market.MAX_MIN_DISPUTE_BOND();
        bool inRange = seed % 2 == 0;
        uint16 bond = uint16(_bound(seed >> 2, floor, ceiling));
        uint128 minBond = uint128(_bound(seed >> 20, 1, bondCeiling));
        bytes4 refusal = JobMarket.DisputeBondOutOfRange.selector;
        if (!inRange) {
            uint256 way = (seed >> 1) % 3;
            if (way == 0) bond = uint16(_bound(seed >> 2, 0, floor - 1));
            else if (way == 1) bond = uint16(_bound(seed >> 2, uint256(ceiling) + 1, type(uint16).max));
            else (minBond, refusal) = (uint128(_bound(seed >> 20, uint256(bondCeiling) + 1, type(uint128).max)),
                JobMarket.MinDisputeBondTooHigh.selector);
        }
        vm.prank(admin);
        try market.setDisputeBond(bond, minBond) {
            _taken(inRange, "setDisputeBond");
        } catch (bytes memory err) {
            _refused(inRange, err, refusal, "setDisputeBond");
        }
    }

    // ─── Without the admin ───────────────────────────────────────────────────

    /// @dev A stranger calls one of the setters with a value in range, or the admin grants
    /// its role in one step instead of the delayed two-step transfer: both refused.
    function strangerRefused(uint256 seed) external step {
        uint256 way = seed % 5;
        bool ok = true;
        vm.startPrank(outsider);
        if (way == 0) {
            try vault.setUnbondingPeriod(vault.unbondingPeriod()) {}
                catch {
                ok = false;
            }
        } else if (way == 1) {
            try vault.setSlashRateLimit(1 ether, 1) {}
                catch {
                ok = false;
            }
        } else if (way == 2) {
            try distributor.setChallengeWindow(distributor.challengeWindow()) {}
                catch {
                ok = false;
            }
        } else if (way == 3) {
            try market.setFee(0, outsider) {}
                catch {
                ok = false;
            }
        }
        vm.stopPrank();
        if (way == 4) {
            bytes32 role = vault.DEFAULT_ADMIN_ROLE();
            vm.prank(admin);
            try IAccessControl(address(vault)).grantRole(role, outsider) {}
            catch (bytes memory err) {
                ok = bytes4(err) != IAccessControlDefaultAdminRules.AccessControlEnforcedDefaultAdminRules.selector;
            }
        }
        if (ok) strangerAccepted = true;
        _count("strangerRefused");
    }

    // ─── Internals ───────────────────────────────────────────────────────────

    function _taken(bool inRange, string memory action) private {
        if (!inRange) outOfRangeAccepted = true;
        _count(action);
    }

    function _refused(bool inRange, bytes memory err, bytes4 expected, string memory action) private {
        if (inRange) inRangeRefused = true;
        else if (bytes4(err) != expected) refusedWithWrongError = true;
        _count(string.concat(action, "Refused"));
    }
}
