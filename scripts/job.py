"""`swarm job …`: post a job spec into escrow, follow it, cancel, reclaim or dispute it,
and fetch its result, checked against the hash the chain holds.

A spec is validated before the chain is opened, and every signed command checks what
JobMarket would refuse first, so a refused command sends nothing and says why in one
sentence. A replicated spec becomes `replicas` on-chain jobs with the same spec hash,
each escrowing the full price × units; the market service groups them by buyer and
spec hash.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ledger.client import Swarm
from ledger.config import database_url
from ledger.errors import SwarmError
from ledger.jobs import (
    JobInfo, JobStatus, cancel_job, dispute_bond, dispute_job, job_info, post_job, reclaim_expired,
)
from ledger.keys import Keystore
from ledger.specs import load_spec as load_stored_spec
from ledger.specs import store_spec
from ledger.units import format_amount, parse_address
from scripts.common import (
    account_option, console, dev_account_address, duration, emit, json_option, key_option, open_swarm, settings,
    signer, table, when,
)

if TYPE_CHECKING:  # the ORM, the spec schema and web3 load in the commands that use them
    from sqlmodel import Session

    from ledger.indexer.models import Job
    from ledger.services import MarketJob, MarketTransition
    from ledger.tx import Receipt, Sender
    from market.spec import JobSpec

ZERO_ADDRESS = "0x" + "00" * 20
ZERO_HASH = bytes(32)
WITH_RESULT = (JobStatus.COMPLETED, JobStatus.DISPUTED, JobStatus.SETTLED)
NO_RESULT_EVER = (JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.RECLAIMED)
JOB_ID = click.IntRange(min=0, max=2**256 - 1)  # a uint256 on chain
STATUSES = tuple(s.name.lower() for s in JobStatus if s is not JobStatus.NONE)


@click.group()
def job() -> None:
    """Buy compute: post job specs into escrow, follow them, get verified results."""


def _signed(fn: Callable) -> Callable:
    """Adds --account, --key and --json to a command that signs."""
    return account_option(key_option(json_option(fn)))


# ── post ─────────────────────────────────────────────────────────────────────

@job.command()
@click.argument("spec_file", metavar="SPEC")
@click.option("--upload-to", default=None, metavar="URI",
              help="Where local code and inputs are uploaded [default: the spec's output/uploads].")
@_signed
def post(spec_file: str, upload_to: str | None, account: int | None, key_ref: str | None, as_json: bool) -> None:
    """Escrow payment for the job SPEC (a YAML or JSON file) and post it; one job per replica.

    A ray job's local code directory and inputs are uploaded to the buyer's storage first and
    pinned by their sha256, so the spec's hash on chain pins them."""
    from market.buyer import pin
    from market.spec import load_spec

    spec = load_spec(spec_file)  # a bad spec is refused before the chain is opened
    swarm = open_swarm()
    sender = signer(swarm, account, key_ref)
    total = spec.escrow_wei * spec.replicas
    _check_postable(swarm, sender.address, spec, total)
    spec = pin(spec, Path(spec_file).resolve().parent, upload_to)
    digest = store_spec(settings().home, spec.canonical())
    posted = _post_replicas(swarm, sender, spec, digest)
    ids = [job_id for job_id, _ in posted]
    payload = {
        "job_ids": ids, "spec_hash": "0x" + digest.hex(), "escrow_wei": str(total),
        "escrow_per_job_wei": str(spec.escrow_wei), "replicas": spec.replicas, "buyer": sender.address,
        "deadline": spec.deadline, "tx": [receipt.tx_hash for _, receipt in posted],
    }

    def human() -> None:
        each = f" ({format_amount(spec.escrow_wei)} each)" if spec.replicas > 1 else ""
        what = f"job {ids[0]}" if len(ids) == 1 else f"{len(ids)} replicas as jobs {_listed(ids)}"
        work = (f"ray program `{spec.params['entrypoint']}`" if spec.kind == "ray"
                else f"{spec.kind} of {spec.model} on {spec.dataset}")
        console.print(f"Posted {what}: {work}, "
                      f"escrow {format_amount(total)}{each}, deadline {when(spec.deadline)}.")
        console.print(f"Spec hash 0x{digest.hex()}. Follow it with `swarm job status {ids[0]}`.")

    emit(as_json, payload, human)


