"""`swarm cluster up|down|status`, `swarm provider nodes` and `swarm provider join|leave` end
to end: provider sites the CLI starts itself, each with its own Ray cluster and token (apart
from the session's), on the session anvil."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from anvil import AnvilNode, dev_account
from anvil.node import free_port
from compute.cluster import SITE_DASHBOARD_MODULES
from ledger import stake
from ledger.client import Swarm
from ledger.deploy import DeployResult
from ledger.units import ONE
from tests.conftest import grant_role, one_line_error

SIMULATED = dev_account(1).address
JOINER = 4  # the dev account that joins with its own node
JOINER_ADDRESS = dev_account(JOINER).address


@dataclass(frozen=True)
class LocalCluster:
    home: Path  # the site's own SWARM_HOME
    address: str  # its Ray head's GCS
    up: dict  # the site's Ray cluster state
    output: str  # everything `up` wrote, to check that no secret leaked
    network_home: Path  # where `swarm cluster up` ran

    @property
    def env(self) -> dict[str, str]:
        return {"SWARM_HOME": str(self.home)}

    @property
    def token(self) -> str:
        return (self.home / "ray" / "auth_token").read_text()


def _swarm(anvil: AnvilNode, home: Path, *args: str) -> subprocess.CompletedProcess:
    """The real CLI, as the `cli` fixture runs it, for fixtures wider than one test."""
    env = os.environ | {"SWARM_HOME": str(home), "SWARM_RPC_URL": anvil.config.url,
                        "SWARM_ANVIL_PORT": str(anvil.config.port), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "scripts.cli", *args],
                          check=False, capture_output=True, text=True, env=env, timeout=300)


def _stop_leftovers(home: Path) -> None:
    """Last resort if `down` failed: end the supervisor's session (only ever this home's)."""
    state = home / "ray" / "cluster.json"
    if state.exists():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(json.loads(state.read_text())["pid"], 9)


@pytest.fixture
def cli(cli_process):
    """`swarm cluster` and `swarm provider join` start and watch Ray processes: each command
    runs in its own process, as a user runs it."""
    return cli_process


@pytest.fixture(scope="module")
def local_cluster(tmp_path_factory: pytest.TempPathFactory, swarm_home: Path, anvil_node: AnvilNode,
                  deployed: DeployResult) -> Iterator[LocalCluster]:
    """`swarm cluster up --providers 1` in its own SWARM_HOME (with the session's deployment): one site."""
    home = tmp_path_factory.mktemp("cluster-home")
    shutil.copytree(swarm_home / "deployments", home / "deployments")
    try:
        up = _swarm(anvil_node, home, "cluster", "up", "--providers", "1", "--json")
        assert up.returncode == 0, up.stderr
        (site,) = json.loads(up.stdout)["sites"]
        site_home = Path(site["home"])
        state = json.loads((site_home / "ray" / "cluster.json").read_text())
        serve_log = (site_home / "serve.log").read_text()
        yield LocalCluster(site_home, state["address"], state, up.stdout + up.stderr + serve_log, home)
    finally:
        down = _swarm(anvil_node, home, "cluster", "down")
        _stop_leftovers(home)
        assert down.returncode == 0, down.stderr


def _status(cli, cluster: LocalCluster) -> dict:
    done = cli("provider", "nodes", "--json", env=cluster.env)
    assert done.code == 0, done.stderr
    assert cluster.token not in done.stdout + done.stderr
    return json.loads(done.stdout)


def _token_env(cluster: LocalCluster) -> dict[str, str]:
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(cluster.home / "ray" / "auth_token")}


def _ray_client(address: str, env: dict[str, str], code: str, timeout: float = 120
                ) -> subprocess.CompletedProcess:
    """A fresh Python process that connects to `address` with ray.init and runs `code`."""
    script = f"import ray\nray.init(address={address!r}, log_to_driver=False)\n{code}"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    return subprocess.run(
        [sys.executable, "-c", script],
        check=False,
        capture_output=True,
        text=True,
        env=clean | env,
        timeout=timeout,
    )


