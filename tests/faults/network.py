"""A small Swarm network to break: its own anvil (with a state file), the contracts, three
providers each serving its own site, buyers' jobs, and the market service and the oracle as
real `swarm` processes — each of which can be killed with SIGKILL and started again.

With `mesh`, provider C's site is a mesh site of two machines, network namespaces on a wire
(tests/mesh_net.py): its head (`swarm provider serve --mesh-endpoint`) and a machine joined to
it (`swarm provider join --site`), the chain reached across the wire. That machine dies (every
process on it killed at once) as soon as a lease runs on it, and joins again a while later.

The audit at the end reads only the chain (every log since deployment), so it judges what
really happened, not what any service recorded.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from anvil import AnvilConfig, AnvilNode, RpcClient, dev_account
from anvil.node import free_port
from devnet.network import kill_site, ray_tmp, restart_site, start_sites, stop_sites
from ledger import jobs, stake
from ledger.chain import connect
from ledger.client import Swarm
from ledger.deploy import deploy, error_decoder
from ledger.errors import SwarmError
from ledger.jobs import JobStatus
from ledger.specs import store_spec
from ledger.tx import Sender
from market.spec import validate_spec
from tests.mesh_net import Machine, Wire, join_site_machine, serve_mesh_site
from tests.programs import program_spec
from tests.sites import PROVIDER_A, PROVIDER_B, PROVIDER_C, stop_served

ONE = 10**18
PROVIDERS = {1: PROVIDER_A, 2: PROVIDER_B, 3: PROVIDER_C}
PRICES = {1: "0.0006", 2: "0.0005", 3: "0.0004"}
BUYERS = (5, 6, 7)
CLOCK_STEP_S = 8  # devnet seconds added per wall second: windows of 30–60 s pass in 4–8 s
FINAL = {JobStatus.SETTLED, JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.RECLAIMED}


# A buyer's program that works for a while (its lease's Ray starts first, about 3 s), so faults
# land while it runs, and whose output is the same wherever and however often it runs.
PROGRAM = """import os, pathlib, time
time.sleep(3)
pathlib.Path(os.environ["SWARM_OUTPUT_DIR"], "out.txt").write_text("done")
"""


def job_spec(store: Path, seed: int) -> dict:
    """The program as a buyer posts it: its code pinned in the buyer's storage (`store`), its results to
    there."""
    return program_spec(store, PROGRAM, memory_gb=0, max_units=300, deadline="2h") | {
        "max_price_per_unit": "0.001", "seed": seed}


@dataclass
class MeshSite:
    """Provider C's site of two machines: the head's `serve` process and the machine that joined."""

    wire: Wire
    head: Machine
    machine: Machine
    homes: dict[str, Path]
    process: subprocess.Popen
    site: dict  # what `serve --json` printed: its URL and fingerprint


@dataclass
class Network:
    root: Path
    seed: int
    mesh: bool = False
    log: list[str] = field(default_factory=list)
    repairs: dict[str, threading.Thread] = field(default_factory=dict)
    repair_errors: dict[str, BaseException] = field(default_factory=dict)
    restarting: threading.Lock = field(default_factory=threading.Lock)
    # What `start` starts, each set as it is started: `stop` stops what is there, however far
    # `start` got.
    anvil: AnvilNode | None = None
    wire: Wire | None = None
    mesh_site: MeshSite | None = None
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)  # the market, the oracle
    stop_clock: threading.Event = field(default_factory=threading.Event)
    clock: threading.Thread | None = None

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.home = self.root / "home"

    # ── bringing it up ───────────────────────────────────────────────────────
    def start(self) -> None:
        self.wire = Wire() if self.mesh else None
        host = self.wire.host() if self.wire else "127.0.0.1"  # a mesh site's machines reach the chain
        self.anvil = AnvilNode(AnvilConfig(home=self.home, host=host, port=free_port(), state_interval=1))
        self.anvil.start()
        self.url = self.anvil.config.url
        self.rpc = RpcClient(self.url)
        chain = connect(self.url)
        deployment = deploy(chain, Sender(chain, dev_account(0).key, error_decoder()), self.home).deployment
        self.swarm = Swarm(chain, deployment)
        self.block0 = deployment.block_number
        local = {i: 1 for i in PROVIDERS if not (self.mesh and i == 3)}
        self.sites = {s.provider: s for s in start_sites(self.home, local, self.url)}
        self.mesh_site = self._serve_mesh_site() if self.mesh else None
        for index, address in PROVIDERS.items():
            sender = self.swarm.sender(dev_account(index).key)
            url, fingerprint = ((self.mesh_site.site["url"], self.mesh_site.site["fingerprint"])
                                if self.mesh_site and index == 3 else
                                (self.sites[address].url, self.sites[address].fingerprint))
            spec = {
                "gpu_model": "cpu",
                "gpus": 1,
                "vram_gb": 1,
                "site_url": url,
                "site_fingerprint": fingerprint,
                "price_per_unit": str(int(float(PRICES[index]) * ONE)),
            }
            stake.register(self.swarm, sender, store_spec(self.home, spec), 1)
            stake.stake(self.swarm, sender, 1_500 * ONE)
        if self.mesh_site:
            self._join_machine()  # once the chain says C may serve
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SWARM_")} | {
            "SWARM_HOME": str(self.home),
            "SWARM_RPC_URL": self.url,
            "SWARM_ANVIL_PORT": str(self.anvil.config.port),
            "SWARM_DB_URL": f"sqlite:///{self.root / 'ledger.db'}",
        }
        self.clock = threading.Thread(target=self._tick_clock, daemon=True)
        self.clock.start()

    def _serve_mesh_site(self) -> MeshSite:
        assert self.wire is not None
        head, machine = self.wire.machine("head"), self.wire.machine("m1")
        homes = {"head": self.root / "mesh-head", "m1": self.root / "mesh-m1"}
        shutil.copytree(self.home / "deployments", homes["head"] / "deployments")
        process, site = serve_mesh_site(head, homes["head"], self.url, 3)
        return MeshSite(self.wire, head, machine, homes, process, site)

    def _join_machine(self) -> None:
        mesh = self.mesh_site
        assert mesh is not None
        done = join_site_machine(mesh.machine, mesh.homes["m1"], self.url, mesh.site, mesh.homes["head"], 3)
        assert done.returncode == 0, f"m1 did not join C's site: {done.stderr[-2000:]}"

    def post_jobs(self, count: int) -> list[int]:
        posted = []
        for i in range(count):
            spec = validate_spec(
                job_spec(self.root / "buyer", self.seed * 100 + i), now=self.swarm.chain.timestamp()
            )
            digest = store_spec(self.home, spec.canonical())
            buyer = self.swarm.sender(dev_account(BUYERS[i % len(BUYERS)]).key)
            job_id, _ = jobs.post_job(self.swarm, buyer, digest, spec.max_price_per_unit, spec.max_units,
                                      spec.deadline)
            posted.append(job_id)
        time.sleep(2.5)  # past anvil's state interval: the posts survive a kill from here on
        return posted

    def start_market(self) -> None:
        self._spawn("market", ["market", "run", "--interval", "0.5"])

    def start_oracle(self) -> None:
        self._spawn("oracle", ["oracle", "run", "--epoch-length", "6"])

    def _spawn(self, name: str, args: list[str]) -> None:
        log = open(self.root / f"{name}.log", "a")  # noqa: SIM115 -- the child holds it
        # -v: each job's moves and each epoch's steps in the service's log, for a seed that fails
        self.processes[name] = subprocess.Popen([sys.executable, "-m", "scripts.cli", "-v", *args],
                                                env=self.env, stdout=log, stderr=subprocess.STDOUT)
        log.close()

    def _tick_clock(self) -> None:
        while not self.stop_clock.wait(1.0):
            try:
                self.rpc.increase_time(CLOCK_STEP_S)
                self.rpc.mine()
            except Exception:  # noqa: BLE001, S112 -- anvil is down for a moment: the clock waits for it
                continue

    # ── faults ───────────────────────────────────────────────────────────────
    def kill_anvil(self) -> None:
        """SIGKILL, then a restart from the state file: what was mined since the last dump is gone."""
        assert self.anvil is not None
        self.anvil.kill()
        time.sleep(self.rng.uniform(0.5, 3.0))
        self.anvil.start()
        self.log.append("anvil killed and restarted from its state file")

    def kill_service(self, name: str) -> None:
        process = self.processes[name]
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        time.sleep(self.rng.uniform(0.2, 2.0))
        (self.start_market if name == "market" else self.start_oracle)()
        self.log.append(f"{name} killed and restarted")

    def kill_site(self) -> None:
        """A provider's site dies; it comes back a while later at its own URL (the provider fixes
        it), while the other faults go on. A site still down is brought back before it dies again."""
        provider = self.rng.choice([PROVIDER_B] if self.mesh else [PROVIDER_B, PROVIDER_C])
        down_for = self.rng.uniform(3.0, 8.0)
        self.repaired(provider)
        site = self.sites[provider]
        kill_site(site)

        def repair() -> None:
            time.sleep(down_for)
            with self.restarting:  # one at a time: each restart rewrites the home's list of sites
                self.sites[provider] = restart_site(self.home, site)

        self.repairs[provider] = threading.Thread(target=self._guarded, args=(provider, repair), daemon=True)
        self.repairs[provider].start()
        self.log.append(f"site of {provider} killed, then restarted")

    def _guarded(self, provider: str, work) -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 -- raised again by `repaired`, in the test's thread
            self.repair_errors[provider] = exc

    def repaired(self, *providers: str) -> None:
        """Waits for the sites of `providers` (all, by default) that are down to be back."""
        waiting = list(providers)
        while True:  # a repair may start another (the mesh machine's death, its joining again)
            pending = waiting if providers else list(self.repairs)
            if not pending:
                return
            provider = pending.pop(0)
            thread = self.repairs.pop(provider, None)
            if thread is not None:
                thread.join()
            if provider in self.repair_errors:
                raise AssertionError(f"the site of {provider} did not come back") from \
                    self.repair_errors.pop(provider)

    def kill_mesh_machine(self, window_s: float) -> None:
        """C's joined machine dies as soon as a lease works on it (at the end of `window_s` if none
        did), and joins again 3–8 s later, while the other faults go on."""
        mesh = self.mesh_site
        assert mesh is not None
        leases = mesh.homes["m1"] / "site" / "leases"
        deadline = time.monotonic() + window_s
        while time.monotonic() < deadline and not (leases.is_dir() and any(leases.glob("*/work"))):
            time.sleep(0.1)
        working = leases.is_dir() and any(leases.glob("*/work"))
        down_for = random.Random(self.seed).uniform(3.0, 8.0)  # not self.rng: the drawn faults' own
        mesh.wire.kill(mesh.machine)

        def repair() -> None:
            time.sleep(down_for)
            self._join_machine()

        self.repairs["mesh"] = threading.Thread(target=self._guarded, args=("mesh", repair), daemon=True)
        self.repairs["mesh"].start()
        when = "mid-lease" if working else "idle"
        self.log.append(f"mesh machine m1 of C's site killed {when}, then joined again")

    def inject(self, faults: int, window_s: float) -> None:
        """`faults` faults at random moments over `window_s` seconds, drawn from the seed."""
        kinds = ["anvil", "market", "oracle", "site"]
        if self.mesh:  # the machine's death runs beside the drawn faults
            kill = threading.Thread(target=self._guarded, daemon=True,
                                    args=("mesh-kill", lambda: self.kill_mesh_machine(window_s)))
            self.repairs["mesh-kill"] = kill
            kill.start()
        moments = sorted(self.rng.uniform(0, window_s) for _ in range(faults))
        started = time.monotonic()
        for moment in moments:
            time.sleep(max(0.0, started + moment - time.monotonic()))
            kind = self.rng.choice(kinds)
            if kind == "anvil":
                self.kill_anvil()
            elif kind == "site":
                self.kill_site()
            else:
                self.kill_service(kind)

    def settle(self, job_ids: list[int], timeout_s: float) -> None:
        """Waits until every job is final on chain and an epoch was finalized after the faults."""
        self.repaired()
        target = self._finalized() + 1
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise AssertionError(f"the {name} service exited: {self.tail(name)}")
            try:
                statuses = [jobs.job_info(self.swarm, j).status for j in job_ids]
                if all(s in FINAL for s in statuses) and self._finalized() >= target:
                    return
            except SwarmError:
                pass
            time.sleep(1.0)
        raise AssertionError(
            f"seed {self.seed}: not settled in {timeout_s:g} s; jobs "
            f"{[jobs.job_info(self.swarm, j).status.name for j in job_ids]}; faults {self.log}; "
            f"market: {self.tail('market')}; oracle: {self.tail('oracle')}"
        )

    def _finalized(self) -> int:
        return int(self.swarm.distributor.functions.lastFinalizedEpoch().call())

    def tail(self, name: str, lines: int = 15) -> str:
        path = self.root / f"{name}.log"
        return "\n".join(path.read_text().splitlines()[-lines:]) if path.exists() else ""

    def stop(self) -> None:
        """Stops what `start` got to start, all of it or a part, each part whatever stopping another
        raised. Called while an error is on its way (from a `finally`), it raises nothing of its
        own: what it could not stop is added to that error as a note, and that error is the one
        the test reports."""
        first = sys.exc_info()[1]
        failures: list[Exception] = []
        for part in (self._stop_repairs, self._stop_services, self.stop_clock.set,
                     lambda: stop_sites(self.home), self._stop_mesh_site, self._stop_anvil):
            try:
                part()
            except Exception as exc:  # noqa: BLE001 -- every part is stopped; the failures are reported below
                failures.append(exc)
        if not failures:
            return
        blamed = first if first is not None else failures[0]
        for failure in failures:
            if failure is not blamed:
                blamed.add_note(f"stopping the network failed too: {failure!r}")
        if first is None:
            raise failures[0]

    def _stop_repairs(self) -> None:
        for thread in self.repairs.values():  # a site coming back is stopped with the others
            thread.join()

    def _stop_services(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()

    def _stop_mesh_site(self) -> None:
        if self.mesh_site is not None:
            stop_served(self.mesh_site.process)
            self.mesh_site.wire.kill(self.mesh_site.machine)  # the joined machine's processes

    def _stop_anvil(self) -> None:
        if self.anvil is not None:
            self.anvil.stop()

    def release(self) -> None:
        """Removes the mesh's machines and wire, once the audit no longer needs the chain there."""
        if self.wire is not None:
            self.wire.close()
            for home in (self.root / "mesh-head", self.root / "mesh-m1"):
                shutil.rmtree(ray_tmp(home), ignore_errors=True)

    # ── the audit ────────────────────────────────────────────────────────────
    def audit(self, job_ids: list[int], supply_at_start: int) -> None:
        """Conservation and exactly-once, from the chain's own logs."""
        logs = self._logs()
        token, vault, market, distributor = (self.swarm.token.functions, self.swarm.vault.functions,
                                             self.swarm.market.functions, self.swarm.distributor.functions)
        # Tokens change only by burned slashes: no emission is minted, rewards come from the funded pool.
        burned = sum(
            e.args["fromStake"] + e.args["fromUnbonding"] - e.args["toTreasury"] for e in logs["Slashed"]
        )
        supply = token.totalSupply().call()
        assert supply == supply_at_start - burned, (supply, supply_at_start, burned)
        # The ten dev accounts, the contracts and the treasury (on a devnet, a key none of them holds).
        holders = [dev_account(i).address for i in range(10)] + list(self.swarm.deployment.addresses.values())
        holders.append(self.swarm.deployment.params["treasury"])
        assert sum(self.swarm.balance_of(h) for h in holders) == supply, "tokens outside every known holder"
        # Stakes, escrow and the reward pool are each backed exactly.
        assert self.swarm.balance_of(self.swarm.vault.address) == vault.totalStaked().call() + \
            vault.totalUnbonding().call()
        assert self.swarm.balance_of(self.swarm.market.address) == market.totalEscrowed().call() == 0
        claimed = sum(e.args["amount"] for e in logs["Claimed"])
        assert (
            self.swarm.balance_of(self.swarm.distributor.address)
            == distributor.totalFunded().call() - claimed
        )
        # Every job left escrow exactly once, and its buyer paid only for work delivered.
        ends: Counter[int] = Counter()
        for name in ("JobSettled", "JobFailed", "JobCancelled", "JobReclaimed"):
            for e in logs[name]:
                ends[e.args["jobId"]] += 1
        assigned = Counter(e.args["jobId"] for e in logs["JobAssigned"])
        for job_id in job_ids:
            info = jobs.job_info(self.swarm, job_id)
            assert ends[job_id] == 1, f"job {job_id} left escrow {ends[job_id]} times"
            assert assigned[job_id] <= 1, f"job {job_id} assigned {assigned[job_id]} times"
            if info.status == JobStatus.SETTLED:
                (settled,) = [e for e in logs["JobSettled"] if e.args["jobId"] == job_id]
                paid = info.units_used * info.price_per_unit
                assert settled.args["payment"] + settled.args["fee"] == paid
                assert settled.args["refund"] == info.escrow - paid
            else:
                (ended,) = [e for name in ("JobFailed", "JobCancelled", "JobReclaimed") for e in logs[name]
                            if e.args["jobId"] == job_id]
                assert ended.args["refund"] == info.escrow, f"job {job_id} refunded only part of its escrow"
        # Every epoch was finalized once, in order, and paid no more than it allocated.
        finalized = [e.args["epoch"] for e in logs["EpochFinalized"]]
        assert finalized == list(range(1, len(finalized) + 1)), finalized
        allocated = sum(e.args["totalRewards"] for e in logs["EpochFinalized"])
        assert distributor.totalAllocated().call() == allocated >= claimed
        per_buyer: defaultdict[str, int] = defaultdict(int)
        for job_id in job_ids:
            info = jobs.job_info(self.swarm, job_id)
            per_buyer[info.buyer] += (
                info.units_used * info.price_per_unit if info.status == JobStatus.SETTLED else 0
            )
        assert all(spent >= 0 for spent in per_buyer.values())

    def _logs(self) -> dict[str, list]:
        found: dict[str, list] = defaultdict(list)
        names = {"Slashed": self.swarm.vault, "Claimed": self.swarm.distributor,
                 "EpochFinalized": self.swarm.distributor}
        for name in ("JobAssigned", "JobSettled", "JobFailed", "JobCancelled", "JobReclaimed"):
            names[name] = self.swarm.market
        for name, contract in names.items():
            found[name] = list(getattr(contract.events, name)().get_logs(from_block=self.block0))
        return found
