"""Deploy the contracts to any chain, once: addresses go to
$SWARM_HOME/deployments/<chainId>.json and a second deploy reuses them.

Every contract's admin is a SwarmTimelock (OpenZeppelin's TimelockController) deployed first: the
deployer's key is its one proposer, anyone executes an operation once its delay has passed, and the timelock
administers itself. The deployer's key therefore changes nothing directly after deployment
(ledger/governance.py schedules and executes through the timelock); the guardian pauses and
vetoes at once. Every role the contracts need is granted by their constructors, so a deploy
sends no grant afterwards."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from anvil.accounts import dev_account, dev_accounts
from ledger.artifacts import CONTRACTS, Artifacts, load_artifacts
from ledger.chain import Chain
from ledger.errors import ErrorDecoder, InvalidInput, SwarmError, TransactionFailed
from ledger.units import ONE, format_amount

if TYPE_CHECKING:
    from ledger.tx import Sender

# Devnet committee: public keys derived from anvil's test mnemonic, far from the funded accounts.
DEVNET_COMMITTEE_INDICES = (100, 101, 102, 103)
DEVNET_THRESHOLD = 3
# Devnet treasury: another public key of the mnemonic, neither the deployer nor an account the
# devnet funds (providers and buyers), so the fees and slashes it receives stand apart.
DEVNET_TREASURY_INDEX = 110
DEVNET_ACCOUNT_FUNDING = 1_000_000 * ONE
DEVNET_REWARD_POOL = 10_000_000 * ONE
ZERO_ADDRESS = "0x" + "00" * 20


@dataclass(frozen=True)
class DeployParams:
    """Constructor parameters of the timelock and the five contracts."""

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
    # The longest from a misconduct to the report that slashes it; with the challenge window
    # within the unbonding period, and the oracle's epochs at most half of it.
    max_report_lag: int = 2 * 86_400
    fee_bps: int = 250
    dispute_window: int = 2 * 86_400
    min_dispute_window: int = 86_400  # the floor under every dispute window the admin may set, for ever
    dispute_bond_bps: int = 1_000  # a buyer's dispute bond: 10% of the job's payment
    min_dispute_bond: int = ONE  # and never less than this
    max_job_duration: int = 30 * 86_400  # a deadline at most this far from the posting
    # No job runs for free: a micro-SWARM a unit (a CPU- or GPU-second), under every price the
    # examples, the demo and the market's default ask.
    min_price_per_unit: int = 10**12
    # How long a buyer's thawed serving deposit stays redeemable before the buyer may take it
    # back: the providers' sites redeem within it (fixed at deployment; at most 30 days).
    serving_thaw_period: int = 2 * 86_400
    initial_supply: int = 500_000_000 * ONE
    # Every admin change waits this long in public: longer than the unbonding period plus the
    # challenge window plus the report lag, so a provider can leave before a change it refuses.
    timelock_delay: int = 21 * 86_400
    guardian: str | None = None  # pauses and vetoes at once; default: the deployer (on a devnet)
    matcher: str | None = None  # the market service's key (MATCHER_ROLE); default: the deployer (on a devnet)
    arbiter: str | None = None  # rules on disputes (ARBITER_ROLE); default: the deployer (on a devnet)
    treasury: str | None = None  # receives fees and slash shares; required off devnets, never the deployer

    @classmethod
    def devnet(cls) -> DeployParams:
        """Short windows so a devnet shows a whole lifecycle in minutes; its timelock has no
        delay, so an admin change is scheduled and executed at once."""
        return cls(
            committee=tuple(dev_account(i).address for i in DEVNET_COMMITTEE_INDICES),
            threshold=DEVNET_THRESHOLD,
            unbonding_period=300,
            min_unbonding_period=300,
            challenge_window=30,
            min_challenge_window=10,
            max_report_lag=240,
            serving_thaw_period=MIN_THAW_PERIOD,  # the escrow's floor
            dispute_window=60,
            min_dispute_window=30,
            timelock_delay=0,
            treasury=dev_account(DEVNET_TREASURY_INDEX).address,
        )

    @property
    def reporting_s(self) -> int:
        """How long a report's slash may take to reach the chain: the challenge window plus the report lag."""
        return self.challenge_window + self.max_report_lag


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
        """Whether every contract is recorded and its address still holds code on `chain` (a
        deployment made before the timelock administered the contracts is not)."""
        if not set(CONTRACTS) <= set(self.addresses):
            return False
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
    params = _resolve(params, chain, sender.address)
    _check_params(params, chain, sender.address)

    deployment = _deploy_contracts(chain, sender, artifacts, params)
    funded: tuple[str, ...] = ()
    if chain.is_devnet:
        funded = _fund_devnet(chain, sender, artifacts, deployment)
    deployment.save(home)
    return DeployResult(deployment, created=True, stale=False, funded=funded)