# ── up / status ──────────────────────────────────────────────────────────────

def test_status_lists_the_head_and_a_labelled_node_per_provider(cli, local_cluster: LocalCluster) -> None:
    status = _status(cli, local_cluster)
    assert status["running"] and status["address"] == local_cluster.address
    head = [n for n in status["nodes"] if n["head"]]
    providers = [n for n in status["nodes"] if n["kind"] == "simulated"]
    assert len(head) == 1 and head[0]["cpus"] == 0 and head[0]["state"] == "alive"
    assert [(n["provider"], n["state"], n["cpus"]) for n in providers] == [(SIMULATED, "alive", 1.0)]
    assert providers[0]["node_id"] == local_cluster.up["nodes"][0]["node_id"]
    # the site's Ray runs its daemons but neither monitor (compute.cluster.HEAD_WITHOUT)
    commands = []
    for process in psutil.Process(local_cluster.up["pid"]).children(recursive=True):
        with contextlib.suppress(psutil.NoSuchProcess):  # a worker ending as it is read
            commands.append(" ".join(process.cmdline()))
    assert sum("gcs_server" in c for c in commands) == 1 and sum("/raylet " in c for c in commands) == 2
    assert not [c for c in commands if "autoscaler/_private/monitor.py" in c or "log_monitor.py" in c]
    # and of its dashboard's modules, each a process, those the site uses (SITE_DASHBOARD_MODULES)
    modules = {m[1] for c in commands if (m := re.match(r"ray-dashboard-(\w+)-\d+", c))}
    assert modules == set(SITE_DASHBOARD_MODULES), commands

    human = cli("provider", "nodes", env=local_cluster.env)
    assert human.code == 0, human.stderr
    assert local_cluster.address in human.stdout and SIMULATED in human.stdout and "alive" in human.stdout
    sites = json.loads(
        cli("cluster", "status", "--json", env={"SWARM_HOME": str(local_cluster.network_home)}).stdout
    )
    assert [(x["provider"], x["answers"], x["capacity"]["nodes"]) for x in sites["sites"]] == [
        (SIMULATED, True, 1)
    ]


def test_token_file_is_private_and_never_printed(cli, local_cluster: LocalCluster) -> None:
    token_file = local_cluster.home / "ray" / "auth_token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    token = local_cluster.token
    assert len(token) >= 32
    human = cli("provider", "nodes", env=local_cluster.env)
    for output in (local_cluster.output, human.stdout + human.stderr):
        assert token not in output


def test_a_client_with_a_wrong_token_is_refused(local_cluster: LocalCluster) -> None:
    count = "print('nodes', len([n for n in ray.nodes() if n['Alive']]))"
    # A refused client asks again each second, twenty times by default: twice is enough to see it refused.
    wrong = _ray_client(local_cluster.address, {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "0" * 64,
                                                "RAY_NUM_REDIS_GET_RETRIES": "2"}, count)
    assert wrong.returncode != 0 and "nodes" not in wrong.stdout
    assert "InvalidAuthToken" in wrong.stderr or "Authentication" in wrong.stderr, wrong.stderr[-2000:]

    right = _ray_client(local_cluster.address, _token_env(local_cluster), count)
    assert right.returncode == 0, right.stderr[-2000:]
    assert "nodes 2" in right.stdout  # the same client, with the cluster's token, gets in


def test_dashboard_listens_on_localhost_only_and_wants_the_token(local_cluster: LocalCluster) -> None:
    url = local_cluster.up["dashboard"]
    assert url.startswith("http://127.0.0.1:")
    port = int(url.rsplit(":", 1)[1])
    listeners = [c for c in psutil.net_connections("tcp")
                 if c.status == psutil.CONN_LISTEN and c.laddr.port == port]
    assert listeners and {c.laddr.ip for c in listeners} == {"127.0.0.1"}
    with pytest.raises(urllib.error.HTTPError) as refused:  # the dashboard wants the token too
        urllib.request.urlopen(f"{url}/api/version", timeout=30)
    assert refused.value.code == 401
    bearer = {"Authorization": f"Bearer {local_cluster.token}"}
    signed = urllib.request.Request(f"{url}/api/version", headers=bearer)
    with urllib.request.urlopen(signed, timeout=30) as answer:
        assert answer.status == 200 and "ray_version" in json.loads(answer.read())
    public_ip = local_cluster.address.rsplit(":", 1)[0]
    if public_ip not in ("127.0.0.1", "localhost"):
        with pytest.raises(OSError):
            socket.create_connection((public_ip, port), timeout=5).close()


