"""A provider's site, end to end: `swarm provider serve` on a real anvil, with its own Ray
cluster, reached over pinned HTTPS with requests signed by the keys the chain authorizes.
Every lease is a Ray job of the site's cluster running in a sandbox; the attacks are jobs a
buyer could post, and the site keeps serving the honest lease that follows them."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from anvil import AnvilNode, RpcClient, dev_account
from anvil.node import free_port
from compute.manifest import manifest_hash, record_hash, result_hash, result_record
from core.errors import Refused
from ledger import jobs, stake
from ledger.chain import Chain
from ledger.client import Swarm
from ledger.deploy import DeployResult
from ledger.results import JobTerms, result_signer
from ledger.specs import canonical
from ledger.units import ONE
from market.spec import validate_spec
from market.storage import verify
from tests.programs import program_spec
from tests.sites import served, stop_served
from wire.client import SiteAddress, SiteClient
from wire.tls import WrongCertificate

MATCHER, PROVIDER, OTHER_PROVIDER, BUYER, STRANGER = (dev_account(i) for i in (0, 1, 2, 4, 6))
PRICE = 10**12  # wei per unit: the market's floor
LEASE_TIMEOUT_S = 150


@pytest.fixture(scope="module")
def site(chain: Chain, deployed: DeployResult, rpc: RpcClient, anvil_node: AnvilNode, swarm_home: Path,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """A registered, staked provider serving its site from a SWARM_HOME of its own."""
    snapshot = rpc.snapshot()
    swarm = Swarm(chain, deployed.deployment)
    sender = swarm.sender(PROVIDER.key)
    stake.register(swarm, sender, b"\x11" * 32, 1)
    stake.stake(swarm, sender, 1_000 * ONE)
    home = tmp_path_factory.mktemp("provider-home")
    shutil.copytree(swarm_home / "deployments", home / "deployments")
    (home / "keys").mkdir()
    (home / "keys" / "provider.json").write_text('{"crypto": "the provider key"}')
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")} | {
        "SWARM_HOME": str(home), "SWARM_RPC_URL": anvil_node.config.url}
    process = subprocess.Popen([sys.executable, "-m", "scripts.cli", "provider", "serve", "--account", "1",
                                "--port", str(port), "--json"], env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    site = served(process)
    yield {
        "swarm": swarm,
        "home": home,
        "url": site["url"],
        "fingerprint": site["fingerprint"],
        "process": process,
        "rpc_url": anvil_node.config.url,
        "store": tmp_path_factory.mktemp("buyer-store"),
    }
    stop_served(process)
    rpc.revert(snapshot)


def _client(site: dict, who=MATCHER, fingerprint: str | None = None) -> SiteClient:
    swarm = site["swarm"]
    address = SiteAddress(PROVIDER.address, site["url"], fingerprint or site["fingerprint"])
    return SiteClient(
        address, swarm.sender(who.key).sign_typed_data, swarm.chain.chain_id, swarm.market.address
    )


def _assigned(site: dict, spec: dict, buyer=BUYER, price: int = PRICE) -> tuple[int, bytes]:
    """A job posted by `buyer` with `spec` and assigned to the site's provider at `price`; its id and
    spec bytes."""
    swarm = site["swarm"]
    body = canonical(validate_spec(spec).canonical())
    from eth_utils import keccak

    job_id, _ = jobs.post_job(swarm, swarm.sender(buyer.key), keccak(body), price, spec["max_units"],
                              swarm.chain.timestamp() + 3_600)
    jobs.assign_job(swarm, swarm.sender(MATCHER.key), job_id, PROVIDER.address, price)
    return job_id, body


def _program(site: dict, code: str, memory_gb: float = 0.5, cpus: int = 1) -> dict:
    return program_spec(site["store"], code, memory_gb=memory_gb, cpus=cpus)


def _finished(client: SiteClient, job_id: int, timeout: float = LEASE_TIMEOUT_S) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = client.status(job_id)
        if status["state"] in ("succeeded", "failed", "stopped"):
            return status
        time.sleep(0.5)
    raise AssertionError(f"lease {job_id} did not finish in {timeout} s: {status}")


WRITE_OUTPUT = """
import os, pathlib
out = pathlib.Path(os.environ["SWARM_OUTPUT_DIR"])
(out / "answer.txt").write_text(str(sum(range(1000))))
print("wrote the answer")
"""


def test_a_lease_runs_and_its_result_is_the_providers_own_word(site) -> None:
    swarm = site["swarm"]
    job_id, body = _assigned(site, _program(site, WRITE_OUTPUT))
    matcher = _client(site)
    started = matcher.start_lease(job_id, body)
    assert started["state"] in ("pending", "running", "succeeded")
    again = matcher.start_lease(job_id, body)  # a second start returns the lease that exists
    assert again["attempt"] == 1

    done = _finished(matcher, job_id)
    assert done["state"] == "succeeded", done
    expected = site["home"] / "expected"
    (expected / "outputs").mkdir(parents=True)
    (expected / "outputs" / "answer.txt").write_text(str(sum(range(1000))))
    assert done["result_record"]["outputs"] == result_hash(expected)
    assert done["result_record"]["outputs"] != manifest_hash([]), "the hash covers what the job wrote"
    stored = Path(done["result_uri"])  # the buyer's output, under the job's compute id
    stored_log = stored / "log"
    record = result_record(done["result_record"]["outputs"], stored_log.read_bytes())
    assert done["result_hash"] == record_hash(record) and json.loads(record) == done["result_record"]
    assert stored.parent == site["store"] / "results" and stored.name.endswith(f"-{job_id}")
    verify(job_id, stored, done["result_hash"])  # the buyer's check: its outputs and its log
    assert "wrote the answer" in stored_log.read_text(), "the log is kept beside the result"
    assert 1 <= done["units"] <= 600
    terms = JobTerms(job_id, PROVIDER.address, PRICE)  # the provider and price the job is assigned at
    signer = result_signer(bytes.fromhex(done["signature"][2:]), swarm.chain.chain_id, swarm.market.address,
                           terms, bytes.fromhex(done["result_hash"][2:]), done["units"])
    assert signer == PROVIDER.address

    buyer = _client(site, BUYER)
    assert buyer.result(job_id)["signature"] == done["signature"]
    assert "wrote the answer" in buyer.logs(job_id)
    with pytest.raises(Refused, match="neither the matcher nor the buyer") as refused:
        _client(site, STRANGER).status(job_id)
    assert refused.value.status == 403


PRINTS_AND_REPORTS = """
import json, os, time
for step in range(1, 9):
    print("step", step, "of 8", flush=True)
    with open(os.environ["SWARM_REPORTS"], "a") as reports:  # as compute.train_reports appends them
        reports.write(json.dumps({"at": time.time(), "metrics": {"step": step, "loss": 1 / step}}) + "\\n")
    time.sleep(0.5)
