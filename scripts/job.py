"""`swarm job …`: post a job spec into escrow, follow it, cancel, reclaim or dispute it,
and fetch its result, checked against the hash the chain holds. The buyer's operations
are `market.buyer.Buyer`'s; these commands parse their arguments and print.

A spec is validated before the chain is opened, and every signed command checks what
JobMarket would refuse first, so a refused command sends nothing and says why in one
sentence. A replicated spec becomes `replicas` on-chain jobs with the same spec hash,
each escrowing the full price × units; the market service groups them by buyer and
spec hash.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ledger.client import Swarm
from ledger.config import database_url
from ledger.errors import SwarmError
from ledger.jobs import JobInfo, JobStatus
from ledger.keys import Keystore
from ledger.units import format_amount, parse_address
from scripts.common import (
    account_option,
    console,
    dev_account_address,
    emit,
    json_option,
    key_option,
    open_swarm,
    settings,
    signed_options,
    signer,
    table,
    when,
)

# The command line loads what a command needs as it runs: `swarm --help` imports this module, so what only
# some of its commands need — the buyer's API with its spec schema (pydantic) and the ORM's models
# (`market.buyer`, `market.records`, `ledger.indexer.models`) — loads inside them (tests/test_startup.py,
# bench/startup.py).

if TYPE_CHECKING:  # the ORM, the spec schema and web3 load in the commands that use them
    from ledger.indexer.models import Job
    from market.buyer import Buyer
    from market.records import MarketJob, MarketTransition

ZERO_ADDRESS = "0x" + "00" * 20
ZERO_HASH = bytes(32)
JOB_ID = click.IntRange(min=0, max=2**256 - 1)  # a uint256 on chain
STATUSES = tuple(s.name.lower() for s in JobStatus if s is not JobStatus.NONE)


@click.group()
def job() -> None:
    """Buy compute: post job specs into escrow, follow them, get verified results."""


_signed = signed_options


# ── post ─────────────────────────────────────────────────────────────────────

@job.command()
@click.argument("spec_file", metavar="SPEC")
@click.option("--upload-to", default=None, metavar="URI",
              help="Where local code and inputs are uploaded [default: the spec's output/uploads].")
@_signed
def post(
    spec_file: str, upload_to: str | None, account: int | None, key_ref: str | None, as_json: bool
) -> None:
    """Escrow payment for the job SPEC (a YAML or JSON file) and post it; one job per replica.

    A ray job's local code directory and inputs, and a built-in job's dataset or model file,
    are uploaded to the buyer's storage first (a built-in job's, only with --upload-to) and
    pinned by their sha256, so the spec's hash on chain pins them."""
    from market.spec import load_spec, named

    load_spec(spec_file)  # a bad spec is refused before the chain is opened
    buyer = _buyer(account, key_ref)
    # read again by the buyer, whose deadline as a duration counts from the chain's clock
    posted = buyer.post(spec_file, upload_to=upload_to, base=Path(spec_file).resolve().parent)
    spec, ids = posted.spec, posted.job_ids
    payload = {
        "job_ids": ids, "spec_hash": posted.spec_hash, "escrow_wei": str(posted.escrow_wei),
        "escrow_per_job_wei": str(spec.escrow_wei), "replicas": spec.replicas, "buyer": posted.buyer,
        "deadline": spec.deadline, "tx": posted.tx,
    }

    def human() -> None:
        each = f" ({format_amount(spec.escrow_wei)} each)" if spec.replicas > 1 else ""
        what = f"job {ids[0]}" if len(ids) == 1 else f"{len(ids)} replicas as jobs {_listed(ids)}"
        work = (f"ray program `{spec.params['entrypoint']}`" if spec.kind == "ray"
                else f"{spec.kind} of {named(spec.model)} on {named(spec.dataset)}")
        console.print(f"Posted {what}: {work}, escrow {format_amount(posted.escrow_wei)}{each}, "
                      f"deadline {when(spec.deadline)}.")
        console.print(f"Spec hash {posted.spec_hash}. Follow it with `swarm job status {ids[0]}`.")

    emit(as_json, payload, human)


def _buyer(account: int | None, key_ref: str | None, signs: bool = True) -> Buyer:
    """The buyer's API, signing as --account or --key (read only when `signs` is False)."""
    from market.buyer import Buyer

    swarm = open_swarm()
    return Buyer(swarm, signer(swarm, account, key_ref) if signs else None, settings().home,
                 database_url(settings().home))


# ── status and list ──────────────────────────────────────────────────────────

