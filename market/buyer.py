"""The buyer's side of Swarm as a Python API; `swarm job` is a face over it (docs/market.md).

    from market.buyer import Buyer

    buyer = Buyer.open(account=5)                   # a devnet's dev account, or key="alice"
    (job_id,) = buyer.post("examples/digits/job.yaml").job_ids
    buyer.wait(job_id)                              # until the chain has its result (or none)
    result = buyer.result(job_id, download_to="digits-model")
    print(result.metrics, result.path)              # verified against the chain's resultHash

`post` checks the spec and the buyer's balance before anything is sent, has a job's local
code and inputs uploaded and pinned, stores the spec and escrows one job per replica
(cancelling those already posted if a later one fails); `status` reads the chain and the
market's record; `result` finds where the result went from the spec the chain pins (or the
market's record) and has it fetched and checked against the chain's resultHash; `cancel`
refunds a job no provider has yet, `reclaim` one past its deadline, and `dispute` holds a
result's payment for the arbiter. Every refusal is a `SwarmError` with one sentence.

This module is the chain's side of it. What goes into the buyer's storage and comes out of it
(code and inputs pinned and uploaded, a result downloaded and verified) is `market.storage`'s.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from compute import dataplane
from compute.errors import ComputeError
from compute.runners.params import METRICS
from core.errors import Refused
from ledger.client import Swarm
from ledger.config import Settings, database_url
from ledger.errors import SwarmError
from ledger.jobs import (
    JobInfo,
    JobStatus,
    cancel_job,
    dispute_bond,
    dispute_job,
    job_info,
    post_job,
    reclaim_expired,
)
from ledger.signer import open_signer
from ledger.specs import load_spec as load_stored_spec
from ledger.specs import store_spec
from ledger.units import duration, format_amount, when
from market.spec import JobSpec, SpecError, borrowing_refused, job_namespace, load_spec, validate_spec
from market.storage import DEFAULT_OUTPUT, clause, failed_log, fetch_result, kept_log, pin, result_location
from wire.client import SiteClient, SiteUnreachable

if TYPE_CHECKING:  # the ORM loads in the operations that use it
    from sqlmodel import Session

    from ledger.tx import Sender, TxReceipt
    from market.records import MarketJob, MarketTransition


# ── the buyer's operations ───────────────────────────────────────────────────────────

WITH_RESULT = ("completed", "disputed", "settled")
NO_RESULT_EVER = ("failed", "cancelled", "reclaimed")
ZERO_HASH = bytes(32)


@dataclass(frozen=True)
class Posted:
    job_ids: list[int]
    spec_hash: str  # 0x…
    spec: JobSpec  # as posted: pinned
    escrow_wei: int  # all replicas together
    buyer: str
    tx: list[str]


@dataclass(frozen=True)
class JobReport:
    """A job as the chain, the ledger and the market service know it."""

    info: JobInfo
    escrow_held_wei: int
    spec_hash: str | None  # None until the ledger has indexed the job
    spec: dict[str, Any] | None  # None where this SWARM_HOME does not store it
    market: MarketJob | None
    transitions: list[MarketTransition]

    @property
    def status(self) -> str:
        return self.info.status.name.lower()


@dataclass(frozen=True)
class Result:
    """A verified result: its files at `path` hash to the chain's resultHash."""

    job_id: int
    path: Path  # the result directory here: outputs/ and manifest.json
    stored_at: str  # where it was found (the buyer's output, or the market's storage)
    result_hash: str
    units: float
    unit: str | None
    units_billed: int
    metrics: dict[str, Any]
    info: JobInfo


@dataclass(frozen=True)
class JobLog:
    """What a job printed, and where it was read."""

    job_id: int
    text: str
    source: str  # its result, its provider's site, or what its site kept in the buyer's output
    verified: bool  # covered by the chain's resultHash


FOLLOW_SETTLE_S = 60.0  # how long a follower waits, after a lease ended, for the chain to move on