raise KeyError("['x4'] not in index")
"""


def test_a_leases_log_and_reports_are_followed_as_it_runs_and_its_last_lines_kept_when_it_fails(site) -> None:
    """What a follower reads: the log from any offset, a chunk at a time, and whether the lease
    has ended; the reports of a running lease in its status; a failed lease's last lines."""
    from market.sites import _Reports

    job_id, body = _assigned(site, _program(site, PRINTS_AND_REPORTS))
    buyer, matcher = _client(site, BUYER), _client(site)
    handed: list[dict] = []
    reported = _Reports(handed.extend)
    matcher.start_lease(job_id, body)
    followed, offset, running = "", 0, []
    deadline = time.monotonic() + LEASE_TIMEOUT_S
    while time.monotonic() < deadline:
        status = matcher.status(job_id)
        reported.take(status)
        if status["state"] == "running":
            running.append(status["reported"])
        answer = buyer.log_since(job_id, offset)
        assert answer["offset"] == offset and answer["next"] == offset + len(answer["text"].encode())
        followed, offset = followed + answer["text"], answer["next"]
        if answer["ended"] and offset == answer["size"]:
            break
        time.sleep(0.3)
    assert [line for line in followed.splitlines() if line.startswith("step")] == [
        f"step {i} of 8" for i in range(1, 9)]
    assert "swarm-lease-" not in followed, "the launcher's lines are the site's, not the buyer's"
    assert any(0 < count < 8 for count in running), f"reports while it ran: {running}"
    assert [r["metrics"]["step"] for r in handed] == list(range(1, 9)), "each report handed on once"
    done = matcher.status(job_id)
    assert done["state"] == "failed" and done["fault"] == "buyer"
    assert done["reported"] == 8 and done["reports"][-1]["metrics"] == {"step": 8, "loss": 0.125}
    assert "Traceback (most recent call last)" in done["log_tail"]
    assert done["log_tail"].rstrip().endswith("KeyError: \"['x4'] not in index\"")
    assert len(done["log_tail"].splitlines()) <= 30
    assert buyer.log_since(job_id, 10**9)["text"] == "", "past the end: nothing, not an error"
    with pytest.raises(Refused, match="neither the matcher nor the buyer") as refused:
        _client(site, STRANGER).log_since(job_id, 0)
    assert refused.value.status == 403


