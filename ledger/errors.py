"""The errors a user can act on, and custom-error reverts decoded into sentences.

The family's root and the JSON-RPC client's errors are anvil's (anvil/errors.py, beside the one
client), re-exported here: every package above catches them as `ledger.errors`' own."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from anvil.errors import ChainUnavailable, RpcError, SwarmError  # noqa: F401 -- re-exported
from ledger import abi


class NotDeployed(SwarmError):
    """The Swarm contracts are not deployed on this chain."""


class InvalidInput(SwarmError):
    """An argument is malformed or out of range."""


class TransactionFailed(SwarmError):
    """A transaction or its simulation reverted."""

    def __init__(self, message: str, revert: DecodedRevert | None = None) -> None:
        super().__init__(message)
        self.revert = revert


@dataclass(frozen=True)
class DecodedRevert:
    contract: str | None  # the contract whose ABI defines the error
    name: str
    args: dict[str, Any]

    def sentence(self) -> str:
        shown = ", ".join(f"{k}={_show(v)}" for k, v in self.args.items())
        where = f"{self.contract} " if self.contract else ""
        hint = HINTS.get(self.name, "").format(**self.args)
        text = f"{where}reverted with {self.name}({shown})"
        return f"{text}: {hint}" if hint else f"{text}."


# What a user can do about the errors they can cause; `{name}` stands for the error's argument.
HINTS = {
    "ZeroAmount": "the amount must be greater than zero.",
    "InsufficientStake": "unstake at most your active stake (see `swarm provider status`).",
    "StillUnbonding": "wait until the release time has passed, then withdraw.",
    "NothingToWithdraw": "request an unstake first and wait out the unbonding period.",
    "NotRegistered": "register the provider first.",
    "AlreadyRegistered": "this provider is registered already; update its spec instead.",
    "StakeBelowMinimum": "stake at least the minimum for the declared GPUs.",
    "ProviderJailed": "wait until the jail time is served, then unjail.",
    "ProviderTombstoned": "a tombstoned provider can never take work again.",
    "ERC20InsufficientAllowance": "approve the contract to spend at least the amount first.",
    "ERC20InsufficientBalance": "the sender holds fewer tokens than the amount; lower it or fund the "
                                "account.",
    "EnforcedPause": "the contract is paused by its operators; try again after it is unpaused.",
    "AccessControlUnauthorizedAccount": "the sender lacks the role this call needs.",
    "DeadlineNotInFuture": "choose a deadline after the current chain time.",
    "DeadlineTooFar": "choose a deadline no later than {latest}, the market's maxJobDuration from now.",
    "PriceBelowFloor": "the price per unit is under the market's minPricePerUnit of {floor} wei; offer at "
                       "least that.",
    "DeadlineNotReached": "the buyer can reclaim only after the job's deadline.",
    "NotBuyer": "only the job's buyer may do this.",
    "WrongStatus": "the job is not in a state that allows this.",
    "PriceAboveCap": "the price per unit exceeds the buyer's cap.",
    "BadResultSignature": "the result of job {jobId} is not signed by its provider; send the result hash, "
                          "units "
    "and signature exactly as the provider gave them.",
    "AlreadySlashed": "the matcher has slashed a provider of this job already; send it again with a slash of "
                      "0.",
    "SlashWindowClosed": "the job's deadline has passed, so it can no longer slash; fail it with a slash of "
                         "0.",
    "ArbitrationClosed": "the arbitration period is over; settle the dispute with `swarm job reclaim`.",
    "ArbitrationPending": "the arbiter may still rule; settle the dispute after the arbitration period ends.",
    "DisputeWindowTooShort": "choose a dispute window of at least the market's minDisputeWindow.",
    "DisputeWindowTooLong": "choose a dispute window of at most the market's MAX_DISPUTE_WINDOW.",
    "DisputeBondOutOfRange": "choose a dispute bond from MIN_DISPUTE_BOND_BPS to MAX_DISPUTE_BOND_BPS.",
    "MinDisputeWindowOutOfRange": "choose a minimum dispute window from 1 second to MAX_DISPUTE_WINDOW.",
    "DisputeWindowClosed": "the job's dispute window has closed; its result can no longer be disputed.",
    "NothingToClaim": "everything proven for this provider has been claimed already.",
    "InvalidProof": "the proof does not match the current rewards root; fetch a fresh one.",
    "ClaimNotIncreasing": "everything proven for this provider has been claimed already.",
    "StakeOnHold": "a job or an epoch report can still slash this stake; withdraw after the hold ends.",
    "SlashDebtOutstanding": "this provider owes a slash the rate limit deferred; withdraw once it is "
                            "collected.",
    "OutOfRange": "the value is outside the parameter's safe range; choose one within it.",
    "ReportExpired": "the signed report expired; aggregate and sign the epoch again.",
    "WrongEpoch": "a report must be for the epoch after the last finalized one.",
    "ReportLapsed": "the report was not finalized in time; submit the epoch again.",
    "RecoveryNotYet": "a stuck report can be discarded only after the recovery delay.",
    "LapsedReportNotFromCommittee": "this report lapsed once; only a committee member's key may submit it "
                                    "again.",
    "EmptySlash": "every slash entry must order a penalty: bps, a jail or a tombstone.",
    "TreasuryIsAdmin": "the treasury may not be the admin; choose another treasury address.",
    "ReportingLongerThanUnbonding": "the challenge window plus maxReportLag must fit in the vault's "
                                    "unbonding period; shorten one of them first.",
    "UnbondingShorterThanReporting": "the unbonding period must cover the distributor's challenge window "
                                     "plus its maxReportLag; lengthen it or shorten those first.",
    "TimelockUnexpectedOperationState": "the operation is not in the state this needs (see `swarm chain "
                                        "admin status`).",
    "TimelockInsufficientDelay": "schedule with a delay of at least the timelock's minimum delay.",
    "TimelockUnauthorizedCaller": "only the timelock itself may call this; schedule it through the timelock.",
}

# Panic codes of Solidity's built-in checks.
PANICS = {
    0x01: "an assertion failed",
    0x11: "an arithmetic overflow or underflow",
    0x12: "a division by zero",
    0x21: "an invalid enum value",
    0x32: "an out-of-bounds array index",
}


def _show(value: Any) -> str:
    if isinstance(value, bytes):
        return "0x" + value.hex()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return str(value)


class ErrorDecoder:
    """Maps 4-byte selectors to custom errors across all Swarm (and OpenZeppelin) ABIs."""

    def __init__(self, abis: dict[str, list[dict]]) -> None:
        self._errors: dict[bytes, tuple[str, dict]] = {}
        for contract, items in abis.items():
            for item in items:
                if item.get("type") != "error":
                    continue
                self._errors.setdefault(abi.selector(item), (contract, item))

    def decode(self, data: bytes) -> DecodedRevert | None:
        if len(data) < 4:
            return None
        selector, payload = data[:4], data[4:]
        if selector == bytes.fromhex("08c379a0"):  # Error(string)
            reason = _decode(["string"], payload)
            return None if reason is None else DecodedRevert(None, "Error", {"reason": reason[0]})
        if selector == bytes.fromhex("4e487b71"):  # Panic(uint256)
            panic = _decode(["uint256"], payload)
            if panic is None:
                return None
            return DecodedRevert(
                None, "Panic", {"code": hex(panic[0]), "meaning": PANICS.get(panic[0], "unknown")}
            )
        found = self._errors.get(selector)
        if found is None:
            return None
        contract, item = found
        values = _decode([abi.type_string(i) for i in item["inputs"]], payload)
        if values is None:
            return None
        args: dict[str, Any] = {}
        for spec, value in zip(item["inputs"], values, strict=True):
            args[spec["name"] or f"arg{len(args)}"] = value
        return DecodedRevert(contract, item["name"], args)


def _decode(types: list[str], payload: bytes) -> tuple | None:
    """The revert's arguments; None when the bytes are not a valid encoding of them."""
    try:
        return abi.decode(types, payload)
    except abi.AbiError:
        return None
