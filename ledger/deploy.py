"""Deploy the four contracts to any chain, once: addresses go to
$SWARM_HOME/deployments/<chainId>.json and a second deploy reuses them."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from anvil.accounts import dev_account, dev_accounts
from ledger.artifacts import Artifacts, load_artifacts
from ledger.chain import Chain
from ledger.errors import ErrorDecoder, SwarmError
from ledger.units import ONE

if TYPE_CHECKING:
    from ledger.tx import Sender

# Devnet committee: public keys derived from anvil's test mnemonic, far from the funded accounts.
DEVNET_COMMITTEE_INDICES = (100, 101, 102, 103)
DEVNET_THRESHOLD = 3
DEVNET_ACCOUNT_FUNDING = 1_000_000 * ONE
DEVNET_REWARD_POOL = 10_000_000 * ONE



@dataclass(frozen=True)
class DeployParams:
    """Constructor parameters of the four contracts."""

    committee: tuple[str, ...]
    threshold: int
    min_stake_per_gpu: int = 1_000 * ONE
    unbonding_period: int = 14 * 86_400
    min_unbonding_period: int = 7 * 86_400  # the floor, fixed at deployment
    max_slash_bps: int = 5_000
    max_slash_bps_per_period: int = 7_500  # one slasher, one provider, 30 days
    treasury_share_bps: int = 5_000
    slash_bucket_capacity: int = 1_000_000 * ONE
    slash_refill_per_second: int = 12 * ONE  # about a million tokens a day
    challenge_window: int = 86_400
    min_challenge_window: int = 12 * 3_600  # the floor, fixed at deployment
    fee_bps: int = 250
    dispute_window: int = 2 * 86_400
    min_dispute_window: int = 86_400  # the floor under every dispute window the admin may set, for ever
    dispute_bond_bps: int = 1_000  # a buyer's dispute bond: 10% of the job's payment
    initial_supply: int = 500_000_000 * ONE
    treasury: str | None = None  # default: the deployer

    @classmethod
    def devnet(cls) -> DeployParams:
        """Short windows so a devnet shows a whole lifecycle in minutes."""
        return cls(
            committee=tuple(dev_account(i).address for i in DEVNET_COMMITTEE_INDICES),
            threshold=DEVNET_THRESHOLD,
            unbonding_period=300,
            min_unbonding_period=300,
            challenge_window=30,
            min_challenge_window=10,
            dispute_window=60,
            min_dispute_window=30,
        )


def devnet_committee_keys() -> list[bytes]:
    """The devnet committee's keys (public test keys; devnet only)."""
    return [dev_account(i).key for i in DEVNET_COMMITTEE_INDICES]