def test_a_site_signs_nothing_for_a_lease_the_chain_moved_under_its_price(site) -> None:
    """The matcher moved the job away and back at half the price the lease was started at: the
    site will not vouch for the work at that price, and the lease fails as no fault of the
    provider's (the market fails the job without a slash)."""
    swarm = site["swarm"]
    other = swarm.sender(OTHER_PROVIDER.key)
    stake.register(swarm, other, b"\x22" * 32, 1)
    stake.stake(swarm, other, 1_000 * ONE)
    job_id, body = _assigned(site, _program(site, WRITE_OUTPUT), price=4 * PRICE)
    matcher = _client(site)
    matcher.start_lease(job_id, body)
    market = swarm.sender(MATCHER.key)
    jobs.reassign_job(swarm, market, job_id, OTHER_PROVIDER.address, 4 * PRICE, "provider-lost")
    jobs.reassign_job(swarm, market, job_id, PROVIDER.address, 2 * PRICE, "provider-lost")

    done = _finished(matcher, job_id)
    assert (done["state"], done["fault"], done["signature"]) == ("failed", "market", None), done
    assert done["error"] == (
        f"Job {job_id} is assigned at {2 * PRICE} wei per unit on chain, under the {4 * PRICE} wei the site "
        "agreed to run it for, so the site signs nothing for it."
    )


def test_the_site_serves_only_what_the_chain_authorizes(site) -> None:
    job_id, body = _assigned(site, _program(site, WRITE_OUTPUT))
    leases = site["home"] / "site" / "leases"
    for who, message in ((STRANGER, "not the market's matcher"), (BUYER, "not the market's matcher")):
        with pytest.raises(Refused, match=message) as refused:
            _client(site, who).start_lease(job_id, body)
        assert refused.value.status == 403
    with pytest.raises(Refused, match="does not hash to the one job") as refused:
        _client(site).start_lease(job_id, body.replace(b"main.py", b"evil.py"))
    assert refused.value.status == 403
    assert not (leases / str(job_id)).exists(), "nothing ran"

    request = urllib.request.Request(f"{site['url']}/v1/leases/{job_id}", method="POST",
                                     data=json.dumps({"spec": body.decode()}).encode())
    from wire.tls import pinned_context

    with pytest.raises(urllib.error.HTTPError) as unsigned:
        urllib.request.urlopen(request, context=pinned_context())
    assert unsigned.value.code == 401

    with pytest.raises(WrongCertificate, match="not the one registered on chain"):
        _client(site, fingerprint="00" * 32).info()


ATTACKS = {
    "read the provider's keystore": ("print(open({home!r} + '/keys/provider.json').read())", None),
    "read the cluster token": ("print(open({home!r} + '/ray/auth_token').read())", None),
    "read another lease's files": (("import glob; print([open(p).read() for p in glob.glob({leases!r} + "
                                   "'/*/work/outputs/*')] or 1 / 0)"), None),
    "exhaust memory": ("blob = b'x' * (3 * 1024 ** 3); print('allocated', len(blob))", "memory"),
    "fork without bound": (("import os, time\nfor _ in range(4096):\n    if os.fork() == 0:\n"
                           "        time.sleep(5); os._exit(0)\nprint('forked')"), "processes"),
}


def test_attacks_fail_and_the_site_keeps_serving(site) -> None:
    matcher = _client(site)
    home, leases = str(site["home"]), str(site["home"] / "site" / "leases")
    started = {}
    for name, (template, _) in ATTACKS.items():
        job_id, body = _assigned(site, _program(site, template.format(home=home, leases=leases)))
        matcher.start_lease(job_id, body)
        started[name] = job_id
    for name, (_, limit) in ATTACKS.items():
        done = _finished(matcher, started[name])
        assert done["state"] == "failed", (name, done)
        logs = matcher.logs(started[name])
        for secret in ("the provider key", "allocated", "forked"):
            assert secret not in logs, (name, logs[-2000:])
        if limit is not None:
            assert done["broke"] == limit, (name, done)
        else:
            assert "No such file or directory" in logs or "ZeroDivisionError" in logs, (name, logs[-2000:])
    token = (site["home"] / "ray" / "auth_token").read_text()
    for name, job_id in started.items():
        assert token not in matcher.logs(job_id), name

    job_id, body = _assigned(site, _program(site, WRITE_OUTPUT))
    matcher.start_lease(job_id, body)
    assert _finished(matcher, job_id)["state"] == "succeeded"


