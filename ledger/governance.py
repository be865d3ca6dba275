"""Admin changes through the deployment's timelock (docs/operations.md, "Changing a parameter").

Every Swarm contract's admin is a SwarmTimelock (OpenZeppelin's TimelockController): a proposer (the
deployer's key) schedules a call, anyone executes it once the timelock's delay has passed, and a proposer
may cancel it while it waits. An operation is named by its id, the timelock's
`hashOperation(target, 0, data, 0, salt)`; the chain keeps what was scheduled (its
CallScheduled and CallSalt events), so an operation can be executed from its id alone.

    call = admin_call(swarm, "StakingVault", "setUnbondingPeriod", 21 * 86_400)
    scheduled = schedule(swarm, proposer, call)      # ready at scheduled.ready_at
    ...                                              # the delay passes
    execute(swarm, anyone, call)

A call is tried from the timelock's address before it is scheduled, so a change that the
contract would refuse now is refused with the contract's own reason before anything is sent.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from ledger import abi
from ledger.client import Swarm
from ledger.errors import InvalidInput, RpcError, SwarmError, TransactionFailed
from ledger.units import parse_address, when

if TYPE_CHECKING:
    from ledger.tx import Sender, TxReceipt

TIMELOCK = "SwarmTimelock"
NO_PREDECESSOR = bytes(32)
CALL_SCHEDULED = abi.keccak256(b"CallScheduled(bytes32,uint256,address,uint256,bytes,bytes32,uint256)")
CALL_SALT = abi.keccak256(b"CallSalt(bytes32,bytes32)")
DONE_TIMESTAMP = 1  # what the timelock's getTimestamp returns for an executed operation


class OperationState(IntEnum):
    """TimelockController.OperationState; a cancelled operation is unset again."""

    UNSET = 0
    WAITING = 1
    READY = 2
    DONE = 3


@dataclass(frozen=True)
class AdminCall:
    """One call the timelock makes as the admin: `data` to `target`, under `salt`."""

    target: str
    data: bytes
    salt: bytes = NO_PREDECESSOR
    description: str = ""  # `Contract.function(args)`, for people

    @property
    def operation_id(self) -> bytes:
        """The timelock's hashOperation(target, 0, data, 0, salt)."""
        return abi.keccak256(abi.encode(
            ["address", "uint256", "bytes", "bytes32", "bytes32"],
            [self.target, 0, self.data, NO_PREDECESSOR, self.salt],
        ))


@dataclass(frozen=True)
class Operation:
    """An operation as the timelock holds it now."""

    id: bytes
    state: OperationState
    ready_at: int  # when it may be executed (0: not scheduled; 1: executed)
    call: AdminCall | None  # what it calls, when the chain's events show it

    def as_dict(self) -> dict[str, Any]:
        scheduled = self.state in (OperationState.WAITING, OperationState.READY)
        return {
            "id": "0x" + self.id.hex(),
            "state": self.state.name.lower(),
            "ready_at": self.ready_at if scheduled else None,
            "target": self.call.target if self.call else None,
            "call": self.call.description if self.call else None,
            "data": "0x" + self.call.data.hex() if self.call else None,
            "salt": "0x" + self.call.salt.hex() if self.call else None,
        }


# ── building a call ──────────────────────────────────────────────────────────
def admin_call(
    swarm: Swarm, contract: str, function: str, *args: Any, salt: bytes | None = None
) -> AdminCall:
    """`contract.function(*args)` as the timelock would make it; `salt` (32 bytes) tells apart
    two schedulings of the same call, a fresh random one by default."""
    item = _function(swarm, contract, function, len(args))
    types = [abi.type_string(p) for p in item["inputs"]]
    try:
        data = abi.selector(item) + abi.encode(types, list(args))
    except abi.AbiError as exc:
        raise InvalidInput(
            f"The arguments of {contract}.{function} do not fit {abi.signature(item)}: {exc}."
        ) from None
    return AdminCall(swarm.deployment.addresses[contract], data, _salt(salt),
                     f"{contract}.{function}({', '.join(_show(a) for a in args)})")


def admin_call_from_text(swarm: Swarm, contract: str, function: str, texts: list[str],
                         salt: bytes | None = None) -> AdminCall:
    """`admin_call` from arguments as a person types them: numbers in wei or seconds (decimal
    or 0x), addresses, true/false, 0x bytes or a role's name (SLASHER_ROLE), lists comma-separated."""
    item = _function(swarm, contract, function, len(texts))
    values = [_parse(swarm, contract, param, text) for param, text in zip(item["inputs"], texts, strict=True)]
    return admin_call(swarm, contract, function, *values, salt=salt)


