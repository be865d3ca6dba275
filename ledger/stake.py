"""Provider registration, stake, unbonding, withdrawal, jail — StakingVault calls."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ledger.client import Swarm
from ledger.errors import InvalidInput
from ledger.permit import Allowance, prepare_spend
from ledger.reports import reason_bytes
from ledger.units import parse_address

if TYPE_CHECKING:
    from ledger.tx import Sender, TxReceipt

MAX_GPUS = 2**32 - 1
MAX_GPUS_PER_NODE = 1_024
MAX_VRAM_GB = 4_096
MAX_PRICE_PER_UNIT = 2**128 - 1  # JobMarket's uint128 price
_MODEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,31}$")
_REGION = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")
_SITE_URL = re.compile(r"^https://[A-Za-z0-9.-]{1,253}(:[0-9]{1,5})?/?$")
_FINGERPRINT = re.compile(r"^[0-9a-f]{64}$")
_GPU_UUID = re.compile(r"^(GPU|MIG)-[0-9A-Za-z-]{8,80}$")  # as NVML names a GPU


@dataclass(frozen=True)
class HardwareSpec:
    """What a provider declares; its keccak hash goes on-chain, the JSON to $SWARM_HOME/specs."""

    gpu_model: str
    gpus: int
    vram_gb: int
    region: str | None = None
    price_per_unit: int | None = None  # asking price, wei per GPU-second (CPU-second on CPU-only nodes)
    site_url: str | None = None  # where the provider's site answers, https://host:port
    site_fingerprint: str | None = None  # sha256 of the site's TLS certificate (DER), 64 hex digits
    gpu_uuids: tuple[str, ...] = ()  # optional: the GPUs themselves, as NVML names them (nvidia-smi -L)

    def __post_init__(self) -> None:
        if not _MODEL.match(self.gpu_model):
            raise InvalidInput(
                f"gpu model {self.gpu_model!r} is not a model name; use letters, digits, '.', '_' or '-' "
                "(e.g. H100)."
            )
        if not 0 < self.gpus <= MAX_GPUS_PER_NODE:
            raise InvalidInput(f"gpus must be from 1 to {MAX_GPUS_PER_NODE}, got {self.gpus}.")
        if not 0 < self.vram_gb <= MAX_VRAM_GB:
            raise InvalidInput(f"vram must be from 1 to {MAX_VRAM_GB} GB per GPU, got {self.vram_gb}.")
        if self.region is not None and not _REGION.match(self.region):
            raise InvalidInput(
                f"region {self.region!r} must be lower-case letters, digits and '-' (e.g. eu-west)."
            )
        if self.site_url is not None and not _SITE_URL.match(self.site_url):
            raise InvalidInput(f"site url {self.site_url!r} must be https://HOST[:PORT] (e.g. https://203.0.113.7:8443).")
        if self.site_fingerprint is not None and not _FINGERPRINT.match(self.site_fingerprint):
            raise InvalidInput(
                "site fingerprint must be the sha256 of the site's certificate: 64 lower-case hex digits."
            )
        if (self.site_url is None) != (self.site_fingerprint is None):
            raise InvalidInput(
                "a site needs both its url and its certificate's fingerprint, so the chain authenticates it."
            )
        if len(self.gpu_uuids) > self.gpus or len(set(self.gpu_uuids)) != len(self.gpu_uuids):
            raise InvalidInput(f"give at most {self.gpus} distinct GPU UUIDs, one per GPU declared.")
        for uuid in self.gpu_uuids:
            if not _GPU_UUID.match(uuid):
                raise InvalidInput(f"GPU UUID {uuid!r} is not one NVML gives; copy it from `nvidia-smi -L` "
                                   "(GPU-xxxxxxxx-…).")
        price = self.price_per_unit
        if price is not None and (isinstance(price, bool) or not isinstance(price, int)
                                  or not 0 < price <= MAX_PRICE_PER_UNIT):
            raise InvalidInput(
                f"price per unit must be from 1 to {MAX_PRICE_PER_UNIT} wei, got {price!r}; give a positive "
                "price."
            )

    def as_dict(self) -> dict:
        """The stored JSON; the price as a decimal wei string, since it outgrows JavaScript's numbers."""
        spec = {"gpu_model": self.gpu_model, "gpus": self.gpus, "vram_gb": self.vram_gb}
        spec |= {"region": self.region} if self.region else {}
        spec |= (
            {"site_url": self.site_url, "site_fingerprint": self.site_fingerprint} if self.site_url else {}
        )
        spec |= {"gpu_uuids": list(self.gpu_uuids)} if self.gpu_uuids else {}
        return spec | (
            {"price_per_unit": str(self.price_per_unit)} if self.price_per_unit is not None else {}
        )


