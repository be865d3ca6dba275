"""Events into current state: providers, jobs and epochs, and the append-only rows
(stake changes, slashes, claims) that events add.

A projection works on plain dicts keyed like the table columns. The same code runs
forward over a new batch and, after a reorg, over the events left for an entity,
so the state after a rollback is exactly what a fresh sync would have built.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ledger.indexer.decode import Log

ZERO_HASH = "0x" + "00" * 32

PROVIDER_EVENTS = frozenset(
    {
        "Registered",
        "SpecUpdated",
        "Staked",
        "UnstakeRequested",
        "Withdrawn",
        "Slashed",
        "Jailed",
        "Unjailed",
        "Tombstoned",
    }
)
JOB_EVENTS = frozenset(
    {
        "JobPosted",
        "JobCancelled",
        "JobAssigned",
        "JobReassigned",
        "JobCompleted",
        "JobCharged",
        "JobDisputed",
        "JobSettled",
        "JobFailed",
        "JobReclaimed",
    }
)
EPOCH_EVENTS = frozenset({"EpochSubmitted", "SlashProposed", "EpochVetoed", "EpochFinalized"})


def event_keys(log: Log) -> tuple[str | None, int | None, int | None]:
    """The (provider, job id, epoch) an event is about, for the `events` key columns."""
    args = log.args
    provider = args.get("provider")
    if provider is None and log.name == "SlashProposed":
        provider = args["slash"]["provider"]
    elif provider is None and log.name == "JobReassigned":
        provider = args["to"]  # the provider the job now runs on
    return provider, args.get("jobId"), args.get("epoch")


def bytes32_text(value: str) -> str:
    """A bytes32 reason as text when it is short ASCII ('downtime'), else its hex."""
    raw = bytes.fromhex(value[2:]).rstrip(b"\0")
    if raw and all(32 <= b < 127 for b in raw):
        return raw.decode()
    return value


def new_provider(chain_id: int, address: str, block: int) -> dict[str, Any]:
    return {
        "chain_id": chain_id,
        "address": address,
        "spec_hash": ZERO_HASH,
        "gpus": 0,
        "stake": 0,
        "unbonding": 0,
        "release_time": 0,
        "jailed_until": 0,
        "tombstoned": False,
        "slashed_total": 0,
        "registered_block": block,
        "updated_block": block,
    }


def new_job(chain_id: int, job_id: int, block: int) -> dict[str, Any]:
    return {
        "chain_id": chain_id,
        "job_id": job_id,
        "status": "posted",
        "buyer": "",
        "spec_hash": ZERO_HASH,
        "max_price_per_unit": 0,
        "max_units": 0,
        "escrow": 0,
        "deadline": 0,
        "provider": None,
        "price_per_unit": 0,
        "units_used": 0,
        "result_hash": None,
        "dispute_end": 0,
        "payment": 0,
        "fee": 0,
        "refund": 0,
        "fail_reason": None,
        "posted_block": block,
        "updated_block": block,
    }


def new_epoch(chain_id: int, epoch: int, block: int) -> dict[str, Any]:
    return {
        "chain_id": chain_id,
        "epoch": epoch,
        "status": "submitted",
        "rewards_root": ZERO_HASH,
        "total_rewards": 0,
        "slashes_hash": ZERO_HASH,
        "finalizable_at": 0,
        "slash_count": 0,
        "vetoed_by": None,
        "submitted_block": block,
        "finalized_block": None,
    }


class Projection:
    """The entities a run of events touches, updated in place, and the rows it appends."""

    def __init__(
        self,
        chain_id: int,
        providers: dict[str, dict[str, Any]] | None = None,
        jobs: dict[int, dict[str, Any]] | None = None,
        epochs: dict[int, dict[str, Any]] | None = None,
    ) -> None:
        self.chain_id = chain_id
        self.providers = providers if providers is not None else {}
        self.jobs = jobs if jobs is not None else {}
        self.epochs = epochs if epochs is not None else {}
        self.stakes: list[dict[str, Any]] = []
        self.slashes: list[dict[str, Any]] = []
        self.claims: list[dict[str, Any]] = []
        # What an earlier event of the same transaction says about a slash: which epoch's
        # finalization or which job's failure or reassignment ordered it.
        self._cause: dict[str, dict[str, int]] = {}
        self._handlers: dict[tuple[str, str], Callable[[Log], None]] = {
            **{("StakingVault", n): self._provider for n in PROVIDER_EVENTS},
            **{("JobMarket", n): self._job for n in JOB_EVENTS},
            **{("RewardDistributor", n): self._epoch for n in EPOCH_EVENTS},
            ("RewardDistributor", "Claimed"): self._claim,
        }

    def apply_all(self, logs: Iterable[Log]) -> None:
        for log in logs:
            handler = self._handlers.get((log.contract, log.name))
            if handler is not None:
                handler(log)

    # ── providers ────────────────────────────────────────────────────────────
    def _provider(self, log: Log) -> None:
        a, name = log.args, log.name
        address = a["provider"]
        p = self.providers.get(address)
        if p is None:
            p = self.providers[address] = new_provider(self.chain_id, address, log.block_number)
        p["updated_block"] = log.block_number
        if name in ("Registered", "SpecUpdated"):
            p["spec_hash"], p["gpus"] = a["specHash"], a["gpus"]
        elif name == "Staked":
            p["stake"] = a["newStake"]
            self._stake_change(log, p, "stake", a["amount"])
        elif name == "UnstakeRequested":
            p["stake"] -= a["amount"]
            p["unbonding"], p["release_time"] = a["totalUnbonding"], a["releaseTime"]
            self._stake_change(log, p, "unstake", a["amount"])
        elif name == "Withdrawn":
            p["unbonding"] -= a["amount"]
            self._stake_change(log, p, "withdraw", a["amount"])
        elif name == "Slashed":
            amount = a["fromStake"] + a["fromUnbonding"]
            p["stake"] -= a["fromStake"]
            p["unbonding"] -= a["fromUnbonding"]
            p["slashed_total"] += amount
            self._stake_change(log, p, "slash", amount)
            self._slash(log, amount)
        elif name == "Jailed":
            p["jailed_until"] = a["until"]
        elif name == "Unjailed":
            p["jailed_until"] = 0
        elif name == "Tombstoned":
            p["tombstoned"] = True

    def _stake_change(self, log: Log, p: dict[str, Any], kind: str, amount: int) -> None:
        self.stakes.append(
            {
                "chain_id": self.chain_id,
                "block_number": log.block_number,
                "log_index": log.log_index,
                "tx_hash": log.tx_hash,
                "provider": p["address"],
                "kind": kind,
                "amount": amount,
                "stake": p["stake"],
                "unbonding": p["unbonding"],
            }
        )

    def _slash(self, log: Log, amount: int) -> None:
        a = log.args
        cause = self._cause.get(log.tx_hash, {})
        self.slashes.append(
            {
                "chain_id": self.chain_id,
                "block_number": log.block_number,
                "log_index": log.log_index,
                "tx_hash": log.tx_hash,
                "provider": a["provider"],
                "reason": bytes32_text(a["reason"]),
                "bps": a["bps"],
                "from_stake": a["fromStake"],
                "from_unbonding": a["fromUnbonding"],
                "amount": amount,
                "to_treasury": a["toTreasury"],
                "evidence_hash": a["evidenceHash"],
                "epoch": cause.get("epoch"),
                "job_id": cause.get("job_id"),
            }
        )

    # ── jobs ─────────────────────────────────────────────────────────────────
    def _job(self, log: Log) -> None:
        a, name = log.args, log.name
        job_id = a["jobId"]
        j = self.jobs.get(job_id)
        if j is None:
            j = self.jobs[job_id] = new_job(self.chain_id, job_id, log.block_number)
        j["updated_block"] = log.block_number
        if name == "JobPosted":
            j.update(
                buyer=a["buyer"],
                spec_hash=a["specHash"],
                max_price_per_unit=a["maxPricePerUnit"],
                max_units=a["maxUnits"],
                deadline=a["deadline"],
                escrow=a["escrow"],
                status="posted",
            )
        elif name == "JobAssigned":
            j.update(status="assigned", provider=a["provider"], price_per_unit=a["pricePerUnit"])
        elif name == "JobReassigned":
            # The escrow stays; the vault's Slashed event, if any, follows in this transaction.
            j.update(status="assigned", provider=a["to"], price_per_unit=a["pricePerUnit"])
            self._cause.setdefault(log.tx_hash, {})["job_id"] = job_id
        elif name == "JobCompleted":
            j.update(
                status="completed",
                result_hash=a["resultHash"],
                units_used=a["unitsUsed"],
                dispute_end=a["disputeEnd"],
            )
        elif name == "JobCharged":  # failed by its own fault: completed with no result, for its units
            j.update(
                status="completed",
                result_hash="0x" + "00" * 32,
                units_used=a["unitsUsed"],
                dispute_end=a["disputeEnd"],
                fail_reason=bytes32_text(a["reason"]),
            )
        elif name == "JobDisputed":
            j["status"] = "disputed"
        elif name == "JobSettled":
            j.update(
                status="settled",
                provider=a["provider"],
                payment=a["payment"],
                fee=a["fee"],
                refund=a["refund"],
            )
        elif name == "JobFailed":
            j.update(status="failed", refund=a["refund"], fail_reason=bytes32_text(a["reason"]))
            self._cause.setdefault(log.tx_hash, {})["job_id"] = job_id
        elif name == "JobCancelled":
            j.update(status="cancelled", refund=a["refund"])
        elif name == "JobReclaimed":
            j.update(status="reclaimed", refund=a["refund"])

    # ── epochs and claims ────────────────────────────────────────────────────
    def _epoch(self, log: Log) -> None:
        a, name = log.args, log.name
        number = a["epoch"]
        e = self.epochs.get(number)
        if name == "EpochSubmitted" or e is None:
            # A vetoed epoch may be submitted again, corrected: the new report replaces it.
            e = self.epochs[number] = new_epoch(self.chain_id, number, log.block_number)
        if name == "EpochSubmitted":
            e.update(
                rewards_root=a["rewardsRoot"],
                total_rewards=a["totalRewards"],
                slashes_hash=a["slashesHash"],
                finalizable_at=a["finalizableAt"],
            )
        elif name == "SlashProposed":
            e["slash_count"] += 1
        elif name == "EpochVetoed":
            e.update(status="vetoed", vetoed_by=a["guardian"])
        elif name == "EpochFinalized":
            e.update(
                status="finalized",
                rewards_root=a["rewardsRoot"],
                total_rewards=a["totalRewards"],
                slash_count=a["slashCount"],
                finalized_block=log.block_number,
            )
            self._cause.setdefault(log.tx_hash, {})["epoch"] = number

    def _claim(self, log: Log) -> None:
        a = log.args
        self.claims.append(
            {
                "chain_id": self.chain_id,
                "block_number": log.block_number,
                "log_index": log.log_index,
                "tx_hash": log.tx_hash,
                "provider": a["provider"],
                "amount": a["amount"],
                "cumulative": a["cumulative"],
            }
        )