LEAVE_BEHIND = {
    # A link where the site once wrote its manifest, aimed at the provider's keystore: the site
    # writes its manifest at the buyer's output instead, and the job stands.
    "a link for the manifest": (
        ("import os, pathlib\n"
         "pathlib.Path(os.environ['SWARM_OUTPUT_DIR'], 'a.txt').write_text('1')\n"
         "os.symlink({home!r} + '/keys/provider.json', 'manifest.json')\n"),
        "succeeded",
    ),
    # A FIFO among the outputs: the site refuses it without opening it, as the buyer's fault.
    "a FIFO among the outputs": ("import os\nos.mkfifo(os.path.join(os.environ['SWARM_OUTPUT_DIR'], 'x'))\n",
                                 "failed"),
    # A lease that would run on past the units it may use.
    "a lease past its units": ("import time\ntime.sleep(600)\n", "failed"),
}


def test_what_a_lease_leaves_or_holds_cannot_make_the_site_write_hang_or_serve_it_for_free(site) -> None:
    matcher = _client(site)
    keystore = site["home"] / "keys" / "provider.json"
    before = keystore.read_text()
    started = {}
    for name, (template, _) in LEAVE_BEHIND.items():
        spec = _program(site, template.format(home=str(site["home"])))
        if name == "a lease past its units":
            spec["max_units"] = 3
        job_id, body = _assigned(site, spec)
        matcher.start_lease(job_id, body)
        started[name] = job_id
    for name, (_, state) in LEAVE_BEHIND.items():
        done = _finished(matcher, started[name])
        assert done["state"] == state, (name, done)
        if state == "failed":
            assert done["fault"] == "buyer" and done["units"] >= 1 and done["signature"], (name, done)
    assert keystore.read_text() == before, "the provider's keystore is untouched"
    capped = _finished(matcher, started["a lease past its units"])
    assert capped["broke"] == "units" and capped["units"] == 3
    ours = {str(job_id) for job_id in started.values()}
    leases = site["home"] / "site" / "leases"
    left = [p for p in leases.glob("*/work") if p.parent.name.split("-")[0] in ours]
    assert left == [], "every lease's directory is given back"


def test_the_oracle_committee_probes_every_node_and_challenges_the_site(site) -> None:
    from eth_account import Account

    from compute.challenge import Challenge
    from compute.nvml import gpu_snapshot
    from compute.proof import check, opening_from_json, root_from_hex, sample
    from ledger.deploy import devnet_committee_keys

    swarm = site["swarm"]
    member = Account.from_key(devnet_committee_keys()[0])
    client = SiteClient(SiteAddress(PROVIDER.address, site["url"], site["fingerprint"]),
                        lambda message: bytes(member.sign_typed_data(full_message=message).signature),
                        swarm.chain.chain_id, swarm.market.address)
    answer = client.probe(timeout_s=20)
    (node,) = answer["nodes"]  # the site started one node, offering no GPU (`serve` without --num-gpus)
    assert node["alive"] and node["cpus"] == 1.0 and node["gpus_declared"] == 0
    host_gpus = gpu_snapshot().gpus  # the node runs on this host, where NVML sees them whatever Ray was told
    assert node["gpu"]["gpus"] == host_gpus and len(node["gpu"]["devices"]) == host_gpus

    # The challenge: a worker readied on the node, the seed sent and timed, rows opened and checked.
    challenge = Challenge(seed=7, size=64, rounds=4)
    worker = client.challenge_ready(challenge.params(), timeout_s=60)
    # On the node's CPU, since the node offers no GPU, even on a host that has some (and says so).
    assert (worker["node_id"], worker["device"], worker["gpus"]) == (node["node_id"], "cpu", host_gpus)
    answer, seconds = client.challenge_commit(worker["ticket"], challenge.seed, timeout_s=60)
    assert 0 < seconds < 60
    cells = sample(challenge)
    opened = client.challenge_open(worker["ticket"], cells, timeout_s=60)
    check(challenge, root_from_hex(answer["root"]), cells, [opening_from_json(o) for o in opened["openings"]])
    with pytest.raises(Refused, match="holds no challenge") as gone:  # opened once, then ended
        client.challenge_open(worker["ticket"], cells, timeout_s=60)
    assert gone.value.status == 404
    # A worker the oracle will send no seed (its account contradicts the spec) is let go at once:
    # opened for no cells, it ends, and the node's CPU is free for the next readying.
    left = client.challenge_ready(challenge.params(), timeout_s=60)
    assert client.challenge_open(left["ticket"], [], timeout_s=60) == {"openings": []}
    with pytest.raises(Refused, match="holds no challenge"):
        client.challenge_commit(left["ticket"], challenge.seed, timeout_s=60)
    again = client.challenge_ready(challenge.params(), timeout_s=5)
    assert again["node_id"] == node["node_id"]
    client.challenge_open(again["ticket"], [], timeout_s=60)
    with pytest.raises(Refused, match="cannot be readied: challenge size must be in") as bad:
        client.challenge_ready({"size": 0, "rounds": 1, "stride": 1, "precision": "fp32"}, timeout_s=60)
    assert bad.value.status == 400

    for who in (MATCHER, BUYER, STRANGER):
        with pytest.raises(Refused, match="not on the oracle committee") as refused:
            _client(site, who).probe()
        assert refused.value.status == 403
        with pytest.raises(Refused, match="not on the oracle committee"):
            _client(site, who).challenge_ready(challenge.params(), timeout_s=60)


