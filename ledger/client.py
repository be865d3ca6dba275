"""The deployed Swarm contracts on one chain, bound and ready to call."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from ledger import abi
from ledger.artifacts import CONTRACTS, Artifacts, load_artifacts
from ledger.chain import Chain, connect
from ledger.config import Settings
from ledger.deploy import Deployment
from ledger.errors import ErrorDecoder, NotDeployed, RpcError, TransactionFailed

if TYPE_CHECKING:
    from web3.contract import Contract

    from ledger.tx import Sender, TxReceipt


@dataclass(frozen=True)
class Event:
    contract: str
    name: str
    args: dict[str, Any]
    log_index: int


class Swarm:
    """The contracts of one deployment, their senders and their events.

    `read` calls a view function through the light client; `contract(...)` (and `token`,
    `vault`, …) are web3 contracts, for transactions."""

    def __init__(self, chain: Chain, deployment: Deployment, artifacts: Artifacts | None = None) -> None:
        self.chain = chain
        self.deployment = deployment
        self.artifacts = artifacts or load_artifacts()
        self.decoder = ErrorDecoder(self.artifacts.errors_abi)
        self._senders: dict[str, Sender] = {}

    @classmethod
    def open(cls, settings: Settings, expected_chain_id: int | None = None) -> Swarm:
        """Connects to SWARM_RPC_URL and loads this chain's deployment."""
        chain = connect(settings.rpc_url, expected_chain_id)
        deployment = Deployment.load(settings.home, chain.chain_id)
        if deployment is None:
            raise NotDeployed(
                f"Swarm is not deployed on chain {chain.chain_id} ({settings.rpc_url}) for SWARM_HOME "
                f"{settings.home}; run `swarm chain deploy` first."
            )
        missing = sorted(set(CONTRACTS) - set(deployment.addresses))
        if missing:
            raise NotDeployed(
                f"The deployment recorded in {Deployment.path(settings.home, chain.chain_id)} has no "
                f"{', '.join(missing)} (it predates the timelock that administers the contracts); run "
                "`swarm chain deploy --force` to deploy them anew."
            )
        if not deployment.is_live(chain):
            raise NotDeployed(
                f"The contracts recorded in {Deployment.path(settings.home, chain.chain_id)} have no code on "
                f"chain {chain.chain_id} (was the chain reset?); run `swarm chain deploy` again."
            )
        return cls(chain, deployment)

    # ── contracts ────────────────────────────────────────────────────────────
    def contract(self, name: str) -> Contract:
        return self._contracts[name]

    @cached_property
    def _contracts(self) -> dict[str, Contract]:
        return {
            name: self.chain.w3.eth.contract(address=address, abi=self.artifacts[name].abi)
            for name, address in self.deployment.addresses.items()
        }

    @property
    def token(self) -> Contract:
        return self.contract("SwarmToken")

    @property
    def vault(self) -> Contract:
        return self.contract("StakingVault")

    @property
    def distributor(self) -> Contract:
        return self.contract("RewardDistributor")

    @property
    def market(self) -> Contract:
        return self.contract("JobMarket")

    # ── senders and reads ────────────────────────────────────────────────────
    def sender(self, key: bytes) -> Sender:
        """The one sender for `key` (so its nonces stay in order)."""
        from ledger.tx import Sender  # web3 and eth-account: the instant reads (`token balance`) never send

        fresh = Sender(self.chain, key, self.decoder)
        return self._senders.setdefault(fresh.address, fresh)

    def read(self, contract: str, function: str, *args: Any, block: int | str = "latest") -> Any:
        """Calls the view `contract.function(*args)`: one value, or a tuple for several outputs.

        A revert raises TransactionFailed with the decoded error as its sentence."""
        item = self._functions.get((contract, function, len(args)))
        if item is None:
            raise TypeError(f"{contract} has no function {function} taking {len(args)} arguments")
        data = abi.selector(item) + abi.encode([abi.type_string(p) for p in item["inputs"]], args)
        try:
            returned = self.chain.call(self.deployment.addresses[contract], data, block)
        except RpcError as exc:
            decoded = self.decoder.decode(exc.revert_data) if exc.revert_data else None
            reason = decoded.sentence() if decoded else f"reverted: {exc.message}."
            raise TransactionFailed(f"{contract}.{function}: {reason}", decoded) from None
        values = abi.decode([abi.type_string(p) for p in item["outputs"]], returned)
        return values[0] if len(values) == 1 else values

    @cached_property
    def _functions(self) -> dict[tuple[str, str, int], dict]:
        return {
            (name, item["name"], len(item["inputs"])): item
            for name in self.deployment.addresses
            for item in self.artifacts[name].abi
            if item["type"] == "function"
        }

    def balance_of(self, address: str) -> int:
        return int(self.read("SwarmToken", "balanceOf", address))

    # ── events ───────────────────────────────────────────────────────────────
    @cached_property
    def _event_abis(self) -> dict[tuple[str, bytes], tuple[str, dict]]:
        table = {}
        for name, address in self.deployment.addresses.items():
            for item in self.artifacts[name].abi:
                if item["type"] == "event":
                    table[(address.lower(), abi.keccak256(abi.signature(item).encode()))] = (name, item)
        return table

    def events(self, receipt: TxReceipt, name: str | None = None) -> list[Event]:
        """The Swarm events a transaction emitted, decoded, optionally only those named `name`."""
        from web3._utils.events import get_event_data

        found = []
        for log in receipt.logs:
            if not log["topics"]:
                continue
            key = (log["address"].lower(), bytes(log["topics"][0]))
            if key not in self._event_abis:
                continue
            contract, abi = self._event_abis[key]
            data = get_event_data(self.chain.w3.codec, abi, log)
            if name is None or data["event"] == name:
                found.append(Event(contract, data["event"], dict(data["args"]), int(log["logIndex"])))
        return found
