"""`swarm oracle run|close|show|sign|fund`: scheduled epochs that score providers, slash by the
matrix, and settle signed cumulative reward roots; `close` closes one now. The rules are the
oracle package's (`oracle.service.OracleService`); these commands parse and print."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ledger.config import database_url
from ledger.deploy import devnet_committee_keys
from ledger.errors import SwarmError
from ledger.keys import Keystore
from ledger.units import format_amount, parse_amount
from scripts.common import (
    account_option,
    console,
    dev_sender,
    emit,
    json_option,
    key_option,
    open_swarm,
    open_swarm_waiting,
    read_password,
    settings,
    signer,
    table,
    waiting_for_chain,
)

# The command line loads what a command needs as it runs: `swarm --help` imports this module, so what only
# some of its commands need — the oracle's service, its scoring (scipy) and its records (the ORM) — loads
# inside them (tests/test_startup.py, bench/startup.py).

if TYPE_CHECKING:  # the ORM, the scoring (scipy) and Ray load in the commands that use them
    from sqlmodel import Session

    from oracle.records import OracleEpoch

config_option = click.option("--config", "config_path", type=click.Path(path_type=Path), default=None,
                             help="The oracle's TOML config (default: the packaged oracle/config.toml).")


@click.group()
def oracle() -> None:
    """The oracle: probes, challenges, scores, rewards and slashes per epoch."""


def _setup(config_path: Path | None, account: int | None, key_ref: str | None, signer_keys: tuple[str, ...],
           epoch_length: float | None, wait_for_chain: bool = False):
    from ledger.db import open_ledger
    from market.migrations import MARKET
    from oracle.config import load_config
    from oracle.migrations import ORACLE
    from oracle.service import schedule as make_schedule

    config = load_config(config_path)
    s = settings()
    swarm = (
        open_swarm_waiting(lambda line: console.print(line, highlight=False))
        if wait_for_chain
        else open_swarm()
    )
    devnet = swarm.chain.is_devnet
    sender = dev_sender(swarm, 0) if account is None and key_ref is None and devnet else \
        signer(swarm, account, key_ref)
    if signer_keys:
        store = Keystore(s.home / "keys")
        password = read_password("Committee keystore password")
        keys = [store.unlock(store.find(ref), password) for ref in signer_keys]
    elif devnet:
        keys = devnet_committee_keys()
    else:
        keys = []  # each operator signs with `swarm oracle sign`; this process aggregates
    schedule = make_schedule(config, devnet, epoch_length)
    engine = open_ledger(database_url(s.home), ORACLE, MARKET)  # an epoch reads the market's evidence
    return config, s, swarm, sender, keys, schedule, engine


def _signed_options(fn):
    fn = click.option("--signer-key", "signer_keys", multiple=True,
                      help="A committee keystore this process signs with (repeat; default on a devnet: the "
                           "devnet committee; elsewhere none, so members sign with `swarm oracle sign`).")(fn)
    fn = click.option("--epoch-length", type=click.FloatRange(min=1), default=None,
                      help="Seconds per epoch (default from the config; its devnet value on a devnet).")(fn)
    return config_option(account_option(key_option(fn)))


@oracle.command()
@_signed_options
def run(config_path, account, key_ref, signer_keys, epoch_length) -> None:
    """Run the oracle on its schedule until interrupted; probes and challenges go through the providers'
    sites."""
    from oracle.service import OracleService

    config, s, swarm, sender, keys, schedule, engine = _setup(config_path, account, key_ref, signer_keys,
                                                               epoch_length, wait_for_chain=True)
    def say(line: str) -> None:
        console.print(line, highlight=False)

    service = waiting_for_chain(
        lambda: OracleService(swarm, engine, s.home, config, sender, keys, schedule), say
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    console.print(
        f"Oracle on chain {swarm.chain.chain_id}: epochs of "
        f"{schedule.length_s:g} s, probes every {schedule.probe_interval_s:g} s, {len(keys)} committee "
        f"key(s) here, threshold {service.runner.threshold}."
    )
    try:
        service.run(stop)
    finally:
        engine.dispose()


@oracle.command()
@click.option("--wait", is_flag=True, help="Wait out the challenge window and finalize the epoch too.")
@click.option("--probes", type=click.IntRange(min=1), default=3, show_default=True,
              help="Probe samples to take before closing the epoch.")
@_signed_options
@json_option
def close(wait, probes, config_path, account, key_ref, signer_keys, epoch_length, as_json) -> None:
    """Close an epoch now: probe and challenge every provider, score, sign, submit (and with --wait finalize).

    What `swarm oracle run` does at the end of each epoch, on demand; the pending epoch is
    finalized first, so its challenge window must be over (or --wait waits for it)."""
    from oracle.service import OracleService

    config, s, swarm, sender, keys, schedule, engine = _setup(config_path, account, key_ref, signer_keys,
                                                               epoch_length)
    service = OracleService(swarm, engine, s.home, config, sender, keys, schedule)
    try:
        service.close_epoch(probes, wait)
        payload = _latest_payload(engine, swarm.chain.chain_id)
    finally:
        engine.dispose()
    if payload is None:
        raise SwarmError("No provider is staked, so there is no epoch to report.")
    emit(as_json, payload, lambda: _print_epoch(payload))


@oracle.command()
@click.argument("number", type=click.IntRange(min=1), required=False)
@json_option
def show(number: int | None, as_json: bool) -> None:
    """Per provider: uptime, performance, reliability, weight, reward, slashes, and why (default: latest
    epoch)."""
    from sqlmodel import Session, col, select

    from ledger.db import open_ledger
    from oracle.migrations import ORACLE
    from oracle.records import OracleEpoch

    s = settings()
    swarm = open_swarm()
    engine = open_ledger(database_url(s.home), ORACLE)
    try:
        with Session(engine) as session:
            query = select(OracleEpoch).where(OracleEpoch.chain_id == swarm.chain.chain_id)
            query = (
                query.where(OracleEpoch.epoch == number)
                if number
                else query.order_by(col(OracleEpoch.epoch).desc())
            )
            record = session.exec(query).first()
            if record is None:
                which = f"epoch {number}" if number else "any epoch"
                raise SwarmError(
                    f"The ledger holds no oracle record of {which} on chain {swarm.chain.chain_id}; "
                    "run `swarm oracle close` or `swarm oracle run`."
                )
            payload = _epoch_payload(session, record)
    finally:
        engine.dispose()
    emit(as_json, payload, lambda: _print_epoch(payload))


@oracle.command()
@click.argument("number", type=click.IntRange(min=1))
@config_option
@key_option
@json_option
def sign(number: int, config_path, key_ref, as_json) -> None:
    """Sign epoch NUMBER's stored report as one committee member, with that member's keystore."""
    from sqlmodel import Session

    from ledger.db import open_ledger
    from market.migrations import MARKET
    from oracle.config import load_config
    from oracle.epoch import EpochRunner
    from oracle.migrations import ORACLE
    from oracle.records import OracleEpoch

    config = load_config(config_path)
    s = settings()
    swarm = open_swarm()
    if not key_ref:
        raise SwarmError(
            "Name the committee keystore to sign with: --key ADDRESS|NAME (see `swarm keys list`)."
        )
    store = Keystore(s.home / "keys")
    key = store.unlock(store.find(key_ref), read_password("Committee keystore password"))
    engine = open_ledger(database_url(s.home), ORACLE, MARKET)
    try:
        runner = EpochRunner(swarm, engine, s.home, config, swarm.sender(key), [])
        synced = runner.indexer.sync()  # the epoch's blocks, indexed here, before any read of them
        with Session(engine) as session:
            record = session.get(OracleEpoch, (swarm.chain.chain_id, number))
            if record is None:
                raise SwarmError(f"Epoch {number} has not been aggregated in this ledger; nothing to sign.")
            if record.state != "aggregated":
                raise SwarmError(f"Epoch {number} is {record.state}; it takes no more signatures.")
            if synced.cursor < record.to_block:
                raise SwarmError(f"Epoch {number} runs to block {record.to_block}, but the chain is at block "
                                 f"{synced.head}; sign once it has reached block {record.to_block}.")
            runner.verify(session, record)  # each member signs only what it computed itself
            signed = runner.sign_as(session, record, key)
            count = len(record.signatures)
    finally:
        engine.dispose()
    payload = {"epoch": number, "signed": signed, "signatures": count, "threshold": runner.threshold}
    emit(as_json, payload, lambda: console.print(
        f"Epoch {number}: {'signed' if signed else 'already signed by this key'}; {count} of "
        f"{runner.threshold} signatures needed."))


@oracle.command()
@click.argument("amount")
@account_option
@key_option
@json_option
def fund(amount: str, account: int | None, key_ref: str | None, as_json: bool) -> None:
    """Add AMOUNT SWARM to the reward pool the epochs pay from (a devnet's deploy funds it; a real chain's
    treasury must)."""
    from ledger import rewards as chain_rewards

    wei = parse_amount(amount)
    swarm = open_swarm()
    sender = signer(swarm, account, key_ref)
    receipt = chain_rewards.fund(swarm, sender, wei)
    funded = int(swarm.read("RewardDistributor", "totalFunded"))
    payload = {"funded_wei": str(wei), "total_funded_wei": str(funded), "tx": receipt.tx_hash}
    emit(as_json, payload, lambda: console.print(
        f"Funded the reward pool with {format_amount(wei)}; {format_amount(funded)} funded in all."))


def _latest_payload(engine, chain_id: int) -> dict | None:
    """The newest epoch the ledger holds for the chain, as `show` prints it; None if there is none."""
    from sqlmodel import Session, col, select

    from oracle.records import OracleEpoch

    with Session(engine) as session:
        record = session.exec(select(OracleEpoch).where(OracleEpoch.chain_id == chain_id)
                              .order_by(col(OracleEpoch.epoch).desc())).first()
        return _epoch_payload(session, record) if record is not None else None


def _epoch_payload(session: Session, record: OracleEpoch) -> dict:
    from sqlmodel import select

    from oracle.records import ProviderScore

    scores = session.exec(select(ProviderScore).where(ProviderScore.chain_id == record.chain_id,
                                                      ProviderScore.epoch == record.epoch)
                          .order_by(ProviderScore.provider)).all()
    slashes = {s["provider"]: s for s in record.slashes}
    return {
        "epoch": record.epoch, "state": record.state, "window": [record.window_start, record.window_end],
        "utilization": record.utilization, "emission_wei": str(record.emission_wei),
        "rewards_root": record.rewards_root, "signatures": len(record.signatures),
        "providers": [{
            "provider": s.provider, "samples": s.samples, "uptime": s.uptime,
            "measured_gflops": s.measured_gflops, "performance": s.performance, "reliability": s.reliability,
            "loyalty": s.loyalty, "weight": s.weight, "eligible": s.eligible, "reward_wei": str(s.reward_wei),
            "cumulative_wei": str(s.cumulative_wei), "note": s.note, "slash": slashes.get(s.provider),
        } for s in scores],
    }


def _print_epoch(payload: dict) -> None:
    rows = []
    for p in payload["providers"]:
        slash = p["slash"]
        shown = "—" if slash is None else (
            f"{slash['row']}: {slash['bps'] / 100:g}%"
            + (", tombstoned" if slash["tombstone"] else f", jailed {slash['jail_seconds']} s"
               if slash["jail_seconds"] else ""))
        why = slash["detail"] if slash else p["note"]
        rows.append(
            (
                p["provider"],
                f"{p['uptime']:.0%}",
                f"{p['performance']:.2f}",
                f"{p['reliability']:.2f}",
                f"{p['weight']:.3g}",
                format_amount(int(p["reward_wei"])),
                shown,
                why or "—",
            )
        )
    console.print(
        table(
            f"Epoch {payload['epoch']} ({payload['state']}): {format_amount(int(payload['emission_wei']))} "
            "emitted at "
            f"{payload['utilization']:.0%} utilization",
            ["provider", "uptime", "perf", "reliability", "weight", "reward", "slash", "why"],
            rows,
        )
    )

