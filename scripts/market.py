"""`swarm market run`: the market service — match posted jobs, run them on Ray, settle them."""

from __future__ import annotations

import signal
import threading
from typing import TYPE_CHECKING

import click

from ledger.config import database_url
from ledger.units import format_amount, parse_amount
from scripts.common import (
    account_option,
    console,
    dev_sender,
    emit,
    json_option,
    key_option,
    open_swarm_waiting,
    settings,
    signer,
    waiting_for_chain,
)

# The command line loads what a command needs as it runs: `swarm --help` imports this module, so what only
# some of its commands need — the market service (web3, the ORM, numpy) and the ledger database — loads
# inside them (tests/test_startup.py, bench/startup.py).

if TYPE_CHECKING:  # the service (Ray, torch) loads when it runs
    from market.service import MarketConfig, TickReport


@click.group()
def market() -> None:
    """The market service."""


@market.command()
@click.option("--once", is_flag=True, help="One pass: match, run and complete what is posted now, then exit.")
@click.option("--interval", type=click.FloatRange(min=0.1), default=1.0, show_default=True,
              help="Seconds between passes.")
@click.option("--max-running", type=click.IntRange(min=1), default=16, show_default=True,
              help="Jobs run at once, at most.")
@click.option("--fault-slash-bps", type=click.IntRange(0, 10_000), default=0, show_default=True,
              help="Slash at once a provider whose nodes vanish mid-job, in basis points of its stake "
                   "(0: the oracle's slashing matrix charges job abandonment at the epoch's end).")
@click.option("--default-price", default="0.001", show_default=True,
              help="Price per unit, in SWARM, for providers whose spec declares none.")
@account_option
@key_option
@json_option
def run(once: bool, interval: float, max_running: int, fault_slash_bps: int, default_price: str,
        account: int | None, key_ref: str | None, as_json: bool) -> None:
    """Run the market: signs with the key holding MATCHER_ROLE (on a devnet, dev account 0 by default).

    Jobs run as leases on the providers' sites, found from their registered specs; the
    market holds no Ray connection."""
    from ledger.db import open_ledger
    from market.migrations import MARKET
    from market.service import MarketConfig, MarketService
    from oracle.migrations import ORACLE

    config = MarketConfig(interval_s=interval, max_running=max_running, fault_slash_bps=fault_slash_bps,
                          default_price_per_unit=parse_amount(default_price, "--default-price"))
    s = settings()
    swarm = open_swarm_waiting(lambda line: console.print(line, highlight=False))
    if account is None and key_ref is None and swarm.chain.is_devnet:
        sender = dev_sender(swarm, 0)
    else:
        sender = signer(swarm, account, key_ref)
    engine = open_ledger(database_url(s.home), MARKET, ORACLE)  # its offers read the oracle's scores
    say = (lambda line: None) if as_json else (lambda line: console.print(line, highlight=False))
    service = waiting_for_chain(lambda: MarketService(swarm, sender, engine, s.home, config), say)
    stop = threading.Event()
    def halt(*_: object) -> None:
        stop.set()
        service.wake.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, halt)
    if not as_json:
        console.print(f"Market service on chain {swarm.chain.chain_id} as {sender.address}.")
    totals: dict[str, int] = {}

    def on_tick(report: TickReport) -> None:
        for what, n in report.counts.items():
            totals[what] = totals.get(what, 0) + n

    try:
        last = service.run(stop, once=once, on_tick=on_tick)
    finally:
        service.close()
        engine.dispose()
    payload = {"totals": totals, "unmatched": {str(k): v for k, v in last.unmatched.items()},
               "running": last.running, "default_price_wei": str(config.default_price_per_unit)}
    emit(as_json, payload, lambda: _summary(totals, last, config))


def _summary(totals: dict[str, int], last: TickReport, config: MarketConfig) -> None:
    done = ", ".join(f"{n} {what}" for what, n in sorted(totals.items())) or "nothing to do"
    console.print(f"Market pass done: {done}.")
    for _job_id, why in sorted(last.unmatched.items()):
        console.print(f"  {why}")
    if last.unpriced:
        console.print(f"{last.unpriced} provider(s) declared no price and ask the market's default, "
                      f"{format_amount(config.default_price_per_unit)} per unit.")