def _check_postable(swarm: Swarm, buyer: str, spec: JobSpec, total: int) -> None:
    """Refuses, before anything is sent, a post the buyer cannot fund or whose deadline the chain has passed."""
    now = _next_block_time(swarm)
    if spec.deadline <= now:
        raise SwarmError(
            f"spec field deadline ({when(spec.deadline)}) is not after the chain's current time ({when(now)}); "
            "choose a later deadline."
        )
    balance = swarm.balance_of(buyer)
    if balance < total:
        times = f" × {spec.replicas} replicas" if spec.replicas > 1 else ""
        raise SwarmError(
            f"{buyer} holds {format_amount(balance)}, less than the {format_amount(total)} this job escrows "
            f"(max_price_per_unit × max_units{times}); fund the account or lower the price, units or replicas."
        )


def _post_replicas(swarm: Swarm, sender: Sender, spec: JobSpec, digest: bytes) -> list[tuple[int, Receipt]]:
    """Posts one job per replica; if one fails, cancels those already posted so nothing is left half done."""
    posted: list[tuple[int, Receipt]] = []
    for replica in range(1, spec.replicas + 1):
        try:
            posted.append(
                post_job(swarm, sender, digest, spec.max_price_per_unit, spec.max_units, spec.deadline)
            )
        except Exception as exc:  # whatever stopped it, the replicas already in escrow must go back
            if not posted:
                raise
            undone = _cancel_posted(swarm, sender, [job_id for job_id, _ in posted])
            raise SwarmError(
                f"Posting replica {replica} of {spec.replicas} failed ({_clause(exc)}); {undone}."
            ) from exc
    return posted


def _cancel_posted(swarm: Swarm, sender: Sender, ids: list[int]) -> str:
    """Cancels `ids` and says what became of them, as a clause."""
    cancelled, stuck = [], []
    for job_id in ids:
        try:
            cancel_job(swarm, sender, job_id)
            cancelled.append(job_id)
        except Exception as exc:  # noqa: BLE001 - reported to the user, with the job to cancel by hand
            stuck.append(f"job {job_id} ({_clause(exc)})")
    said = []
    if cancelled:
        said.append(f"cancelled {'job' if len(cancelled) == 1 else 'jobs'} {_listed(cancelled)}, "
                    "refunded in full")
    if stuck:
        said.append(f"could not cancel {', '.join(stuck)}: cancel by hand with `swarm job cancel ID`")
    return "; ".join(said)


# ── status and list ──────────────────────────────────────────────────────────

@job.command()
@click.argument("job_id", metavar="JOB", type=JOB_ID)
@json_option
def status(job_id: int, as_json: bool) -> None:
    """The on-chain state of JOB, its spec, and the market's record of it."""
    from ledger.indexer.models import Job

    swarm = open_swarm()
    info = _existing(swarm, job_id)
    escrow_held = int(swarm.read("JobMarket", "escrowOf", job_id))
    with _synced_ledger(swarm) as session:
        row = session.get(Job, (swarm.chain.chain_id, job_id))
        market, transitions = _market_record(session, swarm.chain.chain_id, job_id)
        spec_hash = row.spec_hash if row else None
    spec = _stored_spec(spec_hash)
    payload = {
        **_chain_json(info), "chain_id": swarm.chain.chain_id, "escrow_held_wei": str(escrow_held),
        "spec_hash": spec_hash, "spec": spec,
        "market": _market_json(market), "transitions": [_transition_json(t) for t in transitions],
    }

    def human() -> None:
        console.print(table(f"Job {job_id} on chain {swarm.chain.chain_id}", ["", ""],
                            _chain_rows(info, escrow_held) + _spec_rows(spec_hash, spec)))
        if market is not None:
            console.print(table("Market record", ["", ""], _market_rows(market)))
        else:
            console.print("The market service has no record of this job in this ledger yet.")
        if transitions:
            console.print(table("History", ["at", "from", "to", "provider", "detail", "tx"], [
                (when(int(t.at)), t.from_state or "-", t.to_state, t.provider or "-", t.detail or "-",
                 t.tx_hash or "-")
                for t in transitions]))

    emit(as_json, payload, human)