def test_the_sites_ray_workers_run_ahead_of_background_work(site) -> None:
    """The workers the probes and challenges above ran on, and those Ray keeps idle for the next, at
    the site's WORKER_NICENESS, not Ray's 15; a job's driver Ray runs at 0, the agents as started."""
    import psutil

    from compute import cluster
    from compute.node import WORKER_NICENESS, RayHome

    state = cluster.running(RayHome.of(site["home"]))
    assert state is not None
    raylets = [p for p in psutil.process_iter(["cmdline"])
               if p.info["cmdline"] and p.info["cmdline"][0].endswith("/raylet")
               and f"--gcs-address={state.address}" in p.info["cmdline"]]
    assert len(raylets) == 2  # the head and the provider's node
    others = ("ray::DashboardAgent", "ray::RuntimeEnvAgent", "ray::JobSupervisor")  # not workers Ray niced
    workers = [c for r in raylets for c in r.children()
               if c.name().startswith("ray::") and not c.name().startswith(others)]
    assert workers and {w.nice() for w in workers} == {WORKER_NICENESS}  # vs the light lane: test_placement


def test_a_challenge_the_oracle_readies_and_leaves_keeps_no_lease_from_the_node(site) -> None:
    """A committee member readies a challenge on the site's one node and never commits it: its
    worker holds the node's CPU only until the site ends it, and the lease assigned meanwhile
    runs rather than wait until the market gives it up as the provider's fault."""
    from eth_account import Account

    from compute.challenge import Challenge
    from ledger.deploy import devnet_committee_keys
    from provider.agent import CHALLENGE_IDLE_S

    member = Account.from_key(devnet_committee_keys()[1])
    oracle = SiteClient(SiteAddress(PROVIDER.address, site["url"], site["fingerprint"]),
                        lambda message: bytes(member.sign_typed_data(full_message=message).signature),
                        site["swarm"].chain.chain_id, site["swarm"].market.address)
    challenge = Challenge(seed=11, size=64, rounds=4)
    left = oracle.challenge_ready(challenge.params(), timeout_s=60)
    readied = time.monotonic()
    matcher = _client(site)
    job_id, body = _assigned(site, _program(site, WRITE_OUTPUT))
    assert matcher.start_lease(job_id, body)["state"] == "pending"  # the node's CPU is the challenge's
    done = _finished(matcher, job_id, timeout=CHALLENGE_IDLE_S + LEASE_TIMEOUT_S)
    assert done["state"] == "succeeded", done
    assert time.monotonic() - readied >= CHALLENGE_IDLE_S  # it ran once the challenge was ended
    with pytest.raises(Refused, match="holds no challenge") as gone:
        oracle.challenge_commit(left["ticket"], challenge.seed, timeout_s=60)
    assert gone.value.status == 404


