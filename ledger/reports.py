"""Epoch reports: the slashes they order, the providers whose slashes they defer, their EIP-712
digest and committee signatures."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import astuple, dataclass

from ledger.abi import encode as abi_encode
from ledger.abi import keccak256 as keccak
from ledger.eip712 import domain, typed_message

SLASH_TUPLE = "(address,uint16,bytes32,bytes32,uint64,bool)"  # IStakingVault.SlashOrder
REPORT_TUPLE = "(uint64,bytes32,uint256,uint256,bytes32,bytes32,uint64)"  # RewardDistributor.EpochReport
DOMAIN_NAME = "SwarmRewardDistributor"
DOMAIN_VERSION = "3"

# RewardDistributor's bounds on one report (MAX_SLASHES_PER_REPORT, MAX_TOMBSTONES_PER_REPORT,
# MAX_DEFERRED_PER_REPORT, MAX_JAIL_SECONDS): a report within them always finalizes in one
# bounded transaction.
MAX_SLASHES_PER_REPORT = 200
MAX_TOMBSTONES_PER_REPORT = 8
MAX_DEFERRED_PER_REPORT = 200
MAX_JAIL_SECONDS = 365 * 86_400


def reason_bytes(reason: str) -> bytes:
    """A short reason ('downtime', 'fraud') as the bytes32 the contracts log."""
    raw = reason.encode()
    if len(raw) > 32:
        raise ValueError(f"reason {reason!r} is longer than 32 bytes")
    return raw.ljust(32, b"\0")


@dataclass(frozen=True)
class Slash:
    provider: str
    bps: int
    reason: bytes  # bytes32
    evidence_hash: bytes  # bytes32
    jail_seconds: int = 0
    tombstone: bool = False

    @property
    def has_penalty(self) -> bool:
        """Whether it orders anything: the distributor refuses an entry with no bps, no jail and
        no tombstone (EmptySlash)."""
        return self.bps > 0 or self.jail_seconds > 0 or self.tombstone

    def as_tuple(self) -> tuple:
        return astuple(self)


def sorted_slashes(slashes: Sequence[Slash]) -> list[Slash]:
    """Slashes in the order a report must list them: by provider address, ascending."""
    return sorted(slashes, key=lambda s: int(s.provider, 16))


def slashes_hash(slashes: Sequence[Slash]) -> bytes:
    return keccak(abi_encode([f"{SLASH_TUPLE}[]"], [[s.as_tuple() for s in slashes]]))


def sorted_deferred(providers: Sequence[str]) -> list[str]:
    """Deferred providers in the order a report must list them: ascending, each once."""
    return sorted({p.lower(): p for p in providers}.values(), key=lambda p: int(p, 16))


def deferred_hash(deferred: Sequence[str]) -> bytes:
    """keccak256(abi.encode(address[] deferred)), as the report's deferredHash."""
    return keccak(abi_encode(["address[]"], [list(deferred)]))


@dataclass(frozen=True)
class EpochReport:
    """What the committee signs: the epoch (the one after the last finalized), the root of
    every provider's cumulative earnings, this epoch's rewards, the sum of the root's leaves
    (everything allocated so far plus this epoch's rewards), the slashes' hash, the hash of the
    providers whose slashes wait for a later report (held in the vault meanwhile), and the
    chain time after which the report may no longer be submitted."""

    epoch: int
    rewards_root: bytes
    total_rewards: int
    cumulative_total: int
    slashes_hash: bytes
    deferred_hash: bytes
    expires_at: int

    def as_tuple(self) -> tuple:
        return (self.epoch, self.rewards_root, self.total_rewards, self.cumulative_total, self.slashes_hash,
                self.deferred_hash, self.expires_at)

    def typed_data(self, chain_id: int, distributor: str) -> dict:
        return typed_message(
            "EpochReport",
            [("epoch", "uint64"), ("rewardsRoot", "bytes32"), ("totalRewards", "uint256"),
             ("cumulativeTotal", "uint256"), ("slashesHash", "bytes32"), ("deferredHash", "bytes32"),
             ("expiresAt", "uint64")],
            domain(DOMAIN_NAME, DOMAIN_VERSION, chain_id, distributor),
            {
                "epoch": self.epoch,
                "rewardsRoot": self.rewards_root,
                "totalRewards": self.total_rewards,
                "cumulativeTotal": self.cumulative_total,
                "slashesHash": self.slashes_hash,
                "deferredHash": self.deferred_hash,
                "expiresAt": self.expires_at,
            },
        )

    def digest(self, chain_id: int, distributor: str) -> bytes:
        from eth_account.messages import encode_typed_data

        signable = encode_typed_data(full_message=self.typed_data(chain_id, distributor))
        return keccak(b"\x19" + signable.version + signable.header + signable.body)


def sign_report(report: EpochReport, key: bytes, chain_id: int, distributor: str) -> tuple[str, bytes]:
    """One committee member's signature: (signer address, 65-byte signature)."""
    from eth_account import Account

    account = Account.from_key(key)
    signed = account.sign_typed_data(full_message=report.typed_data(chain_id, distributor))
    return account.address, bytes(signed.signature)


def order_signatures(signed: Sequence[tuple[str, bytes]]) -> list[bytes]:
    """Signatures in ascending signer order, as RewardDistributor requires."""
    return [sig for _, sig in sorted(signed, key=lambda item: int(item[0], 16))]