@job.command("list")
@click.option("--buyer", default=None, metavar="ADDR", help="Jobs of this buyer.")
@account_option
@key_option
@click.option("--all", "everyone", is_flag=True, help="Jobs of every buyer.")
@click.option("--status", "wanted", type=click.Choice(STATUSES), default=None, help="Only jobs in this state.")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True, help="Jobs to show at most.")
@json_option
def list_jobs(buyer: str | None, account: int | None, key_ref: str | None, everyone: bool, wanted: str | None,
              limit: int, as_json: bool) -> None:
    """Your jobs (or --buyer's, or --all), newest first, from the ledger after a sync."""
    from sqlmodel import col, select

    from ledger.indexer.models import Job
    from ledger.services import MarketJob

    chosen = [flag for flag, given in (("--buyer", buyer), ("--account", account), ("--key", key_ref),
                                       ("--all", everyone or None)) if given is not None]
    if len(chosen) > 1:
        raise SwarmError(f"Give only one of --buyer, --account, --key or --all, not {' and '.join(chosen)}.")
    who = parse_address(buyer, "buyer address") if buyer else None
    swarm = open_swarm()
    if not who and not everyone:
        who = _own_address(swarm, account, key_ref)
    chain_id = swarm.chain.chain_id
    with _synced_ledger(swarm) as session:
        query = select(Job).where(Job.chain_id == chain_id)
        if who:
            query = query.where(Job.buyer == who)
        if wanted:
            query = query.where(Job.status == wanted)
        found = list(session.exec(query.order_by(col(Job.job_id).desc()).limit(limit)).all())
        states = {m.job_id: m.state for m in session.exec(select(MarketJob).where(
            MarketJob.chain_id == chain_id, col(MarketJob.job_id).in_([j.job_id for j in found]))).all()}
        session.expunge_all()
    payload = {"chain_id": chain_id, "buyer": who, "jobs": [_list_json(j, states.get(j.job_id)) for j in found]}

    def human() -> None:
        whose = f" of {who}" if who else ""
        if not found:
            console.print(f"No {wanted + ' ' if wanted else ''}jobs{whose} on chain {chain_id}.")
            return
        console.print(table(f"Jobs{whose} on chain {chain_id}, newest first",
                            ["job", "status", "market", "provider", "price/unit", "units", "escrow", "deadline"],
                            [_list_row(j, states.get(j.job_id)) for j in found]))

    emit(as_json, payload, human)


# ── cancel, reclaim, dispute ─────────────────────────────────────────────────

@job.command()
@click.argument("job_id", metavar="JOB", type=JOB_ID)
@_signed
def cancel(job_id: int, account: int | None, key_ref: str | None, as_json: bool) -> None:
    """Cancel JOB while no provider has it yet; the escrow comes back in full."""
    swarm = open_swarm()
    sender = signer(swarm, account, key_ref)
    info = _existing(swarm, job_id)
    _require_buyer(info, sender.address, "cancel")
    if info.status is not JobStatus.POSTED:
        later = (f"; after its deadline ({when(info.deadline)}) `swarm job reclaim {job_id}` refunds it"
                 if info.status is JobStatus.ASSIGNED else "")
        raise SwarmError(f"Job {job_id} is {_name(info.status)}; only a posted job (not yet assigned) can be "
                         f"cancelled{later}.")
    receipt = cancel_job(swarm, sender, job_id)
    _refunded(swarm, receipt, "JobCancelled", info, as_json, "Cancelled")


@job.command()
@click.argument("job_id", metavar="JOB", type=JOB_ID)
@_signed
def reclaim(job_id: int, account: int | None, key_ref: str | None, as_json: bool) -> None:
    """Refund JOB to its buyer after its deadline, or settle an undecided dispute; anyone may send it."""
    swarm = open_swarm()
    sender = signer(swarm, account, key_ref)
    info = _existing(swarm, job_id)
    now = _next_block_time(swarm)
    if info.status in (JobStatus.POSTED, JobStatus.ASSIGNED):
        if now <= info.deadline:
            raise SwarmError(
                f"Job {job_id} is {_name(info.status)} and its deadline {when(info.deadline)} is "
                f"{duration(info.deadline - now + 1)} away; reclaim it after that."
            )
    elif info.status is JobStatus.DISPUTED:
        end = info.dispute_end + int(swarm.read("JobMarket", "ARBITRATION_PERIOD"))
        if now <= end:
            raise SwarmError(
                f"Job {job_id} is disputed and awaits the arbiter until {when(end)} "
                f"({duration(end - now + 1)} from now); reclaim it after that if it is still undecided."
            )
        _settled_undecided(swarm, reclaim_expired(swarm, sender, job_id), info, as_json)
        return
    else:
        raise SwarmError(
            f"Job {job_id} is {_name(info.status)}; only a posted or assigned job past its deadline, or a "
            "disputed one the arbiter left undecided, can be reclaimed."
        )
    receipt = reclaim_expired(swarm, sender, job_id)
    _refunded(swarm, receipt, "JobReclaimed", info, as_json, "Reclaimed")