def _resolve(params: DeployParams, chain: Chain, deployer: str) -> DeployParams:
    """The parameters with their defaults filled in: the deployer as guardian, matcher and
    arbiter (refused off a devnet, see `_check_roles`) and, on a devnet, the devnet's treasury."""
    treasury = params.treasury
    if treasury is None and chain.is_devnet:
        treasury = dev_account(DEVNET_TREASURY_INDEX).address
    return replace(params, guardian=params.guardian or deployer, matcher=params.matcher or deployer,
                   arbiter=params.arbiter or deployer, treasury=treasury)


def _check_roles(params: DeployParams, deployer: str) -> None:
    """Off a devnet no key holds two of the roles that could otherwise act together: the
    timelock's proposer (the deployer), the matcher, the arbiter and the guardian."""
    roles = {"the timelock's proposer (the deployer)": deployer, "the matcher": params.matcher,
             "the arbiter": params.arbiter, "the guardian": params.guardian}
    holders: dict[str, list[str]] = {}
    for role, key in roles.items():
        holders.setdefault(str(key).lower(), []).append(role)
    shared = [(key, names) for key, names in holders.items() if len(names) > 1]
    if shared:
        key, names = shared[0]
        raise SwarmError(
            f"One key ({key}) would be {' and '.join(names)}; off a devnet each of the proposer, matcher, "
            "arbiter and guardian needs a key of its own: pass --matcher, --arbiter and --guardian with "
            "addresses other than the deployer's and each other's (docs/operations.md, the key ceremony)."
        )


# The contracts' ceilings on what a deployment may set (JobMarket.MAX_MIN_DISPUTE_BOND,
# JobMarket.MAX_MIN_PRICE_PER_UNIT, StakingVault.MAX_BUCKET_CAPACITY), checked before anything is sent.
MAX_MIN_DISPUTE_BOND = 10 * ONE
MAX_MIN_PRICE_PER_UNIT = 10**15
MAX_BUCKET_CAPACITY = 100_000_000 * ONE
MIN_THAW_PERIOD, MAX_THAW_PERIOD = 3_600, 30 * 86_400  # ServingEscrow's bounds


def _check_params(params: DeployParams, chain: Chain, deployer: str) -> None:
    n = len(params.committee)
    if not n // 2 < params.threshold <= n:
        raise SwarmError(
            f"A committee of {n} signers cannot have threshold {params.threshold}; "
            f"choose a threshold from {n // 2 + 1} (a majority) to {n}."
        )
    if params.reporting_s > params.unbonding_period:
        raise SwarmError(
            f"The challenge window ({params.challenge_window} s) plus max_report_lag "
            f"({params.max_report_lag} s) exceeds the unbonding period ({params.unbonding_period} s), so a "
            "slash could arrive after the stake has left; lower max_report_lag to at most "
            f"{params.unbonding_period - params.challenge_window} s."
        )
    if params.treasury is None:
        raise SwarmError(
            f"Chain {chain.chain_id} is not a devnet, so Swarm will not pick its treasury; pass --treasury "
            "with the address that receives fees and slashes (not the deployer's)."
        )
    if params.treasury.lower() == deployer.lower():
        raise SwarmError(
            f"The treasury {params.treasury} is the deployer, whose key proposes every admin change; pass "
            "--treasury with another address."
        )
    if not MIN_THAW_PERIOD <= params.serving_thaw_period <= MAX_THAW_PERIOD:
        raise SwarmError(
            f"A serving thaw period of {params.serving_thaw_period} s is outside 1 hour to 30 days (the "
            "escrow's bounds); providers need it to redeem what buyers signed before taking their deposit "
            "back."
        )
    ceilings = (
        ("min_dispute_bond", "--min-dispute-bond", params.min_dispute_bond, MAX_MIN_DISPUTE_BOND),
        ("min_price_per_unit", "--min-price-per-unit", params.min_price_per_unit, MAX_MIN_PRICE_PER_UNIT),
        ("slash_bucket_capacity", None, params.slash_bucket_capacity, MAX_BUCKET_CAPACITY),
    )
    for name, flag, value, ceiling in ceilings:
        if not 0 < value <= ceiling:
            at_most = format_amount(ceiling)
            fix = f"pass {flag} of at most {at_most}" if flag else f"keep it within {ceiling} wei"
            raise SwarmError(f"A {name} of {format_amount(value)} is outside what the contracts allow (more "
                             f"than 0, at most {format_amount(ceiling)}); {fix}.")
    needed = params.unbonding_period + params.reporting_s
    if not chain.is_devnet and params.timelock_delay <= needed:
        raise SwarmError(
            f"A timelock_delay of {params.timelock_delay} s does not exceed "
            f"the unbonding period plus the challenge window plus max_report_lag ({needed} s), so a provider "
            "could not leave before an admin change takes effect; pass --timelock-delay of more than "
            f"{needed} s."
        )
    if not chain.is_devnet:
        _check_roles(params, deployer)