def test_up_is_refused_while_a_cluster_runs(cli, local_cluster: LocalCluster) -> None:
    text = one_line_error(cli("cluster", "up", "--providers", "1",
                              env={"SWARM_HOME": str(local_cluster.network_home)}))
    assert "already up" in text and "swarm cluster down" in text
    assert _status(cli, local_cluster)["address"] == local_cluster.address


# ── join / leave ─────────────────────────────────────────────────────────────

def _ray_start_processes(provider: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if "start" in cmdline and f"provider={provider}" in cmdline:
            found.append(proc)
    return found


def _session(pid: int) -> list[psutil.Process]:
    """Processes still in the session `pid` led (the supervisor's: head, raylets, workers)."""
    alive = []
    for proc in psutil.process_iter():
        try:
            if os.getsid(proc.pid) == pid and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except (ProcessLookupError, PermissionError, psutil.NoSuchProcess):
            pass
    return alive


def _gone(pid: int) -> bool:
    """No such process, or only its exit status is left (the CLI that started it has exited)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _register_and_stake(swarm: Swarm, account: int, amount: int) -> None:
    sender = swarm.sender(dev_account(account).key)
    stake.register(swarm, sender, b"\x01" * 32, 1)  # one GPU: a minimum of 1,000 SWARM
    if amount:
        stake.stake(swarm, sender, amount)


def test_join_starts_a_labelled_node_that_runs_pinned_work_and_leave_stops_it(
    cli, swarm: Swarm, local_cluster: LocalCluster
) -> None:
    _register_and_stake(swarm, JOINER, 1_000 * ONE)
    joined = cli("provider", "join", "--ray-address", local_cluster.address, "--account", str(JOINER),
                 "--json", env=local_cluster.env)
    assert joined.code == 0, joined.stderr
    record = json.loads(joined.stdout)
    try:
        assert record["provider"] == JOINER_ADDRESS
        nodes = {n["node_id"]: n for n in _status(cli, local_cluster)["nodes"]}
        node = nodes[record["node_id"]]
        assert node["provider"] == JOINER_ADDRESS
        assert (node["state"], node["kind"], node["cpus"]) == ("alive", "joined", 1.0)

        # Work pinned to the provider lands on the node that joined (label and resource both).
        from compute.placement import task_options

        options = task_options(JOINER_ADDRESS, num_cpus=1)
        where = _ray_client(
            local_cluster.address, _token_env(local_cluster),
            "f = ray.remote(lambda: ray.get_runtime_context().get_node_id())\n"
            f"print('ran on', ray.get(f.options(**{options!r}).remote(), timeout=90))")
        assert where.returncode == 0, where.stderr[-2000:]
        assert f"ran on {record['node_id']}" in where.stdout

        again = one_line_error(cli("provider", "join", "--ray-address", local_cluster.address,
                                   "--account", str(JOINER), env=local_cluster.env))
        assert "already runs a node here" in again and "swarm provider leave" in again
    finally:
        left = cli("provider", "leave", "--account", str(JOINER), "--json", env=local_cluster.env)
    assert left.code == 0, left.stderr
    assert json.loads(left.stdout) == {"provider": JOINER_ADDRESS, "stopped": True,
                                       "node_id": record["node_id"], "mesh_down": None}
    assert _gone(record["pid"]) and _session(record["pid"]) == []
    assert _ray_start_processes(JOINER_ADDRESS) == []
    after = {n["node_id"]: n for n in _status(cli, local_cluster)["nodes"]}
    assert after.get(record["node_id"], {"state": "dead"})["state"] == "dead"
    assert not any(n["provider"] == JOINER_ADDRESS and n["state"] == "alive" for n in after.values())

    nothing = cli("provider", "leave", "--account", str(JOINER), env=local_cluster.env)
    assert nothing.code == 0 and "No Ray node runs here" in nothing.stdout


def _jail(swarm: Swarm, address: str, until: int) -> None:
    admin = swarm.sender(dev_account(0).key)
    vault = swarm.vault.functions
    grant_role(swarm, "StakingVault", "SLASHER_ROLE", admin.address)
    admin.send(vault.jail(address, until))


def _unregistered(swarm: Swarm) -> str:
    return f"{JOINER_ADDRESS} is not registered; run `swarm provider register` first."


def _understaked(swarm: Swarm) -> str:
    _register_and_stake(swarm, JOINER, 400 * ONE)
    return f"{JOINER_ADDRESS} has 400 SWARM staked, below its minimum of 1,000 SWARM; stake 600 SWARM more"


def _jailed(swarm: Swarm) -> str:
    _register_and_stake(swarm, JOINER, 1_000 * ONE)
    until = swarm.chain.timestamp() + 3_600
    _jail(swarm, JOINER_ADDRESS, until)
    return f"{JOINER_ADDRESS} is jailed until {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(until))}"


@pytest.mark.parametrize("setup", [_unregistered, _understaked, _jailed],
                         ids=["unregistered", "understaked", "jailed"])
def test_join_is_refused_when_the_chain_says_no_and_no_node_starts(
    cli, swarm: Swarm, local_cluster: LocalCluster, setup
) -> None:
    message = setup(swarm)
    before = {n["node_id"] for n in _status(cli, local_cluster)["nodes"]}
    text = one_line_error(cli("provider", "join", "--ray-address", local_cluster.address,
                              "--account", str(JOINER), env=local_cluster.env))
    assert message in text
    assert {n["node_id"] for n in _status(cli, local_cluster)["nodes"]} == before
    assert _ray_start_processes(JOINER_ADDRESS) == []
    assert not (local_cluster.home / "ray" / "nodes" / f"{JOINER_ADDRESS}.json").exists()


def test_join_refuses_an_address_where_no_cluster_answers(
    cli, swarm: Swarm, local_cluster: LocalCluster
) -> None:
    _register_and_stake(swarm, JOINER, 1_000 * ONE)
    dead = f"127.0.0.1:{free_port()}"
    text = one_line_error(cli("provider", "join", "--ray-address", dead, "--account", str(JOINER),
                              env=local_cluster.env))
    assert f"No Ray cluster answers at {dead}" in text
    assert _ray_start_processes(JOINER_ADDRESS) == []


# ── down ─────────────────────────────────────────────────────────────────────

def test_up_registers_each_site_and_down_stops_every_site_and_its_cluster(
    cli, swarm: Swarm, tmp_path: Path, swarm_home: Path
) -> None:
    from ledger.specs import load_spec

    env = {"SWARM_HOME": str(tmp_path)}
    shutil.copytree(swarm_home / "deployments", tmp_path / "deployments")
    assert "No local provider sites are running" in cli("cluster", "status", env=env).stdout
    up = cli("cluster", "up", "--providers", "2", "--register", "--json", env=env)
    try:
        assert up.code == 0, up.stderr
        sites = json.loads(up.stdout)["sites"]
        assert [x["provider"] for x in sites] == [dev_account(1).address, dev_account(2).address]
        for site in sites:  # registered with its site, a CPU spec, and staked to its minimum
            info = stake.provider_info(swarm, site["provider"])
            assert info.registered and info.stake == info.min_stake == 1_000 * ONE
            assert load_spec(tmp_path, info.spec_hash) == {"gpu_model": "cpu", "gpus": 1, "vram_gb": 1,
                                                           "site_url": site["url"],
                                                           "site_fingerprint": site["fingerprint"]}
        states = [json.loads((Path(x["home"]) / "ray" / "cluster.json").read_text()) for x in sites]
        assert len({x["url"] for x in sites}) == 2 and len({x["fingerprint"] for x in sites}) == 2
        tokens = {(Path(x["home"]) / "ray" / "auth_token").read_text() for x in sites}
        assert len(tokens) == 2, "no token is shared between sites"
        for state in states:
            assert len(_session(state["pid"])) > 3  # supervisor, GCS, raylets, …
    finally:
        down = cli("cluster", "down", "--json", env=env)
    assert down.code == 0, down.stderr
    assert json.loads(down.stdout) == {"stopped": [x["provider"] for x in sites]}
    for site, state in zip(sites, states, strict=True):
        assert _gone(site["pid"]) and _session(state["pid"]) == []
        assert not (Path(site["home"]) / "ray" / "cluster.json").exists()
        host, port = site["url"].removeprefix("https://").rsplit(":", 1)
        with pytest.raises(OSError):
            socket.create_connection((host, int(port)), timeout=5).close()
    assert json.loads(cli("cluster", "status", "--json", env=env).stdout) == {"running": False, "sites": []}
    again = cli("cluster", "down", env=env)
    assert again.code == 0 and "No local provider sites are running" in again.stdout


BAD_SITE = """
import http.server, ssl, sys
certificate, key, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"<html>a web page, not the site's API</html>"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", port), Handler)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(certificate, key)
server.socket = context.wrap_socket(server.socket, server_side=True)
print("ready", flush=True)
server.serve_forever()
"""


def test_status_lists_a_site_that_answers_with_no_json_as_not_answering_with_the_reason(
    cli, tmp_path: Path
) -> None:
    from provider.identity import make_identity

    identity = make_identity(tmp_path / "site", "127.0.0.1")
    port = free_port()
    # "provider" among its arguments: the network's record takes it for a site's `swarm provider serve`.
    server = subprocess.Popen([sys.executable, "-c", BAD_SITE, str(identity.certificate), str(identity.key),
                               str(port), "provider"], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        url = f"https://127.0.0.1:{port}"
        (tmp_path / "sites.json").write_text(json.dumps([{
            "provider": SIMULATED, "account": 1, "url": url, "fingerprint": identity.fingerprint,
            "pid": server.pid, "home": str(tmp_path / "site")}]))
        env = {"SWARM_HOME": str(tmp_path)}
        done = cli("cluster", "status", "--json", env=env)
        assert done.code == 0 and "Traceback" not in done.stderr, done.stderr
        (row,) = json.loads(done.stdout)["sites"]
        assert (row["url"], row["answers"], row["capacity"]) == (url, False, None)
        assert row["problem"] == (f"The site of {SIMULATED} answered /v1/info with HTTP 200 and no JSON "
                                  f"object; check that {url} is its site.")
        human = cli("cluster", "status", env=env)
        assert human.code == 0 and "not answering" in human.stdout and "and no JSON object" in human.stdout
    finally:
        server.kill()
        server.wait()


@pytest.mark.parametrize("count", ["0", "10"])
def test_providers_out_of_range_is_a_usage_error(cli, tmp_path: Path, count: str) -> None:
    done = cli("cluster", "up", "--providers", count, env={"SWARM_HOME": str(tmp_path)})
    assert done.code == 2 and "1<=x<=9" in done.stderr
    assert not (tmp_path / "sites.json").exists()


def test_a_sites_ray_ports_are_drawn_where_no_port_0_bind_lands() -> None:
    """Three sites starting at once once lost a dashboard port to another's port-0 bind (Ray's
    processes make many), and one site took minutes to start. Ports held by such binds are never
    handed out, and every port handed out is free."""
    from compute.node import EPHEMERAL_RANGE
    from compute.node import free_port as site_port

    low, high = (int(n) for n in EPHEMERAL_RANGE.read_text().split()[:2])
    held = [socket.create_server(("127.0.0.1", 0)) for _ in range(50)]
    try:
        taken = {s.getsockname()[1] for s in held}
        assert all(low <= port <= high for port in taken)
        for _ in range(200):
            port = site_port()
            assert port not in taken and not low <= port <= high
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", port))  # free: an OSError here fails the test
    finally:
        for s in held:
            s.close()