@job.command()
@click.argument("job_id", metavar="JOB", type=JOB_ID)
@_signed
def dispute(job_id: int, account: int | None, key_ref: str | None, as_json: bool) -> None:
    """Dispute completed JOB's result in its dispute window, with a bond; the payment waits for the arbiter.

    A buyer's bond is a share of the job's payment: returned if the buyer is upheld or the
    arbiter does not rule in time, paid to the provider if the dispute is rejected.
    """
    swarm = open_swarm()
    sender = signer(swarm, account, key_ref)
    info = _existing(swarm, job_id)
    if sender.address != info.buyer and not swarm.read(
        "JobMarket", "hasRole", swarm.read("JobMarket", "MATCHER_ROLE"), sender.address
    ):
        _require_buyer(info, sender.address, "dispute")
    if info.status is not JobStatus.COMPLETED:
        raise SwarmError(f"Job {job_id} is {_name(info.status)}; only a completed job can be disputed, "
                         "during its dispute window.")
    now = _next_block_time(swarm)
    if now >= info.dispute_end:
        raise SwarmError(f"The dispute window of job {job_id} closed at {when(info.dispute_end)}; "
                         "its result can no longer be disputed.")
    bond = dispute_bond(swarm, sender.address, job_id)
    balance = swarm.balance_of(sender.address)
    if balance < bond:
        raise SwarmError(f"Disputing job {job_id} takes a bond of {format_amount(bond)} and {sender.address} holds "
                         f"{format_amount(balance)}; fund the account first.")
    receipt = dispute_job(swarm, sender, job_id)  # approves the bond first where the allowance is short
    payload = {"job_id": job_id, "status": "disputed", "by": sender.address, "bond_wei": str(bond),
               "tx": receipt.tx_hash}
    posted = (f", posting a bond of {format_amount(bond)} (back to you if you are upheld or the arbiter does not "
              "rule in time, to the provider if the dispute is rejected)") if bond else ""
    emit(as_json, payload, lambda: console.print(
        f"Disputed job {job_id}{posted}; its payment is held until the arbiter decides ({receipt.tx_hash})."))


# ── result ───────────────────────────────────────────────────────────────────

@job.command()
@click.argument("job_id", metavar="JOB", type=JOB_ID)
@click.option("--download", "download_to", default=None, type=click.Path(file_okay=False, path_type=Path),
              help="Copy the result here [default for a result in object storage: ./job-JOB].")
@json_option
def result(job_id: int, download_to: Path | None, as_json: bool) -> None:
    """The result of JOB: where it is, its metrics, and whether its files match the on-chain hash.

    A result in object storage is downloaded first and checked where it landed."""
    from compute import dataplane
    from ledger.indexer.models import Job
    from market.spec import job_namespace

    swarm = open_swarm()
    info = _existing(swarm, job_id)
    if info.status in NO_RESULT_EVER:
        raise SwarmError(f"Job {job_id} has no result; it is {_name(info.status)} and will not get one.")
    if info.status not in WITH_RESULT or info.result_hash == ZERO_HASH:
        raise SwarmError(f"Job {job_id} has no result yet; it is {_name(info.status)}.")
    with _synced_ledger(swarm) as session:
        market, _ = _market_record(session, swarm.chain.chain_id, job_id)
        row = session.get(Job, (swarm.chain.chain_id, job_id))
        spec = _stored_spec(row.spec_hash if row else None)
    if spec and spec.get("output"):  # the buyer's own storage, named by the spec the chain pins
        location = dataplane.join(spec["output"], job_namespace(swarm.chain.chain_id, swarm.market.address)
                                  + str(job_id))
    elif market is not None and market.result_dir:
        location = market.result_dir
    else:
        raise SwarmError(
            f"Job {job_id} is {_name(info.status)} on chain, but this ledger holds no market record of where its "
            "result is; run this where the market service keeps its SWARM_HOME and SWARM_DB_URL."
        )
    expected = "0x" + info.result_hash.hex()
    if dataplane.is_uri(location) or download_to is not None:
        result_dir = (download_to or Path(f"job-{job_id}")).resolve()
        try:
            dataplane.download(location, result_dir, what=f"the result of job {job_id}")
        except dataplane.DataPlaneError as exc:
            raise SwarmError(f"{_clause(exc)}; check the output URI and its keys (AWS_* for s3://).") from None
    else:
        result_dir = Path(location)
    _verify(job_id, result_dir, expected)
    units = market.units if market else info.units_used
    unit = market.unit if market else None
    metrics = market.metrics if market else {}
    payload = {
        "job_id": job_id, "status": _name(info.status), "provider": info.provider, "result_dir": str(result_dir),
        "stored_at": dataplane.shown(location), "result_hash": expected, "verified": True, "units": units,
        "unit": unit, "units_used": info.units_used, "metrics": metrics,
    }

    def human() -> None:
        rows = [("result", str(result_dir))]
        if str(result_dir) != location:
            rows.append(("stored at", dataplane.shown(location)))
        rows += [("result hash", f"{expected} (verified)"), ("provider", info.provider),
                 ("units", f"{units:g} {unit or ''}".strip() + f" (billed {info.units_used})")]
        rows += [(name, _metric(value)) for name, value in sorted(metrics.items())]
        console.print(table(f"Result of job {job_id}", ["", ""], rows))
        console.print(f"Verified: the files in {result_dir / 'outputs'} hash to the result hash on chain.")

    emit(as_json, payload, human)


