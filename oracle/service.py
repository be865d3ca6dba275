"""The oracle on a schedule (docs/architecture.md §6): APScheduler runs the probes every probe interval,
a benchmark challenge of every provider once per epoch (an epoch judges a provider's speed on
the best of its own challenge and the previous epoch's: oracle/epoch.py), canary calls to every
serving lease once per epoch (oracle/canaries.py), and the epoch step
often enough to close each epoch on time and finalize the previous one as soon as its
challenge window ends (`OracleService.run`, `swarm oracle run`).

`OracleService.close_epoch` closes one epoch on demand instead (`swarm oracle close`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC
from pathlib import Path

from apscheduler.schedulers.background import BackgroundScheduler
from sqlmodel import Session

from ledger.client import Swarm
from ledger.errors import SwarmError
from ledger.tx import Sender
from oracle.canaries import Canaries
from oracle.collector import Collector, site_addresses, site_clients, watched_providers
from oracle.config import EpochTiming, OracleConfig
from oracle.epoch import MIN_CHALLENGES, EpochOutcome, EpochRunner
from oracle.records import EpochState

log = logging.getLogger(__name__)


def schedule(config: OracleConfig, devnet: bool, epoch_length_s: float | None = None) -> EpochTiming:
    """The config's clock for this kind of chain (a devnet runs on seconds), its epoch length overridden."""
    timing = config.epoch.timing(devnet)
    return replace(timing, length_s=epoch_length_s) if epoch_length_s else timing