@dataclass(frozen=True)
class ProviderInfo:
    address: str
    registered: bool
    stake: int
    unbonding: int
    unbonding_end: int
    jailed_until: int
    gpus: int
    tombstoned: bool
    spec_hash: bytes
    min_stake: int
    held_until: int = 0  # no withdrawal before this: a slash may still come (a slasher's or a report's hold)
    slash_debt: int = 0  # slashed amounts the rate limit deferred, still owed
    report_held_until: int = 0  # the part of the hold an epoch report placed, while that report's holds stand

    def jailed_at(self, now: int) -> bool:
        return self.tombstoned or now < self.jailed_until


def _held_until(swarm: Swarm, address: str, unbonding: int, held: int) -> int:
    """When the holds on `address`'s unbonding stake end: the slashers' and the reports', which
    the vault cuts at the provider's release plus the challenge window and the report lag."""
    if unbonding == 0:
        return held
    withdrawable = int(swarm.read("StakingVault", "withdrawableAt", address))
    return min(held, withdrawable)


def provider_info(swarm: Swarm, address: str) -> ProviderInfo:
    address = parse_address(address, "provider address")
    p = swarm.read("StakingVault", "providerInfo", address)
    return ProviderInfo(
        address=address,
        stake=p[0],
        unbonding=p[1],
        unbonding_end=p[2],
        jailed_until=p[3],
        gpus=p[4],
        registered=p[5],
        tombstoned=p[6],
        spec_hash=bytes(p[7]),
        min_stake=int(swarm.read("StakingVault", "minStake", address)),
        held_until=_held_until(swarm, address, unbonding=p[1], held=max(p[8], p[11])),
        slash_debt=p[10],
        report_held_until=p[11],
    )


def register(swarm: Swarm, sender: Sender, spec_hash: bytes, gpus: int) -> TxReceipt:
    """Registers `sender` as a provider of `gpus` GPUs whose spec hashes to `spec_hash`."""
    if not 0 < gpus <= MAX_GPUS:
        raise InvalidInput(f"gpus must be a whole number from 1 to {MAX_GPUS}, got {gpus}.")
    if len(spec_hash) != 32:
        raise InvalidInput("spec hash must be 32 bytes (a keccak256 of the hardware spec).")
    return sender.send(swarm.vault.functions.register(spec_hash, gpus))


def update_spec(swarm: Swarm, sender: Sender, spec_hash: bytes, gpus: int) -> TxReceipt:
    """Declares new hardware for a registered provider; the minimum stake follows `gpus`."""
    if not 0 < gpus <= MAX_GPUS:
        raise InvalidInput(f"gpus must be a whole number from 1 to {MAX_GPUS}, got {gpus}.")
    return sender.send(swarm.vault.functions.updateSpec(spec_hash, gpus))


def stake(swarm: Swarm, sender: Sender, amount: int, allowance: Allowance = Allowance.PERMIT) -> TxReceipt:
    """Adds `amount` wei to `sender`'s stake in one transaction."""
    _positive(amount, "stake amount")
    permit = prepare_spend(swarm, sender, swarm.vault.address, amount, "stake", allowance)
    if permit is None:
        return sender.send(swarm.vault.functions.stake(amount))
    fn = swarm.vault.functions.stakeWithPermit(amount, permit.deadline, permit.v, permit.r, permit.s)
    return sender.send(fn)


def request_unstake(swarm: Swarm, sender: Sender, amount: int) -> TxReceipt:
    """Starts unbonding `amount` wei of `sender`'s active stake."""
    _positive(amount, "unstake amount")
    return sender.send(swarm.vault.functions.requestUnstake(amount))


def withdraw(swarm: Swarm, sender: Sender) -> TxReceipt:
    """Withdraws `sender`'s unbonded stake once its release time has passed."""
    return sender.send(swarm.vault.functions.withdraw())


def unjail(swarm: Swarm, sender: Sender) -> TxReceipt:
    return sender.send(swarm.vault.functions.unjail())


def slash(
    swarm: Swarm, sender: Sender, provider: str, bps: int, reason: str, evidence_hash: bytes
) -> TxReceipt:
    """Slashes `provider` by `bps` basis points; `sender` needs SLASHER_ROLE."""
    provider = parse_address(provider, "provider address")
    if not 0 < bps <= 10_000:
        raise InvalidInput(f"slash bps must be from 1 to 10000, got {bps}.")
    fn = swarm.vault.functions.slash(provider, bps, reason_bytes(reason), evidence_hash)
    return sender.send(fn)


def _positive(amount: int, what: str) -> None:
    if not isinstance(amount, int) or amount <= 0:
        raise InvalidInput(f"{what} must be greater than zero, got {amount!r}.")