@job.command()
@click.argument("job_id", metavar="JOB", type=JOB_ID)
@json_option
def status(job_id: int, as_json: bool) -> None:
    """The on-chain state of JOB, its spec, and the market's record of it."""
    buyer = _buyer(None, None, signs=False)
    report = buyer.status(job_id)
    info, market, transitions = report.info, report.market, report.transitions
    chain_id = buyer.swarm.chain.chain_id
    payload = {
        **_chain_json(info), "chain_id": chain_id, "escrow_held_wei": str(report.escrow_held_wei),
        "spec_hash": report.spec_hash, "spec": report.spec,
        "market": _market_json(market), "transitions": [_transition_json(t) for t in transitions],
    }

    def human() -> None:
        console.print(
            table(
                f"Job {job_id} on chain {chain_id}",
                ["", ""],
                _chain_rows(info, report.escrow_held_wei) + _spec_rows(report.spec_hash, report.spec),
            )
        )
        if market is not None:
            console.print(table("Market record", ["", ""], _market_rows(market)))
        else:
            console.print("The market service has no record of this job in this ledger yet.")
        if market is not None and market.log_tail:
            console.print(f"The last lines its lease printed (all of them: `swarm job logs {job_id}`):")
            console.print(market.log_tail.rstrip("\n"), markup=False, highlight=False)
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
@click.option(
    "--status", "wanted", type=click.Choice(STATUSES), default=None, help="Only jobs in this state."
)
@click.option(
    "--limit", type=click.IntRange(min=1), default=50, show_default=True, help="Jobs to show at most."
)
@json_option
def list_jobs(buyer: str | None, account: int | None, key_ref: str | None, everyone: bool, wanted: str | None,
              limit: int, as_json: bool) -> None:
    """Your jobs (or --buyer's, or --all), newest first, from the ledger after a sync."""
    from sqlmodel import col, select

    from ledger.indexer.models import Job
    from market.records import MarketJob

    chosen = [flag for flag, given in (("--buyer", buyer), ("--account", account), ("--key", key_ref),
                                       ("--all", everyone or None)) if given is not None]
    if len(chosen) > 1:
        raise SwarmError(f"Give only one of --buyer, --account, --key or --all, not {' and '.join(chosen)}.")
    who = parse_address(buyer, "buyer address") if buyer else None
    reader = _buyer(None, None, signs=False)
    swarm = reader.swarm
    if not who and not everyone:
        who = _own_address(swarm, account, key_ref)
    chain_id = swarm.chain.chain_id
    with reader.synced_ledger() as session:
        query = select(Job).where(Job.chain_id == chain_id)
        if who:
            query = query.where(Job.buyer == who)
        if wanted:
            query = query.where(Job.status == wanted)
        found = list(session.exec(query.order_by(col(Job.job_id).desc()).limit(limit)).all())
        states = {m.job_id: m.state for m in session.exec(select(MarketJob).where(
            MarketJob.chain_id == chain_id, col(MarketJob.job_id).in_([j.job_id for j in found]))).all()}
        session.expunge_all()
    payload = {
        "chain_id": chain_id,
        "buyer": who,
        "jobs": [_list_json(j, states.get(j.job_id)) for j in found],
    }

    def human() -> None:
        whose = f" of {who}" if who else ""
        if not found:
            console.print(f"No {wanted + ' ' if wanted else ''}jobs{whose} on chain {chain_id}.")
            return
        console.print(
            table(
                f"Jobs{whose} on chain {chain_id}, newest first",
                ["job", "status", "market", "provider", "price/unit", "units", "escrow", "deadline"],
                [_list_row(j, states.get(j.job_id)) for j in found],
            )
        )

    emit(as_json, payload, human)


# ── cancel, reclaim, dispute ─────────────────────────────────────────────────

@job.command()
@click.argument("job_id", metavar="JOB", type=JOB_ID)
@_signed
def cancel(job_id: int, account: int | None, key_ref: str | None, as_json: bool) -> None:
    """Cancel JOB while no provider has it yet; the escrow comes back in full."""
    buyer = _buyer(account, key_ref)
    refund = buyer.cancel(job_id)
    payload = {
        "job_id": job_id,
        "status": "cancelled",
        "buyer": buyer.address,
        "refund_wei": str(refund.refund_wei),
        "tx": refund.tx,
    }
    emit(
        as_json,
        payload,
        lambda: console.print(
            f"Cancelled job {job_id}; refunded {format_amount(refund.refund_wei)} to {buyer.address} "
            f"({refund.tx})."
        ),
    )