def _verify(job_id: int, result_dir: Path, expected: str) -> None:
    """Refuses a result whose outputs do not hash to `expected`, naming the files that differ."""
    from compute.manifest import MANIFEST, build_manifest, manifest_hash

    if not result_dir.is_dir():
        raise SwarmError(
            f"The result directory of job {job_id}, {result_dir}, is missing; it cannot be verified."
        )
    entries = build_manifest(result_dir)
    actual = manifest_hash(entries)
    if actual == expected:
        return
    changed = _changed_files(result_dir / MANIFEST, entries, expected)
    raise SwarmError(
        f"The result of job {job_id} in {result_dir} does not match its on-chain result hash {expected} "
        f"(the files hash to {actual}{changed}); do not trust it."
    )


def _changed_files(manifest: Path, entries: list[dict], expected: str) -> str:
    """Which outputs differ from the manifest the provider wrote, if that manifest is the one on chain."""
    try:
        raw = manifest.read_bytes()
        if "0x" + hashlib.sha256(raw).hexdigest() != expected:
            return ""
        original = {e["path"]: e["sha256"] for e in json.loads(raw)}
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    now = {e["path"]: e["sha256"] for e in entries}
    differ = sorted(p for p in original.keys() | now.keys() if original.get(p) != now.get(p))
    return f"; changed, added or removed: {', '.join('outputs/' + p for p in differ)}" if differ else ""


# ── helpers ──────────────────────────────────────────────────────────────────

def _next_block_time(swarm: Swarm) -> int:
    """The time the next block will carry, which is what the contract will judge a transaction by.

    The latest block can be far behind it on a devnet that mines only on demand.
    """
    try:
        pending = swarm.chain.timestamp("pending")
    except Exception:  # noqa: BLE001 - a node without a pending block: the latest is the best estimate
        pending = 0
    return max(pending, swarm.chain.timestamp())


def _existing(swarm: Swarm, job_id: int) -> JobInfo:
    info = job_info(swarm, job_id)
    if info.status is JobStatus.NONE:
        last = int(swarm.read("JobMarket", "nextJobId")) - 1
        known = f"jobs run from 1 to {last}" if last else "no job has been posted yet"
        raise SwarmError(f"Job {job_id} does not exist on chain {swarm.chain.chain_id} ({known}).")
    return info


def _require_buyer(info: JobInfo, who: str, verb: str) -> None:
    if who != info.buyer:
        raise SwarmError(f"Only the buyer of job {info.job_id}, {info.buyer}, may {verb} it; you are {who}.")


def _refunded(swarm: Swarm, receipt: Receipt, event: str, info: JobInfo, as_json: bool, done: str) -> None:
    (refund,) = (int(e.args["refund"]) for e in swarm.events(receipt, event))
    payload = {"job_id": info.job_id, "status": done.lower(), "buyer": info.buyer,
               "refund_wei": str(refund), "tx": receipt.tx_hash}
    emit(as_json, payload, lambda: console.print(
        f"{done} job {info.job_id}; refunded {format_amount(refund)} to {info.buyer} ({receipt.tx_hash})."))