def _completed(site: dict, spec: dict, buyer=BUYER) -> tuple[int, bytes, dict]:
    """A job run on the site and completed on chain with the provider's signed result."""
    swarm, matcher = site["swarm"], _client(site)
    job_id, body = _assigned(site, spec, buyer)
    matcher.start_lease(job_id, body)
    done = _finished(matcher, job_id)
    assert done["state"] == "succeeded", done
    jobs.complete_job(
        swarm,
        swarm.sender(MATCHER.key),
        job_id,
        bytes.fromhex(done["result_hash"][2:]),
        done["units"],
        bytes.fromhex(done["signature"][2:]),
    )
    return job_id, body, done


def _finetune_of(site: dict, prior: int, **over) -> dict:
    return {"kind": "finetune", "model": f"job:{prior}", "dataset": "synthetic-classification",
            "resources": {"workers": 1, "memory_gb": 0.5}, "max_price_per_unit": "0.001", "max_units": 100,
            "deadline": "1h", "output": str(site["store"] / "results")} | over


def test_the_site_checks_a_result_a_job_builds_on_against_the_chain_whatever_the_market_says(site) -> None:
    """`model: job:<id>`: the site itself checks that the result is on chain, that the spec the
    market sent for it is the one the chain pins, that the buyer may use it, and that the files
    in that job's output are the ones the chain's resultHash names."""
    matcher = _client(site)
    private, private_spec, _ = _completed(site, _program(site, WRITE_OUTPUT), buyer=STRANGER)
    job_id, body = _assigned(site, _finetune_of(site, private))
    with pytest.raises(
        Refused, match=f"model job:{private} is another buyer's result, which that buyer did not publish"
    ) as refused:
        matcher.start_lease(job_id, body, private_spec)
    assert refused.value.status == 400
    published = canonical(json.loads(private_spec) | {"publish": True})  # the market lies about it
    for forged in (published, None):
        with pytest.raises(
            Refused, match=f"the spec of job {private} that came with the lease is not the one the chain pins"
        ):
            matcher.start_lease(job_id, body, forged)
    unfinished, unfinished_spec = _assigned(site, _program(site, WRITE_OUTPUT))
    job_id, body = _assigned(site, _finetune_of(site, unfinished))
    with pytest.raises(Refused, match=f"model job:{unfinished} has no result on chain \\(it is assigned\\)"):
        matcher.start_lease(job_id, body, unfinished_spec)
    leases = site["home"] / "site" / "leases"
    assert not list(leases.glob(f"{job_id}-*")), "nothing ran"

    own, own_spec, done = _completed(site, _program(site, WRITE_OUTPUT))
    (Path(done["result_uri"]) / "outputs" / "answer.txt").write_text("changed after the job completed")
    job_id, body = _assigned(site, _finetune_of(site, own))
    matcher.start_lease(job_id, body, own_spec)
    failed = _finished(matcher, job_id)
    assert failed["state"] == "failed" and failed["fault"] == "buyer", failed
    assert (
        f"the result of job:{own} in {done['result_uri']} is not the one the chain holds (its files do not "
        "hash "
        f"to the resultHash {done['result_hash']})"
    ) in failed["error"], failed


def test_a_built_in_jobs_output_in_the_providers_home_is_refused(site) -> None:
    matcher = _client(site)
    spec = _finetune_of(site, 1) | {"kind": "train", "model": "mlp", "output": str(site["home"] / "stolen")}
    job_id, body = _assigned(site, spec)
    matcher.start_lease(job_id, body)
    failed = _finished(matcher, job_id)
    assert failed["state"] == "failed" and failed["fault"] == "buyer", failed
    assert "lies in (or holds) what the site keeps from its leases" in failed["error"], failed
    assert not (site["home"] / "stolen").exists()


WHERE_AM_I = """
import os, pathlib
out = pathlib.Path(os.environ["SWARM_OUTPUT_DIR"])
(out / "answer.txt").write_text(str(sum(range(1000))))
print("ran in", out)
try:
    print("token", pathlib.Path({token!r}).read_text())
except OSError as exc:
    print("token hidden:", type(exc).__name__)
"""


