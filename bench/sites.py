"""Provider sites: what the agent costs, how leases drain, what an idle site holds.

Run: make bench-sites   (or .venv/bin/python bench/sites.py --runs 5 --leases 50)

A real anvil with the contracts, three sites started as `swarm cluster up` starts them (each
its own Ray cluster of a head and one 1-CPU node, its agent on 127.0.0.1), a SQLite ledger.

  start     A lease through the site's agent — a signed HTTPS request the site checks on
            chain, then Ray's job submission API — against submitting the same lease with
            Ray's job submission API directly on the same site, each timed from the request
            to the lease's end (a small program in its sandbox), polled every 50 ms; the
            ratio of the medians.
  drain     50 jobs posted at once, the market service matching them to the three sites and
            completing each with its provider's signed result: the time from the first post
            to the last completion, and a check that every job ran exactly once, on one site.
  idle      The memory of one idle site: the proportional set size of its agent, its Ray
            cluster's supervisor and every Ray process under them.
  stop      Three idle sites stopped at once, as `swarm cluster down` stops them: from the
            signal to the last agent gone with its Ray cluster (`--only stop` runs just this).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from contextlib import contextmanager, suppress
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from anvil import AnvilConfig, AnvilNode, dev_account
from anvil.node import free_port

RESULTS = Path(__file__).resolve().parent / "results" / "sites.json"
BUYER = dev_account(5)
ACCOUNTS = (1, 2, 3)
PROGRAM = "import os, pathlib\npathlib.Path(os.environ['SWARM_OUTPUT_DIR'], 'out.txt').write_text('done')\n"


def program_spec(home: Path, now: int, tag: int) -> dict:
    """A small program of the buyer's, its code and results in the buyer's storage under `home`."""
    from tests.programs import program_spec as buyer_program

    return buyer_program(home / "buyer-storage", PROGRAM, memory_gb=0, deadline=now + 3_600) | {
        "max_price_per_unit": "0.001", "seed": tag}


def post(swarm, home: Path, spec: dict) -> tuple[int, bytes]:
    from ledger import jobs
    from ledger.specs import canonical, store_spec
    from market.spec import validate_spec

    parsed = validate_spec(spec, now=swarm.chain.timestamp())
    digest = store_spec(home, parsed.canonical())
    job_id, _ = jobs.post_job(
        swarm, swarm.sender(BUYER.key), digest, parsed.max_price_per_unit, parsed.max_units, parsed.deadline
    )
    return job_id, canonical(parsed.canonical())


def wait_until(check, timeout: float = 300.0, poll: float = 0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = check()
        if value:
            return value
        time.sleep(poll)
    raise RuntimeError("timed out")


def bench_start(swarm, home: Path, site, runs: int) -> dict:
    """Agent against Ray's job submission API, the same lease on the same site."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    from compute.order import Order, job_namespace
    from ledger import jobs
    from provider.lease.launch import ray_job
    from provider.lease.plan import plan_lease
    from wire.client import SiteAddress, SiteClient

    matcher = swarm.sender(dev_account(0).key)
    client = SiteClient(SiteAddress(site.provider, site.url, site.fingerprint), matcher.sign_typed_data,
                        swarm.chain.chain_id, swarm.market.address)
    site_home = Path(site.home)
    state = json.loads((site_home / "ray" / "cluster.json").read_text())
    from compute.node import RayHome, use_auth

    use_auth(RayHome.of(site_home))  # the bench holds the site's token, as its provider does
    direct = JobSubmissionClient(state["dashboard"])
    namespace = job_namespace(swarm.chain.chain_id, swarm.market.address)
    agent_s, direct_s = [], []
    for run in range(runs + 1):  # the first of each is a warm-up
        job_id, body = post(swarm, home, program_spec(home, swarm.chain.timestamp(), 1_000 + run))
        jobs.assign_job(swarm, matcher, job_id, site.provider, 10**15)
        started = time.monotonic()
        client.start_lease(job_id, body)
        wait_until(lambda job_id=job_id: client.status(job_id)["state"] in ("succeeded", "failed"))
        agent = time.monotonic() - started
        assert client.status(job_id)["state"] == "succeeded"

        plan = plan_lease(Order.read(body), job_id, 9_000 + run, site.provider, namespace)
        plan = plan.but(hidden=(str(site_home),))
        started = time.monotonic()
        submission = direct.submit_job(**ray_job(plan, f"direct-{run}"))
        wait_until(lambda submission=submission: direct.get_job_status(submission)
                   in (JobStatus.SUCCEEDED, JobStatus.FAILED))
        elapsed = time.monotonic() - started
        assert direct.get_job_status(submission) == JobStatus.SUCCEEDED, direct.get_job_logs(submission)[
            -2000:
        ]
        assert plan.job_id == job_id
        if run:
            agent_s.append(agent)
            direct_s.append(elapsed)
    agent_median, direct_median = statistics.median(agent_s), statistics.median(direct_s)
    return {"runs": runs, "agent_s": round(agent_median, 3), "ray_job_submission_s": round(direct_median, 3),
            "ratio": round(agent_median / direct_median, 3), "agent_all": [round(x, 3) for x in agent_s],
            "direct_all": [round(x, 3) for x in direct_s]}