def _function(swarm: Swarm, contract: str, function: str, arity: int) -> dict:
    if contract not in swarm.deployment.addresses:
        raise InvalidInput(
            f"{contract!r} is not a contract of this deployment; choose one of "
            f"{', '.join(sorted(swarm.deployment.addresses))}."
        )
    items = [i for i in swarm.artifacts[contract].abi if i["type"] == "function" and i["name"] == function]
    if not items:
        raise InvalidInput(f"{contract} has no function {function!r}; check its name in docs/contracts.md.")
    for item in items:
        if len(item["inputs"]) == arity:
            if item.get("stateMutability") in ("view", "pure"):
                raise InvalidInput(f"{contract}.{function} only reads; there is nothing to schedule.")
            return item
    wanted = " or ".join(abi.signature(i) for i in items)
    raise InvalidInput(f"{contract}.{function} takes the arguments of {wanted}, not {arity}.")


def _parse(swarm: Swarm, contract: str, param: dict, text: str) -> Any:
    kind, name = abi.type_string(param), param["name"] or "argument"
    if kind.endswith("[]"):
        inner = dict(param, type=kind[:-2])
        return [_parse(swarm, contract, inner, part) for part in text.split(",") if part.strip()]
    text = text.strip()
    if kind.startswith(("uint", "int")):
        try:
            value = int(text.replace("_", ""), 0)
        except ValueError:
            raise InvalidInput(f"{name} {text!r} is not a whole number; give it in wei or seconds.") from None
        if kind.startswith("uint") and value < 0:
            raise InvalidInput(f"{name} must not be negative, got {text!r}.")
        return value
    if kind == "address":
        return parse_address(text, name)
    if kind == "bool":
        if text.lower() not in ("true", "false", "1", "0"):
            raise InvalidInput(f"{name} {text!r} is not true or false.")
        return text.lower() in ("true", "1")
    if kind == "string":
        return text
    if kind.startswith("bytes"):
        if kind == "bytes32" and text.endswith("_ROLE"):
            return _role(swarm, contract, text)
        try:
            raw = bytes.fromhex(text.removeprefix("0x"))
        except ValueError:
            raise InvalidInput(f"{name} {text!r} is not 0x-prefixed hex.") from None
        if kind != "bytes" and len(raw) != int(kind[5:]):
            raise InvalidInput(f"{name} must be {kind[5:]} bytes of hex, got {len(raw)}.")
        return raw
    raise InvalidInput(f"{name} is a {kind}, which the command line does not take; schedule it from Python.")


def _role(swarm: Swarm, contract: str, name: str) -> bytes:
    if name == "DEFAULT_ADMIN_ROLE":
        return bytes(32)
    known = [i["name"] for i in swarm.artifacts[contract].abi
             if i["type"] == "function" and i["name"].endswith("_ROLE") and not i["inputs"]]
    if name not in known:
        raise InvalidInput(f"{contract} has no role {name}; its roles are {', '.join(sorted(known))}.")
    return bytes(swarm.read(contract, name))


def _salt(salt: bytes | None) -> bytes:
    if salt is None:
        return secrets.token_bytes(32)
    if len(salt) != 32:
        raise InvalidInput(f"A salt is 32 bytes, got {len(salt)}.")
    return bytes(salt)


def _show(value: Any) -> str:
    if isinstance(value, (bytes, bytearray)):
        return "0x" + bytes(value).hex()
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return str(value)


# ── the timelock ─────────────────────────────────────────────────────────────
def min_delay(swarm: Swarm) -> int:
    return int(swarm.read(TIMELOCK, "getMinDelay"))


def exit_bound(swarm: Swarm) -> tuple[bool, int]:
    """Whether the timelock is bound to the vault (off a devnet: it then refuses any change that
    would bring its delay within the bound), and the vault's exit bound: the longest a provider
    that asks for its stake back waits to hold it, whatever any role holds."""
    return _bound_to_vault(swarm), int(swarm.read("StakingVault", "exitBound"))


def _bound_to_vault(swarm: Swarm) -> bool:
    return int(str(swarm.read(TIMELOCK, "vault")), 16) != 0


def operation(swarm: Swarm, operation_id: bytes) -> Operation:
    """The operation `operation_id` as the timelock holds it, with its call when it was scheduled."""
    if len(operation_id) != 32:
        raise InvalidInput(f"An operation id is 32 bytes of hex, got {len(operation_id)} bytes.")
    state = OperationState(int(swarm.read(TIMELOCK, "getOperationState", operation_id)))
    ready_at = int(swarm.read(TIMELOCK, "getTimestamp", operation_id))
    return Operation(operation_id, state, ready_at, _scheduled_call(swarm, operation_id))