def create_address(sender: str, nonce: int) -> str:
    """The address of the contract `sender` creates with transaction number `nonce`."""
    import rlp
    from eth_utils import keccak, to_checksum_address

    return to_checksum_address(keccak(rlp.encode([bytes.fromhex(sender[2:]), nonce]))[12:])


def _deploy_contracts(chain: Chain, sender: Sender, artifacts: Artifacts, params: DeployParams) -> Deployment:
    w3 = chain.w3
    deployer = sender.address
    if params.guardian is None or params.treasury is None:  # _resolve fills both, _check_params checks them
        raise InvalidInput("A deployment needs a guardian and a treasury; pass --guardian and --treasury.")

    def create(name: str, *args) -> str:
        art = artifacts[name]
        receipt = sender.send(w3.eth.contract(abi=art.abi, bytecode=art.bytecode).constructor(*args))
        if receipt.contract_address is None:
            raise TransactionFailed(f"Creating {name} in transaction {receipt.tx_hash} made no contract; "
                                    "check that the node runs the EVM version the contracts were compiled "
                                    "for.")
        return receipt.contract_address

    def next_created(after: int) -> str:
        """The address of the contract the deployer creates `after` transactions from now."""
        return create_address(deployer, w3.eth.get_transaction_count(deployer, "pending") + after)

    start_block = w3.eth.block_number
    # The deployer proposes, anyone executes a ready operation, and the timelock is its own admin.
    timelock = create("SwarmTimelock", params.timelock_delay, [deployer], [ZERO_ADDRESS], ZERO_ADDRESS)
    token = create("SwarmToken", timelock, deployer, params.initial_supply)
    # The vault names the distributor and the market, created by the next two transactions: the
    # distributor as the only contract that records reward claims (it checks so at construction),
    # both as its slashers.
    distributor_at, market_at = next_created(1), next_created(2)
    vault = create(
        "StakingVault",
        token,
        timelock,
        (
            params.min_stake_per_gpu,
            params.unbonding_period,
            params.min_unbonding_period,
            params.max_slash_bps,
            params.max_slash_bps_per_period,
            params.treasury_share_bps,
            params.treasury,
            params.slash_bucket_capacity,
            params.slash_refill_per_second,
            distributor_at,
            params.guardian,
            [distributor_at, market_at],
        ),
    )
    distributor = create(
        "RewardDistributor",
        token,
        vault,
        timelock,
        params.guardian,
        list(params.committee),
        params.threshold,
        params.challenge_window,
        params.min_challenge_window,
        params.max_report_lag,
    )
    # On a devnet the deployer runs the market service and arbitrates; elsewhere each role has a
    # key of its own (`_check_roles`).
    market = create(
        "JobMarket",
        token,
        vault,
        timelock,
        (
            params.guardian,
            params.matcher,
            params.arbiter,
            params.treasury,
            params.fee_bps,
            params.dispute_window,
            params.min_dispute_window,
            params.dispute_bond_bps,
            params.min_dispute_bond,
            params.max_job_duration,
            params.min_price_per_unit,
        ),
    )
    # No admin: the serving escrow's token and thaw period are fixed here for good.
    serving = create("ServingEscrow", token, params.serving_thaw_period)
    if (distributor, market) != (distributor_at, market_at):
        raise SwarmError(
            f"The distributor and the market were created at {distributor} and {market}, not at the "
            "addresses the vault was given; another transaction of the deployer came between. Deploy again "
            "with --force."
        )
    if not chain.is_devnet:
        # From here on the timelock refuses any change that would bring its delay within the time
        # a provider waits to leave (a devnet's timelock, with no delay, stays unbound).
        bound = w3.eth.contract(address=timelock, abi=artifacts["SwarmTimelock"].abi).functions
        sender.send(bound.bindVault(vault))

    return Deployment(
        chain_id=chain.chain_id,
        addresses={
            "SwarmTimelock": timelock,
            "SwarmToken": token,
            "StakingVault": vault,
            "RewardDistributor": distributor,
            "JobMarket": market,
            "ServingEscrow": serving,
        },
        deployer=deployer,
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