def bench_drain(swarm, home: Path, sites, leases: int) -> dict:
    """N jobs posted at once, run by the market across the sites."""
    from sqlmodel import Session, col, select

    from ledger.db import open_ledger
    from ledger.jobs import JobStatus, job_info
    from market.migrations import MARKET
    from market.records import MarketJob
    from market.service import MarketConfig, MarketService
    from oracle.migrations import ORACLE

    engine = open_ledger(f"sqlite:///{home / 'ledger.db'}", MARKET, ORACLE)
    market = MarketService(swarm, swarm.sender(dev_account(0).key), engine, home,
                           MarketConfig(interval_s=0.2, max_running=leases))
    stop = threading.Event()
    loop = threading.Thread(target=market.run, args=(stop,), daemon=True)
    started = time.monotonic()
    ids = [
        post(swarm, home, program_spec(home, swarm.chain.timestamp(), 5_000 + i))[0] for i in range(leases)
    ]
    posted = time.monotonic() - started
    loop.start()

    def drained() -> bool:
        with Session(engine) as session:
            states = [r.state for r in session.exec(select(MarketJob).where(col(MarketJob.job_id).in_(ids)))]
        return len(states) == leases and all(s in ("completed", "settled", "failed") for s in states)

    try:
        wait_until(drained, timeout=900, poll=0.2)
        seconds = time.monotonic() - started
    finally:
        stop.set()
        market.wake.set()
        loop.join(timeout=60)
        market.close()
    completed = [j for j in ids if job_info(swarm, j).status in (JobStatus.COMPLETED, JobStatus.SETTLED)]
    ran: dict[int, list[tuple[str, int]]] = {}
    for site in sites:
        for lease in (Path(site.home) / "site" / "leases").glob("[0-9]*-*"):
            job_id = int(lease.name.split("-")[0])
            if job_id in ids:
                attempt = json.loads((lease / "lease.json").read_text())["attempt"]
                ran.setdefault(job_id, []).append((site.provider, attempt))
    twice = {j: r for j, r in ran.items() if len(r) > 1 or r[0][1] > 1}
    per_site = {s.provider: sum(1 for r in ran.values() if r[0][0] == s.provider) for s in sites}
    engine.dispose()
    return {
        "leases": leases,
        "completed": len(completed),
        "lost": leases - len(completed),
        "run_twice": len(twice),
        "drain_s": round(seconds, 1),
        "post_s": round(posted, 1),
        "per_site": per_site,
    }


def idle_memory(sites) -> dict:
    """The PSS of each site's processes once idle: its agent, its cluster's supervisor, and their children."""
    import psutil

    time.sleep(10)
    figures = []
    for site in sites:
        state = json.loads((Path(site.home) / "ray" / "cluster.json").read_text())
        total = 0
        seen = set()
        for root in (site.pid, state["pid"]):
            proc = psutil.Process(root)
            for p in [proc, *proc.children(recursive=True)]:
                if p.pid in seen:
                    continue
                seen.add(p.pid)
                with suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                    total += p.memory_full_info().pss
        figures.append(total / 2**20)
    return {"sites": len(figures), "pss_mib_median": round(statistics.median(figures)),
            "pss_mib_all": [round(x) for x in figures]}


@contextmanager
def devnet():
    """A throwaway devnet with the contracts deployed: (swarm, home, rpc url); its sites stop with it."""
    from devnet.network import stop_sites
    from ledger.chain import connect
    from ledger.client import Swarm
    from ledger.deploy import deploy, error_decoder
    from ledger.tx import Sender

    with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
        home = Path(tmp)
        node = AnvilNode(AnvilConfig(home=home, port=free_port()))
        node.start()
        try:
            chain = connect(node.config.url)
            deployment = deploy(chain, Sender(chain, dev_account(0).key, error_decoder()), home).deployment
            yield Swarm(chain, deployment), home, node.config.url
        finally:
            stop_sites(home)
            node.stop()


@contextmanager
def staked_sites(accounts: dict[int, int]):
    """A throwaway devnet with the contracts and a registered, staked site of each dev account
    (account → its nodes), as `swarm cluster up --register` starts them: (swarm, home, sites)."""
    from devnet.network import start_sites
    from ledger import stake
    from ledger.specs import store_spec

    with devnet() as (swarm, home, url):
        sites = start_sites(home, accounts, url)
        for site in sites:
            sender = swarm.sender(dev_account(site.account).key)
            spec = {"gpu_model": "cpu", "gpus": 1, "vram_gb": 1, "site_url": site.url,
                    "site_fingerprint": site.fingerprint}
            stake.register(swarm, sender, store_spec(home, spec), 1)
            stake.stake(swarm, sender, 1_000 * 10**18)
        yield swarm, home, sites


def bench_stop(runs: int) -> dict:
    """Seconds to stop three idle sites, each started afresh, median of `runs`."""
    from devnet.network import start_sites, stop_sites

    seconds = []
    with devnet() as (_, home, url):
        for _ in range(runs):
            start_sites(home, {a: 1 for a in ACCOUNTS}, url)
            time.sleep(5)  # idle: the clusters' own start-up work done
            began = time.monotonic()
            stop_sites(home)
            seconds.append(time.monotonic() - began)
    return {"runs": runs, "stop_s_median": round(statistics.median(seconds), 2),
            "stop_s_all": [round(x, 2) for x in seconds]}


def report(name: str, figures: dict) -> dict:
    print(name, json.dumps(figures), flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--leases", type=int, default=50)
    parser.add_argument(
        "--only", choices=["stop"], help="run one measurement, keeping the others' last figures"
    )
    args = parser.parse_args()

    figures = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    if args.only is None:
        with staked_sites({a: 1 for a in ACCOUNTS}) as (swarm, home, sites):
            figures["idle"] = report("idle", idle_memory(sites))
            figures["start"] = report("start", bench_start(swarm, home, sites[0], args.runs))
            figures["drain"] = report("drain", bench_drain(swarm, home, sites, args.leases))
    figures["stop"] = report("stop", bench_stop(min(args.runs, 3)))
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