class OracleService:
    """Probes, challenges and epochs for one deployment."""

    def __init__(
        self,
        swarm: Swarm,
        engine,
        home: Path,
        config: OracleConfig,
        sender: Sender,
        signers: list[bytes],
        schedule: EpochTiming,
    ) -> None:
        self.swarm = swarm
        self.engine = engine
        self.home = home
        self.config = config
        self.schedule = schedule
        # Sites serve probes and challenges to committee members: sign with the first member's key held here.
        sign = _typed_signer(signers[0]) if signers else sender.sign_typed_data
        site_of = site_clients(engine, swarm.chain.chain_id, home, sign, swarm.market.address, timeout_s=5.0)
        self.collector = Collector(
            engine,
            swarm.chain.chain_id,
            site_of,
            schedule.probe_timeout_s,
            schedule.challenge_size,
            schedule.challenge_rounds,
            schedule.challenge_timeout_s,
            schedule.gpu_challenge_size,
            schedule.gpu_challenge_s,
        )
        # The oracle's canaries pay for their calls like any buyer, from the sender's deposits.
        self.canaries = Canaries(engine, swarm, sender, home, config.canary,
                                 site_addresses(engine, swarm.chain.chain_id, home))
        self.runner = EpochRunner(swarm, engine, home, config, sender, signers, schedule.length_s,
                                  utilization=lambda: self.collector.devices)
        self.runner.check_epoch_length()
        self.outcomes: list[EpochOutcome] = []
        # Probes, challenges and epoch steps each run one at a time, beside one another: a long
        # challenge never delays a probe or an epoch. They share only the ledger's indexer.
        self._probing, self._challenging, self._stepping = (
            threading.Lock(),
            threading.Lock(),
            threading.Lock(),
        )
        self._ledger = threading.Lock()  # one ledger sync at a time

    def watched(self):
        with Session(self.engine) as session:
            return watched_providers(session, self.swarm.chain.chain_id, self.home)

    def probe(self) -> None:
        """Probes the providers the ledger shows staked (the epoch step keeps it synced)."""
        with self._probing:
            with self._ledger:
                self.runner.indexer.sync()
            self.collector.probe([w.address for w in self.watched()])

    def challenge(self) -> None:
        with self._challenging:
            rows = self.collector.challenge(self.watched())
            for row in rows:
                log.info("challenge %s: %s", row.provider, row.reason)

    def canary(self) -> None:
        self.canaries.run([w.address for w in self.watched()])

    def epoch(self, now: float | None = None, open_new: bool = True) -> EpochOutcome | None:
        with self._stepping, self._ledger:
            outcome = self.runner.run(now, open_new)
        if outcome is not None and outcome.did:
            self.outcomes.append(outcome)
        return outcome

    def close_epoch(self, probes: int = 3, wait: bool = False, poll_s: float = 1.0) -> EpochOutcome | None:
        """Closes an epoch now, whatever the schedule's length: finalizes the pending epoch first
        (one report is pending at a time), takes `probes` probe rounds, enough challenges to
        judge speed and a round of canaries, then aggregates, signs and submits the epoch. With
        `wait` it waits out the challenge windows, the pending epoch's and this one's, and
        finalizes this one too.

        Returns what happened to the epoch it closed; None when there was nothing to close (no
        provider is staked). A pending epoch still in its challenge window without `wait` is a
        SwarmError naming it, and nothing is probed."""
        length = self.runner.epoch_length_s
        self.runner.epoch_length_s = 0  # due now
        try:
            self._finalize_pending(wait, poll_s)
            for i in range(probes):
                self.probe()
                if i < probes - 1:  # samples apart in time, as the schedule takes them
                    time.sleep(min(self.schedule.probe_interval_s, 2.0))
            for _ in range(MIN_CHALLENGES):  # an epoch on demand has no previous one to judge speed with
                self.challenge()
            self.canary()
            outcome = self.epoch()
            while wait and outcome is not None and outcome.state == EpochState.SUBMITTED:
                time.sleep(poll_s)  # the chain's clock passing the challenge window
                outcome = self.epoch()
            return outcome
        finally:
            self.runner.epoch_length_s = length

    def _finalize_pending(self, wait: bool, poll_s: float) -> None:
        outcome = self.epoch(open_new=False)
        while outcome is not None and outcome.state == EpochState.SUBMITTED:
            if not wait:
                raise SwarmError(f"Epoch {outcome.epoch} is still in its challenge window; run "
                                 "`swarm oracle close` again once it ends, or pass --wait.")
            time.sleep(poll_s)
            outcome = self.epoch(open_new=False)

    def run(self, stop: threading.Event) -> None:
        """Runs the schedule until `stop` is set. A step still running when its next run is due
        makes APScheduler skip that run, by design (core.logs keeps its warning of it quiet)."""
        scheduler = BackgroundScheduler(job_defaults={"coalesce": True, "max_instances": 1,
                                                      "misfire_grace_time": None})
        start = time.time()
        length = self.schedule.length_s
        scheduler.add_job(self._guarded(self.probe), "interval", seconds=self.schedule.probe_interval_s,
                          id="probe", next_run_time=_at(start))
        scheduler.add_job(self._guarded(self.challenge), "interval", seconds=length, id="challenge",
                          next_run_time=_at(start + min(2.0, length / 4)))
        scheduler.add_job(self._guarded(self.canary), "interval", seconds=length, id="canary",
                          next_run_time=_at(start + min(3.0, length / 3)))
        step = max(1.0, min(length / 10, 10.0))
        scheduler.add_job(self._guarded(self.epoch), "interval", seconds=step, id="epoch",
                          next_run_time=_at(start + step))
        scheduler.start()
        try:
            stop.wait()
        finally:
            scheduler.shutdown(wait=True)

    def _guarded(self, job: Callable[[], object]) -> Callable[[], None]:
        """A scheduled job that logs its failure instead of stopping the schedule."""
        def run() -> None:
            try:
                job()
            except Exception as exc:  # noqa: BLE001 -- the next run tries again; the error is reported
                log.warning("%s failed: %s: %s", job.__name__, type(exc).__name__, exc)
        return run


def _at(timestamp: float):
    from datetime import datetime

    return datetime.fromtimestamp(timestamp, tz=UTC)


def _typed_signer(key: bytes) -> Callable[[dict], bytes]:
    from eth_account import Account

    account = Account.from_key(key)
    return lambda message: bytes(account.sign_typed_data(full_message=message).signature)
