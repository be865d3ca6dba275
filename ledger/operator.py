"""A provider's on-chain operations as a Python API; `swarm provider` is a face over it (docs/cli.md).

    from ledger.units import ONE
    from ledger.operator import Provider

    provider = Provider.open(account=1)             # a devnet's dev account, or key="provider"
    provider.register("H100", gpus=8, vram_gb=80, price=ONE // 400)   # asking 0.0025 SWARM a GPU-second
    provider.stake(8_000 * ONE)                     # amounts are wei
    print(provider.status().eligible)               # True: staked to the minimum, not jailed

Each operation checks what StakingVault or RewardDistributor would refuse before it signs, so a
refused operation sends nothing and raises a `SwarmError` (`InvalidInput` for a bad argument)
with one sentence; each returns a frozen dataclass of what happened, amounts in wei and times in
unix seconds. The ledger database that `claim` and `status` read is SWARM_DB_URL's, or
$SWARM_HOME/ledger.db. Light to import: no Ray, no web3 until something is signed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from core.hardware import GPU_MODELS, model_of
from ledger import stake
from ledger.client import Swarm
from ledger.config import Settings
from ledger.errors import InvalidInput, SwarmError
from ledger.indexer.rewards import reward_leaf
from ledger.reader import read_ledger
from ledger.signer import open_signer
from ledger.specs import load_spec, store_spec
from ledger.stake import HardwareSpec, ProviderInfo
from ledger.units import duration, format_amount, parse_address, when

if TYPE_CHECKING:
    from ledger.tx import Sender, TxReceipt


@dataclass(frozen=True)
class Registered:
    provider: str
    spec: HardwareSpec
    spec_hash: str  # 0x…, the keccak of the spec's JSON, stored under it in $SWARM_HOME/specs
    min_stake_wei: int  # what the declared GPUs need staked
    updated: bool  # declared anew by a registered provider
    tx: str


@dataclass(frozen=True)
class Sent:
    """A provider's transaction, and its stake right after it."""

    provider: str
    tx: str
    block: int
    stake_wei: int
    unbonding_wei: int
    unbonding_release: int | None  # the latest unstake's release (kept after its withdrawal); None: never
    slash_debt_wei: int  # slashes the network's rate limit deferred, still owed


@dataclass(frozen=True)
class Staked(Sent):
    amount_wei: int


@dataclass(frozen=True)
class Unstaking(Sent):
    amount_wei: int  # this request's; `unbonding_wei` is all that unbonds now


@dataclass(frozen=True)
class Withdrawn(Sent):
    amount_wei: int  # paid to the provider's wallet


@dataclass(frozen=True)
class Unjailed(Sent):
    """Back to work: eligible for jobs again."""


@dataclass(frozen=True)
class Claimed(Sent):
    amount_wei: int  # paid now: earned to `epoch`, less what was claimed before
    cumulative_wei: int  # all the provider has earned to `epoch`
    epoch: int


S = TypeVar("S", bound=Sent)


@dataclass(frozen=True)
class ProviderStatus:
    """A provider as the chain (and, for rewards, the ledger) knows it."""

    provider: str
    registered: bool
    hardware: dict[str, Any] | None  # the stored spec; None unregistered, or not stored in this SWARM_HOME
    stake_wei: int
    min_stake_wei: int
    unbonding_wei: int
    unbonding_release: int | None  # the latest unstake's release (kept after its withdrawal); None: never
    # a job or an epoch report can slash the unbonding stake until then; None once past
    held_until: int | None
    slash_debt_wei: int
    jailed_until: int | None  # None: never jailed, or unjailed
    tombstoned: bool  # jailed for ever
    eligible: bool  # for work: registered, staked to the minimum net of any slash debt, not jailed
    balance_wei: int  # SWARM in the wallet
    # finalized rewards not yet claimed; None when the ledger has not indexed the chain
    claimable_wei: int | None
    chain_time: int  # the latest block's time, which the times above are judged by

    @property
    def jailed(self) -> bool:
        return self.jailed_until is not None

    @property
    def price_per_unit_wei(self) -> int | None:
        price = (self.hardware or {}).get("price_per_unit")
        return None if price is None else int(price)

    @property
    def withdrawable_at(self) -> int | None:
        """When the unbonding stake may leave: its release, or a later hold."""
        if not self.unbonding_wei:
            return None
        return max(self.unbonding_release or 0, self.held_until or 0)


