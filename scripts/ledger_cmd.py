"""`swarm ledger sync|show`: index the chain's events into the ledger database."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from ledger.config import database_url
from ledger.indexer import DEFAULT_BATCH_BLOCKS, KINDS
from ledger.units import format_amount
from scripts.common import console, emit, json_option, open_swarm, settings, table

# The command line loads what a command needs as it runs: `swarm --help` imports this module, so what only
# some of its commands need — the ledger database (SQLAlchemy), its indexer (web3) and its models — loads
# inside them (tests/test_startup.py, bench/startup.py).

if TYPE_CHECKING:  # the indexer (web3) and the ORM load in the command that uses them
    from ledger.indexer import Indexer, RangeDone, SyncReport
    from ledger.indexer.models import Epoch, Job, LedgerModel, Provider, SlashRow

NEVER = 2**64 - 1  # a tombstoned provider's jail end
# Token amounts, shown as `<name>_wei` decimal strings in JSON (they outgrow JavaScript's numbers).
AMOUNTS = {
    "providers": ("stake", "unbonding", "slashed_total"),
    "jobs": ("max_price_per_unit", "escrow", "price_per_unit", "payment", "fee", "refund"),
    "epochs": ("total_rewards",),
    "slashes": ("from_stake", "from_unbonding", "amount", "to_treasury"),
}


@click.group()
def ledger() -> None:
    """Index chain events into the ledger database and show them."""


@ledger.command()
@click.option("--follow", is_flag=True, help="Keep indexing new blocks until Ctrl-C or SIGTERM.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.05),
    default=2.0,
    show_default=True,
    help="Seconds between polls for new blocks with --follow.",
)
@click.option(
    "--confirmations",
    type=click.IntRange(min=0),
    default=None,
    help="Stay this many blocks behind the head [default: 0 on a devnet, 12 elsewhere].",
)
@click.option(
    "--batch-blocks",
    type=click.IntRange(min=1),
    default=DEFAULT_BATCH_BLOCKS,
    show_default=True,
    help="Blocks per eth_getLogs request at most (halved when the node refuses a range).",
)
@json_option
def sync(follow: bool, interval: float, confirmations: int | None, batch_blocks: int, as_json: bool) -> None:
    """Index the Swarm contracts' events up to the head (less confirmations).

    Safe to stop at any moment: the next run resumes after the last block range written,
    and a reorg is rolled back and re-indexed.
    """
    from ledger.db import database_errors, open_ledger, redact
    from ledger.indexer import Indexer
    from market.migrations import MARKET
    from oracle.migrations import ORACLE

    url = database_url(settings().home)
    engine = open_ledger(url, MARKET, ORACLE)  # every owner's tables: this is how a database is upgraded
    indexer = Indexer(open_swarm(), engine, confirmations, batch_blocks)
    with database_errors(url):
        if follow:
            _follow(indexer, interval, as_json)
            return
        with _progress(enabled=not as_json and console.is_terminal) as on_range:
            report = indexer.sync(on_range=on_range)
    emit(as_json, report.as_dict() | {"database": redact(url)}, lambda: _print_report(report, redact(url)))


def _follow(indexer: Indexer, interval: float, as_json: bool) -> None:
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        if stop.is_set():  # a second Ctrl-C does not wait for the range in flight
            raise KeyboardInterrupt
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    last: list[SyncReport] = []

    def on_pass(report: SyncReport) -> None:
        last[:] = [report]
        if not (report.ranges or report.reorgs or report.reset):
            return  # the cursor did not move: nothing to say
        if as_json:
            click.echo(json.dumps(report.as_dict()))
        elif report.events or report.reorgs or report.reset:
            _print_report(report, None, following=True)

    if not as_json:
        console.print(f"Following chain {indexer.chain_id}; Ctrl-C stops.")
    try:
        indexer.follow(interval, stop, on_pass)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    cursor = last[0].cursor if last else None
    if as_json:
        click.echo(json.dumps({"stopped": True, "cursor": cursor}))
    else:
        console.print(f"Stopped; the ledger is at block {cursor}.")


@contextmanager
def _progress(enabled: bool) -> Iterator[Any]:
    if not enabled:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (
        TextColumn("indexing blocks"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[events]:,} events"),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("sync", total=None, events=0)
        seen = [0]

        def on_range(done: RangeDone) -> None:
            seen[0] += done.events
            progress.update(
                task,
                completed=done.to_block - done.start_block + 1,
                total=done.target - done.start_block + 1,
                events=seen[0],
            )

        yield on_range


def _print_report(report: SyncReport, database: str | None, following: bool = False) -> None:
    if report.reset:
        console.print(
            f"[yellow]The database followed another deployment on chain {report.chain_id}; "
            "it was cleared and re-indexed for this one.[/]"
        )
    for r in report.reorgs:
        console.print(
            f"[yellow]Reorg: blocks from {r.from_block:,} to {r.to_block:,} changed; rolled back "
            f"{r.events_removed:,} events and re-indexed the new branch.[/]"
        )
    events = f"{report.events:,} event{'' if report.events == 1 else 's'}"
    if following:
        console.print(f"Blocks {report.from_block:,}–{report.cursor:,}: {events}; head {report.head:,}.")
        return
    rate = f" ({report.events / report.seconds:,.0f} events/s)" if report.seconds >= 0.5 else ""
    where = f" into {database}" if database else ""
    if report.ranges:
        console.print(
            f"Indexed blocks {report.from_block:,}–{report.cursor:,} of chain {report.chain_id}{where}: "
            f"{events} in {report.seconds:.2f} s{rate}."
        )
    else:
        console.print(f"Nothing new on chain {report.chain_id}{where}.")
    console.print(
        f"The ledger is at block {report.cursor:,} (head {report.head:,}, "
        f"{report.confirmations} confirmations)."
    )


@ledger.command()
@click.argument("what", type=click.Choice(KINDS))
@click.option(
    "--limit", type=click.IntRange(min=1), default=50, show_default=True, help="Rows to show at most."
)
@click.option("--chain-id", type=int, default=None, help="Which chain, when the database holds several.")
@json_option
def show(what: str, limit: int, chain_id: int | None, as_json: bool) -> None:
    """Show indexed providers, jobs, epochs or slashes (newest first; providers by stake)."""
    from sqlmodel import Session

    from ledger.db import database_errors, open_ledger, redact
    from ledger.indexer.queries import pick_chain, rows
    from market.migrations import MARKET
    from oracle.migrations import ORACLE

    url = database_url(settings().home)
    engine = open_ledger(url, MARKET, ORACLE)
    with database_errors(url), Session(engine) as session:
        cursor = pick_chain(session, chain_id, redact(url))
        found = rows(session, what, cursor.chain_id, limit)
    payload = {
        "chain_id": cursor.chain_id,
        "block": cursor.block_number,
        what: [_json_row(what, r) for r in found],
    }

    def human() -> None:
        if found:
            console.print(_table(what, cursor.chain_id, cursor.block_number, found))
        else:
            console.print(f"No {what} on chain {cursor.chain_id} (indexed to block {cursor.block_number:,}).")

    emit(as_json, payload, human)


def _json_row(kind: str, row: LedgerModel) -> dict[str, Any]:
    amounts = AMOUNTS[kind]
    data: dict[str, Any] = {}
    for column in row.__table__.columns:  # type: ignore[attr-defined]
        name = column.name
        if name == "chain_id":
            continue
        value = getattr(row, name)
        if name in amounts:
            data[f"{name}_wei"] = str(value)
        else:
            data[name] = value
    return data


def _table(kind: str, chain_id: int, block: int, found: Any) -> Any:
    title = f"{kind.capitalize()} on chain {chain_id} (indexed to block {block:,})"
    if kind == "providers":
        return table(
            title,
            ["address", "gpus", "stake", "unbonding", "release", "jailed until", "slashed"],
            [_provider(p) for p in found],
        )
    if kind == "jobs":
        return table(
            title,
            ["job", "status", "buyer", "provider", "price/unit", "units", "escrow", "paid"],
            [_job(j) for j in found],
        )
    if kind == "epochs":
        return table(
            title,
            ["epoch", "status", "rewards", "slashes", "rewards root", "finalizable at"],
            [_epoch(e) for e in found],
        )
    return table(
        title, ["block", "provider", "reason", "bps", "amount", "ordered by"], [_slash(s) for s in found]
    )


def _provider(p: Provider) -> list[Any]:
    jailed = "for ever (tombstoned)" if p.tombstoned else _time(p.jailed_until)
    return [
        p.address,
        p.gpus,
        format_amount(p.stake),
        format_amount(p.unbonding),
        _time(p.release_time) if p.unbonding else "-",
        jailed,
        format_amount(p.slashed_total),
    ]


def _job(j: Job) -> list[Any]:
    units = f"{j.units_used}/{j.max_units}" if j.units_used else f"≤ {j.max_units}"
    price = format_amount(j.price_per_unit) if j.provider else f"≤ {format_amount(j.max_price_per_unit)}"
    return [
        j.job_id,
        j.status,
        j.buyer,
        j.provider or "-",
        price,
        units,
        format_amount(j.escrow),
        format_amount(j.payment) if j.status == "settled" else "-",
    ]


def _epoch(e: Epoch) -> list[Any]:
    return [
        e.epoch,
        e.status,
        format_amount(e.total_rewards),
        e.slash_count,
        _short(e.rewards_root),
        _time(e.finalizable_at),
    ]


def _slash(s: SlashRow) -> list[Any]:
    cause = f"epoch {s.epoch}" if s.epoch is not None else f"job {s.job_id}" if s.job_id is not None else "-"
    return [f"{s.block_number:,}", s.provider, s.reason, s.bps, format_amount(s.amount), cause]


def _time(ts: int) -> str:
    if not ts:
        return "-"
    if ts >= NEVER:
        return "never"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _short(h: str) -> str:
    return f"{h[:10]}…{h[-8:]}"