@job.command()
@click.argument("job_id", metavar="JOB", type=JOB_ID)
@_signed
def reclaim(job_id: int, account: int | None, key_ref: str | None, as_json: bool) -> None:
    """Refund JOB to its buyer after its deadline, or settle an undecided dispute; anyone may send it."""
    done = _buyer(account, key_ref).reclaim(job_id)
    if done.outcome == "reclaimed":
        payload = {
            "job_id": job_id,
            "status": "reclaimed",
            "buyer": done.buyer,
            "refund_wei": str(done.refund_wei),
            "tx": done.tx,
        }
        emit(
            as_json,
            payload,
            lambda: console.print(
                f"Reclaimed job {job_id}; refunded {format_amount(done.refund_wei)} to {done.buyer} "
                f"({done.tx})."
            ),
        )
        return
    payload = {
        "job_id": job_id,
        "status": "settled",
        "buyer": done.buyer,
        "provider": done.provider,
        "payment_wei": str(done.payment_wei),
        "fee_wei": str(done.fee_wei),
        "refund_wei": str(done.refund_wei),
        "bond_refund_wei": str(done.bond_refund_wei),
        "tx": done.tx,
    }
    emit(as_json, payload, lambda: console.print(
        f"The arbiter did not rule on job {job_id}, so half its payment went to the provider "
        f"({format_amount(done.payment_wei)} after a fee of {format_amount(done.fee_wei)}) and "
        f"{format_amount(done.refund_wei)} back to {done.buyer}, its bond included ({done.tx})."))


@job.command()
@click.argument("job_id", metavar="JOB", type=JOB_ID)
@_signed
def dispute(job_id: int, account: int | None, key_ref: str | None, as_json: bool) -> None:
    """Dispute completed JOB's result in its dispute window, with a bond; the payment waits for the arbiter.

    A buyer's bond is a share of the job's payment: returned if the buyer is upheld or the
    arbiter does not rule in time, paid to the provider if the dispute is rejected.
    """
    done = _buyer(account, key_ref).dispute(job_id)
    payload = {"job_id": job_id, "status": "disputed", "by": done.by, "bond_wei": str(done.bond_wei),
               "tx": done.tx}
    posted = (
        (
            f", posting a bond of {format_amount(done.bond_wei)} (back to you if you are upheld or the "
            "arbiter "
            "does not rule in time, to the provider if the dispute is rejected)"
        )
        if done.bond_wei
        else ""
    )
    emit(as_json, payload, lambda: console.print(
        f"Disputed job {job_id}{posted}; its payment is held until the arbiter decides ({done.tx})."))


# ── logs ─────────────────────────────────────────────────────────────────────

@job.command()
@click.argument("job_id", metavar="JOB", type=JOB_ID)
@click.option("--follow", "-f", is_flag=True, help="Print what it prints as it runs, until its lease ends.")
@_signed
def logs(job_id: int, follow: bool, account: int | None, key_ref: str | None, as_json: bool) -> None:
    """What JOB's program printed, stdout and stderr together.

    From its result when it has one (covered by the on-chain result hash), else from its
    provider's site, which serves it to the job's buyer (sign as the buyer with --account or
    --key). With --follow, from the start as it prints, until its last lease ends."""
    buyer = _buyer(account, key_ref)
    if follow:
        if as_json:
            raise SwarmError("Give --follow or --json, not both: --json prints the log once, as it is now.")
        for text in buyer.logs(job_id, follow=True):
            click.echo(text, nl=False)
        return
    found = buyer.log(job_id)
    payload = {"job_id": job_id, "source": found.source, "verified": found.verified, "log": found.text}

    def human() -> None:
        covered = " (covered by its on-chain result hash)" if found.verified else ""
        click.echo(f"── job {job_id}'s log, from {found.source}{covered} ──", err=True)
        click.echo(found.text, nl=not found.text or not found.text.endswith("\n"))

    emit(as_json, payload, human)


# ── result ───────────────────────────────────────────────────────────────────

@job.command()
@click.argument("job_id", metavar="JOB", type=JOB_ID)
@click.option("--download", "download_to", default=None, type=click.Path(file_okay=False, path_type=Path),
              help="Copy the result here [default for a result in object storage: ./job-JOB].")
@json_option
def result(job_id: int, download_to: Path | None, as_json: bool) -> None:
    """The result of JOB: where it is, its metrics, and whether its files match the on-chain hash.

    A result in object storage is downloaded first and checked where it landed."""
    found = _buyer(None, None, signs=False).result(job_id, download_to)
    info = found.info
    payload = {
        "job_id": job_id,
        "status": _name(info.status),
        "provider": info.provider,
        "result_dir": str(found.path),
        "stored_at": found.stored_at,
        "result_hash": found.result_hash,
        "verified": True,
        "units": found.units,
        "unit": found.unit,
        "units_used": info.units_used,
        "metrics": found.metrics,
    }

    def human() -> None:
        rows = [("result", str(found.path))]
        if str(found.path) != found.stored_at:
            rows.append(("stored at", found.stored_at))
        rows += [("result hash", f"{found.result_hash} (verified)"), ("provider", info.provider),
                 ("units", f"{found.units:g} {found.unit or ''}".strip() + f" (billed {info.units_used})")]
        rows += [(name, _metric(value)) for name, value in sorted(found.metrics.items())]
        console.print(table(f"Result of job {job_id}", ["", ""], rows))
        console.print(f"Verified: the files in {found.path / 'outputs'} hash to the result hash on chain.")

    emit(as_json, payload, human)


