"""A provider's site run by an ordinary user, as docs/operations.md's systemd unit runs it:
`swarm provider serve` as the unit's `User=`, with its `Environment=` and the secrets of its
`EnvironmentFile=`, a SWARM_HOME of that user's own (0700) and a Ray cluster the user starts.
A hostile buyer's leases, started by the matcher over pinned HTTPS as on any site, must find
none of the site's secrets, run as users of their own, and leave nothing the site writes
through; the site keeps serving."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from anvil import AnvilNode, RpcClient, dev_account
from anvil.node import free_port
from ledger import jobs, stake
from ledger.chain import Chain
from ledger.client import Swarm
from ledger.deploy import DeployResult
from ledger.specs import canonical
from ledger.units import ONE
from market.spec import validate_spec
from tests.programs import program_spec
from tests.sites import served, stop_served
from wire.client import SiteAddress, SiteClient

MATCHER, PROVIDER, BUYER = (dev_account(i) for i in (0, 1, 4))
LEASE_TIMEOUT_S = 150
SECRETS = {"SWARM_KEY_PASSWORD": "the-keystore-password", "AWS_SECRET_ACCESS_KEY": "the-site-s3-secret"}


@pytest.fixture(scope="module")
def user_site(chain: Chain, deployed: DeployResult, rpc: RpcClient, anvil_node: AnvilNode, swarm_home: Path
              ) -> Iterator[dict]:
    from tests.site_user import as_user, ensure_user, python_env, site_unit

    assert os.geteuid() == 0, "this test makes the unit's user, as root"
    unit = site_unit()
    user = ensure_user(unit.user)
    # Reverted whatever happens, even a site that never starts: the provider this registers is
    # one the next modules register too.
    snapshot = rpc.snapshot()
    root = Path(tempfile.mkdtemp(prefix="swarm-user-site-", dir="/var/tmp"))
    # Ray keeps the machine's current cluster in its temporary directory, which this machine's
    # root clusters hold: the user's Ray gets one of its own, as on a machine it has to itself.
    # (short: Ray's sockets live under it, and a socket's path has at most 107 bytes)
    ray_tmp = Path(tempfile.mkdtemp(prefix="swarm-ray-", dir="/tmp"))
    process = None
    try:
        swarm = Swarm(chain, deployed.deployment)
        sender = swarm.sender(PROVIDER.key)
        stake.register(swarm, sender, b"\x12" * 32, 1)
        stake.stake(swarm, sender, 1_000 * ONE)
        root.chmod(0o755)
        home, store = root / "home", root / "store"
        shutil.copytree(swarm_home / "deployments", home / "deployments")
        (home / "keys").mkdir()
        (home / "keys" / "provider.json").write_text('{"crypto": "the provider key"}')
        secrets = home / "secrets.env"  # the unit's EnvironmentFile, as the operations guide keeps it
        secrets.write_text("".join(f"{k}={v}\n" for k, v in SECRETS.items()))
        for path in [home, *home.rglob("*")]:
            os.chown(path, user.pw_uid, user.pw_gid, follow_symlinks=False)
        home.chmod(0o700)
        secrets.chmod(0o600)
        store.mkdir(mode=0o755)
        (store / "results").mkdir()  # the buyer's output, which the site writes
        os.chown(store / "results", user.pw_uid, user.pw_gid)
        os.chown(ray_tmp, user.pw_uid, user.pw_gid)
        env = python_env(user, home, unit.environment | SECRETS | {
            "SWARM_HOME": str(home), "SWARM_RPC_URL": anvil_node.config.url, "RAY_TMPDIR": str(ray_tmp)})
        port = free_port()
        process = as_user(user, [sys.executable, "-m", "scripts.cli", "provider", "serve", "--account", "1",
                                 "--port", str(port), "--json"], env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True)
        site = served(process)
        yield {"swarm": swarm, "home": home, "store": store, "user": user, "url": site["url"],
               "fingerprint": site["fingerprint"]}
    finally:
        if process is not None and process.poll() is None:
            stop_served(process)
        rpc.revert(snapshot)
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(ray_tmp, ignore_errors=True)


def _start(site: dict, code: str, **fields) -> int:
    swarm = site["swarm"]
    spec = program_spec(site["store"], code, output=str(site["store"] / "results"), **fields)
    for path in site["store"].rglob("*"):
        if path.name != "results":
            path.chmod(0o755 if path.is_dir() else 0o644)
    body = canonical(validate_spec(spec).canonical())
    from eth_utils import keccak

    job_id, _ = jobs.post_job(swarm, swarm.sender(BUYER.key), keccak(body), 10**12, spec["max_units"],
                              swarm.chain.timestamp() + 3_600)
    jobs.assign_job(swarm, swarm.sender(MATCHER.key), job_id, PROVIDER.address, 10**12)
    _matcher(site).start_lease(job_id, body)
    return job_id


def _matcher(site: dict) -> SiteClient:
    swarm = site["swarm"]
    return SiteClient(SiteAddress(PROVIDER.address, site["url"], site["fingerprint"]),
                      swarm.sender(MATCHER.key).sign_typed_data, swarm.chain.chain_id, swarm.market.address)


def _finished(site: dict, job_id: int) -> dict:
    deadline = time.monotonic() + LEASE_TIMEOUT_S
    while time.monotonic() < deadline:
        status = _matcher(site).status(job_id)
        if status["state"] in ("succeeded", "failed", "stopped"):
            return status
        time.sleep(0.5)
    raise AssertionError(f"lease {job_id} did not finish in {LEASE_TIMEOUT_S} s")


SPY = """
import glob, os, pathlib
seen = [repr(dict(os.environ)), str(os.getuid())]
for path in glob.glob('/proc/*/environ') + {paths!r}:
    try:
        seen.append(open(path, 'rb').read().decode(errors='replace'))
    except OSError as exc:
        seen.append(f'{{path}}: {{exc.strerror}}')