def _settled_undecided(swarm: Swarm, receipt: Receipt, info: JobInfo, as_json: bool) -> None:
    """Reports a dispute the arbiter left undecided, settled half and half."""
    (settled,) = swarm.events(receipt, "JobSettled")
    (expired,) = swarm.events(receipt, "DisputeExpired")
    refund, bond = int(settled.args["refund"]), int(expired.args["bondRefund"])
    payment, fee = int(settled.args["payment"]), int(settled.args["fee"])
    payload = {"job_id": info.job_id, "status": "settled", "buyer": info.buyer, "provider": info.provider,
               "payment_wei": str(payment), "fee_wei": str(fee), "refund_wei": str(refund + bond),
               "bond_refund_wei": str(bond), "tx": receipt.tx_hash}
    emit(as_json, payload, lambda: console.print(
        f"The arbiter did not rule on job {info.job_id}, so half its payment went to the provider "
        f"({format_amount(payment)} after a fee of {format_amount(fee)}) and {format_amount(refund + bond)} back "
        f"to {info.buyer}, its bond included ({receipt.tx_hash})."))


def _own_address(swarm: Swarm, account: int | None, key_ref: str | None) -> str:
    if account is not None:
        return dev_account_address(swarm, account)
    store = Keystore(settings().home / "keys")
    if key_ref is None and not store.list():
        raise SwarmError("Say whose jobs to list: --buyer ADDR, --account N, --key K, or --all.")
    return store.find(key_ref).address


@contextmanager
def _ledger() -> Iterator[Session]:
    from sqlmodel import Session

    from ledger.db import database_errors, open_ledger

    url = database_url(settings().home)
    engine = open_ledger(url)
    try:
        with database_errors(url), Session(engine) as session:
            yield session
    finally:
        engine.dispose()


@contextmanager
def _synced_ledger(swarm: Swarm) -> Iterator[Session]:
    """The ledger, first brought up to the chain's head (incrementally, without output)."""
    from sqlmodel import Session

    from ledger.db import database_errors, open_ledger
    from ledger.indexer import Indexer

    url = database_url(settings().home)
    engine = open_ledger(url)
    try:
        with database_errors(url):
            Indexer(swarm, engine).sync()
            with Session(engine) as session:
                yield session
    finally:
        engine.dispose()


def _market_record(
    session: Session, chain_id: int, job_id: int
) -> tuple[MarketJob | None, list[MarketTransition]]:
    """The market service's row for the job and its transitions, detached so they outlive the session."""
    from sqlmodel import col, select

    from ledger.services import MarketJob, MarketTransition

    market = session.get(MarketJob, (chain_id, job_id))
    transitions = list(session.exec(
        select(MarketTransition)
        .where(MarketTransition.chain_id == chain_id, MarketTransition.job_id == job_id)
        .order_by(col(MarketTransition.at), col(MarketTransition.id))
    ).all())
    session.expunge_all()
    return market, transitions


def _stored_spec(spec_hash: str | None) -> dict[str, Any] | None:
    if not spec_hash:
        return None
    try:
        return load_stored_spec(settings().home, bytes.fromhex(spec_hash.removeprefix("0x")))
    except (SwarmError, ValueError):
        return None


def _chain_json(info: JobInfo) -> dict[str, Any]:
    assigned = info.provider != ZERO_ADDRESS
    return {
        "job_id": info.job_id, "status": _name(info.status), "buyer": info.buyer,
        "provider": info.provider if assigned else None,
        "max_price_per_unit_wei": str(info.max_price_per_unit), "max_units": info.max_units,
        "price_per_unit_wei": str(info.price_per_unit) if assigned else None, "units_used": info.units_used,
        "escrow_wei": str(info.escrow), "deadline": info.deadline, "dispute_end": info.dispute_end or None,
        "result_hash": "0x" + info.result_hash.hex() if info.result_hash != ZERO_HASH else None,
    }