@dataclass
class Deployment:
    chain_id: int
    addresses: dict[str, str]
    deployer: str
    block_number: int
    source_hash: str
    params: dict
    deployed_at: float = field(default_factory=time.time)

    @staticmethod
    def path(home: Path, chain_id: int) -> Path:
        return home / "deployments" / f"{chain_id}.json"

    @classmethod
    def load(cls, home: Path, chain_id: int) -> Deployment | None:
        path = cls.path(home, chain_id)
        if not path.exists():
            return None
        try:
            return cls(**json.loads(path.read_text()))
        except (json.JSONDecodeError, TypeError) as exc:
            raise SwarmError(
                f"{path} is not a Swarm deployment file ({exc}); remove it and deploy again."
            ) from exc

    def save(self, home: Path) -> Path:
        path = self.path(home, self.chain_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(path)
        return path

    def is_live(self, chain: Chain) -> bool:
        """Whether every recorded address still holds code on `chain`."""
        return all(len(chain.code(a)) > 0 for a in self.addresses.values())


@dataclass(frozen=True)
class DeployResult:
    deployment: Deployment
    created: bool  # False: an existing deployment was reused
    stale: bool  # the sources changed since this deployment was made
    funded: tuple[str, ...] = ()  # devnet accounts given tokens


def deploy(
    chain: Chain,
    sender: Sender,
    home: Path,
    params: DeployParams | None = None,
    force: bool = False,
) -> DeployResult:
    """Deploys and wires the contracts unless a live deployment exists on this chain."""
    artifacts = load_artifacts()
    existing = Deployment.load(home, chain.chain_id)
    if existing is not None and not force and existing.is_live(chain):
        return DeployResult(existing, created=False, stale=existing.source_hash != artifacts.source_hash)
    if params is None:
        if not chain.is_devnet:
            raise SwarmError(
                f"Chain {chain.chain_id} is not a devnet, so Swarm will not pick its oracle committee; "
                "pass the committee's addresses and threshold explicitly."
            )
        params = DeployParams.devnet()
    _check_params(params)

    deployment = _deploy_contracts(chain, sender, artifacts, params)
    funded: tuple[str, ...] = ()
    if chain.is_devnet:
        funded = _fund_devnet(chain, sender, artifacts, deployment)
    deployment.save(home)
    return DeployResult(deployment, created=True, stale=False, funded=funded)


def _check_params(params: DeployParams) -> None:
    n = len(params.committee)
    if not n // 2 < params.threshold <= n:
        raise SwarmError(
            f"A committee of {n} signers cannot have threshold {params.threshold}; "
            f"choose a threshold from {n // 2 + 1} (a majority) to {n}."
        )


def create_address(sender: str, nonce: int) -> str:
    """The address of the contract `sender` creates with transaction number `nonce`."""
    import rlp
    from eth_utils import keccak, to_checksum_address

    return to_checksum_address(keccak(rlp.encode([bytes.fromhex(sender[2:]), nonce]))[12:])


def _deploy_contracts(chain: Chain, sender: Sender, artifacts: Artifacts, params: DeployParams) -> Deployment:
    w3 = chain.w3
    admin = sender.address
    treasury = params.treasury or admin

    def create(name: str, *args) -> str:
        art = artifacts[name]
        receipt = sender.send(w3.eth.contract(abi=art.abi, bytecode=art.bytecode).constructor(*args))
        assert receipt.contract_address is not None  # a creation's receipt names what it created
        return receipt.contract_address

    start_block = w3.eth.block_number
    token = create("SwarmToken", admin, admin, params.initial_supply)
    # The vault names the distributor, created by the very next transaction, as the only
    # contract that records reward claims; the distributor checks it at construction.
    expected_distributor = create_address(admin, w3.eth.get_transaction_count(admin, "pending") + 1)
    vault = create(
        "StakingVault",
        token,
        admin,
        (
            params.min_stake_per_gpu,
            params.unbonding_period,
            params.min_unbonding_period,
            params.max_slash_bps,
            params.max_slash_bps_per_period,
            params.treasury_share_bps,
            treasury,
            params.slash_bucket_capacity,
            params.slash_refill_per_second,
            expected_distributor,
        ),
    )
    distributor = create(
        "RewardDistributor",
        token,
        vault,
        admin,
        list(params.committee),
        params.threshold,
        params.challenge_window,
        params.min_challenge_window,
    )
    market = create(
        "JobMarket",
        token,
        vault,
        admin,
        treasury,
        params.fee_bps,
        params.dispute_window,
        params.min_dispute_window,
        params.dispute_bond_bps,
    )

    vault_c = w3.eth.contract(address=vault, abi=artifacts["StakingVault"].abi)
    market_c = w3.eth.contract(address=market, abi=artifacts["JobMarket"].abi)
    slasher = vault_c.functions.SLASHER_ROLE().call()
    sender.send(vault_c.functions.grantRole(slasher, distributor))
    sender.send(vault_c.functions.grantRole(slasher, market))
    # The deployer runs the market service on a fresh deployment; hand these roles on later.
    sender.send(market_c.functions.grantRole(market_c.functions.MATCHER_ROLE().call(), admin))
    sender.send(market_c.functions.grantRole(market_c.functions.ARBITER_ROLE().call(), admin))

    return Deployment(
        chain_id=chain.chain_id,
        addresses={
            "SwarmToken": token,
            "StakingVault": vault,
            "RewardDistributor": distributor,
            "JobMarket": market,
        },
        deployer=admin,
        block_number=start_block + 1,
        source_hash=artifacts.source_hash,
        params={k: v for k, v in asdict(params).items() if k != "committee"}
        | {"committee": list(params.committee)},
    )


def _fund_devnet(
    chain: Chain, sender: Sender, artifacts: Artifacts, deployment: Deployment
) -> tuple[str, ...]:
    """Gives each of anvil's ten dev accounts tokens and fills the reward pool."""
    w3 = chain.w3
    token = w3.eth.contract(address=deployment.addresses["SwarmToken"], abi=artifacts["SwarmToken"].abi)
    distributor = w3.eth.contract(
        address=deployment.addresses["RewardDistributor"], abi=artifacts["RewardDistributor"].abi
    )
    funded = []
    for account in dev_accounts():
        if account.address == sender.address:
            continue
        sender.send(token.functions.transfer(account.address, DEVNET_ACCOUNT_FUNDING))
        funded.append(account.address)
    sender.send(token.functions.approve(distributor.address, DEVNET_REWARD_POOL))
    sender.send(distributor.functions.fund(DEVNET_REWARD_POOL))
    return tuple(funded)


def error_decoder() -> ErrorDecoder:
    return ErrorDecoder(load_artifacts().errors_abi)