# ── helpers ──────────────────────────────────────────────────────────────────

def _own_address(swarm: Swarm, account: int | None, key_ref: str | None) -> str:
    if account is not None:
        return dev_account_address(swarm, account)
    store = Keystore(settings().home / "keys")
    if key_ref is None and not store.list():
        raise SwarmError("Say whose jobs to list: --buyer ADDR, --account N, --key K, or --all.")
    return store.find(key_ref).address


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
    price = (
        f"{format_amount(info.price_per_unit)} (cap {format_amount(info.max_price_per_unit)})"
        if assigned
        else f"≤ {format_amount(info.max_price_per_unit)}"
    )
    units = f"{info.units_used} of at most {info.max_units}" if info.units_used else f"≤ {info.max_units}"
    rows = [
        ("status", _name(info.status)),
        ("buyer", info.buyer),
        ("provider", info.provider if assigned else "-"),
        ("price/unit", price),
        ("units", units),
        ("escrow", f"{format_amount(info.escrow)} (held now {format_amount(escrow_held)})"),
        ("deadline", when(info.deadline)),
    ]
    if info.dispute_end:
        rows.append(("dispute end", when(info.dispute_end)))
    if info.result_hash != ZERO_HASH:
        rows.append(("result hash", "0x" + info.result_hash.hex()))
    elif info.dispute_end:  # done with no result: charged
        rows.append(("result", "none: the job failed by its own fault, charged the units its lease held"))
    return rows


def _spec_rows(spec_hash: str | None, spec: dict[str, Any] | None) -> list[tuple[str, str]]:
    from market.spec import named

    if spec_hash is None:
        return [("spec", "not indexed yet (run `swarm ledger sync`)")]
    if spec is None:
        return [("spec hash", spec_hash), ("spec", "not stored in this SWARM_HOME")]
    res = spec.get("resources", {})
    gpus = f", {res['gpus_per_worker']} GPU each" if res.get("gpus_per_worker") else ""
    nodes = f" on each of {res['nodes']} nodes" if res.get("nodes", 1) != 1 else ""
    if spec.get("kind") == "ray":  # the buyer's own program: what it runs, on what
        params = spec.get("params") or {}
        inputs = sorted((spec.get("inputs") or {}).items())
        what = [("entrypoint", str(params.get("entrypoint", "?"))), ("code", named(spec.get("code", "?"))),
                ("inputs", ", ".join(f"{k}: {named(v)}" for k, v in inputs) or "none"),
                ("output", str(spec.get("output") or "?"))]
    else:
        what = [("model", named(spec.get("model", "?"))), ("dataset", named(spec.get("dataset", "?")))]
    runtime = [("max runtime", f"{spec['max_runtime']:,} s")] if spec.get("max_runtime") else []
    return [("spec hash", spec_hash), ("kind", spec.get("kind", "?")), *what,
            ("workers", f"{res.get('workers', '?')}{nodes}{gpus}"),
            ("replicas", str(spec.get("replicas", 1))), *runtime]


def _market_json(market: MarketJob | None) -> dict[str, Any] | None:
    if market is None:
        return None
    return {
        "state": market.state, "provider": market.provider, "attempts": market.attempts,
        "group_id": market.group_id, "replicas": market.replicas, "units": market.units, "unit": market.unit,
        "result_dir": market.result_dir, "result_hash": market.result_hash, "metrics": market.metrics,
        "error": market.error, "explanation": market.explanation, "evidence": market.evidence,
        "outputs_hash": market.outputs_hash, "log_tail": market.log_tail,
        "reported": len(market.progress or []), "latest_report": (market.progress or [None])[-1],
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
    if market.progress:
        latest = market.progress[-1].get("metrics") or {}
        shown = ", ".join(f"{name} {_metric(value)}" for name, value in list(latest.items())[:6])
        rows.append((f"reported ({len(market.progress)})", shown or "-"))
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


def _listed(ids: list[int]) -> str:
    from market.buyer import listed

    return listed(ids)


def _metric(value: Any) -> str:
    return (
        f"{value:.6g}"
        if isinstance(value, float)
        else json.dumps(value)
        if isinstance(value, (dict, list))
        else str(value)
    )


def _name(status: JobStatus) -> str:
    return status.name.lower()