def _chain_rows(info: JobInfo, escrow_held: int) -> list[tuple[str, str]]:
    assigned = info.provider != ZERO_ADDRESS
    price = (f"{format_amount(info.price_per_unit)} (cap {format_amount(info.max_price_per_unit)})" if assigned
             else f"≤ {format_amount(info.max_price_per_unit)}")
    units = f"{info.units_used} of at most {info.max_units}" if info.units_used else f"≤ {info.max_units}"
    rows = [
        ("status", _name(info.status)), ("buyer", info.buyer), ("provider", info.provider if assigned else "-"),
        ("price/unit", price), ("units", units),
        ("escrow", f"{format_amount(info.escrow)} (held now {format_amount(escrow_held)})"),
        ("deadline", when(info.deadline)),
    ]
    if info.dispute_end:
        rows.append(("dispute end", when(info.dispute_end)))
    if info.result_hash != ZERO_HASH:
        rows.append(("result hash", "0x" + info.result_hash.hex()))
    return rows


def _spec_rows(spec_hash: str | None, spec: dict[str, Any] | None) -> list[tuple[str, str]]:
    if spec_hash is None:
        return [("spec", "not indexed yet (run `swarm ledger sync`)")]
    if spec is None:
        return [("spec hash", spec_hash), ("spec", "not stored in this SWARM_HOME")]
    res = spec.get("resources", {})
    gpus = f", {res['gpus_per_worker']} GPU each" if res.get("gpus_per_worker") else ""
    return [
        ("spec hash", spec_hash), ("kind", spec.get("kind", "?")), ("model", spec.get("model", "?")),
        ("dataset", spec.get("dataset", "?")), ("workers", f"{res.get('workers', '?')}{gpus}"),
        ("replicas", str(spec.get("replicas", 1))),
    ]


def _market_json(market: MarketJob | None) -> dict[str, Any] | None:
    if market is None:
        return None
    return {
        "state": market.state, "provider": market.provider, "attempts": market.attempts,
        "group_id": market.group_id, "replicas": market.replicas, "units": market.units, "unit": market.unit,
        "result_dir": market.result_dir, "result_hash": market.result_hash, "metrics": market.metrics,
        "error": market.error, "explanation": market.explanation, "evidence": market.evidence,
    }


def _market_rows(market: MarketJob) -> list[tuple[str, str]]:
    rows = [("state", market.state), ("provider", market.provider or "-"), ("attempts", str(market.attempts))]
    if market.replicas > 1:
        rows.append(("replica group", f"job {market.group_id}, {market.replicas} replicas"))
    if market.units:
        rows.append(("units", f"{market.units:g} {market.unit or ''}".strip()))
    if market.result_dir:
        rows.append(("result", market.result_dir))
    rows += [(name, _metric(value)) for name, value in sorted(market.metrics.items())]
    if market.explanation:
        rows.append(("unmatched because", market.explanation))
    if market.error:
        rows.append(("last error", market.error))
    return rows


def _transition_json(t: MarketTransition) -> dict[str, Any]:
    return {"at": t.at, "from": t.from_state, "to": t.to_state, "provider": t.provider, "detail": t.detail,
            "tx": t.tx_hash}


def _list_json(j: Job, market_state: str | None) -> dict[str, Any]:
    return {
        "job_id": j.job_id, "status": j.status, "market_state": market_state, "buyer": j.buyer,
        "provider": j.provider, "spec_hash": j.spec_hash, "max_price_per_unit_wei": str(j.max_price_per_unit),
        "price_per_unit_wei": str(j.price_per_unit) if j.provider else None, "max_units": j.max_units,
        "units_used": j.units_used, "escrow_wei": str(j.escrow), "deadline": j.deadline,
    }


def _list_row(j: Job, market_state: str | None) -> list[Any]:
    price = format_amount(j.price_per_unit) if j.provider else f"≤ {format_amount(j.max_price_per_unit)}"
    units = f"{j.units_used}/{j.max_units}" if j.units_used else f"≤ {j.max_units}"
    return [j.job_id, j.status, market_state or "-", j.provider or "-", price, units, format_amount(j.escrow),
            when(j.deadline)]


def _metric(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else json.dumps(value) if isinstance(value, (dict, list)) \
        else str(value)


def _name(status: JobStatus) -> str:
    return status.name.lower()


def _listed(ids: list[int]) -> str:
    return ", ".join(str(i) for i in ids[:-1]) + (" and " if len(ids) > 1 else "") + str(ids[-1])


def _clause(exc: BaseException) -> str:
    """An error's sentence as a clause to embed: no trailing full stop."""
    return (str(exc).strip() or type(exc).__name__).rstrip(".")