def operations(swarm: Swarm) -> list[Operation]:
    """Every operation scheduled on this deployment's timelock, oldest first (cancelled ones as unset)."""
    ids = dict.fromkeys(bytes.fromhex(log["topics"][1][2:]) for log in _logs(swarm, CALL_SCHEDULED))
    return [operation(swarm, i) for i in ids]


def schedule(swarm: Swarm, sender: Sender, call: AdminCall, delay: int | None = None) -> Operation:
    """Schedules `call` to be executable after `delay` seconds (the timelock's minimum by default);
    `sender` must be a proposer. Returns the operation, waiting (or ready, with no delay)."""
    delay = min_delay(swarm) if delay is None else delay
    existing = OperationState(int(swarm.read(TIMELOCK, "getOperationState", call.operation_id)))
    if existing != OperationState.UNSET:
        raise SwarmError(
            f"Operation 0x{call.operation_id.hex()} is {existing.name.lower()} already; schedule the call "
            "with another salt to make it again."
        )
    _try_as_admin(swarm, call)
    _check_exit_bound(swarm, call)
    timelock = swarm.contract(TIMELOCK).functions
    sender.send(timelock.schedule(call.target, 0, call.data, NO_PREDECESSOR, call.salt, delay))
    return operation(swarm, call.operation_id)


def execute(swarm: Swarm, sender: Sender, call: AdminCall) -> TxReceipt:
    """Executes a scheduled `call` whose delay has passed; anyone may."""
    current = operation(swarm, call.operation_id)
    _require_ready(swarm, current)
    timelock = swarm.contract(TIMELOCK).functions
    return sender.send(timelock.execute(call.target, 0, call.data, NO_PREDECESSOR, call.salt))


def execute_id(swarm: Swarm, sender: Sender, operation_id: bytes) -> tuple[Operation, TxReceipt]:
    """Executes the operation `operation_id`, its call read back from the chain."""
    current = operation(swarm, operation_id)
    _require_ready(swarm, current)
    if current.call is None:  # ready, so scheduled: only a node that pruned its logs lacks the event
        raise SwarmError(f"Operation 0x{operation_id.hex()} is ready, but this node keeps no CallScheduled "
                         "event for it; ask a node that keeps the chain's logs (an archive node).")
    return current, execute(swarm, sender, current.call)


def cancel(swarm: Swarm, sender: Sender, operation_id: bytes) -> TxReceipt:
    """Cancels a scheduled operation that has not been executed; `sender` must be a proposer."""
    current = operation(swarm, operation_id)
    if current.state not in (OperationState.WAITING, OperationState.READY):
        raise SwarmError(f"Operation 0x{operation_id.hex()} is {_state_text(current)}; only a scheduled, "
                         "unexecuted operation can be cancelled.")
    return sender.send(swarm.contract(TIMELOCK).functions.cancel(operation_id))


def enact(swarm: Swarm, sender: Sender, call: AdminCall) -> TxReceipt:
    """Schedules and executes `call` at once, on a timelock with no delay (a devnet's)."""
    delay = min_delay(swarm)
    if delay:
        raise SwarmError(
            f"The timelock's delay is {delay} s, so a change cannot take effect at once; schedule it and "
            "execute it once ready."
        )
    schedule(swarm, sender, call, 0)
    return execute(swarm, sender, call)


def _require_ready(swarm: Swarm, current: Operation) -> None:
    if current.state == OperationState.READY:
        return
    if current.state == OperationState.WAITING:
        wait = current.ready_at - swarm.chain.timestamp()
        raise SwarmError(
            f"Operation 0x{current.id.hex()} is not ready: it may be executed from {when(current.ready_at)}, "
            f"{max(wait, 1)} s from now."
        )
    raise SwarmError(
        f"Operation 0x{current.id.hex()} is {_state_text(current)}; there is nothing to execute."
    )


def _state_text(current: Operation) -> str:
    if current.state == OperationState.DONE:
        return "executed already"
    return "cancelled" if current.call else "not scheduled on this deployment's timelock"