pathlib.Path(os.environ['SWARM_OUTPUT_DIR'], 'seen.txt').write_text('\\n'.join(seen))
os.symlink({keystore!r}, 'manifest.json')
"""


def test_a_hostile_lease_on_an_ordinary_users_site_finds_no_secret_and_writes_nothing_of_the_sites(
        user_site: dict) -> None:
    keystore = user_site["home"] / "keys" / "provider.json"
    code = SPY.format(paths=[str(user_site["home"] / "secrets.env"), str(keystore),
                             str(user_site["home"] / "ray" / "auth_token")], keystore=str(keystore))
    job_id = _start(user_site, code)
    done = _finished(user_site, job_id)
    assert done["state"] == "succeeded", done
    seen = (Path(done["result_uri"]) / "outputs" / "seen.txt").read_text()
    assert "SWARM_OUTPUT_DIR" in seen, "the spy ran"
    for secret in (*SECRETS.values(), "the provider key"):
        assert secret not in seen
    token = (user_site["home"] / "ray" / "auth_token").read_text().strip()
    assert token not in seen, "the cluster's token"
    assert keystore.read_text() == '{"crypto": "the provider key"}'
    stored = (Path(done["result_uri"]) / "outputs").stat()
    assert stored.st_uid == user_site["user"].pw_uid, "stored by the site, as its user"


def test_on_an_ordinary_users_site_a_fifo_left_behind_or_a_lease_past_its_units_fails_as_the_buyers(
        user_site: dict) -> None:
    """What a root site's leases cannot do (tests/test_site.py), tried on the unit user's site:
    a FIFO among the outputs must not block the site, and a lease that would run on past the
    units it may use is stopped at them; both fail as the buyer's fault, charged for what they
    held, and the lease's directories are given back."""
    fifo = _start(user_site, "import os\nos.mkfifo(os.path.join(os.environ['SWARM_OUTPUT_DIR'], 'x'))\n")
    past = _start(user_site, "import time\ntime.sleep(600)\n", max_units=3)
    for job_id in (fifo, past):
        done = _finished(user_site, job_id)
        assert done["state"] == "failed" and done["fault"] == "buyer" and done["signature"], done
        assert done["units"] >= 1, done
    capped = _finished(user_site, past)
    assert capped["broke"] == "units" and capped["units"] == 3, capped
    leases = user_site["home"] / "site" / "leases"
    left = [p for p in leases.glob("*/work") if p.parent.name.split("-")[0] in {str(fifo), str(past)}]
    assert left == [], "every lease's directory is given back"