class Provider:
    """One provider's registration, stake and rewards on one deployment: `Provider.open(...)`,
    or built from its parts."""

    def __init__(self, swarm: Swarm, sender: Sender | None, settings: Settings) -> None:
        self.swarm = swarm
        self.sender = sender  # None: reads only
        self.settings = settings

    @classmethod
    def open(cls, account: int | None = None, key: str | None = None, password: str | None = None,
             settings: Settings | None = None) -> Provider:
        """From SWARM_HOME and SWARM_RPC_URL; signing as anvil's dev account `account` (devnets
        only) or the keystore `key` (its name or address; the password, or SWARM_KEY_PASSWORD)."""
        settings = settings or Settings.from_env()
        swarm = Swarm.open(settings)
        return cls(swarm, open_signer(swarm, settings.home, account, key, password), settings)

    @property
    def address(self) -> str:
        return self._signer().address

    # ── registration ──────────────────────────────────────────────────────────
    def register(
        self,
        gpu_model: str,
        gpus: int,
        vram_gb: int,
        region: str | None = None,
        price: int | None = None,
        site_url: str | None = None,
        site_fingerprint: str | None = None,
        update: bool = False,
        gpu_uuids: tuple[str, ...] = (),
    ) -> Registered:
        """Registers the hardware on offer (`update`: declares new hardware, price or site for a
        registered provider). `price` is the asking price in wei per unit, a GPU-second (a
        CPU-second on CPU-only nodes); a site needs both its https URL and its certificate's sha256."""
        spec = HardwareSpec(
            gpu_model, gpus, vram_gb, region, price, site_url, site_fingerprint, tuple(gpu_uuids)
        )
        return self.declare(spec, update)

    def declare(self, spec: HardwareSpec, update: bool = False) -> Registered:
        """`register` with the spec already built (and so validated)."""
        declarable(spec)
        sender = self._signer()
        info = stake.provider_info(self.swarm, sender.address)
        digest = store_spec(self.settings.home, spec.as_dict())
        if info.registered and not update:
            if info.spec_hash == digest:
                raise SwarmError(f"{sender.address} is already registered with this hardware; nothing to do.")
            raise SwarmError(
                f"{sender.address} is already registered with other hardware; pass --update to declare the "
                "new one."
            )
        if update and not info.registered:
            raise SwarmError(
                f"{sender.address} is not registered yet; run `swarm provider register` without --update."
            )
        receipt = (stake.update_spec if update else stake.register)(self.swarm, sender, digest, spec.gpus)
        info = stake.provider_info(self.swarm, sender.address)
        return Registered(sender.address, spec, "0x" + digest.hex(), info.min_stake, update, receipt.tx_hash)

    def declare_anew(self, spec: HardwareSpec) -> Registered:
        """Registers `spec`, or declares it anew for a registered provider (new hardware, price or site)."""
        return self.declare(spec, update=stake.provider_info(self.swarm, self._signer().address).registered)

    # ── stake ─────────────────────────────────────────────────────────────────
    def stake(self, amount: int) -> Staked:
        """Adds `amount` wei from the wallet to the stake, in one transaction (with a permit)."""
        amount = _wei(amount, "stake amount")
        sender = self._signer()
        info = self._registered(sender)
        if info.tombstoned:
            raise SwarmError(f"{sender.address} is tombstoned and can never stake again.")
        receipt = stake.stake(self.swarm, sender, amount)  # refuses an amount above the wallet's first
        return self._sent(Staked, receipt, amount_wei=amount)

    def stake_to_minimum(self) -> Staked | None:
        """Stakes what the declared GPUs' minimum still lacks, net of any slash debt; None when the
        stake already covers it."""
        info = self._registered(self._signer())
        net = max(0, info.stake - info.slash_debt)
        if net >= info.min_stake:
            return None
        return self.stake(info.min_stake - net)

    def unstake(self, amount: int) -> Unstaking:
        """Starts unbonding `amount` wei of the stake; `withdraw` takes it after the unbonding period."""
        amount = _wei(amount, "unstake amount")
        sender = self._signer()
        info = self._registered(sender)
        if amount > info.stake:
            raise InvalidInput(
                f"Cannot unstake {format_amount(amount)}: {sender.address} has {format_amount(info.stake)} "
                "staked; "
                "unstake at most that."
            )
        receipt = stake.request_unstake(self.swarm, sender, amount)
        return self._sent(Unstaking, receipt, amount_wei=amount)

    def withdraw(self) -> Withdrawn:
        """Pays the unbonded stake out to the wallet once the unbonding period and any hold are over."""
        sender = self._signer()
        info = stake.provider_info(self.swarm, sender.address)
        if info.unbonding == 0:
            raise SwarmError(
                f"{sender.address} has nothing unbonding; request it first with `swarm provider unstake`."
            )
        now = self.swarm.chain.timestamp()
        if now < info.unbonding_end:
            raise SwarmError(
                f"{format_amount(info.unbonding)} is still unbonding until {when(info.unbonding_end)} "
                f"({duration(info.unbonding_end - now)} from now); withdraw after that."
            )
        if now < info.held_until:
            raise SwarmError(
                f"{format_amount(info.unbonding)} is held until {when(info.held_until)} "
                f"({duration(info.held_until - now)} from now) because a job or an epoch report can still "
                "slash "
                "it; withdraw after that."
            )
        receipt = stake.withdraw(self.swarm, sender)
        paid = sum(int(e.args["amount"]) for e in self.swarm.events(receipt, "Withdrawn"))
        return self._sent(Withdrawn, receipt, amount_wei=paid)

    def unjail(self) -> Unjailed:
        """Returns to work after the jail time is served (needs the minimum stake)."""
        sender = self._signer()
        info = self._registered(sender)
        now = self.swarm.chain.timestamp()
        if info.tombstoned:
            raise SwarmError(f"{sender.address} is tombstoned for fraud and can never be unjailed.")
        if info.jailed_until == 0:
            raise SwarmError(f"{sender.address} is not jailed; nothing to do.")
        if now < info.jailed_until:
            raise SwarmError(
                f"{sender.address} is jailed until {when(info.jailed_until)}; unjail after that."
            )
        net = max(0, info.stake - info.slash_debt)  # a slash debt is taken before anything else
        if net < info.min_stake:
            owed = f" beside the {format_amount(info.slash_debt)} slash debt" if info.slash_debt else ""
            raise SwarmError(
                f"Unjailing needs the minimum stake of {format_amount(info.min_stake)}{owed}; "
                f"stake {format_amount(info.min_stake - net)} more first."
            )
        return self._sent(Unjailed, stake.unjail(self.swarm, sender))

    # ── rewards ───────────────────────────────────────────────────────────────
    def claim(self) -> Claimed:
        """Claims every reward finalized so far, with one Merkle proof from the ledger database."""
        # numpy and SQLAlchemy: `swarm provider status` imports this module and must answer at once.
        from ledger import rewards
        from ledger.db import open_session
        from ledger.merkle import verify

        sender = self._signer()
        with open_session(self.settings) as session:
            leaf = reward_leaf(session, self.swarm.chain.chain_id, sender.address)
        if leaf is None:
            raise SwarmError(
                f"The ledger holds no finalized rewards for {sender.address}; run `swarm ledger sync` and "
                "try again."
            )
        epoch, cumulative, proof = leaf
        if not verify(self.swarm.read("RewardDistributor", "rewardsRoot"), sender.address, cumulative, proof):
            raise SwarmError(
                "The ledger's rewards are older than the chain's latest finalized epoch; run `swarm ledger "
                "sync` and "
                "retry."
            )
        already = int(self.swarm.read("RewardDistributor", "claimed", sender.address))
        if cumulative <= already:
            raise SwarmError(
                f"Nothing to claim: {sender.address} has claimed all {format_amount(already)} earned to "
                f"epoch {epoch}."
            )
        receipt = rewards.claim(self.swarm, sender, sender.address, cumulative, proof)
        return self._sent(
            Claimed, receipt, amount_wei=cumulative - already, cumulative_wei=cumulative, epoch=epoch
        )

    # ── status ────────────────────────────────────────────────────────────────
    def status(self, address: str | None = None) -> ProviderStatus:
        """Stake, unbonding, jail state, wallet and claimable rewards of `address` (default: this
        provider's)."""
        if address is not None:
            who = parse_address(address, "provider address")
        elif self.sender is not None:
            who = self.sender.address
        else:
            raise SwarmError(
                "This provider reads only; give the address to show, or open it with an account or a key."
            )
        info = stake.provider_info(self.swarm, who)
        now = self.swarm.chain.timestamp()
        return ProviderStatus(
            provider=who, registered=info.registered, hardware=self._stored_spec(info),
            stake_wei=info.stake, min_stake_wei=info.min_stake, unbonding_wei=info.unbonding,
            unbonding_release=info.unbonding_end or None,
            held_until=info.held_until if info.held_until > now else None, slash_debt_wei=info.slash_debt,
            jailed_until=info.jailed_until or None, tombstoned=info.tombstoned,
            eligible=bool(self.swarm.read("StakingVault", "isEligible", who)),
            balance_wei=self.swarm.balance_of(who), claimable_wei=self._claimable(who), chain_time=now,
        )

    def _claimable(self, who: str) -> int | None:
        """Finalized cumulative rewards in the ledger less what was claimed on chain; None if not indexed."""
        try:
            with read_ledger(self.settings) as ledger:  # plain SQL: status loads no ORM
                if ledger is None:
                    return None
                leaf = reward_leaf(ledger, self.swarm.chain.chain_id, who)
        except SwarmError:
            return None
        if leaf is None:
            return 0
        return max(0, leaf[1] - int(self.swarm.read("RewardDistributor", "claimed", who)))

    def _stored_spec(self, info: ProviderInfo) -> dict[str, Any] | None:
        if not info.registered:
            return None
        try:
            return load_spec(self.settings.home, info.spec_hash)
        except SwarmError:
            return None

    # ── shared ────────────────────────────────────────────────────────────────
    def _registered(self, sender: Sender) -> ProviderInfo:
        info = stake.provider_info(self.swarm, sender.address)
        if not info.registered:
            raise SwarmError(
                f"{sender.address} is not a registered provider; run `swarm provider register` first."
            )
        return info

    def _sent(self, kind: type[S], receipt: TxReceipt, **outcome: Any) -> S:
        """`kind` of what `receipt` did, with the provider's stake as the chain holds it now."""
        info = stake.provider_info(self.swarm, self.address)
        return kind(self.address, receipt.tx_hash, receipt.block_number, info.stake, info.unbonding,
                    info.unbonding_end or None, info.slash_debt, **outcome)

    def _signer(self) -> Sender:
        if self.sender is None:
            raise SwarmError("This provider reads only; open it with an account or a key to sign.")
        return self.sender


def declarable(spec: HardwareSpec) -> HardwareSpec:
    """`spec`, if the oracle can judge its GPU model; InvalidInput naming the models it knows if not.

    The oracle scores a provider's speed against the reference of its declared model
    (`compute.reference`): a model without one could register and stake, but never earn."""
    if model_of(spec.gpu_model) is None:
        raise InvalidInput(
            f"gpu model {spec.gpu_model!r} has no reference throughput, so the oracle could not judge it "
            f"and it would never earn; declare one of {', '.join(GPU_MODELS)}, or cpu for a machine without "
            "a GPU."
        )
    return spec


def _wei(amount: int, what: str) -> int:
    """A positive whole number of wei; a float or a token string is refused, so no amount is off by 10**18."""
    if isinstance(amount, bool) or not isinstance(amount, int) or amount <= 0:
        raise InvalidInput(
            f"{what} must be a positive whole number of wei, got {amount!r}; e.g. 1_500 * ledger.units.ONE "
            "for "
            "1,500 SWARM."
        )
    return amount