def _try_as_admin(swarm: Swarm, call: AdminCall) -> None:
    """Runs the call from the timelock's address now: a change the contract refuses is refused here."""
    timelock = swarm.deployment.addresses[TIMELOCK]
    try:
        swarm.chain.rpc("eth_call", {"from": timelock, "to": call.target, "data": "0x" + call.data.hex()},
                        "latest")
    except RpcError as exc:
        decoded = swarm.decoder.decode(exc.revert_data) if exc.revert_data else None
        reason = decoded.sentence() if decoded else f"reverted: {exc.message}."
        what = call.description or "The call"
        raise TransactionFailed(f"{what} would fail as the admin now: {reason}", decoded) from None


# The changes that move the vault's exit bound or the timelock's delay, by selector: which term
# each sets. The timelock reverts such a change when it executes if the delay would no longer
# exceed the bound (SwarmTimelock); it is refused here before it is scheduled.
_BOUND_TERMS = {
    abi.keccak256(b"setUnbondingPeriod(uint64)")[:4]: ("StakingVault", "unbonding"),
    abi.keccak256(b"setChallengeWindow(uint64)")[:4]: ("RewardDistributor", "challenge"),
    abi.keccak256(b"setMaxReportLag(uint64)")[:4]: ("RewardDistributor", "lag"),
    abi.keccak256(b"updateDelay(uint256)")[:4]: (TIMELOCK, "delay"),
}


def _check_exit_bound(swarm: Swarm, call: AdminCall) -> None:
    """Refuses a change after which the timelock's delay would not exceed the vault's exit bound
    (the unbonding period plus the challenge window plus the report lag), on a timelock bound to
    its vault."""
    term = _BOUND_TERMS.get(call.data[:4])
    if term is None or call.target.lower() != swarm.deployment.addresses[term[0]].lower():
        return
    if not _bound_to_vault(swarm):
        return  # a devnet's timelock, unbound
    (value,) = abi.decode(["uint256"], call.data[4:])
    terms = {"unbonding": int(swarm.read("StakingVault", "unbondingPeriod")),
             "challenge": int(swarm.read("RewardDistributor", "challengeWindow")),
             "lag": int(swarm.read("RewardDistributor", "maxReportLag")),
             "delay": int(swarm.read(TIMELOCK, "getMinDelay"))}
    terms[term[1]] = int(value)
    bound = terms["unbonding"] + terms["challenge"] + terms["lag"]
    if terms["delay"] <= bound:
        what = call.description or "The call"
        raise TransactionFailed(
            f"{what} would leave the timelock's delay ({terms['delay']} s) within the time a provider waits "
            f"to leave (unbonding + challenge window + report lag = {bound} s), so the timelock would refuse "
            "it when it runs; raise the delay first (SwarmTimelock.updateDelay) or choose a smaller value."
        )


def _scheduled_call(swarm: Swarm, operation_id: bytes) -> AdminCall | None:
    topic = "0x" + operation_id.hex()
    scheduled = _logs(swarm, CALL_SCHEDULED, topic)
    if not scheduled:
        return None
    target, _value, data, _predecessor, _delay = abi.decode(
        ["address", "uint256", "bytes", "bytes32", "uint256"], bytes.fromhex(scheduled[-1]["data"][2:])
    )
    salts = _logs(swarm, CALL_SALT, topic)
    salt = bytes.fromhex(salts[-1]["data"][2:66]) if salts else NO_PREDECESSOR
    data = bytes(data)
    return AdminCall(abi.to_checksum_address(target), data, salt, _describe(swarm, target, data))


def _describe(swarm: Swarm, target: str, data: bytes) -> str:
    """`Contract.function(args)` of a call to one of the deployment's contracts, else its selector."""
    names = {a.lower(): n for n, a in swarm.deployment.addresses.items()}
    contract = names.get(target.lower())
    if contract is None:
        return f"{target}: 0x{data[:4].hex()}"
    for item in swarm.artifacts[contract].abi:
        if item["type"] == "function" and abi.selector(item) == data[:4]:
            try:
                values = abi.decode([abi.type_string(p) for p in item["inputs"]], data[4:])
            except abi.AbiError:
                break
            return f"{contract}.{item['name']}({', '.join(_show(v) for v in values)})"
    return f"{contract}: 0x{data[:4].hex()}"


def _logs(swarm: Swarm, event: bytes, operation_topic: str | None = None) -> list[dict]:
    topics: list[Any] = ["0x" + event.hex()]
    if operation_topic is not None:
        topics.append(operation_topic)
    return swarm.chain.rpc("eth_getLogs", {
        "address": swarm.deployment.addresses[TIMELOCK],
        "fromBlock": hex(swarm.deployment.block_number),
        "toBlock": "latest",
        "topics": topics,
    })