def _site_refusal(provider: str | None, exc: Exception) -> str:
    if isinstance(exc, Refused):
        return f"the site of {provider} refused ({clause(exc)})"
    return clause(exc)[:1].lower() + clause(exc)[1:]


@dataclass(frozen=True)
class Refund:
    job_id: int
    refund_wei: int
    tx: str


@dataclass(frozen=True)
class Reclaimed:
    """A job reclaimed after its deadline (refunded), or a dispute the arbiter left undecided
    (settled half and half, the buyer's bond returned)."""

    job_id: int
    outcome: str  # "reclaimed" | "settled"
    buyer: str
    provider: str | None
    refund_wei: int  # to the buyer, a returned bond included
    tx: str
    payment_wei: int = 0  # to the provider, after the fee
    fee_wei: int = 0
    bond_refund_wei: int = 0


@dataclass(frozen=True)
class Disputed:
    job_id: int
    by: str
    bond_wei: int
    tx: str


class Buyer:
    """One buyer's jobs on one deployment: `Buyer.open(...)`, or built from its parts."""

    def __init__(self, swarm: Swarm, sender: Sender | None, home: Path, db_url: str | None = None) -> None:
        self.swarm = swarm
        self.sender = sender  # None: reads only
        self.home = home
        self.db_url = db_url or database_url(home)

    @classmethod
    def open(cls, account: int | None = None, key: str | None = None, password: str | None = None,
             settings: Settings | None = None, db_url: str | None = None) -> Buyer:
        """From SWARM_HOME, SWARM_RPC_URL and SWARM_DB_URL; signing as anvil's dev account `account`
        (devnets only) or the keystore `key` (its name or address; the password, or SWARM_KEY_PASSWORD)."""
        settings = settings or Settings.from_env()
        swarm = Swarm.open(settings)
        return cls(swarm, open_signer(swarm, settings.home, account, key, password), settings.home, db_url)

    @property
    def address(self) -> str:
        return self._signer().address

    # ── post ──────────────────────────────────────────────────────────────────
    def post(self, spec: str | Path | dict[str, Any] | JobSpec, upload_to: str | None = None,
             base: Path | None = None) -> Posted:
        """Escrows payment for `spec` (a file, a mapping or a JobSpec) and posts one job per
        replica. A file's or a mapping's deadline given as a duration counts from the chain's
        clock (a JobSpec's is already fixed). Local code and inputs are uploaded to `upload_to`
        (default: the spec's output/uploads) and pinned first; relative paths are the spec file's
        (or `base`). A built-in job whose spec names no output puts its results in this
        SWARM_HOME's results/, which a devnet's sites write; sites elsewhere need an output they
        can reach."""
        # A deadline given as a duration (1h) counts from the chain's clock, which judges it: a
        # devnet's runs ahead of the wall clock once its time has been moved on (`swarm demo`).
        if isinstance(spec, (str, Path)):
            base = base or Path(spec).resolve().parent
            source = spec
            spec = load_spec(source)  # a bad spec is refused before the chain is asked its time
            spec = self._on_chain_clock(spec, lambda now: load_spec(source, now=now))
        elif isinstance(spec, dict):
            data = spec
            spec = self._on_chain_clock(validate_spec(data), lambda now: validate_spec(data, now=now))
        sender = self._signer()
        total = spec.escrow_wei * spec.replicas
        self._check_postable(sender.address, spec, total)
        self._check_borrowing(sender.address, spec)
        spec = pin(spec, base or Path.cwd(), upload_to, default_output=str(self.home / DEFAULT_OUTPUT))
        digest = store_spec(self.home, spec.canonical())
        posted = self._post_replicas(sender, spec, digest)
        return Posted([job_id for job_id, _ in posted], "0x" + digest.hex(), spec, total, sender.address,
                      [receipt.tx_hash for _, receipt in posted])

    def _on_chain_clock(self, spec: JobSpec, parse: Callable[[float], JobSpec]) -> JobSpec:
        """The spec read again by the chain's clock where that runs ahead of this machine's; a
        deadline the chain has passed is left to `_check_postable` to refuse, saying so."""
        now = self.next_block_time()
        if now <= time.time():
            return spec
        try:
            return parse(now)
        except SpecError:
            return spec

    def _check_postable(self, buyer: str, spec: JobSpec, total: int) -> None:
        """Refuses, before anything is sent, a post the buyer cannot fund or whose deadline the chain has
        passed."""
        now = self.next_block_time()
        if spec.deadline <= now:
            raise SwarmError(
                f"spec field deadline ({when(spec.deadline)}) is not after the chain's current time "
                f"({when(now)}); "
                "choose a later deadline."
            )
        balance = self.swarm.balance_of(buyer)
        if balance < total:
            times = f" × {spec.replicas} replicas" if spec.replicas > 1 else ""
            raise SwarmError(
                f"{buyer} holds {format_amount(balance)}, less than the {format_amount(total)} this job "
                "escrows "
                f"(max_price_per_unit × max_units{times}); fund the account or lower the price, units or "
                "replicas."
            )

    def _check_borrowing(self, buyer: str, spec: JobSpec) -> None:
        """Refuses, before anything is sent, a job built on a result the buyer may not use."""
        from ledger.indexer.models import Job  # SQLModel: posting and following a job never load the ORM

        if spec.prior_job is None:
            return
        with self.synced_ledger() as session:
            prior = session.get(Job, (self.swarm.chain.chain_id, spec.prior_job))
            prior_buyer, prior_hash = (prior.buyer, prior.spec_hash) if prior else (None, None)
        stored = self.stored_spec(prior_hash)
        why = borrowing_refused(spec, buyer, prior_buyer,
                                validate_spec(stored, now=stored["deadline"] - 1) if stored else None)
        if why:
            raise SpecError(f"spec field {why}.", "model")

    def _post_replicas(self, sender: Sender, spec: JobSpec, digest: bytes) -> list[tuple[int, TxReceipt]]:
        """One job per replica; if one fails, those already posted are cancelled, so nothing is left half
        done."""
        posted: list[tuple[int, TxReceipt]] = []
        for replica in range(1, spec.replicas + 1):
            try:
                posted.append(post_job(self.swarm, sender, digest, spec.max_price_per_unit, spec.max_units,
                                       spec.deadline))
            except Exception as exc:  # whatever stopped it, the replicas already in escrow must go back
                if not posted:
                    raise
                undone = self._cancel_posted(sender, [job_id for job_id, _ in posted])
                raise SwarmError(
                    f"Posting replica {replica} of {spec.replicas} failed ({clause(exc)}); {undone}."
                ) from exc
        return posted

    def _cancel_posted(self, sender: Sender, ids: list[int]) -> str:
        """Cancels `ids` and says what became of them, as a clause."""
        cancelled, stuck = [], []
        for job_id in ids:
            try:
                cancel_job(self.swarm, sender, job_id)
                cancelled.append(job_id)
            except Exception as exc:  # noqa: BLE001 - reported to the user, with the job to cancel by hand
                stuck.append(f"job {job_id} ({clause(exc)})")
        said = []
        if cancelled:
            said.append(f"cancelled {'job' if len(cancelled) == 1 else 'jobs'} {listed(cancelled)}, "
                        "refunded in full")
        if stuck:
            said.append(f"could not cancel {', '.join(stuck)}: cancel by hand with `swarm job cancel ID`")
        return "; ".join(said)

    # ── status, wait ──────────────────────────────────────────────────────────
    def status(self, job_id: int) -> JobReport:
        """The job on chain, its spec, and the market service's record and history (the ledger
        brought up to the chain's head first)."""
        from ledger.indexer.models import Job  # SQLModel: posting and following a job never load the ORM

        info = self.existing(job_id)
        escrow_held = int(self.swarm.read("JobMarket", "escrowOf", job_id))
        with self.synced_ledger() as session:
            row = session.get(Job, (self.swarm.chain.chain_id, job_id))
            market, transitions = market_record(session, self.swarm.chain.chain_id, job_id)
            spec_hash = row.spec_hash if row else None
        return JobReport(info, escrow_held, spec_hash, self.stored_spec(spec_hash), market, transitions)

    def wait(self, job_id: int, timeout_s: float = 3_600.0, poll_s: float = 2.0) -> JobInfo:
        """Returns once the job has a result on chain or never will (failed, cancelled, reclaimed)."""
        end = time.monotonic() + timeout_s
        while True:
            info = job_info(self.swarm, job_id)
            name = info.status.name.lower()
            if name in NO_RESULT_EVER or (name in WITH_RESULT and info.result_hash != ZERO_HASH):
                return info
            if time.monotonic() > end:
                raise SwarmError(f"Job {job_id} is still {name} after {timeout_s:.0f} s.")
            time.sleep(poll_s)

    # ── result ────────────────────────────────────────────────────────────────
    def result(self, job_id: int, download_to: str | Path | None = None) -> Result:
        """The job's result, verified: found where its spec's output says (or where the market
        service recorded that the site put it), downloaded to `download_to` (default ./job-ID, a new
        or empty directory) when it is in object storage, and refused unless its files hash to the
        chain's resultHash (`market.storage.fetch_result`)."""
        info = self.existing(job_id)
        name = info.status.name.lower()
        if name in NO_RESULT_EVER:
            raise SwarmError(f"Job {job_id} has no result; it is {name} and will not get one.")
        if name not in WITH_RESULT or info.result_hash == ZERO_HASH:
            raise SwarmError(f"Job {job_id} has no result yet; it is {name}.")
        market, spec, location = self._where(job_id)
        if location is None:
            raise SwarmError(
                f"Job {job_id} is {name} on chain, but this ledger holds no market record of where its "
                "result is; "
                "run this where the market service keeps its SWARM_HOME and SWARM_DB_URL."
            )
        expected = "0x" + info.result_hash.hex()
        path = fetch_result(job_id, location, expected, download_to)
        metrics = market.metrics if market else {}
        if spec and spec.get("kind") == "ray":  # a program's own, read from the verified outputs
            named = (spec.get("params") or {}).get("metrics") or METRICS
            metrics = program_metrics(path, named) or metrics
        return Result(job_id, path, dataplane.shown(location), expected,
                      market.units if market else float(info.units_used), market.unit if market else None,
                      info.units_used, metrics, info)

    def _where(self, job_id: int) -> tuple[MarketJob | None, dict[str, Any] | None, str | None]:
        """The market's record of the job, its spec, and where its result goes: the buyer's own
        storage its spec names (the spec the chain pins), else where the market recorded the site
        put it; None where this SWARM_HOME knows neither."""
        from ledger.indexer.models import Job  # SQLModel: posting and following a job never load the ORM

        with self.synced_ledger() as session:
            market, _ = market_record(session, self.swarm.chain.chain_id, job_id)
            row = session.get(Job, (self.swarm.chain.chain_id, job_id))
            spec = self.stored_spec(row.spec_hash if row else None)
        if spec and spec.get("output"):
            namespace = job_namespace(self.swarm.chain.chain_id, self.swarm.market.address)
            return market, spec, result_location(spec["output"], namespace, job_id)
        return market, spec, (market.result_dir or None) if market is not None else None

    # ── logs ──────────────────────────────────────────────────────────────────
    @overload
    def logs(self, job_id: int, follow: Literal[False] = False) -> str: ...

    @overload
    def logs(self, job_id: int, follow: Literal[True], poll_s: float = ...) -> Iterator[str]: ...

    def logs(self, job_id: int, follow: bool = False, poll_s: float = 1.0) -> str | Iterator[str]:
        """What the job's program printed, stdout and stderr together. With `follow`, an iterator
        of the text as its site's lease prints it, from the start, that ends when the job's
        last lease has ended (it waits for a provider first); otherwise the text now (`log`)."""
        if follow:
            return self._follow(job_id, poll_s)
        return self.log(job_id).text

    def log(self, job_id: int) -> JobLog:
        """The job's log as it can best be read now: from its result, where the chain's
        resultHash covers it; else from its provider's site (the buyer signs the request); else,
        for a job that failed, what the site left in the buyer's output."""
        info = self.existing(job_id)
        name = info.status.name.lower()
        if name == "posted" or info.provider is None:
            raise SwarmError(f"Job {job_id} is {name} and no provider has run it, so it has printed nothing; "
                             f"`swarm job logs {job_id} --follow` waits for it.")
        _, _, location = self._where(job_id)
        if location and name in WITH_RESULT and info.result_hash != ZERO_HASH:
            text = kept_log(job_id, location, "0x" + info.result_hash.hex())
            if text is not None:
                return JobLog(job_id, text, f"its result in {dataplane.shown(location)}", True)
        try:
            text = self._site(info.provider).logs(job_id)
            return JobLog(job_id, text, f"the site of {info.provider}", False)
        except (Refused, SiteUnreachable, ComputeError) as exc:
            kept = failed_log(job_id, location) if location else None
            if kept is not None:
                return JobLog(job_id, kept, f"what its site kept in {dataplane.shown(location or '')}", False)
            why = _site_refusal(info.provider, exc)
            raise SwarmError(f"Job {job_id}'s log cannot be read: {why}.") from None

    def _follow(self, job_id: int, poll_s: float) -> Iterator[str]:
        self.existing(job_id)
        provider: str | None = None
        client: SiteClient | None = None
        offset, ended_at = 0, None
        while True:
            info = job_info(self.swarm, job_id)
            if info.status in (JobStatus.CANCELLED, JobStatus.RECLAIMED) or (
                    info.status is not JobStatus.POSTED and info.provider is None):
                return
            if info.status is JobStatus.POSTED or info.provider is None:
                time.sleep(poll_s)  # waiting for a provider
                continue
            if info.provider != provider:
                if provider is not None:
                    yield f"── job {job_id} moved to provider {info.provider} ──\n"
                provider, client, offset, ended_at = info.provider, self._site(info.provider), 0, None
            if client is None:
                client = self._site(info.provider)
            try:
                answer = client.log_since(job_id, offset)
            except Refused as exc:
                if exc.status != 404 or info.status is not JobStatus.ASSIGNED:
                    raise SwarmError(f"Job {job_id}'s log cannot be followed: "
                                     f"{_site_refusal(provider, exc)}.") from None
                time.sleep(poll_s)  # the market has not started its lease yet
                continue
            except (SiteUnreachable, ComputeError):  # no answer now: the market decides whether it lost it
                if info.status is not JobStatus.ASSIGNED:
                    return
                time.sleep(poll_s)
                continue
            if answer.get("text"):
                yield str(answer["text"])
            offset = int(answer.get("next", offset))
            if offset < int(answer.get("size", 0)):
                continue  # more is there already
            if answer.get("ended"):
                # Done, unless the market gives the job to another provider: the chain says which.
                if info.status is not JobStatus.ASSIGNED:
                    return
                ended_at = ended_at or time.monotonic()
                if time.monotonic() - ended_at > FOLLOW_SETTLE_S:
                    return
            time.sleep(poll_s)

    def _site(self, provider: str) -> SiteClient:
        """A client of `provider`'s site, as its chain registration names it, signing as this buyer."""
        from ledger.indexer.models import Provider  # SQLModel
        from market.sites import site_address  # web3, to sign the site's requests: the logs' reader's alone

        sender = self._signer()
        with self.synced_ledger() as session:
            row = session.get(Provider, (self.swarm.chain.chain_id, provider))
            spec_hash = row.spec_hash if row is not None else None
        address = site_address(self.home, provider, spec_hash) if spec_hash else None
        if address is None:
            raise SwarmError(f"Provider {provider} registered no site this SWARM_HOME ({self.home}) knows "
                             "of; run this where its hardware spec is stored, as the market's SWARM_HOME.")
        chain = self.swarm.chain.chain_id
        return SiteClient(address, sender.sign_typed_data, chain, self.swarm.market.address)

    # ── cancel ────────────────────────────────────────────────────────────────
    def cancel(self, job_id: int) -> Refund:
        """Cancels a job no provider has yet; the escrow comes back in full."""
        sender = self._signer()
        info = self.existing(job_id)
        if sender.address != info.buyer:
            raise SwarmError(
                f"Only the buyer of job {job_id}, {info.buyer}, may cancel it; you are {sender.address}."
            )
        if info.status is not JobStatus.POSTED:
            later = (f"; after its deadline ({when(info.deadline)}) `swarm job reclaim {job_id}` refunds it"
                     if info.status is JobStatus.ASSIGNED else "")
            raise SwarmError(
                f"Job {job_id} is {info.status.name.lower()}; only a posted job (not yet assigned) can "
                f"be cancelled{later}."
            )
        receipt = cancel_job(self.swarm, sender, job_id)
        (refund,) = (int(e.args["refund"]) for e in self.swarm.events(receipt, "JobCancelled"))
        return Refund(job_id, refund, receipt.tx_hash)

    # ── reclaim, dispute ──────────────────────────────────────────────────────
    def reclaim(self, job_id: int) -> Reclaimed:
        """Refunds a posted or assigned job after its deadline, or settles a dispute the arbiter
        left undecided past its arbitration period; anyone may send it."""
        sender = self._signer()
        info = self.existing(job_id)
        now = self.next_block_time()
        name = info.status.name.lower()
        if info.status in (JobStatus.POSTED, JobStatus.ASSIGNED):
            if now <= info.deadline:
                raise SwarmError(f"Job {job_id} is {name} and its deadline {when(info.deadline)} is "
                                 f"{duration(info.deadline - now + 1)} away; reclaim it after that.")
        elif info.status is JobStatus.DISPUTED:
            end = info.dispute_end + int(self.swarm.read("JobMarket", "ARBITRATION_PERIOD"))
            if now <= end:
                raise SwarmError(
                    f"Job {job_id} is disputed and awaits the arbiter until {when(end)} "
                    f"({duration(end - now + 1)} from now); reclaim it after that if it is still "
                    "undecided."
                )
            receipt = reclaim_expired(self.swarm, sender, job_id)
            (settled,) = self.swarm.events(receipt, "JobSettled")
            (expired,) = self.swarm.events(receipt, "DisputeExpired")
            bond = int(expired.args["bondRefund"])
            return Reclaimed(job_id, "settled", info.buyer, info.provider, int(settled.args["refund"]) + bond,
                             receipt.tx_hash, int(settled.args["payment"]), int(settled.args["fee"]), bond)
        else:
            raise SwarmError(f"Job {job_id} is {name}; only a posted or assigned job past its deadline, or a "
                             "disputed one the arbiter left undecided, can be reclaimed.")
        receipt = reclaim_expired(self.swarm, sender, job_id)
        (refund,) = (int(e.args["refund"]) for e in self.swarm.events(receipt, "JobReclaimed"))
        return Reclaimed(job_id, "reclaimed", info.buyer, None, refund, receipt.tx_hash)

    def dispute(self, job_id: int) -> Disputed:
        """Disputes a completed job's result in its dispute window, posting the bond (a share of the
        payment: back to the buyer if upheld or left undecided, to the provider if rejected)."""
        sender = self._signer()
        info = self.existing(job_id)
        matcher = self.swarm.read("JobMarket", "MATCHER_ROLE")
        if sender.address != info.buyer and not self.swarm.read(
            "JobMarket", "hasRole", matcher, sender.address
        ):
            raise SwarmError(
                f"Only the buyer of job {job_id}, {info.buyer}, may dispute it; you are {sender.address}."
            )
        if info.status is not JobStatus.COMPLETED:
            raise SwarmError(
                f"Job {job_id} is {info.status.name.lower()}; only a completed job can be disputed, "
                "during its dispute window."
            )
        if self.next_block_time() >= info.dispute_end:
            raise SwarmError(f"The dispute window of job {job_id} closed at {when(info.dispute_end)}; "
                             "its result can no longer be disputed.")
        bond = dispute_bond(self.swarm, sender.address, job_id)
        balance = self.swarm.balance_of(sender.address)
        if balance < bond:
            raise SwarmError(
                f"Disputing job {job_id} takes a bond of {format_amount(bond)} and {sender.address} "
                f"holds {format_amount(balance)}; fund the account first."
            )
        # approves the bond first where the allowance is short
        receipt = dispute_job(self.swarm, sender, job_id)
        return Disputed(job_id, sender.address, bond, receipt.tx_hash)

    # ── shared ────────────────────────────────────────────────────────────────
    def existing(self, job_id: int) -> JobInfo:
        info = job_info(self.swarm, job_id)
        if info.status is JobStatus.NONE:
            last = int(self.swarm.read("JobMarket", "nextJobId")) - 1
            known = f"jobs run from 1 to {last}" if last else "no job has been posted yet"
            raise SwarmError(f"Job {job_id} does not exist on chain {self.swarm.chain.chain_id} ({known}).")
        return info

    def next_block_time(self) -> int:
        """The time the next block will carry, which is what the contract judges a transaction by;
        the latest block can be far behind it on a devnet that mines only on demand."""
        try:
            pending = self.swarm.chain.timestamp("pending")
        except Exception:  # noqa: BLE001 - a node without a pending block: the latest is the best estimate
            pending = 0
        return max(pending, self.swarm.chain.timestamp())

    def stored_spec(self, spec_hash: str | None) -> dict[str, Any] | None:
        if not spec_hash:
            return None
        try:
            return load_stored_spec(self.home, bytes.fromhex(spec_hash.removeprefix("0x")))
        except (SwarmError, ValueError):
            return None

    @contextmanager
    def ledger(self) -> Iterator[Session]:
        # SQLAlchemy: only the operations that read the ledger load it
        from sqlmodel import Session

        from ledger.db import database_errors, open_ledger
        from market.migrations import MARKET

        engine = open_ledger(self.db_url, MARKET)
        try:
            with database_errors(self.db_url), Session(engine) as session:
                yield session
        finally:
            engine.dispose()

    @contextmanager
    def synced_ledger(self) -> Iterator[Session]:
        """The ledger, first brought up to the chain's head (incrementally, without output)."""
        # SQLAlchemy: only the operations that read the ledger load it
        from sqlmodel import Session

        from ledger.db import database_errors, open_ledger
        from ledger.indexer import Indexer
        from market.migrations import MARKET

        engine = open_ledger(self.db_url, MARKET)
        try:
            with database_errors(self.db_url):
                Indexer(self.swarm, engine).sync()
                with Session(engine) as session:
                    yield session
        finally:
            engine.dispose()

    def _signer(self) -> Sender:
        if self.sender is None:
            raise SwarmError("This buyer reads only; open it with an account or a key to sign.")
        return self.sender


PROGRAM_METRICS_BYTES = 1 << 20


def program_metrics(result_dir: Path, name: str) -> dict[str, Any]:
    """The JSON object a `ray` job's program wrote to outputs/<name> of its verified result; {}
    where it wrote none, or no JSON object."""
    path = result_dir / "outputs" / name
    try:
        if not path.is_file() or path.stat().st_size > PROGRAM_METRICS_BYTES:
            return {}
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def market_record(
    session: Session, chain_id: int, job_id: int
) -> tuple[MarketJob | None, list[MarketTransition]]:
    """The market service's row for the job and its transitions, detached so they outlive the session."""
    from sqlmodel import col, select

    from market.records import MarketJob, MarketTransition  # SQLModel

    market = session.get(MarketJob, (chain_id, job_id))
    transitions = list(session.exec(
        select(MarketTransition)
        .where(MarketTransition.chain_id == chain_id, MarketTransition.job_id == job_id)
        .order_by(col(MarketTransition.at), col(MarketTransition.id))
    ).all())
    session.expunge_all()
    return market, transitions


def listed(ids: list[int]) -> str:
    return ", ".join(str(i) for i in ids[:-1]) + (" and " if len(ids) > 1 else "") + str(ids[-1])