def test_a_lease_runs_on_a_machine_that_joined_the_site_with_nothing_of_the_heads(
    site, tmp_path_factory
) -> None:
    """Another machine of the provider — here a SWARM_HOME of its own, with only the token and
    the deployment — joins the site's cluster with the only node big enough for the lease:
    the lease runs there, from its plan in the Ray job, in that machine's own lease directory,
    and the site reads its log and verdict back through Ray."""
    machine = tmp_path_factory.mktemp("joined-machine")
    (machine / "ray").mkdir()
    token = machine / "ray" / "auth_token"
    shutil.copyfile(site["home"] / "ray" / "auth_token", token)
    token.chmod(0o600)
    shutil.copytree(site["home"] / "deployments", machine / "deployments")
    head = json.loads((site["home"] / "ray" / "cluster.json").read_text())["address"]
    env = os.environ | {"SWARM_HOME": str(machine), "SWARM_RPC_URL": site["rpc_url"]}
    env = {k: v for k, v in env.items() if not k.startswith("RAY_")}

    def swarm_cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "scripts.cli", "provider", *args, "--account", "1"],
                              env=env, capture_output=True, text=True, timeout=180, check=False)

    joined = swarm_cli("join", "--ray-address", head, "--num-cpus", "2")
    assert joined.returncode == 0, joined.stderr
    try:
        matcher, buyer = _client(site), _client(site, BUYER)
        job_id, body = _assigned(site, _program(site, WHERE_AM_I.format(token=str(token)), cpus=2))
        matcher.start_lease(job_id, body)
        done = _finished(matcher, job_id)
        assert done["state"] == "succeeded", (done, buyer.logs(job_id)[-2000:])
        (ran,) = (machine / "site" / "leases").glob(f"{job_id}-*")
        assert (ran / "outcome.json").is_file(), "it ran there"
        assert not (ran / "work").exists(), "and gave back its disk"
        assert (Path(done["result_uri"]) / "outputs" / "answer.txt").read_text() == str(sum(range(1000)))
        head_lease = next((site["home"] / "site" / "leases").glob(f"{job_id}-*"))
        assert (head_lease / "lease.json").is_file() and not (head_lease / "work").exists()
        logs = buyer.logs(job_id)
        assert f"ran in {ran / 'work' / 'outputs'}" in logs, logs[-2000:]
        assert "token hidden" in logs and token.read_text() not in logs, logs[-2000:]
    finally:
        left = swarm_cli("leave")
        assert left.returncode == 0, left.stderr


def test_a_site_started_before_its_chain_answers_waits_for_it_then_serves(tmp_path: Path) -> None:
    """A site under a supervisor can start before its chain node does: it says on stderr that it
    waits, and serves once the node answers — here a devnet stopped after its deploy, then
    started again from its state."""
    from anvil import AnvilConfig
    from ledger.chain import connect
    from ledger.deploy import deploy, error_decoder
    from ledger.tx import Sender

    home = tmp_path / "home"
    node = AnvilNode(AnvilConfig(home=home, port=free_port()))
    node.start()
    chain = connect(node.config.url)
    deploy(chain, Sender(chain, dev_account(0).key, error_decoder()), home)
    node.stop()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "SWARM_"))}
    env |= {"SWARM_HOME": str(home), "SWARM_RPC_URL": node.config.url}
    command = ["provider", "serve", "--port", "0", "--json", "--account", "1"]  # a free port it picks
    serve = subprocess.Popen([sys.executable, "-m", "scripts.cli", *command], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, start_new_session=True)
    assert serve.stdout is not None and serve.stderr is not None
    try:
        waiting, _, _ = select.select([serve.stderr], [], [], 60)
        assert waiting, "no word from the site while its chain is away"
        assert "waiting for the chain" in serve.stderr.readline().decode()
        assert serve.poll() is None, "it waits rather than exits"
        node.start()
        ready, _, _ = select.select([serve.stdout], [], [], 180)
        assert ready, "the site did not serve once its chain answered"
        served = json.loads(serve.stdout.readline())
        assert served["provider"] == dev_account(1).address and served["url"].startswith("https://127.0.0.1:")
        assert int(served["url"].rsplit(":", 1)[1]) > 0, "the port the system picked, not 0"
        address = SiteAddress(served["provider"], served["url"], served["fingerprint"])
        site = SiteClient(address, lambda _: b"", chain.chain_id, "0x" + "00" * 20)
        assert site.info()["provider"] == dev_account(1).address
    finally:
        os.killpg(serve.pid, signal.SIGTERM)
        serve.wait(120)
        node.stop()
